/*
 * VMM units a ROCm twin exports itself (span_md_rocm.h), imported: the
 * same export, export table, keys and import cache as CUDA's
 * (span_cuda_vmm.h, span_vmm_export.h, span_vmm_cache.h), with
 * HIP's calls in place of CUDA's. A unit's key is a span_vmm_key_t
 * whose magic is SPAN_ROCM_VMM_MAGIC: the importer marks the keys of a
 * rocm_ipc+ rkey so, and span_cuda_vmm_import() hands them here. The
 * importer takes each unit's descriptor with pidfd_getfd (ptrace rights
 * over the exporter), imports it (hipMemImportFromShareableHandle) and
 * maps the units back to back into one reserved range, with access for its
 * current device; the twin's copies go through it (span_rocm_copy.h).
 */
#ifndef SPAN_ROCM_VMM_H_
#define SPAN_ROCM_VMM_H_

#include "span_vmm.h"
#include "base/span_chunk.h"

#include <ucs/type/status.h>

/* Marks the n keys of a rocm_ipc+ rkey as ROCm units */
void span_rocm_vmm_keys_mark(span_vmm_key_t *keys, uint32_t n);

/* Maps the geometry's units from their keys, contiguous */
ucs_status_t span_rocm_vmm_import(const span_vmm_key_t *keys,
                                  const span_chunk_geom_t *geom,
                                  span_vmm_map_t *map);

void span_rocm_vmm_unmap(span_vmm_map_t *map);

/* Gives device access to the mapping, once */
ucs_status_t span_rocm_vmm_access(span_vmm_map_t *map, int device);

#endif
