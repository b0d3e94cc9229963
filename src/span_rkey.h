/*
 * Span rkey wire format: pack and parse. The format is described next to its
 * code in span_rkey.c.
 */
#ifndef SPAN_RKEY_H_
#define SPAN_RKEY_H_

#include <ucs/type/status.h>
#include <stddef.h>
#include <stdint.h>

#define SPAN_RKEY_VERSION     1
#define SPAN_RKEY_HDR_SIZE    32
/* UCP stores each MD's packed rkey size in one byte */
#define SPAN_RKEY_MAX_SIZE    255
#define SPAN_RKEY_MAX_INNER   (SPAN_RKEY_MAX_SIZE - SPAN_RKEY_HDR_SIZE)

typedef struct span_rkey_desc {
    uint32_t    component_id; /* span_rkey_component_id() of the inner one */
    uint64_t    base;         /* registered extent, exporter's addresses */
    uint64_t    length;
    const void *inner;        /* inner packed key, inside the parsed buffer */
    size_t      inner_size;
} span_rkey_desc_t;

uint32_t span_rkey_component_id(const char *component_name);

/* Where the inner MD packs its key inside a span rkey buffer */
void *span_rkey_inner_buffer(void *buffer);

/* Writes the header after the inner key was packed at span_rkey_inner_buffer() */
void span_rkey_seal(void *buffer, const span_rkey_desc_t *desc);

ucs_status_t span_rkey_parse(const void *buffer, size_t buffer_size,
                             span_rkey_desc_t *desc);

#endif
