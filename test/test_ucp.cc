/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * UCP level: put, get, atomics and tag send between two processes (cma+) or
 * within one (self+), every byte checked where it landed, and the same over
 * the native transports as a control.
 */
#include "tools/harness/span_pair.h"
#include "test_deadline.h"
#include "test_log.h"
#include "test_uct_util.h"

#include <gtest/gtest.h>
#include <dlfcn.h>
#include <cstring>
#include <string>
#include <vector>

namespace {

/* strict is a module UCX 1.21 and older do not load by name */
::testing::Environment *const strict_env =
        ::testing::AddGlobalTestEnvironment(new strict_loader);

} // namespace

namespace {

struct ucp_case {
    const char       *tls;
    span_pair_mode_t mode;
    const char       *rma_tl; /* transport UCP must pick for RMA */
    bool             spill = false; /* UCX_SPAN_SPILL=y: keys read from
                                       the target's spill arena */
};

/* How an endpoint's info names a transport it uses: UCX 1.16 and later
 * print the protocols (" cma+/memory"); 1.15 and earlier, which run UCP's
 * v1 protocols by default, print only the lanes ("1:cma+/memory") */
std::string ep_info_tl(const std::string &tl)
{
    unsigned major, minor, release;

    ucp_get_version(&major, &minor, &release);
    return (((major == 1) && (minor < 16)) ? ":" : " ") + tl + "/";
}

const size_t page   = 4096;
const size_t max_sz = 64ul << 20;
const std::vector<size_t> sizes = {1, 8, 63, 4096, 65537, (1ul << 20) + 3,
                                   8ul << 20, max_sz};

class ucp_pair : public ::testing::TestWithParam<ucp_case> {
protected:
    void SetUp() override
    {
        if (GetParam().spill) {
            setenv("UCX_SPAN_SPILL", "y", 1);
        }
        ASSERT_EQ(UCS_OK, span_pair_start(&m_pair, GetParam().mode,
                                          GetParam().tls,
                                          UCP_FEATURE_RMA | UCP_FEATURE_AMO64 |
                                          UCP_FEATURE_TAG));
        m_started = true;
    }

    void TearDown() override
    {
        if (m_started) {
            if (m_mapped) {
                span_pair_unmap(&m_pair, &m_region);
            }
            EXPECT_EQ(0, span_pair_stop(&m_pair)) << "target did not exit "
                                                     "cleanly";
        }
        unsetenv("UCX_SPAN_SPILL");
    }

    /* A registration [page, page + length) inside an allocation with one
     * page of guard on each side. */
    void map(size_t length, unsigned seed)
    {
        ASSERT_EQ(UCS_OK, span_pair_map(&m_pair, length + 2 * page, page,
                                        length, seed, &m_region));
        m_mapped = true;
    }

    size_t check(size_t offset, size_t length, unsigned seed)
    {
        return span_pair_check(&m_pair, &m_region, offset, length, seed);
    }

    bool twin() const
    {
        return std::string(GetParam().tls).find('+') != std::string::npos;
    }

    span_pair_t        m_pair    = {};
    span_pair_region_t m_region  = {};
    bool               m_started = false;
    bool               m_mapped  = false;
};

TEST_P(ucp_pair, uses_expected_transport)
{
    std::vector<char> info(65536);
    span_pair_ep_info(&m_pair, info.data(), info.size());
    std::string text(info.data());
    std::string tl = ep_info_tl(GetParam().rma_tl);
    EXPECT_NE(std::string::npos, text.find(tl)) << text;
    if (!twin()) {
        EXPECT_EQ(std::string::npos, text.find("+/")) << text;
    }
}

TEST_P(ucp_pair, put_every_size)
{
    map(max_sz + 64, 1);
    for (size_t i = 0; i < sizes.size(); ++i) {
        size_t length = sizes[i];
        size_t offset = page + 7 + i; /* unaligned, inside the registration */
        unsigned seed = 100 + i;
        std::vector<uint8_t> src(length);
        span_pair_fill(src.data(), length, seed, offset);
        ASSERT_EQ(UCS_OK, span_pair_refill(&m_pair, &m_region, 1));
        ASSERT_EQ(UCS_OK, span_pair_put(&m_pair, &m_region, offset,
                                        src.data(), length)) << length;
        EXPECT_EQ(0u, check(offset, length, seed)) << "put of " << length;
        EXPECT_EQ(0u, check(0, offset, 1)) << "bytes before, put " << length;
        EXPECT_EQ(0u, check(offset + length,
                            m_region.alloc_length - offset - length, 1))
                << "bytes after, put " << length;
    }
}

TEST_P(ucp_pair, get_every_size)
{
    map(max_sz + 64, 2);
    for (size_t i = 0; i < sizes.size(); ++i) {
        size_t length = sizes[i];
        size_t offset = page + 13 + i;
        std::vector<uint8_t> dst(length + 2, 0xee);
        ASSERT_EQ(UCS_OK, span_pair_get(&m_pair, &m_region, offset,
                                        dst.data() + 1, length)) << length;
        EXPECT_EQ(0u, span_pair_mismatches(dst.data() + 1, length, 2, offset))
                << "get of " << length;
        EXPECT_EQ(0xee, dst[0]);
        EXPECT_EQ(0xee, dst[length + 1]);
    }
}

TEST_P(ucp_pair, atomics)
{
    map(page, 3);
    size_t offset = page + 64;
    uint64_t value, result;

    ASSERT_EQ(UCS_OK, span_pair_read64(&m_pair, &m_region, offset, &value));
    uint64_t expect = value + 5;
    ASSERT_EQ(UCS_OK, span_pair_atomic(&m_pair, &m_region, offset,
                                       UCP_ATOMIC_OP_ADD, 5, 0, NULL));
    ASSERT_EQ(UCS_OK, span_pair_read64(&m_pair, &m_region, offset, &value));
    EXPECT_EQ(expect, value);

    ASSERT_EQ(UCS_OK, span_pair_atomic(&m_pair, &m_region, offset,
                                       UCP_ATOMIC_OP_ADD, 7, 0, &result));
    EXPECT_EQ(expect, result);
    expect += 7;

    ASSERT_EQ(UCS_OK, span_pair_atomic(&m_pair, &m_region, offset,
                                       UCP_ATOMIC_OP_CSWAP, 42, expect + 1,
                                       &result));
    EXPECT_EQ(expect, result) << "failed compare must not swap";
    ASSERT_EQ(UCS_OK, span_pair_atomic(&m_pair, &m_region, offset,
                                       UCP_ATOMIC_OP_CSWAP, 42, expect,
                                       &result));
    EXPECT_EQ(expect, result);
    ASSERT_EQ(UCS_OK, span_pair_atomic(&m_pair, &m_region, offset,
                                       UCP_ATOMIC_OP_SWAP, 9, 0, &result));
    EXPECT_EQ(42u, result);
    ASSERT_EQ(UCS_OK, span_pair_read64(&m_pair, &m_region, offset, &value));
    EXPECT_EQ(9u, value);
    EXPECT_EQ(0u, check(0, offset, 3)) << "atomics touched other bytes";
    EXPECT_EQ(0u, check(offset + 8, m_region.alloc_length - offset - 8, 3));
}

TEST_P(ucp_pair, tag_eager_and_rendezvous)
{
    for (size_t i = 0; i < sizes.size(); ++i) {
        ucs_status_t status;
        size_t bad = span_pair_tag_send(&m_pair, sizes[i], 200 + i, &status);
        ASSERT_EQ(UCS_OK, status) << sizes[i];
        EXPECT_EQ(0u, bad) << "tag send of " << sizes[i];
    }
}

INSTANTIATE_TEST_SUITE_P(
        transports, ucp_pair,
        ::testing::Values(ucp_case{"posix,cma+", SPAN_PAIR_FORK, "cma+"},
                          ucp_case{"posix,cma", SPAN_PAIR_FORK, "cma"},
                          ucp_case{"self+", SPAN_PAIR_LOOPBACK, "self+"},
                          ucp_case{"self", SPAN_PAIR_LOOPBACK, "self"}),
        [](const ::testing::TestParamInfo<ucp_case> &info) {
            std::string name = info.param.tls;
            for (auto &c : name) {
                c = (c == '+') ? 'P' : (isalnum(c) ? c : '_');
            }
            return name;
        });

/* Only twins check remote ranges: native transports write past the
 * registration (into the guard page) with a success status. UCP serves a
 * get over self by software emulation (active messages, self has no
 * get_zcopy), which no transport's rkey sees, so only the put is checked
 * there. */
class ucp_twin : public ucp_pair {
};

TEST_P(ucp_twin, out_of_bounds_is_refused)
{
    map(4 * page, 4);
    std::vector<uint8_t> buf(2 * page, 0x55);
    size_t reg_end = page + 4 * page;
    const struct {
        size_t offset, length;
    } cases[] = {{reg_end - 64, 128},       /* runs past the end */
                 {reg_end, 8},              /* starts at the end */
                 {page - 8, 16},            /* starts before */
                 {0, 2 * page}};            /* starts in the guard */

    bool get_offloaded = (GetParam().mode == SPAN_PAIR_FORK);
    size_t refused     = 0;
    log_counter logs;

    for (auto &c : cases) {
        refused += get_offloaded ? 2 : 1;
        EXPECT_NE(UCS_OK, span_pair_put(&m_pair, &m_region, c.offset,
                                        buf.data(), c.length))
                << "put at " << c.offset << " len " << c.length;
        if (!get_offloaded) {
            continue;
        }
        EXPECT_NE(UCS_OK, span_pair_get(&m_pair, &m_region, c.offset,
                                        buf.data(), c.length))
                << "get at " << c.offset << " len " << c.length;
    }
    EXPECT_LE(refused, logs.count("is outside the registered extent"))
            << "a refusal was not logged";
    EXPECT_EQ(0u, check(0, m_region.alloc_length, 4)) << "target modified";
}

/* One UCP SGL put of 64 blocks of 1000 bytes every other 1000 (UCX 1.22
 * and later; UCP has no SGL get, 1.23 neither): every block's bytes land
 * through the twin's SGL op, which checks each element; with one block
 * whose last byte lies past the registration, the request fails with
 * UCS_ERR_INVALID_ADDR, that block moves nothing and the others land */
TEST_P(ucp_pair, sgl_put_of_many_blocks)
{
    if (std::string(GetParam().tls) != "posix,cma+") {
        GTEST_SKIP() << "UCP moves no SGL over self (no zero-copy put) nor, "
                        "in 1.22, over cma (no SGL op): the twin's is tested";
    }
    const size_t block = 1000, count = 64, len = 2 * block * count;
    map(len + page, 4);
    const size_t start   = m_region.reg_offset;
    const size_t reg_end = m_region.reg_offset + m_region.reg_length;
    std::vector<uint8_t> local(len);
    span_pair_fill(local.data(), len, 9, start);

    ASSERT_EQ(UCS_OK, span_pair_rma_sgl(&m_pair, &m_region, start,
                                        local.data(), block, 2 * block, count,
                                        0, 0));
    for (size_t i = 0; i < count; ++i) {
        EXPECT_EQ(0u, check(start + 2 * i * block, block, 9)) << "put " << i;
        EXPECT_EQ(0u, check(start + (2 * i + 1) * block, block, 4)) << i;
    }

    ASSERT_EQ(UCS_OK, span_pair_refill(&m_pair, &m_region, 4));
    log_counter logs;
    EXPECT_EQ(UCS_ERR_INVALID_ADDR,
              span_pair_rma_sgl(&m_pair, &m_region, start, local.data(),
                                block, 2 * block, count, 0, 5));
    EXPECT_EQ(1u, logs.count("is outside the registered extent"));
    for (size_t i = 0; i < count; ++i) {
        if (i != 4) {
            EXPECT_EQ(0u, check(start + 2 * i * block, block, 9)) << i;
        }
    }
    EXPECT_EQ(0u, check(reg_end - block + 1, block - 1 + page, 4))
            << "the refused block moved bytes";
}

/* The control: the native transport writes past the registration with a
 * success status, the bug class twins exist to catch. If this starts
 * failing, native UCX began checking and the twin test lost its contrast. */
class ucp_native : public ucp_pair {
};

TEST_P(ucp_native, out_of_bounds_goes_unnoticed)
{
    map(4 * page, 5);
    std::vector<uint8_t> buf(128);
    size_t reg_end = page + 4 * page;

    span_pair_fill(buf.data(), buf.size(), 6, reg_end - 64);
    ASSERT_EQ(UCS_OK, span_pair_put(&m_pair, &m_region, reg_end - 64,
                                    buf.data(), buf.size()));
    EXPECT_EQ(0u, check(reg_end, 64, 6)) << "guard page not overwritten";
}

INSTANTIATE_TEST_SUITE_P(
        natives, ucp_native,
        ::testing::Values(ucp_case{"posix,cma", SPAN_PAIR_FORK, "cma"}),
        [](const ::testing::TestParamInfo<ucp_case> &) {
            return std::string("cma");
        });

INSTANTIATE_TEST_SUITE_P(
        twins, ucp_twin,
        ::testing::Values(ucp_case{"posix,cma+", SPAN_PAIR_FORK, "cma+"},
                          ucp_case{"posix,strict+", SPAN_PAIR_FORK, "strict+"},
                          ucp_case{"posix,strict+", SPAN_PAIR_FORK, "strict+",
                                   true},
                          ucp_case{"self+", SPAN_PAIR_LOOPBACK, "self+"}),
        [](const ::testing::TestParamInfo<ucp_case> &info) {
            std::string name = info.param.rma_tl;
            return name.substr(0, name.size() - 1) + "P" +
                   (info.param.spill ? "_spilled" : "");
        });

} // namespace

/*
 * Chunked registrations at UCP level: chunks of 64 KiB overlapping by 16 KiB
 * and, over cma+, hard boundaries at every absolute 256 KiB (self+ moves
 * bytes with short and bcopy ops, which are refused across hard boundaries,
 * and only IPC transports, all zcopy, ever meet those).
 */
class ucp_chunked : public ucp_pair {
protected:
    static constexpr size_t chunk = 65536, overlap = 16384, unit = 262144;
    static constexpr size_t length = (1 << 20) + 3 * page;

    void SetUp() override
    {
        setenv("UCX_SPAN_MAX_CHUNK", "64k", 1);
        setenv("UCX_SPAN_CHUNK_OVERLAP", "16k", 1);
        if (GetParam().mode == SPAN_PAIR_FORK) {
            setenv("UCX_SPAN_TEST_UNIT_SIZE", "256k", 1);
        }
        ucp_pair::SetUp();
    }

    void TearDown() override
    {
        ucp_pair::TearDown();
        unsetenv("UCX_SPAN_MAX_CHUNK");
        unsetenv("UCX_SPAN_CHUNK_OVERLAP");
        unsetenv("UCX_SPAN_TEST_UNIT_SIZE");
    }

    /* Offsets from the allocation base where a chunk or unit starts/ends */
    std::vector<size_t> boundaries() const
    {
        uint64_t base = m_region.base + m_region.reg_offset;
        uint64_t end  = base + m_region.reg_length;
        std::vector<uint64_t> hard;
        if (GetParam().mode == SPAN_PAIR_FORK) {
            for (uint64_t u = (base / unit + 1) * unit; u < end; u += unit) {
                hard.push_back(u);
            }
        }
        hard.push_back(end);
        std::vector<size_t> b;
        uint64_t ustart = base;
        for (uint64_t h : hard) {
            for (uint64_t c = ustart; c + chunk < h; c += chunk - overlap) {
                b.push_back(c + chunk - overlap - m_region.base);
                b.push_back(c + chunk - m_region.base);
            }
            if (h != end) {
                b.push_back(h - m_region.base);
            }
            ustart = h;
        }
        return b;
    }
};

TEST_P(ucp_chunked, put_get_across_every_boundary)
{
    std::vector<char> info(65536);
    span_pair_ep_info(&m_pair, info.data(), info.size());
    ASSERT_NE(nullptr, strstr(info.data(),
                              ep_info_tl(GetParam().rma_tl).c_str()))
            << info.data();
    map(length, 21);
    auto bounds = boundaries();
    ASSERT_GE(bounds.size(), 20u);
    size_t reg_end = page + length;
    unsigned seed  = 30, moved = 0;
    for (size_t b : bounds) {
        for (long delta : {-1L, 0L, 1L}) {
            for (size_t len : {size_t(1), size_t(8), overlap, 3 * chunk + 5}) {
                size_t off = b + delta - std::min(len / 2, size_t(b - page));
                if ((off < page) || (off + len > reg_end)) {
                    continue;
                }
                std::vector<uint8_t> src(len), dst(len, 0);
                span_pair_fill(src.data(), len, ++seed, off);
                ASSERT_EQ(UCS_OK, span_pair_put(&m_pair, &m_region, off,
                                                src.data(), len))
                        << len << " at " << off;
                ASSERT_EQ(0u, check(off, len, seed)) << len << " at " << off;
                ASSERT_EQ(UCS_OK, span_pair_get(&m_pair, &m_region, off,
                                                dst.data(), len));
                ASSERT_EQ(0u, span_pair_mismatches(dst.data(), len, seed, off))
                        << "get " << len << " at " << off;
                ASSERT_EQ(UCS_OK, span_pair_refill(&m_pair, &m_region, 21));
                ++moved;
            }
        }
    }
    EXPECT_GT(moved, 100u);
    EXPECT_EQ(0u, check(0, m_region.alloc_length, 21));
}

TEST_P(ucp_chunked, atomics_beside_every_boundary)
{
    map(length, 22);
    for (size_t b : boundaries()) {
        for (size_t off : {b - 8, b}) {
            off &= ~size_t(7);
            uint64_t before, after, fetched = 0;
            ASSERT_EQ(UCS_OK, span_pair_read64(&m_pair, &m_region, off,
                                               &before));
            ASSERT_EQ(UCS_OK, span_pair_atomic(&m_pair, &m_region, off,
                                               UCP_ATOMIC_OP_ADD, 3, 0,
                                               &fetched)) << off;
            ASSERT_EQ(UCS_OK, span_pair_read64(&m_pair, &m_region, off,
                                               &after));
            EXPECT_EQ(before, fetched) << off;
            EXPECT_EQ(before + 3, after) << off;
        }
    }
}

TEST_P(ucp_chunked, tag_rendezvous_of_many_chunks)
{
    for (size_t len : {size_t(200000), size_t(3) << 20}) {
        ucs_status_t status;
        EXPECT_EQ(0u, span_pair_tag_send(&m_pair, len, 40, &status)) << len;
        EXPECT_EQ(UCS_OK, status) << len;
    }
}

INSTANTIATE_TEST_SUITE_P(
        twins, ucp_chunked,
        ::testing::Values(ucp_case{"posix,cma+", SPAN_PAIR_FORK, "cma+"},
                          ucp_case{"posix,strict+", SPAN_PAIR_FORK, "strict+"},
                          ucp_case{"posix,strict+", SPAN_PAIR_FORK, "strict+",
                                   true},
                          ucp_case{"self+", SPAN_PAIR_LOOPBACK, "self+"}),
        [](const ::testing::TestParamInfo<ucp_case> &info) {
            std::string name = info.param.rma_tl;
            return name.substr(0, name.size() - 1) + "P" +
                   (info.param.spill ? "_spilled" : "");
        });

/*
 * The second piece of every split op first meets no resource: the rest of
 * the op waits in span's queue. A flush right after the put must issue it
 * and complete; UCP retries a flush that answers no resource without
 * progressing the worker when the transport refuses pending_add (cma: busy).
 */
class ucp_deferred : public ucp_chunked {
protected:
    void SetUp() override
    {
        setenv("UCX_SPAN_TEST_NO_RESOURCE", "2", 1);
        ucp_chunked::SetUp();
    }

    void TearDown() override
    {
        ucp_chunked::TearDown();
        unsetenv("UCX_SPAN_TEST_NO_RESOURCE");
    }

    ucs_status_t wait(void *request)
    {
        ucs_status_t status;
        if (!UCS_PTR_IS_PTR(request)) {
            return UCS_PTR_STATUS(request);
        }
        while ((status = ucp_request_check_status(request)) ==
               UCS_INPROGRESS) {
            ucp_worker_progress(m_pair.worker);
        }
        ucp_request_free(request);
        return status;
    }
};

TEST_P(ucp_deferred, flush_issues_deferred_pieces)
{
    std::vector<char> info(65536);
    span_pair_ep_info(&m_pair, info.data(), info.size());
    ASSERT_NE(nullptr, strstr(info.data(), ep_info_tl("cma+").c_str()))
            << info.data();
    map(length, 23);
    /* a unit boundary with room for the longest put on both sides */
    uint64_t base = m_region.base + m_region.reg_offset + 2 * chunk;
    size_t hard   = (base / unit + 1) * unit - m_region.base;
    for (size_t len : {overlap, 3 * chunk + 5}) {
        size_t off    = hard - len / 2;
        unsigned seed = 24 + len % 7;
        std::vector<uint8_t> src(len);
        span_pair_fill(src.data(), len, seed, off);
        ucp_request_param_t param = {};
        deadline limit(60, "put and flush across a unit boundary");
        void *put   = ucp_put_nbx(m_pair.ep, src.data(), len,
                                  m_region.base + off, m_region.rkey, &param);
        void *flush = ucp_ep_flush_nbx(m_pair.ep, &param);
        EXPECT_EQ(UCS_OK, wait(put)) << len;
        EXPECT_EQ(UCS_OK, wait(flush)) << len;
        EXPECT_EQ(0u, check(off, len, seed)) << len << " at " << off;
        ASSERT_EQ(UCS_OK, span_pair_refill(&m_pair, &m_region, 23));
    }
    EXPECT_EQ(0u, check(0, m_region.alloc_length, 23));
}

INSTANTIATE_TEST_SUITE_P(
        twins, ucp_deferred,
        ::testing::Values(ucp_case{"posix,cma+", SPAN_PAIR_FORK, "cma+"}),
        [](const ::testing::TestParamInfo<ucp_case> &) {
            return std::string("cmaP");
        });

/*
 * The bug span exists for, on CPU: the strict transport registers at most
 * 64 MiB and, like the buggy engines, silently registers a larger buffer
 * truncated while its key claims nothing more. Natively a transfer past
 * 64 MiB fails; through the twin, which learns the limit from the MD and
 * registers 64 MiB chunks, every transfer succeeds and every byte lands.
 */
class ucp_strict : public ucp_pair {
protected:
    static constexpr size_t MiB = 1 << 20, cap = 64 * MiB;
    static constexpr size_t length = 256 * MiB;

    void SetUp() override
    {
        setenv("UCX_STRICT_MAX_MR_SIZE", "64m", 1);
        setenv("UCX_STRICT_TRUNCATE", "y", 1);
        ucp_pair::SetUp();
    }

    void TearDown() override
    {
        ucp_pair::TearDown();
        unsetenv("UCX_STRICT_MAX_MR_SIZE");
        unsetenv("UCX_STRICT_TRUNCATE");
    }

    ucs_status_t put_and_get(size_t off, size_t len, unsigned seed,
                             size_t *wrong)
    {
        std::vector<uint8_t> src(len), dst(len, 0);
        span_pair_fill(src.data(), len, seed, off);
        ucs_status_t st = span_pair_put(&m_pair, &m_region, off, src.data(),
                                        len);
        if (st == UCS_OK) {
            st = span_pair_get(&m_pair, &m_region, off, dst.data(), len);
        }
        *wrong = check(off, len, seed) +
                 span_pair_mismatches(dst.data(), len, seed, off);
        return st;
    }
};

TEST_P(ucp_strict, transfers_past_the_registration_cap)
{
    map(length, 50);
    const size_t base = page; /* the registration's offset in the allocation */
    const struct {
        size_t off, len;
    } cases[] = {{base, 8},                      {base + cap - 8, 8},
                 {base + cap - 4, 8},            {base + cap, 8},
                 {base + 100 * MiB + 3, 4096},   {base + length - 8, 8},
                 {base + cap - MiB, 3 * MiB},    {base + 10 * MiB, 200 * MiB}};
    unsigned seed = 60;
    for (auto &c : cases) {
        size_t wrong;
        log_counter logs;
        ucs_status_t st = put_and_get(c.off, c.len, ++seed, &wrong);
        bool past_cap   = c.off + c.len > base + cap;
        if (twin() || !past_cap) {
            EXPECT_EQ(UCS_OK, st) << c.len << " at " << c.off;
            EXPECT_EQ(0u, wrong) << c.len << " at " << c.off;
            EXPECT_EQ(0u, logs.count()) << c.len << " at " << c.off;
        } else {
            EXPECT_NE(UCS_OK, st) << "native, past the cap: " << c.len
                                  << " at " << c.off;
            EXPECT_LE(1u, logs.count("remote access error"))
                    << "native, past the cap: " << c.len << " at " << c.off;
        }
        ASSERT_EQ(UCS_OK, span_pair_refill(&m_pair, &m_region, 50));
    }
}

TEST_P(ucp_strict, tag_rendezvous_past_the_cap)
{
    if (!twin()) {
        GTEST_SKIP() << "native: the sender's key covers 64 MiB of 100";
    }
    ucs_status_t status;
    EXPECT_EQ(0u, span_pair_tag_send(&m_pair, 100 * MiB + 5, 70, &status));
    EXPECT_EQ(UCS_OK, status);
}

INSTANTIATE_TEST_SUITE_P(
        strict, ucp_strict,
        ::testing::Values(ucp_case{"posix,strict", SPAN_PAIR_FORK, "strict"},
                          ucp_case{"posix,strict+", SPAN_PAIR_FORK, "strict+"}),
        [](const ::testing::TestParamInfo<ucp_case> &info) {
            return std::string(info.param.rma_tl[6] == '+' ? "twin" :
                                                             "native");
        });

/*
 * UCP's registration cache and span's registry together: the application
 * frees a registered buffer and gets new memory at the same address. UCP
 * may still hold the old twin handle (lazy deregistration); the new buffer
 * must get a new inner registration and the peer's transfers must land in
 * it. In one process over strict+, whose MD counts its registrations.
 */
class ucp_remap : public ucp_pair {
protected:
    static long made()
    {
        std::string path = std::string(getenv("UCX_MODULE_DIR")) +
                           "/libuct_strict.so.0";
        void *dl = dlopen(path.c_str(), RTLD_LAZY | RTLD_NOLOAD);
        auto fn  = dl ? (long (*)())dlsym(dl, "strict_md_registrations") :
                        nullptr;
        long n   = fn ? fn() : -1;
        if (dl != nullptr) {
            dlclose(dl);
        }
        return n;
    }
};

TEST_P(ucp_remap, new_memory_at_an_old_address_is_registered_anew)
{
    const size_t len = 16 * page;
    std::vector<uint8_t> src(len - 2 * page), dst(len - 2 * page);
    map(len - 2 * page, 80);
    for (unsigned round = 0; round < 3; ++round) {
        unsigned seed = 81 + round;
        long before   = made();
        ASSERT_GE(before, 0) << "the strict test transport is not loaded";
        if (round > 0) {
            ASSERT_EQ(UCS_OK, span_pair_remap(&m_pair, &m_region, 90 + round));
            EXPECT_EQ(before + 1, made())
                    << "round " << round << ": no new inner registration";
            EXPECT_EQ(0u, check(0, len, 90 + round))
                    << "the new memory is not what was written to it";
        }
        span_pair_fill(src.data(), src.size(), seed, page);
        ASSERT_EQ(UCS_OK, span_pair_put(&m_pair, &m_region, page, src.data(),
                                        src.size()));
        EXPECT_EQ(0u, check(page, src.size(), seed)) << "round " << round;
        ASSERT_EQ(UCS_OK, span_pair_get(&m_pair, &m_region, page, dst.data(),
                                        dst.size()));
        EXPECT_EQ(0u, span_pair_mismatches(dst.data(), dst.size(), seed,
                                           page)) << "round " << round;
    }
}

INSTANTIATE_TEST_SUITE_P(
        strict, ucp_remap,
        ::testing::Values(ucp_case{"posix,strict+", SPAN_PAIR_LOOPBACK,
                                   "strict+"}),
        [](const ::testing::TestParamInfo<ucp_case> &) {
            return std::string("loopback");
        });
