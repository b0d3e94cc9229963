/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * libFuzzer target: span rkey parsing and everything an importer does with
 * a parsed key (every inner key rebuilt, chunk lookups over the extent).
 * Built with clang -fsanitize=fuzzer,address: a read past the input or a
 * wrong lookup is a crash.
 *
 * Each input is parsed as it is, then as a key from a peer
 * (span_rkey_parse_peer), which UCT hands over without its length: in a
 * buffer of exactly the rkey_packed_size of the exporter's twin MD, in
 * every configuration an exporter of that component may have (the input's
 * first byte chooses): one that never cuts or spills keys packs the header
 * and one inner key, one that does (UCX_SPAN_SPILL=y, a chunk or unit
 * size) SPAN_RKEY_MAX_SIZE bytes. The importer's own configuration does not
 * bound the parse (the key carries its size, span_rkey.c), only its twins'
 * inner key sizes do: every exporter configuration meets both twins here.
 */
#include "key/span_rkey_sizes.h"

#include <ucs/debug/log_def.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static ucs_log_func_rc_t span_fuzz_quiet(const char *file, unsigned line,
                                         const char *function,
                                         ucs_log_level_t level,
                                         const ucs_log_component_config_t *c,
                                         const char *message, va_list ap)
{
    return UCS_LOG_FUNC_RC_STOP; /* refusals log; millions would drown it */
}

/* The inner components of the twin MDs open here, and of a peer's keys */
static const struct {
    const char *component;
    size_t     key_size;
} span_fuzz_twins[] = {
    {"fuzz_whole", 24},
    {"fuzz_cut", 8}
};

/* Bits of an input's first byte (span_fuzz_peer) */
#define SPAN_FUZZ_TWIN      1 /* which component */
#define SPAN_FUZZ_OWN_ID    2 /* keep the input's own component id */
#define SPAN_FUZZ_KEEP_SUMS 4 /* leave the checksums as they are */
#define SPAN_FUZZ_CUTS      8 /* the exporter cuts or spills keys */

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    unsigned i;

    ucs_log_push_handler(span_fuzz_quiet);
    for (i = 0; i < 2; ++i) {
        if (span_rkey_size_add(span_rkey_component_id(
                                       span_fuzz_twins[i].component),
                               span_fuzz_twins[i].key_size) != UCS_OK) {
            abort();
        }
    }
    return 0;
}

/* The chunk of an access at addr, up to the extent's end (an empty access
 * there lies in the last chunk, with nothing available) */
static void span_fuzz_lookup(const span_chunk_geom_t *geom, uint64_t addr)
{
    uint64_t end = geom->base + geom->length;
    uint64_t avail, start = 0, length = 0;
    uint32_t index = span_chunk_find(geom, addr, &avail);

    if (index < geom->num_chunks) {
        span_chunk_range(geom, index, &start, &length);
        if ((addr >= start) && ((avail > 0) || (addr == end)) &&
            (addr + avail == start + length)) {
            return;
        }
    }
    fprintf(stderr, "lookup 0x%lx: chunk %u [0x%lx, +0x%lx) avail 0x%lx in "
            "base 0x%lx len 0x%lx unit 0x%lx chunk 0x%lx overlap 0x%lx n %u\n",
            addr, index, start, length, avail, geom->base, geom->length,
            geom->unit_size, geom->chunk_size, geom->overlap,
            geom->num_chunks);
    abort();
}

/* Span's VMM unit keys, decoded as span_rkey_unpack does */
static void span_fuzz_vmm_keys(const span_rkey_desc_t *desc)
{
    span_vmm_key_t *keys = malloc(desc->geom.num_chunks * sizeof(*keys));

    if (keys != NULL) {
        span_rkey_vmm_keys(desc, keys);
        free(keys);
    }
}

/* What an importer does with a parsed key */
static void span_fuzz_use(const span_rkey_desc_t *desc)
{
    uint8_t key[SPAN_RKEY_MAX_KEY];
    const span_chunk_geom_t *geom = &desc->geom;
    uint32_t i;

    /* spilled keys are read from the exporter (span_spill.c), not here */
    if (desc->span_vmm && !desc->spilled) {
        span_fuzz_vmm_keys(desc);
    }
    for (i = 0; !desc->spilled && !desc->span_vmm &&
                (i < geom->num_chunks); ++i) {
        span_rkey_key(desc, i, key);
    }
    /* the range ops may reach lies inside the units */
    if ((desc->win_base < geom->base) || (desc->win_length == 0) ||
        (desc->win_base - geom->base > geom->length - desc->win_length)) {
        fprintf(stderr, "range [0x%lx, +0x%lx) outside [0x%lx, +0x%lx)\n",
                desc->win_base, desc->win_length, geom->base, geom->length);
        abort();
    }
    span_fuzz_lookup(geom, desc->win_base);
    span_fuzz_lookup(geom, desc->win_base + desc->win_length);
    span_fuzz_lookup(geom, geom->base);
    span_fuzz_lookup(geom, geom->base + geom->length - 1);
    span_fuzz_lookup(geom, geom->base + geom->length);
    span_fuzz_lookup(geom, geom->base + (geom->length / 2));
    span_fuzz_lookup(geom, geom->base + (geom->length / 3));
}

static void span_fuzz_parse(const uint8_t *buf, size_t size)
{
    span_rkey_desc_t desc;

    if (span_rkey_parse(buf, size, &desc) == UCS_OK) {
        span_fuzz_use(&desc);
    }
}

/* FNV-1a 32, written again from the format's description */
static uint32_t span_fuzz_fnv(uint32_t h, const uint8_t *p, size_t n)
{
    while (n-- > 0) {
        h = (h ^ *(p++)) * 16777619u;
    }
    return h;
}

/* Gives the input correct checksums for what its header claims, so that the
 * validation behind them is reached by any input, not only by inputs that
 * guessed two checksums */
static void span_fuzz_reseal(uint8_t *buf, size_t size)
{
    size_t n = buf[2] | (buf[3] << 8), K = buf[36], v = buf[37];
    size_t body = ((K == 0) || (n <= 1)) ? K : K + (K + 7) / 8 + (n - 1) * v;
    uint32_t h;

    if (buf[1] & 2) {        /* a spill reference */
        body = 44;
    } else if (buf[1] & 4) { /* span's VMM units: v is the body's length */
        body = v;
    }

    buf[0] = SPAN_RKEY_VERSION;
    h      = span_fuzz_fnv(2166136261u, buf, SPAN_RKEY_HDR_SUM_OFFSET);
    memcpy(buf + SPAN_RKEY_HDR_SUM_OFFSET, &h, 4);
    body = (body > size - SPAN_RKEY_HDR_SIZE) ? size - SPAN_RKEY_HDR_SIZE : body;
    h    = span_fuzz_fnv(h, buf + SPAN_RKEY_HDR_SIZE, body);
    memcpy(buf + SPAN_RKEY_SUM_OFFSET, &h, 4);
}

/* The input after its first byte as a peer's key, in a buffer of exactly
 * what an exporter of the component it names packed (SPAN_FUZZ_* bits of
 * the first byte). The key's size field says that size: UCP hands over
 * what the exporter packed, and the exporter says how much that is (one
 * that claims more than it sent is a forger, whom no parse without the
 * length can stop, span_rkey.c). */
static void span_fuzz_peer(const uint8_t *data, size_t size)
{
    unsigned twin = data[0] & SPAN_FUZZ_TWIN;
    uint32_t id, own_id;
    size_t packed_size;
    uint8_t *buf;
    span_rkey_desc_t desc;
    unsigned i;

    /* an input that keeps its own component id and names a twin gets that
     * twin's packed size: UCP hands over what the exporter packed */
    if ((data[0] & SPAN_FUZZ_OWN_ID) && (size >= 9)) {
        memcpy(&own_id, data + 5, sizeof(own_id));
        for (i = 0; i < 2; ++i) {
            if (own_id == span_rkey_component_id(
                                  span_fuzz_twins[i].component)) {
                twin = i;
            }
        }
    }
    packed_size = (data[0] & SPAN_FUZZ_CUTS) ? SPAN_RKEY_MAX_SIZE :
                  SPAN_RKEY_HDR_SIZE + span_fuzz_twins[twin].key_size;
    buf         = malloc(packed_size);
    id          = span_rkey_component_id(span_fuzz_twins[twin].component);

    memset(buf, 0, packed_size);
    memcpy(buf, data + 1, (size - 1 < packed_size) ? size - 1 : packed_size);
    if (!(data[0] & SPAN_FUZZ_OWN_ID)) {
        memcpy(buf + 4, &id, sizeof(id));
    }
    buf[SPAN_RKEY_SIZE_OFFSET] = packed_size;
    if (!(data[0] & SPAN_FUZZ_KEEP_SUMS)) {
        span_fuzz_reseal(buf, packed_size);
    }
    if (span_rkey_parse_peer(buf, &desc) == UCS_OK) {
        span_fuzz_use(&desc);
    }
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* exact copies, so that a read past size is caught */
    uint8_t *buf = malloc(size ? size : 1);

    memcpy(buf, data, size);
    span_fuzz_parse(buf, size);
    if (size >= SPAN_RKEY_HDR_SIZE) {
        span_fuzz_reseal(buf, size);
        span_fuzz_parse(buf, size);
    }
    free(buf);
    if (size > 0) {
        span_fuzz_peer(data, size);
    }
    return 0;
}
