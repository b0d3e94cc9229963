/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * UCX internals that a UCT component needs and that UCX does not install
 * (uct/base/uct_component.h, uct/base/uct_md.h, uct/base/uct_iface.h,
 * uct/api/v2/uct_v2.h), for every supported UCX minor release at once.
 *
 * The plugin is built once, against one UCX's public headers, and runs in
 * whichever supported UCX loaded it. What is declared here is laid out the
 * same in all of them (read from the v1.22.0 sources and UCX 1.23.0);
 * what differs is declared per release in span_ucx_<major>_<minor>.h and
 * reached at run time through the table span_ucx, which span_ucx_select()
 * fills from the UCX in the process (span_ucx.c).
 */
#ifndef SPAN_UCX_H_
#define SPAN_UCX_H_

#include <uct/api/uct.h>
#include <ucs/config/parser.h>
#include <ucs/datastruct/list.h>
#include <ucs/datastruct/linear_func.h>
#include <ucs/type/cpu_set.h>
#include "span_ucx_1_15.h"

#include <string.h>

/* --- ucs/debug/memtrack_int.h: what UCX allocates, UCX frees ---------- */

void *ucs_realloc(void *ptr, size_t size, const char *name);
void ucs_free(void *ptr);

/* --- ucs/debug/assert.h: a state that cannot be, logged, then abort ---- */

void ucs_fatal_error_format(const char *file, unsigned line,
                            const char *function, const char *format, ...)
    UCS_F_NORETURN UCS_F_PRINTF(4, 5);

#define ucs_fatal(_fmt, ...) \
    ucs_fatal_error_format(__FILE__, __LINE__, __func__, "Fatal: " _fmt, \
                           ## __VA_ARGS__)

/* --- uct/api/v2/uct_v2.h ------------------------------------------------ */

enum {
    UCT_MD_MEM_REG_FIELD_FLAGS         = UCS_BIT(0),
    UCT_MD_MEM_REG_FIELD_DMABUF_FD     = UCS_BIT(1),
    UCT_MD_MEM_REG_FIELD_DMABUF_OFFSET = UCS_BIT(2),
    UCT_MD_MEM_REG_FIELD_MEM_TYPE      = UCS_BIT(3)
};

enum {
    UCT_MD_MEM_DEREG_FIELD_MEMH       = UCS_BIT(0),
    UCT_MD_MEM_DEREG_FIELD_FLAGS      = UCS_BIT(1),
    UCT_MD_MEM_DEREG_FIELD_COMPLETION = UCS_BIT(2)
};

enum {
    UCT_MD_MEM_DEREG_FLAG_INVALIDATE = UCS_BIT(0)
};

enum {
    UCT_MD_MKEY_PACK_FIELD_FLAGS = UCS_BIT(0)
};

enum {
    UCT_MD_MKEY_PACK_FLAG_INVALIDATE_RMA = UCS_BIT(0),
    UCT_MD_MKEY_PACK_FLAG_INVALIDATE_AMO = UCS_BIT(1),
    UCT_MD_MKEY_PACK_FLAG_EXPORT         = UCS_BIT(2)
};

enum {
    UCT_MD_FLAG_INVALIDATE_RMA = UCT_MD_FLAG_LAST,
    UCT_MD_FLAG_INVALIDATE_AMO = UCS_BIT(12),
    UCT_MD_FLAG_MEMTYPE_COPY   = UCS_BIT(13)
};

enum {
    UCT_MD_ATTR_FIELD_MAX_ALLOC                 = UCS_BIT(0),
    UCT_MD_ATTR_FIELD_MAX_REG                   = UCS_BIT(1),
    UCT_MD_ATTR_FIELD_FLAGS                     = UCS_BIT(2),
    UCT_MD_ATTR_FIELD_REG_MEM_TYPES             = UCS_BIT(3),
    UCT_MD_ATTR_FIELD_REG_NONBLOCK_MEM_TYPES    = UCS_BIT(4),
    UCT_MD_ATTR_FIELD_CACHE_MEM_TYPES           = UCS_BIT(5),
    UCT_MD_ATTR_FIELD_DETECT_MEM_TYPES          = UCS_BIT(6),
    UCT_MD_ATTR_FIELD_ALLOC_MEM_TYPES           = UCS_BIT(7),
    UCT_MD_ATTR_FIELD_ACCESS_MEM_TYPES          = UCS_BIT(8),
    UCT_MD_ATTR_FIELD_DMABUF_MEM_TYPES          = UCS_BIT(9),
    UCT_MD_ATTR_FIELD_REG_COST                  = UCS_BIT(10),
    UCT_MD_ATTR_FIELD_COMPONENT_NAME            = UCS_BIT(11),
    UCT_MD_ATTR_FIELD_RKEY_PACKED_SIZE          = UCS_BIT(12),
    UCT_MD_ATTR_FIELD_LOCAL_CPUS                = UCS_BIT(13),
    UCT_MD_ATTR_FIELD_EXPORTED_MKEY_PACKED_SIZE = UCS_BIT(14),
    UCT_MD_ATTR_FIELD_GLOBAL_ID                 = UCS_BIT(15),
    UCT_MD_ATTR_FIELD_REG_ALIGNMENT             = UCS_BIT(16),
    UCT_MD_ATTR_FIELD_GVA_MEM_TYPES             = UCS_BIT(17),
    UCT_MD_ATTR_FIELD_REQUIRED_MEM_FLAGS        = UCS_BIT(18)
};

typedef struct uct_md_mem_reg_params {
    uint64_t          field_mask;
    uint64_t          flags;
    int               dmabuf_fd;
    size_t            dmabuf_offset;
    ucs_memory_type_t mem_type;
} uct_md_mem_reg_params_t;

typedef struct uct_md_mem_dereg_params {
    uint64_t          field_mask;
    unsigned          flags;
    uct_mem_h         memh;
    uct_completion_t *comp;
} uct_md_mem_dereg_params_t;

typedef struct uct_md_mkey_pack_params {
    uint64_t field_mask;
    unsigned flags;
} uct_md_mkey_pack_params_t;

typedef struct uct_md_mem_attach_params {
    uint64_t field_mask;
    uint64_t flags;
    size_t   mkey_size;
} uct_md_mem_attach_params_t;

typedef struct uct_rkey_compare_params {
    uint64_t field_mask;
} uct_rkey_compare_params_t;

typedef struct uct_rkey_unpack_params {
    uint64_t         field_mask;
    ucs_sys_device_t sys_device;
} uct_rkey_unpack_params_t;

typedef struct uct_md_mem_attr_v2 {
    uint64_t          field_mask;
    ucs_memory_type_t mem_type;
    ucs_sys_device_t  sys_dev;
    void             *base_address;
    size_t            alloc_length;
    int               dmabuf_fd;
    size_t            dmabuf_offset;
    uint8_t           mem_flags;
} uct_md_mem_attr_v2_t;

typedef struct uct_md_attr_v2 {
    uint64_t          field_mask;
    uint64_t          max_alloc;
    size_t            max_reg;
    uint64_t          flags;
    uint64_t          reg_mem_types;
    uint64_t          reg_nonblock_mem_types;
    uint64_t          cache_mem_types;
    uint64_t          gva_mem_types;
    uint64_t          detect_mem_types;
    uint64_t          alloc_mem_types;
    uint64_t          access_mem_types;
    uint64_t          dmabuf_mem_types;
    ucs_linear_func_t reg_cost;
    char              component_name[UCT_COMPONENT_NAME_MAX];
    size_t            rkey_packed_size;
    ucs_cpu_set_t     local_cpus;
    size_t            exported_mkey_packed_size;
    char              global_id[UCT_MD_GLOBAL_ID_MAX];
    size_t            reg_alignment;
    uint8_t           required_mem_flags;
} uct_md_attr_v2_t;

ucs_status_t uct_md_query_v2(uct_md_h md, uct_md_attr_v2_t *md_attr);

ucs_status_t uct_md_mkey_pack_v2(uct_md_h md, uct_mem_h memh, void *address,
                                 size_t length,
                                 const uct_md_mkey_pack_params_t *params,
                                 void *mkey_buffer);

/* --- uct/base/uct_component.h ------------------------------------------- */

/* uct_component_t and uct_tl_t as 1.16 and later lay them out; 1.14 and
 * 1.15 in span_ucx_1_15.h, reached through span_ucx_component_* and
 * span_ucx_tl_* */

typedef struct uct_component uct_component_t;

struct uct_component {
    const char name[UCT_COMPONENT_NAME_MAX];
    ucs_status_t (*query_md_resources)(uct_component_t *component,
                                       uct_md_resource_desc_t **resources_p,
                                       unsigned *num_resources_p);
    ucs_status_t (*md_open)(uct_component_t *component, const char *md_name,
                            const uct_md_config_t *config, uct_md_h *md_p);
    ucs_status_t (*cm_open)(uct_component_t *component, uct_worker_h worker,
                            const uct_cm_config_t *config, uct_cm_h *cm_p);
    ucs_status_t (*rkey_unpack)(uct_component_t *component,
                                const void *rkey_buffer,
                                const uct_rkey_unpack_params_t *params,
                                uct_rkey_t *rkey_p, void **handle_p);
    ucs_status_t (*rkey_ptr)(uct_component_t *component, uct_rkey_t rkey,
                             void *handle, uint64_t remote_addr,
                             void **local_addr_p);
    ucs_status_t (*rkey_release)(uct_component_t *component, uct_rkey_t rkey,
                                 void *handle);
    ucs_status_t (*rkey_compare)(uct_component_t *component, uct_rkey_t rkey1,
                                 uct_rkey_t rkey2,
                                 const uct_rkey_compare_params_t *params,
                                 int *result);
    ucs_config_global_list_entry_t md_config;
    ucs_config_global_list_entry_t cm_config;
    ucs_list_link_t                tl_list;
    ucs_list_link_t                list;
    uint64_t                       flags;
    void                           (*md_vfs_init)(uct_md_h md);
};

extern ucs_list_link_t uct_components_list;

void uct_component_register(uct_component_t *component);
void uct_component_unregister(uct_component_t *component);

/* --- uct/base/uct_md.h --------------------------------------------------- */

typedef struct uct_md_ops {
    void         (*close)(uct_md_h md);
    ucs_status_t (*query)(uct_md_h md, uct_md_attr_v2_t *md_attr);
    ucs_status_t (*mem_alloc)(uct_md_h md, size_t *length_p, void **address_p,
                              ucs_memory_type_t mem_type,
                              ucs_sys_device_t sys_dev, unsigned flags,
                              const char *alloc_name, uct_mem_h *memh_p);
    ucs_status_t (*mem_free)(uct_md_h md, uct_mem_h memh);
    ucs_status_t (*mem_advise)(uct_md_h md, uct_mem_h memh, void *addr,
                               size_t length, unsigned advice);
    ucs_status_t (*mem_reg)(uct_md_h md, void *address, size_t length,
                            const uct_md_mem_reg_params_t *params,
                            uct_mem_h *memh_p);
    ucs_status_t (*mem_dereg)(uct_md_h md,
                              const uct_md_mem_dereg_params_t *params);
    ucs_status_t (*mem_query)(uct_md_h md, const void *address, size_t length,
                              uct_md_mem_attr_v2_t *mem_attr);
    ucs_status_t (*mkey_pack)(uct_md_h md, uct_mem_h memh, void *address,
                              size_t length,
                              const uct_md_mkey_pack_params_t *params,
                              void *buffer);
    ucs_status_t (*mem_attach)(uct_md_h md, const void *mkey_buffer,
                               uct_md_mem_attach_params_t *params,
                               uct_mem_h *memh_p);
    ucs_status_t (*detect_memory_type)(uct_md_h md, const void *addr,
                                       size_t length,
                                       ucs_memory_type_t *mem_type_p);
    /* 1.22 passes the first four arguments only; span's ops read none */
    ucs_status_t (*mem_elem_pack)(uct_md_h md, uct_mem_h memh, uct_rkey_t rkey,
                                  uct_device_mem_elem_t *mem_elem_p,
                                  void **release_handle_p);
    /* 1.23 only: 1.22 never reads past mem_elem_pack */
    void         (*mem_elem_release)(uct_md_h md, void *release_handle);
} uct_md_ops_t;

struct uct_md_config {
    char dummy; /* C forbids empty structures */
};

extern ucs_config_field_t uct_md_config_table[];

struct uct_md {
    uct_md_ops_t    *ops;
    uct_component_t *component;
};

/* --- uct/base/uct_iface.h ------------------------------------------------ */

typedef struct uct_tl_device_resource {
    char              name[UCT_DEVICE_NAME_MAX];
    uct_device_type_t type;
    ucs_sys_device_t  sys_device;
} uct_tl_device_resource_t;

typedef struct uct_tl {
    char                           name[UCT_TL_NAME_MAX];
    ucs_status_t                   (*query_devices)(
            uct_md_h md, uct_tl_device_resource_t **tl_devices_p,
            unsigned *num_tl_devices_p);
    ucs_status_t                   (*iface_open)(
            uct_md_h md, uct_worker_h worker, const uct_iface_params_t *params,
            const uct_iface_config_t *config, uct_iface_h *iface_p);
    ucs_config_global_list_entry_t config;
    ucs_list_link_t                list;
} uct_tl_t;

/* The head of uct_base_iface_t: a twin reads and replaces internal_ops of
 * the inner iface it returns, and checks md and worker against what it
 * opened the iface with before it trusts the layout */
typedef struct span_ucx_base_iface {
    uct_iface_t  super;
    void         *internal_ops;
    uct_md_h     md;
    uct_worker_h worker;
} span_ucx_base_iface_t;

/* The first slot of uct_iface_internal_ops_t, a function in every
 * supported release (iface_query_v2 or iface_estimate_perf) */
#define SPAN_UCX_INTERNAL_FIRST 0

typedef ucs_status_t (*span_ucx_iface_query_v2_func_t)(uct_iface_h iface,
                                                       void *iface_attr);

/* Room for the internal ops of any supported release */
#define SPAN_UCX_INTERNAL_OPS_MAX 16

/* What differs between the supported UCX releases */
typedef struct span_ucx_layout {
    unsigned major;
    unsigned minor;
    /* a libuct symbol this release has and earlier ones lack */
    const char *has_symbol;
    /* a libuct symbol this release lacks and the later ones have, or NULL */
    const char *lacks_symbol;
    size_t     internal_ops_size;   /* sizeof(uct_iface_internal_ops_t) */
    size_t     md_ops_size;         /* sizeof(uct_md_ops_t) */
    size_t     md_attr_v2_size;     /* sizeof(uct_md_attr_v2_t) */
    /* slots of the internal ops: iface_query_v2 where it reports SGL ops,
     * ep_put_sgl_zcopy, ep_get_sgl_zcopy; -1 where there is none */
    int        query_v2_slot;
    int        put_sgl_slot;
    int        get_sgl_slot;
    /* uct_iface_attr_v2_t: where its capability flags are, the field-mask
     * bit that asks for them, and the flags of the SGL ops */
    size_t     attr_v2_cap_flags_offset;
    uint64_t   attr_v2_field_cap_flags;
    uint64_t   attr_v2_field_sgl_counts;
    size_t     attr_v2_sgl_counts_offset;
    unsigned   attr_v2_num_sgl_counts;
    uint64_t   v2_flags_sgl;
    /* 1.18 and earlier: uct_md_ops_t.mem_alloc takes no sys_dev and
     * uct_component_t.rkey_unpack no params (span_ucx_*_1_18_func_t) */
    int        calls_1_18;
    /* 1.17 and earlier: uct_md_attr_v2_t has no gva_mem_types, in the
     * middle (span_ucx_md_query, span_ucx_md_attr_export), and a packed
     * cuda_ipc key no handle type */
    int        attr_no_gva;
    /* 1.16 and earlier: ucs_config_parser_t has no doc
     * (span_ucx_config_fit) */
    int        config_no_doc;
    /* 1.18 and earlier: UCP cannot fail a zero-copy get whose op returns
     * an error (it aborts the process), but fails the request where the
     * op's completion carries it: a refused access is reported that way
     * (span_split_refuse) */
    int        refuse_in_completion;
    /* 1.15 and earlier: UCP takes an RMA lane only from a transport with
     * put short, put bcopy and get bcopy, and emulates the accesses of any
     * other over active messages, unchecked: the twin of cma offers them
     * over its zero-copy ops (span_bounce.h) */
    int        rma_lane_needs_bcopy;
    /* 1.15 and earlier: UCP's RMA zero-copy ops pass a local memh it never
     * set to a transport whose MD needs none (cma): the twin of one never
     * reads it (span_ep_zcopy_unread) */
    int        rma_memh_unset;
    /* uct_component_t: where its md_config, tl_list and list are, and its
     * size (1.15 and earlier have no rkey_compare; 1.14 and earlier
     * configuration entries no flags) */
    size_t     component_md_config_offset;
    size_t     component_tl_list_offset;
    size_t     component_list_offset;
    size_t     component_size;
    /* uct_tl_t: where its list is; ucs_config_global_list_entry_t: size */
    size_t     tl_list_offset;
    size_t     config_entry_size;
    /* uct_md_ops_t: the slot of detect_memory_type */
    unsigned   md_detect_slot;
    /* 1.15 and earlier: an MD's mkey_pack takes no range, and its ops
     * have is_sockaddr_accessible (span_ucx_1_15.h) */
    int        pack_no_range;
    /* 1.14 and earlier: uct_md_attr_v2_t has no reg_nonblock_mem_types, in
     * the middle, and ucs_config_parser_fill_opts takes the table, not the
     * entry */
    int        attr_no_nonblock;
    int        config_fill_fields;
    /* 1.13: an MD's query writes uct_md_attr_t (md_attr_v2_size is its
     * size), there is no uct_md_query_v2, and mem_reg takes flags, not
     * params (span_ucx_1_15.h) */
    int        md_query_v1;
    int        mem_reg_flags;
} span_ucx_layout_t;

/* The layout of the UCX in the process; set by span_ucx_select() */
extern const span_ucx_layout_t *span_ucx;

/* uct_md_ops_t.mem_alloc and uct_component_t.rkey_unpack of 1.18 and
 * earlier */
typedef ucs_status_t (*span_ucx_mem_alloc_1_18_func_t)(
        uct_md_h md, size_t *length_p, void **address_p,
        ucs_memory_type_t mem_type, unsigned flags, const char *alloc_name,
        uct_mem_h *memh_p);

typedef ucs_status_t (*span_ucx_rkey_unpack_1_18_func_t)(
        uct_component_t *component, const void *rkey_buffer,
        uct_rkey_t *rkey_p, void **handle_p);

/* An MD's mem_alloc, as the UCX in the process calls it */
static inline ucs_status_t
span_ucx_mem_alloc(const uct_md_ops_t *ops, uct_md_h md, size_t *length_p,
                   void **address_p, ucs_memory_type_t mem_type,
                   ucs_sys_device_t sys_dev, unsigned flags,
                   const char *alloc_name, uct_mem_h *memh_p)
{
    if (span_ucx->calls_1_18) {
        return ((span_ucx_mem_alloc_1_18_func_t)(void*)ops->mem_alloc)(
                md, length_p, address_p, mem_type, flags, alloc_name, memh_p);
    }
    return ops->mem_alloc(md, length_p, address_p, mem_type, sys_dev, flags,
                          alloc_name, memh_p);
}

/* The fields of 1.22's uct_md_attr_v2_t that the UCX in the process lacks
 * in the middle of its own, in order of offset; SIZE_MAX for one it has */
#define SPAN_UCX_MD_ATTR_GAPS 2

static inline void span_ucx_md_attr_gaps(size_t *gaps)
{
    gaps[0] = span_ucx->attr_no_nonblock ?
              ucs_offsetof(uct_md_attr_v2_t, reg_nonblock_mem_types) :
              SIZE_MAX;
    gaps[1] = span_ucx->attr_no_gva ?
              ucs_offsetof(uct_md_attr_v2_t, gva_mem_types) : SIZE_MAX;
}

/* Copies the fields of attr (1.22's layout) that the release lays out in
 * release (span_ucx->md_attr_v2_size bytes): into release where
 * to_release, else from it (the fields it lacks are left as they are) */
static inline void span_ucx_md_attr_convert(uct_md_attr_v2_t *attr,
                                            void *release, int to_release)
{
    size_t gaps[SPAN_UCX_MD_ATTR_GAPS], at = 0, pos = 0, len;
    unsigned i;

    span_ucx_md_attr_gaps(gaps);
    for (i = 0; i <= SPAN_UCX_MD_ATTR_GAPS; ++i) {
        if ((i < SPAN_UCX_MD_ATTR_GAPS) && (gaps[i] == SIZE_MAX)) {
            continue;
        }
        len = (i < SPAN_UCX_MD_ATTR_GAPS) ? gaps[i] - at :
              span_ucx->md_attr_v2_size - pos;
        if (to_release) {
            memcpy((char*)release + pos, (const char*)attr + at, len);
        } else {
            memcpy((char*)attr + at, (const char*)release + pos, len);
        }
        pos += len;
        at  += len + sizeof(uint64_t);
    }
}

/* The fields of uct_md_attr_t (1.13's MD attributes) from 1.22's, or to
 * them where to_v1 */
static inline void span_ucx_md_attr_v1(uct_md_attr_v2_t *attr,
                                       uct_md_attr_t *v1, int to_v1)
{
#define SPAN_UCX_MD_ATTR_V1(_v1, _v2) \
    if (to_v1) { \
        memcpy(&v1->_v1, &attr->_v2, sizeof(v1->_v1)); \
    } else { \
        memcpy(&attr->_v2, &v1->_v1, sizeof(v1->_v1)); \
    }
    SPAN_UCX_MD_ATTR_V1(cap.max_alloc, max_alloc)
    SPAN_UCX_MD_ATTR_V1(cap.max_reg, max_reg)
    SPAN_UCX_MD_ATTR_V1(cap.flags, flags)
    SPAN_UCX_MD_ATTR_V1(cap.reg_mem_types, reg_mem_types)
    SPAN_UCX_MD_ATTR_V1(cap.detect_mem_types, detect_mem_types)
    SPAN_UCX_MD_ATTR_V1(cap.alloc_mem_types, alloc_mem_types)
    SPAN_UCX_MD_ATTR_V1(cap.access_mem_types, access_mem_types)
    SPAN_UCX_MD_ATTR_V1(reg_cost, reg_cost)
    SPAN_UCX_MD_ATTR_V1(component_name, component_name)
    SPAN_UCX_MD_ATTR_V1(rkey_packed_size, rkey_packed_size)
    SPAN_UCX_MD_ATTR_V1(local_cpus, local_cpus)
#undef SPAN_UCX_MD_ATTR_V1
}

/* The MD attributes attr (1.22's layout) as the UCX in the process lays
 * them out, into out (span_ucx->md_attr_v2_size bytes) */
static inline void span_ucx_md_attr_export(const uct_md_attr_v2_t *attr,
                                           void *out)
{
    if (span_ucx->md_query_v1) {
        span_ucx_md_attr_v1((uct_md_attr_v2_t*)attr, (uct_md_attr_t*)out,
                            1);
        return;
    }
    span_ucx_md_attr_convert((uct_md_attr_v2_t*)attr, out, 1);
}

/* 1.13 has no uct_md_query_v2: referenced weakly, so that the plugin
 * loads there even where symbols are bound at once (LD_BIND_NOW) */
#pragma weak uct_md_query_v2

/* uct_md_query_v2 of md into attr, in 1.22's layout whatever the UCX in
 * the process lays out (its fields the release lacks: 0) */
static inline ucs_status_t span_ucx_md_query(uct_md_h md,
                                             uct_md_attr_v2_t *attr)
{
    uint64_t field_mask = attr->field_mask;
    uct_md_attr_v2_t release;
    uct_md_attr_t v1;
    ucs_status_t status;

    if (span_ucx->md_query_v1) {
        memset(&v1, 0, sizeof(v1));
        status = uct_md_query(md, &v1);
        memset(attr, 0, sizeof(*attr));
        attr->field_mask = field_mask;
        span_ucx_md_attr_v1(attr, &v1, 0);
        return status;
    }
    if (!span_ucx->attr_no_gva && !span_ucx->attr_no_nonblock) {
        return uct_md_query_v2(md, attr);
    }
    memset(&release, 0, sizeof(release));
    release.field_mask = field_mask;
    status             = uct_md_query_v2(md, &release);
    memset(attr, 0, sizeof(*attr));
    span_ucx_md_attr_convert(attr, &release, 0);
    return status;
}

/* ucs_config_field_t of UCX 1.16 and earlier: its parser has no doc
 * (which came with 1.17, as did ucs_config_doc_nop, the doc of the
 * UCS_CONFIG_TYPE_* initializers: referenced weakly, so that the plugin
 * loads where it is absent) */
typedef struct span_ucx_1_16_config_field {
    const char *name;
    const char *dfl_value;
    const char *doc;
    size_t     offset;
    struct {
        void       *read, *write, *clone, *release, *help;
        const void *arg;
    } parser;
} span_ucx_1_16_config_field_t;

#pragma weak ucs_config_doc_nop

/* Lays table (ending with a NULL name) out in place as a UCX whose parser
 * has no doc reads it, where no_doc: entries 8 bytes shorter, each moved
 * down. Once per table: a table laid out so reads wrong as 1.17's. */
static inline void span_ucx_config_fit_table(ucs_config_field_t *table,
                                             int no_doc)
{
    span_ucx_1_16_config_field_t *out = (span_ucx_1_16_config_field_t*)table;
    ucs_config_field_t field;
    size_t i;

    if (!no_doc) {
        return;
    }
    /* entry i goes to out + i, which never passes the start of entry
     * i + 1: it is read whole before its place is written */
    for (i = 0;; ++i) {
        field                 = table[i];
        out[i].name           = field.name;
        out[i].dfl_value      = field.dfl_value;
        out[i].doc            = field.doc;
        out[i].offset         = field.offset;
        out[i].parser.read    = (void*)field.parser.read;
        out[i].parser.write   = (void*)field.parser.write;
        out[i].parser.clone   = (void*)field.parser.clone;
        out[i].parser.release = (void*)field.parser.release;
        out[i].parser.help    = (void*)field.parser.help;
        out[i].parser.arg     = field.parser.arg;
        if (field.name == NULL) {
            return;
        }
    }
}

/* span_ucx_config_fit_table for the UCX in the process */
static inline void span_ucx_config_fit(ucs_config_field_t *table)
{
    span_ucx_config_fit_table(table, span_ucx->config_no_doc);
}

/* A component's rkey_unpack, as the UCX in the process calls it */
static inline ucs_status_t
span_ucx_rkey_unpack(uct_component_t *component, const void *rkey_buffer,
                     const uct_rkey_unpack_params_t *params,
                     uct_rkey_t *rkey_p, void **handle_p)
{
    if (span_ucx->calls_1_18) {
        return ((span_ucx_rkey_unpack_1_18_func_t)(void*)
                component->rkey_unpack)(component, rkey_buffer, rkey_p,
                                        handle_p);
    }
    return component->rkey_unpack(component, rkey_buffer, params, rkey_p,
                                  handle_p);
}

/* uct_md_ops_t.mkey_pack of 1.15 and earlier: no range */
typedef ucs_status_t (*span_ucx_mkey_pack_1_15_func_t)(
        uct_md_h md, uct_mem_h memh, const uct_md_mkey_pack_params_t *params,
        void *buffer);

/* An MD's mkey_pack, as the UCX in the process calls it (the range is
 * dropped where it takes none: the MD packs its whole registration) */
static inline ucs_status_t
span_ucx_mkey_pack(const uct_md_ops_t *ops, uct_md_h md, uct_mem_h memh,
                   void *address, size_t length,
                   const uct_md_mkey_pack_params_t *params, void *buffer)
{
    if (span_ucx->pack_no_range) {
        return ((span_ucx_mkey_pack_1_15_func_t)(void*)ops->mkey_pack)(
                md, memh, params, buffer);
    }
    return ops->mkey_pack(md, memh, address, length, params, buffer);
}

/* An MD's mem_reg, as the UCX in the process calls it (1.13: the flags of
 * params alone) */
static inline ucs_status_t
span_ucx_mem_reg(const uct_md_ops_t *ops, uct_md_h md, void *address,
                 size_t length, const uct_md_mem_reg_params_t *params,
                 uct_mem_h *memh_p)
{
    if (span_ucx->mem_reg_flags) {
        return ((span_ucx_mem_reg_1_13_func_t)(void*)ops->mem_reg)(
                md, address, length,
                (params->field_mask & UCT_MD_MEM_REG_FIELD_FLAGS) ?
                params->flags : 0, memh_p);
    }
    return ops->mem_reg(md, address, length, params, memh_p);
}

typedef ucs_status_t (*span_ucx_detect_memory_type_func_t)(
        uct_md_h md, const void *addr, size_t length,
        ucs_memory_type_t *mem_type_p);

/* An MD's detect_memory_type, wherever the release has it in the ops */
static inline ucs_status_t
span_ucx_detect_memory_type(const uct_md_ops_t *ops, uct_md_h md,
                            const void *addr, size_t length,
                            ucs_memory_type_t *mem_type_p)
{
    return ((span_ucx_detect_memory_type_func_t)
            ((void *const*)ops)[span_ucx->md_detect_slot])(md, addr, length,
                                                           mem_type_p);
}

/* The components UCX registered, as the release lays uct_component_t out:
 * the next after component, or the first where it is NULL; NULL after the
 * last */
static inline uct_component_t *
span_ucx_component_next(const uct_component_t *component)
{
    const ucs_list_link_t *link =
            (component == NULL) ? &uct_components_list :
            (const ucs_list_link_t*)((const char*)component +
                                     span_ucx->component_list_offset);

    return (link->next == &uct_components_list) ? NULL :
           (uct_component_t*)((char*)link->next -
                              span_ucx->component_list_offset);
}

#define span_ucx_components_for_each(_component) \
    for ((_component) = span_ucx_component_next(NULL); (_component) != NULL; \
         (_component) = span_ucx_component_next(_component))

/* A component's list link, its transports' list head, its MD
 * configuration entry (whose leading fields every release lays out the
 * same: name, prefix, table, size, list) */
static inline ucs_list_link_t *span_ucx_component_link(
        const uct_component_t *component)
{
    return (ucs_list_link_t*)((char*)component +
                              span_ucx->component_list_offset);
}

static inline ucs_list_link_t *span_ucx_component_tls(
        const uct_component_t *component)
{
    return (ucs_list_link_t*)((char*)component +
                              span_ucx->component_tl_list_offset);
}

static inline ucs_config_global_list_entry_t *
span_ucx_component_md_config(const uct_component_t *component)
{
    return (ucs_config_global_list_entry_t*)(
            (char*)component + span_ucx->component_md_config_offset);
}

/* A transport's list link, and the transport after tl in the list at head
 * (the first where tl is NULL; NULL after the last) */
static inline ucs_list_link_t *span_ucx_tl_link(const uct_tl_t *tl)
{
    return (ucs_list_link_t*)((char*)tl + span_ucx->tl_list_offset);
}

static inline uct_tl_t *span_ucx_tl_next(const ucs_list_link_t *head,
                                         const uct_tl_t *tl)
{
    const ucs_list_link_t *link = (tl == NULL) ? head : span_ucx_tl_link(tl);

    return (link->next == head) ? NULL :
           (uct_tl_t*)((char*)link->next - span_ucx->tl_list_offset);
}

#define span_ucx_tls_for_each(_tl, _head) \
    for ((_tl) = span_ucx_tl_next(_head, NULL); (_tl) != NULL; \
         (_tl) = span_ucx_tl_next(_head, _tl))

/* ucs_config_parser_fill_opts of entry, as the UCX in the process takes
 * it */
static inline ucs_status_t
span_ucx_config_fill(void *opts, ucs_config_global_list_entry_t *entry,
                     const char *env_prefix, int ignore_errors)
{
    span_ucx_fill_opts_1_14_func_t fill_1_14;

    if (span_ucx->config_fill_fields) {
        fill_1_14 = (span_ucx_fill_opts_1_14_func_t)(void*)
                    ucs_config_parser_fill_opts;
        return fill_1_14(opts, entry->table, env_prefix, entry->prefix,
                         ignore_errors);
    }
    return ucs_config_parser_fill_opts(opts, entry, env_prefix,
                                       ignore_errors);
}

/*
 * Lays component, 1.16's uct_component_t, out in place as the release
 * reads it (1.15 and earlier: no rkey_compare; 1.14 and earlier: entries
 * without flags). Before it is registered, its transports list empty.
 */
void span_ucx_component_fit(uct_component_t *component);

/*
 * Learns which UCX the plugin's UCX symbols resolve to and selects its
 * layout. UCS_ERR_UNSUPPORTED, with one warning line naming both versions
 * (or saying what is unknown), where none fits.
 */
ucs_status_t span_ucx_select(void);

/*
 * Whether an iface just opened by an inner transport is laid out as the
 * selected release says: its md and worker where uct_base_iface_t has them,
 * its internal ops code of a loaded object. Warns once where it is not.
 */
int span_ucx_iface_check(uct_iface_h iface, uct_md_h md, uct_worker_h worker);

/* Whether a component's fields read as a component's: name, functions in
 * loaded code, tl_list a list */
int span_ucx_component_check(const uct_component_t *component);

/* A packed cuda_ipc key (uct_cuda_ipc_rkey_t) begins with its handle type,
 * a 32-bit enum whose UCT_CUDA_IPC_KEY_HANDLE_TYPE_NO_IPC is 0: cuda_ipc
 * found no handle it can export for the memory (1.18 to 1.23; 1.17's key
 * begins with a legacy IPC handle: span_ucx->attr_no_gva) */
#define SPAN_CUDA_IPC_COMPONENT  "cuda_ipc"
#define SPAN_CUDA_IPC_KEY_NO_IPC 0u

/* Where a packed cuda_ipc key holds its legacy IPC handle: after the
 * handle type, in a union that is 8-byte aligned from 1.22 (it gained a
 * POSIX descriptor and a 64-bit system id); 0 where span does not read it
 * (1.18 and earlier lay the key out otherwise) */
static inline size_t span_ucx_cuda_ipc_handle_offset(void)
{
    return (span_ucx->minor >= 22) ? 8 : (span_ucx->minor >= 19) ? 4 : 0;
}

#endif
