#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The VM leg of make check: span over a real verbs device, soft-RoCE in the
# qemu VM of contrib/setup/verbs_vm.sh, in NIXL's UCX 1.23 (the 1.22 wheel has no
# verbs transports). Exits 77, with the reason, where the VM, NIXL's UCX or
# the test program is missing.
#   SPAN_BUILDDIR         build tree (default: the source tree)
#   SPAN_NIXL_UCX_LIBDIR  NIXL's UCX libraries (default: .span-deps/nixl/lib)
set -euo pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
build=${SPAN_BUILDDIR:-$top}
nixl=${SPAN_NIXL_UCX_LIBDIR:-$top/.span-deps/nixl/lib}

[ -x "$build/test/vm/span_vm_test" ] || {
    echo "vm leg skipped: test/vm/span_vm_test not built: configure found no NIXL UCX (contrib/setup/setup.sh)"
    exit 77
}
. "$top/test/vm/leg.sh"
test="$env timeout 300 $build/test/vm/span_vm_test"
cd "$build"
VERBS_VM_TIMEOUT=${VERBS_VM_TIMEOUT:-480} "$top/contrib/setup/verbs_vm.sh" run \
    'ibv_devinfo -v | grep -E "hca_id|max_mr_size|max_mr:"' \
    "$test --gtest_filter=-verbs_vm_memlock.* 2>&1 | $quiet" \
    "$test --gtest_filter=verbs_vm_memlock.* 2>&1 | $quiet" \
    "$env timeout 300 $build/test/nixl/span-check -s 2 -r 1 -g none \
        -t rc_verbs,ud_verbs:rc_verbs+,ud_verbs+ 2>&1 | $quiet"
