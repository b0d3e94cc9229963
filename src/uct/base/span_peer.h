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

/* Opens /proc/<pid>/fd/<fd> to read, as ptrace read access allows: without
 * waiting (a FIFO without a writer) and without taking a terminal as the
 * controlling one; its path in path for the log. A descriptor, or -1 with
 * errno set. */
int span_peer_fd_open(uint32_t pid, uint32_t fd, char *path, size_t size);

/* What this process's descriptor fd links to ("/memfd:name (deleted)"),
 * "" where unreadable: whether a descriptor taken from a peer is what the
 * peer claims it is */
void span_peer_fd_link(int fd, char *link, size_t size);

#endif
