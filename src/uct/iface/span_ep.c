/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The twin's data ops.
 *
 * Each translates span rkeys and memhs to inner ones, checks the remote
 * range, and calls the inner transport's op. The common case of each is a
 * straight line with no lookup: every open twin that has the op has the
 * same inner one (span_iface_uniform_op()), and the access lies in one
 * chunk of its rkey and of its memh. Every other case (chunks, VMM copies,
 * ops split at unit ends, twins of transports whose ops differ) takes a
 * path out of line, which finds the twin state of the iface in the table
 * (span_iface_table.h).
 */

/* Data-path traces are compiled out, as in UCX's release builds, unless
 * built with -DUCS_MAX_LOG_LEVEL=UCS_LOG_LEVEL_TRACE_DATA */
#ifndef UCS_MAX_LOG_LEVEL
#  define UCS_MAX_LOG_LEVEL UCS_LOG_LEVEL_DEBUG
#endif

#include "span_ep.h"
#include "md/span_md.h"
#include "ucx/span_ucx.h"

/* UCX's profiling of the zero-copy ops, as its transports have it: on where
 * built with -DHAVE_PROFILING (UCX's own switch), free otherwise */
#ifdef HAVE_PROFILING
#  include <ucs/profile/profile_on.h>
#else
#  include <ucs/profile/profile_off.h>
#endif

static UCS_F_ALWAYS_INLINE const span_rkey_t *span_rkey(uct_rkey_t rkey)
{
    return (const span_rkey_t*)rkey;
}

/*
 * An op given no key reaches the inner transport with it, as it is, where
 * that transport reads no key (its MD packs none: cma, self, tcp) or the op
 * moves no byte: the answer is the native one. Elsewhere the inner
 * transport would take the value for an address or a NIC's key: refused.
 */
static UCS_F_NOINLINE ucs_status_t
span_ep_no_rkey(uct_ep_h ep, uint64_t remote_addr, size_t length,
                uct_rkey_t rkey)
{
    if ((length == 0) || span_iface_get(ep->iface)->keyless) {
        return UCS_OK;
    }
    ucs_error("span ep %p: an access of %zu bytes at 0x%" PRIx64 " with "
              "rkey 0x%lx, which names no registration, where the transport "
              "needs a key", ep, length, remote_addr, (unsigned long)rkey);
    return UCS_ERR_INVALID_PARAM;
}

/* Adds the length x count bytes of iov to *total_p; 0 where they wrap */
static UCS_F_ALWAYS_INLINE int
span_iov_add_bytes(const uct_iov_t *iov, size_t *total_p)
{
    size_t bytes;

    return !__builtin_mul_overflow(iov->length, iov->count, &bytes) &&
           !__builtin_add_overflow(*total_p, bytes, total_p);
}

/* The bytes of iov, or SIZE_MAX, which no range holds, where they wrap */
static size_t span_iov_length(const uct_iov_t *iov, size_t iovcnt)
{
    size_t i, total = 0;

    for (i = 0; i < iovcnt; ++i) {
        if (!span_iov_add_bytes(&iov[i], &total)) {
            return SIZE_MAX;
        }
    }
    return total;
}

/* Copies iov with inner memhs; the bytes it covers, or SIZE_MAX when an
 * entry crosses a local chunk end, the bytes wrap (or there are too many
 * entries). Entries
 * of one memh of one inner handle, the common case, translate it once: it
 * holds every byte (avail UINT64_MAX), so they cross no end. */
static UCS_F_ALWAYS_INLINE size_t
span_iov_translate(uct_iov_t *dst, const uct_iov_t *src, size_t iovcnt)
{
    uct_mem_h memh = UCT_MEM_HANDLE_NULL, inner = UCT_MEM_HANDLE_NULL;
    uint64_t avail = UINT64_MAX;
    size_t i, total = 0;

    if (ucs_unlikely(iovcnt > SPAN_IOV_MAX)) {
        return SIZE_MAX;
    }

    for (i = 0; i < iovcnt; ++i) {
        dst[i] = src[i];
        if ((src[i].memh != memh) || (avail != UINT64_MAX)) {
            memh  = src[i].memh;
            inner = span_memh_inner(memh, src[i].buffer, &avail);
            if (ucs_unlikely((src[i].count > 1) ?
                             !span_iov_whole(&src[i], avail) :
                             (src[i].length > avail))) {
                return SIZE_MAX;
            }
        }
        dst[i].memh = inner;
        if (ucs_unlikely(!span_iov_add_bytes(&src[i], &total))) {
            return SIZE_MAX; /* span_iov_length refuses it */
        }
    }
    return total;
}

/* An access span refused (status), of an op with a completion: where the
 * UCX in the process fails a request only through the op's completion
 * (1.18 and earlier abort the process on a zero-copy get whose op returns
 * an error), reported there, from the next progress; else returned */
static UCS_F_NOINLINE ucs_status_t span_ep_refuse(uct_ep_h ep,
                                                  ucs_status_t status,
                                                  uct_completion_t *comp)
{
    if ((status != UCS_ERR_INVALID_ADDR) || (comp == NULL) ||
        !span_ucx->refuse_in_completion) {
        return status;
    }
    return span_split_refuse(&span_iface_get(ep->iface)->queue, ep, comp,
                             status);
}

/* For ops that cannot be split (AM, tag): an iov the translation refused */
static ucs_status_t span_iov_refused(const uct_iov_t *iov, size_t iovcnt)
{
    ucs_error("span ep: an iov of %zu entries from %p is longer than %d "
              "entries, crosses a chunk end, or counts more bytes than an "
              "address holds, none of which this op can split",
              iovcnt, (iovcnt > 0) ? iov[0].buffer : NULL, SPAN_IOV_MAX);
    return UCS_ERR_UNSUPPORTED;
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
 * bcopy gets, atomics): where the access lies in an extent of one chunk,
 * the fast version calls the uniform op (the inner op, with no lookup
 * where every twin that has the op has the same one) with no stack frame
 * of its own; every other case takes the slow version, which checks chunks
 * (or an op with no key: span_ep_no_rkey) and finds the iface in the
 * table. The arguments after _params name the inner op's, with key for the
 * rkey; _comp is the completion a refusal may be reported through (NULL:
 * always returned, as for atomics: no UCP release was read for how it
 * takes an error in their completion).
 */
#define SPAN_EP_WHOLE_OP(_op, _length, _comp, _params, ...) \
    static UCS_F_NOINLINE ucs_status_t span_ep_##_op##_slow _params \
    { \
        ucs_status_t status; \
        uct_rkey_t key = rkey; \
        \
        status = span_rkey_is_none(rkey) ? \
                 span_ep_no_rkey(ep, remote_addr, _length, rkey) : \
                 span_rkey_whole(span_rkey(rkey), remote_addr, _length, \
                                 &key); \
        if (ucs_unlikely(status != UCS_OK)) { \
            return span_ep_refuse(ep, status, _comp); \
        } \
        return span_iface_get(ep->iface)->ops.ep_##_op(__VA_ARGS__); \
    } \
    \
    static ucs_status_t span_ep_##_op _params \
    { \
        uct_rkey_t key; \
        \
        if (ucs_likely(!span_rkey_is_none(rkey) && \
                       span_rkey_whole_fast(span_rkey(rkey), remote_addr, \
                                            _length, &key))) { \
            return span_iface_uniform_op(ep_##_op)(__VA_ARGS__); \
        } \
        key = rkey; \
        return span_ep_##_op##_slow(__VA_ARGS__); \
    }

SPAN_EP_WHOLE_OP(put_short, length, NULL,
                 (uct_ep_h ep, const void *buffer, unsigned length,
                  uint64_t remote_addr, uct_rkey_t rkey),
                 ep, buffer, length, remote_addr, key)

SPAN_EP_WHOLE_OP(get_short, length, NULL,
                 (uct_ep_h ep, void *buffer, unsigned length,
                  uint64_t remote_addr, uct_rkey_t rkey),
                 ep, buffer, length, remote_addr, key)

SPAN_EP_WHOLE_OP(get_bcopy, length, comp,
                 (uct_ep_h ep, uct_unpack_callback_t unpack_cb, void *arg,
                  size_t length, uint64_t remote_addr, uct_rkey_t rkey,
                  uct_completion_t *comp),
                 ep, unpack_cb, arg, length, remote_addr, key, comp)

SPAN_EP_WHOLE_OP(atomic_cswap64, sizeof(uint64_t), NULL,
                 (uct_ep_h ep, uint64_t compare, uint64_t swap,
                  uint64_t remote_addr, uct_rkey_t rkey, uint64_t *result,
                  uct_completion_t *comp),
                 ep, compare, swap, remote_addr, key, result, comp)

SPAN_EP_WHOLE_OP(atomic_cswap32, sizeof(uint32_t), NULL,
                 (uct_ep_h ep, uint32_t compare, uint32_t swap,
                  uint64_t remote_addr, uct_rkey_t rkey, uint32_t *result,
                  uct_completion_t *comp),
                 ep, compare, swap, remote_addr, key, result, comp)

SPAN_EP_WHOLE_OP(atomic32_post, sizeof(uint32_t), NULL,
                 (uct_ep_h ep, unsigned opcode, uint32_t value,
                  uint64_t remote_addr, uct_rkey_t rkey),
                 ep, opcode, value, remote_addr, key)

SPAN_EP_WHOLE_OP(atomic64_post, sizeof(uint64_t), NULL,
                 (uct_ep_h ep, unsigned opcode, uint64_t value,
                  uint64_t remote_addr, uct_rkey_t rkey),
                 ep, opcode, value, remote_addr, key)

SPAN_EP_WHOLE_OP(atomic32_fetch, sizeof(uint32_t), NULL,
                 (uct_ep_h ep, unsigned opcode, uint32_t value,
                  uint32_t *result, uint64_t remote_addr, uct_rkey_t rkey,
                  uct_completion_t *comp),
                 ep, opcode, value, result, remote_addr, key, comp)

SPAN_EP_WHOLE_OP(atomic64_fetch, sizeof(uint64_t), NULL,
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

    /* with no key, as natively: the length is known only once packed,
     * which a transport may do in place at the address the key makes */
    if (ucs_unlikely(span_rkey_is_none(rkey))) {
        return span_iface_get(ep->iface)->ops.ep_put_bcopy(ep, pack_cb, arg,
                                                           remote_addr, rkey);
    }
    if (ucs_unlikely(!span_rkey_check(ctx.rkey, remote_addr, 1))) {
        return UCS_ERR_INVALID_ADDR;
    }

    inner = span_rkey_inner(ctx.rkey, remote_addr, &ctx.avail);
    ret   = span_iface_get(ep->iface)->ops.ep_put_bcopy(
            ep, span_put_bcopy_pack, &ctx, remote_addr, inner);
    return ucs_unlikely(ctx.status != UCS_OK) ? ctx.status : ret;
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

    if (siface->copy == NULL) {
        status = span_vmm_copy_create(siface->copy_ops, siface->copy_params,
                                      &siface->copy);
        if (status != UCS_OK) {
            return status;
        }
    }
    return span_vmm_copy_post(siface->copy, rkey->vmm, is_put, iov, iovcnt,
                              remote, comp);
}

/* The put and get versions of _func(ep, is_put, ...), out of line, with the
 * arguments of the op, which its fast path passes on in place */
#define SPAN_EP_ZCOPY_OUT_OF_LINE(_name, _func) \
    static UCS_F_NOINLINE ucs_status_t span_ep_put_zcopy_##_name( \
            uct_ep_h ep, const uct_iov_t *iov, size_t iovcnt, \
            uint64_t remote_addr, uct_rkey_t rkey, uct_completion_t *comp) \
    { \
        return _func(ep, 1, iov, iovcnt, remote_addr, rkey, comp); \
    } \
    \
    static UCS_F_NOINLINE ucs_status_t span_ep_get_zcopy_##_name( \
            uct_ep_h ep, const uct_iov_t *iov, size_t iovcnt, \
            uint64_t remote_addr, uct_rkey_t rkey, uct_completion_t *comp) \
    { \
        return _func(ep, 0, iov, iovcnt, remote_addr, rkey, comp); \
    }

/* put or get zcopy through span: device copies where the rkey maps VMM
 * units or a legacy IPC handle, the splitter where the op crosses a chunk
 * end on either side or span cannot copy through the handle (the local
 * buffer's device did not open it, or the iface has no engine) */
static UCS_F_NOINLINE ucs_status_t
span_ep_rma_zcopy_span(uct_ep_h ep, int is_put, const uct_iov_t *iov,
                       size_t iovcnt, uint64_t remote_addr,
                       const span_rkey_t *srkey, uct_completion_t *comp)
{
    span_iface_t *siface = span_iface_get(ep->iface);
    ucs_status_t status;

    if (srkey->vmm != NULL) {
        status = span_ep_vmm_zcopy(siface, is_put, iov, iovcnt, remote_addr,
                                   srkey, comp);
        if ((status != UCS_ERR_UNSUPPORTED) || !srkey->vmm->ipc) {
            return status;
        }
    }
    return span_split_zcopy(&siface->queue, ep,
                            is_put ? siface->ops.ep_put_zcopy :
                                     siface->ops.ep_get_zcopy,
                            is_put ? siface->put_max_iov :
                                     siface->get_max_iov,
                            iov, iovcnt, remote_addr, srkey, comp);
}

/* put or get zcopy, every case: one inner op where the remote range lies
 * in one chunk and no local entry crosses a chunk end, span's own path
 * otherwise */
static UCS_F_ALWAYS_INLINE ucs_status_t
span_ep_rma_zcopy(uct_ep_h ep, int is_put, const uct_iov_t *iov,
                  size_t iovcnt, uint64_t remote_addr, uct_rkey_t rkey,
                  uct_completion_t *comp)
{
    const span_rkey_t *srkey = span_rkey(rkey);
    uct_iov_t inner_iov[SPAN_IOV_MAX];
    size_t length = span_iov_translate(inner_iov, iov, iovcnt);
    uct_ep_put_zcopy_func_t zcopy;
    ucs_status_t status;
    uct_rkey_t inner;
    uint64_t avail;

    if (ucs_unlikely(span_rkey_is_none(rkey))) {
        if (length == SIZE_MAX) {
            return span_iov_refused(iov, iovcnt);
        }
        status = span_ep_no_rkey(ep, remote_addr, length, rkey);
        if (status != UCS_OK) {
            return span_ep_refuse(ep, status, comp);
        }
        zcopy = is_put ? span_iface_get(ep->iface)->ops.ep_put_zcopy :
                         span_iface_get(ep->iface)->ops.ep_get_zcopy;
        return zcopy(ep, inner_iov, iovcnt, remote_addr, rkey, comp);
    }
    if (ucs_unlikely(!span_rkey_check(srkey, remote_addr,
                                      (length == SIZE_MAX) ?
                                      span_iov_length(iov, iovcnt) :
                                      length))) {
        return span_ep_refuse(ep, UCS_ERR_INVALID_ADDR, comp);
    }
    if (ucs_likely((length != SIZE_MAX) && (srkey->vmm == NULL))) {
        inner = span_rkey_inner(srkey, remote_addr, &avail);
        if (ucs_likely(length <= avail)) {
            zcopy = is_put ? span_iface_uniform_op(ep_put_zcopy) :
                             span_iface_uniform_op(ep_get_zcopy);
            return zcopy(ep, inner_iov, iovcnt, remote_addr, inner, comp);
        }
    }
    return span_ep_rma_zcopy_span(ep, is_put, iov, iovcnt, remote_addr, srkey,
                                  comp);
}

/* put or get zcopy, every case, where the caller's local memhs may be
 * unset (span_iface_t.memh_unset): then not read */
static UCS_F_ALWAYS_INLINE ucs_status_t
span_ep_zcopy_unread(uct_ep_h ep, int is_put, const uct_iov_t *iov,
                     size_t iovcnt, uint64_t remote_addr, uct_rkey_t rkey,
                     uct_completion_t *comp)
{
    uct_iov_t unread_iov[SPAN_IOV_MAX];
    size_t i;

    if (ucs_unlikely(span_ucx->rma_memh_unset) && (iovcnt <= SPAN_IOV_MAX) &&
        span_iface_get(ep->iface)->memh_unset) {
        for (i = 0; i < iovcnt; ++i) {
            unread_iov[i]      = iov[i];
            unread_iov[i].memh = UCT_MEM_HANDLE_NULL;
        }
        iov = unread_iov;
    }
    return span_ep_rma_zcopy(ep, is_put, iov, iovcnt, remote_addr, rkey,
                             comp);
}

SPAN_EP_ZCOPY_OUT_OF_LINE(slow, span_ep_zcopy_unread)

/*
 * put or get zcopy of one local entry inside the range registered, which
 * one chunk of the rkey serves whole, by a transport that may read local
 * memhs: a local handle that is not a twin's (NULL, the inner MD's own:
 * uct_iface_mem_alloc on the twin iface) passes as it is, in the caller's
 * iov; a twin's of at most one inner registration is replaced in a copy;
 * one of several goes to the slow version. Out of line, so that the fast
 * path needs no stack frame.
 */
static UCS_F_ALWAYS_INLINE ucs_status_t
span_ep_zcopy_memh(uct_ep_h ep, int is_put, const uct_iov_t *iov,
                   size_t iovcnt, uint64_t remote_addr, uct_rkey_t rkey,
                   uct_completion_t *comp)
{
    const span_rkey_t *srkey      = span_rkey(rkey);
    const span_memh_t *smem       = iov->memh;
    uct_ep_put_zcopy_func_t zcopy = is_put ?
                                    span_iface_uniform_op(ep_put_zcopy) :
                                    span_iface_uniform_op(ep_get_zcopy);
    uct_iov_t inner_iov;

    if (ucs_unlikely(span_ucx->rma_memh_unset)) {
        return (is_put ? span_ep_put_zcopy_slow : span_ep_get_zcopy_slow)(
                ep, iov, iovcnt, remote_addr, rkey, comp);
    }
    if (!span_memh_is_ours(iov->memh)) {
        return zcopy(ep, iov, iovcnt, remote_addr, srkey->inner[0].rkey,
                     comp);
    }
    if (ucs_unlikely(smem->num_inner > 1)) {
        return (is_put ? span_ep_put_zcopy_slow : span_ep_get_zcopy_slow)(
                ep, iov, iovcnt, remote_addr, rkey, comp);
    }

    inner_iov      = *iov;
    inner_iov.memh = smem->inner[0];
    return zcopy(ep, &inner_iov, iovcnt, remote_addr, srkey->inner[0].rkey,
                 comp);
}

SPAN_EP_ZCOPY_OUT_OF_LINE(memh, span_ep_zcopy_memh)

/* Whether a zero-copy access of length bytes at addr lies in the range
 * registered, which one chunk of the rkey serves whole: an address below
 * the base wraps the offset; the add carries or ends past the range; an
 * empty op (end - 1 wraps) and any op with another rkey (whole_length 0)
 * fail the compare */
static UCS_F_ALWAYS_INLINE int
span_rkey_zcopy_fast(const span_rkey_t *rkey, uint64_t addr, uint64_t length)
{
    uint64_t end;

    return !__builtin_add_overflow(addr - rkey->win_base, length, &end) &&
           (end - 1 < rkey->whole_length);
}

/* span_rkey_zcopy_fast for 2 to 4 entries of count 0 or 1 (more go to the
 * slow path): the bytes add to the offset, and any carry fails. The counts
 * are or-ed and checked once: where all are 0 or 1 the sum of the lengths
 * holds every byte moved (an entry of count 0 moves none: its length only
 * makes the check stricter). One line for each number of entries, as a
 * loop, or cases falling through, cost as much again. */
#define SPAN_IOV_ADD(_n) !__builtin_add_overflow(end, iov[_n].length, &end)

static UCS_F_ALWAYS_INLINE int
span_rkey_zcopy_iov_fast(const span_rkey_t *rkey, uint64_t addr,
                         const uct_iov_t *iov, size_t iovcnt)
{
    uint64_t end = addr - rkey->win_base;

    switch (iovcnt) {
    case 2:
        return SPAN_IOV_ADD(0) && SPAN_IOV_ADD(1) &&
               ((iov[0].count | iov[1].count) == 1) &&
               (end - 1 < rkey->whole_length);
    case 3:
        return SPAN_IOV_ADD(0) && SPAN_IOV_ADD(1) && SPAN_IOV_ADD(2) &&
               ((iov[0].count | iov[1].count | iov[2].count) == 1) &&
               (end - 1 < rkey->whole_length);
    case 4:
        return SPAN_IOV_ADD(0) && SPAN_IOV_ADD(1) && SPAN_IOV_ADD(2) &&
               SPAN_IOV_ADD(3) &&
               ((iov[0].count | iov[1].count | iov[2].count |
                 iov[3].count) == 1) &&
               (end - 1 < rkey->whole_length);
    default:
        return 0;
    }
}

/*
 * put or get zcopy. The common case is this straight line: one local
 * entry, inside the range registered, which one chunk of the rkey serves
 * whole (span_rkey_zcopy_fast). Where the inner transport reads no local
 * memh (span_iface_unread_op), the caller's iov passes as it is;
 * elsewhere a memh of one entry is translated out of line. Two to four
 * entries take the same line where no memh is read; every other case, an
 * access out of range and an op with no key included, goes to the slow
 * version, with the same arguments.
 */
static UCS_F_ALWAYS_INLINE ucs_status_t
span_ep_zcopy(uct_ep_h ep, int is_put, const uct_iov_t *iov, size_t iovcnt,
              uint64_t remote_addr, uct_rkey_t rkey, uct_completion_t *comp)
{
    const span_rkey_t *srkey      = span_rkey(rkey);
    uct_ep_put_zcopy_func_t zcopy = is_put ?
                                    span_iface_unread_op(ep_put_zcopy) :
                                    span_iface_unread_op(ep_get_zcopy);
    int fast;

    if (ucs_unlikely(span_rkey_is_none(rkey))) {
        fast = 0;
    } else if (ucs_likely((iovcnt == 1) && (iov->count == 1))) {
        fast = span_rkey_zcopy_fast(srkey, remote_addr, iov->length);
        if (fast && (zcopy == NULL)) {
            return (is_put ? span_ep_put_zcopy_memh : span_ep_get_zcopy_memh)(
                    ep, iov, iovcnt, remote_addr, rkey, comp);
        }
    } else {
        fast = (zcopy != NULL) &&
               span_rkey_zcopy_iov_fast(srkey, remote_addr, iov, iovcnt);
    }
    if (ucs_unlikely(!fast)) {
        return (is_put ? span_ep_put_zcopy_slow : span_ep_get_zcopy_slow)(
                ep, iov, iovcnt, remote_addr, rkey, comp);
    }
    return zcopy(ep, iov, iovcnt, remote_addr, srkey->inner[0].rkey, comp);
}

UCS_PROFILE_FUNC(ucs_status_t, span_ep_put_zcopy,
                 (ep, iov, iovcnt, remote_addr, rkey, comp),
                 uct_ep_h ep, const uct_iov_t *iov, size_t iovcnt,
                 uint64_t remote_addr, uct_rkey_t rkey, uct_completion_t *comp)
{
    ucs_status_t status = span_ep_zcopy(ep, 1, iov, iovcnt, remote_addr, rkey,
                                        comp);

    ucs_trace_data("span ep %p: PUT_ZCOPY [length %zu] to 0x%" PRIx64
                   " rkey %p: %s", ep, span_iov_length(iov, iovcnt),
                   remote_addr, span_rkey(rkey), ucs_status_string(status));
    return status;
}

UCS_PROFILE_FUNC(ucs_status_t, span_ep_get_zcopy,
                 (ep, iov, iovcnt, remote_addr, rkey, comp),
                 uct_ep_h ep, const uct_iov_t *iov, size_t iovcnt,
                 uint64_t remote_addr, uct_rkey_t rkey, uct_completion_t *comp)
{
    ucs_status_t status = span_ep_zcopy(ep, 0, iov, iovcnt, remote_addr, rkey,
                                        comp);

    ucs_trace_data("span ep %p: GET_ZCOPY [length %zu] from 0x%" PRIx64
                   " rkey %p: %s", ep, span_iov_length(iov, iovcnt),
                   remote_addr, span_rkey(rkey), ucs_status_string(status));
    return status;
}

/*
 * The ops that move an iov in one piece (AM, tag): each entry must lie in
 * one chunk of its memh, as these ops cannot be split. _iface is the iface
 * of the op, _refused(status) what it returns for an iov it cannot take,
 * and the arguments after _params name the inner op's, with inner_iov for
 * the iov.
 */
#define SPAN_EP_IOV_OP(_ret_type, _name, _op, _iface, _refused, _params, ...) \
    static _ret_type _name _params \
    { \
        uct_iov_t inner_iov[SPAN_IOV_MAX]; \
        \
        if (ucs_unlikely(span_iov_translate(inner_iov, iov, iovcnt) == \
                         SIZE_MAX)) { \
            return _refused(span_iov_refused(iov, iovcnt)); \
        } \
        return span_iface_get(_iface)->ops._op(__VA_ARGS__); \
    }

#define SPAN_EP_STATUS(_status) (_status)

SPAN_EP_IOV_OP(ucs_status_t, span_ep_am_zcopy, ep_am_zcopy, ep->iface,
               SPAN_EP_STATUS,
               (uct_ep_h ep, uint8_t id, const void *header,
                unsigned header_length, const uct_iov_t *iov, size_t iovcnt,
                unsigned flags, uct_completion_t *comp),
               ep, id, header, header_length, inner_iov, iovcnt, flags, comp)

SPAN_EP_IOV_OP(ucs_status_t, span_ep_tag_eager_zcopy, ep_tag_eager_zcopy,
               ep->iface, SPAN_EP_STATUS,
               (uct_ep_h ep, uct_tag_t tag, uint64_t imm,
                const uct_iov_t *iov, size_t iovcnt, unsigned flags,
                uct_completion_t *comp),
               ep, tag, imm, inner_iov, iovcnt, flags, comp)

SPAN_EP_IOV_OP(ucs_status_ptr_t, span_ep_tag_rndv_zcopy, ep_tag_rndv_zcopy,
               ep->iface, UCS_STATUS_PTR,
               (uct_ep_h ep, uct_tag_t tag, const void *header,
                unsigned header_length, const uct_iov_t *iov, size_t iovcnt,
                unsigned flags, uct_completion_t *comp),
               ep, tag, header, header_length, inner_iov, iovcnt, flags, comp)

SPAN_EP_IOV_OP(ucs_status_t, span_iface_tag_recv_zcopy, iface_tag_recv_zcopy,
               iface, SPAN_EP_STATUS,
               (uct_iface_h iface, uct_tag_t tag, uct_tag_t tag_mask,
                const uct_iov_t *iov, size_t iovcnt, uct_tag_context_t *ctx),
               iface, tag, tag_mask, inner_iov, iovcnt, ctx)

int span_ep_deferred(span_iface_t *siface, uct_ep_h ep)
{
    if (!span_split_queue_busy(&siface->queue, ep)) {
        return 0;
    }
    span_split_queue_issue(&siface->queue);
    return span_split_queue_busy(&siface->queue, ep);
}

/* Whether the iface's VMM copy engine has copies queued */
static int span_ep_copy_busy(const span_iface_t *siface)
{
    return (siface->copy != NULL) && span_vmm_copy_busy(siface->copy);
}

ucs_status_t span_ep_copy_flush(span_iface_t *siface, uct_completion_t *comp)
{
    return (siface->copy != NULL) ? span_vmm_copy_flush(siface->copy, comp) :
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
    if (span_ep_copy_flush(siface, comp) == UCS_INPROGRESS) {
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
    } else if (span_ep_deferred(siface, ep)) {
        return UCS_ERR_NO_RESOURCE;
    }
    if (ucs_unlikely(span_ep_copy_busy(siface))) {
        return span_ep_flush_copies(siface, ep, flags, comp);
    }
    return siface->ops.ep_flush(ep, flags, comp);
}

void span_ep_copy_fence(span_iface_t *siface)
{
    if (siface->copy != NULL) {
        span_vmm_copy_fence(siface->copy);
    }
}

static ucs_status_t span_ep_fence(uct_ep_h ep, unsigned flags)
{
    span_iface_t *siface = span_iface_get(ep->iface);

    /* what follows the fence must follow the deferred pieces too, and
     * span's own device copies (design §3.9) */
    if (span_ep_deferred(siface, ep)) {
        return UCS_ERR_NO_RESOURCE;
    }
    span_ep_copy_fence(siface);
    return siface->ops.ep_fence(ep, flags);
}

static void span_ep_destroy(uct_ep_h ep)
{
    span_iface_t *siface = span_iface_get(ep->iface);

    span_split_queue_cancel(&siface->queue, ep);
    siface->ops.ep_destroy(ep);
}

/* An op the inner transport lacks (NULL) stays absent in the twin */
#define SPAN_EP_PATCH(_ops, _name, _func) \
    if ((_ops)->_name != NULL) { \
        (_ops)->_name = _func; \
    }

void span_ep_patch(uct_iface_ops_t *ops)
{
    SPAN_EP_PATCH(ops, ep_put_short,         span_ep_put_short)
    SPAN_EP_PATCH(ops, ep_put_bcopy,         span_ep_put_bcopy)
    SPAN_EP_PATCH(ops, ep_put_zcopy,         span_ep_put_zcopy)
    SPAN_EP_PATCH(ops, ep_get_short,         span_ep_get_short)
    SPAN_EP_PATCH(ops, ep_get_bcopy,         span_ep_get_bcopy)
    SPAN_EP_PATCH(ops, ep_get_zcopy,         span_ep_get_zcopy)
    SPAN_EP_PATCH(ops, ep_am_zcopy,          span_ep_am_zcopy)
    SPAN_EP_PATCH(ops, ep_atomic_cswap64,    span_ep_atomic_cswap64)
    SPAN_EP_PATCH(ops, ep_atomic_cswap32,    span_ep_atomic_cswap32)
    SPAN_EP_PATCH(ops, ep_atomic32_post,     span_ep_atomic32_post)
    SPAN_EP_PATCH(ops, ep_atomic64_post,     span_ep_atomic64_post)
    SPAN_EP_PATCH(ops, ep_atomic32_fetch,    span_ep_atomic32_fetch)
    SPAN_EP_PATCH(ops, ep_atomic64_fetch,    span_ep_atomic64_fetch)
    SPAN_EP_PATCH(ops, ep_tag_eager_zcopy,   span_ep_tag_eager_zcopy)
    SPAN_EP_PATCH(ops, ep_tag_rndv_zcopy,    span_ep_tag_rndv_zcopy)
    SPAN_EP_PATCH(ops, iface_tag_recv_zcopy, span_iface_tag_recv_zcopy)
    SPAN_EP_PATCH(ops, ep_flush,             span_ep_flush)
    SPAN_EP_PATCH(ops, ep_fence,             span_ep_fence)
    SPAN_EP_PATCH(ops, ep_destroy,           span_ep_destroy)
}
