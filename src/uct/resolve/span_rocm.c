/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * HIP's calls of the resolver and of a VMM export (span_rocm.h).
 */
#include "span_rocm.h"
#include "vendor/span_librocm.h"

#include <ucs/debug/log_def.h>
#include <inttypes.h>

/*
 * Whether addr is host memory HIP knows: hipHostRegister'ed (locked) by its
 * host pointer or by its device pointer, which may be another address
 * where the GPU maps the pages elsewhere, or hipHostMalloc'ed (a CPU
 * agent's). HIP gives such memory a range and a buffer id as it gives a
 * device allocation; HSA's pointer type and owner tell them apart, the same
 * in ROCm 5, 6 and 7 (HIP's hipMemoryType values changed in 6). Where HSA
 * cannot tell (not initialized, another type), HIP's word stands.
 */
static int span_rocm_host_memory(uint64_t addr)
{
    hsa_amd_pointer_info_t info = {.size = sizeof(info)};
    hsa_device_type_t type;

    if (SPAN_LIBROCM_HSA_FUNC(UCS_LOG_LEVEL_DEBUG, hsa_amd_pointer_info,
                              (void*)addr, &info, NULL, NULL,
                              NULL) != HSA_STATUS_SUCCESS) {
        return 0;
    }
    if (info.type == HSA_EXT_POINTER_TYPE_LOCKED) {
        return 1;
    }
    return (info.type == HSA_EXT_POINTER_TYPE_HSA) &&
           (info.agentOwner.handle != 0) &&
           (SPAN_LIBROCM_HSA_FUNC(UCS_LOG_LEVEL_DEBUG, hsa_agent_get_info,
                                  info.agentOwner, HSA_AGENT_INFO_DEVICE,
                                  &type) == HSA_STATUS_SUCCESS) &&
           (type == HSA_DEVICE_TYPE_CPU);
}

static ucs_status_t span_rocm_range(uint64_t addr, uint64_t *base_p,
                                    uint64_t *size_p)
{
    hipDeviceptr_t base = NULL;
    size_t size         = 0;
    char buf[128];
    hipError_t err;

    err = SPAN_LIBROCM_HIP_FUNC(UCS_LOG_LEVEL_DEBUG, hipMemGetAddressRange,
                                &base, &size, (hipDeviceptr_t)addr);
    if (err != hipSuccess) {
        ucs_debug("span rocm: hipMemGetAddressRange(0x%" PRIx64 ") failed: %s",
                  addr, span_librocm_error(err, buf, sizeof(buf)));
        return UCS_ERR_INVALID_ADDR;
    }
    /* after HIP, which initialized HSA */
    if (span_rocm_host_memory(addr)) {
        ucs_debug("span rocm: 0x%" PRIx64 " is host memory HIP knows, no "
                  "device allocation", addr);
        return UCS_ERR_INVALID_ADDR;
    }
    *base_p = (uintptr_t)base;
    *size_p = size;
    return UCS_OK;
}

/* HIP writes 4 or 8 bytes of an id, by release: the rest stays 0 */
static ucs_status_t span_rocm_buffer_id(uint64_t addr, uint64_t *id_p)
{
    uint64_t id = 0;
    char buf[128];
    hipError_t err;

    err = SPAN_LIBROCM_HIP_FUNC(UCS_LOG_LEVEL_DEBUG, hipPointerGetAttribute,
                                &id, HIP_POINTER_ATTRIBUTE_BUFFER_ID,
                                (hipDeviceptr_t)addr);
    if ((err != hipSuccess) || (id == 0)) {
        ucs_debug("span rocm: no buffer id for 0x%" PRIx64 ": %s", addr,
                  span_librocm_error(err, buf, sizeof(buf)));
        return UCS_ERR_INVALID_ADDR;
    }
    *id_p = id;
    return UCS_OK;
}

/* Shareable as a POSIX fd: hipMemCreate handles of that type (PyTorch's
 * expandable segments); hipMalloc memory is not */
static ucs_status_t span_rocm_vmm_device(uint64_t addr, int *device_p)
{
    uint64_t types = 0;
    int ordinal    = -1;

    if ((SPAN_LIBROCM_HIP_FUNC(UCS_LOG_LEVEL_DEBUG, hipPointerGetAttribute,
                               &types,
                               HIP_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES,
                               (hipDeviceptr_t)addr) != hipSuccess) ||
        !(types & hipMemHandleTypePosixFileDescriptor) ||
        (SPAN_LIBROCM_HIP_FUNC(UCS_LOG_LEVEL_DEBUG, hipPointerGetAttribute,
                               &ordinal, HIP_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                               (hipDeviceptr_t)addr) != hipSuccess) ||
        (ordinal < 0)) {
        return UCS_ERR_UNSUPPORTED;
    }
    *device_p = ordinal;
    return UCS_OK;
}

const span_device_ops_t span_rocm_driver_ops = {
    span_rocm_range, span_rocm_buffer_id, span_rocm_vmm_device
};

ucs_status_t span_rocm_vmm_export_fd(uint64_t base, int *fd_p)
{
    hipMemGenericAllocationHandle_t handle;
    char buf[128];
    hipError_t err;
    int fd = -1;

    if (!span_librocm_load(SPAN_LIBROCM_VMM) ||
        (SPAN_LIBROCM_HIP_FUNC(UCS_LOG_LEVEL_DEBUG,
                               hipMemRetainAllocationHandle, &handle,
                               (void*)base) != hipSuccess)) {
        return UCS_ERR_UNSUPPORTED;
    }
    /* the export is the check: no query of the handle's types first */
    err = SPAN_LIBROCM_HIP_FUNC(UCS_LOG_LEVEL_DEBUG,
                                hipMemExportToShareableHandle, &fd, handle,
                                hipMemHandleTypePosixFileDescriptor, 0);
    SPAN_LIBROCM_HIP_FUNC(UCS_LOG_LEVEL_WARN, hipMemRelease, handle);
    if ((err == hipErrorInvalidValue) || (err == hipErrorNotSupported)) {
        ucs_debug("span rocm: the allocation at 0x%" PRIx64 " cannot be "
                  "shared as a POSIX fd: %s", base,
                  span_librocm_error(err, buf, sizeof(buf)));
        return UCS_ERR_UNSUPPORTED;
    } else if ((err != hipSuccess) || (fd < 0)) {
        ucs_error("span rocm: cannot export the allocation at 0x%" PRIx64
                  " as a POSIX fd: hipMemExportToShareableHandle() failed: %s "
                  "(descriptor %d)", base,
                  span_librocm_error(err, buf, sizeof(buf)), fd);
        return UCS_ERR_IO_ERROR;
    }
    *fd_p = fd;
    return UCS_OK;
}

const span_vmm_export_ops_t span_rocm_vmm_export_ops = {
    .buffer_id = span_rocm_buffer_id,
    .export_fd = span_rocm_vmm_export_fd
};
