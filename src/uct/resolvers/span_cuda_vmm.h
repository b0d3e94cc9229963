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
 * Each unit is exported once however many registrations cover it, and
 * withdrawn at the last deregistration or when the memory is unmapped
 * (span_vmm_export.h); the exporter's export table tells an importer
 * whether a descriptor number still is the export its key names.
 *
 * A unit's key and a mapping of a peer's units are span_vmm.h's.
 */
#ifndef SPAN_CUDA_VMM_H_
#define SPAN_CUDA_VMM_H_

#include "span_vmm.h"
#include "base/span_chunk.h"

#include <ucs/type/status.h>
#include <stddef.h>
#include <stdint.h>

/* The one driver round trip of an export: *fd_p, the caller's to close,
 * shares the VMM handle mapped at base; UCS_ERR_UNSUPPORTED where that is
 * not memory that can be shared as a POSIX fd */
ucs_status_t span_cuda_vmm_export_fd(uint64_t base, int *fd_p);

/* Maps the geometry's units from their keys, contiguous. Through the
 * import cache (span_vmm_cache.h). Keys of ROCm units go to
 * span_rocm_vmm.h. */
ucs_status_t span_cuda_vmm_import(const span_vmm_key_t *keys,
                                  const span_chunk_geom_t *geom,
                                  span_vmm_map_t *map);
void span_cuda_vmm_unmap(span_vmm_map_t *map);

#endif
