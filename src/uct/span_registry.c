/*
 * Registry. Under one mutex: memory events arrive from whichever thread
 * unmaps, and nothing under the lock allocates, frees or unmaps, so a
 * handler can never wait on its own thread; that is why the indexes are
 * fixed arrays of intrusive buckets, never resized. Requests find entries
 * through a bucket (of the exact start, or of a unit's buffer id for a
 * buffer inside a device unit), so their cost does not grow with the
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
 *
 * Slots: a caching allocator's tensors are registered one by one inside
 * the units registered already, and UCP's own cache misses each of them;
 * a lock and a shared counter per request would cost more than the one
 * driver call that must stay (the buffer id: a missed free event must not
 * serve other memory). A thread's slot holds the entry and unit of its last
 * hit there with one pin (entry->pins, under the lock, so that the entry
 * outlives the slot's use of it); a request inside that unit takes a
 * reference counted in the slot, and the thread's release of the entry
 * gives one back there, with no lock and no read-modify-write. A release
 * under the lock of a reference a slot handed out leaves the entry's own
 * count below what its users hold: the entry counts as released only when
 * the slots that hold it have let it go and added their counts. A slot lets
 * go when its thread hits another unit, releases the entry without a
 * reference of its own, sees it draining, exits, or when the owner purges.
 */
#include "span_registry.h"

#include <ucs/debug/log_def.h>
#include <ucs/sys/math.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>

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

/* A thread's last unit hit. Its thread alone reads and writes refs, hits
 * and the unit; entry changes under the lock, where purge reads all. */
typedef struct span_registry_slot {
    ucs_list_link_t       list;   /* of the slots of live threads */
    span_registry_entry_t *entry; /* holds one of its pins, or NULL */
    uint64_t              id;     /* the unit: its buffer id and range */
    uint64_t              start;
    uint64_t              end;
    int64_t               refs;   /* taken here, less those released here */
    uint64_t              hits;   /* not in the entry's stats yet */
    int                   listed;
} span_registry_slot_t;

/* Slots are thread-specific data, not __thread: dynamic TLS of a library
 * UCX dlopens goes through __tls_get_addr, which sanitizers intercept
 * unreliably in threads */
static UCS_LIST_HEAD(span_registry_slots);
static pthread_key_t  span_registry_slot_key;
static int            span_registry_slot_keyed;
static pthread_once_t span_registry_slot_once = PTHREAD_ONCE_INIT;

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

/* Takes the entry off every index; the lock is held */
static void span_registry_unlist(span_registry_entry_t *entry)
{
    uint32_t i;

    ucs_list_del(&entry->list);
    ucs_hlist_del(span_registry_bucket(span_registry_by_start, entry->start),
                  &entry->by_start);
    for (i = 0; i < entry->num_units; ++i) {
        ucs_hlist_del(span_registry_bucket(span_registry_by_identity,
                                           entry->units[i].id),
                      &entry->units[i].link);
    }
    ucs_hlist_del(span_registry_region(entry->start, entry->length),
                  &entry->by_region);
    if (ucs_list_is_empty(&span_registry_list)) {
        span_registry_lo = UINT64_MAX;
        span_registry_hi = 0;
    }
}

/* Whether the slots that hold the entry must give back their counts to
 * tell whether its users released it (read by span_registry_slot_hit) */
static void span_registry_drain_mark(span_registry_entry_t *entry)
{
    __atomic_store_n(&entry->draining, entry->refcount <= 0,
                     __ATOMIC_RELAXED);
}

/* Whether its users released the entry and no slot holds it: it is
 * unlisted then, to be torn down; the lock is held */
static int span_registry_done(span_registry_entry_t *entry)
{
    span_registry_drain_mark(entry);
    if ((entry->refcount > 0) || (entry->pins > 0)) {
        return 0;
    }
    span_registry_unlist(entry);
    return 1;
}

/* The slot lets its entry go, which gets the slot's count; the entry where
 * that made it done, else NULL. The lock is held. */
static span_registry_entry_t *
span_registry_slot_drop(span_registry_slot_t *slot)
{
    span_registry_entry_t *entry = slot->entry;

    if (entry == NULL) {
        return NULL;
    }
    entry->refcount += slot->refs;
    __atomic_add_fetch(&entry->stats->hits, slot->hits, __ATOMIC_RELAXED);
    --entry->pins;
    __atomic_store_n(&slot->entry, NULL, __ATOMIC_RELAXED);
    slot->refs = 0;
    slot->hits = 0;
    return span_registry_done(entry) ? entry : NULL;
}

static void span_registry_teardown(span_registry_entry_t *entry)
{
    if (entry != NULL) {
        entry->destroy(entry);
    }
}

static void span_registry_slot_exit(void *arg)
{
    span_registry_slot_t *slot = arg;
    span_registry_entry_t *done;

    pthread_mutex_lock(&span_registry_lock);
    done = span_registry_slot_drop(slot);
    if (slot->listed) {
        ucs_list_del(&slot->list);
    }
    pthread_mutex_unlock(&span_registry_lock);
    span_registry_teardown(done);
    free(slot);
}

static void span_registry_slot_key_create(void)
{
    if (pthread_key_create(&span_registry_slot_key,
                           span_registry_slot_exit) != 0) {
        ucs_warn("span: no thread key: requests inside registered device "
                 "units take the registry's lock");
        return;
    }
    span_registry_slot_keyed = 1;
}

/* The calling thread's slot, or NULL where it has none yet */
static UCS_F_ALWAYS_INLINE span_registry_slot_t *span_registry_slot_get(void)
{
    pthread_once(&span_registry_slot_once, span_registry_slot_key_create);
    return span_registry_slot_keyed ?
           pthread_getspecific(span_registry_slot_key) : NULL;
}

/* The calling thread's slot, made where it has none (not under the lock:
 * it allocates); NULL without memory or a key */
static span_registry_slot_t *span_registry_slot_make(void)
{
    span_registry_slot_t *slot = span_registry_slot_get();

    if ((slot != NULL) || !span_registry_slot_keyed) {
        return slot;
    }
    slot = calloc(1, sizeof(*slot));
    if ((slot != NULL) &&
        (pthread_setspecific(span_registry_slot_key, slot) != 0)) {
        free(slot);
        slot = NULL;
    }
    return slot;
}

/* The slot now holds the unit [start, end) of entry, with buffer id id;
 * the entry it held before where that is done. The lock is held. */
static span_registry_entry_t *
span_registry_slot_set(span_registry_slot_t *slot,
                       span_registry_entry_t *entry, uint64_t id,
                       uint64_t start, uint64_t end)
{
    span_registry_entry_t *done = NULL;

    if (slot->entry != entry) {
        done = span_registry_slot_drop(slot);
        ++entry->pins;
        __atomic_store_n(&slot->entry, entry, __ATOMIC_RELAXED);
    }
    if (!slot->listed) {
        ucs_list_add_tail(&span_registry_slots, &slot->list);
        slot->listed = 1;
    }
    slot->id    = id;
    slot->start = start;
    slot->end   = end;
    return done;
}

/* The request lies in the unit the thread's slot holds: served there */
static UCS_F_ALWAYS_INLINE span_registry_entry_t *
span_registry_slot_hit(span_registry_slot_t *slot, const void *owner,
                       uint64_t start, uint64_t length,
                       ucs_memory_type_t mem_type, uint64_t id, unsigned caps)
{
    span_registry_entry_t *entry;

    if (slot == NULL) {
        return NULL;
    }
    entry = __atomic_load_n(&slot->entry, __ATOMIC_RELAXED);
    if ((entry == NULL) || (slot->id != id) || (entry->owner != owner) ||
        (start < slot->start) || (start >= slot->end) ||
        (length > slot->end - start) || (entry->mem_type != mem_type) ||
        !span_registry_allows(entry, caps) ||
        !__atomic_load_n(&entry->valid, __ATOMIC_RELAXED) ||
        __atomic_load_n(&entry->draining, __ATOMIC_RELAXED)) {
        return NULL;
    }
    ++slot->refs;
    ++slot->hits;
    return entry;
}

/* Unit k of the entry: [*start_p, *end_p) */
static void span_registry_unit_range(const span_registry_entry_t *entry,
                                     uint32_t k, uint64_t *start_p,
                                     uint64_t *end_p)
{
    uint64_t end = entry->start + entry->length;

    if (entry->unit_size == 0) {
        *start_p = entry->start;
        *end_p   = end;
        return;
    }
    *start_p = entry->start + (k * entry->unit_size);
    *end_p   = ucs_min(*start_p + entry->unit_size, end);
}

/* Whether the units past k that [start, start + length) reaches still hold
 * the memory registered: one that does not makes the entry stale */
static int span_registry_units_hold(span_registry_entry_t *entry, uint32_t k,
                                    uint64_t start, uint64_t length,
                                    span_registry_check_func_t check)
{
    uint64_t unit_start, unit_end;

    for (++k; k < entry->num_units; ++k) {
        span_registry_unit_range(entry, k, &unit_start, &unit_end);
        if (unit_start >= start + length) {
            break;
        }
        if (!check(entry->owner, unit_start, entry->units[k].id)) {
            span_registry_stale(entry, unit_start, unit_end - unit_start,
                                "holds other memory now");
            return 0;
        }
    }
    return 1;
}

span_registry_entry_t *span_registry_find_within(const void *owner,
                                                 uint64_t start,
                                                 uint64_t length,
                                                 ucs_memory_type_t mem_type,
                                                 uint64_t id, unsigned caps,
                                                 span_registry_check_func_t check)
{
    span_registry_slot_t *slot = span_registry_slot_get();
    span_registry_entry_t *entry, *found, *done = NULL;
    uint64_t unit_start, unit_end;
    span_registry_unit_t *unit;
    uint32_t k;

    found = span_registry_slot_hit(slot, owner, start, length, mem_type, id,
                                   caps);
    if (found != NULL) {
        return found;
    }
    slot = span_registry_slot_make();
    pthread_mutex_lock(&span_registry_lock);
    ucs_hlist_for_each(unit,
                       span_registry_bucket(span_registry_by_identity, id),
                       link) {
        entry = unit->entry;
        k     = unit - entry->units;
        span_registry_unit_range(entry, k, &unit_start, &unit_end);
        if ((unit->id != id) || !entry->valid || (entry->owner != owner) ||
            (entry->mem_type != mem_type) ||
            !span_registry_allows(entry, caps) || (start < unit_start) ||
            (start >= unit_end) ||
            (length > entry->start + entry->length - start) ||
            !span_registry_units_hold(entry, k, start, length, check)) {
            continue;
        }
        ++entry->refcount;
        span_registry_drain_mark(entry);
        __atomic_add_fetch(&entry->stats->hits, 1, __ATOMIC_RELAXED);
        found = entry;
        if (slot != NULL) {
            done = span_registry_slot_set(slot, entry, id, unit_start,
                                          unit_end);
        }
        break;
    }
    if ((found == NULL) && (slot != NULL) && (slot->entry != NULL) &&
        (!slot->entry->valid || slot->entry->draining)) {
        done = span_registry_slot_drop(slot); /* of no use */
    }
    pthread_mutex_unlock(&span_registry_lock);
    span_registry_teardown(done);
    return found;
}

void span_registry_add(span_registry_entry_t *entry)
{
    uint32_t i;

    entry->refcount = 1;
    entry->pins     = 0;
    entry->draining = 0;
    entry->valid    = 1;
    pthread_mutex_lock(&span_registry_lock);
    ucs_list_add_tail(&span_registry_list, &entry->list);
    ucs_hlist_add_tail(span_registry_bucket(span_registry_by_start,
                                            entry->start),
                       &entry->by_start);
    for (i = 0; i < entry->num_units; ++i) {
        entry->units[i].entry = entry;
        ucs_hlist_add_tail(span_registry_bucket(span_registry_by_identity,
                                                entry->units[i].id),
                           &entry->units[i].link);
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
    span_registry_slot_t *slot = span_registry_slot_get();
    int done;

    if ((slot != NULL) &&
        (__atomic_load_n(&slot->entry, __ATOMIC_RELAXED) == entry) &&
        (slot->refs > 0)) {
        if ((--slot->refs > 0) ||
            !__atomic_load_n(&entry->draining, __ATOMIC_RELAXED)) {
            return 0;
        }
        pthread_mutex_lock(&span_registry_lock);
        done = (span_registry_slot_drop(slot) == entry);
        pthread_mutex_unlock(&span_registry_lock);
        return done;
    }

    pthread_mutex_lock(&span_registry_lock);
    --entry->refcount;
    /* this thread's slot gives back what it handed out */
    done = ((slot != NULL) && (slot->entry == entry)) ?
           (span_registry_slot_drop(slot) == entry) :
           span_registry_done(entry);
    pthread_mutex_unlock(&span_registry_lock);
    return done;
}

void span_registry_purge(const void *owner)
{
    UCS_LIST_HEAD(done_list);
    span_registry_entry_t *done, *tmp;
    span_registry_slot_t *slot;

    pthread_mutex_lock(&span_registry_lock);
    ucs_list_for_each(slot, &span_registry_slots, list) {
        if ((slot->entry != NULL) && (slot->entry->owner == owner)) {
            done = span_registry_slot_drop(slot);
            if (done != NULL) {
                ucs_list_add_tail(&done_list, &done->list);
            }
        }
    }
    pthread_mutex_unlock(&span_registry_lock);
    ucs_list_for_each_safe(done, tmp, &done_list, list) {
        ucs_list_del(&done->list);
        done->destroy(done);
    }
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
