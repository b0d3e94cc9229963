/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The resolver's walk, for every driver (span_device.h).
 */
#include "span_device.h"
#include "base/span_chunk.h"

#include <ucs/debug/log_def.h>
#include <inttypes.h>

/* Units of mixed allocations are whole pages of the span rkey */
#define SPAN_CUDA_UNIT_ALIGN 4096ul

/* A new unit continues the walk: it starts where the last one ended */
static ucs_status_t span_device_unit_check(const span_device_extent_t *extent,
                                           uint64_t cur, uint64_t base,
                                           uint64_t size)
{
    if ((size == 0) || (base > cur) || (base + size <= cur) ||
        ((extent->num_units > 0) && (base != cur))) {
        ucs_error("span cuda: mapping [0x%" PRIx64 ", +%" PRIu64 ") reported "
                  "for 0x%" PRIx64 " does not continue the walk", base, size,
                  cur);
        return UCS_ERR_INVALID_ADDR;
    }
    if (extent->num_units >= SPAN_CHUNK_MAX) {
        ucs_error("span cuda: range at 0x%" PRIx64 " spans more than %u "
                  "physical allocations", extent->base, SPAN_CHUNK_MAX);
        return UCS_ERR_EXCEEDS_LIMIT;
    }
    return UCS_OK;
}

static uint64_t span_device_gcd(uint64_t a, uint64_t b)
{
    uint64_t t;

    while (b != 0) {
        t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* Whether a unit of [from, to) is a VMM handle span exports: span maps an
 * exported handle whole, so its units must be whole handles */
static int span_device_any_shareable(const span_device_ops_t *ops,
                                     uint64_t from, uint64_t to)
{
    uint64_t base, size;
    int device;

    if (ops->vmm_device == NULL) {
        return 0;
    }
    for (; from < to; from = base + size) {
        if ((ops->range(from, &base, &size) != UCS_OK) ||
            (ops->vmm_device(from, &device) == UCS_OK)) {
            return 1; /* or cannot tell */
        }
    }
    return 0;
}

/*
 * Units of one size but the last map onto the chunk geometry as they are.
 * Other neighbours (cudaMalloc blocks of 1 and 3 MiB, which UCP's memtype
 * cache may merge into one region it registers whole) are cut into units
 * of the sizes' greatest common divisor: the inner MD registers pieces of
 * an allocation, whose keys each name the whole allocation.
 */
static ucs_status_t span_device_unit_size(const span_device_ops_t *ops,
                                          span_device_extent_t *extent,
                                          int uniform, uint64_t first_size,
                                          uint64_t gcd)
{
    if (extent->num_units == 1) {
        extent->unit_size = 0;
    } else if (uniform) {
        extent->unit_size = first_size;
    } else if (((gcd % SPAN_CUDA_UNIT_ALIGN) == 0) &&
               !span_device_any_shareable(ops, extent->base,
                                          extent->base + extent->length)) {
        ucs_debug("span cuda: [0x%" PRIx64 ", +%" PRIu64 ") spans %u "
                  "allocations of several sizes: units of %" PRIu64 " bytes",
                  extent->base, extent->length, extent->num_units, gcd);
        extent->unit_size = gcd;
    } else {
        ucs_error("span cuda: [0x%" PRIx64 ", +%" PRIu64 ") spans %u physical "
                  "allocations of several sizes (first %" PRIu64 " bytes, "
                  "greatest common divisor %" PRIu64 "): one registration "
                  "spans exported VMM handles of one size (but the last), or "
                  "allocations of whole pages", extent->base, extent->length,
                  extent->num_units, first_size, gcd);
        return UCS_ERR_UNSUPPORTED;
    }
    return UCS_OK;
}

ucs_status_t span_device_resolve(const span_device_ops_t *ops, uint64_t addr,
                                 uint64_t length, span_device_extent_t *extent)
{
    uint64_t cur = addr, end = addr + length, first_size = 0, last_size = 0;
    uint64_t gcd = 0, base, size, id;
    ucs_status_t status;
    int uniform = 1;

    if ((length == 0) || (end < addr)) {
        return UCS_ERR_INVALID_PARAM;
    }

    extent->num_units = 0;
    extent->identity  = SPAN_DEVICE_IDENTITY_INIT;
    while (cur < end) {
        status = ops->range(cur, &base, &size);
        if ((status != UCS_OK) && (extent->num_units > 0)) {
            /* UCP registers a few bytes past its own device allocations
             * (ucp_mem_map with ALLOCATE, as ucx_perftest -m cuda does):
             * the units found are registered, and an access past them is
             * refused as out of bounds, never served */
            ucs_debug("span cuda: [0x%" PRIx64 ", +%" PRIu64 ") ends %" PRIu64
                      " bytes past its last allocation", addr, length,
                      end - cur);
            break;
        } else if (status != UCS_OK) {
            ucs_error("span cuda: 0x%" PRIx64 " (in [0x%" PRIx64 ", +%"
                      PRIu64 ")) is not mapped device memory", cur, addr,
                      length);
            return UCS_ERR_INVALID_ADDR;
        }
        status = span_device_unit_check(extent, cur, base, size);
        if (status != UCS_OK) {
            return status;
        }
        status = ops->buffer_id(base, &id);
        if (status != UCS_OK) {
            ucs_error("span cuda: no buffer id for the allocation at 0x%"
                      PRIx64, base);
            return UCS_ERR_INVALID_ADDR;
        }
        if (extent->num_units++ == 0) {
            extent->base = base;
            first_size   = size;
        } else {
            uniform &= (last_size == first_size) && (size <= first_size);
        }
        extent->identity = span_device_identity_add(extent->identity, id);
        gcd              = span_device_gcd(gcd, size);
        last_size        = size;
        cur              = base + size;
        if (cur < base) {
            return UCS_ERR_INVALID_ADDR;
        }
    }

    extent->length = cur - extent->base;
    return span_device_unit_size(ops, extent, uniform, first_size, gcd);
}

/* The next unit of a widening walk: a shareable VMM handle on device that
 * starts at cur, of at most size bytes (the last may be shorter) */
static int span_device_widen_next(const span_device_ops_t *ops, uint64_t cur,
                                  uint64_t size, int device, uint64_t *size_p,
                                  uint64_t *id_p)
{
    uint64_t base;
    int next_device;

    return (ops->range(cur, &base, size_p) == UCS_OK) && (base == cur) &&
           (*size_p != 0) && (*size_p <= size) && (cur + *size_p > cur) &&
           (ops->vmm_device(cur, &next_device) == UCS_OK) &&
           (next_device == device) && (ops->buffer_id(cur, id_p) == UCS_OK);
}

uint32_t span_device_widen(const span_device_ops_t *ops,
                           span_device_extent_t *extent,
                           const span_device_widen_limits_t *limits)
{
    uint32_t max_units = ucs_min(limits->max_units, SPAN_CHUNK_MAX);
    uint64_t unit = extent->length, cur = extent->base + extent->length;
    uint64_t size, id;
    int device;

    if ((extent->num_units != 1) || (ops->vmm_device == NULL) ||
        (ops->vmm_device(extent->base, &device) != UCS_OK)) {
        return 0;
    }
    while ((extent->num_units < max_units) &&
           span_device_widen_next(ops, cur, unit, device, &size, &id) &&
           (cur + size - extent->base <= limits->max_bytes)) {
        extent->identity = span_device_identity_add(extent->identity, id);
        ++extent->num_units;
        cur += size;
        if (size < unit) {
            break; /* a shorter unit is the last */
        }
    }
    if (extent->num_units == 1) {
        return 0;
    }
    ucs_debug("span cuda: the VMM handle [0x%" PRIx64 ", +%" PRIu64 ") is "
              "followed by more on device %d: widened to %u handles, +%"
              PRIu64 " (limits %u handles, %" PRIu64 " bytes)", extent->base,
              unit, device, extent->num_units, cur - extent->base, max_units,
              limits->max_bytes);
    extent->length    = cur - extent->base;
    extent->unit_size = unit;
    return extent->num_units - 1;
}
