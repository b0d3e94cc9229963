/*
 * Registry. Under one mutex: memory events arrive from whichever thread
 * unmaps, and nothing under the lock allocates, frees or unmaps, so a
 * handler can never wait on its own thread; that is why the indexes are
 * fixed arrays of intrusive buckets, never resized. Requests find entries
 * through a bucket (of the exact start, or of the memory's identity for a
 * buffer inside a device allocation), so their cost does not grow with the
 * number of registrations.
 *
 * Events (every unmap of the process that falls in the listed span) find
 * the entries they overlap through a grid of levels: an entry no longer
 * than 2^shift of the first level that admits it is filed under the region
 * (start >> shift) of its start, so whatever overlaps [start, end) starts
 * in a region from (start - 2^shift + 1) >> shift to (end - 1) >> shift:
 * a few buckets per level, not every entry. Entries longer than the last
 * level are listed apart; an event wider than a level's buckets walks the
 * list of every entry.
 */
#include "span_registry.h"

#include <ucs/debug/log_def.h>
#include <ucs/sys/math.h>
#include <inttypes.h>
#include <pthread.h>

#define SPAN_REGISTRY_BUCKETS_LOG 12
#define SPAN_REGISTRY_BUCKETS     (1ul << SPAN_REGISTRY_BUCKETS_LOG)
#define SPAN_REGISTRY_LEVELS      4

/* 2 MiB, 128 MiB, 8 GiB, 512 GiB */
static const unsigned span_registry_shift[SPAN_REGISTRY_LEVELS] = {21, 27, 33,
                                                                    39};

static UCS_LIST_HEAD(span_registry_list);
static ucs_hlist_head_t
        span_registry_by_region[SPAN_REGISTRY_LEVELS][SPAN_REGISTRY_BUCKETS];
static ucs_hlist_head_t span_registry_huge;
static ucs_hlist_head_t span_registry_by_start[SPAN_REGISTRY_BUCKETS];
static ucs_hlist_head_t span_registry_by_identity[SPAN_REGISTRY_BUCKETS];
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

/* The bucket of the grid where an entry of this length and start is filed */
static ucs_hlist_head_t *span_registry_region(uint64_t start, uint64_t length)
{
    unsigned level;

    for (level = 0; level < SPAN_REGISTRY_LEVELS; ++level) {
        if (length <= (1ull << span_registry_shift[level])) {
            return span_registry_bucket(span_registry_by_region[level],
                                        start >> span_registry_shift[level]);
        }
    }
    return &span_registry_huge;
}

/* A weaker registration of the range does not serve a request: UCP widens
 * the flags of a region it registers again, and a NIC refuses an access the
 * registration does not allow */
static int span_registry_allows(const span_registry_entry_t *entry,
                                unsigned caps)
{
    return (entry->caps & caps) == caps;
}

span_registry_entry_t *span_registry_find(const void *owner, uint64_t start,
                                          uint64_t length,
                                          ucs_memory_type_t mem_type,
                                          uint64_t identity, unsigned caps)
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
        if (!span_registry_allows(entry, caps)) {
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
                                                 uint64_t identity,
                                                 unsigned caps)
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
            span_registry_allows(entry, caps) &&
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
    ucs_hlist_add_tail(span_registry_region(entry->start, entry->length),
                       &entry->by_region);
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
        ucs_hlist_del(span_registry_region(entry->start, entry->length),
                      &entry->by_region);
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

/* Marks the entry stale where [start, end) overlaps it */
static void span_registry_invalidate_entry(span_registry_entry_t *entry,
                                           uint64_t start, uint64_t end)
{
    if (entry->valid && (start < entry->start + entry->length) &&
        (entry->start < end)) {
        span_registry_stale(entry, start, end - start, "was freed");
    }
}

static void span_registry_invalidate_in(ucs_hlist_head_t *bucket,
                                        uint64_t start, uint64_t end)
{
    span_registry_entry_t *entry;

    ucs_hlist_for_each(entry, bucket, by_region) {
        span_registry_invalidate_entry(entry, start, end);
    }
}

static void span_registry_invalidate_grid(uint64_t start, uint64_t end)
{
    uint64_t size, region, last;
    unsigned level, shift;

    for (level = 0; level < SPAN_REGISTRY_LEVELS; ++level) {
        shift  = span_registry_shift[level];
        size   = 1ull << shift;
        region = (start >= size) ? ((start - size + 1) >> shift) : 0;
        last   = (end - 1) >> shift;
        for (; region <= last; ++region) {
            span_registry_invalidate_in(
                    span_registry_bucket(span_registry_by_region[level],
                                         region), start, end);
        }
    }
    span_registry_invalidate_in(&span_registry_huge, start, end);
}

void span_registry_invalidate(uint64_t start, uint64_t length)
{
    uint64_t end = (length > UINT64_MAX - start) ? UINT64_MAX :
                                                   start + length;
    unsigned shift = span_registry_shift[0]; /* the most regions */
    span_registry_entry_t *entry;

    if (length == 0) {
        return;
    }
    pthread_mutex_lock(&span_registry_lock);
    if ((end > span_registry_lo) && (start < span_registry_hi)) {
        if (((end - 1) >> shift) - (start >> shift) < SPAN_REGISTRY_BUCKETS) {
            span_registry_invalidate_grid(start, end);
        } else {
            ucs_list_for_each(entry, &span_registry_list, list) {
                span_registry_invalidate_entry(entry, start, end);
            }
        }
    }
    pthread_mutex_unlock(&span_registry_lock);
}
