/*
 * VMM handle export and import.
 */
#ifdef HAVE_CONFIG_H
#  include "config.h"
#endif

#include "span_cuda_vmm.h"
#include "span_vmm_export.h"
#include "span_rocm_vmm.h"
#include "base/span_hash.h"

#include <ucs/debug/log_def.h>
#include <inttypes.h>
#include <string.h>

#if HAVE_CUDA
#include "span_libcuda.h"

static int span_cuda_vmm_ready(void)
{
    return span_libcuda_load(SPAN_LIBCUDA_VMM);
}

/* The device of the current context, or device 0's primary context made
 * current (*pushed_p set) for a thread that has none */
static ucs_status_t span_cuda_vmm_ctx_enter(int *device_p, int *pushed_p)
{
    CUcontext ctx = NULL;
    CUdevice dev;

    *pushed_p = 0;
    if ((span_libcuda.cuCtxGetCurrent(&ctx) == CUDA_SUCCESS) &&
        (ctx != NULL)) {
        return (span_libcuda.cuCtxGetDevice(&dev) == CUDA_SUCCESS) ?
               (*device_p = dev, UCS_OK) : UCS_ERR_NO_DEVICE;
    }
    if (span_libcuda_primary_push(*device_p) != CUDA_SUCCESS) {
        return UCS_ERR_NO_DEVICE;
    }
    *pushed_p = 1;
    return UCS_OK;
}

static void span_cuda_vmm_ctx_leave(int device, int pushed)
{
    if (pushed) {
        span_libcuda_primary_pop(device);
    }
}

ucs_status_t span_cuda_vmm_export_fd(uint64_t base, int *fd_p)
{
    CUmemGenericAllocationHandle handle;
    CUresult res;

    if (!span_cuda_vmm_ready() ||
        (span_libcuda.cuMemRetainAllocationHandle(&handle, (void*)base) !=
         CUDA_SUCCESS)) {
        return UCS_ERR_UNSUPPORTED;
    }
    /* the export is the check: no query of the handle's types first */
    res = span_libcuda.cuMemExportToShareableHandle(
            fd_p, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    span_libcuda.cuMemRelease(handle);
    if ((res == CUDA_ERROR_INVALID_VALUE) || (res == CUDA_ERROR_NOT_SUPPORTED) ||
        (res == CUDA_ERROR_NOT_PERMITTED)) {
        ucs_debug("span cuda vmm: the allocation at 0x%" PRIx64 " cannot be "
                  "shared as a POSIX fd: %d", base, res);
        return UCS_ERR_UNSUPPORTED;
    } else if (res != CUDA_SUCCESS) {
        ucs_error("span cuda vmm: cannot export the allocation at 0x%" PRIx64
                  " as a POSIX fd: %d", base, res);
        return UCS_ERR_IO_ERROR;
    }
    return UCS_OK;
}

static ucs_status_t span_cuda_vmm_map_fd(int fd, uint32_t pid, uint64_t addr,
                                         uint64_t size)
{
    CUmemGenericAllocationHandle handle;
    CUresult res;

    res = span_libcuda.cuMemImportFromShareableHandle(
            &handle, (void*)(uintptr_t)fd,
            CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    if (res != CUDA_SUCCESS) {
        ucs_error("span cuda vmm: cannot import a unit of process %u: %d",
                  pid, res);
        return UCS_ERR_UNREACHABLE;
    }
    res = span_libcuda.cuMemMap(addr, size, 0, handle, 0);
    span_libcuda.cuMemRelease(handle); /* the mapping holds it */
    return (res == CUDA_SUCCESS) ? UCS_OK : UCS_ERR_NO_MEMORY;
}

static void span_cuda_vmm_unmap_range(uint64_t addr, uint64_t size)
{
    span_libcuda.cuMemUnmap(addr, size);
}

static const span_vmm_importer_t span_cuda_vmm_importer = {
    .magic  = SPAN_CUDA_VMM_MAGIC,
    .map_fd = span_cuda_vmm_map_fd,
    .unmap  = span_cuda_vmm_unmap_range,
};

static ucs_status_t span_cuda_vmm_map_units(const span_vmm_key_t *keys,
                                            const span_chunk_geom_t *geom,
                                            uint64_t va, int device)
{
    CUmemAccessDesc access = {{CU_MEM_LOCATION_TYPE_DEVICE, device},
                              CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    ucs_status_t status;

    status = span_vmm_map_units(&span_cuda_vmm_importer, keys, geom, va);
    if ((status == UCS_OK) &&
        (span_libcuda.cuMemSetAccess(va, geom->length, &access, 1) !=
         CUDA_SUCCESS)) {
        span_vmm_unmap_units(&span_cuda_vmm_importer, geom, va,
                             geom->num_chunks);
        status = UCS_ERR_NO_MEMORY;
    }
    return status;
}

ucs_status_t span_cuda_vmm_import(const span_vmm_key_t *keys,
                                  const span_chunk_geom_t *geom,
                                  span_vmm_map_t *map)
{
    CUdeviceptr va;
    ucs_status_t status;
    int pushed;

    if (keys[0].magic == SPAN_ROCM_VMM_MAGIC) {
        return span_rocm_vmm_import(keys, geom, map);
    }
    map->rocm   = 0;
    map->device = 0;
    if (!span_cuda_vmm_ready() ||
        (span_cuda_vmm_ctx_enter(&map->device, &pushed) != UCS_OK)) {
        ucs_error("span cuda vmm: no CUDA driver or device to map %u units",
                  geom->num_chunks);
        return UCS_ERR_UNREACHABLE;
    }
    status = UCS_ERR_NO_MEMORY;
    if (span_libcuda.cuMemAddressReserve(&va, geom->length, 0, 0, 0) ==
        CUDA_SUCCESS) {
        status = span_cuda_vmm_map_units(keys, geom, va, map->device);
        if (status != UCS_OK) {
            span_libcuda.cuMemAddressFree(va, geom->length);
        }
    }
    span_cuda_vmm_ctx_leave(map->device, pushed);
    map->devices  = (map->device < 64) ? (1ull << map->device) : 0;
    map->base     = va;
    map->length   = geom->length;
    map->keys_sum = span_hash_fnv(keys, geom->num_chunks * sizeof(*keys));
    map->pid      = keys[0].pid;
    map->pid_ns   = keys[0].pid_ns;
    return status;
}

void span_cuda_vmm_unmap(span_vmm_map_t *map)
{
    if (map->rocm) {
        span_rocm_vmm_unmap(map);
        return;
    }
    span_libcuda.cuMemUnmap(map->base, map->length);
    span_libcuda.cuMemAddressFree(map->base, map->length);
}

#else
ucs_status_t span_cuda_vmm_export_fd(uint64_t base, int *fd_p)
{
    return UCS_ERR_UNSUPPORTED;
}

ucs_status_t span_cuda_vmm_import(const span_vmm_key_t *keys,
                                  const span_chunk_geom_t *geom,
                                  span_vmm_map_t *map)
{
    if (keys[0].magic == SPAN_ROCM_VMM_MAGIC) {
        return span_rocm_vmm_import(keys, geom, map);
    }
    ucs_error("span cuda vmm: built without CUDA: cannot map %u device units",
              geom->num_chunks);
    return UCS_ERR_UNREACHABLE;
}

void span_cuda_vmm_unmap(span_vmm_map_t *map)
{
    if (map->rocm) {
        span_rocm_vmm_unmap(map);
    }
}
#endif
