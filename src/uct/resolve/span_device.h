/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The device resolver, every vendor's: the physical units under a range of
 * device memory. A cudaMalloc or pool allocation is one unit
 * (cuMemGetAddressRange); a VMM range is one unit per mapped physical
 * allocation, which cuMemGetAddressRange reports one at a time. The walk is
 * the driver's calls' (span_device_ops_t), which HIP answers too
 * (span_rocm.h): the drivers are loaded at run time, and a build or host
 * without one has its resolver off (span_vendor.h).
 */
#ifndef SPAN_DEVICE_H_
#define SPAN_DEVICE_H_

#include <ucs/type/status.h>
#include <stdint.h>

/* The driver calls the resolver makes; a fake table in the unit tests */
typedef struct span_device_ops {
    /* The mapping that holds addr: cuMemGetAddressRange */
    ucs_status_t (*range)(uint64_t addr, uint64_t *base_p, uint64_t *size_p);
    /* Process-wide unique id of the allocation at addr (BUFFER_ID) */
    ucs_status_t (*buffer_id)(uint64_t addr, uint64_t *id_p);
    /* The device of the allocation at addr where it is VMM memory that can
     * be shared as a POSIX fd; UCS_ERR_UNSUPPORTED for any other memory */
    ucs_status_t (*vmm_device)(uint64_t addr, int *device_p);
} span_device_ops_t;

/* Whole units covering a range. Units of one registration must be of one
 * size but the last (the chunk geometry of span_chunk.h, units from the
 * base): PyTorch's expandable segments and VMM pools map same-size
 * handles. */
typedef struct span_device_extent {
    uint64_t base;      /* first byte of the first unit */
    uint64_t length;    /* to the end of the last unit */
    uint64_t unit_size; /* of every unit but the last; 0: one unit */
    uint32_t num_units;
    uint64_t identity;  /* hash of the units' buffer ids: memory allocated
                           again at the same address has another */
} span_device_extent_t;

/* The identity of memory is a hash of the buffer ids of its units, in
 * order; one unit's is
 * span_device_identity_add(SPAN_DEVICE_IDENTITY_INIT, id) */
#define SPAN_DEVICE_IDENTITY_INIT 0xcbf29ce484222325ull

static inline uint64_t span_device_identity_add(uint64_t identity, uint64_t id)
{
    return (identity ^ id) * 0x100000001b3ull;
}

/* UCS_ERR_INVALID_ADDR where addr is not device memory, UCS_ERR_UNSUPPORTED
 * for units of mixed sizes. A range that runs past the device memory at
 * addr resolves to the units up to the gap. */
ucs_status_t span_device_resolve(const span_device_ops_t *ops, uint64_t addr,
                                 uint64_t length, span_device_extent_t *extent);

/* How much of [addr, +length) the extent of span_device_resolve(addr,
 * length) covers: all but a tail past the last allocation */
static inline uint64_t span_device_covered(const span_device_extent_t *extent,
                                           uint64_t addr, uint64_t length)
{
    uint64_t end = extent->base + extent->length;

    return (addr + length > end) ? end - addr : length;
}

/* How far span_device_widen may go */
typedef struct span_device_widen_limits {
    uint64_t max_bytes; /* of the widened extent */
    uint32_t max_units;
} span_device_widen_limits_t;

/*
 * UCP registers device memory from the base of the physical allocation that
 * holds the buffer's first byte to its end (UCX_MEMTYPE_REG_WHOLE_ALLOC_TYPES,
 * "cuda" by default, from cuda_copy's cuMemGetAddressRange): a buffer over
 * several VMM handles reaches span cut to its first handle. An extent of
 * exactly one shareable VMM handle, followed by another of its size on the
 * same device, is widened over the run of such handles mapped back to back,
 * within the limits. Returns the number of units added (0: unchanged).
 */
uint32_t span_device_widen(const span_device_ops_t *ops,
                           span_device_extent_t *extent,
                           const span_device_widen_limits_t *limits);

#endif
