/*
 * Asynchronous copies through span's VMM mappings.
 */
#ifdef HAVE_CONFIG_H
#  include "config.h"
#endif

#include "span_cuda_copy.h"
#include "base/span_completion.h"

#include <ucs/datastruct/list.h>
#include <ucs/debug/log_def.h>
#include <inttypes.h>
#include <stdlib.h>

#if HAVE_CUDA
#include "span_libcuda.h"

/* Devices an engine keeps a stream for; the bit mask of a mapping's
 * devices (span_vmm_map_t.devices) has as many */
#define SPAN_CUDA_COPY_MAX_DEVICES 64

/* The copies of one op, ended by one event of its device's pool */
typedef struct span_cuda_copy_desc {
    ucs_list_link_t   list;
    CUevent           event;
    int               device;
    uint64_t          seq;
    uct_completion_t *comp;
    ucs_status_t      status; /* reported once the event passed */
} span_cuda_copy_desc_t;

/* A flush that waits for the copies queued before it */
typedef struct span_cuda_copy_flush {
    ucs_list_link_t   list;
    uint64_t          seq;
    uct_completion_t *comp;
} span_cuda_copy_flush_t;

typedef struct span_cuda_copy_device {
    CUcontext        ctx;    /* the device's primary context, retained */
    CUstream         stream; /* non-blocking, NULL until first used */
    ucs_list_link_t  pool;   /* descriptors whose events are idle */
} span_cuda_copy_device_t;

struct span_cuda_copy {
    ucs_list_link_t         active;  /* in the order queued */
    ucs_list_link_t         flushes; /* in the order of their seq */
    uint64_t                posted;  /* seq of the last op queued */
    uint64_t                done;    /* seq of the last op completed */
    span_cuda_copy_device_t dev[SPAN_CUDA_COPY_MAX_DEVICES];
};

ucs_status_t span_cuda_copy_create(span_cuda_copy_t **copy_p)
{
    span_cuda_copy_t *copy = calloc(1, sizeof(*copy));
    int i;

    if (copy == NULL) {
        ucs_error("span cuda copy: no memory for a copy engine (%zu bytes)",
                  sizeof(*copy));
        return UCS_ERR_NO_MEMORY;
    }
    ucs_list_head_init(&copy->active);
    ucs_list_head_init(&copy->flushes);
    for (i = 0; i < SPAN_CUDA_COPY_MAX_DEVICES; ++i) {
        ucs_list_head_init(&copy->dev[i].pool);
    }
    *copy_p = copy;
    return UCS_OK;
}

/* The device's stream, made on first use in its primary context */
static ucs_status_t span_cuda_copy_stream(span_cuda_copy_t *copy, int device)
{
    span_cuda_copy_device_t *dev = &copy->dev[device];
    CUcontext ctx;
    CUdevice cu_dev;
    CUresult res;

    if ((span_libcuda.cuDeviceGet(&cu_dev, device) != CUDA_SUCCESS) ||
        (span_libcuda.cuDevicePrimaryCtxRetain(&ctx, cu_dev) !=
         CUDA_SUCCESS)) {
        ucs_error("span cuda copy: no primary context on device %d", device);
        return UCS_ERR_NO_DEVICE;
    }
    span_libcuda.cuCtxPushCurrent(ctx);
    res = span_libcuda.cuStreamCreate(&dev->stream, CU_STREAM_NON_BLOCKING);
    span_libcuda.cuCtxPopCurrent(&ctx);
    if (res != CUDA_SUCCESS) {
        ucs_error("span cuda copy: cannot create a stream on device %d: %d",
                  device, res);
        span_libcuda.cuDevicePrimaryCtxRelease(cu_dev);
        dev->stream = NULL;
        return UCS_ERR_NO_RESOURCE;
    }
    dev->ctx = ctx;
    return UCS_OK;
}

/* The device whose context copies: the local buffer's, where it is device
 * memory; the mapping gets access from it on first use */
static ucs_status_t span_cuda_copy_device(span_cuda_copy_t *copy,
                                          span_vmm_map_t *map,
                                          const void *local, int *device_p)
{
    CUmemAccessDesc access = {{CU_MEM_LOCATION_TYPE_DEVICE, 0},
                              CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    int device;

    if (span_libcuda.cuPointerGetAttribute(
                &device, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                (CUdeviceptr)local) != CUDA_SUCCESS) {
        device = map->device; /* host memory: the device of the mapping */
    }
    if ((device < 0) || (device >= SPAN_CUDA_COPY_MAX_DEVICES)) {
        ucs_error("span cuda copy: device %d is beyond the %d a copy engine "
                  "serves", device, SPAN_CUDA_COPY_MAX_DEVICES);
        return UCS_ERR_NO_DEVICE;
    }
    if ((copy->dev[device].stream == NULL) &&
        (span_cuda_copy_stream(copy, device) != UCS_OK)) {
        return UCS_ERR_NO_DEVICE;
    }
    if (!(map->devices & (1ull << device))) {
        access.location.id = device;
        if (span_libcuda.cuMemSetAccess(map->base, map->length, &access, 1) !=
            CUDA_SUCCESS) {
            ucs_error("span cuda copy: cannot give device %d access to the "
                      "%" PRIu64 "-byte mapping of process %u", device,
                      map->length, map->pid);
            return UCS_ERR_NO_DEVICE;
        }
        ucs_debug("span cuda copy: device %d copies through the mapping of "
                  "process %u too", device, map->pid);
        map->devices |= 1ull << device;
    }
    *device_p = device;
    return UCS_OK;
}

static span_cuda_copy_desc_t *span_cuda_copy_desc_get(span_cuda_copy_t *copy,
                                                      int device)
{
    span_cuda_copy_device_t *dev = &copy->dev[device];
    span_cuda_copy_desc_t *desc;

    if (!ucs_list_is_empty(&dev->pool)) {
        return ucs_list_extract_head(&dev->pool, span_cuda_copy_desc_t,
                                     list);
    }
    desc = malloc(sizeof(*desc));
    if (desc == NULL) {
        ucs_error("span cuda copy: no memory for an event descriptor");
        return NULL;
    }
    if (span_libcuda.cuEventCreate(&desc->event, CU_EVENT_DISABLE_TIMING) !=
        CUDA_SUCCESS) {
        ucs_error("span cuda copy: cannot create an event on device %d",
                  device);
        free(desc);
        return NULL;
    }
    desc->device = device;
    return desc;
}

/* Queues the element copies and the event after them, in the current
 * context (the device's); *queued_p tells how many copies the stream took
 * (where one is refused, those before it still run) */
static ucs_status_t span_cuda_copy_issue(CUstream stream,
                                         span_cuda_copy_desc_t *desc,
                                         int is_put, const uct_iov_t *iov,
                                         size_t iovcnt, uint8_t *remote,
                                         size_t *queued_p)
{
    CUresult res = CUDA_SUCCESS;
    size_t i, j, queued = 0;
    uint8_t *local;

    for (i = 0; (i < iovcnt) && (res == CUDA_SUCCESS); ++i) {
        for (j = 0; (j < iov[i].count) && (res == CUDA_SUCCESS); ++j) {
            local = (uint8_t*)iov[i].buffer + (j * iov[i].stride);
            res   = span_libcuda.cuMemcpyAsync(
                    (CUdeviceptr)(is_put ? remote : local),
                    (CUdeviceptr)(is_put ? local : remote), iov[i].length,
                    stream);
            queued += (res == CUDA_SUCCESS);
            remote += iov[i].length;
        }
    }
    *queued_p = queued;
    if (res != CUDA_SUCCESS) {
        ucs_error("span cuda copy: %s of %zu bytes at %p failed: %d (%zu "
                  "copies of its op queued before)", is_put ? "put" : "get",
                  iov[i - 1].length, iov[i - 1].buffer, res, queued);
        if (queued == 0) {
            return UCS_ERR_IO_ERROR;
        }
    }
    /* the event also follows copies queued before a failed one */
    if (span_libcuda.cuEventRecord(desc->event, stream) != CUDA_SUCCESS) {
        ucs_error("span cuda copy: cannot record an event after a copy");
        span_libcuda.cuStreamSynchronize(stream);
        *queued_p = 0;
        return UCS_ERR_IO_ERROR;
    }
    return (res == CUDA_SUCCESS) ? UCS_INPROGRESS : UCS_ERR_IO_ERROR;
}

ucs_status_t span_cuda_copy_post(span_cuda_copy_t *copy,
                                 span_vmm_map_t *map, int is_put,
                                 const uct_iov_t *iov, size_t iovcnt,
                                 uint8_t *remote, uct_completion_t *comp)
{
    span_cuda_copy_desc_t *desc;
    CUcontext cur = NULL, ctx;
    size_t i, length, queued;
    ucs_status_t status;
    int device;

    for (i = 0, length = 0; i < iovcnt; ++i) {
        length += iov[i].length * iov[i].count;
    }
    if (length == 0) {
        return UCS_OK;
    }
    status = span_cuda_copy_device(copy, map, iov[0].buffer, &device);
    if (status != UCS_OK) {
        return status;
    }
    desc = span_cuda_copy_desc_get(copy, device);
    if (desc == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    ctx = copy->dev[device].ctx;
    span_libcuda.cuCtxGetCurrent(&cur);
    if (cur != ctx) {
        span_libcuda.cuCtxPushCurrent(ctx);
    }
    status = span_cuda_copy_issue(copy->dev[device].stream, desc, is_put,
                                  iov, iovcnt, remote, &queued);
    if (cur != ctx) {
        span_libcuda.cuCtxPopCurrent(&ctx);
    }
    if (queued == 0) {
        ucs_list_add_tail(&copy->dev[device].pool, &desc->list);
        return status;
    }
    /* an op that failed still owns its buffers while the copies it queued
     * run: its error is reported once they have, never before */
    desc->status = (status == UCS_INPROGRESS) ? UCS_OK : status;
    desc->comp   = comp;
    desc->seq    = ++copy->posted;
    ucs_list_add_tail(&copy->active, &desc->list);
    if ((status != UCS_INPROGRESS) && (comp == NULL)) {
        /* nothing to report it through later: wait here */
        span_libcuda.cuEventSynchronize(desc->event);
        return status;
    }
    return UCS_INPROGRESS;
}

unsigned span_cuda_copy_progress(span_cuda_copy_t *copy)
{
    span_cuda_copy_desc_t *desc;
    span_cuda_copy_flush_t *flush;
    ucs_status_t status;
    unsigned count = 0;
    CUresult res;

    while (!ucs_list_is_empty(&copy->active)) {
        desc = ucs_list_head(&copy->active, span_cuda_copy_desc_t, list);
        res  = span_libcuda.cuEventQuery(desc->event);
        if (res == CUDA_ERROR_NOT_READY) {
            break;
        }
        status = desc->status;
        if (res != CUDA_SUCCESS) {
            ucs_error("span cuda copy: a copy on device %d failed: %d",
                      desc->device, res);
            status = UCS_ERR_IO_ERROR;
        }
        ucs_list_del(&desc->list);
        copy->done = desc->seq;
        ucs_list_add_tail(&copy->dev[desc->device].pool, &desc->list);
        if (desc->comp != NULL) {
            span_completion_invoke(desc->comp, status);
        }
        ++count;
    }
    while (!ucs_list_is_empty(&copy->flushes)) {
        flush = ucs_list_head(&copy->flushes, span_cuda_copy_flush_t, list);
        if (flush->seq > copy->done) {
            break;
        }
        ucs_list_del(&flush->list);
        span_completion_invoke(flush->comp, UCS_OK);
        free(flush);
    }
    return count;
}

int span_cuda_copy_busy(const span_cuda_copy_t *copy)
{
    return copy->posted != copy->done;
}

/* Waits for the device to finish every queued copy and completes them */
static void span_cuda_copy_drain(span_cuda_copy_t *copy)
{
    span_cuda_copy_desc_t *desc;

    ucs_list_for_each(desc, &copy->active, list) {
        span_libcuda.cuEventSynchronize(desc->event);
    }
    span_cuda_copy_progress(copy);
}

ucs_status_t span_cuda_copy_flush(span_cuda_copy_t *copy,
                                  uct_completion_t *comp)
{
    span_cuda_copy_flush_t *flush;

    if (!span_cuda_copy_busy(copy)) {
        return UCS_OK;
    }
    if (comp == NULL) {
        return UCS_INPROGRESS;
    }
    flush = malloc(sizeof(*flush));
    if (flush == NULL) {
        /* a flush cannot fail half-way through: wait here instead */
        ucs_warn("span cuda copy: no memory to track a flush; waiting for "
                 "%" PRIu64 " copies", copy->posted - copy->done);
        span_cuda_copy_drain(copy);
        return UCS_OK;
    }
    flush->seq  = copy->posted;
    flush->comp = comp;
    ucs_list_add_tail(&copy->flushes, &flush->list);
    return UCS_INPROGRESS;
}

void span_cuda_copy_destroy(span_cuda_copy_t *copy)
{
    span_cuda_copy_device_t *dev;
    span_cuda_copy_desc_t *desc;
    CUdevice cu_dev;
    int i;

    span_cuda_copy_drain(copy);
    for (i = 0; i < SPAN_CUDA_COPY_MAX_DEVICES; ++i) {
        dev = &copy->dev[i];
        while (!ucs_list_is_empty(&dev->pool)) {
            desc = ucs_list_extract_head(&dev->pool, span_cuda_copy_desc_t,
                                         list);
            span_libcuda.cuEventDestroy(desc->event);
            free(desc);
        }
        if (dev->stream != NULL) {
            span_libcuda.cuStreamDestroy(dev->stream);
            if (span_libcuda.cuDeviceGet(&cu_dev, i) == CUDA_SUCCESS) {
                span_libcuda.cuDevicePrimaryCtxRelease(cu_dev);
            }
        }
    }
    free(copy);
}
#else
ucs_status_t span_cuda_copy_create(span_cuda_copy_t **copy_p)
{
    return UCS_ERR_UNSUPPORTED;
}

void span_cuda_copy_destroy(span_cuda_copy_t *copy)
{
}

ucs_status_t span_cuda_copy_post(span_cuda_copy_t *copy,
                                 span_vmm_map_t *map, int is_put,
                                 const uct_iov_t *iov, size_t iovcnt,
                                 uint8_t *remote, uct_completion_t *comp)
{
    return UCS_ERR_UNSUPPORTED;
}

unsigned span_cuda_copy_progress(span_cuda_copy_t *copy)
{
    return 0;
}

int span_cuda_copy_busy(const span_cuda_copy_t *copy)
{
    return 0;
}

ucs_status_t span_cuda_copy_flush(span_cuda_copy_t *copy,
                                  uct_completion_t *comp)
{
    return UCS_OK;
}
#endif
