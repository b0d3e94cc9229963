/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Device memory for tests and tools. The kinds of allocation (span_gpu.h)
 * are written once, over a small table of a runtime's calls: CUDA's
 * (libcuda) or ROCm's (HIP, where SPAN_GPU_RUNTIME=rocm), each loaded at
 * run time.
 */
#ifdef HAVE_CONFIG_H
#  include "config.h"
#endif

#include "span_gpu.h"

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

const char *span_gpu_kind_names[] = {
    [SPAN_GPU_HOST]     = "host",
    [SPAN_GPU_MALLOC]   = "cudaMalloc",
    [SPAN_GPU_ASYNC]    = "cudaMallocAsync",
    [SPAN_GPU_VMM]      = "VMM",
    [SPAN_GPU_EXTERNAL] = "external",
    [SPAN_GPU_MALLOC_PAIR] = "cudaMalloc pair"
};

/* A GPU runtime: the calls the kinds of memory are made of. Each returns
 * UCS_OK where the runtime's call succeeded; none is called before init
 * made a device current (ready) */
typedef struct {
    const char        *name;    /* "CUDA", "ROCm" */
    ucs_memory_type_t mem_type;
    const char        *missing; /* built without the runtime's headers: why */
    const char *const *libs;    /* the library, by the names tried in turn */
    const char *const *symbols; /* its calls, loaded into fn[] in this order */
    size_t            symbol_count;
    void              **fn;
    int               ready;    /* a device is current */
    int               (*device_count)(void);
    ucs_status_t      (*set_device)(int ordinal);
    size_t            (*granularity)(void); /* of VMM handles, 0 if unknown */
    ucs_status_t      (*alloc)(size_t length, void **ptr);
    void              (*free)(void *ptr);
    /* from the device's stream-ordered pool, synchronized; NULL: none */
    ucs_status_t      (*alloc_async)(size_t length, void **ptr);
    void              (*free_async)(void *ptr);
    /* VMM: a range of addresses, a new handle of physical memory (the
     * runtime's handle, held in 64 bits), mapped into it, dropped (a
     * mapping holds it), access; span_gpu_map_handle() is the sequence */
    ucs_status_t      (*reserve)(size_t size, void *at, void **ptr);
    ucs_status_t      (*create_handle)(size_t size, uint64_t *handle);
    ucs_status_t      (*map)(void *at, size_t size, uint64_t handle);
    void              (*release_handle)(uint64_t handle);
    ucs_status_t      (*set_access)(void *ptr, size_t size);
    void              (*release)(void *ptr, size_t size); /* unmap, free */
    ucs_status_t      (*copy)(void *dst, const void *src, size_t length);
    ucs_status_t      (*sync)(void);
    /* the device allocation that holds ptr */
    ucs_status_t      (*range)(const void *ptr, void **base, size_t *size);
} span_gpu_backend_t;

#define SPAN_GPU_COUNT(_array) (sizeof(_array) / sizeof((_array)[0]))

/* The calls of a backend, named span_gpu_<_p>_<op> */
#define SPAN_GPU_CALLS(_p) \
    .libs           = span_gpu_##_p##_libs, \
    .symbols        = span_gpu_##_p##_symbols, \
    .symbol_count   = SPAN_GPU_COUNT(span_gpu_##_p##_symbols), \
    .fn             = (void**)&span_gpu_##_p, \
    .device_count   = span_gpu_##_p##_device_count, \
    .set_device     = span_gpu_##_p##_set_device, \
    .granularity    = span_gpu_##_p##_granularity, \
    .alloc          = span_gpu_##_p##_alloc, \
    .free           = span_gpu_##_p##_free, \
    .reserve        = span_gpu_##_p##_reserve, \
    .create_handle  = span_gpu_##_p##_create_handle, \
    .map            = span_gpu_##_p##_map, \
    .release_handle = span_gpu_##_p##_release_handle, \
    .set_access     = span_gpu_##_p##_set_access, \
    .release        = span_gpu_##_p##_release, \
    .copy           = span_gpu_##_p##_copy, \
    .sync           = span_gpu_##_p##_sync, \
    .range          = span_gpu_##_p##_range

#define SPAN_GPU_FN(_name)     typeof(_name) *_name
#define SPAN_GPU_OK(_expr, _success) \
    (((_expr) == (_success)) ? UCS_OK : UCS_ERR_IO_ERROR)
#define SPAN_GPU_MEM_OK(_expr, _success) \
    (((_expr) == (_success)) ? UCS_OK : UCS_ERR_NO_MEMORY)

/* ---- CUDA: libcuda ------------------------------------------------------ */
#if HAVE_CUDA
#include <cuda.h>

static struct {
    SPAN_GPU_FN(cuInit);
    SPAN_GPU_FN(cuDeviceGetCount);
    SPAN_GPU_FN(cuDeviceGet);
    SPAN_GPU_FN(cuDevicePrimaryCtxRetain);
    SPAN_GPU_FN(cuCtxSetCurrent);
    SPAN_GPU_FN(cuCtxSynchronize);
    SPAN_GPU_FN(cuMemAlloc);
    SPAN_GPU_FN(cuMemFree);
    SPAN_GPU_FN(cuMemAllocAsync);
    SPAN_GPU_FN(cuMemFreeAsync);
    SPAN_GPU_FN(cuStreamSynchronize);
    SPAN_GPU_FN(cuMemcpy);
    SPAN_GPU_FN(cuMemGetAllocationGranularity);
    SPAN_GPU_FN(cuMemCreate);
    SPAN_GPU_FN(cuMemAddressReserve);
    SPAN_GPU_FN(cuMemAddressFree);
    SPAN_GPU_FN(cuMemMap);
    SPAN_GPU_FN(cuMemUnmap);
    SPAN_GPU_FN(cuMemSetAccess);
    SPAN_GPU_FN(cuMemRelease);
    SPAN_GPU_FN(cuMemGetAddressRange);
} span_gpu_cu;

static const char *const span_gpu_cu_symbols[] = {
    "cuInit", "cuDeviceGetCount", "cuDeviceGet",
    "cuDevicePrimaryCtxRetain", "cuCtxSetCurrent", "cuCtxSynchronize",
    "cuMemAlloc_v2", "cuMemFree_v2", "cuMemAllocAsync", "cuMemFreeAsync",
    "cuStreamSynchronize", "cuMemcpy", "cuMemGetAllocationGranularity",
    "cuMemCreate", "cuMemAddressReserve", "cuMemAddressFree", "cuMemMap",
    "cuMemUnmap", "cuMemSetAccess", "cuMemRelease", "cuMemGetAddressRange_v2"
};

static const char *const span_gpu_cu_libs[] = {"libcuda.so.1", NULL};

static CUmemAllocationProp span_gpu_cu_prop; /* of VMM handles */

static int span_gpu_cu_device_count(void)
{
    int count = 0;

    return ((span_gpu_cu.cuInit(0) == CUDA_SUCCESS) &&
            (span_gpu_cu.cuDeviceGetCount(&count) == CUDA_SUCCESS)) ?
           count : 0;
}

static ucs_status_t span_gpu_cu_set_device(int ordinal)
{
    CUcontext ctx;
    CUdevice dev;

    if ((span_gpu_cu.cuDeviceGet(&dev, ordinal) != CUDA_SUCCESS) ||
        (span_gpu_cu.cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS) ||
        (span_gpu_cu.cuCtxSetCurrent(ctx) != CUDA_SUCCESS)) {
        return UCS_ERR_NO_DEVICE;
    }
    span_gpu_cu_prop.type                 = CU_MEM_ALLOCATION_TYPE_PINNED;
    span_gpu_cu_prop.requestedHandleTypes =
            CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    span_gpu_cu_prop.location.type        = CU_MEM_LOCATION_TYPE_DEVICE;
    span_gpu_cu_prop.location.id          = dev;
    return UCS_OK;
}

static size_t span_gpu_cu_granularity(void)
{
    size_t granularity = 0;

    span_gpu_cu.cuMemGetAllocationGranularity(&granularity, &span_gpu_cu_prop,
                                              CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    return granularity;
}

static ucs_status_t span_gpu_cu_alloc(size_t length, void **ptr)
{
    CUdeviceptr dptr;

    if (span_gpu_cu.cuMemAlloc(&dptr, length) != CUDA_SUCCESS) {
        return UCS_ERR_NO_MEMORY;
    }
    *ptr = (void*)dptr;
    return UCS_OK;
}

static void span_gpu_cu_free(void *ptr)
{
    span_gpu_cu.cuMemFree((CUdeviceptr)ptr);
}

static ucs_status_t span_gpu_cu_alloc_async(size_t length, void **ptr)
{
    CUdeviceptr dptr;

    if ((span_gpu_cu.cuMemAllocAsync(&dptr, length, 0) != CUDA_SUCCESS) ||
        (span_gpu_cu.cuStreamSynchronize(0) != CUDA_SUCCESS)) {
        return UCS_ERR_NO_MEMORY;
    }
    *ptr = (void*)dptr;
    return UCS_OK;
}

static void span_gpu_cu_free_async(void *ptr)
{
    span_gpu_cu.cuMemFreeAsync((CUdeviceptr)ptr, 0);
    span_gpu_cu.cuStreamSynchronize(0);
}

static ucs_status_t span_gpu_cu_reserve(size_t size, void *at, void **ptr)
{
    CUdeviceptr dptr;

    if (span_gpu_cu.cuMemAddressReserve(&dptr, size, 0, (CUdeviceptr)at, 0) !=
        CUDA_SUCCESS) {
        return UCS_ERR_NO_MEMORY;
    }
    *ptr = (void*)dptr;
    return UCS_OK;
}

static ucs_status_t span_gpu_cu_create_handle(size_t size, uint64_t *handle)
{
    CUmemGenericAllocationHandle cu_handle = 0;
    CUresult res = span_gpu_cu.cuMemCreate(&cu_handle, size,
                                           &span_gpu_cu_prop, 0);

    *handle = cu_handle;
    return SPAN_GPU_MEM_OK(res, CUDA_SUCCESS);
}

static ucs_status_t span_gpu_cu_map(void *at, size_t size, uint64_t handle)
{
    return SPAN_GPU_MEM_OK(span_gpu_cu.cuMemMap((CUdeviceptr)at, size, 0,
                                                handle, 0),
                           CUDA_SUCCESS);
}

static void span_gpu_cu_release_handle(uint64_t handle)
{
    span_gpu_cu.cuMemRelease(handle);
}

static ucs_status_t span_gpu_cu_set_access(void *ptr, size_t size)
{
    CUmemAccessDesc access = {span_gpu_cu_prop.location,
                              CU_MEM_ACCESS_FLAGS_PROT_READWRITE};

    return SPAN_GPU_OK(span_gpu_cu.cuMemSetAccess((CUdeviceptr)ptr, size,
                                                  &access, 1),
                       CUDA_SUCCESS);
}

static void span_gpu_cu_release(void *ptr, size_t size)
{
    span_gpu_cu.cuMemUnmap((CUdeviceptr)ptr, size);
    span_gpu_cu.cuMemAddressFree((CUdeviceptr)ptr, size);
}

static ucs_status_t span_gpu_cu_copy(void *dst, const void *src,
                                     size_t length)
{
    return SPAN_GPU_OK(span_gpu_cu.cuMemcpy((CUdeviceptr)dst,
                                            (CUdeviceptr)src, length),
                       CUDA_SUCCESS);
}

static ucs_status_t span_gpu_cu_sync(void)
{
    return SPAN_GPU_OK(span_gpu_cu.cuCtxSynchronize(), CUDA_SUCCESS);
}

static ucs_status_t span_gpu_cu_range(const void *ptr, void **base,
                                      size_t *size)
{
    CUdeviceptr dbase;

    if (span_gpu_cu.cuMemGetAddressRange(&dbase, size, (CUdeviceptr)ptr) !=
        CUDA_SUCCESS) {
        return UCS_ERR_INVALID_ADDR;
    }
    *base = (void*)dbase;
    return UCS_OK;
}

static span_gpu_backend_t span_gpu_cuda = {
    .name        = "CUDA",
    .mem_type    = UCS_MEMORY_TYPE_CUDA,
    .alloc_async = span_gpu_cu_alloc_async,
    .free_async  = span_gpu_cu_free_async,
    SPAN_GPU_CALLS(cu)
};
#else
static span_gpu_backend_t span_gpu_cuda = {
    .name     = "CUDA",
    .mem_type = UCS_MEMORY_TYPE_CUDA,
    .missing  = "built without CUDA (configure --with-cuda)"
};
#endif

/* ---- ROCm: HIP ---------------------------------------------------------- */
#if HAVE_ROCM
#include <hip/hip_runtime_api.h>

static struct {
    SPAN_GPU_FN(hipGetDeviceCount);
    SPAN_GPU_FN(hipSetDevice);
    SPAN_GPU_FN(hipDeviceSynchronize);
    SPAN_GPU_FN(hipMalloc);
    SPAN_GPU_FN(hipFree);
    SPAN_GPU_FN(hipMemcpy);
    SPAN_GPU_FN(hipMemGetAllocationGranularity);
    SPAN_GPU_FN(hipMemCreate);
    SPAN_GPU_FN(hipMemAddressReserve);
    SPAN_GPU_FN(hipMemAddressFree);
    SPAN_GPU_FN(hipMemMap);
    SPAN_GPU_FN(hipMemUnmap);
    SPAN_GPU_FN(hipMemSetAccess);
    SPAN_GPU_FN(hipMemRelease);
    SPAN_GPU_FN(hipMemGetAddressRange);
} span_gpu_hip;

static const char *const span_gpu_hip_symbols[] = {
    "hipGetDeviceCount", "hipSetDevice", "hipDeviceSynchronize",
    "hipMalloc", "hipFree", "hipMemcpy", "hipMemGetAllocationGranularity",
    "hipMemCreate", "hipMemAddressReserve", "hipMemAddressFree",
    "hipMemMap", "hipMemUnmap", "hipMemSetAccess", "hipMemRelease",
    "hipMemGetAddressRange"
};

static const char *const span_gpu_hip_libs[] = {
    "libamdhip64.so", "libamdhip64.so.7", "libamdhip64.so.6",
    "libamdhip64.so.5", NULL
};

static hipMemAllocationProp span_gpu_hip_prop; /* of VMM handles */

static int span_gpu_hip_device_count(void)
{
    int count = 0;

    return (span_gpu_hip.hipGetDeviceCount(&count) == hipSuccess) ? count : 0;
}

/* VMM handles of POSIX fds, as PyTorch's expandable segments on ROCm */
static ucs_status_t span_gpu_hip_set_device(int ordinal)
{
    span_gpu_hip_prop.type                = hipMemAllocationTypePinned;
    span_gpu_hip_prop.requestedHandleType = hipMemHandleTypePosixFileDescriptor;
    span_gpu_hip_prop.location.type       = hipMemLocationTypeDevice;
    span_gpu_hip_prop.location.id         = ordinal;
    return SPAN_GPU_OK(span_gpu_hip.hipSetDevice(ordinal), hipSuccess);
}

static size_t span_gpu_hip_granularity(void)
{
    size_t granularity = 0;

    return (span_gpu_hip.hipMemGetAllocationGranularity(
                    &granularity, &span_gpu_hip_prop,
                    hipMemAllocationGranularityMinimum) == hipSuccess) ?
           granularity : 0;
}

static ucs_status_t span_gpu_hip_alloc(size_t length, void **ptr)
{
    return SPAN_GPU_MEM_OK(span_gpu_hip.hipMalloc(ptr, length), hipSuccess);
}

static void span_gpu_hip_free(void *ptr)
{
    span_gpu_hip.hipFree(ptr);
}

static ucs_status_t span_gpu_hip_reserve(size_t size, void *at, void **ptr)
{
    return SPAN_GPU_MEM_OK(span_gpu_hip.hipMemAddressReserve(ptr, size, 0, at,
                                                             0),
                           hipSuccess);
}

/* HIP's handle is a pointer, held in the 64 bits */
static hipMemGenericAllocationHandle_t span_gpu_hip_handle(uint64_t handle)
{
    return (hipMemGenericAllocationHandle_t)(uintptr_t)handle;
}

static ucs_status_t span_gpu_hip_create_handle(size_t size, uint64_t *handle)
{
    hipMemGenericAllocationHandle_t hip_handle = NULL;
    hipError_t res = span_gpu_hip.hipMemCreate(&hip_handle, size,
                                               &span_gpu_hip_prop, 0);

    *handle = (uintptr_t)hip_handle;
    return SPAN_GPU_MEM_OK(res, hipSuccess);
}

static ucs_status_t span_gpu_hip_map(void *at, size_t size, uint64_t handle)
{
    return SPAN_GPU_MEM_OK(span_gpu_hip.hipMemMap(at, size, 0,
                                                  span_gpu_hip_handle(handle),
                                                  0),
                           hipSuccess);
}

static void span_gpu_hip_release_handle(uint64_t handle)
{
    span_gpu_hip.hipMemRelease(span_gpu_hip_handle(handle));
}

static ucs_status_t span_gpu_hip_set_access(void *ptr, size_t size)
{
    hipMemAccessDesc access = {span_gpu_hip_prop.location,
                               hipMemAccessFlagsProtReadWrite};

    return SPAN_GPU_OK(span_gpu_hip.hipMemSetAccess(ptr, size, &access, 1),
                       hipSuccess);
}

static void span_gpu_hip_release(void *ptr, size_t size)
{
    span_gpu_hip.hipMemUnmap(ptr, size);
    span_gpu_hip.hipMemAddressFree(ptr, size);
}

static ucs_status_t span_gpu_hip_copy(void *dst, const void *src,
                                      size_t length)
{
    return SPAN_GPU_OK(span_gpu_hip.hipMemcpy(dst, src, length,
                                              hipMemcpyDefault),
                       hipSuccess);
}

static ucs_status_t span_gpu_hip_sync(void)
{
    return SPAN_GPU_OK(span_gpu_hip.hipDeviceSynchronize(), hipSuccess);
}

static ucs_status_t span_gpu_hip_range(const void *ptr, void **base,
                                       size_t *size)
{
    return SPAN_GPU_OK(span_gpu_hip.hipMemGetAddressRange(base, size,
                                                          (void*)ptr),
                       hipSuccess);
}

static span_gpu_backend_t span_gpu_rocm = {
    .name     = "ROCm",
    .mem_type = UCS_MEMORY_TYPE_ROCM,
    SPAN_GPU_CALLS(hip) /* no stream-ordered pool */
};
#else
static span_gpu_backend_t span_gpu_rocm = {
    .name     = "ROCm",
    .mem_type = UCS_MEMORY_TYPE_ROCM,
    .missing  = "built without the ROCm headers (configure --with-rocm)"
};
#endif

/* ---- the kinds of memory, over the runtime of this process -------------- */

/* CUDA, or ROCm where SPAN_GPU_RUNTIME=rocm */
static span_gpu_backend_t *span_gpu_backend(void)
{
    const char *runtime = getenv("SPAN_GPU_RUNTIME");

    return ((runtime != NULL) && !strcmp(runtime, "rocm")) ? &span_gpu_rocm :
                                                             &span_gpu_cuda;
}

static struct {
    void   *ptr;
    size_t length;
    int    taken;
} span_gpu_external;

void span_gpu_external_set(void *ptr, size_t length)
{
    span_gpu_external.ptr    = ptr;
    span_gpu_external.length = length;
    span_gpu_external.taken  = 0;
}

static int span_gpu_load(span_gpu_backend_t *b, char *reason, size_t size)
{
    const char *const *lib = b->libs;
    void *handle           = NULL;
    size_t i;

    if (b->missing != NULL) {
        snprintf(reason, size, "%s", b->missing);
        return 0;
    }
    while ((*lib != NULL) &&
           ((handle = dlopen(*lib, RTLD_NOW | RTLD_LOCAL)) == NULL)) {
        ++lib;
    }
    if (handle == NULL) {
        snprintf(reason, size, "no %s library: %s", b->name, dlerror());
        return 0;
    }
    for (i = 0; i < b->symbol_count; ++i) {
        b->fn[i] = dlsym(handle, b->symbols[i]);
        if (b->fn[i] == NULL) {
            snprintf(reason, size, "%s lacks %s", *lib, b->symbols[i]);
            return 0;
        }
    }
    return 1;
}

int span_gpu_init(char *reason, size_t size)
{
    span_gpu_backend_t *b = span_gpu_backend();
    int count, ordinal;

    if (b->ready) {
        return 1;
    }
    if (!span_gpu_load(b, reason, size)) {
        return 0;
    }
    count = b->device_count();
    if (count <= 0) {
        snprintf(reason, size, "no %s device (%d devices)", b->name, count);
        return 0;
    }
    ordinal = (getenv("SPAN_GPU_DEVICE") != NULL) ?
              atoi(getenv("SPAN_GPU_DEVICE")) : 0;
    if (ordinal >= count) {
        snprintf(reason, size, "SPAN_GPU_DEVICE=%d: only %d devices",
                 ordinal, count);
        return 0;
    }
    if (b->set_device(ordinal) != UCS_OK) {
        snprintf(reason, size, "cannot make %s device %d current", b->name,
                 ordinal);
        return 0;
    }
    b->ready = 1;
    return 1;
}

int span_gpu_probe(char *reason, size_t size)
{
    int status, pipefd[2];
    ssize_t got;
    pid_t pid;

    if (pipe(pipefd) != 0) {
        snprintf(reason, size, "pipe failed");
        return 0;
    }
    pid = fork();
    if (pid == 0) {
        close(pipefd[0]);
        status = span_gpu_init(reason, size);
        if (!status && (write(pipefd[1], reason, strlen(reason) + 1) < 0)) {
            _exit(2);
        }
        _exit(status ? 0 : 1);
    }
    close(pipefd[1]);
    got = (pid > 0) ? read(pipefd[0], reason, size - 1) : -1;
    reason[(got > 0) ? got : 0] = '\0';
    close(pipefd[0]);
    if ((pid < 0) || (waitpid(pid, &status, 0) != pid)) {
        snprintf(reason, size, "fork failed");
        return 0;
    }
    return WIFEXITED(status) && (WEXITSTATUS(status) == 0);
}

size_t span_gpu_vmm_granularity(void)
{
    span_gpu_backend_t *b = span_gpu_backend();

    return b->ready ? b->granularity() : 0;
}

ucs_memory_type_t span_gpu_memory_type(void)
{
    return span_gpu_backend()->mem_type;
}

/* A new handle of size bytes mapped at at */
static ucs_status_t span_gpu_map_handle(span_gpu_backend_t *b, void *at,
                                        size_t size)
{
    ucs_status_t status;
    uint64_t handle;

    status = b->create_handle(size, &handle);
    if (status != UCS_OK) {
        return status;
    }
    status = b->map(at, size, handle);
    b->release_handle(handle); /* the mapping holds it */
    return status;
}

/* Handles of length / handles bytes (rounded up to the granularity) mapped
 * back to back into one reserved range */
static ucs_status_t span_gpu_vmm_alloc(span_gpu_backend_t *b, size_t length,
                                       unsigned handles, void *at,
                                       span_gpu_buf_t *buf)
{
    size_t granularity = b->granularity(), hsize;
    unsigned i;

    if ((granularity == 0) || (handles == 0)) {
        return UCS_ERR_INVALID_PARAM;
    }
    hsize = (length + handles - 1) / handles;
    hsize = (hsize + granularity - 1) / granularity * granularity;
    buf->reserved = hsize * handles;
    if (b->reserve(buf->reserved, at, &buf->ptr) != UCS_OK) {
        return UCS_ERR_NO_MEMORY;
    }
    for (i = 0; i < handles; ++i) {
        if (span_gpu_map_handle(b, (char*)buf->ptr + (i * hsize), hsize) !=
            UCS_OK) {
            goto err;
        }
    }
    if (b->set_access(buf->ptr, buf->reserved) == UCS_OK) {
        return UCS_OK;
    }
err:
    b->release(buf->ptr, buf->reserved);
    return UCS_ERR_NO_MEMORY;
}

static ucs_status_t span_gpu_external_take(size_t length, void *at,
                                           span_gpu_buf_t *buf)
{
    if ((span_gpu_external.ptr == NULL) || span_gpu_external.taken ||
        (length > span_gpu_external.length) || (at != NULL)) {
        return UCS_ERR_NO_MEMORY;
    }
    span_gpu_external.taken = 1;
    buf->ptr                = span_gpu_external.ptr;
    return UCS_OK;
}

/* Blocks of length / 4 and the rest, until the driver places the second
 * right after the first. Blocks under 2 MiB share 2 MiB pages and larger
 * ones take the next free pages, so two small blocks (the second one in the
 * upper part of a fresh page) and then a large one give the best odds; the
 * misses are held meanwhile, so that each try gets other addresses */
static ucs_status_t span_gpu_pair_alloc(span_gpu_backend_t *b, size_t length,
                                        span_gpu_buf_t *buf)
{
    size_t small = length / 4, large = length - small;
    void *misses[96], *s[2] = {NULL, NULL}, *l = NULL;
    ucs_status_t status = UCS_ERR_UNSUPPORTED;
    unsigned i, count = 0;
    int j;

    while (count + 3 <= SPAN_GPU_COUNT(misses)) {
        for (j = 0; j < 2; ++j) {
            if (b->alloc(small, &s[j]) != UCS_OK) {
                status = UCS_ERR_NO_MEMORY;
                goto out;
            }
            misses[count++] = s[j];
        }
        if (b->alloc(large, &l) != UCS_OK) {
            status = UCS_ERR_NO_MEMORY;
            break;
        }
        for (j = 0; j < 2; ++j) {
            if ((char*)s[j] + small == (char*)l) {
                misses[count - 2 + j] = misses[count - 1 - j]; /* keep s[j] */
                buf->ptr    = s[j];
                buf->second = l;
                --count;
                status = UCS_OK;
                goto out;
            }
        }
        misses[count++] = l;
    }
out:
    if (status == UCS_ERR_UNSUPPORTED) {
        fprintf(stderr, "span_gpu: %zu-byte blocks at %p and %p, %zu-byte "
                "blocks at %p (last of %u tries): never back to back\n", small,
                s[0], s[1], large, l, count / 3);
    }
    for (i = 0; i < count; ++i) {
        b->free(misses[i]);
    }
    return status;
}

static ucs_status_t span_gpu_device_alloc(span_gpu_backend_t *b,
                                          span_gpu_kind_t kind, size_t length,
                                          unsigned handles, void *at,
                                          span_gpu_buf_t *buf)
{
    if (!b->ready) {
        return UCS_ERR_NO_DEVICE;
    }
    switch (kind) {
    case SPAN_GPU_MALLOC:
        /* takes no address: the caller retries for one */
        return b->alloc(length, &buf->ptr);
    case SPAN_GPU_ASYNC:
        return (b->alloc_async != NULL) ? b->alloc_async(length, &buf->ptr) :
                                          UCS_ERR_UNSUPPORTED;
    case SPAN_GPU_VMM:
        return span_gpu_vmm_alloc(b, length, handles, at, buf);
    case SPAN_GPU_EXTERNAL:
        return span_gpu_external_take(length, at, buf);
    case SPAN_GPU_MALLOC_PAIR:
        return (at == NULL) ? span_gpu_pair_alloc(b, length, buf) :
                              UCS_ERR_NO_MEMORY;
    default:
        return UCS_ERR_INVALID_PARAM;
    }
}

ucs_status_t span_gpu_alloc(span_gpu_kind_t kind, size_t length,
                            unsigned handles, void *at, span_gpu_buf_t *buf)
{
    ucs_status_t status;

    memset(buf, 0, sizeof(*buf));
    buf->kind    = kind;
    buf->length  = length;
    buf->handles = handles;
    if (kind == SPAN_GPU_HOST) {
        buf->ptr = mmap(NULL, length, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        status   = (buf->ptr == MAP_FAILED) ? UCS_ERR_NO_MEMORY : UCS_OK;
    } else {
        status = span_gpu_device_alloc(span_gpu_backend(), kind, length,
                                       handles, at, buf);
    }
    if (status != UCS_OK) {
        buf->ptr = NULL; /* nothing for span_gpu_free to free */
    }
    return status;
}

void span_gpu_free(span_gpu_buf_t *buf)
{
    span_gpu_backend_t *b = span_gpu_backend();

    if (buf->ptr == NULL) {
        return;
    }
    switch (buf->kind) {
    case SPAN_GPU_HOST:
        munmap(buf->ptr, buf->length);
        break;
    case SPAN_GPU_MALLOC:
        b->free(buf->ptr);
        break;
    case SPAN_GPU_ASYNC:
        b->free_async(buf->ptr);
        break;
    case SPAN_GPU_VMM:
        b->release(buf->ptr, buf->reserved);
        break;
    case SPAN_GPU_EXTERNAL:
        span_gpu_external.taken = 0;
        break;
    case SPAN_GPU_MALLOC_PAIR:
        b->free(buf->ptr);
        b->free(buf->second);
        break;
    default:
        break;
    }
    buf->ptr = NULL;
}

/* Bytes from ptr to the end of its device allocation, or max where ptr is
 * not device memory */
static size_t span_gpu_room(span_gpu_backend_t *b, const void *ptr,
                            size_t max)
{
    size_t size;
    void *base;

    if (b->range(ptr, &base, &size) != UCS_OK) {
        return max;
    }
    size = (char*)base + size - (const char*)ptr;
    return (size < max) ? size : max;
}

/* One copy, or where the runtime refuses a copy that crosses from one
 * allocation into the next (the blocks of SPAN_GPU_MALLOC_PAIR), one per
 * stretch that lies in one allocation on both sides */
ucs_status_t span_gpu_copy(void *dst, const void *src, size_t length)
{
    span_gpu_backend_t *b = span_gpu_backend();
    size_t done, n;

    if (!b->ready) {
        memcpy(dst, src, length);
        return UCS_OK;
    }
    if (b->copy(dst, src, length) == UCS_OK) {
        return b->sync();
    }
    for (done = 0; done < length; done += n) {
        n = span_gpu_room(b, (char*)dst + done,
                          span_gpu_room(b, (const char*)src + done,
                                        length - done));
        if (b->copy((char*)dst + done, (const char*)src + done, n) !=
            UCS_OK) {
            return UCS_ERR_IO_ERROR;
        }
    }
    return b->sync();
}
