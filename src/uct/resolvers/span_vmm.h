/*
 * VMM units span exports itself, as both of its VMM resolvers name them
 * (span_cuda_vmm.h, span_rocm_vmm.h): a unit's key, which a peer sends, and
 * a mapping of a peer's units in this process.
 *
 * A unit's key (span_vmm_key_t, in this process's byte order: keys
 * cross to a peer only inside a span rkey, span_rkey.c, or a spill slot of
 * the same node):
 *   magic     SPAN_CUDA_VMM_MAGIC, as every export makes it, or
 *             SPAN_ROCM_VMM_MAGIC, as an importer marks the keys of a
 *             rocm_ipc+ rkey (span_rocm_vmm.h)
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

/* The exporter's units mapped into this process */
typedef struct span_vmm_map {
    uint64_t base;     /* local address of the extent's first byte */
    uint64_t length;
    int      device;   /* the device given access at import */
    uint64_t devices;  /* bit per device given access since */
    uint32_t pid;      /* the exporter, */
    uint64_t pid_ns;
    uint32_t keys_sum; /* and which of its units: FNV-1a 32 of their keys */
    int      rocm;     /* mapped by HIP (span_rocm_vmm.h) */
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
