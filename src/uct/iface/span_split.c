/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Op splitter.
 */
#include "span_split.h"
#include "base/span_completion.h"
#include "md/span_md.h"

#include <stdlib.h>
#include <string.h>

typedef struct span_split {
    uct_completion_t        super;  /* inner ops in flight, +1 while issuing */
    uct_completion_t        *comp;  /* the caller's, or NULL */
    ucs_list_link_t         list;   /* in the queue while deferred */
    uct_ep_h                ep;
    uct_ep_put_zcopy_func_t zcopy;
    const span_rkey_t       *rkey;
    uint64_t                remote_addr; /* of the next piece */
    size_t                  remaining;
    size_t                  iov_index;   /* cursor in iov */
    size_t                  iov_offset;
    size_t                  iovcnt;
    size_t                  max_iov;
    unsigned                pieces;      /* issued so far */
    int                     test_fired;
    uct_iov_t               iov[SPAN_IOV_MAX]; /* the caller's */
} span_split_t;

/* The last inner op of an op that returned UCS_INPROGRESS completed */
static void span_split_done(uct_completion_t *self)
{
    span_split_t *split = ucs_container_of(self, span_split_t, super);

    if (split->comp != NULL) {
        span_completion_invoke(split->comp, self->status);
    }
    free(split);
}

/* A strided entry is moved whole or not at all: it may not cross a local
 * chunk end nor the end of the piece */
static ucs_status_t span_split_strided(const span_split_t *split,
                                       const uct_iov_t *src, size_t room,
                                       uct_iov_t *dst)
{
    uint64_t avail;

    *dst      = *src;
    dst->memh = span_memh_inner(src->memh, src->buffer, &avail);
    if ((split->iov_offset == 0) && (src->length * src->count <= room) &&
        span_iov_whole(src, avail)) {
        return UCS_OK;
    }
    ucs_error("span split: iov entry %p of %zu x %zu bytes (stride %zu) crosses "
              "a chunk or unit end and cannot be split", src->buffer,
              (size_t)src->count, src->length, src->stride);
    return UCS_ERR_UNSUPPORTED;
}

/* The next piece: up to max bytes of the caller's iov from the cursor, in at
 * most max_iov entries, none crossing a local chunk end */
static ucs_status_t span_split_piece(const span_split_t *split, size_t max,
                                     uct_iov_t *iov, size_t *iovcnt_p,
                                     size_t *bytes_p, size_t *index_p,
                                     size_t *offset_p)
{
    size_t index = split->iov_index, offset = split->iov_offset;
    size_t n = 0, bytes = 0, take;
    const uct_iov_t *src;
    ucs_status_t status;
    uint64_t avail;
    void *ptr;

    while ((bytes < max) && (n < split->max_iov) && (index < split->iovcnt)) {
        src = &split->iov[index];
        if (src->count > 1) {
            status = span_split_strided(split, src, max - bytes, &iov[n]);
            if (status != UCS_OK) {
                if (n > 0) {
                    break; /* the entry starts the next piece */
                }
                return status;
            }
            bytes += src->length * src->count;
            ++n;
            ++index;
            continue;
        }

        ptr  = UCS_PTR_BYTE_OFFSET(src->buffer, offset);
        take = ucs_min(src->length * src->count - offset, max - bytes);
        iov[n].buffer = ptr;
        iov[n].memh   = span_memh_inner(src->memh, ptr, &avail);
        iov[n].length = take = ucs_min(take, avail);
        iov[n].stride = 0;
        iov[n].count  = 1;
        if (ucs_unlikely((take == 0) &&
                         (offset < src->length * src->count))) {
            ucs_error("span split: local buffer %p (iov entry %zu) lies outside "
                      "its memory handle %p", ptr, index, src->memh);
            return UCS_ERR_INVALID_PARAM;
        }
        n      += (take > 0);
        bytes  += take;
        offset += take;
        if (offset == src->length * src->count) {
            ++index;
            offset = 0;
        }
    }

    if (bytes == 0) {
        ucs_error("span split: split op of %zu more bytes found no piece in its "
                  "iov", split->remaining);
        return UCS_ERR_INVALID_PARAM;
    }
    *iovcnt_p = n;
    *bytes_p  = bytes;
    *index_p  = index;
    *offset_p = offset;
    return UCS_OK;
}

/* Issues pieces until all are, one fails, or one meets no resource (then
 * the cursor stays on it) */
static ucs_status_t span_split_issue(span_split_t *split, unsigned test_piece)
{
    uct_iov_t iov[SPAN_IOV_MAX];
    size_t iovcnt, bytes, index, offset;
    ucs_status_t status;
    uct_rkey_t inner;
    uint64_t avail;

    while (split->remaining > 0) {
        inner  = span_rkey_inner(split->rkey, split->remote_addr, &avail);
        status = span_split_piece(split, ucs_min(avail, split->remaining),
                                  iov, &iovcnt, &bytes, &index, &offset);
        if (status != UCS_OK) {
            return status;
        }

        if ((split->pieces + 1 == test_piece) && !split->test_fired) {
            split->test_fired = 1;
            return UCS_ERR_NO_RESOURCE;
        }

        ++split->super.count;
        status = split->zcopy(split->ep, iov, iovcnt, split->remote_addr,
                              inner, &split->super);
        if (status != UCS_INPROGRESS) {
            --split->super.count;
            if (status == UCS_ERR_NO_RESOURCE) {
                return status;
            } else if (status != UCS_OK) {
                ucs_error("span split: piece %u [0x%" PRIx64 ", +%zu) of a split "
                          "op failed: %s", split->pieces + 1,
                          split->remote_addr, bytes,
                          ucs_status_string(status));
                return status;
            }
        }

        ++split->pieces;
        split->iov_index    = index;
        split->iov_offset   = offset;
        split->remote_addr += bytes;
        split->remaining   -= bytes;
    }
    return UCS_OK;
}

/* Drops the issuing guard of an op whose caller got UCS_INPROGRESS */
static void span_split_release(span_split_t *split, ucs_status_t status)
{
    span_completion_invoke(&split->super, status);
}

unsigned span_split_queue_issue(span_split_queue_t *queue)
{
    span_split_t *split;
    ucs_status_t status;
    unsigned count = 0;

    while (!ucs_list_is_empty(&queue->deferred)) {
        split  = ucs_list_head(&queue->deferred, span_split_t, list);
        status = span_split_issue(split, queue->test_no_resource);
        if (status == UCS_ERR_NO_RESOURCE) {
            return count; /* in order: the next ones wait too */
        }
        ucs_list_del(&split->list);
        span_split_release(split, status);
        ++count;
    }
    uct_worker_progress_unregister_safe(queue->worker, &queue->cb_id);
    return count;
}

static unsigned span_split_progress(void *arg)
{
    return span_split_queue_issue(arg);
}

static void span_split_enqueue(span_split_queue_t *queue, span_split_t *split)
{
    ucs_list_add_tail(&queue->deferred, &split->list);
    uct_worker_progress_register_safe(queue->worker, span_split_progress,
                                      queue, 0, &queue->cb_id);
}

static void span_split_defer(span_split_queue_t *queue, span_split_t *split)
{
    ucs_debug("span split: split op %p defers its pieces from %u on [0x%" PRIx64
              ", +%zu): no resource", split, split->pieces + 1,
              split->remote_addr, split->remaining);
    span_split_enqueue(queue, split);
}

/* An op of ep that completes comp with status (its first error), holding
 * the issuing guard; nothing to issue yet */
static span_split_t *span_split_new(uct_ep_h ep, uct_completion_t *comp,
                                    ucs_status_t status)
{
    span_split_t *split = calloc(1, sizeof(*split));

    if (split != NULL) {
        split->super.func   = span_split_done;
        split->super.count  = 1;
        split->super.status = status;
        split->comp         = comp;
        split->ep           = ep;
    }
    return split;
}

ucs_status_t span_split_refuse(span_split_queue_t *queue, uct_ep_h ep,
                               uct_completion_t *comp, ucs_status_t status)
{
    span_split_t *split = span_split_new(ep, comp, status);

    if (split == NULL) {
        return status;
    }
    /* nothing left to issue: its first progress completes it with status */
    span_split_enqueue(queue, split);
    return UCS_INPROGRESS;
}

void span_split_queue_init(span_split_queue_t *queue, uct_worker_h worker,
                           unsigned test_no_resource)
{
    ucs_list_head_init(&queue->deferred);
    queue->worker           = worker;
    queue->cb_id            = UCS_CALLBACKQ_ID_NULL;
    queue->test_no_resource = test_no_resource;
}

void span_split_queue_cancel(span_split_queue_t *queue, uct_ep_h ep)
{
    span_split_t *split, *tmp;

    ucs_list_for_each_safe(split, tmp, &queue->deferred, list) {
        if ((ep == NULL) || (split->ep == ep)) {
            ucs_list_del(&split->list);
            span_split_release(split, UCS_ERR_CANCELED);
        }
    }
    if (ucs_list_is_empty(&queue->deferred)) {
        uct_worker_progress_unregister_safe(queue->worker, &queue->cb_id);
    }
}

int span_split_queue_busy(const span_split_queue_t *queue, uct_ep_h ep)
{
    span_split_t *split;

    ucs_list_for_each(split, &queue->deferred, list) {
        if ((ep == NULL) || (split->ep == ep)) {
            return 1;
        }
    }
    return 0;
}

ucs_status_t span_split_zcopy(span_split_queue_t *queue, uct_ep_h ep,
                              uct_ep_put_zcopy_func_t zcopy, size_t max_iov,
                              const uct_iov_t *iov, size_t iovcnt,
                              uint64_t remote_addr, const span_rkey_t *rkey,
                              uct_completion_t *comp)
{
    span_split_t *split;
    ucs_status_t status;
    size_t i;

    if (iovcnt > SPAN_IOV_MAX) {
        ucs_error("span split: %zu iov entries, at most %d are supported", iovcnt,
                  SPAN_IOV_MAX);
        return UCS_ERR_INVALID_PARAM;
    }

    split = span_split_new(ep, comp, UCS_OK);
    if (split == NULL) {
        ucs_error("span split: no memory to split an op at 0x%" PRIx64, remote_addr);
        return UCS_ERR_NO_MEMORY;
    }

    split->zcopy        = zcopy;
    split->rkey         = rkey;
    split->remote_addr  = remote_addr;
    split->iovcnt       = iovcnt;
    split->max_iov      = ucs_max(max_iov, 1);
    memcpy(split->iov, iov, iovcnt * sizeof(*iov));
    for (i = 0; i < iovcnt; ++i) {
        split->remaining += iov[i].length * iov[i].count;
    }

    status = span_split_issue(split, queue->test_no_resource);
    if (status == UCS_ERR_NO_RESOURCE) {
        if (split->pieces == 0) {
            free(split); /* nothing issued: the caller retries */
            return status;
        }
        span_split_defer(queue, split);
        return UCS_INPROGRESS;
    }

    uct_completion_update_status(&split->super, status);
    if (--split->super.count > 0) {
        return UCS_INPROGRESS; /* the last inner completion calls the caller's */
    }
    status = split->super.status;
    free(split);
    return status;
}
