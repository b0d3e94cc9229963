/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * SGL zero-copy put and get of the twins (span_sgl.h).
 *
 * Each element (count blocks of length bytes, stride apart, from a local
 * buffer to a remote address) is checked against its rkey's registered
 * range as one op is; an element outside fails the op with
 * UCS_ERR_INVALID_ADDR and moves nothing, while the others still move (the
 * op's completion then carries the error). Elements of a key and a memh
 * that one inner registration each holds go, translated, in one SGL op of
 * the inner transport, where it has one; the others each go through the
 * twin's zero-copy op, which copies VMM units itself (span's engine gathers
 * them into batches) and splits ops at chunk ends. A strided element goes
 * block by block there, since a UCT iov's stride is the local side's only
 * (and cuda_ipc's SGL op takes none).
 *
 * The op's completion: where a completion is given, the sub-ops complete
 * one of span's (allocated for the op, as a split op's is), which
 * completes the caller's once the last of them did, with the first error.
 */
#include "span_sgl.h"
#include "md/span_md.h"
#include "ucx/span_ucx.h"
#include "base/span_completion.h"

#include <stdlib.h>

typedef ucs_status_t (*span_sgl_func_t)(uct_ep_h ep, void *const *buffers,
                                        const size_t *lengths,
                                        uct_mem_h const *memhs,
                                        const uint64_t *remote_addrs,
                                        uct_rkey_t const *rkeys,
                                        const size_t *counts,
                                        const size_t *strides, size_t count,
                                        uct_completion_t *comp);

/* The elements handed to the inner SGL op, translated: one block each
 * (cuda_ipc's, UCX 1.23, takes no counts nor strides) */
typedef struct span_sgl_list {
    void       *buffers[SPAN_SGL_MAX];
    size_t     lengths[SPAN_SGL_MAX];
    uct_mem_h  memhs[SPAN_SGL_MAX];
    uint64_t   remote_addrs[SPAN_SGL_MAX];
    uct_rkey_t rkeys[SPAN_SGL_MAX];
    size_t     n;
} span_sgl_list_t;

/* The completion the sub-ops of one SGL op share */
typedef struct span_sgl_comp {
    uct_completion_t super;
    uct_completion_t *comp;   /* the caller's */
} span_sgl_comp_t;

/* The sub-ops of one SGL op */
typedef struct span_sgl_issue {
    uct_completion_t *comp;   /* theirs: span_sgl_comp_t, or NULL */
    size_t           inflight;
    ucs_status_t     status;  /* the first error of one issued */
} span_sgl_issue_t;

/* The v2 flag of SGL put (is_put) or get in this release; 0: none */
static uint64_t span_sgl_flag(int is_put)
{
    return span_ucx->v2_flags_sgl & UCS_BIT(is_put ? 0 : 1);
}

void span_sgl_init(span_iface_t *siface, uct_iface_h iface)
{
    void **ops = siface->inner_internal_ops;
    span_ucx_iface_query_v2_func_t query;
    uint64_t attr[64] = {0}; /* more than any release's uct_iface_attr_v2_t */
    const size_t *counts;
    uint64_t flags;

    siface->inner_put_sgl = siface->inner_get_sgl = NULL;
    siface->inner_sgl_max[0] = siface->inner_sgl_max[1] = 0;
    if (span_ucx->query_v2_slot < 0) {
        return;
    }

    query   = ops[span_ucx->query_v2_slot];
    attr[0] = span_ucx->attr_v2_field_cap_flags |
              span_ucx->attr_v2_field_sgl_counts;
    if (query(iface, attr) != UCS_OK) {
        return;
    }
    flags  = *(uint64_t*)UCS_PTR_BYTE_OFFSET(attr,
                                             span_ucx->attr_v2_cap_flags_offset);
    counts = UCS_PTR_BYTE_OFFSET(attr, span_ucx->attr_v2_sgl_counts_offset);
    if ((flags & span_sgl_flag(1)) && (span_ucx->put_sgl_slot >= 0)) {
        siface->inner_put_sgl    = ops[span_ucx->put_sgl_slot];
        siface->inner_sgl_max[0] = counts[0];
    }
    if ((flags & span_sgl_flag(0)) && (span_ucx->get_sgl_slot >= 0)) {
        siface->inner_get_sgl    = ops[span_ucx->get_sgl_slot];
        siface->inner_sgl_max[1] = counts[1];
    }
}

/* The most elements the twin takes in one op of index 0 (put) or 1 (get),
 * 0 where it offers none */
static size_t span_sgl_max(const span_iface_t *siface, unsigned index)
{
    const void *inner_sgl = index ? (const void*)siface->inner_get_sgl :
                                    (const void*)siface->inner_put_sgl;

    if (!(index ? siface->get_zcopy_offered :
                  (siface->ops.ep_put_zcopy != NULL))) {
        return 0;
    }
    return ((inner_sgl != NULL) && (siface->inner_sgl_max[index] != 0)) ?
           ucs_min(siface->inner_sgl_max[index], SPAN_SGL_MAX) : SPAN_SGL_MAX;
}

void span_sgl_query(const span_iface_t *siface, void *attr)
{
    uint64_t field_mask = *(uint64_t*)attr;
    uint64_t *flags     = UCS_PTR_BYTE_OFFSET(attr,
                                              span_ucx->attr_v2_cap_flags_offset);
    size_t *counts      = UCS_PTR_BYTE_OFFSET(attr,
                                              span_ucx->attr_v2_sgl_counts_offset);
    unsigned i;

    if (field_mask & span_ucx->attr_v2_field_cap_flags) {
        *flags &= ~span_ucx->v2_flags_sgl;
        *flags |= (span_sgl_max(siface, 0) ? span_sgl_flag(1) : 0) |
                  (span_sgl_max(siface, 1) ? span_sgl_flag(0) : 0);
    }
    for (i = 0; i < span_ucx->attr_v2_num_sgl_counts; ++i) {
        if (field_mask & (span_ucx->attr_v2_field_sgl_counts & UCS_BIT(i))) {
            counts[i] = span_sgl_max(siface, i);
        }
    }
}

static void span_sgl_comp_done(uct_completion_t *self)
{
    span_sgl_comp_t *scomp = ucs_container_of(self, span_sgl_comp_t, super);

    span_completion_invoke(scomp->comp, self->status);
    free(scomp);
}

/* A sub-op is about to be issued: it holds a share of their completion
 * until it returns, and after where it is in flight */
static void span_sgl_take(span_sgl_issue_t *issue)
{
    if (issue->comp != NULL) {
        ++issue->comp->count;
    }
}

static void span_sgl_issued(span_sgl_issue_t *issue, ucs_status_t status)
{
    if (status == UCS_INPROGRESS) {
        ++issue->inflight;
        return;
    }
    if (issue->comp != NULL) {
        --issue->comp->count;
    }
    if (UCS_STATUS_IS_ERR(status) && (issue->status == UCS_OK)) {
        issue->status = status;
    }
}

/* The bytes from the start of an element to the end of its last block;
 * UINT64_MAX where that wraps */
static uint64_t span_sgl_extent(size_t length, size_t count, size_t stride)
{
    uint64_t span, end;

    if ((count == 0) || (length == 0)) {
        return 0;
    }
    if (__builtin_mul_overflow(count - 1, stride, &span) ||
        __builtin_add_overflow(span, length, &end)) {
        return UINT64_MAX;
    }
    return end;
}

/* An element through the twin's zero-copy op, block by block */
static void span_sgl_blocks(uct_ep_h ep, int is_put, void *buffer,
                            size_t length, uct_mem_h memh,
                            uint64_t remote_addr, uct_rkey_t rkey,
                            size_t count, size_t stride,
                            span_sgl_issue_t *issue)
{
    uct_iov_t iov = {buffer, length, memh, 0, 1};
    size_t k;

    for (k = 0; k < count; ++k) {
        iov.buffer = UCS_PTR_BYTE_OFFSET(buffer, k * stride);
        span_sgl_take(issue);
        span_sgl_issued(issue,
                        is_put ? uct_ep_put_zcopy(ep, &iov, 1,
                                                  remote_addr + k * stride,
                                                  rkey, issue->comp) :
                                 uct_ep_get_zcopy(ep, &iov, 1,
                                                  remote_addr + k * stride,
                                                  rkey, issue->comp));
    }
}

/* Element i: refused, added to list (translated) where the inner SGL op
 * takes it, or issued through the twin's zero-copy op */
static void span_sgl_element(uct_ep_h ep, int is_put, int inner_sgl,
                             void *buffer, size_t length, uct_mem_h memh,
                             uint64_t remote_addr, uct_rkey_t rkey,
                             size_t count, size_t stride,
                             span_sgl_list_t *list, span_sgl_issue_t *issue)
{
    const span_rkey_t *srkey = (const span_rkey_t*)rkey;
    uint64_t extent          = span_sgl_extent(length, count, stride);
    uint64_t ravail, lavail;
    uct_rkey_t inner_rkey;
    uct_mem_h inner_memh;
    size_t n;

    if (extent == 0) {
        return;
    }
    if (extent == UINT64_MAX) {
        ucs_error("span ep %p: an SGL element of %zu blocks of %zu bytes, "
                  "%zu apart, spans more bytes than an address holds", ep,
                  count, length, stride);
        span_sgl_take(issue);
        span_sgl_issued(issue, UCS_ERR_INVALID_PARAM);
        return;
    }
    if (!span_rkey_is_none(rkey)) {
        if (!span_rkey_check(srkey, remote_addr, extent)) {
            span_sgl_take(issue);
            span_sgl_issued(issue, UCS_ERR_INVALID_ADDR);
            return;
        }
        if (inner_sgl && (srkey->vmm == NULL) && (count == 1)) {
            inner_rkey = span_rkey_inner(srkey, remote_addr, &ravail);
            inner_memh = span_memh_inner(memh, buffer, &lavail);
            if ((extent <= ravail) && (extent <= lavail)) {
                n                     = list->n++;
                list->buffers[n]      = buffer;
                list->lengths[n]      = length;
                list->memhs[n]        = inner_memh;
                list->remote_addrs[n] = remote_addr;
                list->rkeys[n]        = inner_rkey;
                return;
            }
        }
    }
    span_sgl_blocks(ep, is_put, buffer, length, memh, remote_addr, rkey,
                    count, stride, issue);
}

static ucs_status_t
span_sgl_zcopy(uct_ep_h ep, int is_put, void *const *buffers,
               const size_t *lengths, uct_mem_h const *memhs,
               const uint64_t *remote_addrs, uct_rkey_t const *rkeys,
               const size_t *counts, const size_t *strides, size_t count,
               uct_completion_t *comp)
{
    span_iface_t *siface  = span_iface_get(ep->iface);
    span_sgl_func_t inner = (span_sgl_func_t)(is_put ? siface->inner_put_sgl :
                                                       siface->inner_get_sgl);
    span_sgl_issue_t issue = {NULL, 0, UCS_OK};
    span_sgl_comp_t *scomp = NULL;
    span_sgl_list_t list;
    size_t i;

    if (count > span_sgl_max(siface, !is_put)) {
        ucs_error("span ep %p: an SGL %s of %zu elements, more than the %zu "
                  "its iface reports", ep, is_put ? "put" : "get", count,
                  span_sgl_max(siface, !is_put));
        return UCS_ERR_INVALID_PARAM;
    }
    if (comp != NULL) {
        scomp = malloc(sizeof(*scomp));
        if (scomp == NULL) {
            ucs_error("span ep %p: no memory for the completion of an SGL "
                      "op of %zu elements", ep, count);
            return UCS_ERR_NO_MEMORY;
        }
        scomp->super.func   = span_sgl_comp_done;
        scomp->super.count  = 1; /* none completes it while others go */
        scomp->super.status = UCS_OK;
        scomp->comp         = comp;
        issue.comp          = &scomp->super;
    }

    list.n = 0;
    /* no memhs: as NULL ones, which a transport that reads none accepts */
    for (i = 0; i < count; ++i) {
        span_sgl_element(ep, is_put, inner != NULL, buffers[i], lengths[i],
                         (memhs != NULL) ? memhs[i] : UCT_MEM_HANDLE_NULL,
                         remote_addrs[i], rkeys[i],
                         (counts != NULL) ? counts[i] : 1,
                         (strides != NULL) ? strides[i] : 0, &list, &issue);
    }
    if (list.n > 0) {
        span_sgl_take(&issue);
        span_sgl_issued(&issue,
                        inner(ep, list.buffers, list.lengths, list.memhs,
                              list.remote_addrs, list.rkeys, NULL, NULL,
                              list.n, issue.comp));
    }

    if (issue.inflight == 0) {
        free(scomp);
        return issue.status;
    }
    if (scomp != NULL) {
        uct_completion_update_status(&scomp->super, issue.status);
        --scomp->super.count; /* in flight: the last completes the caller's */
    }
    return UCS_INPROGRESS;
}

ucs_status_t span_sgl_put_zcopy(uct_ep_h ep, void *const *buffers,
                                const size_t *lengths, uct_mem_h const *memhs,
                                const uint64_t *remote_addrs,
                                uct_rkey_t const *rkeys, const size_t *counts,
                                const size_t *strides, size_t count,
                                uct_completion_t *comp)
{
    return span_sgl_zcopy(ep, 1, buffers, lengths, memhs, remote_addrs,
                          rkeys, counts, strides, count, comp);
}

ucs_status_t span_sgl_get_zcopy(uct_ep_h ep, void *const *buffers,
                                const size_t *lengths, uct_mem_h const *memhs,
                                const uint64_t *remote_addrs,
                                uct_rkey_t const *rkeys, const size_t *counts,
                                const size_t *strides, size_t count,
                                uct_completion_t *comp)
{
    return span_sgl_zcopy(ep, 0, buffers, lengths, memhs, remote_addrs,
                          rkeys, counts, strides, count, comp);
}
