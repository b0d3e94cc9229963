#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Builds a copy of the committed tree with a sanitizer and runs make check.
#   ./contrib/sanitize/sanitize.sh [address|thread] [BUILD_DIR]
# address: ASan + UBSan, leaks included; thread: TSan.
set -euo pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
kind=${1:-address}
dir=${2:-/tmp/span-$kind}
case $kind in
address) san=address,undefined ;;
thread)  san=thread ;;
*) echo "usage: $0 [address|thread] [BUILD_DIR]" >&2; exit 2 ;;
esac

"$top/contrib/setup/setup.sh"
rm -rf "$dir"
mkdir -p "$dir"
git -C "$top" archive HEAD | tar -x -C "$dir"
cd "$dir"
flags="-g -O1 -fno-omit-frame-pointer -fsanitize=$san"
gcc -O2 -fPIC -c "$top/contrib/sanitize/sanitize_shim.c" -o sanitize_shim.o
./autogen.sh >/dev/null
./configure -q --with-ucx="$top/.span-deps/ucx" CFLAGS="$flags" \
    CXXFLAGS="$flags" LDFLAGS="-fsanitize=$san" LIBS="$dir/sanitize_shim.o"
# the legs that need the checkout's dependency folder (releases) find it
export SPAN_DEPS=$top/.span-deps
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$top/contrib/sanitize/tsan.supp"
if [ "$kind" = thread ]; then
    # UCM's mmap hooks cannot run under TSan: a thread's exit calls the hooked
    # madvise after TSan tore the thread down (a crash inside TSan, with or
    # without span). Off; the registry tests then report unmaps themselves.
    export UCX_MEM_MMAP_HOOK_MODE=none UCX_MEM_MALLOC_HOOKS=n
fi
make -j"$(nproc)" check
