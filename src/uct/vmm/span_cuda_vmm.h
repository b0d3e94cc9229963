/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The CUDA driver's calls of a VMM import (span_vmm_import.h). Built only
 * where configure found cuda.h (span_vendor.h).
 */
#ifndef SPAN_CUDA_VMM_H_
#define SPAN_CUDA_VMM_H_

#include "span_vmm_import.h"

extern const span_vmm_import_ops_t span_cuda_vmm_import_ops;

#endif
