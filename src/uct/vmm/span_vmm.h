/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * VMM handles that the inner transport cannot export, exported by span.
 *
 * cuda_ipc publishes VMM memory of POSIX-fd handles (PyTorch's expandable
 * segments, cuMemCreate pools) only where UCX was built with pidfd_getfd;
 * the PyPI wheel was not, and its cuda_ipc calls such memory "no IPC", so
 * UCP stages it through host memory at under 1 GB/s. For such units (and
 * the ROCm twins' likewise, span_md_rocm.h) span exports the handle itself
 * (one POSIX fd per unit, kept open by the exporter until deregistration),
 * the importer takes the fds with pidfd_getfd, maps the units back to back
 * into one range (span_vmm_import.h), and the twin's zcopy ops copy through
 * that mapping with the driver (span_cuda_copy.h, span_rocm_copy.h).
 * pidfd_getfd needs ptrace attach rights over the exporter, as cuda_ipc's
 * own path does.
 *
 * Each unit is exported once however many registrations cover it, and
 * withdrawn at the last deregistration or when the memory is unmapped
 * (span_vmm_export.h); the exporter's export table tells an importer
 * whether a descriptor number still is the export its key names.
 *
 * A unit's key (span_vmm_key_t, in this process's byte order: keys
 * cross to a peer only inside a span rkey, span_rkey.c, or a spill slot of
 * the same node):
 *   magic     SPAN_CUDA_VMM_MAGIC, as every export makes it, or
 *             SPAN_ROCM_VMM_MAGIC, as an importer marks the keys of a
 *             rocm_ipc+ rkey (span_vmm_keys_mark): the driver that
 *             imports the unit
 *   pid       the exporter
 *   fd        its descriptor of the unit's handle
 *   table_fd  its descriptor of its export table
 *   size      of the unit, as the rkey's geometry makes it
 *   pid_ns    the exporter's PID namespace with its host
 *             (span_peer_pid_ns): pid and the descriptors are
 *             checked (span_peer_check) before any is looked up
 *   serial    of the export, unique in the exporter: what its table says
 *             of fd while the unit is exported
 *   table_id  random, in the table's header: a recycled pid or table
 *             descriptor is refused
 */
#ifndef SPAN_VMM_H_
#define SPAN_VMM_H_

#include <stdint.h>

#define SPAN_CUDA_VMM_MAGIC 0x4d565053u /* "SPVM" */
#define SPAN_ROCM_VMM_MAGIC 0x52565053u /* "SPVR" */

typedef struct span_vmm_key {
    uint32_t magic;
    uint32_t pid;
    uint32_t fd;
    uint32_t table_fd;
    uint64_t size;
    uint64_t pid_ns;
    uint64_t serial;
    uint64_t table_id;
} span_vmm_key_t;

#define SPAN_VMM_KEY_SIZE sizeof(span_vmm_key_t)

/* Marks n keys as units of the driver of magic */
static inline void span_vmm_keys_mark(span_vmm_key_t *keys, uint32_t n,
                                      uint32_t magic)
{
    uint32_t i;

    for (i = 0; i < n; ++i) {
        keys[i].magic = magic;
    }
}

/* The exporter's units mapped into this process */
typedef struct span_vmm_map {
    uint64_t base;     /* local address of the extent's first byte */
    uint64_t length;
    int      device;   /* the device given access at import */
    uint64_t devices;  /* bit per device given access since */
    uint32_t pid;      /* the exporter, */
    uint64_t pid_ns;
    uint32_t keys_sum; /* and which of its units: FNV-1a 32 of their keys */
    int      rocm;     /* mapped by HIP: ROCm's copy engine serves it */
    /* a legacy IPC handle's (span_ipc_cache.h): no device but its own
     * copies through it (others go to the inner transport) */
    int      ipc;
    /* of a legacy IPC handle: the peer freed the memory (a new handle
     * overlaps it) while an rkey still names it; no op copies through it
     * (read atomically: the cache sets it under its lock) */
    int      revoked;
    /* ops queued through it that have not completed: the engine counts
     * them (atomically: engines of several ifaces share a mapping), and a
     * cache closes no mapping while they run */
    unsigned busy;
    /* the driver's calls that mapped it (span_vmm_import.h) */
    const struct span_vmm_import_ops *ops;
} span_vmm_map_t;

static inline int span_vmm_cmp(uint64_t a, uint64_t b)
{
    return (a > b) - (a < b);
}

/* Orders mappings by the exporter's units they map (not by where they are
 * mapped here): 0 where both map the same units */
static inline int span_vmm_compare(const span_vmm_map_t *a,
                                   const span_vmm_map_t *b)
{
    int result = span_vmm_cmp(a->pid_ns, b->pid_ns);

    if (result == 0) {
        result = span_vmm_cmp(a->pid, b->pid);
    }
    if (result == 0) {
        result = span_vmm_cmp(a->keys_sum, b->keys_sum);
    }
    return result;
}

#endif
