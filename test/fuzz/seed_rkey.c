/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Seeds for the rkey fuzzer: keys packed by span_rkey_pack with every
 * field at or next to its extremes (extent at the top of the address space
 * and at 0, the largest chunk, overlap and unit sizes the format carries,
 * 1 and 65535 chunks, keys of 0 and 192 bytes, VMM units whose descriptors
 * and serials sit at the ends of their ranges, spill references of all-ones
 * fields; the range registered whole and one byte in from either end).
 * Mutations start from valid keys at the edges, where arithmetic
 * wraps, instead of having to find them.
 *
 * Each key is written into DIR as it is (parsed whole), and behind a first
 * byte that makes the fuzzer read it as a peer's key of its component in
 * a buffer of what its exporter packed (fuzz_rkey.c): in each of the two
 * sizes an exporter packs (the header and one inner key where it never
 * cuts or spills, SPAN_RKEY_MAX_SIZE otherwise) that holds it.
 *   seed_rkey DIR
 */
#include "key/span_rkey.h"

#include <ucs/debug/log_def.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SEED_PAGE 4096ull
/* the first byte of a peer's key in fuzz_rkey.c: its component, and an
 * exporter that cuts or spills keys */
#define SEED_TWIN_CUT 1
#define SEED_CUTS     8

static const char *seed_dir;
static unsigned seed_count;

static ucs_log_func_rc_t seed_quiet(const char *file, unsigned line,
                                    const char *function,
                                    ucs_log_level_t level,
                                    const ucs_log_component_config_t *c,
                                    const char *message, va_list ap)
{
    return UCS_LOG_FUNC_RC_STOP;
}

static void seed_write(const uint8_t *key, size_t size, int peer_twin)
{
    char path[4096];
    FILE *f;

    snprintf(path, sizeof(path), "%s/seed-%04u", seed_dir, seed_count++);
    f = fopen(path, "wb");
    if (f == NULL) {
        perror(path);
        exit(1);
    }
    if (peer_twin >= 0) {
        fputc(peer_twin, f);
    }
    fwrite(key, 1, size, f);
    fclose(f);
}

/* Packs and writes one key; a geometry the planner or the packer refuses is
 * no seed (the refusals are tested in test_rkey.cc) */
static void seed_key(uint64_t base, uint64_t length, uint64_t unit,
                     uint64_t chunk, uint64_t overlap,
                     span_rkey_desc_t *desc, const void *keys)
{
    int twin = (desc->component_id == span_rkey_component_id("fuzz_cut")) ?
               SEED_TWIN_CUT : 0;
    uint8_t buf[SPAN_RKEY_MAX_SIZE];
    size_t size;

    if (span_chunk_plan(&desc->geom, base, length, unit, chunk, overlap) !=
        UCS_OK) {
        return;
    }
    if (span_rkey_pack(buf, SPAN_RKEY_MAX_SIZE, desc, keys, &size) ==
        UCS_OK) {
        seed_write(buf, size, -1);
        seed_write(buf, size, twin | SEED_CUTS);
        if ((length > 2) && (span_rkey_set_window(buf, size, base + 1,
                                                  length - 2) == UCS_OK)) {
            seed_write(buf, size, -1);
            seed_write(buf, size, twin | SEED_CUTS);
        }
    }
    if (span_rkey_pack(buf, SPAN_RKEY_HDR_SIZE + desc->key_size, desc, keys,
                       &size) == UCS_OK) {
        seed_write(buf, size, twin);
    }
}

static void seed_geometries(span_rkey_desc_t *desc, const void *keys)
{
    const uint64_t top = UINT64_MAX - (UINT64_MAX % SEED_PAGE);
    const uint64_t max = UINT32_MAX * SEED_PAGE; /* largest size in pages */
    const uint64_t bases[] = {0, SEED_PAGE, 0x7f0000000000ull,
                              top - (64 * SEED_PAGE)};
    unsigned i;

    for (i = 0; i < sizeof(bases) / sizeof(bases[0]); ++i) {
        seed_key(bases[i], 1, 0, 0, 0, desc, keys);
        seed_key(bases[i], 64 * SEED_PAGE - 1, 0, 0, 0, desc, keys);
        seed_key(bases[i], 64 * SEED_PAGE, 16 * SEED_PAGE, 4 * SEED_PAGE,
                 SEED_PAGE, desc, keys);
        seed_key(bases[i], 64 * SEED_PAGE, SEED_PAGE, 0, 0, desc, keys);
        seed_key(bases[i], 64 * SEED_PAGE, max, max, max - SEED_PAGE, desc,
                 keys);
        seed_key(bases[i], 64 * SEED_PAGE, 0, 2 * SEED_PAGE,
                 SEED_PAGE, desc, keys);
    }
    /* the largest extent the address space holds, and 65535 chunks */
    seed_key(0, top - SEED_PAGE, 0, 0, 0, desc, keys);
    seed_key(SEED_PAGE, top - (2 * SEED_PAGE), max, max, 0, desc, keys);
    seed_key(0, 65535 * SEED_PAGE, SEED_PAGE, 0, 0, desc, keys);
    seed_key(0, 65535 * SEED_PAGE, 0, SEED_PAGE, 0, desc, keys);
}

static void seed_inner(void)
{
    static uint8_t keys[65535 * 8];
    span_rkey_desc_t desc = {0};
    size_t k;

    desc.component_id = span_rkey_component_id("fuzz_cut");
    for (k = 0; k < sizeof(keys); ++k) {
        keys[k] = ((k % 8) < 6) ? 0xff : (uint8_t)(k / 8);
    }
    desc.key_size = 0;
    seed_geometries(&desc, keys);
    desc.key_size = 8;
    seed_geometries(&desc, keys);

    desc.component_id = span_rkey_component_id("fuzz_whole");
    desc.key_size     = 24;
    seed_geometries(&desc, keys);
    desc.key_size = SPAN_RKEY_MAX_KEY;
    seed_geometries(&desc, keys);
}

static void seed_vmm(void)
{
    static span_vmm_key_t keys[90];
    const uint64_t serials[][2] = {{1, 1}, {INT64_MAX - 89, INT64_MAX},
                                   {INT64_MAX, 1}};
    const uint32_t fds[][2]     = {{0, 1}, {INT32_MAX - 89, INT32_MAX},
                                   {INT32_MAX, 0}};
    span_rkey_desc_t desc       = {0};
    unsigned s, f, i, n;

    desc.component_id = span_rkey_component_id("fuzz_cut");
    desc.key_size     = SPAN_VMM_KEY_SIZE;
    desc.span_vmm     = 1;
    for (s = 0; s < 3; ++s) {
        for (f = 0; f < 3; ++f) {
            for (i = 0; i < 90; ++i) {
                keys[i].magic    = SPAN_CUDA_VMM_MAGIC;
                keys[i].pid      = UINT32_MAX;
                keys[i].fd       = (i % 2) ? fds[f][1] : fds[f][0];
                keys[i].table_fd = INT32_MAX;
                keys[i].pid_ns   = UINT64_MAX;
                keys[i].serial   = (i % 2) ? serials[s][1] : serials[s][0];
                keys[i].table_id = UINT64_MAX;
            }
            for (n = 1; n <= 90; n *= 3) {
                seed_key(0x7f0000000000ull, n * 512 * SEED_PAGE,
                         512 * SEED_PAGE, 0, 0, &desc, keys);
            }
        }
    }
}

static void seed_spill(void)
{
    span_rkey_desc_t desc = {0};

    desc.component_id   = span_rkey_component_id("fuzz_cut");
    desc.key_size       = 8;
    desc.spilled        = 1;
    desc.spill.pid      = UINT32_MAX;
    desc.spill.fd       = UINT32_MAX;
    desc.spill.arena_id = UINT64_MAX;
    desc.spill.offset   = UINT64_MAX;
    desc.spill.seq      = UINT64_MAX;
    desc.spill.keys_sum = UINT32_MAX;
    desc.spill.pid_ns   = UINT64_MAX;
    seed_geometries(&desc, NULL);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    seed_dir = argv[1];
    ucs_log_push_handler(seed_quiet);
    seed_inner();
    seed_vmm();
    seed_spill();
    printf("seed_rkey: %u seeds in %s\n", seed_count, seed_dir);
    return (seed_count > 0) ? 0 : 1;
}
