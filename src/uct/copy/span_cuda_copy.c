/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * CUDA's calls for the VMM copy engine (span_cuda_copy.h).
 */
#ifdef HAVE_CONFIG_H
#  include "config.h"
#endif
#include "span_cuda_copy.h"
#include "span_cuda_kernel.h"
#include "vendor/span_libcuda.h"

#include <ucs/debug/log_def.h>
#include <ucs/sys/math.h>
#include <inttypes.h>
#include <stdio.h>

typedef struct span_cuda_copy_device {
    CUcontext  ctx;    /* the device's primary context, retained */
    CUstream   stream; /* non-blocking, NULL until first used */
    CUmodule   module; /* of the copy kernels, loaded on the first batch */
    CUfunction kernel[SPAN_CUDA_KERNEL_SIZES]; /* of 16, 64... pieces */
} span_cuda_copy_device_t;

/* The state of an engine */
typedef struct span_cuda_copy {
    span_cuda_copy_device_t dev[SPAN_VMM_COPY_MAX_DEVICES];
    int                     pushed;     /* from begin to end: the device's
                                           context was made current */
    size_t                  kernel_max; /* 0: batches are not offered */
    span_cuda_kernel_args_t args;       /* the launch being filled */
} span_cuda_copy_t;

static ucs_status_t span_cuda_copy_init(void *vendor,
                                        const span_vmm_copy_params_t *params)
{
    /* streams and kernels are made per device on first use */
#if HAVE_CUDA_KERNEL
    span_cuda_copy_t *cuda = vendor;

    /* libcuda was loaded with the twin's MD; a driver without the
     * kernel's calls gets no batches */
    if ((span_libcuda.cuModuleLoadData != NULL) &&
        (span_libcuda.cuModuleGetFunction != NULL) &&
        (span_libcuda.cuModuleUnload != NULL) &&
        (span_libcuda.cuLaunchKernel != NULL)) {
        cuda->kernel_max = params->kernel_max;
    }
#endif
    return UCS_OK;
}

static void span_cuda_copy_cleanup(void *vendor)
{
    span_cuda_copy_t *cuda = vendor;
    CUcontext ctx;
    CUdevice cu_dev;
    int i;

    for (i = 0; i < SPAN_VMM_COPY_MAX_DEVICES; ++i) {
        if (cuda->dev[i].stream == NULL) {
            continue;
        }
        if ((cuda->dev[i].module != NULL) &&
            (SPAN_LIBCUDA_FUNC(UCS_LOG_LEVEL_WARN, cuCtxPushCurrent,
                               cuda->dev[i].ctx) == CUDA_SUCCESS)) {
            SPAN_LIBCUDA_FUNC(UCS_LOG_LEVEL_WARN, cuModuleUnload,
                              cuda->dev[i].module);
            SPAN_LIBCUDA_FUNC(UCS_LOG_LEVEL_WARN, cuCtxPopCurrent, &ctx);
        }
        SPAN_LIBCUDA_FUNC(UCS_LOG_LEVEL_WARN, cuStreamDestroy,
                          cuda->dev[i].stream);
        if (SPAN_LIBCUDA_FUNC(UCS_LOG_LEVEL_WARN, cuDeviceGet, &cu_dev, i) ==
            CUDA_SUCCESS) {
            SPAN_LIBCUDA_FUNC(UCS_LOG_LEVEL_WARN, cuDevicePrimaryCtxRelease,
                              cu_dev);
        }
    }
}

/* The device's stream, made on first use in its primary context */
static ucs_status_t span_cuda_copy_stream(span_cuda_copy_t *cuda, int device)
{
    span_cuda_copy_device_t *dev = &cuda->dev[device];
    CUcontext ctx;
    CUdevice cu_dev;
    CUresult res;

    if ((SPAN_LIBCUDA_CALL(cuDeviceGet, &cu_dev, device) != CUDA_SUCCESS) ||
        (SPAN_LIBCUDA_CALL(cuDevicePrimaryCtxRetain, &ctx, cu_dev) !=
         CUDA_SUCCESS)) {
        ucs_error("span cuda copy: no primary context on device %d", device);
        return UCS_ERR_NO_DEVICE;
    }
    SPAN_LIBCUDA_FUNC(UCS_LOG_LEVEL_WARN, cuCtxPushCurrent, ctx);
    res = SPAN_LIBCUDA_CALL(cuStreamCreate, &dev->stream,
                            CU_STREAM_NON_BLOCKING);
    SPAN_LIBCUDA_FUNC(UCS_LOG_LEVEL_WARN, cuCtxPopCurrent, &ctx);
    if (res != CUDA_SUCCESS) {
        ucs_error("span cuda copy: no stream on device %d", device);
        SPAN_LIBCUDA_FUNC(UCS_LOG_LEVEL_WARN, cuDevicePrimaryCtxRelease,
                          cu_dev);
        dev->stream = NULL;
        return UCS_ERR_NO_RESOURCE;
    }
    dev->ctx = ctx;
    return UCS_OK;
}

/* The device whose context copies: the local buffer's, where it is device
 * memory, else the mapping's; it gets access to the mapping on first use */
static ucs_status_t span_cuda_copy_route(void *vendor, span_vmm_map_t *map,
                                         const void *local,
                                         const void *remote,
                                         span_vmm_copy_op_t *op)
{
    CUmemAccessDesc access = {{CU_MEM_LOCATION_TYPE_DEVICE, 0},
                              CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    span_cuda_copy_t *cuda = vendor;
    int device;

    op->host = SPAN_LIBCUDA_FUNC(UCS_LOG_LEVEL_DEBUG, cuPointerGetAttribute,
                                 &device, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                 (CUdeviceptr)local) != CUDA_SUCCESS;
    if (op->host) {
        device = map->device;
    }
    if ((device < 0) || (device >= SPAN_VMM_COPY_MAX_DEVICES)) {
        ucs_error("span cuda copy: device %d is beyond the %d a copy engine "
                  "serves", device, SPAN_VMM_COPY_MAX_DEVICES);
        return UCS_ERR_NO_DEVICE;
    }
    if ((cuda->dev[device].stream == NULL) &&
        (span_cuda_copy_stream(cuda, device) != UCS_OK)) {
        return UCS_ERR_NO_DEVICE;
    }
    if (!(map->devices & (1ull << device))) {
        if (map->ipc) {
            /* opened in another device's context: cuda_ipc copies it */
            return UCS_ERR_UNSUPPORTED;
        }
        access.location.id = device;
        if (SPAN_LIBCUDA_CALL(cuMemSetAccess, map->base, map->length,
                              &access, 1) != CUDA_SUCCESS) {
            ucs_error("span cuda copy: cannot give device %d access to the "
                      "%" PRIu64 "-byte mapping of process %u", device,
                      map->length, map->pid);
            return UCS_ERR_NO_DEVICE;
        }
        ucs_debug("span cuda copy: device %d copies through the mapping of "
                  "process %u too", device, map->pid);
        map->devices |= 1ull << device;
    }
    op->device = device;
    return UCS_OK;
}

/* Makes ctx current where the thread has another context or none; whether
 * it did (span_cuda_copy_leave undoes it) */
static int span_cuda_copy_enter(CUcontext ctx)
{
    CUcontext cur = NULL;

    SPAN_LIBCUDA_FUNC(UCS_LOG_LEVEL_WARN, cuCtxGetCurrent, &cur);
    if (cur == ctx) {
        return 0;
    }
    SPAN_LIBCUDA_FUNC(UCS_LOG_LEVEL_WARN, cuCtxPushCurrent, ctx);
    return 1;
}

static void span_cuda_copy_leave(int pushed)
{
    CUcontext ctx;

    if (pushed) {
        SPAN_LIBCUDA_FUNC(UCS_LOG_LEVEL_WARN, cuCtxPopCurrent, &ctx);
    }
}

/* The allocation that holds local: cuMemGetAddressRange, which reports one
 * physical allocation of a VMM range, in a context (op's device's) */
static ucs_status_t span_cuda_copy_extent(void *vendor,
                                          const span_vmm_copy_op_t *op,
                                          const void *local,
                                          uint64_t *start_p,
                                          uint64_t *length_p)
{
    span_cuda_copy_t *cuda = vendor;
    CUdeviceptr start;
    size_t length;
    CUresult res;
    int pushed;

    if (span_libcuda.cuMemGetAddressRange == NULL) {
        return UCS_ERR_UNSUPPORTED;
    }
    pushed = span_cuda_copy_enter(cuda->dev[op->device].ctx);
    res    = SPAN_LIBCUDA_FUNC(UCS_LOG_LEVEL_DEBUG, cuMemGetAddressRange,
                               &start, &length, (CUdeviceptr)local);
    span_cuda_copy_leave(pushed);
    if (res != CUDA_SUCCESS) {
        return UCS_ERR_INVALID_ADDR;
    }
    *start_p  = start;
    *length_p = length;
    return UCS_OK;
}

/* An event belongs to the context current at its creation, and a stream
 * records only its own context's events: it is made in the device's, not
 * in whichever one the thread has (another device's, or none) */
static ucs_status_t span_cuda_copy_signal_create(void *vendor, int device,
                                                 span_vmm_copy_signal_t *signal)
{
    span_cuda_copy_t *cuda = vendor;
    int pushed             = span_cuda_copy_enter(cuda->dev[device].ctx);
    CUevent event;
    CUresult res;

    res = SPAN_LIBCUDA_CALL(cuEventCreate, &event, CU_EVENT_DISABLE_TIMING);
    span_cuda_copy_leave(pushed);
    if (res != CUDA_SUCCESS) {
        return UCS_ERR_NO_MEMORY;
    }
    signal->ptr = event;
    return UCS_OK;
}

static void span_cuda_copy_signal_destroy(void *vendor,
                                          span_vmm_copy_signal_t *signal)
{
    SPAN_LIBCUDA_FUNC(UCS_LOG_LEVEL_WARN, cuEventDestroy, signal->ptr);
}

/* The copies go in the device's context (its stream's), made current for
 * the op */
static void span_cuda_copy_begin(void *vendor, const span_vmm_copy_op_t *op,
                                 size_t copies)
{
    span_cuda_copy_t *cuda = vendor;

    cuda->pushed = span_cuda_copy_enter(cuda->dev[op->device].ctx);
}

static ucs_status_t span_cuda_copy_async(void *vendor,
                                         const span_vmm_copy_op_t *op,
                                         void *local, void *remote,
                                         size_t length)
{
    span_cuda_copy_t *cuda = vendor;
    CUstream stream        = cuda->dev[op->device].stream;
    CUdeviceptr dst        = (CUdeviceptr)(op->is_put ? remote : local);
    CUdeviceptr src        = (CUdeviceptr)(op->is_put ? local : remote);

    return (SPAN_LIBCUDA_CALL(cuMemcpyAsync, dst, src, length, stream) ==
            CUDA_SUCCESS) ? UCS_OK : UCS_ERR_IO_ERROR;
}

static ucs_status_t span_cuda_copy_end(void *vendor,
                                       const span_vmm_copy_op_t *op,
                                       size_t copies, size_t queued)
{
    span_cuda_copy_t *cuda = vendor;
    CUstream stream        = cuda->dev[op->device].stream;
    ucs_status_t status    = UCS_OK;

    /* the event also follows copies queued before a refused one */
    if ((queued > 0) &&
        (SPAN_LIBCUDA_CALL(cuEventRecord, op->signal.ptr, stream) !=
         CUDA_SUCCESS)) {
        SPAN_LIBCUDA_FUNC(UCS_LOG_LEVEL_WARN, cuStreamSynchronize, stream);
        status = UCS_ERR_IO_ERROR;
    }
    span_cuda_copy_leave(cuda->pushed);
    return status;
}

static ucs_status_t span_cuda_copy_query(void *vendor,
                                         span_vmm_copy_signal_t *signal)
{
    CUresult res = SPAN_LIBCUDA_CALL(cuEventQuery, signal->ptr);

    if (res == CUDA_ERROR_NOT_READY) {
        return UCS_INPROGRESS;
    }
    return (res == CUDA_SUCCESS) ? UCS_OK : UCS_ERR_IO_ERROR;
}

static void span_cuda_copy_wait(void *vendor, span_vmm_copy_signal_t *signal)
{
    SPAN_LIBCUDA_FUNC(UCS_LOG_LEVEL_WARN, cuEventSynchronize, signal->ptr);
}

#if HAVE_CUDA_KERNEL
/* The kernels of i = 0, 1... SPAN_CUDA_KERNEL_SIZES - 1 hold 16 << 2i
 * pieces */
_Static_assert((SPAN_CUDA_KERNEL_MIN << (2 * (SPAN_CUDA_KERNEL_SIZES - 1))) ==
               SPAN_CUDA_KERNEL_PIECES, "the largest kernel holds a batch");

/* The copy kernels from the module just loaded */
static CUresult span_cuda_copy_functions(span_cuda_copy_device_t *dev)
{
    CUresult res = CUDA_SUCCESS;
    char name[sizeof(SPAN_CUDA_KERNEL_NAME) + 8];
    int i;

    for (i = 0; (i < SPAN_CUDA_KERNEL_SIZES) && (res == CUDA_SUCCESS); ++i) {
        snprintf(name, sizeof(name), SPAN_CUDA_KERNEL_NAME "%d",
                 SPAN_CUDA_KERNEL_MIN << (2 * i));
        res = SPAN_LIBCUDA_FUNC(UCS_LOG_LEVEL_DEBUG, cuModuleGetFunction,
                                &dev->kernel[i], dev->module, name);
    }
    return res;
}

/* The copy kernels in the current context, device's, loaded on first use;
 * UCS_ERR_UNSUPPORTED where the driver takes none of its images (logged at
 * debug: batches are then off) */
static ucs_status_t span_cuda_copy_kernel(span_cuda_copy_t *cuda, int device)
{
    span_cuda_copy_device_t *dev = &cuda->dev[device];
    CUresult res;

    if (dev->module != NULL) {
        return UCS_OK;
    }
    res = SPAN_LIBCUDA_FUNC(UCS_LOG_LEVEL_DEBUG, cuModuleLoadData, &dev->module,
                            span_cuda_kernel_image);
    if (res == CUDA_SUCCESS) {
        res = span_cuda_copy_functions(dev);
        if (res != CUDA_SUCCESS) {
            SPAN_LIBCUDA_FUNC(UCS_LOG_LEVEL_WARN, cuModuleUnload, dev->module);
        }
    }
    if (res != CUDA_SUCCESS) {
        ucs_debug("span cuda copy: device %d loads no copy kernel (error "
                  "%d): ops are copied one by one", device, (int)res);
        dev->module      = NULL;
        cuda->kernel_max = 0;
        return UCS_ERR_UNSUPPORTED;
    }
    return UCS_OK;
}

/* Launches the pieces gathered in cuda->args on device's stream, by the
 * smallest kernel that holds them */
static ucs_status_t span_cuda_copy_launch(span_cuda_copy_t *cuda, int device)
{
    span_cuda_copy_device_t *dev = &cuda->dev[device];
    void *params[]               = {&cuda->args};
    unsigned blocks              = (unsigned)cuda->args.count;
    int i                        = 0;
    CUresult res;

    if (blocks == 0) {
        return UCS_OK;
    }
    while (blocks > (unsigned)(SPAN_CUDA_KERNEL_MIN << (2 * i))) {
        ++i;
    }
    /* the driver copies the kernel's parameters at the launch */
    res = SPAN_LIBCUDA_CALL(cuLaunchKernel, dev->kernel[i], blocks, 1, 1,
                            SPAN_CUDA_KERNEL_THREADS, 1, 1, 0, dev->stream,
                            params, NULL);
    cuda->args.count = 0;
    return (res == CUDA_SUCCESS) ? UCS_OK : UCS_ERR_IO_ERROR;
}

/* Queues a piece: up to kernel_max bytes in segments of the kernel's
 * launch, larger ones by the copy engine, which moves them as fast */
static ucs_status_t span_cuda_copy_piece(span_cuda_copy_t *cuda, int device,
                                         const span_vmm_copy_piece_t *piece)
{
    span_cuda_kernel_piece_t *seg;
    ucs_status_t status;
    uint64_t offset;

    if (piece->length > cuda->kernel_max) {
        return (SPAN_LIBCUDA_CALL(cuMemcpyAsync, piece->dst, piece->src,
                                  piece->length, cuda->dev[device].stream) ==
                CUDA_SUCCESS) ? UCS_OK : UCS_ERR_IO_ERROR;
    }
    for (offset = 0; offset < piece->length;
         offset += SPAN_CUDA_KERNEL_SEGMENT) {
        if (cuda->args.count == SPAN_CUDA_KERNEL_PIECES) {
            status = span_cuda_copy_launch(cuda, device);
            if (status != UCS_OK) {
                return status;
            }
        }
        seg         = &cuda->args.piece[cuda->args.count++];
        seg->dst    = piece->dst + offset;
        seg->src    = piece->src + offset;
        seg->length = ucs_min(piece->length - offset,
                              (uint64_t)SPAN_CUDA_KERNEL_SEGMENT);
    }
    return UCS_OK;
}

static ucs_status_t span_cuda_copy_batch(void *vendor, int device,
                                         const span_vmm_copy_piece_t *pieces,
                                         size_t count,
                                         span_vmm_copy_signal_t *signal)
{
    span_cuda_copy_t *cuda = vendor;
    int pushed;
    ucs_status_t status;
    size_t i;

    if (cuda->kernel_max == 0) {
        return UCS_ERR_UNSUPPORTED;
    }
    pushed = span_cuda_copy_enter(cuda->dev[device].ctx);
    status = span_cuda_copy_kernel(cuda, device);
    cuda->args.count = 0;
    for (i = 0; (i < count) && (status == UCS_OK); ++i) {
        status = span_cuda_copy_piece(cuda, device, &pieces[i]);
    }
    if (status == UCS_OK) {
        status = span_cuda_copy_launch(cuda, device);
    }
    if ((status == UCS_OK) &&
        (SPAN_LIBCUDA_CALL(cuEventRecord, signal->ptr,
                           cuda->dev[device].stream) != CUDA_SUCCESS)) {
        status = UCS_ERR_IO_ERROR;
    }
    span_cuda_copy_leave(pushed);
    return status;
}
#else
/* Built without nvcc: no copy kernel, no batches */
#  define span_cuda_copy_batch NULL
#endif

const span_vmm_copy_ops_t span_cuda_copy_ops =
        SPAN_VMM_COPY_OPS(cuda, UCS_MEMORY_TYPE_CUDA);
