/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * GPU measurements the GPU suite's table needs beside ucx_perftest:
 *   units HANDLES        how the CUDA resolver sees a VMM range of HANDLES
 *                        physical allocations (and one cudaMalloc buffer)
 *   reg COUNT RUNS       registering COUNT sub-buffers of one 256 MiB
 *                        cudaMalloc allocation (mem_reg + mkey_pack, then
 *                        dereg) through cuda_ipc and cuda_ipc+, median ms,
 *                        and the driver calls alone that the twin makes;
 *                        then ns per request inside the allocation once it
 *                        is registered (its first sub-buffer registered
 *                        before the clock starts)
 *   bw KIND HANDLES MIB ITERS TLS [ALLOC_MIB]
 *                        put and get bandwidth between two processes over
 *                        UCP into device memory of a kind (span_gpu.h):
 *                        the first MIB of an allocation of ALLOC_MIB
 *                        (default MIB), registered whole
 *   blocks KIND HANDLES BLOCK COUNT ITERS TLS
 *                        a KV-cache-shaped transfer: COUNT puts (then gets)
 *                        of BLOCK bytes each, every other block of a
 *                        region of that kind, posted before one flush;
 *                        GB/s and ops/s, medians of ITERS, every byte
 *                        checked once; then the put as one UCP SGL put
 *                        (-1 GB/s where UCP fails it)
 *   copy HANDLES MIB ITERS
 *                        the ceiling of the above without UCX: device copies
 *                        in one process between cudaMalloc buffers and into
 *                        and out of VMM memory of HANDLES handles
 * Needs UCX_MODULE_DIR (span) and a GPU; contrib/gpu/gpu_suite.sh runs it.
 */
#include "tools/harness/span_gpu.h"
#include "tools/harness/span_md_open.h"
#include "tools/harness/span_pair.h"
#include "tools/harness/span_stats.h"
#include "vendor/span_vendor.h"

#include "ucx/span_ucx.h" /* the v2 MD calls, not installed */
#include <ucs/sys/math.h>
#include <inttypes.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SPAN_BENCH_MAX_RUNS 99

static void span_bench_print_extent(const char *what, void *ptr, size_t len)
{
    const span_device_ops_t *ops = span_vendor_driver(UCS_MEMORY_TYPE_CUDA);
    span_device_extent_t ext;
    ucs_status_t status;

    status = (ops == NULL) ? UCS_ERR_NO_DEVICE :
             span_device_resolve(ops, (uintptr_t)ptr, len, &ext);
    if (status != UCS_OK) {
        printf("%-28s resolve failed: %s\n", what, ucs_status_string(status));
        return;
    }
    printf("%-28s %p +%zu -> %u units of %" PRIu64 " from 0x%" PRIx64 " +%"
           PRIu64 "\n", what, ptr, len, ext.num_units, ext.unit_size,
           ext.base, ext.length);
}

static int span_bench_units(unsigned handles)
{
    size_t gran = span_gpu_vmm_granularity();
    span_gpu_buf_t vmm, dev;

    if ((span_gpu_alloc(SPAN_GPU_VMM, handles * gran, handles, NULL, &vmm) !=
         UCS_OK) ||
        (span_gpu_alloc(SPAN_GPU_MALLOC, 64 << 20, 0, NULL, &dev) != UCS_OK)) {
        fprintf(stderr, "allocation failed\n");
        return 1;
    }
    span_bench_print_extent("VMM, whole", vmm.ptr, vmm.length);
    span_bench_print_extent("VMM, interior", (char*)vmm.ptr + gran + 13,
                            3 * gran);
    span_bench_print_extent("cudaMalloc, interior", (char*)dev.ptr + 4109,
                            1 << 20);
    span_gpu_free(&vmm);
    span_gpu_free(&dev);
    return 0;
}

/* Registers sub-buffer i of base and, with rkey, packs its key */
static int span_bench_reg_one(uct_md_h md, char *base, unsigned i,
                              uct_mem_h *memh, uint8_t *rkey)
{
    uct_md_mem_reg_params_t reg = {.field_mask = UCT_MD_MEM_REG_FIELD_MEM_TYPE,
                                   .mem_type   = UCS_MEMORY_TYPE_CUDA};
    uct_md_mkey_pack_params_t pack = {.field_mask = 0};
    char *buf                      = base + ((size_t)i * 8192) + 64;

    if ((md->ops->mem_reg(md, buf, 4096, &reg, &memh[i]) != UCS_OK) ||
        ((rkey != NULL) &&
         (md->ops->mkey_pack(md, memh[i], buf, 4096, &pack, rkey) !=
          UCS_OK))) {
        fprintf(stderr, "registration %u failed\n", i);
        return 0;
    }
    return 1;
}

static void span_bench_dereg_all(uct_md_h md, unsigned count,
                                 uct_mem_h *memh)
{
    uct_md_mem_dereg_params_t dereg = {.field_mask =
                                           UCT_MD_MEM_DEREG_FIELD_MEMH};
    unsigned i;

    for (i = 0; i < count; ++i) {
        dereg.memh = memh[i];
        md->ops->mem_dereg(md, &dereg);
    }
}

/* Seconds to register and pack count sub-buffers (then deregistered);
 * with warm, sub-buffer 0 is registered before the clock starts and the
 * others timed: requests inside an allocation registered already */
static double span_bench_reg_run(uct_md_h md, char *base, unsigned count,
                                 uct_mem_h *memh, int warm)
{
    double start = 0, end;
    uint8_t rkey[256];
    unsigned i;

    for (i = 0; i < count; ++i) {
        if (i == !!warm) {
            start = span_stats_now();
        }
        if (!span_bench_reg_one(md, base, i, memh, rkey)) {
            return -1;
        }
    }
    end = span_stats_now();
    span_bench_dereg_all(md, count, memh);
    return end - start;
}

/* Seconds of count - 1 requests inside an allocation registered already:
 * mem_reg alone, then mkey_pack alone of those handles */
static void span_bench_reg_parts(uct_md_h md, char *base, unsigned count,
                                 uct_mem_h *memh, double *reg_p,
                                 double *pack_p)
{
    uct_md_mkey_pack_params_t pack = {.field_mask = 0};
    double start = 0;
    uint8_t rkey[256];
    unsigned i;

    for (i = 0; i < count; ++i) {
        if (i == 1) {
            start = span_stats_now();
        }
        span_bench_reg_one(md, base, i, memh, NULL);
    }
    *reg_p = span_stats_now() - start;
    start  = span_stats_now();
    for (i = 1; i < count; ++i) {
        md->ops->mkey_pack(md, memh[i], base + ((size_t)i * 8192) + 64, 4096,
                           &pack, rkey);
    }
    *pack_p = span_stats_now() - start;
    span_bench_dereg_all(md, count, memh);
}

/* Seconds of the one driver call the twin makes per registration inside a
 * registered allocation (the buffer id that tells a new allocation at an
 * old address from the old one): the floor of its time */
static double span_bench_buffer_id_run(char *base, unsigned count)
{
    const span_device_ops_t *ops = span_vendor_driver(UCS_MEMORY_TYPE_CUDA);
    double start               = span_stats_now();
    uint64_t id;
    unsigned i;

    for (i = 0; i < count; ++i) {
        if (ops->buffer_id((uintptr_t)base + ((size_t)i * 8192) + 64, &id) !=
            UCS_OK) {
            fprintf(stderr, "buffer id query %u failed\n", i);
            return -1;
        }
    }
    return span_stats_now() - start;
}

static int span_bench_reg(unsigned count, int runs)
{
    uct_md_h native = span_md_open_by_name("cuda_ipc", "cuda_ipc");
    uct_md_h twin   = span_md_open_by_name("span", "cuda_ipc+");
    double t_native[SPAN_BENCH_MAX_RUNS], t_twin[SPAN_BENCH_MAX_RUNS];
    double t_id[SPAN_BENCH_MAX_RUNS], mi;
    uct_mem_h *memh = calloc(count, sizeof(*memh));
    span_gpu_buf_t dev;
    double mn, mt;
    int r;

    if ((native == NULL) || (twin == NULL) || (memh == NULL) ||
        (span_vendor_driver(UCS_MEMORY_TYPE_CUDA) == NULL) ||
        (count < 2) || ((size_t)count * 8192 > (256u << 20)) ||
        (span_gpu_alloc(SPAN_GPU_MALLOC, 256u << 20, 0, NULL, &dev) !=
         UCS_OK)) {
        fprintf(stderr, "cannot open cuda_ipc / cuda_ipc+ or allocate\n");
        return 1;
    }
    for (r = 0; r < runs; ++r) { /* interleaved */
        t_native[r] = span_bench_reg_run(native, dev.ptr, count, memh, 0);
        t_twin[r]   = span_bench_reg_run(twin, dev.ptr, count, memh, 0);
        t_id[r]     = span_bench_buffer_id_run(dev.ptr, count);
    }
    mn = span_stats_median(t_native, runs) * 1e3;
    mt = span_stats_median(t_twin, runs) * 1e3;
    mi = span_stats_median(t_id, runs) * 1e3;
    printf("| register + pack %u sub-buffers, ms | %10.2f | %10.2f | %6.3f |\n",
           count, mn, mt, mt / mn);
    printf("| of which %u buffer id queries, ms | | %10.2f | %6.3f |\n", count,
           mi, mi / mn);
    for (r = 0; r < runs; ++r) {
        t_native[r] = span_bench_reg_run(native, dev.ptr, count, memh, 1);
        t_twin[r]   = span_bench_reg_run(twin, dev.ptr, count, memh, 1);
    }
    /* ns per request of the count - 1 timed */
    mn = span_stats_median(t_native, runs) * 1e9 / (count - 1);
    mt = span_stats_median(t_twin, runs) * 1e9 / (count - 1);
    mi = span_stats_median(t_id, runs) * 1e9 / count;
    printf("| a sub-buffer of a registered allocation, ns per request | "
           "%8.1f | %8.1f | %6.3f |\n", mn, mt, mt / mn);
    printf("| of which the buffer id query, ns | | %8.1f | |\n", mi);
    printf("| the rest: registry, pack, calls, ns | | %8.1f | |\n", mt - mi);
    for (r = 0; r < runs; ++r) {
        span_bench_reg_parts(twin, dev.ptr, count, memh, &t_twin[r],
                             &t_native[r]);
    }
    printf("| of which mem_reg alone, ns | | %8.1f | |\n",
           span_stats_median(t_twin, runs) * 1e9 / (count - 1));
    printf("| of which mkey_pack alone, ns | | %8.1f | |\n",
           span_stats_median(t_native, runs) * 1e9 / (count - 1));
    uct_md_close(native);
    uct_md_close(twin);
    span_gpu_free(&dev);
    free(memh);
    return 0;
}

/* GB/s of iters puts (or gets) of the whole registration, one flush each */
static double span_bench_bw_run(span_pair_t *pair, span_pair_region_t *region,
                                void *local, size_t len, int iters, int get)
{
    double start = span_stats_now();
    int i;

    for (i = 0; i < iters; ++i) {
        ucs_status_t status = get ?
                span_pair_get(pair, region, 0, local, len) :
                span_pair_put(pair, region, 0, local, len);
        if (status != UCS_OK) {
            fprintf(stderr, "%s failed: %s\n", get ? "get" : "put",
                    ucs_status_string(status));
            return -1;
        }
    }
    return (double)len * iters / (span_stats_now() - start) / 1e9;
}

static int span_bench_bw(unsigned kind, unsigned handles, size_t mib,
                         size_t alloc_mib, int iters, const char *tls)
{
    size_t len = mib << 20, alloc_len = ucs_max(alloc_mib, mib) << 20;
    span_pair_region_t region;
    span_gpu_buf_t local;
    span_pair_t pair = {0};
    char reason[256];
    double put, get;

    if (span_pair_start(&pair, SPAN_PAIR_FORK, tls, UCP_FEATURE_RMA) !=
        UCS_OK) {
        return 1;
    }
    pair.local_cuda = 1;
    if (!span_gpu_init(reason, sizeof(reason)) ||
        (span_gpu_alloc(SPAN_GPU_MALLOC, len, 0, NULL, &local) != UCS_OK) ||
        (span_pair_map_kind(&pair, kind, handles, alloc_len, 0, alloc_len, 1,
                            &region) != UCS_OK)) {
        fprintf(stderr, "setup failed: %s\n", reason);
        span_pair_stop(&pair);
        return 1;
    }
    span_bench_bw_run(&pair, &region, local.ptr, len, 2, 0); /* warm up */
    put = span_bench_bw_run(&pair, &region, local.ptr, len, iters, 0);
    get = span_bench_bw_run(&pair, &region, local.ptr, len, iters, 1);
    printf("BW %s %u %zu %s put %.2f get %.2f\n", span_gpu_kind_names[kind],
           handles, mib, tls, put, get);
    span_pair_unmap(&pair, &region);
    span_gpu_free(&local);
    return span_pair_stop(&pair);
}

/* Registers len bytes of device memory at buf for the ops of
 * span_pair_rma_blocks (pair->local_memh) */
static ucs_status_t span_bench_map_local(span_pair_t *pair, void *buf,
                                         size_t len)
{
    ucp_mem_map_params_t params = {0};
    ucs_status_t status;

    params.field_mask  = UCP_MEM_MAP_PARAM_FIELD_ADDRESS |
                         UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                         UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
    params.address     = buf;
    params.length      = len;
    params.memory_type = span_gpu_memory_type();
    status = ucp_mem_map(pair->context, &params, &pair->local_memh);
    if (status != UCS_OK) {
        fprintf(stderr, "ucp_mem_map of the local %zu bytes failed: %s\n",
                len, ucs_status_string(status));
    }
    return status;
}

/* Seconds of one transfer of count blocks, every other one of the region;
 * in *post_p, those its posts took (the CPU's share) */
static double span_bench_blocks_run(span_pair_t *pair,
                                    span_pair_region_t *region, void *local,
                                    size_t block, size_t count, int get,
                                    double *post_p)
{
    double start = span_stats_now();
    ucs_status_t status;

    status = span_pair_rma_blocks(pair, region, 0, local, block, 2 * block,
                                  count, get, 0, NULL);
    if (status != UCS_OK) {
        fprintf(stderr, "%s of %zu blocks failed: %s\n", get ? "get" : "put",
                count, ucs_status_string(status));
        return -1;
    }
    *post_p = pair->post_s;
    return span_stats_now() - start;
}

/* Seconds of the same put as one UCP SGL put (NIXL_UCX_SGL_ENABLE=1 posts
 * its WRITEs so), or -1 where it failed (UCP 1.22 has no SGL over cuda_ipc
 * itself: the request is canceled) */
static double span_bench_sgl_run(span_pair_t *pair,
                                 span_pair_region_t *region, void *local,
                                 size_t block, size_t count)
{
    double start = span_stats_now();
    ucs_status_t status;

    status = span_pair_rma_sgl(pair, region, 0, local, block, 2 * block,
                               count, 0, 0);
    if (status != UCS_OK) {
        fprintf(stderr, "SGL put of %zu blocks failed: %s\n", count,
                ucs_status_string(status));
        return -1;
    }
    return span_stats_now() - start;
}

/* Mismatches of the blocks the puts wrote (the local pattern of seed 7)
 * and of the gaps between them (the region's own, seed 1) */
static size_t span_bench_blocks_check_put(span_pair_t *pair,
                                          span_pair_region_t *region,
                                          size_t block, size_t count)
{
    size_t i, bad = 0;

    for (i = 0; i < count; ++i) {
        bad += span_pair_check(pair, region, 2 * i * block, block, 7);
        bad += span_pair_check(pair, region, (2 * i + 1) * block, block, 1);
    }
    return bad;
}

/* Mismatches of the blocks the gets read (the region's pattern, seed 1)
 * and of the local gaps (seed 7, untouched) */
static size_t span_bench_blocks_check_get(void *local, size_t block,
                                          size_t count)
{
    size_t len = 2 * block * count, i, bad = SIZE_MAX;
    uint8_t *host = malloc(len);

    if ((host != NULL) && (span_gpu_copy(host, local, len) == UCS_OK)) {
        for (i = 0, bad = 0; i < count; ++i) {
            bad += span_pair_mismatches(host + (2 * i * block), block, 1,
                                        2 * i * block);
            bad += span_pair_mismatches(host + ((2 * i + 1) * block), block,
                                        7, (2 * i + 1) * block);
        }
    }
    free(host);
    return bad;
}

static int span_bench_blocks(unsigned kind, unsigned handles, size_t block,
                             size_t count, int iters, const char *tls)
{
    size_t len = 2 * block * count, bad_put, bad_get;
    double t_put[SPAN_BENCH_MAX_RUNS], t_get[SPAN_BENCH_MAX_RUNS], mp, mg;
    double p_put[SPAN_BENCH_MAX_RUNS], p_get[SPAN_BENCH_MAX_RUNS], post;
    double t_sgl[SPAN_BENCH_MAX_RUNS], ms;
    size_t bad_sgl = 0;
    span_pair_region_t region;
    span_gpu_buf_t local;
    span_pair_t pair = {0};
    uint8_t *pattern;
    char reason[256];
    int i;

    iters = ucs_min(ucs_max(iters, 1), SPAN_BENCH_MAX_RUNS);
    if (span_pair_start(&pair, SPAN_PAIR_FORK, tls, UCP_FEATURE_RMA) !=
        UCS_OK) {
        return 1;
    }
    pair.local_cuda = 1;
    pattern         = malloc(len);
    if ((pattern == NULL) || !span_gpu_init(reason, sizeof(reason)) ||
        (span_gpu_alloc(SPAN_GPU_MALLOC, len, 0, NULL, &local) != UCS_OK) ||
        (span_pair_map_kind(&pair, kind, handles, len, 0, len, 1, &region) !=
         UCS_OK)) {
        fprintf(stderr, "setup failed: %s\n", reason);
        span_pair_stop(&pair);
        return 1;
    }
    span_pair_fill(pattern, len, 7, 0);
    span_gpu_copy(local.ptr, pattern, len);
    /* the local buffer registered once and its memh given with each op, as
     * NIXL does */
    if (span_bench_map_local(&pair, local.ptr, len) != UCS_OK) {
        span_pair_stop(&pair);
        return 1;
    }
    /* the bytes, once: puts into the region, then gets of its own pattern
     * back over the local blocks */
    span_bench_blocks_run(&pair, &region, local.ptr, block, count, 0, &post);
    bad_put = span_bench_blocks_check_put(&pair, &region, block, count);
    span_pair_refill(&pair, &region, 1);
    span_bench_blocks_run(&pair, &region, local.ptr, block, count, 1, &post);
    bad_get = span_bench_blocks_check_get(local.ptr, block, count);
    /* and as one SGL put, its bytes checked once the same way (the gets
     * wrote the region's pattern over the local blocks) */
    span_gpu_copy(local.ptr, pattern, len);
    span_pair_refill(&pair, &region, 1);
    ms = span_bench_sgl_run(&pair, &region, local.ptr, block, count);
    if (ms > 0) {
        bad_sgl = span_bench_blocks_check_put(&pair, &region, block, count);
    }
    for (i = 0; i < iters; ++i) {
        t_put[i] = span_bench_blocks_run(&pair, &region, local.ptr, block,
                                         count, 0, &p_put[i]);
        t_get[i] = span_bench_blocks_run(&pair, &region, local.ptr, block,
                                         count, 1, &p_get[i]);
        t_sgl[i] = (ms > 0) ? span_bench_sgl_run(&pair, &region, local.ptr,
                                                 block, count) : -1;
    }
    mp = span_stats_median(t_put, iters);
    mg = span_stats_median(t_get, iters);
    ms = (ms > 0) ? span_stats_median(t_sgl, iters) : -1;
    /* post: CPU time per op of the posts (UCP and the transport), of the
     * op's whole time per op */
    printf("BLOCKS %s %u %zu %zu %s put %.2f GB/s %.0f ops/s get %.2f GB/s "
           "%.0f ops/s bad %zu %zu post %.3f %.3f us/op sgl %.2f GB/s bad "
           "%zu\n",
           span_gpu_kind_names[kind], handles, block, count, tls,
           block * count / mp / 1e9, count / mp, block * count / mg / 1e9,
           count / mg, bad_put, bad_get,
           span_stats_median(p_put, iters) * 1e6 / count,
           span_stats_median(p_get, iters) * 1e6 / count,
           (ms > 0) ? block * count / ms / 1e9 : -1.0, bad_sgl);
    span_pair_unmap(&pair, &region);
    ucp_mem_unmap(pair.context, pair.local_memh);
    span_gpu_free(&local);
    free(pattern);
    return (span_pair_stop(&pair) != 0) || (bad_put != 0) || (bad_get != 0);
}

/* GB/s of iters device copies of len bytes, in this process */
static double span_bench_copy_run(void *dst, const void *src, size_t len,
                                  int iters)
{
    double start = span_stats_now();
    int i;

    for (i = 0; i < iters; ++i) {
        if (span_gpu_copy(dst, src, len) != UCS_OK) {
            return -1;
        }
    }
    return (double)len * iters / (span_stats_now() - start) / 1e9;
}

/* The ceiling of a copy into and out of VMM memory of handles handles
 * (no UCX): the same copies between two cudaMalloc buffers beside it */
static int span_bench_copy(unsigned handles, size_t mib, int iters)
{
    size_t len = mib << 20;
    span_gpu_buf_t a, b, vmm;

    if ((span_gpu_alloc(SPAN_GPU_MALLOC, len, 0, NULL, &a) != UCS_OK) ||
        (span_gpu_alloc(SPAN_GPU_MALLOC, len, 0, NULL, &b) != UCS_OK) ||
        (span_gpu_alloc(SPAN_GPU_VMM, len, handles, NULL, &vmm) != UCS_OK)) {
        fprintf(stderr, "cannot allocate 3 x %zu MiB\n", mib);
        return 1;
    }
    span_bench_copy_run(b.ptr, a.ptr, len, 2); /* warm up */
    span_bench_copy_run(vmm.ptr, a.ptr, len, 2);
    printf("COPY %u %zu malloc->malloc %.2f malloc->vmm %.2f "
           "vmm->malloc %.2f\n", handles, mib,
           span_bench_copy_run(b.ptr, a.ptr, len, iters),
           span_bench_copy_run(vmm.ptr, a.ptr, len, iters),
           span_bench_copy_run(a.ptr, vmm.ptr, len, iters));
    span_gpu_free(&vmm);
    span_gpu_free(&b);
    span_gpu_free(&a);
    return 0;
}

int main(int argc, char **argv)
{
    char reason[256];

    if ((argc >= 3) && !strcmp(argv[1], "units")) {
        if (!span_gpu_init(reason, sizeof(reason))) {
            fprintf(stderr, "%s\n", reason);
            return 77;
        }
        return span_bench_units(atoi(argv[2]));
    }
    if ((argc >= 4) && !strcmp(argv[1], "reg")) {
        if (!span_gpu_init(reason, sizeof(reason))) {
            fprintf(stderr, "%s\n", reason);
            return 77;
        }
        return span_bench_reg(atoi(argv[2]), ucs_min(atoi(argv[3]),
                                                      SPAN_BENCH_MAX_RUNS));
    }
    if ((argc >= 5) && !strcmp(argv[1], "copy")) {
        if (!span_gpu_init(reason, sizeof(reason))) {
            fprintf(stderr, "%s\n", reason);
            return 77;
        }
        return span_bench_copy(atoi(argv[2]), atol(argv[3]), atoi(argv[4]));
    }
    if ((argc >= 7) && !strcmp(argv[1], "bw")) {
        return span_bench_bw(atoi(argv[2]), atoi(argv[3]), atol(argv[4]),
                             (argc >= 8) ? atol(argv[7]) : 0, atoi(argv[5]),
                             argv[6]);
    }
    if ((argc >= 8) && !strcmp(argv[1], "blocks")) {
        return span_bench_blocks(atoi(argv[2]), atoi(argv[3]), atol(argv[4]),
                                 atol(argv[5]), atoi(argv[6]), argv[7]);
    }
    fprintf(stderr, "usage: %s units HANDLES | reg COUNT RUNS | "
            "bw KIND HANDLES MIB ITERS TLS [ALLOC_MIB] | "
            "blocks KIND HANDLES BLOCK COUNT ITERS TLS | "
            "copy HANDLES MIB ITERS\n", argv[0]);
    return 2;
}
