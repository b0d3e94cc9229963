#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# UCX's own UCT gtest run over span's twins: builds the UCT part of a UCX
# source tree's test/gtest (a copy of it, release configure, no CUDA, ROCm or
# verbs), patches the copied harness so that GTEST_UCT_TL_SUFFIX=+ makes every
# test for transport X use the twin X+ (and test_md the span component's MD
# X+), then runs, per transport, the native tests (no suffix, span not loaded)
# and the twin tests (suffix +, span loaded from SPAN_MODULE_DIR) and prints
# how they compare. Every test gets a result: one gtest process per chunk of
# tests, restarted after the test that crashed or hung.
# It runs by hand, outside `make check`: CI has no UCX source tree.
#   contrib/ucx/ucx_gtest.sh UCX_SOURCE_DIR [SPAN_MODULE_DIR]
# SPAN_MODULE_DIR: holds libuct_span.so* and libspan_impl.so (default
# src/uct/.libs of this checkout). Environment: SPAN_GTEST_WORK (work dir,
# default /tmp/span_gtest/<basename of UCX_SOURCE_DIR>), SPAN_GTEST_TLS
# (default "self cma posix sysv tcp"), SPAN_GTEST_JOBS (make -j, default 2),
# SPAN_GTEST_CHUNK (tests per gtest process, default 40),
# SPAN_GTEST_TEST_TIMEOUT (gtest watchdog per test, s, default 120),
# SPAN_GTEST_PROC_TIMEOUT (timeout per gtest process, s, default 1200),
# SPAN_GTEST_REBUILD=1 (run make again although the build stamp exists),
# SPAN_GTEST_EXCLUDE (gtest patterns left out, ':'-separated; default
# */test_uct_sockaddr*: the tcp connection-manager tests, which no twin wraps).
# Needs patchelf (the tests run against the installed UCX, see below).
# Output: the table and the differing tests on stdout; in the work dir,
# results/<tl>.<native|twin>.txt (test result per line), results/diff.txt,
# results/summary.md, results/processes.txt (exit status of each gtest
# process) and logs/ (every gtest process's output).
set -uo pipefail

die() { echo "ucx_gtest.sh: error: $*" >&2; exit 1; }
msg() { echo "ucx_gtest.sh: $*" >&2; }

[ $# -ge 1 ] && [ $# -le 2 ] ||
    die "usage: $0 UCX_SOURCE_DIR [SPAN_MODULE_DIR]"
top=$(cd "$(dirname "$0")/../.." && pwd)
src=$1
[ -d "$src" ] || die "UCX source dir '$src' does not exist"
src=$(cd "$src" && pwd)
for f in configure.ac test/gtest/Makefile.am test/gtest/uct/uct_test.cc \
         test/gtest/uct/test_md.cc test/gtest/uct/test_mm.cc; do
    [ -f "$src/$f" ] || die "'$src' is no UCX source tree (no $f)"
done
span_dir=${2:-$top/src/uct/.libs}
[ -d "$span_dir" ] || die "span module dir '$span_dir' does not exist"
span_dir=$(cd "$span_dir" && pwd)
ls "$span_dir"/libuct_span.so* >/dev/null 2>&1 && [ -f "$span_dir/libspan_impl.so" ] ||
    die "'$span_dir' lacks libuct_span.so* or libspan_impl.so"

work=${SPAN_GTEST_WORK:-/tmp/span_gtest/$(basename "$src")}
tls=${SPAN_GTEST_TLS:-self cma posix sysv tcp}
jobs=${SPAN_GTEST_JOBS:-2}
chunk=${SPAN_GTEST_CHUNK:-40}
test_timeout=${SPAN_GTEST_TEST_TIMEOUT:-120}
proc_timeout=${SPAN_GTEST_PROC_TIMEOUT:-1200}
exclude=${SPAN_GTEST_EXCLUDE-*/test_uct_sockaddr*}
mkdir -p "$work" && work=$(cd "$work" && pwd) || die "cannot create $work"
build=$work/ucx
res=$work/results
logs=$work/logs

# --- 1. copy, patch, configure, build (each step once, stamped) ------------

# gtest_SOURCES without the ucp/, ucs/ and ucm/ tests: common + uct only
uct_only_makefile_am() {
    awk '
    /^gtest_SOURCES = \\$/ { inblk = 1; n = 0; next }
    inblk {
        line = $0; cont = (line ~ /\\[ \t]*$/)
        sub(/\\[ \t]*$/, "", line); gsub(/^[ \t]+|[ \t]+$/, "", line)
        if (line != "" && line !~ /^(ucp|ucs|ucm)\//) src[n++] = line
        if (!cont) {
            inblk = 0
            print "gtest_SOURCES = \\"
            for (i = 0; i < n; i++) print "\t" src[i] (i < n - 1 ? " \\" : "")
        }
        next
    }
    { print }' "$1"
}

# the harness patch: GTEST_UCT_TL_SUFFIX appended to the instantiated
# transport names (resource::is_equal_tl_name, uct_test::has_transport, the
# posix checks of test_mm.cc), test_md takes span's MD "<component>+"
harness_patch() {
cat <<'EOF'
--- a/test/gtest/uct/test_md.cc
+++ b/test/gtest/uct/test_md.cc
@@ -161,7 +161,11 @@
     std::vector<test_md_param> result;
     for (std::vector<md_resource>::iterator iter = md_resources.begin();
          iter != md_resources.end(); ++iter) {
-        if (iter->cmpt_attr.name == cmpt_name) {
+        /* with GTEST_UCT_TL_SUFFIX: span's twin MD "<cmpt_name><suffix>" */
+        std::string suffix = resource::tl_suffix();
+        if (suffix.empty() ? (iter->cmpt_attr.name == cmpt_name) :
+            ((std::string(iter->cmpt_attr.name) == "span") &&
+             (std::string(iter->rsc_desc.md_name) == cmpt_name + suffix))) {
             result.push_back(test_md_param());
             result.back().component = iter->cmpt;
             result.back().md_name   = iter->rsc_desc.md_name;
--- a/test/gtest/uct/test_mm.cc
+++ b/test/gtest/uct/test_mm.cc
@@ -49,7 +49,7 @@
             std::vector<const resource*> r = uct_test::enum_resources("");
             for (std::vector<const resource*>::iterator iter = r.begin();
                  iter != r.end(); ++iter) {
-                if ((*iter)->tl_name == "posix") {
+                if ((*iter)->tl_name == "posix" + resource::tl_suffix()) {
                     enum_posix_variants(**iter, all_resources);
                 } else {
                     all_resources.push_back(mm_resource(**iter));
@@ -62,7 +62,7 @@
     }
 
     test_uct_mm() : m_e1(NULL), m_e2(NULL) {
-        if (GetParam()->tl_name == "posix") {
+        if (GetParam()->tl_name == "posix" + resource::tl_suffix()) {
             set_posix_config();
         }
     }
--- a/test/gtest/uct/uct_test.cc
+++ b/test/gtest/uct/uct_test.cc
@@ -63,9 +63,15 @@
 {
 }
 
+std::string resource::tl_suffix()
+{
+    const char *suffix = getenv("GTEST_UCT_TL_SUFFIX");
+    return (suffix != NULL) ? suffix : "";
+}
+
 bool resource::is_equal_tl_name(const resource &rsc, const std::string &name)
 {
-    return rsc.tl_name == name;
+    return rsc.tl_name == name + tl_suffix();
 }
 
 bool resource::is_equal_component_name(const resource &rsc,
@@ -442,7 +448,7 @@
             resource_speed tcp_fastest_rsc;
 
             for (unsigned j = 0; j < num_tl_resources; ++j) {
-                if (tcp_fastest_dev && (std::string("tcp") ==
+                if (tcp_fastest_dev && (std::string("tcp") + resource::tl_suffix() ==
                                         tl_resources[j].tl_name)) {
                     resource_speed rsc(iter->cmpt, iter->cmpt_attr, worker, md,
                                        md_attr, iter->rsc_desc, tl_resources[j]);
@@ -602,7 +608,7 @@
 }
 
 bool uct_test::has_transport(const std::string& tl_name) const {
-    return (GetParam()->tl_name == tl_name);
+    return (GetParam()->tl_name == tl_name + resource::tl_suffix());
 }
 
 bool uct_test::has_ud() const {
--- a/test/gtest/uct/uct_test.h
+++ b/test/gtest/uct/uct_test.h
@@ -71,6 +71,9 @@
     static bool is_equal_tl_name(const resource &rsc, const std::string &name);
     static bool
     is_equal_component_name(const resource &rsc, const std::string &name);
+    /* span twins: GTEST_UCT_TL_SUFFIX (e.g. "+") is appended to the fixed
+     * transport names the tests are instantiated for */
+    static std::string tl_suffix();
 };
 
 struct resource_speed : public resource {
EOF
}

t_build0=$(date +%s)
if [ ! -f "$work/.stamp-copied" ]; then
    msg "copying $src to $build"
    rm -rf "$build"
    cp -a "$src" "$build" || die "copy of $src failed"
    touch "$work/.stamp-copied"
fi
if [ ! -f "$work/.stamp-patched" ]; then
    msg "patching the copied harness and test/gtest/Makefile.am"
    if (cd "$build" && harness_patch | patch -p1 -R --dry-run -s >/dev/null 2>&1); then
        msg "harness patch already applied"
    elif (cd "$build" && harness_patch | patch -p1 -N --dry-run -s >/dev/null); then
        (cd "$build" && harness_patch | patch -p1 -N -s) || die "harness patch failed"
    else
        die "the harness patch does not apply to $src (written for UCX v1.22)"
    fi
    uct_only_makefile_am "$build/test/gtest/Makefile.am" > "$work/Makefile.am.new" &&
        grep -q "uct/uct_test.cc" "$work/Makefile.am.new" &&
        ! grep -qE "^[[:space:]]+ucp/test_ucp_am.cc" "$work/Makefile.am.new" ||
        die "could not rewrite test/gtest/Makefile.am"
    mv "$work/Makefile.am.new" "$build/test/gtest/Makefile.am"
    touch "$work/.stamp-patched"
fi
if [ ! -f "$work/.stamp-configured" ]; then
    msg "autogen + configure (release, --enable-gtest), log: $work/configure.log"
    (cd "$build" && ./autogen.sh && ./contrib/configure-release \
        --prefix="$work/install" --enable-gtest \
        --without-cuda --without-rocm --without-verbs --without-rdmacm \
        --without-knem --without-xpmem --without-ugni --without-gdrcopy \
        --without-mad --without-efa --without-ze --without-gaudi \
        --without-fuse3 --without-java --without-go --without-mpi \
        --disable-doxygen-doc --disable-examples) \
        > "$work/configure.log" 2>&1 ||
        die "configure failed, see $work/configure.log"
    grep -q "^#define ENABLE_DEBUG_DATA 0" "$build/config.h" ||
        die "$build/config.h: not a release configuration"
    touch "$work/.stamp-configured"
fi
# span registers only where libuct lies in libucs's directory (an installed
# UCX; the build tree has them in src/ucs/.libs and src/uct/.libs): UCX is
# installed under $work/install and the tests run from a copy of the gtest
# binary whose RPATH names install/lib alone (the build tree's RPATH would
# win over LD_LIBRARY_PATH)
gtest=$work/gtest
ucx_info=$work/install/bin/ucx_info
if [ ! -f "$work/.stamp-built" ] || [ ! -x "$gtest" ] ||
   [ "${SPAN_GTEST_REBUILD:-0}" = 1 ]; then
    command -v patchelf >/dev/null ||
        die "patchelf is missing (Debian: apt-get install patchelf)"
    msg "make -j$jobs (UCX, install, then test/gtest), log: $work/build.log"
    (cd "$build" && make -j"$jobs" && make install &&
     make -j"$jobs" -C test/gtest) > "$work/build.log" 2>&1 ||
        { tail -30 "$work/build.log" >&2; die "build failed, see $work/build.log"; }
    [ -x "$build/test/gtest/gtest" ] || die "no test/gtest/gtest after the build"
    cp "$build/test/gtest/gtest" "$gtest.tmp" &&
        patchelf --force-rpath --set-rpath "$work/install/lib" "$gtest.tmp" &&
        mv "$gtest.tmp" "$gtest" || die "could not make $gtest"
    touch "$work/.stamp-built"
fi
[ -x "$ucx_info" ] || die "no $ucx_info"
t_build1=$(date +%s)
msg "build: $((t_build1 - t_build0)) s"

# --- 2. environment: UCX's own modules + span -------------------------------
# UCX_MODULE_DIR replaces only the install-time module dir: UCX also searches
# <dir of libucs>/ucx (install/lib/ucx: cma), so pointing UCX_MODULE_DIR at
# span's dir keeps UCX's own modules.
export UCX_HANDLE_ERRORS=bt UCX_LOG_LEVEL=warn UCX_WARN_UNUSED_ENV_VARS=n
unset GTEST_UCT_TL_SUFFIX UCX_TLS UCX_PLUGIN_PATH UCX_MODULE_DIR GTEST_FILTER
native_env=(env -u UCX_MODULE_DIR -u GTEST_UCT_TL_SUFFIX)
twin_env=(env UCX_MODULE_DIR="$span_dir" GTEST_UCT_TL_SUFFIX=+)

rm -rf "$res" "$logs" "$work/run"
mkdir -p "$res" "$logs" "$work/run"
# the tests write files (posix shm dir ".") and cores in their cwd
cd "$work/run" || die "cannot cd to $work/run"
ulimit -c "${SPAN_GTEST_CORE_LIMIT:-0}" 2>/dev/null
"${twin_env[@]}" timeout 120 "$ucx_info" -d > "$logs/ucx_info_d.twin.txt" 2>&1
"${native_env[@]}" timeout 120 "$ucx_info" -d > "$logs/ucx_info_d.native.txt" 2>&1
for tl in $tls; do
    grep -q "Transport: $tl\$" "$logs/ucx_info_d.native.txt" ||
        msg "WARNING: ucx_info -d (native) does not list $tl"
    if grep -q "Transport: $tl+\$" "$logs/ucx_info_d.twin.txt"; then
        msg "ucx_info -d lists $tl+"
    else
        msg "WARNING: ucx_info -d with UCX_MODULE_DIR=$span_dir does not list $tl+"
    fi
done

# --- 3. run -----------------------------------------------------------------

# parse one gtest log: "name result" per test that finished; the test that
# was running when the output ends, if any, as "name unfinished <hang?>"
parse_log() {
    awk '
    function tname(s) { sub(/,$/, "", s); return s }
    match($0, /\[ RUN      \] [^ ]+/) {
        cur = substr($0, RSTART + 13, RLENGTH - 13); skip = 0; wd = 0; next }
    cur != "" && /\[     SKIP \]/ { skip = 1 }
    cur != "" && /abort testing/ { wd = 1 }
    match($0, /\[  SKIPPED \] [^ ]+/) {
        n = tname(substr($0, RSTART + 13, RLENGTH - 13))
        if (n == cur) { print n, "skip"; cur = "" } ; next }
    match($0, /\[       OK \] [^ ]+/) {
        n = tname(substr($0, RSTART + 13, RLENGTH - 13))
        if (n == cur) { print n, (skip ? "skip" : "pass"); cur = "" } ; next }
    match($0, /\[  FAILED  \] [^ ]+/) {
        n = tname(substr($0, RSTART + 13, RLENGTH - 13))
        if (n == cur) { print n, "fail"; cur = "" } ; next }
    END { if (cur != "") print cur, "unfinished", wd }' "$1"
}

# list the tests of <tl> (gtest --gtest_list_tests, full names)
list_tests() {
    awk '/^[^ ]/ { suite = $1; next }
         /^  [^ ]/ { print suite $1 }'
}

# run_mode TL MODE: results in $res/TL.MODE.txt
run_mode() {
    local tl=$1 mode=$2 envc listlog out n=0 rc
    local -a remaining
    if [ "$mode" = twin ]; then envc=("${twin_env[@]}"); else envc=("${native_env[@]}"); fi
    out=$res/$tl.$mode.txt
    : > "$out"
    listlog=$logs/$tl.$mode.list.log
    { "${envc[@]}" timeout 300 "$gtest" --gtest_list_tests \
          --gtest_filter="$tl/*${exclude:+-$exclude}" > "$listlog" 2>&1
      rc=$?; } 2>/dev/null
    grep -E '^[^ \[]|^  [^ ]' "$listlog" | grep -vE '^(Note|Using)' |
        grep -v '^\[' | list_tests > "$res/$tl.$mode.list"
    if [ $rc -ne 0 ]; then
        msg "$tl $mode: --gtest_list_tests exited with $rc (see $listlog)"
        echo "(listing) crash" >> "$out"
        return
    fi
    mapfile -t remaining < "$res/$tl.$mode.list"
    msg "$tl $mode: ${#remaining[@]} tests"
    while [ ${#remaining[@]} -gt 0 ]; do
        local part=("${remaining[@]:0:$chunk}") filter log parsed
        filter=$(IFS=:; echo "${part[*]}")
        n=$((n + 1))
        log=$logs/$tl.$mode.$n.log
        # (the braces keep bash's "Segmentation fault" notice off stderr)
        { "${envc[@]}" timeout -k 10 "$proc_timeout" stdbuf -o0 -e0 \
              "$gtest" --gtest_filter="$filter" --gtest_color=no \
              -t "$test_timeout" > "$log" 2>&1; rc=$?; } 2>/dev/null
        parsed=$(parse_log "$log")
        declare -A done=()
        local name result wd
        while read -r name result wd; do
            [ -n "$name" ] || continue
            if [ "$result" = unfinished ]; then
                if [ "$wd" = 1 ] || [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
                    result=hang
                else
                    result=crash
                fi
                result="$result rc=$rc log=$(basename "$log")"
            fi
            echo "$name $result" >> "$out"
            done[$name]=1
        done <<< "$parsed"
        # a process that failed after its last test (e.g. at exit) shows here
        echo "$tl $mode $(basename "$log") rc=$rc tests=${#part[@]}" \
             "results=${#done[@]}" >> "$res/processes.txt"
        if [ ${#done[@]} -eq 0 ]; then
            # died before its first test started: blame that test
            echo "${part[0]} crash rc=$rc log=$(basename "$log") (no test started)" >> "$out"
            done[${part[0]}]=1
        fi
        local next=() t
        for t in "${remaining[@]}"; do
            [ -n "${done[$t]:-}" ] || next+=("$t")
        done
        # tests of the chunk after one that did not finish: run again
        remaining=("${next[@]}")
        unset done
    done
}

t_run0=$(date +%s)
for tl in $tls; do
    for mode in native twin; do
        run_mode "$tl" "$mode"
    done
done
t_run1=$(date +%s)

# --- 4. report ----------------------------------------------------------------
counts() {  # file -> "run / pass / fail / skip / crash"
    awk '{ n++; r = $2; if (r == "hang") r = "crash"; c[r]++ }
         END { printf "%d / %d / %d / %d / %d", n, c["pass"], c["fail"],
                      c["skip"], c["crash"] }' "$1"
}
{
    echo "UCX: $src (copy built in $build), span: $span_dir"
    echo "build $((t_build1 - t_build0)) s, run $((t_run1 - t_run0)) s"
    echo
    echo "| transport | native: run / pass / fail / skip / crash | twin: run / pass / fail / skip / crash |"
    echo "|-----------|------------------------------------------|----------------------------------------|"
    for tl in $tls; do
        echo "| $tl | $(counts "$res/$tl.native.txt") | $(counts "$res/$tl.twin.txt") |"
    done
    echo
    echo "crash includes hang (a test the gtest watchdog or timeout stopped);"
    echo "left out: ${exclude:-nothing}."
} > "$res/summary.md"
: > "$res/diff.txt"
for tl in $tls; do
    join -a1 -a2 -e absent -o 0,1.2,2.2 \
        <(awk '{print $1, $2}' "$res/$tl.native.txt" | sort -k1,1) \
        <(awk '{print $1, $2}' "$res/$tl.twin.txt" | sort -k1,1) |
        awk '$2 != $3' >> "$res/diff.txt"
done
{
    echo
    echo "Tests whose native result differs from the twin result ($(wc -l < "$res/diff.txt")):"
    echo
    echo "| test | native | twin |"
    echo "|------|--------|------|"
    awk '{ printf "| %s | %s | %s |\n", $1, $2, $3 }' "$res/diff.txt"
    echo
    echo "Per-test results: $res/<tl>.<native|twin>.txt; logs: $logs"
} >> "$res/summary.md"
cat "$res/summary.md"
