/*
 * GPU suite: two processes on one GPU, native cuda_ipc beside cuda_ipc+,
 * put and get of device memory of every kind users register, every byte
 * checked on the device where it landed. Where no GPU (or no CUDA driver)
 * is present every test reports itself skipped and the program exits 77,
 * which ctest shows as skipped, not passed.
 *
 * Each case prints one "GPU|" line; contrib/gpu_suite.sh gathers them into
 * a table.
 */
extern "C" {
#include "test/harness/span_gpu.h"
#include "test/harness/span_md_open.h"
#include "test/harness/span_pair.h"
#include "ucx/span_ucx.h" /* the v2 MD calls */
}

#include "test_fds.h"
#include "test_run_alone.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

const size_t MiB = 1 << 20;

char gpu_reason[256];
bool gpu_present;

struct gpu_case {
    const char      *name;
    span_gpu_kind_t kind;
    unsigned        handles;    /* VMM */
    size_t          units;      /* allocation size in VMM granules (VMM)
                                   or MiB */
    size_t          reg_offset; /* of the registration in the allocation */
    size_t          reg_trim;   /* bytes short of the allocation's end */
    bool            native_ok;  /* native cuda_ipc moves it right */
};

const char *native_tls = "cuda_copy,cuda_ipc,posix";
const char *twin_tls   = "cuda_copy,cuda_ipc+,posix";

class gpu_pair : public ::testing::TestWithParam<std::tuple<gpu_case, bool>> {
protected:
    void SetUp() override
    {
        if (!gpu_present) {
            GTEST_SKIP() << gpu_reason;
        }
        if (gcase().kind == SPAN_GPU_EXTERNAL) {
            ASSERT_NO_FATAL_FAILURE(start_torch_target());
        } else {
            ASSERT_EQ(UCS_OK, span_pair_start(&m_pair, SPAN_PAIR_FORK, tls(),
                                              features));
        }
        m_started         = true;
        m_pair.local_cuda = 1;
        char reason[256];
        ASSERT_TRUE(span_gpu_init(reason, sizeof(reason))) << reason;
    }

    void TearDown() override
    {
        if (m_mapped) {
            span_pair_unmap(&m_pair, &m_region);
        }
        if (m_started) {
            EXPECT_EQ(0, span_pair_stop(&m_pair));
        }
    }

    /* The target is a PyTorch process whose tensor is the memory */
    void start_torch_target()
    {
        const char *target = getenv("SPAN_GPU_TORCH_TARGET");
        if (target == NULL) {
            GTEST_SKIP() << "no PyTorch target: SPAN_GPU_TORCH_TARGET is "
                            "unset (contrib/gpu_suite.sh sets it where torch "
                            "imports)";
        }
        std::vector<std::string> words;
        std::string word;
        for (const char *c = target;; ++c) {
            if ((*c == ' ') || (*c == '\0')) {
                if (!word.empty()) {
                    words.push_back(word);
                }
                word.clear();
                if (*c == '\0') {
                    break;
                }
            } else {
                word += *c;
            }
        }
        words.push_back(std::to_string(gcase().units));
        std::vector<char*> argv;
        for (auto &w : words) {
            argv.push_back(&w[0]);
        }
        argv.push_back(nullptr);
        ASSERT_EQ(UCS_OK, span_pair_start_exec(&m_pair, tls(), features,
                                               argv.data()));
    }

    const gpu_case &gcase() const { return std::get<0>(GetParam()); }
    bool twin() const { return std::get<1>(GetParam()); }
    const char *tls() const { return twin() ? twin_tls : native_tls; }

    size_t alloc_length() const
    {
        return (gcase().kind == SPAN_GPU_VMM) ?
               gcase().units * span_gpu_vmm_granularity() :
               gcase().units * MiB;
    }

    void map(unsigned seed)
    {
        size_t length = alloc_length();
        ucs_status_t status = span_pair_map_kind(&m_pair, gcase().kind,
                                                 gcase().handles, length,
                                                 gcase().reg_offset,
                                                 length - gcase().reg_offset -
                                                 gcase().reg_trim, seed,
                                                 &m_region);
        if ((status == UCS_ERR_UNSUPPORTED) &&
            (gcase().kind == SPAN_GPU_MALLOC_PAIR)) {
            GTEST_SKIP() << "the driver placed no block right after the "
                            "other in 32 tries";
        }
        ASSERT_EQ(UCS_OK, status);
        m_mapped = true;
    }

    /* put then get of [off, off + len), bytes checked on both sides; the
     * number of wrong bytes (SIZE_MAX where an op failed) */
    size_t put_get(size_t off, size_t len, unsigned seed, unsigned base_seed)
    {
        std::vector<uint8_t> host(len), back(len, 0);
        span_gpu_buf_t local;
        size_t wrong = SIZE_MAX;

        if (span_gpu_alloc(SPAN_GPU_MALLOC, len, 0, NULL, &local) != UCS_OK) {
            return SIZE_MAX;
        }
        span_pair_fill(host.data(), len, seed, off);
        if ((span_gpu_copy(local.ptr, host.data(), len) == UCS_OK) &&
            (span_pair_put(&m_pair, &m_region, off, local.ptr, len) ==
             UCS_OK)) {
            wrong = span_pair_check(&m_pair, &m_region, off, len, seed);
        }
        if ((wrong != SIZE_MAX) &&
            (span_pair_refill(&m_pair, &m_region, base_seed) == UCS_OK) &&
            (span_gpu_copy(local.ptr, back.data(), len) == UCS_OK) &&
            (span_pair_get(&m_pair, &m_region, off, local.ptr, len) ==
             UCS_OK) &&
            (span_gpu_copy(back.data(), local.ptr, len) == UCS_OK)) {
            wrong += span_pair_mismatches(back.data(), len, base_seed, off);
        } else {
            wrong = SIZE_MAX;
        }
        span_gpu_free(&local);
        return wrong;
    }

    /* Ops to make: the whole registration, and ops across and just past
     * every physical boundary inside it (the bytes that go wrong) */
    std::vector<std::pair<size_t, size_t>> ops() const
    {
        size_t start = m_region.reg_offset, end = start + m_region.reg_length;
        std::vector<std::pair<size_t, size_t>> v = {{start, end - start},
                                                    {start + 1, 4109}};
        if (gcase().handles > 0) {
            size_t hsize = alloc_length() / gcase().handles;
            for (size_t b = hsize; b < end; b += hsize) {
                if ((b > start + 2000) && (b + 2109 <= end)) {
                    v.push_back({b - 2000, 4109});
                }
                if ((b >= start) && (b + 108 <= end)) {
                    v.push_back({b + 100, 8});
                }
            }
        }
        v.push_back({end - 8, 8});
        return v;
    }

    void report(const char *what, size_t done, size_t total, size_t wrong,
                size_t failed)
    {
        char info[65536];
        span_pair_ep_info(&m_pair, info, sizeof(info));
        const char *target_gpu = getenv("SPAN_PAIR_TARGET_GPU");
        printf("GPU| %-18s | %-9s | %-8s | %s | GPU 0->%s | %zu/%zu ops "
               "right | %zu bytes wrong | %zu ops failed | rma over "
               "cuda_ipc%s: %s\n",
               gcase().name, twin() ? "cuda_ipc+" : "cuda_ipc", what,
               ucx_settings().c_str(), target_gpu ? target_gpu : "0", done,
               total, wrong, failed, twin() ? "+" : "",
               strstr(info, twin() ? "cuda_ipc+/" : "cuda_ipc/") ? "yes" :
                                                                     "no");
    }

    /* UCX's defaults, or the variables the suite changed */
    static std::string ucx_settings()
    {
        const char *whole = getenv("UCX_MEMTYPE_REG_WHOLE_ALLOC_TYPES");
        const char *widen = getenv("UCX_SPAN_VMM_WIDEN");
        std::string s = (whole == NULL) ? "defaults" :
                        std::string("WHOLE_ALLOC_TYPES=") + whole;

        return (widen == NULL) ? s : s + " VMM_WIDEN=" + widen;
    }

    void run_ops(const char *what, unsigned seed)
    {
        size_t right = 0, wrong = 0, failed = 0;
        auto list    = ops();
        for (auto &op : list) {
            size_t w = put_get(op.first, op.second, ++seed, 7);
            if (w == SIZE_MAX) {
                ++failed;
            } else {
                wrong += w;
                right += (w == 0);
            }
            if (twin() || gcase().native_ok) {
                EXPECT_EQ(0u, w) << op.second << " bytes at " << op.first;
            }
            ASSERT_EQ(UCS_OK, span_pair_refill(&m_pair, &m_region, 7));
        }
        report(what, right, list.size(), wrong, failed);
    }

    static const uint64_t features = UCP_FEATURE_RMA | UCP_FEATURE_TAG;

    span_pair_t        m_pair    = {};
    span_pair_region_t m_region  = {};
    bool               m_started = false;
    bool               m_mapped  = false;
};

TEST_P(gpu_pair, put_get)
{
    ASSERT_NO_FATAL_FAILURE(map(7));
    if (IsSkipped()) {
        return;
    }
    run_ops("put+get", 100);
}

/* The allocation freed and allocated again at the same address: the peer
 * moves the new memory's bytes, never the old handle's */
TEST_P(gpu_pair, free_and_allocate_again_at_the_same_address)
{
    if (gcase().kind == SPAN_GPU_EXTERNAL) {
        GTEST_SKIP() << "the tensor is PyTorch's to free: the target cannot "
                        "allocate again at its address";
    }
    if (gcase().kind == SPAN_GPU_MALLOC_PAIR) {
        GTEST_SKIP() << "cuMemAlloc takes no address: the pair cannot be "
                        "allocated again at its own";
    }
    ASSERT_NO_FATAL_FAILURE(map(7));
    ASSERT_EQ(0u, put_get(m_region.reg_offset, 4096, 50, 7));
    ucs_status_t status = span_pair_remap(&m_pair, &m_region, 7);
    if (status == UCS_ERR_NO_MEMORY) {
        GTEST_SKIP() << "the driver gave no allocation at the old address "
                        "in 64 tries";
    }
    ASSERT_EQ(UCS_OK, status);
    run_ops("realloc", 200);
}

/* Ops of 1..64 bytes just before and just past what was registered are
 * refused, and no byte of the allocation changes: the range as given, or
 * with UCX's defaults the handle UCP cut it to, widened by span over the
 * handles after it (README, "Bounds contract") */
TEST_P(gpu_pair, just_outside_the_registration_is_refused)
{
    if (!twin() || (gcase().kind != SPAN_GPU_VMM) ||
        (gcase().reg_offset == 0)) {
        GTEST_SKIP() << "a sub-range of VMM memory, over a twin";
    }
    ASSERT_NO_FATAL_FAILURE(map(7));
    const char *whole = getenv("UCX_MEMTYPE_REG_WHOLE_ALLOC_TYPES");
    const char *widen = getenv("UCX_SPAN_VMM_WIDEN");
    size_t hsize      = alloc_length() / gcase().handles;
    size_t start      = m_region.reg_offset;
    size_t end        = start + m_region.reg_length;
    size_t ops = 0, refused = 0;
    span_gpu_buf_t local;

    if ((whole == NULL) || (strstr(whole, "cuda") != NULL)) {
        start -= start % hsize;
        end    = ((widen != NULL) && !strcmp(widen, "0")) ? start + hsize :
                                                            alloc_length();
    }
    ASSERT_EQ(UCS_OK, span_gpu_alloc(SPAN_GPU_MALLOC, 64, 0, NULL, &local));
    for (size_t len = 1; len <= 64; ++len) {
        std::vector<size_t> at = {end};
        if (start >= len) {
            at.push_back(start - len);
        }
        for (size_t off : at) {
            for (int put = 0; put < 2; ++put) {
                ucs_status_t status =
                        put ? span_pair_put(&m_pair, &m_region, off,
                                            local.ptr, len) :
                              span_pair_get(&m_pair, &m_region, off,
                                            local.ptr, len);
                EXPECT_NE(UCS_OK, status) << (put ? "put" : "get") << " of "
                                          << len << " bytes at " << off;
                ++ops;
                refused += (status != UCS_OK);
            }
        }
    }
    size_t wrong = span_pair_check(&m_pair, &m_region, 0, alloc_length(), 7);
    EXPECT_EQ(0u, wrong);
    printf("GPU| %-18s | cuda_ipc+ | bounds   | %s | [%zu, %zu) | %zu/%zu "
           "ops refused | %zu bytes wrong |\n", gcase().name,
           ucx_settings().c_str(), start, end, refused, ops, wrong);
    span_gpu_free(&local);
}

std::vector<gpu_case> cases()
{
    return {
        {"malloc_whole", SPAN_GPU_MALLOC, 0, 64, 0, 0, true},
        {"malloc_sub_odd", SPAN_GPU_MALLOC, 0, 64, MiB + 4109, 40 * MiB + 13,
         true},
        {"async_pool", SPAN_GPU_ASYNC, 0, 32, 0, 0, true},
        /* cudaMalloc blocks of 1 and 3 MiB back to back, which UCP's
         * memtype cache may merge into one region that it registers
         * whole: each block registered alone */
        {"malloc_1_3_small", SPAN_GPU_MALLOC_PAIR, 0, 4, 0, 3 * MiB, true},
        {"malloc_1_3_large", SPAN_GPU_MALLOC_PAIR, 0, 4, MiB, 0, true},
        {"vmm_1_handle", SPAN_GPU_VMM, 1, 16, 0, 0, true},
        {"vmm_16_handles", SPAN_GPU_VMM, 16, 16, 0, 0, false},
        {"vmm_16_sub_odd", SPAN_GPU_VMM, 16, 16, 3 * MiB + 4109,
         5 * MiB + 13, false},
        /* PyTorch, expandable_segments:True: 300 MiB in 15 pages of
         * 20 MiB; the whole tensor, and its second half from an odd
         * offset */
        {"torch_expandable", SPAN_GPU_EXTERNAL, 15, 300, 0, 0, false},
        {"torch_second_half", SPAN_GPU_EXTERNAL, 15, 300, 150 * MiB + 4109,
         13, false},
    };
}

INSTANTIATE_TEST_SUITE_P(
        gpu, gpu_pair,
        ::testing::Combine(::testing::ValuesIn(cases()), ::testing::Bool()),
        [](const ::testing::TestParamInfo<gpu_pair::ParamType> &info) {
            return std::string(std::get<0>(info.param).name) +
                   (std::get<1>(info.param) ? "_twin" : "_native");
        });

/*
 * One process, the twin MD itself: what registrations of VMM memory export,
 * and what an importer (this process, through pidfd_getfd as a peer's
 * would) maps from their keys.
 */
class gpu_md : public ::testing::Test {
protected:
    void SetUp() override
    {
        if (!gpu_present) {
            GTEST_SKIP() << gpu_reason;
        }
        char reason[256];
        ASSERT_TRUE(span_gpu_init(reason, sizeof(reason))) << reason;
        m_md = span_md_open_by_name("span", "cuda_ipc+");
        ASSERT_NE(nullptr, m_md) << "no cuda_ipc+ (UCX_MODULE_DIR?)";
        m_gran = span_gpu_vmm_granularity();
    }

    void TearDown() override
    {
        if (m_md != nullptr) {
            uct_md_close(m_md);
        }
    }


    uct_mem_h reg(void *ptr, size_t length)
    {
        uct_md_mem_reg_params_t params = {};
        uct_mem_h memh                 = nullptr;
        params.field_mask = UCT_MD_MEM_REG_FIELD_MEM_TYPE;
        params.mem_type   = UCS_MEMORY_TYPE_CUDA;
        EXPECT_EQ(UCS_OK, m_md->ops->mem_reg(m_md, ptr, length, &params,
                                             &memh));
        return memh;
    }

    void dereg(uct_mem_h memh)
    {
        uct_md_mem_dereg_params_t params = {};
        params.field_mask = UCT_MD_MEM_DEREG_FIELD_MEMH;
        params.memh       = memh;
        EXPECT_EQ(UCS_OK, m_md->ops->mem_dereg(m_md, &params));
    }

    std::vector<uint8_t> pack(uct_mem_h memh, void *ptr, size_t length)
    {
        uct_md_mkey_pack_params_t params = {};
        std::vector<uint8_t> key(256, 0);
        EXPECT_EQ(UCS_OK, m_md->ops->mkey_pack(m_md, memh, ptr, length,
                                               &params, key.data()));
        return key;
    }

    ucs_status_t unpack(const std::vector<uint8_t> &key)
    {
        uct_rkey_bundle_t bundle;
        ucs_status_t status = uct_rkey_unpack(m_md->component, key.data(),
                                              &bundle);
        if (status == UCS_OK) {
            uct_rkey_release(m_md->component, &bundle);
        }
        return status;
    }

    uct_md_h m_md   = nullptr;
    size_t   m_gran = 0;
};

/* A segment registered, grown and registered again exports only its new
 * handles: one descriptor per handle, not per registration */
TEST_F(gpu_md, registrations_of_a_growing_segment_share_their_exports)
{
    span_gpu_buf_t buf;
    ASSERT_EQ(UCS_OK, span_gpu_alloc(SPAN_GPU_VMM, 6 * m_gran, 6, NULL, &buf));
    int before = test_open_fds();

    uct_mem_h a = reg(buf.ptr, 4 * m_gran);
    int first   = test_open_fds() - before;
    uct_mem_h b = reg(buf.ptr, 6 * m_gran);
    int second  = test_open_fds() - before - first;
    printf("GPU md| exports | descriptors: %d for 4 handles, %d more for 6 "
           "|\n", first, second);
    EXPECT_GE(first, 4); /* and the export table, the first time */
    EXPECT_LE(first, 5);
    EXPECT_EQ(2, second);
    dereg(b);
    EXPECT_EQ(before + first, test_open_fds()) << "the shared 4 are still held";
    dereg(a);
    EXPECT_LE(test_open_fds(), before + 1); /* the table stays */
    span_gpu_free(&buf);
}

/* A buffer inside any handle of a registration is served by it, and the
 * registration's key carries its 16 units inline (span rkey flags: bit 1
 * spilled, bit 2 span's VMM keys) */
TEST_F(gpu_md, a_buffer_in_a_later_handle_is_served_by_the_registration)
{
    span_gpu_buf_t buf;
    ASSERT_EQ(UCS_OK, span_gpu_alloc(SPAN_GPU_VMM, 16 * m_gran, 16, NULL,
                                     &buf));
    uct_mem_h whole          = reg(buf.ptr, 16 * m_gran);
    std::vector<uint8_t> key = pack(whole, buf.ptr, 16 * m_gran);
    printf("GPU md| 16 handles | rkey flags 0x%x |\n", key[1]);
    EXPECT_EQ(0x4, key[1] & 0x6) << "spilled, or not span's VMM keys";
    EXPECT_EQ(UCS_OK, unpack(key));

    int before    = test_open_fds();
    char *inside  = (char*)buf.ptr + (11 * m_gran) + 4109;
    uct_mem_h sub = reg(inside, m_gran); /* over handles 11 and 12 */
    EXPECT_EQ(whole, sub);
    EXPECT_EQ(before, test_open_fds()) << "exported again";
    dereg(sub);
    dereg(whole);
    span_gpu_free(&buf);
}

/* A key kept past its deregistration names a descriptor number that the
 * next export takes: refused, not mapped as the other memory */
TEST_F(gpu_md, a_key_of_a_withdrawn_export_is_refused)
{
    span_gpu_buf_t a, b;
    ASSERT_EQ(UCS_OK, span_gpu_alloc(SPAN_GPU_VMM, m_gran, 1, NULL, &a));
    uct_mem_h ma              = reg(a.ptr, m_gran);
    std::vector<uint8_t> old_key = pack(ma, a.ptr, m_gran);
    EXPECT_EQ(UCS_OK, unpack(old_key));
    dereg(ma);
    span_gpu_free(&a);

    ASSERT_EQ(UCS_OK, span_gpu_alloc(SPAN_GPU_VMM, m_gran, 1, NULL, &b));
    uct_mem_h mb                 = reg(b.ptr, m_gran);
    std::vector<uint8_t> new_key = pack(mb, b.ptr, m_gran);
    ucs_status_t status          = unpack(old_key);
    printf("GPU md| stale key | old key after its export was withdrawn: %s "
           "|\n", ucs_status_string(status));
    EXPECT_NE(UCS_OK, status);
    EXPECT_EQ(UCS_OK, unpack(new_key));
    dereg(mb);
    span_gpu_free(&b);
}

/* Unmapping the memory withdraws its export at once, while a registration
 * still holds it */
TEST_F(gpu_md, an_unmapped_unit_is_withdrawn_while_registered)
{
    span_gpu_buf_t a;
    ASSERT_EQ(UCS_OK, span_gpu_alloc(SPAN_GPU_VMM, 2 * m_gran, 2, NULL, &a));
    uct_mem_h ma             = reg(a.ptr, 2 * m_gran);
    std::vector<uint8_t> key = pack(ma, a.ptr, 2 * m_gran);
    int registered           = test_open_fds();
    span_gpu_free(&a); /* cuMemUnmap: a memory event */
    printf("GPU md| unmap | descriptors closed at the unmap: %d |\n",
           registered - test_open_fds());
    EXPECT_EQ(2, registered - test_open_fds());
    EXPECT_NE(UCS_OK, unpack(key));
    dereg(ma);
}

} // namespace

int main(int argc, char **argv)
{
    ::testing::InitGoogleTest(&argc, argv);
    /* asked in a child: this process must fork before it touches CUDA */
    gpu_present = span_gpu_probe(gpu_reason, sizeof(gpu_reason));
    if (!gpu_present) {
        printf("GPU suite skipped: %s\n", gpu_reason);
        int rc = RUN_ALL_TESTS();
        return (rc == 0) ? 77 : rc;
    }
    if (getenv("SPAN_GPU_TEST_ALONE") != NULL) {
        return RUN_ALL_TESTS();
    }
    return run_each_test_alone("/proc/self/exe");
}
