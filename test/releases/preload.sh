#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# The preload leg: UCX 1.21 and older load no module by name, so
# libuct_span.so preloaded registers at the first query of UCX's components.
# Here in the build's UCX 1.22, without UCX_MODULE_DIR: ucx_info -d lists
# the twins, self+ among them. ($1: the UCX library directory)
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
build=${SPAN_BUILDDIR:-$top}
libdir=$1
plugin=$build/src/uct/.libs/libuct_span.so
# a sanitizer's runtime comes first in a program built without it
sanitizer=$(ldd "$plugin" | awk '/lib(a|t)san\.so/ {print $3; exit}')
[ -z "$sanitizer" ] ||
    export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0
twins=$(env -u UCX_MODULE_DIR LD_LIBRARY_PATH="$libdir" \
            LD_PRELOAD="${sanitizer:+$sanitizer:}$plugin" \
            UCX_WARN_UNUSED_ENV_VARS=n "$libdir/../bin/ucx_info" -d |
        grep -oE 'Transport: [a-z_0-9]+\+' | sort -u | sed 's/Transport: //' |
        paste -sd' ')
echo "preload: ucx_info -d lists: ${twins:-no twin}"
case " $twins " in
*" self+ "*) ;;
*) exit 1 ;;
esac
