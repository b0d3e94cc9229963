/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Twin ifaces.
 *
 * A twin iface is the inner iface object itself: the twin transport's
 * iface_open (span_tl.c) opens the inner iface and span_iface_attach()
 * replaces, in the iface's own ops table, the entries that take an rkey or
 * a local memh (span_ep.c) and the iface ops below. Everything else (AM,
 * progress, flush, wireup) stays the inner transport's, at no cost. The
 * twin state of the iface (the original ops) is found through a lock-free
 * table keyed by the iface pointer (span_iface_table.c).
 */
#include "span_iface.h"
#include "span_ep.h"
#include "span_bounce.h"
#include "span_sgl.h"
#include "md/span_md.h"
#include "span_nvml.h"
#include "vendor/span_vendor.h"

#include <stdlib.h>
#include <string.h>

static ucs_status_t span_iface_flush(uct_iface_h iface, unsigned flags,
                                     uct_completion_t *comp)
{
    span_iface_t *siface = span_iface_get(iface);
    ucs_status_t status;

    if (span_ep_deferred(siface, NULL)) {
        return UCS_ERR_NO_RESOURCE;
    }
    status = siface->ops.iface_flush(iface, flags, comp);
    if (status == UCS_OK) {
        return span_ep_copy_flush(siface, comp);
    }
    return status;
}

/* twins of device memory only: VMM copies complete here */
static unsigned span_iface_progress(uct_iface_h iface)
{
    span_iface_t *siface = span_iface_get(iface);
    unsigned count       = siface->ops.iface_progress(iface);

    if (siface->copy != NULL) {
        count += span_vmm_copy_progress(siface->copy);
    }
    return count;
}

/* span's own copies signal no event of the inner transport's: while any
 * are queued, the caller must progress rather than sleep */
static ucs_status_t span_iface_event_arm(uct_iface_h iface, unsigned events)
{
    span_iface_t *siface = span_iface_get(iface);

    if ((siface->copy != NULL) && span_vmm_copy_busy(siface->copy)) {
        return UCS_ERR_BUSY;
    }
    return siface->ops.iface_event_arm(iface, events);
}

static ucs_status_t span_iface_fence(uct_iface_h iface, unsigned flags)
{
    span_iface_t *siface = span_iface_get(iface);

    if (span_ep_deferred(siface, NULL)) {
        return UCS_ERR_NO_RESOURCE;
    }
    span_ep_copy_fence(siface);
    return siface->ops.iface_fence(iface, flags);
}

static ucs_status_t span_iface_query_v2(uct_iface_h iface, void *attr)
{
    span_iface_t *siface = span_iface_get(iface);
    span_ucx_iface_query_v2_func_t query =
            ((void**)siface->inner_internal_ops)[span_ucx->query_v2_slot];
    ucs_status_t status  = query(iface, attr);

    if (status == UCS_OK) {
        span_sgl_query(siface, attr);
    }
    return status;
}

/* Replaces the inner iface's internal ops by the twin's copy */
static void span_iface_patch_internal(span_iface_t *siface, uct_iface_h iface)
{
    span_ucx_base_iface_t *base = (span_ucx_base_iface_t*)iface;

    siface->inner_internal_ops = base->internal_ops;
    memcpy(siface->internal_ops, base->internal_ops,
           span_ucx->internal_ops_size);
    /* releases with SGL ops: the twin's, each element checked */
    if (span_ucx->query_v2_slot >= 0) {
        siface->internal_ops[span_ucx->query_v2_slot] =
                (void*)span_iface_query_v2;
    }
    if (span_ucx->put_sgl_slot >= 0) {
        siface->internal_ops[span_ucx->put_sgl_slot] =
                (void*)span_sgl_put_zcopy;
    }
    if (span_ucx->get_sgl_slot >= 0) {
        siface->internal_ops[span_ucx->get_sgl_slot] =
                (void*)span_sgl_get_zcopy;
    }
    base->internal_ops = siface->internal_ops;
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

    if (siface->bounce != NULL) {
        span_bounce_query(attr);
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
    if (siface->put_zcopy_any) {
        attr->cap.put.min_zcopy = 0;
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
    span_iface_t *siface = span_iface_table_remove(iface);
    uct_iface_close_func_t inner_close = siface->ops.iface_close;

    span_split_queue_cancel(&siface->queue, NULL);
    if (siface->copy != NULL) {
        span_vmm_copy_destroy(siface->copy);
    }
    ((span_ucx_base_iface_t*)iface)->internal_ops = siface->inner_internal_ops;
    inner_close(iface);
    if (siface->bounce != NULL) {
        span_bounce_destroy(siface->bounce);
    }
    free(siface);
}

/*
 * cuda_ipc turns get zero-copy off where its NVLink probe finds no link,
 * and that probe answers at random in UCX 1.22 and 1.23 (span_nvml.c). The
 * twin takes NVML's own answer, kept for the process once NVML gave one,
 * and offers get zero-copy as far as cuda_ipc offers put zero-copy: where
 * GPU 0 has an active NVLink, or where the node has one GPU, so that every
 * peer's buffer is on the copying device. Without it UCP emulates gets
 * over active messages at under 1 GB/s, and the target's UCP reads the
 * address itself, unchecked: one byte past a registration killed the
 * target (docs/bounds.md).
 */
static size_t span_iface_get_max_zcopy(const char *inner_tl,
                                       const uct_iface_attr_t *attr)
{
    if ((strcmp(inner_tl, "cuda_ipc") != 0) ||
        !(attr->cap.flags & UCT_IFACE_FLAG_GET_ZCOPY) ||
        (attr->cap.get.max_zcopy != 0) || !span_nvml_get_zcopy()) {
        return 0;
    }

    ucs_debug("span iface '%s': get zero-copy on, where the transport's own "
              "probe found no NVLink (span_nvml.h says why)", inner_tl);
    return attr->cap.put.max_zcopy;
}

/*
 * UCP 1.22 and 1.23 take a lane for put/offload/zcopy, the only protocol
 * that offloads ucp_put to a transport with put zero-copy alone, only
 * where its put.min_zcopy is 0 (ucp_proto_common_filter_min_frag: that
 * protocol, unlike get/offload/zcopy and the rendezvous ones, does not set
 * UCP_PROTO_COMMON_INIT_FLAG_MIN_FRAG); elsewhere it emulates the put in
 * software at the target, where no transport's key is consulted: no
 * bounds check. rocm_ipc advertises UCX_ROCM_IPC_MIN_ZCOPY (128) as its
 * minimum, a threshold for protocol selection (UCX 1e91ddb1f3), not a
 * limit of its op: uct_rocm_ipc_ep_zcopy copies any length with one HSA
 * async copy (0 bytes: nothing to do). Its twin offers put zero-copy of
 * any length and hands every piece to that op, so puts into ROCm memory
 * go through the twin and are checked. Gets keep rocm_ipc's minimum:
 * get/offload/zcopy takes it as it is.
 */
static int span_iface_put_zcopy_any(const char *inner_tl,
                                    const uct_iface_attr_t *attr)
{
    return (strcmp(inner_tl, "rocm_ipc") == 0) &&
           (attr->cap.flags & UCT_IFACE_FLAG_PUT_ZCOPY) &&
           (attr->cap.put.min_zcopy != 0);
}

/* Whether the inner transport reads no local memh: its MD neither
 * registers nor allocates, so every memh UCP or the iface hands it is
 * UCT_MEM_HANDLE_NULL (cma: scopy copies the iov's buffers and lengths).
 * Its twin then passes a twin memh as it is, where it would pass NULL. */
static int span_iface_md_memh_unread(const span_md_t *smd)
{
    return !(smd->inner_attr.flags &
             (UCT_MD_FLAG_REG | UCT_MD_FLAG_ALLOC | UCT_MD_FLAG_NEED_MEMH));
}

/* An op the inner transport lacks (NULL) stays absent in the twin */
#define SPAN_IFACE_PATCH(_ops, _name, _func) \
    if ((_ops)->_name != NULL) { \
        (_ops)->_name = _func; \
    }

static void span_iface_patch(uct_iface_ops_t *ops, const span_md_t *smd)
{
    SPAN_IFACE_PATCH(ops, iface_fence, span_iface_fence)
    SPAN_IFACE_PATCH(ops, iface_flush, span_iface_flush)
    SPAN_IFACE_PATCH(ops, iface_query, span_iface_query)
    SPAN_IFACE_PATCH(ops, iface_close, span_iface_close)
    /* twins of device memory only: VMM copies complete from the iface's
     * progress, and keep it from sleeping */
    if (smd->device != NULL) {
        SPAN_IFACE_PATCH(ops, iface_progress, span_iface_progress)
        SPAN_IFACE_PATCH(ops, iface_event_arm, span_iface_event_arm)
    }
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
        ucs_error("span iface %p: no memory for its twin state (%zu bytes)",
                  iface, sizeof(*siface));
        return UCS_ERR_NO_MEMORY;
    }

    siface->ops         = iface->ops;
    siface->bounce      = span_bounce_init(smd->cma_rma, inner_tl, &attr,
                                           &iface->ops);
    siface->max_op      = (smd->chunk_size != 0) ? smd->overlap : 0;
    siface->put_max_iov = ucs_min(attr.cap.put.max_iov, SPAN_IOV_MAX);
    siface->get_max_iov = ucs_min(attr.cap.get.max_iov, SPAN_IOV_MAX);
    siface->get_max_zcopy = span_iface_get_max_zcopy(inner_tl, &attr);
    siface->get_zcopy_offered = (attr.cap.flags & UCT_IFACE_FLAG_GET_ZCOPY) &&
                                ((attr.cap.get.max_zcopy != 0) ||
                                 (siface->get_max_zcopy != 0));
    siface->copy_ops    = span_vendor_vmm_copy(smd->dev_mem_type);
    siface->copy_params = &smd->copy_params;
    siface->put_zcopy_any = span_iface_put_zcopy_any(inner_tl, &attr);
    siface->memh_unread = span_iface_md_memh_unread(smd);
    siface->memh_unset  = span_ucx->rma_memh_unset &&
                          !(smd->inner_attr.flags & UCT_MD_FLAG_NEED_MEMH);
    siface->keyless     = (smd->inner_attr.rkey_packed_size == 0);
    siface->copy        = NULL;
    span_split_queue_init(&siface->queue, worker, smd->test_no_resource);
    status = span_iface_table_insert(iface, siface);
    if (status != UCS_OK) {
        if (siface->bounce != NULL) {
            span_bounce_destroy(siface->bounce);
        }
        free(siface);
        return status;
    }

    span_ep_patch(&iface->ops);
    span_iface_patch(&iface->ops, smd);
    if (siface->bounce != NULL) {
        span_bounce_patch(&iface->ops);
    }
    span_iface_patch_internal(siface, iface);
    span_sgl_init(siface, iface);
    return UCS_OK;
}
