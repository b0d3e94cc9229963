/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Peer processes on this node: what a pid, a PID namespace and a
 * descriptor number a peer sends can name here, and the ways span reaches
 * a peer's descriptors (pidfd_getfd, /proc/<pid>/fd). Every import of a
 * peer's descriptor (spill arenas, VMM units and their export table)
 * checks the peer with span_peer_check first.
 */
#ifndef SPAN_PEER_H_
#define SPAN_PEER_H_

#include <ucs/type/status.h>
#include <stddef.h>
#include <stdint.h>

/* Reads what names this host, once, while span loads and no thread of the
 * process is in span yet (span_peer_pid_ns reads it on first use where
 * span_peer_init was not called) */
void span_peer_init(void);

/* This process's PID namespace, as keys carry it: 32 bits of UCX's system
 * id of this host, then the inode number of /proc/self/ns/pid, unique only
 * within one kernel */
uint64_t span_peer_pid_ns(void);

/* Whether a peer's reference to its descriptor fd, as process pid of PID
 * namespace pid_ns, can name that descriptor from here: a pid means nothing
 * on another host or in another PID namespace (UCS_ERR_UNREACHABLE, as
 * cuda_ipc refuses it), and pid and fd must be values the kernel can have
 * given (UCS_ERR_INVALID_PARAM); what: for the log */
ucs_status_t span_peer_check(uint32_t pid, uint64_t pid_ns, uint32_t fd,
                             const char *what);

/* pidfd_open(pid) and pidfd_getfd(pidfd, fd): a descriptor, or -1 with
 * errno set. The kernel makes both close-on-exec (neither takes a flag for
 * it), as span makes every descriptor it holds. */
int span_peer_pidfd_open(uint32_t pid);
int span_peer_pidfd_getfd(int pidfd, uint32_t fd);

/* A peer's descriptor by path, in two steps, so that what it names is
 * checked before it is opened: span_peer_fd_path takes /proc/<pid>/fd/<fd>
 * as ptrace read access allows, with O_PATH, which opens nothing (a FIFO's
 * writer is not released, a device's or a FUSE file's open is not called),
 * its path in path for the log; once the caller checked it (fstat,
 * span_peer_fd_link), span_peer_fd_reopen opens the same file to read,
 * without waiting and without taking a terminal as the controlling one.
 * Each returns a descriptor, or -1 with errno set. */
int span_peer_fd_path(uint32_t pid, uint32_t fd, char *path, size_t size);
int span_peer_fd_reopen(int opath);

/* What this process's descriptor fd links to ("/memfd:name (deleted)"),
 * "" where unreadable: whether a descriptor taken from a peer is what the
 * peer claims it is */
void span_peer_fd_link(int fd, char *link, size_t size);

#endif
