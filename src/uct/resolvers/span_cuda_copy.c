/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * CUDA's calls for the VMM copy engine (span_cuda_copy.h).
 */
#include "span_cuda_copy.h"
#include "span_libcuda.h"

#include <ucs/debug/log_def.h>
#include <inttypes.h>

typedef struct span_cuda_copy_device {
    CUcontext ctx;    /* the device's primary context, retained */
    CUstream  stream; /* non-blocking, NULL until first used */
} span_cuda_copy_device_t;

/* The state of an engine */
typedef struct span_cuda_copy {
    span_cuda_copy_device_t dev[SPAN_VMM_COPY_MAX_DEVICES];
    int                     pushed; /* from begin to end: the device's
                                       context was made current */
} span_cuda_copy_t;

static ucs_status_t span_cuda_copy_init(void *vendor)
{
    return UCS_OK; /* streams are made per device on first use */
}

static void span_cuda_copy_cleanup(void *vendor)
{
    span_cuda_copy_t *cuda = vendor;
    CUdevice cu_dev;
    int i;

    for (i = 0; i < SPAN_VMM_COPY_MAX_DEVICES; ++i) {
        if (cuda->dev[i].stream == NULL) {
            continue;
        }
        span_libcuda.cuStreamDestroy(cuda->dev[i].stream);
        if (span_libcuda.cuDeviceGet(&cu_dev, i) == CUDA_SUCCESS) {
            span_libcuda.cuDevicePrimaryCtxRelease(cu_dev);
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
    span_libcuda.cuCtxPushCurrent(ctx);
    res = SPAN_LIBCUDA_CALL(cuStreamCreate, &dev->stream,
                            CU_STREAM_NON_BLOCKING);
    span_libcuda.cuCtxPopCurrent(&ctx);
    if (res != CUDA_SUCCESS) {
        ucs_error("span cuda copy: no stream on device %d", device);
        span_libcuda.cuDevicePrimaryCtxRelease(cu_dev);
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

    op->host = span_libcuda.cuPointerGetAttribute(
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

    span_libcuda.cuCtxGetCurrent(&cur);
    if (cur == ctx) {
        return 0;
    }
    span_libcuda.cuCtxPushCurrent(ctx);
    return 1;
}

static void span_cuda_copy_leave(int pushed)
{
    CUcontext ctx;

    if (pushed) {
        span_libcuda.cuCtxPopCurrent(&ctx);
    }
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
    span_libcuda.cuEventDestroy(signal->ptr);
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
        span_libcuda.cuStreamSynchronize(stream);
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
    span_libcuda.cuEventSynchronize(signal->ptr);
}

const span_vmm_copy_ops_t span_cuda_copy_ops =
        SPAN_VMM_COPY_OPS(cuda, UCS_MEMORY_TYPE_CUDA);
