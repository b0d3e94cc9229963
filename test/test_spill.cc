/*
 * Spill arena: keys stored by this process and read back through
 * /proc/self/fd, slots released and reused, stale references refused.
 */
extern "C" {
#include "span_spill.h"
}
#include "test_log.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <vector>

namespace {

std::vector<uint8_t> keys_of(uint32_t n, size_t K, uint8_t seed)
{
    std::vector<uint8_t> keys(n * K);
    for (size_t i = 0; i < keys.size(); ++i) {
        keys[i] = uint8_t(seed + i * 7);
    }
    return keys;
}

} // namespace

TEST(span_spill, put_fetch_remove)
{
    auto keys = keys_of(21, 192, 3);
    span_rkey_spill_t ref;
    ASSERT_EQ(UCS_OK, span_spill_put(keys.data(), 21, 192, &ref));
    EXPECT_EQ(uint32_t(getpid()), ref.pid);

    std::vector<uint8_t> back(keys.size());
    ASSERT_EQ(UCS_OK, span_spill_fetch(&ref, 21, 192, back.data()));
    EXPECT_EQ(keys, back);

    log_counter logs;
    /* a reference that names other sizes, or a corrupted checksum */
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, span_spill_fetch(&ref, 20, 192,
                                                      back.data()));
    span_rkey_spill_t bad = ref;
    bad.keys_sum ^= 1;
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, span_spill_fetch(&bad, 21, 192,
                                                      back.data()));
    bad          = ref;
    bad.arena_id ^= 1;
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, span_spill_fetch(&bad, 21, 192,
                                                      back.data()));
    bad    = ref;
    bad.fd = 1u << 20; /* no such descriptor */
    EXPECT_EQ(UCS_ERR_UNREACHABLE, span_spill_fetch(&bad, 21, 192,
                                                    back.data()));

    span_spill_remove(&ref);
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, span_spill_fetch(&ref, 21, 192,
                                                      back.data()));
    EXPECT_GE(logs.count("span spill"), 5u);
}

TEST(span_spill, released_slots_are_reused_and_stale_keys_refused)
{
    auto a = keys_of(4, 192, 1), b = keys_of(4, 192, 2);
    auto c = keys_of(4, 192, 3), big = keys_of(8, 192, 4);
    span_rkey_spill_t ra, rb, rc, rbig, rnew;
    ASSERT_EQ(UCS_OK, span_spill_put(a.data(), 4, 192, &ra));
    ASSERT_EQ(UCS_OK, span_spill_put(b.data(), 4, 192, &rb));
    ASSERT_EQ(UCS_OK, span_spill_put(c.data(), 4, 192, &rc));

    /* two neighbours released: one extent, where a larger slot fits */
    span_spill_remove(&ra);
    span_spill_remove(&rb);
    ASSERT_EQ(UCS_OK, span_spill_put(big.data(), 8, 192, &rbig));
    EXPECT_EQ(ra.offset, rbig.offset);

    /* a's reference names a reused slot: refused, never another's keys */
    std::vector<uint8_t> back(big.size());
    {
        log_counter logs;
        EXPECT_EQ(UCS_ERR_INVALID_PARAM, span_spill_fetch(&ra, 4, 192,
                                                          back.data()));
    }
    ASSERT_EQ(UCS_OK, span_spill_fetch(&rbig, 8, 192, back.data()));
    EXPECT_EQ(big, back);
    back.resize(c.size());
    ASSERT_EQ(UCS_OK, span_spill_fetch(&rc, 4, 192, back.data()));
    EXPECT_EQ(c, back);

    span_spill_remove(&rbig);
    span_spill_remove(&rc);
    ASSERT_EQ(UCS_OK, span_spill_put(a.data(), 4, 192, &rnew));
    EXPECT_EQ(ra.offset, rnew.offset); /* everything coalesced again */
    EXPECT_NE(ra.seq, rnew.seq);
    span_spill_remove(&rnew);
}

TEST(span_spill, removing_twice_is_refused_with_a_log_line)
{
    auto a = keys_of(2, 64, 9);
    span_rkey_spill_t ref;
    ASSERT_EQ(UCS_OK, span_spill_put(a.data(), 2, 64, &ref));
    span_spill_remove(&ref);
    log_counter logs;
    span_spill_remove(&ref);
    EXPECT_EQ(1u, logs.count("is not this process's to release"));
}
