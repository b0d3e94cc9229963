/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * fork() and span's locks: every lock span holds is taken before fork, in
 * one global order, and released after it in parent and child, so a child
 * never inherits a lock held by a thread it does not have (a child forked
 * while a thread unmaps would hang at its first unmap, whose memory event
 * takes the registry's lock).
 *
 * A module registers its handlers under its rank at load (a constructor),
 * once. prepare runs in rank order, parent and child in the reverse order.
 * A lock may be taken while holding only locks of lower ranks: a lock under
 * which span allocates or frees ranks before the registry and the VMM
 * export table, which memory events take (a free may unmap).
 */
#ifndef SPAN_FORK_H_
#define SPAN_FORK_H_

#include <pthread.h>

typedef enum {
    SPAN_FORK_TWINS,      /* component/span_component.c: adds twins (reads
                           * config, allocates) under it */
    SPAN_FORK_UCM,        /* ucm_hooks/span_ucm.c: subscribes under it
                           * (md/span_md_events.c registers it) */
    SPAN_FORK_IFACE,      /* iface/span_iface.c: the twin iface table */
    SPAN_FORK_NVML,       /* iface/span_nvml.c: the NVLink probe, which
                           * loads NVML (maps, allocates) under it */
    SPAN_FORK_RKEY_SIZES, /* key/span_rkey.c: packed sizes of open MDs */
    SPAN_FORK_MD_INNER,   /* md/span_md_inner.c: inner MDs' memh tables */
    SPAN_FORK_SPILL,      /* key/span_spill.c: the spill arena */
    SPAN_FORK_VMM_CACHE,  /* vmm/span_vmm_cache.c: imported units */
    SPAN_FORK_IPC_CACHE,  /* vmm/span_ipc_cache.c: opened IPC handles */
    SPAN_FORK_VMM_EXPORT, /* vmm/span_vmm_export.c: taken by events */
    SPAN_FORK_REGISTRY,   /* md/span_registry.c: taken by events */
    SPAN_FORK_LAST
} span_fork_rank_t;

/* Any member may be NULL */
typedef struct {
    pthread_mutex_t *lock;    /* taken before fork, released after it */
    void (*prepare)(void);    /* takes more, with lock held */
    void (*parent)(void);     /* releases them, before lock */
    void (*child)(void);      /* makes the module usable in the child (its
                               * only thread holds the module's locks),
                               * before lock is released */
} span_fork_handlers_t;

/* Runs handlers (static) at every fork from now on, at rank */
void span_fork_register(span_fork_rank_t rank,
                        const span_fork_handlers_t *handlers);

#endif
