#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Installs what building and testing ucx-span needs on Debian 12, idempotently:
# build packages from Debian and UCX 1.22.0 from the PyPI wheel libucx-cu13,
# unpacked into a project-local prefix (.span-deps/), never system-wide.
set -euo pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
deps="$top/.span-deps"
ucx_wheel_version=${SPAN_UCX_WHEEL_VERSION:-1.22.0}

# openmpi-bin, libopenmpi-dev: the Open MPI leg of make check (test/mpi),
# Open MPI 4.1 whose pml and osc ucx run on the UCX 1.22 below; patchelf:
# make install takes the checkout's run path off span-check
debian_pkgs=(autoconf automake libtool pkg-config make gcc g++ cmake
             libgtest-dev libibverbs-dev valgrind python3-pip python3-venv
             unzip clang libclang-rt-14-dev libhsa-runtime-dev libamdhip64-dev
             openmpi-bin libopenmpi-dev patchelf)

missing=()
for p in "${debian_pkgs[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing Debian packages: ${missing[*]}"
    sudo_cmd=""
    [ "$(id -u)" -eq 0 ] || sudo_cmd=sudo
    $sudo_cmd apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}"
fi

ucx_prefix="$deps/ucx"
stamp="$ucx_prefix/.wheel-$ucx_wheel_version"
if [ ! -f "$stamp" ]; then
    echo "setup: fetching libucx-cu13==$ucx_wheel_version into $ucx_prefix"
    rm -rf "$deps/wheel" "$ucx_prefix"
    mkdir -p "$deps/wheel"
    python3 -m pip download -q --no-deps --only-binary=:all: \
        -d "$deps/wheel" "libucx-cu13==$ucx_wheel_version"
    mkdir -p "$deps/wheel/x"
    unzip -q -o "$deps"/wheel/libucx_cu13-*.whl -d "$deps/wheel/x"
    # The wheel keeps UCX under libucx/ and its bundled libraries beside it;
    # the layout is kept so the libraries' $ORIGIN-relative paths still work.
    mv "$deps/wheel/x" "$ucx_prefix"
    # its libtool archives name the wheel's build directory: libtool would
    # follow them there, so linking goes by -L and the .so files alone
    find "$ucx_prefix" -name '*.la' -delete
    ln -sfn libucx/include "$ucx_prefix/include"
    ln -sfn libucx/lib "$ucx_prefix/lib"
    ln -sfn libucx/bin "$ucx_prefix/bin"
    touch "$stamp"
fi
echo "setup: UCX $ucx_wheel_version in $ucx_prefix"

# The UCX releases before 1.22 that span supports, each from its PyPI wheel
# (libucx-cu12, which carries ucx_info and ucx_perftest), unpacked as the
# 1.22 one into .span-deps/ucx-<version>: the releases leg of make check
# (test/releases/run.sh) runs span in each. Failing to get one fails setup.
ucx_releases=${SPAN_UCX_RELEASES-1.14.1.post1 1.15.0.post1 1.16.0.post2 1.17.0 1.18.1 1.19.0 1.20.1 1.21.0}
for v in $ucx_releases; do
    prefix="$deps/ucx-$v"
    [ -f "$prefix/.wheel-$v.2" ] && continue
    echo "setup: fetching libucx-cu12==$v into $prefix"
    rm -rf "$deps/wheel-$v" "$prefix"
    mkdir -p "$deps/wheel-$v"
    python3 -m pip download -q --no-deps --only-binary=:all: \
        -d "$deps/wheel-$v" "libucx-cu12==$v"
    # libucx_cu12.libs: the CUDA runtime its cuda modules link ($ORIGIN)
    unzip -q -o "$deps"/wheel-"$v"/libucx_cu12-*.whl 'libucx/*' \
        'libucx_cu12.libs/*' -d "$deps/wheel-$v/x"
    mv "$deps/wheel-$v/x" "$prefix"
    rm -rf "$deps/wheel-$v"
    find "$prefix" -name '*.la' -o -name '*.a' | xargs rm -f
    ln -sfn libucx/lib "$prefix/lib"
    ln -sfn libucx/bin "$prefix/bin"
    touch "$prefix/.wheel-$v.2"
done
echo "setup: UCX releases ${ucx_releases:-none} in $deps/ucx-<version>"

# Debian 12's own UCX 1.13.1 (libucx0, and ucx-utils for ucx_info), for the
# releases leg too: its packages unpacked, not installed, into
# .span-deps/ucx-1.13.1 (lib/ holds its modules in ucx/, as the wheels')
debian_ucx=${SPAN_DEBIAN_UCX-1.13.1-1}
for dv in $debian_ucx; do
    v=${dv%-*}
    prefix="$deps/ucx-$v"
    [ -f "$prefix/.deb-$dv" ] && continue
    echo "setup: fetching Debian's libucx0 and ucx-utils $dv into $prefix"
    rm -rf "$deps/deb-$v" "$prefix"
    mkdir -p "$deps/deb-$v"
    (cd "$deps/deb-$v" &&
     { apt-get download -qq "libucx0=$dv" "ucx-utils=$dv" ||
       { apt-get update -qq &&
         apt-get download -qq "libucx0=$dv" "ucx-utils=$dv"; }; })
    for deb in "$deps/deb-$v"/*.deb; do
        dpkg -x "$deb" "$deps/deb-$v/x"
    done
    mv "$deps/deb-$v/x" "$prefix"
    rm -rf "$deps/deb-$v"
    ln -sfn usr/lib/x86_64-linux-gnu "$prefix/lib"
    ln -sfn usr/bin "$prefix/bin"
    touch "$prefix/.deb-$dv"
done
echo "setup: Debian's UCX ${debian_ucx:-none} in $deps/ucx-<version>"

# NIXL's UCX 1.23 (nixl-cu13 bundles it with verbs, renamed by auditwheel,
# without headers): its UCX libraries, their modules and what they link,
# kept side by side as in the wheel (UCX finds its modules in ucx/ beside
# libucs), and link names for building test programs against it the way
# libnixl links it (DT_NEEDED on the hashed names).
nixl_version=${SPAN_NIXL_VERSION:-1.5.1}
nixl_prefix="$deps/nixl"
stamp="$nixl_prefix/.wheel-$nixl_version"
if [ ! -f "$stamp" ]; then
    echo "setup: fetching nixl-cu13==$nixl_version's UCX into $nixl_prefix"
    rm -rf "$deps/nixl-wheel" "$nixl_prefix"
    mkdir -p "$deps/nixl-wheel" "$nixl_prefix/lib" "$nixl_prefix/link"
    python3 -m pip download -q --no-deps --only-binary=:all: \
        --python-version 3.11 --platform manylinux_2_28_x86_64 \
        -d "$deps/nixl-wheel" "nixl-cu13==$nixl_version"
    unzip -q -o "$deps"/nixl-wheel/nixl_cu13-*.whl 'nixl_cu13.libs/*' \
        -d "$deps/nixl-wheel/x"
    libs="$deps/nixl-wheel/x/nixl_cu13.libs"
    (
        cd "$libs"
        for f in $("$top/contrib/nixl/needed_closure.sh" . \
                       libucp-*.so* libuct-*.so* libucs-*.so* libucm-*.so* \
                       ucx/*.so*); do
            mkdir -p "$nixl_prefix/lib/$(dirname "$f")"
            cp -p "$f" "$nixl_prefix/lib/$f"
        done
    )
    for l in ucp uct ucs ucm; do
        ln -sfn "../lib/$(cd "$nixl_prefix/lib" && ls lib$l-*.so.*)" \
            "$nixl_prefix/link/lib$l.so"
    done
    rm -rf "$deps/nixl-wheel"
    touch "$stamp"
fi
echo "setup: NIXL's UCX in $nixl_prefix/lib"

# NIXL's python package (for contrib/nixl/nixl_check.py, the nixl_client test)
# and numpy, for this machine's python3, in a project-local directory:
# PYTHONPATH=.span-deps/nixl/py. nixl_ep (about 95 MB of PyTorch extensions) and
# the wheel's headers are not needed and are dropped.
pyver=$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
nixl_py="$nixl_prefix/py"
stamp="$nixl_py/.nixl-$nixl_version-py$pyver"
if [ ! -f "$stamp" ]; then
    echo "setup: installing nixl-cu13==$nixl_version and numpy into $nixl_py"
    rm -rf "$nixl_py" "$nixl_py.tmp"
    python3 -m pip install -q --disable-pip-version-check --no-deps \
        --only-binary=:all: --target "$nixl_py.tmp" \
        "nixl-cu13==$nixl_version" "numpy==2.2.6"
    rm -rf "$nixl_py.tmp"/nixl_ep_cu13 "$nixl_py.tmp"/include \
        "$nixl_py.tmp"/nixl_cu13.scripts "$nixl_py.tmp"/bin
    mv "$nixl_py.tmp" "$nixl_py"
    touch "$stamp"
fi
echo "setup: NIXL's python package in $nixl_py"

# UCXX 0.52 as pip installs it (ucxx-cu13, with what it pulls: libucx-cu13
# 1.21.0, librmm, cuda-bindings, numpy; it imports without a GPU), for this
# machine's python3 in a project-local directory: PYTHONPATH=.span-deps/ucxx/py,
# the ucxx leg of make check (test/ucxx/run.sh). Failing to get it fails setup.
ucxx_version=${SPAN_UCXX_VERSION:-0.52.0}
ucxx_py="$deps/ucxx/py"
stamp="$ucxx_py/.ucxx-$ucxx_version-py$pyver"
if [ ! -f "$stamp" ]; then
    echo "setup: installing ucxx-cu13==$ucxx_version and libucx-cu13==1.21.0 into $ucxx_py"
    rm -rf "$ucxx_py" "$ucxx_py.tmp"
    mkdir -p "$deps/ucxx"
    python3 -m pip install -q --disable-pip-version-check --only-binary=:all: \
        --target "$ucxx_py.tmp" "ucxx-cu13==$ucxx_version" \
        "libucxx-cu13==$ucxx_version" "libucx-cu13==1.21.0"
    rm -rf "$ucxx_py.tmp"/bin
    mv "$ucxx_py.tmp" "$ucxx_py"
    touch "$stamp"
fi
echo "setup: UCXX in $ucxx_py"

# The verbs VM (contrib/setup/verbs_vm.sh): qemu and busybox from Debian, the
# kernel package downloaded and unpacked into .span-deps/vm, never installed;
# patchelf for the VM leg of make check (test/vm/run.sh).
# SPAN_SETUP_VM=no leaves it out; make check then reports the VM leg skipped.
if [ "${SPAN_SETUP_VM:-yes}" != no ]; then
    vm_pkgs=(qemu-system-x86 busybox-static kmod cpio ibverbs-utils patchelf)
    missing=()
    for p in "${vm_pkgs[@]}"; do
        dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        echo "setup: installing Debian packages for the verbs VM: ${missing[*]}"
        sudo_cmd=""
        [ "$(id -u)" -eq 0 ] || sudo_cmd=sudo
        $sudo_cmd apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq \
            --no-install-recommends "${missing[@]}"
    fi
    "$top/contrib/setup/verbs_vm.sh" prepare
fi
