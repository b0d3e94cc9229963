/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Twin MD registration: a request's extent (for device memory the physical
 * units under it), the registry that shares registrations, and the inner
 * registrations of its chunks (span_md_reg.h).
 */
#include "span_md_reg.h"
#include "span_md_pack.h"
#include "span_md_rocm.h"

#include <stdlib.h>
#include <string.h>

/* Memory types whose registration the twin can publish in a span rkey */
uint64_t span_md_reg_mem_types(const span_md_t *smd)
{
    uint64_t types = (smd->inner_attr.flags & UCT_MD_FLAG_REG) ?
                     smd->inner_attr.reg_mem_types : 0;

    /* Where the inner MD needs no rkey, a registration is only recorded, so
     * that every remote access can be checked against it. */
    if (smd->inner_attr.rkey_packed_size == 0) {
        types |= smd->inner_attr.access_mem_types;
    }
    return types;
}

static int span_md_inner_registers(const span_md_t *smd,
                                   ucs_memory_type_t mem_type)
{
    return (smd->inner_attr.flags & UCT_MD_FLAG_REG) &&
           (smd->inner_attr.reg_mem_types & UCS_BIT(mem_type));
}

static span_memh_t *span_memh_alloc(uint32_t num_inner)
{
    span_memh_t *memh;

    /* inner[0] is there, NULL, where there is no inner handle: a memh of
     * at most one is read with no branch (span_memh_inner) */
    memh = calloc(1, sizeof(*memh) +
                     (ucs_max(num_inner, 1) * sizeof(uct_mem_h)));
    if (memh != NULL) {
        memh->magic     = SPAN_MEMH_MAGIC;
        memh->num_inner = num_inner;
    }
    return memh;
}

static ucs_status_t span_md_chunk_reg(span_md_t *smd, span_memh_t *memh,
                                      uint32_t index,
                                      const uct_md_mem_reg_params_t *params)
{
    uint64_t start, length;
    ucs_status_t status;

    span_chunk_range(&memh->geom, index, &start, &length);
    if (index + 1 == smd->test_fail_reg) {
        status = UCS_ERR_NO_MEMORY;
    } else {
        status = span_ucx_mem_reg(smd->inner_ops, smd->inner,
                                  (void*)(uintptr_t)start, length, params,
                                  &memh->inner[index]);
    }
    if (status != UCS_OK) {
        ucs_error("span md %p: inner registration of chunk %u/%u [0x%" PRIx64
                  ", +%" PRIu64 ") failed%s: %s", smd, index + 1,
                  memh->geom.num_chunks, start, length,
                  (index + 1 == smd->test_fail_reg) ? " (injected)" : "",
                  ucs_status_string(status));
    }
    return status;
}

/* Releases chunks [0, count), all of them whatever fails; the first error */
static ucs_status_t span_md_chunks_dereg(span_md_t *smd, span_memh_t *memh,
                                         uint32_t count)
{
    uct_md_mem_dereg_params_t params = {.field_mask = UCT_MD_MEM_DEREG_FIELD_MEMH};
    ucs_status_t first = UCS_OK, status;
    uint32_t i;

    for (i = count; i-- > 0;) {
        params.memh = memh->inner[i];
        status      = smd->inner_ops->mem_dereg(smd->inner, &params);
        if ((status == UCS_OK) && (i + 1 == smd->test_fail_dereg)) {
            status = UCS_ERR_IO_ERROR;
        }
        if (status != UCS_OK) {
            ucs_error("span md %p: inner deregistration of chunk %u/%u of "
                      "[0x%" PRIx64 ", +%" PRIu64 ") failed: %s", smd, i + 1,
                      memh->geom.num_chunks, memh->geom.base,
                      memh->geom.length, ucs_status_string(status));
            first = (first == UCS_OK) ? status : first;
        }
    }
    return first;
}

/* What a request registers: its own range, or for device memory the whole
 * physical units under it (docs/design.md §1.2: an inner transport never
 * sees an interior pointer, and every buffer inside a unit shares its
 * registration) */
typedef struct span_md_extent {
    uint64_t base;
    uint64_t length;
    uint64_t unit_origin;
    uint64_t unit_size;
    uint64_t identity;   /* 0 for host memory */
    uint64_t win_base;   /* the range registered: the request's, or what */
    uint64_t win_length; /* span widened it to */
} span_md_extent_t;

/* A request for exactly one VMM handle is what UCP makes of a buffer over
 * several with its defaults (span_device_widen): the registration covers the
 * handles mapped after it, so that ops past the first one are served */
static int span_md_vmm_widen(span_md_t *smd, void *address, size_t length,
                             span_device_extent_t *cuda)
{
    return (smd->widen.max_bytes != 0) && (cuda->num_units == 1) &&
           ((uintptr_t)address == cuda->base) && (length == cuda->length) &&
           (span_device_widen(smd->device, cuda, &smd->widen) > 0);
}

static ucs_status_t span_md_extent(span_md_t *smd, void *address,
                                   size_t length, ucs_memory_type_t mtype,
                                   span_md_extent_t *ext)
{
    span_device_extent_t cuda;
    ucs_status_t status;

    ext->win_base   = (uintptr_t)address;
    ext->win_length = length;
    if ((mtype != smd->dev_mem_type) || (smd->device == NULL) ||
        span_md_rocm_unknown(smd, mtype, address)) {
        ext->base        = (uintptr_t)address;
        ext->length      = length;
        ext->unit_origin = 0;
        ext->unit_size   = smd->unit_size;
        ext->identity    = 0;
        return UCS_OK;
    }

    status = span_device_resolve(smd->device, (uintptr_t)address, length,
                                 &cuda);
    if (status != UCS_OK) {
        ucs_error("span md %p: cannot resolve the device memory of %p +%zu: "
                  "%s", smd, address, length, ucs_status_string(status));
        return status;
    }
    /* a request may end past its last allocation (the resolver says why):
     * it registers, as natively, what is there */
    ext->win_length = span_md_vmm_widen(smd, address, length, &cuda) ?
                      cuda.length :
                      span_device_covered(&cuda, ext->win_base, length);
    ext->base        = cuda.base;
    ext->length      = cuda.length;
    ext->unit_origin = cuda.base;
    ext->unit_size   = cuda.unit_size;
    ext->identity    = cuda.identity;
    ucs_trace("span md %p: %p +%zu lies in %u units from 0x%" PRIx64 " +%"
              PRIu64, smd, address, length, cuda.num_units, cuda.base,
              cuda.length);
    return UCS_OK;
}

/*
 * What a registration made with these flags allows, as the registry
 * compares them (a request is served by a registration that allows all it
 * asks for): the access and pinning flags, and NONBLOCK inverted, because a
 * registration whose pages are mapped only on access does not serve a
 * request that wants them mapped now.
 */
#define SPAN_MD_CAP_FLAGS  (UCT_MD_MEM_ACCESS_ALL | UCT_MD_MEM_FLAG_LOCK | \
                            UCT_MD_MEM_SYMMETRIC_RKEY | UCT_MD_MEM_GVA)
#define SPAN_MD_CAP_MAPPED UCT_MD_MEM_FLAG_NONBLOCK /* a bit free in caps */

static unsigned span_md_reg_caps(const uct_md_mem_reg_params_t *params)
{
    unsigned flags = (params->field_mask & UCT_MD_MEM_REG_FIELD_FLAGS) ?
                     params->flags : 0;

    return (flags & SPAN_MD_CAP_FLAGS) |
           ((flags & UCT_MD_MEM_FLAG_NONBLOCK) ? 0 : SPAN_MD_CAP_MAPPED);
}

/* Memory known by identity is never matched after it was allocated again,
 * even where its free event was missed */
static int span_md_may_share(const span_md_t *smd, const span_md_extent_t *ext)
{
    return smd->share || (ext->identity != 0);
}

/* Releases what a registration holds, its last user gone */
static ucs_status_t span_memh_teardown(span_md_t *smd, span_memh_t *memh)
{
    ucs_status_t status;

    span_memh_unpublish(memh);
    status = span_md_chunks_dereg(smd, memh, memh->num_inner);
    free(memh->entry.units);
    free(memh);
    return status;
}

/*
 * Two caches sit on top of the inner MD: UCP's registration cache, which may
 * keep a twin handle registered after the application unmapped its buffer
 * (lazy deregistration), and this MD's registry, which hands one handle to
 * every request for the same range. Both subscribe to UCM's unmap events and
 * each forgets its own entries: UCP stops matching its region and
 * deregisters the handle when it gets to it; the registry stops matching
 * the handle at once, so a request for a new buffer at the old address
 * registers anew even while UCP still holds the stale handle, and packing a
 * key for a stale handle is refused.
 */
static span_memh_t *span_md_registry_find(span_md_t *smd,
                                          const span_md_extent_t *ext,
                                          ucs_memory_type_t mtype,
                                          unsigned caps)
{
    span_registry_entry_t *entry;

    if (!span_md_may_share(smd, ext)) {
        return NULL;
    }
    entry = span_registry_find(smd, ext->base, ext->length, mtype,
                               ext->identity, caps);
    if (entry == NULL) {
        return NULL;
    }
    __atomic_add_fetch(&smd->stats.hits, 1, __ATOMIC_RELAXED);
    return ucs_container_of(entry, span_memh_t, entry);
}

static int span_md_unit_holds(const void *owner, uint64_t addr, uint64_t id)
{
    const span_md_t *smd = owner;
    uint64_t now;

    return (smd->device->buffer_id(addr, &now) == UCS_OK) && (now == id);
}

/* A buffer inside a device unit registered already (a tensor of a caching
 * allocator's block, or of one VMM handle of a segment) is served without
 * walking the allocation: one driver call checks that the memory there is
 * still the unit that was registered. */
static span_memh_t *span_md_registry_find_within(span_md_t *smd,
                                                 void *address, size_t length,
                                                 ucs_memory_type_t mtype,
                                                 unsigned caps)
{
    span_registry_entry_t *entry;
    uint64_t id;

    if ((mtype != smd->dev_mem_type) || (smd->device == NULL) ||
        (smd->device->buffer_id((uintptr_t)address, &id) != UCS_OK)) {
        return NULL;
    }
    entry = span_registry_find_within(smd, (uintptr_t)address, length, mtype,
                                      id, caps, span_md_unit_holds);
    return (entry == NULL) ? NULL :
                             ucs_container_of(entry, span_memh_t, entry);
}

/* Indexes the device units of a registration by their buffer ids, so that
 * a buffer inside any of them finds it; UCS_ERR_NO_MEMORY leaves it
 * unindexed, still shared by exact requests */
static void span_md_registry_units(span_md_t *smd, span_memh_t *memh,
                                   const span_md_extent_t *ext)
{
    span_registry_entry_t *entry = &memh->entry;
    uint64_t start;
    uint32_t i, n;

    if ((ext->identity == 0) || (smd->device == NULL)) {
        return;
    }
    n            = (ext->unit_size == 0) ? 1 :
                   ucs_div_round_up(ext->length, ext->unit_size);
    entry->units = calloc(n, sizeof(*entry->units));
    if (entry->units == NULL) {
        ucs_warn("span md %p: no memory to index the %u units of [0x%" PRIx64
                 ", +%" PRIu64 "): buffers inside them register anew", smd,
                 n, ext->base, ext->length);
        return;
    }
    for (i = 0; i < n; ++i) {
        start = ext->base + (i * ext->unit_size);
        if (smd->device->buffer_id(start, &entry->units[i].id) != UCS_OK) {
            entry->units[i].id = 0; /* matches no request */
        }
    }
    entry->num_units = n;
    entry->unit_size = ext->unit_size;
}

/* Counts a new registration and enters it in the registry where it may be
 * shared */
static void span_md_registry_add(span_md_t *smd, span_memh_t *memh,
                                 const span_md_extent_t *ext,
                                 ucs_memory_type_t mtype, unsigned caps)
{
    __atomic_add_fetch(&smd->stats.registrations, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&smd->stats.chunks, memh->num_inner, __ATOMIC_RELAXED);
    if (!span_md_may_share(smd, ext)) {
        return;
    }
    memh->entry.identity = ext->identity;
    memh->entry.owner    = smd;
    memh->entry.start    = memh->geom.base;
    memh->entry.length   = memh->geom.length;
    memh->entry.mem_type = mtype;
    memh->entry.caps     = caps;
    memh->entry.stats    = &smd->stats;
    span_md_registry_units(smd, memh, ext);
    span_registry_add(&memh->entry);
}

ucs_memory_type_t span_md_reg_mem_type(const span_md_t *smd,
                                       const uct_md_mem_reg_params_t *params,
                                       const void *address)
{
    uint64_t base, size;

    if ((params->field_mask & UCT_MD_MEM_REG_FIELD_MEM_TYPE) &&
        (params->mem_type != UCS_MEMORY_TYPE_UNKNOWN)) {
        return params->mem_type;
    }
    return ((smd->device != NULL) &&
            (smd->device->range((uintptr_t)address, &base, &size) == UCS_OK)) ?
           smd->dev_mem_type : UCS_MEMORY_TYPE_HOST;
}

ucs_status_t
span_md_mem_reg(uct_md_h md, void *address, size_t length,
                const uct_md_mem_reg_params_t *params, uct_mem_h *memh_p)
{
    span_md_t *smd          = (span_md_t*)md;
    ucs_memory_type_t mtype = span_md_reg_mem_type(smd, params, address);
    unsigned caps           = span_md_reg_caps(params);
    span_md_extent_t ext;
    span_chunk_geom_t geom;
    span_memh_t *memh;
    ucs_status_t status;
    int self_export;
    uint32_t i = 0;

    if (!(span_md_reg_mem_types(smd) & UCS_BIT(mtype))) {
        ucs_error("span md %p: cannot register %s memory %p +%zu", md,
                  ucs_memory_type_names[mtype], address, length);
        return UCS_ERR_UNSUPPORTED;
    }

    memh = span_md_registry_find_within(smd, address, length, mtype, caps);
    if (memh != NULL) {
        *memh_p = memh;
        return UCS_OK;
    }

    status = span_md_extent(smd, address, length, mtype, &ext);
    if (status != UCS_OK) {
        return status;
    }

    memh = span_md_registry_find(smd, &ext, mtype, caps);
    if (memh != NULL) {
        *memh_p = memh;
        return UCS_OK;
    }

    status = span_chunk_plan_from(&geom, ext.base, ext.length,
                                  ext.unit_origin, ext.unit_size,
                                  smd->chunk_size, smd->overlap);
    if (status != UCS_OK) {
        return status;
    }

    self_export = span_md_rocm_exports(smd, mtype, &geom);
    memh        = span_memh_alloc((span_md_inner_registers(smd, mtype) &&
                                   !self_export) ? geom.num_chunks : 0);
    if (memh == NULL) {
        ucs_error("span md %p: no memory for a handle of %u chunks", md,
                  geom.num_chunks);
        return UCS_ERR_NO_MEMORY;
    }

    memh->geom       = geom;
    memh->win_base   = ext.win_base;
    memh->win_length = ext.win_length;
    for (i = 0; i < memh->num_inner; ++i) {
        status = span_md_chunk_reg(smd, memh, i, params);
        if (status != UCS_OK) {
            goto err_dereg;
        }
    }

    status = self_export ? span_memh_seal_exported(smd, memh) :
                           span_memh_seal(smd, memh, mtype);
    if (status != UCS_OK) {
        goto err_dereg;
    }

    span_md_registry_add(smd, memh, &ext, mtype, caps);
    *memh_p = memh;
    return UCS_OK;

err_dereg:
    span_md_chunks_dereg(smd, memh, i);
    free(memh);
    return status;
}

ucs_status_t
span_md_mem_dereg(uct_md_h md, const uct_md_mem_dereg_params_t *params)
{
    span_md_t *smd = (span_md_t*)md;
    span_memh_t *memh;

    if (!(params->field_mask & UCT_MD_MEM_DEREG_FIELD_MEMH) ||
        (params->memh == NULL)) {
        return UCS_ERR_INVALID_PARAM;
    }

    if ((params->field_mask & UCT_MD_MEM_DEREG_FIELD_FLAGS) &&
        (params->flags & UCT_MD_MEM_DEREG_FLAG_INVALIDATE)) {
        /* not advertised (span_md_query) */
        return UCS_ERR_UNSUPPORTED;
    }

    memh = params->memh;
    if ((memh->entry.owner != NULL) && !span_registry_release(&memh->entry)) {
        return UCS_OK; /* shared: others hold it still */
    }
    return span_memh_teardown(smd, memh);
}

ucs_status_t span_md_mem_alloc(uct_md_h md, size_t *length_p,
                                      void **address_p,
                                      ucs_memory_type_t mem_type,
                                      ucs_sys_device_t sys_dev, unsigned flags,
                                      const char *alloc_name,
                                      uct_mem_h *memh_p)
{
    span_md_t *smd = (span_md_t*)md;
    span_memh_t *memh;
    ucs_status_t status;

    /* the inner MD allocates and registers at once: one chunk */
    memh = span_memh_alloc(1);
    if (memh == NULL) {
        ucs_error("span md %p: no memory for a handle of %zu bytes allocated",
                  md, *length_p);
        return UCS_ERR_NO_MEMORY;
    }

    status = span_ucx_mem_alloc(smd->inner_ops, smd->inner, length_p,
                                address_p, mem_type, sys_dev, flags,
                                alloc_name, &memh->inner[0]);
    if (status != UCS_OK) {
        goto err_free;
    }

    status = span_chunk_plan(&memh->geom, (uintptr_t)*address_p, *length_p,
                             0, 0, 0);
    memh->win_base   = memh->geom.base;
    memh->win_length = memh->geom.length;
    if (status == UCS_OK) {
        status = span_memh_seal(smd, memh, mem_type);
    }
    if (status != UCS_OK) {
        goto err_mem_free;
    }

    *memh_p = memh;
    return UCS_OK;

err_mem_free:
    smd->inner_ops->mem_free(smd->inner, memh->inner[0]);
err_free:
    free(memh);
    return status;
}

ucs_status_t span_md_mem_alloc_1_18(uct_md_h md, size_t *length_p,
                                    void **address_p,
                                    ucs_memory_type_t mem_type,
                                    unsigned flags, const char *alloc_name,
                                    uct_mem_h *memh_p)
{
    return span_md_mem_alloc(md, length_p, address_p, mem_type,
                             UCS_SYS_DEVICE_ID_UNKNOWN, flags, alloc_name,
                             memh_p);
}

ucs_status_t span_md_mem_free(uct_md_h md, uct_mem_h memh)
{
    span_md_t *smd    = (span_md_t*)md;
    span_memh_t *smem = memh;
    ucs_status_t status;

    span_memh_unpublish(smem);
    status = smd->inner_ops->mem_free(smd->inner, smem->inner[0]);
    free(smem);
    return status;
}

ucs_status_t span_md_mem_reg_1_13(uct_md_h md, void *address, size_t length,
                                  unsigned flags, uct_mem_h *memh_p)
{
    uct_md_mem_reg_params_t params = {
        .field_mask = UCT_MD_MEM_REG_FIELD_FLAGS,
        .flags      = flags
    };

    return span_md_mem_reg(md, address, length, &params, memh_p);
}
