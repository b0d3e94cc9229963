# SPDX-License-Identifier: BSD-3-Clause
# What both VM legs of make check (run.sh, run_two_node.sh) need, sourced
# with top, build and nixl set: skips (77, with the reason) where NIXL's
# UCX or Debian's rxe provider is missing, and sets
#   env    the variables every UCX process in a VM runs with
#   VERBS_VM_SHARE  (exported) what the VM shares at its own path
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
    command -v patchelf >/dev/null || skip "no patchelf (contrib/setup/setup.sh installs it)"
    mkdir -p "$prov"
    cp "$rxe" "$prov/"
    patchelf --replace-needed libibverbs.so.1 "$ibv" "$prov/$(basename "$rxe")"
fi

# What the VM shares again at its own path (the guest's /tmp hides the
# host's): the directory that holds the source tree, the build and NIXL's
# UCX, the source tree itself where only / holds them all (make
# distcheck's tarball lies beside the checkout's .span-deps, not above it)
share=$top
for d in "$build" "$nixl" ${SPAN_NIXL_PY:+"$SPAN_NIXL_PY"}; do
    while [ "$share" != / ] && [ "${d#"$share"/}" = "$d" ] && [ "$d" != "$share" ]; do
        share=$(dirname "$share")
    done
done
if [ "$share" = / ]; then
    share=$top
fi
export VERBS_VM_SHARE=${VERBS_VM_SHARE:-$share}

env="LD_LIBRARY_PATH=$prov UCX_MODULES=^efa UCX_WARN_UNUSED_ENV_VARS=n"
env="$env UCX_MODULE_DIR=$build/src/uct/.libs"
quiet="grep -v \"^libibverbs: Warning: couldn't load driver\""
