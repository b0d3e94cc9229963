/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A libnvidia-ml.so.1 for the GPU suite (part F) in which cuda_ipc's NVLink
 * probe always fails and span's own succeeds: it forwards to the real NVML
 * (SPAN_REAL_NVML, a path) only the calls span's probe makes, so UCX's NVML
 * loader, which needs more, gives up, as the probe did at random in UCX
 * 1.22 and 1.23. The twin must then offer get zero-copy all the same.
 * Built by contrib/gpu/gpu_bundle.sh; put first in LD_LIBRARY_PATH.
 */
#include <dlfcn.h>
#include <stdlib.h>

static void *span_nvml_real(const char *name)
{
    static void *lib;
    const char *path = getenv("SPAN_REAL_NVML");

    if ((lib == NULL) && (path != NULL)) {
        lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    }
    return (lib == NULL) ? NULL : dlsym(lib, name);
}

#define SPAN_NVML_FORWARD(_name, _params, _args) \
    int _name _params \
    { \
        int (*real) _params = (int (*) _params)span_nvml_real(#_name); \
        return (real == NULL) ? 999 /* NVML_ERROR_UNKNOWN */ : real _args; \
    }

SPAN_NVML_FORWARD(nvmlInit_v2, (void), ())
SPAN_NVML_FORWARD(nvmlDeviceGetHandleByIndex_v2, (unsigned i, void **d),
                  (i, d))
SPAN_NVML_FORWARD(nvmlDeviceGetFieldValues, (void *d, int n, void *v),
                  (d, n, v))
SPAN_NVML_FORWARD(nvmlDeviceGetNvLinkState, (void *d, unsigned l, int *a),
                  (d, l, a))

const char *nvmlErrorString(int result)
{
    const char *(*real)(int) = (const char *(*)(int))span_nvml_real(
            "nvmlErrorString");

    return (real == NULL) ? "span NVML shim: no real NVML" : real(result);
}
