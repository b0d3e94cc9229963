/*
 * The ROCm runtime loader.
 */
#ifdef HAVE_CONFIG_H
#  include "config.h"
#endif

#if HAVE_ROCM
#include "span_librocm.h"

#include <ucs/debug/log_def.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>

span_librocm_t span_librocm;

static pthread_once_t span_librocm_once = PTHREAD_ONCE_INIT;
/* Users (SPAN_LIBROCM_*) of a call the runtime lacks */
static unsigned       span_librocm_missing;

/* ROCm 7, 6, 5 name their HIP library by major version; the development
 * link comes first where installed */
static const char *span_librocm_hip_names[] = {
    "libamdhip64.so", "libamdhip64.so.7", "libamdhip64.so.6",
    "libamdhip64.so.5"
};

/* The HIP library the process loaded already (the application's), or
 * else the first one found */
static void *span_librocm_open_hip(void)
{
    size_t n = sizeof(span_librocm_hip_names) /
               sizeof(span_librocm_hip_names[0]);
    void *lib;
    size_t i;

    for (i = 0; i < n; ++i) {
        lib = dlopen(span_librocm_hip_names[i],
                     RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD | RTLD_NODELETE);
        if (lib != NULL) {
            return lib;
        }
    }
    for (i = 0; i < n; ++i) {
        lib = dlopen(span_librocm_hip_names[i],
                     RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
        if (lib != NULL) {
            return lib;
        }
    }
    ucs_debug("span rocm: no HIP library: %s", dlerror());
    return NULL;
}

#define SPAN_LIBROCM_RESOLVE(_name, _lib, _users) \
    span_librocm._name = (lib_##_lib == NULL) ? NULL : \
                         dlsym(lib_##_lib, #_name); \
    if (span_librocm._name == NULL) { \
        ucs_debug("span rocm: the runtime lacks %s", #_name); \
        span_librocm_missing |= (_users); \
    }

static void span_librocm_open(void)
{
    void *lib_HIP = span_librocm_open_hip();
    void *lib_HSA = dlopen("libhsa-runtime64.so.1",
                           RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);

    if (lib_HSA == NULL) {
        ucs_debug("span rocm: no HSA runtime: %s", dlerror());
    }
    SPAN_LIBROCM_CALLS(SPAN_LIBROCM_RESOLVE)
    if ((lib_HIP != NULL) && (span_librocm_missing & SPAN_LIBROCM_RESOLVER)) {
        ucs_warn("span rocm: the HIP or HSA library lacks a call span "
                 "needs: ROCm memory is registered as given");
    }
}

int span_librocm_load(unsigned users)
{
    pthread_once(&span_librocm_once, span_librocm_open);
    return !(span_librocm_missing & users);
}
#endif
