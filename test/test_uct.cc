/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * UCT level: the component and its twins load; twin MDs register, pack and
 * unpack keys, and twin transports move bytes as their inner ones do
 * (test_uct.h has the fixtures; chunked registrations and split ops, the
 * iface table and the registry have files of their own).
 */
#include "test_uct.h"

namespace {

::testing::Environment *const strict_env =
        ::testing::AddGlobalTestEnvironment(new strict_loader);

} // namespace

TEST(span_load, component_and_twins_are_listed)
{
    uct_component_h span = find_component("span");
    ASSERT_NE(nullptr, span) << "UCX_MODULE_DIR=" <<
            (getenv("UCX_MODULE_DIR") ? getenv("UCX_MODULE_DIR") : "(unset)");
    auto names = md_names(span);
    EXPECT_NE(names.end(), std::find(names.begin(), names.end(), "self+"));
    EXPECT_NE(names.end(), std::find(names.begin(), names.end(), "cma+"));
    for (auto &n : names) {
        EXPECT_EQ('+', n.back()) << n;
    }
}

TEST(span_load, twin_md_of_unknown_inner_is_refused)
{
    uct_component_h span = find_component("span");
    ASSERT_NE(nullptr, span);
    log_counter logs;
    EXPECT_EQ(nullptr, open_md(span, "nosuchmd+"));
    EXPECT_EQ(nullptr, open_md(span, "cma"));
    EXPECT_EQ(1u, logs.count("no component offers the MD 'nosuchmd'"));
    EXPECT_EQ(1u, logs.count("span md 'cma': is not the name of a twin MD"));
}

TEST_P(span_uct, md_attributes)
{
    uct_md_attr_t attr;
    ASSERT_EQ(UCS_OK, uct_md_query(md, &attr));
    if (twin) {
        EXPECT_TRUE(attr.cap.flags & UCT_MD_FLAG_REG);
        EXPECT_STREQ("span", attr.component_name);
        EXPECT_TRUE(attr.cap.flags & UCT_MD_FLAG_NEED_RKEY);
        EXPECT_GE(attr.rkey_packed_size, 28u);
        EXPECT_LE(attr.rkey_packed_size, 255u);
    }
}

/* What UCT-level ucx_perftest does over a twin: memory from
 * uct_iface_mem_alloc() (registered, if at all, by the inner MD) packed with
 * the twin MD. Refused with a line that says what to do instead. */
TEST_P(span_uct, foreign_memh_is_refused_by_pack)
{
    if (!twin) {
        GTEST_SKIP() << "twins only";
    }
    uct_md_attr_t md_attr;
    ASSERT_EQ(UCS_OK, uct_md_query(md, &md_attr));
    std::vector<uint8_t> packed(md_attr.rkey_packed_size + 1);
    std::vector<uint64_t> foreign(64, 0x1122334455667788ull);
    for (uct_mem_h h : std::vector<uct_mem_h>{UCT_MEM_HANDLE_NULL,
                                              (uct_mem_h)0xdeadbeef,
                                              (uct_mem_h)foreign.data()}) {
        log_counter logs;
        EXPECT_EQ(UCS_ERR_INVALID_PARAM,
                  uct_md_mkey_pack(md, h, packed.data())) << h;
        EXPECT_EQ(1u, logs.count("registered neither by this twin MD")) << h;
    }
}

TEST_P(span_uct, put_get_short_and_bcopy)
{
    if (!(iface_attr.cap.flags & UCT_IFACE_FLAG_PUT_SHORT)) {
        GTEST_SKIP() << GetParam() << " has no put_short";
    }
    uint64_t v = 0x1122334455667788ull, r = 0;
    ASSERT_EQ(UCS_OK, uct_ep_put_short(ep, &v, sizeof(v), raddr(128), rkey.rkey));
    flush();
    EXPECT_EQ(0, memcmp(&v, &remote[128], sizeof(v)));
    if (iface_attr.cap.flags & UCT_IFACE_FLAG_GET_SHORT) {
        ASSERT_EQ(UCS_OK, uct_ep_get_short(ep, &r, sizeof(r), raddr(128),
                                           rkey.rkey));
        EXPECT_EQ(v, r);
    }

    std::vector<uint8_t> src(1000, 0x5a), dst(1000, 0);
    pack_arg arg = {src.data(), src.size()};
    EXPECT_EQ(ssize_t(src.size()),
              uct_ep_put_bcopy(ep, pack_cb, &arg, raddr(4096), rkey.rkey));
    flush();
    EXPECT_EQ(0, memcmp(src.data(), &remote[4096], src.size()));
    completion comp;
    wait(uct_ep_get_bcopy(ep, unpack_cb, dst.data(), dst.size(), raddr(4096),
                          rkey.rkey, &comp.super), comp);
    EXPECT_EQ(src, dst);
    EXPECT_TRUE(guard_intact());
}

TEST_P(span_uct, put_get_zcopy)
{
    if (!(iface_attr.cap.flags & UCT_IFACE_FLAG_PUT_ZCOPY)) {
        GTEST_SKIP() << GetParam() << " has no put_zcopy";
    }
    std::vector<uint8_t> local(size);
    for (size_t i = 0; i < size; ++i) {
        local[i] = uint8_t(i * 13 + 1);
    }
    uct_mem_h lmemh = reg(local.data(), size);
    /* two iov entries: the twin translates each memh */
    uct_iov_t iov[2] = {{local.data(), 1000, lmemh, 0, 1},
                        {local.data() + 1000, size - 1000, lmemh, 0, 1}};
    completion c1;
    wait(uct_ep_put_zcopy(ep, iov, 2, raddr(0), rkey.rkey, &c1.super), c1);
    EXPECT_EQ(0, memcmp(local.data(), remote.data(), size));

    std::vector<uint8_t> back(size, 0);
    uct_mem_h bmemh = reg(back.data(), size);
    uct_iov_t biov = {back.data() + 7, size - 7, bmemh, 0, 1};
    completion c2;
    wait(uct_ep_get_zcopy(ep, &biov, 1, raddr(7), rkey.rkey, &c2.super), c2);
    EXPECT_EQ(0, memcmp(back.data() + 7, remote.data() + 7, size - 7));
    EXPECT_TRUE(guard_intact());
    dereg(bmemh);
    dereg(lmemh);
}

/* An iov of several entries is checked for all its bytes: entries that
 * each fit but together end past the range, or whose lengths wrap when
 * added, are refused before the inner transport sees them; with 2 to 6
 * entries (the twin checks up to 4 on its fast path, more on its slow
 * one) */
TEST_P(span_uct, zcopy_of_several_entries_is_checked_whole)
{
    if (!(iface_attr.cap.flags & UCT_IFACE_FLAG_PUT_ZCOPY)) {
        GTEST_SKIP() << GetParam() << " has no put_zcopy";
    }
    const size_t total = 192;
    std::vector<uint8_t> local(total);
    uct_mem_h lmemh = reg(local.data(), local.size());
    for (size_t n = 2; n <= 6; ++n) {
        /* n entries of total / n bytes, the last with the rest */
        std::vector<uct_iov_t> iov(n), wrap(n);
        for (size_t i = 0; i < n; ++i) {
            size_t each = total / n;
            size_t len  = (i + 1 < n) ? each : total - (n - 1) * each;
            iov[i]      = {local.data() + i * each, len, lmemh, 0, 1};
            /* 2^63 + 2^63 (+ 8 ... where there are more) wraps to a few
             * bytes */
            wrap[i]     = {local.data(), (i < 2) ? (1ull << 63) : 8, lmemh, 0,
                           1};
        }
        for (size_t i = 0; i < total; ++i) {
            local[i] = uint8_t(i * 7 + 3 + n);
        }
        completion c1;
        wait(uct_ep_put_zcopy(ep, iov.data(), n, raddr(size - total),
                              rkey.rkey, &c1.super), c1);
        EXPECT_EQ(0, memcmp(local.data(), remote.data() + size - total,
                            total)) << n << " entries";
        if (!twin) {
            continue;
        }
        log_counter logs;
        completion c[4];
        EXPECT_EQ(UCS_ERR_INVALID_ADDR,
                  outcome(uct_ep_put_zcopy(ep, iov.data(), n,
                                           raddr(size - total + 1), rkey.rkey,
                                           &c[0].super), c[0]))
                << n << " entries";
        EXPECT_EQ(UCS_ERR_INVALID_ADDR,
                  outcome(uct_ep_get_zcopy(ep, iov.data(), n,
                                           raddr(size - 128), rkey.rkey,
                                           &c[1].super), c[1]))
                << n << " entries";
        EXPECT_EQ(UCS_ERR_INVALID_ADDR,
                  outcome(uct_ep_put_zcopy(ep, wrap.data(), n, raddr(0),
                                           rkey.rkey, &c[2].super), c[2]))
                << n << " entries";
        EXPECT_EQ(UCS_ERR_INVALID_ADDR,
                  outcome(uct_ep_get_zcopy(ep, wrap.data(), n, raddr(0),
                                           rkey.rkey, &c[3].super), c[3]))
                << n << " entries";
        EXPECT_EQ(4u, logs.count("is outside the registered extent"))
                << n << " entries";
    }
    EXPECT_TRUE(guard_intact());
    dereg(lmemh);
}

TEST_P(span_uct, atomics)
{
    if (!(iface_attr.cap.atomic64.fop_flags & UCS_BIT(UCT_ATOMIC_OP_ADD))) {
        GTEST_SKIP() << GetParam() << " has no 64-bit fetch-add";
    }
    uint64_t *target = reinterpret_cast<uint64_t*>(&remote[256]);
    *target          = 40;
    uint64_t result  = 0;
    completion c1;
    wait(uct_ep_atomic64_fetch(ep, UCT_ATOMIC_OP_ADD, 2, &result, raddr(256),
                               rkey.rkey, &c1.super), c1);
    EXPECT_EQ(40u, result);
    EXPECT_EQ(42u, *target);

    completion c2;
    wait(uct_ep_atomic_cswap64(ep, 42, 7, raddr(256), rkey.rkey, &result,
                               &c2.super), c2);
    EXPECT_EQ(42u, result);
    EXPECT_EQ(7u, *target);

    if (iface_attr.cap.atomic32.op_flags & UCS_BIT(UCT_ATOMIC_OP_ADD)) {
        uint32_t *t32 = reinterpret_cast<uint32_t*>(&remote[512]);
        *t32          = 1;
        ASSERT_EQ(UCS_OK, uct_ep_atomic32_post(ep, UCT_ATOMIC_OP_ADD, 5,
                                               raddr(512), rkey.rkey));
        completion c3;
        wait(uct_ep_flush(ep, 0, &c3.super), c3);
        EXPECT_EQ(6u, *t32);
    }
}

TEST_P(span_uct, out_of_bounds_is_refused)
{
    if (!twin) {
        GTEST_SKIP() << "native transports do not check bounds";
    }
    uint64_t v = ~0ull;
    log_counter logs;
    if (iface_attr.cap.flags & UCT_IFACE_FLAG_PUT_SHORT) {
        EXPECT_EQ(UCS_ERR_INVALID_ADDR,
                  uct_ep_put_short(ep, &v, sizeof(v), raddr(size - 4), rkey.rkey));
        EXPECT_EQ(UCS_ERR_INVALID_ADDR,
                  uct_ep_put_short(ep, &v, sizeof(v), raddr(0) - 8, rkey.rkey));
        EXPECT_EQ(UCS_ERR_INVALID_ADDR,
                  uct_ep_put_short(ep, &v, sizeof(v), raddr(0) - 4, rkey.rkey));
    }
    if (iface_attr.cap.flags & UCT_IFACE_FLAG_GET_SHORT) {
        EXPECT_EQ(UCS_ERR_INVALID_ADDR,
                  uct_ep_get_short(ep, &v, sizeof(v), raddr(size), rkey.rkey));
    }
    if (iface_attr.cap.flags & UCT_IFACE_FLAG_GET_BCOPY) {
        std::vector<uint8_t> dst(64);
        completion c;
        EXPECT_EQ(UCS_ERR_INVALID_ADDR,
                  outcome(uct_ep_get_bcopy(ep, unpack_cb, dst.data(),
                                           dst.size(), raddr(size - 32),
                                           rkey.rkey, &c.super), c));
    }
    if (iface_attr.cap.flags & UCT_IFACE_FLAG_PUT_ZCOPY) {
        std::vector<uint8_t> local(4096, 0xff);
        uct_mem_h lmemh = reg(local.data(), local.size());
        uct_iov_t iov = {local.data(), local.size(), lmemh, 0, 1};
        completion c, g;
        EXPECT_EQ(UCS_ERR_INVALID_ADDR,
                  outcome(uct_ep_put_zcopy(ep, &iov, 1, raddr(size - 100),
                                           rkey.rkey, &c.super), c));
        EXPECT_EQ(UCS_ERR_INVALID_ADDR,
                  outcome(uct_ep_get_zcopy(ep, &iov, 1, raddr(1) << 40,
                                           rkey.rkey, &g.super), g));
        dereg(lmemh);
    }
    if (iface_attr.cap.flags & UCT_IFACE_FLAG_PUT_BCOPY) {
        std::vector<uint8_t> src(200, 0xff);
        pack_arg arg = {src.data(), src.size()};
        EXPECT_EQ(UCS_ERR_INVALID_ADDR,
                  uct_ep_put_bcopy(ep, pack_cb, &arg, raddr(size + 8), rkey.rkey));
    }
    EXPECT_EQ(logs.count(), logs.count("is outside the registered extent"));
    EXPECT_LT(0u, logs.count()) << "no refusal was logged";
    EXPECT_TRUE(guard_intact());
}

TEST_P(span_uct, corrupted_rkey_is_refused)
{
    if (!twin) {
        GTEST_SKIP() << "native rkeys carry no checksum";
    }
    for (size_t i = 0; i < rkey_buf.size() - 1; ++i) {
        std::vector<uint8_t> bad = rkey_buf;
        bad[i] ^= 0x40;
        uct_rkey_bundle_t b;
        log_counter logs;
        EXPECT_NE(UCS_OK, uct_rkey_unpack(component, bad.data(), &b))
                << "byte " << i;
        EXPECT_EQ(1u, logs.count("span rkey")) << "byte " << i;
    }
}

INSTANTIATE_TEST_SUITE_P(twin, span_uct, ::testing::Values("self+", "cma+"));
INSTANTIATE_TEST_SUITE_P(native, span_uct, ::testing::Values("self", "cma"));

/*
 * Memory from uct_iface_mem_alloc() on a twin iface (UCT-level ucx_perftest
 * does this) is registered by the inner MD: the twin MD packs a key for it
 * over what the inner MD registered, and the twin's ops take its handle as
 * the local one. Every byte arrives; an access past the allocation is
 * refused; a range past it is not packed.
 */
class span_uct_iface_mem : public span_uct {
protected:
    void alloc(size_t length, uct_allocated_memory_t *mem)
    {
        ASSERT_EQ(UCS_OK, uct_iface_mem_alloc(iface, length,
                                              UCT_MD_MEM_ACCESS_ALL, "test",
                                              mem));
        ASSERT_GE(mem->length, length);
    }

    ucs_status_t pack(const uct_allocated_memory_t &mem, void *address,
                      size_t length, std::vector<uint8_t> &buf)
    {
        uct_md_attr_t md_attr;
        uct_md_mkey_pack_params_t params = {};
        EXPECT_EQ(UCS_OK, uct_md_query(md, &md_attr));
        buf.assign(md_attr.rkey_packed_size, 0xee);
        return uct_md_mkey_pack_v2(md, mem.memh, address, length, &params,
                                   buf.data());
    }
};

TEST_P(span_uct_iface_mem, rma_into_memory_the_twin_iface_allocated)
{
    const size_t length = 64 * 1024;
    uct_allocated_memory_t target, local;
    std::vector<uint8_t> buf;
    alloc(length, &target);
    alloc(length, &local);
    ASSERT_EQ(UCS_OK, pack(target, target.address, length, buf));
    uct_rkey_bundle_t key;
    ASSERT_EQ(UCS_OK, uct_rkey_unpack(component, buf.data(), &key));

    uint8_t *t = (uint8_t*)target.address, *l = (uint8_t*)local.address;
    uint64_t raddr = (uintptr_t)t;
    for (size_t i = 0; i < length; ++i) {
        l[i] = uint8_t(i * 11 + 5);
        t[i] = 0;
    }
    const bool zcopy = iface_attr.cap.flags & UCT_IFACE_FLAG_PUT_ZCOPY;
    size_t moved     = std::min<size_t>(length,
                                        zcopy ? iface_attr.cap.put.max_zcopy :
                                                iface_attr.cap.put.max_short);
    if (zcopy) {
        uct_iov_t iov = {l + 3, moved - 3, local.memh, 0, 1};
        completion c;
        wait(uct_ep_put_zcopy(ep, &iov, 1, raddr + 3, key.rkey, &c.super), c);
        memset(l, 0, length);
        uct_iov_t back = {l + 3, moved - 3, local.memh, 0, 1};
        completion g;
        wait(uct_ep_get_zcopy(ep, &back, 1, raddr + 3, key.rkey, &g.super), g);
    } else {
        ASSERT_EQ(UCS_OK, uct_ep_put_short(ep, l + 3, moved - 3, raddr + 3,
                                           key.rkey));
    }
    for (size_t i = 3; i < moved; ++i) {
        ASSERT_EQ(uint8_t(i * 11 + 5), t[i]) << "target byte " << i;
        ASSERT_EQ(uint8_t(i * 11 + 5), l[i]) << "local byte " << i;
    }

    /* past the allocation: refused, the inner transport not called */
    log_counter logs;
    uint64_t v = 1;
    if (iface_attr.cap.flags & UCT_IFACE_FLAG_PUT_SHORT) {
        EXPECT_EQ(UCS_ERR_INVALID_ADDR,
                  uct_ep_put_short(ep, &v, sizeof(v),
                                   raddr + target.length - 4, key.rkey));
    } else {
        uct_iov_t iov = {l, 8, local.memh, 0, 1};
        completion c;
        EXPECT_EQ(UCS_ERR_INVALID_ADDR,
                  outcome(uct_ep_put_zcopy(ep, &iov, 1,
                                           raddr + target.length - 4,
                                           key.rkey, &c.super), c));
    }
    EXPECT_EQ(1u, logs.count("outside the registered extent"));

    uct_rkey_release(component, &key);
    uct_iface_mem_free(&local);
    uct_iface_mem_free(&target);
}

TEST_P(span_uct_iface_mem, a_range_past_the_allocation_is_not_packed)
{
    uct_allocated_memory_t mem;
    std::vector<uint8_t> buf;
    alloc(8192, &mem);
    uct_md_attr_t md_attr;
    ASSERT_EQ(UCS_OK, uct_md_query(md, &md_attr));

    log_counter logs;
    if (md_attr.rkey_packed_size > SPAN_RKEY_HDR_SIZE) {
        /* the inner MD registered it: its extent bounds what is packed */
        EXPECT_EQ(UCS_ERR_INVALID_PARAM,
                  pack(mem, mem.address, mem.length + 4096, buf));
        EXPECT_EQ(UCS_ERR_INVALID_PARAM,
                  pack(mem, (uint8_t*)mem.address - 4096, 4096, buf));
        EXPECT_EQ(2u, logs.count("registered neither by this twin MD"));
    }
    /* no range named (uct_md_mkey_pack): only a recorded extent will do */
    EXPECT_EQ((md_attr.rkey_packed_size > SPAN_RKEY_HDR_SIZE) ? UCS_OK :
              UCS_ERR_INVALID_PARAM,
              uct_md_mkey_pack(md, mem.memh, buf.data()));
    uct_iface_mem_free(&mem);
}

INSTANTIATE_TEST_SUITE_P(twin, span_uct_iface_mem,
                         ::testing::Values("posix+", "sysv+", "cma+",
                                           "self+"));

extern "C" ucs_status_t
uct_iface_query_v2(uct_iface_h iface, void *iface_attr);
extern "C" ucs_status_t
uct_ep_put_sgl_zcopy(uct_ep_h ep, void *const *buffers, const size_t *lengths,
                     uct_mem_h const *memhs, const uint64_t *remote_addrs,
                     uct_rkey_t const *rkeys, const size_t *counts,
                     const size_t *strides, size_t count,
                     uct_completion_t *comp);
/* UCX 1.23's; absent from 1.22 */
extern "C" __attribute__((weak)) ucs_status_t
uct_ep_get_sgl_zcopy(uct_ep_h ep, void *const *buffers, const size_t *lengths,
                     uct_mem_h const *memhs, const uint64_t *remote_addrs,
                     uct_rkey_t const *rkeys, const size_t *counts,
                     const size_t *strides, size_t count,
                     uct_completion_t *comp);

/* The capability flags of uct_iface_attr_v2_t and its SGL counts: in 1.22
 * the field-mask bit 1 after one SGL count, in 1.23 bit 2 after two; SGL
 * put is bit 0 of both, SGL get bit 1 of 1.23's */
static void v2_sgl_query(uct_iface_h iface, uint64_t *flags_p,
                         size_t *put_max_p, size_t *get_max_p)
{
    bool v1_23  = dlsym(RTLD_DEFAULT, "uct_md_mem_elem_release") != NULL;
    uint64_t attr[16] = {};
    attr[0]     = v1_23 ? (UCS_BIT(2) | 3) : (UCS_BIT(1) | 1);
    ASSERT_EQ(UCS_OK, uct_iface_query_v2(iface, attr));
    *flags_p   = attr[v1_23 ? 3 : 2];
    *put_max_p = attr[1];
    *get_max_p = v1_23 ? attr[2] : 0;
}

/* The twin offers SGL zero-copy where it has zero-copy, each element
 * checked; it does not promise that an AM follows earlier puts (it may
 * defer pieces of one) */
TEST_P(span_uct, twin_offers_sgl_and_no_put_am_order)
{
    if (!twin) {
        GTEST_SKIP() << "twins only";
    }
    uint64_t flags = ~0ull;
    size_t put_max = 0, get_max = 0;
    ASSERT_NO_FATAL_FAILURE(v2_sgl_query(iface, &flags, &put_max, &get_max));
    bool put = iface_attr.cap.flags & UCT_IFACE_FLAG_PUT_ZCOPY;
    EXPECT_EQ(put, bool(flags & 1)) << GetParam();
    EXPECT_EQ(put ? 256u : 0u, put_max);
    if (uct_ep_get_sgl_zcopy != NULL) {
        bool get = iface_attr.cap.flags & UCT_IFACE_FLAG_GET_ZCOPY;
        EXPECT_EQ(get, bool(flags & 2)) << GetParam();
        EXPECT_EQ(get ? 256u : 0u, get_max);
    }
    EXPECT_FALSE(iface_attr.cap.flags & UCT_IFACE_FLAG_PUT_AM_ORDER);
}

/* One SGL op (a put, then where the release has it a get) of elements
 * scattered over the registration, one strided, and, with bad, one whose
 * last byte lies past the registration's end: every other element's bytes
 * land (each element is checked alone), the bad one moves none, and the
 * op fails with UCS_ERR_INVALID_ADDR (returned, or in its completion) */
TEST_P(span_uct, sgl_moves_every_element_and_refuses_one_outside)
{
    if (!twin) {
        GTEST_SKIP() << "natively cma and self offer no SGL";
    }
    auto round = [&](bool bad, bool is_put) {
        const size_t n = 40;
        std::vector<uint8_t> local(64 * 1024);
        std::vector<void*> buffers(n);
        std::vector<size_t> lengths(n), counts(n, 1), strides(n, 0);
        std::vector<uint64_t> addrs(n);
        std::vector<uct_rkey_t> rkeys(n, rkey.rkey);
        std::vector<uct_mem_h> memhs(n);
        uct_mem_h lmemh = reg(local.data(), local.size());
        for (size_t i = 0; i < local.size(); ++i) {
            local[i] = uint8_t(i * 13 + (is_put ? 1 : 2));
        }
        std::vector<uint8_t> before = remote;
        std::vector<uint8_t> expect = remote;
        for (size_t i = 0; i < n; ++i) {
            size_t off = i * 1500 + (i % 5), loff = (n - 1 - i) * 1500;
            buffers[i] = &local[loff];
            lengths[i] = 1 + (i * 37) % 1200;
            addrs[i]   = raddr(off);
            memhs[i]   = lmemh;
        }
        counts[3]  = 4;  /* 4 blocks of 16 bytes, 100 apart, on both sides */
        lengths[3] = 16;
        strides[3] = 100;
        if (bad) {
            addrs[7]   = raddr(size - 8);
            lengths[7] = 16;
        }
        log_counter logs;
        completion c;
        ucs_status_t st = is_put ?
                uct_ep_put_sgl_zcopy(ep, buffers.data(), lengths.data(),
                                     memhs.data(), addrs.data(), rkeys.data(),
                                     counts.data(), strides.data(), n, &c.super) :
                uct_ep_get_sgl_zcopy(ep, buffers.data(), lengths.data(),
                                     memhs.data(), addrs.data(), rkeys.data(),
                                     counts.data(), strides.data(), n, &c.super);
        EXPECT_EQ(bad ? UCS_ERR_INVALID_ADDR : UCS_OK, outcome(st, c));
        EXPECT_EQ(bad ? 1u : 0u, logs.count("is outside the registered extent"));
        flush();
        for (size_t i = 0; i < n; ++i) {
            if (bad && (i == 7)) {
                continue;
            }
            for (size_t k = 0; k < counts[i]; ++k) {
                size_t off = addrs[i] - raddr(0) + k * strides[i];
                uint8_t *lb = (uint8_t*)buffers[i] + k * strides[i];
                for (size_t j = 0; j < lengths[i]; ++j) {
                    if (is_put) {
                        expect[off + j] = lb[j];
                    } else {
                        ASSERT_EQ(before[off + j], lb[j]) << "get, element " << i;
                    }
                }
            }
        }
        if (is_put) {
            EXPECT_TRUE(expect == remote) << "put: bytes of an element wrong";
        } else {
            EXPECT_TRUE(before == remote);
        }
        EXPECT_TRUE(guard_intact());
        dereg(lmemh);
    };

    uint64_t flags;
    size_t put_max, get_max;
    ASSERT_NO_FATAL_FAILURE(v2_sgl_query(iface, &flags, &put_max, &get_max));
    if (!(flags & 1)) {
        GTEST_SKIP() << GetParam() << " has no zero-copy put, nor SGL";
    }
    for (bool bad : {false, true}) {
        ASSERT_NO_FATAL_FAILURE(round(bad, true)) << bad;
        if ((uct_ep_get_sgl_zcopy != NULL) && (flags & 2)) {
            ASSERT_NO_FATAL_FAILURE(round(bad, false)) << bad;
        }
    }
}

/*
 * rkey buffers, both directions (issue 16, item 5). UCP hands rkey_unpack
 * exactly the rkey_packed_size bytes the exporter's MD reported; a header
 * that claims a larger body must be refused without a read past them. The
 * key lies at the end of a page followed by an inaccessible one, so that
 * an over-read crashes without a sanitizer too.
 */
class span_rkey_buffer : public ::testing::Test {
protected:
    void SetUp() override
    {
        ASSERT_NO_FATAL_FAILURE(open_twin_md("cma+", &component, &md));
        uct_md_attr_t attr;
        ASSERT_EQ(UCS_OK, uct_md_query(md, &attr));
        packed_size = attr.rkey_packed_size;
        area = (uint8_t*)mmap(NULL, 2 * page, PROT_READ | PROT_WRITE,
                              MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        ASSERT_NE(MAP_FAILED, (void*)area);
        ASSERT_EQ(0, mprotect(area + page, page, PROT_NONE));
    }

    void TearDown() override
    {
        if (area != MAP_FAILED) {
            munmap(area, 2 * page);
        }
        if (md != NULL) {
            uct_md_close(md);
        }
    }

    /* A packed key of a registration, just before the guard page */
    uint8_t *packed(uct_mem_h h)
    {
        uint8_t *key = area + page - packed_size;
        EXPECT_EQ(UCS_OK, uct_md_mkey_pack(md, h, key));
        return key;
    }

    static uint32_t fnv(uint32_t h, const uint8_t *p, size_t n)
    {
        while (n-- > 0) {
            h = (h ^ *(p++)) * 16777619u;
        }
        return h;
    }

    static constexpr size_t page = 4096;
    uct_component_h component  = NULL;
    uct_md_h        md         = NULL;
    size_t          packed_size = 0;
    uint8_t        *area       = (uint8_t*)MAP_FAILED;
};

TEST_F(span_rkey_buffer, a_header_claiming_more_than_was_packed_is_refused)
{
    std::vector<uint8_t> buf(page);
    uct_mem_h h;
    ASSERT_EQ(UCS_OK, uct_md_mem_reg(md, buf.data(), buf.size(),
                                     UCT_MD_MEM_ACCESS_ALL, &h));
    uint8_t *key = packed(h);
    uct_rkey_bundle_t b;
    ASSERT_EQ(UCS_OK, uct_rkey_unpack(component, key, &b));
    EXPECT_EQ(UCS_OK, uct_rkey_release(component, &b));

    /* keys of up to 200 bytes, with a valid header checksum: the checksum
     * of the body, which would be read past the buffer, decides nothing */
    for (unsigned K : {1u, 16u, 100u, 200u}) {
        key[36] = uint8_t(K);
        uint32_t sum = fnv(2166136261u, key, SPAN_RKEY_HDR_SUM_OFFSET);
        memcpy(key + SPAN_RKEY_HDR_SUM_OFFSET, &sum, sizeof(sum));
        log_counter logs;
        EXPECT_NE(UCS_OK, uct_rkey_unpack(component, key, &b)) << K;
    }
    EXPECT_EQ(UCS_OK, uct_md_mem_dereg(md, h));
}

/* Pack writes every one of the rkey_packed_size bytes UCP sends: nothing of
 * what the buffer held before goes to the peer */
TEST_F(span_rkey_buffer, pack_writes_every_byte_it_sends)
{
    md_options_t chunked = {{"SPAN_MAX_CHUNK", "16k"}};
    uct_md_close(md);
    md = open_md(component, "cma+", chunked);
    ASSERT_NE(nullptr, md);
    uct_md_attr_t attr;
    ASSERT_EQ(UCS_OK, uct_md_query(md, &attr));
    packed_size = attr.rkey_packed_size;

    std::vector<uint8_t> buf(64 * 1024);
    uct_mem_h h;
    ASSERT_EQ(UCS_OK, uct_md_mem_reg(md, buf.data(), buf.size(),
                                     UCT_MD_MEM_ACCESS_ALL, &h));
    std::vector<uint8_t> a(packed_size, 0xee), b(packed_size, 0x11);
    ASSERT_EQ(UCS_OK, uct_md_mkey_pack(md, h, a.data()));
    ASSERT_EQ(UCS_OK, uct_md_mkey_pack(md, h, b.data()));
    EXPECT_EQ(a, b) << "bytes the key does not use are sent as they were";
    /* what a sender does with it: memcheck (contrib/) reports a write of
     * uninitialised bytes */
    uint8_t *fresh = (uint8_t*)malloc(packed_size);
    ASSERT_NE(nullptr, fresh);
    ASSERT_EQ(UCS_OK, uct_md_mkey_pack(md, h, fresh));
    int fd = open("/dev/null", O_WRONLY);
    EXPECT_EQ(ssize_t(packed_size), write(fd, fresh, packed_size));
    close(fd);
    free(fresh);
    EXPECT_EQ(UCS_OK, uct_md_mem_dereg(md, h));
}

/*
 * rkey_compare of span rkeys whose units are mapped here (span's own VMM
 * export, issue 16 item 7b): two exporters' keys of the same address and
 * length name different memory, and must not compare equal. Such rkeys
 * need a GPU to unpack; their compare needs only what unpack records, so
 * they are built here as unpack builds them.
 */
TEST(span_rkey_compare, vmm_keys_of_different_exporters_differ)
{
    uct_component_h span = find_component("span");
    ASSERT_NE(nullptr, span);
    std::vector<uint8_t> mem_a(sizeof(span_rkey_t) + 2 * sizeof(void*[2]));
    std::vector<uint8_t> mem_b(mem_a.size());
    span_rkey_t *a = (span_rkey_t*)mem_a.data();
    span_rkey_t *b = (span_rkey_t*)mem_b.data();
    a->geom.base       = 0x7f2000000000ull; /* two units of 4 MiB */
    a->geom.length     = 4ull << 21;
    a->geom.unit_size  = 2ull << 21;
    a->geom.num_chunks = 2;
    a->inner_component = (uct_component_t*)find_component("cma");
    a->num_inner       = a->geom.num_chunks;
    span_vmm_map_t map_a = {}, map_b;
    a->vmm             = &map_a;
    a->vmm->length     = a->geom.length;
    a->vmm->pid_ns     = 4026531836ull;
    a->vmm->base       = 0x7f3000000000ull;
    a->vmm->pid        = 1000;
    mem_b              = mem_a;
    map_b              = map_a;
    b->vmm             = &map_b;
    b->vmm->base       = 0x7f4000000000ull;
    b->vmm->pid        = 2000;

    /* what uct_rkey_compare (uct_v2.h, not installed) calls */
    uct_component_t *component = (uct_component_t*)span;
    auto compare = [&](int *result) {
        uct_rkey_compare_params_t params = {};
        return component->rkey_compare(component, (uintptr_t)a, (uintptr_t)b,
                                       &params, result);
    };
    int result = 0, reverse = 0;
    ASSERT_EQ(UCS_OK, compare(&result));
    EXPECT_NE(0, result) << "two exporters' memory compared equal";
    std::swap(a, b);
    ASSERT_EQ(UCS_OK, compare(&reverse));
    std::swap(a, b);
    EXPECT_EQ(-result, reverse);

    /* the same exporter's units, mapped twice here, are the same memory */
    b->vmm->pid = 1000;
    ASSERT_EQ(UCS_OK, compare(&result));
    EXPECT_EQ(0, result);
    /* ... unless other units were exported since at the same address */
    b->vmm->keys_sum = 1;
    ASSERT_EQ(UCS_OK, compare(&result));
    EXPECT_NE(0, result);
    /* a mapped key and an inner one differ */
    mem_b  = mem_a;
    b->vmm = nullptr;
    ASSERT_EQ(UCS_OK, compare(&result));
    EXPECT_NE(0, result);
}
