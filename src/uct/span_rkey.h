/*
 * Span rkey wire format: pack and parse. The format is described next to its
 * code in span_rkey.c.
 */
#ifndef SPAN_RKEY_H_
#define SPAN_RKEY_H_

#include "span_chunk.h"

#include <ucs/type/status.h>
#include <stddef.h>
#include <stdint.h>

#define SPAN_RKEY_VERSION     3
#define SPAN_RKEY_HDR_SIZE    46
/* UCP stores each MD's packed rkey size in one byte */
#define SPAN_RKEY_MAX_SIZE    255
/* The largest inner key a span rkey holds (a registration of one chunk) */
#define SPAN_RKEY_MAX_KEY     (SPAN_RKEY_MAX_SIZE - SPAN_RKEY_HDR_SIZE)
/* Chunk and unit sizes travel in pages */
#define SPAN_RKEY_PAGE        4096ul

/* Where the inner keys of a registration lie when they do not fit inline:
 * in the spill arena of the exporting process (span_spill.h) */
typedef struct span_rkey_spill {
    uint32_t pid;      /* exporting process */
    uint32_t fd;       /* its descriptor of the arena */
    uint64_t arena_id; /* random, also in the arena's header */
    uint64_t offset;   /* of the slot in the arena */
    uint64_t seq;      /* of the slot; a released slot has another */
    uint32_t keys_sum; /* FNV-1a 32 of the n * K key bytes */
    uint64_t pid_ns;   /* the PID namespace pid belongs to */
} span_rkey_spill_t;

typedef struct span_rkey_desc {
    uint32_t          component_id; /* span_rkey_component_id() of the inner */
    span_chunk_geom_t geom;         /* extent in the exporter's addresses */
    size_t            key_size;     /* bytes of one inner key */
    int               spilled;      /* keys in the spill slot, not inline */
    int               span_vmm;     /* the keys are span's own VMM unit keys
                                       (span_cuda_vmm.h), not the inner's */
    span_rkey_spill_t spill;
    /* set by span_rkey_parse, inside the parsed buffer (NULL when
     * spilled): */
    const uint8_t     *key0;        /* the first inner key, whole */
    const uint8_t     *mask;        /* bytes of a key that differ from key0 */
    const uint8_t     *varying;     /* those bytes of keys 1.., in turn */
    unsigned          num_varying;
} span_rkey_desc_t;

uint32_t span_rkey_component_id(const char *component_name);

/* Packs desc and the num_chunks inner keys of key_size bytes each (keys,
 * contiguous; unused when desc->spilled) into buffer (SPAN_RKEY_MAX_SIZE
 * bytes). UCS_ERR_EXCEEDS_LIMIT when they do not fit inline,
 * UCS_ERR_INVALID_PARAM for a geometry the format cannot carry (sizes not in
 * pages, units from an origin that is neither 0 nor the base). */
ucs_status_t span_rkey_pack(void *buffer, const span_rkey_desc_t *desc,
                            const void *keys, size_t *packed_size_p);

ucs_status_t span_rkey_parse(const void *buffer, size_t buffer_size,
                             span_rkey_desc_t *desc);

/* A twin MD of the inner component component_id, whose keys are key_size
 * bytes, packs rkeys of packed_size bytes (its fixed rkey_packed_size):
 * while it is open, keys of that component from peers are read up to the
 * largest such size. UCS_ERR_EXCEEDS_LIMIT when too many sizes are noted. */
ucs_status_t span_rkey_size_add(uint32_t component_id, size_t key_size,
                                size_t packed_size);

void span_rkey_size_remove(uint32_t component_id, size_t packed_size);

/* Parses a key from a peer, whose length UCT does not pass: it is bounded
 * by what a twin MD of its inner component packs (span_rkey_size_add), and
 * its inner keys must be of that component's size. UCS_ERR_UNREACHABLE
 * where no twin MD of the component is open. */
ucs_status_t span_rkey_parse_peer(const void *buffer, span_rkey_desc_t *desc);

/* FNV-1a 32 of size bytes, as the format uses it */
uint32_t span_rkey_hash(const void *data, size_t size);

/* Inner key of chunk index of a parsed rkey whose keys are inline, key_size
 * bytes */
void span_rkey_key(const span_rkey_desc_t *desc, uint32_t index, void *key);

#endif
