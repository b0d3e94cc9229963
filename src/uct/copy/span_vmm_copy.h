/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Asynchronous device copies through the VMM units span maps itself
 * (span_vmm.h), one engine per twin iface, as cuda_ipc and rocm_ipc do
 * their own: an op's copies are queued by the device of the local buffer
 * (or, for host memory, of the mapping), one signal of the vendor (a CUDA
 * event, an HSA signal) marks their end, the op returns UCS_INPROGRESS and
 * the iface's progress completes it. A flush completes behind the last op.
 * Where the vendor batches (span_vmm_copy_ops_t.batch), an op posted
 * while none of the engine's copies are queued goes at once, alone; the
 * ops posted while copies are queued are gathered, and queued together,
 * behind one signal, at a progress that finds none of the engine's copies
 * queued (where another thread progresses, once the posting thread paused
 * for the burst gap), at a flush, or once a batch is full of ops or of bytes (then
 * while the rest is still being posted): many small copies then cost
 * one launch, not one each, even where progress runs between the posts.
 * The ops of such a burst whose local buffers lie in the allocation of an
 * op still queued skip the runtime's question of their device.
 * Nothing here waits for the application's work, and progress never
 * blocks. The vendor's calls are a table (span_vmm_copy_ops.h), one per
 * runtime span was built with.
 *
 * Not thread safe: the engine belongs to one iface, which UCT serializes.
 */
#ifndef SPAN_VMM_COPY_H_
#define SPAN_VMM_COPY_H_

#include "span_vmm_copy_ops.h"

#include <uct/api/uct.h>

typedef struct span_vmm_copy span_vmm_copy_t;

/* An engine of ops (the vendor's; NULL: UCS_ERR_UNSUPPORTED) that batches
 * as params says, with no signal yet: they are made per device on first
 * use */
ucs_status_t span_vmm_copy_create(const span_vmm_copy_ops_t *ops,
                                  const span_vmm_copy_params_t *params,
                                  span_vmm_copy_t **copy_p);

/* Waits for the copies still queued (the device finishes them), completes
 * their ops and pending flushes, and frees the vendor's resources */
void span_vmm_copy_destroy(span_vmm_copy_t *copy);

/* Queues the copies of every iov element to or from remote, an address in
 * map (contiguous, element after element); UCS_INPROGRESS, comp (may be
 * NULL) completed from span_vmm_copy_progress. UCS_OK where nothing moves;
 * an error where nothing was queued (UCS_ERR_UNSUPPORTED: a legacy IPC
 * handle's map that this device or a revoked map cannot serve, which the
 * caller hands to the inner transport). Where a copy is refused (logged) after
 * others were queued, the op still owns its buffers until they ran: comp
 * completes then with the error, or without comp the post waits for them
 * and returns it */
ucs_status_t span_vmm_copy_post(span_vmm_copy_t *copy, span_vmm_map_t *map,
                                int is_put, const uct_iov_t *iov,
                                size_t iovcnt, uint8_t *remote,
                                uct_completion_t *comp);

/* Completes the ops whose copies ran, in order, then queues the batch
 * being filled where the device has room; the count of ops completed.
 * While another thread posts a burst (until it pauses for the burst gap)
 * it does nothing: that thread's progress, or the first after the pause,
 * does it, and the poster's ops meet no other thread in the engine */
unsigned span_vmm_copy_progress(span_vmm_copy_t *copy);

/* For a fence: queues what was gathered and waits until the device ran
 * every copy queued (their ops complete at the next progress), so that no
 * op posted after it, through this engine on any device or through the
 * inner transport, overtakes them. A kernel's pieces run in any order:
 * without a fence, ops of one burst to overlapping bytes land in no
 * order, byte by byte (docs/device-memory.md) */
void span_vmm_copy_fence(span_vmm_copy_t *copy);

/* Whether copies are queued */
int span_vmm_copy_busy(const span_vmm_copy_t *copy);

/* UCS_OK where no copy is queued; else UCS_INPROGRESS, and comp (where not
 * NULL) is completed once every op queued before this call completed */
ucs_status_t span_vmm_copy_flush(span_vmm_copy_t *copy,
                                 uct_completion_t *comp);

#endif
