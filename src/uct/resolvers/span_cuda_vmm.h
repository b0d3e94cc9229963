/*
 * VMM handles that the inner transport cannot export, exported by span.
 *
 * cuda_ipc publishes VMM memory of POSIX-fd handles (PyTorch's expandable
 * segments, cuMemCreate pools) only where UCX was built with pidfd_getfd;
 * the PyPI wheel was not, and its cuda_ipc calls such memory "no IPC", so
 * UCP stages it through host memory at under 1 GB/s. For such units span
 * exports the handle itself (one POSIX fd per unit, kept open by the
 * exporter until deregistration), the importer takes the fds with
 * pidfd_getfd, maps the units back to back into one range, and the twin's
 * zcopy ops copy through that mapping with the driver (span_cuda_copy.h).
 * pidfd_getfd needs ptrace attach rights over the exporter, as cuda_ipc's
 * own path does.
 *
 * A unit's key, in the room of an inner key (all little-endian):
 *   +0  4  magic   SPAN_CUDA_VMM_MAGIC
 *   +4  4  pid     the exporter
 *   +8  4  fd      its descriptor of the unit's handle
 *   +12 4  0
 *   +16 8  size    of the unit, as the rkey's geometry makes it
 *   +24 8  pid_ns  the exporter's PID namespace: pid and fd are checked
 *                  (span_spill_peer_check) before any is looked up
 */
#ifndef SPAN_CUDA_VMM_H_
#define SPAN_CUDA_VMM_H_

#include "span_chunk.h"

#include <ucs/type/status.h>
#include <stddef.h>
#include <stdint.h>

/* Bytes of a span key of one unit, within an inner key's room */
#define SPAN_CUDA_VMM_KEY_SIZE 32

/* Exports the unit [base, base + size) into key (K >= SPAN_CUDA_VMM_KEY_SIZE
 * bytes); *fd_p stays open until span_cuda_vmm_unexport. One driver round
 * trip: UCS_ERR_UNSUPPORTED (key untouched) where the unit is not VMM memory
 * that can be shared as a POSIX fd */
ucs_status_t span_cuda_vmm_export(uint64_t base, uint64_t size, void *key,
                                  size_t K, int *fd_p);
void span_cuda_vmm_unexport(int fd);

/* The exporter's units mapped into this process */
typedef struct span_cuda_vmm_map {
    uint64_t base;     /* local address of the extent's first byte */
    uint64_t length;
    int      device;   /* the device given access at import */
    uint64_t devices;  /* bit per device given access since */
    uint32_t pid;      /* the exporter, */
    uint64_t pid_ns;
    uint32_t keys_sum; /* and which of its units: FNV-1a 32 of their keys */
} span_cuda_vmm_map_t;

/* Maps the geometry's units from keys of K bytes each, contiguous; fds[i]
 * is this process's copy of unit i's descriptor (-1 where none was taken),
 * the caller's to close, also on failure. Through the import cache
 * (span_cuda_vmm_cache.h), which keeps those copies to tell whether the
 * exporter still exports the units. */
ucs_status_t span_cuda_vmm_import(const uint8_t *keys, size_t K,
                                  const span_chunk_geom_t *geom,
                                  span_cuda_vmm_map_t *map, int *fds);
void span_cuda_vmm_unmap(span_cuda_vmm_map_t *map);

/* Orders mappings by the exporter's units they map (not by where they are
 * mapped here): 0 where both map the same units */
int span_cuda_vmm_compare(const span_cuda_vmm_map_t *a,
                          const span_cuda_vmm_map_t *b);

#endif
