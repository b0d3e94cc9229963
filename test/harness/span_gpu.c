/*
 * Device memory for tests and tools, through libcuda loaded at run time.
 */
#ifdef HAVE_CONFIG_H
#  include "config.h"
#endif

#include "span_gpu.h"

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

static ucs_status_t span_gpu_host_alloc(size_t length, span_gpu_buf_t *buf)
{
    buf->ptr = mmap(NULL, length, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return (buf->ptr == MAP_FAILED) ? UCS_ERR_NO_MEMORY : UCS_OK;
}

#if HAVE_CUDA
#include <cuda.h>
#include <dlfcn.h>

#define SPAN_GPU_FN(_name) typeof(_name) *_name
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
} span_gpu_fn;

static CUdevice span_gpu_dev;
static int      span_gpu_ready;

static int span_gpu_load(char *reason, size_t size)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    void **fn = (void**)&span_gpu_fn;
    static const char *names[] = {
        "cuInit", "cuDeviceGetCount", "cuDeviceGet",
        "cuDevicePrimaryCtxRetain", "cuCtxSetCurrent", "cuCtxSynchronize",
        "cuMemAlloc_v2", "cuMemFree_v2", "cuMemAllocAsync", "cuMemFreeAsync",
        "cuStreamSynchronize", "cuMemcpy", "cuMemGetAllocationGranularity",
        "cuMemCreate", "cuMemAddressReserve", "cuMemAddressFree", "cuMemMap",
        "cuMemUnmap", "cuMemSetAccess", "cuMemRelease",
        "cuMemGetAddressRange_v2"
    };
    size_t i;

    if (lib == NULL) {
        snprintf(reason, size, "no CUDA driver (libcuda.so.1: %s)", dlerror());
        return 0;
    }
    for (i = 0; i < sizeof(names) / sizeof(names[0]); ++i) {
        fn[i] = dlsym(lib, names[i]);
        if (fn[i] == NULL) {
            snprintf(reason, size, "libcuda.so.1 lacks %s", names[i]);
            return 0;
        }
    }
    return 1;
}

static int span_gpu_cuda_init(char *reason, size_t size)
{
    int count = 0, ordinal;
    CUcontext ctx;

    if (span_gpu_ready) {
        return 1;
    }
    if (!span_gpu_load(reason, size)) {
        return 0;
    }
    if ((span_gpu_fn.cuInit(0) != CUDA_SUCCESS) ||
        (span_gpu_fn.cuDeviceGetCount(&count) != CUDA_SUCCESS) ||
        (count == 0)) {
        snprintf(reason, size, "no CUDA device (cuInit or device count "
                 "failed, %d devices)", count);
        return 0;
    }
    ordinal = (getenv("SPAN_GPU_DEVICE") != NULL) ?
              atoi(getenv("SPAN_GPU_DEVICE")) : 0;
    if (ordinal >= count) {
        snprintf(reason, size, "SPAN_GPU_DEVICE=%d: only %d devices",
                 ordinal, count);
        return 0;
    }
    if ((span_gpu_fn.cuDeviceGet(&span_gpu_dev, ordinal) != CUDA_SUCCESS) ||
        (span_gpu_fn.cuDevicePrimaryCtxRetain(&ctx, span_gpu_dev) !=
         CUDA_SUCCESS) ||
        (span_gpu_fn.cuCtxSetCurrent(ctx) != CUDA_SUCCESS)) {
        snprintf(reason, size, "cannot make device %d's context current",
                 ordinal);
        return 0;
    }
    span_gpu_ready = 1;
    return 1;
}

static void span_gpu_vmm_prop(CUmemAllocationProp *prop)
{
    memset(prop, 0, sizeof(*prop));
    prop->type                 = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop->requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    prop->location.type        = CU_MEM_LOCATION_TYPE_DEVICE;
    prop->location.id          = span_gpu_dev;
}

static size_t span_gpu_cuda_vmm_granularity(void)
{
    CUmemAllocationProp prop;
    size_t granularity = 0;

    if (!span_gpu_ready) {
        return 0;
    }
    span_gpu_vmm_prop(&prop);
    span_gpu_fn.cuMemGetAllocationGranularity(&granularity, &prop,
                                              CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    return granularity;
}

static void span_gpu_vmm_free(span_gpu_buf_t *buf)
{
    CUdeviceptr base = (CUdeviceptr)buf->ptr;

    span_gpu_fn.cuMemUnmap(base, buf->reserved);
    span_gpu_fn.cuMemAddressFree(base, buf->reserved);
}

static ucs_status_t span_gpu_vmm_alloc(size_t length, unsigned handles,
                                       void *at, span_gpu_buf_t *buf)
{
    size_t granularity = span_gpu_cuda_vmm_granularity(), hsize;
    CUmemGenericAllocationHandle handle;
    CUmemAllocationProp prop;
    CUmemAccessDesc access;
    CUdeviceptr base;
    unsigned i;

    if ((granularity == 0) || (handles == 0)) {
        return UCS_ERR_INVALID_PARAM;
    }
    hsize = (length + handles - 1) / handles;
    hsize = (hsize + granularity - 1) / granularity * granularity;
    buf->reserved = hsize * handles;
    if (span_gpu_fn.cuMemAddressReserve(&base, buf->reserved, 0,
                                        (CUdeviceptr)at, 0) != CUDA_SUCCESS) {
        return UCS_ERR_NO_MEMORY;
    }
    buf->ptr = (void*)base;
    span_gpu_vmm_prop(&prop);
    for (i = 0; i < handles; ++i) {
        if (span_gpu_fn.cuMemCreate(&handle, hsize, &prop, 0) !=
            CUDA_SUCCESS) {
            goto err;
        }
        if (span_gpu_fn.cuMemMap(base + (i * hsize), hsize, 0, handle, 0) !=
            CUDA_SUCCESS) {
            span_gpu_fn.cuMemRelease(handle);
            goto err;
        }
        span_gpu_fn.cuMemRelease(handle); /* the mapping holds it */
    }
    access.location = prop.location;
    access.flags    = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    if (span_gpu_fn.cuMemSetAccess(base, buf->reserved, &access, 1) ==
        CUDA_SUCCESS) {
        return UCS_OK;
    }
err:
    span_gpu_vmm_free(buf);
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
static ucs_status_t span_gpu_pair_alloc(size_t length, span_gpu_buf_t *buf)
{
    size_t small = length / 4, large = length - small;
    CUdeviceptr misses[96], s[2] = {0, 0}, b = 0;
    ucs_status_t status = UCS_ERR_UNSUPPORTED;
    unsigned i, count = 0;
    int j;

    while (count + 3 <= sizeof(misses) / sizeof(misses[0])) {
        for (j = 0; j < 2; ++j) {
            if (span_gpu_fn.cuMemAlloc(&s[j], small) != CUDA_SUCCESS) {
                status = UCS_ERR_NO_MEMORY;
                goto out;
            }
            misses[count++] = s[j];
        }
        if (span_gpu_fn.cuMemAlloc(&b, large) != CUDA_SUCCESS) {
            status = UCS_ERR_NO_MEMORY;
            break;
        }
        for (j = 0; j < 2; ++j) {
            if (s[j] + small == b) {
                misses[count - 2 + j] = misses[count - 1 - j]; /* keep s[j] */
                buf->ptr    = (void*)s[j];
                buf->second = (void*)b;
                --count;
                status = UCS_OK;
                goto out;
            }
        }
        misses[count++] = b;
    }
out:
    if (status == UCS_ERR_UNSUPPORTED) {
        fprintf(stderr, "span_gpu: %zu-byte blocks at 0x%llx and 0x%llx, "
                "%zu-byte blocks at 0x%llx (last of %u tries): never back "
                "to back\n", small, (unsigned long long)s[0],
                (unsigned long long)s[1], large, (unsigned long long)b,
                count / 3);
    }
    for (i = 0; i < count; ++i) {
        span_gpu_fn.cuMemFree(misses[i]);
    }
    return status;
}

static ucs_status_t span_gpu_cuda_alloc(span_gpu_kind_t kind, size_t length,
                                        unsigned handles, void *at,
                                        span_gpu_buf_t *buf)
{
    CUdeviceptr ptr;
    CUresult res = CUDA_SUCCESS;

    memset(buf, 0, sizeof(*buf));
    buf->kind    = kind;
    buf->length  = length;
    buf->handles = handles;
    if (kind == SPAN_GPU_HOST) {
        return span_gpu_host_alloc(length, buf);
    }
    if (!span_gpu_ready) {
        return UCS_ERR_NO_DEVICE;
    }
    switch (kind) {
    case SPAN_GPU_MALLOC:
        res = span_gpu_fn.cuMemAlloc(&ptr, length);
        break;
    case SPAN_GPU_ASYNC:
        res = span_gpu_fn.cuMemAllocAsync(&ptr, length, 0);
        if (res == CUDA_SUCCESS) {
            res = span_gpu_fn.cuStreamSynchronize(0);
        }
        break;
    case SPAN_GPU_VMM:
        return span_gpu_vmm_alloc(length, handles, at, buf);
    case SPAN_GPU_EXTERNAL:
        return span_gpu_external_take(length, at, buf);
    case SPAN_GPU_MALLOC_PAIR:
        return (at == NULL) ? span_gpu_pair_alloc(length, buf) :
                              UCS_ERR_NO_MEMORY;
    default:
        return UCS_ERR_INVALID_PARAM;
    }
    if (res != CUDA_SUCCESS) {
        return UCS_ERR_NO_MEMORY;
    }
    buf->ptr = (void*)ptr;
    return UCS_OK;
}

static void span_gpu_cuda_free(span_gpu_buf_t *buf)
{
    switch (buf->kind) {
    case SPAN_GPU_HOST:
        munmap(buf->ptr, buf->length);
        break;
    case SPAN_GPU_MALLOC:
        span_gpu_fn.cuMemFree((CUdeviceptr)buf->ptr);
        break;
    case SPAN_GPU_ASYNC:
        span_gpu_fn.cuMemFreeAsync((CUdeviceptr)buf->ptr, 0);
        span_gpu_fn.cuStreamSynchronize(0);
        break;
    case SPAN_GPU_VMM:
        span_gpu_vmm_free(buf);
        break;
    case SPAN_GPU_EXTERNAL:
        span_gpu_external.taken = 0;
        break;
    case SPAN_GPU_MALLOC_PAIR:
        span_gpu_fn.cuMemFree((CUdeviceptr)buf->ptr);
        span_gpu_fn.cuMemFree((CUdeviceptr)buf->second);
        break;
    default:
        break;
    }
    buf->ptr = NULL;
}

/* Bytes from ptr to the end of its device allocation, or max where ptr is
 * not device memory */
static size_t span_gpu_room(const void *ptr, size_t max)
{
    CUdeviceptr base;
    size_t size;

    if (span_gpu_fn.cuMemGetAddressRange(&base, &size, (CUdeviceptr)ptr) !=
        CUDA_SUCCESS) {
        return max;
    }
    size = base + size - (CUdeviceptr)ptr;
    return (size < max) ? size : max;
}

/* One cuMemcpy, or where the driver refuses a copy that crosses from one
 * allocation into the next (the blocks of SPAN_GPU_MALLOC_PAIR), one per
 * stretch that lies in one allocation on both sides */
static ucs_status_t span_gpu_cuda_copy(void *dst, const void *src,
                                       size_t length)
{
    size_t done, n;

    if (!span_gpu_ready) {
        memcpy(dst, src, length);
        return UCS_OK;
    }
    if (span_gpu_fn.cuMemcpy((CUdeviceptr)dst, (CUdeviceptr)src, length) ==
        CUDA_SUCCESS) {
        return (span_gpu_fn.cuCtxSynchronize() == CUDA_SUCCESS) ?
               UCS_OK : UCS_ERR_IO_ERROR;
    }
    for (done = 0; done < length; done += n) {
        n = span_gpu_room((char*)dst + done,
                          span_gpu_room((const char*)src + done,
                                        length - done));
        if (span_gpu_fn.cuMemcpy((CUdeviceptr)dst + done,
                                 (CUdeviceptr)src + done, n) !=
            CUDA_SUCCESS) {
            return UCS_ERR_IO_ERROR;
        }
    }
    return (span_gpu_fn.cuCtxSynchronize() == CUDA_SUCCESS) ?
           UCS_OK : UCS_ERR_IO_ERROR;
}
#else
static int span_gpu_cuda_init(char *reason, size_t size)
{
    snprintf(reason, size, "built without CUDA (configure --with-cuda)");
    return 0;
}

static size_t span_gpu_cuda_vmm_granularity(void)
{
    return 0;
}

static ucs_status_t span_gpu_cuda_alloc(span_gpu_kind_t kind, size_t length,
                                        unsigned handles, void *at,
                                        span_gpu_buf_t *buf)
{
    memset(buf, 0, sizeof(*buf));
    buf->kind   = kind;
    buf->length = length;
    return (kind == SPAN_GPU_HOST) ? span_gpu_host_alloc(length, buf) :
                                     UCS_ERR_NO_DEVICE;
}

static void span_gpu_cuda_free(span_gpu_buf_t *buf)
{
    munmap(buf->ptr, buf->length);
}

static ucs_status_t span_gpu_cuda_copy(void *dst, const void *src,
                                       size_t length)
{
    memcpy(dst, src, length);
    return UCS_OK;
}
#endif

/* ---- ROCm (SPAN_GPU_RUNTIME=rocm): HIP loaded at run time -------------- */
#if HAVE_ROCM
#include <hip/hip_runtime_api.h>
#include <dlfcn.h>

#define SPAN_GPU_HIP_FN(_name) typeof(_name) *_name
static struct {
    SPAN_GPU_HIP_FN(hipGetDeviceCount);
    SPAN_GPU_HIP_FN(hipSetDevice);
    SPAN_GPU_HIP_FN(hipDeviceSynchronize);
    SPAN_GPU_HIP_FN(hipMalloc);
    SPAN_GPU_HIP_FN(hipFree);
    SPAN_GPU_HIP_FN(hipMemcpy);
    SPAN_GPU_HIP_FN(hipMemGetAllocationGranularity);
    SPAN_GPU_HIP_FN(hipMemCreate);
    SPAN_GPU_HIP_FN(hipMemAddressReserve);
    SPAN_GPU_HIP_FN(hipMemAddressFree);
    SPAN_GPU_HIP_FN(hipMemMap);
    SPAN_GPU_HIP_FN(hipMemUnmap);
    SPAN_GPU_HIP_FN(hipMemSetAccess);
    SPAN_GPU_HIP_FN(hipMemRelease);
} span_gpu_hip;

static int span_gpu_hip_device = -1;

static int span_gpu_hip_load(char *reason, size_t size)
{
    static const char *libs[] = {"libamdhip64.so", "libamdhip64.so.7",
                                 "libamdhip64.so.6", "libamdhip64.so.5"};
    static const char *names[] = {
        "hipGetDeviceCount", "hipSetDevice", "hipDeviceSynchronize",
        "hipMalloc", "hipFree", "hipMemcpy", "hipMemGetAllocationGranularity",
        "hipMemCreate", "hipMemAddressReserve", "hipMemAddressFree",
        "hipMemMap", "hipMemUnmap", "hipMemSetAccess", "hipMemRelease"
    };
    void **fn = (void**)&span_gpu_hip;
    void *lib = NULL;
    size_t i;

    for (i = 0; (lib == NULL) && (i < sizeof(libs) / sizeof(libs[0])); ++i) {
        lib = dlopen(libs[i], RTLD_NOW | RTLD_LOCAL);
    }
    if (lib == NULL) {
        snprintf(reason, size, "no HIP runtime (libamdhip64: %s)", dlerror());
        return 0;
    }
    for (i = 0; i < sizeof(names) / sizeof(names[0]); ++i) {
        fn[i] = dlsym(lib, names[i]);
        if (fn[i] == NULL) {
            snprintf(reason, size, "the HIP runtime lacks %s", names[i]);
            return 0;
        }
    }
    return 1;
}

static int span_gpu_rocm_init(char *reason, size_t size)
{
    int count = 0, ordinal;

    if (span_gpu_hip_device >= 0) {
        return 1;
    }
    if (!span_gpu_hip_load(reason, size)) {
        return 0;
    }
    if ((span_gpu_hip.hipGetDeviceCount(&count) != hipSuccess) ||
        (count == 0)) {
        snprintf(reason, size, "no AMD GPU (hipGetDeviceCount: %d devices)",
                 count);
        return 0;
    }
    ordinal = (getenv("SPAN_GPU_DEVICE") != NULL) ?
              atoi(getenv("SPAN_GPU_DEVICE")) : 0;
    if ((ordinal >= count) ||
        (span_gpu_hip.hipSetDevice(ordinal) != hipSuccess)) {
        snprintf(reason, size, "SPAN_GPU_DEVICE=%d: %d devices", ordinal,
                 count);
        return 0;
    }
    span_gpu_hip_device = ordinal;
    return 1;
}

static void span_gpu_rocm_vmm_prop(hipMemAllocationProp *prop)
{
    memset(prop, 0, sizeof(*prop));
    prop->type                = hipMemAllocationTypePinned;
    prop->requestedHandleType = hipMemHandleTypePosixFileDescriptor;
    prop->location.type       = hipMemLocationTypeDevice;
    prop->location.id         = span_gpu_hip_device;
}

static size_t span_gpu_rocm_vmm_granularity(void)
{
    hipMemAllocationProp prop;
    size_t granularity = 0;

    if (span_gpu_hip_device < 0) {
        return 0;
    }
    span_gpu_rocm_vmm_prop(&prop);
    if (span_gpu_hip.hipMemGetAllocationGranularity(
                &granularity, &prop, hipMemAllocationGranularityMinimum) !=
        hipSuccess) {
        return 0;
    }
    return granularity;
}

static void span_gpu_rocm_vmm_free(span_gpu_buf_t *buf)
{
    span_gpu_hip.hipMemUnmap(buf->ptr, buf->reserved);
    span_gpu_hip.hipMemAddressFree(buf->ptr, buf->reserved);
}

/* POSIX-fd handles back to back, as PyTorch's expandable segments on ROCm */
static ucs_status_t span_gpu_rocm_vmm_alloc(size_t length, unsigned handles,
                                            void *at, span_gpu_buf_t *buf)
{
    size_t granularity = span_gpu_rocm_vmm_granularity(), hsize;
    hipMemGenericAllocationHandle_t handle;
    hipMemAllocationProp prop;
    hipMemAccessDesc access;
    unsigned i;

    if ((granularity == 0) || (handles == 0)) {
        return UCS_ERR_INVALID_PARAM;
    }
    hsize = (length + handles - 1) / handles;
    hsize = (hsize + granularity - 1) / granularity * granularity;
    buf->reserved = hsize * handles;
    if (span_gpu_hip.hipMemAddressReserve(&buf->ptr, buf->reserved, 0, at,
                                          0) != hipSuccess) {
        return UCS_ERR_NO_MEMORY;
    }
    span_gpu_rocm_vmm_prop(&prop);
    for (i = 0; i < handles; ++i) {
        if (span_gpu_hip.hipMemCreate(&handle, hsize, &prop, 0) != hipSuccess) {
            goto err;
        }
        if (span_gpu_hip.hipMemMap((char*)buf->ptr + (i * hsize), hsize, 0,
                                   handle, 0) != hipSuccess) {
            span_gpu_hip.hipMemRelease(handle);
            goto err;
        }
        span_gpu_hip.hipMemRelease(handle); /* the mapping holds it */
    }
    access.location = prop.location;
    access.flags    = hipMemAccessFlagsProtReadWrite;
    if (span_gpu_hip.hipMemSetAccess(buf->ptr, buf->reserved, &access, 1) ==
        hipSuccess) {
        return UCS_OK;
    }
err:
    span_gpu_rocm_vmm_free(buf);
    return UCS_ERR_NO_MEMORY;
}

/* Blocks of a quarter and the rest of length, the second right after the
 * first, or UCS_ERR_UNSUPPORTED */
static ucs_status_t span_gpu_rocm_pair_alloc(size_t length, span_gpu_buf_t *buf)
{
    size_t small = length / 4;

    if (span_gpu_hip.hipMalloc(&buf->ptr, small) != hipSuccess) {
        return UCS_ERR_NO_MEMORY;
    }
    if (span_gpu_hip.hipMalloc(&buf->second, length - small) != hipSuccess) {
        span_gpu_hip.hipFree(buf->ptr);
        return UCS_ERR_NO_MEMORY;
    }
    if ((char*)buf->ptr + small != (char*)buf->second) {
        span_gpu_hip.hipFree(buf->second);
        span_gpu_hip.hipFree(buf->ptr);
        return UCS_ERR_UNSUPPORTED;
    }
    return UCS_OK;
}

static ucs_status_t span_gpu_rocm_alloc(span_gpu_kind_t kind, size_t length,
                                        unsigned handles, void *at,
                                        span_gpu_buf_t *buf)
{
    memset(buf, 0, sizeof(*buf));
    buf->kind    = kind;
    buf->length  = length;
    buf->handles = handles;
    if (kind == SPAN_GPU_HOST) {
        return span_gpu_host_alloc(length, buf);
    }
    if (span_gpu_hip_device < 0) {
        return UCS_ERR_NO_DEVICE;
    }
    switch (kind) {
    case SPAN_GPU_MALLOC:
        /* hipMalloc takes no address: the caller retries for one */
        return (span_gpu_hip.hipMalloc(&buf->ptr, length) == hipSuccess) ?
               UCS_OK : UCS_ERR_NO_MEMORY;
    case SPAN_GPU_VMM:
        return span_gpu_rocm_vmm_alloc(length, handles, at, buf);
    case SPAN_GPU_MALLOC_PAIR:
        return (at == NULL) ? span_gpu_rocm_pair_alloc(length, buf) :
                              UCS_ERR_NO_MEMORY;
    default:
        return UCS_ERR_UNSUPPORTED; /* no stream-ordered pool, no PyTorch */
    }
}

static void span_gpu_rocm_free(span_gpu_buf_t *buf)
{
    switch (buf->kind) {
    case SPAN_GPU_HOST:
        munmap(buf->ptr, buf->length);
        break;
    case SPAN_GPU_MALLOC:
        span_gpu_hip.hipFree(buf->ptr);
        break;
    case SPAN_GPU_VMM:
        span_gpu_rocm_vmm_free(buf);
        break;
    case SPAN_GPU_MALLOC_PAIR:
        span_gpu_hip.hipFree(buf->ptr);
        span_gpu_hip.hipFree(buf->second);
        break;
    default:
        break;
    }
    buf->ptr = NULL;
}

static ucs_status_t span_gpu_rocm_copy(void *dst, const void *src,
                                       size_t length)
{
    if (span_gpu_hip_device < 0) {
        memcpy(dst, src, length);
        return UCS_OK;
    }
    return ((span_gpu_hip.hipMemcpy(dst, src, length, hipMemcpyDefault) ==
             hipSuccess) &&
            (span_gpu_hip.hipDeviceSynchronize() == hipSuccess)) ?
           UCS_OK : UCS_ERR_IO_ERROR;
}
#else
static int span_gpu_rocm_init(char *reason, size_t size)
{
    snprintf(reason, size, "built without the ROCm headers (configure "
             "--with-rocm)");
    return 0;
}

static size_t span_gpu_rocm_vmm_granularity(void)
{
    return 0;
}

static ucs_status_t span_gpu_rocm_alloc(span_gpu_kind_t kind, size_t length,
                                        unsigned handles, void *at,
                                        span_gpu_buf_t *buf)
{
    memset(buf, 0, sizeof(*buf));
    buf->kind   = kind;
    buf->length = length;
    return (kind == SPAN_GPU_HOST) ? span_gpu_host_alloc(length, buf) :
                                     UCS_ERR_NO_DEVICE;
}

static void span_gpu_rocm_free(span_gpu_buf_t *buf)
{
    munmap(buf->ptr, buf->length);
}

static ucs_status_t span_gpu_rocm_copy(void *dst, const void *src,
                                       size_t length)
{
    memcpy(dst, src, length);
    return UCS_OK;
}
#endif

/* ---- the runtime of this process: CUDA, or ROCm where asked for ------- */

static int span_gpu_rocm(void)
{
    const char *runtime = getenv("SPAN_GPU_RUNTIME");

    return (runtime != NULL) && !strcmp(runtime, "rocm");
}

int span_gpu_init(char *reason, size_t size)
{
    return span_gpu_rocm() ? span_gpu_rocm_init(reason, size) :
                             span_gpu_cuda_init(reason, size);
}

size_t span_gpu_vmm_granularity(void)
{
    return span_gpu_rocm() ? span_gpu_rocm_vmm_granularity() :
                             span_gpu_cuda_vmm_granularity();
}

ucs_status_t span_gpu_alloc(span_gpu_kind_t kind, size_t length,
                            unsigned handles, void *at, span_gpu_buf_t *buf)
{
    return span_gpu_rocm() ?
           span_gpu_rocm_alloc(kind, length, handles, at, buf) :
           span_gpu_cuda_alloc(kind, length, handles, at, buf);
}

void span_gpu_free(span_gpu_buf_t *buf)
{
    if (span_gpu_rocm()) {
        span_gpu_rocm_free(buf);
    } else {
        span_gpu_cuda_free(buf);
    }
}

ucs_status_t span_gpu_copy(void *dst, const void *src, size_t length)
{
    return span_gpu_rocm() ? span_gpu_rocm_copy(dst, src, length) :
                             span_gpu_cuda_copy(dst, src, length);
}

ucs_memory_type_t span_gpu_memory_type(void)
{
    return span_gpu_rocm() ? UCS_MEMORY_TYPE_ROCM : UCS_MEMORY_TYPE_CUDA;
}
