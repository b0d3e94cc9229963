#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Instructions a twin adds to each op, counted by callgrind (stable where
# timings are not): contrib/bench/span_bench_uct runs each op OPS times over a
# native transport and over its twin, each in a process of its own, and
# callgrind counts only inside the op's loop (span_bench_<op>). The
# difference of the two counts, per op, is what the twin's patched op costs.
# put_short and get_bcopy run over self; the zero-copy ops (64 bytes in one
# iov entry, or in three: put_zcopy3, get_zcopy3) over cma, as self has
# none, each waited for (cma moves the bytes from the worker's progress);
# put_ifmem and get_ifmem are put_zcopy and get_zcopy from memory that
# uct_iface_mem_alloc gave, as UCT-level ucx_perftest moves.
# Run from a built tree: ./contrib/bench/callgrind_overhead.sh [OPS]
set -euo pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
ops=${1:-100000}
ucx=${SPAN_UCX_PREFIX:-$top/.span-deps/ucx}
export LD_LIBRARY_PATH=$ucx/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export UCX_MODULE_DIR=${UCX_MODULE_DIR:-$top/src/uct/.libs}
export UCX_WARN_UNUSED_ENV_VARS=n
bench=$top/contrib/bench/span_bench_uct
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# Instructions per op of op over tl
per_op() {
    local tl=$1 op=$2
    valgrind --tool=callgrind --callgrind-out-file="$out/cg" \
             --toggle-collect="span_bench_$op" "$bench" "$ops" 1 "$tl" "$op" \
             >"$out/log" 2>&1 || { cat "$out/log" >&2; return 1; }
    awk -v ops="$ops" '/^summary:/ {printf "%.2f", $2 / ops}' "$out/cg"
}

echo "instructions per op, $ops ops, callgrind"
echo
printf '| %-10s | %-6s | %8s | %8s | %8s |\n' op tl native twin added
echo '|------------|--------|----------|----------|----------|'
for row in put_short:self get_bcopy:self put_zcopy:cma get_zcopy:cma \
           put_zcopy3:cma get_zcopy3:cma put_ifmem:cma get_ifmem:cma; do
    op=${row%%:*}
    tl=${row#*:}
    native=$(per_op "$tl" "$op")
    twin=$(per_op "$tl+" "$op")
    printf '| %-10s | %-6s | %8s | %8s | %8.2f |\n' "$op" "$tl" "$native" \
           "$twin" "$(awk -v n="$native" -v t="$twin" 'BEGIN {print t - n}')"
done
