/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Linked into sanitizer builds only. UCX 1.22's cma reachability probe
 * (uct_cma_iface_is_reachable_v2) reads a peer's memory into the very iovec
 * that describes the read; the sanitizers' process_vm_readv interceptor then
 * walks the overwritten iov_base and crashes or reports an overflow in UCX,
 * not in span. This definition, found before the interceptor, makes the
 * plain system call: cma's data transfers are no longer checked by the
 * sanitizer, span's own accesses still are.
 */
#define _GNU_SOURCE
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

ssize_t process_vm_readv(pid_t pid, const struct iovec *local_iov,
                         unsigned long liovcnt,
                         const struct iovec *remote_iov,
                         unsigned long riovcnt, unsigned long flags)
{
    return syscall(SYS_process_vm_readv, pid, local_iov, liovcnt, remote_iov,
                   riovcnt, flags);
}
