/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * span_mpi_rma: MPI one-sided traffic between two ranks, every byte of
 * every window and of every result buffer checked, and with --p2p
 * point-to-point messages before it. Rank 0 is the origin (the sender),
 * rank 1 the target (the receiver). It runs under whatever UCX_TLS the
 * caller sets, so test/mpi/run.sh (Open MPI) and test/mpich/run.sh (MPICH)
 * run it natively and over span's twins and compare.
 *
 *   span_mpi_rma [--p2p]         the suite: a table row per (window, op,
 *                                sync); exit 0 when every row passed.
 *                                --p2p: first a table row per (buffer,
 *                                call, order) of point-to-point messages
 *   span_mpi_rma --oob put|get FILE
 *                                one MPI_Put or MPI_Get past a window's
 *                                end; the target's window and the guard
 *                                behind it are a MAP_SHARED mapping of
 *                                FILE, so they can be inspected after a
 *                                job that aborted
 *   span_mpi_rma --inspect FILE  (no mpirun) what FILE holds: window and
 *                                guard bytes that differ from the pattern
 *   span_mpi_rma --dyn-last [pad]
 *                                the smallest reproducer of Open MPI
 *                                4.1's dynamic-window lookup: a 1-byte
 *                                MPI_Put to the last byte of an attached
 *                                region (pad: the region attached one
 *                                byte longer, the workaround)
 *
 * Windows: MPI_Win_create over a buffer at an odd address, MPI_Win_allocate,
 * MPI_Win_create_dynamic with a region at an odd address attached. Before
 * every case the window holds pat(i, SEED_WIN); the target checks all of
 * it after the case, the origin its result buffer and the guards around
 * it, and the target then restores the range the case touched.

 *
 * Messages: 0 bytes to 64 MiB (UCP's eager and rendezvous protocols both),
 * sent from a buffer at an odd address or as a strided vector (every other
 * byte: the MPI library packs it), received into a buffer at an odd
 * address with guards each side; the receive posted before the send, the
 * send unexpected (the receiver probes until its envelope has arrived) or
 * matched by MPI_Mprobe on any source and tag, and MPI_Sendrecv both ways
 * at once. The receiver checks every byte, the guards, the status's
 * source, tag and count; the sender that its buffer is unchanged.
 */
#include <mpi.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define PAGE         4096ul
#define MIB          (1024ul * 1024ul)
#define WIN_SIZE     (64 * MIB + 3 * PAGE)
#define RES_GUARD    64           /* bytes each side of a result buffer */
#define SEED_WIN     0x5a
#define SEED_SRC     0x33
#define FILL_RES     0xee
#define FILL_GUARD   0xab
#define OOB_WIN      (2 * PAGE)   /* --oob: the window, then one guard page */
#define OOB_LEN      64
#define OOB_DISP     (OOB_WIN + 64)

enum { WIN_CREATE, WIN_ALLOCATE, WIN_DYNAMIC, NUM_WINS };
enum { OP_PUT, OP_GET, OP_ACC, OP_GET_ACC, OP_FOP, OP_CAS, NUM_OPS };
enum { SYNC_FENCE, SYNC_LOCK, SYNC_LOCK_ALL, NUM_SYNCS };

static const char *win_names[]  = {"create (odd)", "allocate",
                                   "dynamic (odd)"};
static const char *op_names[]   = {"put", "get", "accumulate",
                                   "get_accumulate", "fetch_and_op",
                                   "compare_and_swap"};
static const char *sync_names[] = {"fence", "lock/unlock", "lock_all"};

/* put, get and both accumulates: odd offsets, all but the first crossing
 * page boundaries, 1 byte to 64 MiB. None starts at the window's last byte
 * (Open MPI 4.1's dynamic-window lookup, see --dyn-last). */
static const struct {
    size_t offset, length;
} rma_cases[] = {
    {PAGE - 1, 1},
    {PAGE - 3, PAGE + 3},
    {3 * PAGE - 5, MIB + 3},
    {PAGE + 1, 64 * MIB},
};
#define NUM_RMA_CASES (sizeof(rma_cases) / sizeof(rma_cases[0]))

static int rank;

static inline uint8_t pat(size_t i, unsigned seed)
{
    return (uint8_t)(i * 131 + (i >> 9) * 7 + seed);
}

static void fill(uint8_t *p, size_t offset, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++) {
        p[i] = pat(offset + i, seed);
    }
}

/* Bytes of p[0, n) that are not pat(offset + i, seed) */
static size_t count_bad(const uint8_t *p, size_t offset, size_t n,
                        unsigned seed)
{
    size_t bad = 0;

    for (size_t i = 0; i < n; i++) {
        bad += (p[i] != pat(offset + i, seed));
    }
    return bad;
}

static size_t count_not(const uint8_t *p, size_t n, uint8_t value)
{
    size_t bad = 0;

    for (size_t i = 0; i < n; i++) {
        bad += (p[i] != value);
    }
    return bad;
}

static void die(const char *what, int rc)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;

    MPI_Error_string(rc, msg, &len);
    fprintf(stderr, "rank %d: %s: %s\n", rank, what, msg);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

/* MPI_Error_string writes up to MPI_MAX_ERROR_STRING bytes (512 in
 * MPICH): into a smaller buffer through one of that size, cut short */
static void error_text(int rc, char *out, size_t max)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    size_t n;

    MPI_Error_string(rc, msg, &len);
    n = strnlen(msg, max - 1);
    memcpy(out, msg, n);
    out[n] = '\0';
}

#define CHECK_MPI(call) \
    do { int rc_ = (call); if (rc_ != MPI_SUCCESS) die(#call, rc_); } while (0)

/* What one case moves: [offset, offset + length) of the window as
 * elements of dtype (MPI_UNSIGNED_CHAR or MPI_UINT64_T) */
typedef struct {
    int          op;
    size_t       offset;
    size_t       length;  /* bytes */
    MPI_Datatype dtype;
} rma_case_t;

typedef struct {
    MPI_Win   win;
    uint8_t   *base;      /* the target's window memory */
    MPI_Aint  remote;     /* displacement of the window's byte 0 */
} window_t;

/* The value an 8-byte or 1-byte element holds before the case */
static uint64_t old_elem(const rma_case_t *c)
{
    uint64_t v = 0;

    for (size_t i = 0; i < c->length; i++) {
        v |= (uint64_t)pat(c->offset + i, SEED_WIN) << (8 * i);
    }
    return v;
}

static uint64_t src_elem(const rma_case_t *c)
{
    uint64_t v = 0;

    for (size_t i = 0; i < c->length; i++) {
        v |= (uint64_t)pat(i, SEED_SRC) << (8 * i);
    }
    return v;
}

/* What byte i of the case's range holds after it */
static uint8_t expected_byte(const rma_case_t *c, size_t i)
{
    uint8_t old = pat(c->offset + i, SEED_WIN);
    uint64_t sum;

    switch (c->op) {
    case OP_PUT:
        return pat(i, SEED_SRC);
    case OP_ACC:
    case OP_GET_ACC:
        return (uint8_t)(old + pat(i, SEED_SRC));
    case OP_FOP: /* sum of one element of c->length bytes */
        sum = old_elem(c) + src_elem(c);
        return (uint8_t)(sum >> (8 * i));
    case OP_CAS: /* swapped in: the source */
        return pat(i, SEED_SRC);
    default:
        return old;
    }
}

/* Origin: issue the case's op(s) in an open epoch */
static int issue(const rma_case_t *c, window_t *w, const uint8_t *src,
                 uint8_t *res)
{
    MPI_Aint disp = w->remote + (MPI_Aint)c->offset;
    int dsize, count;

    uint64_t cmp, wrong;
    int rc;

    MPI_Type_size(c->dtype, &dsize);
    count = (int)(c->length / (size_t)dsize);
    switch (c->op) {
    case OP_PUT:
        return MPI_Put(src, count, c->dtype, 1, disp, count, c->dtype, w->win);
    case OP_GET:
        return MPI_Get(res, count, c->dtype, 1, disp, count, c->dtype, w->win);
    case OP_ACC:
        return MPI_Accumulate(src, count, c->dtype, 1, disp, count, c->dtype,
                              MPI_SUM, w->win);
    case OP_GET_ACC:
        return MPI_Get_accumulate(src, count, c->dtype, res, count, c->dtype,
                                  1, disp, count, c->dtype, MPI_SUM, w->win);
    case OP_FOP:
        return MPI_Fetch_and_op(src, res, c->dtype, 1, disp, MPI_SUM, w->win);
    case OP_CAS:
        /* one that must not swap, then one that must: both fetch the old
         * value (atomics to one location are ordered) */
        cmp   = old_elem(c);
        wrong = ~cmp;
        rc = MPI_Compare_and_swap(src, &wrong, res + c->length, c->dtype, 1,
                                  disp, w->win);
        if (rc != MPI_SUCCESS) {
            return rc;
        }
        return MPI_Compare_and_swap(src, &cmp, res, c->dtype, 1, disp, w->win);
    }
    return MPI_ERR_OTHER;
}

/* Origin: bytes of its result buffer (and the guards around it) wrong */
static size_t check_result(const rma_case_t *c, const uint8_t *res_guarded,
                           size_t *checked)
{
    const uint8_t *res = res_guarded + RES_GUARD;
    size_t fetched     = 0, bad = 0;

    switch (c->op) {
    case OP_GET: case OP_GET_ACC: case OP_FOP:
        fetched = c->length;
        break;
    case OP_CAS:
        fetched = 2 * c->length;
        break;
    }
    for (size_t i = 0; i < fetched; i++) {
        bad += (res[i] != pat(c->offset + (i % c->length), SEED_WIN));
    }
    bad += count_not(res_guarded, RES_GUARD, FILL_RES);
    bad += count_not(res + fetched, RES_GUARD, FILL_RES);
    *checked += fetched + 2 * RES_GUARD;
    return bad;
}

/* Target: bytes of the whole window wrong; then the range restored */
static size_t check_window(const rma_case_t *c, uint8_t *base, size_t *checked)
{
    size_t bad = count_bad(base, 0, c->offset, SEED_WIN);
    size_t end = c->offset + c->length;

    for (size_t i = 0; i < c->length; i++) {
        bad += (base[c->offset + i] != expected_byte(c, i));
    }
    bad += count_bad(base + end, end, WIN_SIZE - end, SEED_WIN);
    *checked += WIN_SIZE;
    fill(base + c->offset, c->offset, c->length, SEED_WIN);
    return bad;
}

typedef struct {
    size_t cases, checked, bad, errors;
    char   error[128];
} row_t;

static void run_case(const rma_case_t *c, window_t *w, int sync, uint8_t *src,
                     uint8_t *res_guarded, row_t *row)
{
    size_t mine[3] = {0, 0, 0}, all[3]; /* checked, bad, MPI errors */
    int rc = MPI_SUCCESS, rc2;

    if (rank == 0) {
        fill(src, 0, c->length, SEED_SRC);
        memset(res_guarded, FILL_RES, c->length * 2 + 2 * RES_GUARD);
    }
    switch (sync) {
    case SYNC_FENCE:
        CHECK_MPI(MPI_Win_fence(0, w->win));
        if (rank == 0) {
            rc = issue(c, w, src, res_guarded + RES_GUARD);
        }
        rc2 = MPI_Win_fence(0, w->win);
        break;
    case SYNC_LOCK:
        rc2 = MPI_SUCCESS;
        if (rank == 0) {
            CHECK_MPI(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 1, 0, w->win));
            rc  = issue(c, w, src, res_guarded + RES_GUARD);
            rc2 = MPI_Win_unlock(1, w->win);
        }
        break;
    default:
        rc2 = MPI_SUCCESS;
        if (rank == 0) {
            CHECK_MPI(MPI_Win_lock_all(0, w->win));
            rc = issue(c, w, src, res_guarded + RES_GUARD);
            if (rc == MPI_SUCCESS) {
                rc = MPI_Win_flush(1, w->win);
            }
            rc2 = MPI_Win_unlock_all(w->win);
        }
        break;
    }
    if ((rc != MPI_SUCCESS) || (rc2 != MPI_SUCCESS)) {
        mine[2] = 1;
        error_text((rc != MPI_SUCCESS) ? rc : rc2, row->error,
                   sizeof(row->error));
    }
    /* the origin's epoch is over: the target's memory is final */
    CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
    if (rank == 0) {
        mine[1] = check_result(c, res_guarded, &mine[0]);
    } else {
        mine[1] = check_window(c, w->base, &mine[0]);
    }
    CHECK_MPI(MPI_Allreduce(mine, all, 3, MPI_UINT64_T, MPI_SUM,
                            MPI_COMM_WORLD));
    row->cases++;
    row->checked += all[0];
    row->bad     += all[1];
    row->errors  += all[2];
}

static void window_open(int kind, window_t *w, void **mem)
{
    MPI_Aint addr = 0;

    *mem    = NULL;
    w->base = NULL;
    switch (kind) {
    case WIN_CREATE:
        if (rank == 1) {
            *mem    = malloc(WIN_SIZE + 16);
            w->base = (uint8_t*)*mem + 1; /* an odd address */
        }
        CHECK_MPI(MPI_Win_create(w->base, (rank == 1) ? WIN_SIZE : 0, 1,
                                 MPI_INFO_NULL, MPI_COMM_WORLD, &w->win));
        w->remote = 0;
        break;
    case WIN_ALLOCATE:
        CHECK_MPI(MPI_Win_allocate((rank == 1) ? WIN_SIZE : 0, 1,
                                   MPI_INFO_NULL, MPI_COMM_WORLD, &w->base,
                                   &w->win));
        w->remote = 0;
        break;
    default:
        CHECK_MPI(MPI_Win_create_dynamic(MPI_INFO_NULL, MPI_COMM_WORLD,
                                         &w->win));
        if (rank == 1) {
            *mem    = malloc(WIN_SIZE + 16);
            w->base = (uint8_t*)*mem + 1;
            CHECK_MPI(MPI_Win_attach(w->win, w->base, WIN_SIZE));
            CHECK_MPI(MPI_Get_address(w->base, &addr));
        }
        CHECK_MPI(MPI_Bcast(&addr, 1, MPI_AINT, 1, MPI_COMM_WORLD));
        w->remote = addr;
        break;
    }
    if (rank == 1) {
        fill(w->base, 0, WIN_SIZE, SEED_WIN);
    }
    CHECK_MPI(MPI_Win_set_errhandler(w->win, MPI_ERRORS_RETURN));
    CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
}

static void window_close(int kind, window_t *w, void *mem)
{
    if ((kind == WIN_DYNAMIC) && (rank == 1)) {
        CHECK_MPI(MPI_Win_detach(w->win, w->base));
    }
    CHECK_MPI(MPI_Win_free(&w->win));
    free(mem);
}

/* The cases of one op: the RMA list, or the atomics' element sizes. UCP's
 * atomics are of 4 or 8 bytes at addresses aligned to their size (Open MPI
 * 4.1.4 hands them 1-byte ones, which UCP refuses): the target's base
 * address modulo 8 places them. */
static int op_cases(int op, int idx, uint64_t base_mod8, rma_case_t *c)
{
    c->op = op;
    if ((op != OP_FOP) && (op != OP_CAS)) {
        if (idx >= (int)NUM_RMA_CASES) {
            return 0;
        }
        c->offset = rma_cases[idx].offset;
        c->length = rma_cases[idx].length;
        c->dtype  = MPI_UNSIGNED_CHAR;
        return 1;
    }
    switch (idx) {
    case 0: /* 8 bytes, the last ones of a page at the target */
        c->offset = 2 * PAGE - 8 - base_mod8;
        c->length = 8;
        c->dtype  = MPI_UINT64_T;
        return 1;
    case 1: /* 4 bytes at an address that is not 8-aligned */
        c->offset = 5 * PAGE + (12 - base_mod8) % 8;
        c->length = 4;
        c->dtype  = MPI_UINT32_T;
        return 1;
    }
    return 0;
}

static int run_suite(void)
{
    uint8_t *src = NULL, *res = NULL;
    size_t max   = rma_cases[NUM_RMA_CASES - 1].length;
    int failed   = 0;

    if (rank == 0) {
        src = malloc(max);
        res = malloc(2 * max + 2 * RES_GUARD);
        printf("| window        | op               | sync        | cases "
               "| bytes checked | result |\n"
               "|---------------|------------------|-------------|-------"
               "|---------------|--------|\n");
        fflush(stdout);
    }
    for (int kind = 0; kind < NUM_WINS; kind++) {
        window_t w;
        void *mem;
        uint64_t base_mod8 = 0;

        window_open(kind, &w, &mem);
        if (rank == 1) {
            base_mod8 = ((uintptr_t)w.base) % 8;
        }
        CHECK_MPI(MPI_Bcast(&base_mod8, 1, MPI_UINT64_T, 1, MPI_COMM_WORLD));
        for (int op = 0; op < NUM_OPS; op++) {
            for (int sync = 0; sync < NUM_SYNCS; sync++) {
                row_t row;
                rma_case_t c;

                memset(&row, 0, sizeof(row));
                for (int i = 0; op_cases(op, i, base_mod8, &c); i++) {
                    run_case(&c, &w, sync, src, res, &row);
                }
                if (rank == 0) {
                    int ok = (row.bad == 0) && (row.errors == 0);

                    failed |= !ok;
                    printf("| %-13s | %-16s | %-11s | %5zu | %13zu | %-6s |"
                           "%s%s\n", win_names[kind], op_names[op],
                           sync_names[sync], row.cases, row.checked,
                           ok ? "pass" : "FAIL", ok ? "" : " ",
                           ok ? "" : row.error);
                    if (row.bad) {
                        printf("  %zu bytes wrong\n", row.bad);
                    }
                    fflush(stdout);
                }
            }
        }
        window_close(kind, &w, mem);
    }
    free(src);
    free(res);
    return failed;
}

/* --p2p: point-to-point messages. The sizes: empty, below UCP's eager
 * thresholds, around them, and far past them (rendezvous). */
static const size_t p2p_sizes[] = {0, 1, PAGE + 3, 64 * 1024 + 3, MIB + 3,
                                   64 * MIB};
#define NUM_P2P_SIZES (sizeof(p2p_sizes) / sizeof(p2p_sizes[0]))

enum { BUF_CONTIG, BUF_VECTOR, NUM_BUFS };
enum { CALL_SEND, CALL_SSEND, CALL_ISEND, CALL_SENDRECV, NUM_CALLS };
enum { ORDER_POSTED, ORDER_UNEXPECTED, ORDER_MPROBE, ORDER_EXCHANGE };

static const char *buf_names[]   = {"contig (odd)", "vector (odd)"};
static const char *call_names[]  = {"send", "ssend", "isend", "sendrecv"};
static const char *order_names[] = {"posted", "unexpected", "mprobe any",
                                    "exchange"};

/* The sender's buffer: contiguous, byte i = pat(i, seed); or a vector of
 * n single bytes with a stride of 2, byte 2i = pat(i, seed) and the bytes
 * between the guard fill */
static void p2p_fill_src(int buf, uint8_t *src, size_t n, unsigned seed)
{
    if (buf == BUF_CONTIG) {
        fill(src, 0, n, seed);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        src[2 * i] = pat(i, seed);
        if (i + 1 < n) {
            src[2 * i + 1] = FILL_GUARD;
        }
    }
}

/* Bytes of the sender's buffer that changed */
static size_t p2p_check_src(int buf, const uint8_t *src, size_t n,
                            unsigned seed, size_t *checked)
{
    size_t bad = 0;

    if (buf == BUF_CONTIG) {
        *checked += n;
        return count_bad(src, 0, n, seed);
    }
    for (size_t i = 0; i < n; i++) {
        bad += (src[2 * i] != pat(i, seed));
        if (i + 1 < n) {
            bad += (src[2 * i + 1] != FILL_GUARD);
        }
    }
    *checked += n ? (2 * n - 1) : 0;
    return bad;
}

/* Bytes of the receiver's buffer (and the guards around it) wrong */
static size_t p2p_check_res(const uint8_t *res_guarded, size_t n,
                            unsigned seed, size_t *checked)
{
    size_t bad = count_not(res_guarded, RES_GUARD, FILL_RES);

    bad += count_bad(res_guarded + RES_GUARD, 0, n, seed);
    bad += count_not(res_guarded + RES_GUARD + n, RES_GUARD, FILL_RES);
    *checked += n + 2 * RES_GUARD;
    return bad;
}

/* A status that does not say: from the peer, with the tag, n bytes */
static int p2p_bad_status(const MPI_Status *st, int peer, int tag, size_t n,
                          char *error, size_t max)
{
    int count = -1;

    MPI_Get_count(st, MPI_BYTE, &count);
    if ((st->MPI_SOURCE == peer) && (st->MPI_TAG == tag) &&
        (count == (int)n)) {
        return 0;
    }
    snprintf(error, max, "status: source %d tag %d count %d, expected "
             "%d %d %zu", st->MPI_SOURCE, st->MPI_TAG, count, peer, tag, n);
    return 1;
}

static int p2p_send(int call, const void *buf, int count, MPI_Datatype type,
                    int tag)
{
    MPI_Request req;
    int rc;

    switch (call) {
    case CALL_SEND:
        return MPI_Send(buf, count, type, 1, tag, MPI_COMM_WORLD);
    case CALL_SSEND:
        return MPI_Ssend(buf, count, type, 1, tag, MPI_COMM_WORLD);
    default:
        rc = MPI_Isend(buf, count, type, 1, tag, MPI_COMM_WORLD, &req);
        return (rc == MPI_SUCCESS) ? MPI_Wait(&req, MPI_STATUS_IGNORE) : rc;
    }
}

/* One message of n bytes (two for MPI_Sendrecv) */
static void p2p_case(int buf, int call, int order, size_t n, int tag,
                     uint8_t *src, uint8_t *res_guarded, row_t *row)
{
    size_t mine[3] = {0, 0, 0}, all[3]; /* checked, bad, errors */
    uint8_t *res   = res_guarded + RES_GUARD;
    unsigned seed  = SEED_SRC + (unsigned)rank; /* what this rank sends */
    int peer       = 1 - rank, count = n ? 1 : 0, rc = MPI_SUCCESS, flag;
    int sends      = (rank == 0) || (order == ORDER_EXCHANGE);
    int receives   = (rank == 1) || (order == ORDER_EXCHANGE);
    int probe_bad  = 0;
    char error[sizeof(row->error)] = "";
    MPI_Datatype type;
    MPI_Request req;
    MPI_Message msg;
    MPI_Status st;

    /* one element of n bytes: contiguous, or every other byte */
    if (buf == BUF_CONTIG) {
        CHECK_MPI(MPI_Type_contiguous((int)n, MPI_BYTE, &type));
    } else {
        CHECK_MPI(MPI_Type_vector((int)n, 1, 2, MPI_BYTE, &type));
    }
    CHECK_MPI(MPI_Type_commit(&type));
    p2p_fill_src(buf, src, n, seed);
    memset(res_guarded, FILL_RES, n + 2 * RES_GUARD);
    memset(&st, 0, sizeof(st));

    if (order == ORDER_EXCHANGE) {
        CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
        rc = MPI_Sendrecv(src, count, type, peer, tag, res, (int)n, MPI_BYTE,
                          peer, tag, MPI_COMM_WORLD, &st);
    } else if (rank == 0) {
        CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
        rc = p2p_send(call, src, count, type, tag);
    } else if (order == ORDER_POSTED) {
        rc = MPI_Irecv(res, (int)n, MPI_BYTE, 0, tag, MPI_COMM_WORLD, &req);
        CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
        if (rc == MPI_SUCCESS) {
            rc = MPI_Wait(&req, &st);
        }
    } else if (order == ORDER_UNEXPECTED) {
        /* its envelope has arrived before the receive is posted */
        CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
        do {
            rc = MPI_Iprobe(0, tag, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
        } while ((rc == MPI_SUCCESS) && !flag);
        if (rc == MPI_SUCCESS) {
            rc = MPI_Recv(res, (int)n, MPI_BYTE, 0, tag, MPI_COMM_WORLD, &st);
        }
    } else {
        CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
        rc = MPI_Mprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &msg,
                        &st);
        if (rc == MPI_SUCCESS) {
            /* what the probe said, then the receive's own status */
            probe_bad = p2p_bad_status(&st, 0, tag, n, error, sizeof(error));
            rc        = MPI_Mrecv(res, (int)n, MPI_BYTE, &msg, &st);
        }
    }

    if (rc != MPI_SUCCESS) {
        error_text(rc, error, sizeof(error));
        mine[2] = 1;
    } else if (receives) {
        mine[2] = probe_bad ||
                  p2p_bad_status(&st, peer, tag, n, error, sizeof(error));
    }
    if (sends) {
        mine[1] = p2p_check_src(buf, src, n, seed, &mine[0]);
    }
    if (receives) {
        mine[1] += p2p_check_res(res_guarded, n, SEED_SRC + (unsigned)peer,
                                 &mine[0]);
    }
    CHECK_MPI(MPI_Type_free(&type));
    CHECK_MPI(MPI_Allreduce(mine, all, 3, MPI_UINT64_T, MPI_SUM,
                            MPI_COMM_WORLD));
    /* the receiver's error, when it has one, goes to the origin's row */
    if (rank == 1) {
        CHECK_MPI(MPI_Send(error, sizeof(error), MPI_CHAR, 0, 0,
                           MPI_COMM_WORLD));
    } else {
        char peer_error[sizeof(error)];

        CHECK_MPI(MPI_Recv(peer_error, sizeof(peer_error), MPI_CHAR, 1, 0,
                           MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        if (error[0] != '\0') {
            memcpy(row->error, error, sizeof(error));
        } else if (peer_error[0] != '\0') {
            snprintf(row->error, sizeof(row->error), "receiver: %.100s",
                     peer_error);
        }
    }
    row->cases++;
    row->checked += all[0];
    row->bad     += all[1];
    row->errors  += all[2];
}

static int run_p2p(void)
{
    size_t max = p2p_sizes[NUM_P2P_SIZES - 1];
    /* the vector's bytes, and an odd address each */
    uint8_t *src_mem = malloc(2 * max + 1);
    uint8_t *res_mem = malloc(max + 2 * RES_GUARD + 1);
    int failed = 0, tag = 0;

    if ((src_mem == NULL) || (res_mem == NULL)) {
        fprintf(stderr, "rank %d: out of memory\n", rank);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    /* a failed call is a row's result, not the job's end */
    CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    if (rank == 0) {
        printf("| buffer        | call             | order       | cases "
               "| bytes checked | result |\n"
               "|---------------|------------------|-------------|-------"
               "|---------------|--------|\n");
        fflush(stdout);
    }
    for (int buf = 0; buf < NUM_BUFS; buf++) {
        for (int call = 0; call < NUM_CALLS; call++) {
            int first = (call == CALL_SENDRECV) ? ORDER_EXCHANGE :
                        ORDER_POSTED;
            int last  = (call == CALL_SENDRECV) ? ORDER_EXCHANGE :
                        ORDER_MPROBE;

            for (int order = first; order <= last; order++) {
                row_t row;

                memset(&row, 0, sizeof(row));
                for (size_t i = 0; i < NUM_P2P_SIZES; i++) {
                    p2p_case(buf, call, order, p2p_sizes[i], ++tag,
                             src_mem + 1, res_mem + 1, &row);
                }
                if (rank == 0) {
                    int ok = (row.bad == 0) && (row.errors == 0);

                    failed |= !ok;
                    printf("| %-13s | %-16s | %-11s | %5zu | %13zu | %-6s |"
                           "%s%s\n", buf_names[buf], call_names[call],
                           order_names[order], row.cases, row.checked,
                           ok ? "pass" : "FAIL", ok ? "" : " ",
                           ok ? "" : row.error);
                    if (row.bad) {
                        printf("  %zu bytes wrong\n", row.bad);
                    }
                    fflush(stdout);
                }
            }
        }
    }
    CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL));
    free(src_mem);
    free(res_mem);
    return failed;
}

/* --oob: the window and the guard page behind it in a shared mapping */
static uint8_t *oob_map(const char *file, int create)
{
    int fd = open(file, create ? (O_RDWR | O_CREAT | O_TRUNC) : O_RDONLY,
                  0600);
    uint8_t *p;

    if ((fd < 0) || (create && (ftruncate(fd, OOB_WIN + PAGE) != 0))) {
        fprintf(stderr, "%s: %s\n", file, strerror(errno));
        exit(2);
    }
    p = mmap(NULL, OOB_WIN + PAGE, create ? (PROT_READ | PROT_WRITE) :
             PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
        fprintf(stderr, "mmap %s: %s\n", file, strerror(errno));
        exit(2);
    }
    return p;
}

/* What the target's window and guard hold: 1 when anything changed */
static int report_target(const char *who, const uint8_t *p)
{
    size_t win = count_bad(p, 0, OOB_WIN, SEED_WIN);
    size_t grd = count_not(p + OOB_WIN, PAGE, FILL_GUARD);

    printf("%s: window bytes changed %zu/%lu, guard bytes changed %zu/%lu%s"
           "\n", who, win, OOB_WIN, grd, PAGE,
           !count_bad(p + OOB_DISP, 0, OOB_LEN, SEED_SRC) ?
           " (the origin's bytes, at the displacement)" : "");
    fflush(stdout);
    return (win || grd) ? 1 : 0;
}

static int inspect(const char *file)
{
    return report_target("target memory", oob_map(file, 0));
}

static const char *rc_str(int rc)
{
    static char msg[MPI_MAX_ERROR_STRING];
    int len;

    if (rc == MPI_SUCCESS) {
        return "MPI_SUCCESS";
    }
    MPI_Error_string(rc, msg, &len);
    return msg;
}

static int run_oob(const char *what, const char *file)
{
    uint8_t *base = NULL, res[OOB_LEN], src[OOB_LEN];
    int is_put    = !strcmp(what, "put");
    int rc, rc2;
    MPI_Win win;

    if (rank == 1) {
        base = oob_map(file, 1);
        fill(base, 0, OOB_WIN, SEED_WIN);
        memset(base + OOB_WIN, FILL_GUARD, PAGE);
    }
    CHECK_MPI(MPI_Win_create(base, (rank == 1) ? OOB_WIN : 0, 1,
                             MPI_INFO_NULL, MPI_COMM_WORLD, &win));
    CHECK_MPI(MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN));
    if (rank == 0) {
        fill(src, 0, OOB_LEN, SEED_SRC);
        memset(res, FILL_RES, OOB_LEN);
        CHECK_MPI(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 1, 0, win));
        rc = is_put ?
             MPI_Put(src, OOB_LEN, MPI_BYTE, 1, OOB_DISP, OOB_LEN, MPI_BYTE,
                     win) :
             MPI_Get(res, OOB_LEN, MPI_BYTE, 1, OOB_DISP, OOB_LEN, MPI_BYTE,
                     win);
        printf("origin: MPI_%s of %d bytes at displacement %lu of a %lu-byte "
               "window: %s\n", is_put ? "Put" : "Get", OOB_LEN, OOB_DISP,
               OOB_WIN, rc_str(rc));
        fflush(stdout);
        rc2 = MPI_Win_unlock(1, win);
        printf("origin: MPI_Win_unlock: %s\n", rc_str(rc2));
        if (!is_put) {
            printf("origin: result buffer: %zu/%d bytes read from the "
                   "target's guard, %zu/%d untouched\n",
                   OOB_LEN - count_not(res, OOB_LEN, FILL_GUARD), OOB_LEN,
                   OOB_LEN - count_not(res, OOB_LEN, FILL_RES), OOB_LEN);
        }
        fflush(stdout);
    }
    CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
    if (rank == 1) {
        report_target("target (rank 1)", base);
    }
    CHECK_MPI(MPI_Win_free(&win));
    return 0;
}

/* Open MPI 4.1's lookup of the attached region that holds a remote address
 * misses a region's last byte and hands UCP the key of the slot before the
 * first region */
static int run_dyn_last(int pad)
{
    const size_t size = PAGE;
    uint8_t *region   = NULL, one = 0x42;
    MPI_Aint addr     = 0;
    MPI_Win win;
    int rc, rc2;

    CHECK_MPI(MPI_Win_create_dynamic(MPI_INFO_NULL, MPI_COMM_WORLD, &win));
    CHECK_MPI(MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN));
    if (rank == 1) {
        /* the workaround: a region one byte longer than what is used */
        region = calloc(1, size + pad);
        CHECK_MPI(MPI_Win_attach(win, region, size + pad));
        CHECK_MPI(MPI_Get_address(region, &addr));
    }
    CHECK_MPI(MPI_Bcast(&addr, 1, MPI_AINT, 1, MPI_COMM_WORLD));
    if (rank == 0) {
        CHECK_MPI(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 1, 0, win));
        rc  = MPI_Put(&one, 1, MPI_BYTE, 1, addr + size - 1, 1, MPI_BYTE, win);
        rc2 = MPI_Win_unlock(1, win);
        printf("origin: 1-byte MPI_Put to byte %zu of a %zu-byte attached "
               "region: %s, unlock: %s\n", size - 1, size + pad, rc_str(rc),
               rc_str(rc2));
        fflush(stdout);
    }
    CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
    if (rank == 1) {
        printf("target (rank 1): byte %zu holds 0x%02x (0x42 expected)\n",
               size - 1, region[size - 1]);
        fflush(stdout);
        CHECK_MPI(MPI_Win_detach(win, region));
    }
    CHECK_MPI(MPI_Win_free(&win));
    free(region);
    return 0;
}

int main(int argc, char **argv)
{
    int size, ret;

    if ((argc == 3) && !strcmp(argv[1], "--inspect")) {
        return inspect(argv[2]);
    }
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 2) {
        if (rank == 0) {
            fprintf(stderr, "span_mpi_rma: needs 2 ranks, has %d\n", size);
        }
        MPI_Finalize();
        return 2;
    }
    if ((argc == 4) && !strcmp(argv[1], "--oob")) {
        ret = run_oob(argv[2], argv[3]);
    } else if ((argc >= 2) && !strcmp(argv[1], "--dyn-last")) {
        ret = run_dyn_last((argc == 3) && !strcmp(argv[2], "pad"));
    } else if ((argc == 2) && !strcmp(argv[1], "--p2p")) {
        ret = run_p2p();
        ret |= run_suite();
    } else {
        ret = run_suite();
    }
    MPI_Bcast(&ret, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Finalize();
    return ret;
}
