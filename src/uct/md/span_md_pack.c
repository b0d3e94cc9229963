/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Twin MD key packing: the span rkey of a registration, sealed once when it
 * is registered, with its keys inline, spilled, or span's own VMM exports;
 * and keys for the handles the inner MD made for others (span_md_pack.h).
 */
#include "span_md_pack.h"
#include "key/span_spill.h"
#include "vmm/span_vmm.h"

#include <stdlib.h>
#include <string.h>

/* Inline where the keys fit (and spilling is not forced), else spilled */
static ucs_status_t span_md_pack(span_md_t *smd, span_memh_t *memh,
                                 span_rkey_desc_t *desc, const uint8_t *keys,
                                 size_t *rkey_size_p)
{
    uint32_t n = memh->geom.num_chunks;
    ucs_status_t status;

    if ((smd->spill != UCS_YES) || (desc->key_size == 0)) {
        status = span_rkey_pack(memh->rkey, smd->rkey_packed_size, desc,
                                keys, rkey_size_p);
        if ((status != UCS_ERR_EXCEEDS_LIMIT) || (smd->spill == UCS_NO)) {
            goto out;
        }
    }

    status = span_spill_put(keys, n, desc->key_size, &desc->spill);
    if (status != UCS_OK) {
        goto out;
    }
    desc->spilled = 1;
    status        = span_rkey_pack(memh->rkey, smd->rkey_packed_size, desc,
                                   keys, rkey_size_p);
    if (status != UCS_OK) {
        span_spill_remove(&desc->spill);
        goto out;
    }
    memh->spilled = 1;
    memh->spill   = desc->spill;
out:
    if (status == UCS_ERR_EXCEEDS_LIMIT) {
        ucs_error("span md %p: the %u inner keys of %zu bytes of [0x%" PRIx64
                  ", +%" PRIu64 ") do not fit in a span rkey and cannot "
                  "spill (UCX_SPAN_SPILL=n, or the inner transport reaches "
                  "other nodes, where a spill cannot be read)", smd, n,
                  desc->key_size, memh->geom.base, memh->geom.length);
    }
    return status;
}

/* Device memory that cuda_ipc packed as "no IPC" in every chunk: span may
 * export its units itself (span_vmm.h) */
static int span_md_vmm_needs_export(span_md_t *smd, const span_memh_t *memh,
                                    ucs_memory_type_t mtype,
                                    const uint8_t *keys)
{
    size_t K = smd->inner_attr.rkey_packed_size;
    uint32_t type, i;

    if ((mtype != UCS_MEMORY_TYPE_CUDA) || (smd->device == NULL) ||
        span_ucx->attr_no_gva ||
        strcmp(smd->inner_component->name, SPAN_CUDA_IPC_COMPONENT) ||
        (K < sizeof(type))) {
        return 0;
    }
    for (i = 0; i < memh->geom.num_chunks; ++i) {
        memcpy(&type, keys + (i * K), sizeof(type));
        if (type != SPAN_CUDA_IPC_KEY_NO_IPC) {
            return 0;
        }
    }
    return 1;
}

static void span_md_vmm_unexport(span_memh_t *memh, uint32_t count)
{
    while (count-- > 0) {
        span_vmm_export_put(memh->vmm_exports[count]);
    }
    free(memh->vmm_exports);
    memh->vmm_exports = NULL;
}

/* Span's own keys of the units, exported or sharing the export another
 * registration made (span_vmm_export.h), into *keys_p; at most one
 * driver round trip per unit. UCS_ERR_UNSUPPORTED where a unit cannot be
 * shared. */
static ucs_status_t span_md_vmm_export(span_md_t *smd, span_memh_t *memh,
                                       span_vmm_key_t **keys_p)
{
    uint32_t n = memh->geom.num_chunks;
    uint64_t start, length;
    span_vmm_key_t *keys;
    ucs_status_t status;
    uint32_t i;

    memh->vmm_exports = calloc(n, sizeof(*memh->vmm_exports));
    keys              = calloc(n, sizeof(*keys));
    if ((memh->vmm_exports == NULL) || (keys == NULL)) {
        ucs_error("span md %p: no memory for the exports of %u units", smd,
                  n);
        free(keys);
        span_md_vmm_unexport(memh, 0);
        return UCS_ERR_NO_MEMORY;
    }
    for (i = 0; i < n; ++i) {
        span_chunk_range(&memh->geom, i, &start, &length);
        status = span_vmm_export_get(&smd->vmm_export_ops, start, length,
                                     &keys[i], &memh->vmm_exports[i]);
        if (status != UCS_OK) {
            span_md_vmm_unexport(memh, i);
            free(keys);
            return status;
        }
    }
    ucs_debug("span md %p: %s cannot export the %u VMM units of [0x%"
              PRIx64 ", +%" PRIu64 "): span exports them", smd,
              smd->inner_component->name, n, memh->geom.base,
              memh->geom.length);
    *keys_p = keys;
    return UCS_OK;
}

/* Withdraws what a sealed handle published beside its key: the spilled
 * keys and the exported units */
void span_memh_unpublish(span_memh_t *memh)
{
    if (memh->spilled) {
        span_spill_remove(&memh->spill);
    }
    if (memh->vmm_exports != NULL) {
        span_md_vmm_unexport(memh, memh->geom.num_chunks);
    }
}

/* The span rkey of units span exports, in place of cuda_ipc's keys */
static ucs_status_t span_md_vmm_pack(span_md_t *smd, span_memh_t *memh,
                                     span_rkey_desc_t *desc,
                                     size_t *rkey_size_p)
{
    span_vmm_key_t *keys;
    ucs_status_t status;

    status = span_md_vmm_export(smd, memh, &keys);
    if (status != UCS_OK) {
        return status;
    }
    desc->span_vmm = 1;
    desc->key_size = sizeof(*keys);
    status         = span_md_pack(smd, memh, desc, (const uint8_t*)keys,
                                  rkey_size_p);
    free(keys);
    if (status != UCS_OK) {
        span_md_vmm_unexport(memh, memh->geom.num_chunks);
    }
    return status;
}

/* Packs the inner key of every chunk and the span rkey, once: a region
 * whose keys do not fit is refused here, not at transfer time */
ucs_status_t span_memh_seal(span_md_t *smd, span_memh_t *memh,
                                   ucs_memory_type_t mtype)
{
    size_t K = smd->inner_attr.rkey_packed_size;
    uct_md_mkey_pack_params_t params = {.field_mask = 0};
    span_rkey_desc_t desc = {.component_id = smd->inner_id,
                             .geom         = memh->geom,
                             .win_base     = memh->win_base,
                             .win_length   = memh->win_length,
                             .key_size     = K};
    uint64_t start, length;
    ucs_status_t status;
    size_t rkey_size;
    uint8_t *keys;
    uint32_t i;

    if ((K > 0) && (memh->num_inner == 0)) {
        ucs_error("span md %p: [0x%" PRIx64 ", +%" PRIu64 ") has no inner "
                  "registration to pack a key for", smd, memh->geom.base,
                  memh->geom.length);
        return UCS_ERR_INVALID_PARAM;
    }

    keys = malloc((K * memh->geom.num_chunks) + 1);
    if (keys == NULL) {
        ucs_error("span md %p: no memory to pack %u keys of %zu bytes", smd,
                  memh->geom.num_chunks, K);
        return UCS_ERR_NO_MEMORY;
    }
    for (i = 0; (K > 0) && (i < memh->geom.num_chunks); ++i) {
        span_chunk_range(&memh->geom, i, &start, &length);
        status = span_ucx_mkey_pack(smd->inner_ops, smd->inner,
                                    memh->inner[i], (void*)(uintptr_t)start,
                                    length, &params, keys + (i * K));
        if (status != UCS_OK) {
            ucs_error("span md %p: inner mkey pack of chunk %u [0x%" PRIx64
                      ", +%" PRIu64 ") failed: %s", smd, i, start, length,
                      ucs_status_string(status));
            goto out;
        }
    }

    status = UCS_ERR_UNSUPPORTED;
    if (span_md_vmm_needs_export(smd, memh, mtype, keys)) {
        status = span_md_vmm_pack(smd, memh, &desc, &rkey_size);
    }
    if (status == UCS_ERR_UNSUPPORTED) {
        /* memory that cannot be shared keeps cuda_ipc's keys: UCP stages */
        status = span_md_pack(smd, memh, &desc, keys, &rkey_size);
    }
    memh->rkey_size = rkey_size;
out:
    free(keys);
    return status;
}

/* The span rkey of units the inner MD registers none of, which span
 * exports itself (span_md_rocm_exports) */
ucs_status_t span_memh_seal_exported(span_md_t *smd, span_memh_t *memh)
{
    span_rkey_desc_t desc = {.component_id = smd->inner_id,
                             .geom         = memh->geom,
                             .win_base     = memh->win_base,
                             .win_length   = memh->win_length};
    ucs_status_t status;
    size_t rkey_size;

    status = span_md_vmm_pack(smd, memh, &desc, &rkey_size);
    if (status == UCS_OK) {
        memh->rkey_size = rkey_size;
    } else if (status == UCS_ERR_UNSUPPORTED) {
        ucs_error("span md %p: the VMM units of [0x%" PRIx64 ", +%" PRIu64
                  ") cannot be exported, and %s registers no VMM memory", smd,
                  memh->geom.base, memh->geom.length,
                  smd->inner_component->name);
    }
    return status;
}

/* The extent a key for a handle the inner MD made for others covers: what
 * the inner MD registered under it, or where it packs no key (and
 * registers nothing), what the owner declares; the range the caller names,
 * where it does, must lie inside */
static ucs_status_t span_md_inner_extent(span_md_t *smd, uct_mem_h memh,
                                         void *address, size_t length,
                                         span_chunk_geom_t *geom)
{
    int keyless     = (smd->inner_attr.rkey_packed_size == 0);
    int declared    = (address != NULL) && (length != SIZE_MAX) &&
                      (length != 0);
    uint64_t base   = (uintptr_t)address;
    uint64_t extent = length;

    if ((keyless && !declared) ||
        (!keyless && ((smd->inner_wrap == NULL) ||
                      (span_md_inner_find(smd->inner_wrap, memh, &base,
                                          &extent) != UCS_OK))) ||
        (declared && (((uintptr_t)address < base) ||
                      (length > extent - ((uintptr_t)address - base))))) {
        ucs_error("span md %p (%s+): memh %p of [%p, +%zu) was registered "
                  "neither by this twin MD nor by its inner MD (for "
                  "uct_iface_mem_alloc() on a twin iface)%s", smd,
                  smd->inner_component->name, memh, address, length,
                  keyless ? ", and the inner MD registers nothing: pass the "
                  "address and length to uct_md_mkey_pack_v2()" : "");
        return UCS_ERR_INVALID_PARAM;
    }
    return span_chunk_plan(geom, base, extent, 0, 0, 0);
}

/* A span rkey of one chunk for a handle of the inner MD */
static ucs_status_t span_md_pack_inner(span_md_t *smd, uct_mem_h memh,
                                       void *address, size_t length,
                                       void *buffer)
{
    size_t K = smd->inner_attr.rkey_packed_size;
    uct_md_mkey_pack_params_t params = {.field_mask = 0};
    span_rkey_desc_t desc = {.component_id = smd->inner_id, .key_size = K};
    uint8_t key[UINT8_MAX]; /* span_md_open refuses larger inner keys */
    ucs_status_t status;
    size_t size;

    status = span_md_inner_extent(smd, memh, address, length, &desc.geom);
    if (status != UCS_OK) {
        return status;
    }
    if (K > 0) {
        status = span_ucx_mkey_pack(smd->inner_ops, smd->inner, memh,
                                    (void*)(uintptr_t)desc.geom.base,
                                    desc.geom.length, &params, key);
        if (status != UCS_OK) {
            ucs_error("span md %p: inner mkey pack of memh %p failed: %s",
                      smd, memh, ucs_status_string(status));
            return status;
        }
    }
    if ((address != NULL) && (length != SIZE_MAX) && (length != 0)) {
        desc.win_base   = (uintptr_t)address;
        desc.win_length = length;
    }
    status = span_rkey_pack(buffer, smd->rkey_packed_size, &desc, key,
                            &size);
    if (status == UCS_OK) {
        memset(UCS_PTR_BYTE_OFFSET(buffer, size), 0,
               smd->rkey_packed_size - size);
    } else if (status == UCS_ERR_EXCEEDS_LIMIT) {
        /* nothing would hold a spill slot of a handle that is not span's */
        ucs_error("span md %p: the %zu-byte key of inner memh %p does not "
                  "fit in a span rkey inline", smd, K, memh);
    }
    return status;
}

/* A request for exactly one unit of device memory is what UCP 1.22 makes of
 * a buffer over several VMM handles (span_md_vmm_widen): it names the
 * units from it on, as far as a registration of it would be widened */
static int span_md_pack_widens(const span_md_t *smd, const span_memh_t *smem,
                               uint64_t start, uint64_t length,
                               uint64_t *length_p)
{
    const span_chunk_geom_t *geom = &smem->geom;
    uint64_t end                  = geom->base + geom->length;

    if ((smd->widen.max_bytes == 0) || (smem->entry.identity == 0) ||
        (geom->unit_size == 0) ||
        (((start - geom->unit_origin) % geom->unit_size) != 0) ||
        (length != ucs_min(geom->unit_size, end - start))) {
        return 0;
    }
    *length_p = ucs_min(end - start, smd->widen.max_bytes);
    *length_p = ucs_min(*length_p,
                        (uint64_t)smd->widen.max_units * geom->unit_size);
    return 1;
}

/*
 * The range a key serves. A registration covers whole units and chunks
 * (device memory: the physical units under the request, span_md_extent),
 * and every request inside them shares it; UCP packs a key per memh of its
 * own, for the range it registered, which is the only one the key serves.
 * A range the caller does not name, or names outside the registration (no
 * range of its own), is the one the registration was made for.
 */
static void span_md_pack_range(const span_md_t *smd, const span_memh_t *smem,
                               void *address, size_t length,
                               uint64_t *base_p, uint64_t *length_p)
{
    uint64_t start = (uintptr_t)address;

    *base_p   = smem->win_base;
    *length_p = smem->win_length;
    if ((address == NULL) || (length == 0) || (length == SIZE_MAX) ||
        (start < smem->geom.base) ||
        (start - smem->geom.base >= smem->geom.length) ||
        (length > smem->geom.length - (start - smem->geom.base))) {
        return;
    }
    *base_p = start;
    if (!span_md_pack_widens(smd, smem, start, length, length_p)) {
        *length_p = length;
    }
}

ucs_status_t
span_md_mkey_pack(uct_md_h md, uct_mem_h memh, void *address, size_t length,
                  const uct_md_mkey_pack_params_t *params, void *buffer)
{
    span_md_t *smd    = (span_md_t*)md;
    span_memh_t *smem = memh;
    uint64_t base, range;

    /* a key that may be invalidated is asked as UCX's MDs that cannot
     * invalidate take it (the twin advertises no UCT_MD_FLAG_INVALIDATE_*):
     * packed as any other; an exported key is another object, refused */
    if ((params->field_mask & UCT_MD_MKEY_PACK_FIELD_FLAGS) &&
        (params->flags & UCT_MD_MKEY_PACK_FLAG_EXPORT)) {
        ucs_error("span md %p: mkey pack flags 0x%x: exported keys are not "
                  "supported", md, params->flags);
        return UCS_ERR_UNSUPPORTED;
    }

    /* a handle the inner MD made for others is known by its value alone;
     * only then is memh read as a twin's */
    if (((smd->inner_wrap != NULL) &&
         span_md_inner_find(smd->inner_wrap, memh, NULL, NULL) == UCS_OK) ||
        !span_memh_is_ours(memh)) {
        return span_md_pack_inner(smd, memh, address, length, buffer);
    }

    if ((smem->entry.owner != NULL) && !span_registry_valid(&smem->entry)) {
        ucs_error("span md %p: the memory of registration [0x%" PRIx64 ", +%"
                  PRIu64 ") was unmapped since: no key is packed for it", md,
                  smem->geom.base, smem->geom.length);
        return UCS_ERR_INVALID_ADDR;
    }
    /* UCP sends all of rkey_packed_size, from a buffer it does not clear */
    memcpy(buffer, smem->rkey, smem->rkey_size);
    memset(UCS_PTR_BYTE_OFFSET(buffer, smem->rkey_size), 0,
           smd->rkey_packed_size - smem->rkey_size);
    span_md_pack_range(smd, smem, address, length, &base, &range);
    if ((base == smem->win_base) && (range == smem->win_length)) {
        return UCS_OK;
    }
    return span_rkey_set_window(buffer, smem->rkey_size, base, range);
}

ucs_status_t span_md_mkey_pack_1_15(uct_md_h md, uct_mem_h memh,
                                    const uct_md_mkey_pack_params_t *params,
                                    void *buffer)
{
    return span_md_mkey_pack(md, memh, NULL, SIZE_MAX, params, buffer);
}
