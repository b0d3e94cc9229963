/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The GPU vendors this build has (span_vendor.h).
 */
#ifdef HAVE_CONFIG_H
#  include "config.h"
#endif

#include "span_vendor.h"

#include <ucs/sys/compiler_def.h>
#include <stddef.h>

#if HAVE_CUDA
#include "copy/span_cuda_copy.h"
#include "resolve/span_cuda_driver.h"
#include "vmm/span_cuda_vmm.h"
#include "vmm/span_ipc_cache.h"
#include "span_libcuda.h"
#endif
#if HAVE_ROCM
#include "span_librocm.h"
#include "resolve/span_rocm.h"
#include "copy/span_rocm_copy.h"
#include "vmm/span_rocm_vmm.h"
#endif

static const span_vendor_t span_vendors[] = {
#if HAVE_CUDA
    {UCS_MEMORY_TYPE_CUDA, span_libcuda_load, SPAN_LIBCUDA_RESOLVER,
     &span_cuda_driver_ops, &span_cuda_vmm_export_ops,
     &span_cuda_vmm_import_ops, &span_cuda_copy_ops},
#endif
#if HAVE_ROCM
    {UCS_MEMORY_TYPE_ROCM, span_librocm_load, SPAN_LIBROCM_RESOLVER,
     &span_rocm_driver_ops, &span_rocm_vmm_export_ops,
     &span_rocm_vmm_import_ops, &span_rocm_copy_ops},
#endif
};

const span_vendor_t *span_vendor(ucs_memory_type_t mem_type)
{
    size_t i;

    for (i = 0; i < ucs_static_array_size(span_vendors); ++i) {
        if (span_vendors[i].mem_type == mem_type) {
            return &span_vendors[i];
        }
    }
    return NULL;
}

const span_device_ops_t *span_vendor_driver(ucs_memory_type_t mem_type)
{
    const span_vendor_t *vendor = span_vendor(mem_type);

    return ((vendor != NULL) && vendor->load(vendor->resolver_users)) ?
           vendor->resolver : NULL;
}

const span_vmm_import_ops_t *span_vendor_vmm_import(uint32_t magic)
{
    size_t i;

    for (i = 0; i < ucs_static_array_size(span_vendors); ++i) {
        if (span_vendors[i].vmm_import->magic == magic) {
            return span_vendors[i].vmm_import;
        }
    }
    return NULL;
}

const span_vmm_copy_ops_t *span_vendor_vmm_copy(ucs_memory_type_t mem_type)
{
    const span_vendor_t *vendor = span_vendor(mem_type);

    return (vendor != NULL) ? vendor->vmm_copy : NULL;
}

const span_ipc_cache_ops_t *span_vendor_ipc_cache(void)
{
#if HAVE_CUDA
    return span_libcuda_load(SPAN_LIBCUDA_IPC) ? &span_ipc_cache_ops : NULL;
#else
    return NULL;
#endif
}
