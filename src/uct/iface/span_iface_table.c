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
 */
#include "span_iface_table.h"
#include "base/span_fork.h"

#include <pthread.h>
#include <stdlib.h>

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
 * Written only while no twin iface is open (no op runs), and the flag is
 * published after; a twin with other ones clears the flag until the last
 * twin closes.
 */
uct_iface_ops_t span_iface_uniform_ops;
int             span_iface_uniform_flag;

static int span_iface_same_fast_ops(const uct_iface_ops_t *a,
                                    const uct_iface_ops_t *b)
{
    return (a->ep_put_short == b->ep_put_short) &&
           (a->ep_get_short == b->ep_get_short) &&
           (a->ep_get_bcopy == b->ep_get_bcopy) &&
           (a->ep_put_zcopy == b->ep_put_zcopy) &&
           (a->ep_get_zcopy == b->ep_get_zcopy) &&
           (a->ep_atomic_cswap64 == b->ep_atomic_cswap64) &&
           (a->ep_atomic_cswap32 == b->ep_atomic_cswap32) &&
           (a->ep_atomic32_post == b->ep_atomic32_post) &&
           (a->ep_atomic64_post == b->ep_atomic64_post) &&
           (a->ep_atomic32_fetch == b->ep_atomic32_fetch) &&
           (a->ep_atomic64_fetch == b->ep_atomic64_fetch);
}

/* Under the lock, as a twin with these inner ops joins the open ones */
static void span_iface_uniform_join(const uct_iface_ops_t *ops)
{
    if (span_iface_count == 0) {
        span_iface_uniform_ops = *ops;
        __atomic_store_n(&span_iface_uniform_flag, 1, __ATOMIC_RELEASE);
    } else if (!span_iface_same_fast_ops(&span_iface_uniform_ops, ops)) {
        __atomic_store_n(&span_iface_uniform_flag, 0, __ATOMIC_RELAXED);
    }
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
        ucs_fatal("span: iface %p: twin op called while no twin iface is "
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
    ucs_fatal("span: iface %p: twin op called, but the iface is not in the "
              "table of twin ifaces (%u open, %u slots probed from %p)",
              iface, span_iface_count, n, span_iface_slot(iface));
}

ucs_status_t span_iface_table_insert(uct_iface_h iface, span_iface_t *siface)
{
    ucs_status_t status = UCS_OK;
    span_iface_slot_t *slot;

    pthread_mutex_lock(&span_iface_lock);
    if (span_iface_count == SPAN_IFACE_MAX) {
        ucs_error("span: %u twin ifaces are open, no more can be; close "
                  "some first", span_iface_count);
        status = UCS_ERR_EXCEEDS_LIMIT;
        goto out;
    }

    if (span_iface_table == NULL) {
        span_iface_table = calloc(SPAN_IFACE_TABLE_SIZE,
                                  sizeof(*span_iface_table));
        if (span_iface_table == NULL) {
            ucs_error("span: no memory for the table of twin ifaces");
            status = UCS_ERR_NO_MEMORY;
            goto out;
        }
    }

    for (slot = span_iface_slot(iface);
         (slot->key != NULL) && (slot->key != SPAN_IFACE_TOMBSTONE);
         slot = span_iface_next(slot)) {
    }

    span_iface_uniform_join(&siface->ops);
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
        __atomic_store_n(&span_iface_uniform_flag, 0, __ATOMIC_RELAXED);
        free(span_iface_table);
        span_iface_table = NULL;
    }
    count = span_iface_count;
    pthread_mutex_unlock(&span_iface_lock);

    /* only the twin's patched close removes, once, from a table that holds
     * its iface since its open */
    if (siface == NULL) {
        ucs_fatal("span: closing iface %p, which is not in the table of "
                  "twin ifaces (%u open)", iface, count);
    }
    return siface;
}
