/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Memory events of twin MDs (span_md_events.h).
 */
#include "span_md_events.h"
#include "base/span_fork.h"
#include "ucm_hooks/span_ucm.h"

#include <ucs/sys/compiler_def.h>

/* An unmapped host range also withdraws the VMM exports it overlaps once a
 * ROCm twin is open: UCM reports no free of ROCm's VMM handles (its rocm
 * hooks see hsa_amd_memory_pool_free only), and their unmap, where the
 * runtime unmaps the host's view too, is an unmapped range. Other
 * processes pay nothing for it on every munmap. */
static int span_md_unmap_withdraws;

static void span_md_range_unmapped(uint64_t start, uint64_t length)
{
    span_registry_invalidate(start, length);
    if (__atomic_load_n(&span_md_unmap_withdraws, __ATOMIC_RELAXED)) {
        span_vmm_export_invalidate(start, length);
    }
}

static void span_md_range_freed(uint64_t start, uint64_t length)
{
    span_registry_invalidate(start, length);
    /* the unit's memory may go only once no descriptor holds it */
    span_vmm_export_invalidate(start, length);
}

static const span_ucm_handlers_t span_md_event_handlers = {
    .unmapped = span_md_range_unmapped,
    .freed    = span_md_range_freed,
};

/* Subscribing runs under the UCM layer's lock: first of span's locks at fork
 * (base/span_fork.h), where the layer below knows no order of span's */
static span_fork_handlers_t span_md_events_fork;

static void UCS_F_CTOR span_md_events_fork_register(void)
{
    span_md_events_fork.lock = span_ucm_fork_lock();
    span_fork_register(SPAN_FORK_UCM, &span_md_events_fork);
}

ucs_status_t span_md_events_subscribe(const span_md_t *smd)
{
    if (smd->dev_mem_type == UCS_MEMORY_TYPE_ROCM) {
        __atomic_store_n(&span_md_unmap_withdraws, 1, __ATOMIC_RELAXED);
    }
    return span_ucm_subscribe(&span_md_event_handlers);
}

void span_md_events_unsubscribe(void)
{
    span_ucm_unsubscribe();
}
