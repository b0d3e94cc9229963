#!/usr/bin/env bash
# A real verbs device where the host has none: boots Debian's kernel under
# qemu (TCG), brings up soft-RoCE (rxe0 over virtio-net) and runs commands in
# a chroot of the host's / shared read-only through 9p, so host binaries, the
# checkout and .deps run unchanged at their own paths.
#
#   contrib/verbs_vm.sh prepare          # download the kernel, build the initramfs
#   contrib/verbs_vm.sh run 'cmd' ...    # each cmd in bash, in the current dir
#
# Everything is cached under .deps/vm/ (contrib/setup.sh runs prepare); the
# kernel package is downloaded and unpacked, never installed. `run` prints
# each command's output and exit status and exits with the first non-zero
# one; 77 where qemu or the prepared VM is missing (the reason on stderr).
# Commands run under bash -o pipefail. VERBS_VM_TIMEOUT (seconds, default
# 600) bounds the whole VM run; its qemu is killed on every way out.
# VERBS_VM_ENV names host variables to pass; VERBS_VM_LOG keeps the console.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
export PATH="$PATH:/usr/sbin:/sbin" # modprobe, depmod
vmdir=${VERBS_VM_DIR:-$top/.deps/vm}
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
        command -v "$t" >/dev/null || die "prepare needs $t (contrib/setup.sh installs it)"
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
# status.N per command, and vmtop=<dir>, the checkout, shared read-only
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

run() {
    local kdir="$vmdir/current" limit=${VERBS_VM_TIMEOUT:-600} i s rc=0
    command -v "$qemu" >/dev/null || skip "no $qemu (contrib/setup.sh installs qemu-system-x86)"
    [ -f "$kdir/vmlinuz" ] && [ -f "$kdir/initrd.gz" ] ||
        skip "no VM kernel in $vmdir (contrib/setup.sh, or $0 prepare)"
    cmp -s "$kdir/init" <(guest_init) ||
        skip "the VM in $vmdir is older than this script ($0 prepare)"
    [ $# -gt 0 ] || die "usage: $0 run 'command' ..."

    run=$(mktemp -d "${TMPDIR:-/tmp}/verbs_vm.XXXXXX")
    qpid=""
    cleanup() {
        local p
        # still running only where the script is interrupted: timeout
        # passes the TERM to qemu, and qemu's own pid is killed for sure
        if [ -n "$qpid" ] && kill "$qpid" 2>/dev/null; then
            p=$(cat "$run/qemu.pid" 2>/dev/null || true)
            sleep 1
            [ -z "$p" ] || kill -9 "$p" 2>/dev/null || true
            wait "$qpid" 2>/dev/null || true
        fi
        [ -z "${VERBS_VM_LOG:-}" ] || cp "$run/console" "$VERBS_VM_LOG" || true
        rm -rf "$run"
    }
    trap cleanup EXIT
    trap 'exit 143' TERM INT HUP

    {
        echo "cd $(printf %q "$PWD")"
        echo "export PATH=$(printf %q "$PATH") HOME=/tmp"
        for v in ${VERBS_VM_ENV:-}; do
            [ -z "${!v+x}" ] || echo "export $v=$(printf %q "${!v}")"
        done
        i=0
        for c in "$@"; do
            echo "bash -o pipefail -c $(printf %q "$c") 2>&1; echo \$? > $(printf %q "$run/status.$i")"
            i=$((i + 1))
        done
    } > "$run/cmd.sh"

    : > "$run/console" # before tail opens it
    timeout -k 5 "$limit" "$qemu" -accel "${VERBS_VM_ACCEL:-tcg}" -cpu max \
        -smp 2 -m "${VERBS_VM_MEM:-2048}" -no-reboot -display none \
        -monitor none -serial stdio -pidfile "$run/qemu.pid" \
        -kernel "$kdir/vmlinuz" -initrd "$kdir/initrd.gz" \
        -append "console=ttyS0 loglevel=3 panic=-1 vmrun=$run vmtop=$top" \
        -netdev user,id=n0 -device virtio-net-pci,netdev=n0 \
        -virtfs local,path=/,mount_tag=host,security_model=none,readonly=on,multidevs=remap \
        -virtfs local,path="$run",mount_tag=run,security_model=none \
        -virtfs local,path="$top",mount_tag=top,security_model=none,readonly=on,multidevs=remap \
        </dev/null > "$run/console" 2>&1 &
    qpid=$!
    tail -n +1 -f --pid=$qpid "$run/console" | tr -d '\r' &
    wait $qpid || s=$?
    wait || true
    if [ "${s:-0}" -eq 124 ] || [ "${s:-0}" -eq 137 ]; then
        echo "verbs_vm: the VM ran past ${limit} s and was killed" >&2
        rc=124
    fi
    i=0
    for c in "$@"; do
        s=$(cat "$run/status.$i" 2>/dev/null || echo "none (did not finish)")
        echo "verbs_vm: [$i] exit $s: $c"
        if [ "$rc" -eq 0 ] && [ "$s" != 0 ]; then
            case "$s" in [0-9]*) rc=$s ;; *) rc=1 ;; esac
        fi
        i=$((i + 1))
    done
    return "$rc"
}

case "${1:-}" in
prepare) prepare ;;
run) shift; run "$@" ;;
*) echo "usage: $0 prepare | run 'command' ..." >&2; exit 2 ;;
esac
