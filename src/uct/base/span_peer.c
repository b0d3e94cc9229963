/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Peer processes (span_peer.h).
 *
 * A PID namespace's inode number is unique only within one kernel (every
 * host's initial namespace has 4026531836), so span names a namespace with
 * its host's part too: a key from another host is refused before any of
 * its numbers is looked up.
 */
#include "span_peer.h"

#include <ucs/debug/log_def.h>
#include <ucs/sys/uid.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* This host's part of the keys, and whether it was read */
static uint32_t span_peer_host_id;
static int      span_peer_host_read;

/* This host as keys name it: 32 bits of UCX's system id, which UCX reads
 * from the kernel's boot id (a random UUID per boot): what tells UCX's own
 * same-host transports apart from other hosts. Read once: UCX takes a
 * process-wide lock at every call, which a child forked while another
 * thread holds it would wait on forever. Readers racing on the first read
 * store the same value. */
static uint32_t span_peer_host(void)
{
    uint64_t id;

    if (!__atomic_load_n(&span_peer_host_read, __ATOMIC_ACQUIRE)) {
        id = ucs_get_system_id();
        __atomic_store_n(&span_peer_host_id, (uint32_t)(id ^ (id >> 32)),
                         __ATOMIC_RELAXED);
        __atomic_store_n(&span_peer_host_read, 1, __ATOMIC_RELEASE);
    }
    return __atomic_load_n(&span_peer_host_id, __ATOMIC_RELAXED);
}

void span_peer_init(void)
{
    (void)span_peer_host();
}

/* The host's part (high 32 bits) and the inode number in the link
 * "pid:[4026531836]" (low 32 bits; the kernel's are 32-bit; 0 where
 * unreadable). Read each time: a child forked after its parent's
 * unshare(CLONE_NEWPID) inherits the parent's memory but lives in the new
 * namespace. */
uint64_t span_peer_pid_ns(void)
{
    uint64_t host = (uint64_t)span_peer_host() << 32;
    char link[64], *p;
    ssize_t len;

    len = readlink("/proc/self/ns/pid", link, sizeof(link) - 1);
    link[(len < 0) ? 0 : len] = '\0';
    p = strchr(link, '[');
    if (p == NULL) {
        ucs_debug("span peer: cannot read /proc/self/ns/pid ('%s')", link);
        return host;
    }
    return host | (uint32_t)strtoull(p + 1, NULL, 10);
}

ucs_status_t span_peer_check(uint32_t pid, uint64_t pid_ns, uint32_t fd,
                             const char *what)
{
    uint64_t own_ns = span_peer_pid_ns();

    if ((pid_ns >> 32) != (own_ns >> 32)) {
        ucs_error("span peer: %s of process %u is on another host (host id 0x%"
                  PRIx64 ", this one 0x%" PRIx64 "): its pid and descriptor "
                  "name nothing here", what, pid, pid_ns >> 32, own_ns >> 32);
        return UCS_ERR_UNREACHABLE;
    }
    if (pid_ns != own_ns) {
        ucs_error("span peer: %s of process %u is in PID namespace %" PRIu64
                  ", this process in %" PRIu64 ": it cannot be reached from "
                  "here", what, pid, (uint64_t)(uint32_t)pid_ns,
                  (uint64_t)(uint32_t)own_ns);
        return UCS_ERR_UNREACHABLE;
    }
    if ((pid == 0) || (pid > INT_MAX) || (fd > INT_MAX)) {
        ucs_error("span peer: %s names descriptor %u of process %u, which no "
                  "process has", what, fd, pid);
        return UCS_ERR_INVALID_PARAM;
    }
    return UCS_OK;
}

int span_peer_pidfd_open(uint32_t pid)
{
    return syscall(SYS_pidfd_open, (pid_t)pid, 0);
}

int span_peer_pidfd_getfd(int pidfd, uint32_t fd)
{
    return syscall(SYS_pidfd_getfd, pidfd, (int)fd, 0);
}

int span_peer_fd_path(uint32_t pid, uint32_t fd, char *path, size_t size)
{
    snprintf(path, size, "/proc/%u/fd/%u", pid, fd);
    return open(path, O_PATH | O_CLOEXEC);
}

int span_peer_fd_reopen(int opath)
{
    char self[64];

    snprintf(self, sizeof(self), "/proc/self/fd/%d", opath);
    return open(self, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
}

void span_peer_fd_link(int fd, char *link, size_t size)
{
    char self[64];
    ssize_t len;

    snprintf(self, sizeof(self), "/proc/self/fd/%d", fd);
    len = readlink(self, link, size - 1);
    link[(len < 0) ? 0 : len] = '\0';
}
