/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Chunk planner: how a registered extent is cut into inner registrations.
 *
 * Hard boundaries lie at unit_origin + k * unit_size (physical allocations,
 * which an inner registration may not cross): origin 0 for boundaries at
 * absolute multiples, the extent's base for units resolved from a driver. Each
 * unit longer than chunk_size is cut into chunks of chunk_size that start
 * every stride = chunk_size - overlap bytes, so that any op of at most
 * overlap bytes lies inside one chunk: the one where it starts, or the next.
 * Chunks are numbered unit by unit; every number is computed, never
 * searched for.
 */
#ifndef SPAN_CHUNK_H_
#define SPAN_CHUNK_H_

#include <ucs/sys/compiler_def.h>
#include <ucs/sys/math.h>
#include <ucs/type/status.h>
#include <stdint.h>

/* The rkey counts chunks in 16 bits */
#define SPAN_CHUNK_MAX 65535u

typedef struct span_chunk_geom {
    uint64_t base;
    uint64_t length;
    uint64_t unit_size;    /* 0: no hard boundaries */
    uint64_t chunk_size;   /* 0: no size limit, one chunk per unit */
    uint64_t overlap;
    uint64_t stride;       /* chunk_size - overlap */
    uint64_t unit_origin;  /* hard boundaries lie at origin + k * unit_size */
    uint64_t unit0_start;  /* unit boundary at or before base */
    uint32_t unit0_chunks; /* chunks of the first unit */
    uint32_t unit_chunks;  /* chunks of a whole unit */
    uint32_t num_chunks;
} span_chunk_geom_t;

/* Plans [base, base + length). UCS_ERR_INVALID_PARAM for an empty or
 * wrapping extent or overlap >= chunk_size, UCS_ERR_EXCEEDS_LIMIT for more
 * than SPAN_CHUNK_MAX chunks. */
ucs_status_t span_chunk_plan(span_chunk_geom_t *geom, uint64_t base,
                             uint64_t length, uint64_t unit_size,
                             uint64_t chunk_size, uint64_t overlap);

/* The same with hard boundaries at unit_origin + k * unit_size, origin <=
 * base */
ucs_status_t span_chunk_plan_from(span_chunk_geom_t *geom, uint64_t base,
                                  uint64_t length, uint64_t unit_origin,
                                  uint64_t unit_size, uint64_t chunk_size,
                                  uint64_t overlap);

/* [*start_p, *start_p + *length_p) of chunk index < num_chunks */
void span_chunk_range(const span_chunk_geom_t *geom, uint32_t index,
                      uint64_t *start_p, uint64_t *length_p);

static UCS_F_ALWAYS_INLINE uint64_t
span_chunk_count_in(const span_chunk_geom_t *geom, uint64_t length)
{
    if ((geom->chunk_size == 0) || (length <= geom->chunk_size)) {
        return 1;
    }
    return 1 + (length - geom->chunk_size + geom->stride - 1) / geom->stride;
}

/* End of the unit that holds ustart, without overflow near 2^64 */
static UCS_F_ALWAYS_INLINE uint64_t
span_chunk_unit_end(const span_chunk_geom_t *geom, uint64_t ustart)
{
    uint64_t end = geom->base + geom->length;
    uint64_t aligned;

    if (geom->unit_size == 0) {
        return end;
    }
    aligned = ustart - ((ustart - geom->unit_origin) % geom->unit_size);
    return (end - aligned > geom->unit_size) ? aligned + geom->unit_size : end;
}

/* The chunk to use for an access at addr (inside the extent, its end
 * included), and in *avail_p the bytes from addr to that chunk's end.
 * An empty access at the extent's end lies in the last chunk: where the
 * end is a unit boundary, the unit of addr itself would be one past the
 * last, and so would its chunk index. */
static UCS_F_ALWAYS_INLINE uint32_t
span_chunk_find(const span_chunk_geom_t *geom, uint64_t addr,
                uint64_t *avail_p)
{
    uint64_t unit = 0, ustart = geom->base, uend, j = 0, cstart, at;

    if (ucs_likely(geom->num_chunks == 1)) {
        *avail_p = geom->base + geom->length - addr;
        return 0;
    }

    at = addr - (addr == geom->base + geom->length);
    if (geom->unit_size != 0) {
        unit   = (at - geom->unit0_start) / geom->unit_size;
        ustart = (unit == 0) ? geom->base :
                 geom->unit0_start + (unit * geom->unit_size);
    }
    uend = span_chunk_unit_end(geom, ustart);
    if (geom->chunk_size != 0) {
        j      = (at - ustart) / geom->stride;
        j      = ucs_min(j, span_chunk_count_in(geom, uend - ustart) - 1);
        cstart = ustart + (j * geom->stride);
        uend   = (uend - cstart > geom->chunk_size) ?
                 cstart + geom->chunk_size : uend;
    }

    *avail_p = uend - addr;
    return (unit == 0) ? j : geom->unit0_chunks +
                             ((unit - 1) * geom->unit_chunks) + j;
}

#endif
