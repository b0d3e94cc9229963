/*
 * ROCm VMM units: import and mapping through HIP (span_rocm_vmm.h).
 */
#ifdef HAVE_CONFIG_H
#  include "config.h"
#endif

#include "span_rocm_vmm.h"
#include "span_vmm_export.h"
#include "base/span_hash.h"

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

static ucs_status_t span_rocm_vmm_map_fd(int fd, uint32_t pid, uint64_t addr,
                                         uint64_t size)
{
    hipMemGenericAllocationHandle_t handle;
    hipError_t err;

    err = span_librocm.hipMemImportFromShareableHandle(
            &handle, (void*)(intptr_t)fd, hipMemHandleTypePosixFileDescriptor);
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

static void span_rocm_vmm_unmap_range(uint64_t addr, uint64_t size)
{
    span_librocm.hipMemUnmap((void*)addr, size);
}

static const span_vmm_importer_t span_rocm_vmm_importer = {
    .magic  = SPAN_ROCM_VMM_MAGIC,
    .map_fd = span_rocm_vmm_map_fd,
    .unmap  = span_rocm_vmm_unmap_range,
};

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
    status        = span_vmm_map_units(&span_rocm_vmm_importer, keys, geom,
                                       map->base);
    if (status == UCS_OK) {
        /* the device of the calling thread, as HIP's current one */
        span_librocm.hipGetDevice(&device);
        map->device = device;
        status      = span_rocm_vmm_access(map, device);
        if (status != UCS_OK) {
            span_vmm_unmap_units(&span_rocm_vmm_importer, geom, map->base,
                                 geom->num_chunks);
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
    ucs_error("span rocm vmm: built without ROCm: cannot map %u device units",
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
