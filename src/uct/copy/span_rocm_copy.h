/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * ROCm's calls for the VMM copy engine (span_vmm_copy.h), as rocm_ipc
 * copies: each copy of an op is queued with hsa_amd_memory_async_copy by
 * the agent of the device that owns the local buffer (or, for host memory
 * locked for devices, the remote one), and one completion signal, set to
 * their number, counts them down. Built where configure found ROCm
 * (Makefile.am).
 */
#ifndef SPAN_ROCM_COPY_H_
#define SPAN_ROCM_COPY_H_

#include "span_vmm_copy_ops.h"

extern const span_vmm_copy_ops_t span_rocm_copy_ops;

#endif
