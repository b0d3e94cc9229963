#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Cost of chunking (contrib/bench/span_bench_chunk.c): registration of a region as
# chunks vs as one, pinned through the strict test transport, and UCP
# bandwidth of transfers that cross a hard boundary vs ones that do not.
# Run from a built tree: ./contrib/bench/bench_chunk.sh [REG_GiB [RUNS]]
set -euo pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top"
make -s test/modules/libuct_strict.la contrib/bench/span_bench_chunk
ln -sf "$top/src/uct/.libs/libuct_span.so.0" "$top/src/uct/.libs/libuct_span.so.0.0.0" \
    "$top/src/uct/.libs/libspan_impl.so" test/modules/.libs/
export UCX_MODULE_DIR=$top/test/modules/.libs UCX_WARN_UNUSED_ENV_VARS=n
echo "machine: $(nproc) cores, $(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)"
echo
exec ./contrib/bench/span_bench_chunk "${1:-4}" "${2:-7}"
