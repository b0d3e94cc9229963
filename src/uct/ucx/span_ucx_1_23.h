/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What UCX 1.23 lays out differently from 1.22 (read from UCX master that
 * says 1.23.0, checked against the symbols of NIXL's 1.23.0 build): two more
 * internal ops, and uct_iface_attr_v2_t with a count for SGL get, which moves
 * the capability flags and shifts the field-mask bits. Only span_ucx.c reads
 * these, to fill its table.
 */
#ifndef SPAN_UCX_1_23_H_
#define SPAN_UCX_1_23_H_

#include <stddef.h>
#include <stdint.h>

/* uct/base/uct_iface.h: uct_iface_internal_ops_t */
typedef struct span_ucx_1_23_internal_ops {
    void *iface_query_v2;
    void *iface_estimate_perf;
    void *iface_vfs_refresh;
    void *ep_query;
    void *ep_invalidate;
    void *ep_connect_to_ep_v2;
    void *iface_is_reachable_v2;
    void *ep_is_connected;
    void *ep_get_device_ep;
    void *ep_put_sgl_zcopy;
    void *ep_get_sgl_zcopy;
    void *ep_outstanding_purge;
} span_ucx_1_23_internal_ops_t;

/* uct/api/v2/uct_v2.h: uct_iface_attr_v2_t */
typedef struct span_ucx_1_23_iface_attr_v2 {
    uint64_t   field_mask;
    size_t     max_put_sgl_zcopy_count;
    size_t     max_get_sgl_zcopy_count;
    struct {
        uint64_t flags;
    } cap;
    size_t     tx_token_length;
    size_t     rx_token_length;
    const void *tx_token;
    void       *rx_token;
} span_ucx_1_23_iface_attr_v2_t;

#define SPAN_UCX_1_23_ATTR_FIELD_MAX_PUT_SGL (1ull << 0)
#define SPAN_UCX_1_23_ATTR_FIELD_MAX_GET_SGL (1ull << 1)
#define SPAN_UCX_1_23_ATTR_FIELD_CAP_FLAGS   (1ull << 2)
#define SPAN_UCX_1_23_FLAG_V2_PUT_SGL_ZCOPY  (1ull << 0)
#define SPAN_UCX_1_23_FLAG_V2_GET_SGL_ZCOPY  (1ull << 1)

#endif
