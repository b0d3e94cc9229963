#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# The ROCm leg: UCX's own rocm modules, built from UCX's tag by
# a UCX 1.22 installation with its ROCm modules at $SPAN_UCX_ROCM_PREFIX (docs/rocm.md), on the emulated ROCm
# runtime (test/rocm_emu) first in the library path: ucx_info -d lists
# rocm_ipc and rocm_ipc+, the ROCm GPU test (test/test_gpu.cc over ROCm) moves
# bytes between two processes over rocm_ipc and rocm_ipc+, and
# ucx_perftest -m rocm runs over both. Prints one table, native beside twin.
# Skipped (77), with the reason, where the UCX build or the emulator is
# missing: CI has neither UCX's source nor a way to fetch it.
# SPAN_ROCM_RUNTIME=real runs the same on an AMD GPU, without the emulator
# (contrib/gpu/gpu_suite.sh part R); SPAN_ROCM_TEST names the test program and
# UCX_MODULE_DIR the plugin's directory where they are not the build's.
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
build=${SPAN_BUILDDIR:-$top}
prefix=${SPAN_UCX_ROCM_PREFIX:-}
runtime=${SPAN_ROCM_RUNTIME:-emulated}
test_prog=${SPAN_ROCM_TEST:-$build/test/span_gpu_rocm_test}
emu=$build/test/rocm_emu/.libs

skip() {
    echo "skipped: $*"
    exit 77
}

[ -n "$prefix" ] ||
    skip "SPAN_UCX_ROCM_PREFIX is not set (build UCX's rocm modules with" \
         "a UCX 1.22 installation with its ROCm modules at PREFIX (docs/rocm.md), then set it to PREFIX)"
[ -e "$prefix/lib/ucx/libuct_rocm.so.0" ] ||
    skip "no UCX rocm module in $prefix/lib/ucx (docs/rocm.md: a UCX installation with its ROCm modules)"
if [ "$runtime" = real ]; then
    export LD_LIBRARY_PATH=$prefix/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    where="on the ROCm runtime of this machine"
else
    [ -e "$emu/libhsa-runtime64.so.1" ] ||
        skip "the emulated ROCm runtime was not built (configure found no" \
             "ROCm headers: libhsa-runtime-dev, libamdhip64-dev)"
    export LD_LIBRARY_PATH=$emu:$prefix/lib
    where="on the emulated ROCm runtime in $emu"
fi
export UCX_MODULE_DIR=${UCX_MODULE_DIR:-$build/src/uct/.libs}
export UCX_WARN_UNUSED_ENV_VARS=n
version=$("$prefix/bin/ucx_info" -v | sed -n 's/^# Library version: //p')
echo "UCX $version from $prefix, $where"

rc=0
listed=$("$prefix/bin/ucx_info" -d | grep -E '^# +Transport: rocm_(ipc|copy)\+?$' |
         awk '{print $3}' | sort | paste -sd' ')
echo "ucx_info -d transports: $listed"
if [ "$runtime" = real ] && [ -z "$listed" ]; then
    skip "UCX lists no rocm transport: HSA finds no AMD GPU here"
fi
for tl in rocm_copy rocm_ipc rocm_ipc+; do
    case " $listed " in
    *" $tl "*) ;;
    *) echo "FAIL: ucx_info -d does not list $tl"; rc=1 ;;
    esac
done

out=$(mktemp)
trap 'rm -f "$out"' EXIT
timeout 1200 "$test_prog" >"$out" 2>&1
test_rc=$?
if [ "$test_rc" -eq 77 ]; then
    grep -a 'skipped:' "$out"
    exit 77
fi
grep -a -E 'Failure|FAILED|failed \(status|fault by GPU|test\(s\) failed|skipped' \
    "$out" |
    grep -v -e '^ROCM' -e 'listed below' | head -40
[ "$test_rc" -eq 0 ] || rc=$test_rc

echo
echo "| case             | op        | rocm_ipc (native)                        | rocm_ipc+ (twin)                         |"
echo "|------------------|-----------|------------------------------------------|------------------------------------------|"
grep -a '^ROCM| ' "$out" | awk -F'|' '
    function trim(s) { gsub(/^ +| +$/, "", s); return s }
    {
        key = trim($2) "|" trim($4)
        res = trim($5)
        for (i = 6; i < NF; ++i) { res = res ", " trim($i) }
        if (!(key in order)) { order[key] = ++n; keys[n] = key }
        if (trim($3) == "rocm_ipc+") { twin[key] = res } else { native[key] = res }
    }
    END {
        for (i = 1; i <= n; ++i) {
            split(keys[i], k, "|")
            printf "| %-16s | %-9s | %-40s | %-40s |\n", k[1], k[2],
                   native[keys[i]], twin[keys[i]]
        }
    }'
grep -a '^ROCM md|' "$out" | sed 's/^ROCM md| /twin MD: /'

# The protocol UCP takes for ucp_put from ROCm into ROCm memory, as
# UCX_PROTO_INFO prints it: natively software emulation at the target
# (put/offload/zcopy takes no lane whose put.min_zcopy is not 0, and
# rocm_ipc's is 128), unchecked; over the twin put/offload/zcopy, checked
echo
for side in native twin; do
    filter=rocm/rocm_pair.puts_at_and_past_the_end/malloc_layer_odd_$side
    rows=$(UCX_PROTO_INFO='*put*from rocm*to rocm*' SPAN_GPU_TEST_ALONE=1 \
           timeout 120 "$test_prog" --gtest_filter="$filter" 2>&1 |
           awk -F'|' '
        function trim(s) { gsub(/^ +| +$/, "", s); return s }
        $2 ~ /^ *[0-9]+\.\.[0-9a-z]+ *$/ && !seen[$0]++ {
            printf "%s%s %s over %s", sep, trim($2), trim($3), trim($4)
            sep = "; "
        }')
    echo "ucp_put from ROCm into ROCm memory, $side: ${rows:-no protocol table}"
    if [ "$side" = twin ]; then
        case "$rows" in
        "0..inf zero-copy over rocm_ipc+/"*) ;;
        *) echo "FAIL: UCP does not offload every put to rocm_ipc+"; rc=1 ;;
        esac
    fi
done

# ucx_perftest -m rocm over both, which must run and exit cleanly (span
# beside UCX's rocm module once crashed every process in ucp_cleanup). UCP
# takes perftest's local buffers for host memory and emulates these gets in
# software: the rate says nothing of the transports (nor of a GPU)
echo
for tls in rocm_copy,rocm_ipc,posix rocm_copy,rocm_ipc+,posix; do
    port=$((20000 + RANDOM % 20000))
    UCX_TLS=$tls timeout 120 "$prefix/bin/ucx_perftest" -p "$port" -m rocm \
        >/dev/null 2>&1 &
    server=$!
    sleep 1
    line=$(UCX_TLS=$tls timeout 120 "$prefix/bin/ucx_perftest" 127.0.0.1 \
               -p "$port" -m rocm -t ucp_get -s 16777216 -n 50 2>&1 |
           grep '^Final:')
    client_rc=$?
    wait "$server"
    server_rc=$?
    echo "ucx_perftest -m rocm -t ucp_get 16 MiB over $tls: client rc" \
         "$client_rc, server rc $server_rc; ${line:-no result}"
    if [ "$client_rc" -ne 0 ] || [ "$server_rc" -ne 0 ]; then
        rc=1
    fi
done
exit $rc
