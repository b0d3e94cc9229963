/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Counts the CUDA driver calls a process makes through its PLT (UCX's cuda
 * modules link libcuda; span and the CUDA runtime look their calls up and
 * are not counted) and prints "CUCALLS <pid> <call> <count>" at exit, for
 * the GPU suite's part D: the driver's work per op of native cuda_ipc and
 * of its twin. LD_PRELOADed; built by contrib/gpu/gpu_bundle.sh.
 *
 * Every call counted takes at most six integer or pointer arguments, which
 * the x86-64 and aarch64 calling conventions pass in registers: one
 * forwarder of six serves them all.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <unistd.h>

typedef long (*span_cuda_call_t)(long, long, long, long, long, long);

/* The driver's call: the next definition, or libcuda's where UCX loaded
 * it local to a module (then it is in no global scope) */
static span_cuda_call_t span_cuda_real(const char *name)
{
    void *func = dlsym(RTLD_NEXT, name), *lib;

    if ((func == NULL) &&
        ((lib = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD)) != NULL)) {
        func = dlsym(lib, name);
    }
    if (func == NULL) {
        fprintf(stderr, "span_cuda_calls: no %s in libcuda\n", name);
        _exit(99);
    }
    return (span_cuda_call_t)func;
}

#define SPAN_CUDA_CALLS(_x) \
    _x(cuPointerGetAttributes) _x(cuPointerGetAttribute) _x(cuDeviceGet) \
    _x(cuDevicePrimaryCtxRetain) _x(cuDevicePrimaryCtxRelease_v2) \
    _x(cuCtxGetCurrent) _x(cuCtxSetCurrent) _x(cuCtxPushCurrent_v2) \
    _x(cuCtxPopCurrent_v2) _x(cuStreamCreate) _x(cuStreamQuery) \
    _x(cuStreamWaitEvent) _x(cuEventCreate) _x(cuEventRecord) \
    _x(cuEventQuery) _x(cuMemcpyAsync) _x(cuMemcpyDtoDAsync_v2) \
    _x(cuMemGetAddressRange_v2) _x(cuIpcOpenMemHandle_v2)

#define SPAN_CUDA_COUNT(_name) \
    static span_cuda_call_t span_real_##_name; \
    static unsigned long span_count_##_name; \
    long _name(long a, long b, long c, long d, long e, long f) \
    { \
        if (span_real_##_name == NULL) { \
            span_real_##_name = span_cuda_real(#_name); \
        } \
        __atomic_add_fetch(&span_count_##_name, 1, __ATOMIC_RELAXED); \
        return span_real_##_name(a, b, c, d, e, f); \
    }

SPAN_CUDA_CALLS(SPAN_CUDA_COUNT)

#define SPAN_CUDA_PRINT(_name) \
    if (span_count_##_name != 0) { \
        fprintf(stderr, "CUCALLS %d %s %lu\n", (int)getpid(), #_name, \
                span_count_##_name); \
    }

__attribute__((destructor)) static void span_cuda_calls_print(void)
{
    SPAN_CUDA_CALLS(SPAN_CUDA_PRINT)
}
