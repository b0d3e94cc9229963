/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Memory events: span learns from UCM when memory is unmapped (host) or
 * freed (GPU memory types). This layer only delivers them: what a range
 * that goes away means (stale registrations, exports to withdraw) is the
 * MD's, which hands its handlers in (uct/md/span_md_events.h). Subscribed
 * while at least one twin MD is open.
 *
 * The lowest layer of span: it calls UCM and nothing of span's own.
 */
#ifndef SPAN_UCM_H_
#define SPAN_UCM_H_

#include <ucs/type/status.h>
#include <pthread.h>
#include <stdint.h>

typedef struct span_ucm_handlers {
    /* [start, start + length) of host memory was unmapped */
    void (*unmapped)(uint64_t start, uint64_t length);
    /* [start, start + length) of a GPU memory type was freed */
    void (*freed)(uint64_t start, uint64_t length);
} span_ucm_handlers_t;

/* UCS_OK when events will be seen; the first call installs the handlers,
 * which every subscriber passes the same (the process has one set) */
ucs_status_t span_ucm_subscribe(const span_ucm_handlers_t *handlers);

/* After a successful span_ucm_subscribe; the last one removes the handlers */
void span_ucm_unsubscribe(void);

/* The lock that subscribing and unsubscribing take, for the subscriber to
 * take around fork in its order of locks (uct/base/span_fork.h) */
pthread_mutex_t *span_ucm_fork_lock(void);

#endif
