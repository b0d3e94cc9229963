/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The CUDA resolver as a plain C call, for contrib/gpu/span_torch_check.py
 * (ctypes): how span sees a real PyTorch tensor.
 */
#include "resolve/span_cuda_driver.h"
#include "vendor/span_libcuda.h"

#include <stddef.h>

/* out: base, length, unit size, number of units */
int span_resolve(uint64_t addr, uint64_t length, uint64_t out[4])
{
    const span_device_ops_t *ops = span_libcuda_load(SPAN_LIBCUDA_RESOLVER) ?
                                 &span_cuda_driver_ops : NULL;
    span_device_extent_t ext;
    ucs_status_t status;

    if (ops == NULL) {
        return UCS_ERR_NO_DEVICE;
    }
    status = span_device_resolve(ops, addr, length, &ext);
    if (status == UCS_OK) {
        out[0] = ext.base;
        out[1] = ext.length;
        out[2] = ext.unit_size;
        out[3] = ext.num_units;
    }
    return status;
}
