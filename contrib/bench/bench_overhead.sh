#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Overhead of span twins against the native transports, in the same run:
#  1. per-op cost: put_short / get_bcopy of 8 bytes, self vs self+
#     (contrib/bench/span_bench_uct, in one process);
#  2. bandwidth: UCP put and get of 1-64 MiB between two processes,
#     UCX_TLS=posix,cma vs posix,cma+ (ucx_perftest from the UCX wheel).
# Native and twin runs alternate; each cell is the median of RUNS runs.
# Run from a built tree: ./contrib/bench/bench_overhead.sh [RUNS]
set -euo pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
runs=${1:-5}
ucx=${SPAN_UCX_PREFIX:-$top/.span-deps/ucx}
export LD_LIBRARY_PATH=$ucx/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export UCX_MODULE_DIR=${UCX_MODULE_DIR:-$top/src/uct/.libs}
export UCX_WARN_UNUSED_ENV_VARS=n
perftest=$ucx/bin/ucx_perftest
. "$top/contrib/bench/bench_lib.sh"
echo "machine: $(nproc) cores, $(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)"
echo
"$top/contrib/bench/span_bench_uct" 2000000 $((runs * 2 + 1))
echo
echo "UCP bandwidth between two processes, MB/s, median of $runs"
echo
printf '| %-10s | %7s | %12s | %12s | %6s |\n' test size "posix,cma" \
       "posix,cma+" ratio
echo '|------------|---------|--------------|--------------|--------|'
for test in ucp_put_bw ucp_get; do
    for mib in 1 4 16 64; do
        size=$((mib << 20))
        iters=$(( (2048 / mib) > 16 ? 2048 / mib : 16 ))
        native=() twin=()
        for ((r = 0; r < runs; r++)); do
            native+=("$(perftest_bw posix,cma "$test" "$size" "$iters")")
            twin+=("$(perftest_bw posix,cma+ "$test" "$size" "$iters")")
        done
        n=$(printf '%s\n' "${native[@]}" | median)
        t=$(printf '%s\n' "${twin[@]}" | median)
        printf '| %-10s | %3d MiB | %12.1f | %12.1f | %6.3f |\n' "$test" "$mib" \
               "$n" "$t" "$(awk -v n="$n" -v t="$t" 'BEGIN {print t / n}')"
    done
done
