/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Chunk planner.
 */
#include "span_chunk.h"

#include <ucs/debug/log_def.h>
#include <inttypes.h>

ucs_status_t span_chunk_plan(span_chunk_geom_t *geom, uint64_t base,
                             uint64_t length, uint64_t unit_size,
                             uint64_t chunk_size, uint64_t overlap)
{
    return span_chunk_plan_from(geom, base, length, 0, unit_size, chunk_size,
                                overlap);
}

ucs_status_t span_chunk_plan_from(span_chunk_geom_t *geom, uint64_t base,
                                  uint64_t length, uint64_t unit_origin,
                                  uint64_t unit_size, uint64_t chunk_size,
                                  uint64_t overlap)
{
    uint64_t num_units, last_start, chunks;

    if ((length == 0) || (length > UINT64_MAX - base) || (unit_origin > base) ||
        ((chunk_size != 0) && (overlap >= chunk_size))) {
        ucs_error("span chunk: cannot plan [0x%" PRIx64 ", +%" PRIu64 ") in "
                  "chunks of %" PRIu64 " overlapping by %" PRIu64, base, length,
                  chunk_size, overlap);
        return UCS_ERR_INVALID_PARAM;
    }

    geom->base        = base;
    geom->length      = length;
    geom->unit_size   = unit_size;
    geom->chunk_size  = chunk_size;
    geom->overlap     = (chunk_size != 0) ? overlap : 0;
    geom->stride      = chunk_size - geom->overlap;
    geom->unit_origin = unit_origin;
    geom->unit0_start = unit_size ?
                        base - ((base - unit_origin) % unit_size) : base;

    chunks = span_chunk_count_in(geom, span_chunk_unit_end(geom, base) - base);
    geom->unit0_chunks = (chunks > SPAN_CHUNK_MAX) ? SPAN_CHUNK_MAX : chunks;
    geom->unit_chunks  = 0;
    num_units          = 1;
    if ((unit_size != 0) && (span_chunk_unit_end(geom, base) < base + length)) {
        /* units after the first: whole ones, and a last one maybe shorter */
        num_units  = ((base + length - 1 - geom->unit0_start) /
                      unit_size) + 1;
        if (num_units > SPAN_CHUNK_MAX) {
            chunks = num_units; /* refused below, before any product */
            goto check;
        }
        last_start = geom->unit0_start + ((num_units - 1) * unit_size);
        geom->unit_chunks = span_chunk_count_in(geom, unit_size);
        chunks += (num_units - 2) * geom->unit_chunks +
                  span_chunk_count_in(geom, base + length - last_start);
    }

check:
    if (chunks > SPAN_CHUNK_MAX) {
        ucs_error("span chunk: [0x%" PRIx64 ", +%" PRIu64 ") needs %" PRIu64
                  " chunks of %" PRIu64 " bytes (units of %" PRIu64 "), more "
                  "than %u", base, length, chunks, chunk_size, unit_size,
                  SPAN_CHUNK_MAX);
        return UCS_ERR_EXCEEDS_LIMIT;
    }
    geom->num_chunks = chunks;
    return UCS_OK;
}

void span_chunk_range(const span_chunk_geom_t *geom, uint32_t index,
                      uint64_t *start_p, uint64_t *length_p)
{
    uint64_t unit = 0, j = index, ustart = geom->base, uend, start;

    if (index >= geom->unit0_chunks) {
        unit   = 1 + ((index - geom->unit0_chunks) / geom->unit_chunks);
        j      = (index - geom->unit0_chunks) % geom->unit_chunks;
        ustart = geom->unit0_start + (unit * geom->unit_size);
    }
    uend  = span_chunk_unit_end(geom, ustart);
    start = ustart + (j * geom->stride);
    *start_p  = start;
    *length_p = ((geom->chunk_size == 0) ||
                 (uend - start <= geom->chunk_size)) ? uend - start :
                                                       geom->chunk_size;
}
