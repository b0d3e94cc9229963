/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The import of a peer's exported VMM units (span_vmm.h), the same for
 * every driver: reserve one range, take each unit's descriptor from the
 * exporter while its export table vouches for it (span_vmm_export.h),
 * import it as a handle, map it at its place in the range, give the
 * device access; a failure halfway undoes what was done, last first.
 * What differs between CUDA and HIP is the calls, one table per driver
 * (span_cuda_vmm.c, span_rocm_vmm.c; span_vendor.h says which this build
 * has). Imports go through the cache (span_vmm_cache.h).
 */
#ifndef SPAN_VMM_IMPORT_H_
#define SPAN_VMM_IMPORT_H_

#include "span_vmm.h"
#include "base/span_chunk.h"

#include <ucs/type/status.h>

/* A driver's calls, each logging its own failure with the driver's words;
 * a handle is the driver's, as a number */
typedef struct span_vmm_import_ops {
    const char *name;  /* of the driver, in log lines */
    uint32_t   magic;  /* of the keys of its units (span_vmm.h) */
    int        rocm;   /* its mappings are the ROCm copy engine's */
    /* Loads the driver and finds the device of the calling thread, the one
     * given access; *entered_p: what leave needs to undo (a context it made
     * current for a thread that had none) */
    ucs_status_t (*enter)(int *device_p, int *entered_p);
    void         (*leave)(int device, int entered);
    ucs_status_t (*reserve)(uint64_t length, uint64_t *va_p);
    void         (*free)(uint64_t va, uint64_t length);
    /* The unit that descriptor fd shares (the caller closes fd) */
    ucs_status_t (*import)(int fd, uint64_t *handle_p);
    void         (*release)(uint64_t handle);
    ucs_status_t (*map)(uint64_t va, uint64_t length, uint64_t handle);
    void         (*unmap)(uint64_t va, uint64_t length);
    ucs_status_t (*set_access)(uint64_t va, uint64_t length, int device);
} span_vmm_import_ops_t;

/* The table of a driver whose calls are named _prefix_enter, _prefix_leave
 * and so on, member by member */
#define SPAN_VMM_IMPORT_OPS(_prefix, _name, _magic, _rocm) \
    { \
        .name       = _name, \
        .magic      = _magic, \
        .rocm       = _rocm, \
        .enter      = _prefix##_enter, \
        .leave      = _prefix##_leave, \
        .reserve    = _prefix##_reserve, \
        .free       = _prefix##_free, \
        .import     = _prefix##_import, \
        .release    = _prefix##_release, \
        .map        = _prefix##_map, \
        .unmap      = _prefix##_unmap, \
        .set_access = _prefix##_set_access \
    }

/* Maps the geometry's units from their keys, back to back, through ops
 * (NULL: a driver this build lacks). Every key is checked to be of ops's
 * magic, of the exporter of the first and of the size the geometry makes
 * (UCS_ERR_INVALID_PARAM). Nothing stays mapped where it fails. */
ucs_status_t span_vmm_import(const span_vmm_import_ops_t *ops,
                             const span_vmm_key_t *keys,
                             const span_chunk_geom_t *geom,
                             span_vmm_map_t *map);

void span_vmm_unmap(span_vmm_map_t *map);

/* Gives device access to the mapping, once: a device copies through it */
ucs_status_t span_vmm_access(span_vmm_map_t *map, int device);

#endif
