#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# The install leg: `make install` into a staging directory, and no file it
# installs has a run path into the checkout (or the build tree).
set -u
top=$(cd "$(dirname "$0")/../.." && pwd)
build=${SPAN_BUILDDIR:-$top}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/span-install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL \
    make -s -C "$build" install DESTDIR="$tmp" >"$tmp/log" 2>&1 ||
    { cat "$tmp/log"; echo "install: make install failed"; exit 1; }
bad=0
n=0
while IFS= read -r f; do
    paths=$(readelf -d "$f" 2>/dev/null | sed -n 's/.*(R\(UN\)\{0,1\}PATH).*\[\(.*\)\]/\2/p')
    [ -n "$(readelf -h "$f" 2>/dev/null)" ] || continue
    n=$((n + 1))
    case "$paths" in
    *"$top"*|*"$build"*)
        echo "install: ${f#$tmp} has the run path $paths"
        bad=1 ;;
    esac
done < <(find "$tmp" -type f)
[ $bad = 0 ] && echo "install: $n ELF files installed, none with a run path into $top"
exit $bad
