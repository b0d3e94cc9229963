/*
 * UCM subscription. UCP's own registration cache subscribes too: both see
 * every unmap, each forgets its own entries (see span_md.c on the two
 * caches).
 */
#include "span_ucm.h"
#include "span_registry.h"
#include "resolvers/span_cuda_vmm_export.h"

#include <ucm/api/ucm.h>
#include <ucs/debug/log_def.h>
#include <pthread.h>

#define SPAN_UCM_EVENTS (UCM_EVENT_VM_UNMAPPED | UCM_EVENT_MEM_TYPE_FREE)

static pthread_mutex_t span_ucm_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned        span_ucm_users;
static int             span_ucm_unmap_withdraws; /* a ROCm twin is open */

static void span_ucm_event(ucm_event_type_t event_type, ucm_event_t *event,
                           void *arg)
{
    if (event_type == UCM_EVENT_VM_UNMAPPED) {
        span_registry_invalidate((uintptr_t)event->vm_unmapped.address,
                                 event->vm_unmapped.size);
        if (__atomic_load_n(&span_ucm_unmap_withdraws, __ATOMIC_RELAXED)) {
            span_cuda_vmm_export_invalidate(
                    (uintptr_t)event->vm_unmapped.address,
                    event->vm_unmapped.size);
        }
    } else if (event_type == UCM_EVENT_MEM_TYPE_FREE) {
        span_registry_invalidate((uintptr_t)event->mem_type.address,
                                 event->mem_type.size);
        /* the unit's memory may go only once no descriptor holds it */
        span_cuda_vmm_export_invalidate((uintptr_t)event->mem_type.address,
                                        event->mem_type.size);
    }
}

ucs_status_t span_ucm_subscribe(void)
{
    ucs_status_t status = UCS_OK;

    pthread_mutex_lock(&span_ucm_lock);
    if (span_ucm_users == 0) {
        /* before the original: an unmapped range is stale from its first
         * byte, before the allocator can hand it out again */
        status = ucm_set_event_handler(SPAN_UCM_EVENTS, -1, span_ucm_event,
                                       NULL);
        if (status != UCS_OK) {
            ucs_warn("span: cannot subscribe to memory events (%s): "
                     "registrations are not shared",
                     ucs_status_string(status));
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
        ucm_unset_event_handler(SPAN_UCM_EVENTS, span_ucm_event, NULL);
    }
    pthread_mutex_unlock(&span_ucm_lock);
}

void span_ucm_unmap_withdraws_exports(void)
{
    __atomic_store_n(&span_ucm_unmap_withdraws, 1, __ATOMIC_RELAXED);
}
