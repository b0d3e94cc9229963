/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * CUDA resolver over a scripted driver: which units a range resolves to,
 * and the refusals.
 */
#include "test_log.h"

#include <gtest/gtest.h>

extern "C" {
#include "resolve/span_device.h"
#include "base/span_chunk.h"
}

#include <vector>

namespace {

struct fake_mapping {
    uint64_t base;
    uint64_t size;
    uint64_t buffer_id;
    int      vmm_device; /* a shareable VMM handle's device, -1: not one */
};

/* The address space the fake driver reports */
std::vector<fake_mapping> fake_space;

ucs_status_t fake_range(uint64_t addr, uint64_t *base_p, uint64_t *size_p)
{
    for (const fake_mapping &m : fake_space) {
        if ((addr >= m.base) && (addr < m.base + m.size)) {
            *base_p = m.base;
            *size_p = m.size;
            return UCS_OK;
        }
    }
    return UCS_ERR_INVALID_ADDR;
}

ucs_status_t fake_buffer_id(uint64_t addr, uint64_t *id_p)
{
    for (const fake_mapping &m : fake_space) {
        if (addr == m.base) {
            *id_p = m.buffer_id;
            return UCS_OK;
        }
    }
    return UCS_ERR_INVALID_ADDR;
}

ucs_status_t fake_vmm_device(uint64_t addr, int *device_p)
{
    for (const fake_mapping &m : fake_space) {
        if ((addr >= m.base) && (addr < m.base + m.size) &&
            (m.vmm_device >= 0)) {
            *device_p = m.vmm_device;
            return UCS_OK;
        }
    }
    return UCS_ERR_UNSUPPORTED;
}

const span_device_ops_t fake_ops = {fake_range, fake_buffer_id,
                                  fake_vmm_device};

const uint64_t MiB = 1ull << 20;

/* count handles of size from base, buffer ids from id0 */
void fake_vmm(uint64_t base, unsigned count, uint64_t size, uint64_t id0,
              int device = 0)
{
    for (unsigned i = 0; i < count; ++i) {
        fake_space.push_back({base + i * size, size, id0 + i, device});
    }
}

class cuda_resolver : public ::testing::Test {
protected:
    void SetUp() override { fake_space.clear(); }
};

} // namespace

TEST_F(cuda_resolver, sub_allocation_resolves_to_its_allocation)
{
    span_device_extent_t ext;

    fake_space.push_back({0x7f0000000000ull, 64 * MiB, 11, -1});
    ASSERT_EQ(UCS_OK, span_device_resolve(&fake_ops, 0x7f0000000000ull + 4109,
                                          1000, &ext));
    EXPECT_EQ(0x7f0000000000ull, ext.base);
    EXPECT_EQ(64 * MiB, ext.length);
    EXPECT_EQ(1u, ext.num_units);
    EXPECT_EQ(0u, ext.unit_size);
}

TEST_F(cuda_resolver, vmm_range_resolves_to_every_handle_it_touches)
{
    span_device_extent_t ext;
    uint64_t base = 0x7e0000200000ull;

    /* PyTorch's expandable segments: 20 MiB handles; a 300 MiB tensor that
     * starts 5 MiB into the second handle touches 16 of them */
    fake_vmm(base, 21, 20 * MiB, 100);
    ASSERT_EQ(UCS_OK, span_device_resolve(&fake_ops, base + 25 * MiB,
                                          300 * MiB, &ext));
    EXPECT_EQ(base + 20 * MiB, ext.base);
    EXPECT_EQ(16u * 20 * MiB, ext.length);
    EXPECT_EQ(16u, ext.num_units);
    EXPECT_EQ(20 * MiB, ext.unit_size);
}

TEST_F(cuda_resolver, identity_changes_with_any_handle)
{
    span_device_extent_t a, b;
    uint64_t base = 0x7e0000000000ull;

    fake_vmm(base, 4, 2 * MiB, 1);
    ASSERT_EQ(UCS_OK, span_device_resolve(&fake_ops, base, 8 * MiB, &a));
    fake_space[3].buffer_id = 99; /* the last handle mapped anew */
    ASSERT_EQ(UCS_OK, span_device_resolve(&fake_ops, base, 8 * MiB, &b));
    EXPECT_NE(a.identity, b.identity);
    fake_space[3].buffer_id = 4;
    ASSERT_EQ(UCS_OK, span_device_resolve(&fake_ops, base, 8 * MiB, &b));
    EXPECT_EQ(a.identity, b.identity);
}

TEST_F(cuda_resolver, shorter_last_unit_is_accepted)
{
    span_device_extent_t ext;
    uint64_t base = 0x7e0000000000ull;

    fake_vmm(base, 3, 4 * MiB, 1);
    fake_space.push_back({base + 12 * MiB, 2 * MiB, 9, -1});
    ASSERT_EQ(UCS_OK, span_device_resolve(&fake_ops, base, 14 * MiB, &ext));
    EXPECT_EQ(4u, ext.num_units);
    EXPECT_EQ(14 * MiB, ext.length);
    EXPECT_EQ(4 * MiB, ext.unit_size);
}

TEST_F(cuda_resolver, exported_vmm_handles_of_mixed_sizes_are_refused)
{
    span_device_extent_t ext;
    uint64_t base = 0x7e0000000000ull;
    log_counter logs;

    /* span maps an exported handle whole: no unit may cut one */
    fake_vmm(base, 1, 2 * MiB, 1);
    fake_vmm(base + 2 * MiB, 1, 4 * MiB, 2);
    EXPECT_EQ(UCS_ERR_UNSUPPORTED,
              span_device_resolve(&fake_ops, base, 6 * MiB, &ext));
    fake_space.clear();
    fake_vmm(base, 1, 4 * MiB, 1);
    fake_vmm(base + 4 * MiB, 1, 2 * MiB, 2);
    fake_vmm(base + 6 * MiB, 1, 4 * MiB, 3);
    EXPECT_EQ(UCS_ERR_UNSUPPORTED,
              span_device_resolve(&fake_ops, base, 10 * MiB, &ext));
    /* allocations of sizes without a whole page in common */
    fake_space.clear();
    fake_space.push_back({base, 4 * MiB, 1, -1});
    fake_space.push_back({base + 4 * MiB, 1000000, 2, -1});
    fake_space.push_back({base + 4 * MiB + 1000000, 4 * MiB, 3, -1});
    EXPECT_EQ(UCS_ERR_UNSUPPORTED,
              span_device_resolve(&fake_ops, base, 9 * MiB, &ext));
    EXPECT_EQ(3u, logs.count("physical allocations of several sizes"));
}

TEST_F(cuda_resolver, neighbour_allocations_of_two_sizes_resolve_to_common_units)
{
    span_device_extent_t ext, first;
    uint64_t base = 0x7e0000000000ull;

    /* cudaMalloc blocks of 1 and 3 MiB, which UCP's memtype cache may merge
     * into one region that it registers whole */
    fake_space.push_back({base, 1 * MiB, 1, -1});
    fake_space.push_back({base + 1 * MiB, 3 * MiB, 2, -1});
    ASSERT_EQ(UCS_OK, span_device_resolve(&fake_ops, base, 4 * MiB, &ext));
    EXPECT_EQ(base, ext.base);
    EXPECT_EQ(4 * MiB, ext.length);
    EXPECT_EQ(2u, ext.num_units);
    EXPECT_EQ(1 * MiB, ext.unit_size);
    ASSERT_EQ(UCS_OK, span_device_resolve(&fake_ops, base, 4096, &first));
    EXPECT_NE(first.identity, ext.identity);
    /* and the other way round */
    fake_space.clear();
    fake_space.push_back({base, 4 * MiB, 1, -1});
    fake_space.push_back({base + 4 * MiB, 6 * MiB, 2, -1});
    ASSERT_EQ(UCS_OK, span_device_resolve(&fake_ops, base + 3 * MiB, 2 * MiB,
                                          &ext));
    EXPECT_EQ(10 * MiB, ext.length);
    EXPECT_EQ(2 * MiB, ext.unit_size);
}

TEST_F(cuda_resolver, range_past_device_memory_stops_at_the_gap)
{
    span_device_extent_t ext;
    uint64_t base = 0x7e0000000000ull;

    fake_space.push_back({base, 2 * MiB, 1, -1});
    fake_space.push_back({base + 4 * MiB, 2 * MiB, 2, -1}); /* hole before */
    log_counter logs;
    /* the units up to the hole: accesses past them are out of bounds */
    ASSERT_EQ(UCS_OK, span_device_resolve(&fake_ops, base, 6 * MiB, &ext));
    EXPECT_EQ(1u, ext.num_units);
    EXPECT_EQ(2 * MiB, ext.length);
    EXPECT_EQ(UCS_ERR_INVALID_ADDR,
              span_device_resolve(&fake_ops, base + 2 * MiB, 4 * MiB, &ext));
    EXPECT_EQ(UCS_ERR_INVALID_ADDR,
              span_device_resolve(&fake_ops, 0x1000, 64, &ext));
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              span_device_resolve(&fake_ops, base, 0, &ext));
    EXPECT_EQ(2u, logs.count("is not mapped device memory"));
}

namespace {

const span_device_widen_limits_t no_limits = {UINT64_MAX, SPAN_CHUNK_MAX};

/* What UCP passes with its defaults: exactly the handle at addr */
span_device_extent_t resolve_one_handle(uint64_t addr, uint64_t size)
{
    span_device_extent_t ext = {};

    EXPECT_EQ(UCS_OK, span_device_resolve(&fake_ops, addr, size, &ext));
    EXPECT_EQ(1u, ext.num_units);
    return ext;
}

} // namespace

TEST_F(cuda_resolver, one_vmm_handle_widens_over_the_handles_after_it)
{
    uint64_t base = 0x7e0000200000ull;
    span_device_extent_t all;

    /* PyTorch's expandable segment: the tensor starts in the second page */
    fake_vmm(base, 16, 20 * MiB, 100);
    span_device_extent_t ext = resolve_one_handle(base + 20 * MiB, 20 * MiB);
    EXPECT_EQ(14u, span_device_widen(&fake_ops, &ext, &no_limits));
    EXPECT_EQ(base + 20 * MiB, ext.base);
    EXPECT_EQ(15u, ext.num_units);
    EXPECT_EQ(15 * 20 * MiB, ext.length);
    EXPECT_EQ(20 * MiB, ext.unit_size);
    /* the same memory as a walk of the whole range: one identity */
    ASSERT_EQ(UCS_OK, span_device_resolve(&fake_ops, base + 20 * MiB,
                                          15 * 20 * MiB, &all));
    EXPECT_EQ(all.identity, ext.identity);
}

TEST_F(cuda_resolver, widening_stops_at_a_gap_a_device_a_size_or_a_kind)
{
    uint64_t base = 0x7e0000000000ull;

    fake_vmm(base, 3, 2 * MiB, 1);
    fake_vmm(base + 8 * MiB, 2, 2 * MiB, 10); /* after a 2 MiB hole */
    fake_vmm(base + 12 * MiB, 1, 2 * MiB, 20, 1); /* on device 1 */
    span_device_extent_t ext = resolve_one_handle(base, 2 * MiB);
    EXPECT_EQ(2u, span_device_widen(&fake_ops, &ext, &no_limits));
    EXPECT_EQ(6 * MiB, ext.length);
    ext = resolve_one_handle(base + 8 * MiB, 2 * MiB);
    EXPECT_EQ(1u, span_device_widen(&fake_ops, &ext, &no_limits));
    EXPECT_EQ(4 * MiB, ext.length);

    /* a larger handle, or memory span cannot export, ends the run; a
     * shorter one is its last unit */
    fake_space.clear();
    fake_vmm(base, 2, 2 * MiB, 1);
    fake_vmm(base + 4 * MiB, 1, 4 * MiB, 3);
    ext = resolve_one_handle(base, 2 * MiB);
    EXPECT_EQ(1u, span_device_widen(&fake_ops, &ext, &no_limits));
    EXPECT_EQ(4 * MiB, ext.length);
    fake_space.clear();
    fake_vmm(base, 2, 4 * MiB, 1);
    fake_vmm(base + 8 * MiB, 1, 2 * MiB, 3);
    fake_vmm(base + 10 * MiB, 1, 2 * MiB, 4);
    ext = resolve_one_handle(base, 4 * MiB);
    EXPECT_EQ(2u, span_device_widen(&fake_ops, &ext, &no_limits));
    EXPECT_EQ(10 * MiB, ext.length);
    EXPECT_EQ(4 * MiB, ext.unit_size);
    fake_space.clear();
    fake_vmm(base, 1, 2 * MiB, 1);
    fake_space.push_back({base + 2 * MiB, 2 * MiB, 2, -1});
    ext = resolve_one_handle(base, 2 * MiB);
    EXPECT_EQ(0u, span_device_widen(&fake_ops, &ext, &no_limits));
    EXPECT_EQ(2 * MiB, ext.length);
    EXPECT_EQ(0u, ext.unit_size);
}

TEST_F(cuda_resolver, widening_stays_within_its_limits)
{
    uint64_t base = 0x7e0000000000ull;
    span_device_widen_limits_t bytes = {7 * MiB, SPAN_CHUNK_MAX};
    span_device_widen_limits_t units = {UINT64_MAX, 2};

    fake_vmm(base, 8, 2 * MiB, 1);
    span_device_extent_t ext = resolve_one_handle(base, 2 * MiB);
    EXPECT_EQ(2u, span_device_widen(&fake_ops, &ext, &bytes));
    EXPECT_EQ(6 * MiB, ext.length);
    ext = resolve_one_handle(base, 2 * MiB);
    EXPECT_EQ(1u, span_device_widen(&fake_ops, &ext, &units));
    EXPECT_EQ(4 * MiB, ext.length);
}

TEST_F(cuda_resolver, only_one_shareable_vmm_handle_is_widened)
{
    uint64_t base = 0x7e0000000000ull;
    span_device_extent_t ext, before;

    /* cudaMalloc allocations back to back */
    fake_space.push_back({base, 2 * MiB, 1, -1});
    fake_space.push_back({base + 2 * MiB, 2 * MiB, 2, -1});
    ext = before = resolve_one_handle(base, 2 * MiB);
    EXPECT_EQ(0u, span_device_widen(&fake_ops, &ext, &no_limits));
    EXPECT_EQ(before.length, ext.length);
    EXPECT_EQ(before.identity, ext.identity);
    /* an extent of two handles already */
    fake_space.clear();
    fake_vmm(base, 4, 2 * MiB, 1);
    ASSERT_EQ(UCS_OK, span_device_resolve(&fake_ops, base, 4 * MiB, &ext));
    EXPECT_EQ(0u, span_device_widen(&fake_ops, &ext, &no_limits));
    EXPECT_EQ(4 * MiB, ext.length);
}
