/*
 * UCT level: twin MDs and transports over real inner transports, in one
 * process. libuct_span is loaded by UCX from UCX_MODULE_DIR (set by ctest).
 */
#include <uct/api/uct.h>
#include <ucm/api/ucm.h>
#include <ucs/config/global_opts.h>
#include <ucs/async/async_fwd.h>

#include "test_deadline.h"
#include "test_fork.h"
extern "C" {
#include "key/span_rkey.h"
}
#include "test_log.h"
#include "test_uct_util.h"

#include <gtest/gtest.h>
#include <array>
#include <atomic>
#include <random>
#include <set>
#include <thread>
#include <dlfcn.h>
#include <fcntl.h>
#include <malloc.h>
#include <unistd.h>
#include <sys/mman.h>
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

namespace {

std::vector<std::string> md_names(uct_component_h component)
{
    uct_component_attr_t attr;
    attr.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT;
    EXPECT_EQ(UCS_OK, uct_component_query(component, &attr));
    std::vector<uct_md_resource_desc_t> res(attr.md_resource_count);
    attr.field_mask   = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES;
    attr.md_resources = res.data();
    EXPECT_EQ(UCS_OK, uct_component_query(component, &attr));
    std::vector<std::string> names;
    for (auto &r : res) {
        names.push_back(r.md_name);
    }
    return names;
}

struct completion {
    uct_completion_t super;
    static void cb(uct_completion_t *self) {}
    completion() { super.func = cb; super.count = 1; super.status = UCS_OK; }
};

void unpack_cb(void *arg, const void *data, size_t length)
{
    memcpy(arg, data, length);
}

struct pack_arg {
    const void *src;
    size_t      length;
};

size_t pack_cb(void *dest, void *arg)
{
    pack_arg *p = static_cast<pack_arg*>(arg);
    memcpy(dest, p->src, p->length);
    return p->length;
}

/* A counter of the strict test transport's MD (-1 where not loaded) */
long strict_counter(const char *name)
{
    std::string path = std::string(getenv("UCX_MODULE_DIR")) +
                       "/libuct_strict.so.0";
    void *dl = dlopen(path.c_str(), RTLD_LAZY | RTLD_NOLOAD);
    auto fn  = dl ? (long (*)())dlsym(dl, name) : nullptr;
    long n   = fn ? fn() : -1;
    if (dl != nullptr) {
        dlclose(dl);
    }
    return n;
}

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

class span_uct : public ::testing::TestWithParam<const char*> {
protected:
    void SetUp() override
    {
        std::string tl = GetParam();
        twin           = tl.back() == '+';
        component      = find_component(twin ? "span" : tl.c_str());
        ASSERT_NE(nullptr, component);
        md = open_md(component, tl.c_str(), md_options());
        ASSERT_NE(nullptr, md);

        ASSERT_EQ(UCS_OK, ucs_async_context_create(UCS_ASYNC_MODE_THREAD_SPINLOCK,
                                                   &async));
        ASSERT_EQ(UCS_OK, uct_worker_create(async, UCS_THREAD_MODE_SINGLE,
                                            &worker));

        ASSERT_EQ(UCS_OK, open_iface(md, worker, tl.c_str(), "memory", NULL,
                                     &iface));
        ASSERT_EQ(UCS_OK, uct_iface_query(iface, &iface_attr));
        ASSERT_EQ(UCS_OK, connect_to_self(iface, &ep));

        /* remote buffer: the first half is registered, the second is a
         * guard that no op may touch */
        remote.assign(2 * size, 0);
        for (size_t i = 0; i < size; ++i) {
            remote[i] = uint8_t(i * 7 + 3);
        }
        uct_md_attr_t md_attr;
        ASSERT_EQ(UCS_OK, uct_md_query(md, &md_attr));
        if (!(md_attr.cap.flags & UCT_MD_FLAG_REG)) {
            /* native cma: no registration, no rkey */
            rkey.rkey = UCT_INVALID_RKEY;
            return;
        }
        ASSERT_EQ(UCS_OK, uct_md_mem_reg(md, remote.data(), size,
                                         UCT_MD_MEM_ACCESS_ALL, &memh));
        rkey_buf.resize(md_attr.rkey_packed_size + 1);
        ASSERT_EQ(UCS_OK, uct_md_mkey_pack(md, memh, rkey_buf.data()));
        ASSERT_EQ(UCS_OK, uct_rkey_unpack(component, rkey_buf.data(), &rkey));
    }

    void TearDown() override
    {
        if (!rkey_buf.empty()) {
            uct_rkey_release(component, &rkey);
        }
        if (memh != NULL) {
            EXPECT_EQ(UCS_OK, uct_md_mem_dereg(md, memh));
        }
        if (ep != NULL) {
            uct_ep_destroy(ep);
        }
        if (iface != NULL) {
            uct_iface_close(iface);
        }
        if (worker != NULL) {
            uct_worker_destroy(worker);
        }
        if (async != NULL) {
            ucs_async_context_destroy(async);
        }
        if (md != NULL) {
            uct_md_close(md);
        }
    }

    void wait(ucs_status_t status, completion &comp)
    {
        if (status == UCS_INPROGRESS) {
            while (comp.super.count > 0) {
                uct_worker_progress(worker);
            }
            status = comp.super.status;
        }
        ASSERT_EQ(UCS_OK, status);
    }

    uct_mem_h reg(void *buf, size_t length)
    {
        uct_mem_h h = UCT_MEM_HANDLE_NULL;
        if (!rkey_buf.empty()) {
            EXPECT_EQ(UCS_OK, uct_md_mem_reg(md, buf, length,
                                             UCT_MD_MEM_ACCESS_ALL, &h));
        }
        return h;
    }

    void dereg(uct_mem_h h)
    {
        if (h != UCT_MEM_HANDLE_NULL) {
            EXPECT_EQ(UCS_OK, uct_md_mem_dereg(md, h));
        }
    }

    virtual md_options_t md_options() const { return {}; }

    uint64_t raddr(size_t offset) { return (uintptr_t)remote.data() + offset; }

    bool guard_intact()
    {
        for (size_t i = size; i < 2 * size; ++i) {
            if (remote[i] != 0) {
                return false;
            }
        }
        return true;
    }

    static constexpr size_t  size = 64 * 1024;
    bool                     twin;
    uct_component_h          component = NULL;
    uct_md_h                 md        = NULL;
    ucs_async_context_t     *async     = NULL;
    uct_worker_h             worker    = NULL;
    uct_iface_h              iface     = NULL;
    uct_iface_attr_t         iface_attr;
    uct_ep_h                 ep        = NULL;
    std::vector<uint8_t>     remote;
    uct_mem_h                memh      = NULL;
    std::vector<uint8_t>     rkey_buf;
    uct_rkey_bundle_t        rkey      = {};
};

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
                  uct_ep_get_bcopy(ep, unpack_cb, dst.data(), dst.size(),
                                   raddr(size - 32), rkey.rkey, &c.super));
    }
    if (iface_attr.cap.flags & UCT_IFACE_FLAG_PUT_ZCOPY) {
        std::vector<uint8_t> local(4096, 0xff);
        uct_mem_h lmemh = reg(local.data(), local.size());
        uct_iov_t iov = {local.data(), local.size(), lmemh, 0, 1};
        completion c;
        EXPECT_EQ(UCS_ERR_INVALID_ADDR,
                  uct_ep_put_zcopy(ep, &iov, 1, raddr(size - 100), rkey.rkey,
                                   &c.super));
        EXPECT_EQ(UCS_ERR_INVALID_ADDR,
                  uct_ep_get_zcopy(ep, &iov, 1, raddr(1) << 40, rkey.rkey,
                                   &c.super));
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

/* A second twin transport beside the fixture's: its own MD, worker, iface,
 * ep to itself and a registered 64-bit word */
struct twin_side {
    explicit twin_side(const char *tl)
    {
        component = find_component("span");
        md        = open_md(component, tl);
        EXPECT_NE(nullptr, md) << tl;
        if (md == NULL) {
            return;
        }
        EXPECT_EQ(UCS_OK, ucs_async_context_create(
                UCS_ASYNC_MODE_THREAD_SPINLOCK, &async));
        EXPECT_EQ(UCS_OK, uct_worker_create(async, UCS_THREAD_MODE_SINGLE,
                                            &worker));
        EXPECT_EQ(UCS_OK, open_iface(md, worker, tl, "memory", NULL, &iface));
        EXPECT_EQ(UCS_OK, connect_to_self(iface, &ep));
        uct_md_attr_t md_attr;
        EXPECT_EQ(UCS_OK, uct_md_query(md, &md_attr));
        EXPECT_EQ(UCS_OK, uct_md_mem_reg(md, word, sizeof(word),
                                         UCT_MD_MEM_ACCESS_ALL, &memh));
        std::vector<uint8_t> packed(md_attr.rkey_packed_size + 1);
        EXPECT_EQ(UCS_OK, uct_md_mkey_pack(md, memh, packed.data()));
        EXPECT_EQ(UCS_OK, uct_rkey_unpack(component, packed.data(), &rkey));
    }

    ~twin_side()
    {
        uct_rkey_release(component, &rkey);
        uct_md_mem_dereg(md, memh);
        uct_ep_destroy(ep);
        uct_iface_close(iface);
        uct_worker_destroy(worker);
        ucs_async_context_destroy(async);
        uct_md_close(md);
    }

    /* fetch-add of 2 on a word of 40 */
    void fetch_add()
    {
        completion c;
        uint64_t result = 0;
        word[0]         = 40;
        ucs_status_t status = uct_ep_atomic64_fetch(
                ep, UCT_ATOMIC_OP_ADD, 2, &result, (uintptr_t)&word[0],
                rkey.rkey, &c.super);
        while ((status == UCS_INPROGRESS) && (c.super.count > 0)) {
            uct_worker_progress(worker);
        }
        EXPECT_EQ(UCS_OK, (status == UCS_INPROGRESS) ? c.super.status :
                                                       status);
        EXPECT_EQ(40u, result);
        EXPECT_EQ(42u, word[0]);
    }

    uct_component_h     component = NULL;
    uct_md_h            md        = NULL;
    ucs_async_context_t *async    = NULL;
    uct_worker_h        worker    = NULL;
    uct_iface_h         iface     = NULL;
    uct_ep_h            ep        = NULL;
    uct_mem_h           memh      = NULL;
    uct_rkey_bundle_t   rkey      = {};
    uint64_t            word[2]   = {0, 0};
};

/* The ops of one access call the inner op without a lookup only while every
 * open twin has the same inner ops: the fixture's twin is opened first (its
 * ops are the shared ones), then a twin of another transport, whose atomics
 * are strict's own; each must reach its own inner op */
class span_uct_mixed : public span_uct {
};

TEST_P(span_uct_mixed, one_access_ops_beside_a_twin_of_another_transport)
{
    const char *other = (std::string(GetParam()) == "self+") ? "strict+" :
                                                                "self+";
    uint64_t *target  = reinterpret_cast<uint64_t*>(&remote[256]);
    uint64_t result   = 0;
    {
        twin_side side(other);
        ASSERT_NE(nullptr, side.ep) << other;
        for (int round = 0; round < 2; ++round) {
            side.fetch_add();
            *target = 40;
            completion c;
            wait(uct_ep_atomic64_fetch(ep, UCT_ATOMIC_OP_ADD, 2, &result,
                                       raddr(256), rkey.rkey, &c.super), c);
            EXPECT_EQ(40u, result);
            EXPECT_EQ(42u, *target);
        }
    }
    /* the other closed: the fixture's ops still reach theirs */
    *target = 1;
    completion c;
    wait(uct_ep_atomic64_fetch(ep, UCT_ATOMIC_OP_ADD, 2, &result, raddr(256),
                               rkey.rkey, &c.super), c);
    EXPECT_EQ(1u, result);
    EXPECT_EQ(3u, *target);
}

INSTANTIATE_TEST_SUITE_P(twin, span_uct_mixed,
                         ::testing::Values("self+", "strict+"));

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
                  uct_ep_put_zcopy(ep, &iov, 1, raddr + target.length - 4,
                                   key.rkey, &c.super));
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

/*
 * Chunked registrations: chunks of 16 KiB overlapping by 4 KiB (forced),
 * hard boundaries at every absolute 32 KiB (declared). The 64 KiB remote
 * buffer, at whatever alignment the allocator gave it, is 6 or 7 inner
 * registrations.
 */
class span_uct_chunked : public span_uct {
protected:
    static constexpr size_t chunk = 16384, overlap = 4096, unit = 32768;

    /* strict's MD reports a 16 KiB limit, which the twin must learn; the
     * others get it forced */
    void SetUp() override
    {
        setenv("UCX_STRICT_MAX_MR_SIZE", "16k", 1);
        span_uct::SetUp();
    }

    void TearDown() override
    {
        span_uct::TearDown();
        unsetenv("UCX_STRICT_MAX_MR_SIZE");
    }

    bool strict() const { return std::string(GetParam()) == "strict+"; }

    md_options_t md_options() const override
    {
        md_options_t options = {{"SPAN_CHUNK_OVERLAP", "4k"},
                                {"SPAN_TEST_UNIT_SIZE", "32k"}};
        if (!strict()) {
            options.push_back({"SPAN_MAX_CHUNK", "16k"});
        }
        return options;
    }

    static long strict_live()
    {
        return strict_counter("strict_md_live_registrations");
    }

    /* Offsets of the remote buffer where a chunk or a unit starts or ends */
    std::set<size_t> boundaries() const
    {
        std::set<size_t> b;
        uintptr_t base = (uintptr_t)remote.data();
        for (uintptr_t u = (base / unit + 1) * unit; u < base + size;
             u += unit) {
            b.insert(u - base);
        }
        std::set<size_t> hard = b;
        hard.insert(size_t(size));
        size_t ustart = 0;
        for (size_t h : hard) {
            for (size_t c = ustart; c + chunk < h; c += chunk - overlap) {
                b.insert(c + chunk - overlap);
                b.insert(c + chunk);
            }
            ustart = h;
        }
        return b;
    }

    /* The inner registrations [p, p + size) needs */
    unsigned num_chunks(const void *p) const
    {
        uintptr_t a = (uintptr_t)p, end = a + size;
        unsigned n  = 0;
        while (a < end) {
            uintptr_t uend = std::min(end, (a / unit + 1) * unit);
            size_t len     = uend - a;
            n += (len <= chunk) ? 1 : 1 + (len - chunk + (chunk - overlap) - 1) /
                                          (chunk - overlap);
            a  = uend;
        }
        return n;
    }

    bool inner_registers() const
    {
        return std::string(GetParam()) != "cma+";
    }

    bool crosses_unit(size_t offset, size_t length) const
    {
        uintptr_t a = (uintptr_t)remote.data() + offset;
        return (a / unit) != ((a + length - 1) / unit);
    }

    void fill_remote(uint8_t seed)
    {
        for (size_t i = 0; i < size; ++i) {
            remote[i] = uint8_t(i * 7 + seed);
        }
    }
};

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
    for (size_t b : boundaries()) {
        for (int delta : {-9, -1, 0, 1, 9}) {
            for (size_t len : {size_t(1), size_t(8), size_t(100), overlap}) {
                size_t off = b + delta - (delta < 0 ? len : 0);
                if ((off + len > size) || (off > size)) {
                    continue;
                }
                fill_remote(++seed);
                for (size_t i = 0; i < len; ++i) {
                    local[i] = uint8_t(i * 31 + seed + 1);
                }
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
        }
    }
    EXPECT_GT(checked, 100u);
    if (!zcopy) {
        EXPECT_GT(refused, 0u) << "no op crossed a hard boundary";
    }
    dereg(bmemh);
    dereg(lmemh);
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
                uct_worker_progress(worker);
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
                        continue; /* self packs in place (README, "Known
                                     limitations") */
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
            uct_worker_progress(worker);
        }
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
        uct_worker_progress(worker);
    }
    EXPECT_EQ(UCS_OK, uct_ep_flush(ep, 0, NULL));
    EXPECT_TRUE(local == std::vector<uint8_t>(remote.begin(),
                                              remote.begin() + size));
    for (int i = 0; i < 1000; ++i) {
        uct_worker_progress(worker);
    }
    EXPECT_EQ(1u, c.calls) << "completed twice";
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
    for (int i = 0; i < 1000; ++i) {
        uct_worker_progress(worker);
    }
    EXPECT_EQ(1u, c.calls) << "completed twice";
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
    for (int i = 0; i < 1000; ++i) {
        uct_worker_progress(worker);
    }
    EXPECT_EQ(1u, c.calls) << "completed twice";
    dereg(lmemh);
}

INSTANTIATE_TEST_SUITE_P(twin, span_uct_deferred, ::testing::Values("cma+"));

extern "C" ucs_status_t
uct_iface_query_v2(uct_iface_h iface, void *iface_attr);
extern "C" ucs_status_t
uct_ep_put_sgl_zcopy(uct_ep_h ep, void *const *buffers, const size_t *lengths,
                     uct_mem_h const *memhs, const uint64_t *remote_addrs,
                     uct_rkey_t const *rkeys, const size_t *counts,
                     const size_t *strides, size_t count,
                     uct_completion_t *comp);

/* The capability flags of uct_iface_attr_v2_t: in 1.22 the field-mask bit 1
 * after one SGL count, in 1.23 bit 2 after two; SGL put is bit 0 of both */
static void v2_cap_flags_query(uct_iface_h iface, uint64_t *flags_p)
{
    bool v1_23  = dlsym(RTLD_DEFAULT, "uct_md_mem_elem_release") != NULL;
    uint64_t attr[16] = {};
    attr[0]     = v1_23 ? UCS_BIT(2) : UCS_BIT(1);
    ASSERT_EQ(UCS_OK, uct_iface_query_v2(iface, attr));
    *flags_p = attr[v1_23 ? 3 : 2];
}

/* SGL zero-copy would hand span rkeys and memhs to the inner op: a twin
 * neither advertises it nor lets a call through, and does not promise that
 * an AM follows earlier puts (it may defer pieces of one) */
TEST_P(span_uct, twin_offers_no_sgl_and_no_put_am_order)
{
    if (!twin) {
        GTEST_SKIP() << "twins only";
    }
    uint64_t flags = ~0ull;
    ASSERT_NO_FATAL_FAILURE(v2_cap_flags_query(iface, &flags));
    EXPECT_EQ(0u, flags & 3u) << "SGL put/get advertised by " << GetParam();
    EXPECT_FALSE(iface_attr.cap.flags & UCT_IFACE_FLAG_PUT_AM_ORDER);

    uint8_t byte       = 0;
    void *buffer       = &byte;
    size_t length      = 1, count = 1, stride = 0;
    uint64_t addr      = raddr(0);
    uct_mem_h lmemh    = UCT_MEM_HANDLE_NULL;
    log_counter logs;
    EXPECT_EQ(UCS_ERR_UNSUPPORTED,
              uct_ep_put_sgl_zcopy(ep, &buffer, &length, &lmemh, &addr,
                                   &rkey.rkey, &count, &stride, 1, NULL));
    EXPECT_EQ(1u, logs.count("SGL zcopy is not offered"));
}

/*
 * The table that finds a twin iface's state: every open takes a slot, every
 * close gives it back. Ifaces opened and closed by the thousand, each at a
 * new address (allocations kept alive in between move the allocator on),
 * and more ifaces open at once than the table holds: an open succeeds or
 * fails with a clear error, never hangs, and every open iface moves bytes.
 */
class span_iface_table : public ::testing::Test {
protected:
    void SetUp() override
    {
        component = find_component("span");
        ASSERT_NE(nullptr, component);
        md = open_md(component, "self+");
        ASSERT_NE(nullptr, md);
        ASSERT_EQ(UCS_OK, ucs_async_context_create(UCS_ASYNC_MODE_THREAD_SPINLOCK,
                                                   &async));
        ASSERT_EQ(UCS_OK, uct_worker_create(async, UCS_THREAD_MODE_SINGLE,
                                            &worker));
        ASSERT_EQ(UCS_OK, uct_md_iface_config_read(md, "self+", NULL, NULL,
                                                   &config));
        ASSERT_EQ(UCS_OK, uct_md_mem_reg(md, buf, sizeof(buf),
                                         UCT_MD_MEM_ACCESS_ALL, &memh));
        uct_md_attr_t attr;
        ASSERT_EQ(UCS_OK, uct_md_query(md, &attr));
        std::vector<uint8_t> packed(attr.rkey_packed_size);
        ASSERT_EQ(UCS_OK, uct_md_mkey_pack(md, memh, packed.data()));
        ASSERT_EQ(UCS_OK, uct_rkey_unpack(component, packed.data(), &rkey));
    }

    void TearDown() override
    {
        uct_rkey_release(component, &rkey);
        uct_md_mem_dereg(md, memh);
        uct_config_release(config);
        uct_worker_destroy(worker);
        ucs_async_context_destroy(async);
        uct_md_close(md);
    }

    ucs_status_t open(uct_iface_h *iface_p, uct_worker_h on = NULL)
    {
        return open_iface(md, (on != NULL) ? on : worker, "self+", "memory",
                          config, iface_p);
    }

    /* A put_short through a new ep of iface lands in buf */
    void put(uct_iface_h iface, uint64_t value)
    {
        uct_ep_h ep;
        ASSERT_EQ(UCS_OK, connect_to_self(iface, &ep));
        EXPECT_EQ(UCS_OK, uct_ep_put_short(ep, &value, sizeof(value),
                                           (uintptr_t)&buf[8], rkey.rkey));
        uct_ep_destroy(ep);
        uint64_t landed;
        memcpy(&landed, &buf[8], sizeof(landed));
        EXPECT_EQ(value, landed);
    }

    uct_component_h     component;
    uct_md_h            md;
    ucs_async_context_t *async;
    uct_worker_h        worker;
    uct_iface_config_t  *config;
    uint8_t             buf[64];
    uct_mem_h           memh;
    uct_rkey_bundle_t   rkey;
};

TEST_F(span_iface_table, open_close_cycles_at_new_addresses)
{
    const unsigned cycles = 20000;
    std::vector<void*> kept;
    std::set<uintptr_t> addresses;
    deadline limit(60, std::to_string(cycles) + " open/close cycles of a "
                   "twin iface");
    for (unsigned i = 0; i < cycles; ++i) {
        uct_iface_h iface;
        ASSERT_EQ(UCS_OK, open(&iface)) << "cycle " << i;
        addresses.insert((uintptr_t)iface);
        put(iface, i);
        size_t size = malloc_usable_size(iface);
        uct_iface_close(iface);
        kept.push_back(malloc(size)); /* takes the iface's memory */
    }
    for (void *p : kept) {
        free(p);
    }
    EXPECT_GT(addresses.size(), cycles / 2) << "ifaces kept their addresses";
}

TEST_F(span_iface_table, more_ifaces_than_the_table_holds)
{
    std::vector<uct_iface_h> ifaces;
    deadline limit(60, "opening 1100 twin ifaces");
    log_counter logs;
    ucs_status_t status = UCS_OK;
    while ((ifaces.size() < 1100) && (status == UCS_OK)) {
        uct_iface_h iface;
        status = open(&iface);
        if (status == UCS_OK) {
            ifaces.push_back(iface);
        }
    }
    if (status != UCS_OK) {
        EXPECT_EQ(UCS_ERR_EXCEEDS_LIMIT, status);
        EXPECT_EQ(1u, logs.count("twin ifaces are open"));
        EXPECT_GE(ifaces.size(), 1024u);
    }
    for (size_t i = 0; i < ifaces.size(); i += 97) {
        put(ifaces[i], i + 1);
    }
    /* a closed iface's slot takes a new one */
    uct_iface_close(ifaces.back());
    ifaces.pop_back();
    uct_iface_h iface;
    ASSERT_EQ(UCS_OK, open(&iface));
    ifaces.push_back(iface);
    put(iface, 7);
    for (uct_iface_h i : ifaces) {
        uct_iface_close(i);
    }
}

/* Ops find their iface without a lock while other ifaces open and close in
 * another thread (on a worker of its own): run under TSan too */
TEST_F(span_iface_table, ops_while_other_ifaces_open_and_close)
{
    uct_iface_h iface;
    ASSERT_EQ(UCS_OK, open(&iface));
    std::atomic<bool> stop(false);
    std::atomic<unsigned> cycles(0);
    std::thread churn([&] {
        ucs_async_context_t *async2;
        uct_worker_h worker2;
        ASSERT_EQ(UCS_OK, ucs_async_context_create(
                UCS_ASYNC_MODE_THREAD_SPINLOCK, &async2));
        ASSERT_EQ(UCS_OK, uct_worker_create(async2, UCS_THREAD_MODE_SINGLE,
                                            &worker2));
        while (!stop) {
            uct_iface_h other;
            ASSERT_EQ(UCS_OK, open(&other, worker2));
            uct_iface_close(other);
            ++cycles;
        }
        uct_worker_destroy(worker2);
        ucs_async_context_destroy(async2);
    });
    deadline limit(60, "ops beside opens and closes");
    for (uint64_t i = 0; (i < 2000) || (cycles < 500); ++i) {
        put(iface, i);
    }
    stop = true;
    churn.join();
    uct_iface_close(iface);
}

/* A region larger than a refusing NIC's limit: the native MD fails, the twin
 * registers it in chunks */
TEST(span_strict, refused_natively_registered_by_the_twin)
{
    setenv("UCX_STRICT_MAX_MR_SIZE", "16k", 1);
    uct_component_h strict = find_component("strict");
    ASSERT_NE(nullptr, strict) << "the strict test transport is not loaded";
    uct_md_h native = open_md(strict, "strict");
    uct_md_h twin   = open_md(find_component("span"), "strict+");
    unsetenv("UCX_STRICT_MAX_MR_SIZE");
    ASSERT_NE(nullptr, native);
    ASSERT_NE(nullptr, twin);

    std::vector<uint8_t> buf(100000);
    uct_mem_h h;
    {
        log_counter logs;
        EXPECT_EQ(UCS_ERR_EXCEEDS_LIMIT,
                  uct_md_mem_reg(native, buf.data(), buf.size(),
                                 UCT_MD_MEM_ACCESS_ALL, &h));
    }
    ASSERT_EQ(UCS_OK, uct_md_mem_reg(twin, buf.data(), buf.size(),
                                     UCT_MD_MEM_ACCESS_ALL, &h));
    EXPECT_EQ(UCS_OK, uct_md_mem_dereg(twin, h));
    uct_md_close(twin);
    uct_md_close(native);
}

/*
 * The registry, over strict+ (whose MD counts its registrations): a request
 * for a range registered already shares it and still gets a complete key;
 * memory unmapped and mapped again at the same address is registered anew.
 */
class span_registry : public ::testing::Test {
protected:
    /* Under TSan, UCM's hooks cannot run: a thread's exit calls the hooked
     * madvise after TSan tore the thread down. contrib/sanitize.sh then
     * turns them off, and these tests report their unmaps themselves, as an
     * application with its own allocator does (UCM external events). */
    static bool hooks_off()
    {
        const char *mode = getenv("UCX_MEM_MMAP_HOOK_MODE");
        return (mode != NULL) && !strcmp(mode, "none");
    }

    static void *remap(void *p, size_t len)
    {
        if (hooks_off()) {
            ucm_vm_munmap(p, len);
        } else if (munmap(p, len) != 0) {
            return MAP_FAILED;
        }
        return mmap(p, len, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    }

    static void SetUpTestSuite()
    {
        if (hooks_off()) {
            ucm_set_external_event(UCM_EVENT_VM_UNMAPPED);
        }
    }

    void SetUp() override
    {
        component = find_component("span");
        ASSERT_NE(nullptr, component);
        md = open_md(component, "strict+");
        ASSERT_NE(nullptr, md);
        uct_md_attr_t attr;
        ASSERT_EQ(UCS_OK, uct_md_query(md, &attr));
        rkey_size = attr.rkey_packed_size;
        live      = strict_counter("strict_md_live_registrations");
        ASSERT_GE(live, 0) << "the strict test transport is not loaded";
        buf = mmap(NULL, length, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        ASSERT_NE(MAP_FAILED, buf);
    }

    void TearDown() override
    {
        if (buf != MAP_FAILED) {
            munmap(buf, length);
        }
        if (md != NULL) {
            uct_md_close(md);
        }
        EXPECT_EQ(live, strict_counter("strict_md_live_registrations"))
                << "inner registrations leaked";
    }

    uct_mem_h reg(void *p, size_t len)
    {
        uct_mem_h h = NULL;
        EXPECT_EQ(UCS_OK, uct_md_mem_reg(md, p, len, UCT_MD_MEM_ACCESS_ALL,
                                         &h));
        return h;
    }

    std::vector<uint8_t> pack(uct_mem_h h, ucs_status_t expect = UCS_OK)
    {
        std::vector<uint8_t> key(rkey_size);
        EXPECT_EQ(expect, uct_md_mkey_pack(md, h, key.data()));
        return key;
    }

    static long made()
    {
        return strict_counter("strict_md_registrations");
    }

    static constexpr size_t length = 65536;
    uct_component_h component = NULL;
    uct_md_h        md        = NULL;
    size_t          rkey_size = 0;
    long            live      = 0;
    void           *buf       = MAP_FAILED;
};

TEST_F(span_registry, hit_shares_and_yields_a_complete_key)
{
    long before    = made();
    uct_mem_h h1   = reg(buf, length);
    uct_mem_h h2   = reg(buf, length);
    EXPECT_EQ(before + 1, made()) << "the second request was not shared";
    EXPECT_EQ(h1, h2);
    auto k1 = pack(h1), k2 = pack(h2);
    EXPECT_EQ(k1, k2);
    uct_rkey_bundle_t b;
    ASSERT_EQ(UCS_OK, uct_rkey_unpack(component, k2.data(), &b));
    EXPECT_EQ(UCS_OK, uct_rkey_release(component, &b));

    /* a different range is not a hit */
    uct_mem_h h3 = reg(buf, length / 2);
    EXPECT_EQ(before + 2, made());
    EXPECT_NE(h1, h3);

    ASSERT_EQ(UCS_OK, uct_md_mem_dereg(md, h1));
    EXPECT_EQ(before + 2, made());
    pack(h2); /* still held */
    ASSERT_EQ(UCS_OK, uct_md_mem_dereg(md, h2));
    ASSERT_EQ(UCS_OK, uct_md_mem_dereg(md, h3));
}

/* Thousands of live registrations: every request for one of them is a hit
 * on it, not on a neighbour that shares its index bucket */
TEST_F(span_registry, many_registrations_each_hit_their_own)
{
    const size_t pages = 5000, page = 4096;
    uint8_t *area = (uint8_t*)mmap(NULL, pages * page, PROT_READ | PROT_WRITE,
                                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(MAP_FAILED, (void*)area);
    long before = made();
    std::vector<uct_mem_h> first(pages), second(pages);
    for (size_t i = 0; i < pages; ++i) {
        first[i] = reg(area + i * page, page);
    }
    EXPECT_EQ(before + long(pages), made());
    for (size_t i = 0; i < pages; ++i) {
        second[i] = reg(area + i * page, page);
        ASSERT_EQ(first[i], second[i]) << "page " << i;
    }
    EXPECT_EQ(before + long(pages), made()) << "a request was not shared";
    /* a range that starts like a registered one but is longer is no hit */
    uct_mem_h longer = reg(area, 2 * page);
    EXPECT_NE(first[0], longer);
    for (auto h : first) {
        ASSERT_EQ(UCS_OK, uct_md_mem_dereg(md, h));
    }
    for (auto h : second) {
        ASSERT_EQ(UCS_OK, uct_md_mem_dereg(md, h));
    }
    ASSERT_EQ(UCS_OK, uct_md_mem_dereg(md, longer));
    munmap(area, pages * page);
}

TEST_F(span_registry, memory_mapped_again_is_registered_anew)
{
    long before  = made();
    uct_mem_h h1 = reg(buf, length);
    auto k1      = pack(h1);

    /* free, and map new memory at the same address */
    ASSERT_EQ(buf, remap(buf, length));

    uct_mem_h h2 = reg(buf, length);
    EXPECT_NE(h1, h2) << "the stale registration was served";
    EXPECT_EQ(before + 2, made()) << "the inner MD saw no new registration";
    pack(h2);
    {
        log_counter logs;
        pack(h1, UCS_ERR_INVALID_ADDR);
        EXPECT_EQ(1u, logs.count("was unmapped since"));
    }
    ASSERT_EQ(UCS_OK, uct_md_mem_dereg(md, h1)) << "the owner still frees it";
    ASSERT_EQ(UCS_OK, uct_md_mem_dereg(md, h2));
}

/* Events find registrations through a grid of levels by length, filed
 * under the region of their start (span_registry.c): a registration of
 * every level that straddles a region boundary of its level goes stale on
 * an unmap of its first page, of the page at the boundary or of its last */
TEST_F(span_registry, an_unmap_anywhere_inside_makes_a_registration_stale)
{
    const size_t page = 4096, GiB = size_t(1) << 30;
    const std::pair<size_t, size_t> cases[] = {/* size, region of level */
        {2 * page, size_t(2) << 20},
        {size_t(3) << 20, size_t(128) << 20},
        {size_t(200) << 20, 8 * GiB},
        {9 * GiB, 512 * GiB}};
    for (auto &c : cases) {
        size_t size = c.first, region = c.second;
        /* address space only: enough to straddle a region boundary, of
         * which the registration's pages are mapped (no more: under TSan
         * a terabyte of it is not always there) */
        uint8_t *area = (uint8_t*)mmap(NULL, region + size, PROT_NONE,
                                       MAP_PRIVATE | MAP_ANONYMOUS |
                                       MAP_NORESERVE, -1, 0);
        ASSERT_NE(MAP_FAILED, (void*)area);
        uintptr_t boundary = ((uintptr_t)area + size / 2 + region - 1) /
                             region * region;
        uint8_t *buf = (uint8_t*)(boundary - size / 2);
        ASSERT_EQ(buf, mmap(buf, size, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE |
                            MAP_FIXED, -1, 0));
        for (size_t at : {size_t(0), size / 2, size - page}) {
            long before  = made();
            uct_mem_h h1 = reg(buf, size);
            ASSERT_EQ(buf + at, remap(buf + at, page));
            {
                log_counter logs;
                pack(h1, UCS_ERR_INVALID_ADDR);
                EXPECT_EQ(1u, logs.count("was unmapped since"))
                        << size << " bytes, page at " << at;
            }
            uct_mem_h h2 = reg(buf, size);
            EXPECT_NE(h1, h2) << size << " bytes, page at " << at;
            EXPECT_LT(before + 1, made()) << "no new registration";
            ASSERT_EQ(UCS_OK, uct_md_mem_dereg(md, h1));
            ASSERT_EQ(UCS_OK, uct_md_mem_dereg(md, h2));
        }
        munmap(area, region + size);
    }
}

/* ... and an unmap just before or just after one leaves it served */
TEST_F(span_registry, an_unmap_next_to_a_registration_leaves_it_valid)
{
    const size_t page = 4096, size = size_t(3) << 20;
    uint8_t *area = (uint8_t*)mmap(NULL, size + 2 * page,
                                   PROT_READ | PROT_WRITE,
                                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(MAP_FAILED, (void*)area);
    uct_mem_h h1 = reg(area + page, size);
    ASSERT_EQ(area, remap(area, page));
    ASSERT_EQ(area + page + size, remap(area + page + size, page));
    long before  = made();
    uct_mem_h h2 = reg(area + page, size);
    EXPECT_EQ(h1, h2) << "a registration was made stale by its neighbours";
    EXPECT_EQ(before, made());
    pack(h2);
    ASSERT_EQ(UCS_OK, uct_md_mem_dereg(md, h1));
    ASSERT_EQ(UCS_OK, uct_md_mem_dereg(md, h2));
    munmap(area, size + 2 * page);
}

/* 8 threads register, share, deregister and unmap overlapping ranges of
 * one area: no crash, no stale hit, nothing leaked (run under TSan by
 * contrib/sanitize.sh thread) */
TEST_F(span_registry, thread_storm)
{
    const size_t slot = 4096, slots = length / slot;
    std::atomic<int> failures{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t) {
        threads.emplace_back([&, t]() {
            std::mt19937 rng(t);
            std::vector<uct_mem_h> held;
            for (int i = 0; i < 3000; ++i) {
                size_t first = rng() % slots;
                size_t count = 1 + rng() % std::min<size_t>(3, slots - first);
                uint8_t *p   = (uint8_t*)buf + first * slot;
                switch (rng() % 4) {
                case 0:
                case 1: {
                    uct_mem_h h;
                    if (uct_md_mem_reg(md, p, count * slot,
                                       UCT_MD_MEM_ACCESS_ALL, &h) != UCS_OK) {
                        ++failures;
                    } else {
                        held.push_back(h);
                    }
                    break;
                }
                case 2:
                    if (!held.empty()) {
                        size_t k = rng() % held.size();
                        if (uct_md_mem_dereg(md, held[k]) != UCS_OK) {
                            ++failures;
                        }
                        held.erase(held.begin() + k);
                    }
                    break;
                default:
                    /* new memory at the same address: events invalidate */
                    if (remap(p, slot) != p) {
                        ++failures;
                    }
                }
            }
            for (auto h : held) {
                if (uct_md_mem_dereg(md, h) != UCS_OK) {
                    ++failures;
                }
            }
        });
    }
    for (auto &th : threads) {
        th.join();
    }
    EXPECT_EQ(0, failures.load());
    EXPECT_EQ(live, strict_counter("strict_md_live_registrations"));
}

/*
 * A child forked while other threads register and unmap uses UCX (issue
 * 29, item 3): its first unmap takes the registry's lock, which fork must
 * not have copied held. Each child unmaps, registers, packs and exits; one
 * that does not exit in a bound is killed and fails the test.
 */
TEST_F(span_registry, a_child_forked_while_threads_unmap_uses_ucx)
{
    const size_t slot = 4096, slots = length / slot;
    const int forks = 600;
    deadline guard(240, "fork while threads unmap");
    std::atomic<bool> stop{false};
    std::atomic<int> failures{0};
    std::vector<std::thread> threads;

    for (int t = 0; t < 2; ++t) {
        threads.emplace_back([&, t]() {
            uint8_t *p = (uint8_t*)buf + t * (length / 2);
            for (size_t i = 0; !stop; i = (i + 1) % (slots / 2)) {
                uct_mem_h h;
                if (uct_md_mem_reg(md, p + i * slot, slot,
                                   UCT_MD_MEM_ACCESS_ALL, &h) != UCS_OK) {
                    ++failures;
                    continue;
                }
                if (remap(p + i * slot, slot) != p + i * slot) {
                    ++failures;
                }
                if (uct_md_mem_dereg(md, h) != UCS_OK) {
                    ++failures;
                }
            }
        });
    }

    int hung = 0, failed = 0;
    for (int i = 0; (i < forks) && (hung == 0); ++i) {
        pid_t pid = test_fork([&]() {
            void *own = mmap(NULL, 2 * slot, PROT_READ | PROT_WRITE,
                             MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            TEST_CHILD_CHECK(own != MAP_FAILED);
            TEST_CHILD_CHECK(remap(own, slot) == own);
            uct_mem_h h;
            TEST_CHILD_CHECK(uct_md_mem_reg(md, own, 2 * slot,
                                            UCT_MD_MEM_ACCESS_ALL, &h) ==
                             UCS_OK);
            std::vector<uint8_t> key(rkey_size);
            TEST_CHILD_CHECK(uct_md_mkey_pack(md, h, key.data()) == UCS_OK);
            TEST_CHILD_CHECK(uct_md_mem_dereg(md, h) == UCS_OK);
            TEST_CHILD_CHECK(munmap(own, 2 * slot) == 0);
            return 0;
        });
        ASSERT_GT(pid, 0);
        int status = test_fork_wait(pid, 10);
        hung      += (status == -1);
        failed    += (status != 0) && (status != -1);
        if (status != 0) {
            fprintf(stderr, "fork %d of %d: child status %d\n", i + 1, forks,
                    status);
        }
    }
    stop = true;
    for (auto &th : threads) {
        th.join();
    }
    EXPECT_EQ(0, hung) << "a child hung (killed after 10 s)";
    EXPECT_EQ(0, failed);
    EXPECT_EQ(0, failures.load());
}

namespace {

std::vector<std::string> info_lines;

ucs_log_func_rc_t capture_info(const char *, unsigned, const char *,
                               ucs_log_level_t level,
                               const ucs_log_component_config_t *,
                               const char *message, va_list ap)
{
    char buf[1024];
    if (level == UCS_LOG_LEVEL_INFO) {
        vsnprintf(buf, sizeof(buf), message, ap);
        info_lines.push_back(buf);
    }
    return UCS_LOG_FUNC_RC_CONTINUE;
}

} // namespace

/* What a user reads at MD close (UCX_LOG_LEVEL=info) */
TEST_F(span_registry, counters_at_close)
{
    uct_mem_h h1 = reg(buf, length);
    uct_mem_h h2 = reg(buf, length);          /* a shared hit */
    ASSERT_EQ(buf, remap(buf, length));       /* an invalidation */
    uct_mem_h h3 = reg(buf, length);          /* registered anew */
    for (auto h : {h1, h2, h3}) {
        ASSERT_EQ(UCS_OK, uct_md_mem_dereg(md, h));
    }

    ucs_log_level_t level = ucs_global_opts.log_component.log_level;
    ucs_global_opts.log_component.log_level = UCS_LOG_LEVEL_INFO;
    ucs_log_push_handler(capture_info);
    info_lines.clear();
    uct_md_close(md);
    md = NULL;
    ucs_log_pop_handler();
    ucs_global_opts.log_component.log_level = level;

    std::string expect = "2 registrations of 2 chunks, 1 shared hits, "
                         "1 invalidations";
    bool found = false;
    for (auto &l : info_lines) {
        found |= (l.find(expect) != std::string::npos);
    }
    EXPECT_TRUE(found) << "no line with '" << expect << "' among "
                       << info_lines.size();
}

/*
 * Access flags are part of what a shared registration is (issue 16, item
 * 4). UCP registers a region again with wider flags when an op needs them;
 * over strict+, whose rkeys carry the flags they were registered with and
 * whose transport refuses an atomic on a region registered for RMA only
 * (a NIC's remote access error), the wider request must get a registration
 * that allows atomics.
 */
class span_uct_access : public span_uct {
protected:
    uct_mem_h reg_flags(unsigned flags)
    {
        uct_mem_h h = UCT_MEM_HANDLE_NULL;
        EXPECT_EQ(UCS_OK, uct_md_mem_reg(md, area.data(), sizeof(area),
                                         flags, &h));
        return h;
    }

    ucs_status_t atomic_add(uct_mem_h h, uint64_t value)
    {
        std::vector<uint8_t> key(rkey_buf.size());
        uct_rkey_bundle_t b;
        EXPECT_EQ(UCS_OK, uct_md_mkey_pack(md, h, key.data()));
        EXPECT_EQ(UCS_OK, uct_rkey_unpack(component, key.data(), &b));
        ucs_status_t status = uct_ep_atomic64_post(ep, UCT_ATOMIC_OP_ADD,
                                                   value,
                                                   (uintptr_t)&area[32],
                                                   b.rkey);
        EXPECT_EQ(UCS_OK, uct_rkey_release(component, &b));
        return status;
    }

    /* apart from the fixture's registration, which allows everything */
    std::array<uint64_t, 512> area = {};
};

TEST_P(span_uct_access, a_wider_request_gets_a_registration_that_allows_it)
{
    long made      = strict_counter("strict_md_registrations");
    uct_mem_h rma  = reg_flags(UCT_MD_MEM_ACCESS_RMA);
    {
        /* the transport enforces the flags: RMA only refuses atomics */
        log_counter logs;
        EXPECT_EQ(UCS_ERR_IO_ERROR, atomic_add(rma, 1));
        EXPECT_EQ(1u, logs.count("remote access error"));
    }

    uct_mem_h all = reg_flags(UCT_MD_MEM_ACCESS_ALL);
    EXPECT_EQ(UCS_OK, atomic_add(all, 5)) << "served the RMA-only registration";
    EXPECT_EQ(5u, area[32]);

    /* narrower and equal requests share what allows them */
    uct_mem_h rma2 = reg_flags(UCT_MD_MEM_ACCESS_RMA);
    uct_mem_h all2 = reg_flags(UCT_MD_MEM_ACCESS_ALL);
    EXPECT_EQ(all, all2);
    EXPECT_TRUE((rma2 == rma) || (rma2 == all));
    EXPECT_EQ(made + 2, strict_counter("strict_md_registrations"));
    for (auto h : {rma, all, rma2, all2}) {
        EXPECT_EQ(UCS_OK, uct_md_mem_dereg(md, h));
    }
}

INSTANTIATE_TEST_SUITE_P(twin, span_uct_access, ::testing::Values("strict+"));

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
        component = find_component("span");
        ASSERT_NE(nullptr, component);
        md = open_md(component, "cma+");
        ASSERT_NE(nullptr, md);
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
