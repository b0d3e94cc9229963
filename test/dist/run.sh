#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# The dist_files leg: what `make distdir` ships is what git tracks: nothing
# built is shipped, nothing needed is missing. The files autotools make
# (configure, Makefile.in, aclocal.m4, config.h.in, config/) are the
# distribution's own; .gitignore is git's. Skipped (77), saying so, outside
# a git checkout.
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
build=${SPAN_BUILDDIR:-$top}
# (make distcheck's tarball, unpacked inside the checkout, is none)
command -v git >/dev/null &&
    [ "$(git -C "$top" rev-parse --show-toplevel 2>/dev/null)" = "$(cd "$top" && pwd -P)" ] ||
    { echo "skipped: $top is no git checkout"; exit 77; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/span-dist.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL \
    make -s -C "$build" distdir distdir="$tmp/dist" >"$tmp/log" 2>&1 ||
    { cat "$tmp/log"; echo "dist_files: make distdir failed"; exit 1; }
(cd "$tmp/dist" && find . -type f | sed 's|^\./||') |
    grep -v -E '^(Makefile\.in|aclocal\.m4|config\.h\.in|configure)$|^config/' |
    sort >"$tmp/shipped"
git -C "$top" ls-files | grep -v -x '.gitignore' | sort >"$tmp/tracked"
comm -23 "$tmp/shipped" "$tmp/tracked" | sed 's/^/shipped, not tracked: /' >"$tmp/diff"
comm -13 "$tmp/shipped" "$tmp/tracked" | sed 's/^/tracked, not shipped: /' >>"$tmp/diff"
if [ -s "$tmp/diff" ]; then
    cat "$tmp/diff"
    echo "dist_files: $(wc -l <"$tmp/diff") files differ"
    exit 1
fi
echo "dist_files: the $(wc -l <"$tmp/tracked") files git tracks, and no other"
