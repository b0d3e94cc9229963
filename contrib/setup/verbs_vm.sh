#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# A real verbs device where the host has none: boots Debian's kernel under
# qemu (TCG), brings up soft-RoCE (rxe0 over virtio-net) and runs commands in
# a chroot of the host's / shared read-only through 9p, so host binaries, the
# checkout and .span-deps run unchanged at their own paths.
#
#   contrib/setup/verbs_vm.sh prepare          # download the kernel, build the initramfs
#   contrib/setup/verbs_vm.sh run 'cmd' ...    # each cmd in bash, in the current dir
#   contrib/setup/verbs_vm.sh cluster 'server cmd' 'cmd' ...
#                                        # two VMs, two hosts as UCX sees them
#
# Everything is cached under .span-deps/vm/ (contrib/setup/setup.sh runs prepare); the
# kernel package is downloaded and unpacked, never installed. `run` prints
# each command's output and exit status and exits with the first non-zero
# one; 77 where qemu or the prepared VM is missing (the reason on stderr).
# Commands run under bash -o pipefail. VERBS_VM_TIMEOUT (seconds, default
# 600) bounds the whole VM run; its qemu is killed on every way out.
# VERBS_VM_ENV names host variables to pass; VERBS_VM_LOG keeps the console
# (a cluster's: VERBS_VM_LOG.a and VERBS_VM_LOG.b). VERBS_VM_SHARE is
# the directory shared again at its own path (default: the checkout), one
# that holds all the commands need of a directory the guest hides (/tmp).
#
# `cluster` boots two VMs, node a and node b, of one vCPU each
# (VERBS_VM_MEM, default 1024 MiB each), on a network of their own: their
# virtio-net cards exchange frames through two unix datagram sockets in the
# run directory, so nothing reaches any host network. Each node has its
# own kernel (own boot id, PID namespace and /proc), hostname node-a or
# node-b, eth0 at 10.0.3.1 or 10.0.3.2 and rxe0 over it. Node b runs the
# server command in the background; node a waits until b is up (at most
# VERBS_VM_PEER_WAIT s, default 300) and runs the commands; then the server
# is stopped (TERM, KILL 5 s later) and both power off. In both, VERBS_VM_NODE
# is a or b, VERBS_VM_ADDR the node's address and VERBS_VM_PEER the other's.
# Node b's console follows node a's output; the exit status is the first
# non-zero one of a's commands, or of the server where it ended on its own.
set -euo pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
export PATH="$PATH:/usr/sbin:/sbin" # modprobe, depmod
vmdir=${VERBS_VM_DIR:-$top/.span-deps/vm}
share=${VERBS_VM_SHARE:-$top}
qemu=${VERBS_VM_QEMU:-qemu-system-x86_64}
# what the guest needs beyond the kernel: virtio-net and 9p to reach the
# host, rxe (soft-RoCE, which asks the crypto API for crc32) and ib_uverbs
# for user-space verbs
modules=(virtio_pci virtio_net 9pnet_virtio 9p crc32_generic ib_uverbs rdma_rxe)

die() { echo "verbs_vm: $*" >&2; exit 1; }
skip() { echo "verbs_vm: skipped: $*" >&2; exit 77; }

# the image package linux-image-amd64 depends on today: linux-image-6.1.0-N-amd64
kernel_package() {
    apt-cache depends linux-image-amd64 2>/dev/null |
        sed -n 's/^ *Depends: \(linux-image-[0-9].*-amd64\)$/\1/p' | head -n 1
}

prepare() {
    local pkg kver m
    for t in "$qemu" busybox modprobe depmod cpio apt-get dpkg; do
        command -v "$t" >/dev/null || die "prepare needs $t (contrib/setup/setup.sh installs it)"
    done
    [ -x /bin/busybox ] && file_static /bin/busybox ||
        die "prepare needs a static /bin/busybox (busybox-static)"
    pkg=$(kernel_package)
    [ -n "$pkg" ] || die "no linux-image-*-amd64 in apt's lists (apt-get update)"
    kver=${pkg#linux-image-}
    if [ -f "$vmdir/$kver/initrd.gz" ] && [ -f "$vmdir/$kver/vmlinuz" ] &&
       cmp -s "$vmdir/$kver/init" <(guest_init); then
        ln -sfn "$kver" "$vmdir/current"
        echo "verbs_vm: $kver ready in $vmdir"
        return
    fi

    mkdir -p "$vmdir"
    tmp=$(mktemp -d "$vmdir/tmp.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    echo "verbs_vm: downloading $pkg"
    (cd "$tmp" && apt-get download -q "$pkg" >/dev/null 2>&1) ||
        die "apt-get download $pkg failed"
    dpkg -x "$tmp"/"$pkg"_*.deb "$tmp/pkg"
    depmod -b "$tmp/pkg" "$kver"

    # the initramfs: busybox, the modules in modprobe's order, /init
    mkdir -p "$tmp/initrd/bin" "$tmp/initrd/lib/modules" "$tmp/initrd/"{proc,sys,dev,host}
    cp /bin/busybox "$tmp/initrd/bin/busybox"
    for m in "${modules[@]}"; do
        modprobe -d "$tmp/pkg" -S "$kver" --show-depends "$m" ||
            die "module $m is not in $pkg"
    done | awk '$1 == "insmod" && !seen[$2]++ { print $2 }' |
    while read -r m; do
        case "$m" in
        *.ko) cp "$m" "$tmp/initrd/lib/modules/" ;;
        *.ko.xz) xz -dc "$m" > "$tmp/initrd/lib/modules/$(basename "$m" .xz)" ;;
        *) die "unexpected module file $m" ;;
        esac
        basename "${m%.xz}" >> "$tmp/initrd/lib/modules/order"
    done
    guest_init > "$tmp/initrd/init"
    chmod +x "$tmp/initrd/init"
    (cd "$tmp/initrd" && find . | cpio -o -H newc --quiet | gzip -1) > "$tmp/initrd.gz"

    mkdir -p "$tmp/out"
    mv "$tmp/pkg/boot/vmlinuz-$kver" "$tmp/out/vmlinuz"
    mv "$tmp/initrd.gz" "$tmp/out/initrd.gz"
    cp "$tmp/initrd/init" "$tmp/out/init"
    echo "$pkg" > "$tmp/out/package"
    rm -rf "${vmdir:?}/$kver"
    mv "$tmp/out" "$vmdir/$kver"
    ln -sfn "$kver" "$vmdir/current"
    echo "verbs_vm: $kver ready in $vmdir"
}

file_static() {
    ! LC_ALL=C ldd "$1" >/dev/null 2>&1
}

# The guest's /init (busybox sh). The kernel hands it vmrun=<dir>, the host
# directory shared read-write (tag "run") that holds cmd.sh and gets one
# status.N per command, and vmtop=<dir>, the checkout (or VERBS_VM_SHARE), shared read-only
# (tag "top") and mounted at its own path again: a checkout under /tmp or
# /run would be hidden by the guest's tmpfs there (a CI clone in /tmp).
guest_init() {
    cat <<'EOF'
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
say() { echo "verbs_vm(guest): $*"; }
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
while read -r m; do
    insmod /lib/modules/$m || say "insmod $m failed"
done < /lib/modules/order
ip link set lo up
ip link set eth0 up
ip addr add 10.0.2.15/24 dev eth0
h=/host
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=262144,cache=loose host $h ||
    { say "cannot mount the host's /"; poweroff -f; }
mount -t proc proc $h/proc
mount -t sysfs sys $h/sys
mount -t devtmpfs dev $h/dev
mount -t tmpfs tmp $h/tmp
mount -t tmpfs run $h/run
mkdir -p $h/dev/shm $h/dev/pts
mount -t tmpfs shm $h/dev/shm
mount -t devpts pts $h/dev/pts
mkdir -p $h$vmrun $h$vmtop 2>/dev/null
mount -t 9p -o trans=virtio,version=9p2000.L run $h$vmrun ||
    { say "cannot mount the run directory $vmrun"; poweroff -f; }
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=262144,cache=loose top $h$vmtop ||
    { say "cannot mount the checkout $vmtop"; poweroff -f; }
# rdma is iproute2's, from the host
chroot $h rdma link add rxe0 type rxe netdev eth0 ||
    { say "rdma link add failed"; ip link; dmesg | tail -n 20; }
n=0
s=/sys/class/infiniband/rxe0/ports/1/state
while [ -f $s ] && [ "$(cat $s)" != "4: ACTIVE" ]; do
    n=$((n + 1))
    [ $n -le 300 ] || { say "rxe0 not ACTIVE after 300 polls"; break; }
    sleep 0.1
done
say "rxe0: $(cat /sys/class/infiniband/rxe0/ports/1/state 2>/dev/null) after $(cut -d' ' -f1 /proc/uptime) s"
chroot $h /bin/bash $vmrun/cmd.sh
sync
poweroff -f
EOF
}

# Skips (77) where this VM cannot boot
vm_check() {
    command -v "$qemu" >/dev/null || skip "no $qemu (contrib/setup/setup.sh installs qemu-system-x86)"
    [ -f "$kdir/vmlinuz" ] && [ -f "$kdir/initrd.gz" ] ||
        skip "no VM kernel in $vmdir (contrib/setup/setup.sh, or $0 prepare)"
    cmp -s "$kdir/init" <(guest_init) ||
        skip "the VM in $vmdir is older than this script ($0 prepare)"
}

# The head of a command script: the directory, PATH and the variables passed
vm_script_env() {
    echo "cd $(printf %q "$PWD")"
    echo "export PATH=$(printf %q "$PATH") HOME=/tmp"
    for v in ${VERBS_VM_ENV:-}; do
        [ -z "${!v+x}" ] || echo "export $v=$(printf %q "${!v}")"
    done
}

# One line per command: its output to the console, its status to status.N,
# the seconds it took to time.N
vm_script_commands() {
    local i=0 c
    for c in "$@"; do
        echo "t0=\$(date +%s); bash -o pipefail -c $(printf %q "$c") 2>&1; echo \$? > $(printf %q "$run/status.$i"); echo \$((\$(date +%s) - t0)) > $(printf %q "$run/time.$i")"
        i=$((i + 1))
    done
}

# Starts a VM in the background: vm_start NAME CPUS MEM APPEND NETDEV DEVICE;
# its console goes to $run/console.NAME, its qemu's pid to qpids
vm_start() {
    local name=$1 cpus=$2 mem=$3 append=$4 netdev=$5 device=$6
    : > "$run/console.$name" # before tail opens it
    timeout -k 5 "$limit" "$qemu" -accel "${VERBS_VM_ACCEL:-tcg}" -cpu max \
        -smp "$cpus" -m "$mem" -no-reboot -display none \
        -monitor none -serial stdio -pidfile "$run/qemu.$name.pid" \
        -kernel "$kdir/vmlinuz" -initrd "$kdir/initrd.gz" \
        -append "console=ttyS0 loglevel=3 panic=-1 vmrun=$run vmtop=$share $append" \
        -netdev "$netdev" -device "$device" \
        -virtfs local,path=/,mount_tag=host,security_model=none,readonly=on,multidevs=remap \
        -virtfs local,path="$run",mount_tag=run,security_model=none \
        -virtfs local,path="$share",mount_tag=top,security_model=none,readonly=on,multidevs=remap \
        </dev/null > "$run/console.$name" 2>&1 &
    qpids+=("$!")
    qnames+=("$name")
}

# On every way out: a qemu still running (only where the script is
# interrupted, or a node outlived its bound) is killed for sure, timeout
# passing the TERM on and qemu's own pid killed after it
vm_cleanup() {
    local i p killed=""
    for i in "${!qpids[@]}"; do
        if kill "${qpids[$i]}" 2>/dev/null; then
            killed="$killed $i"
        fi
    done
    if [ -n "$killed" ]; then
        sleep 1
        for i in $killed; do
            p=$(cat "$run/qemu.${qnames[$i]}.pid" 2>/dev/null || true)
            [ -z "$p" ] || kill -9 "$p" 2>/dev/null || true
            wait "${qpids[$i]}" 2>/dev/null || true
        done
    fi
    if [ -n "${VERBS_VM_LOG:-}" ]; then
        for i in "${!qnames[@]}"; do
            if [ "${qnames[$i]}" = main ]; then
                cp "$run/console.main" "$VERBS_VM_LOG" || true
            else
                cp "$run/console.${qnames[$i]}" \
                   "$VERBS_VM_LOG.${qnames[$i]}" || true
            fi
        done
    fi
    rm -rf "$run"
}

vm_setup_run() {
    kdir="$vmdir/current"
    limit=${VERBS_VM_TIMEOUT:-600}
    vm_check
    run=$(mktemp -d "${TMPDIR:-/tmp}/verbs_vm.XXXXXX")
    qpids=()
    qnames=()
    trap vm_cleanup EXIT
    trap 'exit 143' TERM INT HUP
}

# Waits for qemu (index i of qpids); 124 where it ran past the bound
vm_wait() {
    local s=0
    wait "${qpids[$1]}" || s=$?
    if [ "$s" -eq 124 ] || [ "$s" -eq 137 ]; then
        echo "verbs_vm: node ${qnames[$1]} ran past ${limit} s and was killed" >&2
        return 124
    fi
    return 0
}

# Prints each command's status; returns the first non-zero one (or $1)
vm_report() {
    local rc=$1 i=0 c s
    shift
    for c in "$@"; do
        s=$(cat "$run/status.$i" 2>/dev/null || echo "none (did not finish)")
        echo "verbs_vm: [$i] exit $s after $(cat "$run/time.$i" 2>/dev/null || echo ?) s: $c"
        if [ "$rc" -eq 0 ] && [ "$s" != 0 ]; then
            case "$s" in [0-9]*) rc=$s ;; *) rc=1 ;; esac
        fi
        i=$((i + 1))
    done
    return "$rc"
}

run() {
    local rc=0
    [ $# -gt 0 ] || die "usage: $0 run 'command' ..."
    vm_setup_run
    { vm_script_env; vm_script_commands "$@"; } > "$run/cmd.sh"
    vm_start main 2 "${VERBS_VM_MEM:-2048}" "" user,id=n0 \
        virtio-net-pci,netdev=n0
    tail -n +1 -f --pid="${qpids[0]}" "$run/console.main" | tr -d '\r' &
    vm_wait 0 || rc=124
    wait || true
    vm_report "$rc" "$@"
}

# What a node of the cluster runs before its commands: its address and
# hostname (the guest's init gave eth0 the address of the single VM), then
# a wait until rxe0 has a GID for the new address
cluster_node_setup() {
    cat <<'EOF2'
ip -4 addr flush dev eth0
ip addr add "$VERBS_VM_ADDR/24" dev eth0
hostname "node-$VERBS_VM_NODE"
gid=$(printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' \
      $(echo "$VERBS_VM_ADDR" | tr . ' '))
n=0
until grep -qs "$gid" /sys/class/infiniband/rxe0/ports/1/gids/*; do
    n=$((n + 1))
    [ $n -le 100 ] || { echo "verbs_vm($VERBS_VM_NODE): no rxe0 GID for $VERBS_VM_ADDR"; break; }
    sleep 0.1
done
EOF2
}

# Node b: the server in a session of its own, until node a is done (the
# host touches $run/stop) or it ends by itself
cluster_server_script() {
    local cmd=$1
    cat <<EOF2
echo up > $(printf %q "$run/b.up")
setsid bash -o pipefail -c $(printf %q "$cmd") 2>&1 &
pid=\$!
while kill -0 \$pid 2>/dev/null && [ ! -e $(printf %q "$run/stop") ]; do
    sleep 0.5
done
if kill -0 \$pid 2>/dev/null; then
    kill -TERM -- -\$pid 2>/dev/null
    for i in 1 2 3 4 5 6 7 8 9 10; do
        kill -0 \$pid 2>/dev/null || break
        sleep 0.5
    done
    kill -KILL -- -\$pid 2>/dev/null
    wait \$pid
    echo stopped > $(printf %q "$run/status.b")
else
    wait \$pid
    echo \$? > $(printf %q "$run/status.b")
fi
EOF2
}

# Node a: waits (bounded) for node b to boot, then runs the commands
cluster_client_script() {
    local wait_s=${VERBS_VM_PEER_WAIT:-300}
    cat <<EOF2
n=0
until [ -e $(printf %q "$run/b.up") ]; do
    n=\$((n + 1))
    if [ \$n -gt $((wait_s * 5)) ]; then
        echo "verbs_vm(a): node b did not come up in $wait_s s"
        exit 1
    fi
    sleep 0.2
done
echo "verbs_vm(a): node b up after \$(cut -d' ' -f1 /proc/uptime) s"
EOF2
    vm_script_commands "$@"
}

cluster() {
    local rc=0 mem=${VERBS_VM_MEM:-1024} node other addr peer mac s i
    [ $# -gt 1 ] || die "usage: $0 cluster 'server command' 'command' ..."
    local server=$1
    shift
    vm_setup_run
    # the guest's init runs cmd.sh; each node runs its part of it
    echo "exec /bin/bash $(printf %q "$run")/node-\$vmnode.sh" > "$run/cmd.sh"
    for node in a b; do
        case $node in
        a) other=b addr=10.0.3.1 peer=10.0.3.2 mac=52:54:00:5a:00:01 ;;
        b) other=a addr=10.0.3.2 peer=10.0.3.1 mac=52:54:00:5a:00:02 ;;
        esac
        {
            vm_script_env
            echo "export VERBS_VM_NODE=$node VERBS_VM_ADDR=$addr VERBS_VM_PEER=$peer"
            cluster_node_setup
            if [ $node = a ]; then
                cluster_client_script "$@"
            else
                cluster_server_script "$server"
            fi
        } > "$run/node-$node.sh"
        # each card sends to the other's socket and nowhere else
        vm_start "$node" 1 "$mem" "vmnode=$node" \
            "dgram,id=n0,local.type=unix,local.path=$run/net.$node,remote.type=unix,remote.path=$run/net.$other" \
            "virtio-net-pci,netdev=n0,mac=$mac"
    done
    tail -n +1 -f --pid="${qpids[0]}" "$run/console.a" | tr -d '\r' &
    vm_wait 0 || rc=124
    wait "$!" || true
    touch "$run/stop"
    # node b stops its server and powers off: 5 s for TERM, then KILL
    for i in $(seq 300); do
        kill -0 "${qpids[1]}" 2>/dev/null || break
        sleep 0.1
    done
    kill "${qpids[1]}" 2>/dev/null || true
    vm_wait 1 || true
    echo "verbs_vm: node b's console:"
    tr -d '\r' < "$run/console.b" | sed 's/^/b| /'
    s=$(cat "$run/status.b" 2>/dev/null || echo "none (did not finish)")
    echo "verbs_vm: [b] exit $s: $server"
    case "$s" in
    0|stopped) ;;
    [0-9]*) [ "$rc" -ne 0 ] || rc=$s ;;
    *) [ "$rc" -ne 0 ] || rc=1 ;;
    esac
    vm_report "$rc" "$@"
}

case "${1:-}" in
prepare) prepare ;;
run) shift; run "$@" ;;
cluster) shift; cluster "$@" ;;
*) echo "usage: $0 prepare | run 'command' ... | cluster 'server command' 'command' ..." >&2; exit 2 ;;
esac
