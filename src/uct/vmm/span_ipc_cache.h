/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A peer's cudaMalloc memory (legacy CUDA IPC handles), opened by span so
 * that its engine copies it (span_vmm_copy.h), batched as VMM units are,
 * not cuda_ipc one copy and one event per op.
 *
 * The handle is read from the peer's cuda_ipc key (every span rkey of
 * cuda_ipc+ carries one per chunk), at the place this UCX release lays it,
 * and the allocation the key names must hold the span rkey's extent; what
 * the driver opens must be an allocation of exactly the size the key says,
 * or the mapping is refused. The handle is opened in the primary context
 * (as cuda_ipc opens it: CUDA allows one context per device to open a
 * peer's handles) of the calling thread's device, or, for a thread with no
 * context, of the first device whose primary context is active (none is
 * made on a device the application does not use); the context stays
 * retained while the handle is open. Only that device's copies go through
 * it, others go to cuda_ipc. The driver counts the opens of one handle in one context, so
 * span's and cuda_ipc's mappings of it coexist: each closes its own.
 * A key of this process names its own memory, used as it is.
 *
 * Mappings are shared by every rkey of the same allocation and kept when
 * unused, up to SPAN_IPC_CACHE_IDLE, least recently used dropped first;
 * none is closed while the engine has copies through it queued
 * (span_vmm_map_t.busy). A key of an allocation that overlaps a mapping
 * of the same peer under another handle (the peer freed that memory and
 * allocated anew) closes that mapping first, as cuda_ipc's cache does
 * (a driver that still had the old handle open could refuse cuda_ipc's
 * open of the new one, which cuda_ipc makes fatal): an unused one is
 * dropped; one an rkey still names is revoked (its ops go to the inner
 * transport, as natively) and closed at once, or once the copies through
 * it ran. A child forked after opens never uses nor closes its parent's
 * mappings. Thread safe.
 */
#ifndef SPAN_IPC_CACHE_H_
#define SPAN_IPC_CACHE_H_

#include "span_vmm.h"
#include "base/span_chunk.h"

#include <ucs/type/status.h>
#include <stddef.h>

/* Unused mappings kept */
#define SPAN_IPC_CACHE_IDLE 16

/* The cache's calls (span_vendor_ipc_cache: CUDA builds only) */
typedef struct span_ipc_cache_ops {
    /* Drops the unused mappings that a cuda_ipc key of key_size bytes,
     * its legacy handle at byte offset (0: none is read), of the span
     * rkey's extent geom, makes stale: called before the key's inner
     * unpack, which may open its handle */
    void         (*prepare)(const uint8_t *key, size_t key_size,
                            size_t offset, const span_chunk_geom_t *geom);
    /* The mapping of the allocation such a key names, holding the extent
     * of geom, with one more reference; UCS_ERR_UNSUPPORTED (logged at
     * debug) where the key is no legacy handle span can read or open */
    ucs_status_t (*get)(const uint8_t *key, size_t key_size, size_t offset,
                        const span_chunk_geom_t *geom, span_vmm_map_t **map_p);
    /* Drops a reference of get */
    void         (*put)(span_vmm_map_t *map);
    /* Closes every unused mapping no copy goes through */
    void         (*purge)(void);
} span_ipc_cache_ops_t;

extern const span_ipc_cache_ops_t span_ipc_cache_ops;

#endif
