/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * One fork handler for every lock of span (span_fork.h).
 *
 * pthread_atfork runs the prepare handlers of separate registrations in the
 * reverse order of registration, which follows the order in which modules
 * were loaded or first used: handlers of one registration, run in one fixed
 * order, cannot deadlock against each other. prepare remembers what it
 * ran, so that a module registered between prepare and parent is not
 * released without having been taken.
 */
#include "span_fork.h"

#include <ucs/debug/log_def.h>
#include <string.h>

static const span_fork_handlers_t *span_fork_handlers[SPAN_FORK_LAST];
/* What prepare ran. Another thread's fork waits in prepare for the first
 * lock and may overwrite a rank only once the forking thread released it:
 * atomic for the ranks without a lock. */
static const span_fork_handlers_t *span_fork_taken[SPAN_FORK_LAST];
static pthread_once_t span_fork_once = PTHREAD_ONCE_INIT;

static void span_fork_prepare(void)
{
    const span_fork_handlers_t *handlers;
    int rank;

    for (rank = 0; rank < SPAN_FORK_LAST; ++rank) {
        handlers = __atomic_load_n(&span_fork_handlers[rank],
                                   __ATOMIC_ACQUIRE);
        if (handlers != NULL) {
            if (handlers->lock != NULL) {
                pthread_mutex_lock(handlers->lock);
            }
            if (handlers->prepare != NULL) {
                handlers->prepare();
            }
        }
        __atomic_store_n(&span_fork_taken[rank], handlers, __ATOMIC_RELAXED);
    }
}

static void span_fork_release(int child)
{
    const span_fork_handlers_t *handlers;
    int rank;

    for (rank = SPAN_FORK_LAST - 1; rank >= 0; --rank) {
        handlers = __atomic_load_n(&span_fork_taken[rank], __ATOMIC_RELAXED);
        if (handlers == NULL) {
            continue;
        }
        if (child && (handlers->child != NULL)) {
            handlers->child();
        } else if (!child && (handlers->parent != NULL)) {
            handlers->parent();
        }
        if (handlers->lock != NULL) {
            pthread_mutex_unlock(handlers->lock);
        }
    }
}

static void span_fork_parent(void)
{
    span_fork_release(0);
}

static void span_fork_child(void)
{
    span_fork_release(1);
}

static void span_fork_init(void)
{
    int ret = pthread_atfork(span_fork_prepare, span_fork_parent,
                             span_fork_child);

    if (ret != 0) {
        ucs_warn("span fork: pthread_atfork failed (%s): a child forked while "
                 "another thread holds a lock of span may hang",
                 strerror(ret));
    }
}

void span_fork_register(span_fork_rank_t rank,
                        const span_fork_handlers_t *handlers)
{
    pthread_once(&span_fork_once, span_fork_init);
    __atomic_store_n(&span_fork_handlers[rank], handlers, __ATOMIC_RELEASE);
}
