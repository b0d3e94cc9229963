/*
 * VMM handle export and import.
 */
#ifdef HAVE_CONFIG_H
#  include "config.h"
#endif

#include "span_cuda_vmm.h"
#include "span_spill.h"

#include <ucs/debug/log_def.h>
#include <inttypes.h>
#include <string.h>

#define SPAN_CUDA_VMM_MAGIC 0x4d565053u /* "SPVM" */

static int span_cuda_vmm_cmp(uint64_t a, uint64_t b)
{
    return (a > b) - (a < b);
}

int span_cuda_vmm_compare(const span_cuda_vmm_map_t *a,
                          const span_cuda_vmm_map_t *b)
{
    int result = span_cuda_vmm_cmp(a->pid_ns, b->pid_ns);

    if (result == 0) {
        result = span_cuda_vmm_cmp(a->pid, b->pid);
    }
    if (result == 0) {
        result = span_cuda_vmm_cmp(a->keys_sum, b->keys_sum);
    }
    return result;
}

#if HAVE_CUDA
#include "span_libcuda.h"

#include <sys/syscall.h>
#include <unistd.h>

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
    if ((span_libcuda.cuDeviceGet(&dev, *device_p) != CUDA_SUCCESS) ||
        (span_libcuda.cuDevicePrimaryCtxRetain(&ctx, dev) !=
         CUDA_SUCCESS)) {
        return UCS_ERR_NO_DEVICE;
    }
    if (span_libcuda.cuCtxPushCurrent(ctx) != CUDA_SUCCESS) {
        span_libcuda.cuDevicePrimaryCtxRelease(dev);
        return UCS_ERR_NO_DEVICE;
    }
    *pushed_p = 1;
    return UCS_OK;
}

static void span_cuda_vmm_ctx_leave(int device, int pushed)
{
    CUcontext ctx;
    CUdevice dev;

    if (pushed) {
        span_libcuda.cuCtxPopCurrent(&ctx);
        if (span_libcuda.cuDeviceGet(&dev, device) == CUDA_SUCCESS) {
            span_libcuda.cuDevicePrimaryCtxRelease(dev);
        }
    }
}

ucs_status_t span_cuda_vmm_export(uint64_t base, uint64_t size, void *key,
                                  size_t K, int *fd_p)
{
    uint32_t head[4] = {SPAN_CUDA_VMM_MAGIC, (uint32_t)getpid(), 0, 0};
    uint64_t pid_ns  = span_spill_pid_ns();
    CUmemGenericAllocationHandle handle;
    CUresult res;
    int fd;

    if ((K < SPAN_CUDA_VMM_KEY_SIZE) || !span_cuda_vmm_ready() ||
        (span_libcuda.cuMemRetainAllocationHandle(&handle, (void*)base) !=
         CUDA_SUCCESS)) {
        return UCS_ERR_UNSUPPORTED;
    }
    /* the export is the check: no query of the handle's types first */
    res = span_libcuda.cuMemExportToShareableHandle(
            &fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
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
    head[2] = fd;
    memset(key, 0, K);
    memcpy(key, head, sizeof(head));
    memcpy((uint8_t*)key + sizeof(head), &size, sizeof(size));
    memcpy((uint8_t*)key + sizeof(head) + sizeof(size), &pid_ns,
           sizeof(pid_ns));
    *fd_p = fd;
    return UCS_OK;
}

void span_cuda_vmm_unexport(int fd)
{
    close(fd);
}

/* Maps one unit of the exporter's, process pid, at addr */
static ucs_status_t span_cuda_vmm_map_unit(int pidfd, uint32_t pid,
                                           const uint8_t *key, uint64_t addr,
                                           uint64_t size, int *fd_p)
{
    CUmemGenericAllocationHandle handle;
    uint64_t key_size, pid_ns;
    uint32_t head[4];
    ucs_status_t status;
    CUresult res;
    int fd;

    memcpy(head, key, sizeof(head));
    memcpy(&key_size, key + sizeof(head), sizeof(key_size));
    memcpy(&pid_ns, key + sizeof(head) + sizeof(key_size), sizeof(pid_ns));
    if ((head[0] != SPAN_CUDA_VMM_MAGIC) || (head[1] != pid) ||
        (key_size != size)) {
        ucs_error("span cuda vmm: a unit key does not describe the %" PRIu64
                  "-byte unit of process %u the rkey's geometry makes", size,
                  pid);
        return UCS_ERR_INVALID_PARAM;
    }
    status = span_spill_peer_check(pid, pid_ns, head[2], "a VMM unit");
    if (status != UCS_OK) {
        return status;
    }
    fd = syscall(SYS_pidfd_getfd, pidfd, (int)head[2], 0);
    if (fd < 0) {
        ucs_error("span cuda vmm: pidfd_getfd(fd %d of process %u) failed: "
                  "%m (ptrace attach rights over the exporter are needed, "
                  "as for cuda_ipc)", (int)head[2], head[1]);
        return UCS_ERR_UNREACHABLE;
    }
    *fd_p = fd; /* kept: it tells whether the exporter still exports */
    res   = span_libcuda.cuMemImportFromShareableHandle(
            &handle, (void*)(uintptr_t)fd,
            CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    if (res != CUDA_SUCCESS) {
        ucs_error("span cuda vmm: cannot import a unit of process %u: %d",
                  head[1], res);
        return UCS_ERR_UNREACHABLE;
    }
    res = span_libcuda.cuMemMap(addr, size, 0, handle, 0);
    span_libcuda.cuMemRelease(handle); /* the mapping holds it */
    return (res == CUDA_SUCCESS) ? UCS_OK : UCS_ERR_NO_MEMORY;
}

static void span_cuda_vmm_unmap_units(const span_chunk_geom_t *geom,
                                      uint64_t va, uint32_t count)
{
    uint64_t start, length;
    uint32_t i;

    for (i = 0; i < count; ++i) {
        span_chunk_range(geom, i, &start, &length);
        span_libcuda.cuMemUnmap(va + (start - geom->base), length);
    }
}

static ucs_status_t span_cuda_vmm_map_units(const uint8_t *keys, size_t K,
                                            const span_chunk_geom_t *geom,
                                            uint64_t va, int device, int *fds)
{
    CUmemAccessDesc access = {{CU_MEM_LOCATION_TYPE_DEVICE, device},
                              CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    uint64_t start, length, pid_ns;
    ucs_status_t status;
    uint32_t pid, fd, i;
    int pidfd;

    /* the first unit's key names the process; every key is checked */
    memcpy(&pid, keys + sizeof(uint32_t), sizeof(pid));
    memcpy(&fd, keys + (2 * sizeof(uint32_t)), sizeof(fd));
    memcpy(&pid_ns, keys + (4 * sizeof(uint32_t)) + sizeof(uint64_t),
           sizeof(pid_ns));
    status = span_spill_peer_check(pid, pid_ns, fd, "a VMM unit");
    if (status != UCS_OK) {
        return status;
    }
    pidfd = syscall(SYS_pidfd_open, pid, 0);
    if (pidfd < 0) {
        ucs_error("span cuda vmm: pidfd_open(%u) failed: %m", pid);
        return UCS_ERR_UNREACHABLE;
    }
    for (i = 0; (i < geom->num_chunks) && (status == UCS_OK); ++i) {
        span_chunk_range(geom, i, &start, &length);
        status = span_cuda_vmm_map_unit(pidfd, pid, keys + (i * K),
                                        va + (start - geom->base), length,
                                        &fds[i]);
    }
    close(pidfd);
    if ((status == UCS_OK) &&
        (span_libcuda.cuMemSetAccess(va, geom->length, &access, 1) !=
         CUDA_SUCCESS)) {
        status = UCS_ERR_NO_MEMORY;
        i      = geom->num_chunks + 1;
    }
    if (status != UCS_OK) {
        span_cuda_vmm_unmap_units(geom, va, i - 1);
    }
    return status;
}

ucs_status_t span_cuda_vmm_import(const uint8_t *keys, size_t K,
                                  const span_chunk_geom_t *geom,
                                  span_cuda_vmm_map_t *map, int *fds)
{
    CUdeviceptr va;
    ucs_status_t status;
    uint32_t i;
    int pushed;

    for (i = 0; i < geom->num_chunks; ++i) {
        fds[i] = -1;
    }
    map->device = 0;
    if (!span_cuda_vmm_ready() || (K < SPAN_CUDA_VMM_KEY_SIZE) ||
        (span_cuda_vmm_ctx_enter(&map->device, &pushed) != UCS_OK)) {
        ucs_error("span cuda vmm: no CUDA driver or device to map %u units",
                  geom->num_chunks);
        return UCS_ERR_UNREACHABLE;
    }
    status = UCS_ERR_NO_MEMORY;
    if (span_libcuda.cuMemAddressReserve(&va, geom->length, 0, 0, 0) ==
        CUDA_SUCCESS) {
        status = span_cuda_vmm_map_units(keys, K, geom, va, map->device,
                                         fds);
        if (status != UCS_OK) {
            span_libcuda.cuMemAddressFree(va, geom->length);
        }
    }
    span_cuda_vmm_ctx_leave(map->device, pushed);
    map->devices  = (map->device < 64) ? (1ull << map->device) : 0;
    map->base     = va;
    map->length   = geom->length;
    map->keys_sum = span_rkey_hash(keys, (size_t)geom->num_chunks * K);
    memcpy(&map->pid, keys + sizeof(uint32_t), sizeof(map->pid));
    memcpy(&map->pid_ns, keys + (4 * sizeof(uint32_t)) + sizeof(uint64_t),
           sizeof(map->pid_ns));
    return status;
}

void span_cuda_vmm_unmap(span_cuda_vmm_map_t *map)
{
    span_libcuda.cuMemUnmap(map->base, map->length);
    span_libcuda.cuMemAddressFree(map->base, map->length);
}

#else
ucs_status_t span_cuda_vmm_export(uint64_t base, uint64_t size, void *key,
                                  size_t K, int *fd_p)
{
    return UCS_ERR_UNSUPPORTED;
}

void span_cuda_vmm_unexport(int fd)
{
}

ucs_status_t span_cuda_vmm_import(const uint8_t *keys, size_t K,
                                  const span_chunk_geom_t *geom,
                                  span_cuda_vmm_map_t *map, int *fds)
{
    ucs_error("span: built without CUDA: cannot map %u device units",
              geom->num_chunks);
    return UCS_ERR_UNREACHABLE;
}

void span_cuda_vmm_unmap(span_cuda_vmm_map_t *map)
{
}
#endif
