/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The GPU vendors this build of span has. configure compiles a vendor's
 * files (its driver's loader and calls) only where it found the vendor's
 * headers (Makefile.am's HAVE_CUDA, HAVE_ROCM); the rest of span learns
 * here, and only here, whether it did: a vendor the build lacks is NULL.
 */
#ifndef SPAN_VENDOR_H_
#define SPAN_VENDOR_H_

#include "resolve/span_device.h"
#include "vmm/span_vmm_export.h"
#include "copy/span_vmm_copy_ops.h"
#include "vmm/span_vmm_import.h"
#include "vmm/span_ipc_cache.h"

#include <ucs/memory/memory_type.h>

typedef struct span_vendor {
    ucs_memory_type_t           mem_type;  /* of the memory it resolves */
    /* Loads the driver (once): whether it has every call of users, its
     * loader's bits; those of the resolver's calls */
    int                         (*load)(unsigned users);
    unsigned                    resolver_users;
    const span_device_ops_t       *resolver;
    /* The calls of an export (span_vmm_export.h) and an import
     * (span_vmm_import.h) of VMM units */
    const span_vmm_export_ops_t *vmm_export;
    const span_vmm_import_ops_t *vmm_import;
    /* Its calls in span's copy engine (span_vmm_copy.h) */
    const span_vmm_copy_ops_t   *vmm_copy;
} span_vendor_t;

/* The vendor of memory of mem_type, or NULL where this build lacks it */
const span_vendor_t *span_vendor(ucs_memory_type_t mem_type);

/* Its resolver's calls, or NULL where this build lacks the vendor or the
 * host its driver */
const span_device_ops_t *span_vendor_driver(ucs_memory_type_t mem_type);

/* The import calls of the driver whose units keys of magic name
 * (span_vmm.h), or NULL where this build lacks it */
const span_vmm_import_ops_t *span_vendor_vmm_import(uint32_t magic);

/* The copy engine's calls for mem_type memory, or NULL where this build
 * lacks its vendor */
const span_vmm_copy_ops_t *span_vendor_vmm_copy(ucs_memory_type_t mem_type);

/* The cache of peers' cudaMalloc memory opened from legacy IPC handles
 * (span_ipc_cache.h), or NULL where this build lacks CUDA or the host a
 * driver with IPC calls */
const span_ipc_cache_ops_t *span_vendor_ipc_cache(void);

#endif
