/*
 * Asynchronous copies through the ROCm VMM units span maps itself
 * (span_rocm_vmm.h), one engine per twin iface, as rocm_ipc does its own:
 * each op's copies are queued with hsa_amd_memory_async_copy, one
 * completion signal per op counting them down, the op returns
 * UCS_INPROGRESS and the iface's progress completes it once the signal
 * reads 0. A flush completes behind the last op. The interface is
 * span_cuda_copy.h's.
 *
 * Not thread safe: the engine belongs to one iface, which UCT serializes.
 */
#ifndef SPAN_ROCM_COPY_H_
#define SPAN_ROCM_COPY_H_

#include "span_vmm.h"

#include <uct/api/uct.h>

typedef struct span_rocm_copy span_rocm_copy_t;

ucs_status_t span_rocm_copy_create(span_rocm_copy_t **copy_p);

/* Waits for the copies still queued, completes their ops and pending
 * flushes, and frees the signals */
void span_rocm_copy_destroy(span_rocm_copy_t *copy);

/* Queues the copies of every iov element to or from remote, an address in
 * map (contiguous, element after element), by the device of the local
 * buffer; UCS_INPROGRESS, comp (may be NULL) completed from
 * span_rocm_copy_progress. UCS_OK where nothing moves; an error where
 * nothing was queued. Where a copy is refused (logged) after others were
 * queued, the op still owns its buffers until they ran: comp completes
 * then with the error, or without comp the post waits for them and returns
 * it */
ucs_status_t span_rocm_copy_post(span_rocm_copy_t *copy,
                                 span_vmm_map_t *map, int is_put,
                                 const uct_iov_t *iov, size_t iovcnt,
                                 uint8_t *remote, uct_completion_t *comp);

/* Completes the ops whose copies are done, in order; their count */
unsigned span_rocm_copy_progress(span_rocm_copy_t *copy);

int span_rocm_copy_busy(const span_rocm_copy_t *copy);

/* UCS_OK where no copy is queued; else UCS_INPROGRESS, and comp (where not
 * NULL) is completed once every op queued before this call completed */
ucs_status_t span_rocm_copy_flush(span_rocm_copy_t *copy,
                                  uct_completion_t *comp);

#endif
