/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * GPU test: two processes on one GPU, the vendor's own IPC transport beside
 * its twin, put and get of device memory of every kind users register,
 * every byte checked on the device where it landed; and the twin MD alone,
 * what registrations of VMM memory export. One test over the GPU memory
 * types, each built into its own program:
 *  - span_gpu_test (CUDA): cuda_ipc beside cuda_ipc+; each case prints one
 *    "GPU|" line, which contrib/gpu/gpu_suite.sh gathers into a table;
 *  - span_gpu_rocm_test (SPAN_GPU_TEST_ROCM, ROCm): rocm_ipc beside
 *    rocm_ipc+, wherever HIP finds a device and UCX has its rocm module: on
 *    an AMD GPU, or on the emulated ROCm runtime (test/rocm_emu) with a UCX
 *    built from its tag (docs/rocm.md; test/rocm/run.sh). Each case
 *    prints one "ROCM|" line, which test/rocm/run.sh gathers into a table,
 *    native beside twin.
 * Where the memory type's runtime, a device or (ROCm) UCX's module is
 * absent every test reports itself skipped and the program exits 77, which
 * ctest shows as skipped, not passed.
 */
extern "C" {
#include "tools/harness/span_gpu.h"
#include "tools/harness/span_md_open.h"
#include "tools/harness/span_pair.h"
#include "ucx/span_ucx.h" /* the v2 MD calls */
}

#include "test_fds.h"
#include "test_log.h"
#include "test_run_alone.h"

#include <gtest/gtest.h>
#include <uct/api/uct.h>
#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

const size_t MiB = 1 << 20;

char gpu_reason[512];
bool gpu_present;

/* What the vendor's own transport does with a case's memory */
enum native_t {
    NATIVE_RIGHT,  /* moves it right */
    NATIVE_WRONG,  /* registers it, moves wrong bytes across its handles */
    NATIVE_REFUSED /* may refuse to register it */
};

struct gpu_case {
    const char      *name;
    span_gpu_kind_t kind;
    unsigned        handles;    /* VMM */
    size_t          units;      /* allocation size: VMM units (vmm_unit())
                                   for VMM, else MiB */
    size_t          reg_offset; /* of the registration in the allocation */
    size_t          reg_trim;   /* bytes short of the allocation's end */
    native_t        native;
};

/* A GPU memory type: its runtime (span_gpu.h), its transports, its cases */
struct gpu_vendor {
    const char        *runtime; /* SPAN_GPU_RUNTIME */
    ucs_memory_type_t mem_type;
    const char        *label;   /* of the lines the tests print */
    const char        *skipped; /* the line where the tests skip */
    const char        *ipc;     /* the vendor's IPC transport (and MD) */
    const char        *copy;    /* and its copy transport */
    /* the rows name the UCX settings and the GPUs (contrib/gpu/gpu_suite.sh) */
    bool              rows_name_settings;
    /* put_get also gets past the end of the registration, where the
     * allocation goes on (UCP registers CUDA memory from the base of its
     * allocation by default: the bounds test covers it there) */
    bool              get_past_end;
    /* where UCX has no such MD, the tests skip (a ROCm runtime, emulated or
     * real, goes without UCX's rocm module); with it: why not */
    const char        *no_md;
};

/* The suites keep the names each memory type had in its own file:
 * contrib/gpu/gpu_suite.sh filters on them */
#if SPAN_GPU_TEST_ROCM
#  define SPAN_GPU_PREFIX rocm
#  define SPAN_GPU_PAIR   rocm_pair
#  define SPAN_GPU_MD     rocm_md

const gpu_vendor vendor = {
    "rocm", UCS_MEMORY_TYPE_ROCM, "ROCM", "ROCm GPU test skipped",
    "rocm_ipc", "rocm_copy", false, true,
    "no rocm module: build UCX with its ROCm modules (docs/rocm.md); or HSA "
    "finds no device"
};

std::vector<gpu_case> cases()
{
    return {
        {"malloc_whole", SPAN_GPU_MALLOC, 0, 64, 0, 0, NATIVE_RIGHT},
        /* a layer view at an odd offset inside one allocation, as MoRI-IO's
         * XGMI path registered it (ROCm/mori "honor sub-region base offset
         * in IPC remapping"); UCX's rocm_ipc resolves the base itself */
        {"malloc_layer_odd", SPAN_GPU_MALLOC, 0, 64, 3 * MiB + 4109,
         40 * MiB + 13, NATIVE_RIGHT},
        /* two hipMalloc blocks back to back, each registered alone */
        {"malloc_1_3_small", SPAN_GPU_MALLOC_PAIR, 0, 4, 0, 3 * MiB,
         NATIVE_RIGHT},
        {"malloc_1_3_large", SPAN_GPU_MALLOC_PAIR, 0, 4, MiB, 0, NATIVE_RIGHT},
        /* hipMemCreate handles of POSIX fds (PyTorch's expandable segments
         * on ROCm): rocm_ipc's IPC handles refuse them (ROCm/clr #265) */
        {"vmm_1_handle", SPAN_GPU_VMM, 1, 4, 0, 0, NATIVE_REFUSED},
        {"vmm_16_handles", SPAN_GPU_VMM, 16, 16, 0, 0, NATIVE_REFUSED},
        {"vmm_16_sub_odd", SPAN_GPU_VMM, 16, 16, 3 * MiB + 4109, 5 * MiB + 13,
         NATIVE_REFUSED},
    };
}
#else
#  define SPAN_GPU_PREFIX gpu
#  define SPAN_GPU_PAIR   gpu_pair
#  define SPAN_GPU_MD     gpu_md

const gpu_vendor vendor = {
    "cuda", UCS_MEMORY_TYPE_CUDA, "GPU", "GPU suite skipped", "cuda_ipc",
    "cuda_copy", true, false, nullptr
};

std::vector<gpu_case> cases()
{
    return {
        {"malloc_whole", SPAN_GPU_MALLOC, 0, 64, 0, 0, NATIVE_RIGHT},
        {"malloc_sub_odd", SPAN_GPU_MALLOC, 0, 64, MiB + 4109, 40 * MiB + 13,
         NATIVE_RIGHT},
        {"async_pool", SPAN_GPU_ASYNC, 0, 32, 0, 0, NATIVE_RIGHT},
        /* cudaMalloc blocks of 1 and 3 MiB back to back, which UCP's
         * memtype cache may merge into one region that it registers
         * whole: each block registered alone */
        {"malloc_1_3_small", SPAN_GPU_MALLOC_PAIR, 0, 4, 0, 3 * MiB,
         NATIVE_RIGHT},
        {"malloc_1_3_large", SPAN_GPU_MALLOC_PAIR, 0, 4, MiB, 0, NATIVE_RIGHT},
        {"vmm_1_handle", SPAN_GPU_VMM, 1, 16, 0, 0, NATIVE_RIGHT},
        {"vmm_16_handles", SPAN_GPU_VMM, 16, 16, 0, 0, NATIVE_WRONG},
        {"vmm_16_sub_odd", SPAN_GPU_VMM, 16, 16, 3 * MiB + 4109,
         5 * MiB + 13, NATIVE_WRONG},
        /* PyTorch, expandable_segments:True: 300 MiB in 15 pages of
         * 20 MiB; the whole tensor, and its second half from an odd
         * offset */
        {"torch_expandable", SPAN_GPU_EXTERNAL, 15, 300, 0, 0, NATIVE_WRONG},
        {"torch_second_half", SPAN_GPU_EXTERNAL, 15, 300, 150 * MiB + 4109,
         13, NATIVE_WRONG},
    };
}
#endif

std::string twin_of(const char *tl)
{
    return std::string(tl) + "+";
}

/* The size of a VMM handle the cases count in: the granularity, at least
 * 1 MiB (the odd offsets of the cases lie past 3 MiB) */
size_t vmm_unit()
{
    return std::max(span_gpu_vmm_granularity(), MiB);
}

class SPAN_GPU_PAIR
    : public ::testing::TestWithParam<std::tuple<gpu_case, bool>> {
protected:
    void SetUp() override
    {
        if (!gpu_present) {
            GTEST_SKIP() << gpu_reason;
        }
        if (gcase().kind == SPAN_GPU_EXTERNAL) {
            ASSERT_NO_FATAL_FAILURE(start_torch_target());
        } else {
            ASSERT_EQ(UCS_OK, span_pair_start(&m_pair, SPAN_PAIR_FORK,
                                              tls().c_str(), features));
        }
        m_started         = true;
        m_pair.local_cuda = 1; /* device memory, of span_gpu_memory_type() */
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
                            "unset (contrib/gpu/gpu_suite.sh sets it where torch "
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
        ASSERT_EQ(UCS_OK, span_pair_start_exec(&m_pair, tls().c_str(),
                                               features, argv.data()));
    }

    const gpu_case &gcase() const { return std::get<0>(GetParam()); }
    bool twin() const { return std::get<1>(GetParam()); }
    std::string tl() const
    {
        return twin() ? twin_of(vendor.ipc) : vendor.ipc;
    }

    std::string tls() const
    {
        return std::string(vendor.copy) + "," + tl() + ",posix";
    }

    /* Every op must move the bytes right */
    bool checked() const
    {
        return twin() || (gcase().native == NATIVE_RIGHT);
    }

    size_t alloc_length() const
    {
        return (gcase().kind == SPAN_GPU_VMM) ? gcase().units * vmm_unit() :
                                                gcase().units * MiB;
    }

    size_t reg_end() const
    {
        return alloc_length() - gcase().reg_trim;
    }

    ucs_status_t map(unsigned seed)
    {
        size_t length       = alloc_length();
        ucs_status_t status = span_pair_map_kind(&m_pair, gcase().kind,
                                                 gcase().handles, length,
                                                 gcase().reg_offset,
                                                 reg_end() - gcase().reg_offset,
                                                 seed, &m_region);
        m_mapped = (status == UCS_OK);
        return status;
    }

    /* Where the native transport refused the registration, as it may:
     * reported, and the test is over */
    bool native_refused(const char *what, ucs_status_t status)
    {
        if ((status == UCS_OK) || twin() ||
            (gcase().native != NATIVE_REFUSED)) {
            return false;
        }
        report(what, std::string("registration refused: ") +
                     ucs_status_string(status));
        return true;
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

    /* Ops to make: the whole registration, an odd piece at its start, and
     * ops across and just past every physical boundary inside it (the
     * bytes that go wrong), its last 8 bytes */
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

    /* Whether the endpoint's RMA lane is the transport under test */
    bool over_tl()
    {
        char info[65536];
        std::string want = tl() + "/";

        span_pair_ep_info(&m_pair, info, sizeof(info));
        return strstr(info, want.c_str()) != NULL;
    }

    void report(const char *what, const std::string &result)
    {
        std::string settings;
        if (vendor.rows_name_settings) {
            const char *target_gpu = getenv("SPAN_PAIR_TARGET_GPU");
            settings = ucx_settings() + " | GPU 0->" +
                       (target_gpu ? target_gpu : "0") + " | ";
        }
        printf("%s| %-18s | %-9s | %-8s | %s%s | rma over %s: %s\n",
               vendor.label, gcase().name, tl().c_str(), what,
               settings.c_str(), result.c_str(), tl().c_str(),
               over_tl() ? "yes" : "no");
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
        char result[256];

        for (auto &op : list) {
            size_t w = put_get(op.first, op.second, ++seed, 7);
            if (w == SIZE_MAX) {
                ++failed;
            } else {
                wrong += w;
                right += (w == 0);
            }
            if (checked()) {
                EXPECT_EQ(0u, w) << op.second << " bytes at " << op.first;
            }
            ASSERT_EQ(UCS_OK, span_pair_refill(&m_pair, &m_region, 7));
        }
        snprintf(result, sizeof(result), "%zu/%zu ops right | %zu bytes wrong "
                 "| %zu ops failed", right, list.size(), wrong, failed);
        report(what, result);
    }

    /* Where the allocation goes on past the registration: a get of 8 KiB
     * straddling its end, a zero-copy get over the transport (puts:
     * puts_at_the_end). The twin refuses it; natively rocm_ipc checks
     * against the whole allocation and reads on past the registration */
    /* [*start_p, *end_p): a range every op outside which a twin refuses
     * (docs/bounds.md): the range mapped, or with UCX's defaults, for VMM
     * memory, the handle UCP cut it to, widened by span over the handles
     * after it */
    void registered_range(size_t *start_p, size_t *end_p) const
    {
        const char *whole = getenv("UCX_MEMTYPE_REG_WHOLE_ALLOC_TYPES");
        const char *widen = getenv("UCX_SPAN_VMM_WIDEN");
        size_t start      = m_region.reg_offset;
        size_t end        = start + m_region.reg_length;

        if ((gcase().kind == SPAN_GPU_VMM) &&
            ((whole == NULL) || (strstr(whole, "cuda") != NULL))) {
            size_t hsize = alloc_length() / gcase().handles;
            start       -= start % hsize;
            end          = ((widen != NULL) && !strcmp(widen, "0")) ?
                           start + hsize : alloc_length();
        }
        *start_p = start;
        *end_p   = end;
    }

    /* A transfer of count blocks from local whose second half lies past
     * the registered range: those blocks alone are refused, the first half
     * lands, and no other byte of the allocation changes */
    void blocks_past_the_end(span_gpu_buf_t &local, size_t block,
                             size_t count)
    {
        const size_t half = count / 2;
        std::vector<ucs_status_t> st(count, UCS_ERR_LAST);
        std::vector<uint8_t> host(2 * block * count);
        size_t rs, re, start, refused = 0, wrong = 0;

        if ((gcase().kind != SPAN_GPU_MALLOC) &&
            (gcase().kind != SPAN_GPU_VMM)) {
            return; /* PyTorch's and paired blocks: ranges UCP decides */
        }
        /* a twin's key reaches what was mapped, exactly */
        rs = m_region.reg_offset;
        re = rs + m_region.reg_length;
        if (re - rs < half * 2 * block) {
            return;
        }
        start = re - (half * 2 * block);
        ASSERT_EQ(UCS_OK, span_pair_refill(&m_pair, &m_region, 7));
        span_pair_fill(host.data(), host.size(), 11, start);
        ASSERT_EQ(UCS_OK, span_gpu_copy(local.ptr, host.data(),
                                        host.size()));
        span_pair_rma_blocks(&m_pair, &m_region, start, local.ptr, block,
                             2 * block, count, 0, 0, st.data());
        for (size_t i = 0; i < count; ++i) {
            if (i < half) {
                EXPECT_EQ(UCS_OK, st[i]) << "block " << i;
                wrong += span_pair_check(&m_pair, &m_region,
                                         start + 2 * i * block, block, 11);
                wrong += span_pair_check(&m_pair, &m_region,
                                         start + (2 * i + 1) * block, block,
                                         7);
            } else {
                EXPECT_NE(UCS_OK, st[i]) << "block " << i << " past "
                                         << re;
                refused += (st[i] != UCS_OK);
            }
        }
        wrong += span_pair_check(&m_pair, &m_region, 0, start, 7);
        wrong += span_pair_check(&m_pair, &m_region, re, alloc_length() - re,
                                 7);
        EXPECT_EQ(0u, wrong);
        char result[256];
        snprintf(result, sizeof(result), "%zu/%zu blocks past %zu refused | "
                 "%zu bytes wrong | %zu ops failed", refused, count - half,
                 re, wrong, half - std::count(st.begin(), st.begin() + half,
                                              UCS_OK));
        report("blocks past", result);
    }

    void past_the_registration()
    {
        const size_t len = 8192, half = len / 2, off = reg_end() - half;
        std::vector<uint8_t> back(len, 0);
        span_gpu_buf_t local;
        char result[256];

        /* the local buffer starts as no byte of the remote one: a byte
         * that matches the remote one was read */
        for (size_t i = 0; i < len; ++i) {
            back[i] = ~span_pair_pattern(7, off + i);
        }
        ASSERT_EQ(UCS_OK, span_pair_refill(&m_pair, &m_region, 7));
        ASSERT_EQ(UCS_OK,
                  span_gpu_alloc(SPAN_GPU_MALLOC, len, 0, NULL, &local));
        ASSERT_EQ(UCS_OK, span_gpu_copy(local.ptr, back.data(), len));
        ucs_status_t status = span_pair_get(&m_pair, &m_region, off, local.ptr,
                                            len);
        ASSERT_EQ(UCS_OK, span_gpu_copy(back.data(), local.ptr, len));
        span_gpu_free(&local);
        size_t leaked = half - span_pair_mismatches(back.data() + half, half, 7,
                                                    reg_end());
        snprintf(result, sizeof(result), "get %s | %zu bytes read past the "
                 "registration", ucs_status_string(status), leaked);
        report("past end", result);
        if (twin()) {
            EXPECT_EQ(UCS_ERR_INVALID_ADDR, status);
            EXPECT_EQ(0u, leaked);
        }
    }

    /* A put of s bytes from device memory, of the pattern of seed at off;
     * its status */
    ucs_status_t put_pattern(span_gpu_buf_t &local, size_t off, size_t s,
                             unsigned seed)
    {
        std::vector<uint8_t> host(s);

        span_pair_fill(host.data(), s, seed, off);
        if (span_gpu_copy(local.ptr, host.data(), s) != UCS_OK) {
            return UCS_ERR_IO_ERROR;
        }
        return span_pair_put(&m_pair, &m_region, off, local.ptr, s);
    }

    /*
     * Puts into device memory, which UCP 1.22 offloads only to a lane whose
     * put zero-copy has no minimal size (put/offload/zcopy; rocm_ipc's is
     * UCX_ROCM_IPC_MIN_ZCOPY, 128, so natively it emulates them in software
     * at the target, where no key is consulted; rocm_ipc+ offers 0). For
     * every size from 1 to max_put: one ending at the registration's end,
     * whose bytes must land, and one ending a byte past it, which the twin
     * must refuse (it reaches the twin's op, whatever its size), writing
     * nothing; then one of 8 KiB, half past the end.
     */
    void puts_at_the_end(size_t max_put)
    {
        const size_t end = reg_end(), big = 8192;
        size_t right = 0, wrong = 0, failed = 0, refused = 0, outside = 0;
        ucs_status_t past_status = UCS_OK;
        span_gpu_buf_t local;
        char result[256];

        ASSERT_EQ(UCS_OK, span_pair_refill(&m_pair, &m_region, 7));
        ASSERT_EQ(UCS_OK,
                  span_gpu_alloc(SPAN_GPU_MALLOC, big, 0, NULL, &local));
        for (size_t s = 1; s <= max_put; ++s) {
            unsigned seed = 1000 + s;
            size_t w      = SIZE_MAX;
            if (put_pattern(local, end - s, s, seed) == UCS_OK) {
                w = span_pair_check(&m_pair, &m_region, end - s, s, seed);
            }
            failed += (w == SIZE_MAX);
            right  += (w == 0);
            wrong  += ((w != SIZE_MAX) ? w : 0);

            ucs_status_t status = put_pattern(local, end - s + 1, s, seed);
            refused    += (status != UCS_OK);
            past_status = (status != UCS_OK) ? status : past_status;
            /* the byte past the end keeps the fill's pattern unless the
             * put wrote it */
            size_t o = span_pair_check(&m_pair, &m_region, end, 1, 7);
            outside += (o == SIZE_MAX) ? 1 : o;
            if (twin()) {
                EXPECT_EQ(0u, w) << "put of " << s << " bytes at the end";
                EXPECT_EQ(UCS_ERR_INVALID_ADDR, status)
                        << "put of " << s << " bytes, one past the end";
                EXPECT_EQ(0u, o) << "put of " << s << " bytes wrote past the "
                                    "registration";
            }
        }
        snprintf(result, sizeof(result), "1..%zu B: %zu/%zu right | %zu bytes "
                 "wrong | %zu failed | a byte past: %zu/%zu refused (%s), "
                 "%zu bytes changed past", max_put, right, max_put, wrong,
                 failed, refused, max_put,
                 refused ? ucs_status_string(past_status) : "none", outside);
        report("small put", result);
        /* and an empty one at the end, which moves nothing */
        EXPECT_EQ(UCS_OK, span_pair_put(&m_pair, &m_region, end, local.ptr,
                                        0));

        /* 8 KiB straddling the end, half past it */
        ASSERT_EQ(UCS_OK, span_pair_refill(&m_pair, &m_region, 7));
        ucs_status_t status = put_pattern(local, end - big / 2, big, 99);
        size_t kept = span_pair_check(&m_pair, &m_region, end, big / 2, 7);
        ASSERT_NE(SIZE_MAX, kept);
        snprintf(result, sizeof(result), "put %s | %zu bytes changed past "
                 "the registration", ucs_status_string(status), kept);
        report("past put", result);
        span_gpu_free(&local);
        if (twin()) {
            EXPECT_EQ(UCS_ERR_INVALID_ADDR, status);
            EXPECT_EQ(0u, kept);
        }
    }

    static const uint64_t features = UCP_FEATURE_RMA | UCP_FEATURE_TAG;

    span_pair_t        m_pair    = {};
    span_pair_region_t m_region  = {};
    bool               m_started = false;
    bool               m_mapped  = false;
};

TEST_P(SPAN_GPU_PAIR, put_get)
{
    ucs_status_t status = map(7);

    if ((status == UCS_ERR_UNSUPPORTED) &&
        (gcase().kind == SPAN_GPU_MALLOC_PAIR)) {
        GTEST_SKIP() << "the driver placed no block right after the other "
                        "in 32 tries";
    }
    if (native_refused("put+get", status)) {
        return;
    }
    ASSERT_EQ(UCS_OK, status);
    run_ops("put+get", 100);
    if (vendor.get_past_end && (gcase().reg_trim > 0)) {
        past_the_registration();
    }
}

#if SPAN_GPU_TEST_ROCM
/* Puts of every size up to 256 bytes, and one of 8 KiB, at and past the
 * registration's end, where the allocation goes on past it */
TEST_P(SPAN_GPU_PAIR, puts_at_and_past_the_end)
{
    if (gcase().reg_trim == 0) {
        GTEST_SKIP() << "the registration ends with the allocation";
    }
    ucs_status_t status = map(7);
    if ((status == UCS_ERR_UNSUPPORTED) &&
        (gcase().kind == SPAN_GPU_MALLOC_PAIR)) {
        GTEST_SKIP() << "HIP placed the blocks apart";
    }
    if (native_refused("small put", status)) {
        return;
    }
    ASSERT_EQ(UCS_OK, status);
    puts_at_the_end(256);
}
#endif

/* The allocation freed and allocated again at the same address: the peer
 * moves the new memory's bytes, never the old handle's */
TEST_P(SPAN_GPU_PAIR, free_and_allocate_again_at_the_same_address)
{
    if (gcase().kind == SPAN_GPU_EXTERNAL) {
        GTEST_SKIP() << "the tensor is PyTorch's to free: the target cannot "
                        "allocate again at its address";
    }
    if (gcase().kind == SPAN_GPU_MALLOC_PAIR) {
        GTEST_SKIP() << "cudaMalloc and hipMalloc take no address: the pair "
                        "cannot be allocated again at its own";
    }
    ucs_status_t status = map(7);
    if (native_refused("realloc", status)) {
        return;
    }
    ASSERT_EQ(UCS_OK, status);
    size_t first = put_get(m_region.reg_offset, 4096, 50, 7);
    if (twin() || (gcase().native != NATIVE_REFUSED)) {
        ASSERT_EQ(0u, first);
    }
    status = span_pair_remap(&m_pair, &m_region, 7);
    if (status == UCS_ERR_NO_MEMORY) {
        GTEST_SKIP() << "the driver gave no allocation at the old address "
                        "in 64 tries";
    }
    ASSERT_EQ(UCS_OK, status);
    run_ops("realloc", 200);
}

#if !SPAN_GPU_TEST_ROCM
/* Ops of 1..64 bytes just before and just past what was registered are
 * refused, and no byte of the allocation changes: the range as given, or
 * with UCX's defaults the handle UCP cut it to, widened by span over the
 * handles after it (docs/bounds.md) */
TEST_P(SPAN_GPU_PAIR, just_outside_the_registration_is_refused)
{
    if (!twin() || (gcase().kind != SPAN_GPU_VMM) ||
        (gcase().reg_offset == 0)) {
        GTEST_SKIP() << "a sub-range of VMM memory, over a twin";
    }
    ucs_status_t status = map(7);
    ASSERT_EQ(UCS_OK, status);
    size_t start, end, ops = 0, refused = 0;
    span_gpu_buf_t local;

    registered_range(&start, &end);
    ASSERT_EQ(UCS_OK, span_gpu_alloc(SPAN_GPU_MALLOC, 64, 0, NULL, &local));
    for (size_t len = 1; len <= 64; ++len) {
        std::vector<size_t> at = {end};
        if (start >= len) {
            at.push_back(start - len);
        }
        for (size_t off : at) {
            for (int put = 0; put < 2; ++put) {
                status = put ? span_pair_put(&m_pair, &m_region, off,
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
    printf("%s| %-18s | %-9s | bounds   | %s | [%zu, %zu) | %zu/%zu ops "
           "refused | %zu bytes wrong |\n", vendor.label, gcase().name,
           tl().c_str(), ucx_settings().c_str(), start, end, refused, ops,
           wrong);
    span_gpu_free(&local);
}
#endif

#if !SPAN_GPU_TEST_ROCM
/* A KV-cache-shaped transfer: blocks of 4 KiB + 16 bytes in every other
 * slot of the registration (up to 512), posted before one flush, as NIXL
 * posts them: puts, then gets, every byte checked on both sides (the
 * twin's copy engine gathers them into batches: span_vmm_copy.h); blocks
 * cross the physical boundaries inside the registration. Then, over the
 * twin, a transfer whose second half lies past the registration's end:
 * those blocks alone are refused, the others land. */
TEST_P(SPAN_GPU_PAIR, many_blocks_in_one_transfer)
{
    ucs_status_t status = map(7);

    if ((status == UCS_ERR_UNSUPPORTED) &&
        (gcase().kind == SPAN_GPU_MALLOC_PAIR)) {
        GTEST_SKIP() << "the driver placed no block right after the other";
    }
    if (native_refused("blocks", status)) {
        return;
    }
    ASSERT_EQ(UCS_OK, status);
    const size_t block = 4096 + 16, start = m_region.reg_offset;
    const size_t count = std::min<size_t>(512, m_region.reg_length /
                                               (2 * block));
    const size_t len   = 2 * block * count;
    std::vector<ucs_status_t> st(count, UCS_ERR_LAST);
    std::vector<uint8_t> host(len);
    span_gpu_buf_t local;
    size_t wrong = 0, failed = 0;

    ASSERT_GT(count, 1u);
    ASSERT_EQ(UCS_OK, span_gpu_alloc(SPAN_GPU_MALLOC, len, 0, NULL, &local));
    span_pair_fill(host.data(), len, 9, start);
    ASSERT_EQ(UCS_OK, span_gpu_copy(local.ptr, host.data(), len));
    span_pair_rma_blocks(&m_pair, &m_region, start, local.ptr, block,
                         2 * block, count, 0, 0, st.data());
    for (size_t i = 0; i < count; ++i) {
        failed += (st[i] != UCS_OK);
        wrong  += span_pair_check(&m_pair, &m_region, start + 2 * i * block,
                                  block, 9);
        wrong  += span_pair_check(&m_pair, &m_region,
                                  start + (2 * i + 1) * block, block, 7);
    }
    ASSERT_EQ(UCS_OK, span_pair_refill(&m_pair, &m_region, 7));
    span_pair_rma_blocks(&m_pair, &m_region, start, local.ptr, block,
                         2 * block, count, 1, 0, st.data());
    ASSERT_EQ(UCS_OK, span_gpu_copy(host.data(), local.ptr, len));
    for (size_t i = 0; i < count; ++i) {
        failed += (st[i] != UCS_OK);
        wrong  += span_pair_mismatches(&host[2 * i * block], block, 7,
                                       start + 2 * i * block);
        wrong  += span_pair_mismatches(&host[(2 * i + 1) * block], block, 9,
                                       start + (2 * i + 1) * block);
    }
    if (checked()) {
        EXPECT_EQ(0u, wrong);
        EXPECT_EQ(0u, failed);
    }
    char result[256];
    snprintf(result, sizeof(result), "%zu blocks of %zu put+get | %zu bytes "
             "wrong | %zu ops failed", count, block, wrong, failed);
    report("blocks", result);
    if (twin()) {
        blocks_past_the_end(local, block, count);
    }
    span_gpu_free(&local);
}

#if !SPAN_GPU_TEST_ROCM
/* The KV-cache-shaped transfer of many_blocks_in_one_transfer as one UCP
 * SGL put (UCX 1.22 and later; NIXL_UCX_SGL_ENABLE=1 posts its WRITEs so):
 * every byte. Over the twin its SGL op checks each element (span's engine
 * copies VMM units and cudaMalloc memory whose handle it opened; other
 * elements go in one cuda_ipc SGL op where UCX has one, 1.23); then one block past the registration's end: the
 * request fails with UCS_ERR_INVALID_ADDR, the other blocks land. Natively
 * the status is reported (UCP 1.22 has no SGL over cuda_ipc). */
TEST_P(SPAN_GPU_PAIR, one_sgl_put_of_many_blocks)
{
    if ((gcase().kind != SPAN_GPU_MALLOC) && (gcase().kind != SPAN_GPU_VMM)) {
        GTEST_SKIP() << "one case of each allocator is enough";
    }
    ucs_status_t status = map(7);
    if (native_refused("sgl", status)) {
        return;
    }
    ASSERT_EQ(UCS_OK, status);
    const size_t block = 16384, start = m_region.reg_offset;
    const size_t count = std::min<size_t>(256, m_region.reg_length /
                                               (2 * block));
    const size_t len   = 2 * block * count;
    std::vector<uint8_t> host(len);
    span_gpu_buf_t local;
    size_t wrong = 0;

    ASSERT_GT(count, 5u);
    ASSERT_EQ(UCS_OK, span_gpu_alloc(SPAN_GPU_MALLOC, len, 0, NULL, &local));
    span_pair_fill(host.data(), len, 9, start);
    ASSERT_EQ(UCS_OK, span_gpu_copy(local.ptr, host.data(), len));
    status = span_pair_rma_sgl(&m_pair, &m_region, start, local.ptr, block,
                               2 * block, count, 0, 0);
    for (size_t i = 0; (status == UCS_OK) && (i < count); ++i) {
        wrong += span_pair_check(&m_pair, &m_region, start + 2 * i * block,
                                 block, 9);
        wrong += span_pair_check(&m_pair, &m_region,
                                 start + (2 * i + 1) * block, block, 7);
    }
    if (twin()) {
        EXPECT_EQ(UCS_OK, status);
        EXPECT_EQ(0u, wrong);
    }
    std::string result = std::to_string(count) + " blocks of " +
                         std::to_string(block) + " in one SGL put: " +
                         ucs_status_string(status) + " | " +
                         std::to_string(wrong) + " bytes wrong";
    if (twin() && (status == UCS_OK)) {
        ASSERT_EQ(UCS_OK, span_pair_refill(&m_pair, &m_region, 7));
        log_counter logs;
        status = span_pair_rma_sgl(&m_pair, &m_region, start, local.ptr,
                                   block, 2 * block, count, 0, 5);
        EXPECT_EQ(UCS_ERR_INVALID_ADDR, status);
        EXPECT_EQ(1u, logs.count("is outside the registered extent"));
        wrong = 0;
        for (size_t i = 0; i < count; ++i) {
            wrong += (i == 4) ? 0 :
                     span_pair_check(&m_pair, &m_region,
                                     start + 2 * i * block, block, 9);
        }
        EXPECT_EQ(0u, wrong);
        result += std::string(" | one block past the end: ") +
                  ucs_status_string(status) + ", " + std::to_string(wrong) +
                  " bytes of the others wrong";
    }
    report("sgl", result);
    span_gpu_free(&local);
}

/* 64 puts of 16 KiB to the same bytes, each from a buffer of its own, a
 * fence between each two, posted before one flush: the last one's bytes
 * stay, every byte (span's copy engine gathers what follows the first
 * into batches, whose kernel blocks run in any order: a fence queues what
 * was gathered and waits for it, docs/device-memory.md) */
TEST_P(SPAN_GPU_PAIR, a_fence_orders_puts_to_the_same_bytes)
{
    if ((gcase().kind == SPAN_GPU_EXTERNAL) ||
        (gcase().kind == SPAN_GPU_MALLOC_PAIR)) {
        GTEST_SKIP() << "one case of each allocator is enough";
    }
    ucs_status_t status = map(7);
    if (native_refused("fence", status)) {
        return;
    }
    ASSERT_EQ(UCS_OK, status);
    const size_t block = 16384, count = 64, start = m_region.reg_offset;
    std::vector<uint8_t> host(block * count);
    span_gpu_buf_t local;

    ASSERT_LE(start + block, reg_end());
    for (size_t i = 0; i < count; ++i) {
        span_pair_fill(&host[i * block], block, 20 + i, start);
    }
    ASSERT_EQ(UCS_OK, span_gpu_alloc(SPAN_GPU_MALLOC, host.size(), 0, NULL,
                                     &local));
    ASSERT_EQ(UCS_OK, span_gpu_copy(local.ptr, host.data(), host.size()));
    status = span_pair_put_fenced(&m_pair, &m_region, start, local.ptr, block,
                                  count);
    size_t wrong = span_pair_check(&m_pair, &m_region, start, block,
                                   20 + count - 1);
    if (checked()) {
        EXPECT_EQ(UCS_OK, status);
        EXPECT_EQ(0u, wrong) << "bytes of an earlier put stayed";
    }
    char result[160];
    snprintf(result, sizeof(result), "%zu fenced puts of %zu to one place | "
             "%zu bytes not the last one's | %s", count, block, wrong,
             ucs_status_string(status));
    report("fence", result);
    span_gpu_free(&local);
}
#endif

/* The target is killed halfway through posting a transfer of many
 * blocks: every op completes (with its status), nothing hangs or
 * crashes, and the initiator tears down */
TEST_P(SPAN_GPU_PAIR, the_peer_exits_amid_many_blocks)
{
    if ((gcase().kind == SPAN_GPU_EXTERNAL) ||
        (gcase().kind == SPAN_GPU_MALLOC_PAIR)) {
        GTEST_SKIP() << "one case of each allocator is enough";
    }
    ucs_status_t status = map(7);
    if (native_refused("peer exits", status)) {
        return;
    }
    ASSERT_EQ(UCS_OK, status);
    const size_t block = 16384;
    const size_t count = std::min<size_t>(1024, m_region.reg_length /
                                                (2 * block));
    std::vector<ucs_status_t> st(count, UCS_ERR_LAST);
    span_gpu_buf_t local;

    ASSERT_GT(count, 1u);
    ASSERT_EQ(UCS_OK, span_gpu_alloc(SPAN_GPU_MALLOC, 2 * block * count, 0,
                                     NULL, &local));
    span_pair_rma_blocks(&m_pair, &m_region, m_region.reg_offset, local.ptr,
                         block, 2 * block, count, 0, count / 2, st.data());
    size_t done = 0;
    for (auto s : st) {
        done += (s != UCS_ERR_LAST);
    }
    EXPECT_EQ(count, done);
    char result[256];
    snprintf(result, sizeof(result), "%zu/%zu blocks completed | the target "
             "killed after %zu | -", done, count, count / 2);
    report("peer exits", result); /* reads the pair's endpoint */
    span_pair_unmap(&m_pair, &m_region);
    m_mapped  = false;
    m_started = false;
    EXPECT_NE(0, span_pair_stop(&m_pair)) << "the target was killed";
    span_gpu_free(&local);
}
#endif

INSTANTIATE_TEST_SUITE_P(
        SPAN_GPU_PREFIX, SPAN_GPU_PAIR,
        ::testing::Combine(::testing::ValuesIn(cases()), ::testing::Bool()),
        [](const ::testing::TestParamInfo<SPAN_GPU_PAIR::ParamType> &info) {
            return std::string(std::get<0>(info.param).name) +
                   (std::get<1>(info.param) ? "_twin" : "_native");
        });

/*
 * One process, the twin MD itself: what registrations of VMM memory
 * export, and what an importer (this process, through pidfd_getfd as a
 * peer's would) maps from their keys.
 */
class SPAN_GPU_MD : public ::testing::Test {
protected:
    void SetUp() override
    {
        if (!gpu_present) {
            GTEST_SKIP() << gpu_reason;
        }
        char reason[256];
        ASSERT_TRUE(span_gpu_init(reason, sizeof(reason))) << reason;
        m_md = span_md_open_by_name("span", twin_of(vendor.ipc).c_str());
        ASSERT_NE(nullptr, m_md) << "no " << twin_of(vendor.ipc)
                                 << " (UCX_MODULE_DIR?)";
        m_unit = vmm_unit();
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
        params.mem_type   = vendor.mem_type;
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
    size_t   m_unit = 0;
};

#if SPAN_GPU_TEST_ROCM
/* A layer view inside a hipMalloc allocation is registered with the whole
 * allocation, and every other view inside it shares that registration */
TEST_F(SPAN_GPU_MD, views_inside_an_allocation_share_its_registration)
{
    span_gpu_buf_t buf;
    ASSERT_EQ(UCS_OK, span_gpu_alloc(SPAN_GPU_MALLOC, 16 * MiB, 0, NULL, &buf));
    uct_mem_h a = reg((char*)buf.ptr + 3 * MiB + 4109, MiB);
    uct_mem_h b = reg((char*)buf.ptr + 9 * MiB + 1, 2 * MiB);
    EXPECT_EQ(a, b);
    std::vector<uint8_t> key = pack(a, (char*)buf.ptr + 3 * MiB + 4109, MiB);
    EXPECT_EQ(UCS_OK, unpack(key));
    dereg(b);
    dereg(a);
    span_gpu_free(&buf);
}
#endif

/* A segment registered, grown and registered again exports only its new
 * handles: one descriptor per handle, not per registration */
TEST_F(SPAN_GPU_MD, registrations_of_a_growing_segment_share_their_exports)
{
    span_gpu_buf_t buf;
    ASSERT_EQ(UCS_OK, span_gpu_alloc(SPAN_GPU_VMM, 6 * m_unit, 6, NULL, &buf));
    int before = test_open_fds();

    uct_mem_h a = reg(buf.ptr, 4 * m_unit);
    int first   = test_open_fds() - before;
    uct_mem_h b = reg(buf.ptr, 6 * m_unit);
    int second  = test_open_fds() - before - first;
    printf("%s md| exports | descriptors: %d for 4 handles, %d more for 6 "
           "|\n", vendor.label, first, second);
    EXPECT_GE(first, 4); /* and the export table, the first time */
    EXPECT_LE(first, 5);
    EXPECT_EQ(2, second);
    dereg(b);
    EXPECT_EQ(before + first, test_open_fds()) << "the shared 4 are still held";
    dereg(a);
    /* the export table goes with the last export */
    EXPECT_EQ(before, test_open_fds());
    span_gpu_free(&buf);
}

/* A buffer inside any handle of a registration is served by it, and the
 * registration's key carries its 16 units inline (span rkey flags: bit 1
 * spilled, bit 2 span's VMM keys) */
TEST_F(SPAN_GPU_MD, a_buffer_in_a_later_handle_is_served_by_the_registration)
{
    span_gpu_buf_t buf;
    ASSERT_EQ(UCS_OK, span_gpu_alloc(SPAN_GPU_VMM, 16 * m_unit, 16, NULL,
                                     &buf));
    uct_mem_h whole          = reg(buf.ptr, 16 * m_unit);
    std::vector<uint8_t> key = pack(whole, buf.ptr, 16 * m_unit);
    printf("%s md| 16 handles | rkey flags 0x%x |\n", vendor.label, key[1]);
    EXPECT_EQ(0x4, key[1] & 0x6) << "spilled, or not span's VMM keys";
    EXPECT_EQ(UCS_OK, unpack(key));

    int before    = test_open_fds();
    char *inside  = (char*)buf.ptr + (11 * m_unit) + 4109;
    uct_mem_h sub = reg(inside, m_unit); /* over handles 11 and 12 */
    EXPECT_EQ(whole, sub);
    EXPECT_EQ(before, test_open_fds()) << "exported again";
    dereg(sub);
    dereg(whole);
    span_gpu_free(&buf);
}

/* A key kept past its deregistration names a descriptor number that the
 * next export takes: refused, not mapped as the other memory */
TEST_F(SPAN_GPU_MD, a_key_of_a_withdrawn_export_is_refused)
{
    span_gpu_buf_t a, b;
    ASSERT_EQ(UCS_OK, span_gpu_alloc(SPAN_GPU_VMM, m_unit, 1, NULL, &a));
    uct_mem_h ma                 = reg(a.ptr, m_unit);
    std::vector<uint8_t> old_key = pack(ma, a.ptr, m_unit);
    EXPECT_EQ(UCS_OK, unpack(old_key));
    dereg(ma);
    span_gpu_free(&a);

    ASSERT_EQ(UCS_OK, span_gpu_alloc(SPAN_GPU_VMM, m_unit, 1, NULL, &b));
    uct_mem_h mb                 = reg(b.ptr, m_unit);
    std::vector<uint8_t> new_key = pack(mb, b.ptr, m_unit);
    ucs_status_t status          = unpack(old_key);
    printf("%s md| stale key | old key after its export was withdrawn: %s "
           "|\n", vendor.label, ucs_status_string(status));
    EXPECT_NE(UCS_OK, status);
    EXPECT_EQ(UCS_OK, unpack(new_key));
    dereg(mb);
    span_gpu_free(&b);
}

/* Unmapping the memory withdraws its export at once, while a registration
 * still holds it */
TEST_F(SPAN_GPU_MD, an_unmapped_unit_is_withdrawn_while_registered)
{
    span_gpu_buf_t a, held;
    /* the export table made beforehand, and held open by an export of
     * other memory (the last withdrawal closes it): counts below are the
     * exports' */
    ASSERT_EQ(UCS_OK, span_gpu_alloc(SPAN_GPU_VMM, m_unit, 1, NULL, &held));
    uct_mem_h mheld = reg(held.ptr, m_unit);

    int before = test_open_fds();
    ASSERT_EQ(UCS_OK, span_gpu_alloc(SPAN_GPU_VMM, 2 * m_unit, 2, NULL, &a));
    int allocated            = test_open_fds(); /* the emulator's handles
                                                    are descriptors too */
    uct_mem_h ma             = reg(a.ptr, 2 * m_unit);
    std::vector<uint8_t> key = pack(ma, a.ptr, 2 * m_unit);
    int exported             = test_open_fds() - allocated;
    span_gpu_free(&a); /* cuMemUnmap, hipMemUnmap: a memory event */
    int open_after           = test_open_fds() - before;
    printf("%s md| unmap | exports: %d, still open at the unmap: %d |\n",
           vendor.label, exported, open_after);
    EXPECT_EQ(2, exported);
    /* and the held export and its table are still open */
    EXPECT_EQ(0, open_after) << "an export outlived the unmap, or went "
                                "with other memory's";
    EXPECT_NE(UCS_OK, unpack(key));
    dereg(ma);
    dereg(mheld);
    span_gpu_free(&held);
}

/* Whether the component lists the MD among its resources (rocm_ipc lists
 * none where HSA finds no device) */
bool has_md(const char *component_name, const char *md_name)
{
    uct_component_h component = span_component_by_name(component_name);
    uct_component_attr_t attr = {};
    bool found                = false;

    attr.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT;
    if ((component == nullptr) ||
        (uct_component_query(component, &attr) != UCS_OK)) {
        return false;
    }
    std::vector<uct_md_resource_desc_t> mds(attr.md_resource_count);
    attr.field_mask   = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES;
    attr.md_resources = mds.data();
    if (uct_component_query(component, &attr) != UCS_OK) {
        return false;
    }
    for (auto &md : mds) {
        found |= !strcmp(md.md_name, md_name);
    }
    return found;
}

/* Whether UCX has the vendor's IPC MD and span its twin, asked in a child:
 * UCX's GPU modules initialize the runtime (HSA), which does not survive
 * fork */
bool ucx_probe(char *reason, size_t size)
{
    int pipefd[2], status;
    ssize_t got;

    if (pipe(pipefd) != 0) {
        snprintf(reason, size, "pipe failed");
        return false;
    }
    pid_t pid = fork();
    if (pid == 0) {
        close(pipefd[0]);
        std::string twin = twin_of(vendor.ipc);
        bool native      = has_md(vendor.ipc, vendor.ipc);
        bool has_twin    = has_md("span", twin.c_str());
        std::string why  = !native ? std::string("UCX has no ") + vendor.ipc +
                                     " MD (" + vendor.no_md + ")" :
                           !has_twin ? "no " + twin + " twin (UCX_MODULE_DIR?)" :
                                       "";
        if (write(pipefd[1], why.c_str(), why.size() + 1) < 0) {
            _exit(2);
        }
        _exit((native && has_twin) ? 0 : 1);
    }
    close(pipefd[1]);
    got = (pid > 0) ? read(pipefd[0], reason, size - 1) : -1;
    reason[(got > 0) ? got : 0] = '\0';
    close(pipefd[0]);
    return (pid > 0) && (waitpid(pid, &status, 0) == pid) &&
           WIFEXITED(status) && (WEXITSTATUS(status) == 0);
}

} // namespace

int main(int argc, char **argv)
{
    ::testing::InitGoogleTest(&argc, argv);
    setenv("SPAN_GPU_RUNTIME", vendor.runtime, 1);
    /* asked in children: this process must fork before it touches the GPU */
    gpu_present = span_gpu_probe(gpu_reason, sizeof(gpu_reason)) &&
                  ((vendor.no_md == nullptr) ||
                   ucx_probe(gpu_reason, sizeof(gpu_reason)));
    if (!gpu_present) {
        printf("%s: %s\n", vendor.skipped, gpu_reason);
        int rc = RUN_ALL_TESTS();
        return (rc == 0) ? 77 : rc;
    }
    if (getenv("SPAN_GPU_TEST_ALONE") != NULL) {
        return RUN_ALL_TESTS();
    }
    return run_each_test_alone("/proc/self/exe");
}
