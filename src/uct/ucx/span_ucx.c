/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Which UCX the plugin runs in, and what its internal layouts are there.
 *
 * The plugin has no DT_NEEDED on UCX: its UCX symbols resolve to whichever
 * UCX loaded it (a wheel's, NIXL's renamed copy, a distro's). That UCX is
 * found through one of those symbols (dladdr of uct_md_open gives the very
 * libuct they bind to), its version read from the libucp of the same
 * installation where the process has one, and cross-checked against symbols
 * only some releases export. Nothing is ever opened by name.
 */
#include "span_ucx.h"
#include "span_ucx_1_15.h"
#include "span_ucx_1_19.h"
#include "span_ucx_1_22.h"
#include "span_ucx_1_23.h"
#include "span_dl_loaded.h"

#include <ucs/debug/log_def.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

/* What moves with uct_component_t, uct_tl_t and uct_md_ops_t up to 1.16:
 * 1.14 (entries without flags), 1.15 (no rkey_compare), 1.16 and later */
#define SPAN_UCX_COMPONENT_OFFSET(_minor, _field) \
    (((_minor) <= 14) ? ucs_offsetof(span_ucx_1_14_component_t, _field) : \
     ((_minor) == 15) ? ucs_offsetof(span_ucx_1_15_component_t, _field) : \
                        ucs_offsetof(uct_component_t, _field))

#define SPAN_UCX_LAYOUT_COMPONENT(_minor) \
        .component_md_config_offset = \
                SPAN_UCX_COMPONENT_OFFSET(_minor, md_config), \
        .component_tl_list_offset  = \
                SPAN_UCX_COMPONENT_OFFSET(_minor, tl_list), \
        .component_list_offset     = SPAN_UCX_COMPONENT_OFFSET(_minor, list), \
        .component_size            = \
                ((_minor) <= 14) ? sizeof(span_ucx_1_14_component_t) : \
                ((_minor) == 15) ? sizeof(span_ucx_1_15_component_t) : \
                                   sizeof(uct_component_t), \
        .tl_list_offset            = \
                ((_minor) <= 14) ? ucs_offsetof(span_ucx_1_14_tl_t, list) : \
                                   ucs_offsetof(uct_tl_t, list), \
        .config_entry_size         = \
                ((_minor) <= 14) ? sizeof(span_ucx_1_14_config_entry_t) : \
                                   sizeof(ucs_config_global_list_entry_t), \
        .md_detect_slot            = \
                (((_minor) <= 13) ? \
                 ucs_offsetof(span_ucx_1_13_md_ops_t, detect_memory_type) : \
                 ((_minor) <= 15) ? \
                 ucs_offsetof(span_ucx_1_15_md_ops_t, detect_memory_type) : \
                 ucs_offsetof(uct_md_ops_t, detect_memory_type)) / \
                sizeof(void*), \
        .pack_no_range             = ((_minor) <= 15), \
        .attr_no_nonblock          = ((_minor) <= 14), \
        .config_fill_fields        = ((_minor) <= 14), \
        .md_query_v1               = ((_minor) <= 13), \
        .mem_reg_flags             = ((_minor) <= 13)

/* A release with SGL ops (1.22 and later): uct_iface_attr_v2_t of that
 * release reports them, and its iface_query_v2 is slot 0 */
#define SPAN_UCX_LAYOUT_SGL(_minor, _has, _lacks, _md_ops_size, \
                            _get_sgl_slot, _sgl_counts, _field_sgl, \
                            _field_flags, _flags) \
    { \
        SPAN_UCX_LAYOUT_COMPONENT(_minor), \
        .major                     = 1, \
        .minor                     = _minor, \
        .has_symbol                = _has, \
        .lacks_symbol              = _lacks, \
        .internal_ops_size         = \
                sizeof(span_ucx_1_##_minor##_internal_ops_t), \
        .md_ops_size               = _md_ops_size, \
        .md_attr_v2_size           = sizeof(uct_md_attr_v2_t), \
        .query_v2_slot             = 0, \
        .put_sgl_slot              = \
                ucs_offsetof(span_ucx_1_##_minor##_internal_ops_t, \
                             ep_put_sgl_zcopy) / sizeof(void*), \
        .get_sgl_slot              = _get_sgl_slot, \
        .attr_v2_cap_flags_offset  = \
                offsetof(span_ucx_1_##_minor##_iface_attr_v2_t, cap.flags), \
        .attr_v2_field_cap_flags   = _field_flags, \
        .attr_v2_field_sgl_counts  = _field_sgl, \
        .attr_v2_sgl_counts_offset = \
                offsetof(span_ucx_1_##_minor##_iface_attr_v2_t, \
                         max_put_sgl_zcopy_count), \
        .attr_v2_num_sgl_counts    = _sgl_counts, \
        .v2_flags_sgl              = _flags \
    }

/* A release without SGL ops (1.21 and earlier): nothing to hide */
#define SPAN_UCX_LAYOUT_NO_SGL(_minor, _ops_minor, _has, _lacks, \
                               _md_ops_size) \
    { \
        SPAN_UCX_LAYOUT_COMPONENT(_minor), \
        .calls_1_18                = ((_minor) <= 18), \
        .attr_no_gva               = ((_minor) <= 17), \
        .config_no_doc             = ((_minor) <= 16), \
        .refuse_in_completion      = ((_minor) <= 18), \
        .rma_lane_needs_bcopy      = ((_minor) <= 15), \
        .rma_memh_unset            = ((_minor) <= 15), \
        .major                     = 1, \
        .minor                     = _minor, \
        .has_symbol                = _has, \
        .lacks_symbol              = _lacks, \
        .internal_ops_size         = \
                sizeof(span_ucx_1_##_ops_minor##_internal_ops_t), \
        .md_ops_size               = _md_ops_size, \
        .md_attr_v2_size           = \
                ((_minor) <= 13) ? sizeof(uct_md_attr_t) : \
                ((_minor) <= 14) ? SPAN_UCX_1_14_MD_ATTR_V2_SIZE : \
                ((_minor) == 15) ? SPAN_UCX_1_15_MD_ATTR_V2_SIZE : \
                ((_minor) <= 17) ? SPAN_UCX_1_17_MD_ATTR_V2_SIZE : \
                                   SPAN_UCX_1_19_MD_ATTR_V2_SIZE, \
        .query_v2_slot             = -1, \
        .put_sgl_slot              = -1, \
        .get_sgl_slot              = -1 \
    }

static const span_ucx_layout_t span_ucx_layouts[] = {
#ifndef SPAN_UCX_TEST_FOREIGN
    SPAN_UCX_LAYOUT_NO_SGL(13, 13, "uct_md_mkey_pack_v2", "uct_md_query_v2",
                           sizeof(span_ucx_1_13_md_ops_t)),
    SPAN_UCX_LAYOUT_NO_SGL(14, 14, "uct_md_query_v2", "uct_sm_rkey_ptr",
                           sizeof(span_ucx_1_15_md_ops_t)),
    SPAN_UCX_LAYOUT_NO_SGL(15, 15, "uct_sm_rkey_ptr", "uct_rkey_compare",
                           sizeof(span_ucx_1_15_md_ops_t)),
    SPAN_UCX_LAYOUT_NO_SGL(16, 19, "uct_rkey_compare", "uct_md_base_md_query",
                           SPAN_UCX_1_19_MD_OPS_SIZE),
    SPAN_UCX_LAYOUT_NO_SGL(17, 19, "uct_md_base_md_query",
                           "uct_iface_fill_info_str_buf",
                           SPAN_UCX_1_19_MD_OPS_SIZE),
    SPAN_UCX_LAYOUT_NO_SGL(18, 19, "uct_iface_fill_info_str_buf",
                           "uct_rkey_unpack_v2", SPAN_UCX_1_19_MD_OPS_SIZE),
    SPAN_UCX_LAYOUT_NO_SGL(19, 19, "uct_rkey_unpack_v2",
                           "uct_ep_get_device_ep", SPAN_UCX_1_19_MD_OPS_SIZE),
    SPAN_UCX_LAYOUT_NO_SGL(20, 20, "uct_iface_mem_element_pack",
                           "uct_md_mem_elem_pack", SPAN_UCX_1_19_MD_OPS_SIZE),
    SPAN_UCX_LAYOUT_NO_SGL(21, 21, "uct_md_mem_elem_pack",
                           "uct_ep_put_sgl_zcopy", SPAN_UCX_1_21_MD_OPS_SIZE),
    SPAN_UCX_LAYOUT_SGL(22, "uct_ep_put_sgl_zcopy", "uct_md_mem_elem_release",
                        SPAN_UCX_1_21_MD_OPS_SIZE, -1, 1,
                        SPAN_UCX_1_22_ATTR_FIELD_MAX_PUT_SGL,
                        SPAN_UCX_1_22_ATTR_FIELD_CAP_FLAGS,
                        SPAN_UCX_1_22_FLAG_V2_PUT_SGL_ZCOPY),
    SPAN_UCX_LAYOUT_SGL(23, "uct_md_mem_elem_release", NULL,
                        sizeof(uct_md_ops_t),
                        ucs_offsetof(span_ucx_1_23_internal_ops_t,
                                     ep_get_sgl_zcopy) / sizeof(void*),
                        2, SPAN_UCX_1_23_ATTR_FIELD_MAX_PUT_SGL |
                        SPAN_UCX_1_23_ATTR_FIELD_MAX_GET_SGL,
                        SPAN_UCX_1_23_ATTR_FIELD_CAP_FLAGS,
                        SPAN_UCX_1_23_FLAG_V2_PUT_SGL_ZCOPY |
                        SPAN_UCX_1_23_FLAG_V2_GET_SGL_ZCOPY)
#else
    /* the refusal test's build: a release no UCX here is */
    SPAN_UCX_LAYOUT_NO_SGL(22, 21, "span_no_such_symbol", NULL,
                           SPAN_UCX_1_21_MD_OPS_SIZE)
#endif
};

#ifdef SPAN_UCX_TEST_FOREIGN
#  define SPAN_UCX_MINOR_OF(_layout) 99u
#else
#  define SPAN_UCX_MINOR_OF(_layout) ((_layout)->minor)
#endif

const span_ucx_layout_t *span_ucx;

#ifdef __SANITIZE_ADDRESS__
/* UCX's headers check list links through this libucs call in ASan builds
 * (UCS_ASAN_ADDRESS_IS_VALID); UCX 1.16 and 1.17 have none. A no-op where
 * libucs lacks it: where it has one, libucs, loaded first, provides it. */
void __attribute__((weak))
ucs_debug_asan_validate_address(const char *ptr_name, void *address,
                                size_t size)
{
}
#endif

typedef void (*span_ucx_get_version_func_t)(unsigned*, unsigned*, unsigned*);

static size_t span_ucx_dir_len(const char *path)
{
    const char *slash = strrchr(path, '/');

    return (slash == NULL) ? 0 : (size_t)(slash - path);
}

/* ucp_get_version of a libucp loaded from the directory of libuct (its
 * path): the same installation, whatever its file is called (auditwheel
 * renames it); NULL where none is loaded. Opened after the iteration that
 * lists the loaded objects (span_dl_loaded.h) */
static span_ucx_get_version_func_t span_ucx_find_ucp(const char *libuct)
{
    size_t dir_len                          = span_ucx_dir_len(libuct);
    span_ucx_get_version_func_t get_version = NULL;
    char **names = span_dl_loaded(), **name;
    void *dl;

    if (names == NULL) {
        return NULL;
    }
    for (name = names; (*name != NULL) && (get_version == NULL); ++name) {
        if ((span_ucx_dir_len(*name) != dir_len) ||
            strncmp(*name, libuct, dir_len) ||
            strncmp(*name + dir_len, "/libucp", 7) ||
            ((dl = dlopen(*name, RTLD_LAZY | RTLD_NOLOAD)) == NULL)) {
            continue;
        }
        get_version = (span_ucx_get_version_func_t)dlsym(dl,
                                                         "ucp_get_version");
        dlclose(dl);
    }
    free(names);
    return get_version;
}

static int span_ucx_has(void *libuct, const char *symbol)
{
    return (symbol != NULL) && (dlsym(libuct, symbol) != NULL);
}

static int span_ucx_layout_fits(const span_ucx_layout_t *layout, void *libuct)
{
    return span_ucx_has(libuct, layout->has_symbol) &&
           !span_ucx_has(libuct, layout->lacks_symbol);
}

static const span_ucx_layout_t *span_ucx_layout_find(unsigned major,
                                                     unsigned minor)
{
    const span_ucx_layout_t *layout;

    ucs_carray_for_each(layout, span_ucx_layouts,
                        ucs_static_array_size(span_ucx_layouts)) {
        if ((layout->major == major) && (SPAN_UCX_MINOR_OF(layout) == minor)) {
            return layout;
        }
    }
    return NULL;
}

static void span_ucx_supported(char *buf, size_t max)
{
    const span_ucx_layout_t *layout;
    size_t len = 0;

    buf[0] = '\0';
    ucs_carray_for_each(layout, span_ucx_layouts,
                        ucs_static_array_size(span_ucx_layouts)) {
        len += snprintf(buf + len, max - ucs_min(len, max), "%s%u.%u",
                        (len == 0) ? "" : " and ", layout->major,
                        SPAN_UCX_MINOR_OF(layout));
    }
}

/* Without a libucp (a UCT-only program) the symbols alone tell the release */
static ucs_status_t span_ucx_select_by_symbols(void *libuct,
                                               const char *supported,
                                               const char *libuct_path)
{
    const span_ucx_layout_t *layout;

    ucs_carray_for_each(layout, span_ucx_layouts,
                        ucs_static_array_size(span_ucx_layouts)) {
        if (span_ucx_layout_fits(layout, libuct)) {
            span_ucx = layout;
            return UCS_OK;
        }
    }
    ucs_warn("span ucx: libuct_span supports UCX %s, but %s matches none of "
             "them and the process has no libucp to tell its version; it "
             "does not register", supported, libuct_path);
    return UCS_ERR_UNSUPPORTED;
}

ucs_status_t span_ucx_select(void)
{
    span_ucx_get_version_func_t get_version;
    const span_ucx_layout_t *layout;
    unsigned major, minor, release;
    char supported[128];
    ucs_status_t status;
    Dl_info info;
    void *libuct;

    span_ucx_supported(supported, sizeof(supported));
    if (!dladdr((void*)uct_md_open, &info) || (info.dli_fname == NULL) ||
        ((libuct = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD)) == NULL)) {
        ucs_warn("span ucx: cannot find the libuct this process uses; "
                 "libuct_span (UCX %s) does not register", supported);
        return UCS_ERR_UNSUPPORTED;
    }

    get_version = span_ucx_find_ucp(info.dli_fname);
    if (get_version == NULL) {
        status = span_ucx_select_by_symbols(libuct, supported, info.dli_fname);
        goto out;
    }

    get_version(&major, &minor, &release);
    layout = span_ucx_layout_find(major, minor);
    if (layout == NULL) {
        ucs_warn("span ucx: libuct_span supports UCX %s but is loaded into UCX "
                 "%u.%u.%u; it does not register", supported, major, minor,
                 release);
        status = UCS_ERR_UNSUPPORTED;
    } else if (!span_ucx_layout_fits(layout, libuct)) {
        ucs_warn("span ucx: UCX %u.%u.%u (%s) lacks '%s' or has '%s', unlike "
                 "every %u.%u; libuct_span does not register rather than "
                 "guess its layout", major, minor, release, info.dli_fname,
                 layout->has_symbol,
                 (layout->lacks_symbol != NULL) ? layout->lacks_symbol : "-",
                 major, minor);
        status = UCS_ERR_UNSUPPORTED;
    } else {
        span_ucx = layout;
        status   = UCS_OK;
    }

out:
    dlclose(libuct);
    if (status == UCS_OK) {
        ucs_debug("span ucx: UCX %u.%u layout selected (libuct %s)",
                  span_ucx->major, span_ucx->minor, info.dli_fname);
    }
    return status;
}

static int span_ucx_is_code(const void *func)
{
    Dl_info info;

    return (func != NULL) && dladdr(func, &info) && (info.dli_fbase != NULL);
}

int span_ucx_component_check(const uct_component_t *component)
{
    const ucs_list_link_t *tls = span_ucx_component_tls(component);

    return (memchr(component->name, '\0', sizeof(component->name)) != NULL) &&
           span_ucx_is_code((void*)component->query_md_resources) &&
           span_ucx_is_code((void*)component->md_open) &&
           span_ucx_is_code((void*)component->rkey_unpack) &&
           (tls->next->prev == tls);
}

/* The entry's leading fields, which every release lays out alike */
#define SPAN_UCX_ENTRY_COPY(_out, _in) \
    do { \
        (_out).name   = (_in).name; \
        (_out).prefix = (_in).prefix; \
        (_out).table  = (_in).table; \
        (_out).size   = (_in).size; \
    } while (0)

/* The fields of a component of 1.15 or 1.14 (same names, other entries) */
#define SPAN_UCX_COMPONENT_COPY(_out, _in) \
    do { \
        memcpy((_out).name, (_in).name, sizeof((_out).name)); \
        (_out).query_md_resources = (void*)(_in).query_md_resources; \
        (_out).md_open            = (void*)(_in).md_open; \
        (_out).cm_open            = (void*)(_in).cm_open; \
        (_out).rkey_unpack        = (void*)(_in).rkey_unpack; \
        (_out).rkey_ptr           = (void*)(_in).rkey_ptr; \
        (_out).rkey_release       = (void*)(_in).rkey_release; \
        SPAN_UCX_ENTRY_COPY((_out).md_config, (_in).md_config); \
        SPAN_UCX_ENTRY_COPY((_out).cm_config, (_in).cm_config); \
        (_out).flags              = (_in).flags; \
        (_out).md_vfs_init        = (void*)(_in).md_vfs_init; \
    } while (0)

void span_ucx_component_fit(uct_component_t *component)
{
    const uct_component_t c16 = *component;
    span_ucx_1_15_component_t c15;
    span_ucx_1_14_component_t c14;

    if (span_ucx->component_size == sizeof(c16)) {
        return;
    }
    memset(component, 0, sizeof(*component));
    if (span_ucx->component_size == sizeof(c15)) {
        memset(&c15, 0, sizeof(c15));
        SPAN_UCX_COMPONENT_COPY(c15, c16);
        memcpy(component, &c15, sizeof(c15));
    } else {
        memset(&c14, 0, sizeof(c14));
        SPAN_UCX_COMPONENT_COPY(c14, c16);
        memcpy(component, &c14, sizeof(c14));
    }
    ucs_list_head_init(span_ucx_component_tls(component));
}

static int span_ucx_is_component(const uct_component_t *component)
{
    const uct_component_t *c;

    span_ucx_components_for_each(c) {
        if (c == component) {
            return 1;
        }
    }
    return 0;
}

/* The md an iface records is the one it was opened on, or, for a transport
 * that wraps another (the strict test transport), an MD of another
 * registered component: either way an MD of a component UCX knows */
int span_ucx_iface_check(uct_iface_h iface, uct_md_h md, uct_worker_h worker)
{
    static int warned;
    const span_ucx_base_iface_t *base = (const span_ucx_base_iface_t*)iface;
    void *const *internal_ops         = base->internal_ops;

    if ((base->worker == worker) && (base->md != NULL) &&
        ((base->md == md) || span_ucx_is_component(base->md->component)) &&
        (internal_ops != NULL) &&
        span_ucx_is_code(internal_ops[SPAN_UCX_INTERNAL_FIRST])) {
        return 1;
    }

    if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED)) {
        ucs_warn("span iface %p: UCX %u.%u does not lay it out as span "
                 "reads it (md %p, opened on %p; worker %p, expected %p); "
                 "twins of this transport are not offered", iface,
                 span_ucx->major, span_ucx->minor, base->md, md, base->worker,
                 worker);
    }
    return 0;
}
