/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Cost of chunking, twin against twin in the same run, medians:
 *  1. registration: a region registered as chunks vs as one registration,
 *     same bytes, through strict+ whose MD pins what it registers (mlock, as
 *     a NIC driver does), in one process;
 *  2. bandwidth: UCP puts and gets between two processes over posix,cma+
 *     that cross a hard boundary (split in two ops) vs ones that do not.
 *
 * Usage: span_bench_chunk [REG_GiB [RUNS]]; run by
 * contrib/bench/bench_chunk.sh, which points UCX_MODULE_DIR at span beside
 * the strict test transport.
 */
#include "tools/harness/span_md_open.h"
#include "tools/harness/span_pair.h"
#include "tools/harness/span_stats.h"

#include <uct/api/uct.h>
#include <ucs/sys/math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define SPAN_BENCH_MAX_RUNS 51
#define SPAN_BENCH_UNIT     (64ul << 20)

static uct_md_h span_bench_md(const char *max_chunk)
{
    uct_component_h span = span_component_by_name("span");
    uct_md_config_t *config;
    uct_md_h md = NULL;

    if ((span != NULL) &&
        (uct_md_config_read(span, NULL, NULL, &config) == UCS_OK)) {
        if ((uct_config_modify(config, "SPAN_MAX_CHUNK", max_chunk) !=
             UCS_OK) ||
            (uct_md_open(span, "strict+", config, &md) != UCS_OK)) {
            md = NULL;
        }
        uct_config_release(config);
    }
    if (md == NULL) {
        fprintf(stderr, "cannot open strict+ (UCX_MODULE_DIR must hold span "
                "and the strict test transport)\n");
    }
    return md;
}

/* Seconds to register and deregister [buf, buf + length) once */
static double span_bench_reg_once(uct_md_h md, void *buf, size_t length)
{
    double t = span_stats_now();
    uct_mem_h memh;

    if (uct_md_mem_reg(md, buf, length, UCT_MD_MEM_ACCESS_ALL, &memh) !=
        UCS_OK) {
        return -1;
    }
    uct_md_mem_dereg(md, memh);
    return span_stats_now() - t;
}

static int span_bench_registration(size_t length, unsigned runs)
{
    double one[SPAN_BENCH_MAX_RUNS], chunked[SPAN_BENCH_MAX_RUNS];
    uct_md_h md_one     = span_bench_md("inf");
    uct_md_h md_chunked = span_bench_md("1g");
    double m1, mc;
    unsigned r;
    void *buf;

    buf = mmap(NULL, length, PROT_READ | PROT_WRITE,
               MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if ((md_one == NULL) || (md_chunked == NULL) || (buf == MAP_FAILED)) {
        return 1;
    }
    for (r = 0; r < runs; ++r) {
        one[r]     = span_bench_reg_once(md_one, buf, length);
        chunked[r] = span_bench_reg_once(md_chunked, buf, length);
        if ((one[r] < 0) || (chunked[r] < 0)) {
            fprintf(stderr, "registration failed in run %u\n", r);
            return 1;
        }
    }
    m1 = span_stats_median(one, runs);
    mc = span_stats_median(chunked, runs);
    printf("Registration + deregistration of %zu GiB through strict+ "
           "(pinned), median of %u\n\n", length >> 30, runs);
    printf("| %-34s | %10s | %6s |\n", "registered as", "ms", "ratio");
    printf("|------------------------------------|------------|--------|\n");
    printf("| %-34s | %10.2f | %6.3f |\n", "one registration", m1 * 1e3, 1.0);
    printf("| %-34s | %10.2f | %6.3f |\n\n",
           "1 GiB chunks, 4 MiB overlap", mc * 1e3, mc / m1);
    munmap(buf, length);
    uct_md_close(md_chunked);
    uct_md_close(md_one);
    return 0;
}

/* GB/s of puts, then gets, of length bytes at offset: 256 MiB of each */
static int span_bench_rma(span_pair_t *pair, span_pair_region_t *region,
                          size_t offset, size_t length, uint8_t *buf,
                          double *put_gbps, double *get_gbps)
{
    unsigned ops = ucs_max(1, (256ul << 20) / length);
    unsigned i;
    double t;

    t = span_stats_now();
    for (i = 0; i < ops; ++i) {
        if (span_pair_put(pair, region, offset, buf, length) != UCS_OK) {
            return 1;
        }
    }
    *put_gbps = (double)ops * length / (span_stats_now() - t) / 1e9;
    t = span_stats_now();
    for (i = 0; i < ops; ++i) {
        if (span_pair_get(pair, region, offset, buf, length) != UCS_OK) {
            return 1;
        }
    }
    *get_gbps = (double)ops * length / (span_stats_now() - t) / 1e9;
    return 0;
}

/* Inside a unit and across its end, runs interleaved; bytes checked */
static int span_bench_size(span_pair_t *pair, span_pair_region_t *region,
                           size_t unit_off, size_t length, unsigned runs)
{
    double p[2][SPAN_BENCH_MAX_RUNS], g[2][SPAN_BENCH_MAX_RUNS], m[4];
    size_t offset[2] = {unit_off + 4096, unit_off - length / 2};
    uint8_t *buf[2];
    unsigned r, k;
    int failed = 1;

    buf[0] = malloc(length);
    buf[1] = malloc(length);
    if ((buf[0] == NULL) || (buf[1] == NULL)) {
        goto out;
    }
    for (k = 0; k < 2; ++k) {
        span_pair_fill(buf[k], length, 5, offset[k]);
    }
    for (r = 0; r < runs; ++r) {
        for (k = 0; k < 2; ++k) {
            if (span_bench_rma(pair, region, offset[k], length, buf[k],
                               &p[k][r], &g[k][r])) {
                goto out;
            }
        }
    }
    for (k = 0; k < 2; ++k) {
        if (span_pair_mismatches(buf[k], length, 5, offset[k]) != 0) {
            fprintf(stderr, "wrong bytes at offset %zu\n", offset[k]);
            goto out;
        }
        m[k]     = span_stats_median(p[k], runs);
        m[k + 2] = span_stats_median(g[k], runs);
    }
    printf("| %4zu MiB | %9.2f | %9.2f | %9.3f | %9.2f | %9.2f | %9.3f |\n",
           length >> 20, m[0], m[1], m[1] / m[0], m[2], m[3], m[3] / m[2]);
    failed = 0;
out:
    free(buf[1]);
    free(buf[0]);
    return failed;
}

static int span_bench_crossing(unsigned runs)
{
    static const size_t sizes[] = {1ul << 20, 4ul << 20, 16ul << 20,
                                   32ul << 20};
    span_pair_region_t region;
    span_pair_t pair;
    size_t i, unit_off, length = 3 * SPAN_BENCH_UNIT;
    int failed = 1;

    setenv("UCX_SPAN_TEST_UNIT_SIZE", "64m", 1);
    if ((span_pair_start(&pair, SPAN_PAIR_FORK, "posix,cma+",
                         UCP_FEATURE_RMA) != UCS_OK) ||
        (span_pair_map(&pair, length, 0, length, 5, &region) != UCS_OK)) {
        fprintf(stderr, "cannot start posix,cma+ with 64 MiB units\n");
        span_pair_stop(&pair);
        return 1;
    }
    /* a unit boundary inside the target's allocation with room around */
    unit_off = SPAN_BENCH_UNIT - (region.base % SPAN_BENCH_UNIT);
    unit_off += (unit_off < SPAN_BENCH_UNIT / 2) ? SPAN_BENCH_UNIT : 0;

    printf("UCP put/get between two processes over posix,cma+, hard "
           "boundaries every 64 MiB, GB/s (256 MiB per run), median of %u "
           "runs\n\n", runs);
    printf("| %8s | %9s | %9s | %9s | %9s | %9s | %9s |\n", "size",
           "put in", "put cross", "ratio", "get in", "get cross", "ratio");
    printf("|----------|-----------|-----------|-----------|-----------|"
           "-----------|-----------|\n");
    for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); ++i) {
        /* inside: after the boundary; crossing: centred on it */
        if (span_bench_size(&pair, &region, unit_off, sizes[i], runs)) {
            goto out;
        }
    }
    failed = 0;
out:
    span_pair_unmap(&pair, &region);
    failed |= span_pair_stop(&pair);
    unsetenv("UCX_SPAN_TEST_UNIT_SIZE");
    return failed;
}

int main(int argc, char **argv)
{
    size_t gib    = (argc > 1) ? strtoul(argv[1], NULL, 0) : 4;
    unsigned runs = (argc > 2) ? strtoul(argv[2], NULL, 0) : 7;

    if ((gib == 0) || (runs == 0) || (runs > SPAN_BENCH_MAX_RUNS)) {
        fprintf(stderr, "usage: %s [REG_GiB [RUNS <= %d]]\n", argv[0],
                SPAN_BENCH_MAX_RUNS);
        return 2;
    }
    /* the crossing runs fork: before UCT exists in this process */
    if (span_bench_crossing(runs) != 0) {
        return 1;
    }
    printf("\n");
    setenv("UCX_STRICT_PIN", "y", 1);
    setenv("UCX_STRICT_MAX_MR_SIZE", "inf", 1);
    return span_bench_registration(gib << 30, runs);
}
