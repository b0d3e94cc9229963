#!/bin/bash
# Builds UCX's ROCm modules (libuct_rocm, libucm_rocm) from a UCX source
# tree you already have, against Debian's ROCm headers, for the ROCm leg of
# the tests (test/rocm/run.sh). It fetches nothing: point it at a checkout
# of UCX's tag v1.22.0 (the release span's layouts for 1.22 describe).
#
#   contrib/ucx_rocm_build.sh SRC_DIR PREFIX [BUILD_DIR]
#   SPAN_UCX_ROCM_PREFIX=PREFIX make check     # the ROCm leg then runs
#
# Needs libhsa-runtime-dev and libamdhip64-dev (contrib/setup.sh installs
# them). The build runs outside this repository (BUILD_DIR, default
# PREFIX.build) and installs into PREFIX; nothing of UCX enters the repo.
set -euo pipefail

if [ $# -lt 2 ]; then
    echo "usage: $0 UCX_SOURCE_DIR PREFIX [BUILD_DIR]" >&2
    exit 2
fi
src=$(cd "$1" && pwd)
prefix=$(mkdir -p "$2" && cd "$2" && pwd)
build=${3:-$prefix.build}
top=$(cd "$(dirname "$0")/.." && pwd)

case "$prefix/" in
"$top"/*) echo "$0: PREFIX must lie outside the repository" >&2; exit 2 ;;
esac
case "$build/" in
"$top"/*) echo "$0: BUILD_DIR must lie outside the repository" >&2; exit 2 ;;
esac
for h in /usr/include/hsa/hsa_ext_amd.h /usr/include/hip/hip_runtime_api.h; do
    if [ ! -f "$h" ]; then
        echo "$0: $h missing: apt-get install libhsa-runtime-dev libamdhip64-dev" >&2
        exit 1
    fi
done
version=$(sed -n 's/^define(\[ucx_ver_\(major\|minor\)\], \([0-9]*\)).*/\2/p' \
          "$src/configure.ac" | paste -sd.)
if [ "$version" != 1.22 ]; then
    echo "$0: $src is UCX '$version'; span's ROCm leg was written against v1.22.0" >&2
fi

[ -x "$src/configure" ] || (cd "$src" && ./autogen.sh)
mkdir -p "$build"
cd "$build"
# As the PyPI wheel is built (--enable-mt, no debug), with logging kept for
# the leg's diagnostics; --without-cuda: only the ROCm modules are wanted
"$src/configure" --prefix="$prefix" --with-rocm=/usr --without-cuda \
    --without-verbs --without-go --without-java --disable-doxygen-doc \
    --disable-debug --disable-assertions --enable-mt \
    --disable-static >configure.log 2>&1 ||
    { tail -30 configure.log; exit 1; }
grep -q '^#define HAVE_ROCM 1' config.h ||
    { echo "$0: configure found no ROCm (see $build/configure.log)" >&2; exit 1; }
make -j"${SPAN_MAKE_JOBS:-2}" >make.log 2>&1 || { tail -30 make.log; exit 1; }
make install >install.log 2>&1 || { tail -30 install.log; exit 1; }
ls "$prefix/lib/ucx/libuct_rocm.so.0" >/dev/null
echo "ucx_rocm_build: UCX $version with ROCm modules in $prefix"
