#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The long fuzzing run of the span rkey parser, under ASan and UBSan:
#   ./contrib/sanitize/fuzz_long.sh [RUNS [SECONDS]]
# 10^8 executions by default, no time limit unless SECONDS is given; the
# executions reached are the stat::number_of_executed_units line. The corpus
# is kept between runs in SPAN_FUZZ_CORPUS (default: under TMPDIR, outside
# the source tree and the shared UCX prefix .span-deps).
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
corpus=${SPAN_FUZZ_CORPUS:-${TMPDIR:-/tmp}/span-fuzz-rkey-long-corpus}
mkdir -p "$corpus"
exec "$top/test/fuzz/run.sh" "${2:-0}" "$corpus" "${1:-100000000}"
