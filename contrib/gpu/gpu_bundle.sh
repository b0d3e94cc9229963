#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Packs what the GPU suite needs on a machine that has a GPU and no network
# into .gpu/ (git-ignored, well under the 64 MiB a device run may carry):
# the wheel's UCX libraries, its CUDA and CMA modules and tools, stripped,
# and this build's plugin, GPU test and benchmarks. Run after make check.
# There: contrib/gpu/gpu_suite.sh
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
ucx=$top/.span-deps/ucx
out=$top/.gpu
rm -rf "$out"
mkdir -p "$out/ucx/lib/ucx" "$out/ucx/bin" "$out/span" "$out/bin"
for lib in ucp uct ucs ucm; do
    cp -L "$ucx/lib/lib$lib.so.0" "$out/ucx/lib/"
done
for mod in uct_cuda ucm_cuda uct_cma ucx_perftest_cuda; do
    cp -L "$ucx/lib/ucx/lib$mod.so.0" "$out/ucx/lib/ucx/"
done
cp "$ucx/bin/ucx_perftest" "$ucx/bin/ucx_info" "$out/ucx/bin/"
cp "$ucx"/libucx_cu13.libs/*.so* "$out/ucx/lib/" # for ucx_perftest and its cuda module
# both names: UCX takes the extension of its own libucs (.so.0, NIXL .so.0.0.0)
cp -L "$top/src/uct/.libs/libuct_span.so.0" "$top/src/uct/.libs/libuct_span.so.0.0.0" \
    "$top/src/uct/.libs/libspan_impl.so" "$out/span/"
for prog in test/span_gpu_test test/span_gpu_rocm_test span-check \
        contrib/gpu/span_bench_gpu; do
    [ -x "$top/$prog" ] && cp "$top/$prog" "$out/bin/"
done
# NIXL's UCX 1.23 (what contrib/setup/setup.sh unpacked): its four libraries and
# the modules the GPU tests use, and the tests linked against it
nixl=$top/.span-deps/nixl/lib
if [ -x "$top/test/nixl/span_gpu_test" ] && [ -d "$nixl" ]; then
    mkdir -p "$out/nixl/lib/ucx" "$out/nixl/bin"
    cp "$nixl"/libuc[pstm]-*.so.* "$out/nixl/lib/"
    cp "$nixl"/ucx/libuct_cuda.so.* "$nixl"/ucx/libucm_cuda.so.* \
        "$nixl"/ucx/libuct_cma.so.* "$out/nixl/lib/ucx/"
    cp "$top/test/nixl/span_gpu_test" "$top/test/nixl/span-check" \
        "$out/nixl/bin/"
    # counts the driver calls of UCX's cuda modules (gpu_suite.sh part D)
gcc -shared -fPIC -O2 "$top/contrib/gpu/span_cuda_calls.c" -ldl \
    -o "$out/bin/libspan_cuda_calls.so"
strip --strip-unneeded "$out"/nixl/lib/*.so.* "$out"/nixl/lib/ucx/*.so.* \
        "$out"/nixl/bin/* 2>/dev/null || true
fi
# UCX releases before 1.22 from their wheels (contrib/setup/setup.sh), for part V:
# their four libraries, the modules the GPU tests use and ucx_info, as
# shipped
for v in ${SPAN_GPU_RELEASES-1.18.1 1.21.0}; do
    rel=$top/.span-deps/ucx-$v/libucx/lib
    [ -d "$rel" ] || continue
    mkdir -p "$out/ucx-$v/lib/ucx" "$out/ucx-$v/bin"
    cp -L "$rel/../bin/ucx_info" "$out/ucx-$v/bin/"
    for lib in ucp uct ucs ucm; do
        cp -L "$rel/lib$lib.so.0" "$out/ucx-$v/lib/"
    done
    for mod in uct_cuda ucm_cuda uct_cma; do
        cp -L "$rel/ucx/lib$mod.so.0" "$out/ucx-$v/lib/ucx/"
    done
    # not stripped: strip breaks these patchelf-made files ("ELF load
    # command address/offset not page-aligned")
done
# the test harness, for the PyTorch target (contrib/gpu/span_torch_target.py)
cp -L "$top/tools/harness/.libs/libspan_pair.so" "$out/bin/"
# the resolver alone, for contrib/gpu/span_torch_check.py
gcc -shared -fPIC -O2 -DHAVE_CONFIG_H -I"$top" -I"$top/src/uct" -I"$ucx/include" \
    $(sed -n 's/^CUDA_CPPFLAGS = //p' "$top/Makefile") \
    "$top/contrib/gpu/span_resolve_shim.c" "$top/src/uct/resolve/span_device.c" \
    "$top/src/uct/resolve/span_cuda_driver.c" \
    "$top/src/uct/vendor/span_libcuda.c" "$top/src/uct/base/span_dl.c" \
    -L"$ucx/lib" -lucs -ldl -o "$out/bin/libspan_resolve.so"
# an NVML in which cuda_ipc's NVLink probe fails (gpu_suite.sh part F)
mkdir -p "$out/nvshim"
gcc -shared -fPIC -O2 "$top/contrib/gpu/span_nvml_shim.c" -ldl \
    -o "$out/nvshim/libnvidia-ml.so.1"
strip --strip-unneeded "$out"/ucx/lib/*.so.0 "$out"/ucx/lib/ucx/*.so.0 \
    "$out"/span/*.so* "$out"/bin/* "$out"/ucx/bin/* 2>/dev/null || true
du -sh "$out"
