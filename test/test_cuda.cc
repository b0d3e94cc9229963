/*
 * CUDA resolver over a scripted driver: which units a range resolves to,
 * and the refusals.
 */
#include "test_log.h"

#include <gtest/gtest.h>

extern "C" {
#include "resolvers/span_cuda.h"
}

#include <vector>

namespace {

struct fake_mapping {
    uint64_t base;
    uint64_t size;
    uint64_t buffer_id;
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

const span_cuda_ops_t fake_ops = {fake_range, fake_buffer_id};

const uint64_t MiB = 1ull << 20;

/* count handles of size from base, buffer ids from id0 */
void fake_vmm(uint64_t base, unsigned count, uint64_t size, uint64_t id0)
{
    for (unsigned i = 0; i < count; ++i) {
        fake_space.push_back({base + i * size, size, id0 + i});
    }
}

class cuda_resolver : public ::testing::Test {
protected:
    void SetUp() override { fake_space.clear(); }
};

} // namespace

TEST_F(cuda_resolver, sub_allocation_resolves_to_its_allocation)
{
    span_cuda_extent_t ext;

    fake_space.push_back({0x7f0000000000ull, 64 * MiB, 11});
    ASSERT_EQ(UCS_OK, span_cuda_resolve(&fake_ops, 0x7f0000000000ull + 4109,
                                        1000, &ext));
    EXPECT_EQ(0x7f0000000000ull, ext.base);
    EXPECT_EQ(64 * MiB, ext.length);
    EXPECT_EQ(1u, ext.num_units);
    EXPECT_EQ(0u, ext.unit_size);
}

TEST_F(cuda_resolver, vmm_range_resolves_to_every_handle_it_touches)
{
    span_cuda_extent_t ext;
    uint64_t base = 0x7e0000200000ull;

    /* PyTorch's expandable segments: 20 MiB handles; a 300 MiB tensor that
     * starts 5 MiB into the second handle touches 16 of them */
    fake_vmm(base, 21, 20 * MiB, 100);
    ASSERT_EQ(UCS_OK, span_cuda_resolve(&fake_ops, base + 25 * MiB,
                                        300 * MiB, &ext));
    EXPECT_EQ(base + 20 * MiB, ext.base);
    EXPECT_EQ(16u * 20 * MiB, ext.length);
    EXPECT_EQ(16u, ext.num_units);
    EXPECT_EQ(20 * MiB, ext.unit_size);
}

TEST_F(cuda_resolver, identity_changes_with_any_handle)
{
    span_cuda_extent_t a, b;
    uint64_t base = 0x7e0000000000ull;

    fake_vmm(base, 4, 2 * MiB, 1);
    ASSERT_EQ(UCS_OK, span_cuda_resolve(&fake_ops, base, 8 * MiB, &a));
    fake_space[3].buffer_id = 99; /* the last handle mapped anew */
    ASSERT_EQ(UCS_OK, span_cuda_resolve(&fake_ops, base, 8 * MiB, &b));
    EXPECT_NE(a.identity, b.identity);
    fake_space[3].buffer_id = 4;
    ASSERT_EQ(UCS_OK, span_cuda_resolve(&fake_ops, base, 8 * MiB, &b));
    EXPECT_EQ(a.identity, b.identity);
}

TEST_F(cuda_resolver, shorter_last_unit_is_accepted)
{
    span_cuda_extent_t ext;
    uint64_t base = 0x7e0000000000ull;

    fake_vmm(base, 3, 4 * MiB, 1);
    fake_space.push_back({base + 12 * MiB, 2 * MiB, 9});
    ASSERT_EQ(UCS_OK, span_cuda_resolve(&fake_ops, base, 14 * MiB, &ext));
    EXPECT_EQ(4u, ext.num_units);
    EXPECT_EQ(14 * MiB, ext.length);
    EXPECT_EQ(4 * MiB, ext.unit_size);
}

TEST_F(cuda_resolver, mixed_unit_sizes_are_refused)
{
    span_cuda_extent_t ext;
    uint64_t base = 0x7e0000000000ull;
    log_counter logs;

    fake_space.push_back({base, 2 * MiB, 1});
    fake_space.push_back({base + 2 * MiB, 4 * MiB, 2});
    EXPECT_EQ(UCS_ERR_UNSUPPORTED,
              span_cuda_resolve(&fake_ops, base, 6 * MiB, &ext));
    fake_space.clear();
    fake_space.push_back({base, 4 * MiB, 1});
    fake_space.push_back({base + 4 * MiB, 2 * MiB, 2});
    fake_space.push_back({base + 6 * MiB, 4 * MiB, 3});
    EXPECT_EQ(UCS_ERR_UNSUPPORTED,
              span_cuda_resolve(&fake_ops, base, 10 * MiB, &ext));
    EXPECT_EQ(2u, logs.count("one registration spans units of one size"));
}

TEST_F(cuda_resolver, range_past_device_memory_stops_at_the_gap)
{
    span_cuda_extent_t ext;
    uint64_t base = 0x7e0000000000ull;

    fake_space.push_back({base, 2 * MiB, 1});
    fake_space.push_back({base + 4 * MiB, 2 * MiB, 2}); /* hole before */
    log_counter logs;
    /* the units up to the hole: accesses past them are out of bounds */
    ASSERT_EQ(UCS_OK, span_cuda_resolve(&fake_ops, base, 6 * MiB, &ext));
    EXPECT_EQ(1u, ext.num_units);
    EXPECT_EQ(2 * MiB, ext.length);
    EXPECT_EQ(UCS_ERR_INVALID_ADDR,
              span_cuda_resolve(&fake_ops, base + 2 * MiB, 4 * MiB, &ext));
    EXPECT_EQ(UCS_ERR_INVALID_ADDR,
              span_cuda_resolve(&fake_ops, 0x1000, 64, &ext));
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              span_cuda_resolve(&fake_ops, base, 0, &ext));
    EXPECT_EQ(2u, logs.count("is not mapped device memory"));
}
