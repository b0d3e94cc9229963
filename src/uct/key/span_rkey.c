/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Span rkey, wire format version 5 (4 did not carry its packed size, so an
 * importer bounded a peer's key by what its own twins pack, past the end
 * of a key that a peer configured otherwise packed, and had no window: a
 * key of several chunks or units served all of them, not the range
 * registered; 3 carried span's VMM unit keys in the room of inner keys, so
 * that two never fitted; 2 had no pid_ns in the spill body). Keys of
 * another version are refused from their first byte, the only one read.
 * All integers are little-endian.
 *
 *   offset  size  field
 *   0       1     version        SPAN_RKEY_VERSION
 *   1       1     flags          bit 0 UNITS_FROM_BASE: hard boundaries lie
 *                                at base + k * unit size, not at absolute
 *                                multiples (units resolved from a driver);
 *                                bit 1 SPILL: the body is a spill reference;
 *                                bit 2 SPAN_VMM: the keys are span's own
 *                                keys of exported VMM units
 *                                (span_vmm.h), not inner keys;
 *                                other bits are refused
 *   2       2     num_chunks     n >= 1, inner registrations (one key each)
 *   4       4     component_id   FNV-1a 32 of the inner component's name
 *   8       8     base           first byte of the registered extent, in the
 *                                exporting process's addresses
 *   16      8     length         bytes in the extent, > 0, base+length < 2^64
 *   24      4     chunk_pages    chunk size in 4 KiB pages; 0: no size limit
 *   28      4     overlap_pages  overlap of neighbour chunks, < chunk_pages
 *   32      4     unit_pages     hard boundaries at multiples of this many
 *                                pages (absolute addresses); 0: none
 *   36      1     key_size       K, bytes of one inner key (<= 192 inline,
 *                                larger only with SPILL); with
 *                                SPAN_VMM, SPAN_VMM_KEY_SIZE
 *   37      1     num_varying    v, key bytes that differ between keys;
 *                                with SPAN_VMM and not SPILL, the body's
 *                                length in bytes
 *   38      1     rkey_size      the exporting twin MD's rkey_packed_size,
 *                                >= 63: the bytes UCP sends, and so all an
 *                                importer may read; the body lies in them
 *   39      8     win_offset     the range registered, the only one an op
 *   47      8     win_length     may reach: its first byte, from base, and
 *                                its bytes (> 0, inside the extent). The
 *                                units and chunks around it were registered
 *                                whole for the inner transport's sake; the
 *                                packer names the range its caller packs
 *                                (span_md_pack.c)
 *   55      4     hdr_checksum   FNV-1a 32 of bytes [0, 55)
 *   59      4     checksum       FNV-1a 32 of bytes [0, 55) then the body
 *   63            inline body (SPILL clear), absent when K = 0:
 *                 key 0          K bytes, whole
 *                 mask           ceil(K/8) bytes, only when n > 1: bit b set
 *                                when byte b of some key differs from key 0
 *                 keys 1..n-1    v bytes each, only when n > 1: their bytes
 *                                at the mask's positions, in order
 *   63            VMM body (SPAN_VMM set, SPILL clear), the units' keys
 *                 (span_vmm.h) less what the importer knows:
 *                 +0  4  pid       the exporter
 *                 +4  4  table_fd  its export table's descriptor
 *                 +8  8  pid_ns
 *                 +16 8  table_id
 *                 +24    per unit, in order: fd and serial, each as the
 *                        zigzag LEB128 varint (at most 10 bytes, 64 bits)
 *                        of its difference from the previous unit's
 *                        (from 0 for the first): units exported together
 *                        take one byte each, so about 80 fit; sizes come
 *                        from the geometry. A descriptor lies in
 *                        [0, 2^31), a serial in [1, 2^63): a key whose
 *                        differences leave either range is refused.
 *   63            spill body (SPILL set, same-node transports only), 44
 *                 bytes: the n keys, whole, lie in a slot of the
 *                 exporter's spill arena (span_spill.c)
 *                 +0  4  pid       exporting process
 *                 +4  4  fd        its descriptor of the arena (a memfd)
 *                 +8  8  arena_id  random, repeated in the arena's header:
 *                                  a recycled pid or fd is refused
 *                 +16 8  offset    of the slot in the arena
 *                 +24 8  seq       of the slot, changed when it is released:
 *                                  a key of a deregistered region is refused
 *                 +32 4  keys_sum  FNV-1a 32 of the n * K key bytes
 *                 +36 8  pid_ns    the exporter's PID namespace: 32 bits of
 *                                  its host's UCX system id, then the
 *                                  inode number of /proc/self/ns/pid: its
 *                                  pid means nothing in another, nor on
 *                                  another host (span_peer_pid_ns; the
 *                                  VMM body's pid_ns is the same)
 *   ...     ...   unused (zero) up to rkey_size
 *
 * The geometry (chunk_pages, overlap_pages, unit_pages) is planned again by
 * the importer (span_chunk.h) and must give n chunks. Inner keys of
 * neighbour registrations share most of their bytes (an ib key differs in
 * two or three): with K = 8, v = 4 and 2 GiB chunks overlapping by 4 MiB,
 * 46 keys fit, 91.8 GiB; v = 3: 62 keys, 123.8 GiB; v = 8: 23, 45.9 GiB.
 * Keys too large for that (cuda_ipc's are 192 bytes: even two never fit)
 * spill on transports that only reach their own node; so do VMM units
 * whose varints outgrow the 192 bytes (whole keys of
 * SPAN_VMM_KEY_SIZE bytes in the slot).
 *
 * The checksums turn a key corrupted in flight or by a bug into a refused
 * key instead of an access to the wrong bytes; they do not stop a peer that
 * forges one. UCP does not pass the key's length to rkey_unpack: it hands
 * over the rkey_packed_size bytes the exporter's twin MD reported, fixed
 * for that MD (the header and one inner key when it never cuts or spills;
 * otherwise SPAN_RKEY_MAX_SIZE), and twins of one component pack different
 * sizes in differently configured processes (UCX_SPAN_SPILL, chunk
 * sizes). So the key says its size (rkey_size), under the header
 * checksum, and an importer reads a peer's key only up to it: a header
 * that claims a longer body than its exporter packed is refused before any
 * byte past it is read. Inner keys of another size than an open twin's of
 * that component are refused. A parser never reads past buffer_size, nor
 * past rkey_size. Pack's callers zero the bytes of rkey_size it does not
 * use.
 */
#include "span_rkey.h"
#include "base/span_hash.h"
#include "vmm/span_vmm.h"

#include <ucs/debug/log_def.h>
#include <ucs/sys/math.h>
#include <ucs/sys/compiler_def.h>
#include <inttypes.h>
#include <string.h>

/* win_offset, then win_length */
#define SPAN_RKEY_WINDOW_OFFSET  39
#define SPAN_RKEY_SPILL_SIZE     44

#define SPAN_RKEY_FLAG_UNITS_FROM_BASE UCS_BIT(0)
#define SPAN_RKEY_FLAG_SPILL           UCS_BIT(1)
#define SPAN_RKEY_FLAG_SPAN_VMM        UCS_BIT(2)

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

static uint32_t span_rkey_checksum(const uint8_t *buffer, size_t body_size)
{
    uint32_t hash = span_hash_fnv(buffer,
                                  SPAN_RKEY_HDR_SUM_OFFSET);
    return span_hash_fnv_update(hash, buffer + SPAN_RKEY_HDR_SIZE, body_size);
}

/* Both checksums of a key whose fields and body are written */
static void span_rkey_seal(uint8_t *p, size_t body_size)
{
    span_rkey_put(p + SPAN_RKEY_HDR_SUM_OFFSET,
                  span_hash_fnv(p, SPAN_RKEY_HDR_SUM_OFFSET), 4);
    span_rkey_put(p + SPAN_RKEY_SUM_OFFSET, span_rkey_checksum(p, body_size),
                  4);
}

static size_t span_rkey_mask_size(size_t key_size)
{
    return (key_size + 7) / 8;
}

static size_t span_rkey_body_size(unsigned flags, size_t key_size,
                                  uint32_t num_chunks, unsigned num_varying)
{
    if (flags & SPAN_RKEY_FLAG_SPILL) {
        return SPAN_RKEY_SPILL_SIZE;
    }
    if (flags & SPAN_RKEY_FLAG_SPAN_VMM) {
        return num_varying;
    }
    if ((key_size == 0) || (num_chunks == 1)) {
        return key_size;
    }
    return key_size + span_rkey_mask_size(key_size) +
           ((size_t)(num_chunks - 1) * num_varying);
}

#define SPAN_RKEY_VMM_HEAD   24
#define SPAN_RKEY_VARINT_MAX 10 /* bytes of a 64-bit LEB128 */

/* Appends value, zigzag LEB128, if it fits before end; the next byte or
 * NULL */
static uint8_t *span_rkey_put_varint(uint8_t *p, const uint8_t *end,
                                     int64_t delta)
{
    uint64_t value = ((uint64_t)delta << 1) ^ (uint64_t)(delta >> 63);

    do {
        if (p == end) {
            return NULL;
        }
        *(p++) = (value & 0x7f) | ((value > 0x7f) ? 0x80 : 0);
        value >>= 7;
    } while (value != 0);
    return p;
}

/* Reads one from [*p_p, end); 0 where it runs past end or over 64 bits
 * (the tenth byte may hold bit 63 only). The delta comes back as the
 * two's complement it stands for, to be added modulo 2^64. */
static int span_rkey_get_varint(const uint8_t **p_p, const uint8_t *end,
                                uint64_t *delta_p)
{
    const uint8_t *p = *p_p;
    uint64_t value   = 0;
    unsigned i;

    for (i = 0; (i < SPAN_RKEY_VARINT_MAX) && (p < end); ++i) {
        if ((i == SPAN_RKEY_VARINT_MAX - 1) && (*p > 1)) {
            return 0;
        }
        value |= (uint64_t)(*p & 0x7f) << (7 * i);
        if (!(*(p++) & 0x80)) {
            *delta_p = (value & 1) ? ~(value >> 1) : (value >> 1);
            *p_p     = p;
            return 1;
        }
    }
    return 0;
}

/* Adds a decoded delta (two's complement) to a field that must stay in
 * [min, max], refusing a sum outside, without any wrap on the way */
static int span_rkey_add_delta(uint64_t *value_p, uint64_t delta,
                               uint64_t min, uint64_t max)
{
    uint64_t down;

    if (delta >> 63) {
        down = ~delta + 1;
        if ((down > *value_p) || (*value_p - down < min)) {
            return 0;
        }
        *value_p -= down;
    } else {
        if ((delta > max) || (*value_p > max - delta) ||
            (*value_p + delta < min)) {
            return 0;
        }
        *value_p += delta;
    }
    return 1;
}

/* The VMM body of n unit keys into [out, end): its size, 0 where it does
 * not fit or the keys are not of one exporter and table */
static size_t span_rkey_pack_vmm(uint8_t *out, const uint8_t *end,
                                 const span_vmm_key_t *keys, uint32_t n)
{
    uint8_t *p = out + SPAN_RKEY_VMM_HEAD;
    uint64_t fd = 0, serial = 0;
    uint32_t i;

    if (end - out < SPAN_RKEY_VMM_HEAD) {
        return 0;
    }
    span_rkey_put(out + 0, keys[0].pid, 4);
    span_rkey_put(out + 4, keys[0].table_fd, 4);
    span_rkey_put(out + 8, keys[0].pid_ns, 8);
    span_rkey_put(out + 16, keys[0].table_id, 8);
    for (i = 0; (i < n) && (p != NULL); ++i) {
        if ((keys[i].pid != keys[0].pid) ||
            (keys[i].table_fd != keys[0].table_fd) ||
            (keys[i].pid_ns != keys[0].pid_ns) ||
            (keys[i].table_id != keys[0].table_id)) {
            return 0;
        }
        p = span_rkey_put_varint(p, end, (int64_t)(keys[i].fd - fd));
        if (p != NULL) {
            p = span_rkey_put_varint(p, end,
                                     (int64_t)(keys[i].serial - serial));
        }
        fd     = keys[i].fd;
        serial = keys[i].serial;
    }
    return (p == NULL) ? 0 : (size_t)(p - out);
}

ucs_status_t span_rkey_vmm_keys(const span_rkey_desc_t *desc,
                                span_vmm_key_t *keys)
{
    const uint8_t *p   = desc->key0 + SPAN_RKEY_VMM_HEAD;
    const uint8_t *end = desc->key0 + desc->num_varying;
    uint64_t fd = 0, serial = 0, d_fd, d_serial, start, length;
    uint32_t i;

    for (i = 0; i < desc->geom.num_chunks; ++i) {
        if (!span_rkey_get_varint(&p, end, &d_fd) ||
            !span_rkey_get_varint(&p, end, &d_serial) ||
            !span_rkey_add_delta(&fd, d_fd, 0, INT32_MAX) ||
            !span_rkey_add_delta(&serial, d_serial, 1, INT64_MAX)) {
            break;
        }
        span_chunk_range(&desc->geom, i, &start, &length);
        keys[i].magic    = SPAN_CUDA_VMM_MAGIC;
        keys[i].pid      = span_rkey_get(desc->key0 + 0, 4);
        keys[i].fd       = fd;
        keys[i].table_fd = span_rkey_get(desc->key0 + 4, 4);
        keys[i].size     = length;
        keys[i].pid_ns   = span_rkey_get(desc->key0 + 8, 8);
        keys[i].serial   = serial;
        keys[i].table_id = span_rkey_get(desc->key0 + 16, 8);
    }
    if ((i < desc->geom.num_chunks) || (p != end)) {
        ucs_error("span rkey %p: its %u-byte VMM body does not encode %u "
                  "units (unit %u is cut short, or its descriptor leaves "
                  "[0, 2^31) or its serial [1, 2^63))", desc->key0,
                  desc->num_varying, desc->geom.num_chunks, i);
        return UCS_ERR_INVALID_PARAM;
    }
    return UCS_OK;
}

static int span_rkey_mask_bit(const uint8_t *mask, size_t b)
{
    return (mask[b / 8] >> (b % 8)) & 1;
}

uint32_t span_rkey_component_id(const char *component_name)
{
    return span_hash_fnv(component_name,
                         strlen(component_name));
}

/* Sizes in pages, as the header carries them; 0 when one is not */
static int span_rkey_pages(uint64_t size, uint32_t *pages_p)
{
    *pages_p = size / SPAN_RKEY_PAGE;
    return ((size % SPAN_RKEY_PAGE) == 0) &&
           ((uint64_t)*pages_p * SPAN_RKEY_PAGE == size);
}

/* Bytes of a key that differ between the keys, as a mask; their count */
static unsigned span_rkey_varying(const uint8_t *k, size_t K, uint32_t n,
                                  uint8_t *mask)
{
    unsigned num_varying = 0;
    uint32_t i;
    size_t b;

    for (b = 0; b < K; ++b) {
        for (i = 1; i < n; ++i) {
            if (k[(i * K) + b] != k[b]) {
                mask[b / 8] |= 1 << (b % 8);
                ++num_varying;
                break;
            }
        }
    }
    return num_varying;
}

static void span_rkey_pack_inline(uint8_t *out, const uint8_t *k, size_t K,
                                  uint32_t n, const uint8_t *mask)
{
    uint32_t i;
    size_t b;

    if (K == 0) {
        return;
    }
    memcpy(out, k, K);
    out += K;
    if (n == 1) {
        return;
    }
    memcpy(out, mask, span_rkey_mask_size(K));
    out += span_rkey_mask_size(K);
    for (i = 1; i < n; ++i) {
        for (b = 0; b < K; ++b) {
            if (span_rkey_mask_bit(mask, b)) {
                *(out++) = k[(i * K) + b];
            }
        }
    }
}

static void span_rkey_pack_spill(uint8_t *out, const span_rkey_spill_t *spill)
{
    span_rkey_put(out + 0, spill->pid, 4);
    span_rkey_put(out + 4, spill->fd, 4);
    span_rkey_put(out + 8, spill->arena_id, 8);
    span_rkey_put(out + 16, spill->offset, 8);
    span_rkey_put(out + 24, spill->seq, 8);
    span_rkey_put(out + 32, spill->keys_sum, 4);
    span_rkey_put(out + 36, spill->pid_ns, 8);
}

/* The flags of a geometry; -1 where the format cannot carry it */
static int span_rkey_geom_flags(const span_chunk_geom_t *geom,
                                uint32_t pages[3])
{
    if (!span_rkey_pages(geom->chunk_size, &pages[0]) ||
        !span_rkey_pages(geom->overlap, &pages[1]) ||
        !span_rkey_pages(geom->unit_size, &pages[2])) {
        return -1;
    }
    if ((geom->unit_size == 0) || (geom->unit_origin == 0)) {
        return 0;
    }
    return (geom->unit_origin == geom->base) ?
           (int)SPAN_RKEY_FLAG_UNITS_FROM_BASE : -1;
}

ucs_status_t span_rkey_pack(void *buffer, size_t rkey_size,
                            const span_rkey_desc_t *desc, const void *keys,
                            size_t *packed_size_p)
{
    const span_chunk_geom_t *geom = &desc->geom;
    uint8_t *p                    = buffer;
    uint8_t mask[SPAN_RKEY_MAX_KEY / 8 + 1] = {0};
    size_t body_size, K = desc->key_size;
    unsigned num_varying = 0;
    uint32_t pages[3];
    int flags;

    if ((rkey_size < SPAN_RKEY_HDR_SIZE) ||
        (rkey_size > SPAN_RKEY_MAX_SIZE)) {
        ucs_error("span rkey: a key of %zu bytes cannot be packed (%d to %d)",
                  rkey_size, SPAN_RKEY_HDR_SIZE, SPAN_RKEY_MAX_SIZE);
        return UCS_ERR_INVALID_PARAM;
    }

    flags = span_rkey_geom_flags(geom, pages);
    if ((flags < 0) || (K > UINT8_MAX)) {
        ucs_error("span rkey: chunk %" PRIu64 ", overlap %" PRIu64 ", unit %"
                  PRIu64 " bytes from 0x%" PRIx64 " and %zu-byte keys cannot "
                  "be packed (sizes must be whole 4 KiB pages, units start at "
                  "0 or at the base)", geom->chunk_size, geom->overlap,
                  geom->unit_size, geom->unit_origin, K);
        return UCS_ERR_INVALID_PARAM;
    }

    if (desc->span_vmm) {
        flags |= SPAN_RKEY_FLAG_SPAN_VMM;
        if (K != SPAN_VMM_KEY_SIZE) {
            return UCS_ERR_INVALID_PARAM;
        }
    }
    if (desc->spilled) {
        flags |= SPAN_RKEY_FLAG_SPILL;
    } else if (desc->span_vmm) {
        num_varying = span_rkey_pack_vmm(p + SPAN_RKEY_HDR_SIZE,
                                         p + rkey_size, keys,
                                         geom->num_chunks);
        if (num_varying == 0) {
            ucs_debug("span rkey: %u VMM units do not fit in %zu bytes",
                      geom->num_chunks, rkey_size);
            return UCS_ERR_EXCEEDS_LIMIT;
        }
    } else if (K > SPAN_RKEY_MAX_KEY) {
        ucs_debug("span rkey: an inner key of %zu bytes does not fit inline "
                  "(%d at most)", K, SPAN_RKEY_MAX_KEY);
        return UCS_ERR_EXCEEDS_LIMIT;
    } else {
        num_varying = span_rkey_varying(keys, K, geom->num_chunks, mask);
    }
    body_size = span_rkey_body_size(flags, K, geom->num_chunks, num_varying);
    if (SPAN_RKEY_HDR_SIZE + body_size > rkey_size) {
        ucs_debug("span rkey: %u inner keys of %zu bytes (%u varying) need "
                  "%zu bytes inline, more than %zu", geom->num_chunks, K,
                  num_varying, SPAN_RKEY_HDR_SIZE + body_size, rkey_size);
        return UCS_ERR_EXCEEDS_LIMIT;
    }

    span_rkey_put(p + 0, SPAN_RKEY_VERSION, 1);
    span_rkey_put(p + 1, flags, 1);
    span_rkey_put(p + 2, geom->num_chunks, 2);
    span_rkey_put(p + 4, desc->component_id, 4);
    span_rkey_put(p + 8, geom->base, 8);
    span_rkey_put(p + 16, geom->length, 8);
    span_rkey_put(p + 24, pages[0], 4);
    span_rkey_put(p + 28, pages[1], 4);
    span_rkey_put(p + 32, pages[2], 4);
    span_rkey_put(p + 36, K, 1);
    span_rkey_put(p + 37, num_varying, 1);
    span_rkey_put(p + SPAN_RKEY_SIZE_OFFSET, rkey_size, 1);
    span_rkey_put(p + SPAN_RKEY_WINDOW_OFFSET, 0, 8);
    span_rkey_put(p + SPAN_RKEY_WINDOW_OFFSET + 8, geom->length, 8);

    if (flags & SPAN_RKEY_FLAG_SPILL) {
        span_rkey_pack_spill(p + SPAN_RKEY_HDR_SIZE, &desc->spill);
    } else if (!desc->span_vmm) { /* the VMM body is written */
        span_rkey_pack_inline(p + SPAN_RKEY_HDR_SIZE, keys, K,
                              geom->num_chunks, mask);
    }
    *packed_size_p = SPAN_RKEY_HDR_SIZE + body_size;
    if (desc->win_length == 0) {
        span_rkey_seal(p, body_size);
        return UCS_OK;
    }
    return span_rkey_set_window(p, *packed_size_p, desc->win_base,
                                desc->win_length);
}

ucs_status_t span_rkey_set_window(void *buffer, size_t packed_size,
                                  uint64_t base, uint64_t length)
{
    uint8_t *p     = buffer;
    uint64_t gbase = span_rkey_get(p + 8, 8);
    uint64_t glen  = span_rkey_get(p + 16, 8);
    uint64_t offset;

    offset = (base < gbase) ? glen : base - gbase;
    if ((offset >= glen) || (length == 0) || (length > glen - offset) ||
        (packed_size < SPAN_RKEY_HDR_SIZE)) {
        ucs_error("span rkey %p: range [0x%" PRIx64 ", +%" PRIu64 ") is not "
                  "inside its extent [0x%" PRIx64 ", +%" PRIu64 ")", buffer,
                  base, length, gbase, glen);
        return UCS_ERR_INVALID_PARAM;
    }
    span_rkey_put(p + SPAN_RKEY_WINDOW_OFFSET, offset, 8);
    span_rkey_put(p + SPAN_RKEY_WINDOW_OFFSET + 8, length, 8);
    span_rkey_seal(p, span_rkey_body_size(p[1], p[36], span_rkey_get(p + 2, 2),
                                          p[37]));
    return UCS_OK;
}

/* The geometry fields, planned again: they must describe n chunks */
static ucs_status_t span_rkey_parse_geom(const uint8_t *p,
                                         span_rkey_desc_t *desc)
{
    uint32_t num_chunks = span_rkey_get(p + 2, 2);
    uint64_t base       = span_rkey_get(p + 8, 8);
    ucs_status_t status;

    status = span_chunk_plan_from(&desc->geom, base, span_rkey_get(p + 16, 8),
                                  (p[1] & SPAN_RKEY_FLAG_UNITS_FROM_BASE) ?
                                  base : 0,
                                  span_rkey_get(p + 32, 4) * SPAN_RKEY_PAGE,
                                  span_rkey_get(p + 24, 4) * SPAN_RKEY_PAGE,
                                  span_rkey_get(p + 28, 4) * SPAN_RKEY_PAGE);
    if (status != UCS_OK) {
        ucs_error("span rkey %p: its geometry is invalid", p);
        return UCS_ERR_INVALID_PARAM;
    }
    if (desc->geom.num_chunks != num_chunks) {
        ucs_error("span rkey %p: carries %u chunks, its geometry makes %u", p,
                  num_chunks, desc->geom.num_chunks);
        return UCS_ERR_INVALID_PARAM;
    }
    return UCS_OK;
}

static ucs_status_t span_rkey_parse_mask(const uint8_t *p,
                                         span_rkey_desc_t *desc)
{
    unsigned count = 0;
    size_t b;

    for (b = 0; b < span_rkey_mask_size(desc->key_size) * 8; ++b) {
        if (span_rkey_mask_bit(desc->mask, b)) {
            if (b >= desc->key_size) {
                ucs_error("span rkey %p: mask bit %zu is past its %zu-byte "
                          "keys", p, b, desc->key_size);
                return UCS_ERR_INVALID_PARAM;
            }
            ++count;
        }
    }
    if (count != desc->num_varying) {
        ucs_error("span rkey %p: mask has %u bits, header says %u", p, count,
                  desc->num_varying);
        return UCS_ERR_INVALID_PARAM;
    }
    return UCS_OK;
}

static void span_rkey_parse_spill(const uint8_t *in, span_rkey_spill_t *spill)
{
    spill->pid      = span_rkey_get(in + 0, 4);
    spill->fd       = span_rkey_get(in + 4, 4);
    spill->arena_id = span_rkey_get(in + 8, 8);
    spill->offset   = span_rkey_get(in + 16, 8);
    spill->seq      = span_rkey_get(in + 24, 8);
    spill->keys_sum = span_rkey_get(in + 32, 4);
    spill->pid_ns   = span_rkey_get(in + 36, 8);
}

/* Version, flags, header checksum and size of a key of at least the
 * header; the version first, so that nothing past the first byte of a key
 * of another version is read */
static ucs_status_t span_rkey_parse_header(const uint8_t *p)
{
    unsigned version, flags;
    uint32_t checksum;

    version = p[0];
    flags   = p[1];
    if (version != SPAN_RKEY_VERSION) {
        ucs_error("span rkey %p: format version %u, this build reads %d "
                  "(are both peers running the same ucx-span?)", p,
                  version, SPAN_RKEY_VERSION);
        return UCS_ERR_UNSUPPORTED;
    }

    if (flags & ~(SPAN_RKEY_FLAG_UNITS_FROM_BASE | SPAN_RKEY_FLAG_SPILL |
                  SPAN_RKEY_FLAG_SPAN_VMM)) {
        ucs_error("span rkey %p: unknown flags 0x%x", p, flags);
        return UCS_ERR_INVALID_PARAM;
    }

    checksum = span_rkey_get(p + SPAN_RKEY_HDR_SUM_OFFSET, 4);
    if (checksum != span_hash_fnv(p,
                                  SPAN_RKEY_HDR_SUM_OFFSET)) {
        ucs_error("span rkey %p: header checksum 0x%x does not match: the "
                  "key is corrupted", p, checksum);
        return UCS_ERR_INVALID_PARAM;
    }

    if (p[SPAN_RKEY_SIZE_OFFSET] < SPAN_RKEY_HDR_SIZE) {
        ucs_error("span rkey %p: packed in %u bytes, fewer than its %d-byte "
                  "header", p, p[SPAN_RKEY_SIZE_OFFSET], SPAN_RKEY_HDR_SIZE);
        return UCS_ERR_INVALID_PARAM;
    }
    return UCS_OK;
}

ucs_status_t span_rkey_parse(const void *buffer, size_t buffer_size,
                             span_rkey_desc_t *desc)
{
    const uint8_t *p = buffer;
    uint64_t win_offset;
    size_t body_size;
    uint32_t checksum;
    ucs_status_t status;
    unsigned flags;

    if (buffer_size > SPAN_RKEY_MAX_SIZE) {
        buffer_size = SPAN_RKEY_MAX_SIZE;
    }

    if (buffer_size < SPAN_RKEY_HDR_SIZE) {
        ucs_error("span rkey %p: %zu bytes, shorter than its %d-byte header",
                  buffer, buffer_size, SPAN_RKEY_HDR_SIZE);
        return UCS_ERR_INVALID_PARAM;
    }

    status = span_rkey_parse_header(p);
    if (status != UCS_OK) {
        return status;
    }

    /* what its exporter packed is all there is to read */
    buffer_size = ucs_min(buffer_size, p[SPAN_RKEY_SIZE_OFFSET]);
    flags       = p[1];
    status = span_rkey_parse_geom(p, desc);
    if (status != UCS_OK) {
        return status;
    }

    win_offset       = span_rkey_get(p + SPAN_RKEY_WINDOW_OFFSET, 8);
    desc->win_length = span_rkey_get(p + SPAN_RKEY_WINDOW_OFFSET + 8, 8);
    if ((win_offset >= desc->geom.length) || (desc->win_length == 0) ||
        (desc->win_length > desc->geom.length - win_offset)) {
        ucs_error("span rkey %p: range +%" PRIu64 " of %" PRIu64 " bytes is "
                  "not inside its extent of %" PRIu64 " bytes", buffer,
                  win_offset, desc->win_length, desc->geom.length);
        return UCS_ERR_INVALID_PARAM;
    }
    desc->win_base = desc->geom.base + win_offset;
    desc->component_id = span_rkey_get(p + 4, 4);
    desc->key_size     = p[36];
    desc->num_varying  = p[37];
    desc->key0         = p + SPAN_RKEY_HDR_SIZE;
    desc->mask         = desc->key0 + desc->key_size;
    desc->varying      = desc->mask + span_rkey_mask_size(desc->key_size);
    desc->spilled      = !!(flags & SPAN_RKEY_FLAG_SPILL);
    desc->span_vmm     = !!(flags & SPAN_RKEY_FLAG_SPAN_VMM);
    body_size          = span_rkey_body_size(flags, desc->key_size,
                                             desc->geom.num_chunks,
                                             desc->num_varying);
    if ((desc->span_vmm && !desc->spilled) ?
        (body_size < SPAN_RKEY_VMM_HEAD) :
        (desc->num_varying > desc->key_size)) {
        ucs_error("span rkey %p: a body of %u keys of %zu bytes (%u varying "
                  "or body bytes) is malformed", buffer,
                  desc->geom.num_chunks, desc->key_size, desc->num_varying);
        return UCS_ERR_INVALID_PARAM;
    }
    if ((desc->span_vmm && (desc->key_size != SPAN_VMM_KEY_SIZE)) ||
        (desc->spilled && (desc->key_size == 0)) ||
        (desc->spilled && desc->num_varying) ||
        (body_size > buffer_size - SPAN_RKEY_HDR_SIZE)) {
        ucs_error("span rkey %p: %u keys of %zu bytes (%u varying) overrun "
                  "the %zu bytes of the key (its exporter packed %u)", buffer,
                  desc->geom.num_chunks, desc->key_size, desc->num_varying,
                  buffer_size, p[SPAN_RKEY_SIZE_OFFSET]);
        return UCS_ERR_INVALID_PARAM;
    }

    checksum = span_rkey_get(p + SPAN_RKEY_SUM_OFFSET, 4);
    if (checksum != span_rkey_checksum(p, body_size)) {
        ucs_error("span rkey %p: checksum 0x%x does not match its contents "
                  "(0x%x): the key is corrupted", buffer, checksum,
                  span_rkey_checksum(p, body_size));
        return UCS_ERR_INVALID_PARAM;
    }

    if (desc->spilled) {
        span_rkey_parse_spill(desc->key0, &desc->spill);
        desc->key0 = desc->mask = desc->varying = NULL;
    } else if (desc->span_vmm) {
        desc->mask = desc->varying = NULL;
    } else if ((desc->key_size > 0) && (desc->geom.num_chunks > 1)) {
        return span_rkey_parse_mask(p, desc);
    }
    return UCS_OK;
}

ucs_status_t span_rkey_packed_size(const void *buffer, size_t *size_p)
{
    const uint8_t *p    = buffer;
    ucs_status_t status = span_rkey_parse_header(p);

    *size_p = (status == UCS_OK) ? p[SPAN_RKEY_SIZE_OFFSET] : 0;
    return status;
}

void span_rkey_key(const span_rkey_desc_t *desc, uint32_t index, void *key)
{
    const uint8_t *in;
    uint8_t *out = key;
    size_t b;

    memcpy(out, desc->key0, desc->key_size);
    if (index == 0) {
        return;
    }
    in = desc->varying + ((size_t)(index - 1) * desc->num_varying);
    for (b = 0; b < desc->key_size; ++b) {
        if (span_rkey_mask_bit(desc->mask, b)) {
            out[b] = *(in++);
        }
    }
}

void span_rkey_init(span_rkey_t *rkey, const span_rkey_desc_t *desc)
{
    rkey->geom         = desc->geom;
    rkey->win_base     = desc->win_base;
    rkey->win_length   = desc->win_length;
    rkey->whole_length = ((desc->geom.num_chunks == 1) && (rkey->vmm == NULL)) ?
                         desc->win_length : 0;
}

void span_rkey_log_crossing(const span_rkey_t *rkey, uint64_t addr,
                            size_t length, uint64_t avail)
{
    ucs_error("span rkey %p: remote access [0x%" PRIx64 ", +%zu) crosses "
              "a chunk or unit end %" PRIu64 " bytes in (chunks of %" PRIu64
              ", units of %" PRIu64 "); only zcopy ops are split", rkey,
              addr, length, avail, rkey->geom.chunk_size,
              rkey->geom.unit_size);
}
