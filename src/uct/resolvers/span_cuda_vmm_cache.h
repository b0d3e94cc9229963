/*
 * Imported VMM mappings, shared by every rkey that names the same units of
 * the same exporter (UCP unpacks a rendezvous rkey per message), and kept
 * when unused, up to SPAN_CUDA_VMM_CACHE_IDLE of them, while the exporter
 * still exports the units: this process keeps its copy of each unit's
 * descriptor (span_cuda_vmm_import), and kcmp(2) tells whether the
 * exporter's descriptor of that number is still the same open file (the
 * exporter closes it when it deregisters; a number used again is another
 * file). A mapping of units the exporter no longer exports, or of an
 * exporter that exited, is never served; unused ones are dropped at the
 * next lookup or when a cuda twin MD closes. Where kcmp is not permitted, a
 * mapping lives only as long as its rkeys. Thread safe.
 */
#ifndef SPAN_CUDA_VMM_CACHE_H_
#define SPAN_CUDA_VMM_CACHE_H_

#include "span_cuda_vmm.h"

/* Unused mappings kept */
#define SPAN_CUDA_VMM_CACHE_IDLE 8

/* The mapping of the units the keys name, with one more reference */
ucs_status_t span_cuda_vmm_cache_get(const span_cuda_vmm_key_t *keys,
                                     const span_chunk_geom_t *geom,
                                     span_cuda_vmm_map_t **map_p);

/* Drops a reference of span_cuda_vmm_cache_get */
void span_cuda_vmm_cache_put(span_cuda_vmm_map_t *map);

/* Unmaps every unused mapping */
void span_cuda_vmm_cache_purge(void);

#endif
