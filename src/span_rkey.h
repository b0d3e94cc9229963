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

#define SPAN_RKEY_VERSION     2
#define SPAN_RKEY_HDR_SIZE    46
/* UCP stores each MD's packed rkey size in one byte */
#define SPAN_RKEY_MAX_SIZE    255
/* The largest inner key a span rkey holds (a registration of one chunk) */
#define SPAN_RKEY_MAX_KEY     (SPAN_RKEY_MAX_SIZE - SPAN_RKEY_HDR_SIZE)
/* Chunk and unit sizes travel in pages */
#define SPAN_RKEY_PAGE        4096ul

typedef struct span_rkey_desc {
    uint32_t          component_id; /* span_rkey_component_id() of the inner */
    span_chunk_geom_t geom;         /* extent in the exporter's addresses */
    size_t            key_size;     /* bytes of one inner key */
    /* set by span_rkey_parse, inside the parsed buffer: */
    const uint8_t     *key0;        /* the first inner key, whole */
    const uint8_t     *mask;        /* bytes of a key that differ from key0 */
    const uint8_t     *varying;     /* those bytes of keys 1.., in turn */
    unsigned          num_varying;
} span_rkey_desc_t;

uint32_t span_rkey_component_id(const char *component_name);

/* Packs desc and the num_chunks inner keys of key_size bytes each (keys,
 * contiguous) into buffer (SPAN_RKEY_MAX_SIZE bytes). UCS_ERR_EXCEEDS_LIMIT
 * when they do not fit, UCS_ERR_INVALID_PARAM for a geometry the format
 * cannot carry (sizes not in pages). */
ucs_status_t span_rkey_pack(void *buffer, const span_rkey_desc_t *desc,
                            const void *keys, size_t *packed_size_p);

ucs_status_t span_rkey_parse(const void *buffer, size_t buffer_size,
                             span_rkey_desc_t *desc);

/* Inner key of chunk index of a parsed rkey, key_size bytes */
void span_rkey_key(const span_rkey_desc_t *desc, uint32_t index, void *key);

#endif
