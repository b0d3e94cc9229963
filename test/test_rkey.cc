/* SPDX-License-Identifier: BSD-3-Clause */
/* Unit tests of the span rkey wire format */
extern "C" {
#include "md/span_md.h"
#include "key/span_rkey_sizes.h"
}
#include "test_log.h"

#include <gtest/gtest.h>
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <random>
#include <vector>
#include <sys/mman.h>
#include <unistd.h>

namespace {


const uint64_t page = SPAN_RKEY_PAGE;

struct key_spec {
    uint64_t base, length, unit, chunk, overlap;
    size_t   key_size;
    unsigned varying; /* bytes of each key that differ between keys */
};

/* The inner keys of a spec: key i differs from key 0 in its first `varying`
 * bytes, as keys of neighbour registrations do */
std::vector<uint8_t> inner_keys(const key_spec &s, uint32_t n)
{
    std::vector<uint8_t> keys(n * s.key_size);
    for (uint32_t i = 0; i < n; ++i) {
        for (size_t b = 0; b < s.key_size; ++b) {
            keys[i * s.key_size + b] = (b < s.varying) ? uint8_t(i * 31 + b) :
                                                         uint8_t(0xa0 + b);
        }
    }
    return keys;
}

/* Packed as a twin MD whose rkey_packed_size is rkey_size does */
ucs_status_t pack(const key_spec &s, std::vector<uint8_t> &buf,
                  std::vector<uint8_t> *keys_out = nullptr,
                  size_t rkey_size = SPAN_RKEY_MAX_SIZE)
{
    span_rkey_desc_t desc = {};
    desc.component_id     = span_rkey_component_id("cma");
    desc.key_size         = s.key_size;
    ucs_status_t status   = span_chunk_plan(&desc.geom, s.base, s.length,
                                            s.unit, s.chunk, s.overlap);
    if (status != UCS_OK) {
        return status;
    }
    auto keys = inner_keys(s, desc.geom.num_chunks);
    buf.assign(SPAN_RKEY_MAX_SIZE, 0xee);
    size_t size;
    status = span_rkey_pack(buf.data(), rkey_size, &desc, keys.data(), &size);
    if (status == UCS_OK) {
        buf.resize(size);
    }
    if (keys_out != nullptr) {
        *keys_out = keys;
    }
    return status;
}

std::vector<uint8_t> make_key(const key_spec &s,
                              size_t rkey_size = SPAN_RKEY_MAX_SIZE)
{
    std::vector<uint8_t> buf;
    EXPECT_EQ(UCS_OK, pack(s, buf, nullptr, rkey_size));
    return buf;
}

const key_spec one_key    = {0x7f0000001000, 1 << 20, 0, 0, 0, 40, 0};
const key_spec many_keys  = {0x7f0000001000, 64 * page, 0, 8 * page, page,
                             8, 3};
const key_spec with_units = {0x7f0000001800, 40 * page, 16 * page, 4 * page,
                             page, 12, 12};

} // namespace

TEST(span_rkey, round_trip)
{
    for (const key_spec &s : {one_key, many_keys, with_units,
                              key_spec{0x1000, page, 0, 0, 0, 0, 0},
                              key_spec{0x1000, 9 * page, 0, 2 * page, 0, 0, 0},
                              key_spec{0x1000, 3 * page, 0, 0, 0,
                                       SPAN_RKEY_MAX_KEY, 0}}) {
        std::vector<uint8_t> buf, keys;
        ASSERT_EQ(UCS_OK, pack(s, buf, &keys));
        span_rkey_desc_t desc;
        ASSERT_EQ(UCS_OK, span_rkey_parse(buf.data(), buf.size(), &desc));
        EXPECT_EQ(span_rkey_component_id("cma"), desc.component_id);
        EXPECT_EQ(s.base, desc.geom.base);
        EXPECT_EQ(s.length, desc.geom.length);
        EXPECT_EQ(s.unit, desc.geom.unit_size);
        EXPECT_EQ(s.chunk, desc.geom.chunk_size);
        EXPECT_EQ(s.chunk ? s.overlap : 0, desc.geom.overlap);
        ASSERT_EQ(s.key_size, desc.key_size);
        ASSERT_EQ(keys.size(), desc.geom.num_chunks * s.key_size);
        std::vector<uint8_t> key(s.key_size + 1);
        for (uint32_t i = 0; i < desc.geom.num_chunks; ++i) {
            span_rkey_key(&desc, i, key.data());
            EXPECT_TRUE(std::equal(key.begin(), key.begin() + s.key_size,
                                   keys.begin() + i * s.key_size))
                    << "key " << i;
        }
    }
}

TEST(span_rkey, component_ids_differ)
{
    EXPECT_NE(span_rkey_component_id("cma"), span_rkey_component_id("self"));
    EXPECT_NE(span_rkey_component_id("cuda_ipc"), span_rkey_component_id("ib"));
}

TEST(span_rkey, capacity_of_8_byte_keys_with_2_GiB_chunks)
{
    /* the numbers the format's comment states */
    const uint64_t GiB = 1ull << 30, chunk = 2 * GiB, overlap = 4 << 20;
    const struct {
        unsigned varying, keys;
    } expect[] = {{8, 23}, {4, 46}, {3, 62}};
    for (auto &e : expect) {
        uint64_t fits = chunk + (e.keys - 1) * (chunk - overlap);
        key_spec s    = {0x10000000000, fits, 0, chunk, overlap, 8, e.varying};
        std::vector<uint8_t> buf;
        EXPECT_EQ(UCS_OK, pack(s, buf)) << e.varying;
        s.length = fits + 1; /* the twin MD spills or logs the refusal */
        EXPECT_EQ(UCS_ERR_EXCEEDS_LIMIT, pack(s, buf)) << e.varying;
    }
}

TEST(span_rkey, geometry_not_in_pages_is_refused)
{
    log_counter logs;
    std::vector<uint8_t> buf;
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              pack({0x1000, 10000, 0, 4000, 100, 8, 1}, buf));
    EXPECT_EQ(1u, log_counter::count());
}

TEST(span_rkey, every_truncation_is_refused)
{
    for (const key_spec &s : {one_key, many_keys, with_units}) {
        auto buf = make_key(s);
        log_counter logs;
        for (size_t len = 0; len < buf.size(); ++len) {
            /* a copy of exactly len bytes: a read past it is caught by ASan */
            std::vector<uint8_t> cut(buf.begin(), buf.begin() + len);
            span_rkey_desc_t desc;
            EXPECT_NE(UCS_OK, span_rkey_parse(cut.data(), len, &desc))
                    << "length " << len;
        }
        EXPECT_EQ(buf.size(), log_counter::count()) << "one error line each";
        span_rkey_desc_t desc;
        EXPECT_EQ(UCS_OK, span_rkey_parse(buf.data(), buf.size(), &desc));
    }
}

TEST(span_rkey, every_single_bit_flip_is_refused)
{
    for (const key_spec &s : {one_key, many_keys, with_units}) {
        auto good = make_key(s);
        log_counter logs;
        for (size_t byte = 0; byte < good.size(); ++byte) {
            for (int bit = 0; bit < 8; ++bit) {
                auto bad = good;
                bad[byte] ^= uint8_t(1u << bit);
                span_rkey_desc_t desc;
                EXPECT_NE(UCS_OK, span_rkey_parse(bad.data(), bad.size(),
                                                  &desc))
                        << "byte " << byte << " bit " << bit;
            }
        }
    }
}

TEST(span_rkey, random_corruption_is_refused)
{
    std::mt19937 rng(12345);
    auto good   = make_key(many_keys);
    int refused = 0, corrupted = 0;
    log_counter logs;
    for (int t = 0; t < 20000; ++t) {
        auto bad = good;
        int n    = 1 + rng() % 8;
        for (int i = 0; i < n; ++i) {
            bad[rng() % bad.size()] = uint8_t(rng());
        }
        if (bad == good) {
            continue;
        }
        ++corrupted;
        span_rkey_desc_t desc;
        refused += (span_rkey_parse(bad.data(), bad.size(), &desc) != UCS_OK);
    }
    /* a 32-bit checksum lets about one in 4e9 corruptions through */
    EXPECT_GT(corrupted, 19000);
    EXPECT_GE(refused, corrupted - 1);
}

TEST(span_rkey, future_version_is_unsupported)
{
    auto buf = make_key(one_key);
    buf[0]   = SPAN_RKEY_VERSION + 1;
    span_rkey_desc_t desc;
    log_counter logs;
    EXPECT_EQ(UCS_ERR_UNSUPPORTED,
              span_rkey_parse(buf.data(), buf.size(), &desc));
    EXPECT_EQ(1u, log_counter::count());
}

namespace {

/* Rewrites both checksums after a header field was changed on purpose, so
 * that only the field's own validation stands in the way */
uint32_t fnv(uint32_t h, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; ++i) {
        h = (h ^ p[i]) * 16777619u;
    }
    return h;
}

/* Rewrites the header checksum alone: the body checksum can be checked
 * only by reading the body that the header claims */
void reseal_header(std::vector<uint8_t> &buf)
{
    uint32_t h = fnv(2166136261u, buf.data(), SPAN_RKEY_HDR_SUM_OFFSET);
    memcpy(&buf[SPAN_RKEY_HDR_SUM_OFFSET], &h, 4);
}

void reseal(std::vector<uint8_t> &buf, size_t body_size)
{
    uint32_t h = fnv(2166136261u, buf.data(), SPAN_RKEY_HDR_SUM_OFFSET);
    memcpy(&buf[SPAN_RKEY_HDR_SUM_OFFSET], &h, 4);
    h = fnv(h, buf.data() + SPAN_RKEY_HDR_SIZE, body_size);
    memcpy(&buf[SPAN_RKEY_SUM_OFFSET], &h, 4);
}

} // namespace

/* The range registered travels in every key, inside its extent: packed
 * whole by default, named by the packer, and refused where a key names one
 * outside */
TEST(span_rkey, the_range_registered_travels_inside_the_extent)
{
    for (const key_spec &s : {one_key, many_keys, with_units}) {
        auto buf = make_key(s);
        span_rkey_desc_t desc;
        ASSERT_EQ(UCS_OK, span_rkey_parse(buf.data(), buf.size(), &desc));
        EXPECT_EQ(s.base, desc.win_base);
        EXPECT_EQ(s.length, desc.win_length);

        ASSERT_EQ(UCS_OK, span_rkey_set_window(buf.data(), buf.size(),
                                               s.base + 13, s.length - 20));
        ASSERT_EQ(UCS_OK, span_rkey_parse(buf.data(), buf.size(), &desc));
        EXPECT_EQ(s.base + 13, desc.win_base);
        EXPECT_EQ(s.length - 20, desc.win_length);
        EXPECT_EQ(s.base, desc.geom.base) << "the units stay";
        EXPECT_EQ(s.length, desc.geom.length);

        log_counter logs;
        for (auto w : {std::make_pair(s.base - 1, uint64_t(2)),
                       std::make_pair(s.base + s.length - 1, uint64_t(2)),
                       std::make_pair(s.base + s.length, uint64_t(1)),
                       std::make_pair(s.base, uint64_t(0))}) {
            EXPECT_EQ(UCS_ERR_INVALID_PARAM,
                      span_rkey_set_window(buf.data(), buf.size(), w.first,
                                           w.second));
            /* the same range forged into a key, checksums right */
            auto bad = buf;
            uint64_t offset = w.first - s.base;
            memcpy(&bad[39], &offset, 8);
            memcpy(&bad[47], &w.second, 8);
            reseal(bad, bad.size() - SPAN_RKEY_HDR_SIZE);
            EXPECT_EQ(UCS_ERR_INVALID_PARAM,
                      span_rkey_parse(bad.data(), bad.size(), &desc));
        }
        EXPECT_EQ(8u, logs.count());
    }
}

TEST(span_rkey, resealed_bad_fields_are_refused)
{
    auto good = make_key(many_keys); /* 9 chunks, 8-byte keys, 3 varying */
    size_t body = good.size() - SPAN_RKEY_HDR_SIZE;
    std::vector<uint8_t> big(SPAN_RKEY_MAX_SIZE + 64, 0);
    span_rkey_desc_t desc;

    std::copy(good.begin(), good.end(), big.begin());
    reseal(big, body);
    ASSERT_EQ(UCS_OK, span_rkey_parse(big.data(), good.size(), &desc));

    log_counter logs;
    auto bad = big;
    bad[37]  = 200; /* varying bytes beyond the key size */
    reseal(bad, body);
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, span_rkey_parse(bad.data(), bad.size(),
                                                     &desc));
    bad     = big;
    bad[37] = 8; /* all bytes vary: the body overruns the key's buffer */
    reseal(bad, body);
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, span_rkey_parse(bad.data(), good.size(),
                                                     &desc));
    bad    = big;
    bad[2] = 7; /* a chunk count the geometry does not make */
    reseal(bad, body);
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, span_rkey_parse(bad.data(), bad.size(),
                                                     &desc));
    bad     = big;
    bad[28] = 8; /* overlap as large as the chunk */
    reseal(bad, body);
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, span_rkey_parse(bad.data(), bad.size(),
                                                     &desc));
    bad     = big;
    bad[36] = SPAN_RKEY_MAX_KEY + 1; /* a key larger than any span rkey */
    reseal(bad, body);
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, span_rkey_parse(bad.data(), bad.size(),
                                                     &desc));
    bad = big;
    bad[SPAN_RKEY_HDR_SIZE + 8] = 0xff; /* a mask of 8 bits, header says 3 */
    reseal(bad, body);
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, span_rkey_parse(bad.data(), bad.size(),
                                                     &desc));
    EXPECT_GE(log_counter::count(), 6u);
}

TEST(span_rkey, empty_or_wrapping_extent_is_refused)
{
    std::vector<uint8_t> buf;
    log_counter logs;
    EXPECT_NE(UCS_OK, pack({0x1000, 0, 0, 0, 0, 0, 0}, buf));
    EXPECT_NE(UCS_OK, pack({UINT64_MAX - 10, 100, 0, 0, 0, 0, 0}, buf));
}

TEST(span_rkey, units_from_the_base_round_trip)
{
    /* VMM handles of 20 MiB from a base that is no multiple of 20 MiB */
    span_rkey_desc_t desc = {}, out;
    const uint64_t MiB = 1 << 20, base = 0x7e0000200000ull;
    desc.component_id  = span_rkey_component_id("cuda_ipc");
    desc.key_size      = 24;
    ASSERT_EQ(UCS_OK, span_chunk_plan_from(&desc.geom, base, 70 * MiB, base,
                                           20 * MiB, 0, 0));
    ASSERT_EQ(4u, desc.geom.num_chunks);
    std::vector<uint8_t> keys(4 * 24), buf(SPAN_RKEY_MAX_SIZE), key(24);
    for (size_t i = 0; i < keys.size(); ++i) {
        keys[i] = uint8_t(i / 24 * 7 + (i % 3));
    }
    size_t size;
    ASSERT_EQ(UCS_OK, span_rkey_pack(buf.data(), SPAN_RKEY_MAX_SIZE, &desc,
                                     keys.data(), &size));
    ASSERT_EQ(UCS_OK, span_rkey_parse(buf.data(), size, &out));
    EXPECT_EQ(base, out.geom.unit_origin);
    for (uint32_t i = 0; i < 4; ++i) {
        uint64_t start, length, avail;
        span_chunk_range(&out.geom, i, &start, &length);
        EXPECT_EQ(base + i * 20 * MiB, start);
        EXPECT_EQ((i < 3) ? 20 * MiB : 10 * MiB, length);
        EXPECT_EQ(i, span_chunk_find(&out.geom, start + length - 1, &avail));
        EXPECT_EQ(1u, avail);
        span_rkey_key(&out, i, key.data());
        EXPECT_EQ(0, memcmp(key.data(), &keys[i * 24], 24)) << i;
    }

    /* an origin that is neither 0 nor the base has no encoding */
    ASSERT_EQ(UCS_OK, span_chunk_plan_from(&desc.geom, base + 4096, 70 * MiB,
                                           base, 20 * MiB, 0, 0));
    log_counter logs;
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              span_rkey_pack(buf.data(), SPAN_RKEY_MAX_SIZE, &desc,
                             keys.data(), &size));
    EXPECT_EQ(1u, logs.count("cannot be packed"));
}

TEST(span_rkey, spill_reference_round_trip_and_corruption)
{
    span_rkey_desc_t desc = {}, out;
    desc.component_id  = span_rkey_component_id("cuda_ipc");
    desc.key_size      = 192;
    desc.spilled       = 1;
    desc.spill         = {4242, 17, 0x0123456789abcdefull, 4096, 77,
                          0xdeadbeef, 4026531836ull};
    ASSERT_EQ(UCS_OK, span_chunk_plan_from(&desc.geom, 0x7e0000000000ull,
                                           21 * (20 << 20), 0x7e0000000000ull,
                                           20 << 20, 0, 0));
    std::vector<uint8_t> buf(SPAN_RKEY_MAX_SIZE);
    size_t size;
    ASSERT_EQ(UCS_OK, span_rkey_pack(buf.data(), SPAN_RKEY_MAX_SIZE, &desc,
                                     nullptr, &size));
    EXPECT_EQ(size_t(SPAN_RKEY_HDR_SIZE + 44), size);
    ASSERT_EQ(UCS_OK, span_rkey_parse(buf.data(), size, &out));
    EXPECT_TRUE(out.spilled);
    EXPECT_EQ(21u, out.geom.num_chunks);
    EXPECT_EQ(4242u, out.spill.pid);
    EXPECT_EQ(17u, out.spill.fd);
    EXPECT_EQ(0x0123456789abcdefull, out.spill.arena_id);
    EXPECT_EQ(4096u, out.spill.offset);
    EXPECT_EQ(77u, out.spill.seq);
    EXPECT_EQ(0xdeadbeefu, out.spill.keys_sum);
    EXPECT_EQ(4026531836ull, out.spill.pid_ns);
    EXPECT_EQ(nullptr, out.key0);

    log_counter logs;
    for (size_t i = 0; i < size; ++i) { /* every byte of it is covered */
        auto bad = buf;
        bad[i] ^= 0x10;
        EXPECT_NE(UCS_OK, span_rkey_parse(bad.data(), size, &out)) << i;
    }
    for (size_t cut = 0; cut < size; ++cut) {
        EXPECT_NE(UCS_OK, span_rkey_parse(buf.data(), cut, &out)) << cut;
    }
}

/*
 * Keys from a peer (issue 16, item 5): UCT passes no length, so a key is
 * read only up to the rkey_packed_size a twin MD of its inner component
 * reports. Every buffer here is malloc'ed to exactly that size, so that
 * ASan (contrib/sanitize/sanitize.sh address) catches a read past it.
 */
namespace {

struct exact_buffer {
    explicit exact_buffer(const std::vector<uint8_t> &bytes, size_t size) :
        p(static_cast<uint8_t*>(malloc(size)))
    {
        memcpy(p, bytes.data(), std::min(size, bytes.size()));
    }
    ~exact_buffer() { free(p); }
    uint8_t *p;
};

/* A twin MD noted for the test's lifetime */
struct noted_twin {
    noted_twin(const char *component, size_t key_size) :
        id(span_rkey_component_id(component)), key(key_size)
    {
        EXPECT_EQ(UCS_OK, span_rkey_size_add(id, key_size));
    }
    ~noted_twin() { span_rkey_size_remove(id, key); }
    uint32_t id;
    size_t   key;
};

} // namespace

TEST(span_rkey_peer, keys_of_the_exact_packed_size_parse)
{
    /* one_key: 40-byte inner keys, a twin that never cuts them */
    noted_twin twin("cma", 40);
    auto key = make_key(one_key, SPAN_RKEY_HDR_SIZE + 40);
    ASSERT_EQ(SPAN_RKEY_HDR_SIZE + 40u, key.size());
    exact_buffer buf(key, key.size());
    span_rkey_desc_t desc;
    ASSERT_EQ(UCS_OK, span_rkey_parse_peer(buf.p, &desc));
    EXPECT_EQ(one_key.length, desc.geom.length);
}

TEST(span_rkey_peer, a_header_claiming_more_than_was_packed_is_refused)
{
    noted_twin twin("cma", 40);
    auto key = make_key(one_key, SPAN_RKEY_HDR_SIZE + 40);
    log_counter logs;
    /* larger keys, or several of them, with valid header checksums: the
     * body checksum cannot be checked without reading past the buffer */
    for (auto field : {std::make_pair(36, 41),
                       std::make_pair(36, SPAN_RKEY_MAX_KEY),
                       std::make_pair(2, 3)}) {
        auto bad          = key;
        bad[field.first] = uint8_t(field.second);
        if (field.first == 2) { /* 3 chunks: a geometry that makes 3 */
            bad[16] = 0; bad[17] = 0; bad[18] = 0x30;  /* 3 MiB */
            bad[24] = 0; bad[25] = 1;                  /* 1 MiB chunks */
            bad[37] = 40;
        }
        reseal_header(bad);
        exact_buffer buf(bad, key.size());
        span_rkey_desc_t desc;
        EXPECT_EQ(UCS_ERR_INVALID_PARAM, span_rkey_parse_peer(buf.p, &desc))
                << "byte " << field.first << " = " << field.second;
    }
    EXPECT_EQ(3u, logs.count("overrun")) << "refused for another reason";
}

/* The bytes of a key at the very end of a readable page, the next one
 * inaccessible: a read past them faults without a sanitizer */
struct guarded_buffer {
    guarded_buffer(const std::vector<uint8_t> &bytes, size_t size)
    {
        page = sysconf(_SC_PAGESIZE);
        map  = static_cast<uint8_t*>(mmap(NULL, 2 * page,
                                          PROT_READ | PROT_WRITE,
                                          MAP_PRIVATE | MAP_ANONYMOUS, -1,
                                          0));
        EXPECT_NE(MAP_FAILED, (void*)map);
        EXPECT_EQ(0, mprotect(map + page, page, PROT_NONE));
        p = map + page - size;
        memcpy(p, bytes.data(), std::min(size, bytes.size()));
    }
    ~guarded_buffer() { munmap(map, 2 * page); }
    size_t  page;
    uint8_t *map;
    uint8_t *p;
};

/*
 * The exporter's configuration packs smaller keys than this process's
 * twins (issue 29, item 4: UCX_SPAN_SPILL=y here, not there, so that twins
 * here pack SPAN_RKEY_MAX_SIZE bytes): a header that claims a longer body
 * than the exporter packed, with a valid header checksum, is refused
 * without a byte past the exporter's key being read, in a heap buffer of
 * exactly its size (ASan, valgrind) and before an inaccessible page. So is
 * a key of the previous format version, of its own size.
 */
TEST(span_rkey_peer, a_key_smaller_than_the_local_twins_pack_is_read_to_its_end)
{
    noted_twin twin("cma", 40);
    const size_t packed = SPAN_RKEY_HDR_SIZE + 40; /* a twin that never cuts */
    auto key            = make_key(one_key, packed);
    ASSERT_EQ(packed, key.size());
    span_rkey_desc_t desc;
    {
        exact_buffer heap(key, packed);
        guarded_buffer guarded(key, packed);
        ASSERT_EQ(UCS_OK, span_rkey_parse_peer(heap.p, &desc));
        ASSERT_EQ(UCS_OK, span_rkey_parse_peer(guarded.p, &desc));
    }

    log_counter logs;
    unsigned cases = 0;
    for (auto field : {std::make_pair(36, 41), std::make_pair(36, 208),
                       std::make_pair(2, 3), std::make_pair(2, 5)}) {
        auto bad         = key;
        bad[field.first] = uint8_t(field.second);
        if (field.first == 2) { /* n chunks of 1 MiB: a geometry of n */
            bad[16] = 0; bad[17] = 0; bad[18] = uint8_t(field.second << 4);
            bad[24] = 0; bad[25] = 1;
            bad[37] = 40;
        }
        reseal_header(bad);
        exact_buffer heap(bad, packed);
        guarded_buffer guarded(bad, packed);
        EXPECT_EQ(UCS_ERR_INVALID_PARAM, span_rkey_parse_peer(heap.p, &desc))
                << "byte " << field.first << " = " << field.second;
        EXPECT_EQ(UCS_ERR_INVALID_PARAM,
                  span_rkey_parse_peer(guarded.p, &desc))
                << "byte " << field.first << " = " << field.second;
        cases += 2;
    }
    EXPECT_EQ(cases, logs.count("overrun")) << "refused for another reason";

    /* a size that holds no header */
    auto bad = key;
    bad[SPAN_RKEY_SIZE_OFFSET] = SPAN_RKEY_HDR_SIZE - 1;
    reseal_header(bad);
    guarded_buffer small(bad, packed);
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, span_rkey_parse_peer(small.p, &desc));
    EXPECT_EQ(1u, logs.count("fewer than its"));

    /* version 4: 46 bytes of header, the key's only bytes where it never
     * cut: only its version is read */
    std::vector<uint8_t> v4(46, 0);
    v4[0] = 4;
    guarded_buffer old(v4, v4.size());
    EXPECT_EQ(UCS_ERR_UNSUPPORTED, span_rkey_parse_peer(old.p, &desc));
    EXPECT_EQ(1u, logs.count("format version 4"));
}

TEST(span_rkey_peer, a_key_of_a_component_without_a_twin_is_unreachable)
{
    auto key = make_key(one_key, SPAN_RKEY_HDR_SIZE + 40);
    exact_buffer buf(key, key.size());
    span_rkey_desc_t desc;
    EXPECT_EQ(UCS_ERR_UNREACHABLE, span_rkey_parse_peer(buf.p, &desc));
    {
        noted_twin twin("cma", 40);
        EXPECT_EQ(UCS_OK, span_rkey_parse_peer(buf.p, &desc));
    }
    EXPECT_EQ(UCS_ERR_UNREACHABLE, span_rkey_parse_peer(buf.p, &desc));
}

TEST(span_rkey_peer, inner_keys_of_another_size_are_refused)
{
    /* a twin that chunks: 255-byte keys, 8-byte inner keys */
    noted_twin twin("cma", 8);
    auto key = make_key(many_keys);
    exact_buffer good(key, SPAN_RKEY_MAX_SIZE);
    span_rkey_desc_t desc;
    ASSERT_EQ(UCS_OK, span_rkey_parse_peer(good.p, &desc));
    log_counter logs;
    auto one = make_key(one_key); /* 40-byte inner keys */
    exact_buffer bad(one, SPAN_RKEY_MAX_SIZE);
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, span_rkey_parse_peer(bad.p, &desc));
    EXPECT_EQ(1u, logs.count("packs 8-byte keys"));
}

/*
 * The inner handle of a local buffer (issue 16, item 7a): a buffer outside
 * a handle of several chunks (a caller's wrong memh) has none, and no byte
 * of it is held; the lookup never indexes past the handle's chunks.
 */
TEST(span_memh, a_buffer_outside_a_chunked_handle_has_no_inner_handle)
{
    const uint64_t page = 4096, base = 0x7f0000010000ull;
    for (uint64_t unit : {uint64_t(0), 16 * page}) {
        span_chunk_geom_t geom;
        ASSERT_EQ(UCS_OK, span_chunk_plan(&geom, base, 40 * page, unit,
                                          8 * page, 2 * page));
        ASSERT_GT(geom.num_chunks, 2u);
        std::vector<uint8_t> mem(sizeof(span_memh_t) +
                                 geom.num_chunks * sizeof(uct_mem_h));
        span_memh_t *memh = (span_memh_t*)mem.data();
        memh->magic       = SPAN_MEMH_MAGIC;
        memh->geom        = geom;
        memh->num_inner   = geom.num_chunks;
        for (uint32_t i = 0; i < geom.num_chunks; ++i) {
            memh->inner[i] = (uct_mem_h)(uintptr_t)(0x1000 + i);
        }

        uint64_t avail;
        /* an empty entry at the end lies in the last chunk */
        for (uint64_t addr : {base, base + 20 * page, base + 40 * page - 1,
                              base + 40 * page}) {
            uct_mem_h inner = span_memh_inner(memh, (void*)addr, &avail);
            uintptr_t index = (uintptr_t)inner - 0x1000;
            ASSERT_LT(index, geom.num_chunks) << addr - base;
            uint64_t start, length;
            span_chunk_range(&geom, index, &start, &length);
            EXPECT_EQ(start + length - addr, avail) << addr - base;
        }
        for (uint64_t addr : {base - 1, base - 4 * page, base - (page << 18),
                              base + 40 * page + 1, base + 41 * page,
                              base + (page << 28), uint64_t(0)}) {
            avail = 1;
            EXPECT_EQ(UCT_MEM_HANDLE_NULL,
                      span_memh_inner(memh, (void*)addr, &avail))
                    << "unit " << unit << ", offset " << int64_t(addr - base);
            EXPECT_EQ(0u, avail);
        }
    }
}

/*
 * Span's VMM body: the units' keys less what the importer knows. Units
 * exported together (consecutive descriptors and serials) take two bytes
 * each, so that about 80 fit before anything spills.
 */
namespace {

struct vmm_rkey {
    span_rkey_desc_t                 desc = {};
    std::vector<span_vmm_key_t> keys;
    std::vector<uint8_t>             buf;

    /* n units of 2 MiB; unit i has descriptor fd0 + fd_step * i */
    vmm_rkey(uint32_t n, uint32_t fd0 = 120, uint32_t fd_step = 1)
    {
        desc.component_id = span_rkey_component_id("cuda_ipc");
        desc.key_size     = sizeof(span_vmm_key_t);
        desc.span_vmm     = 1;
        EXPECT_EQ(UCS_OK, span_chunk_plan_from(&desc.geom, 0x7f4000000000ull,
                                               n * (2ull << 20),
                                               0x7f4000000000ull, 2ull << 20,
                                               0, 0));
        keys.resize(n);
        for (uint32_t i = 0; i < n; ++i) {
            keys[i].magic    = SPAN_CUDA_VMM_MAGIC;
            keys[i].pid      = 4242;
            keys[i].fd       = fd0 + (fd_step * i);
            keys[i].table_fd = 7;
            keys[i].size     = 2ull << 20;
            keys[i].pid_ns   = 4026531836ull;
            keys[i].serial   = 1000000 + i;
            keys[i].table_id = 0x1122334455667788ull;
        }
    }

    ucs_status_t pack()
    {
        size_t size;
        buf.assign(SPAN_RKEY_MAX_SIZE, 0xee);
        ucs_status_t status = span_rkey_pack(buf.data(), SPAN_RKEY_MAX_SIZE,
                                             &desc, keys.data(), &size);
        if (status == UCS_OK) {
            buf.resize(size);
        }
        return status;
    }
};

} // namespace

TEST(span_rkey_vmm, about_80_units_fit_inline_and_come_back_whole)
{
    uint32_t fit = 0;

    for (uint32_t n = 1; n < 200; ++n) {
        vmm_rkey r(n);
        if (r.pack() != UCS_OK) {
            EXPECT_EQ(UCS_ERR_EXCEEDS_LIMIT, r.pack());
            break;
        }
        fit = n;
        span_rkey_desc_t out;
        ASSERT_EQ(UCS_OK, span_rkey_parse(r.buf.data(), r.buf.size(), &out));
        ASSERT_TRUE(out.span_vmm);
        ASSERT_FALSE(out.spilled);
        std::vector<span_vmm_key_t> keys(n);
        ASSERT_EQ(UCS_OK, span_rkey_vmm_keys(&out, keys.data()));
        for (uint32_t i = 0; i < n; ++i) {
            ASSERT_EQ(0, memcmp(&keys[i], &r.keys[i], sizeof(keys[i])))
                    << "unit " << i << " of " << n;
        }
    }
    EXPECT_GE(fit, 80u);
    EXPECT_LE(fit, 87u);
    std::cout << "[ INFO     ] " << fit << " units of one export batch fit "
              << "inline\n";
}

TEST(span_rkey_vmm, units_of_scattered_descriptors_do_not_fit)
{
    vmm_rkey r(70, 100, 1000); /* descriptors 1000 apart: 3 bytes a unit */

    EXPECT_EQ(UCS_ERR_EXCEEDS_LIMIT, r.pack());
    vmm_rkey fits(50, 100, 1000);
    EXPECT_EQ(UCS_OK, fits.pack());
}

TEST(span_rkey_vmm, units_of_two_exporters_do_not_pack)
{
    vmm_rkey r(4);

    r.keys[2].pid = 4343;
    EXPECT_EQ(UCS_ERR_EXCEEDS_LIMIT, r.pack());
}

TEST(span_rkey_vmm, a_resealed_body_that_lies_is_refused)
{
    vmm_rkey r(10);
    ASSERT_EQ(UCS_OK, r.pack());
    const size_t body = r.buf.size() - SPAN_RKEY_HDR_SIZE;
    std::vector<span_vmm_key_t> keys(10);
    span_rkey_desc_t out;

    /* a last varint that runs past the body */
    auto bad = r.buf;
    bad.back() |= 0x80;
    reseal(bad, body);
    ASSERT_EQ(UCS_OK, span_rkey_parse(bad.data(), bad.size(), &out));
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, span_rkey_vmm_keys(&out, keys.data()));

    /* a body longer than its units: bytes left over */
    bad = r.buf;
    bad.push_back(0);
    bad[37] = body + 1;
    reseal(bad, body + 1);
    ASSERT_EQ(UCS_OK, span_rkey_parse(bad.data(), bad.size(), &out));
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, span_rkey_vmm_keys(&out, keys.data()));

    /* a descriptor driven negative */
    bad    = r.buf;
    bad[SPAN_RKEY_HDR_SIZE + 24] = 0x01; /* zigzag -1 for the first fd */
    reseal(bad, body);
    ASSERT_EQ(UCS_OK, span_rkey_parse(bad.data(), bad.size(), &out));
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, span_rkey_vmm_keys(&out, keys.data()));

    /* shorter than its head, and keys of another size */
    bad     = r.buf;
    bad[37] = 20;
    reseal(bad, 20);
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              span_rkey_parse(bad.data(), bad.size(), &out));
    bad     = r.buf;
    bad[36] = 40;
    reseal(bad, body);
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              span_rkey_parse(bad.data(), bad.size(), &out));
}

/* Serials and descriptors at the ends of their ranges: the decoder works in
 * unsigned arithmetic and refuses a unit whose serial leaves [1, 2^63) or
 * whose descriptor leaves [0, 2^31), whatever the deltas add up to (a sum
 * past INT64_MAX was signed overflow: undefined behaviour) */
TEST(span_rkey_vmm, serials_and_descriptors_at_their_extremes)
{
    std::vector<span_vmm_key_t> keys(2);
    span_rkey_desc_t out;

    vmm_rkey top(2);
    top.keys[0].serial = INT64_MAX - 1;
    top.keys[1].serial = INT64_MAX;
    top.keys[0].fd     = INT32_MAX - 1;
    top.keys[1].fd     = INT32_MAX;
    ASSERT_EQ(UCS_OK, top.pack());
    ASSERT_EQ(UCS_OK, span_rkey_parse(top.buf.data(), top.buf.size(), &out));
    ASSERT_EQ(UCS_OK, span_rkey_vmm_keys(&out, keys.data()));
    EXPECT_EQ(uint64_t(INT64_MAX), keys[1].serial);
    EXPECT_EQ(uint32_t(INT32_MAX), keys[1].fd);

    /* +INT64_MAX, then +1: past what a serial can be */
    struct {
        uint64_t serial0, serial1;
        uint32_t fd0, fd1;
    } bad[] = {{INT64_MAX, uint64_t(INT64_MAX) + 1, 3, 4},
               {1, UINT64_MAX, 3, 4},          /* delta -2 from 1 */
               {0, 1, 3, 4},                   /* serial 0: no export */
               {5, 6, INT32_MAX, uint32_t(INT32_MAX) + 1},
               {5, 6, 3, UINT32_MAX}};
    for (auto &b : bad) {
        vmm_rkey r(2);
        r.keys[0].serial = b.serial0;
        r.keys[1].serial = b.serial1;
        r.keys[0].fd     = b.fd0;
        r.keys[1].fd     = b.fd1;
        log_counter logs;
        ucs_status_t status = r.pack();
        if (status == UCS_OK) {
            ASSERT_EQ(UCS_OK, span_rkey_parse(r.buf.data(), r.buf.size(),
                                              &out));
            status = span_rkey_vmm_keys(&out, keys.data());
        }
        EXPECT_NE(UCS_OK, status) << "serials " << b.serial0 << ", "
                                  << b.serial1 << " fds " << b.fd0 << ", "
                                  << b.fd1;
        EXPECT_GE(logs.count(), 1u);
    }
}

/* A varint's tenth byte holds bit 63 only: more is a value past 64 bits */
TEST(span_rkey_vmm, a_varint_past_64_bits_is_refused)
{
    vmm_rkey r(1);
    r.keys[0].serial = INT64_MAX; /* zigzag: 2^64 - 2, ten bytes */
    ASSERT_EQ(UCS_OK, r.pack());
    const size_t body = r.buf.size() - SPAN_RKEY_HDR_SIZE;
    std::vector<span_vmm_key_t> keys(1);
    span_rkey_desc_t out;

    ASSERT_EQ(0x01, r.buf.back()) << "the serial's tenth byte";
    auto bad = r.buf;
    bad.back() = 0x03;
    reseal(bad, body);
    ASSERT_EQ(UCS_OK, span_rkey_parse(bad.data(), bad.size(), &out));
    log_counter logs;
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, span_rkey_vmm_keys(&out, keys.data()));
    EXPECT_EQ(1u, logs.count());
}
