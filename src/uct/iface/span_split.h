/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Op splitter: a zcopy put or get whose remote range crosses a chunk or
 * unit end, or whose local iov crosses a local chunk end, becomes one inner
 * op per piece, with one completion to the caller.
 *
 * UCT semantics are kept: UCS_OK when every piece completed at once,
 * UCS_INPROGRESS and the caller's completion (status: the first error of
 * any piece) otherwise, UCS_ERR_NO_RESOURCE only when nothing was issued.
 * When a later piece meets no resource, the op is already under way: the
 * rest is deferred, reissued in order from the worker's progress, and the
 * caller gets UCS_INPROGRESS. A flush of the ep or the iface issues the
 * deferred pieces itself (UCP retries a flush without progressing the worker
 * where the inner pending_add answers busy), and answers
 * UCS_ERR_NO_RESOURCE only while the inner transport still has none;
 * destroying the ep completes them with UCS_ERR_CANCELED. Nothing is lost,
 * completed twice or leaked.
 */
#ifndef SPAN_SPLIT_H_
#define SPAN_SPLIT_H_

#include "key/span_rkey.h"

#include <ucs/datastruct/list.h>

/* Local iovs are translated on the stack; twins advertise no more */
#define SPAN_IOV_MAX 64

/* Whether avail bytes of a local chunk hold an entry of several elements:
 * UCX's transports read count * length bytes and ignore the stride, so the
 * chunk must hold both readings */
static UCS_F_ALWAYS_INLINE int span_iov_whole(const uct_iov_t *iov,
                                              uint64_t avail)
{
    return (iov->length * iov->count <= avail) &&
           ((iov->stride * (iov->count - 1)) + iov->length <= avail);
}

/* Ops of one iface whose remaining pieces wait for resources */
typedef struct span_split_queue {
    ucs_list_link_t    deferred;
    uct_worker_h       worker;
    uct_worker_cb_id_t cb_id;
    unsigned           test_no_resource; /* 1-based piece, 0: none */
} span_split_queue_t;

void span_split_queue_init(span_split_queue_t *queue, uct_worker_h worker,
                           unsigned test_no_resource);

/* Completes every deferred op (of ep, or all where ep is NULL) with
 * UCS_ERR_CANCELED */
void span_split_queue_cancel(span_split_queue_t *queue, uct_ep_h ep);

/* Issues deferred pieces in order until all are or one meets no resource;
 * the number of ops whose pieces are now all issued */
unsigned span_split_queue_issue(span_split_queue_t *queue);

/* Whether ep (or any ep where NULL) has deferred pieces */
int span_split_queue_busy(const span_split_queue_t *queue, uct_ep_h ep);

/* Reports status (a refused access) through comp, from the worker's
 * progress, in order with the deferred ops: UCS_INPROGRESS, or status
 * itself where no memory is left to defer it */
ucs_status_t span_split_refuse(span_split_queue_t *queue, uct_ep_h ep,
                               uct_completion_t *comp, ucs_status_t status);

ucs_status_t span_split_zcopy(span_split_queue_t *queue, uct_ep_h ep,
                              uct_ep_put_zcopy_func_t zcopy, size_t max_iov,
                              const uct_iov_t *iov, size_t iovcnt,
                              uint64_t remote_addr, const span_rkey_t *rkey,
                              uct_completion_t *comp);

#endif
