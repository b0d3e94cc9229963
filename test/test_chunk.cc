/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit tests of the chunk planner: every byte of small extents, against the
 * rules the twin relies on */
extern "C" {
#include "base/span_chunk.h"
}

#include "test_log.h"

#include <gtest/gtest.h>
#include <random>

namespace {

struct plan_case {
    uint64_t base, length, unit, chunk, overlap;
};

::testing::AssertionResult check_plan(const plan_case &c)
{
    span_chunk_geom_t g;
    if (span_chunk_plan(&g, c.base, c.length, c.unit, c.chunk, c.overlap) !=
        UCS_OK) {
        return ::testing::AssertionFailure() << "plan failed";
    }
    uint64_t end = c.base + c.length, covered = c.base;
    if (g.num_chunks == 0) {
        return ::testing::AssertionFailure() << "no chunks";
    }
    uint64_t prev_start = 0, prev_len = 0;
    for (uint32_t i = 0; i < g.num_chunks; ++i) {
        uint64_t start, len;
        span_chunk_range(&g, i, &start, &len);
        uint64_t unit = c.unit ? start / c.unit : 0;
        if ((len == 0) || (start < c.base) || (start + len > end) ||
            (c.chunk && (len > c.chunk)) ||
            (c.unit && ((start + len - 1) / c.unit != unit))) {
            return ::testing::AssertionFailure() << "chunk " << i << " ["
                   << start << ", +" << len << ") misplaced";
        }
        bool same_unit = (i > 0) && (!c.unit || (prev_start / c.unit == unit));
        if (same_unit && (prev_start + prev_len - start != c.overlap)) {
            return ::testing::AssertionFailure() << "chunks " << i - 1 << ", "
                   << i << " overlap by " << prev_start + prev_len - start;
        }
        if (!same_unit && (i > 0) && (start != prev_start + prev_len)) {
            return ::testing::AssertionFailure() << "gap or overlap at unit "
                   "boundary before chunk " << i;
        }
        if (start > covered) {
            return ::testing::AssertionFailure() << "gap before chunk " << i;
        }
        covered    = std::max(covered, start + len);
        prev_start = start;
        prev_len   = len;
    }
    if (covered != end) {
        return ::testing::AssertionFailure() << "covers up to " << covered;
    }
    for (uint64_t addr = c.base; addr < end; ++addr) {
        uint64_t avail, start, len;
        uint32_t i = span_chunk_find(&g, addr, &avail);
        if (i >= g.num_chunks) {
            return ::testing::AssertionFailure() << "find " << addr << " -> "
                   << i;
        }
        span_chunk_range(&g, i, &start, &len);
        if ((addr < start) || (addr + avail != start + len)) {
            return ::testing::AssertionFailure() << "find " << addr
                   << " -> chunk " << i << " [" << start << ", +" << len
                   << ") avail " << avail;
        }
        /* an op of up to overlap bytes that crosses no hard boundary fits */
        uint64_t aligned = c.unit ? addr - addr % c.unit : 0;
        uint64_t uend    = (c.unit && (end - aligned > c.unit)) ?
                           aligned + c.unit : end;
        uint64_t need = std::min(uend - addr, c.chunk ? c.overlap : end);
        if (need > avail) {
            return ::testing::AssertionFailure() << "op of " << need
                   << " at " << addr << " has only " << avail;
        }
    }
    return ::testing::AssertionSuccess();
}

} // namespace

TEST(span_chunk, fixed_cases)
{
    const plan_case cases[] = {
        {4096, 1000, 0, 0, 0},        /* no limit: one chunk */
        {4096, 1000, 0, 1000, 100},   /* exactly one chunk */
        {4096, 1001, 0, 1000, 100},   /* one byte more */
        {4096, 5000, 0, 1000, 100},
        {4097, 5000, 0, 1000, 999},   /* overlap just below the chunk */
        {100, 3000, 512, 0, 0},       /* hard boundaries only */
        {512, 1024, 512, 0, 0},       /* aligned to units */
        {100, 3000, 512, 200, 50},    /* both */
        {1000, 24, 512, 200, 50},     /* crosses one boundary */
    };
    for (auto &c : cases) {
        EXPECT_TRUE(check_plan(c)) << c.base << " +" << c.length << " unit "
                                   << c.unit << " chunk " << c.chunk
                                   << " overlap " << c.overlap;
    }
}

TEST(span_chunk, random_geometries)
{
    std::mt19937_64 rng(7);
    for (int n = 0; n < 3000; ++n) {
        plan_case c;
        c.base    = rng() % 5000;
        c.length  = 1 + rng() % 3000;
        c.unit    = (rng() % 3) ? 0 : 64 + rng() % 1000;
        c.chunk   = (rng() % 4) ? 16 + rng() % 600 : 0;
        c.overlap = c.chunk ? rng() % c.chunk : 0;
        ASSERT_TRUE(check_plan(c)) << c.base << " +" << c.length << " unit "
                                   << c.unit << " chunk " << c.chunk
                                   << " overlap " << c.overlap;
    }
}

TEST(span_chunk, extents_at_the_top_of_the_address_space)
{
    std::mt19937_64 rng(11);
    for (int n = 0; n < 2000; ++n) {
        plan_case c;
        c.length  = 1 + rng() % 3000;
        c.base    = UINT64_MAX - c.length - rng() % 100; /* end < 2^64 */
        c.unit    = (rng() % 2) ? 0 : 64 + rng() % 1000;
        c.chunk   = (rng() % 4) ? 16 + rng() % 600 : 0;
        c.overlap = c.chunk ? rng() % c.chunk : 0;
        ASSERT_TRUE(check_plan(c)) << c.base << " +" << c.length << " unit "
                                   << c.unit << " chunk " << c.chunk
                                   << " overlap " << c.overlap;
    }
}

TEST(span_chunk, huge_extents_never_wrap_the_count)
{
    /* found by the rkey fuzzer: a unit count that wrapped made 0 chunks */
    span_chunk_geom_t g;
    log_counter logs;
    EXPECT_EQ(UCS_ERR_EXCEEDS_LIMIT,
              span_chunk_plan(&g, 0, 0xfffffffffffff700ull, 0x10010000000ull,
                              0xffffffff000ull, 0x38373737000ull));
    for (uint64_t unit : {uint64_t(1) << 40, uint64_t(1) << 62,
                          uint64_t(3) << 62}) {
        if (span_chunk_plan(&g, 4096, UINT64_MAX - 8192, unit, 0, 0) ==
            UCS_OK) {
            EXPECT_GE(g.num_chunks, 1u);
            EXPECT_TRUE(check_plan({4096, 4096, unit, 0, 0}));
        }
    }
    EXPECT_EQ(logs.count(), logs.count("chunks of"));
    EXPECT_LE(1u, logs.count());
}

TEST(span_chunk, bad_plans_are_refused)
{
    span_chunk_geom_t g;
    log_counter logs;
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, span_chunk_plan(&g, 0, 0, 0, 0, 0));
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              span_chunk_plan(&g, UINT64_MAX - 5, 10, 0, 0, 0));
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, span_chunk_plan(&g, 0, 100, 0, 10, 10));
    EXPECT_EQ(UCS_ERR_EXCEEDS_LIMIT,
              span_chunk_plan(&g, 0, 1ull << 40, 0, 1 << 20, 0));
    EXPECT_EQ(UCS_ERR_EXCEEDS_LIMIT,
              span_chunk_plan(&g, 0, 1ull << 40, 4096, 0, 0));
    EXPECT_EQ(3u, logs.count("cannot plan"));
    EXPECT_EQ(2u, logs.count("more than 65535"));
    /* the largest count still plans */
    EXPECT_EQ(UCS_OK, span_chunk_plan(&g, 0, uint64_t(SPAN_CHUNK_MAX) << 20, 0,
                                      1 << 20, 0));
    EXPECT_EQ(SPAN_CHUNK_MAX, g.num_chunks);
}
