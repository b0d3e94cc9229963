/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Cost of the registry as it fills: COUNT distinct pages of one mapping
 * (every other page) registered through a twin MD (each a new
 * registration), the same pages registered again (each a shared hit), the
 * pages between them unmapped while all are registered (each a memory event
 * inside the registered span that overlaps none), then every handle
 * deregistered. Nanoseconds per request or per munmap, median of RUNS runs.
 * A registry whose lookups walk every live registration shows times that
 * grow with COUNT; one that indexes them does not.
 *
 * Usage: span_bench_registry [COUNT [RUNS [MD]]] (MD default cma+); needs
 * UCX_MODULE_DIR.
 */
#include "tools/harness/span_stats.h"
#include "tools/harness/span_md_open.h"

#include <uct/api/uct.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define SPAN_BENCH_PAGE     4096
#define SPAN_BENCH_MAX_RUNS 99

/* Seconds for count registrations of distinct pages, written to memh */
static double span_bench_reg_pages(uct_md_h md, char *base, unsigned count,
                                   uct_mem_h *memh)
{
    double start = span_stats_now();
    unsigned i;

    for (i = 0; i < count; ++i) {
        if (uct_md_mem_reg(md, base + ((size_t)2 * i * SPAN_BENCH_PAGE),
                           SPAN_BENCH_PAGE, UCT_MD_MEM_ACCESS_ALL,
                           &memh[i]) != UCS_OK) {
            fprintf(stderr, "registration %u failed\n", i);
            return -1;
        }
    }
    return span_stats_now() - start;
}

/* Seconds for munmap of the count pages between the registered ones; the
 * pages are mapped again after */
static double span_bench_unmap_between(char *base, unsigned count)
{
    double start, end;
    unsigned i;

    start = span_stats_now();
    for (i = 0; i < count; ++i) {
        munmap(base + ((2 * (size_t)i + 1) * SPAN_BENCH_PAGE),
               SPAN_BENCH_PAGE);
    }
    end = span_stats_now();
    for (i = 0; i < count; ++i) {
        if (mmap(base + ((2 * (size_t)i + 1) * SPAN_BENCH_PAGE),
                 SPAN_BENCH_PAGE, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) ==
            MAP_FAILED) {
            return -1;
        }
    }
    return end - start;
}

static double span_bench_dereg(uct_md_h md, unsigned count, uct_mem_h *memh)
{
    double start = span_stats_now();
    unsigned i;

    for (i = 0; i < count; ++i) {
        uct_md_mem_dereg(md, memh[i]);
    }
    return span_stats_now() - start;
}

int main(int argc, char **argv)
{
    unsigned count = (argc > 1) ? strtoul(argv[1], NULL, 0) : 10000;
    unsigned runs  = (argc > 2) ? strtoul(argv[2], NULL, 0) : 5;
    const char *name = (argc > 3) ? argv[3] : "cma+";
    double t_new[SPAN_BENCH_MAX_RUNS], t_hit[SPAN_BENCH_MAX_RUNS],
           t_dereg[SPAN_BENCH_MAX_RUNS], t_unmap[SPAN_BENCH_MAX_RUNS];
    uct_mem_h *memh;
    uct_md_h md;
    char *base;
    unsigned r;

    if ((count == 0) || (runs == 0) || (runs > SPAN_BENCH_MAX_RUNS)) {
        fprintf(stderr, "usage: %s [COUNT [RUNS <= %d [MD]]]\n", argv[0],
                SPAN_BENCH_MAX_RUNS);
        return 2;
    }
    md   = span_md_open_by_name("span", name);
    memh = calloc(2 * (size_t)count, sizeof(*memh));
    base = mmap(NULL, (size_t)2 * count * SPAN_BENCH_PAGE,
                PROT_READ | PROT_WRITE,
                MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if ((md == NULL) || (memh == NULL) || (base == MAP_FAILED)) {
        fprintf(stderr, "cannot open %s (is UCX_MODULE_DIR set?) or map %u "
                "pages\n", name, count);
        return 1;
    }
    for (r = 0; r < runs; ++r) {
        t_new[r]   = span_bench_reg_pages(md, base, count, memh);
        t_hit[r]   = span_bench_reg_pages(md, base, count, memh + count);
        t_unmap[r] = span_bench_unmap_between(base, count);
        t_dereg[r] = span_bench_dereg(md, 2 * count, memh);
        if ((t_new[r] < 0) || (t_hit[r] < 0) || (t_unmap[r] < 0)) {
            return 1;
        }
    }
    printf("| %s | %u | %.1f | %.1f | %.1f | %.1f |\n", name, count,
           span_stats_median(t_new, runs) * 1e9 / count,
           span_stats_median(t_hit, runs) * 1e9 / count,
           span_stats_median(t_unmap, runs) * 1e9 / count,
           span_stats_median(t_dereg, runs) * 1e9 / (2 * count));
    uct_md_close(md);
    munmap(base, (size_t)2 * count * SPAN_BENCH_PAGE);
    free(memh);
    return 0;
}
