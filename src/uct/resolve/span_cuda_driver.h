/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The CUDA driver's calls of the resolver (span_device.h) and of a VMM
 * export (span_vmm_export.h). Built only where configure found cuda.h
 * (span_vendor.h).
 */
#ifndef SPAN_CUDA_DRIVER_H_
#define SPAN_CUDA_DRIVER_H_

#include "span_device.h"
#include "vmm/span_vmm_export.h"

/* The resolver's calls; valid where span_libcuda_load said so of
 * SPAN_LIBCUDA_RESOLVER */
extern const span_device_ops_t span_cuda_driver_ops;

/* An export asks the driver for the unit's buffer id and a POSIX fd of its
 * handle (UCS_ERR_UNSUPPORTED: memory that cannot be shared so) */
extern const span_vmm_export_ops_t span_cuda_vmm_export_ops;

#endif
