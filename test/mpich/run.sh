#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The MPICH leg of make check: MPICH as pip installs it (the mpich wheel,
# ch4 with its ucx netmod on the UCX 1.20.1 it bundles), span preloaded into
# that UCX (1.20 loads no module by name), two local ranks, natively and
# over span's twins (test/mpi/span_mpi_rma.c --p2p, every byte checked):
#   1. point-to-point messages, then the one-sided suite, over
#      self,posix,cma and self+,posix+,cma+, then tcp and tcp+: every row
#      must pass, a twin's rows must equal its native ones, and
#      UCX_PROTO_INFO must show twins carrying the origin's tagged
#      messages, puts and gets;
#   2. an MPI_Put and an MPI_Get past a window's end (as test/mpi/run.sh):
#      native outcome reported; a twin must refuse each, the target's
#      memory untouched, unless UCP emulates that operation with active
#      messages (a get over tcp), which no transport sees.
# The wheel is downloaded once into SPAN_WHEELHOUSE (.span-deps/wheelhouse)
# and installed from there into a venv of its own. Exits 77, with the
# reason, where no venv can be made or the wheel cannot be downloaded.
#   SPAN_BUILDDIR     build tree (default: the source tree)
#   SPAN_MPICH_KEEP=1 keep the output directory
set -euo pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
build=${SPAN_BUILDDIR:-$top}
python=${SPAN_PYTHON:-python3}
wheelhouse=${SPAN_WHEELHOUSE:-$top/.span-deps/wheelhouse}
pin=mpich==5.0.2
plugin=$build/src/uct/.libs/libuct_span.so
start=$SECONDS

skip() { echo "mpich leg skipped: $*"; exit 77; }
fail() { echo "mpich leg FAILED: $*" >&2; exit 1; }
step() { echo "mpich: $* ($((SECONDS - start)) s)"; }

[ -e "$plugin" ] || fail "the plugin is not built in $build/src/uct/.libs"
# UCX 1.20 reads UCX_MODULE_DIR as the directory of its own modules (cma
# would be looked for in span's); span comes by LD_PRELOAD alone
unset UCX_MODULE_DIR UCX_PLUGIN_PATH UCX_TLS UCX_PROTO_INFO LD_PRELOAD \
      PYTHONPATH
export PYTHONDONTWRITEBYTECODE=1 UCX_WARN_UNUSED_ENV_VARS=n

# A plugin built with a sanitizer (contrib/sanitize/sanitize.sh) needs the
# sanitizer's runtime first in the ranks, the test built with it; MPICH's
# allocations outlive MPI_Finalize, so leaks are not reported here (the
# other legs report span's). MPICH and its UCX are not built for TSan, as
# Open MPI is not (test/mpi/run.sh): a TSan build skips this leg.
sanitizer=$(ldd "$plugin" | awk '/lib(a|t)san\.so/ {print $3; exit}')
sanitize=()
case $sanitizer in
*libtsan*) skip "the plugin is built with TSan, which MPICH is not" ;;
*libasan*)
    sanitize=(-fsanitize=address,undefined)
    export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 ;;
esac

tmp=$(mktemp -d "${TMPDIR:-/tmp}/span-mpich.XXXXXX")
[ "${SPAN_MPICH_KEEP:-0}" = 1 ] && echo "mpich: output in $tmp" ||
    trap 'rm -rf "$tmp"' EXIT

"$python" -m venv "$tmp/venv" >"$tmp/log" 2>&1 ||
    skip "$python -m venv fails ($(tail -n 1 "$tmp/log"))" \
         "(on Debian: python3-venv, contrib/setup/setup.sh installs it)"
pip=("$tmp/venv/bin/pip" --disable-pip-version-check --no-cache-dir -q)

# Downloaded once per pin: the wheel is py3-none, for any Python
wh=$wheelhouse/${pin/==/-}
if [ "$(cat "$wh/.pins" 2>/dev/null)" != "$pin" ]; then
    step "downloading $pin into $wh"
    rm -rf "$wh.tmp"
    mkdir -p "$wh.tmp"
    "${pip[@]}" download --only-binary=:all: --no-deps -d "$wh.tmp" "$pin" \
        >"$tmp/log" 2>&1 || {
        rm -rf "$wh.tmp"
        skip "cannot download $pin from PyPI:" \
             "$(grep -m 1 '^ERROR' "$tmp/log" || tail -n 1 "$tmp/log")"
    }
    echo "$pin" >"$wh.tmp/.pins"
    rm -rf "$wh"
    mv "$wh.tmp" "$wh"
fi
"${pip[@]}" install --no-index --find-links "$wh" --no-deps "$pin" \
    >"$tmp/log" 2>&1 || { cat "$tmp/log"; fail "pip install $pin"; }
bin=$tmp/venv/bin
version=$("$bin/mpichversion")
case $version in
*"Device:"*ch4:ucx*) ;;
*) echo "$version"; fail "$pin is not MPICH's ch4 with ucx" ;;
esac

# Its UCX: libmpi finds it by run path ($ORIGIN/mpich), under the usual
# names (not renamed by auditwheel, as NIXL's are: docs/nixl.md); the UCX
# 1.20 span preloaded registers with, whatever the names
ucxdir=$tmp/venv/lib/mpich
libs=$(cd "$ucxdir" && ls | grep -E '^libuc[pst][.-]' | paste -sd' ' -)
ucxver=$("$bin/python" -c 'import ctypes, sys
ucp = ctypes.CDLL(sys.argv[1])
ucp.ucp_get_version_string.restype = ctypes.c_char_p
print(ucp.ucp_get_version_string().decode())' "$ucxdir"/libucp*.so*) ||
    fail "no UCX in $ucxdir"
step "$pin: ch4:ucx on UCX $ucxver ($libs in lib/mpich)"

prog=$tmp/span_mpi_rma
"$bin/mpicc" -O2 -Wall -Werror -Wno-unused-parameter -std=gnu11 \
    "${sanitize[@]}" -o "$prog" "$top/test/mpi/span_mpi_rma.c" \
    2>"$tmp/build.log" ||
    { cat "$tmp/build.log"; fail "the wheel's mpicc span_mpi_rma.c"; }

# The ch4 ucx netmod (the wheel has ofi too); NOLOCAL: ranks of one node
# talk through the netmod as across nodes, not MPICH's own shared memory.
# Hydra starts the ranks by fork and hands them its environment; the
# preload goes to the ranks alone (-genv), not to mpiexec and its proxy.
export MPIR_CVAR_CH4_NETMOD=ucx MPIR_CVAR_NOLOCAL=1
mpiexec=(timeout 180 "$bin/mpiexec" -launcher fork -n 2
         -genv LD_PRELOAD "${sanitizer:+$sanitizer:}$plugin")

# run NAME TLS ARGS...: rank N's output in $tmp/NAME.out.N, .err.N
run() {
    local name=$1 tls=$2
    shift 2
    rm -f "$tmp/$name".*
    UCX_TLS=$tls "${mpiexec[@]}" -outfile-pattern "$tmp/$name.out.%r" \
        -errfile-pattern "$tmp/$name.err.%r" "$prog" "$@" \
        >"$tmp/$name.log" 2>&1
}
# hydra makes a rank's file at its first line only
out() { cat "$tmp/$1.out.0" "$tmp/$1.out.1" 2>/dev/null || true; }
err() { cat "$tmp/$1.err.0" "$tmp/$1.err.1" 2>/dev/null || true; }
rows() {
    grep -a '^| ' "$tmp/$1.out.0" | grep -Ev '^\| (buffer|window) '
}
# UCP's protocol tables of rank 0 to its peer: "title => row", twins only
proto() {
    grep -a '^\[' "$tmp/$1.out.0" | sed -E 's/^\[[0-9.]+\] \[[^]]*\] +//' |
        awk '/^\| ucp_context/ { peer = ($0 !~ / self cfg/); title = $0
                                 next }
             peer && /\| [a-z_]+\+\/[^ |]+ *\|$/ { print title " => " $0 }' \
        >"$tmp/$1.proto"
}
# the protocols a twin carries OP by: "protocol tl/dev, ..."
carried() {
    grep -E "by ucp_$2[*].*=>" "$tmp/$1.proto" |
        sed -E 's/.*=> *\|[^|]*\| *([^|]*[^ |]) *\| *([^ |]+) *\|$/\1 \2/' |
        sed -E 's/^\(\?\) //' | sort -u | paste -sd, - | sed 's/,/, /g'
}

# 1. the suites, each twin beside its native transports
pairs=("self,posix,cma self+,posix+,cma+" "tcp tcp+")
names=()
for pair in "${pairs[@]}"; do
    read -r native twin <<<"$pair"
    run "$native" "$native" --p2p ||
        { tail -n 40 "$tmp/$native.log"; err "$native" | tail -n 20
          fail "the suite over $native"; }
    rows "$native" >"$tmp/$native.rows"
    grep -v '| pass ' "$tmp/$native.rows" &&
        fail "rows fail natively over $native (above)"
    step "suite over $native: $(grep -c pass "$tmp/$native.rows") rows pass"
    UCX_PROTO_INFO=y run "$twin" "$twin" --p2p ||
        { tail -n 40 "$tmp/$twin.log"; err "$twin" | tail -n 20
          fail "the suite over $twin"; }
    rows "$twin" >"$tmp/$twin.rows"
    diff "$tmp/$native.rows" "$tmp/$twin.rows" >&2 ||
        fail "$twin: rows differ from $native (above)"
    proto "$twin"
    for op in tag_send put get; do
        [ -n "$(carried "$twin" $op)" ] ||
            fail "$twin: UCX_PROTO_INFO shows no ucp_$op over a twin"
        step "  ucp_$op over $twin by: $(carried "$twin" $op)"
    done
    step "suite over $twin: the same $(wc -l <"$tmp/$twin.rows") rows"
    names+=("$native" "$twin")
done
# The two tables (point-to-point, one-sided): the rows' columns, then each
# run's result
echo
paste -d'|' "$tmp/${names[0]}.rows" "$tmp/${names[1]}.rows" \
    "$tmp/${names[2]}.rows" "$tmp/${names[3]}.rows" |
    awk -F'|' -v h="${names[*]}" '
        function t(s) { gsub(/^ +| +$/, "", s); return s }
        function line(a, b, c, d, e, f, g, i, j) {
            printf "| %-13s | %-16s | %-11s | %5s | %13s | %-14s " \
                   "| %-17s | %-5s | %-5s |\n", a, b, c, d, e, f, g, i, j }
        function head(a, b, c) {
            if (NR > 1) print ""
            line(a, b, c, "cases", "bytes checked", n[1], n[2], n[3], n[4])
            line("-", "-", "-", "-", "-", "-", "-", "-", "-") }
        BEGIN { split(h, n, " ") }
        { kind = (t($2) ~ /^(contig|vector)/) ? "p2p" : "rma" }
        kind != last { last = kind
                       if (kind == "p2p") head("buffer", "call", "order")
                       else head("window", "op", "sync") }
        { line(t($2), t($3), t($4), t($5), t($6), t($7), t($15), t($23),
               t($31)) }' |
    sed -E '/^\| - /{s/ /-/g; s/-\|-/ | /g; s/^\|-/| /; s/-\|$/ |/}'
echo

# 2. past the window's end: the target's window and guard page are a file
oob_fail=0
for pair in "${pairs[@]}"; do
    read -r native twin <<<"$pair"
    for tls in "$native" "$twin"; do
        for op in put get; do
            name=oob-$op-${tls//[,+]/_}
            file=/dev/shm/span-mpich-$$-$name
            rc=0
            UCX_PROTO_INFO=y run "$name" "$tls" --oob "$op" "$file" || rc=$?
            inspect=$("$prog" --inspect "$file") && intact=1 || intact=0
            rm -f "$file"
            echo "out of window, MPI_${op^} over $tls: mpiexec exit $rc"
            # the origin's lines, and the line of MPICH's error stack that
            # names UCX's status
            grep -a -E '^origin|failed status' "$tmp/$name.out.0" |
                sed 's/^ */  /' ||
                echo "  origin: no report"
            echo "  $inspect"
            [ "$tls" = "$native" ] && continue
            # UCP's choice for this window's key, in this job
            proto "$name"
            if grep -q "by ucp_$op[*].*=>.*| software emulation " \
                    "$tmp/$name.proto"; then
                # the target's UCP serves it from an active message: no
                # transport sees the address (docs/limitations.md)
                echo "  (UCP emulates ucp_$op over $tls with active" \
                     "messages: no twin sees it, unchecked as natively)"
                continue
            fi
            # grep -c reads it all: -q would leave cat a SIGPIPE, which
            # pipefail takes for a failure
            refused=0
            { out "$name"; err "$name"; } |
                grep -c 'outside the registered extent' >/dev/null &&
                refused=1
            if [ $intact = 0 ] || [ $refused = 0 ] ||
               { [ $op = get ] && ! grep -q '0/64 bytes read from the' \
                     "$tmp/$name.out.0"; }; then
                echo "  ^ FAILED: the twin must refuse it, the target untouched"
                err "$name" | tail -n 5
                oob_fail=1
            fi
        done
    done
done
[ $oob_fail = 0 ] || fail "an access past a window's end got through a twin"
step "passed"
