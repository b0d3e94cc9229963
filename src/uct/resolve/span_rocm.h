/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * ROCm resolver: the physical units under a range of ROCm device memory, as
 * the CUDA resolver finds them (span_device.h, whose walk, unit geometry and
 * widening serve any device whose driver reports allocations one at a
 * time): a hipMalloc or pool allocation is one unit, a VMM range
 * (hipMemCreate + hipMemMap: PyTorch's expandable segments on ROCm) one
 * unit per mapped handle, each as hipMemGetAddressRange reports it, and
 * each known by its HIP buffer id. HIP and HSA are loaded at run time
 * (span_librocm.h): without them the resolver is off. Built only where
 * configure found the HIP and HSA headers (span_vendor.h); the name of
 * rocm_ipc serves every build.
 */
#ifndef SPAN_ROCM_H_
#define SPAN_ROCM_H_

#include "span_device.h"
#include "vmm/span_vmm_export.h"

/* Name of UCX's ROCm IPC component (and MD) */
#define SPAN_ROCM_IPC_COMPONENT "rocm_ipc"

/* The resolver's calls; valid where span_librocm_load said so of
 * SPAN_LIBROCM_RESOLVER */
extern const span_device_ops_t span_rocm_driver_ops;

/* The driver calls of an export of a VMM unit (span_vmm_export.h); valid
 * where the resolver's are */
extern const span_vmm_export_ops_t span_rocm_vmm_export_ops;

/* The one driver round trip of an export: *fd_p, the caller's to close,
 * shares the VMM handle mapped at base; UCS_ERR_UNSUPPORTED where that is
 * not memory that can be shared as a POSIX fd */
ucs_status_t span_rocm_vmm_export_fd(uint64_t base, int *fd_p);

#endif
