/*
 * Registry of the registrations of every twin MD: a request for a range
 * that a live registration covers exactly, and whose capabilities (access
 * flags) it has all, is served by it (refcounted), and a registration whose
 * memory was freed is never served again.
 *
 * Invalidation only marks: the owners of a registration that went stale
 * keep their handle until they deregister it (their later use of it is
 * refused, not a crash), while no new request can match it. Sharing is
 * only sound while memory events are seen (span_ucm.h); a twin MD that
 * could not subscribe registers every request anew.
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
    unsigned              refcount;
    int                   valid;
    span_registry_stats_t *stats;
} span_registry_entry_t;

/* A valid entry of owner for exactly this range and memory that has every
 * one of caps, with one more reference, or NULL. An entry of the range whose
 * memory has another identity missed its free event: it is made stale. */
span_registry_entry_t *span_registry_find(const void *owner, uint64_t start,
                                          uint64_t length,
                                          ucs_memory_type_t mem_type,
                                          uint64_t identity, unsigned caps);

/* A valid entry of owner that holds [start, start + length) whole, of this
 * identity (not 0), that has every one of caps, with one more reference, or
 * NULL */
span_registry_entry_t *span_registry_find_within(const void *owner,
                                                 uint64_t start,
                                                 uint64_t length,
                                                 ucs_memory_type_t mem_type,
                                                 uint64_t identity,
                                                 unsigned caps);

/* Lists an entry with one reference */
void span_registry_add(span_registry_entry_t *entry);

/* Drops a reference; 1 when it was the last (the entry is unlisted) */
int span_registry_release(span_registry_entry_t *entry);

/* Whether the entry's memory is still there as far as events told */
int span_registry_valid(span_registry_entry_t *entry);

/* Marks the entries overlapping [start, start + length) stale */
void span_registry_invalidate(uint64_t start, uint64_t length);

#endif
