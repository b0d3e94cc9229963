/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The twin's data ops: the ops that carry an rkey or a local memh, with the
 * ep's flush, fence and destroy, which first issue what span deferred.
 */
#ifndef SPAN_EP_H_
#define SPAN_EP_H_

#include "span_iface_table.h"

/* Whether split ops of ep (any ep where NULL) still wait for resources
 * after an attempt to issue them now: a flush may not count on the worker's
 * progress to do it (UCP retries without progress) */
int span_ep_deferred(span_iface_t *siface, uct_ep_h ep);

/* UCS_OK where the iface has no VMM copy queued; else UCS_INPROGRESS, and
 * comp (where not NULL) completes once every copy queued before did */
ucs_status_t span_ep_copy_flush(span_iface_t *siface, uct_completion_t *comp);

/* For a fence: returns once the device ran every VMM copy the iface
 * queued, so that nothing posted later overtakes them */
void span_ep_copy_fence(span_iface_t *siface);

/* Replaces, in ops (an inner iface's), the ep ops that the inner transport
 * has by the twin's */
void span_ep_patch(uct_iface_ops_t *ops);

#endif
