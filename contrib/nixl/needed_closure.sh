#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Prints the given libraries and, transitively, every library they name in
# DT_NEEDED that lies in one of DIRS (relative to the current directory),
# one path a line, each once. Whatever is not found there (libc, the CUDA
# driver) is the machine's and is left out.
#   contrib/nixl/needed_closure.sh "DIR..." FILE...
set -euo pipefail
dirs=$1
shift
todo="$*"
seen=" "
while [ -n "$todo" ]; do
    set -- $todo; f=${1#./}; shift; todo="$*"
    case "$seen" in *" $f "*) continue ;; esac
    seen="$seen$f "
    echo "$f"
    for n in $(readelf -d "$f" | sed -n 's/.*NEEDED.*\[\(.*\)\]/\1/p'); do
        for d in $dirs; do
            if [ -e "$d/$n" ]; then todo="$todo $d/$n"; fi
        done
    done
done
