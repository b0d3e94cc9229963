/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The CUDA driver's calls of the resolver and of a VMM export.
 */
#include "span_cuda_driver.h"
#include "vendor/span_libcuda.h"

#include <ucs/debug/log_def.h>
#include <inttypes.h>

/* The address range needs a context; UCP may register from a thread that
 * has none current: the primary context of the memory's device is used */
static CUresult span_cuda_range_in_ctx(CUdeviceptr addr, CUdeviceptr *base,
                                       size_t *size)
{
    CUresult res;
    int ordinal;

    res = SPAN_LIBCUDA_FUNC(UCS_LOG_LEVEL_DEBUG, cuPointerGetAttribute,
                            &ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                            addr);
    if ((res != CUDA_SUCCESS) ||
        ((res = span_libcuda_primary_push(ordinal)) != CUDA_SUCCESS)) {
        return res;
    }
    res = SPAN_LIBCUDA_FUNC(UCS_LOG_LEVEL_DEBUG, cuMemGetAddressRange, base,
                            size, addr);
    span_libcuda_primary_pop(ordinal);
    return res;
}

static ucs_status_t span_cuda_range(uint64_t addr, uint64_t *base_p,
                                    uint64_t *size_p)
{
    CUdeviceptr base;
    char buf[128];
    size_t size;
    CUresult res;

    res = SPAN_LIBCUDA_FUNC(UCS_LOG_LEVEL_DEBUG, cuMemGetAddressRange, &base,
                            &size, addr);
    if (res == CUDA_ERROR_INVALID_CONTEXT) {
        res = span_cuda_range_in_ctx(addr, &base, &size);
    }
    if (res != CUDA_SUCCESS) {
        ucs_debug("span cuda: cuMemGetAddressRange(0x%" PRIx64 ") failed: %s",
                  addr, span_libcuda_error(res, buf, sizeof(buf)));
        return UCS_ERR_INVALID_ADDR;
    }
    *base_p = base;
    *size_p = size;
    return UCS_OK;
}

static ucs_status_t span_cuda_buffer_id(uint64_t addr, uint64_t *id_p)
{
    unsigned long long id;
    char buf[128];
    CUresult res;

    res = SPAN_LIBCUDA_FUNC(UCS_LOG_LEVEL_DEBUG, cuPointerGetAttribute, &id,
                            CU_POINTER_ATTRIBUTE_BUFFER_ID, addr);
    if (res != CUDA_SUCCESS) {
        ucs_debug("span cuda: no buffer id for 0x%" PRIx64 ": %s", addr,
                  span_libcuda_error(res, buf, sizeof(buf)));
        return UCS_ERR_INVALID_ADDR;
    }
    *id_p = id;
    return UCS_OK;
}

/* Shareable as a POSIX fd: cuMemCreate handles of that type (PyTorch's
 * expandable segments, VMM pools); cudaMalloc and pool memory are not */
static ucs_status_t span_cuda_vmm_device(uint64_t addr, int *device_p)
{
    unsigned long long types = 0;
    int ordinal;

    if ((SPAN_LIBCUDA_FUNC(UCS_LOG_LEVEL_DEBUG, cuPointerGetAttribute, &types,
                           CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES,
                           addr) != CUDA_SUCCESS) ||
        !(types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) ||
        (SPAN_LIBCUDA_FUNC(UCS_LOG_LEVEL_DEBUG, cuPointerGetAttribute, &ordinal,
                           CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                           addr) != CUDA_SUCCESS)) {
        return UCS_ERR_UNSUPPORTED;
    }
    *device_p = ordinal;
    return UCS_OK;
}

const span_device_ops_t span_cuda_driver_ops = {
    span_cuda_range, span_cuda_buffer_id, span_cuda_vmm_device
};

static ucs_status_t span_cuda_export_fd(uint64_t base, int *fd_p)
{
    CUmemGenericAllocationHandle handle;
    char buf[128];
    CUresult res;

    if (!span_libcuda_load(SPAN_LIBCUDA_VMM) ||
        (SPAN_LIBCUDA_FUNC(UCS_LOG_LEVEL_DEBUG, cuMemRetainAllocationHandle,
                           &handle, (void*)base) != CUDA_SUCCESS)) {
        return UCS_ERR_UNSUPPORTED;
    }
    /* the export is the check: no query of the handle's types first */
    res = SPAN_LIBCUDA_FUNC(UCS_LOG_LEVEL_DEBUG, cuMemExportToShareableHandle,
                            fd_p, handle,
                            CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    SPAN_LIBCUDA_FUNC(UCS_LOG_LEVEL_WARN, cuMemRelease, handle);
    if ((res == CUDA_ERROR_INVALID_VALUE) || (res == CUDA_ERROR_NOT_SUPPORTED) ||
        (res == CUDA_ERROR_NOT_PERMITTED)) {
        ucs_debug("span cuda: the allocation at 0x%" PRIx64 " cannot be "
                  "shared as a POSIX fd: %s", base,
                  span_libcuda_error(res, buf, sizeof(buf)));
        return UCS_ERR_UNSUPPORTED;
    } else if (res != CUDA_SUCCESS) {
        ucs_error("span cuda: cannot export the allocation at 0x%" PRIx64
                  " as a POSIX fd: cuMemExportToShareableHandle() failed: %s",
                  base, span_libcuda_error(res, buf, sizeof(buf)));
        return UCS_ERR_IO_ERROR;
    }
    return UCS_OK;
}

const span_vmm_export_ops_t span_cuda_vmm_export_ops = {
    .buffer_id = span_cuda_buffer_id,
    .export_fd = span_cuda_export_fd
};
