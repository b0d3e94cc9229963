/*
 * The ROCm runtime, loaded once at run time for the ROCm resolver
 * (span_rocm.c), the VMM export and import and the copies
 * (span_rocm_vmm.c, span_rocm_copy.c): span links no ROCm library, so that
 * it loads on hosts without one. HIP resolves allocations and VMM handles;
 * HSA copies, as UCX's rocm transports do.
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
#include <stdio.h>

/* Who needs a call: a call missing from the runtime turns off only them */
#define SPAN_LIBROCM_RESOLVER 1u
#define SPAN_LIBROCM_VMM      2u
#define SPAN_LIBROCM_COPY     4u

/* Member, library (HIP or HSA), users (0: only log lines use the call,
 * SPAN_LIBROCM_HSA_CALL, and do without it) */
#define SPAN_LIBROCM_CALLS(_call) \
    _call(hipMemGetAddressRange, HIP, SPAN_LIBROCM_RESOLVER) \
    _call(hipPointerGetAttribute, HIP, \
          SPAN_LIBROCM_RESOLVER | SPAN_LIBROCM_VMM) \
    _call(hipMemRetainAllocationHandle, HIP, SPAN_LIBROCM_VMM) \
    _call(hipMemExportToShareableHandle, HIP, SPAN_LIBROCM_VMM) \
    _call(hipMemImportFromShareableHandle, HIP, SPAN_LIBROCM_VMM) \
    _call(hipMemRelease, HIP, SPAN_LIBROCM_VMM) \
    _call(hipMemAddressReserve, HIP, SPAN_LIBROCM_VMM) \
    _call(hipMemAddressFree, HIP, SPAN_LIBROCM_VMM) \
    _call(hipMemMap, HIP, SPAN_LIBROCM_VMM) \
    _call(hipMemUnmap, HIP, SPAN_LIBROCM_VMM) \
    _call(hipMemSetAccess, HIP, SPAN_LIBROCM_VMM) \
    _call(hipGetDevice, HIP, SPAN_LIBROCM_VMM) \
    _call(hsa_init, HSA, SPAN_LIBROCM_COPY) \
    _call(hsa_shut_down, HSA, SPAN_LIBROCM_COPY) \
    _call(hsa_iterate_agents, HSA, SPAN_LIBROCM_COPY) \
    _call(hsa_agent_get_info, HSA, \
          SPAN_LIBROCM_RESOLVER | SPAN_LIBROCM_COPY) \
    _call(hsa_amd_pointer_info, HSA, \
          SPAN_LIBROCM_RESOLVER | SPAN_LIBROCM_COPY) \
    _call(hsa_amd_memory_async_copy, HSA, SPAN_LIBROCM_COPY) \
    _call(hsa_signal_create, HSA, SPAN_LIBROCM_COPY) \
    _call(hsa_signal_destroy, HSA, SPAN_LIBROCM_COPY) \
    _call(hsa_signal_load_scacquire, HSA, SPAN_LIBROCM_COPY) \
    _call(hsa_signal_store_screlease, HSA, SPAN_LIBROCM_COPY) \
    _call(hsa_signal_subtract_screlease, HSA, SPAN_LIBROCM_COPY) \
    _call(hsa_signal_wait_scacquire, HSA, SPAN_LIBROCM_COPY) \
    _call(hsa_status_string, HSA, 0)

#define SPAN_LIBROCM_MEMBER(_name, _lib, _users) typeof(_name) *_name;

typedef struct span_librocm {
    SPAN_LIBROCM_CALLS(SPAN_LIBROCM_MEMBER)
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
static inline const char *span_librocm_hsa_error(hsa_status_t status,
                                                 char *buf, size_t size)
{
    const char *string = NULL;

    if ((span_librocm.hsa_status_string == NULL) ||
        (span_librocm.hsa_status_string(status, &string) !=
         HSA_STATUS_SUCCESS) ||
        (string == NULL)) {
        snprintf(buf, size, "hsa_status_t 0x%x", (unsigned)status);
        return buf;
    }
    return string;
}

#define SPAN_LIBROCM_HSA_FAILED(_status) ((_status) != HSA_STATUS_SUCCESS)

/* Calls span_librocm._func(...), an HSA call, and evaluates to its
 * hsa_status_t; a failure is logged with the call and the runtime's words
 * (span_call.h):
 *   span rocm: hsa_signal_create(0, 0, NULL, &hsa) failed:
 *   HSA_STATUS_ERROR_OUT_OF_RESOURCES: The runtime failed to allocate ... */
#define SPAN_LIBROCM_HSA_CALL(_func, ...) \
    SPAN_CALL("rocm", span_librocm, hsa_status_t, SPAN_LIBROCM_HSA_FAILED, \
              span_librocm_hsa_error, _func, #__VA_ARGS__, __VA_ARGS__)

#endif
