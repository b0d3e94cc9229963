#!/usr/bin/env bash
# The long fuzzing run of the span rkey parser: ./contrib/fuzz_long.sh [SECONDS]
# (default 600), corpus kept in .deps/fuzz-corpus between runs.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$top/.deps/fuzz-corpus"
exec "$top/test/fuzz/run.sh" "${1:-600}" "$top/.deps/fuzz-corpus"
