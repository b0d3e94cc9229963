/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * CUDA's calls for the VMM copy engine (span_vmm_copy.h): an op's copies
 * go on a non-blocking stream of the device, made on first use in its
 * primary context, and an event recorded after them marks their end.
 * Built where configure found CUDA (Makefile.am).
 */
#ifndef SPAN_CUDA_COPY_H_
#define SPAN_CUDA_COPY_H_

#include "span_vmm_copy_ops.h"

extern const span_vmm_copy_ops_t span_cuda_copy_ops;

#endif
