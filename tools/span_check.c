/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * span-check: moves real bytes between two local processes over a native
 * transport and over its span twin, and prints one table of what a user
 * would check: did the transfer succeed, did every byte land where it
 * should (and nowhere else), how fast was it. With -c the target is on
 * another node, where span-check -l serves targets.
 */
#include "tools/harness/span_gpu.h"
#include "tools/harness/span_pair.h"
#include "tools/harness/span_stats.h"

#include <ucs/sys/uid.h>

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#define SPAN_CHECK_MAX_PAIRS 8
#define SPAN_CHECK_MAX_ROWS  (2 * (SPAN_CHECK_MAX_PAIRS + 1) * 8)
#define SPAN_CHECK_MAX_REPS  101
#define SPAN_CHECK_PAGE      4096ul
#define SPAN_CHECK_SEED_OLD  11 /* what the target holds before */
#define SPAN_CHECK_SEED_NEW  12 /* what the initiator writes */

typedef struct {
    const char *native; /* UCX_TLS of the control */
    const char *twin;   /* UCX_TLS with the span twin */
} span_check_tls_t;

typedef struct {
    size_t           size;
    unsigned         reps;
    span_check_tls_t tls[SPAN_CHECK_MAX_PAIRS];
    unsigned         num_tls;
    span_check_tls_t gpu_tls;  /* device memory scenarios, with a GPU */
    int              gpu;      /* a GPU is present */
    const char       *remote;  /* host:port of a span-check -l, or NULL */
    const char       *listen;  /* host:port to serve targets at, or NULL */
    int              fail_slower; /* --fail-slower: speed is judged */
} span_check_opts_t;

typedef struct {
    ucs_status_t put_status;
    ucs_status_t get_status;
    size_t       verified;   /* bytes compared with what they must hold */
    size_t       wrong;      /* of those, bytes that differ */
    double       put_gbps;   /* median; 0 where not measured */
    double       get_gbps;
    span_pair_peer_t target; /* -c: who served the scenario */
} span_check_result_t;

typedef struct span_check_scenario span_check_scenario_t;
struct span_check_scenario {
    const char      *name;
    void            (*run)(span_pair_t *pair, const span_check_opts_t *opts,
                           const span_check_scenario_t *scenario,
                           span_check_result_t *result);
    int             out_of_bounds; /* success is the error */
    int             chunked;       /* twins cut registrations and ops */
    span_gpu_kind_t kind;          /* of both processes' buffers */
    unsigned        handles;       /* SPAN_GPU_VMM */
};

/* Puts buf to [offset, + length) reps times, then gets it back reps times;
 * the target is checked after the puts, the local copy after the gets. */
/* The initiator's buffers: host memory, or device memory of the kind
 * (with the host copies src and dst that are filled and compared) */
typedef struct {
    span_gpu_buf_t dev_src;
    span_gpu_buf_t dev_dst;
    void           *src;  /* what put sends */
    void           *dst;  /* what get fills */
} span_check_local_t;

static ucs_status_t span_check_local_alloc(span_check_local_t *local,
                                           span_gpu_kind_t kind, void *src,
                                           void *dst, size_t length)
{
    local->src = src;
    local->dst = dst;
    if (kind == SPAN_GPU_HOST) {
        return UCS_OK;
    }
    if (span_gpu_alloc(SPAN_GPU_MALLOC, length, 0, NULL, &local->dev_src) !=
        UCS_OK) {
        return UCS_ERR_NO_MEMORY;
    }
    if (span_gpu_alloc(SPAN_GPU_MALLOC, length, 0, NULL, &local->dev_dst) !=
        UCS_OK) {
        span_gpu_free(&local->dev_src);
        return UCS_ERR_NO_MEMORY;
    }
    local->src = local->dev_src.ptr;
    local->dst = local->dev_dst.ptr;
    return span_gpu_copy(local->src, src, length);
}

static void span_check_local_free(span_check_local_t *local,
                                  span_gpu_kind_t kind)
{
    if (kind != SPAN_GPU_HOST) {
        span_gpu_free(&local->dev_dst);
        span_gpu_free(&local->dev_src);
    }
}

static void span_check_transfer(span_pair_t *pair, span_pair_region_t *region,
                                size_t offset, size_t length, unsigned reps,
                                span_gpu_kind_t kind,
                                span_check_result_t *result)
{
    double put_gbps[SPAN_CHECK_MAX_REPS], get_gbps[SPAN_CHECK_MAX_REPS];
    uint8_t *src = malloc(length), *dst = malloc(length);
    span_check_local_t local;
    size_t wrong;
    unsigned i;
    double t;

    result->put_status = UCS_ERR_NO_MEMORY;
    result->get_status = UCS_INPROGRESS; /* not run */
    if ((src == NULL) || (dst == NULL)) {
        goto out;
    }
    span_pair_fill(src, length, SPAN_CHECK_SEED_NEW, offset);
    if (span_check_local_alloc(&local, kind, src, dst, length) != UCS_OK) {
        goto out;
    }
    for (i = 0; i < reps; ++i) {
        t = span_stats_now();
        result->put_status = span_pair_put(pair, region, offset, local.src,
                                           length);
        put_gbps[i] = length / (span_stats_now() - t) / 1e9;
        if (result->put_status != UCS_OK) {
            goto out_local;
        }
    }
    result->put_gbps = span_stats_median(put_gbps, reps);

    /* Everything the allocation holds is checked: the new bytes inside the
     * range and the old ones around it */
    wrong = span_pair_check(pair, region, offset, length, SPAN_CHECK_SEED_NEW);
    wrong += span_pair_check(pair, region, 0, offset, SPAN_CHECK_SEED_OLD);
    wrong += span_pair_check(pair, region, offset + length,
                             region->alloc_length - offset - length,
                             SPAN_CHECK_SEED_OLD);
    result->verified += region->alloc_length;
    result->wrong    += wrong;

    for (i = 0; i < reps; ++i) {
        memset(dst, 0, length);
        span_gpu_copy(local.dst, dst, (kind == SPAN_GPU_HOST) ? 0 : length);
        t = span_stats_now();
        result->get_status = span_pair_get(pair, region, offset, local.dst,
                                           length);
        get_gbps[i] = length / (span_stats_now() - t) / 1e9;
        if (result->get_status != UCS_OK) {
            goto out_local;
        }
    }
    result->get_gbps  = span_stats_median(get_gbps, reps);
    result->verified += length;
    if ((kind != SPAN_GPU_HOST) &&
        (span_gpu_copy(dst, local.dst, length) != UCS_OK)) {
        memset(dst, 0, length); /* counted wrong */
    }
    result->wrong    += span_pair_mismatches(dst, length, SPAN_CHECK_SEED_NEW,
                                             offset);
out_local:
    span_check_local_free(&local, kind);
out:
    free(dst);
    free(src);
}

static void span_check_map_and_transfer(span_pair_t *pair,
                                        const span_check_scenario_t *scenario,
                                        size_t alloc_length, size_t reg_offset,
                                        size_t reg_length, size_t offset,
                                        size_t length, unsigned reps,
                                        span_check_result_t *result)
{
    span_pair_region_t region;

    result->put_status = span_pair_map_kind(pair, scenario->kind,
                                            scenario->handles, alloc_length,
                                            reg_offset, reg_length,
                                            SPAN_CHECK_SEED_OLD, &region);
    result->get_status = result->put_status;
    if (result->put_status != UCS_OK) {
        return;
    }
    span_check_transfer(pair, &region, offset, length, reps, scenario->kind,
                        result);
    span_pair_unmap(pair, &region);
}

static void span_check_whole(span_pair_t *pair, const span_check_opts_t *opts,
                             const span_check_scenario_t *scenario,
                             span_check_result_t *result)
{
    span_check_map_and_transfer(pair, scenario, opts->size, 0, opts->size, 0,
                                opts->size, opts->reps, result);
}

/* A tensor inside a larger allocation: registered at a page inside it, moved
 * at an odd offset inside that, so an offset dropped anywhere shows */
static void span_check_interior(span_pair_t *pair,
                                const span_check_opts_t *opts,
                                const span_check_scenario_t *scenario,
                                span_check_result_t *result)
{
    size_t reg_offset = (1ul << 20) + SPAN_CHECK_PAGE;
    size_t offset     = reg_offset + 13;

    span_check_map_and_transfer(pair, scenario, opts->size + (2ul << 20),
                                reg_offset,
                                opts->size, offset, opts->size - 26,
                                opts->reps, result);
}

/* 128 bytes straddling the end of a registration followed by a guard page of
 * the same allocation: a checking transport refuses, and the target must
 * hold exactly what it held before */
static void span_check_out_of_bounds(span_pair_t *pair,
                                     const span_check_opts_t *opts,
                                     const span_check_scenario_t *scenario,
                                     span_check_result_t *result)
{
    size_t alloc_length = 6 * SPAN_CHECK_PAGE;
    size_t reg_end      = 5 * SPAN_CHECK_PAGE;
    uint8_t buf[128];
    span_pair_region_t region;

    result->put_status = span_pair_map(pair, alloc_length, SPAN_CHECK_PAGE,
                                       reg_end - SPAN_CHECK_PAGE,
                                       SPAN_CHECK_SEED_OLD, &region);
    result->get_status = result->put_status;
    if (result->put_status != UCS_OK) {
        return;
    }
    span_pair_fill(buf, sizeof(buf), SPAN_CHECK_SEED_NEW, reg_end - 64);
    result->put_status = span_pair_put(pair, &region, reg_end - 64, buf,
                                       sizeof(buf));
    result->get_status = span_pair_get(pair, &region, reg_end - 64, buf,
                                       sizeof(buf));
    result->verified   = alloc_length;
    result->wrong      = span_pair_check(pair, &region, 0, alloc_length,
                                         SPAN_CHECK_SEED_OLD);
    span_pair_unmap(pair, &region);
}

static const span_check_scenario_t span_check_scenarios[] = {
    {.name = "whole buffer",       .run = span_check_whole},
    {.name = "interior sub-range", .run = span_check_interior},
    {.name = "out of bounds",      .run = span_check_out_of_bounds,
     .out_of_bounds = 1},
    {.name = "chunked",            .run = span_check_whole, .chunked = 1},
    {.name = "chunked interior",   .run = span_check_interior, .chunked = 1}
};

/* With a GPU: device memory on both sides, over the GPU transports */
static const span_check_scenario_t span_check_gpu_scenarios[] = {
    {.name = "gpu cudaMalloc",     .run = span_check_whole,
     .kind = SPAN_GPU_MALLOC},
    {.name = "gpu sub-buffer",     .run = span_check_interior,
     .kind = SPAN_GPU_MALLOC},
    {.name = "gpu VMM 16 handles", .run = span_check_whole,
     .kind = SPAN_GPU_VMM, .handles = 16}
};

/* A chunked scenario makes twins register the buffer as 8 chunks in 2 hard
 * units, as for a region past a NIC's limit or over two GPU allocations: ops
 * are served by the chunk that holds them or split at unit ends. The twin
 * MDs read this when they open, in both processes. */
static void span_check_chunking(const span_check_opts_t *opts, int enable)
{
    char value[32];

    if (!enable) {
        unsetenv("UCX_SPAN_MAX_CHUNK");
        unsetenv("UCX_SPAN_TEST_UNIT_SIZE");
        return;
    }
    snprintf(value, sizeof(value), "%zu", (opts->size / 8) & ~4095ul);
    setenv("UCX_SPAN_MAX_CHUNK", value, 1);
    snprintf(value, sizeof(value), "%zu", (opts->size / 2) & ~4095ul);
    setenv("UCX_SPAN_TEST_UNIT_SIZE", value, 1);
}

/* A twin row this many times slower than the native row of its scenario,
 * put or get, went another way or ran on a loaded machine: a get emulated
 * in software where the native transport copied it runs hundreds of times
 * slower (UCX_PROTO_INFO=y shows the protocol UCP chose), and a busy core
 * can stall one row for as long. The verdict says so; only --fail-slower
 * (a benchmark's choice) makes it fail the row. */
#define SPAN_CHECK_SLOWER 10.0

static int span_check_slower(double twin, double native)
{
    return (twin > 0) && (native > 0) && (twin * SPAN_CHECK_SLOWER < native);
}

/* The verdict of one row: its status and its bytes, its speed only with
 * --fail-slower; native is the native row of a twin row's scenario, NULL
 * where there is none. For an out-of-bounds access, a refusal that left
 * the target untouched is correct; a native transport that lets it through
 * is the bug span exists for, reported but expected of a native. */
static const char *
span_check_verdict(const span_check_opts_t *opts,
                   const span_check_scenario_t *scenario,
                   const span_check_result_t *result, int twin,
                   const span_check_result_t *native, int *failed)
{
    int ok = (result->put_status == UCS_OK) &&
             (result->get_status == UCS_OK);

    if (!scenario->out_of_bounds) {
        *failed |= !ok || (result->wrong != 0);
        if (!ok || (result->wrong != 0)) {
            return !ok ? "FAIL" : "FAIL: wrong bytes";
        }
        if ((native != NULL) &&
            (span_check_slower(result->put_gbps, native->put_gbps) ||
             span_check_slower(result->get_gbps, native->get_gbps))) {
            *failed |= opts->fail_slower;
            return opts->fail_slower ? "FAIL: 10x slower" : "ok (10x slower)";
        }
        return "ok";
    }
    if ((result->put_status != UCS_OK) && (result->get_status != UCS_OK) &&
        (result->wrong == 0)) {
        return "ok: refused";
    }
    if (twin) {
        *failed = 1;
        return "FAIL: not refused";
    }
    return "unchecked (native)";
}

static void span_check_gbps(char *buf, size_t size, double gbps)
{
    if (gbps >= 0.1) {
        snprintf(buf, size, "%.2f", gbps);
    } else if (gbps > 0) { /* an emulated device: MB/s show */
        snprintf(buf, size, "%.4f", gbps);
    } else {
        snprintf(buf, size, "-");
    }
}

typedef struct {
    const span_check_scenario_t *scenario;
    const char                  *tls;
    int                         twin;
    span_check_result_t         result;
    const char                  *verdict;
} span_check_row_t;

/* Printed after the run, so that UCX's log lines (the twin's error line for
 * a refused access is one) do not cut through the table */
static span_check_row_t span_check_rows[SPAN_CHECK_MAX_ROWS];
static unsigned span_check_num_rows;

static void span_check_print_row(const span_check_row_t *row)
{
    const span_check_result_t *result = &row->result;
    char status[64], verified[48], put[16], get[16];

    if (result->get_status == UCS_INPROGRESS) {
        snprintf(status, sizeof(status), "%s / not run",
                 ucs_status_string(result->put_status));
    } else if (result->put_status == result->get_status) {
        snprintf(status, sizeof(status), "%s",
                 ucs_status_string(result->put_status));
    } else {
        snprintf(status, sizeof(status), "%s / %s",
                 ucs_status_string(result->put_status),
                 ucs_status_string(result->get_status));
    }
    snprintf(verified, sizeof(verified), "%zu/%zu",
             result->verified - result->wrong, result->verified);
    span_check_gbps(put, sizeof(put), result->put_gbps);
    span_check_gbps(get, sizeof(get), result->get_gbps);
    printf("| %-18s | %-26s | %-34s | %-21s | %8s | %8s | %-18s |\n",
           row->scenario->name, row->tls, status, verified, put, get,
           row->verdict);
}

static void span_check_print_table(void)
{
    unsigned i;

    printf("| %-18s | %-26s | %-34s | %-21s | %8s | %8s | %-18s |\n",
           "scenario", "UCX_TLS", "status (put / get)", "bytes as expected",
           "put GB/s", "get GB/s", "verdict");
    printf("|%s|%s|%s|%s|%s|%s|%s|\n", "--------------------",
           "----------------------------", "------------------------------------",
           "-----------------------", "----------", "----------",
           "--------------------");
    for (i = 0; i < span_check_num_rows; ++i) {
        span_check_print_row(&span_check_rows[i]);
    }
}

/* Where the targets of -c ran, each host once */
static void span_check_print_targets(void)
{
    const span_pair_peer_t *t;
    unsigned i, j;

    for (i = 0; i < span_check_num_rows; ++i) {
        t = &span_check_rows[i].result.target;
        for (j = 0; (j < i) &&
                    (span_check_rows[j].result.target.system_id !=
                     t->system_id); ++j) {
        }
        if ((j == i) && (t->system_id != 0)) {
            printf("targets ran on %s (UCX system id 0x%" PRIx64 ")\n",
                   t->hostname, t->system_id);
        }
    }
}

/* Both processes of a scenario; 1 when the target did not exit cleanly */
static int span_check_pair_run(const span_check_opts_t *opts,
                               const span_check_scenario_t *scenario,
                               const char *tls, span_check_result_t *result)
{
    char reason[256];
    span_pair_t pair;
    int unclean;

    if (opts->remote != NULL) {
        result->put_status = span_pair_start_remote(&pair, opts->remote, tls,
                                                    UCP_FEATURE_RMA, 0);
        result->target     = pair.peer;
    } else {
        result->put_status = span_pair_start(&pair, SPAN_PAIR_FORK, tls,
                                             UCP_FEATURE_RMA);
    }
    result->get_status = UCS_INPROGRESS;
    if (result->put_status != UCS_OK) {
        return 0;
    }
    pair.local_cuda = (scenario->kind != SPAN_GPU_HOST);
    if (pair.local_cuda && !span_gpu_init(reason, sizeof(reason))) {
        fprintf(stderr, "span-check: %s\n", reason);
        result->put_status = UCS_ERR_NO_DEVICE;
    } else {
        scenario->run(&pair, opts, scenario, result);
    }
    unclean = (span_pair_stop(&pair) != 0) &&
              (result->put_status != UCS_ERR_IO_ERROR);
    if (unclean) {
        fprintf(stderr, "span-check: the target over UCX_TLS=%s did not "
                "exit cleanly\n", tls);
    }
    return unclean;
}

/* CUDA does not survive fork, and UCP's init touches it where UCX has its
 * CUDA modules: every scenario runs in a child of its own (which forks the
 * target in turn), so that this process never touches CUDA and the next
 * scenario's processes can */
static int span_check_pair_run_apart(const span_check_opts_t *opts,
                                     const span_check_scenario_t *scenario,
                                     const char *tls,
                                     span_check_result_t *result)
{
    struct {
        span_check_result_t result;
        int                 unclean;
    } out = {.unclean = 1};
    int fds[2], status;
    pid_t pid;

    result->put_status = UCS_ERR_IO_ERROR;
    result->get_status = UCS_INPROGRESS;
    if (pipe(fds) != 0) {
        return 1;
    }
    fflush(stdout);
    pid = fork();
    if (pid == 0) {
        close(fds[0]);
        out.unclean = span_check_pair_run(opts, scenario, tls, &out.result);
        _exit(write(fds[1], &out, sizeof(out)) == sizeof(out) ? 0 : 1);
    }
    close(fds[1]);
    if ((pid > 0) && (read(fds[0], &out, sizeof(out)) == sizeof(out))) {
        *result = out.result;
    }
    close(fds[0]);
    if (pid > 0) {
        waitpid(pid, &status, 0);
    }
    return out.unclean;
}

/* The result of the native row run last for the scenario of row, a twin
 * row: each pair runs its native rows first; NULL where none ran */
static const span_check_result_t *
span_check_native_result(const span_check_row_t *row)
{
    const span_check_row_t *prev;

    for (prev = row; prev-- > span_check_rows;) {
        if ((prev->scenario == row->scenario) && !prev->twin) {
            return &prev->result;
        }
    }
    return NULL;
}

static int span_check_run_scenario(const span_check_opts_t *opts,
                                   const span_check_scenario_t *scenario,
                                   const char *tls, int twin)
{
    span_check_row_t *row = &span_check_rows[span_check_num_rows++];
    int failed = 0;

    row->scenario = scenario;
    row->tls      = tls;
    row->twin     = twin;
    span_check_chunking(opts, scenario->chunked);
    failed = span_check_pair_run_apart(opts, scenario, tls, &row->result);
    row->verdict = span_check_verdict(opts, scenario, &row->result, twin,
                                      twin ? span_check_native_result(row) :
                                             NULL,
                                      &failed);
    span_check_chunking(opts, 0);
    return failed;
}

/* Each scenario gets fresh processes: a failed transfer leaves nothing
 * behind for the next, and chunking is configured before UCX opens */
static int span_check_run_tls(const span_check_opts_t *opts, const char *tls,
                              int twin, const span_check_scenario_t *scenarios,
                              size_t count)
{
    int failed = 0;
    size_t i;

    for (i = 0; i < count; ++i) {
        failed |= span_check_run_scenario(opts, &scenarios[i], tls, twin);
    }
    return failed;
}

/* UCX reads UCX_MODULE_DIR when libucs loads, before main: to point it at
 * the plugin, span-check sets it and runs itself again. */
static void span_check_set_module_dir(char **argv)
{
    char exe[PATH_MAX], dir[PATH_MAX + 64];
    ssize_t len;

    if (getenv("UCX_MODULE_DIR") != NULL) {
        return;
    }
    len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (len <= 0) {
        return;
    }
    exe[len] = '\0';
    *strrchr(exe, '/') = '\0';
    /* a build tree keeps the plugin in src/uct/.libs, an install in
     * moduledir */
    snprintf(dir, sizeof(dir), "%s/src/uct/.libs/libuct_span.so.0", exe);
    if (access(dir, R_OK) == 0) {
        *strrchr(dir, '/') = '\0';
    } else {
        snprintf(dir, sizeof(dir), "%s", SPAN_CHECK_MODULEDIR);
    }
    setenv("UCX_MODULE_DIR", dir, 1);
    execv("/proc/self/exe", argv);
    fprintf(stderr, "span-check: cannot run itself again: %s\n",
            strerror(errno));
}

static void span_check_usage(void)
{
    printf("Usage: span-check [-s SIZE_MiB] [-r REPS] [-t NATIVE_TLS:TWIN_TLS]"
           "... [-g NATIVE_TLS:TWIN_TLS] [-c HOST:PORT] [--fail-slower]\n"
           "       span-check -l HOST:PORT\n"
           "  -s  buffer size in MiB (default 64)\n"
           "  -r  repetitions per transfer, the median is shown (default 5,"
           " at most %d)\n"
           "  -t  a UCX_TLS pair to compare (default posix,cma:posix,cma+);"
           " repeatable\n"
           "  -g  the UCX_TLS pair of the GPU scenarios, run when a GPU is\n"
           "      present (default cuda_copy,cuda_ipc,posix:"
           "cuda_copy,cuda_ipc+,posix; none: skip them)\n"
           "  -c  the target of every scenario on another node: a process\n"
           "      that span-check -l there starts for it (it reads the\n"
           "      UCX_SPAN_* variables of this process); no GPU scenarios\n"
           "  -l  serve targets for span-check -c at HOST:PORT, until killed\n"
           "  --fail-slower  a twin row 10x slower than its native row fails\n"
           "      (for benchmarks; without it the verdict only says so)\n"
           "Exit status: 0 when every twin row is correct: its status and its\n"
           "bytes; speed is shown, not judged, unless --fail-slower.\n",
           SPAN_CHECK_MAX_REPS);
}

static int span_check_parse(int argc, char **argv, span_check_opts_t *opts)
{
    static const struct option long_opts[] = {
        {"fail-slower", no_argument, NULL, 'S'},
        {NULL, 0, NULL, 0}
    };
    char *colon;
    int c;

    opts->size           = 64ul << 20;
    opts->reps           = 5;
    opts->gpu_tls.native = "cuda_copy,cuda_ipc,posix";
    opts->gpu_tls.twin   = "cuda_copy,cuda_ipc+,posix";
    while ((c = getopt_long(argc, argv, "s:r:t:g:c:l:h", long_opts,
                            NULL)) != -1) {
        switch (c) {
        case 'S':
            opts->fail_slower = 1;
            break;
        case 'c':
            opts->remote = optarg;
            break;
        case 'l':
            opts->listen = optarg;
            break;
        case 'g':
            colon = strchr(optarg, ':');
            opts->gpu_tls.native = optarg;
            opts->gpu_tls.twin   = NULL; /* none */
            if (colon != NULL) {
                *colon             = '\0';
                opts->gpu_tls.twin = colon + 1;
            }
            break;
        case 's':
            opts->size = strtoul(optarg, NULL, 0) << 20;
            break;
        case 'r':
            opts->reps = strtoul(optarg, NULL, 0);
            break;
        case 't':
            colon = strchr(optarg, ':');
            if ((colon == NULL) || (opts->num_tls == SPAN_CHECK_MAX_PAIRS)) {
                span_check_usage();
                return -1;
            }
            *colon                           = '\0';
            opts->tls[opts->num_tls].native  = optarg;
            opts->tls[opts->num_tls++].twin = colon + 1;
            break;
        default:
            span_check_usage();
            return -1;
        }
    }
    if ((opts->size == 0) || (opts->reps == 0) ||
        (opts->reps > SPAN_CHECK_MAX_REPS)) {
        span_check_usage();
        return -1;
    }
    if (opts->num_tls == 0) {
        opts->tls[0].native = "posix,cma";
        opts->tls[0].twin   = "posix,cma+";
        opts->num_tls       = 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    span_check_opts_t opts = {0};
    int failed             = 0;
    unsigned i;

    size_t num_cpu = ucs_static_array_size(span_check_scenarios);
    size_t num_gpu = ucs_static_array_size(span_check_gpu_scenarios);
    char reason[256];

    span_check_set_module_dir(argv);
    if (span_check_parse(argc, argv, &opts) != 0) {
        return 2;
    }
    if (opts.listen != NULL) {
        return span_pair_serve(opts.listen);
    }
    /* the GPU scenarios are local ones */
    opts.gpu = (opts.gpu_tls.twin != NULL) && (opts.remote == NULL) &&
               span_gpu_probe(reason, sizeof(reason));
    printf("span-check: %zu MiB, median of %u, two processes, "
           "UCX_MODULE_DIR=%s\n", opts.size >> 20, opts.reps,
           getenv("UCX_MODULE_DIR"));
    if (opts.remote != NULL) {
        gethostname(reason, sizeof(reason));
        printf("span-check: the initiator here on %s (UCX system id 0x%"
               PRIx64 "), every target on the node of %s\n", reason,
               ucs_get_system_id(), opts.remote);
    }
    if (!opts.gpu && (opts.gpu_tls.twin != NULL) && (opts.remote == NULL)) {
        printf("span-check: no GPU scenarios: %s\n", reason);
    }
    for (i = 0; i < opts.num_tls; ++i) {
        failed |= span_check_run_tls(&opts, opts.tls[i].native, 0,
                                     span_check_scenarios, num_cpu);
        failed |= span_check_run_tls(&opts, opts.tls[i].twin, 1,
                                     span_check_scenarios, num_cpu);
    }
    if (opts.gpu) {
        failed |= span_check_run_tls(&opts, opts.gpu_tls.native, 0,
                                     span_check_gpu_scenarios, num_gpu);
        failed |= span_check_run_tls(&opts, opts.gpu_tls.twin, 1,
                                     span_check_gpu_scenarios, num_gpu);
    }
    printf("\n");
    span_check_print_table();
    if (opts.remote != NULL) {
        span_check_print_targets();
    }
    return failed;
}
