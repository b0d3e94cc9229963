/*
 * Span rkey, wire format version 1. All integers are little-endian.
 *
 *   offset  size  field
 *   0       1     version        SPAN_RKEY_VERSION
 *   1       1     flags          0; any other value is refused
 *   2       2     inner_size     n, bytes of the inner key after the header
 *   4       4     component_id   FNV-1a 32 of the inner component's name
 *   8       8     base           first byte of the registered extent, in the
 *                                exporting process's addresses
 *   16      8     length         bytes in the extent, > 0, base+length <= 2^64
 *   24      4     hdr_checksum   FNV-1a 32 of bytes [0, 24)
 *   28      4     checksum       FNV-1a 32 of bytes [0, 24) then the inner key
 *   32      n     inner key      as packed by the inner MD's mkey_pack
 *   32+n    ...   unused up to the twin MD's rkey_packed_size
 *
 * The checksums turn a key corrupted in flight or by a bug into a refused
 * key instead of an access to the wrong bytes. UCP does not pass the key's
 * length to rkey_unpack, so inner_size is trusted only once hdr_checksum
 * matched: a corrupted size is never used to read past the real key. A
 * parser never reads past buffer_size, nor past SPAN_RKEY_MAX_SIZE.
 */
#include "span_rkey.h"

#include <ucs/debug/log_def.h>
#include <inttypes.h>
#include <string.h>

#define SPAN_RKEY_FNV_OFFSET 2166136261u
#define SPAN_RKEY_FNV_PRIME  16777619u
#define SPAN_RKEY_HDR_SUM_OFFSET 24
#define SPAN_RKEY_SUM_OFFSET     28

static uint32_t span_rkey_fnv(uint32_t hash, const void *data, size_t size)
{
    const uint8_t *p = data;
    size_t i;

    for (i = 0; i < size; ++i) {
        hash = (hash ^ p[i]) * SPAN_RKEY_FNV_PRIME;
    }
    return hash;
}

static void span_rkey_put(uint8_t *p, uint64_t value, unsigned size)
{
    unsigned i;

    for (i = 0; i < size; ++i) {
        p[i] = (uint8_t)(value >> (8 * i));
    }
}

static uint64_t span_rkey_get(const uint8_t *p, unsigned size)
{
    uint64_t value = 0;
    unsigned i;

    for (i = 0; i < size; ++i) {
        value |= (uint64_t)p[i] << (8 * i);
    }
    return value;
}

static uint32_t span_rkey_checksum(const uint8_t *buffer, size_t inner_size)
{
    uint32_t hash = span_rkey_fnv(SPAN_RKEY_FNV_OFFSET, buffer,
                                  SPAN_RKEY_HDR_SUM_OFFSET);
    return span_rkey_fnv(hash, buffer + SPAN_RKEY_HDR_SIZE, inner_size);
}

uint32_t span_rkey_component_id(const char *component_name)
{
    return span_rkey_fnv(SPAN_RKEY_FNV_OFFSET, component_name,
                         strlen(component_name));
}

void *span_rkey_inner_buffer(void *buffer)
{
    return (uint8_t*)buffer + SPAN_RKEY_HDR_SIZE;
}

void span_rkey_seal(void *buffer, const span_rkey_desc_t *desc)
{
    uint8_t *p = buffer;

    span_rkey_put(p + 0, SPAN_RKEY_VERSION, 1);
    span_rkey_put(p + 1, 0, 1);
    span_rkey_put(p + 2, desc->inner_size, 2);
    span_rkey_put(p + 4, desc->component_id, 4);
    span_rkey_put(p + 8, desc->base, 8);
    span_rkey_put(p + 16, desc->length, 8);
    span_rkey_put(p + SPAN_RKEY_HDR_SUM_OFFSET,
                  span_rkey_fnv(SPAN_RKEY_FNV_OFFSET, p,
                                SPAN_RKEY_HDR_SUM_OFFSET), 4);
    span_rkey_put(p + SPAN_RKEY_SUM_OFFSET,
                  span_rkey_checksum(p, desc->inner_size), 4);
}

ucs_status_t span_rkey_parse(const void *buffer, size_t buffer_size,
                             span_rkey_desc_t *desc)
{
    const uint8_t *p = buffer;
    unsigned version, flags;
    uint32_t checksum;

    if (buffer_size > SPAN_RKEY_MAX_SIZE) {
        buffer_size = SPAN_RKEY_MAX_SIZE;
    }

    if (buffer_size < SPAN_RKEY_HDR_SIZE) {
        ucs_error("span rkey %p: %zu bytes, shorter than its %d-byte header",
                  buffer, buffer_size, SPAN_RKEY_HDR_SIZE);
        return UCS_ERR_INVALID_PARAM;
    }

    version = p[0];
    flags   = p[1];
    if (version != SPAN_RKEY_VERSION) {
        ucs_error("span rkey %p: format version %u, this build reads %d "
                  "(are both peers running the same ucx-span?)", buffer,
                  version, SPAN_RKEY_VERSION);
        return UCS_ERR_UNSUPPORTED;
    }

    if (flags != 0) {
        ucs_error("span rkey %p: unknown flags 0x%x", buffer, flags);
        return UCS_ERR_INVALID_PARAM;
    }

    checksum = span_rkey_get(p + SPAN_RKEY_HDR_SUM_OFFSET, 4);
    if (checksum != span_rkey_fnv(SPAN_RKEY_FNV_OFFSET, p,
                                  SPAN_RKEY_HDR_SUM_OFFSET)) {
        ucs_error("span rkey %p: header checksum 0x%x does not match: the "
                  "key is corrupted", buffer, checksum);
        return UCS_ERR_INVALID_PARAM;
    }

    desc->inner_size   = span_rkey_get(p + 2, 2);
    desc->component_id = span_rkey_get(p + 4, 4);
    desc->base         = span_rkey_get(p + 8, 8);
    desc->length       = span_rkey_get(p + 16, 8);
    desc->inner        = p + SPAN_RKEY_HDR_SIZE;
    if (desc->inner_size > buffer_size - SPAN_RKEY_HDR_SIZE) {
        ucs_error("span rkey %p: inner key of %zu bytes overruns the %zu-byte "
                  "buffer", buffer, desc->inner_size, buffer_size);
        return UCS_ERR_INVALID_PARAM;
    }

    checksum = span_rkey_get(p + SPAN_RKEY_SUM_OFFSET, 4);
    if (checksum != span_rkey_checksum(p, desc->inner_size)) {
        ucs_error("span rkey %p: checksum 0x%x does not match its contents "
                  "(0x%x): the key is corrupted", buffer, checksum,
                  span_rkey_checksum(p, desc->inner_size));
        return UCS_ERR_INVALID_PARAM;
    }

    if ((desc->length == 0) || (desc->base + desc->length < desc->base)) {
        ucs_error("span rkey %p: invalid extent base 0x%" PRIx64 " length %"
                  PRIu64, buffer, desc->base, desc->length);
        return UCS_ERR_INVALID_PARAM;
    }

    return UCS_OK;
}
