/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Twin memory domain: opening and closing, its ops table, and the ops it
 * passes to the inner MD. What it reports and its limits are in
 * span_md_query.c, registration in span_md_reg.c, key packing in
 * span_md_pack.c.
 */
#include "span_md_open.h"
#include "span_md_config.h"
#include "span_md_events.h"
#include "span_md_pack.h"
#include "span_md_query.h"
#include "span_md_reg.h"
#include "span_md_rocm.h"
#include "key/span_rkey_sizes.h"
#include "vmm/span_vmm_cache.h"
#include "vendor/span_vendor.h"
#include "resolve/span_verbs.h"

#include <stdlib.h>
#include <ucs/sys/string.h>
#include <string.h>

static ucs_status_t
span_md_mem_query(uct_md_h md, const void *address, size_t length,
                  uct_md_mem_attr_v2_t *mem_attr)
{
    span_md_t *smd = (span_md_t*)md;

    return smd->inner_ops->mem_query(smd->inner, address, length, mem_attr);
}

static ucs_status_t
span_md_detect_memory_type(uct_md_h md, const void *address, size_t length,
                           ucs_memory_type_t *mem_type_p)
{
    span_md_t *smd = (span_md_t*)md;

    return span_ucx_detect_memory_type(smd->inner_ops, smd->inner, address,
                                       length, mem_type_p);
}

static ucs_status_t span_md_mem_advise(uct_md_h md, uct_mem_h memh,
                                       void *addr, size_t length,
                                       unsigned advice)
{
    return UCS_ERR_UNSUPPORTED;
}

/* UCX 1.15 and earlier: a twin has no connection manager, as UCX's own
 * MDs without one answer */
static int span_md_is_sockaddr_accessible(uct_md_h md, const void *sockaddr,
                                          int mode)
{
    return 0;
}

static ucs_status_t span_md_mem_attach(uct_md_h md, const void *mkey_buffer,
                                       uct_md_mem_attach_params_t *params,
                                       uct_mem_h *memh_p)
{
    return UCS_ERR_UNSUPPORTED;
}

/* Device-initiated ops would reach the inner memory past span's checks.
 * UCX 1.22 calls this with the first four arguments only. */
static ucs_status_t span_md_mem_elem_pack(uct_md_h md, uct_mem_h memh,
                                          uct_rkey_t rkey,
                                          uct_device_mem_elem_t *mem_elem_p,
                                          void **release_handle_p)
{
    return UCS_ERR_UNSUPPORTED;
}

static void span_md_close(uct_md_h md)
{
    span_md_t *smd = (span_md_t*)md;

    span_registry_purge(smd); /* its stats too */
    ucs_info("span md %p (%s+): %" PRIu64 " registrations of %" PRIu64
             " chunks, %" PRIu64 " shared hits, %" PRIu64 " invalidations",
             smd, smd->inner_component->name, smd->stats.registrations,
             smd->stats.chunks, smd->stats.hits, smd->stats.invalidations);
    if (smd->share) {
        span_md_events_unsubscribe();
    }
    span_rkey_size_remove(smd->inner_id, smd->inner_attr.rkey_packed_size);
    if (smd->device != NULL) {
        /* while the driver is still there: the process may be ending */
        span_vmm_cache_purge();
        if (span_vendor_ipc_cache() != NULL) {
            span_vendor_ipc_cache()->purge();
        }
    }
    uct_md_close(smd->inner);
    if (smd->inner_wrap != NULL) {
        span_md_inner_free(smd->inner_wrap);
    }
    free(smd);
}

/* The twin MD's ops; _mem_alloc as the UCX in the process calls it */
#define SPAN_MD_OPS(_mem_alloc) \
    { \
        .close              = span_md_close, \
        .query              = span_md_query, \
        .mem_alloc          = _mem_alloc, \
        .mem_free           = span_md_mem_free, \
        .mem_advise         = span_md_mem_advise, \
        .mem_reg            = span_md_mem_reg, \
        .mem_dereg          = span_md_mem_dereg, \
        .mem_query          = span_md_mem_query, \
        .mkey_pack          = span_md_mkey_pack, \
        .mem_attach         = span_md_mem_attach, \
        .detect_memory_type = span_md_detect_memory_type, \
        .mem_elem_pack      = span_md_mem_elem_pack \
    }

static const uct_md_ops_t span_md_ops = SPAN_MD_OPS(span_md_mem_alloc);

/* UCX 1.18 and earlier: mem_alloc takes no sys_dev */
static const uct_md_ops_t span_md_ops_1_18 =
        SPAN_MD_OPS((void*)span_md_mem_alloc_1_18);

/* UCX 1.14 and 1.15: 1.18's calls, mkey_pack without a range, and
 * is_sockaddr_accessible before detect_memory_type */
static const span_ucx_1_15_md_ops_t span_md_ops_1_15 = {
    .close                  = (void*)span_md_close,
    .query                  = (void*)span_md_query,
    .mem_alloc              = (void*)span_md_mem_alloc_1_18,
    .mem_free               = (void*)span_md_mem_free,
    .mem_advise             = (void*)span_md_mem_advise,
    .mem_reg                = (void*)span_md_mem_reg,
    .mem_dereg              = (void*)span_md_mem_dereg,
    .mem_query              = (void*)span_md_mem_query,
    .mkey_pack              = (void*)span_md_mkey_pack_1_15,
    .mem_attach             = (void*)span_md_mem_attach,
    .is_sockaddr_accessible = (void*)span_md_is_sockaddr_accessible,
    .detect_memory_type     = (void*)span_md_detect_memory_type
};

/* UCX 1.13: 1.15's but for query, which writes uct_md_attr_t
 * (span_md_query: span_ucx_md_attr_export), mem_reg, which takes flags,
 * and no mem_attach */
static const span_ucx_1_13_md_ops_t span_md_ops_1_13 = {
    .close                  = (void*)span_md_close,
    .query                  = (void*)span_md_query,
    .mem_alloc              = (void*)span_md_mem_alloc_1_18,
    .mem_free               = (void*)span_md_mem_free,
    .mem_advise             = (void*)span_md_mem_advise,
    .mem_reg                = (void*)span_md_mem_reg_1_13,
    .mem_dereg              = (void*)span_md_mem_dereg,
    .mem_query              = (void*)span_md_mem_query,
    .mkey_pack              = (void*)span_md_mkey_pack_1_15,
    .is_sockaddr_accessible = (void*)span_md_is_sockaddr_accessible,
    .detect_memory_type     = (void*)span_md_detect_memory_type
};

/* The twin MD's ops, as the UCX in the process lays them out */
static uct_md_ops_t *span_md_ops_select(void)
{
    if (span_ucx->mem_reg_flags) {
        return (uct_md_ops_t*)&span_md_ops_1_13;
    }
    if (span_ucx->pack_no_range) {
        return (uct_md_ops_t*)&span_md_ops_1_15;
    }
    return (uct_md_ops_t*)(span_ucx->calls_1_18 ? &span_md_ops_1_18 :
                           &span_md_ops);
}

/* Finds the component, other than span's, that offers an MD named
 * inner_name */
static uct_component_t *span_md_find_inner_component(uct_component_t *span,
                                                     const char *inner_name)
{
    uct_md_resource_desc_t *resources;
    uct_component_t *component;
    unsigned i, count;
    int found;

    span_ucx_components_for_each(component) {
        if ((component == span) ||
            (component->query_md_resources(component, &resources, &count) !=
             UCS_OK)) {
            continue;
        }

        found = 0;
        for (i = 0; i < count; ++i) {
            found |= !strcmp(resources[i].md_name, inner_name);
        }
        ucs_free(resources);
        if (found) {
            return component;
        }
    }

    return NULL;
}

/* The inner MD, with the inner fields of the twin's configuration, or
 * where it has none, the inner component's own from the environment */
static ucs_status_t span_md_open_inner(span_md_t *smd, const char *inner_name,
                                       const uct_md_config_t *twin_config)
{
    const uct_md_config_t *inner = span_md_config_inner(twin_config,
                                                        smd->inner_component);
    uct_md_config_t *config;
    ucs_status_t status;

    if (inner != NULL) {
        return uct_md_open(smd->inner_component, inner_name, inner,
                           &smd->inner);
    }

    status = uct_md_config_read(smd->inner_component, NULL, NULL, &config);
    if (status != UCS_OK) {
        return status;
    }

    status = uct_md_open(smd->inner_component, inner_name, config, &smd->inner);
    uct_config_release(config);
    return status;
}

ucs_status_t span_md_open(uct_component_t *component, const char *md_name,
                          const uct_md_config_t *config, uct_md_h *md_p)
{
    char inner_name[UCT_MD_NAME_MAX];
    size_t name_len = strlen(md_name);
    span_md_t *smd;
    ucs_status_t status;

    if ((name_len < 2) || (name_len > sizeof(inner_name)) ||
        strcmp(md_name + name_len - 1, SPAN_TWIN_SUFFIX)) {
        ucs_error("span md '%s': is not the name of a twin MD", md_name);
        return UCS_ERR_NO_DEVICE;
    }
    ucs_strncpy_zero(inner_name, md_name, name_len);

    smd = calloc(1, sizeof(*smd));
    if (smd == NULL) {
        ucs_error("span md '%s': no memory for the twin MD (%zu bytes)",
                  md_name, sizeof(*smd));
        return UCS_ERR_NO_MEMORY;
    }

    smd->super.ops       = span_md_ops_select();
    smd->super.component = component;
    smd->inner_component = span_md_find_inner_component(component,
                                                        inner_name);
    if (smd->inner_component == NULL) {
        ucs_error("span md '%s': no component offers the MD '%s'", md_name,
                  inner_name);
        status = UCS_ERR_NO_DEVICE;
        goto err_free;
    }

    smd->inner_id = span_rkey_component_id(smd->inner_component->name);
    status        = span_md_open_inner(smd, inner_name, config);
    if (status != UCS_OK) {
        ucs_debug("span md '%s': failed to open inner MD '%s': %s", md_name,
                  inner_name, ucs_status_string(status));
        goto err_free;
    }

    smd->inner_attr.field_mask = UINT64_MAX;
    status = span_ucx_md_query(smd->inner, &smd->inner_attr);
    if (status != UCS_OK) {
        ucs_error("span md '%s': failed to query inner MD '%s': %s", md_name,
                  inner_name, ucs_status_string(status));
        goto err_close;
    }

    /* a key larger than a span rkey holds inline (UCX 1.18's cuda_ipc packs
     * 200 bytes) always spills: where it cannot, no twin */
    smd->spill = span_md_spill_mode(smd,
                                    ((const span_md_config_t*)config)->spill);
    if ((smd->inner_attr.rkey_packed_size > UINT8_MAX) ||
        ((smd->inner_attr.rkey_packed_size > SPAN_RKEY_MAX_KEY) &&
         (smd->spill == UCS_NO))) {
        ucs_diag("span md '%s': MD '%s' packs %zu-byte rkeys, more than the "
                 "%d bytes a span rkey can hold inline, and its keys cannot "
                 "spill (UCX_SPAN_SPILL=n, or it reaches other nodes); '%s' "
                 "is not offered", md_name, inner_name,
                 smd->inner_attr.rkey_packed_size, SPAN_RKEY_MAX_KEY, md_name);
        status = UCS_ERR_UNSUPPORTED;
        goto err_close;
    }

    smd->inner_ops = smd->inner->ops;
    if (smd->inner_attr.rkey_packed_size > 0) {
        /* without it, only the twin's own handles are packed */
        (void)span_md_inner_wrap(smd->inner, &smd->inner_wrap,
                                 &smd->inner_ops);
    }

    /* UCX's ib MD reports no limit; its device has one */
    if (!strcmp(smd->inner_component->name, "ib")) {
        smd->inner_attr.max_reg = span_verbs_md_max_reg(span_verbs_library(),
                                                        inner_name,
                                                        smd->inner_attr.max_reg);
    }

    status = span_md_limits(smd, (const span_md_config_t*)config);
    if (status != UCS_OK) {
        goto err_close;
    }

    if (smd->inner_attr.reg_mem_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) {
        smd->device = span_vendor_driver(UCS_MEMORY_TYPE_CUDA);
        if (smd->device == NULL) {
            ucs_diag("span md '%s': no CUDA driver to resolve allocations: "
                     "device memory is registered as given", md_name);
        } else {
            smd->dev_mem_type   = UCS_MEMORY_TYPE_CUDA;
            smd->vmm_export_ops =
                    *span_vendor(UCS_MEMORY_TYPE_CUDA)->vmm_export;
        }
    }
    span_md_rocm_init(smd, md_name);

    smd->rkey_packed_size = span_md_rkey_packed_size(smd);
    status = span_rkey_size_add(smd->inner_id,
                                smd->inner_attr.rkey_packed_size);
    if (status != UCS_OK) {
        goto err_close;
    }
    smd->share = (span_md_events_subscribe(smd) == UCS_OK);

    *md_p = &smd->super;
    return UCS_OK;

err_close:
    uct_md_close(smd->inner);
    if (smd->inner_wrap != NULL) {
        span_md_inner_free(smd->inner_wrap);
    }
err_free:
    free(smd);
    return status;
}
