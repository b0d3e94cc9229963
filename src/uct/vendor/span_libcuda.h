/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The CUDA driver, loaded once at run time (base/span_dl.h) for the
 * resolver, the VMM export and import (span_cuda_driver.c, span_cuda_vmm.c)
 * and the copies (span_cuda_copy.c): span links no CUDA library, so that
 * it loads on hosts without one. Built only where configure found cuda.h.
 */
#ifndef SPAN_LIBCUDA_H_
#define SPAN_LIBCUDA_H_

#include "base/span_call.h"

#include <cuda.h>
#include <stddef.h>

/* Who needs a driver call: a call missing from libcuda turns off only them */
#define SPAN_LIBCUDA_RESOLVER 1u
#define SPAN_LIBCUDA_VMM      2u
#define SPAN_LIBCUDA_KERNEL   4u /* the copy kernel of batches */
#define SPAN_LIBCUDA_IPC      8u /* a peer's legacy IPC handles */

/* Member (cuda.h maps some API names to versioned ones with macros, which
 * the member names follow), the symbol of that version, its users (0:
 * only log lines use the call, and do without it) */
#define SPAN_LIBCUDA_CALLS(_call) \
    _call(cuMemGetAddressRange, "cuMemGetAddressRange_v2", \
          SPAN_LIBCUDA_RESOLVER) \
    _call(cuPointerGetAttribute, "cuPointerGetAttribute", \
          SPAN_LIBCUDA_RESOLVER | SPAN_LIBCUDA_VMM) \
    _call(cuDeviceGet, "cuDeviceGet", \
          SPAN_LIBCUDA_RESOLVER | SPAN_LIBCUDA_VMM) \
    _call(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", \
          SPAN_LIBCUDA_RESOLVER | SPAN_LIBCUDA_VMM) \
    _call(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", \
          SPAN_LIBCUDA_RESOLVER | SPAN_LIBCUDA_VMM) \
    _call(cuCtxPushCurrent, "cuCtxPushCurrent_v2", \
          SPAN_LIBCUDA_RESOLVER | SPAN_LIBCUDA_VMM) \
    _call(cuCtxPopCurrent, "cuCtxPopCurrent_v2", \
          SPAN_LIBCUDA_RESOLVER | SPAN_LIBCUDA_VMM) \
    _call(cuCtxGetCurrent, "cuCtxGetCurrent", SPAN_LIBCUDA_VMM) \
    _call(cuCtxGetDevice, "cuCtxGetDevice", SPAN_LIBCUDA_VMM) \
    _call(cuMemRetainAllocationHandle, "cuMemRetainAllocationHandle", \
          SPAN_LIBCUDA_VMM) \
    _call(cuMemExportToShareableHandle, "cuMemExportToShareableHandle", \
          SPAN_LIBCUDA_VMM) \
    _call(cuMemImportFromShareableHandle, "cuMemImportFromShareableHandle", \
          SPAN_LIBCUDA_VMM) \
    _call(cuMemRelease, "cuMemRelease", SPAN_LIBCUDA_VMM) \
    _call(cuMemAddressReserve, "cuMemAddressReserve", SPAN_LIBCUDA_VMM) \
    _call(cuMemAddressFree, "cuMemAddressFree", SPAN_LIBCUDA_VMM) \
    _call(cuMemMap, "cuMemMap", SPAN_LIBCUDA_VMM) \
    _call(cuMemUnmap, "cuMemUnmap", SPAN_LIBCUDA_VMM) \
    _call(cuMemSetAccess, "cuMemSetAccess", SPAN_LIBCUDA_VMM) \
    _call(cuMemcpyAsync, "cuMemcpyAsync", SPAN_LIBCUDA_VMM) \
    _call(cuStreamSynchronize, "cuStreamSynchronize", SPAN_LIBCUDA_VMM) \
    _call(cuStreamCreate, "cuStreamCreate", SPAN_LIBCUDA_VMM) \
    _call(cuStreamDestroy, "cuStreamDestroy_v2", SPAN_LIBCUDA_VMM) \
    _call(cuEventCreate, "cuEventCreate", SPAN_LIBCUDA_VMM) \
    _call(cuEventDestroy, "cuEventDestroy_v2", SPAN_LIBCUDA_VMM) \
    _call(cuEventRecord, "cuEventRecord", SPAN_LIBCUDA_VMM) \
    _call(cuEventQuery, "cuEventQuery", SPAN_LIBCUDA_VMM) \
    _call(cuEventSynchronize, "cuEventSynchronize", SPAN_LIBCUDA_VMM) \
    _call(cuModuleLoadData, "cuModuleLoadData", SPAN_LIBCUDA_KERNEL) \
    _call(cuModuleGetFunction, "cuModuleGetFunction", SPAN_LIBCUDA_KERNEL) \
    _call(cuModuleUnload, "cuModuleUnload", SPAN_LIBCUDA_KERNEL) \
    _call(cuLaunchKernel, "cuLaunchKernel", SPAN_LIBCUDA_KERNEL) \
    _call(cuDriverGetVersion, "cuDriverGetVersion", SPAN_LIBCUDA_IPC) \
    _call(cuDeviceGetCount, "cuDeviceGetCount", SPAN_LIBCUDA_IPC) \
    _call(cuDevicePrimaryCtxGetState, "cuDevicePrimaryCtxGetState", \
          SPAN_LIBCUDA_IPC) \
    _call(cuIpcGetMemHandle, "cuIpcGetMemHandle", SPAN_LIBCUDA_IPC) \
    _call(cuIpcOpenMemHandle, "cuIpcOpenMemHandle_v2", SPAN_LIBCUDA_IPC) \
    _call(cuIpcCloseMemHandle, "cuIpcCloseMemHandle", SPAN_LIBCUDA_IPC) \
    _call(cuGetErrorName, "cuGetErrorName", 0) \
    _call(cuGetErrorString, "cuGetErrorString", 0)

#define SPAN_LIBCUDA_MEMBER(_name, _symbol, _users) typeof(_name) *_name;

typedef struct span_libcuda {
    SPAN_LIBCUDA_CALLS(SPAN_LIBCUDA_MEMBER)
} span_libcuda_t;

/* The driver's calls; valid where span_libcuda_load() said so */
extern span_libcuda_t span_libcuda;

/* Loads libcuda.so.1 on the first call; whether it has every call of users
 * (SPAN_LIBCUDA_*) */
int span_libcuda_load(unsigned users);

/* Makes the primary context of device current on the calling thread, which
 * may have none or another's (UCP registers and progresses from threads
 * the application made), retaining it until span_libcuda_primary_pop */
CUresult span_libcuda_primary_push(int device);
void span_libcuda_primary_pop(int device);

/* Releases a retain of device's primary context that was kept after its
 * push was popped with cuCtxPopCurrent alone */
void span_libcuda_primary_release(int device);

/* The driver's words for res ("CUDA_ERROR_OUT_OF_MEMORY: out of memory"),
 * in buf, or its number where the driver has none */
const char *span_libcuda_error(CUresult res, char *buf, size_t size);

/* CUDA_ERROR_NOT_READY is the answer of a query, not a failure */
#define SPAN_LIBCUDA_FAILED(_res) \
    (((_res) != CUDA_SUCCESS) && ((_res) != CUDA_ERROR_NOT_READY))

/* Calls span_libcuda._func(...) and evaluates to its CUresult; a failure
 * is logged with the call and the driver's words (span_call.h):
 *   span cuda: cuMemcpyAsync(dst, src, length, stream) failed:
 *   CUDA_ERROR_INVALID_VALUE: invalid argument */
#define SPAN_LIBCUDA_CALL(_func, ...) \
    SPAN_LIBCUDA_FUNC(UCS_LOG_LEVEL_ERROR, _func, __VA_ARGS__)

/* The same, logged at _level (span_call.h) */
#define SPAN_LIBCUDA_FUNC(_level, _func, ...) \
    SPAN_CALL(_level, "cuda", span_libcuda, CUresult, SPAN_LIBCUDA_FAILED, \
              span_libcuda_error, _func, #__VA_ARGS__, __VA_ARGS__)

/* The same, as a status: UCS_OK, or UCS_ERR_IO_ERROR where it failed */
#define SPAN_CUDA_CALL_LOG_ERR(_func, ...) \
    ((SPAN_LIBCUDA_CALL(_func, __VA_ARGS__) == CUDA_SUCCESS) ? UCS_OK : \
                                                             UCS_ERR_IO_ERROR)

#endif
