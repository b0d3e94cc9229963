/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The loader of vendor libraries (span_dl.h).
 */
#include "span_dl.h"

#include <ucs/debug/log_def.h>
#include <dlfcn.h>
#include <stddef.h>
#include <string.h>

/* The first of lib's names that dlopen opens with flags, or NULL */
static void *span_dl_open(const span_dl_lib_t *lib, int flags)
{
    void *handle;
    unsigned i;

    for (i = 0; i < lib->num_names; ++i) {
        handle = dlopen(lib->names[i],
                        RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE | flags);
        if (handle != NULL) {
            return handle;
        }
    }
    return NULL;
}

ucs_status_t span_dl_load(const span_dl_lib_t *lib, unsigned *missing_p)
{
    void *handle, *addr;
    unsigned i;

    /* the application's copy first: a second one beside it (another
     * major version of HIP) would be a second runtime in the process */
    handle = span_dl_open(lib, RTLD_NOLOAD);
    if (handle == NULL) {
        handle = span_dl_open(lib, 0);
    }
    *missing_p = 0;
    for (i = 0; i < lib->num_syms; ++i) {
        addr = (handle == NULL) ? NULL : dlsym(handle, lib->syms[i].name);
        if ((addr == NULL) && (handle != NULL)) {
            ucs_debug("span dl: the %s lacks %s", lib->what,
                      lib->syms[i].name);
        }
        if (addr == NULL) {
            *missing_p |= lib->syms[i].users;
        }
        /* the slot is a function pointer: written as the bytes dlsym
         * gives (POSIX makes both pointers alike), not through a void* */
        memcpy(lib->syms[i].slot, &addr, sizeof(addr));
    }
    if (handle == NULL) {
        ucs_debug("span dl: no %s: %s", lib->what, dlerror());
        return UCS_ERR_NO_ELEM;
    }
    return UCS_OK;
}
