/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Twin memory domain: registers through an inner MD, in chunks where the
 * inner MD cannot register a unit at once, and packs span rkeys.
 */
#ifndef SPAN_MD_H_
#define SPAN_MD_H_

#include "span_registry.h"
#include "span_md_inner.h"
#include "base/span_chunk.h"
#include "key/span_rkey.h"
#include "resolve/span_device.h"
#include "copy/span_vmm_copy_ops.h"
#include "vmm/span_vmm_export.h"

/* A twin is named after its inner MD or transport with this suffix */
#define SPAN_TWIN_SUFFIX "+"

typedef struct span_md_config {
    uct_md_config_t super;
    size_t          max_chunk;
    size_t          chunk_overlap;
    size_t          vmm_widen;
    unsigned        copy_batch;
    size_t          copy_batch_size;
    double          copy_burst_gap;
    size_t          copy_kernel_max;
    size_t          test_unit_size;
    unsigned        test_fail_reg;
    unsigned        test_fail_dereg;
    unsigned        test_no_resource;
    int             spill;
    int             cma_rma;
} span_md_config_t;

typedef struct span_md {
    uct_md_t         super;
    uct_md_h         inner;
    const uct_md_ops_t *inner_ops;     /* the inner MD's own ops: the object
                                          records others' registrations */
    span_md_inner_t  *inner_wrap;      /* which, where it packs keys */
    uct_component_t *inner_component;
    uint32_t         inner_id;         /* span_rkey_component_id() */
    uct_md_attr_v2_t inner_attr;
    size_t           rkey_packed_size; /* fixed: what every key sends */
    uint64_t         chunk_size;       /* 0: registrations are not cut */
    uint64_t         overlap;          /* of neighbour chunks; the op cap */
    uint64_t         unit_size;        /* 0: no hard boundaries declared */
    unsigned         test_fail_reg;    /* 1-based chunk to fail, 0: none */
    unsigned         test_fail_dereg;
    unsigned         test_no_resource; /* 1-based piece of split ops */
    int              cma_rma;          /* cma+'s short and bcopy RMA, where
                                          UCX needs them (span_bounce.h) */
    int              share;            /* memory events seen: registrations
                                          of a range are shared */
    const span_device_ops_t *device;   /* resolves device memory, or NULL */
    ucs_memory_type_t dev_mem_type;    /* the memory it resolves: CUDA, or
                                          ROCM (span_md_rocm.h) */
    span_vmm_export_ops_t vmm_export_ops; /* where device is set */
    span_vmm_copy_params_t copy_params; /* of its ifaces' copy engines */
    span_device_widen_limits_t widen;  /* max_bytes 0: registrations of one
                                          VMM handle are not widened */
    int              spill;            /* UCS_YES: always, UCS_TRY: keys
                                          that do not fit inline */
    span_registry_stats_t stats;
} span_md_t;

/* Marks a span_memh_t. A twin iface is handed the inner MD's own handles
 * too (memory from uct_iface_mem_alloc() on it): those pass to the inner
 * transport as they are (span_md_inner.h). */
#define SPAN_MEMH_MAGIC 0x5350414e4d454d48ull /* "SPANMEMH" */

/* A registration through a twin MD: one inner registration per chunk */
typedef struct span_memh {
    uint64_t          magic;      /* SPAN_MEMH_MAGIC */
    uint32_t          num_inner;  /* 0 where the inner MD does not register */
    span_registry_entry_t entry;  /* owner NULL: not shared (mem_alloc) */
    span_chunk_geom_t geom;       /* the units and chunks registered */
    uint64_t          win_base;   /* the range registered: what its first */
    uint64_t          win_length; /* request asked for, or widened to */
    uint8_t           rkey_size;
    uint8_t           rkey[SPAN_RKEY_MAX_SIZE]; /* packed once, at reg */
    int               spilled;    /* the keys are in the spill slot */
    span_rkey_spill_t spill;
    span_vmm_export_t **vmm_exports; /* units span exports, or NULL */
    uct_mem_h         inner[];    /* num_inner, and at least one: NULL
                                     where num_inner is 0 */
} span_memh_t;

/* Whether memh is a twin MD's. NULL and UCX's dummy handle of MDs that
 * only pretend to register (uct_md_dummy_mem_reg) are not read. */
static UCS_F_ALWAYS_INLINE int span_memh_is_ours(uct_mem_h memh)
{
    return (memh != UCT_MEM_HANDLE_NULL) && (memh != (uct_mem_h)0xdeadbeef) &&
           (((const span_memh_t*)memh)->magic == SPAN_MEMH_MAGIC);
}

/* The inner memory handle that holds buffer, and in *avail_p how many bytes
 * from buffer on it holds (UINT64_MAX where one handle holds everything).
 * A handle that is not a twin's (NULL, the inner MD's own) stays as it is;
 * a buffer outside a handle of several chunks (the caller passed another
 * buffer's memh) gets NULL and 0 bytes. */
static UCS_F_ALWAYS_INLINE uct_mem_h
span_memh_inner(uct_mem_h memh, const void *buffer, uint64_t *avail_p)
{
    const span_memh_t *smem = (const span_memh_t*)memh;

    *avail_p = UINT64_MAX;
    if (!span_memh_is_ours(memh)) {
        return memh;
    }
    if (ucs_likely(smem->num_inner <= 1)) {
        return smem->inner[0];
    }
    /* the chunk index of an address outside the extent is past the array;
     * one below the base wraps to a large offset; an empty entry at the
     * end lies in the last chunk */
    if (ucs_unlikely((uintptr_t)buffer - smem->geom.base >
                     smem->geom.length)) {
        *avail_p = 0;
        return UCT_MEM_HANDLE_NULL;
    }
    return smem->inner[span_chunk_find(&smem->geom, (uintptr_t)buffer,
                                       avail_p)];
}

#endif
