/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The objects a process has loaded, by path, for code that must open some
 * of them: glibc holds its load lock while dl_iterate_phdr runs its
 * callback, so a dlopen there deadlocks against a thread that loads a
 * library at the same time (it takes the two locks in the other order).
 * The names are copied out of the iteration, and opened after it. Uses
 * libc alone: the loader (span_loader.c) links no UCX.
 */
#ifndef SPAN_DL_LOADED_H_
#define SPAN_DL_LOADED_H_

/* The paths of the loaded objects that have one (not the program's own
 * ""), in load order: a NULL-terminated array in one block, for free();
 * NULL where there is no memory. An object loaded while it is made may
 * be missing. */
char **span_dl_loaded(void);

#endif
