#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The wheel leg of make check: ucx-span as a NIXL user gets it. The wheel is
# built by pip from the checkout (pyproject.toml), its contents and
# manylinux tag are checked (auditwheel), and it is installed into a fresh
# venv beside nixl-cu13==1.5.1 and libucx-cu13==1.22.0. Then, with nothing
# of the build tree in reach (the environment comes from the installed
# package alone), UCP puts and gets over cma+ in each UCX:
#   UCX 1.22 (libucx-cu13): ucx_perftest -t ucp_put_bw and -t ucp_get,
#       UCX_TLS=posix,cma+, environment from `python -m ucx_span env`;
#   UCX 1.23 (nixl-cu13): contrib/nixl/nixl_check.py in CPU mode (cma vs cma+,
#       every byte checked), environment from ucx_span.enable(); then
#       contrib/nixl/nixl_example.py, the example of docs/nixl.md, as a user runs it;
# span loaded by libucx's own Python loader after ucx_span.enable(), and
# enable() after either UCX made a context registering span, with a warning.
# PyPI's wheels are downloaded once into SPAN_WHEELHOUSE (.span-deps/wheelhouse)
# and installed from there. Exits 77, with the reason, where no venv can be
# made or the wheels cannot be downloaded.
set -euo pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
python=${SPAN_PYTHON:-python3}
wheelhouse=${SPAN_WHEELHOUSE:-$top/.span-deps/wheelhouse}
pins=(libucx-cu13==1.22.0 nixl-cu13==1.5.1 numpy==2.2.6)
# what pip installs into the wheel's build environment besides libucx-cu13
# (contrib/wheel/span_wheel_backend.py: cuda.h, and nvcc for the copy
# kernel), and the checker
build_pins=(nvidia-cuda-runtime==13.0.96 nvidia-cuda-nvcc==13.0.88
            nvidia-nvvm==13.0.88 nvidia-cuda-crt==13.0.88)
tools=(auditwheel==6.8.2)
start=$SECONDS

skip() { echo "wheel leg skipped: $*"; exit 77; }
fail() { echo "wheel leg FAILED: $*" >&2; exit 1; }
step() { echo "wheel: $* ($((SECONDS - start)) s)"; }

# The plugin may come from the installed wheel only; make's jobserver of a
# calling make check is not the wheel build's; no bytecode in the checkout
unset UCX_MODULE_DIR UCX_PLUGIN_PATH UCX_TLS LD_LIBRARY_PATH PYTHONPATH \
      MAKEFLAGS MFLAGS MAKELEVEL
export PYTHONDONTWRITEBYTECODE=1 UCX_WARN_UNUSED_ENV_VARS=n

tmp=$(mktemp -d "${TMPDIR:-/tmp}/span-wheel.XXXXXX")
server=
cleanup() {
    [ -z "$server" ] || kill "$server" 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT

"$python" -m venv "$tmp/tools" >"$tmp/log" 2>&1 ||
    skip "$python -m venv fails ($(tail -n 1 "$tmp/log"))" \
         "(on Debian: python3-venv, contrib/setup/setup.sh installs it)"
pip=("$tmp/tools/bin/pip" --disable-pip-version-check --no-cache-dir -q)

# Downloads once per Python version and set of pins
pyver=$("$tmp/tools/bin/python" -c \
        'import sys; print("%d.%d" % sys.version_info[:2])')
wh="$wheelhouse/py$pyver"
want="${pins[*]} ${build_pins[*]} ${tools[*]}"
if [ "$(cat "$wh/.pins" 2>/dev/null)" != "$want" ]; then
    step "downloading $want into $wh"
    rm -rf "$wh.tmp"
    mkdir -p "$wh.tmp"
    # nixl-cu13 asks for torch, which neither the check nor span needs
    "${pip[@]}" download --only-binary=:all: --no-deps -d "$wh.tmp" \
        "${pins[@]}" "${build_pins[@]}" >"$tmp/log" 2>&1 &&
    "${pip[@]}" download --only-binary=:all: -d "$wh.tmp" "${tools[@]}" \
        >>"$tmp/log" 2>&1 || {
        rm -rf "$wh.tmp"
        skip "cannot download from PyPI:" \
             "$(grep -m 1 '^ERROR' "$tmp/log" || tail -n 1 "$tmp/log")"
    }
    echo "$want" >"$wh.tmp/.pins"
    rm -rf "$wh"
    mv "$wh.tmp" "$wh"
fi
offline=(--no-index --find-links "$wh")
"${pip[@]}" install "${offline[@]}" "${tools[@]}"

# The wheel, as docs/nixl.md builds it
step "pip wheel ."
(cd "$top" && "${pip[@]}" wheel "${offline[@]}" --no-deps -w "$tmp/dist" .) \
    >"$tmp/log" 2>&1 || { cat "$tmp/log"; fail "pip wheel . failed"; }
whl=$(ls "$tmp"/dist/*.whl)
case "$(basename "$whl")" in
ucx_span-*-py3-none-manylinux_2_28_x86_64.whl) ;;
*) fail "wheel named $(basename "$whl"), not" \
        "ucx_span-VERSION-py3-none-manylinux_2_28_x86_64.whl" ;;
esac
step "built $(basename "$whl") ($(stat -c %s "$whl") bytes)"

# What it holds: the plugin under the three names UCX may look for, the
# component beside it, nothing of UCX, no run path
"$tmp/tools/bin/python" - "$whl" "$tmp/x" <<'EOF'
import sys, zipfile
want = {"libuct_span.so", "libuct_span.so.0", "libuct_span.so.0.0.0",
        "libspan_impl.so"}
with zipfile.ZipFile(sys.argv[1]) as z:
    libs = {n.split("/")[-1] for n in z.namelist()
            if n.startswith("ucx_span/lib/")}
    if libs != want:
        sys.exit("ucx_span/lib holds %s, not %s" % (sorted(libs),
                                                    sorted(want)))
    if "ucx_span/__init__.py" not in z.namelist():
        sys.exit("no ucx_span/__init__.py")
    z.extractall(sys.argv[2])
EOF
for lib in "$tmp"/x/ucx_span/lib/*; do
    dyn=$(readelf -d -W "$lib")
    if echo "$dyn" | grep -E '\(NEEDED\).*\[libuc|\((RPATH|RUNPATH)\)'; then
        fail "$(basename "$lib") links UCX or has a run path"
    fi
done
# The copy kernel of CUDA batches: libspan_impl.so embeds a fat binary of
# the architectures Makefile.am's SPAN_NVCC_GENCODE names, as a source build
# with nvcc does (an image per sm_XX, PTX for compute_XX)
"$tmp/tools/bin/python" - "$tmp/x/ucx_span/lib/libspan_impl.so" \
    "$top/Makefile.am" >"$tmp/log" 2>&1 <<'EOF' ||
import re, struct, sys
lib = open(sys.argv[1], "rb").read()
gencode = re.search(r"^SPAN_NVCC_GENCODE *=((?:.*\\\n)*.*)$",
                    open(sys.argv[2]).read(), re.M).group(1)
want = sorted(kind + "_" + arch for kind, arch
              in re.findall(r"code=(sm|compute)_(\d+)", gencode))
# The fat binary's header: magic, version 1, its own size (16), the size of
# the entries after it; each entry: kind (1 PTX, 2 ELF), version, its
# header's size, its payload's size, and at 28 the architecture
at = lib.find(struct.pack("<IHH", 0xba55ed50, 1, 16))
if at < 0:
    sys.exit("libspan_impl.so holds no fat binary: the wheel has no copy "
             "kernel (built without nvcc?)")
size, = struct.unpack_from("<Q", lib, at + 8)
got, entry = [], at + 16
while entry < at + 16 + size:
    kind, _, header, payload = struct.unpack_from("<HHIQ", lib, entry)
    arch, = struct.unpack_from("<I", lib, entry + 28)
    got.append("%s_%d" % ({1: "compute", 2: "sm"}.get(kind, kind), arch))
    entry += header + payload
if not want or sorted(got) != want:
    sys.exit("the copy kernel of libspan_impl.so is built for %s, a source "
             "build's for %s" % (" ".join(sorted(got)), " ".join(want)))
print(" ".join(got))
EOF
    { cat "$tmp/log"; fail "the wheel's copy kernel"; }
step "libspan_impl.so has the copy kernel: $(cat "$tmp/log")"
"$tmp/tools/bin/auditwheel" show "$whl" >"$tmp/log" 2>&1 ||
    { cat "$tmp/log"; fail "auditwheel show failed"; }
tag=$(tr '\n' ' ' <"$tmp/log" | grep -o 'platform tag: *"[^"]*"' |
      grep -o '"[^"]*"' | tr -d '"')
case "$tag" in
manylinux_2_[0-9]_x86_64|manylinux_2_1[0-9]_x86_64) ;;
manylinux_2_2[0-8]_x86_64) ;;
*) cat "$tmp/log"
   fail "auditwheel: consistent with '$tag', not with manylinux_2_28_x86_64" ;;
esac
step "auditwheel: consistent with $tag; no UCX library, no run path"

# A fresh venv, as a NIXL user's (nixl-cu13 without torch)
"$python" -m venv "$tmp/venv" >"$tmp/log" 2>&1 ||
    { cat "$tmp/log"; fail "$python -m venv"; }
py="$tmp/venv/bin/python"
"$tmp/venv/bin/pip" --disable-pip-version-check --no-cache-dir -q install \
    --no-compile "${offline[@]}" --no-deps "${pins[@]}" "$whl"
step "installed into a fresh venv"
cd "$tmp"   # nothing of the checkout on sys.path

# UCX 1.22 of libucx-cu13: its ucx_perftest, the shell's way
eval "$("$py" -m ucx_span env)"
case "${UCX_MODULE_DIR:-}" in
"$tmp/venv/"*) ;;
*) fail "python -m ucx_span env: UCX_MODULE_DIR=${UCX_MODULE_DIR:-}," \
        "not in the venv" ;;
esac
libucx=$("$py" -c 'import libucx, os; print(os.path.dirname(libucx.__file__))')

# UCX_MODULE_DIR naming another directory is kept: span goes first in
# UCX_PLUGIN_PATH, where UCX 1.22 finds it too
"$py" - <<'EOF' || fail "ucx_span.env() merging"
import ucx_span
d = ucx_span.module_dir()
assert ucx_span.env(environ={}) == {"UCX_MODULE_DIR": d}
assert ucx_span.env(environ={"UCX_MODULE_DIR": d}) == {"UCX_MODULE_DIR": d}
assert ucx_span.env(environ={"UCX_MODULE_DIR": "/x",
                             "UCX_PLUGIN_PATH": "/a:%s:/b" % d}) == \
    {"UCX_PLUGIN_PATH": "%s:/a:/b" % d}
assert ucx_span.env(["cma+", "tcp"], environ={})["UCX_TLS"] == "cma+,tcp"
EOF
UCX_MODULE_DIR=$tmp/elsewhere sh -c 'eval "$("$0" -m ucx_span env)" &&
    [ "$UCX_MODULE_DIR" = "$1" ] &&
    LD_LIBRARY_PATH="$2/lib" "$2/bin/ucx_info" -d' \
    "$py" "$tmp/elsewhere" "$libucx" >"$tmp/log" 2>&1 &&
    grep -q 'Transport: cma+' "$tmp/log" ||
    { cat "$tmp/log"; fail "span not found through UCX_PLUGIN_PATH"; }
step "python -m ucx_span env: UCX_MODULE_DIR, or UCX_PLUGIN_PATH beside another"
perftest() {
    local test=$1 what=$2 port=$((20000 + RANDOM % 20000)) _
    env LD_LIBRARY_PATH="$libucx/lib" UCX_TLS=posix,cma+ \
        timeout 60 "$libucx/bin/ucx_perftest" -p "$port" >"$tmp/server" 2>&1 &
    server=$!
    # until it listens (its stdout, to a file, is block-buffered)
    for _ in $(seq 300); do
        grep -qE ":$(printf '%04X' "$port") [0-9A-F]+:0000 0A" \
            /proc/net/tcp /proc/net/tcp6 2>/dev/null && break
        kill -0 "$server" 2>/dev/null || break
        sleep 0.1
    done
    env LD_LIBRARY_PATH="$libucx/lib" UCX_TLS=posix,cma+ UCX_PROTO_INFO=y \
        timeout 60 "$libucx/bin/ucx_perftest" 127.0.0.1 -p "$port" \
        -t "$test" -s 4194304 -n 20 >"$tmp/client" 2>&1 ||
        { cat "$tmp/client" "$tmp/server"; fail "ucx_perftest -t $test"; }
    wait "$server" ||
        { cat "$tmp/server"; fail "ucx_perftest server of -t $test"; }
    server=
    # UCP's choice for 4 MiB, from its protocol table: a zero-copy by cma+
    grep -A 8 "$what" "$tmp/client" | grep -q 'zero-copy *| *cma+/memory' ||
        { cat "$tmp/client"; fail "ucx_perftest -t $test: not by cma+"; }
    step "UCX 1.22, ucx_perftest -t $test over cma+:" \
         "$(awk '/^Final:/ {print $7}' "$tmp/client") MB/s"
}
perftest ucp_put_bw 'remote memory write by ucp_put'
perftest ucp_get 'remote memory read by ucp_get'

# libucx's own loader (libucs.so by that name: UCX looks for
# libuct_span.so) after ucx_span.enable(); enable() again then warns that
# contexts made before do not see span, as it does after NIXL's UCX
# (auditwheel-renamed libucs-HASH.so) made one
env -u UCX_MODULE_DIR "$py" - >"$tmp/log" 2>&1 <<'EOF' ||
import ctypes, os, libucx, ucx_span
ucx_span.enable()
uct = libucx.load_library()[2]
comps, count = ctypes.c_void_p(), ctypes.c_uint()
assert uct.uct_query_components(ctypes.byref(comps), ctypes.byref(count)) == 0
uct.uct_release_component_list(comps)
maps = {os.path.realpath(l.split(None, 5)[5].strip())
        for l in open("/proc/self/maps") if len(l.split(None, 5)) == 6}
for lib in ("libuct_span.so", "libspan_impl.so"):
    path = os.path.realpath(os.path.join(ucx_span.module_dir(), lib))
    assert path in maps, "%s not loaded" % path
import warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    ucx_span.enable()   # span is registered: contexts made before are told
assert any("queried its components already" in str(w.message)
           for w in caught), [str(w.message) for w in caught]
EOF
    { cat "$tmp/log"; fail "ucx_span.enable() with libucx.load_library()"; }
"$py" - >"$tmp/log" 2>&1 <<'EOF' ||
import os, re
os.environ["UCX_MODULES"] = "^efa"
import nixl_cu13, ucx_span
nixl_cu13.nixl_agent("wheel-check")   # its UCX backend loads NIXL's UCX
import warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    ucx_span.enable()   # NIXL's UCX, loaded local: span registers with it
assert any("queried its components already" in str(w.message)
           for w in caught), [str(w.message) for w in caught]
maps = {l.split(None, 5)[5].strip() for l in open("/proc/self/maps")
        if len(l.split(None, 5)) == 6}
assert any(m.endswith("/libspan_impl.so") for m in maps), "span not loaded"
EOF
    { cat "$tmp/log"; fail "ucx_span.enable() after NIXL's UCX"; }
step "libucx.load_library() after enable() loads libuct_span.so;" \
     "enable() after a UCX that made a context registers, with a warning"

# UCX 1.23 of nixl-cu13: NIXL as the client, the Python way
env -u UCX_MODULE_DIR "$py" - "$top/contrib/nixl/nixl_check.py" <<'EOF' ||
import runpy, sys, ucx_span
ucx_span.enable()
sys.argv = [sys.argv[1], "--runs", "1"]
runpy.run_path(sys.argv[0], run_name="__main__")
EOF
    fail "nixl_check.py with the installed ucx_span"
step "UCX 1.23 of nixl-cu13: nixl_check.py, cma vs cma+"

# The example docs/nixl.md's pip section points users at, run as they would
# (its default: both processes here, cma+,tcp, span from ucx_span.enable())
env -u UCX_MODULE_DIR "$py" "$top/contrib/nixl/nixl_example.py" >"$tmp/log" 2>&1 ||
    { cat "$tmp/log"; fail "nixl_example.py"; }
[ "$(grep -c "span loaded from $tmp/venv/" "$tmp/log")" = 2 ] &&
    grep -q "every byte as written" "$tmp/log" ||
    { cat "$tmp/log"; fail "nixl_example.py: not over span of the wheel"; }
step "UCX 1.23 of nixl-cu13: nixl_example.py, WRITE and READ over cma+"
echo "wheel leg passed in $((SECONDS - start)) s"
