/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The unpacked span rkey: what uct_rkey_t points to for a twin, built from
 * a peer's packed rkey (span_rkey.c), and the span component's rkey ops.
 */
#include "span_rkey_unpack.h"
#include "span_rkey_sizes.h"
#include "span_spill.h"
#include "vmm/span_vmm_cache.h"
#include "vendor/span_vendor.h"
#include "resolve/span_rocm.h"

#include <stdlib.h>
#include <string.h>

/* Whether the rkey's access path is span's mapping of VMM units, which
 * replaces the inner keys (a legacy IPC handle's does not) */
static int span_rkey_units(const span_rkey_t *rkey)
{
    return (rkey->vmm != NULL) && !rkey->vmm->ipc;
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
        status = span_ucx_rkey_unpack(rkey->inner_component,
                                      keys + (i * desc->key_size), params,
                                      &rkey->inner[i].rkey,
                                      &rkey->inner[i].handle);
        if ((status == UCS_ERR_UNSUPPORTED) && (desc->key_size == 0)) {
            /* nothing to unpack (self) */
            rkey->inner[i].rkey = UCT_INVALID_RKEY;
            return UCS_OK;
        } else if (status == UCS_ERR_UNREACHABLE) {
            /* the inner transport cannot reach this memory (cuda_ipc and a
             * handle type it cannot import): UCP takes another lane */
            ucs_debug("span rkey %p: %s cannot reach the memory of chunk "
                      "%u/%u", rkey, rkey->inner_component->name, i + 1,
                      rkey->num_inner);
            span_rkey_release_inner(rkey, i);
            return status;
        } else if (status != UCS_OK) {
            ucs_error("span rkey %p: %s failed to unpack the %zu-byte inner "
                      "key of chunk %u/%u: %s", rkey,
                      rkey->inner_component->name,
                      desc->key_size, i + 1, rkey->num_inner,
                      ucs_status_string(status));
            span_rkey_release_inner(rkey, i);
            return status;
        }
        rkey->inner_unpacked = 1;
    }
    return UCS_OK;
}

/* Maps the units span exported (span_vmm.h) as the rkey's access path, or
 * shares the mapping another rkey of them made; the units of a ROCm twin
 * are HIP's to map */
static ucs_status_t span_rkey_vmm_map(span_rkey_t *rkey,
                                      const span_rkey_desc_t *desc,
                                      uint8_t *keys)
{
    if (!strcmp(rkey->inner_component->name, SPAN_ROCM_IPC_COMPONENT)) {
        span_vmm_keys_mark((span_vmm_key_t*)keys, desc->geom.num_chunks,
                           SPAN_ROCM_VMM_MAGIC);
    }
    return span_vmm_cache_get((const span_vmm_key_t*)keys,
                              &desc->geom, &rkey->vmm);
}

/* The cache of legacy IPC handles where the rkey's one inner key is
 * cuda_ipc's (span_ipc_cache.h), else NULL */
static const span_ipc_cache_ops_t *
span_rkey_ipc_cache(const span_rkey_t *rkey, const span_rkey_desc_t *desc)
{
    return ((rkey->num_inner == 1) && (desc->key_size > 0) &&
            !strcmp(rkey->inner_component->name, SPAN_CUDA_IPC_COMPONENT)) ?
           span_vendor_ipc_cache() : NULL;
}

/* Unpacks the inner keys, and where one is cuda_ipc's key of cudaMalloc
 * memory, opens its handle as the access path of span's engine; ops go
 * through the inner key where it cannot be opened */
static ucs_status_t span_rkey_unpack_keys(span_rkey_t *rkey,
                                          const span_rkey_desc_t *desc,
                                          const uint8_t *keys,
                                          const uct_rkey_unpack_params_t *params)
{
    const span_ipc_cache_ops_t *ipc = span_rkey_ipc_cache(rkey, desc);
    size_t offset                   = span_ucx_cuda_ipc_handle_offset();
    ucs_status_t status;

    if (ipc != NULL) {
        ipc->prepare(keys, desc->key_size, offset, &desc->geom);
    }
    status = span_rkey_unpack_inner(rkey, desc, keys, params);
    if ((status == UCS_OK) && (ipc != NULL) &&
        (ipc->get(keys, desc->key_size, offset, &desc->geom, &rkey->vmm) !=
         UCS_OK)) {
        rkey->vmm = NULL;
    }
    return status;
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
        ucs_error("span rkey: no memory for %u keys of %zu bytes", n,
                  desc->key_size);
        return UCS_ERR_NO_MEMORY;
    }
    if (desc->spilled) {
        status = span_spill_fetch(&desc->spill, n, desc->key_size, keys);
    } else if (desc->span_vmm) {
        status = span_rkey_vmm_keys(desc, (span_vmm_key_t*)keys);
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

/* The inner component whose name hashes to component_id: any component
 * but the span one, which the rkey ops are of */
static uct_component_t *span_rkey_inner_component(uct_component_t *span,
                                                  uint32_t component_id)
{
    uct_component_t *component;

    span_ucx_components_for_each(component) {
        if ((component != span) &&
            (span_rkey_component_id(component->name) == component_id)) {
            return component;
        }
    }
    return NULL;
}

ucs_status_t span_rkey_unpack(uct_component_t *component,
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

    inner_component = span_rkey_inner_component(component, desc.component_id);
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

    rkey->inner_component = inner_component;
    rkey->num_inner       = num_inner;
    status                = span_rkey_keys(&desc, num_inner, &keys);
    if (status != UCS_OK) {
        free(rkey);
        return status;
    }
    if (desc.span_vmm) {
        status = span_rkey_vmm_map(rkey, &desc, keys);
    } else {
        status = span_rkey_unpack_keys(rkey, &desc, keys, params);
    }
    free(keys);
    if (status != UCS_OK) {
        free(rkey);
        return status;
    }

    span_rkey_init(rkey, &desc);
    *rkey_p   = (uintptr_t)rkey;
    *handle_p = NULL;
    return UCS_OK;
}

ucs_status_t span_rkey_unpack_1_18(uct_component_t *component,
                                   const void *buffer, uct_rkey_t *rkey_p,
                                   void **handle_p)
{
    const uct_rkey_unpack_params_t params = {.field_mask = 0};

    return span_rkey_unpack(component, buffer, &params, rkey_p, handle_p);
}

ucs_status_t span_rkey_release(uct_component_t *component,
                               uct_rkey_t rkey, void *handle)
{
    span_rkey_t *srkey = (span_rkey_t*)rkey;

    if (span_rkey_is_none(rkey)) {
        return UCS_OK; /* nothing was unpacked */
    }
    if ((srkey->vmm != NULL) && srkey->vmm->ipc) {
        span_vendor_ipc_cache()->put(srkey->vmm);
    } else if (srkey->vmm != NULL) {
        span_vmm_cache_put(srkey->vmm);
    }
    span_rkey_release_inner(srkey, srkey->num_inner);
    free(srkey);
    return UCS_OK;
}

ucs_status_t span_rkey_ptr(uct_component_t *component, uct_rkey_t rkey,
                           void *handle, uint64_t remote_addr,
                           void **local_addr_p)
{
    span_rkey_t *srkey = (span_rkey_t*)rkey;
    uint32_t index     = 0;
    ucs_status_t status;
    uint64_t avail;

    if (span_rkey_is_none(rkey)) {
        ucs_error("span rkey 0x%lx: names no registration: no address of "
                  "0x%" PRIx64 " is mapped through it", (unsigned long)rkey,
                  remote_addr);
        return UCS_ERR_INVALID_PARAM;
    }
    if (span_rkey_units(srkey)) {
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

ucs_status_t span_rkey_compare(uct_component_t *component,
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
    if (span_rkey_is_none(rkey1) || span_rkey_is_none(rkey2)) {
        *result = span_rkey_cmp_u64(rkey1, rkey2); /* no key is only itself */
        return UCS_OK;
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
        *result = span_rkey_cmp_u64(a->win_base, b->win_base);
    }
    if (*result == 0) {
        *result = span_rkey_cmp_u64(a->win_length, b->win_length);
    }
    if (*result == 0) {
        *result = span_rkey_cmp_u64(a->num_inner, b->num_inner);
    }
    if (*result == 0) {
        *result = span_rkey_cmp_u64(span_rkey_units(a), span_rkey_units(b));
    }
    if ((*result == 0) && span_rkey_units(a)) {
        /* no inner rkeys: the exporter and its units tell the memory */
        *result = span_vmm_compare(a->vmm, b->vmm);
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
