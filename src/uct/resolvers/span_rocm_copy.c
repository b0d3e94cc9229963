/*
 * Asynchronous copies through span's ROCm VMM mappings.
 */
#ifdef HAVE_CONFIG_H
#  include "config.h"
#endif

#include "span_rocm_copy.h"
#include "span_rocm_vmm.h"
#include "base/span_completion.h"

#include <ucs/datastruct/list.h>
#include <ucs/debug/log_def.h>
#include <inttypes.h>
#include <stdlib.h>

#if HAVE_ROCM
#include "span_librocm.h"

/* The copies of one op, counted down by one signal */
typedef struct span_rocm_copy_desc {
    ucs_list_link_t   list;
    hsa_signal_t      signal;
    uint64_t          seq;
    uct_completion_t *comp;
    ucs_status_t      status; /* reported once every queued copy ran */
} span_rocm_copy_desc_t;

/* A flush that waits for the ops queued before it */
typedef struct span_rocm_copy_flush {
    ucs_list_link_t   list;
    uint64_t          seq;
    uct_completion_t *comp;
} span_rocm_copy_flush_t;

struct span_rocm_copy {
    ucs_list_link_t active;  /* in the order queued */
    ucs_list_link_t flushes; /* in the order of their seq */
    ucs_list_link_t pool;    /* descriptors whose signals are idle */
    uint64_t        posted;  /* seq of the last op queued */
    uint64_t        done;    /* seq of the last op completed */
};

ucs_status_t span_rocm_copy_create(span_rocm_copy_t **copy_p)
{
    span_rocm_copy_t *copy;

    if (!span_librocm_load(SPAN_LIBROCM_COPY | SPAN_LIBROCM_VMM)) {
        ucs_error("span rocm copy: no HSA runtime to copy with");
        return UCS_ERR_UNSUPPORTED;
    }
    copy = calloc(1, sizeof(*copy));
    if (copy == NULL) {
        ucs_error("span rocm copy: no memory for a copy engine");
        return UCS_ERR_NO_MEMORY;
    }
    /* reference counted by the runtime: UCX's rocm module holds it too */
    if (span_librocm.hsa_init() != HSA_STATUS_SUCCESS) {
        ucs_error("span rocm copy: hsa_init failed");
        free(copy);
        return UCS_ERR_NO_DEVICE;
    }
    ucs_list_head_init(&copy->active);
    ucs_list_head_init(&copy->flushes);
    ucs_list_head_init(&copy->pool);
    *copy_p = copy;
    return UCS_OK;
}

static span_rocm_copy_desc_t *span_rocm_copy_desc_get(span_rocm_copy_t *copy)
{
    span_rocm_copy_desc_t *desc;

    if (!ucs_list_is_empty(&copy->pool)) {
        return ucs_list_extract_head(&copy->pool, span_rocm_copy_desc_t, list);
    }
    desc = malloc(sizeof(*desc));
    if (desc == NULL) {
        ucs_error("span rocm copy: no memory for a signal descriptor");
        return NULL;
    }
    if (span_librocm.hsa_signal_create(0, 0, NULL, &desc->signal) !=
        HSA_STATUS_SUCCESS) {
        ucs_error("span rocm copy: cannot create a signal");
        free(desc);
        return NULL;
    }
    return desc;
}

/* The agent that copies and the device given access to the mapping, for
 * a local buffer of device memory (which the twin MD registered), or of
 * host memory locked for devices: then the device that owns the remote
 * memory copies, through the buffer's agent pointer (span_rocm_copy_addr) */
static ucs_status_t span_rocm_copy_local(const void *local, const void *remote,
                                         hsa_agent_t *agent_p, int *device_p,
                                         int *locked_p)
{
    hsa_amd_pointer_info_t info = {.size = sizeof(info)};
    const void *owned;

    if ((span_librocm.hsa_amd_pointer_info(local, &info, NULL, NULL, NULL) !=
         HSA_STATUS_SUCCESS) ||
        (info.type == HSA_EXT_POINTER_TYPE_UNKNOWN)) {
        goto err;
    }
    *locked_p = (info.type == HSA_EXT_POINTER_TYPE_LOCKED);
    owned     = local;
    if (*locked_p) {
        owned     = remote;
        info.size = sizeof(info);
        if ((span_librocm.hsa_amd_pointer_info(remote, &info, NULL, NULL,
                                               NULL) != HSA_STATUS_SUCCESS) ||
            (info.type == HSA_EXT_POINTER_TYPE_UNKNOWN)) {
            goto err;
        }
    }
    if ((info.agentOwner.handle == 0) ||
        (span_librocm.hipPointerGetAttribute(
                 device_p, HIP_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                 (hipDeviceptr_t)owned) != hipSuccess)) {
        goto err;
    }
    *agent_p = info.agentOwner;
    return UCS_OK;

err:
    ucs_error("span rocm copy: the local buffer %p is neither ROCm device "
              "memory nor host memory locked for devices", local);
    return UCS_ERR_UNSUPPORTED;
}

/*
 * Where a device reaches [local, +length) of locked host memory: at its
 * agent pointer, which is not its host pointer where the GPU maps the pages
 * elsewhere in its own address space (hsa_amd_memory_lock's agent_ptr,
 * hipHostGetDevicePointer); a device given the host pointer faults. The
 * buffer may be given by either.
 */
static hsa_status_t span_rocm_copy_addr(uint8_t *local, size_t length,
                                        uint8_t **addr_p)
{
    hsa_amd_pointer_info_t info = {.size = sizeof(info)};
    uint8_t *host, *agent;

    if ((span_librocm.hsa_amd_pointer_info(local, &info, NULL, NULL, NULL) !=
         HSA_STATUS_SUCCESS) ||
        (info.type != HSA_EXT_POINTER_TYPE_LOCKED)) {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT;
    }
    host  = info.hostBaseAddress;
    agent = info.agentBaseAddress;
    if ((local >= agent) && (length <= info.sizeInBytes) &&
        (local - agent <= info.sizeInBytes - length)) {
        *addr_p = local;
    } else if ((local >= host) && (length <= info.sizeInBytes) &&
               (local - host <= info.sizeInBytes - length)) {
        *addr_p = agent + (local - host);
    } else {
        return HSA_STATUS_ERROR_INVALID_ARGUMENT; /* past the locked range */
    }
    return HSA_STATUS_SUCCESS;
}

/* Queues the element copies on the op's signal, set to their number; where
 * one is refused, the signal is brought down by those never queued, and
 * *queued_p tells how many still run */
static ucs_status_t span_rocm_copy_issue(span_rocm_copy_desc_t *desc,
                                         hsa_agent_t agent, int locked,
                                         int is_put, const uct_iov_t *iov,
                                         size_t iovcnt, uint8_t *remote,
                                         size_t copies, size_t *queued_p)
{
    hsa_status_t res = HSA_STATUS_SUCCESS;
    size_t i, j, queued = 0;
    uint8_t *local;

    span_librocm.hsa_signal_store_screlease(desc->signal, copies);
    for (i = 0; (i < iovcnt) && (res == HSA_STATUS_SUCCESS); ++i) {
        for (j = 0; (j < iov[i].count) && (res == HSA_STATUS_SUCCESS); ++j) {
            if (iov[i].length == 0) {
                continue;
            }
            local = (uint8_t*)iov[i].buffer + (j * iov[i].stride);
            if (locked) {
                res = span_rocm_copy_addr(local, iov[i].length, &local);
            }
            if (res == HSA_STATUS_SUCCESS) {
                res = span_librocm.hsa_amd_memory_async_copy(
                        is_put ? remote : local, agent,
                        is_put ? local : remote, agent, iov[i].length, 0,
                        NULL, desc->signal);
            }
            queued += (res == HSA_STATUS_SUCCESS);
            remote += iov[i].length;
        }
    }
    *queued_p = queued;
    if (res == HSA_STATUS_SUCCESS) {
        return UCS_INPROGRESS;
    }
    ucs_error("span rocm copy: %s of %zu bytes at %p failed: 0x%x (%zu of "
              "its op's %zu copies queued)", is_put ? "put" : "get",
              iov[i - 1].length, iov[i - 1].buffer, res, queued, copies);
    span_librocm.hsa_signal_subtract_screlease(desc->signal, copies - queued);
    return UCS_ERR_IO_ERROR;
}

/* Waits until the copies of the op have run */
static void span_rocm_copy_wait(span_rocm_copy_desc_t *desc)
{
    while (span_librocm.hsa_signal_wait_scacquire(
                   desc->signal, HSA_SIGNAL_CONDITION_LT, 1, UINT64_MAX,
                   HSA_WAIT_STATE_BLOCKED) > 0) {
    }
}

ucs_status_t span_rocm_copy_post(span_rocm_copy_t *copy,
                                 span_vmm_map_t *map, int is_put,
                                 const uct_iov_t *iov, size_t iovcnt,
                                 uint8_t *remote, uct_completion_t *comp)
{
    span_rocm_copy_desc_t *desc;
    size_t i, queued, copies = 0;
    ucs_status_t status;
    hsa_agent_t agent;
    int device, locked;

    for (i = 0; i < iovcnt; ++i) {
        copies += (iov[i].length > 0) ? iov[i].count : 0;
    }
    if (copies == 0) {
        return UCS_OK;
    }
    status = span_rocm_copy_local(iov[0].buffer, remote, &agent, &device,
                                  &locked);
    if (status != UCS_OK) {
        return status;
    }
    status = span_rocm_vmm_access(map, device);
    if (status != UCS_OK) {
        return status;
    }
    desc = span_rocm_copy_desc_get(copy);
    if (desc == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    status = span_rocm_copy_issue(desc, agent, locked, is_put, iov, iovcnt,
                                  remote, copies, &queued);
    if (queued == 0) {
        ucs_list_add_tail(&copy->pool, &desc->list);
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
        span_rocm_copy_wait(desc);
        return status;
    }
    return UCS_INPROGRESS;
}

unsigned span_rocm_copy_progress(span_rocm_copy_t *copy)
{
    span_rocm_copy_desc_t *desc;
    span_rocm_copy_flush_t *flush;
    unsigned count = 0;

    while (!ucs_list_is_empty(&copy->active)) {
        desc = ucs_list_head(&copy->active, span_rocm_copy_desc_t, list);
        if (span_librocm.hsa_signal_load_scacquire(desc->signal) > 0) {
            break;
        }
        ucs_list_del(&desc->list);
        copy->done = desc->seq;
        ucs_list_add_tail(&copy->pool, &desc->list);
        if (desc->comp != NULL) {
            span_completion_invoke(desc->comp, desc->status);
        }
        ++count;
    }
    while (!ucs_list_is_empty(&copy->flushes)) {
        flush = ucs_list_head(&copy->flushes, span_rocm_copy_flush_t, list);
        if (flush->seq > copy->done) {
            break;
        }
        ucs_list_del(&flush->list);
        span_completion_invoke(flush->comp, UCS_OK);
        free(flush);
    }
    return count;
}

int span_rocm_copy_busy(const span_rocm_copy_t *copy)
{
    return copy->posted != copy->done;
}

/* Waits for every queued copy and completes the ops */
static void span_rocm_copy_drain(span_rocm_copy_t *copy)
{
    span_rocm_copy_desc_t *desc;

    ucs_list_for_each(desc, &copy->active, list) {
        span_rocm_copy_wait(desc);
    }
    span_rocm_copy_progress(copy);
}

ucs_status_t span_rocm_copy_flush(span_rocm_copy_t *copy,
                                  uct_completion_t *comp)
{
    span_rocm_copy_flush_t *flush;

    if (!span_rocm_copy_busy(copy)) {
        return UCS_OK;
    }
    if (comp == NULL) {
        return UCS_INPROGRESS;
    }
    flush = malloc(sizeof(*flush));
    if (flush == NULL) {
        /* a flush cannot fail half-way through: wait here instead */
        ucs_warn("span rocm copy: no memory to track a flush; waiting for "
                 "%" PRIu64 " ops", copy->posted - copy->done);
        span_rocm_copy_drain(copy);
        return UCS_OK;
    }
    flush->seq  = copy->posted;
    flush->comp = comp;
    ucs_list_add_tail(&copy->flushes, &flush->list);
    return UCS_INPROGRESS;
}

void span_rocm_copy_destroy(span_rocm_copy_t *copy)
{
    span_rocm_copy_desc_t *desc;

    span_rocm_copy_drain(copy);
    while (!ucs_list_is_empty(&copy->pool)) {
        desc = ucs_list_extract_head(&copy->pool, span_rocm_copy_desc_t, list);
        span_librocm.hsa_signal_destroy(desc->signal);
        free(desc);
    }
    span_librocm.hsa_shut_down();
    free(copy);
}
#else
ucs_status_t span_rocm_copy_create(span_rocm_copy_t **copy_p)
{
    return UCS_ERR_UNSUPPORTED;
}

void span_rocm_copy_destroy(span_rocm_copy_t *copy)
{
}

ucs_status_t span_rocm_copy_post(span_rocm_copy_t *copy,
                                 span_vmm_map_t *map, int is_put,
                                 const uct_iov_t *iov, size_t iovcnt,
                                 uint8_t *remote, uct_completion_t *comp)
{
    return UCS_ERR_UNSUPPORTED;
}

unsigned span_rocm_copy_progress(span_rocm_copy_t *copy)
{
    return 0;
}

int span_rocm_copy_busy(const span_rocm_copy_t *copy)
{
    return 0;
}

ucs_status_t span_rocm_copy_flush(span_rocm_copy_t *copy,
                                  uct_completion_t *comp)
{
    return UCS_OK;
}
#endif
