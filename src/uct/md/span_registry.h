/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Registry of the registrations of every twin MD: a request for a range
 * that a live registration covers exactly, and whose capabilities (access
 * flags) it has all, is served by it (refcounted), and a registration whose
 * memory was freed is never served again. A request for a buffer inside a
 * device unit (a physical allocation or VMM handle) of any registration is
 * served by it too, found by the unit's buffer id.
 *
 * Each thread keeps the unit of its last such hit in a slot of its own
 * (span_registry.c): the next request inside it is served, and a reference
 * the thread took there released, with no lock and no shared counter.
 * Whatever slots hold it, an entry is torn down by the release of its last
 * user, whichever thread's slot handed out the references, and by nothing
 * else: by its owner's deregistration, before the owner closes. A slot lets
 * its entry go, under a handshake with the slot's thread, whenever a
 * release may be the last, and when the owner closes
 * (span_registry_purge): no slot holds an entry of a closed owner.
 *
 * Invalidation only marks: the owners of a registration that went stale
 * keep their handle until they deregister it (their later use of it is
 * refused, not a crash), while no new request can match it. Sharing is
 * only sound while memory events are seen (span_ucm.h); a twin MD that
 * could not subscribe registers every request anew.
 *
 * Why not UCX's ucs_rcache: it merges and widens regions, and the range
 * of a registration is what its key carries and every peer op is checked
 * against, so a widened hit would let a peer reach what was never
 * registered; and device units are hit by their buffer id, with one driver
 * call, which also tells memory allocated again at an old address apart.
 */
#ifndef SPAN_REGISTRY_H_
#define SPAN_REGISTRY_H_

#include <ucs/datastruct/hlist.h>
#include <ucs/datastruct/list.h>
#include <ucs/memory/memory_type.h>
#include <stdint.h>

/* What a twin MD did, for its user (logged when it closes) */
typedef struct span_registry_stats {
    uint64_t registrations; /* made with the inner MD */
    uint64_t hits;          /* requests served by a live registration */
    uint64_t invalidations; /* registrations whose memory was freed */
    uint64_t chunks;        /* inner registrations those made */
} span_registry_stats_t;

struct span_registry_entry;

/* A device unit of an entry, indexed by its buffer id */
typedef struct span_registry_unit {
    ucs_hlist_link_t           link;
    struct span_registry_entry *entry;
    uint64_t                   id;
} span_registry_unit_t;

typedef struct span_registry_entry {
    ucs_list_link_t       list;        /* every entry, for wide events */
    ucs_hlist_link_t      by_start;    /* bucket of its start */
    ucs_hlist_link_t      by_identity; /* bucket of its identity, if any */
    ucs_hlist_link_t      by_region;   /* for events (span_registry.c) */
    const void            *owner; /* the twin MD; NULL: not in the registry */
    uint64_t              start;
    uint64_t              length;
    ucs_memory_type_t     mem_type;
    uint64_t              identity; /* of the memory (CUDA buffer ids), 0 */
    unsigned              caps;     /* what the registration allows: it
                                       serves requests for a subset */
    uint64_t              unit_size; /* of its units but the last; 0: one */
    uint32_t              num_units; /* in units, indexed; 0: none */
    span_registry_unit_t  *units;
    int64_t               refcount;  /* taken under the lock, less those
                                        released under it (threads' slots
                                        count the rest: > 0 while a slot
                                        holds the entry) */
    unsigned              pins;      /* slots that hold the entry */
    int                   valid;
    span_registry_stats_t *stats;
} span_registry_entry_t;

/* Whether the memory at addr is still the unit of that buffer id, as the
 * entry's owner tells */
typedef int (*span_registry_check_func_t)(const void *owner, uint64_t addr,
                                          uint64_t id);

/* A valid entry of owner for exactly this range and memory that has every
 * one of caps, with one more reference, or NULL. An entry of the range whose
 * memory has another identity missed its free event: it is made stale. */
span_registry_entry_t *span_registry_find(const void *owner, uint64_t start,
                                          uint64_t length,
                                          ucs_memory_type_t mem_type,
                                          uint64_t identity, unsigned caps);

/* A valid entry of owner that holds [start, start + length) whole, whose
 * unit at start has buffer id id, that has every one of caps, with one more
 * reference, or NULL. The units past that one the range reaches are checked
 * with check; one that holds other memory now makes the entry stale. */
span_registry_entry_t *span_registry_find_within(const void *owner,
                                                 uint64_t start,
                                                 uint64_t length,
                                                 ucs_memory_type_t mem_type,
                                                 uint64_t id, unsigned caps,
                                                 span_registry_check_func_t check);

/* Lists an entry with one reference, and its units (num_units of them, ids
 * filled in) under their buffer ids */
void span_registry_add(span_registry_entry_t *entry);

/* Drops a reference, taken on any thread; 1 when it was the last one: the
 * entry is unlisted, no slot holds it, and the caller tears it down */
int span_registry_release(span_registry_entry_t *entry);

/* Before owner closes, its entries released (each one torn down by its
 * last release already): every slot that holds an entry of owner lets it
 * go, their hits are added to its stats, and an entry still held (a leak)
 * is made stale with a warning, never served again (to a new owner at the
 * same address either) */
void span_registry_purge(const void *owner);

/* Whether the entry's memory is still there as far as events told */
int span_registry_valid(span_registry_entry_t *entry);

/* Marks the entries overlapping [start, start + length) stale */
void span_registry_invalidate(uint64_t start, uint64_t length);

#endif
