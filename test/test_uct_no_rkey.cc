/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Ops given no key (UCT_INVALID_RKEY or 0), as UCT users and UCX's own
 * tests pass them: for memory without a memh (uct_iface_mem_alloc on cma)
 * and with empty ops. A twin answers as its inner transport does, or with a
 * clear error where that transport would read the value as a key; it never
 * reads it as a span key (issue 38 A, B, C).
 */
#include "test_uct.h"

namespace {

const uct_rkey_t no_keys[] = {UCT_INVALID_RKEY, 0};

size_t pack_nothing(void *dest, void *arg)
{
    return 0;
}

} // namespace

class span_uct_no_rkey : public span_uct {
protected:
    bool has(uint64_t flag) const { return iface_attr.cap.flags & flag; }

    /* the inner MD packs no key, so its transport reads none */
    bool keyless() const
    {
        uct_md_attr_t attr;
        EXPECT_EQ(UCS_OK, uct_md_query(inner_md(), &attr));
        return attr.rkey_packed_size == 0;
    }

    uct_md_h inner_md() const { return twin ? native_md : md; }

    void SetUp() override
    {
        span_uct::SetUp();
        if (twin) {
            std::string name = GetParam();
            name.pop_back();
            native_md = open_md(find_component(name.c_str()), name.c_str());
            ASSERT_NE(nullptr, native_md);
        }
    }

    void TearDown() override
    {
        if (native_md != NULL) {
            uct_md_close(native_md);
        }
        span_uct::TearDown();
    }

    ucs_status_t zcopy(bool put, void *buf, size_t length, uint64_t addr,
                       uct_rkey_t key)
    {
        uct_iov_t iov = {buf, length, UCT_MEM_HANDLE_NULL, 0, 1};
        completion c;
        ucs_status_t status = put ?
                uct_ep_put_zcopy(ep, &iov, 1, addr, key, &c.super) :
                uct_ep_get_zcopy(ep, &iov, 1, addr, key, &c.super);
        if (status == UCS_INPROGRESS) {
            while (c.super.count > 0) {
                test_worker_progress(worker);
            }
            status = c.super.status;
        }
        return status;
    }

    uct_md_h native_md = NULL;
};

/* Empty ops at address 0 succeed over every transport with no key (UCX's
 * uct_p2p_rma_test put_short/put_bcopy of length 0) */
TEST_P(span_uct_no_rkey, empty_ops_with_no_key_succeed)
{
    uint8_t buf[8] = {};
    for (uct_rkey_t key : no_keys) {
        if (has(UCT_IFACE_FLAG_PUT_SHORT)) {
            EXPECT_EQ(UCS_OK, uct_ep_put_short(ep, NULL, 0, 0, key)) << key;
        }
        if (has(UCT_IFACE_FLAG_PUT_BCOPY)) {
            EXPECT_EQ(0, uct_ep_put_bcopy(ep, pack_nothing, NULL, 0, key))
                    << key;
        }
        if (has(UCT_IFACE_FLAG_PUT_ZCOPY)) {
            EXPECT_EQ(UCS_OK, zcopy(true, buf, 0, 0, key)) << key;
        }
        if (has(UCT_IFACE_FLAG_GET_ZCOPY)) {
            EXPECT_EQ(UCS_OK, zcopy(false, buf, 0, 0, key)) << key;
        }
    }
    EXPECT_NO_FATAL_FAILURE(test_worker_progress(worker));
}

/* Where the transport reads no key (self, cma), bytes move with key 0, as
 * natively, unchecked (no extent is known; self adds the key to the
 * address, so UCT_INVALID_RKEY moves them one byte down, natively too);
 * elsewhere the twin refuses every op with no key with a log line, and the
 * remote buffer is untouched (natively such an op writes through the value
 * as an address) */
TEST_P(span_uct_no_rkey, ops_with_no_key_move_bytes_only_where_no_key_is_read)
{
    if (!twin && !keyless()) {
        GTEST_SKIP() << GetParam() << " reads the value as its key";
    }
    uint64_t value = 0x1122334455667788ull;
    uint8_t back[64];

    for (uct_rkey_t key : no_keys) {
        if (keyless() && (key != 0)) {
            continue;
        }
        std::vector<uint8_t> before = remote;
        log_counter logs;
        unsigned refused = 0;
        std::vector<size_t> written;
        auto expect = [&](ucs_status_t status, const char *op,
                          size_t offset = SIZE_MAX) {
            if (keyless()) {
                EXPECT_EQ(UCS_OK, status) << op << " rkey " << key;
                if (offset != SIZE_MAX) {
                    written.push_back(offset);
                }
            } else {
                EXPECT_EQ(UCS_ERR_INVALID_PARAM, status) << op << " rkey "
                                                         << key;
                ++refused;
            }
        };

        if (has(UCT_IFACE_FLAG_PUT_SHORT)) {
            expect(uct_ep_put_short(ep, &value, sizeof(value), raddr(8), key),
                   "put_short", 8);
        }
        /* a bcopy put goes as it is: its length is known once packed,
         * which shared memory does at the address the key makes */
        if (has(UCT_IFACE_FLAG_PUT_BCOPY) && keyless()) {
            pack_arg arg = {&value, sizeof(value)};
            ssize_t len  = uct_ep_put_bcopy(ep, pack_cb, &arg, raddr(24), key);
            expect((len == sizeof(value)) ? UCS_OK : (ucs_status_t)len,
                   "put_bcopy", 24);
        }
        if (has(UCT_IFACE_FLAG_PUT_ZCOPY)) {
            expect(zcopy(true, &value, sizeof(value), raddr(40), key),
                   "put_zcopy", 40);
        }
        if (has(UCT_IFACE_FLAG_GET_ZCOPY)) {
            memset(back, 0, sizeof(back));
            expect(zcopy(false, back, 32, raddr(100), key), "get_zcopy");
            if (keyless()) {
                EXPECT_EQ(0, memcmp(back, &remote[100], 32));
            }
        }
        if (has(UCT_IFACE_FLAG_ATOMIC_CPU) &&
            (iface_attr.cap.atomic64.op_flags & UCS_BIT(UCT_ATOMIC_OP_ADD))) {
            expect(uct_ep_atomic64_post(ep, UCT_ATOMIC_OP_ADD, 1, raddr(56),
                                        key), "atomic64_post");
        }
        test_worker_progress(worker);

        if (keyless()) {
            EXPECT_FALSE(written.empty()) << "no op with no key was made";
            for (size_t off : written) {
                EXPECT_EQ(0, memcmp(&remote[off], &value, 8)) << off;
            }
        } else {
            EXPECT_EQ(before, remote) << "a refused op wrote";
            EXPECT_EQ(refused, logs.count("which names no registration"));
        }
        memcpy(remote.data(), before.data(), remote.size());
    }
    EXPECT_TRUE(guard_intact());
}

/* UCX's test_uct_peer_failure_rma_zcopy: key 0, address -1, an error */
TEST_P(span_uct_no_rkey, a_zcopy_to_no_memory_with_key_0_fails)
{
    if (!has(UCT_IFACE_FLAG_PUT_ZCOPY) || !keyless()) {
        GTEST_SKIP() << GetParam() << ": no zero-copy put that takes no key";
    }
    uint64_t value = 1;
    log_counter logs;
    EXPECT_TRUE(UCS_STATUS_IS_ERR(zcopy(true, &value, sizeof(value),
                                        UINT64_MAX, 0)));
}

/* The key functions of the component, given no key */
TEST_P(span_uct_no_rkey, rkey_ptr_and_release_of_no_key)
{
    if (!twin) {
        GTEST_SKIP() << "the span component's own functions";
    }
    uct_rkey_bundle_t none = {UCT_INVALID_RKEY, NULL, NULL};
    void *ptr              = NULL;
    log_counter logs;
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              uct_rkey_ptr(component, &none, raddr(0), &ptr));
    EXPECT_EQ(1u, logs.count("names no registration"));
    EXPECT_EQ(UCS_OK, uct_rkey_release(component, &none));
}

/* Flags a twin cannot honour and UCX's MDs ignore: a key that may be
 * invalidated is packed and works (UCX's test_md.alloc); an exported key
 * is refused */
TEST_P(span_uct_no_rkey, invalidate_flags_of_mkey_pack_are_ignored)
{
    if (!twin || (memh == NULL)) {
        GTEST_SKIP() << GetParam() << ": no twin registration";
    }
    uct_md_attr_t attr;
    ASSERT_EQ(UCS_OK, uct_md_query(md, &attr));
    std::vector<uint8_t> buf(attr.rkey_packed_size);
    uct_md_mkey_pack_params_t params;
    params.field_mask = UCT_MD_MKEY_PACK_FIELD_FLAGS;
    params.flags      = UCT_MD_MKEY_PACK_FLAG_INVALIDATE_RMA |
                        UCT_MD_MKEY_PACK_FLAG_INVALIDATE_AMO;
    ASSERT_EQ(UCS_OK, uct_md_mkey_pack_v2(md, memh, remote.data(), size,
                                          &params, buf.data()));
    uct_rkey_bundle_t key;
    ASSERT_EQ(UCS_OK, uct_rkey_unpack(component, buf.data(), &key));
    uint64_t value = 0xabcdef;
    if (has(UCT_IFACE_FLAG_PUT_SHORT)) {
        EXPECT_EQ(UCS_OK, uct_ep_put_short(ep, &value, sizeof(value),
                                           raddr(16), key.rkey));
    } else {
        EXPECT_EQ(UCS_OK, zcopy(true, &value, sizeof(value), raddr(16),
                                key.rkey));
    }
    EXPECT_EQ(0, memcmp(&remote[16], &value, sizeof(value)));
    uct_rkey_release(component, &key);

    log_counter logs;
    params.flags = UCT_MD_MKEY_PACK_FLAG_EXPORT;
    EXPECT_EQ(UCS_ERR_UNSUPPORTED,
              uct_md_mkey_pack_v2(md, memh, remote.data(), size, &params,
                                  buf.data()));
    EXPECT_EQ(1u, logs.count("exported keys are not supported"));
}

INSTANTIATE_TEST_SUITE_P(twin, span_uct_no_rkey,
                         ::testing::Values("self+", "cma+", "posix+", "sysv+",
                                           "strict+"));
INSTANTIATE_TEST_SUITE_P(native, span_uct_no_rkey,
                         ::testing::Values("self", "cma", "posix", "sysv"));

/*
 * Memory from uct_iface_mem_alloc() on a twin iface is the inner MD's:
 * where that MD registers nothing (cma) its memh is NULL, and UCX's rule
 * (no memh, so no key: UCT_INVALID_RKEY) gives a key that the twin takes
 * as its inner transport does; where it has a memh, the twin MD packs a
 * key of it. Either way the bytes arrive (UCX's uct_p2p_rma_test over
 * cma+).
 */
class span_uct_iface_mem_key : public span_uct_no_rkey {
};

TEST_P(span_uct_iface_mem_key, the_key_that_the_memh_gives_moves_bytes)
{
    const size_t length = 4096;
    uct_allocated_memory_t target;
    ASSERT_EQ(UCS_OK, uct_iface_mem_alloc(iface, length, UCT_MD_MEM_ACCESS_ALL,
                                          "test", &target));
    uct_rkey_bundle_t key = {UCT_INVALID_RKEY, NULL, NULL};
    std::vector<uint8_t> buf;
    if (target.memh != UCT_MEM_HANDLE_NULL) {
        uct_md_attr_t attr;
        ASSERT_EQ(UCS_OK, uct_md_query(md, &attr));
        uct_md_mkey_pack_params_t params = {};
        buf.resize(attr.rkey_packed_size);
        ASSERT_EQ(UCS_OK, uct_md_mkey_pack_v2(md, target.memh, target.address,
                                              length, &params, buf.data()));
        ASSERT_EQ(UCS_OK, uct_rkey_unpack(component, buf.data(), &key));
    }

    uint8_t *t = (uint8_t*)target.address;
    uint8_t src[256];
    for (size_t i = 0; i < sizeof(src); ++i) {
        src[i] = uint8_t(i * 13 + 1);
    }
    memset(t, 0, length);
    if (has(UCT_IFACE_FLAG_PUT_ZCOPY)) {
        EXPECT_EQ(UCS_OK, zcopy(true, src, sizeof(src), (uintptr_t)t + 64,
                                key.rkey));
    } else {
        ASSERT_TRUE(has(UCT_IFACE_FLAG_PUT_SHORT));
        size_t n = std::min<size_t>(sizeof(src), iface_attr.cap.put.max_short);
        EXPECT_EQ(UCS_OK, uct_ep_put_short(ep, src, n, (uintptr_t)t + 64,
                                           key.rkey));
        memset(src + n, 0, sizeof(src) - n);
    }
    EXPECT_EQ(0, memcmp(t + 64, src, sizeof(src)));

    if (!buf.empty()) {
        uct_rkey_release(component, &key);
    }
    uct_iface_mem_free(&target);
}

INSTANTIATE_TEST_SUITE_P(twin, span_uct_iface_mem_key,
                         ::testing::Values("cma+", "self+", "posix+",
                                           "sysv+"));
