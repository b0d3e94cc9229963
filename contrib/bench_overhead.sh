#!/usr/bin/env bash
# Overhead of span twins against the native transports, in the same run:
#  1. per-op cost: put_short / get_bcopy of 8 bytes, self vs self+
#     (contrib/span_bench_uct, in one process);
#  2. bandwidth: UCP put and get of 1-64 MiB between two processes,
#     UCX_TLS=posix,cma vs posix,cma+ (ucx_perftest from the UCX wheel).
# Native and twin runs alternate; each cell is the median of RUNS runs.
# Run from a built tree: ./contrib/bench_overhead.sh [RUNS]
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
runs=${1:-5}
ucx=${SPAN_UCX_PREFIX:-$top/.deps/ucx}
export LD_LIBRARY_PATH=$ucx/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export UCX_MODULE_DIR=${UCX_MODULE_DIR:-$top/src/.libs}
export UCX_WARN_UNUSED_ENV_VARS=n
perftest=$ucx/bin/ucx_perftest
port=$((20000 + RANDOM % 20000))

median() {
    sort -g | awk '{v[NR] = $1} END {
        if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# overall bandwidth in MB/s of one ucx_perftest client/server pair
perftest_bw() {
    local tls=$1 test=$2 size=$3 iters=$4 out
    port=$((port + 1))
    UCX_TLS=$tls "$perftest" -p "$port" >/dev/null 2>&1 &
    local server=$!
    sleep 0.3
    out=$(UCX_TLS=$tls "$perftest" 127.0.0.1 -p "$port" -t "$test" \
              -s "$size" -n "$iters" -w $((iters / 10 + 1)) -f 2>&1) || {
        kill "$server" 2>/dev/null || true
        echo "bench: ucx_perftest $test over $tls failed:" >&2
        echo "$out" >&2
        return 1
    }
    wait "$server"
    echo "$out" | awk 'END {print $6}'
}

echo "machine: $(nproc) cores, $(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)"
echo
"$top/contrib/span_bench_uct" 2000000 $((runs * 2 + 1))
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
