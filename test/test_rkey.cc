/* Unit tests of the span rkey wire format */
extern "C" {
#include "span_rkey.h"
}

#include <gtest/gtest.h>
#include <random>
#include <vector>

namespace {

std::vector<uint8_t> make_key(size_t inner_size, uint64_t base = 0x7f0000001000,
                              uint64_t length = 1 << 20)
{
    std::vector<uint8_t> buf(SPAN_RKEY_HDR_SIZE + inner_size + 7, 0xee);
    uint8_t *inner = static_cast<uint8_t*>(span_rkey_inner_buffer(buf.data()));
    for (size_t i = 0; i < inner_size; ++i) {
        inner[i] = uint8_t(i * 37 + 1);
    }

    span_rkey_desc_t desc = {};
    desc.component_id     = span_rkey_component_id("cma");
    desc.base             = base;
    desc.length           = length;
    desc.inner_size       = inner_size;
    span_rkey_seal(buf.data(), &desc);
    return buf;
}

} // namespace

TEST(span_rkey, round_trip)
{
    for (size_t inner_size : {size_t(0), size_t(8), size_t(192),
                              size_t(SPAN_RKEY_MAX_INNER)}) {
        auto buf = make_key(inner_size);
        span_rkey_desc_t desc;
        ASSERT_EQ(UCS_OK, span_rkey_parse(buf.data(), buf.size(), &desc));
        EXPECT_EQ(span_rkey_component_id("cma"), desc.component_id);
        EXPECT_EQ(0x7f0000001000u, desc.base);
        EXPECT_EQ(uint64_t(1) << 20, desc.length);
        ASSERT_EQ(inner_size, desc.inner_size);
        EXPECT_EQ(buf.data() + SPAN_RKEY_HDR_SIZE, desc.inner);
        for (size_t i = 0; i < inner_size; ++i) {
            EXPECT_EQ(uint8_t(i * 37 + 1),
                      static_cast<const uint8_t*>(desc.inner)[i]);
        }
    }
}

TEST(span_rkey, component_ids_differ)
{
    EXPECT_NE(span_rkey_component_id("cma"), span_rkey_component_id("self"));
    EXPECT_NE(span_rkey_component_id("cuda_ipc"), span_rkey_component_id("ib"));
}

TEST(span_rkey, every_truncation_is_refused)
{
    auto buf = make_key(40);
    size_t full = SPAN_RKEY_HDR_SIZE + 40;
    for (size_t len = 0; len < full; ++len) {
        /* a copy of exactly len bytes, so a read past it is caught by ASan */
        std::vector<uint8_t> cut(buf.begin(), buf.begin() + len);
        span_rkey_desc_t desc;
        EXPECT_NE(UCS_OK, span_rkey_parse(cut.data(), len, &desc))
                << "length " << len;
    }
    span_rkey_desc_t desc;
    EXPECT_EQ(UCS_OK, span_rkey_parse(buf.data(), full, &desc));
}

TEST(span_rkey, every_single_bit_flip_is_refused)
{
    auto good = make_key(24);
    size_t full = SPAN_RKEY_HDR_SIZE + 24;
    for (size_t byte = 0; byte < full; ++byte) {
        for (int bit = 0; bit < 8; ++bit) {
            auto bad = good;
            bad[byte] ^= uint8_t(1u << bit);
            span_rkey_desc_t desc;
            EXPECT_NE(UCS_OK, span_rkey_parse(bad.data(), full, &desc))
                    << "byte " << byte << " bit " << bit;
        }
    }
}

TEST(span_rkey, random_corruption_is_refused)
{
    std::mt19937 rng(12345);
    auto good   = make_key(64);
    size_t full = SPAN_RKEY_HDR_SIZE + 64;
    int refused = 0, corrupted = 0;
    for (int t = 0; t < 20000; ++t) {
        auto bad = good;
        int n    = 1 + rng() % 8;
        for (int i = 0; i < n; ++i) {
            bad[rng() % full] = uint8_t(rng());
        }
        if (bad == good) {
            continue;
        }
        ++corrupted;
        span_rkey_desc_t desc;
        refused += (span_rkey_parse(bad.data(), full, &desc) != UCS_OK);
    }
    /* a 32-bit checksum lets about one in 4e9 corruptions through */
    EXPECT_GT(corrupted, 19000);
    EXPECT_GE(refused, corrupted - 1);
}

TEST(span_rkey, future_version_is_unsupported)
{
    auto buf = make_key(8);
    buf[0]   = SPAN_RKEY_VERSION + 1;
    span_rkey_desc_t desc;
    EXPECT_EQ(UCS_ERR_UNSUPPORTED, span_rkey_parse(buf.data(), buf.size(), &desc));
}

TEST(span_rkey, inner_size_past_buffer_is_refused)
{
    /* a key whose header claims more inner bytes than the buffer holds, with
     * valid checksums: only the size check stands between it and an
     * over-read */
    std::vector<uint8_t> buf(4096, 0x11);
    span_rkey_desc_t desc = {}, parsed;
    desc.component_id     = span_rkey_component_id("cma");
    desc.base             = 0x1000;
    desc.length           = 4096;
    desc.inner_size       = 200;
    span_rkey_seal(buf.data(), &desc);
    ASSERT_EQ(UCS_OK, span_rkey_parse(buf.data(), buf.size(), &parsed));
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              span_rkey_parse(buf.data(), SPAN_RKEY_HDR_SIZE + 199, &parsed));

    /* past what any span key may be, whatever the buffer */
    desc.inner_size = SPAN_RKEY_MAX_INNER + 1;
    span_rkey_seal(buf.data(), &desc);
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              span_rkey_parse(buf.data(), buf.size(), &parsed));
}

TEST(span_rkey, empty_or_wrapping_extent_is_refused)
{
    span_rkey_desc_t desc;
    auto empty = make_key(0, 0x1000, 0);
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              span_rkey_parse(empty.data(), empty.size(), &desc));
    auto wrap = make_key(0, UINT64_MAX - 10, 100);
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              span_rkey_parse(wrap.data(), wrap.size(), &desc));
}
