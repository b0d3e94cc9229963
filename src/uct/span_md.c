/*
 * Twin memory domain.
 */
#include "span_md.h"
#include "span_component.h"
#include "span_spill.h"
#include "resolvers/span_cuda_vmm.h"
#include "resolvers/span_cuda_vmm_cache.h"
#include "resolvers/span_verbs.h"
#include "ucm_hooks/span_ucm.h"

#include <stdlib.h>
#include <sys/resource.h>
#include <ucs/sys/string.h>
#include <string.h>

/* The default overlap: ops of 4 MiB already run at line rate on RDMA NICs
 * (posting one costs about a microsecond, moving it 80 at 50 GB/s), and a
 * 2 GiB chunk registers 0.2% of its bytes twice */
#define SPAN_MD_OVERLAP_DEFAULT (4ul << 20)
/* The chunk size travels in 32 bits of pages: larger limits are no limit */
#define SPAN_MD_CHUNK_MAX       ((uint64_t)UINT32_MAX * SPAN_RKEY_PAGE)

ucs_config_field_t span_md_config_table[] = {
    {"", "", NULL, ucs_offsetof(span_md_config_t, super),
     UCS_CONFIG_TYPE_TABLE(uct_md_config_table)},

    {"MAX_CHUNK", "inf",
     "Largest inner registration, below what the inner MD reports it can\n"
     "register (its max_reg). A larger region is registered as chunks of\n"
     "this size, published together in one span rkey. Set it to exercise\n"
     "chunking on a transport without a limit, or below a NIC's real\n"
     "max_mr_size where the driver does not report it. Whole 4 KiB pages.",
     ucs_offsetof(span_md_config_t, max_chunk), UCS_CONFIG_TYPE_MEMUNITS},

    {"CHUNK_OVERLAP", "auto",
     "Bytes by which neighbour chunks overlap. Twin transports offer ops of\n"
     "at most this many bytes (max_short/bcopy/zcopy), so that an op never\n"
     "straddles a chunk end; larger transfers are cut by UCP. 'auto' is\n"
     "4 MiB or a quarter of the chunk, the smaller. Whole 4 KiB pages.",
     ucs_offsetof(span_md_config_t, chunk_overlap), UCS_CONFIG_TYPE_MEMUNITS},

    {"SPILL", "try",
     "Where the inner keys of a registration do not fit in the 255 bytes of\n"
     "a span rkey (one cuda_ipc key is 192 bytes: a buffer over several VMM\n"
     "handles needs more), keep them in this process and let the importer\n"
     "on the same node read them (through /proc/<pid>/fd, as the same user).\n"
     "try: when needed, on transports that reach only this node; yes: for\n"
     "every registration with inner keys (tests); no: never, such a\n"
     "registration fails.",
     ucs_offsetof(span_md_config_t, spill), UCS_CONFIG_TYPE_TERNARY},

    {"VMM_WIDEN", "64g",
     "With UCX's defaults (UCX_MEMTYPE_REG_WHOLE_ALLOC_TYPES=cuda) UCP cuts\n"
     "the registration of a buffer over several VMM handles (PyTorch's\n"
     "expandable segments, cuMemCreate pools) to the handle that holds its\n"
     "first byte, and every op past it would be refused. A registration of\n"
     "exactly one POSIX-fd VMM handle is therefore widened over the handles\n"
     "of its size mapped right after it on the same device, up to this many\n"
     "bytes and a quarter of RLIMIT_NOFILE handles (span may export one fd\n"
     "per handle). The peer may then access those neighbours too. 0: never\n"
     "widen (set UCX_MEMTYPE_REG_WHOLE_ALLOC_TYPES= so that UCP registers\n"
     "buffers as given).",
     ucs_offsetof(span_md_config_t, vmm_widen), UCS_CONFIG_TYPE_MEMUNITS},

    {"TEST_UNIT_SIZE", "inf",
     "For tests: declare a hard boundary (a physical allocation boundary,\n"
     "which no inner registration or op may cross) at every multiple of\n"
     "this size. 'inf': none.",
     ucs_offsetof(span_md_config_t, test_unit_size), UCS_CONFIG_TYPE_MEMUNITS},

    {"TEST_FAIL_REG", "0",
     "For tests: the inner registration of chunk N (1-based) of every\n"
     "registration fails with 'Out of memory'. 0: none.",
     ucs_offsetof(span_md_config_t, test_fail_reg), UCS_CONFIG_TYPE_UINT},

    {"TEST_FAIL_DEREG", "0",
     "For tests: the deregistration of chunk N (1-based) reports an I/O\n"
     "error after releasing it. 0: none.",
     ucs_offsetof(span_md_config_t, test_fail_dereg), UCS_CONFIG_TYPE_UINT},

    {"TEST_NO_RESOURCE", "0",
     "For tests: piece N (2 or more) of every op split at a chunk or unit\n"
     "end first meets 'no resource' once, as from a full send queue. 0: none.",
     ucs_offsetof(span_md_config_t, test_no_resource), UCS_CONFIG_TYPE_UINT},

    {NULL}
};

/* Memory types whose registration the twin can publish in a span rkey */
static uint64_t span_md_reg_mem_types(const span_md_t *smd)
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

/* Whether device memory registrations are cut at physical units */
static int span_md_resolves(const span_md_t *smd)
{
    return (smd->cuda != NULL) &&
           (span_md_reg_mem_types(smd) & UCS_BIT(UCS_MEMORY_TYPE_CUDA));
}

static ucs_status_t span_md_query(uct_md_h md, uct_md_attr_v2_t *attr)
{
    span_md_t *smd = (span_md_t*)md;

    *attr                  = smd->inner_attr;
    attr->reg_mem_types    = span_md_reg_mem_types(smd);
    attr->cache_mem_types |= attr->reg_mem_types &
                             ~smd->inner_attr.reg_mem_types;
    attr->flags           |= UCT_MD_FLAG_NEED_RKEY;
    attr->flags           &= ~(UCT_MD_FLAG_REG | UCT_MD_FLAG_FIXED |
                               UCT_MD_FLAG_EXPORTED_MKEY |
                               UCT_MD_FLAG_REG_DMABUF |
                               UCT_MD_FLAG_INVALIDATE_RMA |
                               UCT_MD_FLAG_INVALIDATE_AMO |
                               UCT_MD_FLAG_INVALIDATE);
    if (attr->reg_mem_types != 0) {
        attr->flags |= UCT_MD_FLAG_REG;
    }
    attr->dmabuf_mem_types = 0;
    attr->exported_mkey_packed_size = 0;
    attr->rkey_packed_size = smd->rkey_packed_size;
    attr->max_reg          = SIZE_MAX;
    ucs_strncpy_zero(attr->component_name, span_component.name,
                     sizeof(attr->component_name));
    return UCS_OK;
}

/* Fixed for the MD: one key where registrations are never cut */
static size_t span_md_rkey_packed_size(const span_md_t *smd)
{
    return ((smd->chunk_size == 0) && (smd->unit_size == 0) &&
            !span_md_resolves(smd) && (smd->spill != UCS_YES)) ?
           SPAN_RKEY_HDR_SIZE + smd->inner_attr.rkey_packed_size :
           SPAN_RKEY_MAX_SIZE;
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

    memh = calloc(1, sizeof(*memh) + (num_inner * sizeof(uct_mem_h)));
    if (memh != NULL) {
        memh->magic     = SPAN_MEMH_MAGIC;
        memh->num_inner = num_inner;
    }
    return memh;
}

/* Inline where the keys fit (and spilling is not forced), else spilled */
static ucs_status_t span_md_pack(span_md_t *smd, span_memh_t *memh,
                                 span_rkey_desc_t *desc, const uint8_t *keys,
                                 size_t *rkey_size_p)
{
    uint32_t n = memh->geom.num_chunks;
    ucs_status_t status;

    if ((smd->spill != UCS_YES) || (desc->key_size == 0)) {
        status = span_rkey_pack(memh->rkey, desc, keys, rkey_size_p);
        if ((status != UCS_ERR_EXCEEDS_LIMIT) || (smd->spill == UCS_NO)) {
            goto out;
        }
    }

    status = span_spill_put(keys, n, desc->key_size, &desc->spill);
    if (status != UCS_OK) {
        goto out;
    }
    desc->spilled = 1;
    status        = span_rkey_pack(memh->rkey, desc, keys, rkey_size_p);
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
 * export its units itself (span_cuda_vmm.h) */
static int span_md_vmm_needs_export(span_md_t *smd, const span_memh_t *memh,
                                    ucs_memory_type_t mtype,
                                    const uint8_t *keys)
{
    size_t K = smd->inner_attr.rkey_packed_size;
    uint32_t type, i;

    if ((mtype != UCS_MEMORY_TYPE_CUDA) || (smd->cuda == NULL) ||
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
        span_cuda_vmm_export_put(memh->vmm_exports[count]);
    }
    free(memh->vmm_exports);
    memh->vmm_exports = NULL;
}

/* Span's own keys of the units, exported or sharing the export another
 * registration made (span_cuda_vmm_export.h), into *keys_p; at most one
 * driver round trip per unit. UCS_ERR_UNSUPPORTED where a unit cannot be
 * shared. */
static ucs_status_t span_md_vmm_export(span_md_t *smd, span_memh_t *memh,
                                       span_cuda_vmm_key_t **keys_p)
{
    uint32_t n = memh->geom.num_chunks;
    uint64_t start, length;
    span_cuda_vmm_key_t *keys;
    ucs_status_t status;
    uint32_t i;

    memh->vmm_exports = calloc(n, sizeof(*memh->vmm_exports));
    keys              = calloc(n, sizeof(*keys));
    if ((memh->vmm_exports == NULL) || (keys == NULL)) {
        free(keys);
        span_md_vmm_unexport(memh, 0);
        return UCS_ERR_NO_MEMORY;
    }
    for (i = 0; i < n; ++i) {
        span_chunk_range(&memh->geom, i, &start, &length);
        status = span_cuda_vmm_export_get(&smd->vmm_export_ops, start, length,
                                          &keys[i], &memh->vmm_exports[i]);
        if (status != UCS_OK) {
            span_md_vmm_unexport(memh, i);
            free(keys);
            return status;
        }
    }
    ucs_debug("span md %p: cuda_ipc cannot export the %u VMM units of [0x%"
              PRIx64 ", +%" PRIu64 "): span exports them", smd, n,
              memh->geom.base, memh->geom.length);
    *keys_p = keys;
    return UCS_OK;
}

/* Withdraws what a sealed handle published beside its key: the spilled
 * keys and the exported units */
static void span_memh_unpublish(span_memh_t *memh)
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
    span_cuda_vmm_key_t *keys;
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
static ucs_status_t span_memh_seal(span_md_t *smd, span_memh_t *memh,
                                   ucs_memory_type_t mtype)
{
    size_t K = smd->inner_attr.rkey_packed_size;
    uct_md_mkey_pack_params_t params = {.field_mask = 0};
    span_rkey_desc_t desc = {.component_id = smd->inner_id,
                             .geom         = memh->geom,
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
        return UCS_ERR_NO_MEMORY;
    }
    for (i = 0; (K > 0) && (i < memh->geom.num_chunks); ++i) {
        span_chunk_range(&memh->geom, i, &start, &length);
        status = smd->inner_ops->mkey_pack(smd->inner, memh->inner[i],
                                            (void*)(uintptr_t)start, length,
                                            &params, keys + (i * K));
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
        status = smd->inner_ops->mem_reg(smd->inner, (void*)(uintptr_t)start,
                                          length, params,
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
 * physical units under it (DESIGN §1.2: an inner transport never sees an
 * interior pointer, and every buffer inside a unit shares its
 * registration) */
typedef struct span_md_extent {
    uint64_t base;
    uint64_t length;
    uint64_t unit_origin;
    uint64_t unit_size;
    uint64_t identity;   /* 0 for host memory */
} span_md_extent_t;

/* A request for exactly one VMM handle is what UCP makes of a buffer over
 * several with its defaults (span_cuda_widen): the registration covers the
 * handles mapped after it, so that ops past the first one are served */
static void span_md_vmm_widen(span_md_t *smd, void *address, size_t length,
                              span_cuda_extent_t *cuda)
{
    if ((smd->widen.max_bytes != 0) && (cuda->num_units == 1) &&
        ((uintptr_t)address == cuda->base) && (length == cuda->length)) {
        span_cuda_widen(smd->cuda, cuda, &smd->widen);
    }
}

static ucs_status_t span_md_extent(span_md_t *smd, void *address,
                                   size_t length, ucs_memory_type_t mtype,
                                   span_md_extent_t *ext)
{
    span_cuda_extent_t cuda;
    ucs_status_t status;

    if ((mtype != UCS_MEMORY_TYPE_CUDA) || (smd->cuda == NULL)) {
        ext->base        = (uintptr_t)address;
        ext->length      = length;
        ext->unit_origin = 0;
        ext->unit_size   = smd->unit_size;
        ext->identity    = 0;
        return UCS_OK;
    }

    status = span_cuda_resolve(smd->cuda, (uintptr_t)address, length, &cuda);
    if (status != UCS_OK) {
        ucs_error("span md %p: cannot resolve the device memory of %p +%zu: "
                  "%s", smd, address, length, ucs_status_string(status));
        return status;
    }
    span_md_vmm_widen(smd, address, length, &cuda);
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

    return (smd->cuda->buffer_id(addr, &now) == UCS_OK) && (now == id);
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

    if ((mtype != UCS_MEMORY_TYPE_CUDA) || (smd->cuda == NULL) ||
        (smd->cuda->buffer_id((uintptr_t)address, &id) != UCS_OK)) {
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

    if ((ext->identity == 0) || (smd->cuda == NULL)) {
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
        if (smd->cuda->buffer_id(start, &entry->units[i].id) != UCS_OK) {
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

static ucs_status_t
span_md_mem_reg(uct_md_h md, void *address, size_t length,
                const uct_md_mem_reg_params_t *params, uct_mem_h *memh_p)
{
    span_md_t *smd          = (span_md_t*)md;
    ucs_memory_type_t mtype = UCS_MEMORY_TYPE_HOST;
    unsigned caps           = span_md_reg_caps(params);
    span_md_extent_t ext;
    span_chunk_geom_t geom;
    span_memh_t *memh;
    ucs_status_t status;
    uint32_t i = 0;

    if (params->field_mask & UCT_MD_MEM_REG_FIELD_MEM_TYPE) {
        mtype = params->mem_type;
    }

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

    memh = span_memh_alloc(span_md_inner_registers(smd, mtype) ?
                           geom.num_chunks : 0);
    if (memh == NULL) {
        ucs_error("span md %p: no memory for a handle of %u chunks", md,
                  geom.num_chunks);
        return UCS_ERR_NO_MEMORY;
    }

    memh->geom = geom;
    for (i = 0; i < memh->num_inner; ++i) {
        status = span_md_chunk_reg(smd, memh, i, params);
        if (status != UCS_OK) {
            goto err_dereg;
        }
    }

    status = span_memh_seal(smd, memh, mtype);
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

static ucs_status_t
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
    uint8_t key[SPAN_RKEY_MAX_KEY];
    ucs_status_t status;
    size_t size;

    status = span_md_inner_extent(smd, memh, address, length, &desc.geom);
    if (status != UCS_OK) {
        return status;
    }
    if (K > 0) {
        status = smd->inner_ops->mkey_pack(smd->inner, memh,
                                           (void*)(uintptr_t)desc.geom.base,
                                           desc.geom.length, &params, key);
        if (status != UCS_OK) {
            ucs_error("span md %p: inner mkey pack of memh %p failed: %s",
                      smd, memh, ucs_status_string(status));
            return status;
        }
    }
    status = span_rkey_pack(buffer, &desc, key, &size);
    if (status == UCS_OK) {
        memset(UCS_PTR_BYTE_OFFSET(buffer, size), 0,
               smd->rkey_packed_size - size);
    }
    return status;
}

static ucs_status_t
span_md_mkey_pack(uct_md_h md, uct_mem_h memh, void *address, size_t length,
                  const uct_md_mkey_pack_params_t *params, void *buffer)
{
    span_md_t *smd    = (span_md_t*)md;
    span_memh_t *smem = memh;

    if ((params->field_mask & UCT_MD_MKEY_PACK_FIELD_FLAGS) &&
        (params->flags & (UCT_MD_MKEY_PACK_FLAG_EXPORT |
                          UCT_MD_MKEY_PACK_FLAG_INVALIDATE_RMA |
                          UCT_MD_MKEY_PACK_FLAG_INVALIDATE_AMO))) {
        ucs_error("span md %p: mkey pack flags 0x%x are not supported", md,
                  params->flags);
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
    return UCS_OK;
}

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

    return smd->inner_ops->detect_memory_type(smd->inner, address, length,
                                               mem_type_p);
}

static ucs_status_t span_md_mem_alloc(uct_md_h md, size_t *length_p,
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
        return UCS_ERR_NO_MEMORY;
    }

    status = smd->inner_ops->mem_alloc(smd->inner, length_p, address_p,
                                        mem_type, sys_dev, flags, alloc_name,
                                        &memh->inner[0]);
    if (status != UCS_OK) {
        goto err_free;
    }

    status = span_chunk_plan(&memh->geom, (uintptr_t)*address_p, *length_p,
                             0, 0, 0);
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

static ucs_status_t span_md_mem_free(uct_md_h md, uct_mem_h memh)
{
    span_md_t *smd    = (span_md_t*)md;
    span_memh_t *smem = memh;
    ucs_status_t status;

    span_memh_unpublish(smem);
    status = smd->inner_ops->mem_free(smd->inner, smem->inner[0]);
    free(smem);
    return status;
}

static ucs_status_t span_md_mem_advise(uct_md_h md, uct_mem_h memh,
                                       void *addr, size_t length,
                                       unsigned advice)
{
    return UCS_ERR_UNSUPPORTED;
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
        span_ucm_unsubscribe();
    }
    span_rkey_size_remove(smd->inner_id, smd->rkey_packed_size);
    if (smd->cuda != NULL) {
        /* while the driver is still there: the process may be ending */
        span_cuda_vmm_cache_purge();
    }
    uct_md_close(smd->inner);
    if (smd->inner_wrap != NULL) {
        span_md_inner_free(smd->inner_wrap);
    }
    free(smd);
}

static uct_md_ops_t span_md_ops = {
    .close              = span_md_close,
    .query              = span_md_query,
    .mem_alloc          = span_md_mem_alloc,
    .mem_free           = span_md_mem_free,
    .mem_advise         = span_md_mem_advise,
    .mem_reg            = span_md_mem_reg,
    .mem_dereg          = span_md_mem_dereg,
    .mem_query          = span_md_mem_query,
    .mkey_pack          = span_md_mkey_pack,
    .mem_attach         = span_md_mem_attach,
    .detect_memory_type = span_md_detect_memory_type,
    .mem_elem_pack      = span_md_mem_elem_pack
};

static uint64_t span_md_page_align(uint64_t size, int up)
{
    return (size + (up ? SPAN_RKEY_PAGE - 1 : 0)) & ~(SPAN_RKEY_PAGE - 1);
}

/* span may export one fd per handle of a widened registration: a quarter of
 * the descriptors this process may open */
static uint32_t span_md_widen_max_units(void)
{
    struct rlimit limit;

    if ((getrlimit(RLIMIT_NOFILE, &limit) != 0) ||
        (limit.rlim_cur == RLIM_INFINITY)) {
        return SPAN_CHUNK_MAX;
    }
    return ucs_min(limit.rlim_cur / 4, SPAN_CHUNK_MAX);
}

/* Chunk size from the inner MD's limit and UCX_SPAN_MAX_CHUNK, overlap and
 * hard boundaries from the configuration */
static ucs_status_t span_md_limits(span_md_t *smd,
                                   const span_md_config_t *config)
{
    uint64_t limit = ucs_min(smd->inner_attr.max_reg, config->max_chunk);

    smd->chunk_size = (limit > SPAN_MD_CHUNK_MAX) ? 0 :
                      span_md_page_align(limit, 0);
    smd->overlap    = 0;
    if (smd->chunk_size != 0) {
        smd->overlap = (config->chunk_overlap == UCS_MEMUNITS_AUTO) ?
                       span_md_page_align(ucs_min(SPAN_MD_OVERLAP_DEFAULT,
                                                  smd->chunk_size / 4), 0) :
                       span_md_page_align(config->chunk_overlap, 1);
        if ((smd->overlap == 0) || (smd->overlap >= smd->chunk_size)) {
            ucs_error("span: md %p: chunks of %" PRIu64 " bytes (limit %"
                      PRIu64 ", inner max_reg %zu) cannot overlap by %" PRIu64
                      " bytes: UCX_SPAN_MAX_CHUNK must be at least 4 pages "
                      "and UCX_SPAN_CHUNK_OVERLAP below it", smd,
                      smd->chunk_size, limit, smd->inner_attr.max_reg,
                      smd->overlap);
            return UCS_ERR_INVALID_PARAM;
        }
    }

    smd->unit_size = (config->test_unit_size == UCS_MEMUNITS_INF) ? 0 :
                     config->test_unit_size;
    if ((smd->unit_size % SPAN_RKEY_PAGE) != 0) {
        ucs_error("span: UCX_SPAN_TEST_UNIT_SIZE=%" PRIu64 " is not a whole "
                  "number of 4 KiB pages", smd->unit_size);
        return UCS_ERR_INVALID_PARAM;
    }

    if (config->test_no_resource == 1) {
        ucs_error("span: UCX_SPAN_TEST_NO_RESOURCE=1 would refuse every op "
                  "forever; the first piece to refuse is 2 or later");
        return UCS_ERR_INVALID_PARAM;
    }

    smd->widen.max_bytes = (config->vmm_widen == UCS_MEMUNITS_INF) ?
                           UINT64_MAX : config->vmm_widen;
    smd->widen.max_units = span_md_widen_max_units();
    smd->test_fail_reg    = config->test_fail_reg;
    smd->test_fail_dereg  = config->test_fail_dereg;
    smd->test_no_resource = config->test_no_resource;
    ucs_debug("span: md %p: chunks of %" PRIu64 " bytes overlapping by %"
              PRIu64 ", units of %" PRIu64, smd, smd->chunk_size,
              smd->overlap, smd->unit_size);
    return UCS_OK;
}

/* Spilled keys can only be read on this node: 'try' spills only for inner
 * MDs none of whose transports reaches another node */
static int span_md_spill_mode(span_md_t *smd, int config)
{
    uct_tl_resource_desc_t *resources;
    unsigned i, count;
    int local = 1;

    if (config != UCS_TRY) {
        return config;
    }
    if (uct_md_query_tl_resources(smd->inner, &resources, &count) != UCS_OK) {
        return UCS_NO;
    }
    for (i = 0; i < count; ++i) {
        local &= (resources[i].dev_type != UCT_DEVICE_TYPE_NET);
    }
    uct_release_tl_resource_list(resources);
    return local ? UCS_TRY : UCS_NO;
}

/* Finds the component that offers an MD named inner_name */
static uct_component_t *span_md_find_inner_component(const char *inner_name)
{
    uct_md_resource_desc_t *resources;
    uct_component_t *component;
    unsigned i, count;
    int found;

    ucs_list_for_each(component, &uct_components_list, list) {
        if ((component == &span_component) ||
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

static ucs_status_t span_md_open_inner(span_md_t *smd, const char *inner_name)
{
    uct_md_config_t *config;
    ucs_status_t status;

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
        ucs_error("span: '%s' is not the name of a twin MD", md_name);
        return UCS_ERR_NO_DEVICE;
    }
    ucs_strncpy_zero(inner_name, md_name, name_len);

    smd = calloc(1, sizeof(*smd));
    if (smd == NULL) {
        return UCS_ERR_NO_MEMORY;
    }

    smd->super.ops       = &span_md_ops;
    smd->super.component = component;
    smd->inner_component = span_md_find_inner_component(inner_name);
    if (smd->inner_component == NULL) {
        ucs_error("span: no component offers the MD '%s'", inner_name);
        status = UCS_ERR_NO_DEVICE;
        goto err_free;
    }

    smd->inner_id = span_rkey_component_id(smd->inner_component->name);
    status        = span_md_open_inner(smd, inner_name);
    if (status != UCS_OK) {
        ucs_debug("span: failed to open inner MD '%s': %s", inner_name,
                  ucs_status_string(status));
        goto err_free;
    }

    smd->inner_attr.field_mask = UINT64_MAX;
    status = uct_md_query_v2(smd->inner, &smd->inner_attr);
    if (status != UCS_OK) {
        ucs_error("span: failed to query inner MD '%s': %s", inner_name,
                  ucs_status_string(status));
        goto err_close;
    }

    if (smd->inner_attr.rkey_packed_size > SPAN_RKEY_MAX_KEY) {
        ucs_diag("span: MD '%s' packs %zu-byte rkeys, more than the %d bytes "
                 "a span rkey can hold inline; '%s' is not offered",
                 inner_name, smd->inner_attr.rkey_packed_size,
                 SPAN_RKEY_MAX_KEY, md_name);
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

    smd->spill = span_md_spill_mode(smd, ((const span_md_config_t*)config)->spill);
    if (smd->inner_attr.reg_mem_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) {
        smd->cuda = span_cuda_driver();
        if (smd->cuda == NULL) {
            ucs_diag("span: md '%s': no CUDA driver to resolve allocations: "
                     "device memory is registered as given", md_name);
        } else {
            smd->vmm_export_ops.buffer_id = smd->cuda->buffer_id;
            smd->vmm_export_ops.export_fd = span_cuda_vmm_export_fd;
        }
    }

    smd->rkey_packed_size = span_md_rkey_packed_size(smd);
    status = span_rkey_size_add(smd->inner_id,
                                smd->inner_attr.rkey_packed_size,
                                smd->rkey_packed_size);
    if (status != UCS_OK) {
        goto err_close;
    }
    smd->share = (span_ucm_subscribe() == UCS_OK);

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
