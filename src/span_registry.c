/*
 * Registry. Under one mutex: memory events arrive from whichever thread
 * unmaps, and nothing under the lock allocates, frees or unmaps, so a
 * handler can never wait on its own thread; that is why the indexes are
 * fixed arrays of intrusive buckets, never resized. Requests find entries
 * through a bucket (of the exact start, or of the memory's identity for a
 * buffer inside a device allocation), so their cost does not grow with the
 * number of registrations. Events walk the list of every entry, and only
 * when they overlap the listed span (most unmaps of a process do not).
 */
#include "span_registry.h"

#include <ucs/debug/log_def.h>
#include <ucs/sys/math.h>
#include <inttypes.h>
#include <pthread.h>

#define SPAN_REGISTRY_BUCKETS_LOG 12

static UCS_LIST_HEAD(span_registry_list);
static ucs_hlist_head_t span_registry_by_start[1 << SPAN_REGISTRY_BUCKETS_LOG];
static ucs_hlist_head_t
        span_registry_by_identity[1 << SPAN_REGISTRY_BUCKETS_LOG];
static pthread_mutex_t span_registry_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t        span_registry_lo   = UINT64_MAX; /* listed span */
static uint64_t        span_registry_hi;

static void span_registry_stale(span_registry_entry_t *entry, uint64_t start,
                                uint64_t length, const char *why)
{
    /* read without the lock by span_registry_valid */
    __atomic_store_n(&entry->valid, 0, __ATOMIC_RELAXED);
    __atomic_add_fetch(&entry->stats->invalidations, 1, __ATOMIC_RELAXED);
    ucs_debug("span: registration [0x%" PRIx64 ", +%" PRIu64 ") is stale: "
              "[0x%" PRIx64 ", +%" PRIu64 ") %s", entry->start, entry->length,
              start, length, why);
}

static ucs_hlist_head_t *span_registry_bucket(ucs_hlist_head_t *index,
                                              uint64_t key)
{
    return &index[(key * 0x9e3779b97f4a7c15ull) >>
                  (64 - SPAN_REGISTRY_BUCKETS_LOG)];
}

span_registry_entry_t *span_registry_find(const void *owner, uint64_t start,
                                          uint64_t length,
                                          ucs_memory_type_t mem_type,
                                          uint64_t identity)
{
    span_registry_entry_t *entry, *found = NULL;

    pthread_mutex_lock(&span_registry_lock);
    ucs_hlist_for_each(entry,
                       span_registry_bucket(span_registry_by_start, start),
                       by_start) {
        if (!entry->valid || (entry->owner != owner) ||
            (entry->start != start) || (entry->length != length) ||
            (entry->mem_type != mem_type)) {
            continue;
        }
        if (entry->identity != identity) {
            span_registry_stale(entry, start, length,
                                "holds other memory now");
            continue;
        }
        ++entry->refcount;
        found = entry;
        break;
    }
    pthread_mutex_unlock(&span_registry_lock);
    return found;
}

span_registry_entry_t *span_registry_find_within(const void *owner,
                                                 uint64_t start,
                                                 uint64_t length,
                                                 ucs_memory_type_t mem_type,
                                                 uint64_t identity)
{
    span_registry_entry_t *entry, *found = NULL;

    if (identity == 0) {
        return NULL;
    }
    pthread_mutex_lock(&span_registry_lock);
    ucs_hlist_for_each(entry,
                       span_registry_bucket(span_registry_by_identity,
                                            identity),
                       by_identity) {
        if (entry->valid && (entry->owner == owner) &&
            (entry->mem_type == mem_type) && (entry->identity == identity) &&
            (start >= entry->start) &&
            (start - entry->start <= entry->length) &&
            (length <= entry->length - (start - entry->start))) {
            ++entry->refcount;
            found = entry;
            break;
        }
    }
    pthread_mutex_unlock(&span_registry_lock);
    return found;
}

void span_registry_add(span_registry_entry_t *entry)
{
    entry->refcount = 1;
    entry->valid    = 1;
    pthread_mutex_lock(&span_registry_lock);
    ucs_list_add_tail(&span_registry_list, &entry->list);
    ucs_hlist_add_tail(span_registry_bucket(span_registry_by_start,
                                            entry->start),
                       &entry->by_start);
    if (entry->identity != 0) {
        ucs_hlist_add_tail(span_registry_bucket(span_registry_by_identity,
                                                entry->identity),
                           &entry->by_identity);
    }
    span_registry_lo = ucs_min(span_registry_lo, entry->start);
    span_registry_hi = ucs_max(span_registry_hi,
                               entry->start + entry->length);
    pthread_mutex_unlock(&span_registry_lock);
}

int span_registry_release(span_registry_entry_t *entry)
{
    int last;

    pthread_mutex_lock(&span_registry_lock);
    last = (--entry->refcount == 0);
    if (last) {
        ucs_list_del(&entry->list);
        ucs_hlist_del(span_registry_bucket(span_registry_by_start,
                                           entry->start),
                      &entry->by_start);
        if (entry->identity != 0) {
            ucs_hlist_del(span_registry_bucket(span_registry_by_identity,
                                               entry->identity),
                          &entry->by_identity);
        }
        if (ucs_list_is_empty(&span_registry_list)) {
            span_registry_lo = UINT64_MAX;
            span_registry_hi = 0;
        }
    }
    pthread_mutex_unlock(&span_registry_lock);
    return last;
}

int span_registry_valid(span_registry_entry_t *entry)
{
    /* only ever cleared: a key packed while an event races is as good as one
     * packed just before it */
    return __atomic_load_n(&entry->valid, __ATOMIC_RELAXED);
}

void span_registry_invalidate(uint64_t start, uint64_t length)
{
    uint64_t end = start + length;
    span_registry_entry_t *entry;

    pthread_mutex_lock(&span_registry_lock);
    if ((end > span_registry_lo) && (start < span_registry_hi)) {
        ucs_list_for_each(entry, &span_registry_list, list) {
            if (entry->valid && (start < entry->start + entry->length) &&
                (entry->start < end)) {
                span_registry_stale(entry, start, length, "was freed");
            }
        }
    }
    pthread_mutex_unlock(&span_registry_lock);
}
