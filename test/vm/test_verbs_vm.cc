/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Real verbs, in the soft-RoCE VM (test/vm/run.sh): the twins of rc_verbs
 * over a real device, beside rc_verbs itself; chunked registrations as real
 * ibv_reg_mr calls, seen in the kernel's pinned-memory accounting (VmPin);
 * and a registration that the kernel really refuses part way (RLIMIT_MEMLOCK).
 * SPAN_VM_DEV names the device (rxe0).
 */
#include <uct/api/uct.h>
#include <ucs/config/global_opts.h>
#include <ucs/debug/log_def.h>
#include <ucs/async/async_fwd.h>

#include "../test_uct_util.h"

#include <gtest/gtest.h>
#include <linux/capability.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace {

const size_t KiB = 1024, MiB = 1024 * KiB;

std::string dev_name()
{
    const char *d = getenv("SPAN_VM_DEV");
    return d ? d : "rxe0";
}

/* Bytes of memory pinned by this process, as the kernel accounts them for
 * RLIMIT_MEMLOCK: every ibv_reg_mr adds its pages */
size_t pinned_bytes()
{
    std::ifstream status("/proc/self/status");
    std::string line;
    while (std::getline(status, line)) {
        if (line.compare(0, 7, "VmPin:\t") == 0) {
            return std::stoul(line.substr(7)) * KiB;
        }
    }
    ADD_FAILURE() << "no VmPin in /proc/self/status";
    return 0;
}

/* Bytes the chunks of an aligned region of length take: chunks of chunk
 * bytes starting every chunk - overlap (span_chunk.h) */
size_t chunked_bytes(size_t length, size_t chunk, size_t overlap,
                     unsigned *num_p)
{
    size_t total = 0, start = 0;
    unsigned n   = 0;
    for (;;) {
        size_t len = std::min(chunk, length - start);
        total     += len;
        ++n;
        if (start + len >= length) {
            break;
        }
        start += chunk - overlap;
    }
    *num_p = n;
    return total;
}

struct completion {
    uct_completion_t super;
    static void cb(uct_completion_t *self) {}
    completion() { super.func = cb; super.count = 1; super.status = UCS_OK; }
};

/* A page-aligned buffer of its own: no registration is shared with
 * another test's */
struct region {
    explicit region(size_t len) : length(len)
    {
        ptr = static_cast<uint8_t*>(mmap(NULL, len, PROT_READ | PROT_WRITE,
                                         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
        EXPECT_NE(MAP_FAILED, static_cast<void*>(ptr));
    }
    ~region() { munmap(ptr, length); }
    void fill(uint8_t seed)
    {
        for (size_t i = 0; i < length; ++i) {
            ptr[i] = uint8_t(i * 7 + seed + (i >> 12));
        }
    }
    uint8_t *ptr;
    size_t   length;
};

/* One MD, one worker, two interfaces on the device and an endpoint on each
 * connected to the other: a loopback RC connection */
class verbs_vm : public ::testing::TestWithParam<const char*> {
protected:
    void SetUp() override
    {
        std::string tl = GetParam();
        twin           = tl.back() == '+';
        component      = find_component(twin ? "span" : "ib");
        ASSERT_NE(nullptr, component) << (twin ? "span" : "ib") <<
                " component not loaded";
        md = open_md(component, dev_name() + (twin ? "+" : ""), md_options());
        ASSERT_NE(nullptr, md);
        ASSERT_NO_FATAL_FAILURE(open_worker(&async, &worker));
        for (int i = 0; i < 2; ++i) {
            open_iface(tl, &iface[i]);
        }
        ASSERT_EQ(UCS_OK, uct_iface_query(iface[0], &iface_attr));
        ASSERT_TRUE(iface_attr.cap.flags & UCT_IFACE_FLAG_CONNECT_TO_EP);
        ASSERT_TRUE(iface_attr.cap.flags & UCT_IFACE_FLAG_PUT_ZCOPY);
        ASSERT_TRUE(iface_attr.cap.flags & UCT_IFACE_FLAG_GET_ZCOPY);
        connect();
    }

    void TearDown() override
    {
        for (int i = 0; i < 2; ++i) {
            if (ep[i] != NULL) {
                uct_ep_destroy(ep[i]);
            }
            if (iface[i] != NULL) {
                uct_iface_close(iface[i]);
            }
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

    virtual md_options_t md_options() const { return {}; }

    void open_iface(const std::string &tl, uct_iface_h *iface_p)
    {
        std::string dev = dev_name() + ":1";
        ASSERT_EQ(UCS_OK, ::open_iface(md, worker, tl.c_str(), dev.c_str(),
                                       NULL, iface_p));
        /* completions of a verbs transport come only from progress */
        uct_iface_progress_enable(*iface_p,
                                  UCT_PROGRESS_SEND | UCT_PROGRESS_RECV);
    }

    void connect()
    {
        std::vector<char> dev[2], addr[2];
        for (int i = 0; i < 2; ++i) {
            uct_ep_params_t params = {};
            params.field_mask      = UCT_EP_PARAM_FIELD_IFACE;
            params.iface           = iface[i];
            ASSERT_EQ(UCS_OK, uct_ep_create(&params, &ep[i]));
            dev[i].resize(iface_attr.device_addr_len + 1);
            addr[i].resize(iface_attr.ep_addr_len + 1);
            ASSERT_EQ(UCS_OK, uct_iface_get_device_address(
                    iface[i], (uct_device_addr_t*)dev[i].data()));
            ASSERT_EQ(UCS_OK, uct_ep_get_address(
                    ep[i], (uct_ep_addr_t*)addr[i].data()));
        }
        for (int i = 0; i < 2; ++i) {
            ASSERT_EQ(UCS_OK, uct_ep_connect_to_ep(
                    ep[i], (uct_device_addr_t*)dev[1 - i].data(),
                    (uct_ep_addr_t*)addr[1 - i].data()));
        }
    }

    ucs_status_t wait(ucs_status_t status, completion &comp)
    {
        if (status == UCS_INPROGRESS) {
            while (comp.super.count > 0) {
                uct_worker_progress(worker);
            }
            status = comp.super.status;
        }
        return status;
    }

    uct_mem_h reg(const region &r)
    {
        uct_mem_h memh = UCT_MEM_HANDLE_NULL;
        EXPECT_EQ(UCS_OK, uct_md_mem_reg(md, r.ptr, r.length,
                                         UCT_MD_MEM_ACCESS_ALL, &memh));
        return memh;
    }

    /* rkey of a registration, unpacked; buf holds it packed, cut to the
     * bytes the packer wrote (packed twice over different fills: a byte
     * it wrote reads the same in both) */
    uct_rkey_bundle_t rkey_of(uct_mem_h memh, std::vector<uint8_t> &buf)
    {
        uct_md_attr_t attr;
        uct_rkey_bundle_t rkey = {};
        EXPECT_EQ(UCS_OK, uct_md_query(md, &attr));
        std::vector<uint8_t> other(attr.rkey_packed_size, 0x5a);
        buf.assign(attr.rkey_packed_size, 0xa5);
        EXPECT_EQ(UCS_OK, uct_md_mkey_pack(md, memh, buf.data()));
        EXPECT_EQ(UCS_OK, uct_md_mkey_pack(md, memh, other.data()));
        EXPECT_EQ(UCS_OK, uct_rkey_unpack(component, buf.data(), &rkey));
        size_t used = buf.size();
        while ((used > 0) && (buf[used - 1] != other[used - 1])) {
            --used;
        }
        buf.resize(used);
        return rkey;
    }

    /* zcopy in pieces of the transport's largest */
    ucs_status_t zcopy(bool is_put, uint8_t *local, uct_mem_h memh,
                       size_t length, uint8_t *remote,
                       const uct_rkey_bundle_t &rkey)
    {
        size_t max = is_put ? iface_attr.cap.put.max_zcopy :
                              iface_attr.cap.get.max_zcopy;
        ucs_status_t status = UCS_OK;
        for (size_t off = 0; (off < length) && (status == UCS_OK); off += max) {
            uct_iov_t iov = {local + off, std::min(max, length - off), memh,
                             0, 1};
            completion c;
            status = wait(is_put ?
                          uct_ep_put_zcopy(ep[0], &iov, 1,
                                           (uintptr_t)remote + off, rkey.rkey,
                                           &c.super) :
                          uct_ep_get_zcopy(ep[0], &iov, 1,
                                           (uintptr_t)remote + off, rkey.rkey,
                                           &c.super), c);
        }
        return status;
    }

    ucs_status_t put(uint8_t *src, uct_mem_h smemh, size_t length,
                     uint8_t *dst, const uct_rkey_bundle_t &rkey)
    {
        return zcopy(true, src, smemh, length, dst, rkey);
    }

    ucs_status_t get(uint8_t *dst, uct_mem_h dmemh, size_t length,
                     uint8_t *src, const uct_rkey_bundle_t &rkey)
    {
        return zcopy(false, dst, dmemh, length, src, rkey);
    }

    bool                twin;
    uct_component_h     component = NULL;
    uct_md_h            md        = NULL;
    ucs_async_context_t *async    = NULL;
    uct_worker_h        worker    = NULL;
    uct_iface_h         iface[2]  = {};
    uct_ep_h            ep[2]     = {};
    uct_iface_attr_t    iface_attr;
};

} // namespace

TEST(verbs_vm_list, twins_of_verbs_transports_on_the_device)
{
    std::string dev = dev_name() + ":1";
    for (const char *c : {"ib", "span"}) {
        uct_component_h component = find_component(c);
        ASSERT_NE(nullptr, component) << c;
        std::string name = dev_name() + (strcmp(c, "span") ? "" : "+");
        uct_md_h md      = open_md(component, name);
        ASSERT_NE(nullptr, md) << name;
        uct_tl_resource_desc_t *tls;
        unsigned num;
        ASSERT_EQ(UCS_OK, uct_md_query_tl_resources(md, &tls, &num));
        std::vector<std::string> found;
        for (unsigned i = 0; i < num; ++i) {
            printf("  %s: %s/%s\n", name.c_str(), tls[i].tl_name,
                   tls[i].dev_name);
            if (dev == tls[i].dev_name) {
                found.push_back(tls[i].tl_name);
            }
        }
        uct_release_tl_resource_list(tls);
        uct_md_close(md);
        std::string sfx = strcmp(c, "span") ? "" : "+";
        for (const char *tl : {"rc_verbs", "ud_verbs"}) {
            EXPECT_NE(found.end(), std::find(found.begin(), found.end(),
                                             tl + sfx)) << tl + sfx;
        }
    }
}

/* The twin reads the device's max_mr_size (rxe: 2^64-1, so no limit) */
TEST(verbs_vm_list, twin_reads_the_device_limit)
{
    static std::vector<std::string> lines;
    uct_component_h span = find_component("span");
    ASSERT_NE(nullptr, span);
    auto handler = [](const char*, unsigned, const char*, ucs_log_level_t,
                      const ucs_log_component_config_t*, const char *message,
                      va_list ap) {
        char buf[512];
        vsnprintf(buf, sizeof(buf), message, ap);
        lines.push_back(buf);
        return UCS_LOG_FUNC_RC_STOP;
    };
    ucs_log_level_t level = ucs_global_opts.log_component.log_level;
    ucs_global_opts.log_component.log_level = std::max(level,
                                                       UCS_LOG_LEVEL_DIAG);
    ucs_log_push_handler(handler);
    uct_md_h md = open_md(span, dev_name() + "+");
    ucs_log_pop_handler();
    ucs_global_opts.log_component.log_level = level;
    ASSERT_NE(nullptr, md);
    uct_md_close(md);

    std::string want = "md '" + dev_name() + "': device max_mr_size ";
    bool seen = false;
    for (auto &l : lines) {
        if (l.find("span verbs") != std::string::npos) {
            printf("  %s\n", l.c_str());
        }
        seen |= (l.find(want) != std::string::npos);
    }
    EXPECT_TRUE(seen) << "no line with \"" << want << "\"";
}

TEST_P(verbs_vm, put_get_zcopy_bytes_arrive)
{
    const size_t len = 1 * MiB;
    printf("  %s: put/get max_zcopy %zu/%zu\n", GetParam(),
           iface_attr.cap.put.max_zcopy, iface_attr.cap.get.max_zcopy);
    region src(len), dst(2 * len), back(len);
    src.fill(3);
    uct_mem_h smemh = reg(src), bmemh = reg(back);
    uct_mem_h dmemh = UCT_MEM_HANDLE_NULL;
    ASSERT_EQ(UCS_OK, uct_md_mem_reg(md, dst.ptr, len, UCT_MD_MEM_ACCESS_ALL,
                                     &dmemh));
    std::vector<uint8_t> buf;
    uct_rkey_bundle_t rkey = rkey_of(dmemh, buf);

    EXPECT_EQ(UCS_OK, put(src.ptr, smemh, len, dst.ptr, rkey));
    EXPECT_EQ(0, memcmp(src.ptr, dst.ptr, len));
    EXPECT_EQ(UCS_OK, get(back.ptr + 5, bmemh, len - 5, dst.ptr + 5, rkey));
    EXPECT_EQ(0, memcmp(back.ptr + 5, src.ptr + 5, len - 5));
    for (size_t i = len; i < 2 * len; ++i) {
        ASSERT_EQ(0, dst.ptr[i]) << "byte " << i << " past the registration";
    }

    if (twin) {
        /* past the registered half: refused by the twin, nothing sent */
        EXPECT_EQ(UCS_ERR_INVALID_ADDR,
                  put(src.ptr, smemh, 4096, dst.ptr + len - 2048, rkey));
        for (size_t i = len; i < 2 * len; ++i) {
            ASSERT_EQ(0, dst.ptr[i]) << "byte " << i << " written";
        }
    }
    uct_rkey_release(component, &rkey);
    EXPECT_EQ(UCS_OK, uct_md_mem_dereg(md, dmemh));
    EXPECT_EQ(UCS_OK, uct_md_mem_dereg(md, bmemh));
    EXPECT_EQ(UCS_OK, uct_md_mem_dereg(md, smemh));
}

INSTANTIATE_TEST_SUITE_P(rc, verbs_vm, ::testing::Values("rc_verbs",
                                                          "rc_verbs+"));

/* Chunks of 256 KiB overlapping by 64 KiB: every chunk is an ibv_reg_mr of
 * its own */
class verbs_vm_chunked : public verbs_vm {
protected:
    md_options_t md_options() const override
    {
        return {{"SPAN_MAX_CHUNK", "256k"}, {"SPAN_CHUNK_OVERLAP", "64k"}};
    }
    static constexpr size_t chunk = 256 * KiB, overlap = 64 * KiB;
};

TEST_P(verbs_vm_chunked, every_chunk_is_pinned_and_ops_cross_them)
{
    const size_t len = 4 * MiB;
    region src(len), dst(len), back(len);
    unsigned num_chunks;
    size_t expect = chunked_bytes(len, chunk, overlap, &num_chunks);

    src.fill(5);
    size_t pinned0  = pinned_bytes();
    uct_mem_h dmemh = reg(dst);
    size_t pinned   = pinned_bytes() - pinned0;
    printf("  %u chunks of %zu KiB: %zu KiB pinned for a %zu KiB region\n",
           num_chunks, chunk / KiB, pinned / KiB, len / KiB);
    EXPECT_EQ(expect, pinned);

    std::vector<uint8_t> buf;
    uct_rkey_bundle_t rkey = rkey_of(dmemh, buf);
    printf("  rkey: %zu bytes packed for %u inner keys (%zu bytes apart)\n",
           buf.size(), num_chunks, num_chunks * sizeof(uint64_t));
    uct_mem_h smemh = reg(src), bmemh = reg(back);

    /* the whole region, then pieces past the first chunk and across chunk
     * boundaries */
    EXPECT_EQ(UCS_OK, put(src.ptr, smemh, len, dst.ptr, rkey));
    EXPECT_EQ(0, memcmp(src.ptr, dst.ptr, len));
    memset(dst.ptr, 0, len);
    for (size_t off : {size_t(chunk - 100), 3 * MiB + 5, len - 300 * KiB}) {
        size_t n = std::min(size_t(200 * KiB), len - off);
        EXPECT_EQ(UCS_OK, put(src.ptr + off, smemh, n, dst.ptr + off, rkey))
                << "offset " << off;
        EXPECT_EQ(0, memcmp(src.ptr + off, dst.ptr + off, n)) << off;
        EXPECT_EQ(UCS_OK, get(back.ptr + off, bmemh, n, dst.ptr + off, rkey))
                << "offset " << off;
        EXPECT_EQ(0, memcmp(src.ptr + off, back.ptr + off, n)) << off;
    }

    uct_rkey_release(component, &rkey);
    EXPECT_EQ(UCS_OK, uct_md_mem_dereg(md, bmemh));
    EXPECT_EQ(UCS_OK, uct_md_mem_dereg(md, smemh));
    EXPECT_EQ(UCS_OK, uct_md_mem_dereg(md, dmemh));
    EXPECT_EQ(pinned0, pinned_bytes()) << "chunks left pinned";
}

INSTANTIATE_TEST_SUITE_P(rc, verbs_vm_chunked, ::testing::Values("rc_verbs+"));

namespace {

/* Root pins past RLIMIT_MEMLOCK: the limit binds once CAP_IPC_LOCK is out
 * of the effective set */
void drop_ipc_lock()
{
    struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct data[2];
    ASSERT_EQ(0, syscall(SYS_capget, &hdr, data));
    data[CAP_TO_INDEX(CAP_IPC_LOCK)].effective &= ~CAP_TO_MASK(CAP_IPC_LOCK);
    ASSERT_EQ(0, syscall(SYS_capset, &hdr, data));
}

} // namespace

/* In a process of its own (test/vm/run.sh): the process keeps no
 * CAP_IPC_LOCK after it, and every later pin counts against the limit. With
 * 1 MiB chunks by 64 KiB of overlap and room for 3.5 MiB pinned, the 4th
 * chunk of an 8 MiB region cannot be pinned. */
TEST(verbs_vm_memlock, chunk_past_the_limit_fails_and_nothing_stays_pinned)
{
    uct_component_h span = find_component("span");
    ASSERT_NE(nullptr, span);
    uct_md_h md = open_md(span, dev_name() + "+",
                          {{"SPAN_MAX_CHUNK", "1m"},
                           {"SPAN_CHUNK_OVERLAP", "64k"}});
    ASSERT_NE(nullptr, md);
    region r(8 * MiB);
    struct rlimit old, lim;
    ASSERT_EQ(0, getrlimit(RLIMIT_MEMLOCK, &old));

    drop_ipc_lock();
    size_t pinned0 = pinned_bytes();
    lim.rlim_cur   = pinned0 + 3 * MiB + 512 * KiB;
    lim.rlim_max   = old.rlim_max;
    ASSERT_EQ(0, setrlimit(RLIMIT_MEMLOCK, &lim));

    uct_mem_h memh = UCT_MEM_HANDLE_NULL;
    ucs_status_t status = uct_md_mem_reg(md, r.ptr, r.length,
                                         UCT_MD_MEM_ACCESS_ALL, &memh);
    printf("  8 MiB in 1 MiB chunks under RLIMIT_MEMLOCK %zu KiB: %s, %zu "
           "KiB left pinned\n", size_t(lim.rlim_cur / KiB),
           ucs_status_string(status), (pinned_bytes() - pinned0) / KiB);
    EXPECT_NE(UCS_OK, status);
    EXPECT_EQ(pinned0, pinned_bytes()) << "chunks 1..3 left pinned";

    /* the next registration succeeds under the same limit: its 3 chunks
     * (2176 KiB) fit only where the 3 of the failed one were released */
    region small(2 * MiB);
    EXPECT_EQ(UCS_OK, uct_md_mem_reg(md, small.ptr, small.length,
                                     UCT_MD_MEM_ACCESS_ALL, &memh));
    EXPECT_LT(pinned0, pinned_bytes());
    EXPECT_EQ(UCS_OK, uct_md_mem_dereg(md, memh));
    EXPECT_EQ(pinned0, pinned_bytes());
    uct_md_close(md);
    setrlimit(RLIMIT_MEMLOCK, &old);
}
