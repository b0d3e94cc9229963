#!/usr/bin/env bash
# The VM leg of make check: span over a real verbs device, soft-RoCE in the
# qemu VM of contrib/verbs_vm.sh, in NIXL's UCX 1.23 (the 1.22 wheel has no
# verbs transports). Exits 77, with the reason, where the VM, NIXL's UCX or
# the test program is missing.
#   SPAN_BUILDDIR         build tree (default: the source tree)
#   SPAN_NIXL_UCX_LIBDIR  NIXL's UCX libraries (default: .deps/nixl/lib)
set -euo pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
build=${SPAN_BUILDDIR:-$top}
nixl=${SPAN_NIXL_UCX_LIBDIR:-$top/.deps/nixl/lib}
skip() { echo "vm leg skipped: $*"; exit 77; }

[ -x "$build/test/vm/span_vm_test" ] ||
    skip "test/vm/span_vm_test not built: configure found no NIXL UCX (contrib/setup.sh)"

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
test="$env timeout 300 $build/test/vm/span_vm_test"
cd "$build"
VERBS_VM_TIMEOUT=${VERBS_VM_TIMEOUT:-480} "$top/contrib/verbs_vm.sh" run \
    'ibv_devinfo -v | grep -E "hca_id|max_mr_size|max_mr:"' \
    "$test --gtest_filter=-verbs_vm_memlock.* 2>&1 | $quiet" \
    "$test --gtest_filter=verbs_vm_memlock.* 2>&1 | $quiet" \
    "$env timeout 300 $build/test/nixl/span-check -s 2 -r 1 -g none \
        -t rc_verbs,ud_verbs:rc_verbs+,ud_verbs+ 2>&1 | $quiet"
