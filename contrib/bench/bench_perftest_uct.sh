#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# UCT-level ucx_perftest, twin against native transport in the same run:
# put_short and am_short latency (usec, 8 bytes), put_zcopy and get_zcopy
# bandwidth (MB/s, 64 KiB), between two processes (self: one process, -l).
# Native and twin runs alternate; each cell is the median of RUNS runs; the
# ratio is twin / native (latency: lower is better, bandwidth: higher).
#   ./contrib/bench/bench_perftest_uct.sh [RUNS [TRANSPORTS [MEMTYPE]]]
# TRANSPORTS: comma-separated native names (default cma,posix,sysv,self);
# MEMTYPE: host (default) or cuda (ucx_perftest -m cuda, e.g. cuda_ipc).
# Environment: SPAN_UCX_PREFIX (default .span-deps/ucx), UCX_MODULE_DIR,
# SPAN_PERFTEST_BW_SIZE and _ITERS (bandwidth message size and count),
# SPAN_PERFTEST_DEV (the device, with MEMTYPE cuda; default cuda).
# With SPAN_PERFTEST_CHECK=1 it runs each cell once, briefly, and exits
# non-zero where any run fails (the perftest_uct test of make check); a
# ratio is printed, never judged. Each server listens on a port that the
# system picked free (bench_lib.sh).
set -euo pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
runs=${1:-5}
tls=${2:-cma,posix,sysv,self}
memtype=${3:-host}
ucx=${SPAN_UCX_PREFIX:-$top/.span-deps/ucx}
export LD_LIBRARY_PATH=$ucx/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export UCX_MODULE_DIR=${UCX_MODULE_DIR:-$top/src/uct/.libs}
export UCX_WARN_UNUSED_ENV_VARS=n
perftest=$ucx/bin/ucx_perftest
. "$top/contrib/bench/bench_lib.sh"
# a plugin built with a sanitizer (contrib/sanitize/sanitize.sh) loads into this
# uninstrumented ucx_perftest only behind its runtime; leaks are left to the
# tests linked with it (ucx_perftest's own would be reported)
san=$(ldd "$UCX_MODULE_DIR/libspan_impl.so" 2>/dev/null |
      awk '/lib[at]san\.so/ {print $3; exit}')
if [ -n "$san" ]; then
    export LD_PRELOAD=$san${LD_PRELOAD:+:$LD_PRELOAD}
    export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0
fi
check=${SPAN_PERFTEST_CHECK:-0}
lat_iters=200000 bw_iters=${SPAN_PERFTEST_BW_ITERS:-20000}
bw_size=${SPAN_PERFTEST_BW_SIZE:-65536}
if [ "$check" = 1 ]; then
    runs=1 lat_iters=2000 bw_iters=200
fi
memargs=()
dev=memory
if [ "$memtype" = cuda ]; then
    memargs=(-m cuda)
    dev=${SPAN_PERFTEST_DEV:-cuda} # UCX names cuda_ipc's device so
fi

# one ucx_perftest at UCT level; prints the column of the result that
# matters: typical latency (usec) or overall bandwidth (MB/s)
uct_perf() {
    local tl=$1 test=$2 layout=$3 size=$4 iters=$5 col=$6 out server= port
    local args=(-x "$tl" -d "$dev" -t "$test" -D "$layout" -s "$size"
                -n "$iters" -w $((iters / 10 + 1)) -f "${memargs[@]}")
    if [ "${tl%+}" = self ]; then
        out=$(timeout 120 "$perftest" -l "${args[@]}" 2>&1) || {
            echo "bench: ucx_perftest -l ${args[*]} failed:" >&2
            echo "$out" >&2
            return 1
        }
    else
        perftest_server timeout 120 "$perftest" -x "$tl" -d "$dev" \
            "${memargs[@]}" || return 1
        out=$(timeout 120 "$perftest" 127.0.0.1 -p "$port" "${args[@]}" \
              2>&1) || {
            kill "$server" 2>/dev/null || true
            echo "bench: ucx_perftest ${args[*]} failed:" >&2
            echo "$out" >&2
            return 1
        }
        wait "$server"
    fi
    echo "$out" | awk -v c="$col" 'END {print $c}'
}

# test layout size column per measurement; the layout a transport lacks
# is left out (cma has no short ops; posix, sysv and self no zcopy)
cells=("put_lat short 8 3" "am_lat short 8 3" "put_bw zcopy $bw_size 6"
       "get zcopy $bw_size 6")
supports() {
    local tl=$1 layout=$2
    case "$tl:$layout" in
    cma:short|posix:zcopy|sysv:zcopy|self:zcopy|cuda_ipc:short) return 1 ;;
    esac
    return 0
}

echo "machine: $(nproc) cores, $(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)"
echo "UCT-level ucx_perftest ($memtype memory), median of $runs runs"
echo
printf '| %-9s | %-13s | %14s | %14s | %6s |\n' transport test native twin \
       ratio
echo '|-----------|---------------|----------------|----------------|--------|'
failed=0
for tl in ${tls//,/ }; do
    for cell in "${cells[@]}"; do
        read -r test layout size col <<<"$cell"
        supports "$tl" "$layout" || continue
        iters=$bw_iters
        [ "$col" = 3 ] && iters=$lat_iters
        native=() twin=()
        for ((r = 0; r < runs; r++)); do
            n=$(uct_perf "$tl" "$test" "$layout" "$size" "$iters" "$col") ||
                { failed=1; continue 2; }
            t=$(uct_perf "$tl+" "$test" "$layout" "$size" "$iters" "$col") ||
                { failed=1; continue 2; }
            native+=("$n") twin+=("$t")
        done
        n=$(printf '%s\n' "${native[@]}" | median)
        t=$(printf '%s\n' "${twin[@]}" | median)
        unit=MB/s
        [ "$col" = 3 ] && unit=usec
        printf '| %-9s | %-13s | %9.3f %4s | %9.3f %4s | %6.3f |\n' "$tl" \
               "$test/$layout" "$n" "$unit" "$t" "$unit" \
               "$(awk -v n="$n" -v t="$t" 'BEGIN {print (n > 0) ? t / n : 0}')"
    done
done
exit $failed
