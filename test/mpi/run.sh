#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The Open MPI leg of make check: MPI one-sided traffic (osc ucx, pml ucx)
# between two local ranks on the project's UCX 1.22, natively and over
# span's twins (test/mpi/span_mpi_rma.c, every byte checked):
#   1. the suite over self,posix,cma, then self,posix,cma+ and
#      self+,posix+,cma+: every row must pass, the twins' rows must equal
#      the native ones, and UCX_PROTO_INFO must show cma+ carrying the
#      origin's put and get;
#   2. an MPI_Put and an MPI_Get past a window's end, a guard page behind
#      the target's window (a shared file mapping, inspected after the job
#      too, since a job may abort): native outcome reported, the twins must
#      refuse both with the target's memory untouched;
#   3. the workaround for Open MPI 4.1's dynamic-window lookup (docs/openmpi.md,
#      "Known limits of Open MPI 4.1"): a put to the last byte of a
#      region attached one byte longer lands over the twin.
# Exits 77, with the reason, where Open MPI or its UCX components are
# missing.
#   SPAN_BUILDDIR     build tree (default: the source tree)
#   SPAN_UCX_LIBDIR   the UCX to run on (default: .span-deps/ucx/lib)
#   SPAN_MPI_KEEP=1   keep the output directory
set -euo pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
build=${SPAN_BUILDDIR:-$top}
libdir=${SPAN_UCX_LIBDIR:-$top/.span-deps/ucx/lib}
start=$SECONDS

skip() { echo "mpi leg skipped: $*"; exit 77; }
fail() { echo "mpi leg FAILED: $*" >&2; exit 1; }
step() { echo "mpi: $* ($((SECONDS - start)) s)"; }

for t in mpicc mpirun ompi_info; do
    command -v "$t" >/dev/null ||
        skip "$t not found: Open MPI is not installed" \
             "(Debian: openmpi-bin libopenmpi-dev; contrib/setup/setup.sh)"
done
for c in "pml: ucx" "osc: ucx"; do
    ompi_info | grep -q "MCA $c " ||
        skip "this Open MPI has no $c component"
done
[ -e "$build/src/uct/.libs/libuct_span.so.0" ] ||
    fail "the plugin is not built in $build/src/uct/.libs"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/span-mpi.XXXXXX")
[ "${SPAN_MPI_KEEP:-0}" = 1 ] && echo "mpi: output in $tmp" ||
    trap 'rm -rf "$tmp"' EXIT
prog=$tmp/span_mpi_rma
# A plugin built with a sanitizer (contrib/sanitize/sanitize.sh) needs the
# sanitizer's runtime first in the ranks: the test is built with it. Open
# MPI's own allocations outlive MPI_Finalize, so leaks are not reported
# here (the other legs report span's). Open MPI is no TSan program: its
# threads race by design, so a TSan build skips this leg.
sanitize=()
case $(ldd "$build/src/uct/.libs/libuct_span.so.0") in
*libtsan*) skip "the plugin is built with TSan, which Open MPI 4.1 is not" ;;
*libasan*)
    sanitize=(-fsanitize=address,undefined)
    export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 ;;
esac
mpicc -O2 -Wall -Werror -Wno-unused-parameter -std=gnu11 "${sanitize[@]}" \
    -o "$prog" "$top/test/mpi/span_mpi_rma.c" 2>"$tmp/build.log" ||
    { cat "$tmp/build.log"; fail "mpicc span_mpi_rma.c"; }

# UCX 1.22 first: Open MPI's pml and osc ucx then load it, not Debian's
# UCX 1.13 (which cannot load modules). Open MPI 4.1's pml ucx refuses
# shared-memory-only transports unless told any transport and device will
# do. The op avx component is left out: Open MPI 4.1.4's MPI_SUM on 8-bit
# integers saturates there (0x85 + 0xb6 gives 0xff), natively too, and the
# accumulate rows would fail for Open MPI's arithmetic, not the transport.
export LD_LIBRARY_PATH=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export UCX_MODULE_DIR=$build/src/uct/.libs UCX_WARN_UNUSED_ENV_VARS=n
export OMPI_MCA_pml=ucx OMPI_MCA_osc=ucx OMPI_MCA_pml_ucx_tls=any \
       OMPI_MCA_pml_ucx_devices=any OMPI_MCA_op=^avx
unset UCX_TLS UCX_PROTO_INFO
# as root (CI) mpirun wants to be told; two ranks on 2 cores shared with
# the rest of make check: no binding, oversubscription allowed
mpirun=(timeout 120 mpirun --allow-run-as-root --oversubscribe
        --bind-to none -np 2)

# mpirun NAME TLS ARGS...: rank 0's and rank 1's output in $tmp/NAME/1/
run() {
    local name=$1 tls=$2
    shift 2
    rm -rf "${tmp:?}/$name"
    UCX_TLS=$tls "${mpirun[@]}" --output-filename "$tmp/$name" \
        "$prog" "$@" >"$tmp/$name.log" 2>&1
}
out() { cat "$tmp/$1/1/rank.0/stdout" "$tmp/$1/1/rank.1/stdout" 2>/dev/null; }
err() { cat "$tmp/$1/1/rank.0/stderr" "$tmp/$1/1/rank.1/stderr" 2>/dev/null; }
rows() { grep -a '^| ' "$tmp/$1/1/rank.0/stdout" | grep -v '^| window'; }

# 1. the suite
native=self,posix,cma
twins=(self,posix,cma+ self+,posix+,cma+)
run native "$native" ||
    { tail -n 40 "$tmp/native.log"; fail "the suite over $native"; }
rows native > "$tmp/native.rows"
step "suite over $native: $(grep -c pass "$tmp/native.rows") rows pass"
grep -v '| pass ' "$tmp/native.rows" &&
    fail "rows fail natively over $native (above)"
i=0
for tls in "${twins[@]}"; do
    i=$((i + 1))
    UCX_PROTO_INFO=y run twin$i "$tls" ||
        { tail -n 40 "$tmp/twin$i.log"; fail "the suite over $tls"; }
    rows twin$i > "$tmp/twin$i.rows"
    diff "$tmp/native.rows" "$tmp/twin$i.rows" >&2 ||
        fail "$tls: rows differ from $native (above)"
    # UCP's protocol tables of the origin: the table's title, then its rows
    sed -E 's/^\[[0-9.]+\] \[[^]]*\] +//' "$tmp/twin$i/1/rank.0/stdout" |
        awk '/^\| ucp_context/ { getline title; next }
             /cma\+/ { print title " => " $0 }' > "$tmp/twin$i.proto"
    for op in put get; do
        grep -q "by ucp_${op}\*.*=>.*cma+" "$tmp/twin$i.proto" ||
            fail "$tls: UCX_PROTO_INFO shows no ucp_$op over cma+"
    done
    step "suite over $tls: the same $(wc -l < "$tmp/twin$i.rows") rows;" \
         "put and get by cma+ ($(grep -E 'ucp_(put|get)' "$tmp/twin$i.proto" |
                                 sed -E 's/.*\| *([a-z -]+copy) *\|.*/\1/' |
                                 sort -u | paste -sd, -))"
done
# one table: the rows' columns, then each run's result
echo
paste -d'|' "$tmp/native.rows" "$tmp/twin1.rows" "$tmp/twin2.rows" |
    awk -F'|' -v h1="$native" -v h2="${twins[0]}" -v h3="${twins[1]}" '
        function t(s) { gsub(/^ +| +$/, "", s); return s }
        function line(a, b, c, d, e, f, g, h) {
            printf "| %-13s | %-16s | %-11s | %5s | %13s | %-14s " \
                   "| %-15s | %-17s |\n", a, b, c, d, e, f, g, h }
        NR == 1 { line("window", "op", "sync", "cases", "bytes checked",
                       h1, h2, h3)
                  line("-", "-", "-", "-", "-", "-", "-", "-") }
        { line(t($2), t($3), t($4), t($5), t($6), t($7), t($15), t($23)) }' |
    sed -E '2s/ /-/g; 2s/-\|-/ | /g; 2s/^\|-/| /; 2s/-\|$/ |/'
echo

# 2. past the window's end: the target's window and guard page are a file
oob_fail=0
for tls in "$native" "${twins[@]}"; do
    for op in put get; do
        name=oob-$op-${tls//[,+]/_}
        file=/dev/shm/span-mpi-$$-$name
        rc=0
        run "$name" "$tls" --oob "$op" "$file" || rc=$?
        inspect=$("$prog" --inspect "$file") && intact=1 || intact=0
        rm -f "$file"
        echo "out of window, MPI_${op^} over $tls: mpirun exit $rc"
        grep -a '^origin' "$tmp/$name/1/rank.0/stdout" | sed 's/^/  /' ||
            echo "  origin: no report"
        echo "  $inspect"
        [ "$tls" = "$native" ] && continue
        refused=0
        { out "$name"; err "$name"; } |
            grep -q 'outside the registered extent' && refused=1
        if [ $intact = 0 ] || [ $refused = 0 ] ||
           { [ $op = get ] && ! grep -q '0/64 bytes read from the' \
                 "$tmp/$name/1/rank.0/stdout"; }; then
            echo "  ^ FAILED: the twin must refuse it, the target untouched"
            err "$name" | tail -n 5
            oob_fail=1
        fi
    done
done
[ $oob_fail = 0 ] || fail "an access past a window's end got through a twin"

# 3. the dynamic-window workaround, over the twin
run dyn "${twins[0]}" --dyn-last pad ||
    { tail -n 20 "$tmp/dyn.log"; fail "--dyn-last pad over ${twins[0]}"; }
grep -q 'holds 0x42' "$tmp/dyn/1/rank.1/stdout" ||
    { out dyn; fail "--dyn-last pad over ${twins[0]}: the byte did not land"; }
step "dynamic window, region attached one byte longer, put to its last" \
     "used byte over ${twins[0]}: landed"

# 4. the distribution's own UCX, which its Open MPI links (Debian 12:
# 1.13.1), span preloaded into the ranks as a user of that machine loads
# it: the suite over self,posix,cma and self+,posix+,cma+ gives the same
# rows, UCP's endpoints (UCX_LOG_LEVEL=info) take their RMA lanes and
# their tag lanes from the twins, and the twins refuse a put and a get past
# a window's end
distro=$(ldconfig -p 2>/dev/null |
         awk '/libucp\.so\.0 .*x86-64/ && !p {p = $NF} END {print p}')
if [ -z "$distro" ]; then
    step "no UCX of the distribution: its row is not run"
elif [ ${#sanitize[@]} -gt 0 ]; then
    step "the distribution's UCX: not run under a sanitizer (its runtime" \
         "would have to come first in every rank)"
else
    drun() { # NAME TLS ARGS...: the program in the distribution's UCX
        rm -rf "${tmp:?}/$1"
        env -u LD_LIBRARY_PATH -u UCX_MODULE_DIR "${mpirun[@]}" \
            -x LD_PRELOAD="$build/src/uct/.libs/libuct_span.so" \
            -x UCX_TLS="$2" -x UCX_LOG_LEVEL=info \
            --output-filename "$tmp/$1" "$prog" "${@:3}" >"$tmp/$1.log" 2>&1
    }
    drun distro-native self,posix,cma ||
        { tail -n 20 "$tmp/distro-native.log"; fail "$distro: the suite natively"; }
    drun distro-twin self+,posix+,cma+ ||
        { tail -n 20 "$tmp/distro-twin.log"; fail "$distro: the suite over twins"; }
    version=$(grep -aoE 'Version [0-9.]+' "$tmp/distro-twin/1/rank.0/stdout" |
              head -n 1)
    rows distro-native > "$tmp/distro-native.rows"
    rows distro-twin > "$tmp/distro-twin.rows"
    grep -v '| pass ' "$tmp/distro-native.rows" &&
        fail "$distro: rows fail natively (above)"
    diff "$tmp/distro-native.rows" "$tmp/distro-twin.rows" >&2 ||
        fail "$distro: rows over twins differ from native ones (above)"
    lanes=$(grep -aoE 'ep_cfg\[[0-9]+\]: .*' "$tmp/distro-twin/1/rank.0/stdout" |
            sort -u)
    grep -qE 'rma\([^)]*\+' <<< "$lanes" && grep -qE 'tag\([^)]*cma\+' <<< "$lanes" ||
        { echo "$lanes"; fail "$distro: UCP took no twin for RMA or tags"; }
    # past a window's end, as in 2.: the twins refuse it, the target's
    # memory untouched (in 1.13 to 1.15 UCP takes cma+ for small RMA ops
    # only since it offers short and bcopy ones: span_bounce.h)
    for op in put get; do
        name=distro-oob-$op
        file=/dev/shm/span-mpi-$$-$name
        rc=0
        drun "$name" self+,posix+,cma+ --oob "$op" "$file" || rc=$?
        "$prog" --inspect "$file" >/dev/null && intact=1 || intact=0
        rm -f "$file"
        if [ $intact = 0 ] ||
           ! { out "$name"; err "$name"; } |
                 grep -q 'outside the registered extent' ||
           { [ $op = get ] && ! grep -q '0/64 bytes read from the' \
                 "$tmp/$name/1/rank.0/stdout"; }; then
            err "$name" | tail -n 5
            fail "$distro: an MPI_${op^} past a window's end got through" \
                 "self+,posix+,cma+ (mpirun exit $rc)"
        fi
    done
    step "the distribution's UCX ($distro, ${version:-version not logged})," \
         "its Open MPI: the same $(wc -l < "$tmp/distro-twin.rows") rows over" \
         "self+,posix+,cma+ as over self,posix,cma; a put and a get past a" \
         "window's end refused; lanes: $(paste -sd';' <<< "$lanes")"
fi
step "passed"
