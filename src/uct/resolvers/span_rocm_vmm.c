/*
 * ROCm VMM units: import and mapping through HIP (span_rocm_vmm.h).
 */
#ifdef HAVE_CONFIG_H
#  include "config.h"
#endif

#include "span_rocm_vmm.h"
#include "span_vmm_export.h"
#include "base/span_hash.h"
#include "base/span_peer.h"

#include <ucs/debug/log_def.h>
#include <inttypes.h>
#include <string.h>

void span_rocm_vmm_keys_mark(span_vmm_key_t *keys, uint32_t n)
{
    uint32_t i;

    for (i = 0; i < n; ++i) {
        keys[i].magic = SPAN_ROCM_VMM_MAGIC;
    }
}

#if HAVE_ROCM
#include "span_librocm.h"

#include <unistd.h>

ucs_status_t span_rocm_vmm_access(span_vmm_map_t *map, int device)
{
    hipMemAccessDesc access = {{hipMemLocationTypeDevice, device},
                               hipMemAccessFlagsProtReadWrite};
    hipError_t err;

    if ((device < 0) || (device >= 64)) {
        ucs_error("span rocm vmm: device %d is beyond the 64 a mapping "
                  "tracks", device);
        return UCS_ERR_NO_DEVICE;
    }
    if (map->devices & (1ull << device)) {
        return UCS_OK;
    }
    err = span_librocm.hipMemSetAccess((void*)map->base, map->length, &access,
                                       1);
    if (err != hipSuccess) {
        ucs_error("span rocm vmm: cannot give device %d access to the %" PRIu64
                  "-byte mapping of process %u: %d", device, map->length,
                  map->pid, err);
        return UCS_ERR_NO_DEVICE;
    }
    map->devices |= 1ull << device;
    return UCS_OK;
}

/* Maps one unit of the exporter's at addr */
static ucs_status_t span_rocm_vmm_map_unit(int pidfd, int table,
                                           const span_vmm_key_t *key,
                                           uint32_t pid, uint64_t addr,
                                           uint64_t size)
{
    hipMemGenericAllocationHandle_t handle;
    ucs_status_t status;
    hipError_t err;
    int fd;

    status = span_vmm_unit_take(pidfd, table, key, SPAN_ROCM_VMM_MAGIC,
                                pid, size, &fd);
    if (status != UCS_OK) {
        return status;
    }
    err = span_librocm.hipMemImportFromShareableHandle(
            &handle, (void*)(intptr_t)fd, hipMemHandleTypePosixFileDescriptor);
    close(fd); /* the handle holds the memory */
    if (err != hipSuccess) {
        ucs_error("span rocm vmm: cannot import a unit of process %u: %d",
                  pid, err);
        return UCS_ERR_UNREACHABLE;
    }
    err = span_librocm.hipMemMap((void*)addr, size, 0, handle, 0);
    span_librocm.hipMemRelease(handle); /* the mapping holds it */
    if (err != hipSuccess) {
        ucs_error("span rocm vmm: cannot map a %" PRIu64 "-byte unit of "
                  "process %u at 0x%" PRIx64 ": %d", size, pid, addr, err);
        return UCS_ERR_NO_MEMORY;
    }
    return UCS_OK;
}

static void span_rocm_vmm_unmap_units(const span_chunk_geom_t *geom,
                                      uint64_t va, uint32_t count)
{
    uint64_t start, length;
    uint32_t i;

    for (i = 0; i < count; ++i) {
        span_chunk_range(geom, i, &start, &length);
        span_librocm.hipMemUnmap((void*)(va + (start - geom->base)), length);
    }
}

/* Maps every unit of the keys at va, or none */
static ucs_status_t span_rocm_vmm_map_units(const span_vmm_key_t *keys,
                                            const span_chunk_geom_t *geom,
                                            uint64_t va)
{
    uint64_t start, length;
    ucs_status_t status;
    uint32_t i = 0;
    int pidfd, table;

    /* the first unit's key names the process and its table; every key is
     * checked */
    status = span_peer_check(keys[0].pid, keys[0].pid_ns, keys[0].table_fd,
                             "a VMM export table");
    if (status != UCS_OK) {
        return status;
    }
    pidfd = span_peer_pidfd_open(keys[0].pid);
    if (pidfd < 0) {
        ucs_error("span rocm vmm: pidfd_open(%u) failed: %m", keys[0].pid);
        return UCS_ERR_UNREACHABLE;
    }
    status = span_vmm_table_open(pidfd, &keys[0], &table);
    if (status == UCS_OK) {
        for (i = 0; (status == UCS_OK) && (i < geom->num_chunks); ++i) {
            span_chunk_range(geom, i, &start, &length);
            status = span_rocm_vmm_map_unit(pidfd, table, &keys[i],
                                            keys[0].pid,
                                            va + (start - geom->base), length);
        }
        close(table);
    }
    close(pidfd);
    if (status != UCS_OK) {
        span_rocm_vmm_unmap_units(geom, va, (i > 0) ? (i - 1) : 0);
    }
    return status;
}

ucs_status_t span_rocm_vmm_import(const span_vmm_key_t *keys,
                                  const span_chunk_geom_t *geom,
                                  span_vmm_map_t *map)
{
    ucs_status_t status;
    int device = 0;
    void *va;

    memset(map, 0, sizeof(*map));
    if (!span_librocm_load(SPAN_LIBROCM_VMM)) {
        ucs_error("span rocm vmm: no HIP runtime to map %u device units",
                  geom->num_chunks);
        return UCS_ERR_UNREACHABLE;
    }
    if (span_librocm.hipMemAddressReserve(&va, geom->length, 0, NULL, 0) !=
        hipSuccess) {
        ucs_error("span rocm vmm: cannot reserve %" PRIu64 " bytes to map %u "
                  "units of process %u", geom->length, geom->num_chunks,
                  keys[0].pid);
        return UCS_ERR_NO_MEMORY;
    }
    map->rocm     = 1;
    map->base     = (uintptr_t)va;
    map->length   = geom->length;
    map->keys_sum = span_hash_fnv(keys, geom->num_chunks * sizeof(*keys));
    map->pid      = keys[0].pid;
    map->pid_ns   = keys[0].pid_ns;
    status        = span_rocm_vmm_map_units(keys, geom, map->base);
    if (status == UCS_OK) {
        /* the device of the calling thread, as HIP's current one */
        span_librocm.hipGetDevice(&device);
        map->device = device;
        status      = span_rocm_vmm_access(map, device);
        if (status != UCS_OK) {
            span_rocm_vmm_unmap_units(geom, map->base, geom->num_chunks);
        }
    }
    if (status != UCS_OK) {
        span_librocm.hipMemAddressFree(va, geom->length);
    }
    return status;
}

void span_rocm_vmm_unmap(span_vmm_map_t *map)
{
    span_librocm.hipMemUnmap((void*)map->base, map->length);
    span_librocm.hipMemAddressFree((void*)map->base, map->length);
}
#else
ucs_status_t span_rocm_vmm_import(const span_vmm_key_t *keys,
                                  const span_chunk_geom_t *geom,
                                  span_vmm_map_t *map)
{
    ucs_error("span: built without ROCm: cannot map %u device units",
              geom->num_chunks);
    return UCS_ERR_UNREACHABLE;
}

void span_rocm_vmm_unmap(span_vmm_map_t *map)
{
}

ucs_status_t span_rocm_vmm_access(span_vmm_map_t *map, int device)
{
    return UCS_ERR_UNSUPPORTED;
}
#endif
