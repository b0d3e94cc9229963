/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The CUDA driver's calls of a VMM import.
 */
#include "span_cuda_vmm.h"
#include "vendor/span_libcuda.h"

#include <stdint.h>

/* The device of the thread's current context; a thread without one (UCP
 * unpacks rkeys on threads the application made) gets device 0's primary
 * context made current until leave */
static ucs_status_t span_cuda_vmm_enter(int *device_p, int *entered_p)
{
    CUcontext ctx = NULL;
    CUdevice dev;
    CUresult res;
    char buf[128];

    *entered_p = 0;
    if (!span_libcuda_load(SPAN_LIBCUDA_VMM)) {
        return UCS_ERR_NO_DEVICE;
    }
    if ((SPAN_LIBCUDA_FUNC(UCS_LOG_LEVEL_WARN, cuCtxGetCurrent, &ctx) ==
         CUDA_SUCCESS) &&
        (ctx != NULL)) {
        if (SPAN_CUDA_CALL_LOG_ERR(cuCtxGetDevice, &dev) != UCS_OK) {
            return UCS_ERR_NO_DEVICE;
        }
        *device_p = dev;
        return UCS_OK;
    }
    *device_p = 0;
    res       = span_libcuda_primary_push(*device_p);
    if (res != CUDA_SUCCESS) {
        ucs_error("span cuda: cannot make the primary context of device %d "
                  "current: %s", *device_p,
                  span_libcuda_error(res, buf, sizeof(buf)));
        return UCS_ERR_NO_DEVICE;
    }
    *entered_p = 1;
    return UCS_OK;
}

static void span_cuda_vmm_leave(int device, int entered)
{
    if (entered) {
        span_libcuda_primary_pop(device);
    }
}

static ucs_status_t span_cuda_vmm_reserve(uint64_t length, uint64_t *va_p)
{
    CUdeviceptr va = 0;
    ucs_status_t status;

    status = SPAN_CUDA_CALL_LOG_ERR(cuMemAddressReserve, &va, length, 0, 0,
                                    0);
    *va_p  = va;
    return status;
}

static void span_cuda_vmm_free(uint64_t va, uint64_t length)
{
    (void)SPAN_CUDA_CALL_LOG_ERR(cuMemAddressFree, va, length);
}

static ucs_status_t span_cuda_vmm_import(int fd, uint64_t *handle_p)
{
    CUmemGenericAllocationHandle handle = 0;
    ucs_status_t status;

    status    = SPAN_CUDA_CALL_LOG_ERR(
            cuMemImportFromShareableHandle, &handle, (void*)(uintptr_t)fd,
            CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    *handle_p = handle;
    return status;
}

static void span_cuda_vmm_release(uint64_t handle)
{
    (void)SPAN_CUDA_CALL_LOG_ERR(cuMemRelease, handle);
}

static ucs_status_t span_cuda_vmm_map(uint64_t va, uint64_t length,
                                      uint64_t handle)
{
    return SPAN_CUDA_CALL_LOG_ERR(cuMemMap, va, length, 0, handle, 0);
}

static void span_cuda_vmm_unmap(uint64_t va, uint64_t length)
{
    (void)SPAN_CUDA_CALL_LOG_ERR(cuMemUnmap, va, length);
}

static ucs_status_t span_cuda_vmm_set_access(uint64_t va, uint64_t length,
                                             int device)
{
    CUmemAccessDesc access = {{CU_MEM_LOCATION_TYPE_DEVICE, device},
                              CU_MEM_ACCESS_FLAGS_PROT_READWRITE};

    return SPAN_CUDA_CALL_LOG_ERR(cuMemSetAccess, va, length, &access, 1);
}

const span_vmm_import_ops_t span_cuda_vmm_import_ops =
        SPAN_VMM_IMPORT_OPS(span_cuda_vmm, "CUDA", SPAN_CUDA_VMM_MAGIC, 0);
