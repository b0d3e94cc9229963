/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * FNV-1a 32, the one hash of span: checksums of its rkeys and spill slots,
 * component ids, and the identity of a peer's VMM units. Its values cross
 * the wire (span_rkey.c): it never changes.
 */
#ifndef SPAN_HASH_H_
#define SPAN_HASH_H_

#include <stddef.h>
#include <stdint.h>

#define SPAN_HASH_FNV_OFFSET 2166136261u
#define SPAN_HASH_FNV_PRIME  16777619u

/* hash, then size more bytes: a hash of several pieces in turn */
static inline uint32_t span_hash_fnv_update(uint32_t hash, const void *data,
                                            size_t size)
{
    const uint8_t *p = data;
    size_t i;

    for (i = 0; i < size; ++i) {
        hash = (hash ^ p[i]) * SPAN_HASH_FNV_PRIME;
    }
    return hash;
}

static inline uint32_t span_hash_fnv(const void *data, size_t size)
{
    return span_hash_fnv_update(SPAN_HASH_FNV_OFFSET, data, size);
}

#endif
