/*
 * The span component: discovers the transports of the other components,
 * offers a twin of each MD that has a transport with a twin, and unpacks span
 * rkeys.
 */
#include "span_component.h"
#include "span_tl.h"
#include "span_loader.h"
#include "span_md.h"
#include "span_rkey.h"
#include "span_spill.h"

#include <ucs/sys/string.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct span_global_config {
    ucs_config_allow_list_t transports;
} span_global_config_t;

static ucs_config_field_t span_global_config_table[] = {
    {"TRANSPORTS", "all",
     "Transports that get a twin named <transport>+, selected with UCX_TLS.\n"
     "'all', a comma-separated list of inner transport names (e.g. cma,self),\n"
     "or '^' followed by a list of those that get none. A transport whose\n"
     "name has 9 characters never gets one (UCX caps names at 9).",
     ucs_offsetof(span_global_config_t, transports),
     UCS_CONFIG_TYPE_ALLOW_LIST},

    {NULL}
};

static ucs_config_global_list_entry_t span_global_config_entry = {
    .name   = "Span transports",
    .prefix = "SPAN_",
    .table  = span_global_config_table,
    .size   = sizeof(span_global_config_t),
};

static pthread_once_t span_twins_once = PTHREAD_ONCE_INIT;

static int span_transport_allowed(const ucs_config_allow_list_t *allow,
                                  const char *name)
{
    int found;

    if (allow->mode == UCS_CONFIG_ALLOW_LIST_ALLOW_ALL) {
        return 1;
    }

    found = ucs_config_names_search(&allow->array, name) >= 0;
    return (allow->mode == UCS_CONFIG_ALLOW_LIST_ALLOW) == found;
}

/* Runs once, after UCX loaded every module: the inner components are known */
static void span_twins_init(void)
{
    span_global_config_t config;
    uct_component_t *component;
    uct_tl_t *tl;

    if (ucs_config_parser_fill_opts(&config, &span_global_config_entry,
                                    UCS_DEFAULT_ENV_PREFIX, 0) != UCS_OK) {
        ucs_error("span: cannot read UCX_SPAN_TRANSPORTS; no twins are offered");
        return;
    }

    ucs_list_for_each(component, &uct_components_list, list) {
        if (component == &span_component) {
            continue;
        }

        ucs_list_for_each(tl, &component->tl_list, list) {
            if (span_transport_allowed(&config.transports, tl->name)) {
                (void)span_tl_add(component, tl);
            }
        }
    }

    ucs_config_parser_release_opts(&config, span_global_config_table);
}

static int span_component_has_twins(const uct_component_t *inner)
{
    const uct_tl_t *tl;

    ucs_list_for_each(tl, &span_component.tl_list, list) {
        if (span_tl_inner_component(tl) == inner) {
            return 1;
        }
    }
    return 0;
}

static ucs_status_t span_md_resources_append(uct_component_t *inner,
                                             uct_md_resource_desc_t **res_p,
                                             unsigned *count_p)
{
    uct_md_resource_desc_t *inner_res, *res;
    unsigned i, inner_count;
    ucs_status_t status;

    status = inner->query_md_resources(inner, &inner_res, &inner_count);
    if (status != UCS_OK) {
        ucs_debug("span: component %s has no MD resources: %s", inner->name,
                  ucs_status_string(status));
        return UCS_OK;
    }

    res = ucs_realloc(*res_p, sizeof(*res) * (*count_p + inner_count),
                      "span_md_resources");
    if (res == NULL) {
        status = UCS_ERR_NO_MEMORY;
        goto out;
    }

    *res_p = res;
    for (i = 0; i < inner_count; ++i) {
        if (strlen(inner_res[i].md_name) + strlen(SPAN_TWIN_SUFFIX) >=
            UCT_MD_NAME_MAX) {
            ucs_debug("span: MD '%s' gets no twin: its name is too long",
                      inner_res[i].md_name);
            continue;
        }

        ucs_snprintf_zero(res[*count_p].md_name, UCT_MD_NAME_MAX, "%s%s",
                          inner_res[i].md_name, SPAN_TWIN_SUFFIX);
        ++(*count_p);
    }

out:
    ucs_free(inner_res);
    return status;
}

static ucs_status_t
span_query_md_resources(uct_component_t *component,
                        uct_md_resource_desc_t **resources_p,
                        unsigned *num_resources_p)
{
    uct_md_resource_desc_t *resources = NULL;
    unsigned count                    = 0;
    uct_component_t *inner;
    ucs_status_t status;

    pthread_once(&span_twins_once, span_twins_init);

    ucs_list_for_each(inner, &uct_components_list, list) {
        if ((inner == &span_component) || !span_component_has_twins(inner)) {
            continue;
        }

        status = span_md_resources_append(inner, &resources, &count);
        if (status != UCS_OK) {
            ucs_free(resources);
            return status;
        }
    }

    *resources_p     = resources;
    *num_resources_p = count;
    return UCS_OK;
}

static ucs_status_t span_component_md_open(uct_component_t *component,
                                           const char *md_name,
                                           const uct_md_config_t *config,
                                           uct_md_h *md_p)
{
    pthread_once(&span_twins_once, span_twins_init);
    return span_md_open(component, md_name, config, md_p);
}

uct_component_t *span_component_find_inner(uint32_t component_id)
{
    uct_component_t *component;

    ucs_list_for_each(component, &uct_components_list, list) {
        if ((component != &span_component) &&
            (span_rkey_component_id(component->name) == component_id)) {
            return component;
        }
    }
    return NULL;
}

void span_rkey_log_crossing(const span_rkey_t *rkey, uint64_t addr,
                            size_t length, uint64_t avail)
{
    ucs_error("span: remote access [0x%" PRIx64 ", +%zu) crosses a chunk "
              "or unit end %" PRIu64 " bytes in (rkey %p, chunks of %" PRIu64
              ", units of %" PRIu64 "); only zcopy ops are split", addr,
              length, avail, rkey, rkey->geom.chunk_size,
              rkey->geom.unit_size);
}

static void span_rkey_release_inner(span_rkey_t *rkey, uint32_t count)
{
    while (rkey->inner_unpacked && (count-- > 0)) {
        rkey->inner_component->rkey_release(rkey->inner_component,
                                            rkey->inner[count].rkey,
                                            rkey->inner[count].handle);
    }
}

/* Unpacks the inner key of every chunk; an empty inner key once, shared */
static ucs_status_t span_rkey_unpack_inner(span_rkey_t *rkey,
                                           const span_rkey_desc_t *desc,
                                           const uint8_t *keys,
                                           const uct_rkey_unpack_params_t *params)
{
    ucs_status_t status;
    uint32_t i;

    for (i = 0; i < rkey->num_inner; ++i) {
        status = rkey->inner_component->rkey_unpack(rkey->inner_component,
                                                    keys +
                                                    (i * desc->key_size),
                                                    params,
                                                    &rkey->inner[i].rkey,
                                                    &rkey->inner[i].handle);
        if ((status == UCS_ERR_UNSUPPORTED) && (desc->key_size == 0)) {
            /* nothing to unpack (self) */
            rkey->inner[i].rkey = UCT_INVALID_RKEY;
            return UCS_OK;
        } else if (status == UCS_ERR_UNREACHABLE) {
            /* the inner transport cannot reach this memory (cuda_ipc and a
             * handle type it cannot import): UCP takes another lane */
            ucs_debug("span: %s cannot reach the memory of chunk %u/%u",
                      rkey->inner_component->name, i + 1, rkey->num_inner);
            span_rkey_release_inner(rkey, i);
            return status;
        } else if (status != UCS_OK) {
            ucs_error("span: %s failed to unpack the %zu-byte inner key of "
                      "chunk %u/%u: %s", rkey->inner_component->name,
                      desc->key_size, i + 1, rkey->num_inner,
                      ucs_status_string(status));
            span_rkey_release_inner(rkey, i);
            return status;
        }
        rkey->inner_unpacked = 1;
    }
    return UCS_OK;
}

/* The keys of every chunk, contiguous: rebuilt from the rkey, or read from
 * the exporter's spill arena where they did not fit in it */
static ucs_status_t span_rkey_keys(const span_rkey_desc_t *desc, uint32_t n,
                                   uint8_t **keys_p)
{
    uint8_t *keys = malloc(((size_t)n * desc->key_size) + 1);
    ucs_status_t status = UCS_OK;
    uint32_t i;

    if (keys == NULL) {
        ucs_error("span: no memory for %u keys of %zu bytes", n,
                  desc->key_size);
        return UCS_ERR_NO_MEMORY;
    }
    if (desc->spilled) {
        status = span_spill_fetch(&desc->spill, n, desc->key_size, keys);
    } else {
        for (i = 0; (desc->key_size > 0) && (i < n); ++i) {
            span_rkey_key(desc, i, keys + (i * desc->key_size));
        }
    }
    if (status != UCS_OK) {
        free(keys);
        return status;
    }
    *keys_p = keys;
    return UCS_OK;
}

static ucs_status_t span_rkey_unpack(uct_component_t *component,
                                     const void *buffer,
                                     const uct_rkey_unpack_params_t *params,
                                     uct_rkey_t *rkey_p, void **handle_p)
{
    uct_component_t *inner_component;
    span_rkey_desc_t desc;
    span_rkey_t *rkey;
    uint32_t num_inner;
    ucs_status_t status;
    uint8_t *keys;

    status = span_rkey_parse_peer(buffer, &desc);
    if (status != UCS_OK) {
        return status;
    }

    inner_component = span_component_find_inner(desc.component_id);
    if (inner_component == NULL) {
        ucs_error("span rkey %p: inner component id 0x%x is not loaded in "
                  "this process (does the peer use a transport this one "
                  "lacks?)", buffer, desc.component_id);
        return UCS_ERR_UNREACHABLE;
    }

    num_inner = (desc.key_size == 0) ? 1 : desc.geom.num_chunks;
    rkey      = calloc(1, sizeof(*rkey) + (num_inner * sizeof(rkey->inner[0])));
    if (rkey == NULL) {
        ucs_error("span rkey %p: no memory for %u inner keys", buffer,
                  num_inner);
        return UCS_ERR_NO_MEMORY;
    }

    rkey->geom            = desc.geom;
    rkey->inner_component = inner_component;
    rkey->num_inner       = num_inner;
    status                = span_rkey_keys(&desc, num_inner, &keys);
    if (status != UCS_OK) {
        free(rkey);
        return status;
    }
    if (desc.span_vmm) {
        status = span_cuda_vmm_import(keys, desc.key_size, &desc.geom,
                                      &rkey->vmm);
        rkey->vmm_mapped = (status == UCS_OK);
    } else {
        status = span_rkey_unpack_inner(rkey, &desc, keys, params);
    }
    free(keys);
    if (status != UCS_OK) {
        free(rkey);
        return status;
    }

    *rkey_p   = (uintptr_t)rkey;
    *handle_p = NULL;
    return UCS_OK;
}

static ucs_status_t span_rkey_release(uct_component_t *component,
                                      uct_rkey_t rkey, void *handle)
{
    span_rkey_t *srkey = (span_rkey_t*)rkey;

    if (srkey->vmm_mapped) {
        span_cuda_vmm_unmap(&srkey->vmm);
    }
    span_rkey_release_inner(srkey, srkey->num_inner);
    free(srkey);
    return UCS_OK;
}

static ucs_status_t span_rkey_ptr(uct_component_t *component, uct_rkey_t rkey,
                                  void *handle, uint64_t remote_addr,
                                  void **local_addr_p)
{
    span_rkey_t *srkey = (span_rkey_t*)rkey;
    uint32_t index     = 0;
    ucs_status_t status;
    uint64_t avail;

    if (srkey->vmm_mapped) {
        /* the mapping is device memory: UCP copies it with its zcopy ops */
        return UCS_ERR_UNSUPPORTED;
    }

    /* UCP tries every MD and stops at UCS_ERR_INVALID_ADDR: the extent is
     * checked only where the inner component can map the address at all */
    if ((remote_addr - srkey->geom.base) < srkey->geom.length) {
        index = span_chunk_find(&srkey->geom, remote_addr, &avail);
        index = (srkey->num_inner == 1) ? 0 : index;
    }
    status = srkey->inner_component->rkey_ptr(srkey->inner_component,
                                              srkey->inner[index].rkey,
                                              srkey->inner[index].handle,
                                              remote_addr, local_addr_p);
    if ((status == UCS_OK) && !span_rkey_check(srkey, remote_addr, 0)) {
        return UCS_ERR_INVALID_ADDR;
    }
    return status;
}

static int span_rkey_cmp_u64(uint64_t a, uint64_t b)
{
    return (a > b) - (a < b);
}

static ucs_status_t span_rkey_compare(uct_component_t *component,
                                      uct_rkey_t rkey1, uct_rkey_t rkey2,
                                      const uct_rkey_compare_params_t *params,
                                      int *result)
{
    const span_rkey_t *a = (const span_rkey_t*)rkey1;
    const span_rkey_t *b = (const span_rkey_t*)rkey2;
    ucs_status_t status;
    uint32_t i;

    if ((params->field_mask != 0) || (result == NULL)) {
        return UCS_ERR_INVALID_PARAM;
    }

    *result = span_rkey_cmp_u64((uintptr_t)a->inner_component,
                                (uintptr_t)b->inner_component);
    if (*result == 0) {
        *result = span_rkey_cmp_u64(a->geom.base, b->geom.base);
    }
    if (*result == 0) {
        *result = span_rkey_cmp_u64(a->geom.length, b->geom.length);
    }
    if (*result == 0) {
        *result = span_rkey_cmp_u64(a->num_inner, b->num_inner);
    }
    if (*result == 0) {
        *result = span_rkey_cmp_u64(a->vmm_mapped, b->vmm_mapped);
    }
    if ((*result == 0) && a->vmm_mapped) {
        /* no inner rkeys: the exporter and its units tell the memory */
        *result = span_cuda_vmm_compare(&a->vmm, &b->vmm);
    }
    for (i = 0; (*result == 0) && a->inner_unpacked && (i < a->num_inner);
         ++i) {
        status = a->inner_component->rkey_compare(a->inner_component,
                                                  a->inner[i].rkey,
                                                  b->inner[i].rkey, params,
                                                  result);
        if (status != UCS_OK) {
            return status;
        }
    }
    return UCS_OK;
}

static ucs_status_t span_cm_open(uct_component_t *component,
                                 uct_worker_h worker,
                                 const uct_cm_config_t *config, uct_cm_h *cm_p)
{
    return UCS_ERR_UNSUPPORTED;
}

static void span_md_vfs_init(uct_md_h md)
{
}

uct_component_t span_component = {
    .name               = "span",
    .query_md_resources = span_query_md_resources,
    .md_open            = span_component_md_open,
    .cm_open            = span_cm_open,
    .rkey_unpack        = span_rkey_unpack,
    .rkey_ptr           = span_rkey_ptr,
    .rkey_release       = span_rkey_release,
    .rkey_compare       = span_rkey_compare,
    .md_config          = {
        .name   = "Span memory domain",
        .prefix = "SPAN_",
        .table  = span_md_config_table,
        .size   = sizeof(span_md_config_t),
    },
    .cm_config          = {
        .name   = "",
        .prefix = "",
        .table  = NULL,
        .size   = 0,
    },
    .tl_list            = UCS_LIST_INITIALIZER(&span_component.tl_list,
                                               &span_component.tl_list),
    .flags              = 0,
    .md_vfs_init        = span_md_vfs_init
};

static int span_component_registered;

/* Every component already registered must read as one before span walks
 * them all: a layout span got wrong is found here, not in a crash later */
static ucs_status_t span_components_check(void)
{
    uct_component_t *component;

    ucs_list_for_each(component, &uct_components_list, list) {
        if (!span_ucx_component_check(component)) {
            ucs_warn("span: component %p of UCX %u.%u is not laid out as "
                     "span reads it; libuct_span does not register",
                     component, span_ucx->major, span_ucx->minor);
            return UCS_ERR_UNSUPPORTED;
        }
    }
    return UCS_OK;
}

/*
 * The structures declared in ucx/span_ucx.h change between UCX minor
 * releases: in a release span has no layout for, or one whose layout does
 * not check out, the component stays unregistered rather than read them
 * wrong. The loader (span_loader.c) calls this once UCX's symbols resolve.
 */
ucs_status_t __attribute__((visibility("protected")))
span_impl_global_init(void)
{
    if ((span_ucx_select() != UCS_OK) || (span_components_check() != UCS_OK)) {
        return UCS_ERR_UNSUPPORTED;
    }

    uct_component_register(&span_component);
    ucs_list_add_tail(&ucs_config_global_list, &span_global_config_entry.list);
    span_component_registered = 1;
    return UCS_OK;
}

static void UCS_F_DTOR span_component_cleanup(void)
{
    if (!span_component_registered) {
        return;
    }

    span_tl_remove_all();
    ucs_list_del(&span_global_config_entry.list);
    uct_component_unregister(&span_component);
    ucs_list_del(&span_component.list);
}
