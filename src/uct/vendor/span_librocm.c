/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The ROCm runtime loader.
 */
#include "span_librocm.h"
#include "base/span_dl.h"

#include <ucs/sys/compiler_def.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

span_librocm_t span_librocm;

static pthread_once_t span_librocm_once = PTHREAD_ONCE_INIT;
/* Users (SPAN_LIBROCM_*) of a call the runtime lacks */
static unsigned       span_librocm_missing;

#define SPAN_LIBROCM_SYM(_name, _users) {#_name, &span_librocm._name, _users},

static void span_librocm_open(void)
{
    /* ROCm 7, 6, 5 name their HIP library by major version; the
     * development link comes first where installed */
    static const char *const hip_names[] = {
        "libamdhip64.so", "libamdhip64.so.7", "libamdhip64.so.6",
        "libamdhip64.so.5"
    };
    static const char *const hsa_names[]  = {"libhsa-runtime64.so.1"};
    static const span_dl_sym_t hip_syms[] = {
        SPAN_LIBROCM_HIP_CALLS(SPAN_LIBROCM_SYM)
    };
    static const span_dl_sym_t hsa_syms[] = {
        SPAN_LIBROCM_HSA_CALLS(SPAN_LIBROCM_SYM)
    };
    static const span_dl_lib_t hip        = {
        "HIP runtime", hip_names, ucs_static_array_size(hip_names),
        hip_syms, ucs_static_array_size(hip_syms)
    };
    static const span_dl_lib_t hsa        = {
        "HSA runtime", hsa_names, ucs_static_array_size(hsa_names),
        hsa_syms, ucs_static_array_size(hsa_syms)
    };
    unsigned hsa_missing;
    ucs_status_t status;

    status = span_dl_load(&hip, &span_librocm_missing);
    span_dl_load(&hsa, &hsa_missing);
    span_librocm_missing |= hsa_missing;
    if ((status == UCS_OK) && (span_librocm_missing & SPAN_LIBROCM_RESOLVER)) {
        ucs_warn("span rocm: the HIP or HSA library lacks a call span "
                 "needs: ROCm memory is registered as given");
    }
}

int span_librocm_load(unsigned users)
{
    pthread_once(&span_librocm_once, span_librocm_open);
    return !(span_librocm_missing & users);
}

const char *span_librocm_hsa_error(hsa_status_t status, char *buf,
                                   size_t size)
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

const char *span_librocm_error(hipError_t err, char *buf, size_t size)
{
    const char *name, *text;

    if ((span_librocm.hipGetErrorName == NULL) ||
        (span_librocm.hipGetErrorString == NULL)) {
        snprintf(buf, size, "hipError_t %d", (int)err);
        return buf;
    }
    name = span_librocm.hipGetErrorName(err);
    text = span_librocm.hipGetErrorString(err);
    /* some runtimes describe an error by its name */
    snprintf(buf, size, strcmp(name, text) ? "%s: %s" : "%s", name, text);
    return buf;
}
