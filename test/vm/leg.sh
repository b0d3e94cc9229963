# SPDX-License-Identifier: BSD-3-Clause
# What both VM legs of make check (run.sh, run_two_node.sh) need, sourced
# with top, build and nixl set: skips (77, with the reason) where NIXL's
# UCX or Debian's rxe provider is missing, and sets
#   env    the variables every UCX process in a VM runs with
#   quiet  a filter for libibverbs' lines about the providers it skips
skip() { echo "vm leg skipped: $*"; exit 77; }

# NIXL's libibverbs (renamed by auditwheel) loads providers by bare name;
# Debian's rxe provider links libibverbs.so.1 and would register itself with
# that second copy: a copy of it is relinked to NIXL's
ibv=$(cd "$nixl" 2>/dev/null && ls libibverbs-*.so* 2>/dev/null | head -n 1) ||
    true
[ -n "$ibv" ] || skip "no libibverbs in $nixl"
rxe=$(ls /usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav*.so 2>/dev/null |
      head -n 1) || true
[ -n "$rxe" ] || skip "no rxe provider (Debian's ibverbs-providers)"
prov="$build/test/vm/providers"
if [ ! -f "$prov/$(basename "$rxe")" ] || [ "$rxe" -nt "$prov/$(basename "$rxe")" ]; then
    command -v patchelf >/dev/null || skip "no patchelf (contrib/setup.sh installs it)"
    mkdir -p "$prov"
    cp "$rxe" "$prov/"
    patchelf --replace-needed libibverbs.so.1 "$ibv" "$prov/$(basename "$rxe")"
fi

env="LD_LIBRARY_PATH=$prov UCX_MODULES=^efa UCX_WARN_UNUSED_ENV_VARS=n"
env="$env UCX_MODULE_DIR=$build/src/uct/.libs"
quiet="grep -v \"^libibverbs: Warning: couldn't load driver\""
