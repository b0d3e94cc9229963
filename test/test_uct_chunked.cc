/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * UCT level: chunked registrations and the ops split across their chunks
 * and units, pieces deferred and reissued, faults injected into chunk
 * registration (test_uct.h has the fixtures).
 */
#include "test_uct.h"

TEST_P(span_uct_chunked, attributes_cap_ops_at_the_overlap)
{
    uct_md_attr_t attr;
    ASSERT_EQ(UCS_OK, uct_md_query(md, &attr));
    EXPECT_EQ(255u, attr.rkey_packed_size);
    EXPECT_LE(iface_attr.cap.put.max_short, overlap);
    EXPECT_LE(iface_attr.cap.put.max_bcopy, overlap);
    EXPECT_LE(iface_attr.cap.put.max_zcopy, overlap);
    EXPECT_LE(iface_attr.cap.get.max_bcopy, overlap);
    EXPECT_LE(iface_attr.cap.get.max_zcopy, overlap);
}

/* Ops just below, on and just above every boundary, up to the overlap:
 * inside a unit they land whole; across a hard boundary short and bcopy ops
 * are refused untouched and zcopy ops are split */
TEST_P(span_uct_chunked, ops_at_every_boundary)
{
    const bool zcopy = iface_attr.cap.flags & UCT_IFACE_FLAG_PUT_ZCOPY;
    std::vector<uint8_t> local(overlap), back(overlap);
    uct_mem_h lmemh = reg(local.data(), local.size());
    uct_mem_h bmemh = reg(back.data(), back.size());
    unsigned checked = 0, refused = 0;
    uint8_t seed = 0;

    ASSERT_GE(boundaries().size(), 8u);
    for (const access &a : boundary_accesses({-9, -1, 0, 1, 9},
                                             {1, 8, 100, overlap})) {
        const size_t off = a.off, len = a.len;
        fill_access(++seed, local, len);
        std::vector<uint8_t> expect = remote;
        ucs_status_t st;
        log_counter logs;
        if (zcopy) {
            uct_iov_t iov = {local.data(), len, lmemh, 0, 1};
            completion c;
            wait(uct_ep_put_zcopy(ep, &iov, 1, raddr(off), rkey.rkey,
                                  &c.super), c);
            st = c.super.status;
        } else {
            pack_arg arg = {local.data(), len};
            ssize_t r = uct_ep_put_bcopy(ep, pack_cb, &arg, raddr(off),
                                         rkey.rkey);
            st = (r < 0) ? ucs_status_t(r) : UCS_OK;
        }
        if (!zcopy && crosses_unit(off, len)) {
            /* self packs in place: the bytes may be there already */
            EXPECT_EQ(UCS_ERR_UNSUPPORTED, st) << len << " at " << off;
            EXPECT_EQ(1u, logs.count("crosses a chunk or unit end"));
            ++refused;
            continue;
        }
        ASSERT_EQ(UCS_OK, st) << "put " << len << " at " << off;
        ASSERT_EQ(0u, logs.count());
        std::copy(local.begin(), local.begin() + len,
                  expect.begin() + off);
        ASSERT_TRUE(expect == remote) << "put " << len << " at " << off;

        std::fill(back.begin(), back.end(), 0);
        completion c;
        if (zcopy) {
            uct_iov_t biov = {back.data(), len, bmemh, 0, 1};
            st = uct_ep_get_zcopy(ep, &biov, 1, raddr(off), rkey.rkey,
                                  &c.super);
        } else {
            st = uct_ep_get_bcopy(ep, unpack_cb, back.data(), len,
                                  raddr(off), rkey.rkey, &c.super);
        }
        wait(st, c);
        ASSERT_EQ(0, memcmp(back.data(), local.data(), len))
                << "get " << len << " at " << off;
        ++checked;
    }
    EXPECT_GT(checked, 100u);
    if (!zcopy) {
        EXPECT_GT(refused, 0u) << "no op crossed a hard boundary";
    }
    dereg(bmemh);
    dereg(lmemh);
}

/* cma+ in UCX 1.15 and earlier offers short and bcopy ops of its own over
 * its zero-copy ops (span_bounce.h): they go through the twin's zero-copy
 * path, so an access across any boundary lands whole, split, and a put
 * returns before its bytes land (a flush completes it) */
TEST_P(span_uct_chunked, bounced_short_and_bcopy_ops_are_split)
{
    if ((std::string(GetParam()) != "cma+") ||
        !(iface_attr.cap.flags & UCT_IFACE_FLAG_PUT_SHORT)) {
        GTEST_SKIP() << GetParam() << ": no short and bcopy ops over its "
                        "zero-copy ones (cma+ in UCX 1.15 and earlier)";
    }
    std::vector<uint8_t> local(1000), back(1000);
    unsigned checked = 0;
    uint8_t seed     = 0;

    for (const access &a : boundary_accesses(
                 {-9, 0, 9}, {8, iface_attr.cap.put.max_short, local.size()})) {
        const size_t off = a.off, len = a.len;
        fill_access(++seed, local, len);
        std::vector<uint8_t> expect = remote;
        log_counter logs;
        if (len <= iface_attr.cap.put.max_short) {
            ASSERT_EQ(UCS_OK, uct_ep_put_short(ep, local.data(), len,
                                               raddr(off), rkey.rkey))
                    << len << " at " << off;
        } else {
            pack_arg arg = {local.data(), len};
            ASSERT_EQ(ssize_t(len),
                      uct_ep_put_bcopy(ep, pack_cb, &arg, raddr(off),
                                       rkey.rkey))
                    << len << " at " << off;
        }
        flush();
        std::copy(local.begin(), local.begin() + len,
                  expect.begin() + off);
        ASSERT_TRUE(expect == remote) << "put " << len << " at " << off;

        std::fill(back.begin(), back.end(), 0);
        completion c;
        wait(uct_ep_get_bcopy(ep, unpack_cb, back.data(), len,
                              raddr(off), rkey.rkey, &c.super), c);
        ASSERT_EQ(0, memcmp(back.data(), local.data(), len))
                << "get " << len << " at " << off;
        ASSERT_EQ(0u, logs.count());
        ++checked;
    }
    EXPECT_GT(checked, 20u);

    /* behind a zero-copy put still queued on the ep, in order: shorts and
     * bcopies over its bytes land after it, each buffer free on return,
     * and a get sees them all */
    fill_remote(++seed);
    std::vector<uint8_t> big(4096, 0xa5), expect = remote;
    completion zc;
    uct_iov_t iov = {big.data(), big.size(), UCT_MEM_HANDLE_NULL, 0, 1};
    ASSERT_EQ(UCS_INPROGRESS, uct_ep_put_zcopy(ep, &iov, 1, raddr(0),
                                               rkey.rkey, &zc.super));
    std::copy(big.begin(), big.end(), expect.begin());
    for (size_t i = 0; i < 256; ++i) {
        uint64_t v = i * 0x0101010101010101ull;
        ASSERT_EQ(UCS_OK, uct_ep_put_short(ep, &v, sizeof(v),
                                           raddr(i * sizeof(v)), rkey.rkey));
        memcpy(&expect[i * sizeof(v)], &v, sizeof(v));
    }
    std::fill(local.begin(), local.end(), 0x3c);
    pack_arg arg = {local.data(), local.size()};
    ASSERT_EQ(ssize_t(local.size()),
              uct_ep_put_bcopy(ep, pack_cb, &arg, raddr(3000), rkey.rkey));
    std::copy(local.begin(), local.end(), expect.begin() + 3000);
    std::vector<uint8_t> got(4096, 0);
    completion gc;
    ucs_status_t st = uct_ep_get_bcopy(ep, unpack_cb, got.data(), got.size(),
                                       raddr(0), rkey.rkey, &gc.super);
    EXPECT_EQ(UCS_INPROGRESS, st) << "not queued behind the puts";
    wait(st, gc);
    EXPECT_TRUE(std::equal(got.begin(), got.end(), expect.begin()));
    flush();
    EXPECT_EQ(0, zc.super.count);
    EXPECT_TRUE(expect == remote);
}

/* A zcopy of the whole buffer crosses every boundary, remote and local (the
 * local buffer is registered in chunks too): one call, one completion */
TEST_P(span_uct_chunked, whole_buffer_zcopy_is_split)
{
    if (!(iface_attr.cap.flags & UCT_IFACE_FLAG_PUT_ZCOPY)) {
        GTEST_SKIP() << GetParam() << " has no zcopy: covered by "
                        "ops_at_every_boundary";
    }
    std::vector<uint8_t> local(size), back(size, 0);
    for (size_t i = 0; i < size; ++i) {
        local[i] = uint8_t(i * 13 + 5);
    }
    uct_mem_h lmemh = reg(local.data(), size);
    uct_mem_h bmemh = reg(back.data(), size);
    uct_iov_t iov[3] = {{local.data(), 5000, lmemh, 0, 1},
                        {local.data() + 5000, 30000, lmemh, 0, 1},
                        {local.data() + 35000, size - 35000, lmemh, 0, 1}};
    completion c1;
    wait(uct_ep_put_zcopy(ep, iov, 3, raddr(0), rkey.rkey, &c1.super), c1);
    EXPECT_TRUE(local == std::vector<uint8_t>(remote.begin(),
                                              remote.begin() + size));
    uct_iov_t biov = {back.data(), size, bmemh, 0, 1};
    completion c2;
    wait(uct_ep_get_zcopy(ep, &biov, 1, raddr(0), rkey.rkey, &c2.super), c2);
    EXPECT_TRUE(local == back);
    EXPECT_TRUE(guard_intact());
    dereg(bmemh);
    dereg(lmemh);
}

/* An entry of several elements moves whole inside one piece; one that a
 * piece would have to cut is refused with a clear error, nothing moved */
TEST_P(span_uct_chunked, strided_iov)
{
    if (!(iface_attr.cap.flags & UCT_IFACE_FLAG_PUT_ZCOPY)) {
        GTEST_SKIP() << GetParam() << " has no zcopy";
    }
    std::vector<uint8_t> local(size);
    for (size_t i = 0; i < size; ++i) {
        local[i] = uint8_t(i * 5 + 9);
    }
    uct_mem_h lmemh = reg(local.data(), size);
    uintptr_t abs   = (uintptr_t)remote.data();
    uintptr_t labs  = (uintptr_t)local.data();
    /* 16 elements of 64 bytes every 128, from and to the start of a unit:
     * the local buffer is registered in chunks and units too */
    size_t off  = ((abs / unit + 1) * unit - abs) + 4096;
    size_t loff = ((labs / unit + 1) * unit - labs) + 64;
    uct_iov_t iov = {local.data() + loff, 64, lmemh, 128, 16};
    completion c;
    wait(uct_ep_put_zcopy(ep, &iov, 1, raddr(off), rkey.rkey, &c.super), c);
    /* passed through whole: UCX 1.22's transports move count * length
     * contiguous bytes and ignore the stride (uct_iov.inl) */
    EXPECT_EQ(0, memcmp(&remote[off], &local[loff], 16 * 64));

    /* the same entry ending 100 bytes past a unit end; the end taken at
     * least 1 KiB into the buffer, wherever the allocator put it */
    size_t cross = (((abs + 1024) / unit + 1) * unit - abs) - 924;
    fill_remote(3);
    std::vector<uint8_t> before = remote;
    log_counter logs;
    EXPECT_EQ(UCS_ERR_UNSUPPORTED,
              uct_ep_put_zcopy(ep, &iov, 1, raddr(cross), rkey.rkey,
                               &c.super));
    EXPECT_EQ(1u, logs.count("cannot be split"));
    EXPECT_TRUE(before == remote);
    dereg(lmemh);
}

/* An entry of count 0 moves nothing, whatever its length (uct_iov_t: its
 * memory is not accessed): beside it the other entries land whole, at the
 * end of the registration and across a unit boundary (split), and neither
 * the remote guard nor the entry's own buffer is touched */
/* A local buffer outside the chunked handle it names has no inner handle:
 * the op is refused, never looped on (the splitter found no piece) */
TEST_P(span_uct_chunked, local_buffer_outside_its_handle_is_refused)
{
    if (!strict()) {
        GTEST_SKIP() << "only strict+ registers local memory in chunks (cma "
                        "registers nothing, any local buffer will do)";
    }
    deadline limit(30, "a zcopy with a foreign local buffer");
    std::vector<uint8_t> local(size, 1), other(size, 2);
    uct_mem_h lmemh = reg(local.data(), size);
    uintptr_t abs   = (uintptr_t)remote.data();
    size_t cross    = (((abs + 1024) / unit + 1) * unit - abs) - 100;
    fill_remote(9);
    std::vector<uint8_t> before = remote;
    for (size_t off : {size_t(0), cross}) {
        uct_iov_t iov = {other.data(), 200, lmemh, 0, 1};
        completion c;
        log_counter logs;
        EXPECT_EQ(UCS_ERR_INVALID_PARAM,
                  uct_ep_put_zcopy(ep, &iov, 1, raddr(off), rkey.rkey,
                                   &c.super)) << "at " << off;
        EXPECT_EQ(1u, logs.count("outside its memory handle")) << off;
    }
    EXPECT_TRUE(before == remote);
    dereg(lmemh);
}

TEST_P(span_uct_chunked, iov_entry_of_count_0_moves_nothing)
{
    if (!(iface_attr.cap.flags & UCT_IFACE_FLAG_PUT_ZCOPY)) {
        GTEST_SKIP() << GetParam() << " has no zcopy";
    }
    std::vector<uint8_t> local(size), decoy(size, 0x5a), back(size, 0);
    for (size_t i = 0; i < size; ++i) {
        local[i] = uint8_t(i * 3 + 1);
    }
    uct_mem_h lmemh = reg(local.data(), size);
    uct_mem_h dmemh = reg(decoy.data(), size);
    uct_mem_h bmemh = reg(back.data(), size);
    uintptr_t abs   = (uintptr_t)remote.data();
    size_t cross    = (((abs + 1024) / unit + 1) * unit - abs) - 100;
    for (size_t off : {size_t(size - 200), cross}) {
        fill_remote(9);
        std::vector<uint8_t> expect = remote;
        memcpy(&expect[off], local.data(), 200);
        uct_iov_t iov[3] = {{local.data(), 100, lmemh, 0, 1},
                            {decoy.data(), 4096, dmemh, 0, 0},
                            {local.data() + 100, 100, lmemh, 0, 1}};
        completion c1;
        wait(uct_ep_put_zcopy(ep, iov, 3, raddr(off), rkey.rkey, &c1.super),
             c1);
        EXPECT_TRUE(expect == remote) << "put at " << off;

        uct_iov_t biov[3] = {{back.data(), 100, bmemh, 0, 1},
                             {decoy.data(), 4096, dmemh, 0, 0},
                             {back.data() + 100, 100, bmemh, 0, 1}};
        completion c2;
        wait(uct_ep_get_zcopy(ep, biov, 3, raddr(off), rkey.rkey, &c2.super),
             c2);
        EXPECT_EQ(0, memcmp(back.data(), local.data(), 200)) << "get at "
                                                             << off;
        EXPECT_TRUE(std::vector<uint8_t>(size, 0x5a) == decoy)
                << "the entry of count 0 was written, at " << off;
    }
    EXPECT_TRUE(guard_intact());
    dereg(bmemh);
    dereg(dmemh);
    dereg(lmemh);
}

/* An extent that ends exactly on a unit boundary, in several chunks: an
 * empty access at its end lies in its last chunk. Every empty access, at
 * the end and at every boundary, completes and moves nothing (it used to
 * take the inner key one past the last chunk's: a read past the rkey) */
TEST_P(span_uct_chunked, empty_op_at_the_end_of_a_unit_aligned_extent)
{
    deadline limit(30, "empty ops at chunk ends");
    uintptr_t abs = (uintptr_t)remote.data();
    size_t first  = ((abs + unit - 1) / unit) * unit - abs;
    size_t length = 2 * unit;
    ASSERT_LE(first + length, remote.size());
    uct_mem_h rmemh = reg(&remote[first], length);
    uct_md_attr_t md_attr;
    ASSERT_EQ(UCS_OK, uct_md_query(md, &md_attr));
    std::vector<uint8_t> buf(md_attr.rkey_packed_size);
    ASSERT_EQ(UCS_OK, uct_md_mkey_pack(md, rmemh, buf.data()));
    uct_rkey_bundle_t key;
    ASSERT_EQ(UCS_OK, uct_rkey_unpack(component, buf.data(), &key));

    std::vector<uint8_t> local(overlap, 0x11);
    uct_mem_h lmemh = reg(local.data(), local.size());
    fill_remote(5);
    std::vector<uint8_t> before = remote;
    std::set<size_t> offsets = {length, unit, unit - overlap, 0};
    for (size_t c = chunk - overlap; c < length; c += chunk - overlap) {
        offsets.insert(c);
    }
    log_counter logs;
    for (size_t off : offsets) {
        uint64_t addr = (uintptr_t)&remote[first] + off;
        if (iface_attr.cap.flags & UCT_IFACE_FLAG_PUT_ZCOPY) {
            /* the local entry at its own handle's end, too */
            for (uint8_t *lbuf : {local.data(), local.data() + local.size()}) {
                uct_iov_t iov = {lbuf, 0, lmemh, 0, 1};
                completion p, g;
                wait(uct_ep_put_zcopy(ep, &iov, 1, addr, key.rkey, &p.super),
                     p);
                wait(uct_ep_get_zcopy(ep, &iov, 1, addr, key.rkey, &g.super),
                     g);
            }
        }
        if (iface_attr.cap.flags & UCT_IFACE_FLAG_PUT_SHORT) {
            EXPECT_EQ(UCS_OK, uct_ep_put_short(ep, local.data(), 0, addr,
                                               key.rkey)) << "at " << off;
        }
    }
    EXPECT_EQ(0u, logs.count());
    EXPECT_TRUE(before == remote) << "an empty op moved bytes";
    EXPECT_TRUE(std::vector<uint8_t>(overlap, 0x11) == local);
    dereg(lmemh);
    uct_rkey_release(component, &key);
    dereg(rmemh);
}

TEST_P(span_uct_chunked, failed_chunk_registration_rolls_back)
{
    std::vector<uint8_t> buf(size);
    uct_mem_h h;
    if (!inner_registers()) {
        GTEST_SKIP() << "cma registers nothing: no inner registration can fail";
    }
    long live = strict_live();
    ASSERT_TRUE(!strict() || (live >= 0)) << "strict's counter not found";
    for (unsigned k = 1; k <= num_chunks(buf.data()) + 1; ++k) {
        md_options_t options = md_options();
        options.push_back({"SPAN_TEST_FAIL_REG", std::to_string(k)});
        uct_md_h fmd = open_md(component, GetParam(), options);
        ASSERT_NE(nullptr, fmd);
        log_counter logs;
        ucs_status_t st = uct_md_mem_reg(fmd, buf.data(), size,
                                         UCT_MD_MEM_ACCESS_ALL, &h);
        if (k <= num_chunks(buf.data())) {
            EXPECT_EQ(UCS_ERR_NO_MEMORY, st) << "chunk " << k << " of "
                    << num_chunks(buf.data()) << " at " << (void*)buf.data();
            EXPECT_EQ(1u, logs.count("(injected)")) << "chunk " << k;
            EXPECT_EQ(live, strict_live()) << "chunks before " << k
                                           << " not rolled back";
        } else {
            ASSERT_EQ(UCS_OK, st) << "past the last chunk " << k;
            EXPECT_EQ(UCS_OK, uct_md_mem_dereg(fmd, h));
        }
        uct_md_close(fmd);
    }
}

TEST_P(span_uct_chunked, failed_chunk_deregistration_releases_all)
{
    std::vector<uint8_t> buf(size);
    if (!inner_registers()) {
        GTEST_SKIP() << "cma registers nothing: no inner registration can fail";
    }
    long live = strict_live();
    for (unsigned k = 1; k <= num_chunks(buf.data()); ++k) {
        md_options_t options = md_options();
        options.push_back({"SPAN_TEST_FAIL_DEREG", std::to_string(k)});
        uct_md_h fmd = open_md(component, GetParam(), options);
        ASSERT_NE(nullptr, fmd);
        uct_mem_h h;
        ASSERT_EQ(UCS_OK, uct_md_mem_reg(fmd, buf.data(), size,
                                         UCT_MD_MEM_ACCESS_ALL, &h));
        if (strict()) {
            EXPECT_EQ(long(num_chunks(buf.data())), strict_live() - live);
        }
        log_counter logs;
        EXPECT_EQ(UCS_ERR_IO_ERROR, uct_md_mem_dereg(fmd, h)) << k;
        EXPECT_EQ(live, strict_live()) << "a chunk was not released";
        EXPECT_EQ(1u, logs.count("deregistration of chunk")) << k;
        uct_md_close(fmd);
    }
}

TEST_P(span_uct_chunked, too_many_chunks_are_refused_at_registration)
{
    size_t len = size_t(2) << 30; /* 174763 chunks of 16 KiB by 12 KiB */
    void *va   = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS |
                      MAP_NORESERVE, -1, 0);
    ASSERT_NE(MAP_FAILED, va);
    uct_mem_h h;
    log_counter logs;
    EXPECT_EQ(UCS_ERR_EXCEEDS_LIMIT,
              uct_md_mem_reg(md, va, len, UCT_MD_MEM_ACCESS_ALL, &h));
    EXPECT_EQ(1u, logs.count("more than 65535"));
    munmap(va, len);
}

TEST_P(span_uct_chunked, spilled_keys_of_a_deregistered_region_are_refused)
{
    if (!strict()) {
        GTEST_SKIP() << GetParam() << " has no inner keys to spill";
    }
    md_options_t options = md_options();
    options.push_back({"SPAN_SPILL", "y"});
    uct_md_h smd = open_md(component, GetParam(), options);
    ASSERT_NE(nullptr, smd);
    uct_md_attr_t attr;
    ASSERT_EQ(UCS_OK, uct_md_query(smd, &attr));
    std::vector<uint8_t> buf(size), packed(attr.rkey_packed_size);
    uct_mem_h h;
    ASSERT_EQ(UCS_OK, uct_md_mem_reg(smd, buf.data(), size,
                                     UCT_MD_MEM_ACCESS_ALL, &h));
    ASSERT_EQ(UCS_OK, uct_md_mkey_pack(smd, h, packed.data()));
    uct_rkey_bundle_t b;
    ASSERT_EQ(UCS_OK, uct_rkey_unpack(component, packed.data(), &b));
    EXPECT_EQ(UCS_OK, uct_rkey_release(component, &b));
    ASSERT_EQ(UCS_OK, uct_md_mem_dereg(smd, h));
    {
        log_counter logs;
        EXPECT_EQ(UCS_ERR_INVALID_PARAM,
                  uct_rkey_unpack(component, packed.data(), &b));
        EXPECT_EQ(1u, logs.count("the region was deregistered"));
    }
    uct_md_close(smd);
}

INSTANTIATE_TEST_SUITE_P(twin, span_uct_chunked,
                         ::testing::Values("self+", "cma+", "strict+"));

/* The second piece of every split op first meets no resource, as from a
 * full send queue: the op is under way, so the rest is deferred */
/* A key packed for part of a registration of several chunks (what UCP
 * packs where its range lies inside a registration span shares) serves
 * that part alone: gets and puts of 1..64 bytes that end at its start,
 * straddle it, start at its end or straddle that are refused, and touch no
 * byte on either side */
TEST_P(span_uct_chunked, a_key_serves_the_range_packed_not_the_registration)
{
    const size_t start = 8192 + 13, length = size - 16384 - 20;
    const uint64_t flags = iface_attr.cap.flags;
    std::vector<uint8_t> local(64, 0xee), before;
    uct_md_mkey_pack_params_t params = {};
    std::vector<uint8_t> buf(rkey_buf.size());
    uct_mem_h lmemh = reg(local.data(), local.size());
    uct_rkey_bundle_t win;
    unsigned refused = 0, served = 0;
    ucs_status_t status;

    ASSERT_LT(1u, num_chunks(remote.data() + start)) << "one chunk";
    ASSERT_EQ(UCS_OK, uct_md_mkey_pack_v2(md, memh, remote.data() + start,
                                          length, &params, buf.data()));
    ASSERT_EQ(UCS_OK, uct_rkey_unpack(component, buf.data(), &win));
    fill_remote(5);
    before = remote;

    auto op = [&](int kind, uint64_t addr, size_t len) {
        uct_iov_t iov = {local.data(), len, lmemh, 0, 1};
        pack_arg arg  = {local.data(), len};
        completion c;
        ucs_status_t st;

        switch (kind) {
        case 0:
            return (flags & UCT_IFACE_FLAG_PUT_SHORT) &&
                   (len <= iface_attr.cap.put.max_short) ?
                   uct_ep_put_short(ep, local.data(), len, addr, win.rkey) :
                   UCS_ERR_UNSUPPORTED;
        case 1:
            return (flags & UCT_IFACE_FLAG_PUT_BCOPY) ?
                   (ucs_status_t)std::min<ssize_t>(0,
                   uct_ep_put_bcopy(ep, pack_cb, &arg, addr, win.rkey)) :
                   UCS_ERR_UNSUPPORTED;
        case 2:
            st = (flags & UCT_IFACE_FLAG_PUT_ZCOPY) ?
                 uct_ep_put_zcopy(ep, &iov, 1, addr, win.rkey, &c.super) :
                 UCS_ERR_UNSUPPORTED;
            break;
        case 3:
            st = (flags & UCT_IFACE_FLAG_GET_BCOPY) ?
                 uct_ep_get_bcopy(ep, unpack_cb, local.data(), len, addr,
                                  win.rkey, &c.super) :
                 UCS_ERR_UNSUPPORTED;
            break;
        default:
            st = (flags & UCT_IFACE_FLAG_GET_ZCOPY) ?
                 uct_ep_get_zcopy(ep, &iov, 1, addr, win.rkey, &c.super) :
                 UCS_ERR_UNSUPPORTED;
            break;
        }
        if (st == UCS_INPROGRESS) {
            while (c.super.count > 0) {
                test_worker_progress(worker);
            }
            st = c.super.status;
        }
        return st;
    };

    {
        log_counter logs;
        for (size_t len = 1; len <= 64; ++len) {
            const uint64_t at[] = {raddr(start) - len, raddr(start) - 1,
                                   raddr(start + length),
                                   raddr(start + length) - len + 1};
            for (int kind = 0; kind < 5; ++kind) {
                for (uint64_t addr : at) {
                    if ((len == 1) && (addr != at[0]) && (addr != at[2])) {
                        continue; /* inside */
                    }
                    if ((kind == 1) && (addr == at[3]) &&
                        (std::string(GetParam()) == "self+")) {
                        continue; /* self packs in place
                                     (docs/limitations.md) */
                    }
                    status = op(kind, addr, len);
                    if (status == UCS_ERR_UNSUPPORTED) {
                        continue;
                    }
                    EXPECT_EQ(UCS_ERR_INVALID_ADDR, status)
                            << "op " << kind << " of " << len << " bytes at "
                            << (int64_t)(addr - raddr(start))
                            << " from the start of the range";
                    refused += (status == UCS_ERR_INVALID_ADDR);
                }
            }
        }
        EXPECT_EQ(refused, logs.count("is outside the registered extent"));
    }
    EXPECT_LT(0u, refused);
    EXPECT_TRUE(remote == before) << "bytes outside the range changed";
    EXPECT_TRUE(std::all_of(local.begin(), local.end(),
                            [](uint8_t b) { return b == 0xee; }))
            << "bytes outside the range were read";

    /* its first and last bytes are served */
    for (int kind = 0; kind < 5; ++kind) {
        for (uint64_t addr : {raddr(start), raddr(start + length) - 64}) {
            status = op(kind, addr, 64);
            if (status != UCS_ERR_UNSUPPORTED) {
                EXPECT_GE(status, UCS_OK) << "op " << kind;
                ++served;
            }
        }
    }
    EXPECT_LT(0u, served);
    uct_rkey_release(component, &win);
    dereg(lmemh);
}

class span_uct_deferred : public span_uct_chunked {
protected:
    md_options_t md_options() const override
    {
        md_options_t options = span_uct_chunked::md_options();
        options.push_back({"SPAN_TEST_NO_RESOURCE", "2"});
        return options;
    }

    struct counted_completion {
        uct_completion_t super;
        unsigned         calls = 0;

        counted_completion()
        {
            super.func   = cb;
            super.count  = 1;
            super.status = UCS_OK;
        }

        static void cb(uct_completion_t *self)
        {
            ++ucs_container_of(self, counted_completion, super)->calls;
        }
    };

    void progress_until(const counted_completion &c)
    {
        for (int i = 0; (i < 100000) && (c.calls == 0); ++i) {
            test_worker_progress(worker);
        }
    }

    /* A completion that fired stays fired once, however long the worker
     * progresses after it */
    void expect_completed_once(const counted_completion &c)
    {
        for (int i = 0; i < 1000; ++i) {
            test_worker_progress(worker);
        }
        EXPECT_EQ(1u, c.calls) << "completed twice";
    }
};

TEST_P(span_uct_deferred, rest_is_reissued_and_completes_once)
{
    std::vector<uint8_t> local(size);
    for (size_t i = 0; i < size; ++i) {
        local[i] = uint8_t(i * 11 + 3);
    }
    uct_mem_h lmemh = reg(local.data(), size);
    uct_iov_t iov   = {local.data(), size, lmemh, 0, 1};
    counted_completion c;

    ASSERT_EQ(UCS_INPROGRESS, uct_ep_put_zcopy(ep, &iov, 1, raddr(0),
                                               rkey.rkey, &c.super));
    /* the flush issues the rest itself, without the worker's progress
     * (cma then moves the pieces from its own progress) */
    EXPECT_EQ(UCS_INPROGRESS, uct_ep_flush(ep, 0, NULL));
    EXPECT_EQ(UCS_INPROGRESS, uct_iface_flush(iface, 0, NULL));
    progress_until(c);
    EXPECT_EQ(1u, c.calls);
    EXPECT_EQ(UCS_OK, c.super.status);
    for (int i = 0; (i < 100000) && (uct_ep_flush(ep, 0, NULL) != UCS_OK);
         ++i) {
        test_worker_progress(worker);
    }
    EXPECT_EQ(UCS_OK, uct_ep_flush(ep, 0, NULL));
    EXPECT_TRUE(local == std::vector<uint8_t>(remote.begin(),
                                              remote.begin() + size));
    expect_completed_once(c);
    dereg(lmemh);
}

TEST_P(span_uct_deferred, cancel_completes_deferred_op_once)
{
    std::vector<uint8_t> local(size, 0x77);
    uct_mem_h lmemh = reg(local.data(), size);
    uct_iov_t iov   = {local.data(), size, lmemh, 0, 1};
    counted_completion c;

    ASSERT_EQ(UCS_INPROGRESS, uct_ep_put_zcopy(ep, &iov, 1, raddr(0),
                                               rkey.rkey, &c.super));
    uct_ep_flush(ep, UCT_FLUSH_FLAG_CANCEL, NULL);
    progress_until(c);
    EXPECT_EQ(1u, c.calls);
    EXPECT_EQ(UCS_ERR_CANCELED, c.super.status);
    expect_completed_once(c);
    dereg(lmemh);
}

/* A fence orders what follows after what came before, and span's deferred
 * pieces came before: a put issued after the fence onto bytes a deferred
 * piece covers must land last (UCP 1.23 fences the rendezvous ATP behind
 * the data puts this way) */
TEST_P(span_uct_deferred, fence_orders_deferred_pieces_first)
{
    for (int iface_wide = 0; iface_wide < 2; ++iface_wide) {
        std::vector<uint8_t> local(size, uint8_t(0x40 + iface_wide));
        std::vector<uint8_t> later(8, 0xee);
        uct_mem_h lmemh = reg(local.data(), size);
        uct_mem_h tmemh = reg(later.data(), later.size());
        uct_iov_t iov   = {local.data(), size, lmemh, 0, 1};
        uct_iov_t tail  = {later.data(), later.size(), tmemh, 0, 1};
        counted_completion c, t;

        ASSERT_EQ(UCS_INPROGRESS, uct_ep_put_zcopy(ep, &iov, 1, raddr(0),
                                                   rkey.rkey, &c.super));
        ucs_status_t status = iface_wide ? uct_iface_fence(iface, 0) :
                                           uct_ep_fence(ep, 0);
        ASSERT_EQ(UCS_OK, status) << (iface_wide ? "iface" : "ep")
                                  << " fence";
        status = uct_ep_put_zcopy(ep, &tail, 1, raddr(size - later.size()),
                                  rkey.rkey, &t.super);
        ASSERT_TRUE((status == UCS_OK) || (status == UCS_INPROGRESS));
        if (status == UCS_OK) {
            ++t.calls;
        }
        progress_until(c);
        progress_until(t);
        EXPECT_EQ(1u, c.calls);
        EXPECT_EQ(1u, t.calls);
        EXPECT_TRUE(std::equal(later.begin(), later.end(),
                               remote.begin() + size - later.size()))
                << "a deferred piece landed after a put issued behind the "
                << (iface_wide ? "iface" : "ep") << " fence";
        EXPECT_TRUE(std::equal(local.begin(), local.end() - later.size(),
                               remote.begin()));
        dereg(tmemh);
        dereg(lmemh);
    }
}

/* Closing with the rest of a split op still in span's queue: the inner
 * transport's own progress (not the worker's, which would issue the rest)
 * finishes the first piece, then the ep and the iface close. The caller's
 * completion fires once, as cancelled (and, under ASan, nothing of the
 * split op leaks). cma refuses (asserts) to destroy an ep whose ops are
 * still in flight, so only deferred pieces can be outstanding here. */
TEST_P(span_uct_deferred, close_with_deferred_pieces_completes_once)
{
    std::vector<uint8_t> local(size, 0x77);
    uct_mem_h lmemh = reg(local.data(), size);
    uct_iov_t iov   = {local.data(), size, lmemh, 0, 1};
    counted_completion c;

    ASSERT_EQ(UCS_INPROGRESS, uct_ep_put_zcopy(ep, &iov, 1, raddr(0),
                                               rkey.rkey, &c.super));
    for (int i = 0; i < 1000; ++i) {
        uct_iface_progress(iface);
    }
    EXPECT_EQ(0u, c.calls) << "the deferred pieces were issued";
    uct_ep_destroy(ep);
    ep = NULL;
    uct_iface_close(iface);
    iface = NULL;
    EXPECT_EQ(1u, c.calls);
    EXPECT_EQ(UCS_ERR_CANCELED, c.super.status);
    expect_completed_once(c);
    dereg(lmemh);
}

INSTANTIATE_TEST_SUITE_P(twin, span_uct_deferred, ::testing::Values("cma+"));
