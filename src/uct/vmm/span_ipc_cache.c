/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The cache of a peer's cudaMalloc memory opened from its legacy IPC
 * handle.
 *
 * The packed cuda_ipc key (uct_cuda_ipc_rkey_t, UCX 1.19 to 1.23) is read
 * only where this release lays it out as follows, and every field found
 * is checked against the span rkey and the driver before it is used:
 *   0         handle type, 32 bits: 1 is a legacy IPC handle
 *   4 or 8    the handle, 64 bytes (8 from 1.22, whose union of handles
 *             gained a 64-bit member: the caller says where, from
 *             span_ucx_cuda_ipc_handle_offset)
 *   ...       the rest of cuda_ipc's handle record, to K - 40 (or K - 48)
 *   K - 40    pid, 32 bits (bit 31: a PID namespace follows, 1.21+), 4
 *             bytes of padding, the allocation's base (64 bits), its size
 *             (64 bits), the device's UUID (16 bytes): K bytes in all
 *   K - 48    the same, where the pid has bit 31: the PID namespace
 *             (64 bits) ends the key (read first: without a namespace,
 *             K - 48 is the low half of cuda_ipc's buffer id)
 * The bytes before the pid (the handle and cuda_ipc's buffer id) and the
 * pid tell one allocation of one process from another.
 */
#ifdef HAVE_CONFIG_H
#  include "config.h"
#endif

#include "span_ipc_cache.h"
#include "vendor/span_libcuda.h"
#include "base/span_fork.h"
#include "base/span_peer.h"

#include <ucs/datastruct/list.h>
#include <ucs/debug/log_def.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SPAN_IPC_HANDLE_LEGACY 1u
#define SPAN_IPC_PID_NS_FLAG   (1u << 31)
#define SPAN_IPC_TAIL          40 /* pid to the key's end, without a PID
                                   * namespace */
/* The inode of the kernel's initial PID namespace, where cuda_ipc packs no
 * namespace (UCX's default one) */
#define SPAN_IPC_PID_NS_INIT   4026531836ull
/* The CUDA release from which the driver counts the opens of one handle
 * in one context (earlier ones may answer CUDA_ERROR_ALREADY_MAPPED to the
 * second, which cuda_ipc turns into a fatal error) */
#define SPAN_IPC_DRIVER_MIN    12000

/* What a cuda_ipc key says of the allocation */
typedef struct span_ipc_key {
    const uint8_t  *ident;      /* the handle record: which allocation */
    size_t         ident_size;
    CUipcMemHandle handle;
    uint32_t       pid;
    uint64_t       pid_ns;      /* 0: the exporter's is the default one */
    uint64_t       base;        /* the allocation in the exporter */
    uint64_t       size;
} span_ipc_key_t;

typedef struct span_ipc_entry {
    span_vmm_map_t  map;       /* what rkeys point to: first */
    ucs_list_link_t list;      /* in the cache, least recently used first */
    unsigned        refcount;  /* rkeys that use it */
    unsigned        forks;     /* span_ipc_cache_forks when opened */
    int             self;      /* this process's own memory: not opened */
    int             closed;    /* its handle was closed (revoked, below) */
    CUdeviceptr     mapped;    /* the allocation's first byte here */
    uint64_t        ext_base;  /* the extent mapped, in the exporter */
    uint64_t        ext_length;
    uint64_t        alloc_base;
    uint64_t        alloc_size;
    size_t          ident_size;
    uint8_t         ident[];
} span_ipc_entry_t;

static UCS_LIST_HEAD(span_ipc_cache);
static unsigned        span_ipc_cache_idle; /* refcount 0 */
static pthread_mutex_t span_ipc_cache_lock = PTHREAD_MUTEX_INITIALIZER;
/* one more in a child than in its parent (span_vmm_cache.c does the same) */
static unsigned        span_ipc_cache_forks;

static void span_ipc_cache_fork_child(void)
{
    ++span_ipc_cache_forks;
}

static const span_fork_handlers_t span_ipc_cache_fork = {
    .lock  = &span_ipc_cache_lock,
    .child = span_ipc_cache_fork_child
};

static void UCS_F_CTOR span_ipc_cache_fork_register(void)
{
    span_fork_register(SPAN_FORK_IPC_CACHE, &span_ipc_cache_fork);
}

static uint32_t span_ipc_u32(const uint8_t *p)
{
    uint32_t v;

    memcpy(&v, p, sizeof(v));
    return v;
}

static uint64_t span_ipc_u64(const uint8_t *p)
{
    uint64_t v;

    memcpy(&v, p, sizeof(v));
    return v;
}

/* Reads the key with the pid at tail bytes from its end: whether it reads
 * so, an allocation that holds the span rkey's extent (geom) */
static int span_ipc_key_read(const uint8_t *key, size_t key_size,
                             size_t tail, size_t offset,
                             const span_chunk_geom_t *geom, span_ipc_key_t *ik)
{
    const uint8_t *pid = key + key_size - tail;

    ik->pid        = span_ipc_u32(pid);
    ik->base       = span_ipc_u64(pid + 8);
    ik->size       = span_ipc_u64(pid + 16);
    ik->pid_ns     = (tail > SPAN_IPC_TAIL) ? span_ipc_u64(pid + 40) : 0;
    ik->ident      = key;
    ik->ident_size = key_size - tail;
    memcpy(&ik->handle, key + offset, sizeof(ik->handle));
    if (((ik->pid & SPAN_IPC_PID_NS_FLAG) != 0) != (tail > SPAN_IPC_TAIL)) {
        return 0;
    }
    ik->pid &= ~SPAN_IPC_PID_NS_FLAG;
    return (ik->base + ik->size > ik->base) && (geom->base >= ik->base) &&
           (geom->length <= ik->size) &&
           (geom->base - ik->base <= ik->size - geom->length);
}

/* The legacy handle a cuda_ipc key of this release carries, and the
 * allocation, which must hold the span rkey's extent (geom): the key is
 * read with a PID namespace (its pid flagged), then without (where a
 * namespace is, the base's low half reads as an unflagged pid);
 * UCS_ERR_UNSUPPORTED where it carries no legacy handle or reads neither
 * way. The driver has the last word (span_ipc_entry_open) */
static ucs_status_t span_ipc_key_parse(const uint8_t *key, size_t key_size,
                                       size_t offset,
                                       const span_chunk_geom_t *geom,
                                       span_ipc_key_t *ik)
{
    if ((offset == 0) ||
        (key_size < offset + sizeof(CUipcMemHandle) + SPAN_IPC_TAIL + 8) ||
        (span_ipc_u32(key) != SPAN_IPC_HANDLE_LEGACY)) {
        return UCS_ERR_UNSUPPORTED;
    }
    if (span_ipc_key_read(key, key_size, SPAN_IPC_TAIL + 8, offset, geom,
                          ik) ||
        span_ipc_key_read(key, key_size, SPAN_IPC_TAIL, offset, geom, ik)) {
        return UCS_OK;
    }
    ucs_debug("span ipc cache: a %zu-byte cuda_ipc key of a legacy handle "
              "(at byte %zu) names no allocation that holds the extent "
              "[0x%" PRIx64 ", +%" PRIu64 ")", key_size, offset, geom->base,
              geom->length);
    return UCS_ERR_UNSUPPORTED;
}

/* Whether the key names memory of this process */
static int span_ipc_key_self(const span_ipc_key_t *ik)
{
    if (ik->pid != (uint32_t)getpid()) {
        return 0;
    }
    /* the inode of this process's namespace, as cuda_ipc packs it */
    uint64_t own = (uint32_t)span_peer_pid_ns();

    return own == ((ik->pid_ns == 0) ? SPAN_IPC_PID_NS_INIT : ik->pid_ns);
}

static int span_ipc_entry_owned(const span_ipc_entry_t *entry)
{
    return entry->forks == span_ipc_cache_forks;
}

static int span_ipc_entry_is(const span_ipc_entry_t *entry,
                             const span_ipc_key_t *ik)
{
    return (entry->map.pid == ik->pid) && (entry->map.pid_ns == ik->pid_ns) &&
           (entry->ident_size == ik->ident_size) &&
           !memcmp(entry->ident, ik->ident, ik->ident_size);
}

/* Whether entry maps memory of the key's peer that the key's allocation
 * overlaps under another handle: memory the peer freed */
static int span_ipc_entry_stale(const span_ipc_entry_t *entry,
                                const span_ipc_key_t *ik)
{
    return (entry->map.pid == ik->pid) && (entry->map.pid_ns == ik->pid_ns) &&
           (entry->alloc_base < ik->base + ik->size) &&
           (ik->base < entry->alloc_base + entry->alloc_size) &&
           !span_ipc_entry_is(entry, ik);
}

/* Whether an entry no rkey uses can be closed: no copy goes through it
 * (a parent's copies are not the child's) */
static int span_ipc_entry_idle(const span_ipc_entry_t *entry)
{
    return (entry->refcount == 0) &&
           (!span_ipc_entry_owned(entry) ||
            (__atomic_load_n(&entry->map.busy, __ATOMIC_ACQUIRE) == 0));
}

/* Closes the handle, once (a child's inherited mapping is not its own) */
static void span_ipc_entry_unmap(span_ipc_entry_t *entry)
{
    if (!entry->self && !entry->closed && span_ipc_entry_owned(entry)) {
        if (span_libcuda_primary_push(entry->map.device) == CUDA_SUCCESS) {
            (void)SPAN_CUDA_CALL_LOG_ERR(cuIpcCloseMemHandle, entry->mapped);
            span_libcuda_primary_pop(entry->map.device);
        }
        span_libcuda_primary_release(entry->map.device); /* the open's */
    }
    entry->closed = 1;
}

static void span_ipc_entry_close(span_ipc_entry_t *entry)
{
    span_ipc_entry_unmap(entry);
    ucs_debug("span ipc cache: %s the %" PRIu64 "-byte allocation of "
              "process %u", span_ipc_entry_owned(entry) ? "closed" :
              "forgot the parent's mapping of", entry->alloc_size,
              entry->map.pid);
    free(entry);
}

/* Under the lock: takes entry out, to be closed by the caller unlocked */
static void span_ipc_entry_drop(span_ipc_entry_t *entry,
                                ucs_list_link_t *dropped)
{
    ucs_list_del(&entry->list);
    --span_ipc_cache_idle;
    ucs_list_add_tail(dropped, &entry->list);
}

static void span_ipc_close_dropped(ucs_list_link_t *dropped)
{
    span_ipc_entry_t *entry, *tmp;

    ucs_list_for_each_safe(entry, tmp, dropped, list) {
        span_ipc_entry_close(entry);
    }
}

/* Under the lock: what a key of ik (NULL: none) tells of entry. An
 * unused entry of the parent's, of memory the peer freed (stale beside ik)
 * or revoked is dropped; one still in use is revoked: no op copies
 * through it any more (the inner transport serves its rkeys, as natively),
 * and its handle is closed here once no copy through it runs, before
 * cuda_ipc opens the new handle. Whether entry is still in the cache */
static int span_ipc_entry_sweep(span_ipc_entry_t *entry,
                                const span_ipc_key_t *ik,
                                ucs_list_link_t *dropped)
{
    int stale = (ik != NULL) && span_ipc_entry_stale(entry, ik);

    if (span_ipc_entry_idle(entry) &&
        (!span_ipc_entry_owned(entry) || stale || entry->map.revoked)) {
        span_ipc_entry_drop(entry, dropped);
        return 0;
    }
    if (stale && span_ipc_entry_owned(entry)) {
        __atomic_store_n(&entry->map.revoked, 1, __ATOMIC_SEQ_CST);
    }
    if (entry->map.revoked && !entry->closed &&
        (__atomic_load_n(&entry->map.busy, __ATOMIC_SEQ_CST) == 0)) {
        ucs_debug("span ipc cache: the %" PRIu64 "-byte allocation of "
                  "process %u was freed while an rkey names it: closed",
                  entry->alloc_size, entry->map.pid);
        span_ipc_entry_unmap(entry);
    }
    return 1;
}

/* Under the lock: the entry of ik mapping the extent of geom (NULL: none
 * wanted) with one more reference, or NULL; every entry swept */
static span_ipc_entry_t *span_ipc_cache_lookup(const span_ipc_key_t *ik,
                                               const span_chunk_geom_t *geom,
                                               ucs_list_link_t *dropped)
{
    span_ipc_entry_t *entry, *tmp, *found = NULL;

    ucs_list_for_each_safe(entry, tmp, &span_ipc_cache, list) {
        if (span_ipc_entry_sweep(entry, ik, dropped) && (found == NULL) &&
            (geom != NULL) && span_ipc_entry_owned(entry) &&
            !entry->map.revoked && span_ipc_entry_is(entry, ik) &&
            (entry->ext_base == geom->base) &&
            (entry->ext_length == geom->length)) {
            found = entry;
        }
    }
    if ((found != NULL) && (found->refcount++ == 0)) {
        --span_ipc_cache_idle;
    }
    return found;
}

/* The device that opens a handle: that of the calling thread's context
 * (UCP unpacks rkeys where the application posts), or where the thread has
 * none, the first whose primary context is active (the application's); -1
 * where none is: opening would make a context on a device the
 * application does not use */
static int span_ipc_device(void)
{
    CUcontext ctx = NULL;
    unsigned flags;
    int dev, count, active;

    if ((SPAN_LIBCUDA_FUNC(UCS_LOG_LEVEL_DEBUG, cuCtxGetCurrent, &ctx) ==
         CUDA_SUCCESS) && (ctx != NULL)) {
        return (SPAN_LIBCUDA_FUNC(UCS_LOG_LEVEL_DEBUG, cuCtxGetDevice, &dev) ==
                CUDA_SUCCESS) ? dev : -1;
    }
    if (SPAN_LIBCUDA_FUNC(UCS_LOG_LEVEL_DEBUG, cuDeviceGetCount, &count) !=
        CUDA_SUCCESS) {
        return -1;
    }
    for (dev = 0; dev < count; ++dev) {
        if ((SPAN_LIBCUDA_FUNC(UCS_LOG_LEVEL_DEBUG, cuDevicePrimaryCtxGetState,
                               dev, &flags, &active) == CUDA_SUCCESS) &&
            active) {
            return dev;
        }
    }
    return -1;
}

/* Opens the handle in the primary context of entry's device, retained
 * while it is open; the driver must map an allocation of the key's size */
static ucs_status_t span_ipc_entry_open(span_ipc_entry_t *entry,
                                        const span_ipc_key_t *ik)
{
    CUdeviceptr base = 0;
    size_t size      = 0;
    CUcontext ctx;
    CUresult res;
    char buf[128];

    res = span_libcuda_primary_push(entry->map.device);
    if (res != CUDA_SUCCESS) {
        ucs_debug("span ipc cache: no primary context of device %d: %s",
                  entry->map.device, span_libcuda_error(res, buf, sizeof(buf)));
        return UCS_ERR_UNSUPPORTED;
    }
    res = SPAN_LIBCUDA_FUNC(UCS_LOG_LEVEL_DEBUG, cuIpcOpenMemHandle,
                            &entry->mapped, ik->handle,
                            CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    if (res == CUDA_SUCCESS) {
        if ((SPAN_LIBCUDA_FUNC(UCS_LOG_LEVEL_DEBUG, cuMemGetAddressRange,
                               &base, &size, entry->mapped) == CUDA_SUCCESS) &&
            (base == entry->mapped) && (size == ik->size)) {
            /* the context stays retained while the handle is open */
            (void)SPAN_CUDA_CALL_LOG_ERR(cuCtxPopCurrent, &ctx);
            return UCS_OK;
        }
        ucs_debug("span ipc cache: the handle of a %" PRIu64 "-byte "
                  "allocation of process %u opened %zu bytes at 0x%llx",
                  ik->size, ik->pid, size, (unsigned long long)base);
        (void)SPAN_CUDA_CALL_LOG_ERR(cuIpcCloseMemHandle, entry->mapped);
    }
    span_libcuda_primary_pop(entry->map.device);
    return UCS_ERR_UNSUPPORTED;
}

/* This process's own allocation the key names, used as it is: it must be
 * one, of the key's size, whose handle is the key's */
static ucs_status_t span_ipc_entry_self(span_ipc_entry_t *entry,
                                        const span_ipc_key_t *ik)
{
    CUipcMemHandle handle;
    CUdeviceptr base = 0;
    size_t size      = 0;
    int device;

    if ((SPAN_LIBCUDA_FUNC(UCS_LOG_LEVEL_DEBUG, cuPointerGetAttribute,
                           &device, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                           (CUdeviceptr)ik->base) != CUDA_SUCCESS) ||
        (span_libcuda_primary_push(device) != CUDA_SUCCESS)) {
        return UCS_ERR_UNSUPPORTED;
    }
    if ((SPAN_LIBCUDA_FUNC(UCS_LOG_LEVEL_DEBUG, cuMemGetAddressRange, &base,
                           &size, (CUdeviceptr)ik->base) != CUDA_SUCCESS) ||
        (SPAN_LIBCUDA_FUNC(UCS_LOG_LEVEL_DEBUG, cuIpcGetMemHandle, &handle,
                           base) != CUDA_SUCCESS)) {
        base = 0;
    }
    span_libcuda_primary_pop(device);
    if ((base != ik->base) || (size != ik->size) ||
        memcmp(&handle, &ik->handle, sizeof(handle))) {
        ucs_debug("span ipc cache: the key of this process's allocation "
                  "[0x%" PRIx64 ", +%" PRIu64 ") names none of its own",
                  ik->base, ik->size);
        return UCS_ERR_UNSUPPORTED;
    }
    entry->self       = 1;
    entry->map.device = device;
    entry->mapped     = base;
    return UCS_OK;
}

static ucs_status_t span_ipc_entry_new(const span_ipc_key_t *ik,
                                       const span_chunk_geom_t *geom,
                                       span_ipc_entry_t **entry_p)
{
    span_ipc_entry_t *entry;
    ucs_status_t status;
    int version = 0;

    if ((SPAN_LIBCUDA_FUNC(UCS_LOG_LEVEL_DEBUG, cuDriverGetVersion,
                           &version) != CUDA_SUCCESS) ||
        (version < SPAN_IPC_DRIVER_MIN)) {
        ucs_debug("span ipc cache: the CUDA driver (version %d) does not "
                  "share handles with cuda_ipc", version);
        return UCS_ERR_UNSUPPORTED;
    }
    entry = calloc(1, sizeof(*entry) + ik->ident_size);
    if (entry == NULL) {
        ucs_error("span ipc cache: no memory for a mapping of process %u",
                  ik->pid);
        return UCS_ERR_NO_MEMORY;
    }
    entry->map.pid    = ik->pid;
    entry->map.pid_ns = ik->pid_ns;
    if (span_ipc_key_self(ik)) {
        status = span_ipc_entry_self(entry, ik);
    } else {
        entry->map.device = span_ipc_device();
        status            = (entry->map.device < 0) ? UCS_ERR_UNSUPPORTED :
                            span_ipc_entry_open(entry, ik);
    }
    if (status != UCS_OK) {
        free(entry);
        return status;
    }
    entry->map.ipc     = 1;
    entry->map.devices = 1ull << entry->map.device;
    entry->map.base    = entry->mapped + (geom->base - ik->base);
    entry->map.length  = geom->length;
    entry->ext_base    = geom->base;
    entry->ext_length  = geom->length;
    entry->alloc_base  = ik->base;
    entry->alloc_size  = ik->size;
    entry->refcount    = 1;
    entry->forks       = span_ipc_cache_forks;
    entry->ident_size  = ik->ident_size;
    memcpy(entry->ident, ik->ident, ik->ident_size);
    ucs_debug("span ipc cache: %s the %" PRIu64 "-byte allocation of "
              "process %u on device %d", entry->self ? "uses" : "opened",
              ik->size, ik->pid, entry->map.device);
    *entry_p = entry;
    return UCS_OK;
}

static void span_ipc_cache_prepare(const uint8_t *key, size_t key_size,
                                   size_t offset,
                                   const span_chunk_geom_t *geom)
{
    UCS_LIST_HEAD(dropped);
    span_ipc_key_t ik;

    if (span_ipc_key_parse(key, key_size, offset, geom, &ik) != UCS_OK) {
        return;
    }
    pthread_mutex_lock(&span_ipc_cache_lock);
    span_ipc_cache_lookup(&ik, NULL, &dropped);
    pthread_mutex_unlock(&span_ipc_cache_lock);
    span_ipc_close_dropped(&dropped);
}

static ucs_status_t span_ipc_cache_get(const uint8_t *key, size_t key_size,
                                       size_t offset,
                                       const span_chunk_geom_t *geom,
                                       span_vmm_map_t **map_p)
{
    UCS_LIST_HEAD(dropped);
    span_ipc_entry_t *entry;
    span_ipc_key_t ik;
    ucs_status_t status;

    status = span_ipc_key_parse(key, key_size, offset, geom, &ik);
    if (status != UCS_OK) {
        return status;
    }

    pthread_mutex_lock(&span_ipc_cache_lock);
    entry = span_ipc_cache_lookup(&ik, geom, &dropped);
    pthread_mutex_unlock(&span_ipc_cache_lock);
    span_ipc_close_dropped(&dropped);
    if (entry == NULL) {
        /* another extent of an allocation mapped already opens it again:
         * the driver counts the opens */
        status = span_ipc_entry_new(&ik, geom, &entry);
        if (status != UCS_OK) {
            return status;
        }
        pthread_mutex_lock(&span_ipc_cache_lock);
        ucs_list_add_tail(&span_ipc_cache, &entry->list);
        pthread_mutex_unlock(&span_ipc_cache_lock);
    }
    *map_p = &entry->map;
    return UCS_OK;
}

static void span_ipc_cache_put(span_vmm_map_t *map)
{
    span_ipc_entry_t *entry = ucs_container_of(map, span_ipc_entry_t, map);
    span_ipc_entry_t *lru;
    UCS_LIST_HEAD(dropped);

    pthread_mutex_lock(&span_ipc_cache_lock);
    if (--entry->refcount == 0) {
        /* most recently used last */
        ucs_list_del(&entry->list);
        ucs_list_add_tail(&span_ipc_cache, &entry->list);
        ++span_ipc_cache_idle;
        if (!span_ipc_entry_sweep(entry, NULL, &dropped)) {
            /* revoked, and no copy through it runs */
        } else if (span_ipc_cache_idle > SPAN_IPC_CACHE_IDLE) {
            ucs_list_for_each(lru, &span_ipc_cache, list) {
                if (span_ipc_entry_idle(lru)) {
                    span_ipc_entry_drop(lru, &dropped);
                    break;
                }
            }
        }
    }
    pthread_mutex_unlock(&span_ipc_cache_lock);
    span_ipc_close_dropped(&dropped);
}

static void span_ipc_cache_purge(void)
{
    span_ipc_entry_t *entry, *tmp;
    UCS_LIST_HEAD(dropped);

    pthread_mutex_lock(&span_ipc_cache_lock);
    ucs_list_for_each_safe(entry, tmp, &span_ipc_cache, list) {
        if (span_ipc_entry_sweep(entry, NULL, &dropped) &&
            span_ipc_entry_idle(entry)) {
            span_ipc_entry_drop(entry, &dropped);
        }
    }
    pthread_mutex_unlock(&span_ipc_cache_lock);
    span_ipc_close_dropped(&dropped);
}

const span_ipc_cache_ops_t span_ipc_cache_ops = {
    .prepare = span_ipc_cache_prepare,
    .get     = span_ipc_cache_get,
    .put     = span_ipc_cache_put,
    .purge   = span_ipc_cache_purge
};
