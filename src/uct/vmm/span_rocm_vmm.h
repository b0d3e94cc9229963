/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * HIP's calls of a VMM import (span_vmm_import.h): the units a ROCm twin
 * exports (span_md_rocm.h), whose keys the importer marks with
 * SPAN_ROCM_VMM_MAGIC. Built only where configure found the HIP and HSA
 * headers (span_vendor.h).
 */
#ifndef SPAN_ROCM_VMM_H_
#define SPAN_ROCM_VMM_H_

#include "span_vmm_import.h"

extern const span_vmm_import_ops_t span_rocm_vmm_import_ops;

#endif
