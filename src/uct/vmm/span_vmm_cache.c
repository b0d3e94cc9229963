/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The import cache of VMM mappings.
 *
 * A mapping lives in the CUDA context of the process that made it, and
 * CUDA does not survive fork: a child is never served its parent's
 * mappings, nor unmaps them (a driver call there fails, and the mapping is
 * not the child's). fork() counts in the child (base/span_fork.h, which
 * also holds the lock around fork), and an entry made before the last fork is
 * dead and freed without an unmap: nothing is walked or freed in the fork
 * handler, and a lookup costs one comparison more.
 */
#ifdef HAVE_CONFIG_H
#  include "config.h"
#endif

#include "span_vmm_cache.h"
#include "span_vmm_export.h"
#include "span_vmm_import.h"
#include "vendor/span_vendor.h"
#include "base/span_fork.h"

#include <ucs/datastruct/list.h>
#include <ucs/debug/log_def.h>
#include <ucs/sys/compiler_def.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct span_vmm_entry {
    span_vmm_map_t map;       /* what rkeys point to: first */
    ucs_list_link_t     list;      /* in the cache, least recently used first */
    int                 listed;
    unsigned            refcount;  /* rkeys that use it */
    unsigned            forks;     /* span_vmm_cache_forks when mapped */
    span_chunk_geom_t   geom;
    span_vmm_table_view_t view; /* the exporter's table */
    size_t              keys_size;
    span_vmm_key_t keys[];    /* as the exporter packed them */
} span_vmm_entry_t;

static UCS_LIST_HEAD(span_vmm_cache);
static unsigned        span_vmm_cache_idle; /* listed, refcount 0 */
static pthread_mutex_t span_vmm_cache_lock = PTHREAD_MUTEX_INITIALIZER;
/* one more in a child than in its parent: written only by the child's fork
 * handler, before the child has any other thread */
static unsigned        span_vmm_cache_forks;

static void span_vmm_cache_fork_child(void)
{
    ++span_vmm_cache_forks;
}

static const span_fork_handlers_t span_vmm_cache_fork = {
    .lock  = &span_vmm_cache_lock,
    .child = span_vmm_cache_fork_child
};

static void UCS_F_CTOR span_vmm_cache_fork_register(void)
{
    span_fork_register(SPAN_FORK_VMM_CACHE, &span_vmm_cache_fork);
}

/* Whether the mapping is this process's */
static int span_vmm_entry_owned(const span_vmm_entry_t *entry)
{
    return entry->forks == span_vmm_cache_forks;
}

/* Whether the engine's copies through the mapping still run: it is not
 * unmapped before they ran, though its last rkey was released (a parent's
 * copies are not the child's) */
static int span_vmm_entry_busy(const span_vmm_entry_t *entry)
{
    return span_vmm_entry_owned(entry) &&
           (__atomic_load_n(&entry->map.busy, __ATOMIC_ACQUIRE) != 0);
}

/* Whether the mapping is this process's and the exporter's table still
 * says that every unit is the export the keys name: memory reads, no
 * system call */
static int span_vmm_entry_alive(const span_vmm_entry_t *entry)
{
    uint32_t i;

    if (!span_vmm_entry_owned(entry)) {
        return 0;
    }
    for (i = 0; i < entry->geom.num_chunks; ++i) {
        if (!span_vmm_table_view_holds(&entry->view, &entry->keys[i])) {
            return 0;
        }
    }
    return 1;
}

static void span_vmm_entry_free(span_vmm_entry_t *entry)
{
    if (span_vmm_entry_owned(entry)) {
        span_vmm_unmap(&entry->map);
    }
    span_vmm_table_view_close(&entry->view);
    free(entry);
}

/* Takes an entry out of the cache; an unused one moves to the list dropped,
 * freed by the caller outside the lock */
static void span_vmm_entry_unlist(span_vmm_entry_t *entry,
                                  ucs_list_link_t *dropped)
{
    ucs_list_del(&entry->list);
    entry->listed = 0;
    if (entry->refcount == 0) {
        --span_vmm_cache_idle;
        ucs_list_add_tail(dropped, &entry->list);
    }
}

static void span_vmm_free_dropped(ucs_list_link_t *dropped)
{
    span_vmm_entry_t *entry, *tmp;

    ucs_list_for_each_safe(entry, tmp, dropped, list) {
        ucs_debug("span vmm cache: %s %u units of process %u",
                  span_vmm_entry_owned(entry) ?
                  "unmapped" : "forgot the parent's mapping of",
                  entry->geom.num_chunks, entry->map.pid);
        span_vmm_entry_free(entry);
    }
}

static int span_vmm_entry_match(const span_vmm_entry_t *entry,
                                const uint8_t *keys, size_t size,
                                const span_chunk_geom_t *geom)
{
    return (entry->keys_size == size) &&
           (entry->geom.base == geom->base) &&
           (entry->geom.length == geom->length) &&
           (entry->geom.num_chunks == geom->num_chunks) &&
           !memcmp(entry->keys, keys, size);
}

/* Under the lock: drops the unused mappings of units no longer exported
 * and returns the live one for keys, with a reference, or NULL */
static span_vmm_entry_t *
span_vmm_cache_lookup(const uint8_t *keys, size_t size,
                      const span_chunk_geom_t *geom,
                      ucs_list_link_t *dropped)
{
    span_vmm_entry_t *entry, *tmp, *found = NULL;
    int match;

    ucs_list_for_each_safe(entry, tmp, &span_vmm_cache, list) {
        match = (found == NULL) &&
                span_vmm_entry_match(entry, keys, size, geom);
        if (!match && (entry->refcount > 0)) {
            continue;
        }
        if (!span_vmm_entry_alive(entry)) {
            /* an unused one stays while copies through it run */
            if ((entry->refcount > 0) || !span_vmm_entry_busy(entry)) {
                span_vmm_entry_unlist(entry, dropped);
            }
        } else if (match) {
            if (entry->refcount++ == 0) {
                --span_vmm_cache_idle;
            }
            found = entry;
        }
    }
    return found;
}

static ucs_status_t span_vmm_entry_new(const span_vmm_key_t *keys,
                                       const span_chunk_geom_t *geom,
                                       span_vmm_entry_t **entry_p)
{
    size_t size = (size_t)geom->num_chunks * sizeof(*keys);
    span_vmm_entry_t *entry;
    ucs_status_t status;

    entry = calloc(1, sizeof(*entry) + size);
    if (entry == NULL) {
        ucs_error("span vmm cache: no memory to map %u units",
                  geom->num_chunks);
        return UCS_ERR_NO_MEMORY;
    }
    status = span_vmm_import(span_vendor_vmm_import(keys[0].magic), keys,
                             geom, &entry->map);
    if (status != UCS_OK) {
        free(entry);
        return status;
    }
    entry->geom      = *geom;
    entry->keys_size = size;
    entry->refcount  = 1;
    entry->forks     = span_vmm_cache_forks;
    memcpy(entry->keys, keys, size);
    *entry_p = entry;
    return UCS_OK;
}

ucs_status_t span_vmm_cache_get(const span_vmm_key_t *keys,
                                const span_chunk_geom_t *geom,
                                span_vmm_map_t **map_p)
{
    UCS_LIST_HEAD(dropped);
    span_vmm_entry_t *entry;
    ucs_status_t status;

    pthread_mutex_lock(&span_vmm_cache_lock);
    entry = span_vmm_cache_lookup((const uint8_t*)keys,
                                  geom->num_chunks * sizeof(*keys), geom,
                                  &dropped);
    pthread_mutex_unlock(&span_vmm_cache_lock);
    span_vmm_free_dropped(&dropped);
    if (entry != NULL) {
        *map_p = &entry->map;
        return UCS_OK;
    }

    status = span_vmm_entry_new(keys, geom, &entry);
    if (status != UCS_OK) {
        return status;
    }
    /* listed only where this process can tell that the exporter still
     * exports the units: it maps the exporter's table */
    if ((span_vmm_table_view_open(keys, geom->num_chunks,
                                  &entry->view) == UCS_OK) &&
        span_vmm_entry_alive(entry)) {
        pthread_mutex_lock(&span_vmm_cache_lock);
        ucs_list_add_tail(&span_vmm_cache, &entry->list);
        entry->listed = 1;
        pthread_mutex_unlock(&span_vmm_cache_lock);
    } else {
        ucs_debug("span vmm cache: the export table of process %u cannot be "
                  "mapped or no longer holds the units: the mapping of %u "
                  "units is not cached", entry->map.pid, geom->num_chunks);
    }
    *map_p = &entry->map;
    return UCS_OK;
}

/* Under the lock: drops the least recently used mapping no rkey uses and
 * no copy goes through (each of the busy ones is dropped later) */
static void span_vmm_cache_evict(ucs_list_link_t *dropped)
{
    span_vmm_entry_t *lru;

    ucs_list_for_each(lru, &span_vmm_cache, list) {
        if ((lru->refcount == 0) && !span_vmm_entry_busy(lru)) {
            span_vmm_entry_unlist(lru, dropped);
            return;
        }
    }
}

void span_vmm_cache_put(span_vmm_map_t *map)
{
    span_vmm_entry_t *entry = ucs_container_of(map,
                                               span_vmm_entry_t,
                                               map);
    UCS_LIST_HEAD(dropped);

    pthread_mutex_lock(&span_vmm_cache_lock);
    if (--entry->refcount == 0) {
        if (entry->listed) {
            ucs_list_del(&entry->list); /* most recently used last */
        }
        if (entry->listed && span_vmm_entry_alive(entry)) {
            ucs_list_add_tail(&span_vmm_cache, &entry->list);
            if (++span_vmm_cache_idle > SPAN_VMM_CACHE_IDLE) {
                span_vmm_cache_evict(&dropped);
            }
        } else if (span_vmm_entry_busy(entry)) {
            /* never cached, or its units were withdrawn while it was in
             * use, and copies through it still run: a later lookup, put
             * or purge drops it once they ran */
            ucs_list_add_tail(&span_vmm_cache, &entry->list);
            entry->listed = 1;
            ++span_vmm_cache_idle;
        } else {
            entry->listed = 0;
            ucs_list_add_tail(&dropped, &entry->list);
        }
    }
    pthread_mutex_unlock(&span_vmm_cache_lock);
    span_vmm_free_dropped(&dropped);
}

void span_vmm_cache_purge(void)
{
    span_vmm_entry_t *entry, *tmp;
    UCS_LIST_HEAD(dropped);

    pthread_mutex_lock(&span_vmm_cache_lock);
    ucs_list_for_each_safe(entry, tmp, &span_vmm_cache, list) {
        if ((entry->refcount == 0) && !span_vmm_entry_busy(entry)) {
            span_vmm_entry_unlist(entry, &dropped);
        }
    }
    pthread_mutex_unlock(&span_vmm_cache_lock);
    span_vmm_free_dropped(&dropped);
}
