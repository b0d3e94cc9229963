/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A CUDA driver with one GPU and no memory, for a machine without one
 * (libcuda.so.1 of the releases leg): enough for UCX's cuda modules to
 * list cuda_copy and cuda_ipc, so that the leg sees whether span offers
 * cuda_ipc+ in each release. Every call that would touch memory, a stream
 * or an event fails with CUDA_ERROR_NOT_SUPPORTED; only the driver's ABI,
 * none of its headers.
 */
#include <stddef.h>
#include <string.h>

#define FAKE_CUDA_SUCCESS       0
#define FAKE_CUDA_NOT_SUPPORTED 801

typedef int fake_result_t;

int cuInit(unsigned flags)
{
    return FAKE_CUDA_SUCCESS;
}

int cuDriverGetVersion(int *version)
{
    *version = 12080;
    return FAKE_CUDA_SUCCESS;
}

int cuDeviceGetCount(int *count)
{
    *count = 1;
    return FAKE_CUDA_SUCCESS;
}

int cuDeviceGet(int *device, int ordinal)
{
    *device = ordinal;
    return (ordinal == 0) ? FAKE_CUDA_SUCCESS : FAKE_CUDA_NOT_SUPPORTED;
}

int cuDeviceGetAttribute(int *value, int attribute, int device)
{
    *value = 1;
    return FAKE_CUDA_SUCCESS;
}

int cuDeviceGetName(char *name, int length, int device)
{
    strncpy(name, "fake GPU", length);
    return FAKE_CUDA_SUCCESS;
}

int cuDeviceGetUuid(void *uuid, int device)
{
    memset(uuid, 0x5a, 16);
    return FAKE_CUDA_SUCCESS;
}

int cuDeviceGetUuid_v2(void *uuid, int device)
{
    return cuDeviceGetUuid(uuid, device);
}

int cuDeviceTotalMem_v2(size_t *bytes, int device)
{
    *bytes = 1ul << 30;
    return FAKE_CUDA_SUCCESS;
}

int cuCtxGetDevice(int *device)
{
    *device = 0;
    return FAKE_CUDA_SUCCESS;
}

int cuCtxGetCurrent(void **ctx)
{
    *ctx = NULL;
    return FAKE_CUDA_SUCCESS;
}

int cuDevicePrimaryCtxGetState(int device, unsigned *flags, int *active)
{
    *flags  = 0;
    *active = 0;
    return FAKE_CUDA_SUCCESS;
}

int cuGetErrorString(int error, const char **string)
{
    *string = "not supported by the fake CUDA driver";
    return FAKE_CUDA_SUCCESS;
}

/* The rest of what UCX 1.16 to 1.23 and span call: not supported */
#define FAKE_CUDA_UNSUPPORTED(_name) \
    int _name(void) \
    { \
        return FAKE_CUDA_NOT_SUPPORTED; \
    }

FAKE_CUDA_UNSUPPORTED(cuCtxGetApiVersion)
FAKE_CUDA_UNSUPPORTED(cuCtxGetId)
FAKE_CUDA_UNSUPPORTED(cuCtxPopCurrent_v2)
FAKE_CUDA_UNSUPPORTED(cuCtxPushCurrent_v2)
FAKE_CUDA_UNSUPPORTED(cuCtxSetCurrent)
FAKE_CUDA_UNSUPPORTED(cuCtxSynchronize)
FAKE_CUDA_UNSUPPORTED(cuDevicePrimaryCtxRelease_v2)
FAKE_CUDA_UNSUPPORTED(cuDevicePrimaryCtxRetain)
FAKE_CUDA_UNSUPPORTED(cuEventCreate)
FAKE_CUDA_UNSUPPORTED(cuEventDestroy_v2)
FAKE_CUDA_UNSUPPORTED(cuEventQuery)
FAKE_CUDA_UNSUPPORTED(cuEventRecord)
FAKE_CUDA_UNSUPPORTED(cuEventSynchronize)
FAKE_CUDA_UNSUPPORTED(cuGetProcAddress)
FAKE_CUDA_UNSUPPORTED(cuGetProcAddress_v2)
FAKE_CUDA_UNSUPPORTED(cuIpcCloseMemHandle)
FAKE_CUDA_UNSUPPORTED(cuIpcGetMemHandle)
FAKE_CUDA_UNSUPPORTED(cuIpcOpenMemHandle_v2)
FAKE_CUDA_UNSUPPORTED(cuLaunchKernel)
FAKE_CUDA_UNSUPPORTED(cuMemAddressFree)
FAKE_CUDA_UNSUPPORTED(cuMemAddressReserve)
FAKE_CUDA_UNSUPPORTED(cuMemAllocManaged)
FAKE_CUDA_UNSUPPORTED(cuMemAlloc_v2)
FAKE_CUDA_UNSUPPORTED(cuMemCreate)
FAKE_CUDA_UNSUPPORTED(cuMemExportToShareableHandle)
FAKE_CUDA_UNSUPPORTED(cuMemFree_v2)
FAKE_CUDA_UNSUPPORTED(cuMemGetAddressRange_v2)
FAKE_CUDA_UNSUPPORTED(cuMemGetAllocationGranularity)
FAKE_CUDA_UNSUPPORTED(cuMemGetAllocationPropertiesFromHandle)
FAKE_CUDA_UNSUPPORTED(cuMemHostRegister_v2)
FAKE_CUDA_UNSUPPORTED(cuMemHostUnregister)
FAKE_CUDA_UNSUPPORTED(cuMemImportFromShareableHandle)
FAKE_CUDA_UNSUPPORTED(cuMemMap)
FAKE_CUDA_UNSUPPORTED(cuMemPoolDestroy)
FAKE_CUDA_UNSUPPORTED(cuMemPoolExportPointer)
FAKE_CUDA_UNSUPPORTED(cuMemPoolExportToShareableHandle)
FAKE_CUDA_UNSUPPORTED(cuMemPoolImportFromShareableHandle)
FAKE_CUDA_UNSUPPORTED(cuMemPoolImportPointer)
FAKE_CUDA_UNSUPPORTED(cuMemPoolSetAccess)
FAKE_CUDA_UNSUPPORTED(cuMemRangeGetAttribute)
FAKE_CUDA_UNSUPPORTED(cuMemRelease)
FAKE_CUDA_UNSUPPORTED(cuMemRetainAllocationHandle)
FAKE_CUDA_UNSUPPORTED(cuMemSetAccess)
FAKE_CUDA_UNSUPPORTED(cuMemUnmap)
FAKE_CUDA_UNSUPPORTED(cuMemcpy)
FAKE_CUDA_UNSUPPORTED(cuMemcpyAsync)
FAKE_CUDA_UNSUPPORTED(cuMemcpyDtoDAsync_v2)
FAKE_CUDA_UNSUPPORTED(cuMemcpyHtoD_v2)
FAKE_CUDA_UNSUPPORTED(cuModuleGetFunction)
FAKE_CUDA_UNSUPPORTED(cuModuleLoadData)
FAKE_CUDA_UNSUPPORTED(cuModuleUnload)
FAKE_CUDA_UNSUPPORTED(cuPointerGetAttribute)
FAKE_CUDA_UNSUPPORTED(cuPointerGetAttributes)
FAKE_CUDA_UNSUPPORTED(cuPointerSetAttribute)
FAKE_CUDA_UNSUPPORTED(cuStreamAddCallback)
FAKE_CUDA_UNSUPPORTED(cuStreamCreate)
FAKE_CUDA_UNSUPPORTED(cuStreamDestroy_v2)
FAKE_CUDA_UNSUPPORTED(cuStreamSynchronize)
