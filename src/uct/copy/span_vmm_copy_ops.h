/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What a GPU vendor does for span's VMM copy engine (span_vmm_copy.h): the
 * runtime's calls that start copies on a device and tell when they ran,
 * one table per vendor (span_cuda_copy.c, span_rocm_copy.c). The engine
 * holds the rest once: the queue of ops, their completion in order, the
 * error of an op reported only once the copies it started ran, flushes.
 *
 * An op is a sequence: route, then begin, one copy per iov element, end.
 * The engine is serialized (it belongs to one iface), so a vendor may keep
 * what an op needs between begin and end in its state.
 */
#ifndef SPAN_VMM_COPY_OPS_H_
#define SPAN_VMM_COPY_OPS_H_

#include "vmm/span_vmm.h"

#include <ucs/memory/memory_type.h>
#include <ucs/type/status.h>
#include <stddef.h>

/* Devices an engine serves; the bit mask of a mapping's devices
 * (span_vmm_map_t.devices) has as many */
#define SPAN_VMM_COPY_MAX_DEVICES 64

/* What marks the end of an op's copies: a CUDA event, an HSA signal */
typedef union span_vmm_copy_signal {
    void     *ptr;
    uint64_t handle;
} span_vmm_copy_signal_t;

/* An op as a vendor queues it */
typedef struct span_vmm_copy_op {
    int                    is_put;
    /* where its copies run, as the vendor's route chose */
    int                    device; /* that copies, below
                                      SPAN_VMM_COPY_MAX_DEVICES; signals
                                      are kept apart per device */
    int                    host;   /* the local buffer is host memory,
                                      which a device may reach at another
                                      address (span_rocm_copy.c) */
    span_vmm_copy_signal_t signal; /* marks the end of its copies */
} span_vmm_copy_op_t;

/* A copy of a batch (span_vmm_copy_ops_t.batch): length bytes from src to
 * dst, both addresses the copying device reaches */
typedef struct span_vmm_copy_piece {
    uint64_t dst;
    uint64_t src;
    uint64_t length;
} span_vmm_copy_piece_t;

/* The most ops of a batch (UCX_SPAN_COPY_BATCH): as many as the largest
 * copy kernel holds pieces */
#define SPAN_VMM_COPY_MAX_BATCH 1024

/* How an engine batches (span_vmm_copy_create) */
typedef struct span_vmm_copy_params {
    unsigned batch_ops;   /* the most ops of one batch; below 2: none */
    size_t   batch_bytes; /* a batch is queued once it holds this many */
    uint64_t burst_gap;   /* ns: a progress of a thread that did not post
                             the last op queues the batch being filled
                             once nothing was posted for this long */
    size_t   kernel_max;  /* the largest piece a vendor's copy kernel takes
                             (0: none does); larger ones take the copy
                             engine */
} span_vmm_copy_params_t;

typedef struct span_vmm_copy_ops {
    const char        *name;        /* in log lines: "span <name> copy: " */
    ucs_memory_type_t mem_type;     /* the device memory it copies */
    size_t            vendor_size;  /* of its state in an engine */

    /* Sets up the state of an engine (zeroed): runtime references */
    ucs_status_t (*init)(void *vendor, const span_vmm_copy_params_t *params);
    /* Frees what init and the ops made; nothing is queued any more */
    void         (*cleanup)(void *vendor);

    /* The device of op that copies between local and remote, an address
     * of map, given access to map on its first use; UCS_OK, or an error
     * logged, or UCS_ERR_UNSUPPORTED (not logged) where the device cannot
     * be given access to a legacy IPC handle's map (the caller has the
     * inner transport copy) */
    ucs_status_t (*route)(void *vendor, span_vmm_map_t *map,
                          const void *local, const void *remote,
                          span_vmm_copy_op_t *op);
    /* Optional (NULL: every op is routed): the allocation of device memory
     * that holds local, on op's device as route found it, in *start_p and
     * *length_p; UCS_OK, or an error (not logged) where it is not known.
     * While an op with its buffer in it is queued, the allocation cannot
     * be freed (the op owns its buffer until it completes), so the engine
     * routes the ops that follow into it to the same device without asking
     * the runtime again */
    ucs_status_t (*extent)(void *vendor, const span_vmm_copy_op_t *op,
                           const void *local, uint64_t *start_p,
                           uint64_t *length_p);
    /* A signal of device, idle; UCS_OK, or an error logged */
    ucs_status_t (*signal_create)(void *vendor, int device,
                                  span_vmm_copy_signal_t *signal);
    void         (*signal_destroy)(void *vendor,
                                   span_vmm_copy_signal_t *signal);

    /* Begins op, of copies (> 0) copies */
    void         (*begin)(void *vendor, const span_vmm_copy_op_t *op,
                          size_t copies);
    /* Queues a copy of op, of length bytes (> 0) from local to remote (a
     * put) or back; UCS_OK, or an error logged where it was refused */
    ucs_status_t (*copy)(void *vendor, const span_vmm_copy_op_t *op,
                         void *local, void *remote, size_t length);
    /* Ends op, of which queued copies were queued: UCS_OK where its signal
     * follows them; an error logged where it cannot, once they ran */
    ucs_status_t (*end)(void *vendor, const span_vmm_copy_op_t *op,
                        size_t copies, size_t queued);

    /* Optional (NULL: every op is queued alone). Queues count pieces
     * (> 0) on device, then signal after them: UCS_OK; UCS_ERR_UNSUPPORTED
     * where the vendor cannot batch (logged at debug; not called again);
     * another error, logged, where a call failed with some pieces maybe
     * queued: the engine then queues them one by one (a piece queued twice
     * moves the same bytes, as its op owns both ends until it completes) */
    ucs_status_t (*batch)(void *vendor, int device,
                          const span_vmm_copy_piece_t *pieces, size_t count,
                          span_vmm_copy_signal_t *signal);

    /* UCS_OK once the copies signal follows ran, UCS_INPROGRESS before;
     * an error logged where the device failed them */
    ucs_status_t (*query)(void *vendor, span_vmm_copy_signal_t *signal);
    /* Waits until the copies signal follows ran */
    void         (*wait)(void *vendor, span_vmm_copy_signal_t *signal);
} span_vmm_copy_ops_t;

/* The table of _vendor, whose state is span_<_vendor>_copy_t and whose
 * calls are span_<_vendor>_copy_<member> (copy: _async; extent and batch
 * may be a NULL of that name) */
#define SPAN_VMM_COPY_OPS(_vendor, _mem_type) \
    { \
        .name           = #_vendor, \
        .mem_type       = (_mem_type), \
        .vendor_size    = sizeof(span_##_vendor##_copy_t), \
        .init           = span_##_vendor##_copy_init, \
        .cleanup        = span_##_vendor##_copy_cleanup, \
        .route          = span_##_vendor##_copy_route, \
        .extent         = span_##_vendor##_copy_extent, \
        .signal_create  = span_##_vendor##_copy_signal_create, \
        .signal_destroy = span_##_vendor##_copy_signal_destroy, \
        .begin          = span_##_vendor##_copy_begin, \
        .copy           = span_##_vendor##_copy_async, \
        .end            = span_##_vendor##_copy_end, \
        .batch          = span_##_vendor##_copy_batch, \
        .query          = span_##_vendor##_copy_query, \
        .wait           = span_##_vendor##_copy_wait \
    }

#endif
