/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Vendor libraries loaded at run time (libcuda, HIP, HSA): span links
 * none, so that one build loads on hosts with or without them. A library
 * is a list of file names and a table of the symbols span asks of it, each
 * with the users that need it: a symbol the library lacks turns off only
 * its users, and the debug log names it.
 */
#ifndef SPAN_DL_H_
#define SPAN_DL_H_

#include <ucs/debug/log_def.h>
#include <ucs/type/status.h>

/* One symbol asked of a library */
typedef struct span_dl_sym {
    const char *name;  /* as the library exports it (its version's) */
    void       *slot;  /* the function pointer that gets its address, or
                          NULL where the library lacks it */
    unsigned   users;  /* the caller's bits of who needs it */
} span_dl_sym_t;

/* A library and what span asks of it */
typedef struct span_dl_lib {
    const char          *what;      /* in log lines: "CUDA driver" */
    const char *const   *names;     /* file names, preferred first */
    unsigned            num_names;
    const span_dl_sym_t *syms;
    unsigned            num_syms;
} span_dl_lib_t;

/* Opens the library (of its names, one the process has loaded already, or
 * else the first that loads; never unloaded) and resolves every symbol of
 * its table; *missing_p: the users of the symbols it lacks. Where no name
 * loads, UCS_ERR_NO_ELEM and every symbol's users. */
ucs_status_t span_dl_load(const span_dl_lib_t *lib, unsigned *missing_p);

#endif
