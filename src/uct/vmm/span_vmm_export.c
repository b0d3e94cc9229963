/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Shared VMM exports and the export table (span_vmm_export.h).
 *
 * Under one mutex, which memory events take too (an unmap withdraws the
 * exports of its units): nothing under it allocates, frees or unmaps, so a
 * handler never waits on its own thread. Exports are found by buffer id
 * through fixed buckets, and events skip everything outside the span of
 * the units exported. fork() takes the lock around it (base/span_fork.h),
 * so the child starts from a consistent state with the lock free.
 */
#include "span_vmm_export.h"
#include "base/span_fork.h"
#include "base/span_memfd.h"
#include "base/span_peer.h"

#include <ucs/datastruct/hlist.h>
#include <ucs/datastruct/list.h>
#include <ucs/debug/log_def.h>
#include <ucs/sys/compiler_def.h>
#include <ucs/sys/math.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define SPAN_VMM_TABLE_FIRST 64
#define SPAN_VMM_TABLE_GROW  (64 * 1024)
#define SPAN_VMM_BUCKETS_LOG 10

/* The table's memfd and header (base/span_memfd.h) */
static const span_memfd_kind_t span_vmm_table_kind = {
    .name  = "ucx-span-vmm",
    .magic = 0x454c424154505353ull, /* "SSPTABLE" */
    .log   = "span vmm export",
    .what  = "export table"
};

typedef struct {
    uint64_t serial; /* 0: not an export */
    uint64_t size;
} span_vmm_table_entry_t;

struct span_vmm_export {
    ucs_hlist_link_t by_id;
    ucs_list_link_t  list;
    int              listed;   /* withdrawn: no longer */
    unsigned         refcount;
    uint64_t         id;       /* buffer id of the unit */
    uint64_t         base;
    uint64_t         size;
    uint64_t         serial;
    int              fd;
};

static struct {
    pthread_mutex_t  lock;
    int              table;     /* memfd, or -1 before the first export */
    uint64_t         table_id;
    uint64_t         table_size;
    uint64_t         serial;
    uint64_t         lo, hi;    /* span of the listed units */
    ucs_list_link_t  list;
    ucs_hlist_head_t by_id[1u << SPAN_VMM_BUCKETS_LOG];
} span_vmm_exports = {
    .lock  = PTHREAD_MUTEX_INITIALIZER,
    .table = -1,
    .lo    = UINT64_MAX,
    .list  = {&span_vmm_exports.list, &span_vmm_exports.list}
};

/* The child forgets the parent's exports without withdrawing them: the
 * table memfd is shared across fork, and clearing an entry there would
 * withdraw the parent's export from the parent's importers. It closes its
 * copies of the descriptors (its own) now, while their numbers still name
 * them, and makes a table of its own at its first export. An inherited
 * export that a registration still holds is freed at its last release. */
static void span_vmm_exports_fork_child(void)
{
    span_vmm_export_t *export;
    size_t i;

    ucs_list_for_each(export, &span_vmm_exports.list, list) {
        close(export->fd);
        export->listed = 0;
    }
    ucs_list_head_init(&span_vmm_exports.list);
    for (i = 0; i < ucs_static_array_size(span_vmm_exports.by_id); ++i) {
        ucs_hlist_head_init(&span_vmm_exports.by_id[i]);
    }
    if (span_vmm_exports.table >= 0) {
        close(span_vmm_exports.table);
    }
    span_vmm_exports.table      = -1;
    span_vmm_exports.table_size = 0;
    span_vmm_exports.lo         = UINT64_MAX;
    span_vmm_exports.hi         = 0;
}

static const span_fork_handlers_t span_vmm_exports_fork = {
    .lock  = &span_vmm_exports.lock,
    .child = span_vmm_exports_fork_child
};

static void UCS_F_CTOR span_vmm_exports_fork_register(void)
{
    span_fork_register(SPAN_FORK_VMM_EXPORT, &span_vmm_exports_fork);
}

static ucs_hlist_head_t *span_vmm_export_bucket(uint64_t id)
{
    return &span_vmm_exports.by_id[(id * 0x9e3779b97f4a7c15ull) >>
                                        (64 - SPAN_VMM_BUCKETS_LOG)];
}

static uint64_t span_vmm_table_offset(int fd)
{
    return SPAN_VMM_TABLE_FIRST +
           ((uint64_t)fd * sizeof(span_vmm_table_entry_t));
}

static int span_vmm_table_write(int fd, uint64_t serial, uint64_t size)
{
    span_vmm_table_entry_t entry = {serial, size};

    return pwrite(span_vmm_exports.table, &entry, sizeof(entry),
                  span_vmm_table_offset(fd)) == sizeof(entry);
}

/* The table, made at the first export and grown to hold fd's entry; the
 * lock is held */
static ucs_status_t span_vmm_table_reserve(int fd)
{
    uint64_t need = span_vmm_table_offset(fd + 1);
    ucs_status_t status;
    uint64_t size;

    if (span_vmm_exports.table < 0) {
        status = span_memfd_create(&span_vmm_table_kind,
                                   F_SEAL_SHRINK | F_SEAL_SEAL,
                                   &span_vmm_exports.table,
                                   &span_vmm_exports.table_id);
        if (status != UCS_OK) {
            return status;
        }
        span_vmm_exports.table_size = 0;
    }
    if (need <= span_vmm_exports.table_size) {
        return UCS_OK;
    }
    size = ((need + SPAN_VMM_TABLE_GROW - 1) / SPAN_VMM_TABLE_GROW) *
           SPAN_VMM_TABLE_GROW;
    if (ftruncate(span_vmm_exports.table, size) != 0) {
        ucs_error("span vmm export: cannot grow the export table to %" PRIu64
                  " bytes for descriptor %d: %m", size, fd);
        return UCS_ERR_NO_MEMORY;
    }
    span_vmm_exports.table_size = size;
    return UCS_OK;
}

static void span_vmm_export_key(const span_vmm_export_t *export,
                                span_vmm_key_t *key)
{
    key->magic    = SPAN_CUDA_VMM_MAGIC;
    key->pid      = getpid();
    key->fd       = export->fd;
    key->table_fd = span_vmm_exports.table;
    key->size     = export->size;
    key->pid_ns   = span_peer_pid_ns();
    key->serial   = export->serial;
    key->table_id = span_vmm_exports.table_id;
}

/* The listed export of the unit, with one more reference; the lock is
 * held */
static span_vmm_export_t *span_vmm_export_find(uint64_t id,
                                               uint64_t base,
                                               uint64_t size)
{
    span_vmm_export_t *export;

    ucs_hlist_for_each(export, span_vmm_export_bucket(id), by_id) {
        if ((export->id == id) && (export->base == base) &&
            (export->size == size)) {
            ++export->refcount;
            return export;
        }
    }
    return NULL;
}

/* Lists a new export under a new serial; the lock is held */
static ucs_status_t span_vmm_export_list(span_vmm_export_t *export)
{
    ucs_status_t status = span_vmm_table_reserve(export->fd);

    if (status != UCS_OK) {
        return status;
    }
    export->serial = ++span_vmm_exports.serial;
    if (!span_vmm_table_write(export->fd, export->serial, export->size)) {
        ucs_error("span vmm export: cannot write the export table: %m");
        return UCS_ERR_IO_ERROR;
    }
    export->refcount = 1;
    export->listed   = 1;
    ucs_hlist_add_tail(span_vmm_export_bucket(export->id),
                       &export->by_id);
    ucs_list_add_tail(&span_vmm_exports.list, &export->list);
    span_vmm_exports.lo = ucs_min(span_vmm_exports.lo, export->base);
    span_vmm_exports.hi = ucs_max(span_vmm_exports.hi,
                                  export->base + export->size);
    return UCS_OK;
}

/* Clears its table entry, then closes it; the lock is held */
static void span_vmm_export_withdraw(span_vmm_export_t *export)
{
    if (!span_vmm_table_write(export->fd, 0, 0)) {
        ucs_warn("span vmm export: cannot clear descriptor %d in the export "
                 "table (%m): an importer's key of it is refused by its "
                 "serial once the number is used again", export->fd);
    }
    close(export->fd);
    ucs_hlist_del(span_vmm_export_bucket(export->id), &export->by_id);
    ucs_list_del(&export->list);
    export->listed = 0;
    if (ucs_list_is_empty(&span_vmm_exports.list)) {
        /* A process that exports nothing keeps no descriptor: the next
         * export makes a table with a new id, and a key of this one is
         * refused by it (its importers' views hold only cleared entries) */
        close(span_vmm_exports.table);
        span_vmm_exports.table      = -1;
        span_vmm_exports.table_size = 0;
        span_vmm_exports.lo         = UINT64_MAX;
        span_vmm_exports.hi         = 0;
    }
}

ucs_status_t span_vmm_export_get(const span_vmm_export_ops_t *ops,
                                 uint64_t base, uint64_t size,
                                 span_vmm_key_t *key,
                                 span_vmm_export_t **export_p)
{
    span_vmm_export_t *export, *shared;
    ucs_status_t status;
    uint64_t id;
    int fd;

    if (ops->buffer_id(base, &id) != UCS_OK) {
        return UCS_ERR_UNSUPPORTED;
    }
    pthread_mutex_lock(&span_vmm_exports.lock);
    shared = span_vmm_export_find(id, base, size);
    if (shared != NULL) {
        span_vmm_export_key(shared, key);
    }
    pthread_mutex_unlock(&span_vmm_exports.lock);
    if (shared != NULL) {
        *export_p = shared;
        return UCS_OK;
    }

    export = calloc(1, sizeof(*export));
    if (export == NULL) {
        ucs_error("span vmm export: no memory to export a unit (%zu bytes)",
                  sizeof(*export));
        return UCS_ERR_NO_MEMORY;
    }
    status = ops->export_fd(base, &fd);
    if (status != UCS_OK) {
        free(export);
        return status;
    }
    /* a driver's export takes no flags and may come inheritable (CUDA's
     * does): a program this process executes must not hold the unit */
    if (fcntl(fd, F_SETFD, FD_CLOEXEC) != 0) {
        ucs_error("span vmm export: cannot make the export %d of the unit at "
                  "0x%" PRIx64 " close-on-exec: %m", fd, base);
        close(fd);
        free(export);
        return UCS_ERR_IO_ERROR;
    }
    export->id   = id;
    export->base = base;
    export->size = size;
    export->fd   = fd;
    pthread_mutex_lock(&span_vmm_exports.lock);
    /* another thread may have exported the unit meanwhile */
    shared = span_vmm_export_find(id, base, size);
    if (shared == NULL) {
        status = span_vmm_export_list(export);
        shared = (status == UCS_OK) ? export : NULL;
    }
    if (shared != NULL) {
        span_vmm_export_key(shared, key);
    }
    pthread_mutex_unlock(&span_vmm_exports.lock);
    if (shared != export) {
        close(fd);
        free(export);
    }
    *export_p = shared;
    return status;
}

void span_vmm_export_put(span_vmm_export_t *export)
{
    int last;

    pthread_mutex_lock(&span_vmm_exports.lock);
    last = (--export->refcount == 0);
    if (last && export->listed) {
        span_vmm_export_withdraw(export);
    }
    pthread_mutex_unlock(&span_vmm_exports.lock);
    if (last) {
        free(export);
    }
}

void span_vmm_export_invalidate(uint64_t start, uint64_t length)
{
    uint64_t end = (length > UINT64_MAX - start) ? UINT64_MAX :
                                                   start + length;
    span_vmm_export_t *export, *tmp;

    pthread_mutex_lock(&span_vmm_exports.lock);
    if ((end > span_vmm_exports.lo) && (start < span_vmm_exports.hi)) {
        ucs_list_for_each_safe(export, tmp, &span_vmm_exports.list,
                               list) {
            if ((start < export->base + export->size) &&
                (export->base < end)) {
                ucs_debug("span vmm export: [0x%" PRIx64 ", +%" PRIu64 ") is "
                          "unmapped: export %" PRIu64 " (descriptor %d) "
                          "withdrawn", export->base, export->size,
                          export->serial, export->fd);
                span_vmm_export_withdraw(export);
            }
        }
    }
    pthread_mutex_unlock(&span_vmm_exports.lock);
}

static int span_vmm_table_read(int table, int fd,
                               span_vmm_table_entry_t *entry)
{
    return pread(table, entry, sizeof(*entry),
                 span_vmm_table_offset(fd)) == sizeof(*entry);
}

ucs_status_t span_vmm_table_open(int pidfd, const span_vmm_key_t *key,
                                 int *table_p)
{
    char link[PATH_MAX];
    mode_t mode;
    int table;

    table = span_peer_pidfd_getfd(pidfd, key->table_fd);
    if ((table < 0) && (errno != EBADF)) {
        ucs_error("span vmm export: cannot take the export table (descriptor "
                  "%u) of process %u: %m", key->table_fd, key->pid);
        return UCS_ERR_UNREACHABLE;
    }
    /* an exporter closes its table when it exports nothing: a key of a
     * table that is gone names memory no longer exported */
    if ((table < 0) ||
        !span_memfd_is(&span_vmm_table_kind, table, link, sizeof(link),
                       &mode) ||
        !span_memfd_header_is(&span_vmm_table_kind, table, key->table_id)) {
        ucs_error("span vmm export: descriptor %u of process %u ('%s') is not "
                  "the export table 0x%" PRIx64 " the key names any more (its "
                  "exports were withdrawn, or the process was recycled)",
                  key->table_fd, key->pid, (table < 0) ? "closed" : link,
                  key->table_id);
        if (table >= 0) {
            close(table);
        }
        return UCS_ERR_INVALID_ADDR;
    }
    *table_p = table;
    return UCS_OK;
}

/* Whether the exporter's table says fd is the key's export */
static int span_vmm_table_says(int table, const span_vmm_key_t *key)
{
    span_vmm_table_entry_t entry;

    return span_vmm_table_read(table, key->fd, &entry) &&
           (entry.serial == key->serial) && (entry.size == key->size);
}

ucs_status_t span_vmm_table_take(int pidfd, int table,
                                 const span_vmm_key_t *key,
                                 int *fd_p)
{
    int fd = -1;

    if (span_vmm_table_says(table, key)) {
        fd = span_peer_pidfd_getfd(pidfd, key->fd);
        if (fd < 0) {
            ucs_error("span vmm export: pidfd_getfd(fd %u of process %u) "
                      "failed: %m (ptrace attach rights over the exporter "
                      "are needed, as for cuda_ipc)", key->fd, key->pid);
            return UCS_ERR_UNREACHABLE;
        }
    }
    /* the entry is cleared before the descriptor closes: still there after
     * the copy, it was that export's when copied */
    if ((fd >= 0) && span_vmm_table_says(table, key)) {
        *fd_p = fd;
        return UCS_OK;
    }
    if (fd >= 0) {
        close(fd);
    }
    ucs_error("span vmm export: descriptor %u of process %u is not export %"
              PRIu64 " of %" PRIu64 " bytes any more (deregistered or "
              "unmapped since the rkey was packed)", key->fd, key->pid,
              key->serial, key->size);
    return UCS_ERR_INVALID_ADDR;
}

ucs_status_t span_vmm_table_view_open(const span_vmm_key_t *keys,
                                      uint32_t n,
                                      span_vmm_table_view_t *view)
{
    ucs_status_t status = UCS_ERR_UNREACHABLE;
    uint32_t max_fd     = 0, i;
    struct stat st;
    int pidfd, table;
    size_t length;
    void *base;

    for (i = 0; i < n; ++i) {
        max_fd = ucs_max(max_fd, keys[i].fd);
    }
    length = span_vmm_table_offset(max_fd + 1);
    pidfd  = span_peer_pidfd_open(keys[0].pid);
    if (pidfd < 0) {
        return UCS_ERR_UNREACHABLE;
    }
    if (span_vmm_table_open(pidfd, &keys[0], &table) != UCS_OK) {
        goto out_pidfd;
    }
    /* sealed: the exporter cannot shrink it under the mapping (a read past
     * a memfd's end is SIGBUS) */
    if (!span_memfd_sealed(table, F_SEAL_SHRINK) ||
        (fstat(table, &st) != 0) || ((uint64_t)st.st_size < length)) {
        ucs_debug("span vmm export: the export table of process %u is not "
                  "sealed or shorter than %zu bytes", keys[0].pid, length);
        goto out_table;
    }
    base = mmap(NULL, length, PROT_READ, MAP_SHARED, table, 0);
    if (base == MAP_FAILED) {
        goto out_table;
    }
    view->base   = base;
    view->length = length;
    status       = UCS_OK;
out_table:
    close(table);
out_pidfd:
    close(pidfd);
    return status;
}

void span_vmm_table_view_close(span_vmm_table_view_t *view)
{
    if (view->base != NULL) {
        munmap((void*)view->base, view->length);
        view->base = NULL;
    }
}

int span_vmm_table_view_holds(const span_vmm_table_view_t *view,
                              const span_vmm_key_t *key)
{
    const volatile span_vmm_table_entry_t *entry;
    uint64_t offset = span_vmm_table_offset(key->fd);

    if ((view->base == NULL) ||
        (offset + sizeof(*entry) > view->length)) {
        return 0;
    }
    entry = (const volatile span_vmm_table_entry_t*)
            ((const uint8_t*)view->base + offset);
    /* the exporter clears the serial first: a torn read never matches
     * another export's serial and size both */
    return (entry->serial == key->serial) && (entry->size == key->size);
}
