/*
 * The CUDA driver loader.
 */
#ifdef HAVE_CONFIG_H
#  include "config.h"
#endif

#if HAVE_CUDA
#include "span_libcuda.h"

#include <ucs/debug/log_def.h>
#include <dlfcn.h>
#include <pthread.h>

span_libcuda_t span_libcuda;

static pthread_once_t span_libcuda_once = PTHREAD_ONCE_INIT;
/* Users (SPAN_LIBCUDA_*) of a call libcuda lacks, all where it is absent */
static unsigned       span_libcuda_missing;

#define SPAN_LIBCUDA_RESOLVE(_name, _symbol, _users) \
    span_libcuda._name = dlsym(lib, _symbol); \
    if (span_libcuda._name == NULL) { \
        ucs_debug("span cuda: libcuda.so.1 lacks %s", _symbol); \
        span_libcuda_missing |= (_users); \
    }

static void span_libcuda_open(void)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);

    if (lib == NULL) {
        ucs_debug("span cuda: resolver off: %s", dlerror());
        span_libcuda_missing = SPAN_LIBCUDA_RESOLVER | SPAN_LIBCUDA_VMM;
        return;
    }
    SPAN_LIBCUDA_CALLS(SPAN_LIBCUDA_RESOLVE)
    if (span_libcuda_missing & SPAN_LIBCUDA_RESOLVER) {
        ucs_warn("span cuda: libcuda.so.1 lacks a driver call span needs: "
                 "device memory is registered as one unit");
    }
}

int span_libcuda_load(unsigned users)
{
    pthread_once(&span_libcuda_once, span_libcuda_open);
    return !(span_libcuda_missing & users);
}
#endif

CUresult span_libcuda_primary_push(int device)
{
    CUcontext ctx;
    CUdevice dev;
    CUresult res;

    if (((res = span_libcuda.cuDeviceGet(&dev, device)) != CUDA_SUCCESS) ||
        ((res = span_libcuda.cuDevicePrimaryCtxRetain(&ctx, dev)) !=
         CUDA_SUCCESS)) {
        return res;
    }
    res = span_libcuda.cuCtxPushCurrent(ctx);
    if (res != CUDA_SUCCESS) {
        span_libcuda.cuDevicePrimaryCtxRelease(dev);
    }
    return res;
}

void span_libcuda_primary_pop(int device)
{
    CUcontext ctx;
    CUdevice dev;

    span_libcuda.cuCtxPopCurrent(&ctx);
    if (span_libcuda.cuDeviceGet(&dev, device) == CUDA_SUCCESS) {
        span_libcuda.cuDevicePrimaryCtxRelease(dev);
    }
}
