/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The table of twin ifaces.
 *
 * Open addressing with linear probing. A slot's key goes from NULL to an
 * iface, to a tombstone when it closes, and a tombstone may take a new iface;
 * a slot never becomes NULL again, so a lookup that races with an open or a
 * close of another iface still finds its own, and one that meets NULL knows
 * the iface is not there. An open takes the first free slot (NULL or
 * tombstone) from its hash; the table is at most half full, so there is one
 * and probes stay short. The first open allocates the table and the last
 * close frees it (no iface, no reader), which also clears the tombstones.
 * Writers hold the lock; readers take none.
 *
 * Why a table, and ops patched in place: a twin iface is the inner
 * transport's own object (its ep, iface and AM paths stay the inner ones,
 * unwrapped), so a twin op knows only the ep, whose iface pointer is the
 * key; the twin state is found here in one compare. Its size bounds the
 * twin ifaces a process may have open at once (SPAN_IFACE_MAX, 1024): an
 * open past it fails with UCS_ERR_EXCEEDS_LIMIT and a log line.
 */
#include "span_iface_table.h"
#include "base/span_fork.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* Twin ifaces open at once in a process: at most half the slots, which
 * keeps probes short */
#define SPAN_IFACE_MAX       (SPAN_IFACE_TABLE_SIZE / 2)
#define SPAN_IFACE_TOMBSTONE ((uct_iface_h)(uintptr_t)1)

span_iface_slot_t      *span_iface_table;
static unsigned        span_iface_count;
static pthread_mutex_t span_iface_lock = PTHREAD_MUTEX_INITIALIZER;

static const span_fork_handlers_t span_iface_fork = {.lock = &span_iface_lock};

static void UCS_F_CTOR span_iface_fork_register(void)
{
    span_fork_register(SPAN_FORK_IFACE, &span_iface_fork);
}

/*
 * Written under the lock, as twins join: an op takes the inner op of the
 * first twin that has it, and keeps it, or becomes the lookup op of
 * span_iface_lookup_ops for good once a twin with another joins, until the
 * last twin closes and both tables are cleared. A twin that lacks an op
 * does not count: it never reaches the twin's op (span_ep_patch leaves it
 * absent). span_iface_joined_ops holds the first inner op of each.
 */
uct_iface_ops_t        span_iface_uniform_ops;
static uct_iface_ops_t span_iface_joined_ops;
uct_iface_ops_t        span_iface_unread_ops;
static int             span_iface_all_unread; /* every open twin's */

/* The inner op of ep's iface, found in the table: what the fast paths call
 * while the open twins' inner ops differ */
#define SPAN_IFACE_LOOKUP_OP(_op, _params, ...) \
    static ucs_status_t span_iface_lookup_##_op _params \
    { \
        return span_iface_get(ep->iface)->ops.ep_##_op(__VA_ARGS__); \
    }

SPAN_IFACE_LOOKUP_OP(put_short,
                     (uct_ep_h ep, const void *buffer, unsigned length,
                      uint64_t remote_addr, uct_rkey_t rkey),
                     ep, buffer, length, remote_addr, rkey)

SPAN_IFACE_LOOKUP_OP(get_short,
                     (uct_ep_h ep, void *buffer, unsigned length,
                      uint64_t remote_addr, uct_rkey_t rkey),
                     ep, buffer, length, remote_addr, rkey)

SPAN_IFACE_LOOKUP_OP(get_bcopy,
                     (uct_ep_h ep, uct_unpack_callback_t unpack_cb, void *arg,
                      size_t length, uint64_t remote_addr, uct_rkey_t rkey,
                      uct_completion_t *comp),
                     ep, unpack_cb, arg, length, remote_addr, rkey, comp)

SPAN_IFACE_LOOKUP_OP(put_zcopy,
                     (uct_ep_h ep, const uct_iov_t *iov, size_t iovcnt,
                      uint64_t remote_addr, uct_rkey_t rkey,
                      uct_completion_t *comp),
                     ep, iov, iovcnt, remote_addr, rkey, comp)

SPAN_IFACE_LOOKUP_OP(get_zcopy,
                     (uct_ep_h ep, const uct_iov_t *iov, size_t iovcnt,
                      uint64_t remote_addr, uct_rkey_t rkey,
                      uct_completion_t *comp),
                     ep, iov, iovcnt, remote_addr, rkey, comp)

SPAN_IFACE_LOOKUP_OP(atomic_cswap64,
                     (uct_ep_h ep, uint64_t compare, uint64_t swap,
                      uint64_t remote_addr, uct_rkey_t rkey, uint64_t *result,
                      uct_completion_t *comp),
                     ep, compare, swap, remote_addr, rkey, result, comp)

SPAN_IFACE_LOOKUP_OP(atomic_cswap32,
                     (uct_ep_h ep, uint32_t compare, uint32_t swap,
                      uint64_t remote_addr, uct_rkey_t rkey, uint32_t *result,
                      uct_completion_t *comp),
                     ep, compare, swap, remote_addr, rkey, result, comp)

SPAN_IFACE_LOOKUP_OP(atomic32_post,
                     (uct_ep_h ep, unsigned opcode, uint32_t value,
                      uint64_t remote_addr, uct_rkey_t rkey),
                     ep, opcode, value, remote_addr, rkey)

SPAN_IFACE_LOOKUP_OP(atomic64_post,
                     (uct_ep_h ep, unsigned opcode, uint64_t value,
                      uint64_t remote_addr, uct_rkey_t rkey),
                     ep, opcode, value, remote_addr, rkey)

SPAN_IFACE_LOOKUP_OP(atomic32_fetch,
                     (uct_ep_h ep, unsigned opcode, uint32_t value,
                      uint32_t *result, uint64_t remote_addr, uct_rkey_t rkey,
                      uct_completion_t *comp),
                     ep, opcode, value, result, remote_addr, rkey, comp)

SPAN_IFACE_LOOKUP_OP(atomic64_fetch,
                     (uct_ep_h ep, unsigned opcode, uint64_t value,
                      uint64_t *result, uint64_t remote_addr, uct_rkey_t rkey,
                      uct_completion_t *comp),
                     ep, opcode, value, result, remote_addr, rkey, comp)

#define SPAN_IFACE_UNIFORM_JOIN(_ops, _name) \
    if ((_ops)->ep_##_name != NULL) { \
        if (span_iface_joined_ops.ep_##_name == NULL) { \
            span_iface_joined_ops.ep_##_name = (_ops)->ep_##_name; \
            __atomic_store_n(&span_iface_uniform_ops.ep_##_name, \
                             (_ops)->ep_##_name, __ATOMIC_RELAXED); \
        } else if (span_iface_joined_ops.ep_##_name != \
                   (_ops)->ep_##_name) { \
            __atomic_store_n(&span_iface_uniform_ops.ep_##_name, \
                             span_iface_lookup_##_name, __ATOMIC_RELAXED); \
        } \
    }

/* Under the lock, as a twin joins the open ones (first: the first to) */
static void span_iface_uniform_join(const span_iface_t *siface, int first)
{
    const uct_iface_ops_t *ops = &siface->ops;

    SPAN_IFACE_UNIFORM_JOIN(ops, put_short)
    SPAN_IFACE_UNIFORM_JOIN(ops, get_short)
    SPAN_IFACE_UNIFORM_JOIN(ops, get_bcopy)
    SPAN_IFACE_UNIFORM_JOIN(ops, put_zcopy)
    SPAN_IFACE_UNIFORM_JOIN(ops, get_zcopy)
    SPAN_IFACE_UNIFORM_JOIN(ops, atomic_cswap64)
    SPAN_IFACE_UNIFORM_JOIN(ops, atomic_cswap32)
    SPAN_IFACE_UNIFORM_JOIN(ops, atomic32_post)
    SPAN_IFACE_UNIFORM_JOIN(ops, atomic64_post)
    SPAN_IFACE_UNIFORM_JOIN(ops, atomic32_fetch)
    SPAN_IFACE_UNIFORM_JOIN(ops, atomic64_fetch)
    /* cleared before the twin's ops can run, never set while it is open */
    span_iface_all_unread = siface->memh_unread &&
                            (first || span_iface_all_unread);
    __atomic_store_n(&span_iface_unread_ops.ep_put_zcopy,
                     span_iface_all_unread ?
                     span_iface_uniform_ops.ep_put_zcopy : NULL,
                     __ATOMIC_RELAXED);
    __atomic_store_n(&span_iface_unread_ops.ep_get_zcopy,
                     span_iface_all_unread ?
                     span_iface_uniform_ops.ep_get_zcopy : NULL,
                     __ATOMIC_RELAXED);
}

static span_iface_slot_t *span_iface_next(span_iface_slot_t *slot)
{
    return (slot == &span_iface_table[SPAN_IFACE_TABLE_SIZE - 1]) ?
           span_iface_table : slot + 1;
}

span_iface_t *span_iface_table_probe(uct_iface_h iface)
{
    span_iface_slot_t *slot;
    uct_iface_h key;
    unsigned n;

    /* only a twin's patched op looks its iface up, and it is open until
     * its close returns */
    if (span_iface_table == NULL) {
        ucs_fatal("span iface %p: twin op called while no twin iface is "
                  "open", iface);
    }
    for (slot = span_iface_slot(iface), n = 0; n < SPAN_IFACE_TABLE_SIZE;
         slot = span_iface_next(slot), ++n) {
        key = __atomic_load_n(&slot->key, __ATOMIC_ACQUIRE);
        if (key == iface) {
            return __atomic_load_n(&slot->iface, __ATOMIC_RELAXED);
        } else if (key == NULL) {
            break;
        }
    }
    ucs_fatal("span iface %p: twin op called, but the iface is not in the "
              "table of twin ifaces (%u open, %u slots probed from %p)",
              iface, span_iface_count, n, span_iface_slot(iface));
}

ucs_status_t span_iface_table_insert(uct_iface_h iface, span_iface_t *siface)
{
    ucs_status_t status = UCS_OK;
    span_iface_slot_t *slot;

    pthread_mutex_lock(&span_iface_lock);
    if (span_iface_count == SPAN_IFACE_MAX) {
        ucs_error("span iface table: %u twin ifaces are open, no more can be; close "
                  "some first", span_iface_count);
        status = UCS_ERR_EXCEEDS_LIMIT;
        goto out;
    }

    if (span_iface_table == NULL) {
        span_iface_table = calloc(SPAN_IFACE_TABLE_SIZE,
                                  sizeof(*span_iface_table));
        if (span_iface_table == NULL) {
            ucs_error("span iface table: no memory for the table of twin ifaces");
            status = UCS_ERR_NO_MEMORY;
            goto out;
        }
    }

    for (slot = span_iface_slot(iface);
         (slot->key != NULL) && (slot->key != SPAN_IFACE_TOMBSTONE);
         slot = span_iface_next(slot)) {
    }

    span_iface_uniform_join(siface, span_iface_count == 0);
    __atomic_store_n(&slot->iface, siface, __ATOMIC_RELAXED);
    __atomic_store_n(&slot->key, iface, __ATOMIC_RELEASE);
    ++span_iface_count;
out:
    pthread_mutex_unlock(&span_iface_lock);
    return status;
}

span_iface_t *span_iface_table_remove(uct_iface_h iface)
{
    span_iface_t *siface = NULL;
    span_iface_slot_t *slot;
    unsigned n, count;

    pthread_mutex_lock(&span_iface_lock);
    for (slot = span_iface_slot(iface), n = 0;
         (siface == NULL) && (n < SPAN_IFACE_TABLE_SIZE);
         slot = span_iface_next(slot), ++n) {
        if (slot->key == iface) {
            siface = slot->iface;
            __atomic_store_n(&slot->key, SPAN_IFACE_TOMBSTONE,
                             __ATOMIC_RELEASE);
        }
    }
    if ((siface != NULL) && (--span_iface_count == 0)) {
        memset(&span_iface_uniform_ops, 0, sizeof(span_iface_uniform_ops));
        memset(&span_iface_joined_ops, 0, sizeof(span_iface_joined_ops));
        memset(&span_iface_unread_ops, 0, sizeof(span_iface_unread_ops));
        span_iface_all_unread = 0;
        free(span_iface_table);
        span_iface_table = NULL;
    }
    count = span_iface_count;
    pthread_mutex_unlock(&span_iface_lock);

    /* only the twin's patched close removes, once, from a table that holds
     * its iface since its open */
    if (siface == NULL) {
        ucs_fatal("span iface %p: closed, but not in the table of "
                  "twin ifaces (%u open)", iface, count);
    }
    return siface;
}
