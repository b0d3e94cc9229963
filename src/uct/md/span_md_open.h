/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Opening a twin MD: the span component's md_open, with the configuration
 * of span_md_config.h.
 */
#ifndef SPAN_MD_OPEN_H_
#define SPAN_MD_OPEN_H_

#include "span_md.h"

/* Opens the twin md_name ("<inner MD>+") of component, the span component */
ucs_status_t span_md_open(uct_component_t *component, const char *md_name,
                          const uct_md_config_t *config, uct_md_h *md_p);

#endif
