/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * ROCm twins (span_md_rocm.h).
 */
#include "span_md_rocm.h"
#include "resolve/span_rocm.h"
#include "vendor/span_vendor.h"

#include <ucs/debug/log_def.h>
#include <string.h>

void span_md_rocm_init(span_md_t *smd, const char *md_name)
{
    if (!(smd->inner_attr.reg_mem_types & UCS_BIT(UCS_MEMORY_TYPE_ROCM))) {
        return;
    }
    smd->device = span_vendor_driver(UCS_MEMORY_TYPE_ROCM);
    if (smd->device == NULL) {
        ucs_diag("span md '%s': no HIP runtime to resolve allocations: ROCm "
                 "memory is registered as given", md_name);
        return;
    }
    smd->dev_mem_type   = UCS_MEMORY_TYPE_ROCM;
    smd->vmm_export_ops = *span_vendor(UCS_MEMORY_TYPE_ROCM)->vmm_export;
    /* UCP registers ROCm memory as given (rocm is not in
     * UCX_MEMTYPE_REG_WHOLE_ALLOC_TYPES by default, and rocm's mem_query
     * reports the buffer, not its allocation): no request is cut to one
     * VMM handle, and none is widened past what its user registered */
    smd->widen.max_bytes = 0;
}

int span_md_rocm_unknown(const span_md_t *smd, ucs_memory_type_t mtype,
                         const void *address)
{
    uint64_t base, size;

    if ((smd->dev_mem_type != UCS_MEMORY_TYPE_ROCM) ||
        (mtype != UCS_MEMORY_TYPE_ROCM) ||
        (smd->device->range((uintptr_t)address, &base, &size) == UCS_OK)) {
        return 0;
    }
    ucs_debug("span md %p: HIP does not know the ROCm memory at %p: "
              "registered as given", smd, address);
    return 1;
}

/* Chunk i is one whole VMM handle made for POSIX fds */
static int span_md_rocm_chunk_shareable(const span_md_t *smd,
                                        const span_chunk_geom_t *geom,
                                        uint32_t i)
{
    uint64_t start, length, base, size;
    int device;

    span_chunk_range(geom, i, &start, &length);
    return (smd->device->range(start, &base, &size) == UCS_OK) &&
           (base == start) && (size == length) &&
           (smd->device->vmm_device(start, &device) == UCS_OK);
}

int span_md_rocm_exports(const span_md_t *smd, ucs_memory_type_t mtype,
                         const span_chunk_geom_t *geom)
{
    uint32_t i;

    if ((smd->dev_mem_type != UCS_MEMORY_TYPE_ROCM) ||
        (mtype != UCS_MEMORY_TYPE_ROCM) ||
        strcmp(smd->inner_component->name, SPAN_ROCM_IPC_COMPONENT)) {
        return 0;
    }
    for (i = 0; i < geom->num_chunks; ++i) {
        if (!span_md_rocm_chunk_shareable(smd, geom, i)) {
            return 0;
        }
    }
    ucs_debug("span md %p: [0x%" PRIx64 ", +%" PRIu64 ") is %u VMM handles "
              "rocm_ipc cannot share: span exports them", smd, geom->base,
              geom->length, geom->num_chunks);
    return 1;
}
