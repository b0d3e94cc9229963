/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The inner MD of a twin MD, as others register with it.
 *
 * A twin iface is the inner iface, so its md is the inner MD: memory from
 * uct_iface_mem_alloc() on a twin iface (UCT-level ucx_perftest, the inner
 * transport's own pools) is registered by the inner MD, and its handle is
 * the inner MD's. The inner MD object belongs to the twin MD alone, so the
 * twin gives it an ops table of its own that records every registration
 * others make with it (address, length, handle): the twin MD then packs a
 * span rkey for such a handle over the extent the inner MD really
 * registered, never over one a caller claims. The twin's own inner
 * registrations go to the original ops and are not recorded.
 *
 * Only inner MDs with rkeys are wrapped: where the inner MD packs no key,
 * a registration is a declaration only (the transport reaches any address
 * of the peer), and the extent the owner declares when packing is the one
 * checked.
 */
#ifndef SPAN_MD_INNER_H_
#define SPAN_MD_INNER_H_

#include "ucx/span_ucx.h"

#include <ucs/type/status.h>
#include <stdint.h>

typedef struct span_md_inner span_md_inner_t;

/* Gives inner an ops table that records others' registrations; *orig_p the
 * table to use for the twin's own calls. UCS_ERR_UNSUPPORTED for an object
 * every open of the MD shares (a static one, as rocm_ipc's): it is left as
 * it is. */
ucs_status_t span_md_inner_wrap(uct_md_h inner, span_md_inner_t **wrap_p,
                                const uct_md_ops_t **orig_p);

/* After the inner MD was closed: releases the table and what it recorded */
void span_md_inner_free(span_md_inner_t *wrap);

/* The extent registered under memh by others (base_p NULL: only whether
 * there is one), or UCS_ERR_NO_ELEM where the inner MD did not make that
 * handle for them. memh is compared, never read. */
ucs_status_t span_md_inner_find(span_md_inner_t *wrap, uct_mem_h memh,
                                uint64_t *base_p, uint64_t *length_p);

#endif
