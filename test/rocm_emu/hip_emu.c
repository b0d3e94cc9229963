/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The HIP calls of the emulated ROCm runtime (libamdhip64.so.5), over the
 * emulated HSA runtime: hipMalloc allocates from a device's pool through
 * hsa_amd_memory_pool_allocate (an external call, as in the real HIP, where
 * UCX's memory hooks see it), VMM handles are memfds of a device. Each call
 * may be made to fail with HSA_EMU_FAIL=<its name>[@N[+]], with the error
 * the real one reports for that failure.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "hsa_emu.h"

#include <hip/hip_runtime_api.h>
#include <hsa/hsa.h>
#include <hsa/hsa_ext_amd.h>

#include <errno.h>
#include <string.h>
#include <unistd.h>

static __thread int      hip_emu_device;
static __thread hipError_t hip_emu_last = hipSuccess;

static hipError_t hip_emu_ret(hipError_t err)
{
    if (err != hipSuccess) {
        hip_emu_last = err;
    }
    return err;
}

/* The runtime starts on the first call, as HIP's does */
static hipError_t hip_emu_enter(const char *name, hipError_t injected)
{
    static int started;

    if (!started) {
        if (hsa_init() != HSA_STATUS_SUCCESS) {
            return hipErrorNoDevice;
        }
        started = 1;
    }
    return hsa_emu_should_fail(name) ? injected : hipSuccess;
}

#define HIP_EMU_ENTER(_name, _injected) \
    do { \
        hipError_t _err = hip_emu_enter(_name, _injected); \
        if (_err != hipSuccess) { \
            return hip_emu_ret(_err); \
        } \
    } while (0)

static hipError_t hip_emu_errno(int err)
{
    switch (err) {
    case 0:      return hipSuccess;
    case ENOMEM: return hipErrorOutOfMemory;
    case EEXIST: return hipErrorAlreadyMapped;
    default:     return hipErrorInvalidValue;
    }
}

hipError_t hipInit(unsigned int flags)
{
    HIP_EMU_ENTER("hipInit", hipErrorNoDevice);
    return hipSuccess;
}

hipError_t hipGetDeviceCount(int *count)
{
    HIP_EMU_ENTER("hipGetDeviceCount", hipErrorNoDevice);
    if (count == NULL) {
        return hip_emu_ret(hipErrorInvalidValue);
    }
    *count = hsa_emu_gpu_count();
    return hip_emu_ret((*count > 0) ? hipSuccess : hipErrorNoDevice);
}

hipError_t hipSetDevice(int device)
{
    HIP_EMU_ENTER("hipSetDevice", hipErrorInvalidDevice);
    if ((device < 0) || (device >= hsa_emu_gpu_count())) {
        return hip_emu_ret(hipErrorInvalidDevice);
    }
    hip_emu_device = device;
    return hipSuccess;
}

hipError_t hipGetDevice(int *device)
{
    HIP_EMU_ENTER("hipGetDevice", hipErrorNoDevice);
    if (device == NULL) {
        return hip_emu_ret(hipErrorInvalidValue);
    }
    *device = hip_emu_device;
    return hipSuccess;
}

hipError_t hipDeviceSynchronize(void)
{
    HIP_EMU_ENTER("hipDeviceSynchronize", hipErrorUnknown);
    hsa_emu_copy_drain();
    return hipSuccess;
}

hipError_t hipGetLastError(void)
{
    hipError_t err = hip_emu_last;

    hip_emu_last = hipSuccess;
    return err;
}

hipError_t hipPeekAtLastError(void)
{
    return hip_emu_last;
}

const char *hipGetErrorName(hipError_t error)
{
    switch (error) {
    case hipSuccess:                return "hipSuccess";
    case hipErrorInvalidValue:      return "hipErrorInvalidValue";
    case hipErrorOutOfMemory:       return "hipErrorOutOfMemory";
    case hipErrorNoDevice:          return "hipErrorNoDevice";
    case hipErrorInvalidDevice:     return "hipErrorInvalidDevice";
    case hipErrorAlreadyMapped:     return "hipErrorAlreadyMapped";
    case hipErrorNotFound:          return "hipErrorNotFound";
    case hipErrorNotSupported:      return "hipErrorNotSupported";
    default:                        return "hipErrorUnknown";
    }
}

const char *hipGetErrorString(hipError_t error)
{
    return hipGetErrorName(error);
}

hipError_t hipRuntimeGetVersion(int *version)
{
    *version = 50223000; /* the headers this was built with: ROCm 5.2.3 */
    return hipSuccess;
}

static hsa_status_t hip_emu_pool_of(hsa_amd_memory_pool_t pool, void *data)
{
    *(hsa_amd_memory_pool_t*)data = pool;
    return HSA_STATUS_INFO_BREAK;
}

static hsa_status_t hip_emu_gpu_agent(hsa_agent_t agent, void *data)
{
    hsa_device_type_t type;
    int *left = data;

    hsa_agent_get_info(agent, HSA_AGENT_INFO_DEVICE, &type);
    if ((type == HSA_DEVICE_TYPE_GPU) && ((*left)-- == 0)) {
        hsa_amd_agent_iterate_memory_pools(agent, hip_emu_pool_of, data);
        return HSA_STATUS_INFO_BREAK;
    }
    return HSA_STATUS_SUCCESS;
}

hipError_t hipMalloc(void **ptr, size_t size)
{
    union {
        int                   left;
        hsa_amd_memory_pool_t pool;
    } arg;
    hsa_status_t status;

    HIP_EMU_ENTER("hipMalloc", hipErrorOutOfMemory);
    if (ptr == NULL) {
        return hip_emu_ret(hipErrorInvalidValue);
    }
    *ptr = NULL;
    if (size == 0) {
        return hipSuccess;
    }
    arg.left = hip_emu_device;
    if (hsa_iterate_agents(hip_emu_gpu_agent, &arg) != HSA_STATUS_INFO_BREAK) {
        return hip_emu_ret(hipErrorInvalidDevice);
    }
    status = hsa_amd_memory_pool_allocate(arg.pool, size, 0, ptr);
    return hip_emu_ret((status == HSA_STATUS_SUCCESS) ? hipSuccess :
                                                        hipErrorOutOfMemory);
}

hipError_t hipFree(void *ptr)
{
    hsa_emu_range_t range;

    HIP_EMU_ENTER("hipFree", hipErrorInvalidValue);
    if (ptr == NULL) {
        return hipSuccess;
    }
    range = hsa_emu_lookup((uintptr_t)ptr);
    if ((range.kind != HSA_EMU_POOL) || (range.base != (uintptr_t)ptr) ||
        (range.device < 0)) {
        return hip_emu_ret(hipErrorInvalidValue);
    }
    hsa_emu_copy_drain(); /* hipFree waits for the device */
    return hip_emu_ret((hsa_amd_memory_pool_free(ptr) == HSA_STATUS_SUCCESS) ?
                       hipSuccess : hipErrorInvalidValue);
}

hipError_t hipMemcpy(void *dst, const void *src, size_t size,
                     hipMemcpyKind kind)
{
    HIP_EMU_ENTER("hipMemcpy", hipErrorInvalidValue);
    hsa_emu_copy_drain();
    return hip_emu_ret((hsa_emu_copy(dst, src, size) == 0) ? hipSuccess :
                       hipErrorInvalidValue);
}

hipError_t hipMemset(void *dst, int value, size_t size)
{
    hsa_emu_range_t range;

    HIP_EMU_ENTER("hipMemset", hipErrorInvalidValue);
    range = hsa_emu_lookup((uintptr_t)dst);
    if ((range.kind == HSA_EMU_NONE) || (range.kind == HSA_EMU_RESERVED) ||
        ((uintptr_t)dst + size > range.base + range.size)) {
        return hip_emu_ret(hipErrorInvalidValue);
    }
    memset(dst, value, size);
    return hipSuccess;
}

/* Memory of a device: an allocation, an attachment, a mapped VMM handle */
static int hip_emu_device_memory(const hsa_emu_range_t *range)
{
    return ((range->kind == HSA_EMU_POOL) || (range->kind == HSA_EMU_IPC) ||
            (range->kind == HSA_EMU_VMM)) && (range->device >= 0);
}

/* Host memory of hipHostRegister: HIP knows it by its host pointer and by
 * its device pointer alike ("multiple addresses mapped to it", clr's
 * hipHostRegister), as host memory */
static int hip_emu_registered(const hsa_emu_range_t *range)
{
    return (range->kind == HSA_EMU_LOCKED) && (range->hip_device >= 0);
}

static int hip_emu_known(const hsa_emu_range_t *range)
{
    return hip_emu_device_memory(range) || hip_emu_registered(range);
}

hipError_t hipHostRegister(void *hostPtr, size_t sizeBytes, unsigned int flags)
{
    void *agent;

    HIP_EMU_ENTER("hipHostRegister", hipErrorOutOfMemory);
    if ((hostPtr == NULL) || (sizeBytes == 0)) {
        return hip_emu_ret(hipErrorInvalidValue);
    }
    if (hsa_emu_lookup((uintptr_t)hostPtr).kind == HSA_EMU_LOCKED) {
        return hip_emu_ret(hipErrorHostMemoryAlreadyRegistered);
    }
    return hip_emu_ret((hsa_emu_host_register(hostPtr, sizeBytes,
                                              hip_emu_device, &agent) == 0) ?
                       hipSuccess : hipErrorInvalidValue);
}

hipError_t hipHostUnregister(void *hostPtr)
{
    HIP_EMU_ENTER("hipHostUnregister", hipErrorInvalidValue);
    hsa_emu_copy_drain(); /* as hipFree, it waits for the device */
    return hip_emu_ret((hsa_emu_host_unregister(hostPtr) == 0) ? hipSuccess :
                       hipErrorHostMemoryNotRegistered);
}

/* The device's address of registered host memory, which may differ from
 * the host's ("Applications must use the device pointer in device code",
 * hip_runtime_api.h) */
hipError_t hipHostGetDevicePointer(void **devPtr, void *hstPtr,
                                   unsigned int flags)
{
    hsa_emu_range_t range;

    HIP_EMU_ENTER("hipHostGetDevicePointer", hipErrorInvalidValue);
    range = hsa_emu_lookup((uintptr_t)hstPtr);
    if ((devPtr == NULL) || !hip_emu_registered(&range) ||
        (range.base != range.host_base)) {
        return hip_emu_ret(hipErrorInvalidValue);
    }
    *devPtr = (void*)(range.agent_base + ((uintptr_t)hstPtr - range.base));
    return hipSuccess;
}

hipError_t hipMemGetAddressRange(hipDeviceptr_t *pbase, size_t *psize,
                                 hipDeviceptr_t dptr)
{
    hsa_emu_range_t range;

    HIP_EMU_ENTER("hipMemGetAddressRange", hipErrorNotFound);
    range = hsa_emu_lookup((uintptr_t)dptr);
    if (!hip_emu_known(&range)) {
        return hip_emu_ret(hipErrorNotFound);
    }
    if (pbase != NULL) {
        *pbase = (hipDeviceptr_t)range.base;
    }
    if (psize != NULL) {
        *psize = range.size;
    }
    return hipSuccess;
}

hipError_t hipPointerGetAttribute(void *data, hipPointer_attribute attribute,
                                  hipDeviceptr_t ptr)
{
    hsa_emu_range_t range;

    HIP_EMU_ENTER("hipPointerGetAttribute", hipErrorInvalidValue);
    range = hsa_emu_lookup((uintptr_t)ptr);
    if ((data == NULL) || !hip_emu_known(&range)) {
        return hip_emu_ret(hipErrorInvalidValue);
    }
    switch (attribute) {
    case HIP_POINTER_ATTRIBUTE_BUFFER_ID:
        *(unsigned long long*)data = range.buffer_id;
        break;
    case HIP_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        *(int*)data = hip_emu_registered(&range) ? range.hip_device :
                                                   range.device;
        break;
    case HIP_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *(unsigned*)data = hip_emu_registered(&range) ? hipMemoryTypeHost :
                                                        hipMemoryTypeDevice;
        break;
    case HIP_POINTER_ATTRIBUTE_HOST_POINTER:
        *(void**)data = !hip_emu_registered(&range) ? NULL :
                        (void*)((uintptr_t)ptr - range.base +
                                range.host_base);
        break;
    case HIP_POINTER_ATTRIBUTE_DEVICE_POINTER:
        *(void**)data = !hip_emu_registered(&range) ? ptr :
                        (void*)((uintptr_t)ptr - range.base +
                                range.agent_base);
        break;
    case HIP_POINTER_ATTRIBUTE_RANGE_START_ADDR:
        *(void**)data = (void*)range.base;
        break;
    case HIP_POINTER_ATTRIBUTE_RANGE_SIZE:
        *(size_t*)data = range.size;
        break;
    case HIP_POINTER_ATTRIBUTE_MAPPED:
        *(int*)data = 1;
        break;
    case HIP_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
        *(unsigned long long*)data = range.handle_types;
        break;
    case HIP_POINTER_ATTRIBUTE_IS_LEGACY_HIP_IPC_CAPABLE:
        *(int*)data = (range.kind == HSA_EMU_POOL);
        break;
    default:
        return hip_emu_ret(hipErrorNotSupported);
    }
    return hipSuccess;
}

/* ---- VMM -------------------------------------------------------------- */

#define HIP_EMU_GRANULE (4ull << 10)
#define HIP_EMU_RECOMMENDED (2ull << 20)

static hsa_emu_vmm_t *hip_emu_vmm(hipMemGenericAllocationHandle_t handle)
{
    hsa_emu_vmm_t *vmm = (hsa_emu_vmm_t*)handle;

    return hsa_emu_vmm_valid(vmm) ? vmm : NULL;
}

hipError_t
hipMemGetAllocationGranularity(size_t *granularity,
                               const hipMemAllocationProp *prop,
                               hipMemAllocationGranularity_flags option)
{
    HIP_EMU_ENTER("hipMemGetAllocationGranularity", hipErrorInvalidValue);
    if ((granularity == NULL) || (prop == NULL)) {
        return hip_emu_ret(hipErrorInvalidValue);
    }
    *granularity = (option == hipMemAllocationGranularityRecommended) ?
                   HIP_EMU_RECOMMENDED : HIP_EMU_GRANULE;
    return hipSuccess;
}

hipError_t hipMemCreate(hipMemGenericAllocationHandle_t *handle, size_t size,
                        const hipMemAllocationProp *prop,
                        unsigned long long flags)
{
    hsa_emu_vmm_t *vmm;
    int err;

    HIP_EMU_ENTER("hipMemCreate", hipErrorOutOfMemory);
    if ((handle == NULL) || (prop == NULL) || (flags != 0) ||
        (prop->type != hipMemAllocationTypePinned) ||
        (prop->location.type != hipMemLocationTypeDevice) ||
        (size % HIP_EMU_GRANULE)) {
        return hip_emu_ret(hipErrorInvalidValue);
    }
    err = hsa_emu_vmm_create(prop->location.id, size,
                             prop->requestedHandleType, &vmm);
    if (err != 0) {
        return hip_emu_ret(hip_emu_errno(err));
    }
    *handle = (hipMemGenericAllocationHandle_t)vmm;
    return hipSuccess;
}

hipError_t hipMemRelease(hipMemGenericAllocationHandle_t handle)
{
    hsa_emu_vmm_t *vmm = hip_emu_vmm(handle);

    HIP_EMU_ENTER("hipMemRelease", hipErrorInvalidValue);
    if (vmm == NULL) {
        return hip_emu_ret(hipErrorInvalidValue);
    }
    hsa_emu_vmm_release(vmm); /* mappings hold it on */
    return hipSuccess;
}

hipError_t hipMemAddressReserve(void **ptr, size_t size, size_t alignment,
                                void *addr, unsigned long long flags)
{
    uint64_t va;
    int err;

    HIP_EMU_ENTER("hipMemAddressReserve", hipErrorOutOfMemory);
    if (ptr == NULL) {
        return hip_emu_ret(hipErrorInvalidValue);
    }
    err = hsa_emu_reserve(size, alignment, (uintptr_t)addr, &va);
    if (err != 0) {
        return hip_emu_ret(hip_emu_errno(err));
    }
    *ptr = (void*)va;
    return hipSuccess;
}

hipError_t hipMemAddressFree(void *ptr, size_t size)
{
    HIP_EMU_ENTER("hipMemAddressFree", hipErrorInvalidValue);
    return hip_emu_ret(hip_emu_errno(hsa_emu_unreserve((uintptr_t)ptr, size)));
}

hipError_t hipMemMap(void *ptr, size_t size, size_t offset,
                     hipMemGenericAllocationHandle_t handle,
                     unsigned long long flags)
{
    hsa_emu_vmm_t *vmm = hip_emu_vmm(handle);

    HIP_EMU_ENTER("hipMemMap", hipErrorOutOfMemory);
    if ((vmm == NULL) || (flags != 0)) {
        return hip_emu_ret(hipErrorInvalidValue);
    }
    return hip_emu_ret(hip_emu_errno(hsa_emu_map((uintptr_t)ptr, size, offset,
                                                 vmm)));
}

hipError_t hipMemUnmap(void *ptr, size_t size)
{
    HIP_EMU_ENTER("hipMemUnmap", hipErrorInvalidValue);
    hsa_emu_copy_drain();
    return hip_emu_ret(hip_emu_errno(hsa_emu_unmap((uintptr_t)ptr, size)));
}

hipError_t hipMemSetAccess(void *ptr, size_t size, const hipMemAccessDesc *desc,
                           size_t count)
{
    size_t i;
    int err;

    HIP_EMU_ENTER("hipMemSetAccess", hipErrorInvalidValue);
    if ((desc == NULL) || (count == 0)) {
        return hip_emu_ret(hipErrorInvalidValue);
    }
    for (i = 0; i < count; ++i) {
        if (desc[i].location.type != hipMemLocationTypeDevice) {
            return hip_emu_ret(hipErrorInvalidValue);
        }
        err = hsa_emu_set_access((uintptr_t)ptr, size, desc[i].location.id,
                                 desc[i].flags != hipMemAccessFlagsProtNone);
        if (err != 0) {
            return hip_emu_ret(hip_emu_errno(err));
        }
    }
    return hipSuccess;
}

hipError_t hipMemRetainAllocationHandle(hipMemGenericAllocationHandle_t *handle,
                                        void *addr)
{
    hsa_emu_vmm_t *vmm;

    HIP_EMU_ENTER("hipMemRetainAllocationHandle", hipErrorInvalidValue);
    vmm = hsa_emu_vmm_at((uintptr_t)addr);
    if ((handle == NULL) || (vmm == NULL)) {
        if (vmm != NULL) {
            hsa_emu_vmm_release(vmm);
        }
        return hip_emu_ret(hipErrorInvalidValue);
    }
    *handle = (hipMemGenericAllocationHandle_t)vmm;
    return hipSuccess;
}

hipError_t hipMemExportToShareableHandle(void *shareableHandle,
                                         hipMemGenericAllocationHandle_t handle,
                                         hipMemAllocationHandleType handleType,
                                         unsigned long long flags)
{
    hsa_emu_vmm_t *vmm = hip_emu_vmm(handle);
    int fd;

    HIP_EMU_ENTER("hipMemExportToShareableHandle", hipErrorOutOfMemory);
    if ((vmm == NULL) || (shareableHandle == NULL) || (flags != 0) ||
        (handleType != hipMemHandleTypePosixFileDescriptor)) {
        return hip_emu_ret(hipErrorInvalidValue);
    }
    fd = hsa_emu_vmm_export(vmm);
    if (fd < 0) {
        /* a handle not created for POSIX fds */
        return hip_emu_ret(hipErrorNotSupported);
    }
    *(int*)shareableHandle = fd;
    return hipSuccess;
}

hipError_t
hipMemImportFromShareableHandle(hipMemGenericAllocationHandle_t *handle,
                                void *osHandle,
                                hipMemAllocationHandleType shHandleType)
{
    hsa_emu_vmm_t *vmm;

    HIP_EMU_ENTER("hipMemImportFromShareableHandle", hipErrorInvalidValue);
    if ((handle == NULL) ||
        (shHandleType != hipMemHandleTypePosixFileDescriptor) ||
        (hsa_emu_vmm_import((int)(intptr_t)osHandle, &vmm) != 0)) {
        return hip_emu_ret(hipErrorInvalidValue);
    }
    *handle = (hipMemGenericAllocationHandle_t)vmm;
    return hipSuccess;
}

hipError_t
hipMemGetAllocationPropertiesFromHandle(hipMemAllocationProp *prop,
                                        hipMemGenericAllocationHandle_t handle)
{
    hsa_emu_vmm_t *vmm = hip_emu_vmm(handle);
    uint32_t types;
    uint64_t size;
    int device;

    HIP_EMU_ENTER("hipMemGetAllocationPropertiesFromHandle",
                  hipErrorInvalidValue);
    if ((vmm == NULL) || (prop == NULL)) {
        return hip_emu_ret(hipErrorInvalidValue);
    }
    hsa_emu_vmm_props(vmm, &device, &size, &types);
    memset(prop, 0, sizeof(*prop));
    prop->type                = hipMemAllocationTypePinned;
    prop->location.type       = hipMemLocationTypeDevice;
    prop->location.id         = device;
    prop->requestedHandleType = (hipMemAllocationHandleType)types;
    return hipSuccess;
}
