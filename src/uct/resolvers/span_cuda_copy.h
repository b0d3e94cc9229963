/*
 * Asynchronous device copies through the VMM units span maps itself
 * (span_cuda_vmm.h), one engine per twin iface, as cuda_ipc does its own:
 * a copy is queued on a non-blocking stream of the device that holds the
 * local buffer, an event from a pool marks its end, the op returns
 * UCS_INPROGRESS and the iface's progress completes it. A flush completes
 * behind the last event. Nothing here waits for the application's work on
 * the legacy stream, and progress never blocks.
 *
 * Not thread safe: the engine belongs to one iface, which UCT serializes.
 */
#ifndef SPAN_CUDA_COPY_H_
#define SPAN_CUDA_COPY_H_

#include "span_vmm.h"

#include <uct/api/uct.h>

typedef struct span_cuda_copy span_cuda_copy_t;

/* An engine of no stream yet: streams are made per device on first use */
ucs_status_t span_cuda_copy_create(span_cuda_copy_t **copy_p);

/* Waits for the copies still queued (the device finishes them), completes
 * their ops and pending flushes, and frees the streams and events */
void span_cuda_copy_destroy(span_cuda_copy_t *copy);

/* Queues the copies of every iov element to or from remote, an address in
 * map (contiguous, element after element); UCS_INPROGRESS, comp (may be
 * NULL) completed from span_cuda_copy_progress. UCS_OK where nothing moves;
 * an error where nothing was queued. Where a copy is refused (logged) after
 * others were queued, the op still owns its buffers until they ran: comp
 * completes then with the error, or without comp the post waits for them
 * and returns it */
ucs_status_t span_cuda_copy_post(span_cuda_copy_t *copy,
                                 span_vmm_map_t *map, int is_put,
                                 const uct_iov_t *iov, size_t iovcnt,
                                 uint8_t *remote, uct_completion_t *comp);

/* Completes the copies whose events have passed, in order; their count */
unsigned span_cuda_copy_progress(span_cuda_copy_t *copy);

/* Whether copies are queued */
int span_cuda_copy_busy(const span_cuda_copy_t *copy);

/* UCS_OK where no copy is queued; else UCS_INPROGRESS, and comp (where not
 * NULL) is completed once every copy queued before this call completed */
ucs_status_t span_cuda_copy_flush(span_cuda_copy_t *copy,
                                  uct_completion_t *comp);

#endif
