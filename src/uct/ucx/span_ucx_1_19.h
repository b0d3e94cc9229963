/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What UCX 1.17 to 1.21 lay out differently from 1.22 (read from the
 * v1.17.0, v1.19.0, v1.20.0 and v1.21.0 sources; 1.16 to 1.18 share 1.19's
 * internal ops): the internal ops of uct_base_iface_t, which have no SGL
 * ops in any of them, and uct_md_attr_v2_t, which ends before
 * required_mem_flags (and in 1.17 lacks gva_mem_types). Only span_ucx.c
 * reads these, to fill its table.
 */
#ifndef SPAN_UCX_1_19_H_
#define SPAN_UCX_1_19_H_

/* uct/base/uct_iface.h: uct_iface_internal_ops_t of 1.19 */
typedef struct span_ucx_1_19_internal_ops {
    void *iface_estimate_perf;
    void *iface_vfs_refresh;
    void *ep_query;
    void *ep_invalidate;
    void *ep_connect_to_ep_v2;
    void *iface_is_reachable_v2;
    void *ep_is_connected;
} span_ucx_1_19_internal_ops_t;

/* of 1.20: its iface_query_v2 reports no SGL op */
typedef struct span_ucx_1_20_internal_ops {
    void *iface_query_v2;
    void *iface_estimate_perf;
    void *iface_vfs_refresh;
    void *iface_mem_element_pack;
    void *ep_query;
    void *ep_invalidate;
    void *ep_connect_to_ep_v2;
    void *iface_is_reachable_v2;
    void *ep_is_connected;
    void *ep_get_device_ep;
} span_ucx_1_20_internal_ops_t;

/* of 1.21: no iface_query_v2 at all */
typedef struct span_ucx_1_21_internal_ops {
    void *iface_estimate_perf;
    void *iface_vfs_refresh;
    void *ep_query;
    void *ep_invalidate;
    void *ep_connect_to_ep_v2;
    void *iface_is_reachable_v2;
    void *ep_is_connected;
    void *ep_get_device_ep;
} span_ucx_1_21_internal_ops_t;

/* uct/api/v2/uct_v2.h: uct_md_attr_v2_t of 1.18 to 1.21 is 1.22's up to
 * reg_alignment; 1.22 appends required_mem_flags */
#define SPAN_UCX_1_19_MD_ATTR_V2_SIZE \
    ucs_offsetof(uct_md_attr_v2_t, required_mem_flags)

/* uct_md_attr_v2_t of 1.16 and 1.17 lacks gva_mem_types too (between
 * cache_mem_types and detect_mem_types) */
#define SPAN_UCX_1_17_MD_ATTR_V2_SIZE \
    (SPAN_UCX_1_19_MD_ATTR_V2_SIZE - sizeof(uint64_t))

/* uct_md_ops_t: mem_elem_pack came with 1.21 (same place, another
 * argument type), mem_elem_release with 1.23 */
#define SPAN_UCX_1_19_MD_OPS_SIZE ucs_offsetof(uct_md_ops_t, mem_elem_pack)
#define SPAN_UCX_1_21_MD_OPS_SIZE ucs_offsetof(uct_md_ops_t, mem_elem_release)

#endif
