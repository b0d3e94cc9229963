/* SPDX-License-Identifier: BSD-3-Clause */
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
 * hit there (entry->pins counts the slots that hold it); a request inside
 * that unit takes a reference counted in the slot, and the thread's release
 * of the entry gives one back there, with no lock and no shared counter.
 *
 * What a user holds is the entry's own count (references taken and
 * released under the lock) plus the counts of the slots that hold it. A
 * release under the lock that leaves the entry's own count at zero or less
 * (it may give back a reference another thread's slot handed out) takes the
 * entry from every slot that holds it and adds their counts: what is left
 * is what its users hold, and at zero that release was the last. So an
 * entry that a slot holds always has a count of its own above zero, a slot
 * never hands out or takes back its last reference, and every entry is torn
 * down by the release of its last user (its owner's deregistration),
 * whichever thread's slot held it: never later, never by a request of
 * another owner, never after its owner closed (UCT releases every
 * registration before closing an MD).
 *
 * Taking the entry from a slot while its thread uses the slot without the
 * lock is a handshake, not a matter of timing: the thread marks its slot
 * busy and then reads which entry it holds, and reads the entry only while
 * busy; the one who takes the entry away (under the lock) clears it, then
 * waits until the slot is not busy. Both store, then load, sequentially
 * consistent: either the thread saw no entry, or the other sees it busy and
 * waits until it is done with the entry and its count. That full fence is
 * the fast path's only cost beyond plain loads and stores (on x86 a locked
 * instruction, as every full fence is, on the thread's own slot: no shared
 * counter, no contention). Nothing between the mark and its end calls out
 * or waits, so the wait is a few instructions long.
 */
#include "span_registry.h"
#include "base/span_fork.h"

#include <ucs/debug/log_def.h>
#include <ucs/sys/compiler_def.h>
#include <ucs/sys/math.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
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

/* A thread's last unit hit. Its thread alone reads and writes the unit;
 * entry changes under the lock only; refs and hits belong to the thread
 * while it is busy with the entry or holds the lock, else to the lock's
 * holder once the entry is cleared and the slot not busy. */
typedef struct span_registry_slot {
    ucs_list_link_t       list;   /* of the slots of live threads */
    span_registry_entry_t *entry; /* holds one of its pins, or NULL */
    int                   busy;   /* its thread may be reading entry */
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
    ucs_debug("span registry: registration [0x%" PRIx64 ", +%" PRIu64 ") is "
              "stale: [0x%" PRIx64 ", +%" PRIu64 ") %s", entry->start,
              entry->length, start, length, why);
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

/* The calling thread begins to use its slot without the lock: the entry it
 * reads here stays there and alive until span_registry_slot_leave */
static UCS_F_ALWAYS_INLINE span_registry_entry_t *
span_registry_slot_enter(span_registry_slot_t *slot)
{
    __atomic_store_n(&slot->busy, 1, __ATOMIC_SEQ_CST);
    return __atomic_load_n(&slot->entry, __ATOMIC_SEQ_CST);
}

static UCS_F_ALWAYS_INLINE void
span_registry_slot_leave(span_registry_slot_t *slot)
{
    __atomic_store_n(&slot->busy, 0, __ATOMIC_RELEASE);
}

/* The slot lets its entry go, which gets the slot's count: once the slot's
 * thread, if it is another, is done with what it read there. The lock is
 * held. */
static void span_registry_slot_revoke(span_registry_slot_t *slot)
{
    span_registry_entry_t *entry = slot->entry;

    if (entry == NULL) {
        return;
    }
    __atomic_store_n(&slot->entry, NULL, __ATOMIC_SEQ_CST);
    while (__atomic_load_n(&slot->busy, __ATOMIC_SEQ_CST)) {
        sched_yield(); /* it may be preempted on this core */
    }
    entry->refcount += slot->refs;
    __atomic_add_fetch(&entry->stats->hits, slot->hits, __ATOMIC_RELAXED);
    --entry->pins;
    slot->refs = 0;
    slot->hits = 0;
}

/* Whether the entry's users released it, told after every slot that holds
 * it gave its count back: it is unlisted then, to be torn down by the
 * caller. The lock is held. */
static int span_registry_done(span_registry_entry_t *entry)
{
    span_registry_slot_t *slot;

    ucs_list_for_each(slot, &span_registry_slots, list) {
        if (entry->pins == 0) {
            break;
        }
        if (slot->entry == entry) {
            span_registry_slot_revoke(slot);
        }
    }
    if (entry->refcount > 0) {
        return 0;
    }
    span_registry_unlist(entry);
    return 1;
}

static void span_registry_slot_exit(void *arg)
{
    span_registry_slot_t *slot = arg;

    pthread_mutex_lock(&span_registry_lock);
    span_registry_slot_revoke(slot);
    if (slot->listed) {
        ucs_list_del(&slot->list);
    }
    pthread_mutex_unlock(&span_registry_lock);
    free(slot);
}

/* A child of fork has only the thread that forked: a slot that another
 * thread had marked busy then stays busy, and a release would wait for it
 * for ever. fork holds the lock (base/span_fork.h): the lists are whole. */
static void span_registry_fork_child(void)
{
    span_registry_slot_t *slot;

    ucs_list_for_each(slot, &span_registry_slots, list) {
        __atomic_store_n(&slot->busy, 0, __ATOMIC_RELAXED);
    }
}

static const span_fork_handlers_t span_registry_fork = {
    .lock  = &span_registry_lock,
    .child = span_registry_fork_child
};

static void UCS_F_CTOR span_registry_fork_register(void)
{
    span_fork_register(SPAN_FORK_REGISTRY, &span_registry_fork);
}

static void span_registry_slot_key_create(void)
{
    if (pthread_key_create(&span_registry_slot_key,
                           span_registry_slot_exit) != 0) {
        ucs_warn("span registry: no thread key: requests inside registered "
                 "device units take the registry's lock");
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

/* The calling thread's slot now holds the unit [start, end) of entry,
 * with buffer id id (the entry it held before still has users: its count
 * of its own stays above zero). The lock is held. */
static void span_registry_slot_set(span_registry_slot_t *slot,
                                   span_registry_entry_t *entry, uint64_t id,
                                   uint64_t start, uint64_t end)
{
    if (slot->entry != entry) {
        span_registry_slot_revoke(slot);
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
}

/* The request lies in the unit the thread's slot holds: served there */
static UCS_F_ALWAYS_INLINE span_registry_entry_t *
span_registry_slot_hit(span_registry_slot_t *slot, const void *owner,
                       uint64_t start, uint64_t length,
                       ucs_memory_type_t mem_type, uint64_t id, unsigned caps)
{
    span_registry_entry_t *entry;

    if ((slot == NULL) || (slot->id != id) || (start < slot->start) ||
        (start >= slot->end) || (length > slot->end - start)) {
        return NULL;
    }
    entry = span_registry_slot_enter(slot);
    if ((entry != NULL) && (entry->owner == owner) &&
        (entry->mem_type == mem_type) && span_registry_allows(entry, caps) &&
        __atomic_load_n(&entry->valid, __ATOMIC_RELAXED)) {
        ++slot->refs;
        ++slot->hits;
    } else {
        entry = NULL;
    }
    span_registry_slot_leave(slot);
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
    span_registry_entry_t *entry, *found;
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
        __atomic_add_fetch(&entry->stats->hits, 1, __ATOMIC_RELAXED);
        found = entry;
        if (slot != NULL) {
            span_registry_slot_set(slot, entry, id, unit_start, unit_end);
        }
        break;
    }
    if ((found == NULL) && (slot != NULL) && (slot->entry != NULL) &&
        !slot->entry->valid) {
        span_registry_slot_revoke(slot); /* of no use */
    }
    pthread_mutex_unlock(&span_registry_lock);
    return found;
}

void span_registry_add(span_registry_entry_t *entry)
{
    uint32_t i;

    entry->refcount = 1;
    entry->pins     = 0;
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

/* The calling thread gives back a reference its slot handed out, without
 * the lock; 0 where the slot holds another entry or none of its references */
static UCS_F_ALWAYS_INLINE int
span_registry_slot_give_back(span_registry_slot_t *slot,
                             span_registry_entry_t *entry)
{
    int given;

    if (slot == NULL) {
        return 0;
    }
    given = (span_registry_slot_enter(slot) == entry) && (slot->refs > 0);
    if (given) {
        --slot->refs; /* never the last: the entry's own count is above 0 */
    }
    span_registry_slot_leave(slot);
    return given;
}

int span_registry_release(span_registry_entry_t *entry)
{
    int done;

    if (span_registry_slot_give_back(span_registry_slot_get(), entry)) {
        return 0;
    }
    pthread_mutex_lock(&span_registry_lock);
    done = (--entry->refcount <= 0) && span_registry_done(entry);
    pthread_mutex_unlock(&span_registry_lock);
    return done;
}

void span_registry_purge(const void *owner)
{
    span_registry_entry_t *entry;
    span_registry_slot_t *slot;
    unsigned held = 0;

    pthread_mutex_lock(&span_registry_lock);
    ucs_list_for_each(slot, &span_registry_slots, list) {
        if ((slot->entry != NULL) && (slot->entry->owner == owner)) {
            span_registry_slot_revoke(slot);
        }
    }
    /* a new owner may come at this address: a leaked entry must not serve
     * it */
    ucs_list_for_each(entry, &span_registry_list, list) {
        if (entry->owner == owner) {
            __atomic_store_n(&entry->valid, 0, __ATOMIC_RELAXED);
            ++held;
        }
    }
    pthread_mutex_unlock(&span_registry_lock);
    if (held > 0) {
        ucs_warn("span md %p: %u registrations were not released before "
                 "it closed: they are never served again", owner, held);
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
