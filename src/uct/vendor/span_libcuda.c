/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The CUDA driver loader.
 */
#include "span_libcuda.h"
#include "base/span_dl.h"

#include <ucs/sys/compiler_def.h>
#include <pthread.h>
#include <stdio.h>

span_libcuda_t span_libcuda;

static pthread_once_t span_libcuda_once = PTHREAD_ONCE_INIT;
/* Users (SPAN_LIBCUDA_*) of a call libcuda lacks, all where it is absent */
static unsigned       span_libcuda_missing;

#define SPAN_LIBCUDA_SYM(_name, _symbol, _users) \
    {_symbol, &span_libcuda._name, _users},

static void span_libcuda_open(void)
{
    static const char *const names[]  = {"libcuda.so.1"};
    static const span_dl_sym_t syms[] = {
        SPAN_LIBCUDA_CALLS(SPAN_LIBCUDA_SYM)
    };
    static const span_dl_lib_t lib    = {
        "CUDA driver", names, ucs_static_array_size(names),
        syms, ucs_static_array_size(syms)
    };

    if ((span_dl_load(&lib, &span_libcuda_missing) == UCS_OK) &&
        (span_libcuda_missing & SPAN_LIBCUDA_RESOLVER)) {
        ucs_warn("span cuda: libcuda.so.1 lacks a driver call span needs: "
                 "device memory is registered as one unit");
    }
}

int span_libcuda_load(unsigned users)
{
    pthread_once(&span_libcuda_once, span_libcuda_open);
    return !(span_libcuda_missing & users);
}

CUresult span_libcuda_primary_push(int device)
{
    CUcontext ctx;
    CUdevice dev;
    CUresult res;

    if (((res = SPAN_LIBCUDA_FUNC(UCS_LOG_LEVEL_DEBUG, cuDeviceGet, &dev,
                                  device)) != CUDA_SUCCESS) ||
        ((res = SPAN_LIBCUDA_FUNC(UCS_LOG_LEVEL_DEBUG, cuDevicePrimaryCtxRetain,
                                  &ctx, dev)) != CUDA_SUCCESS)) {
        return res;
    }
    res = SPAN_LIBCUDA_FUNC(UCS_LOG_LEVEL_WARN, cuCtxPushCurrent, ctx);
    if (res != CUDA_SUCCESS) {
        SPAN_LIBCUDA_FUNC(UCS_LOG_LEVEL_WARN, cuDevicePrimaryCtxRelease, dev);
    }
    return res;
}

void span_libcuda_primary_release(int device)
{
    CUdevice dev;

    if (SPAN_LIBCUDA_FUNC(UCS_LOG_LEVEL_DEBUG, cuDeviceGet, &dev, device) ==
        CUDA_SUCCESS) {
        SPAN_LIBCUDA_FUNC(UCS_LOG_LEVEL_WARN, cuDevicePrimaryCtxRelease, dev);
    }
}

void span_libcuda_primary_pop(int device)
{
    CUcontext ctx;

    SPAN_LIBCUDA_FUNC(UCS_LOG_LEVEL_WARN, cuCtxPopCurrent, &ctx);
    span_libcuda_primary_release(device);
}

const char *span_libcuda_error(CUresult res, char *buf, size_t size)
{
    const char *name = NULL, *text = NULL;

    /* the unit tests' fake drivers have neither */
    if ((span_libcuda.cuGetErrorName == NULL) ||
        (span_libcuda.cuGetErrorName(res, &name) != CUDA_SUCCESS) ||
        (span_libcuda.cuGetErrorString == NULL) ||
        (span_libcuda.cuGetErrorString(res, &text) != CUDA_SUCCESS)) {
        snprintf(buf, size, "CUresult %d", (int)res);
    } else {
        snprintf(buf, size, "%s: %s", name, text);
    }
    return buf;
}
