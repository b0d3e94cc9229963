/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The span rkey: its wire format, packed and parsed (span_rkey.c, which
 * describes the format next to its code), and the unpacked rkey with the
 * checks every remote access makes (span_rkey_unpack.c).
 */
#ifndef SPAN_RKEY_H_
#define SPAN_RKEY_H_

#include "base/span_chunk.h"
#include "vmm/span_vmm.h"
#include "ucx/span_ucx.h"

#include <ucs/debug/log_def.h>
#include <ucs/sys/compiler_def.h>
#include <ucs/type/status.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdint.h>

#define SPAN_RKEY_VERSION     5
#define SPAN_RKEY_HDR_SIZE    63
/* Where the exporter's packed size and the header's checksums lie
 * (span_rkey.c) */
#define SPAN_RKEY_SIZE_OFFSET    38
#define SPAN_RKEY_HDR_SUM_OFFSET 55
#define SPAN_RKEY_SUM_OFFSET     59
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
    uint64_t pid_ns;   /* the PID namespace pid belongs to, with its host
                          (span_peer_pid_ns) */
} span_rkey_spill_t;

typedef struct span_rkey_desc {
    uint32_t          component_id; /* span_rkey_component_id() of the inner */
    span_chunk_geom_t geom;         /* extent of the units and chunks it was
                                       registered through, in the
                                       exporter's addresses */
    uint64_t          win_base;     /* the range registered, inside geom, */
    uint64_t          win_length;   /* which ops may reach; 0 to pack: all
                                       of geom */
    size_t            key_size;     /* bytes of one inner key */
    int               spilled;      /* keys in the spill slot, not inline */
    int               span_vmm;     /* the keys are span's own VMM unit keys
                                       (span_vmm.h), not the inner's */
    span_rkey_spill_t spill;
    /* set by span_rkey_parse, inside the parsed buffer (NULL when
     * spilled): */
    const uint8_t     *key0;        /* the first inner key, whole */
    const uint8_t     *mask;        /* bytes of a key that differ from key0 */
    const uint8_t     *varying;     /* those bytes of keys 1.., in turn */
    unsigned          num_varying;  /* span_vmm inline: the body's bytes */
} span_rkey_desc_t;

uint32_t span_rkey_component_id(const char *component_name);

/* Sets the range registered of a key packed by span_rkey_pack, of
 * packed_size bytes: [base, base + length) must lie inside its geometry
 * (UCS_ERR_INVALID_PARAM) */
ucs_status_t span_rkey_set_window(void *buffer, size_t packed_size,
                                  uint64_t base, uint64_t length);

/* Packs desc and the num_chunks inner keys of key_size bytes each (keys,
 * contiguous; unused when desc->spilled) into buffer, of rkey_size bytes
 * (the twin MD's rkey_packed_size, which the key carries; at most
 * SPAN_RKEY_MAX_SIZE); *packed_size_p: the bytes written.
 * UCS_ERR_EXCEEDS_LIMIT when they do not fit inline, UCS_ERR_INVALID_PARAM
 * for a geometry the format cannot carry (sizes not in pages, units from an
 * origin that is neither 0 nor the base) or a size that holds no header. */
ucs_status_t span_rkey_pack(void *buffer, size_t rkey_size,
                            const span_rkey_desc_t *desc, const void *keys,
                            size_t *packed_size_p);

/* Parses a key of buffer_size bytes, or fewer where its exporter packed
 * fewer: bytes past either are never read */
ucs_status_t span_rkey_parse(const void *buffer, size_t buffer_size,
                             span_rkey_desc_t *desc);

/* The size a key's exporter packed, which its header carries, once the
 * header (version, flags, checksum) checks out; an error logged where not */
ucs_status_t span_rkey_packed_size(const void *buffer, size_t *size_p);

/* Inner key of chunk index of a parsed rkey whose inner keys are inline,
 * key_size bytes (span_vmm keys: span_rkey_vmm_keys) */
void span_rkey_key(const span_rkey_desc_t *desc, uint32_t index, void *key);

/* The n unit keys of a parsed span_vmm rkey that carries them inline;
 * UCS_ERR_INVALID_PARAM where its body does not encode n of them */
ucs_status_t span_rkey_vmm_keys(const span_rkey_desc_t *desc,
                                span_vmm_key_t *keys);

/* The unpacked rkey: what uct_rkey_t points to for a twin */
typedef struct span_rkey {
    /* win_length where inner[0] serves the whole range registered (one
     * chunk, no VMM mapping), else 0: the ops that make one access check
     * only this and win_base, in one cache line */
    uint64_t          whole_length;
    uint64_t          win_base;        /* the range registered, which every */
    uint64_t          win_length;      /* op must lie in */
    span_chunk_geom_t geom;            /* units and chunks, exporter's
                                          addresses */
    uct_component_t   *inner_component;
    int               inner_unpacked;  /* inner rkeys must be released */
    uint32_t          num_inner;       /* one per chunk, or one for all
                                          where the inner key is empty */
    /* the access path: the units mapped here, which ops copy through (no
     * inner rkey), or NULL: ops go through inner[] */
    span_vmm_map_t *vmm;
    struct {
        uct_rkey_t    rkey;
        void          *handle;
    } inner[];
} span_rkey_t;

/* UCT_INVALID_RKEY or 0: no key, which UCT users pass for memory without a
 * memh (uct_iface_mem_alloc on cma) and with empty ops; checked with one
 * add and one compare before a key is read */
static UCS_F_ALWAYS_INLINE int span_rkey_is_none(uct_rkey_t rkey)
{
    return (rkey + 1) <= 1;
}

/* The extent of an unpacked rkey, from its parsed key; its access path
 * (inner keys, vmm) is set before */
void span_rkey_init(span_rkey_t *rkey, const span_rkey_desc_t *desc);

/* Whether [addr, addr+length) lies inside the range registered, not only
 * in the units it was registered through; logs if not */
static UCS_F_ALWAYS_INLINE int
span_rkey_check(const span_rkey_t *rkey, uint64_t addr, size_t length)
{
    uint64_t offset = addr - rkey->win_base; /* wraps when addr < base */

    if (ucs_likely((offset <= rkey->win_length) &&
                   (length <= rkey->win_length - offset))) {
        return 1;
    }

    ucs_error("span rkey %p: remote access [0x%" PRIx64 ", +%zu) is "
              "outside the registered extent [0x%" PRIx64 ", +%" PRIu64 ") "
              "(units [0x%" PRIx64 ", +%" PRIu64 "))", rkey, addr, length,
              rkey->win_base, rkey->win_length, rkey->geom.base,
              rkey->geom.length);
    return 0;
}

/* The inner rkey for an access at addr inside the extent, and in *avail_p
 * the bytes from addr that its chunk holds */
static UCS_F_ALWAYS_INLINE uct_rkey_t
span_rkey_inner(const span_rkey_t *rkey, uint64_t addr, uint64_t *avail_p)
{
    uint32_t index = span_chunk_find(&rkey->geom, addr, avail_p);

    return rkey->inner[(rkey->num_inner == 1) ? 0 : index].rkey;
}

void span_rkey_log_crossing(const span_rkey_t *rkey, uint64_t addr,
                            size_t length, uint64_t avail);

/* The inner rkey of an access that short, bcopy and atomic ops make: it
 * must lie in the extent (UCS_ERR_INVALID_ADDR) and in one chunk
 * (UCS_ERR_UNSUPPORTED: only zcopy ops are split) */
static UCS_F_ALWAYS_INLINE ucs_status_t
span_rkey_whole(const span_rkey_t *rkey, uint64_t addr, size_t length,
                uct_rkey_t *inner_p)
{
    uint64_t avail;

    if (ucs_unlikely(!span_rkey_check(rkey, addr, length))) {
        return UCS_ERR_INVALID_ADDR;
    }
    *inner_p = span_rkey_inner(rkey, addr, &avail);
    if (ucs_unlikely(length > avail)) {
        span_rkey_log_crossing(rkey, addr, length, avail);
        return UCS_ERR_UNSUPPORTED;
    }
    return UCS_OK;
}

/* The span component's rkey ops */
#endif
