/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Spill arena: one memfd per process, holding slots of inner keys.
 *
 * An importer on the same node reads it through /proc/<pid>/fd/<fd>. That
 * open is checked as a ptrace *read* access (same user, dumpable peer),
 * which Yama's default ptrace_scope=1 does not restrict, unlike
 * pidfd_getfd or process_vm_readv (attach access): keys spill wherever
 * cuda_ipc itself can work. The memfd dies with its process, so nothing
 * outlives a crash; a slot is released on deregistration.
 *
 * A child forked after spills shares the parent's memfd: it never writes
 * there. It closes its copy at fork (base/span_fork.h, which also holds the
 * lock around fork), makes an arena of its own at its first spill, and
 * leaves the slots of the references it inherited to the parent.
 *
 * The pid and fd come from a peer: they may name any file of any process
 * the importer can read. The open neither waits (a FIFO without a writer)
 * nor takes a terminal as the controlling one, and what it opened is read
 * only if it is a spill arena's memfd; a pid of another PID namespace, or
 * of another host, is not looked up at all. A PID namespace's inode number
 * is unique only within one kernel (every host's initial namespace has
 * 4026531836), so keys name the namespace with their host's part
 * (span_peer_pid_ns).
 *
 * Layout: offset 0 holds the arena's magic and id (span_spill_kind, a
 * table of base/span_memfd.h: the id random, so a recycled pid or
 * descriptor is refused); slots follow, each a header
 * {seq, n, K} and n * K key bytes. A slot's seq is written after its keys
 * and cleared first on release; an importer reads the header again after
 * the keys, so a slot released meanwhile is refused, not half-read.
 */
#include "span_spill.h"
#include "base/span_fork.h"
#include "base/span_hash.h"
#include "base/span_memfd.h"
#include "base/span_peer.h"

#include <ucs/debug/log_def.h>
#include <ucs/sys/compiler_def.h>
#include <ucs/sys/math.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <limits.h>
#include <string.h>
#include <unistd.h>

#define SPAN_SPILL_ALIGN     64
#define SPAN_SPILL_FIRST     64                    /* after the header */
#define SPAN_SPILL_MAX_SIZE  (1ul << 30)

/* The arena's memfd and header (base/span_memfd.h) */
static const span_memfd_kind_t span_spill_kind = {
    .name  = "ucx-span-spill",
    .magic = 0x4c4c495053415053ull, /* "SPASPILL" */
    .log   = "span spill",
    .what  = "spill arena"
};

typedef struct {
    uint64_t seq; /* 0: released */
    uint32_t n;
    uint32_t key_size;
} span_spill_slot_t;

typedef struct {
    uint64_t offset;
    uint64_t size;
} span_spill_extent_t;

static struct {
    pthread_mutex_t     lock;
    pid_t               pid;      /* whose arena it is; 0 before the first */
    int                 fd;
    uint64_t            id;
    uint64_t            seq;
    uint64_t            end;      /* bytes in use or freed */
    span_spill_extent_t *free;    /* sorted by offset, coalesced */
    size_t              num_free;
} span_spill = {.lock = PTHREAD_MUTEX_INITIALIZER, .fd = -1};

/* Closes the child's copy of its parent's arena while the number still
 * names it; the free list is the parent's, dropped with the next arena */
static void span_spill_fork_child(void)
{
    if (span_spill.fd >= 0) {
        close(span_spill.fd);
    }
    span_spill.fd  = -1;
    span_spill.pid = 0;
}

static const span_fork_handlers_t span_spill_fork = {
    .lock  = &span_spill.lock,
    .child = span_spill_fork_child
};

static void UCS_F_CTOR span_spill_fork_register(void)
{
    span_fork_register(SPAN_FORK_SPILL, &span_spill_fork);
}

static int span_spill_write(const void *buf, size_t size, uint64_t offset)
{
    return pwrite(span_spill.fd, buf, size, offset) == (ssize_t)size;
}

/* The arena, made at the first spill of this process */
static ucs_status_t span_spill_arena(void)
{
    ucs_status_t status;

    if (span_spill.fd >= 0) {
        return UCS_OK;
    }
    free(span_spill.free);
    span_spill.free     = NULL;
    span_spill.num_free = 0;
    status = span_memfd_create(&span_spill_kind, 0, &span_spill.fd,
                               &span_spill.id);
    if (status != UCS_OK) {
        return status;
    }
    span_spill.pid = getpid();
    span_spill.seq = span_memfd_random() >> 16;
    span_spill.end = SPAN_SPILL_FIRST;
    return UCS_OK;
}

/* First fit among freed extents, else at the end */
static int span_spill_alloc(uint64_t size, uint64_t *offset_p)
{
    span_spill_extent_t *e;
    size_t i;

    for (i = 0; i < span_spill.num_free; ++i) {
        e = &span_spill.free[i];
        if (e->size >= size) {
            *offset_p  = e->offset;
            e->offset += size;
            e->size   -= size;
            if (e->size == 0) {
                memmove(e, e + 1, (--span_spill.num_free - i) * sizeof(*e));
            }
            return 1;
        }
    }
    if (span_spill.end + size > SPAN_SPILL_MAX_SIZE) {
        return 0;
    }
    *offset_p       = span_spill.end;
    span_spill.end += size;
    return 1;
}

static void span_spill_free_extent(uint64_t offset, uint64_t size)
{
    span_spill_extent_t *list = span_spill.free, *grown;
    size_t i, n = span_spill.num_free;

    for (i = 0; (i < n) && (list[i].offset < offset); ++i) {
    }
    if ((i > 0) && (list[i - 1].offset + list[i - 1].size == offset)) {
        list[i - 1].size += size; /* joins the one before */
        if ((i < n) && (offset + size == list[i].offset)) {
            list[i - 1].size += list[i].size;
            memmove(&list[i], &list[i + 1], (--span_spill.num_free - i) *
                                            sizeof(*list));
        }
        return;
    }
    if ((i < n) && (offset + size == list[i].offset)) {
        list[i].offset = offset;
        list[i].size  += size;
        return;
    }
    grown = realloc(list, (n + 1) * sizeof(*list));
    if (grown == NULL) {
        return; /* the extent is lost to reuse, nothing else */
    }
    memmove(&grown[i + 1], &grown[i], (n - i) * sizeof(*grown));
    grown[i].offset = offset;
    grown[i].size   = size;
    span_spill.free = grown;
    ++span_spill.num_free;
}

static uint64_t span_spill_slot_size(uint32_t n, size_t K)
{
    uint64_t size = sizeof(span_spill_slot_t) + ((uint64_t)n * K);

    return (size + SPAN_SPILL_ALIGN - 1) & ~(uint64_t)(SPAN_SPILL_ALIGN - 1);
}

ucs_status_t span_spill_put(const void *keys, uint32_t n, size_t K,
                            span_rkey_spill_t *spill)
{
    uint64_t size = span_spill_slot_size(n, K);
    span_spill_slot_t slot;
    ucs_status_t status;
    uint64_t offset;

    pthread_mutex_lock(&span_spill.lock);
    status = span_spill_arena();
    if (status != UCS_OK) {
        goto out;
    }
    if (!span_spill_alloc(size, &offset)) {
        ucs_error("span spill: no room for %u keys of %zu bytes: the arena "
                  "holds %lu bytes at most (deregister unused regions)", n, K,
                  SPAN_SPILL_MAX_SIZE);
        status = UCS_ERR_EXCEEDS_LIMIT;
        goto out;
    }

    slot.seq      = ++span_spill.seq;
    slot.n        = n;
    slot.key_size = K;
    if (!span_spill_write(keys, (size_t)n * K, offset + sizeof(slot)) ||
        !span_spill_write(&slot, sizeof(slot), offset)) {
        ucs_error("span spill: cannot write %u keys at offset %" PRIu64
                  ": %m", n, offset);
        span_spill_free_extent(offset, size);
        status = UCS_ERR_IO_ERROR;
        goto out;
    }

    spill->pid      = span_spill.pid;
    spill->pid_ns   = span_peer_pid_ns();
    spill->fd       = span_spill.fd;
    spill->arena_id = span_spill.id;
    spill->offset   = offset;
    spill->seq      = slot.seq;
    spill->keys_sum = span_hash_fnv(keys, (size_t)n * K);
out:
    pthread_mutex_unlock(&span_spill.lock);
    return status;
}

void span_spill_remove(const span_rkey_spill_t *spill)
{
    span_spill_slot_t slot, cleared = {0};

    pthread_mutex_lock(&span_spill.lock);
    if (spill->pid != (uint32_t)span_spill.pid) {
        ucs_debug("span spill: slot at offset %" PRIu64 " of arena 0x%"
                  PRIx64 " is process %u's, which this one was forked from: "
                  "left to it", spill->offset, spill->arena_id, spill->pid);
    } else if ((spill->arena_id != span_spill.id) ||
               (pread(span_spill.fd, &slot, sizeof(slot), spill->offset) !=
                sizeof(slot)) || (slot.seq != spill->seq)) {
        ucs_error("span spill: slot at offset %" PRIu64 " (seq %" PRIu64
                  ") of arena 0x%" PRIx64 " is not this process's to release",
                  spill->offset, spill->seq, spill->arena_id);
    } else if (!span_spill_write(&cleared, sizeof(cleared), spill->offset)) {
        ucs_error("span spill: cannot release the slot at offset %" PRIu64
                  ": %m", spill->offset);
    } else {
        span_spill_free_extent(spill->offset,
                               span_spill_slot_size(slot.n, slot.key_size));
    }
    pthread_mutex_unlock(&span_spill.lock);
}

static int span_spill_read(int fd, void *buf, size_t size, uint64_t offset)
{
    return pread(fd, buf, size, offset) == (ssize_t)size;
}

static ucs_status_t span_spill_read_slot(int fd, const span_rkey_spill_t *spill,
                                         uint32_t n, size_t K)
{
    span_spill_slot_t slot;

    if (!span_spill_read(fd, &slot, sizeof(slot), spill->offset) ||
        (slot.seq != spill->seq) || (slot.n != n) || (slot.key_size != K)) {
        ucs_error("span spill: slot at offset %" PRIu64 " of process %u is "
                  "not the one the rkey names (seq %" PRIu64 ", %u keys of "
                  "%zu bytes): the region was deregistered", spill->offset,
                  spill->pid, spill->seq, n, K);
        return UCS_ERR_INVALID_PARAM;
    }
    return UCS_OK;
}

/* Whether what fd (taken from path, O_PATH) is is the memfd of a spill
 * arena */
static ucs_status_t span_spill_check_arena(int fd, const char *path)
{
    char link[PATH_MAX];
    mode_t mode;

    if (!span_memfd_is(&span_spill_kind, fd, link, sizeof(link), &mode)) {
        ucs_error("span spill: %s is not a spill arena: it is '%s', of mode "
                  "0%o", path, link, (unsigned)mode);
        return UCS_ERR_INVALID_PARAM;
    }
    return UCS_OK;
}

ucs_status_t span_spill_fetch(const span_rkey_spill_t *spill, uint32_t n,
                              size_t K, void *keys)
{
    char path[64];
    ucs_status_t status;
    int opath, fd;

    status = span_peer_check(spill->pid, spill->pid_ns, spill->fd,
                             "the spill arena");
    if (status != UCS_OK) {
        return status;
    }

    opath = span_peer_fd_path(spill->pid, spill->fd, path, sizeof(path));
    if (opath < 0) {
        ucs_error("span spill: cannot take %s to read %u keys: %m (is the "
                  "peer on another node, or not dumpable?)", path, n);
        return UCS_ERR_UNREACHABLE;
    }

    status = span_spill_check_arena(opath, path);
    if (status != UCS_OK) {
        close(opath);
        return status;
    }

    fd = span_peer_fd_reopen(opath);
    close(opath);
    if (fd < 0) {
        ucs_error("span spill: cannot open %s to read %u keys: %m", path, n);
        return UCS_ERR_UNREACHABLE;
    }

    status = UCS_ERR_INVALID_PARAM;
    if (!span_memfd_header_is(&span_spill_kind, fd, spill->arena_id)) {
        ucs_error("span spill: %s is not the arena 0x%" PRIx64 " the rkey "
                  "names (the process or descriptor was recycled)", path,
                  spill->arena_id);
        goto out;
    }

    status = span_spill_read_slot(fd, spill, n, K);
    if (status != UCS_OK) {
        goto out;
    }
    if (!span_spill_read(fd, keys, (size_t)n * K,
                         spill->offset + sizeof(span_spill_slot_t)) ||
        (span_hash_fnv(keys, (size_t)n * K) != spill->keys_sum)) {
        ucs_error("span spill: the %u keys at offset %" PRIu64 " of %s do "
                  "not match the rkey's checksum 0x%x", n, spill->offset,
                  path, spill->keys_sum);
        status = UCS_ERR_INVALID_PARAM;
        goto out;
    }
    status = span_spill_read_slot(fd, spill, n, K); /* not released meanwhile */
out:
    close(fd);
    return status;
}
