#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The two-node leg of make check: span across machines, two qemu VMs of
# contrib/setup/verbs_vm.sh's cluster with soft-RoCE each, in NIXL's UCX 1.23.
# Node b serves targets (span-check -l, and nixl_check.py --serve where
# NIXL's python package imports); node a runs test/vm/span_two_node_test
# (rkeys of chunked registrations across every chunk boundary, spilled keys
# refused, a target killed mid-get), span-check with every target on node b
# and nixl_check.py's CPU mode across the nodes. Exits 77, with the reason,
# where the VM, NIXL's UCX or the test program is missing.
#   SPAN_BUILDDIR         build tree (default: the source tree)
#   SPAN_NIXL_UCX_LIBDIR  NIXL's UCX libraries (default: .span-deps/nixl/lib)
#   SPAN_NIXL_PY          NIXL's python package (default: .span-deps/nixl/py)
set -euo pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
build=${SPAN_BUILDDIR:-$top}
nixl=${SPAN_NIXL_UCX_LIBDIR:-$top/.span-deps/nixl/lib}

[ -x "$build/test/vm/span_two_node_test" ] || {
    echo "two-node leg skipped: test/vm/span_two_node_test not built: configure found no NIXL UCX (contrib/setup/setup.sh)"
    exit 77
}
. "$top/test/vm/leg.sh"

# node b's pids start past 30000, far above anything node a runs: the
# spill test puts a process of node a at the pid of node b's target
server="echo 30000 > /proc/sys/kernel/ns_last_pid
$env $build/test/nixl/span-check -l \$VERBS_VM_ADDR:7300 2>&1 | $quiet &"
commands=(
    "$env SPAN_TWO_NODE_PEER=\$VERBS_VM_PEER:7300 timeout 400 \
        $build/test/vm/span_two_node_test 2>&1 | $quiet"
    "$env timeout 300 $build/test/nixl/span-check -c \$VERBS_VM_PEER:7300 \
        -s 2 -r 1 -t rc_verbs,ud_verbs:rc_verbs+,ud_verbs+ 2>&1 | $quiet"
)
# NIXL as the client, where its python package imports here
py=$(python3 -c 'import sys; print(sys.executable)' 2>/dev/null) || true
pypath="PYTHONPATH=${SPAN_NIXL_PY:-$top/.span-deps/nixl/py}"
if [ -n "$py" ] && env "$pypath" "$py" -c 'import nixl_cu13' 2>/dev/null; then
    server="$server
$env $pypath $py $top/contrib/nixl/nixl_check.py --serve \$VERBS_VM_ADDR:7301 2>&1 | $quiet &"
    commands+=("$env $pypath timeout 300 $py $top/contrib/nixl/nixl_check.py \
        --connect \$VERBS_VM_PEER:7301 --runs 1 --mib 8 \
        --tls rc_verbs,ud_verbs rc_verbs+,ud_verbs+ 2>&1 | $quiet")
else
    echo "two-node leg: no nixl_check.py: NIXL's python package does not import (contrib/setup/setup.sh installs it into .span-deps/nixl/py)"
fi
server="$server
wait"
cd "$build"
VERBS_VM_TIMEOUT=${VERBS_VM_TIMEOUT:-840} "$top/contrib/setup/verbs_vm.sh" cluster \
    "$server" "${commands[@]}"
