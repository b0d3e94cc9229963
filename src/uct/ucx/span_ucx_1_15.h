/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What UCX 1.13, 1.14 and 1.15 lay out differently from 1.16 (read from the
 * v1.13.1, v1.14.1 and v1.15.0 sources, and checked against the libraries
 * of Debian 12's libucx0 1.13.1 and the libucx-cu12 wheels 1.14.1.post1 and
 * 1.15.0.post1): uct_component_t has no rkey_compare, and in 1.13 and 1.14
 * its configuration entries no flags, which moves every field after
 * md_config, and the list link of uct_tl_t; uct_md_ops_t has 12 entries
 * (1.13: 11), its mkey_pack no range; uct_md_attr_v2_t ends before
 * reg_alignment (and in 1.14 lacks reg_nonblock_mem_types; 1.13 has none:
 * an MD's query writes the public uct_md_attr_t, and its mem_reg takes
 * flags); the internal ops of uct_base_iface_t are the first 4 (1.13), 5
 * (1.14) or 6 (1.15) of 1.16's. Only span_ucx.c and the ops tables of the
 * twin MD read these.
 */
#ifndef SPAN_UCX_1_15_H_
#define SPAN_UCX_1_15_H_

#include <uct/api/uct_def.h>
#include <ucs/config/parser.h>
#include <ucs/datastruct/list.h>
#include <stddef.h>
#include <stdint.h>

/* ucs/config/parser.h: ucs_config_global_list_entry_t of 1.14 and earlier,
 * without the flags of 1.15 (the leading fields are laid out the same) */
typedef struct span_ucx_1_14_config_entry {
    const char         *name;
    const char         *prefix;
    ucs_config_field_t *table;
    size_t             size;
    ucs_list_link_t    list;
} span_ucx_1_14_config_entry_t;

/* uct/base/uct_component.h: uct_component_t of 1.15, without rkey_compare;
 * the functions up to rkey_release are 1.16's, at the same offsets */
typedef struct span_ucx_1_15_component {
    char                           name[UCT_COMPONENT_NAME_MAX];
    void                           *query_md_resources;
    void                           *md_open;
    void                           *cm_open;
    void                           *rkey_unpack;
    void                           *rkey_ptr;
    void                           *rkey_release;
    ucs_config_global_list_entry_t md_config;
    ucs_config_global_list_entry_t cm_config;
    ucs_list_link_t                tl_list;
    ucs_list_link_t                list;
    uint64_t                       flags;
    void                           *md_vfs_init;
} span_ucx_1_15_component_t;

/* of 1.14: 1.15's, with entries without flags */
typedef struct span_ucx_1_14_component {
    char                         name[UCT_COMPONENT_NAME_MAX];
    void                         *query_md_resources;
    void                         *md_open;
    void                         *cm_open;
    void                         *rkey_unpack;
    void                         *rkey_ptr;
    void                         *rkey_release;
    span_ucx_1_14_config_entry_t md_config;
    span_ucx_1_14_config_entry_t cm_config;
    ucs_list_link_t              tl_list;
    ucs_list_link_t              list;
    uint64_t                     flags;
    void                         *md_vfs_init;
} span_ucx_1_14_component_t;

/* uct/base/uct_iface.h: uct_tl_t of 1.14, whose entry has no flags (1.15's
 * is 1.16's) */
typedef struct span_ucx_1_14_tl {
    char                         name[UCT_TL_NAME_MAX];
    void                         *query_devices;
    void                         *iface_open;
    span_ucx_1_14_config_entry_t config;
    ucs_list_link_t              list;
} span_ucx_1_14_tl_t;

/* uct/base/uct_md.h: uct_md_ops_t of 1.14 and 1.15. mkey_pack takes no
 * range: (md, memh, params, buffer); is_sockaddr_accessible, which 1.16
 * dropped, returns whether a socket address is reachable: 0 where the MD
 * has no connection manager */
typedef struct span_ucx_1_15_md_ops {
    void *close;
    void *query;
    void *mem_alloc;
    void *mem_free;
    void *mem_advise;
    void *mem_reg;
    void *mem_dereg;
    void *mem_query;
    void *mkey_pack;
    void *mem_attach;
    void *is_sockaddr_accessible;
    void *detect_memory_type;
} span_ucx_1_15_md_ops_t;

/* of 1.13: no mem_attach; query writes uct_md_attr_t (uct.h), mem_reg
 * takes (md, address, length, unsigned flags, memh_p) */
typedef struct span_ucx_1_13_md_ops {
    void *close;
    void *query;
    void *mem_alloc;
    void *mem_free;
    void *mem_advise;
    void *mem_reg;
    void *mem_dereg;
    void *mem_query;
    void *mkey_pack;
    void *is_sockaddr_accessible;
    void *detect_memory_type;
} span_ucx_1_13_md_ops_t;

typedef ucs_status_t (*span_ucx_mem_reg_1_13_func_t)(uct_md_h md,
                                                      void *address,
                                                      size_t length,
                                                      unsigned flags,
                                                      uct_mem_h *memh_p);

/* uct/base/uct_iface.h: uct_iface_internal_ops_t of 1.15, of 1.14, which
 * ends before iface_is_reachable_v2, and of 1.13, before
 * ep_connect_to_ep_v2 */
typedef struct span_ucx_1_15_internal_ops {
    void *iface_estimate_perf;
    void *iface_vfs_refresh;
    void *ep_query;
    void *ep_invalidate;
    void *ep_connect_to_ep_v2;
    void *iface_is_reachable_v2;
} span_ucx_1_15_internal_ops_t;

typedef struct span_ucx_1_14_internal_ops {
    void *iface_estimate_perf;
    void *iface_vfs_refresh;
    void *ep_query;
    void *ep_invalidate;
    void *ep_connect_to_ep_v2;
} span_ucx_1_14_internal_ops_t;

typedef struct span_ucx_1_13_internal_ops {
    void *iface_estimate_perf;
    void *iface_vfs_refresh;
    void *ep_query;
    void *ep_invalidate;
} span_ucx_1_13_internal_ops_t;

/* uct/api/v2/uct_v2.h: uct_md_attr_v2_t of 1.15 is 1.16's up to
 * reg_alignment (in 1.22's terms: gva_mem_types left out, and ending before
 * reg_alignment); 1.14 also lacks reg_nonblock_mem_types, between
 * reg_mem_types and cache_mem_types */
#define SPAN_UCX_1_15_MD_ATTR_V2_SIZE \
    (ucs_offsetof(uct_md_attr_v2_t, reg_alignment) - sizeof(uint64_t))
#define SPAN_UCX_1_14_MD_ATTR_V2_SIZE \
    (SPAN_UCX_1_15_MD_ATTR_V2_SIZE - sizeof(uint64_t))

/* uct/api/uct.h: uct_md_attr_t, which 1.13 has its MDs' query write, is
 * laid out the same in every release: span reads and writes the build's */

/* ucs/config/parser.h: ucs_config_parser_fill_opts of 1.14 and earlier
 * takes the table and its prefix, not the entry (same symbol) */
typedef ucs_status_t (*span_ucx_fill_opts_1_14_func_t)(
        void *opts, ucs_config_field_t *fields, const char *env_prefix,
        const char *table_prefix, int ignore_errors);

#endif
