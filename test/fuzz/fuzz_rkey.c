/*
 * libFuzzer target: span rkey parsing and everything an importer does with
 * a parsed key (every inner key rebuilt, chunk lookups over the extent).
 * Built with clang -fsanitize=fuzzer,address: a read past the input or a
 * wrong lookup is a crash.
 */
#include "span_rkey.h"

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

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    ucs_log_push_handler(span_fuzz_quiet);
    return 0;
}

static void span_fuzz_lookup(const span_chunk_geom_t *geom, uint64_t addr)
{
    uint64_t avail, start = 0, length = 0;
    uint32_t index = span_chunk_find(geom, addr, &avail);

    if (index < geom->num_chunks) {
        span_chunk_range(geom, index, &start, &length);
        if ((addr >= start) && (avail > 0) &&
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

static void span_fuzz_parse(const uint8_t *buf, size_t size)
{
    uint8_t key[SPAN_RKEY_MAX_KEY];
    const span_chunk_geom_t *geom;
    span_rkey_desc_t desc;
    uint32_t i;

    if (span_rkey_parse(buf, size, &desc) != UCS_OK) {
        return;
    }
    geom = &desc.geom;
    /* spilled keys are read from the exporter (span_spill.c), not here */
    for (i = 0; !desc.spilled && (i < geom->num_chunks); ++i) {
        span_rkey_key(&desc, i, key);
    }
    span_fuzz_lookup(geom, geom->base);
    span_fuzz_lookup(geom, geom->base + geom->length - 1);
    span_fuzz_lookup(geom, geom->base + (geom->length / 2));
    span_fuzz_lookup(geom, geom->base + (geom->length / 3));
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

    buf[0] = SPAN_RKEY_VERSION;
    h      = span_fuzz_fnv(2166136261u, buf, 38);
    memcpy(buf + 38, &h, 4);
    body = (body > size - SPAN_RKEY_HDR_SIZE) ? size - SPAN_RKEY_HDR_SIZE : body;
    h    = span_fuzz_fnv(h, buf + SPAN_RKEY_HDR_SIZE, body);
    memcpy(buf + 42, &h, 4);
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
    return 0;
}
