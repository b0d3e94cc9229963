/*
 * Twin ifaces.
 *
 * A twin iface is the inner iface object itself: the twin transport's
 * iface_open (span_tl.c) opens the inner iface and span_iface_attach()
 * replaces, in the iface's own ops table, the entries that take an rkey or
 * a local memh. Everything else (AM, progress, flush, wireup) stays the
 * inner transport's, at no cost. A replaced op translates span rkeys and memhs
 * to inner ones, checks the remote range, and calls the original op, found
 * through a lock-free table keyed by the iface pointer.
 */
#include "span_iface.h"
#include "md/span_md.h"
#include "span_split.h"
#include "resolvers/span_cuda_copy.h"
#include "resolvers/span_rocm_copy.h"
#include "resolvers/span_nvml.h"
#include "base/span_fork.h"

#include <ucs/sys/compiler_def.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* Slots of the table of twin ifaces; a power of 2 */
#define SPAN_IFACE_TABLE_SIZE   2048
/* Twin ifaces open at once in a process: at most half the slots, which
 * keeps probes short */
#define SPAN_IFACE_MAX          (SPAN_IFACE_TABLE_SIZE / 2)
#define SPAN_IFACE_TOMBSTONE    ((uct_iface_h)(uintptr_t)1)

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
    span_split_queue_t queue;
    span_cuda_copy_t   *copy;     /* VMM copies: made on the first one */
    span_rocm_copy_t   *rocm_copy; /* the same, of ROCm units */
} span_iface_t;

/*
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
typedef struct span_iface_slot {
    uct_iface_h   key;
    span_iface_t *iface;
} span_iface_slot_t;

/* Reached through a pointer, not as an array: one base register then
 * serves both words of a slot */
static span_iface_slot_t *span_iface_table;
static unsigned          span_iface_count;
static pthread_mutex_t   span_iface_lock = PTHREAD_MUTEX_INITIALIZER;

static const span_fork_handlers_t span_iface_fork = {.lock = &span_iface_lock};

static void UCS_F_CTOR span_iface_fork_register(void)
{
    span_fork_register(SPAN_FORK_IFACE, &span_iface_fork);
}

/*
 * The inner ops of the ops that make one access (short, bcopy gets,
 * atomics), while every open twin iface has the same ones (one transport
 * per process, the common case): their fast path then calls them with no
 * lookup. Written only while no twin iface is open (no op runs), and the
 * flag is published after; a twin with other ones clears the flag until
 * the last twin closes.
 */
static uct_iface_ops_t span_iface_uniform_ops;
static int             span_iface_uniform;

static int span_iface_same_access_ops(const uct_iface_ops_t *a,
                                      const uct_iface_ops_t *b)
{
    return (a->ep_put_short == b->ep_put_short) &&
           (a->ep_get_short == b->ep_get_short) &&
           (a->ep_get_bcopy == b->ep_get_bcopy) &&
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
        __atomic_store_n(&span_iface_uniform, 1, __ATOMIC_RELEASE);
    } else if (!span_iface_same_access_ops(&span_iface_uniform_ops, ops)) {
        __atomic_store_n(&span_iface_uniform, 0, __ATOMIC_RELAXED);
    }
}

/* A multiply by a 32-bit odd constant is one instruction; every address bit
 * below the 35th reaches the slot index, so page-aligned ifaces spread as
 * well as heap ones */
static UCS_F_ALWAYS_INLINE span_iface_slot_t *
span_iface_slot(uct_iface_h iface)
{
    return &span_iface_table[((uintptr_t)iface * 0x5bd1e995ul >> 24) &
                             (SPAN_IFACE_TABLE_SIZE - 1)];
}

static UCS_F_ALWAYS_INLINE span_iface_slot_t *
span_iface_next(span_iface_slot_t *slot)
{
    return (slot == &span_iface_table[SPAN_IFACE_TABLE_SIZE - 1]) ?
           span_iface_table : slot + 1;
}

static UCS_F_ALWAYS_INLINE uct_iface_h span_iface_key(span_iface_slot_t *slot)
{
    return __atomic_load_n(&slot->key, __ATOMIC_ACQUIRE);
}

static UCS_F_ALWAYS_INLINE span_iface_t *
span_iface_value(span_iface_slot_t *slot)
{
    return __atomic_load_n(&slot->iface, __ATOMIC_RELAXED);
}

/* The twin state of iface, or NULL where iface is not a twin's */
static span_iface_t *span_iface_find(uct_iface_h iface)
{
    span_iface_slot_t *slot;
    uct_iface_h key;
    unsigned n;

    if (span_iface_table == NULL) {
        return NULL;
    }
    for (slot = span_iface_slot(iface), n = 0; n < SPAN_IFACE_TABLE_SIZE;
         slot = span_iface_next(slot), ++n) {
        key = span_iface_key(slot);
        if (key == iface) {
            return span_iface_value(slot);
        } else if (key == NULL) {
            break;
        }
    }
    return NULL;
}

static UCS_F_NOINLINE span_iface_t *span_iface_get_slow(uct_iface_h iface)
{
    span_iface_t *siface = span_iface_find(iface);

    if (ucs_unlikely(siface == NULL)) {
        ucs_error("span: iface %p is not a twin iface (%u are open)", iface,
                  span_iface_count);
        abort();
    }
    return siface;
}

/* The slot of its hash holds nearly every iface: one compare finds it */
static UCS_F_ALWAYS_INLINE span_iface_t *span_iface_get(uct_iface_h iface)
{
    span_iface_slot_t *slot = span_iface_slot(iface);

    if (ucs_likely(span_iface_key(slot) == iface)) {
        return span_iface_value(slot);
    }
    return span_iface_get_slow(iface);
}

static ucs_status_t span_iface_insert(uct_iface_h key, span_iface_t *iface)
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

    for (slot = span_iface_slot(key);
         (slot->key != NULL) && (slot->key != SPAN_IFACE_TOMBSTONE);
         slot = span_iface_next(slot)) {
    }

    span_iface_uniform_join(&iface->ops);
    __atomic_store_n(&slot->iface, iface, __ATOMIC_RELAXED);
    __atomic_store_n(&slot->key, key, __ATOMIC_RELEASE);
    ++span_iface_count;
out:
    pthread_mutex_unlock(&span_iface_lock);
    return status;
}

static span_iface_t *span_iface_remove(uct_iface_h key)
{
    span_iface_t *iface = NULL;
    span_iface_slot_t *slot;
    unsigned n;

    pthread_mutex_lock(&span_iface_lock);
    for (slot = span_iface_slot(key), n = 0; n < SPAN_IFACE_TABLE_SIZE;
         slot = span_iface_next(slot), ++n) {
        if (slot->key == key) {
            iface = slot->iface;
            __atomic_store_n(&slot->key, SPAN_IFACE_TOMBSTONE,
                             __ATOMIC_RELEASE);
            break;
        }
    }
    if ((iface != NULL) && (--span_iface_count == 0)) {
        __atomic_store_n(&span_iface_uniform, 0, __ATOMIC_RELAXED);
        free(span_iface_table);
        span_iface_table = NULL;
    }
    pthread_mutex_unlock(&span_iface_lock);
    if (iface == NULL) {
        ucs_error("span: closing iface %p, which is not a twin iface", key);
        abort();
    }
    return iface;
}

static UCS_F_ALWAYS_INLINE const span_rkey_t *span_rkey(uct_rkey_t rkey)
{
    return (const span_rkey_t*)rkey;
}

/* Copies iov with inner memhs; the bytes it covers, or SIZE_MAX when an
 * entry crosses a local chunk end (or there are too many entries) */
static UCS_F_ALWAYS_INLINE size_t
span_iov_translate(uct_iov_t *dst, const uct_iov_t *src, size_t iovcnt)
{
    size_t i, total = 0;
    uint64_t avail;

    if (ucs_unlikely(iovcnt > SPAN_IOV_MAX)) {
        return SIZE_MAX;
    }

    for (i = 0; i < iovcnt; ++i) {
        dst[i]      = src[i];
        dst[i].memh = span_memh_inner(src[i].memh, src[i].buffer, &avail);
        if (ucs_unlikely((src[i].count > 1) ?
                         !span_iov_whole(&src[i], avail) :
                         (src[i].length > avail))) {
            return SIZE_MAX;
        }
        total += src[i].length * src[i].count;
    }
    return total;
}

/* For ops that cannot be split (AM, tag): an iov the translation refused */
static ucs_status_t span_iov_refused(const uct_iov_t *iov, size_t iovcnt)
{
    ucs_error("span: an iov of %zu entries from %p is longer than %d "
              "entries or crosses a chunk end, which this op cannot split",
              iovcnt, (iovcnt > 0) ? iov[0].buffer : NULL, SPAN_IOV_MAX);
    return UCS_ERR_UNSUPPORTED;
}

static size_t span_iov_length(const uct_iov_t *iov, size_t iovcnt)
{
    size_t i, total = 0;

    for (i = 0; i < iovcnt; ++i) {
        total += iov[i].length * iov[i].count;
    }
    return total;
}

/* The inner rkey of an access inside a range registered through one
 * chunk: the common case, checked with one add and one compare
 * (whole_length is 0 for any other, which only an empty access at its
 * base passes: the chunk of its base holds it); anything else (chunks, an
 * access outside) goes to the full check */
static UCS_F_ALWAYS_INLINE int
span_rkey_whole_fast(const span_rkey_t *rkey, uint64_t addr, size_t length,
                     uct_rkey_t *inner_p)
{
    uint64_t end;

    /* addr below the base wraps the offset, and the add carries or ends past
     * the extent */
    if (ucs_unlikely(__builtin_add_overflow(addr - rkey->win_base, length,
                                            &end) ||
                     (end > rkey->whole_length))) {
        return 0;
    }
    *inner_p = rkey->inner[0].rkey;
    return 1;
}

/*
 * The ops that make one access of _length bytes at remote_addr (short,
 * bcopy gets, atomics): where every twin has the same inner ops and the
 * access lies in an extent of one chunk, the fast version calls the inner
 * op with no lookup and no stack frame of its own; every other case takes
 * the slow version, which checks chunks and finds the iface in the table.
 * The arguments after _params name the inner op's, with key for the rkey.
 */
#define SPAN_EP_WHOLE_OP(_op, _length, _params, ...) \
    static UCS_F_NOINLINE ucs_status_t span_ep_##_op##_slow _params \
    { \
        ucs_status_t status; \
        uct_rkey_t key; \
        \
        status = span_rkey_whole(span_rkey(rkey), remote_addr, _length, \
                                 &key); \
        if (ucs_unlikely(status != UCS_OK)) { \
            return status; \
        } \
        return span_iface_get(ep->iface)->ops.ep_##_op(__VA_ARGS__); \
    } \
    \
    static ucs_status_t span_ep_##_op _params \
    { \
        uct_rkey_t key; \
        \
        if (ucs_likely(__atomic_load_n(&span_iface_uniform, \
                                       __ATOMIC_ACQUIRE) && \
                       span_rkey_whole_fast(span_rkey(rkey), remote_addr, \
                                            _length, &key))) { \
            return span_iface_uniform_ops.ep_##_op(__VA_ARGS__); \
        } \
        key = rkey; \
        return span_ep_##_op##_slow(__VA_ARGS__); \
    }

SPAN_EP_WHOLE_OP(put_short, length,
                 (uct_ep_h ep, const void *buffer, unsigned length,
                  uint64_t remote_addr, uct_rkey_t rkey),
                 ep, buffer, length, remote_addr, key)

SPAN_EP_WHOLE_OP(get_short, length,
                 (uct_ep_h ep, void *buffer, unsigned length,
                  uint64_t remote_addr, uct_rkey_t rkey),
                 ep, buffer, length, remote_addr, key)

SPAN_EP_WHOLE_OP(get_bcopy, length,
                 (uct_ep_h ep, uct_unpack_callback_t unpack_cb, void *arg,
                  size_t length, uint64_t remote_addr, uct_rkey_t rkey,
                  uct_completion_t *comp),
                 ep, unpack_cb, arg, length, remote_addr, key, comp)

SPAN_EP_WHOLE_OP(atomic_cswap64, sizeof(uint64_t),
                 (uct_ep_h ep, uint64_t compare, uint64_t swap,
                  uint64_t remote_addr, uct_rkey_t rkey, uint64_t *result,
                  uct_completion_t *comp),
                 ep, compare, swap, remote_addr, key, result, comp)

SPAN_EP_WHOLE_OP(atomic_cswap32, sizeof(uint32_t),
                 (uct_ep_h ep, uint32_t compare, uint32_t swap,
                  uint64_t remote_addr, uct_rkey_t rkey, uint32_t *result,
                  uct_completion_t *comp),
                 ep, compare, swap, remote_addr, key, result, comp)

SPAN_EP_WHOLE_OP(atomic32_post, sizeof(uint32_t),
                 (uct_ep_h ep, unsigned opcode, uint32_t value,
                  uint64_t remote_addr, uct_rkey_t rkey),
                 ep, opcode, value, remote_addr, key)

SPAN_EP_WHOLE_OP(atomic64_post, sizeof(uint64_t),
                 (uct_ep_h ep, unsigned opcode, uint64_t value,
                  uint64_t remote_addr, uct_rkey_t rkey),
                 ep, opcode, value, remote_addr, key)

SPAN_EP_WHOLE_OP(atomic32_fetch, sizeof(uint32_t),
                 (uct_ep_h ep, unsigned opcode, uint32_t value,
                  uint32_t *result, uint64_t remote_addr, uct_rkey_t rkey,
                  uct_completion_t *comp),
                 ep, opcode, value, result, remote_addr, key, comp)

SPAN_EP_WHOLE_OP(atomic64_fetch, sizeof(uint64_t),
                 (uct_ep_h ep, unsigned opcode, uint64_t value,
                  uint64_t *result, uint64_t remote_addr, uct_rkey_t rkey,
                  uct_completion_t *comp),
                 ep, opcode, value, result, remote_addr, key, comp)

typedef struct span_put_bcopy_ctx {
    uct_pack_callback_t pack_cb;
    void               *arg;
    const span_rkey_t  *rkey;
    uint64_t            remote_addr;
    uint64_t            avail;   /* bytes of the chunk from remote_addr */
    ucs_status_t        status;
} span_put_bcopy_ctx_t;

/*
 * The length of a bcopy put is known only once it is packed. A transport
 * that packs into a bounce buffer then sends nothing past the extent or the
 * chunk; one that packs in place (self) has written it already, so the
 * start address is checked before, too.
 */
static size_t span_put_bcopy_pack(void *dest, void *arg)
{
    span_put_bcopy_ctx_t *ctx = arg;
    size_t length             = ctx->pack_cb(dest, ctx->arg);

    if (ucs_unlikely(!span_rkey_check(ctx->rkey, ctx->remote_addr, length))) {
        ctx->status = UCS_ERR_INVALID_ADDR;
        return 0;
    }
    if (ucs_unlikely(length > ctx->avail)) {
        span_rkey_log_crossing(ctx->rkey, ctx->remote_addr, length,
                               ctx->avail);
        ctx->status = UCS_ERR_UNSUPPORTED;
        return 0;
    }
    return length;
}

static ssize_t span_ep_put_bcopy(uct_ep_h ep, uct_pack_callback_t pack_cb,
                                 void *arg, uint64_t remote_addr,
                                 uct_rkey_t rkey)
{
    span_put_bcopy_ctx_t ctx = {pack_cb, arg, span_rkey(rkey), remote_addr, 0,
                                UCS_OK};
    uct_rkey_t inner;
    ssize_t ret;

    if (ucs_unlikely(!span_rkey_check(ctx.rkey, remote_addr, 1))) {
        return UCS_ERR_INVALID_ADDR;
    }

    inner = span_rkey_inner(ctx.rkey, remote_addr, &ctx.avail);
    ret   = span_iface_get(ep->iface)->ops.ep_put_bcopy(
            ep, span_put_bcopy_pack, &ctx, remote_addr, inner);
    return ucs_unlikely(ctx.status != UCS_OK) ? ctx.status : ret;
}

/* The same through ROCm's copy engine (span_rocm_copy.h) */
static ucs_status_t
span_ep_rocm_vmm_zcopy(span_iface_t *siface, int is_put, const uct_iov_t *iov,
                       size_t iovcnt, uint8_t *remote, const span_rkey_t *rkey,
                       uct_completion_t *comp)
{
    ucs_status_t status;

    if (siface->rocm_copy == NULL) {
        status = span_rocm_copy_create(&siface->rocm_copy);
        if (status != UCS_OK) {
            return status;
        }
    }
    return span_rocm_copy_post(siface->rocm_copy, rkey->vmm, is_put, iov,
                               iovcnt, remote, comp);
}

/* Units span exported itself are mapped contiguously here: device copies,
 * completed from the iface's progress. An entry of count 0 moves nothing,
 * as in UCX's transports: the remote range was checked for length x count
 * bytes */
static UCS_F_NOINLINE ucs_status_t
span_ep_vmm_zcopy(span_iface_t *siface, int is_put, const uct_iov_t *iov,
                  size_t iovcnt, uint64_t remote_addr, const span_rkey_t *rkey,
                  uct_completion_t *comp)
{
    uint8_t *remote = (uint8_t*)(uintptr_t)(rkey->vmm->base +
                                             (remote_addr - rkey->geom.base));
    ucs_status_t status;

    if (rkey->vmm->rocm) {
        return span_ep_rocm_vmm_zcopy(siface, is_put, iov, iovcnt, remote,
                                      rkey, comp);
    }
    if (siface->copy == NULL) {
        status = span_cuda_copy_create(&siface->copy);
        if (status != UCS_OK) {
            return status;
        }
    }
    return span_cuda_copy_post(siface->copy, rkey->vmm, is_put, iov, iovcnt,
                               remote, comp);
}

/* put or get zcopy: one inner op where the remote range lies in one chunk
 * and no local entry crosses a chunk end, the splitter otherwise */
static UCS_F_ALWAYS_INLINE ucs_status_t
span_ep_rma_zcopy(uct_ep_h ep, int is_put, const uct_iov_t *iov,
                  size_t iovcnt, uint64_t remote_addr, uct_rkey_t rkey,
                  uct_completion_t *comp)
{
    span_iface_t *siface = span_iface_get(ep->iface);
    uct_ep_put_zcopy_func_t zcopy = is_put ? siface->ops.ep_put_zcopy :
                                             siface->ops.ep_get_zcopy;
    uct_iov_t inner_iov[SPAN_IOV_MAX];
    size_t length = span_iov_translate(inner_iov, iov, iovcnt);
    uct_rkey_t inner;
    uint64_t avail;

    if (ucs_unlikely(!span_rkey_check(span_rkey(rkey), remote_addr,
                                      (length == SIZE_MAX) ?
                                      span_iov_length(iov, iovcnt) :
                                      length))) {
        return UCS_ERR_INVALID_ADDR;
    }
    if (ucs_unlikely(span_rkey(rkey)->vmm != NULL)) {
        return span_ep_vmm_zcopy(siface, is_put, iov, iovcnt, remote_addr,
                                 span_rkey(rkey), comp);
    }
    if (ucs_likely(length != SIZE_MAX)) {
        inner = span_rkey_inner(span_rkey(rkey), remote_addr, &avail);
        if (ucs_likely(length <= avail)) {
            return zcopy(ep, inner_iov, iovcnt, remote_addr, inner, comp);
        }
    }
    return span_split_zcopy(&siface->queue, ep, zcopy,
                            is_put ? siface->put_max_iov :
                                     siface->get_max_iov,
                            iov, iovcnt, remote_addr, span_rkey(rkey), comp);
}

static ucs_status_t span_ep_put_zcopy(uct_ep_h ep, const uct_iov_t *iov,
                                      size_t iovcnt, uint64_t remote_addr,
                                      uct_rkey_t rkey, uct_completion_t *comp)
{
    return span_ep_rma_zcopy(ep, 1, iov, iovcnt, remote_addr, rkey, comp);
}

static ucs_status_t span_ep_get_zcopy(uct_ep_h ep, const uct_iov_t *iov,
                                      size_t iovcnt, uint64_t remote_addr,
                                      uct_rkey_t rkey, uct_completion_t *comp)
{
    return span_ep_rma_zcopy(ep, 0, iov, iovcnt, remote_addr, rkey, comp);
}

static ucs_status_t span_ep_am_zcopy(uct_ep_h ep, uint8_t id,
                                     const void *header, unsigned header_length,
                                     const uct_iov_t *iov, size_t iovcnt,
                                     unsigned flags, uct_completion_t *comp)
{
    uct_iov_t inner_iov[SPAN_IOV_MAX];

    if (ucs_unlikely(span_iov_translate(inner_iov, iov, iovcnt) == SIZE_MAX)) {
        return span_iov_refused(iov, iovcnt);
    }
    return span_iface_get(ep->iface)->ops.ep_am_zcopy(
            ep, id, header, header_length, inner_iov, iovcnt, flags, comp);
}

static ucs_status_t span_ep_tag_eager_zcopy(uct_ep_h ep, uct_tag_t tag,
                                            uint64_t imm, const uct_iov_t *iov,
                                            size_t iovcnt, unsigned flags,
                                            uct_completion_t *comp)
{
    uct_iov_t inner_iov[SPAN_IOV_MAX];

    if (ucs_unlikely(span_iov_translate(inner_iov, iov, iovcnt) == SIZE_MAX)) {
        return span_iov_refused(iov, iovcnt);
    }
    return span_iface_get(ep->iface)->ops.ep_tag_eager_zcopy(
            ep, tag, imm, inner_iov, iovcnt, flags, comp);
}

static ucs_status_ptr_t
span_ep_tag_rndv_zcopy(uct_ep_h ep, uct_tag_t tag, const void *header,
                       unsigned header_length, const uct_iov_t *iov,
                       size_t iovcnt, unsigned flags, uct_completion_t *comp)
{
    uct_iov_t inner_iov[SPAN_IOV_MAX];

    if (ucs_unlikely(span_iov_translate(inner_iov, iov, iovcnt) == SIZE_MAX)) {
        return UCS_STATUS_PTR(span_iov_refused(iov, iovcnt));
    }
    return span_iface_get(ep->iface)->ops.ep_tag_rndv_zcopy(
            ep, tag, header, header_length, inner_iov, iovcnt, flags, comp);
}

static ucs_status_t
span_iface_tag_recv_zcopy(uct_iface_h iface, uct_tag_t tag, uct_tag_t tag_mask,
                          const uct_iov_t *iov, size_t iovcnt,
                          uct_tag_context_t *ctx)
{
    uct_iov_t inner_iov[SPAN_IOV_MAX];

    if (ucs_unlikely(span_iov_translate(inner_iov, iov, iovcnt) == SIZE_MAX)) {
        return span_iov_refused(iov, iovcnt);
    }
    return span_iface_get(iface)->ops.iface_tag_recv_zcopy(
            iface, tag, tag_mask, inner_iov, iovcnt, ctx);
}

/* Whether split ops of ep (any ep where NULL) still wait for resources
 * after an attempt to issue them now: a flush may not count on the worker's
 * progress to do it (UCP retries without progress) */
static int span_iface_deferred(span_iface_t *siface, uct_ep_h ep)
{
    if (!span_split_queue_busy(&siface->queue, ep)) {
        return 0;
    }
    span_split_queue_issue(&siface->queue);
    return span_split_queue_busy(&siface->queue, ep);
}

/* Whether the iface's VMM copy engine (CUDA's or ROCm's: a twin has one
 * kind of device memory) has copies queued */
static int span_iface_copy_busy(const span_iface_t *siface)
{
    return ((siface->copy != NULL) && span_cuda_copy_busy(siface->copy)) ||
           ((siface->rocm_copy != NULL) &&
            span_rocm_copy_busy(siface->rocm_copy));
}

static ucs_status_t span_iface_copy_flush(span_iface_t *siface,
                                          uct_completion_t *comp)
{
    if (siface->rocm_copy != NULL) {
        return span_rocm_copy_flush(siface->rocm_copy, comp);
    }
    return (siface->copy != NULL) ? span_cuda_copy_flush(siface->copy, comp) :
                                    UCS_OK;
}

/* A flush of an ep whose iface has VMM copies queued: complete behind both
 * the inner transport's ops and the copies */
static UCS_F_NOINLINE ucs_status_t
span_ep_flush_copies(span_iface_t *siface, uct_ep_h ep, unsigned flags,
                     uct_completion_t *comp)
{
    ucs_status_t status;

    if (comp == NULL) {
        status = siface->ops.ep_flush(ep, flags, NULL);
        return UCS_STATUS_IS_ERR(status) ? status : UCS_INPROGRESS;
    }
    ++comp->count; /* a share each: the inner flush's and the copies' */
    status = siface->ops.ep_flush(ep, flags, comp);
    if (status != UCS_INPROGRESS) {
        --comp->count;
        if (status != UCS_OK) {
            return status;
        }
    }
    if (span_iface_copy_flush(siface, comp) == UCS_INPROGRESS) {
        return UCS_INPROGRESS;
    }
    if (status == UCS_INPROGRESS) {
        --comp->count; /* the copies are done: the inner flush completes */
    }
    return status;
}

static ucs_status_t span_ep_flush(uct_ep_h ep, unsigned flags,
                                  uct_completion_t *comp)
{
    span_iface_t *siface = span_iface_get(ep->iface);

    if (flags & UCT_FLUSH_FLAG_CANCEL) {
        span_split_queue_cancel(&siface->queue, ep);
    } else if (span_iface_deferred(siface, ep)) {
        return UCS_ERR_NO_RESOURCE;
    }
    if (ucs_unlikely(span_iface_copy_busy(siface))) {
        return span_ep_flush_copies(siface, ep, flags, comp);
    }
    return siface->ops.ep_flush(ep, flags, comp);
}

static ucs_status_t span_iface_flush(uct_iface_h iface, unsigned flags,
                                     uct_completion_t *comp)
{
    span_iface_t *siface = span_iface_get(iface);
    ucs_status_t status;

    if (span_iface_deferred(siface, NULL)) {
        return UCS_ERR_NO_RESOURCE;
    }
    status = siface->ops.iface_flush(iface, flags, comp);
    if (status == UCS_OK) {
        return span_iface_copy_flush(siface, comp);
    }
    return status;
}

/* cuda twins only: VMM copies complete here */
static unsigned span_iface_progress(uct_iface_h iface)
{
    span_iface_t *siface = span_iface_get(iface);
    unsigned count       = siface->ops.iface_progress(iface);

    if (siface->copy != NULL) {
        count += span_cuda_copy_progress(siface->copy);
    }
    if (siface->rocm_copy != NULL) {
        count += span_rocm_copy_progress(siface->rocm_copy);
    }
    return count;
}

static ucs_status_t span_ep_fence(uct_ep_h ep, unsigned flags)
{
    span_iface_t *siface = span_iface_get(ep->iface);

    /* what follows the fence must follow the deferred pieces too */
    return span_iface_deferred(siface, ep) ? UCS_ERR_NO_RESOURCE :
                                             siface->ops.ep_fence(ep, flags);
}

static ucs_status_t span_iface_fence(uct_iface_h iface, unsigned flags)
{
    span_iface_t *siface = span_iface_get(iface);

    return span_iface_deferred(siface, NULL) ? UCS_ERR_NO_RESOURCE :
                                               siface->ops.iface_fence(iface,
                                                                       flags);
}

static ucs_status_t span_iface_query_v2(uct_iface_h iface, void *attr)
{
    span_iface_t *siface = span_iface_get(iface);
    span_ucx_iface_query_v2_func_t query =
            ((void**)siface->inner_internal_ops)[
                    SPAN_UCX_INTERNAL_IFACE_QUERY_V2];
    ucs_status_t status  = query(iface, attr);
    uint64_t field_mask  = *(uint64_t*)attr;
    size_t *counts;
    unsigned i;

    if (status != UCS_OK) {
        return status;
    }
    if (field_mask & span_ucx->attr_v2_field_cap_flags) {
        *(uint64_t*)UCS_PTR_BYTE_OFFSET(attr,
                                        span_ucx->attr_v2_cap_flags_offset) &=
                ~span_ucx->v2_flags_sgl;
    }
    counts = UCS_PTR_BYTE_OFFSET(attr, span_ucx->attr_v2_sgl_counts_offset);
    for (i = 0; i < span_ucx->attr_v2_num_sgl_counts; ++i) {
        if (field_mask & (span_ucx->attr_v2_field_sgl_counts & UCS_BIT(i))) {
            counts[i] = 0;
        }
    }
    return UCS_OK;
}

static ucs_status_t span_ep_sgl_zcopy(uct_ep_h ep, void *const *buffers,
                                      const size_t *lengths,
                                      uct_mem_h const *memhs,
                                      const uint64_t *remote_addrs,
                                      uct_rkey_t const *rkeys,
                                      const size_t *counts,
                                      const size_t *strides, size_t count,
                                      uct_completion_t *comp)
{
    ucs_error("span: ep %p: SGL zcopy is not offered by twin transports; "
              "UCP uses it only where the iface advertises it", ep);
    return UCS_ERR_UNSUPPORTED;
}

/* Replaces the inner iface's internal ops by the twin's copy */
static void span_iface_patch_internal(span_iface_t *siface, uct_iface_h iface)
{
    span_ucx_base_iface_t *base = (span_ucx_base_iface_t*)iface;

    siface->inner_internal_ops = base->internal_ops;
    memcpy(siface->internal_ops, base->internal_ops,
           span_ucx->internal_ops_size);
    siface->internal_ops[SPAN_UCX_INTERNAL_IFACE_QUERY_V2] =
            (void*)span_iface_query_v2;
    siface->internal_ops[SPAN_UCX_INTERNAL_EP_PUT_SGL_ZCOPY] =
            (void*)span_ep_sgl_zcopy;
    if (span_ucx->get_sgl_slot >= 0) {
        siface->internal_ops[span_ucx->get_sgl_slot] =
                (void*)span_ep_sgl_zcopy;
    }
    base->internal_ops = siface->internal_ops;
}

static void span_ep_destroy(uct_ep_h ep)
{
    span_iface_t *siface = span_iface_get(ep->iface);

    span_split_queue_cancel(&siface->queue, ep);
    siface->ops.ep_destroy(ep);
}

static void span_iface_cap(size_t *value, uint64_t max)
{
    if ((max != 0) && (*value > max)) {
        *value = max;
    }
}

static ucs_status_t span_iface_query(uct_iface_h iface, uct_iface_attr_t *attr)
{
    span_iface_t *siface = span_iface_get(iface);
    ucs_status_t status  = siface->ops.iface_query(iface, attr);

    if (status != UCS_OK) {
        return status;
    }

    /* pieces of a split put may wait in span's queue while an AM goes out:
     * UCP must fence (1.22 skips the rendezvous fence on this flag) */
    attr->cap.flags &= ~UCT_IFACE_FLAG_PUT_AM_ORDER;
    span_iface_cap(&attr->cap.put.max_iov, SPAN_IOV_MAX);
    span_iface_cap(&attr->cap.get.max_iov, SPAN_IOV_MAX);
    span_iface_cap(&attr->cap.am.max_iov, SPAN_IOV_MAX);
    span_iface_cap(&attr->cap.tag.eager.max_iov, SPAN_IOV_MAX);
    span_iface_cap(&attr->cap.tag.recv.max_iov, SPAN_IOV_MAX);
    span_iface_cap(&attr->cap.tag.rndv.max_iov, SPAN_IOV_MAX);
    if (attr->cap.get.max_zcopy == 0) {
        attr->cap.get.max_zcopy = siface->get_max_zcopy;
    }
    /* every op fits in one chunk of the overlapping ones */
    span_iface_cap(&attr->cap.put.max_short, siface->max_op);
    span_iface_cap(&attr->cap.put.max_bcopy, siface->max_op);
    span_iface_cap(&attr->cap.put.max_zcopy, siface->max_op);
    span_iface_cap(&attr->cap.get.max_short, siface->max_op);
    span_iface_cap(&attr->cap.get.max_bcopy, siface->max_op);
    span_iface_cap(&attr->cap.get.max_zcopy, siface->max_op);
    return UCS_OK;
}

static void span_iface_close(uct_iface_h iface)
{
    span_iface_t *siface = span_iface_remove(iface);
    uct_iface_close_func_t inner_close = siface->ops.iface_close;

    span_split_queue_cancel(&siface->queue, NULL);
    if (siface->copy != NULL) {
        span_cuda_copy_destroy(siface->copy);
    }
    if (siface->rocm_copy != NULL) {
        span_rocm_copy_destroy(siface->rocm_copy);
    }
    ((span_ucx_base_iface_t*)iface)->internal_ops = siface->inner_internal_ops;
    free(siface);
    inner_close(iface);
}

/* An op the inner transport lacks (NULL) stays absent in the twin */
#define SPAN_IFACE_PATCH(_ops, _name, _func) \
    if ((_ops)->_name != NULL) { \
        (_ops)->_name = _func; \
    }

static void span_iface_patch(uct_iface_ops_t *ops)
{
    SPAN_IFACE_PATCH(ops, ep_put_short,         span_ep_put_short)
    SPAN_IFACE_PATCH(ops, ep_put_bcopy,         span_ep_put_bcopy)
    SPAN_IFACE_PATCH(ops, ep_put_zcopy,         span_ep_put_zcopy)
    SPAN_IFACE_PATCH(ops, ep_get_short,         span_ep_get_short)
    SPAN_IFACE_PATCH(ops, ep_get_bcopy,         span_ep_get_bcopy)
    SPAN_IFACE_PATCH(ops, ep_get_zcopy,         span_ep_get_zcopy)
    SPAN_IFACE_PATCH(ops, ep_am_zcopy,          span_ep_am_zcopy)
    SPAN_IFACE_PATCH(ops, ep_atomic_cswap64,    span_ep_atomic_cswap64)
    SPAN_IFACE_PATCH(ops, ep_atomic_cswap32,    span_ep_atomic_cswap32)
    SPAN_IFACE_PATCH(ops, ep_atomic32_post,     span_ep_atomic32_post)
    SPAN_IFACE_PATCH(ops, ep_atomic64_post,     span_ep_atomic64_post)
    SPAN_IFACE_PATCH(ops, ep_atomic32_fetch,    span_ep_atomic32_fetch)
    SPAN_IFACE_PATCH(ops, ep_atomic64_fetch,    span_ep_atomic64_fetch)
    SPAN_IFACE_PATCH(ops, ep_tag_eager_zcopy,   span_ep_tag_eager_zcopy)
    SPAN_IFACE_PATCH(ops, ep_tag_rndv_zcopy,    span_ep_tag_rndv_zcopy)
    SPAN_IFACE_PATCH(ops, iface_tag_recv_zcopy, span_iface_tag_recv_zcopy)
    SPAN_IFACE_PATCH(ops, ep_flush,             span_ep_flush)
    SPAN_IFACE_PATCH(ops, ep_fence,             span_ep_fence)
    SPAN_IFACE_PATCH(ops, iface_fence,          span_iface_fence)
    SPAN_IFACE_PATCH(ops, ep_destroy,           span_ep_destroy)
    SPAN_IFACE_PATCH(ops, iface_flush,          span_iface_flush)
    SPAN_IFACE_PATCH(ops, iface_query,          span_iface_query)
    SPAN_IFACE_PATCH(ops, iface_close,          span_iface_close)
}


/*
 * cuda_ipc turns get zero-copy off where its NVLink probe finds no link,
 * and that probe answers at random in UCX 1.22 and 1.23 (span_nvml.c). The
 * twin takes its own answer, the same for every twin iface of the process,
 * and offers get zero-copy as far as cuda_ipc offers put zero-copy.
 */
static size_t span_iface_get_max_zcopy(const char *inner_tl,
                                       const uct_iface_attr_t *attr)
{
    unsigned links;

    if ((strcmp(inner_tl, "cuda_ipc") != 0) ||
        !(attr->cap.flags & UCT_IFACE_FLAG_GET_ZCOPY) ||
        (attr->cap.get.max_zcopy != 0)) {
        return 0;
    }

    links = span_nvml_nvlinks();
    if (links == 0) {
        return 0;
    }

    ucs_debug("span: %s: get zero-copy on: GPU 0 has %u active NVLinks "
              "(the transport's own probe found none)", inner_tl, links);
    return attr->cap.put.max_zcopy;
}

ucs_status_t span_iface_attach(uct_iface_h iface, span_md_t *smd,
                               uct_worker_h worker, const char *inner_tl)
{
    uct_iface_attr_t attr;
    span_iface_t *siface;
    ucs_status_t status;

    status = iface->ops.iface_query(iface, &attr);
    if (status != UCS_OK) {
        return status;
    }

    siface = malloc(sizeof(*siface));
    if (siface == NULL) {
        return UCS_ERR_NO_MEMORY;
    }

    siface->ops         = iface->ops;
    siface->max_op      = (smd->chunk_size != 0) ? smd->overlap : 0;
    siface->put_max_iov = ucs_min(attr.cap.put.max_iov, SPAN_IOV_MAX);
    siface->get_max_iov = ucs_min(attr.cap.get.max_iov, SPAN_IOV_MAX);
    siface->get_max_zcopy = span_iface_get_max_zcopy(inner_tl, &attr);
    siface->copy        = NULL;
    siface->rocm_copy   = NULL;
    span_split_queue_init(&siface->queue, worker, smd->test_no_resource);
    status = span_iface_insert(iface, siface);
    if (status != UCS_OK) {
        free(siface);
        return status;
    }

    span_iface_patch(&iface->ops);
    if (smd->cuda != NULL) {
        SPAN_IFACE_PATCH(&iface->ops, iface_progress, span_iface_progress)
    }
    span_iface_patch_internal(siface, iface);
    return UCS_OK;
}
