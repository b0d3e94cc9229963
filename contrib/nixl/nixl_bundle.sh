#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Packs a slim copy of NIXL's python package for the GPU machine (Python
# 3.12, torch, no network) into .gpu/nixlpy/ (git-ignored), for
# contrib/nixl/nixl_check.py --gpu, run by contrib/gpu/gpu_suite.sh: the nixl_cu13
# package, libnixl and the UCX backend plugin, and what they and NIXL's UCX
# modules for CUDA and CMA link per readelf -d; not nixl_ep, not the other
# plugins. Stripped, then packed as .gpu/nixlpy/nixl.tar.xz (gpu_suite.sh
# unpacks it there). Run after contrib/gpu/gpu_bundle.sh (which empties .gpu/).
# libucm_cuda links libcudart.so.13: torch's nvidia/cu13/lib has it there.
# NIXL's python API imports numpy; --numpy adds numpy for a machine without
# it (about 9 MB more).
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
version=${SPAN_NIXL_VERSION:-1.5.1}
pyver=${SPAN_NIXL_PYTHON:-3.12}
out=$top/.gpu/nixlpy
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m pip download -q --disable-pip-version-check --no-deps \
    --only-binary=:all: --python-version "$pyver" \
    --platform manylinux_2_28_x86_64 -d "$work" "nixl-cu13==$version"
unzip -q "$work"/nixl_cu13-*.whl 'nixl_cu13/*' '.nixl_cu13.mesonpy.libs/*' \
    'nixl_cu13.libs/*' -d "$work/x"
rm -rf "$out"
mkdir -p "$out/py"
(
    cd "$work/x"
    # libnixl finds its plugins in .nixl_cu13.mesonpy.libs/plugins, libucs
    # its modules in ucx/ beside itself; the rest by RPATH, in either
    # library directory
    seen=$("$top/contrib/nixl/needed_closure.sh" \
               ".nixl_cu13.mesonpy.libs nixl_cu13.libs" \
               nixl_cu13/_bindings.*.so \
               .nixl_cu13.mesonpy.libs/plugins/libplugin_UCX.so \
               nixl_cu13.libs/ucx/libuct_cuda.so* \
               nixl_cu13.libs/ucx/libucm_cuda.so* \
               nixl_cu13.libs/ucx/libuct_cma.so*)
    for f in $seen nixl_cu13/*.py nixl_cu13/_utils.*.so; do
        mkdir -p "$out/py/$(dirname "$f")"
        cp -p "$f" "$out/py/$f"
    done
)
find "$out/py" -name '*.so*' -exec strip --strip-unneeded {} + 2>/dev/null || true
if [ "${1:-}" = --numpy ]; then
    python3 -m pip download -q --disable-pip-version-check --no-deps \
        --only-binary=:all: --python-version "$pyver" \
        --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 \
        -d "$work" "numpy==2.2.6"
    unzip -q "$work"/numpy-*.whl 'numpy/*' 'numpy.libs/*' -d "$out/py"
    find "$out/py/numpy" -depth -type d -name tests -exec rm -rf {} +
fi
tar -C "$out" -cJf "$out/nixl.tar.xz" py
rm -rf "$out/py"
echo "nixl_bundle: nixl-cu13==$version for Python $pyver:" \
     "$(du -h "$out/nixl.tar.xz" | cut -f1) in $out/nixl.tar.xz"
