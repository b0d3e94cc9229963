/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Twin transports: the span component's uct_tl_t, one per inner transport.
 */
#ifndef SPAN_TL_H_
#define SPAN_TL_H_

#include "ucx/span_ucx.h"

/* Adds the twin of inner_tl, a transport of inner_component, to the
 * transports of span, the span component, where it has none: UCS_OK, or
 * UCS_ERR_NO_MEMORY (logged; it may be added later), or another error
 * where it can have no twin. Callers serialize. */
ucs_status_t span_tl_add(uct_component_t *span,
                         uct_component_t *inner_component, uct_tl_t *inner_tl);

/* The component whose transport a twin of the span component wraps */
uct_component_t *span_tl_inner_component(const uct_tl_t *tl);

/* Removes and frees every twin transport */
void span_tl_remove_all(void);

#endif
