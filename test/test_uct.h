/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The fixtures of the UCT-level tests (test_uct*.cc): twin MDs and
 * transports over real inner transports, in one process. libuct_span is
 * loaded by UCX from UCX_MODULE_DIR (set by ctest).
 */
#ifndef SPAN_TEST_UCT_H_
#define SPAN_TEST_UCT_H_

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

inline std::vector<std::string> md_names(uct_component_h component)
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

inline void unpack_cb(void *arg, const void *data, size_t length)
{
    memcpy(arg, data, length);
}

struct pack_arg {
    const void *src;
    size_t      length;
};

inline size_t pack_cb(void *dest, void *arg)
{
    pack_arg *p = static_cast<pack_arg*>(arg);
    memcpy(dest, p->src, p->length);
    return p->length;
}

/* A counter of the strict test transport's MD (-1 where not loaded) */
inline long strict_counter(const char *name)
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

        ASSERT_NO_FATAL_FAILURE(open_worker(&async, &worker));

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
                test_worker_progress(worker);
            }
            status = comp.super.status;
        }
        ASSERT_EQ(UCS_OK, status);
    }

    /* Completes every op posted on ep remotely: a put short or bcopy may
     * return before its bytes land (cma+ in UCX 1.15 and earlier) */
    void flush()
    {
        completion comp;
        ucs_status_t status;

        while ((status = uct_ep_flush(ep, 0, &comp.super)) ==
               UCS_ERR_NO_RESOURCE) {
            test_worker_progress(worker);
        }
        wait(status, comp);
    }

    /* What an op came to: its return, or, where that is UCS_INPROGRESS,
     * its completion's status (a refused access comes that way in UCX 1.18
     * and earlier: span_ucx_layout_t.refuse_in_completion) */
    ucs_status_t outcome(ucs_status_t status, completion &comp)
    {
        if (status == UCS_INPROGRESS) {
            /* UCP's requests break where it completes inside the op */
            EXPECT_EQ(1, comp.super.count) << "completed inside the op";
            while (comp.super.count > 0) {
                test_worker_progress(worker);
            }
            status = comp.super.status;
        }
        return status;
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
            test_worker_progress(worker);
        }
        EXPECT_EQ(UCS_OK, (status == UCS_INPROGRESS) ? c.super.status :
                                                       status);
        EXPECT_EQ(40u, result);
        EXPECT_EQ(42u, word[0]);
    }

    /* puts src[0..1] into word[] by zero-copy, in one iov entry or two,
     * from a registration of this twin's MD */
    void put_zcopy(const uint64_t *src, size_t iovcnt)
    {
        uct_mem_h lmemh = UCT_MEM_HANDLE_NULL;
        ASSERT_EQ(UCS_OK, uct_md_mem_reg(md, (void*)src, sizeof(word),
                                         UCT_MD_MEM_ACCESS_ALL, &lmemh));
        uct_iov_t iov[2] = {{(void*)src, sizeof(word) / iovcnt, lmemh, 0, 1},
                            {(void*)(src + 1), sizeof(word[1]), lmemh, 0, 1}};
        word[0] = word[1] = 0;
        completion c;
        ucs_status_t status = uct_ep_put_zcopy(ep, iov, iovcnt,
                                               (uintptr_t)word, rkey.rkey,
                                               &c.super);
        while ((status == UCS_INPROGRESS) && (c.super.count > 0)) {
            test_worker_progress(worker);
        }
        EXPECT_EQ(UCS_OK, (status == UCS_INPROGRESS) ? c.super.status :
                                                       status);
        EXPECT_EQ(src[0], word[0]);
        EXPECT_EQ(src[1], word[1]);
        EXPECT_EQ(UCS_OK, uct_md_mem_dereg(md, lmemh));
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

    struct access {
        size_t off, len;
    };

    /* Accesses of each length that end delta bytes below (delta < 0) or
     * start delta bytes past every boundary, inside the buffer */
    std::vector<access> boundary_accesses(std::initializer_list<int> deltas,
                                          std::initializer_list<size_t> lens)
            const
    {
        std::vector<access> accesses;
        for (size_t b : boundaries()) {
            for (int delta : deltas) {
                for (size_t len : lens) {
                    size_t off = b + delta - (delta < 0 ? len : 0);
                    if ((off + len <= size) && (off <= size)) {
                        accesses.push_back({off, len});
                    }
                }
            }
        }
        return accesses;
    }

    /* A new pattern of seed in the remote buffer and in local's first len
     * bytes */
    void fill_access(uint8_t seed, std::vector<uint8_t> &local, size_t len)
    {
        fill_remote(seed);
        for (size_t i = 0; i < len; ++i) {
            local[i] = uint8_t(i * 31 + seed + 1);
        }
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

#endif
