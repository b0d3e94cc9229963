/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The twin state of every open twin iface, found from the iface pointer by
 * a lock-free table, and the inner ops that the open twins share, which
 * the ops' fast paths call with no lookup (span_iface_table.c).
 */
#ifndef SPAN_IFACE_TABLE_H_
#define SPAN_IFACE_TABLE_H_

#include "span_split.h"
#include "copy/span_vmm_copy.h"

/* Slots of the table of twin ifaces; a power of 2 */
#define SPAN_IFACE_TABLE_SIZE 2048

/* The ops reach the table's data with no GOT load: it is this library's */
#define SPAN_IFACE_HIDDEN __attribute__((visibility("hidden")))

typedef struct span_iface {
    uct_iface_ops_t    ops;       /* the inner transport's, as opened */
    void               *inner_internal_ops; /* uct_base_iface_t's, as opened */
    /* the twin's copy of them: SGL ops, whose rkeys and memhs span would
     * have to translate per element, are neither advertised nor reachable */
    void               *internal_ops[SPAN_UCX_INTERNAL_OPS_MAX];
    uint64_t           max_op;    /* chunk overlap: ops of at most this many
                                     bytes fit in a chunk; 0: no chunks */
    size_t             put_max_iov;
    size_t             get_max_iov;
    size_t             get_max_zcopy; /* what the twin offers where the
                                         inner offers none; 0: as inner */
    int                put_zcopy_any; /* put zero-copy of any length: the
                                         inner's minimum is no limit of its
                                         op (rocm_ipc) */
    /* the inner transport's SGL zero-copy ops, NULL where it has none,
     * and the most elements each takes (span_sgl.c) */
    void               *inner_put_sgl;
    void               *inner_get_sgl;
    size_t             inner_sgl_max[2];
    int                get_zcopy_offered; /* the twin's get zero-copy */
    int                memh_unread; /* the inner MD registers nothing, so
                                       its transport reads no local memh */
    int                memh_unset; /* UCP may hand it unset memhs: the
                                      inner MD needs none, and UCX is 1.15
                                      or earlier (rma_memh_unset) */
    int                keyless;   /* the inner MD packs no key, so its
                                     transport reads none: ops with no key
                                     (UCT_INVALID_RKEY, 0) pass as they are */
    /* short and bcopy RMA of its own, NULL where none (span_bounce.h) */
    struct span_bounce_pool *bounce;
    span_split_queue_t queue;
    /* the vendor of the twin's device memory, NULL where none was built */
    const span_vmm_copy_ops_t *copy_ops;
    const span_vmm_copy_params_t *copy_params; /* its MD's */
    span_vmm_copy_t    *copy;     /* VMM copies: made on the first one */
} span_iface_t;

/* A slot of the table: span_iface_table.c says how they are used */
typedef struct span_iface_slot {
    uct_iface_h   key;
    span_iface_t *iface;
} span_iface_slot_t;

/* Reached through a pointer, not as an array: one base register then
 * serves both words of a slot */
extern SPAN_IFACE_HIDDEN span_iface_slot_t *span_iface_table;

/* Of the ops with a fast path (span_iface_uniform_op) */
extern SPAN_IFACE_HIDDEN uct_iface_ops_t span_iface_uniform_ops;

/* Of put and get zcopy, while every open twin has memh_unread
 * (span_iface_unread_op) */
extern SPAN_IFACE_HIDDEN uct_iface_ops_t span_iface_unread_ops;

/* Adds iface, whose twin state is siface; UCS_ERR_EXCEEDS_LIMIT where
 * too many twin ifaces are open */
ucs_status_t span_iface_table_insert(uct_iface_h iface, span_iface_t *siface);

/* Removes iface and returns its twin state; ucs_fatal where iface is not
 * in the table (only a twin's close removes, once) */
span_iface_t *span_iface_table_remove(uct_iface_h iface);

/* The twin state of iface, which is not in the slot of its hash; ucs_fatal
 * where iface is not in the table (only a twin's op looks it up) */
span_iface_t *span_iface_table_probe(uct_iface_h iface);

/* A multiply by a 32-bit odd constant is one instruction; every address bit
 * below the 35th reaches the slot index, so page-aligned ifaces spread as
 * well as heap ones */
static UCS_F_ALWAYS_INLINE span_iface_slot_t *
span_iface_slot(uct_iface_h iface)
{
    return &span_iface_table[((uintptr_t)iface * 0x5bd1e995ul >> 24) &
                             (SPAN_IFACE_TABLE_SIZE - 1)];
}

/* The twin state of iface, a twin's: the slot of its hash holds nearly
 * every one, and one compare finds it */
static UCS_F_ALWAYS_INLINE span_iface_t *span_iface_get(uct_iface_h iface)
{
    span_iface_slot_t *slot = span_iface_slot(iface);

    if (ucs_likely(__atomic_load_n(&slot->key, __ATOMIC_ACQUIRE) == iface)) {
        return __atomic_load_n(&slot->iface, __ATOMIC_RELAXED);
    }
    return span_iface_table_probe(iface);
}

/* The inner op _name (short, bcopy gets, atomics, put and get zcopy) of
 * every open twin that has it, where they are the same one (one transport
 * per process, the common case, or transports that lack the op), else one
 * that finds the ep's iface in the table and calls its inner op: the op's
 * fast path calls it with no lookup and no test. Read by a twin of an open
 * iface that has the op, it is never NULL. */
#define span_iface_uniform_op(_name) \
    __atomic_load_n(&span_iface_uniform_ops._name, __ATOMIC_RELAXED)

/* span_iface_uniform_op(_name) of put or get zcopy while every open twin's
 * transport reads no local memh (its MD registers nothing: UCP hands it
 * none), so that a twin's op may pass the caller's iov, twin memhs and
 * all, as it is; NULL while one may read them. Read by a twin of an open
 * iface: a twin that reads memhs clears it as it joins, and it is set
 * again only once every twin closed. One load serves as the test and the
 * op. */
#define span_iface_unread_op(_name) \
    __atomic_load_n(&span_iface_unread_ops._name, __ATOMIC_RELAXED)

#endif
