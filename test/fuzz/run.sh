#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Builds the span rkey fuzzer with clang's libFuzzer (ASan + UBSan) and runs
# it for SECONDS (0: no limit) or RUNS executions, whichever ends first, on
# a corpus directory, kept between runs.
#   test/fuzz/run.sh SECONDS [CORPUS_DIR [RUNS]]
# Environment: SPAN_TOP_SRCDIR, SPAN_UCX_CPPFLAGS, SPAN_UCX_LIBDIR (set by
# ctest; defaults fit the source tree with contrib/setup/setup.sh's UCX).
# Exit 77 (ctest: skipped) when clang cannot build a libFuzzer target.
set -euo pipefail

seconds=${1:-20}
top=${SPAN_TOP_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
cppflags=${SPAN_UCX_CPPFLAGS:--I$top/.span-deps/ucx/include}
libdir=${SPAN_UCX_LIBDIR:-$top/.span-deps/ucx/lib}
corpus=${2:-${TMPDIR:-/tmp}/span-fuzz-rkey-corpus}
runs=${3:--1}
out=${TMPDIR:-/tmp}/span-fuzz-rkey.$$
trap 'rm -rf "$out"' EXIT
mkdir -p "$out" "$corpus"

# UBSan's integer checks too: signed overflow is undefined, and an unsigned
# wrap in the parser is a field it failed to bound. The wraps that are meant
# (FNV-1a's multiply; offsets from the base, which wrap below it on purpose
# and are compared after) are listed in ignorelist.txt, by function.
sanitize=fuzzer,address,undefined,signed-integer-overflow,unsigned-integer-overflow
sources=("$top/src/uct/key/span_rkey.c" "$top/src/uct/key/span_rkey_sizes.c"
         "$top/src/uct/base/span_chunk.c"
         "$top/src/uct/base/span_fork.c")
if ! command -v clang >/dev/null ||
   ! clang -g -O1 -fsanitize=$sanitize \
         -fsanitize-ignorelist="$top/test/fuzz/ignorelist.txt" -D_GNU_SOURCE \
         $cppflags -I"$top/src/uct" "$top/test/fuzz/fuzz_rkey.c" \
         "${sources[@]}" -L"$libdir" -Wl,-rpath,"$libdir" -lucs \
         -o "$out/fuzz_rkey" 2>"$out/build.log" ||
   ! clang -g -O1 -D_GNU_SOURCE $cppflags -I"$top/src/uct" \
         "$top/test/fuzz/seed_rkey.c" "${sources[@]}" -L"$libdir" \
         -Wl,-rpath,"$libdir" -lucs -o "$out/seed_rkey" 2>>"$out/build.log"
then
    echo "SKIPPED: clang with libFuzzer is not available:"
    cat "$out/build.log" 2>/dev/null | tail -3
    exit 77
fi
# keys at every field's extremes, packed by the packer itself
"$out/seed_rkey" "$corpus"

findings=$corpus-findings
mkdir -p "$findings"
rm -f "$findings"/crash-* "$findings"/leak-* "$findings"/timeout-* "$findings"/oom-*
# UBSan halts the process itself, leaving libFuzzer no artifact to write:
# the fuzzer's exit status counts as much as a finding kept
status=0
UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 "$out/fuzz_rkey" \
    -max_total_time="$seconds" -runs="$runs" -max_len=256 \
    -print_final_stats=1 -artifact_prefix="$findings/" "$corpus" \
    >"$out/fuzz.log" 2>&1 || status=$?
grep -E "^(#[0-9]+[[:space:]]+(DONE|pulse)|stat::number|stat::new|==|SUMMARY|Done)" \
    "$out/fuzz.log" || true
if [ "$status" -ne 0 ] || ls "$findings"/* >/dev/null 2>&1; then
    echo "FINDINGS (fuzzer exit status $status; inputs kept in $findings):"
    grep -B2 -A12 -E "runtime error|ERROR: (AddressSanitizer|libFuzzer)" \
        "$out/fuzz.log" | head -60
    ls -la "$findings"
    exit 1
fi
