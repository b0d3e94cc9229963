/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The key sizes of the twin MDs open in this process (span_rkey_sizes.h):
 * one table for the process, under its lock, which a fork leaves to the
 * child unlocked (base/span_fork.h).
 */
#include "span_rkey_sizes.h"
#include "base/span_fork.h"

#include <ucs/debug/log_def.h>
#include <pthread.h>

/* Kinds of open twin MDs: a few per inner component */
#define SPAN_RKEY_SIZES 64

/* Key sizes of the twin MDs open in this process, per inner component */
typedef struct span_rkey_size {
    uint32_t component_id;
    size_t   key_size;
    unsigned count;       /* twin MDs open with this key size; 0: free */
} span_rkey_size_t;

static span_rkey_size_t span_rkey_sizes[SPAN_RKEY_SIZES];
static pthread_mutex_t  span_rkey_sizes_lock = PTHREAD_MUTEX_INITIALIZER;

static const span_fork_handlers_t span_rkey_sizes_fork = {
    .lock = &span_rkey_sizes_lock
};

static void UCS_F_CTOR span_rkey_sizes_fork_register(void)
{
    span_fork_register(SPAN_FORK_RKEY_SIZES, &span_rkey_sizes_fork);
}

static span_rkey_size_t *span_rkey_size_find(uint32_t component_id,
                                             size_t key_size)
{
    unsigned i;

    for (i = 0; i < SPAN_RKEY_SIZES; ++i) {
        if ((span_rkey_sizes[i].count > 0) &&
            (span_rkey_sizes[i].component_id == component_id) &&
            (span_rkey_sizes[i].key_size == key_size)) {
            return &span_rkey_sizes[i];
        }
    }
    return NULL;
}

ucs_status_t span_rkey_size_add(uint32_t component_id, size_t key_size)
{
    ucs_status_t status = UCS_OK;
    span_rkey_size_t *size;

    pthread_mutex_lock(&span_rkey_sizes_lock);
    size = span_rkey_size_find(component_id, key_size);
    if (size == NULL) {
        for (size = span_rkey_sizes;
             (size < span_rkey_sizes + SPAN_RKEY_SIZES) && (size->count > 0);
             ++size) {
        }
        if (size == span_rkey_sizes + SPAN_RKEY_SIZES) {
            ucs_error("span rkey: more than %d kinds of twin MD are open at "
                      "once", SPAN_RKEY_SIZES);
            status = UCS_ERR_EXCEEDS_LIMIT;
            goto out;
        }
        size->component_id = component_id;
        size->key_size     = key_size;
    }
    ++size->count;
out:
    pthread_mutex_unlock(&span_rkey_sizes_lock);
    return status;
}

void span_rkey_size_remove(uint32_t component_id, size_t key_size)
{
    span_rkey_size_t *size;

    pthread_mutex_lock(&span_rkey_sizes_lock);
    size = span_rkey_size_find(component_id, key_size);
    if (size != NULL) {
        --size->count;
    }
    pthread_mutex_unlock(&span_rkey_sizes_lock);
}

/* 1 where a twin MD of the component with inner keys of key_size bytes is
 * open; 0 where only twins of other key sizes are (*other_p: one of
 * those), -1 where none is */
static int span_rkey_size_open(uint32_t component_id, size_t key_size,
                               size_t *other_p)
{
    int found = -1;
    unsigned i;

    pthread_mutex_lock(&span_rkey_sizes_lock);
    for (i = 0; (i < SPAN_RKEY_SIZES) && (found < 1); ++i) {
        if ((span_rkey_sizes[i].count > 0) &&
            (span_rkey_sizes[i].component_id == component_id)) {
            found    = (span_rkey_sizes[i].key_size == key_size);
            *other_p = span_rkey_sizes[i].key_size;
        }
    }
    pthread_mutex_unlock(&span_rkey_sizes_lock);
    return found;
}

ucs_status_t span_rkey_parse_peer(const void *buffer, span_rkey_desc_t *desc)
{
    uint32_t component_id;
    ucs_status_t status;
    size_t size, other;
    int open;

    /* every twin MD packs at least the header: it says how much more */
    status = span_rkey_packed_size(buffer, &size);
    if (status != UCS_OK) {
        return status;
    }

    status = span_rkey_parse(buffer, size, desc);
    if (status != UCS_OK) {
        return status;
    }

    component_id = desc->component_id;
    open         = span_rkey_size_open(component_id, desc->key_size, &other);
    if (open < 0) {
        ucs_debug("span rkey %p: no twin MD of inner component 0x%x is open "
                  "here", buffer, component_id);
        return UCS_ERR_UNREACHABLE;
    }
    if (!open && !desc->span_vmm) {
        ucs_error("span rkey %p: carries %zu-byte inner keys, component 0x%x "
                  "packs %zu-byte keys", buffer, desc->key_size, component_id,
                  other);
        return UCS_ERR_INVALID_PARAM;
    }
    return UCS_OK;
}
