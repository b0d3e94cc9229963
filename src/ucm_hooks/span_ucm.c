/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * UCM subscription. UCP's own registration cache subscribes too: both see
 * every unmap, each forgets its own entries (see uct/md/span_md_reg.c on the
 * two caches).
 */
#include "span_ucm.h"

#include <ucm/api/ucm.h>
#include <ucs/debug/log_def.h>
#include <pthread.h>

#define SPAN_UCM_EVENTS (UCM_EVENT_VM_UNMAPPED | UCM_EVENT_MEM_TYPE_FREE)

static pthread_mutex_t           span_ucm_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned                  span_ucm_users;
static const span_ucm_handlers_t *span_ucm_handlers; /* while subscribed */

static void span_ucm_event(ucm_event_type_t event_type, ucm_event_t *event,
                           void *arg)
{
    const span_ucm_handlers_t *handlers = arg;

    if (event_type == UCM_EVENT_VM_UNMAPPED) {
        handlers->unmapped((uintptr_t)event->vm_unmapped.address,
                           event->vm_unmapped.size);
    } else if (event_type == UCM_EVENT_MEM_TYPE_FREE) {
        handlers->freed((uintptr_t)event->mem_type.address,
                        event->mem_type.size);
    }
}

ucs_status_t span_ucm_subscribe(const span_ucm_handlers_t *handlers)
{
    ucs_status_t status = UCS_OK;

    pthread_mutex_lock(&span_ucm_lock);
    if (span_ucm_users == 0) {
        /* before the original: an unmapped range is stale from its first
         * byte, before the allocator can hand it out again */
        status = ucm_set_event_handler(SPAN_UCM_EVENTS, -1, span_ucm_event,
                                       (void*)handlers);
        if (status != UCS_OK) {
            ucs_warn("span ucm: cannot subscribe to memory events (%s): "
                     "registrations are not shared",
                     ucs_status_string(status));
        } else {
            span_ucm_handlers = handlers;
        }
    }
    span_ucm_users += (status == UCS_OK);
    pthread_mutex_unlock(&span_ucm_lock);
    return status;
}

void span_ucm_unsubscribe(void)
{
    pthread_mutex_lock(&span_ucm_lock);
    if (--span_ucm_users == 0) {
        ucm_unset_event_handler(SPAN_UCM_EVENTS, span_ucm_event,
                                (void*)span_ucm_handlers);
        span_ucm_handlers = NULL;
    }
    pthread_mutex_unlock(&span_ucm_lock);
}

pthread_mutex_t *span_ucm_fork_lock(void)
{
    return &span_ucm_lock;
}
