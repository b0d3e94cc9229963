/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * HIP's calls of a VMM import.
 */
#include "span_rocm_vmm.h"
#include "vendor/span_librocm.h"

#include <stdint.h>

/* HIP's current device of the calling thread */
static ucs_status_t span_rocm_vmm_enter(int *device_p, int *entered_p)
{
    *entered_p = 0;
    if (!span_librocm_load(SPAN_LIBROCM_VMM)) {
        return UCS_ERR_NO_DEVICE;
    }
    return SPAN_HIP_CALL_LOG_ERR(hipGetDevice, device_p);
}

static void span_rocm_vmm_leave(int device, int entered)
{
}

static ucs_status_t span_rocm_vmm_reserve(uint64_t length, uint64_t *va_p)
{
    void *va = NULL;
    ucs_status_t status;

    status = SPAN_HIP_CALL_LOG_ERR(hipMemAddressReserve, &va, length, 0, NULL,
                                   0);
    *va_p  = (uintptr_t)va;
    return status;
}

static void span_rocm_vmm_free(uint64_t va, uint64_t length)
{
    (void)SPAN_HIP_CALL_LOG_ERR(hipMemAddressFree, (void*)va, length);
}

static ucs_status_t span_rocm_vmm_import(int fd, uint64_t *handle_p)
{
    hipMemGenericAllocationHandle_t handle = NULL;
    ucs_status_t status;

    status    = SPAN_HIP_CALL_LOG_ERR(hipMemImportFromShareableHandle, &handle,
                                      (void*)(intptr_t)fd,
                                      hipMemHandleTypePosixFileDescriptor);
    *handle_p = (uintptr_t)handle;
    return status;
}

static void span_rocm_vmm_release(uint64_t handle)
{
    (void)SPAN_HIP_CALL_LOG_ERR(hipMemRelease,
                                (hipMemGenericAllocationHandle_t)handle);
}

static ucs_status_t span_rocm_vmm_map(uint64_t va, uint64_t length,
                                      uint64_t handle)
{
    return SPAN_HIP_CALL_LOG_ERR(hipMemMap, (void*)va, length, 0,
                                 (hipMemGenericAllocationHandle_t)handle, 0);
}

static void span_rocm_vmm_unmap(uint64_t va, uint64_t length)
{
    (void)SPAN_HIP_CALL_LOG_ERR(hipMemUnmap, (void*)va, length);
}

static ucs_status_t span_rocm_vmm_set_access(uint64_t va, uint64_t length,
                                             int device)
{
    hipMemAccessDesc access = {{hipMemLocationTypeDevice, device},
                               hipMemAccessFlagsProtReadWrite};

    return SPAN_HIP_CALL_LOG_ERR(hipMemSetAccess, (void*)va, length, &access,
                                 1);
}

const span_vmm_import_ops_t span_rocm_vmm_import_ops =
        SPAN_VMM_IMPORT_OPS(span_rocm_vmm, "HIP", SPAN_ROCM_VMM_MAGIC, 1);
