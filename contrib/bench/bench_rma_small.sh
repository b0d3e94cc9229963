#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Small UCP RMA on memory the application allocated (UCX_ALLOC_PRIO=heap:
# ucx_perftest's buffers are then malloc'ed, not shared memory that posix
# maps for UCP), twin against native in the same run: ucp_put_bw and
# ucp_get (MB/s) from 8 bytes to 64 KiB, ucp_put_lat (usec) of 8 bytes and
# 1 KiB, UCX_TLS=posix,cma vs posix,cma+, between two processes. In UCX
# 1.15 and earlier this is what the short and bcopy ops of cma+
# (span_bounce.h) change: natively UCP emulates these accesses over active
# messages. Native and twin runs alternate; each cell is the median of RUNS
# runs; the ratio is twin / native (latency: lower is better).
#   ./contrib/bench/bench_rma_small.sh [RUNS]
# Environment: SPAN_UCX_PREFIX (default .span-deps/ucx; e.g.
# .span-deps/ucx-1.15.0.post1); span is preloaded, as every release allows.
set -euo pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
runs=${1:-5}
ucx=${SPAN_UCX_PREFIX:-$top/.span-deps/ucx}
export LD_LIBRARY_PATH=$ucx/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export LD_PRELOAD=$top/src/uct/.libs/libuct_span.so
export UCX_WARN_UNUSED_ENV_VARS=n UCX_ALLOC_PRIO=heap
perftest=$ucx/bin/ucx_perftest
. "$top/contrib/bench/bench_lib.sh"
echo "machine: $(nproc) cores, $(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)"
echo "UCX: $("$ucx/bin/ucx_info" -v | grep -oE "[0-9]+\.[0-9]+\.[0-9]+" | head -n 1), median of $runs"
echo
printf '| %-11s | %6s | %14s | %14s | %6s |\n' test size "posix,cma" \
       "posix,cma+" ratio
echo '|-------------|--------|----------------|----------------|--------|'
cells=("ucp_put_bw 8" "ucp_put_bw 1024" "ucp_put_bw 8192" "ucp_put_bw 65536"
       "ucp_get 8" "ucp_get 1024" "ucp_get 8192" "ucp_get 65536"
       "ucp_put_lat 8" "ucp_put_lat 1024")
for cell in "${cells[@]}"; do
    read -r test size <<<"$cell"
    col=6 unit=MB/s
    if [ "$test" = ucp_put_lat ]; then
        col=4 unit=usec
    fi
    native=() twin=()
    for ((r = 0; r < runs; r++)); do
        native+=("$(perftest_col=$col perftest_bw posix,cma "$test" "$size" 20000)")
        twin+=("$(perftest_col=$col perftest_bw posix,cma+ "$test" "$size" 20000)")
    done
    n=$(printf '%s\n' "${native[@]}" | median)
    t=$(printf '%s\n' "${twin[@]}" | median)
    printf '| %-11s | %6s | %9.3f %4s | %9.3f %4s | %6.3f |\n' "$test" "$size" \
           "$n" "$unit" "$t" "$unit" \
           "$(awk -v n="$n" -v t="$t" 'BEGIN {print (n > 0) ? t / n : 0}')"
done
