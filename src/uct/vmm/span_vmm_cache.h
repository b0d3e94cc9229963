/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Imported VMM mappings, shared by every rkey that names the same units of
 * the same exporter (UCP unpacks a rendezvous rkey per message), and kept
 * when unused, up to SPAN_VMM_CACHE_IDLE of them, while the exporter
 * still exports the units: each mapping keeps a read-only view of the
 * exporter's export table (span_vmm_export.h), and a lookup checks in
 * it, by reading memory, that every unit is still the export its key names
 * (the exporter clears a unit's entry before it closes the descriptor). A
 * mapping of units the exporter no longer exports is never served; unused
 * ones are dropped at the next lookup or when a cuda twin MD closes. An
 * exporter that exits leaves its table as it was: its own rkeys may still
 * be served the memory they named, which this process's mapping keeps, and
 * never other memory. Where the table cannot be mapped, a mapping lives
 * only as long as its rkeys. None is unmapped while the engine's copies
 * through it run (span_vmm_map_t.busy), whatever released its rkeys or
 * withdrew its units: it is dropped by a later lookup, release or purge.
 * A child forked after imports is never served
 * its parent's mappings (they are in the parent's CUDA context, which does
 * not survive fork) and never unmaps them: it maps anew. Thread safe.
 */
#ifndef SPAN_VMM_CACHE_H_
#define SPAN_VMM_CACHE_H_

#include "span_vmm.h"
#include "base/span_chunk.h"

#include <ucs/type/status.h>

/* Unused mappings kept */
#define SPAN_VMM_CACHE_IDLE 8

/* The mapping of the units the keys name, with one more reference */
ucs_status_t span_vmm_cache_get(const span_vmm_key_t *keys,
                                const span_chunk_geom_t *geom,
                                span_vmm_map_t **map_p);

/* Drops a reference of span_vmm_cache_get */
void span_vmm_cache_put(span_vmm_map_t *map);

/* Unmaps every unused mapping */
void span_vmm_cache_purge(void);

#endif
