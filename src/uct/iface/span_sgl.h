/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The twin's SGL zero-copy put and get (UCX 1.22 and later): every element
 * range checked like one op; those span moves itself (VMM units, chunks it
 * splits) through the twin's zero-copy ops, the rest in one SGL op of the
 * inner transport where it has one (span_sgl.c).
 */
#ifndef SPAN_SGL_H_
#define SPAN_SGL_H_

#include "span_iface_table.h"

/* The most elements of one SGL op (arrays of this many live on the stack) */
#define SPAN_SGL_MAX 256

/* Fills, in the twin state of iface, the inner transport's SGL ops (NULL
 * where it has none) from its internal ops and its uct_iface_attr_v2_t */
void span_sgl_init(span_iface_t *siface, uct_iface_h iface);

/* What the twin offers, in attr (a uct_iface_attr_v2_t the inner's query
 * filled), where the field mask asks: SGL put and get where the twin has
 * put and get zero-copy, of at most SPAN_SGL_MAX elements or the inner's
 * maximum where lower */
void span_sgl_query(const span_iface_t *siface, void *attr);

ucs_status_t span_sgl_put_zcopy(uct_ep_h ep, void *const *buffers,
                                const size_t *lengths, uct_mem_h const *memhs,
                                const uint64_t *remote_addrs,
                                uct_rkey_t const *rkeys, const size_t *counts,
                                const size_t *strides, size_t count,
                                uct_completion_t *comp);

ucs_status_t span_sgl_get_zcopy(uct_ep_h ep, void *const *buffers,
                                const size_t *lengths, uct_mem_h const *memhs,
                                const uint64_t *remote_addrs,
                                uct_rkey_t const *rkeys, const size_t *counts,
                                const size_t *strides, size_t count,
                                uct_completion_t *comp);

#endif
