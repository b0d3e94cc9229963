/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Included first in every C file of the wheel's build (-include), so that
 * the plugin built on a newer glibc runs where NIXL's manylinux_2_28 wheel
 * runs: glibc 2.33 made fstat a function (fstat@GLIBC_2.33); before, its
 * <sys/stat.h> turned fstat into __fxstat, which every later release still
 * exports under GLIBC_2.2.5. (The dl* and pthread_* functions that glibc
 * 2.34 moved into libc.so.6 are bound by the link instead:
 * contrib/wheel/span_wheel_backend.py.)
 */
#ifndef SPAN_WHEEL_GLIBC_2_28_H
#define SPAN_WHEEL_GLIBC_2_28_H

#ifndef __x86_64__
#error "the wheel's glibc symbol versions are those of x86_64"
#endif

#include <sys/stat.h>

extern int __fxstat(int ver, int fd, struct stat *buf);
__asm__(".symver __fxstat,__fxstat@GLIBC_2.2.5");
/* 1: _STAT_VER of x86_64 glibc before 2.33 */
#define fstat(_fd, _buf) __fxstat(1, (_fd), (_buf))

#endif
