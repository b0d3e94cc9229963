#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# The releases leg: span in every UCX release before 1.22 that it supports,
# each from the PyPI wheel (1.13.1: Debian 12's packages)
# contrib/setup/setup.sh unpacked into .span-deps/ucx-<v>,
# loaded the way those releases allow (LD_PRELOAD: they load no module by
# name): ucx_info -d lists the twins, cuda_ipc+ too where the release's
# cuda module lists cuda_ipc on a fake CUDA driver; span-check's scenarios (whole and
# odd-offset sub-ranges, chunked with a small UCX_SPAN_MAX_CHUNK, an access
# out of bounds refused) pass; the UCT and UCP tests pass (a freed and
# reallocated buffer served fresh: ucp_remap); a build that knows no such
# release refuses to register (version); 8 threads making their first
# query at once each see span, and span opens no library inside
# dl_iterate_phdr (threads); ucx_span.enable() in Python makes
# a UCP context of twins open, called before or after libucx loads UCX
# (enable.py). One row per release. A release
# whose wheel is missing fails the leg: it does not skip.
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
build=${SPAN_BUILDDIR:-$top}
# the dependency folder contrib/setup/setup.sh made (a sanitizer's copy of the
# tree has none: contrib/sanitize/sanitize.sh names the checkout's)
deps=${SPAN_DEPS:-$top/.span-deps}
plugin=$build/src/uct/.libs/libuct_span.so
# A sanitizer's runtime, where the plugin was built with one, must come
# first in programs that were not (ucx_info, python); their own leaks are
# not the plugin's
sanitizer=$(ldd "$plugin" | awk '/lib(a|t)san\.so/ {print $3; exit}')
if [ -n "$sanitizer" ]; then
    export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0
fi
releases=${SPAN_UCX_RELEASES-1.13.1 1.14.1.post1 1.15.0.post1 1.16.0.post2 1.17.0 1.18.1 1.19.0 1.20.1 1.21.0}
log=${SPAN_RELEASES_LOG:-$build/test/releases}
mkdir -p "$log"
failed=0

# Tests of UCX 1.22's API that older releases lack (uct_iface_query_v2,
# SGL zero-copy)
uct_filter_all='-*twin_offers_sgl*:*sgl_moves_every_element*'
# and, before 1.16, of 1.16's: uct_md_mkey_pack_v2 with a range (1.13 to
# 1.15 take none, same symbol), a component's rkey_compare
uct_filter_1_16='*/span_uct_iface_mem.*'
uct_filter_1_16+=':*a_key_serves_the_range_packed_not_the_registration*'
uct_filter_1_16+=':*invalidate_flags_of_mkey_pack_are_ignored*'
uct_filter_1_16+=':*the_key_that_the_memh_gives_moves_bytes*'
uct_filter_1_16+=':span_rkey_compare.*'

# Runs "$@" in release v, its output in $log/<v>-<name>.log; prints the
# gtest summary or the exit status
run() {
    local v=$1 name=$2
    shift 2
    (cd "$build/test" &&
     env LD_LIBRARY_PATH="$deps/ucx-$v/lib" UCX_WARN_UNUSED_ENV_VARS=n \
         timeout 300 "$@") >"$log/$v-$name.log" 2>&1
    local rc=$?
    local passed
    passed=$(grep -oE '\[  PASSED  \] [0-9]+' "$log/$v-$name.log" |
             grep -oE '[0-9]+$')
    if [ $rc -eq 0 ]; then
        if [ -n "$passed" ]; then echo "$passed passed"; else echo ok; fi
    else
        echo "FAILED (exit $rc, $log/$v-$name.log)"
        return 1
    fi
}

# ucx_span as the wheel installs it, its lib/ the build's plugin
pkg=$log/python
rm -rf "$pkg"
mkdir -p "$pkg/ucx_span"
cp "$top"/python/ucx_span/*.py "$pkg/ucx_span/"
ln -s "$build/src/uct/.libs" "$pkg/ucx_span/lib"

# Whether the release's cuda_ipc gets a twin, with a fake CUDA driver of one
# GPU (test/cuda_fake) and NVML: UCX's cuda module lists cuda_ipc, span
# must list cuda_ipc+ beside it. $1: the release; $2: span's LD_PRELOAD=
cuda_row() {
    local out
    out=$(env LD_LIBRARY_PATH="$build/test/cuda_fake/.libs:$build/test/nvml_fake/.libs:$deps/ucx-$1/lib" \
              "$2" UCX_WARN_UNUSED_ENV_VARS=n \
              timeout 60 "$deps/ucx-$1/bin/ucx_info" -d 2>&1 |
          grep -oE 'Transport: cuda_ipc\+?$' | sort -u | tr '\n' ' ')
    case "$out" in
    *'cuda_ipc+'*) echo "listed" ;;
    *'cuda_ipc '*) echo "FAILED: cuda_ipc listed, cuda_ipc+ not"; return 1 ;;
    *) echo "not checked: its cuda module lists no cuda_ipc on the fake driver" ;;
    esac
}

# A distro's UCX (Debian's 1.13.1) has no libucx Python package: a
# stand-in whose load_library() loads that UCX's libucp local, by path, as
# the wheels' loader of 1.21 does, and with it the libraries it needs
# (Debian's libucm needs libucs, which does not name it: they load as one;
# the python rows find them in LD_LIBRARY_PATH). $1: the release; prints
# the directory to put on PYTHONPATH
python_libucx() {
    local dir=$deps/ucx-$1
    if [ ! -f "$dir/libucx/__init__.py" ]; then
        dir=$log/libucx-$1
        mkdir -p "$dir/libucx"
        cat >"$dir/libucx/__init__.py" <<PY
"""libucx's loader for UCX $1 of a distribution (test/releases/run.sh)"""
import ctypes


def load_library():
    return [ctypes.CDLL("$deps/ucx-$1/lib/libucp.so.0", ctypes.RTLD_LOCAL)]
PY
    fi
    echo "$dir"
}

# ucx_span.enable() before and after libucx loads UCX; $1: the release
python_rows() {
    local order out= libucx ldpath=
    case $sanitizer in
    *libtsan*) echo "not run under TSan: python does not start with it preloaded"
               return ;;
    esac
    libucx=$(python_libucx "$1")
    [ "$libucx" = "$deps/ucx-$1" ] || ldpath=$deps/ucx-$1/lib
    for order in span-first ucx-first; do
        if (env PYTHONPATH="$pkg:$libucx" UCX_WARN_UNUSED_ENV_VARS=n \
                ${ldpath:+LD_LIBRARY_PATH=$ldpath} \
                ${sanitizer:+LD_PRELOAD=$sanitizer} \
                timeout 60 python3 "$top/test/releases/enable.py" "$order") \
                >"$log/$1-python-$order.log" 2>&1; then
            out="$out$order ok, "
        else
            out="${out}$order FAILED ($log/$1-python-$order.log), "
        fi
    done
    echo "${out%, }"
}

printf '| UCX | twins listed | cuda_ipc+ (fake driver) | span-check | access out of bounds | uct | ucp | version | 8 threads | python enable() |\n'
printf '|---|---|---|---|---|---|---|---|---|---|\n'
for v in $releases; do
    prefix=$deps/ucx-$v
    if [ ! -x "$prefix/bin/ucx_info" ]; then
        printf '| %s | no wheel in %s (contrib/setup/setup.sh) | | | | | | | | |\n' \
               "$v" "$prefix"
        failed=1
        continue
    fi
    uct_filter=$uct_filter_all
    case $v in
    1.13.*|1.14.*|1.15.*) uct_filter="$uct_filter:$uct_filter_1_16" ;;
    esac
    # there a twin whose inner MD needs no local memh reads none (UCP's RMA
    # passes unset ones: span_ucx_layout_t.rma_memh_unset), so a local
    # buffer outside its memh goes through strict+ (whose MD says it needs
    # none) as through cma+
    case $v in
    1.13.*|1.14.*|1.15.*)
        uct_filter="$uct_filter:*span_uct_chunked.local_buffer_outside_its_handle_is_refused/2" ;;
    esac
    # Debian's 1.13.1 is built with parameter checks: its uct_md_mkey_pack
    # refuses a NULL memh before span's op, which would log the line the
    # test counts
    case $v in
    1.13.*) uct_filter="$uct_filter:*foreign_memh_is_refused_by_pack*" ;;
    esac
    # the refused-access scenarios run in every row: in 1.13 to 1.18, whose
    # UCP aborts the process on a zero-copy get whose op returns an error,
    # span reports the refusal through the op's completion; in 1.13 to 1.15
    # UCP's RMA lane is the twin of cma only because it offers short and
    # bcopy ops (span_bounce.h), without which UCP carried span-check's
    # 128-byte access past a registration over active messages, unchecked
    # strict, the test's NIC, moves RMA in zero-copy only, which those
    # releases' UCP takes for no small access (natively and over its twin):
    # it emulates them over active messages, unchecked. A real NIC's
    # transport has short and bcopy ops; cma+ gains them there
    # (and no release before 1.22 has UCP's SGL datatype)
    ucp_filter='-*sgl*'
    case $v in
    1.13.*|1.14.*|1.15.*)
        ucp_filter+=':*ucp_twin.out_of_bounds_is_refused/strict*'
        ucp_filter+=':*ucp_strict.transfers_past_the_registration_cap/native' ;;
    esac
    span="LD_PRELOAD=${sanitizer:+$sanitizer:}$plugin"
    twins=$(env LD_LIBRARY_PATH="$prefix/lib" "$span" \
                UCX_WARN_UNUSED_ENV_VARS=n "$prefix/bin/ucx_info" -d |
            grep -oE 'Transport: [a-z_0-9]+\+' | sort -u |
            sed 's/Transport: //' | tr '\n' ' ')
    case " $twins" in
    *" self+ "*" cma+ "*|*" cma+ "*" self+ "*) ;;
    *) twins="FAILED: '$twins'"; failed=1 ;;
    esac
    # 1.13 to 1.15: cma+ lists put short and get bcopy of its own, and
    # none with UCX_SPAN_CMA_RMA=n; later releases list none
    bounce=
    for c in y n; do
        bounce+=$(env LD_LIBRARY_PATH="$prefix/lib" "$span" UCX_SPAN_CMA_RMA=$c \
                      UCX_WARN_UNUSED_ENV_VARS=n "$prefix/bin/ucx_info" -d \
                      -t cma+ 2>/dev/null | grep -cE 'put_short|get_bcopy')
    done
    case $v:$bounce in
    1.1[345].*:20) twins+="(cma+ short and bcopy RMA; none with UCX_SPAN_CMA_RMA=n) " ;;
    1.1[345].*:*|*:[1-9]*) twins+="FAILED: cma+ short and bcopy RMA '$bounce' "
                           failed=1 ;;
    esac
    cuda=$(cuda_row "$v" "$span") || failed=1
    check=$(run "$v" span_check env "$span" "$build/span-check" -s 8 \
                -r 2) || failed=1
    # span-check's access out of bounds over the twins: the status UCP
    # gave the application, and span-check's verdict
    refused=$(awk -F'|' '/^\| out of bounds / && $3 ~ /\+/ {
                  gsub(/^ +| +$/, "", $4); gsub(/^ +| +$/, "", $8);
                  printf "%s%s (%s)", sep, $4, $8; sep = "; " }' \
              "$log/$v-span_check.log")
    case $refused in
    "Address not valid (ok: refused)") ;;
    *) refused="FAILED: ${refused:-no row}"; failed=1 ;;
    esac
    uct=$(run "$v" uct env "$span" \
              UCX_MODULE_DIR="$build/test/modules/.libs" \
              ./span_uct_test --gtest_filter="$uct_filter") || failed=1
    ucp=$(run "$v" ucp env "$span" \
              UCX_MODULE_DIR="$build/test/modules/.libs" \
              ./span_ucp_test --gtest_filter="$ucp_filter") || failed=1
    version=$(run "$v" version \
                  env LD_PRELOAD="${sanitizer:+$sanitizer:}$build/test/mismatch/.libs/libuct_span.so" \
                  ./span_version_test) || failed=1
    # 8 threads' first queries at once, span registering meanwhile
    threads=$(run "$v" threads env "$span" \
                  timeout 60 ./span_loader_test) || failed=1
    python=$(python_rows "$v")
    case $python in *FAILED*) failed=1 ;; esac
    printf '| %s | %s| %s | %s | %s | %s | %s | %s | %s | %s |\n' "$v" \
           "$twins" "$cuda" "$check" "$refused" "$uct" "$ucp" "$version" \
           "$threads" "$python"
done
exit $failed
