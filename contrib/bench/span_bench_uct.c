/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Per-operation cost of a twin: put_short and get_bcopy of 8 bytes over
 * `self` and `self+` in one process, runs interleaved, medians compared.
 * Written for the project when UCT-level ucx_perftest could not drive a twin
 * (it allocates through the inner MD); it can now (docs/architecture.md,
 * contrib/bench/bench_perftest_uct.sh).
 *
 * Usage: span_bench_uct [OPS_PER_RUN [RUNS [TL [OP]]]]; needs
 * UCX_MODULE_DIR. With TL, only that transport runs each op (or OP alone)
 * OPS_PER_RUN times, RUNS times, in a function of its own (span_bench_<op>),
 * which a profiler can count alone: contrib/bench/callgrind_overhead.sh. The
 * zero-copy ops (64 bytes in one iov entry, or in three; or in one from
 * uct_iface_mem_alloc: put_ifmem, get_ifmem) need a transport that has
 * them: cma, not self.
 */
#include "tools/harness/span_md_open.h"

#include <uct/api/uct.h>
#include <ucs/async/async_fwd.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SPAN_BENCH_MAX_RUNS 99
#define SPAN_BENCH_BUF_SIZE 4096
/* Zero-copy ops move this many bytes per iov entry, in up to this many
 * entries, from here to there in the buffer */
#define SPAN_BENCH_ZCOPY_SIZE   64
#define SPAN_BENCH_ZCOPY_IOV    3
#define SPAN_BENCH_ZCOPY_LOCAL  1024
#define SPAN_BENCH_ZCOPY_REMOTE 2048

typedef struct {
    const char          *tl;
    uct_component_h     component;
    uct_md_h            md;
    ucs_async_context_t *async;
    uct_worker_h        worker;
    uct_iface_h         iface;
    uct_ep_h            ep;
    uint8_t             buf[SPAN_BENCH_BUF_SIZE];
    uct_mem_h           memh;
    uct_rkey_bundle_t   rkey;
    int                 rkey_unpacked;
    /* local memory as UCT-level ucx_perftest has it: from the iface, in
     * a handle of the inner MD's (or none) where the iface is a twin */
    uct_allocated_memory_t ifmem;
    int                 ifmem_allocated;
} span_bench_t;

static double span_bench_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + (ts.tv_nsec * 1e-9);
}

static ucs_status_t span_bench_open_md(span_bench_t *b)
{
    uct_md_config_t *config;
    ucs_status_t status;
    int twin = (b->tl[strlen(b->tl) - 1] == '+');

    b->component = span_component_by_name(twin ? "span" : b->tl);
    if (b->component == NULL) {
        fprintf(stderr, "no component for %s (is UCX_MODULE_DIR set?)\n",
                b->tl);
        return UCS_ERR_NO_DEVICE;
    }
    status = uct_md_config_read(b->component, NULL, NULL, &config);
    if (status != UCS_OK) {
        return status;
    }
    status = uct_md_open(b->component, b->tl, config, &b->md);
    uct_config_release(config);
    return status;
}

static ucs_status_t span_bench_open_iface(span_bench_t *b)
{
    uct_iface_params_t params = {0};
    uct_iface_config_t *config;
    ucs_status_t status;

    status = ucs_async_context_create(UCS_ASYNC_MODE_THREAD_SPINLOCK,
                                      &b->async);
    if (status != UCS_OK) {
        return status;
    }
    status = uct_worker_create(b->async, UCS_THREAD_MODE_SINGLE, &b->worker);
    if (status != UCS_OK) {
        return status;
    }
    status = uct_md_iface_config_read(b->md, b->tl, NULL, NULL, &config);
    if (status != UCS_OK) {
        return status;
    }
    params.field_mask           = UCT_IFACE_PARAM_FIELD_OPEN_MODE |
                                  UCT_IFACE_PARAM_FIELD_DEVICE;
    params.open_mode            = UCT_IFACE_OPEN_MODE_DEVICE;
    params.mode.device.tl_name  = b->tl;
    params.mode.device.dev_name = "memory";
    status = uct_iface_open(b->md, b->worker, &params, config, &b->iface);
    uct_config_release(config);
    return status;
}

static ucs_status_t span_bench_connect(span_bench_t *b)
{
    uct_ep_params_t params = {0};
    char dev[256], iface[256];
    uct_iface_attr_t attr;
    ucs_status_t status;

    status = uct_iface_query(b->iface, &attr);
    if ((status != UCS_OK) || (attr.device_addr_len > sizeof(dev)) ||
        (attr.iface_addr_len > sizeof(iface))) {
        return UCS_ERR_UNSUPPORTED;
    }
    if ((uct_iface_get_device_address(b->iface, (void*)dev) != UCS_OK) ||
        (uct_iface_get_address(b->iface, (void*)iface) != UCS_OK)) {
        return UCS_ERR_IO_ERROR;
    }
    params.field_mask = UCT_EP_PARAM_FIELD_IFACE |
                        UCT_EP_PARAM_FIELD_DEV_ADDR |
                        UCT_EP_PARAM_FIELD_IFACE_ADDR;
    params.iface      = b->iface;
    params.dev_addr   = (uct_device_addr_t*)dev;
    params.iface_addr = (uct_iface_addr_t*)iface;
    return uct_ep_create(&params, &b->ep);
}

static ucs_status_t span_bench_register(span_bench_t *b)
{
    uint8_t rkey_buf[256];
    uct_md_attr_t attr;
    ucs_status_t status;

    status = uct_md_query(b->md, &attr);
    if ((status != UCS_OK) || (attr.rkey_packed_size > sizeof(rkey_buf))) {
        return UCS_ERR_UNSUPPORTED;
    }
    if (!(attr.cap.flags & UCT_MD_FLAG_REG)) {
        b->rkey.rkey = UCT_INVALID_RKEY; /* cma: no registration, no rkey */
        return UCS_OK;
    }
    status = uct_md_mem_reg(b->md, b->buf, sizeof(b->buf),
                            UCT_MD_MEM_ACCESS_ALL, &b->memh);
    if (status != UCS_OK) {
        return status;
    }
    status = uct_md_mkey_pack(b->md, b->memh, rkey_buf);
    if (status != UCS_OK) {
        return status;
    }
    status = uct_rkey_unpack(b->component, rkey_buf, &b->rkey);
    b->rkey_unpacked = (status == UCS_OK);
    return status;
}

static ucs_status_t span_bench_open(span_bench_t *b, const char *tl)
{
    ucs_status_t status;

    memset(b, 0, sizeof(*b));
    b->tl  = tl;
    status = span_bench_open_md(b);
    if (status == UCS_OK) {
        status = span_bench_open_iface(b);
    }
    if (status == UCS_OK) {
        status = span_bench_connect(b);
    }
    if (status == UCS_OK) {
        status = span_bench_register(b);
    }
    if (status == UCS_OK) {
        status = uct_iface_mem_alloc(b->iface, SPAN_BENCH_BUF_SIZE,
                                     UCT_MD_MEM_ACCESS_ALL, "bench",
                                     &b->ifmem);
        b->ifmem_allocated = (status == UCS_OK);
    }
    if (status != UCS_OK) {
        fprintf(stderr, "cannot set up %s: %s\n", tl,
                ucs_status_string(status));
    }
    return status;
}

static void span_bench_close(span_bench_t *b)
{
    if (b->rkey_unpacked) {
        uct_rkey_release(b->component, &b->rkey);
    }
    if (b->memh != NULL) {
        uct_md_mem_dereg(b->md, b->memh);
    }
    if (b->ifmem_allocated) {
        uct_iface_mem_free(&b->ifmem);
    }
    if (b->ep != NULL) {
        uct_ep_destroy(b->ep);
    }
    if (b->iface != NULL) {
        uct_iface_close(b->iface);
    }
    if (b->worker != NULL) {
        uct_worker_destroy(b->worker);
    }
    if (b->async != NULL) {
        ucs_async_context_destroy(b->async);
    }
    if (b->md != NULL) {
        uct_md_close(b->md);
    }
}

static void span_bench_unpack(void *arg, const void *data, size_t length)
{
    memcpy(arg, data, length);
}

/* ns per op; negative when an op failed or moved the wrong bytes */
static double span_bench_put_short(span_bench_t *b, unsigned long ops)
{
    uint64_t remote = (uintptr_t)b->buf + 64, value = 0;
    unsigned long i;
    double t = span_bench_now();

    for (i = 0; i < ops; ++i) {
        value = i;
        if (uct_ep_put_short(b->ep, &value, sizeof(value), remote,
                             b->rkey.rkey) != UCS_OK) {
            return -1;
        }
    }
    t = span_bench_now() - t;
    return memcmp(b->buf + 64, &value, sizeof(value)) ? -1 : t * 1e9 / ops;
}

static double span_bench_get_bcopy(span_bench_t *b, unsigned long ops)
{
    uint64_t remote = (uintptr_t)b->buf + 64, value = 0;
    unsigned long i;
    double t;

    memcpy(b->buf + 64, &ops, sizeof(ops));
    t = span_bench_now();
    for (i = 0; i < ops; ++i) {
        /* self completes a get_bcopy before returning: no completion */
        if (uct_ep_get_bcopy(b->ep, span_bench_unpack, &value, sizeof(value),
                             remote, b->rkey.rkey, NULL) != UCS_OK) {
            return -1;
        }
    }
    t = span_bench_now() - t;
    return (value != ops) ? -1 : t * 1e9 / ops;
}

/* The op's loop polls the completion's count */
static void span_bench_zcopy_done(uct_completion_t *self)
{
}

/* Zero-copy ops of iovcnt entries of SPAN_BENCH_ZCOPY_SIZE bytes each,
 * contiguous in the local buffer (registered through the MD, or ifmem) and
 * the remote one, one at a time: cma moves the bytes from the worker's
 * progress */
static double span_bench_zcopy(span_bench_t *b, int is_put, size_t iovcnt,
                               int ifmem, unsigned long ops)
{
    uint8_t *local        = ifmem ? (uint8_t*)b->ifmem.address :
                                    b->buf + SPAN_BENCH_ZCOPY_LOCAL;
    uct_mem_h memh        = ifmem ? b->ifmem.memh : b->memh;
    uint8_t *remote       = b->buf + SPAN_BENCH_ZCOPY_REMOTE;
    size_t length         = SPAN_BENCH_ZCOPY_SIZE * iovcnt;
    uint8_t *src          = is_put ? local : remote;
    uint8_t *dst          = is_put ? remote : local;
    uct_completion_t comp = {.func = span_bench_zcopy_done};
    uct_iov_t iov[SPAN_BENCH_ZCOPY_IOV];
    ucs_status_t status;
    unsigned long i;
    size_t j;
    double t;

    for (j = 0; j < iovcnt; ++j) {
        iov[j].buffer = local + (j * SPAN_BENCH_ZCOPY_SIZE);
        iov[j].length = SPAN_BENCH_ZCOPY_SIZE;
        iov[j].memh   = memh;
        iov[j].stride = 0;
        iov[j].count  = 1;
    }
    memset(src, (int)(ops & 0xff) | 1, length);
    memset(dst, 0, length);
    t = span_bench_now();
    for (i = 0; i < ops; ++i) {
        comp.count  = 1;
        comp.status = UCS_OK;
        status      = is_put ?
                      uct_ep_put_zcopy(b->ep, iov, iovcnt, (uintptr_t)remote,
                                       b->rkey.rkey, &comp) :
                      uct_ep_get_zcopy(b->ep, iov, iovcnt, (uintptr_t)remote,
                                       b->rkey.rkey, &comp);
        if (status == UCS_INPROGRESS) {
            while (comp.count > 0) {
                uct_worker_progress(b->worker);
            }
            status = comp.status;
        }
        if (status != UCS_OK) {
            return -1;
        }
    }
    t = span_bench_now() - t;
    return memcmp(src, dst, length) ? -1 : t * 1e9 / ops;
}

static double span_bench_put_zcopy(span_bench_t *b, unsigned long ops)
{
    return span_bench_zcopy(b, 1, 1, 0, ops);
}

static double span_bench_get_zcopy(span_bench_t *b, unsigned long ops)
{
    return span_bench_zcopy(b, 0, 1, 0, ops);
}

static double span_bench_put_zcopy3(span_bench_t *b, unsigned long ops)
{
    return span_bench_zcopy(b, 1, SPAN_BENCH_ZCOPY_IOV, 0, ops);
}

static double span_bench_get_zcopy3(span_bench_t *b, unsigned long ops)
{
    return span_bench_zcopy(b, 0, SPAN_BENCH_ZCOPY_IOV, 0, ops);
}

static double span_bench_put_ifmem(span_bench_t *b, unsigned long ops)
{
    return span_bench_zcopy(b, 1, 1, 1, ops);
}

static double span_bench_get_ifmem(span_bench_t *b, unsigned long ops)
{
    return span_bench_zcopy(b, 0, 1, 1, ops);
}

static int span_bench_cmp(const void *a, const void *b)
{
    double x = *(const double*)a, y = *(const double*)b;

    return (x > y) - (x < y);
}

static double span_bench_median(double *v, unsigned n)
{
    qsort(v, n, sizeof(*v), span_bench_cmp);
    return (n % 2) ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

typedef double (*span_bench_op_t)(span_bench_t *b, unsigned long ops);

static int span_bench_compare(const char *name, span_bench_op_t op,
                              span_bench_t *native, span_bench_t *twin,
                              unsigned long ops, unsigned runs)
{
    double n[SPAN_BENCH_MAX_RUNS], t[SPAN_BENCH_MAX_RUNS], mn, mt;
    unsigned r;

    op(native, ops / 10); /* warm up both */
    op(twin, ops / 10);
    for (r = 0; r < runs; ++r) {
        n[r] = op(native, ops);
        t[r] = op(twin, ops);
        if ((n[r] < 0) || (t[r] < 0)) {
            fprintf(stderr, "%s failed or moved wrong bytes in run %u\n",
                    name, r);
            return 1;
        }
    }
    mn = span_bench_median(n, runs);
    mt = span_bench_median(t, runs);
    printf("| %-16s | %10.2f | %10.2f | %+9.2f | %6.3f |\n", name, mn, mt,
           mt - mn, mt / mn);
    return 0;
}

static const struct {
    const char      *name;
    span_bench_op_t op;
} span_bench_ops[] = {
    {"put_short", span_bench_put_short},
    {"get_bcopy", span_bench_get_bcopy},
    {"put_zcopy", span_bench_put_zcopy},
    {"get_zcopy", span_bench_get_zcopy},
    {"put_zcopy3", span_bench_put_zcopy3},
    {"get_zcopy3", span_bench_get_zcopy3},
    {"put_ifmem", span_bench_put_ifmem},
    {"get_ifmem", span_bench_get_ifmem}
};

/* The interleaved comparison over self runs the ops self has */
#define SPAN_BENCH_SELF_OPS 2

/* Each op (or only the one named op_name) on one transport alone */
static int span_bench_alone(const char *tl, const char *op_name,
                            unsigned long ops, unsigned runs)
{
    span_bench_t b;
    unsigned i, r;
    double ns;

    if (span_bench_open(&b, tl) != UCS_OK) {
        return 1;
    }
    for (i = 0; i < sizeof(span_bench_ops) / sizeof(span_bench_ops[0]); ++i) {
        if ((op_name != NULL) && strcmp(op_name, span_bench_ops[i].name)) {
            continue;
        }
        for (r = 0; r < runs; ++r) {
            ns = span_bench_ops[i].op(&b, ops);
            if (ns < 0) {
                fprintf(stderr, "%s over %s failed or moved wrong bytes\n",
                        span_bench_ops[i].name, tl);
                span_bench_close(&b);
                return 1;
            }
            printf("%s %s %.2f ns\n", tl, span_bench_ops[i].name, ns);
        }
    }
    span_bench_close(&b);
    return 0;
}

int main(int argc, char **argv)
{
    unsigned long ops = (argc > 1) ? strtoul(argv[1], NULL, 0) : 2000000;
    unsigned runs     = (argc > 2) ? strtoul(argv[2], NULL, 0) : 11;
    span_bench_t native, twin;
    unsigned i;
    int failed;

    if ((ops < 10) || (runs == 0) || (runs > SPAN_BENCH_MAX_RUNS)) {
        fprintf(stderr, "usage: %s [OPS_PER_RUN >= 10 [RUNS <= %d [TL [OP]]]]"
                "\n",
                argv[0], SPAN_BENCH_MAX_RUNS);
        return 2;
    }
    if (argc > 3) {
        return span_bench_alone(argv[3], (argc > 4) ? argv[4] : NULL, ops,
                                runs);
    }
    if ((span_bench_open(&native, "self") != UCS_OK) ||
        (span_bench_open(&twin, "self+") != UCS_OK)) {
        return 1;
    }
    printf("8-byte ops, %lu per run, median of %u interleaved runs\n\n", ops,
           runs);
    printf("| %-16s | %10s | %10s | %9s | %6s |\n", "op", "self ns",
           "self+ ns", "delta ns", "ratio");
    printf("|------------------|------------|------------|-----------|--------|"
           "\n");
    failed = 0;
    for (i = 0; i < SPAN_BENCH_SELF_OPS; ++i) {
        failed |= span_bench_compare(span_bench_ops[i].name,
                                     span_bench_ops[i].op, &native, &twin,
                                     ops, runs);
    }
    span_bench_close(&twin);
    span_bench_close(&native);
    return failed;
}
