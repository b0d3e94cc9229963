/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The VMM copy engine (span_vmm_copy.h), of every vendor.
 */
#include "span_vmm_copy.h"
#include "base/span_completion.h"

#include <ucs/datastruct/list.h>
#include <ucs/debug/log_def.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

/* Pieces of room in a batch per op it takes: an op of more pieces than a
 * whole batch holds is queued alone */
#define SPAN_VMM_COPY_BATCH_PIECES 4

/* Submissions a progress keeps queued on the device before it queues the
 * batch being filled: one running, while the next one gathers the ops
 * posted meanwhile. With two, a progress thread (NIXL's) queued a batch
 * of a few ops behind each running one, a launch each: on 2 H200s NIXL's
 * 16 KiB pages moved at 5 GB/s, with one at 7.5-12.5 */
#define SPAN_VMM_COPY_DEPTH 1

/* An op of a submission */
typedef struct span_vmm_copy_rec {
    uct_completion_t *comp;
    ucs_status_t     status; /* reported once its copies ran */
    size_t           pieces; /* of a batch: its pieces, after the ops' before */
    span_vmm_map_t   *map;   /* busy until they ran */
} span_vmm_copy_rec_t;

/* The copies of one op, or of a batch of ops, ended by one signal of its
 * device's pool */
typedef struct span_vmm_copy_desc {
    ucs_list_link_t        list;
    span_vmm_copy_signal_t signal;
    int                    device;
    int                    signaled;   /* 0: its copies ran already */
    int                    batch;      /* has a batch's room, not one op's */
    uint64_t               seq;        /* of its last op */
    unsigned               num_ops;
    size_t                 num_pieces; /* of a batch */
    size_t                 num_bytes;  /* of a batch */
    span_vmm_copy_piece_t  *pieces;    /* batch_pieces of room (batch) */
    span_vmm_copy_rec_t    ops[];      /* batch_ops of room (batch), or 1 */
} span_vmm_copy_desc_t;

/* A flush that waits for the ops queued before it */
typedef struct span_vmm_copy_flush {
    ucs_list_link_t  list;
    uint64_t         seq;
    uct_completion_t *comp;
} span_vmm_copy_flush_t;

/* The record of an op whose copies go through map, which stays open while
 * they run */
static span_vmm_copy_rec_t span_vmm_copy_rec(uct_completion_t *comp,
                                             ucs_status_t status,
                                             size_t pieces,
                                             span_vmm_map_t *map)
{
    __atomic_add_fetch(&map->busy, 1, __ATOMIC_RELAXED);
    return (span_vmm_copy_rec_t){comp, status, pieces, map};
}

/* Nanoseconds of the monotonic clock (the vDSO's: no system call) */
static uint64_t span_vmm_copy_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ((uint64_t)ts.tv_sec * 1000000000ull) + ts.tv_nsec;
}

struct span_vmm_copy {
    const span_vmm_copy_ops_t *ops;
    ucs_list_link_t           active;  /* in the order queued */
    unsigned                  in_flight; /* descriptors on active */
    ucs_list_link_t           flushes; /* in the order of their seq */
    uint64_t                  posted;  /* seq of the last op queued */
    uint64_t                  done;    /* seq of the last op completed */
    /* per device: descriptors whose signals are idle (a CUDA event
     * belongs to its device's context), of one op and of batches apart,
     * so that ops queued alone hold no batch's room */
    ucs_list_link_t           pool[2][SPAN_VMM_COPY_MAX_DEVICES];
    unsigned                  batch_ops;      /* 1: every op alone */
    size_t                    batch_pieces;
    size_t                    batch_bytes;
    uint64_t                  burst_gap;      /* ns */
    span_vmm_copy_desc_t      *pending;       /* the batch being filled */
    pthread_t                 poster;         /* of its last op */
    uint64_t                  posted_at;      /* ns: its last op */
    /* the allocation of device memory of the local buffers of a burst of
     * ops (ops->extent): an op queued in it (seq) owns its buffer until it
     * completes, so while it has not (done < seq), the allocation is not
     * freed and the ops that follow into it copy on its device */
    struct {
        uint64_t start, length, seq;
        int      device;
    } local;
    /* what the engine did, logged at its end (UCX_LOG_LEVEL=info): how a
     * client's pattern of posts and progress cut its ops into launches */
    struct {
        uint64_t alone, batches, batched, progress;
        uint64_t in_submit; /* ns */
    } stats;
    uint64_t                  vendor[]; /* ops->vendor_size bytes */
};

ucs_status_t span_vmm_copy_create(const span_vmm_copy_ops_t *ops,
                                  const span_vmm_copy_params_t *params,
                                  span_vmm_copy_t **copy_p)
{
    size_t size = sizeof(span_vmm_copy_t);
    span_vmm_copy_t *copy;
    ucs_status_t status;
    int i;

    if (ops == NULL) {
        ucs_error("span vmm copy: span was built without the runtime that "
                  "copies this device memory");
        return UCS_ERR_UNSUPPORTED;
    }
    size += ops->vendor_size;
    copy  = calloc(1, size);
    if (copy == NULL) {
        ucs_error("span %s copy: no memory for a copy engine (%zu bytes)",
                  ops->name, size);
        return UCS_ERR_NO_MEMORY;
    }
    status = ops->init(copy->vendor, params);
    if (status != UCS_OK) {
        goto err_free;
    }
    copy->ops = ops;
    if ((ops->batch != NULL) && (params->batch_ops > 1)) {
        copy->batch_ops    = params->batch_ops;
        copy->batch_pieces = (size_t)params->batch_ops *
                             SPAN_VMM_COPY_BATCH_PIECES;
        copy->batch_bytes  = params->batch_bytes;
        copy->burst_gap    = params->burst_gap;
    } else {
        copy->batch_ops    = 1;
    }
    ucs_list_head_init(&copy->active);
    ucs_list_head_init(&copy->flushes);
    for (i = 0; i < SPAN_VMM_COPY_MAX_DEVICES; ++i) {
        ucs_list_head_init(&copy->pool[0][i]);
        ucs_list_head_init(&copy->pool[1][i]);
    }
    *copy_p = copy;
    return UCS_OK;

err_free:
    free(copy);
    return status;
}

/* A descriptor of device, with a batch's room where batch, else one op's */
static span_vmm_copy_desc_t *span_vmm_copy_desc_get(span_vmm_copy_t *copy,
                                                    int device, int batch)
{
    ucs_list_link_t *pool = &copy->pool[batch][device];
    span_vmm_copy_desc_t *desc;
    size_t size;

    if (!ucs_list_is_empty(pool)) {
        return ucs_list_extract_head(pool, span_vmm_copy_desc_t, list);
    }
    size = sizeof(*desc) +
           ((batch ? copy->batch_ops : 1) * sizeof(desc->ops[0])) +
           ((batch ? copy->batch_pieces : 0) * sizeof(desc->pieces[0]));
    desc = malloc(size);
    if (desc == NULL) {
        ucs_error("span %s copy: no memory for a signal descriptor (%zu "
                  "bytes)", copy->ops->name, size);
        return NULL;
    }
    desc->pieces = batch ?
                   (span_vmm_copy_piece_t*)&desc->ops[copy->batch_ops] : NULL;
    desc->batch  = batch;
    if (copy->ops->signal_create(copy->vendor, device, &desc->signal) !=
        UCS_OK) {
        free(desc);
        return NULL;
    }
    desc->device = device;
    return desc;
}

/* The element copies of iov: elements of no bytes have none */
static size_t span_vmm_copy_count(const uct_iov_t *iov, size_t iovcnt)
{
    size_t i, copies = 0;

    for (i = 0; i < iovcnt; ++i) {
        copies += (iov[i].length > 0) ? iov[i].count : 0;
    }
    return copies;
}

/* Queues the element copies of op, begun; *queued_p tells how many the
 * device took (where one is refused, those before it still run) */
static ucs_status_t span_vmm_copy_issue(span_vmm_copy_t *copy,
                                        const span_vmm_copy_op_t *op,
                                        const uct_iov_t *iov, size_t iovcnt,
                                        uint8_t *remote, size_t copies,
                                        size_t *queued_p)
{
    ucs_status_t status = UCS_OK;
    size_t i, j, queued = 0;
    uint8_t *local      = NULL;

    for (i = 0; (i < iovcnt) && (status == UCS_OK); ++i) {
        if (iov[i].length == 0) {
            continue;
        }
        for (j = 0; (j < iov[i].count) && (status == UCS_OK); ++j) {
            local   = (uint8_t*)iov[i].buffer + (j * iov[i].stride);
            status  = copy->ops->copy(copy->vendor, op, local, remote,
                                      iov[i].length);
            queued += (status == UCS_OK);
            remote += iov[i].length;
        }
    }
    *queued_p = queued;
    if (status != UCS_OK) {
        ucs_error("span %s copy: %s of %zu bytes at %p failed (%zu of its "
                  "op's %zu copies queued)", copy->ops->name,
                  op->is_put ? "put" : "get", iov[i - 1].length, local,
                  queued, copies);
    }
    return status;
}

/* Queues the pieces of the batch being filled, then its signal; where the
 * vendor fails, one by one */
static void span_vmm_copy_submit(span_vmm_copy_t *copy)
{
    const span_vmm_copy_ops_t *ops = copy->ops;
    span_vmm_copy_desc_t *desc     = copy->pending;
    span_vmm_copy_op_t op          = {.is_put = 1, .device = desc->device,
                                      .signal = desc->signal};
    size_t i, queued = 0, piece = 0;
    span_vmm_copy_piece_t *p;
    uint64_t start                 = span_vmm_copy_now();
    ucs_status_t status;
    unsigned j;

    copy->pending  = NULL;
    desc->signaled = 1;
    ucs_list_add_tail(&copy->active, &desc->list);
    ++copy->in_flight;
    ++copy->stats.batches;
    copy->stats.batched += desc->num_ops;
    status = ops->batch(copy->vendor, desc->device, desc->pieces,
                        desc->num_pieces, &desc->signal);
    copy->stats.in_submit += span_vmm_copy_now() - start;
    if (status == UCS_OK) {
        return;
    }
    if (status == UCS_ERR_UNSUPPORTED) {
        ucs_debug("span %s copy: the device cannot batch copies: each op is "
                  "queued alone", ops->name);
        copy->batch_ops = 1;
    }
    /* as a put: pieces go from src (local) to dst (remote) */
    ops->begin(copy->vendor, &op, desc->num_pieces);
    for (j = 0; j < desc->num_ops; ++j) {
        for (i = 0; i < desc->ops[j].pieces; ++i, ++piece) {
            p = &desc->pieces[piece];
            if (ops->copy(copy->vendor, &op, (void*)(uintptr_t)p->src,
                          (void*)(uintptr_t)p->dst, p->length) != UCS_OK) {
                desc->ops[j].status = UCS_ERR_IO_ERROR;
            } else {
                ++queued;
            }
        }
    }
    if (ops->end(copy->vendor, &op, desc->num_pieces, queued) != UCS_OK) {
        /* they ran (the vendor waited for them), but nothing tells that
         * they did right: as for an op alone */
        desc->signaled = 0;
        for (j = 0; j < desc->num_ops; ++j) {
            desc->ops[j].status = UCS_ERR_IO_ERROR;
        }
    }
}

/* Whether op joins the batch being filled, or starts one: an op posted
 * while the device has none of the engine's copies is queued alone, so
 * that one op keeps the latency of a copy; the ops that follow it while
 * copies are queued are batched, whether the application progresses
 * between them or not (a progress thread may). An op to or from host
 * memory (which the vendor's kernel may not reach), of no completion
 * (nothing would report a failure of its batch), or of more pieces than a
 * batch holds goes alone. */
static int span_vmm_copy_batches(const span_vmm_copy_t *copy,
                                 const span_vmm_copy_op_t *op, size_t copies,
                                 const uct_completion_t *comp)
{
    return (copy->batch_ops > 1) && !op->host && (comp != NULL) &&
           (copies <= copy->batch_pieces) &&
           ((copy->in_flight > 0) || (copy->pending != NULL));
}

/* Adds op to the batch being filled (queued first where it is another
 * device's, or full), which is queued once full of ops or of bytes */
static ucs_status_t span_vmm_copy_add(span_vmm_copy_t *copy,
                                      span_vmm_map_t *map,
                                      const span_vmm_copy_op_t *op,
                                      const uct_iov_t *iov, size_t iovcnt,
                                      uint8_t *remote, size_t copies,
                                      uct_completion_t *comp)
{
    span_vmm_copy_desc_t *desc = copy->pending;
    span_vmm_copy_piece_t *p;
    uint8_t *local;
    size_t i, j;

    if ((desc != NULL) &&
        ((desc->device != op->device) ||
         (desc->num_pieces + copies > copy->batch_pieces))) {
        span_vmm_copy_submit(copy);
        desc = NULL;
    }
    if (desc == NULL) {
        desc = span_vmm_copy_desc_get(copy, op->device, 1);
        if (desc == NULL) {
            return UCS_ERR_NO_MEMORY;
        }
        desc->num_ops    = 0;
        desc->num_pieces = 0;
        desc->num_bytes  = 0;
        copy->pending    = desc;
    }
    for (i = 0; i < iovcnt; ++i) {
        for (j = 0; (iov[i].length > 0) && (j < iov[i].count); ++j) {
            local     = (uint8_t*)iov[i].buffer + (j * iov[i].stride);
            p         = &desc->pieces[desc->num_pieces++];
            p->dst    = (uintptr_t)(op->is_put ? remote : local);
            p->src    = (uintptr_t)(op->is_put ? local : remote);
            p->length = iov[i].length;
            remote   += iov[i].length;
        }
        desc->num_bytes += iov[i].length * iov[i].count;
    }
    desc->ops[desc->num_ops++] = span_vmm_copy_rec(comp, UCS_OK, copies,
                                                   map);
    desc->seq                  = ++copy->posted;
    if (copy->burst_gap > 0) {
        copy->poster    = pthread_self();
        copy->posted_at = span_vmm_copy_now();
    }
    if ((desc->num_ops == copy->batch_ops) ||
        (desc->num_bytes >= copy->batch_bytes)) {
        span_vmm_copy_submit(copy);
    }
    return UCS_INPROGRESS;
}

/* Whether local lies in the allocation of an op still queued, whose device
 * then copies op too: map was given that device's access already */
static UCS_F_ALWAYS_INLINE int
span_vmm_copy_local_known(const span_vmm_copy_t *copy,
                          const span_vmm_map_t *map, const void *local,
                          span_vmm_copy_op_t *op)
{
    if ((copy->done >= copy->local.seq) ||
        ((uintptr_t)local - copy->local.start >= copy->local.length) ||
        !(map->devices & (1ull << copy->local.device))) {
        return 0;
    }
    op->device = copy->local.device;
    op->host   = 0;
    return 1;
}

/* Asks for the allocation of op's local buffer, just routed to a device:
 * whether it is known, to be kept once op is queued */
static int span_vmm_copy_local_learn(span_vmm_copy_t *copy,
                                     const span_vmm_copy_op_t *op,
                                     const void *local)
{
    copy->local.seq = 0; /* not kept until an op in it is queued */
    if (op->host || (copy->ops->extent == NULL) ||
        (copy->ops->extent(copy->vendor, op, local, &copy->local.start,
                           &copy->local.length) != UCS_OK)) {
        return 0;
    }
    copy->local.device = op->device;
    return 1;
}

/* Whether every element of iov lies in device memory the vendor's kernel
 * reads: in the allocation of the burst (known), or, where that is not
 * known, the one element of an op of one copy, whose first byte route
 * found on the device. An element elsewhere (host memory after a device
 * element) would be read by the kernel: such an op goes alone, copied by
 * the runtime, which reaches any memory */
static int span_vmm_copy_local_holds(const span_vmm_copy_t *copy, int known,
                                     const uct_iov_t *iov, size_t iovcnt,
                                     size_t copies)
{
    uint64_t first, end;
    size_t i;

    if (!known) {
        return copies == 1;
    }
    for (i = 0; i < iovcnt; ++i) {
        if ((iov[i].length == 0) || (iov[i].count == 0)) {
            continue;
        }
        first = (uintptr_t)iov[i].buffer - copy->local.start;
        end   = first + ((uint64_t)(iov[i].count - 1) * iov[i].stride) +
                iov[i].length;
        if ((first >= copy->local.length) || (end < first) ||
            (end > copy->local.length)) {
            return 0;
        }
    }
    return 1;
}

/* The local buffer of the first element that moves bytes: the one route
 * looks at */
static const void *span_vmm_copy_first(const uct_iov_t *iov)
{
    while ((iov->length == 0) || (iov->count == 0)) {
        ++iov;
    }
    return iov->buffer;
}

ucs_status_t span_vmm_copy_post(span_vmm_copy_t *copy, span_vmm_map_t *map,
                                int is_put, const uct_iov_t *iov,
                                size_t iovcnt, uint8_t *remote,
                                uct_completion_t *comp)
{
    const span_vmm_copy_ops_t *ops = copy->ops;
    size_t copies                  = span_vmm_copy_count(iov, iovcnt);
    span_vmm_copy_op_t op          = {.is_put = is_put};
    span_vmm_copy_desc_t *desc;
    const void *first;
    ucs_status_t status;
    size_t queued;
    int known;

    if (copies == 0) {
        return UCS_OK;
    }
    if (ucs_unlikely(map->ipc &&
                     __atomic_load_n(&map->revoked, __ATOMIC_ACQUIRE))) {
        return UCS_ERR_UNSUPPORTED; /* freed by the peer: the inner
                                     * transport serves it, as natively */
    }
    first = span_vmm_copy_first(iov);
    known = span_vmm_copy_local_known(copy, map, first, &op);
    if (!known) {
        status = ops->route(copy->vendor, map, first, remote, &op);
        if (status != UCS_OK) {
            return status;
        }
    }
    if (span_vmm_copy_batches(copy, &op, copies, comp)) {
        /* a burst: learn its allocation here, not for an op alone */
        known = known || span_vmm_copy_local_learn(copy, &op, first);
        if (span_vmm_copy_local_holds(copy, known, iov, iovcnt, copies)) {
            status = span_vmm_copy_add(copy, map, &op, iov, iovcnt,
                                       remote, copies, comp);
            if (known && (status == UCS_INPROGRESS)) {
                copy->local.seq = copy->posted;
            }
            return status;
        }
    }
    if (copy->pending != NULL) {
        span_vmm_copy_submit(copy); /* what was posted before goes first */
    }
    desc = span_vmm_copy_desc_get(copy, op.device, 0);
    if (desc == NULL) {
        return UCS_ERR_NO_MEMORY;
    }
    op.signal = desc->signal;
    ops->begin(copy->vendor, &op, copies);
    status = span_vmm_copy_issue(copy, &op, iov, iovcnt, remote, copies,
                                 &queued);
    if (ops->end(copy->vendor, &op, copies, queued) != UCS_OK) {
        queued = 0; /* they ran: the vendor waited for them */
        status = UCS_ERR_IO_ERROR;
    }
    if (queued == 0) {
        ucs_list_add_tail(&copy->pool[0][op.device], &desc->list);
        return status;
    }
    /* an op that failed still owns its buffers while the copies it queued
     * run: its error is reported once they have, never before */
    ++copy->stats.alone;
    desc->signaled   = 1;
    desc->num_ops    = 1;
    desc->ops[0]     = span_vmm_copy_rec(comp, status, copies, map);
    desc->seq        = ++copy->posted;
    ucs_list_add_tail(&copy->active, &desc->list);
    ++copy->in_flight;
    if (known) {
        copy->local.seq = desc->seq;
    }
    if ((status != UCS_OK) && (comp == NULL)) {
        /* nothing to report it through later: wait here */
        ops->wait(copy->vendor, &desc->signal);
        return status;
    }
    return UCS_INPROGRESS;
}

/* Completes the ops of desc, whose copies ran, of status where it is an
 * error */
static void span_vmm_copy_complete(span_vmm_copy_desc_t *desc,
                                   ucs_status_t status)
{
    unsigned i;

    for (i = 0; i < desc->num_ops; ++i) {
        /* before the callback, which may release the last rkey of map */
        __atomic_sub_fetch(&desc->ops[i].map->busy, 1, __ATOMIC_RELEASE);
        if (desc->ops[i].comp != NULL) {
            span_completion_invoke(desc->ops[i].comp,
                                   (status == UCS_OK) ? desc->ops[i].status :
                                                        status);
        }
    }
}

/* Whether the last burst of batched ops has ended, for a progress: the
 * thread that posted its last op progresses (it posts no more meanwhile),
 * or it posted nothing for burst_gap. Until then a progress by another
 * thread leaves the engine alone: it neither completes nor queues. A
 * progress thread that queued the gathered ops whenever the device was
 * idle cut NIXL's 4096 pages of 16 KiB into 7511 launches of 5.4 ops (one
 * H200): its progress ran between every few posts; one that only asked
 * the device and completed ops during the burst held UCP's worker lock,
 * and the engine's state, that each of the poster's ops needs */
static int span_vmm_copy_burst_ended(const span_vmm_copy_t *copy)
{
    return (copy->burst_gap == 0) ||
           pthread_equal(pthread_self(), copy->poster) ||
           (span_vmm_copy_now() - copy->posted_at >= copy->burst_gap);
}

/* Completes the ops and flushes whose copies ran, and queues the ops
 * gathered once the device has room */
static unsigned span_vmm_copy_reap(span_vmm_copy_t *copy)
{
    span_vmm_copy_desc_t *desc;
    span_vmm_copy_flush_t *flush;
    ucs_status_t status;
    unsigned count = 0;

    ++copy->stats.progress;
    while (!ucs_list_is_empty(&copy->active)) {
        desc   = ucs_list_head(&copy->active, span_vmm_copy_desc_t, list);
        status = desc->signaled ?
                 copy->ops->query(copy->vendor, &desc->signal) : UCS_OK;
        if (status == UCS_INPROGRESS) {
            break;
        }
        if (status != UCS_OK) {
            ucs_error("span %s copy: the copies of %u ops up to op %" PRIu64
                      " on device %d failed", copy->ops->name, desc->num_ops,
                      desc->seq, desc->device);
        }
        ucs_list_del(&desc->list);
        --copy->in_flight;
        copy->done = desc->seq;
        /* a callback may post: the descriptor goes back to its pool only
         * once every op of it completed, or a new op would take it */
        span_vmm_copy_complete(desc, status);
        count += desc->num_ops;
        ucs_list_add_tail(&copy->pool[desc->batch][desc->device],
                          &desc->list);
    }
    /* the ops gathered while the device was busy go once it has room */
    if ((copy->pending != NULL) && (copy->in_flight < SPAN_VMM_COPY_DEPTH)) {
        span_vmm_copy_submit(copy);
    }
    while (!ucs_list_is_empty(&copy->flushes)) {
        flush = ucs_list_head(&copy->flushes, span_vmm_copy_flush_t, list);
        if (flush->seq > copy->done) {
            break;
        }
        ucs_list_del(&flush->list);
        span_completion_invoke(flush->comp, UCS_OK);
        free(flush);
    }
    return count;
}

unsigned span_vmm_copy_progress(span_vmm_copy_t *copy)
{
    if (!span_vmm_copy_busy(copy)) {
        return 0; /* every op completed, so every flush: nothing to ask */
    }
    if (!span_vmm_copy_burst_ended(copy)) {
        return 0; /* its end, or its poster, completes what ran */
    }
    return span_vmm_copy_reap(copy);
}

int span_vmm_copy_busy(const span_vmm_copy_t *copy)
{
    return copy->posted != copy->done;
}

/* Queues what was gathered and waits until every queued copy ran */
static void span_vmm_copy_wait_all(span_vmm_copy_t *copy)
{
    span_vmm_copy_desc_t *desc;

    if (copy->pending != NULL) {
        span_vmm_copy_submit(copy);
    }
    ucs_list_for_each(desc, &copy->active, list) {
        if (desc->signaled) {
            copy->ops->wait(copy->vendor, &desc->signal);
        }
    }
}

/* Waits for the device to finish every queued copy and completes the ops */
static void span_vmm_copy_drain(span_vmm_copy_t *copy)
{
    span_vmm_copy_wait_all(copy);
    span_vmm_copy_reap(copy);
}

ucs_status_t span_vmm_copy_flush(span_vmm_copy_t *copy,
                                 uct_completion_t *comp)
{
    span_vmm_copy_flush_t *flush;

    if (!span_vmm_copy_busy(copy)) {
        return UCS_OK;
    }
    if (copy->pending != NULL) {
        span_vmm_copy_submit(copy); /* a flush waits for nothing unqueued */
    }
    if (comp == NULL) {
        return UCS_INPROGRESS;
    }
    flush = malloc(sizeof(*flush));
    if (flush == NULL) {
        /* a flush cannot fail half-way through: wait here instead */
        ucs_warn("span %s copy: no memory to track a flush; waiting for "
                 "%" PRIu64 " ops", copy->ops->name,
                 copy->posted - copy->done);
        span_vmm_copy_drain(copy);
        return UCS_OK;
    }
    flush->seq  = copy->posted;
    flush->comp = comp;
    ucs_list_add_tail(&copy->flushes, &flush->list);
    return UCS_INPROGRESS;
}

void span_vmm_copy_fence(span_vmm_copy_t *copy)
{
    if (span_vmm_copy_busy(copy)) {
        span_vmm_copy_wait_all(copy);
    }
}

static void span_vmm_copy_log_stats(const span_vmm_copy_t *copy)
{
    if (copy->posted == 0) {
        return;
    }
    ucs_info("span %s copy %p: %" PRIu64 " ops: %" PRIu64 " alone, %"
             PRIu64 " in %" PRIu64 " batches (%.1f per batch); %" PRIu64
             " progress calls with ops queued, %.1f ms queueing batches",
             copy->ops->name, copy, copy->posted, copy->stats.alone,
             copy->stats.batched, copy->stats.batches,
             copy->stats.batches ? (double)copy->stats.batched /
                                   copy->stats.batches : 0.0,
             copy->stats.progress,
             copy->stats.in_submit / 1e6);
}

void span_vmm_copy_destroy(span_vmm_copy_t *copy)
{
    ucs_list_link_t *pool = &copy->pool[0][0];
    span_vmm_copy_desc_t *desc;

    span_vmm_copy_drain(copy);
    span_vmm_copy_log_stats(copy);
    for (; pool < &copy->pool[0][0] + (2 * SPAN_VMM_COPY_MAX_DEVICES);
         ++pool) {
        while (!ucs_list_is_empty(pool)) {
            desc = ucs_list_extract_head(pool, span_vmm_copy_desc_t, list);
            copy->ops->signal_destroy(copy->vendor, &desc->signal);
            free(desc);
        }
    }
    copy->ops->cleanup(copy->vendor);
    free(copy);
}
