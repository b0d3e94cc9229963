/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Twin MD key packing (span_md_pack.c): a registration's span rkey is
 * packed once, when it is registered, so that a region whose keys do not
 * fit is refused then and not at transfer time.
 */
#ifndef SPAN_MD_PACK_H_
#define SPAN_MD_PACK_H_

#include "span_md.h"

/* Packs the inner key of every chunk of memh and its span rkey (inline,
 * spilled, or of units span exports itself) */
ucs_status_t span_memh_seal(span_md_t *smd, span_memh_t *memh,
                            ucs_memory_type_t mtype);

/* The span rkey of VMM units the inner MD registers none of, exported by
 * span itself (rocm_ipc+: span_md_rocm.h) */
ucs_status_t span_memh_seal_exported(span_md_t *smd, span_memh_t *memh);

/* Withdraws what a sealed handle published beside its key: the spilled
 * keys and the exported units */
void span_memh_unpublish(span_memh_t *memh);

/* The twin MD's mkey_pack: a sealed handle's key, or a one-chunk key for a
 * handle the inner MD made for others (span_md_inner.h) */
ucs_status_t span_md_mkey_pack(uct_md_h md, uct_mem_h memh, void *address,
                               size_t length,
                               const uct_md_mkey_pack_params_t *params,
                               void *buffer);

/* span_md_mkey_pack as UCX 1.15 and earlier call it, without a range: the
 * range a sealed handle was registered for, and a handle of the inner MD
 * as the inner MD registered it (one of a keyless inner MD is refused) */
ucs_status_t span_md_mkey_pack_1_15(uct_md_h md, uct_mem_h memh,
                                    const uct_md_mkey_pack_params_t *params,
                                    void *buffer);

#endif
