/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Short and bcopy RMA of cma's twin in UCX 1.15 and earlier (span_bounce.h
 * says why). Each access is range checked first: a refused put returns
 * its error, a refused get reports it as the twin's zero-copy get does.
 *
 * Where the ep has nothing queued (cma queues its zero-copy ops on the ep
 * and moves them from the iface's progress, one segment per call), the
 * access is made at once by cma's own copy function (uct_cma_ep_tx, which
 * the module exports: one process_vm_writev or _readv, its errors handled
 * as cma handles its own), so it completes inside the op, as UCX 1.16 and
 * later make every put over cma. Elsewhere it must queue behind the ops
 * before it, in order, as a fence or flush expects: the bytes then go
 * through a buffer of span's, handed to the twin's zero-copy op (checked
 * and split as any), and a put returns with the caller's buffer free,
 * complete once a flush is; a get unpacks from its completion.
 *
 * Buffers are reused from a free list and made only when every one is in
 * flight. Not thread safe: the iface's, which UCT serializes.
 */
#include "span_bounce.h"
#include "span_iface_table.h"
#include "base/span_completion.h"
#include "md/span_md.h"
#include "ucx/span_ucx.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

/* The largest bcopy (a buffer's room), and short op */
#define SPAN_BOUNCE_SIZE      8192
#define SPAN_BOUNCE_MAX_SHORT 256

/* uct_cma_ep_tx of UCX 1.13-1.15: moves up to *length_p bytes of iov from
 * the iterator (ucs_iov_iter_t: entry and offset) to or from remote_addr
 * with one call; *length_p: the bytes moved */
typedef struct span_bounce_iov_iter {
    size_t index;
    size_t offset;
} span_bounce_iov_iter_t;

typedef ucs_status_t (*span_bounce_tx_func_t)(uct_ep_h ep,
                                              const uct_iov_t *iov,
                                              size_t iovcnt,
                                              span_bounce_iov_iter_t *iter,
                                              size_t *length_p,
                                              uint64_t remote_addr,
                                              uct_rkey_t rkey, int op);

/* its uct_scopy_tx_op_t */
enum {
    SPAN_BOUNCE_TX_GET = 0,
    SPAN_BOUNCE_TX_PUT = 1
};

struct span_bounce_pool {
    void               *tx;    /* cma's copy function */
    struct span_bounce *free;  /* buffers ready for an op */
    struct span_bounce *all;   /* every buffer made, freed at the close */
};

typedef struct span_bounce {
    uct_completion_t      comp;      /* the twin's zero-copy op's */
    span_bounce_pool_t    *pool;
    struct span_bounce    *next;     /* in the free list */
    struct span_bounce    *next_all;
    /* a get's: where its bytes go once read, and its caller's completion */
    uct_unpack_callback_t unpack_cb;
    void                  *arg;
    size_t                length;
    uct_completion_t      *user_comp;
    uint8_t               data[SPAN_BOUNCE_SIZE];
} span_bounce_t;

/* cma's copy function, from the module its iface's query is in */
static void *span_bounce_find_tx(const uct_iface_ops_t *ops)
{
    void *handle, *tx = NULL;
    Dl_info info;

    if (dladdr((void*)ops->iface_query, &info) && (info.dli_fname != NULL) &&
        ((handle = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD)) != NULL)) {
        tx = dlsym(handle, "uct_cma_ep_tx");
        dlclose(handle);
    }
    return tx;
}

span_bounce_pool_t *span_bounce_init(int enable, const char *inner_tl,
                                     const uct_iface_attr_t *attr,
                                     const uct_iface_ops_t *ops)
{
    const uint64_t bcopy = UCT_IFACE_FLAG_PUT_SHORT | UCT_IFACE_FLAG_PUT_BCOPY |
                           UCT_IFACE_FLAG_GET_BCOPY;
    const uint64_t zcopy = UCT_IFACE_FLAG_PUT_ZCOPY | UCT_IFACE_FLAG_GET_ZCOPY;
    span_bounce_pool_t *pool;
    void *tx;

    if (!enable || !span_ucx->rma_lane_needs_bcopy ||
        (strcmp(inner_tl, "cma") != 0) ||
        ((attr->cap.flags & zcopy) != zcopy) || (attr->cap.flags & bcopy)) {
        return NULL;
    }
    tx = span_bounce_find_tx(ops);
    if (tx == NULL) {
        ucs_debug("span iface: no uct_cma_ep_tx in the cma module: cma+ "
                  "offers no short and bcopy RMA, and UCP emulates them");
        return NULL;
    }
    pool = calloc(1, sizeof(*pool));
    if (pool == NULL) {
        ucs_warn("span iface: no memory for cma+'s short and bcopy RMA: UCP "
                 "emulates them");
        return NULL;
    }
    pool->tx = tx;
    return pool;
}

void span_bounce_query(uct_iface_attr_t *attr)
{
    attr->cap.flags         |= UCT_IFACE_FLAG_PUT_SHORT |
                               UCT_IFACE_FLAG_PUT_BCOPY |
                               UCT_IFACE_FLAG_GET_BCOPY;
    attr->cap.put.max_short  = SPAN_BOUNCE_MAX_SHORT;
    attr->cap.put.max_bcopy  = SPAN_BOUNCE_SIZE;
    attr->cap.get.max_bcopy  = SPAN_BOUNCE_SIZE;
}

void span_bounce_destroy(span_bounce_pool_t *pool)
{
    span_bounce_t *bounce;

    while ((bounce = pool->all) != NULL) {
        pool->all = bounce->next_all;
        free(bounce);
    }
    free(pool);
}

/* Whether an access of ep may be made at once: nothing of ep is queued,
 * by cma or in span's queue of split ops */
static int span_bounce_ep_idle(span_iface_t *siface, uct_ep_h ep)
{
    return !span_split_queue_busy(&siface->queue, ep) &&
           (siface->ops.ep_flush(ep, 0, NULL) == UCS_OK);
}

/* Whether the access lies in the range registered (logged if not); an op
 * with no key passes, as the twin's zero-copy ops pass it to cma */
static int span_bounce_check(uint64_t remote_addr, size_t length,
                             uct_rkey_t rkey)
{
    return span_rkey_is_none(rkey) ||
           span_rkey_check((const span_rkey_t*)rkey, remote_addr, length);
}

/* The access, at once: one call of cma's copy function per part it moves */
static ucs_status_t span_bounce_tx(span_iface_t *siface, uct_ep_h ep,
                                   int op, void *buffer, size_t length,
                                   uint64_t remote_addr, uct_rkey_t rkey)
{
    span_bounce_tx_func_t tx = (span_bounce_tx_func_t)siface->bounce->tx;
    span_bounce_iov_iter_t iter;
    size_t done, moved;
    ucs_status_t status;
    uct_iov_t iov;

    for (done = 0; done < length; done += moved) {
        iov.buffer = UCS_PTR_BYTE_OFFSET(buffer, done);
        iov.length = moved = length - done;
        iov.memh   = UCT_MEM_HANDLE_NULL;
        iov.stride = 0;
        iov.count  = 1;
        iter.index = iter.offset = 0;
        status     = tx(ep, &iov, 1, &iter, &moved, remote_addr + done, rkey,
                        op);
        if (status != UCS_OK) {
            return status;
        }
        if (moved == 0) {
            ucs_error("span ep %p: cma moved none of %zu bytes at 0x%" PRIx64,
                      ep, length - done, remote_addr + done);
            return UCS_ERR_IO_ERROR;
        }
    }
    return UCS_OK;
}

static span_bounce_t *span_bounce_get(span_iface_t *siface, uct_ep_h ep)
{
    span_bounce_pool_t *pool = siface->bounce;
    span_bounce_t *bounce    = pool->free;

    if (ucs_likely(bounce != NULL)) {
        pool->free = bounce->next;
        return bounce;
    }

    bounce = malloc(sizeof(*bounce));
    if (bounce == NULL) {
        ucs_error("span ep %p: no memory for a bounce buffer (%zu bytes)", ep,
                  sizeof(*bounce));
        return NULL;
    }
    bounce->pool     = pool;
    bounce->next_all = pool->all;
    pool->all        = bounce;
    return bounce;
}

static void span_bounce_put(span_bounce_t *bounce)
{
    bounce->next       = bounce->pool->free;
    bounce->pool->free = bounce;
}

/* A put's bytes left the buffer (an error was reported to the ep by cma,
 * as for its own zero-copy puts) */
static void span_bounce_put_done(uct_completion_t *comp)
{
    span_bounce_put(ucs_container_of(comp, span_bounce_t, comp));
}

static void span_bounce_get_done(uct_completion_t *comp)
{
    span_bounce_t *bounce = ucs_container_of(comp, span_bounce_t, comp);

    if (comp->status == UCS_OK) {
        bounce->unpack_cb(bounce->arg, bounce->data, bounce->length);
    }
    if (bounce->user_comp != NULL) {
        span_completion_invoke(bounce->user_comp, comp->status);
    }
    span_bounce_put(bounce);
}

static ucs_status_t span_bounce_zcopy(uct_ep_h ep, int is_put,
                                      span_bounce_t *bounce, size_t length,
                                      uint64_t remote_addr, uct_rkey_t rkey)
{
    uct_iov_t iov = {bounce->data, length, UCT_MEM_HANDLE_NULL, 0, 1};

    bounce->comp.func   = is_put ? span_bounce_put_done : span_bounce_get_done;
    bounce->comp.count  = 1;
    bounce->comp.status = UCS_OK;
    return is_put ? uct_ep_put_zcopy(ep, &iov, 1, remote_addr, rkey,
                                     &bounce->comp) :
                    uct_ep_get_zcopy(ep, &iov, 1, remote_addr, rkey,
                                     &bounce->comp);
}

/* A put behind the ops queued on its ep, its bytes in bounce: posted (the
 * bytes are span's now) or done */
static ucs_status_t span_bounce_put_queue(uct_ep_h ep, span_bounce_t *bounce,
                                          size_t length, uint64_t remote_addr,
                                          uct_rkey_t rkey)
{
    ucs_status_t status = span_bounce_zcopy(ep, 1, bounce, length,
                                            remote_addr, rkey);

    if (status == UCS_INPROGRESS) {
        return UCS_OK;
    }
    span_bounce_put(bounce);
    return status;
}

static ucs_status_t span_bounce_put_short(uct_ep_h ep, const void *buffer,
                                          unsigned length,
                                          uint64_t remote_addr,
                                          uct_rkey_t rkey)
{
    span_iface_t *siface = span_iface_get(ep->iface);
    span_bounce_t *bounce;

    if (ucs_unlikely(!span_bounce_check(remote_addr, length, rkey))) {
        return UCS_ERR_INVALID_ADDR;
    }
    if (ucs_likely(span_bounce_ep_idle(siface, ep))) {
        return span_bounce_tx(siface, ep, SPAN_BOUNCE_TX_PUT, (void*)buffer,
                              length, remote_addr, rkey);
    }
    bounce = span_bounce_get(siface, ep);
    if (ucs_unlikely(bounce == NULL)) {
        return UCS_ERR_NO_MEMORY;
    }
    memcpy(bounce->data, buffer, length);
    return span_bounce_put_queue(ep, bounce, length, remote_addr, rkey);
}

static ssize_t span_bounce_put_bcopy(uct_ep_h ep, uct_pack_callback_t pack_cb,
                                     void *arg, uint64_t remote_addr,
                                     uct_rkey_t rkey)
{
    span_iface_t *siface = span_iface_get(ep->iface);
    uint8_t data[SPAN_BOUNCE_SIZE];
    span_bounce_t *bounce;
    ucs_status_t status;
    size_t length;

    if (span_bounce_ep_idle(siface, ep)) {
        length = pack_cb(data, arg);
        status = span_bounce_check(remote_addr, length, rkey) ?
                 span_bounce_tx(siface, ep, SPAN_BOUNCE_TX_PUT, data, length,
                                remote_addr, rkey) :
                 UCS_ERR_INVALID_ADDR;
        return (status == UCS_OK) ? (ssize_t)length : status;
    }

    bounce = span_bounce_get(siface, ep);
    if (ucs_unlikely(bounce == NULL)) {
        return UCS_ERR_NO_MEMORY;
    }
    length = pack_cb(bounce->data, arg);
    if (ucs_unlikely(!span_bounce_check(remote_addr, length, rkey))) {
        span_bounce_put(bounce);
        return UCS_ERR_INVALID_ADDR;
    }
    status = span_bounce_put_queue(ep, bounce, length, remote_addr, rkey);
    return (status == UCS_OK) ? (ssize_t)length : status;
}

/* A get behind the ops queued on its ep: read into a buffer, unpacked at
 * its completion */
static ucs_status_t span_bounce_get_queue(span_iface_t *siface, uct_ep_h ep,
                                          uct_unpack_callback_t unpack_cb,
                                          void *arg, size_t length,
                                          uint64_t remote_addr,
                                          uct_rkey_t rkey,
                                          uct_completion_t *comp)
{
    span_bounce_t *bounce = span_bounce_get(siface, ep);
    ucs_status_t status;

    if (ucs_unlikely(bounce == NULL)) {
        return UCS_ERR_NO_MEMORY;
    }
    bounce->unpack_cb = unpack_cb;
    bounce->arg       = arg;
    bounce->length    = length;
    bounce->user_comp = comp;
    status = span_bounce_zcopy(ep, 0, bounce, length, remote_addr, rkey);
    if (status == UCS_OK) { /* nothing to read: done at once */
        unpack_cb(arg, bounce->data, length);
    }
    if (status != UCS_INPROGRESS) {
        span_bounce_put(bounce);
    }
    return status;
}

static ucs_status_t span_bounce_get_bcopy(uct_ep_h ep,
                                          uct_unpack_callback_t unpack_cb,
                                          void *arg, size_t length,
                                          uint64_t remote_addr,
                                          uct_rkey_t rkey,
                                          uct_completion_t *comp)
{
    span_iface_t *siface = span_iface_get(ep->iface);
    uint8_t data[SPAN_BOUNCE_SIZE];
    ucs_status_t status;

    if (ucs_unlikely(length > SPAN_BOUNCE_SIZE)) {
        ucs_error("span ep %p: a bcopy get of %zu bytes, more than its "
                  "maximum of %d", ep, length, SPAN_BOUNCE_SIZE);
        return UCS_ERR_INVALID_PARAM;
    }
    if (ucs_unlikely(!span_bounce_check(remote_addr, length, rkey))) {
        /* as the twin's other gets: in their completion where UCP fails a
         * request only that way */
        return (span_ucx->refuse_in_completion && (comp != NULL)) ?
               span_split_refuse(&siface->queue, ep, comp,
                                 UCS_ERR_INVALID_ADDR) :
               UCS_ERR_INVALID_ADDR;
    }
    if (!span_bounce_ep_idle(siface, ep)) {
        return span_bounce_get_queue(siface, ep, unpack_cb, arg, length,
                                     remote_addr, rkey, comp);
    }
    status = span_bounce_tx(siface, ep, SPAN_BOUNCE_TX_GET, data, length,
                            remote_addr, rkey);
    if (status == UCS_OK) {
        unpack_cb(arg, data, length);
    }
    return status;
}

void span_bounce_patch(uct_iface_ops_t *ops)
{
    ops->ep_put_short = span_bounce_put_short;
    ops->ep_put_bcopy = span_bounce_put_bcopy;
    ops->ep_get_bcopy = span_bounce_get_bcopy;
}
