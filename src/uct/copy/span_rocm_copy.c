/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * ROCm's calls for the VMM copy engine (span_rocm_copy.h).
 */
#include "span_rocm_copy.h"
#include "vendor/span_librocm.h"
#include "vmm/span_vmm_import.h"

#include <ucs/debug/log_def.h>
#include <stdint.h>

/* The state of an engine */
typedef struct span_rocm_copy {
    hsa_agent_t agent[SPAN_VMM_COPY_MAX_DEVICES]; /* of each device routed */
} span_rocm_copy_t;

static inline hsa_signal_t
span_rocm_copy_hsa(const span_vmm_copy_signal_t *signal)
{
    hsa_signal_t hsa = {signal->handle};

    return hsa;
}

static ucs_status_t span_rocm_copy_init(void *vendor,
                                        const span_vmm_copy_params_t *params)
{
    if (!span_librocm_load(SPAN_LIBROCM_COPY | SPAN_LIBROCM_VMM)) {
        ucs_error("span rocm copy: no HSA runtime to copy with");
        return UCS_ERR_UNSUPPORTED;
    }
    /* reference counted by the runtime: UCX's rocm module holds it too */
    if (SPAN_LIBROCM_HSA_CALL(hsa_init) != HSA_STATUS_SUCCESS) {
        return UCS_ERR_NO_DEVICE;
    }
    return UCS_OK;
}

static void span_rocm_copy_cleanup(void *vendor)
{
    SPAN_LIBROCM_HSA_FUNC(UCS_LOG_LEVEL_WARN, hsa_shut_down);
}

/* The agent that copies and the device given access to the mapping, for
 * a local buffer of device memory (which the twin MD registered), or of
 * host memory locked for devices: then the device that owns the remote
 * memory copies, through the buffer's agent pointer (span_rocm_copy_addr) */
static ucs_status_t span_rocm_copy_route(void *vendor, span_vmm_map_t *map,
                                         const void *local,
                                         const void *remote,
                                         span_vmm_copy_op_t *op)
{
    hsa_amd_pointer_info_t info = {.size = sizeof(info)};
    span_rocm_copy_t *rocm      = vendor;
    const void *owned;
    ucs_status_t status;
    int device;

    if ((SPAN_LIBROCM_HSA_FUNC(UCS_LOG_LEVEL_DEBUG, hsa_amd_pointer_info, local,
                               &info, NULL, NULL,
                               NULL) != HSA_STATUS_SUCCESS) ||
        (info.type == HSA_EXT_POINTER_TYPE_UNKNOWN)) {
        goto err;
    }
    op->host = (info.type == HSA_EXT_POINTER_TYPE_LOCKED);
    owned    = local;
    if (op->host) {
        owned     = remote;
        info.size = sizeof(info);
        if ((SPAN_LIBROCM_HSA_FUNC(UCS_LOG_LEVEL_DEBUG, hsa_amd_pointer_info,
                                   remote, &info, NULL, NULL,
                                   NULL) != HSA_STATUS_SUCCESS) ||
            (info.type == HSA_EXT_POINTER_TYPE_UNKNOWN)) {
            goto err;
        }
    }
    if ((info.agentOwner.handle == 0) ||
        (SPAN_LIBROCM_HIP_FUNC(UCS_LOG_LEVEL_DEBUG, hipPointerGetAttribute,
                               &device, HIP_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                               (hipDeviceptr_t)owned) != hipSuccess)) {
        goto err;
    }
    status = span_vmm_access(map, device);
    if (status != UCS_OK) {
        return status;
    }
    rocm->agent[device] = info.agentOwner;
    op->device          = device;
    return UCS_OK;

err:
    ucs_error("span rocm copy: the local buffer %p is neither ROCm device "
              "memory nor host memory locked for devices", local);
    return UCS_ERR_UNSUPPORTED;
}

static ucs_status_t span_rocm_copy_signal_create(void *vendor, int device,
                                                 span_vmm_copy_signal_t *signal)
{
    hsa_signal_t hsa;

    if (SPAN_LIBROCM_HSA_CALL(hsa_signal_create, 0, 0, NULL, &hsa) !=
        HSA_STATUS_SUCCESS) {
        return UCS_ERR_NO_MEMORY;
    }
    signal->handle = hsa.handle;
    return UCS_OK;
}

static void span_rocm_copy_signal_destroy(void *vendor,
                                          span_vmm_copy_signal_t *signal)
{
    SPAN_LIBROCM_HSA_FUNC(UCS_LOG_LEVEL_WARN, hsa_signal_destroy,
                          span_rocm_copy_hsa(signal));
}

/* The signal counts the op's copies down */
static void span_rocm_copy_begin(void *vendor, const span_vmm_copy_op_t *op,
                                 size_t copies)
{
    span_librocm.hsa_signal_store_screlease(span_rocm_copy_hsa(&op->signal),
                                            copies);
}

/*
 * Where a device reaches [local, +length) of locked host memory: at its
 * agent pointer, which is not its host pointer where the GPU maps the pages
 * elsewhere in its own address space (hsa_amd_memory_lock's agent_ptr,
 * hipHostGetDevicePointer); a device given the host pointer faults. The
 * buffer may be given by either.
 */
static ucs_status_t span_rocm_copy_addr(uint8_t *local, size_t length,
                                        uint8_t **addr_p)
{
    hsa_amd_pointer_info_t info = {.size = sizeof(info)};
    uint8_t *host, *agent;

    if ((SPAN_LIBROCM_HSA_FUNC(UCS_LOG_LEVEL_DEBUG, hsa_amd_pointer_info, local,
                               &info, NULL, NULL,
                               NULL) != HSA_STATUS_SUCCESS) ||
        (info.type != HSA_EXT_POINTER_TYPE_LOCKED)) {
        goto err;
    }
    host  = info.hostBaseAddress;
    agent = info.agentBaseAddress;
    if ((local >= agent) && (length <= info.sizeInBytes) &&
        ((size_t)(local - agent) <= info.sizeInBytes - length)) {
        *addr_p = local;
    } else if ((local >= host) && (length <= info.sizeInBytes) &&
               ((size_t)(local - host) <= info.sizeInBytes - length)) {
        *addr_p = agent + (local - host);
    } else {
        goto err; /* past the locked range */
    }
    return UCS_OK;

err:
    ucs_error("span rocm copy: %zu bytes at %p are not in one range of host "
              "memory locked for devices", length, local);
    return UCS_ERR_IO_ERROR;
}

static ucs_status_t span_rocm_copy_async(void *vendor,
                                         const span_vmm_copy_op_t *op,
                                         void *local, void *remote,
                                         size_t length)
{
    span_rocm_copy_t *rocm = vendor;
    hsa_agent_t agent      = rocm->agent[op->device];
    hsa_signal_t done      = span_rocm_copy_hsa(&op->signal);
    uint8_t *addr          = local;
    void *dst, *src;

    if (op->host && (span_rocm_copy_addr(local, length, &addr) != UCS_OK)) {
        return UCS_ERR_IO_ERROR;
    }
    dst = op->is_put ? remote : (void*)addr;
    src = op->is_put ? (void*)addr : remote;
    return (SPAN_LIBROCM_HSA_CALL(hsa_amd_memory_async_copy, dst, agent, src,
                                  agent, length, 0, NULL, done) ==
            HSA_STATUS_SUCCESS) ? UCS_OK : UCS_ERR_IO_ERROR;
}

/* The copies never queued are brought off the signal */
static ucs_status_t span_rocm_copy_end(void *vendor,
                                       const span_vmm_copy_op_t *op,
                                       size_t copies, size_t queued)
{
    if (queued < copies) {
        span_librocm.hsa_signal_subtract_screlease(
                span_rocm_copy_hsa(&op->signal), copies - queued);
    }
    return UCS_OK;
}

static ucs_status_t span_rocm_copy_query(void *vendor,
                                         span_vmm_copy_signal_t *signal)
{
    return (span_librocm.hsa_signal_load_scacquire(
                    span_rocm_copy_hsa(signal)) > 0) ? UCS_INPROGRESS :
                                                       UCS_OK;
}

static void span_rocm_copy_wait(void *vendor, span_vmm_copy_signal_t *signal)
{
    while (span_librocm.hsa_signal_wait_scacquire(
                   span_rocm_copy_hsa(signal), HSA_SIGNAL_CONDITION_LT, 1,
                   UINT64_MAX, HSA_WAIT_STATE_BLOCKED) > 0) {
    }
}

/* HSA copies are queued one by one: no batches, and each op is routed */
#define span_rocm_copy_batch  NULL
#define span_rocm_copy_extent NULL

const span_vmm_copy_ops_t span_rocm_copy_ops =
        SPAN_VMM_COPY_OPS(rocm, UCS_MEMORY_TYPE_ROCM);
