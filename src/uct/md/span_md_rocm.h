/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What a twin of an MD that registers ROCm memory (rocm_ipc+) does beyond
 * the CUDA twins: the ROCm resolver (resolve/span_rocm.h) in place of
 * the CUDA one, memory HIP does not know registered as given, and VMM
 * units span exports itself, because rocm_ipc cannot share them at all.
 */
#ifndef SPAN_MD_ROCM_H_
#define SPAN_MD_ROCM_H_

#include "span_md.h"

/* Sets the twin up to resolve ROCm memory, where its inner MD registers
 * it and HIP can be loaded */
void span_md_rocm_init(span_md_t *smd, const char *md_name);

/* Whether address is ROCm memory the resolver cannot tell apart (memory
 * allocated through HSA directly, which HIP need not know): registered as
 * given, as the inner MD would register it */
int span_md_rocm_unknown(const span_md_t *smd, ucs_memory_type_t mtype,
                         const void *address);

/*
 * Whether the twin exports every unit of geom itself, the inner MD
 * registering none: each chunk is one whole VMM handle made for POSIX fds
 * (hipMemCreate; PyTorch's expandable segments). rocm_ipc's IPC handles
 * refuse such memory (ROCm/clr #265): natively UCP cannot register it
 * with rocm_ipc at all.
 */
int span_md_rocm_exports(const span_md_t *smd, ucs_memory_type_t mtype,
                         const span_chunk_geom_t *geom);

#endif
