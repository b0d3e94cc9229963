/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The ROCm runtime, loaded once at run time (base/span_dl.h) for the ROCm
 * resolver and VMM export (span_rocm.c), the VMM import (span_rocm_vmm.c)
 * and the copies (span_rocm_copy.c): span links no ROCm library, so that
 * it loads on hosts without one. HIP resolves allocations and VMM handles;
 * HSA copies, as UCX's rocm transports do. Built only where configure
 * found the HIP and HSA headers.
 *
 * Only calls and values whose ABI ROCm 5 to 7 share: no structure whose
 * layout moved between them (hipPointerAttribute_t, hipMemAllocationProp),
 * no enumerator whose value changed (hipMemoryType).
 */
#ifndef SPAN_LIBROCM_H_
#define SPAN_LIBROCM_H_

#include "base/span_call.h"

#include <hip/hip_runtime_api.h>
#include <hsa/hsa.h>
#include <hsa/hsa_ext_amd.h>
#include <stddef.h>

/* Who needs a call: a call missing from the runtime turns off only them */
#define SPAN_LIBROCM_RESOLVER 1u
#define SPAN_LIBROCM_VMM      2u
#define SPAN_LIBROCM_COPY     4u

/* Member (the symbol), users (none: span does without it); of HIP */
#define SPAN_LIBROCM_HIP_CALLS(_call) \
    _call(hipMemGetAddressRange, SPAN_LIBROCM_RESOLVER) \
    _call(hipPointerGetAttribute, SPAN_LIBROCM_RESOLVER | SPAN_LIBROCM_VMM) \
    _call(hipMemRetainAllocationHandle, SPAN_LIBROCM_VMM) \
    _call(hipMemExportToShareableHandle, SPAN_LIBROCM_VMM) \
    _call(hipMemImportFromShareableHandle, SPAN_LIBROCM_VMM) \
    _call(hipMemRelease, SPAN_LIBROCM_VMM) \
    _call(hipMemAddressReserve, SPAN_LIBROCM_VMM) \
    _call(hipMemAddressFree, SPAN_LIBROCM_VMM) \
    _call(hipMemMap, SPAN_LIBROCM_VMM) \
    _call(hipMemUnmap, SPAN_LIBROCM_VMM) \
    _call(hipMemSetAccess, SPAN_LIBROCM_VMM) \
    _call(hipGetDevice, SPAN_LIBROCM_VMM) \
    _call(hipGetErrorName, 0) \
    _call(hipGetErrorString, 0)

/* and of HSA */
#define SPAN_LIBROCM_HSA_CALLS(_call) \
    _call(hsa_init, SPAN_LIBROCM_COPY) \
    _call(hsa_shut_down, SPAN_LIBROCM_COPY) \
    _call(hsa_iterate_agents, SPAN_LIBROCM_COPY) \
    _call(hsa_agent_get_info, SPAN_LIBROCM_RESOLVER | SPAN_LIBROCM_COPY) \
    _call(hsa_amd_pointer_info, SPAN_LIBROCM_RESOLVER | SPAN_LIBROCM_COPY) \
    _call(hsa_amd_memory_async_copy, SPAN_LIBROCM_COPY) \
    _call(hsa_signal_create, SPAN_LIBROCM_COPY) \
    _call(hsa_signal_destroy, SPAN_LIBROCM_COPY) \
    _call(hsa_signal_load_scacquire, SPAN_LIBROCM_COPY) \
    _call(hsa_signal_store_screlease, SPAN_LIBROCM_COPY) \
    _call(hsa_signal_subtract_screlease, SPAN_LIBROCM_COPY) \
    _call(hsa_signal_wait_scacquire, SPAN_LIBROCM_COPY) \
    _call(hsa_status_string, 0)

#define SPAN_LIBROCM_MEMBER(_name, _users) typeof(_name) *_name;

typedef struct span_librocm {
    SPAN_LIBROCM_HIP_CALLS(SPAN_LIBROCM_MEMBER)
    SPAN_LIBROCM_HSA_CALLS(SPAN_LIBROCM_MEMBER)
} span_librocm_t;

/* The runtime's calls; valid where span_librocm_load() said so */
extern span_librocm_t span_librocm;

/* Loads HIP and HSA on the first call (the HIP library the process has
 * loaded already, if any); whether they have every call of users
 * (SPAN_LIBROCM_*) */
int span_librocm_load(unsigned users);

/* The runtime's name and description of status ("HSA_STATUS_ERROR_...:
 * ..."), or its number where the runtime has no word for it, in buf of
 * size bytes */
const char *span_librocm_hsa_error(hsa_status_t status, char *buf,
                                   size_t size);

#define SPAN_LIBROCM_HSA_FAILED(_status) ((_status) != HSA_STATUS_SUCCESS)

/* Calls span_librocm._func(...), an HSA call, and evaluates to its
 * hsa_status_t; a failure is logged with the call and the runtime's words
 * (span_call.h):
 *   span rocm: hsa_signal_create(0, 0, NULL, &hsa) failed:
 *   HSA_STATUS_ERROR_OUT_OF_RESOURCES: The runtime failed to allocate ... */
#define SPAN_LIBROCM_HSA_CALL(_func, ...) \
    SPAN_LIBROCM_HSA_FUNC(UCS_LOG_LEVEL_ERROR, _func, __VA_ARGS__)

/* The same, logged at _level (span_call.h) */
#define SPAN_LIBROCM_HSA_FUNC(_level, _func, ...) \
    SPAN_CALL(_level, "rocm", span_librocm, hsa_status_t, \
              SPAN_LIBROCM_HSA_FAILED, span_librocm_hsa_error, _func, \
              #__VA_ARGS__, __VA_ARGS__)

/* HIP's words for err ("hipErrorOutOfMemory: out of memory"), in buf, or
 * its number where HIP has none */
const char *span_librocm_error(hipError_t err, char *buf, size_t size);

#define SPAN_LIBROCM_HIP_FAILED(_err) ((_err) != hipSuccess)

/* Calls HIP's _func, and logs a failure as an error, naming the call and
 * HIP's words: UCS_OK, or UCS_ERR_IO_ERROR where it failed */
#define SPAN_HIP_CALL_LOG_ERR(_func, ...) \
    ((SPAN_LIBROCM_HIP_FUNC(UCS_LOG_LEVEL_ERROR, _func, __VA_ARGS__) == \
      hipSuccess) ? UCS_OK : UCS_ERR_IO_ERROR)

/* Calls HIP's _func and evaluates to its hipError_t; a failure is logged
 * at _level (span_call.h) */
#define SPAN_LIBROCM_HIP_FUNC(_level, _func, ...) \
    SPAN_CALL(_level, "rocm", span_librocm, hipError_t, \
              SPAN_LIBROCM_HIP_FAILED, span_librocm_error, _func, \
              #__VA_ARGS__, __VA_ARGS__)

#endif
