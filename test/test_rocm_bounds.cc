/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The extent a rocm_ipc+ key of VMM units serves, on the emulated runtime:
 * a registration of a sub-range of a VMM range (1 MiB + 13 bytes into 4
 * handles of 2 MiB, over 3 of them) is registered through its whole
 * handles, which span exports; its key serves that sub-range alone. Gets
 * and puts of 1..64 bytes just before and just past it are refused, as the
 * twin's zcopy ops refuse them (span_rkey_check, then span's copy engine
 * on the imported mapping), and no byte outside it is read or written.
 */
#include "test_deadline.h"
#include "test_rocm_md.h"

#include <gtest/gtest.h>

#include <hip/hip_runtime_api.h>

extern "C" {
#include "key/span_rkey.h"
#include "vmm/span_vmm.h"
#include "vendor/span_vendor.h"
#include "copy/span_vmm_copy.h"
#include "vmm/span_vmm_cache.h"
#include "rocm_emu/hsa_emu.h"
}

/* HSA has no batches: what an iface's engine is given */
static const span_vmm_copy_params_t span_test_copy_params = {
        .batch_ops = 1024, .batch_bytes = SIZE_MAX, .kernel_max = 262144};

#include <cstring>
#include <vector>

namespace {

constexpr size_t MiB     = 1ul << 20;
constexpr size_t handle  = 2 * MiB;
constexpr unsigned count = 4;

class rocm_bounds : public ::testing::Test {
protected:
    void SetUp() override
    {
        hipMemAllocationProp prop = {};
        hipMemAccessDesc access   = {};

        ASSERT_EQ(0, hsa_emu_fail(nullptr));
        ASSERT_EQ(hipSuccess, hipSetDevice(0));
        prop.type                = hipMemAllocationTypePinned;
        prop.location.type       = hipMemLocationTypeDevice;
        prop.location.id         = 0;
        prop.requestedHandleType = hipMemHandleTypePosixFileDescriptor;
        ASSERT_EQ(hipSuccess, hipMemAddressReserve((void**)&m_base,
                                                   count * handle, 0,
                                                   nullptr, 0));
        for (unsigned i = 0; i < count; ++i) {
            ASSERT_EQ(hipSuccess, hipMemCreate(&m_handles[i], handle, &prop,
                                               0));
            ASSERT_EQ(hipSuccess, hipMemMap(m_base + (i * handle), handle, 0,
                                            m_handles[i], 0));
        }
        access.location.type = hipMemLocationTypeDevice;
        access.location.id   = 0;
        access.flags         = hipMemAccessFlagsProtReadWrite;
        ASSERT_EQ(hipSuccess, hipMemSetAccess(m_base, count * handle,
                                              &access, 1));
        ASSERT_EQ(hipSuccess, hipMalloc((void**)&m_local, 64));
        ASSERT_EQ(UCS_OK, span_vmm_copy_create(
                                  span_vendor_vmm_copy(UCS_MEMORY_TYPE_ROCM),
                                  &span_test_copy_params, &m_copy));
    }

    void TearDown() override
    {
        if (m_copy != nullptr) {
            span_vmm_copy_destroy(m_copy);
        }
        span_vmm_cache_purge();
        if (m_md != nullptr) {
            test_rocm_md_free(m_md);
        }
        if (m_local != nullptr) {
            EXPECT_EQ(hipSuccess, hipFree(m_local));
        }
        for (unsigned i = 0; (m_base != nullptr) && (i < count); ++i) {
            if (m_handles[i] != nullptr) {
                EXPECT_EQ(hipSuccess, hipMemUnmap(m_base + (i * handle),
                                                  handle));
                EXPECT_EQ(hipSuccess, hipMemRelease(m_handles[i]));
            }
        }
        if (m_base != nullptr) {
            EXPECT_EQ(hipSuccess, hipMemAddressFree(m_base, count * handle));
        }
    }

    /* A zcopy op of the twin on an imported VMM key: checked against the
     * key's extent, then copied through the mapping */
    ucs_status_t op(const span_rkey_t *rkey, int is_put, uint64_t addr,
                    size_t length)
    {
        uct_iov_t iov = {m_local, length, nullptr, 0, 1};
        struct {
            uct_completion_t comp;
            int              done;
        } c = {{[](uct_completion_t *self) {
                    ((decltype(c)*)self)->done = 1;
                }, 1, UCS_OK}, 0};
        deadline guard(30, "a ROCm VMM op");
        ucs_status_t status;

        if (!span_rkey_check(rkey, addr, length)) {
            return UCS_ERR_INVALID_ADDR;
        }
        status = span_vmm_copy_post(m_copy, rkey->vmm, is_put, &iov, 1,
                                    (uint8_t*)rkey->vmm->base +
                                    (addr - rkey->geom.base), &c.comp);
        while ((status == UCS_INPROGRESS) && !c.done) {
            span_vmm_copy_progress(m_copy);
        }
        return (status == UCS_INPROGRESS) ? c.comp.status : status;
    }

    char                            *m_base = nullptr;
    hipMemGenericAllocationHandle_t m_handles[count] = {};
    uint8_t                         *m_local = nullptr;
    span_vmm_copy_t                 *m_copy  = nullptr;
    test_rocm_md_t                  *m_md    = nullptr;
};

TEST_F(rocm_bounds, a_vmm_sub_range_is_served_alone)
{
    const size_t start = MiB + 13, length = 2 * handle;
    const uint64_t first = (uintptr_t)m_base + start;
    std::vector<uint8_t> key(SPAN_RKEY_MAX_SIZE), ones(64, 0xee);
    std::vector<uint8_t> before(count * handle), local(64);
    std::vector<span_vmm_key_t> keys;
    span_rkey_desc_t desc;
    unsigned refused = 0;

    ASSERT_EQ(UCS_OK, test_rocm_md_pack(m_base + start, length, key.data(),
                                        &m_md));
    ASSERT_EQ(UCS_OK, span_rkey_parse(key.data(), key.size(), &desc));
    ASSERT_TRUE(desc.span_vmm);
    ASSERT_EQ(3u, desc.geom.num_chunks) << "the handles under the range";
    keys.resize(desc.geom.num_chunks);
    ASSERT_EQ(UCS_OK, span_rkey_vmm_keys(&desc, keys.data()));
    span_vmm_keys_mark(keys.data(), keys.size(), SPAN_ROCM_VMM_MAGIC);

    /* as span_rkey_unpack makes it, in the exporter itself */
    std::vector<uint8_t> storage(sizeof(span_rkey_t));
    span_rkey_t *rkey = (span_rkey_t*)storage.data();
    memset(rkey, 0, sizeof(*rkey));
    ASSERT_EQ(UCS_OK, span_vmm_cache_get(keys.data(), &desc.geom,
                                         &rkey->vmm));
    span_rkey_init(rkey, &desc);

    for (size_t i = 0; i < before.size(); ++i) {
        before[i] = (uint8_t)(i * 7 + 1);
    }
    memcpy(m_base, before.data(), before.size());
    ASSERT_EQ(hipSuccess, hipMemcpy(m_local, ones.data(), ones.size(),
                                    hipMemcpyDefault));
    for (size_t len = 1; len <= 64; ++len) {
        for (uint64_t addr : {first - len, first + length}) {
            for (int is_put = 0; is_put < 2; ++is_put) {
                ucs_status_t status = op(rkey, is_put, addr, len);
                EXPECT_EQ(UCS_ERR_INVALID_ADDR, status)
                        << (is_put ? "put" : "get") << " of " << len
                        << " bytes at " << (int64_t)(addr - first)
                        << " from the registration";
                refused += (status == UCS_ERR_INVALID_ADDR);
            }
        }
    }
    EXPECT_EQ(256u, refused);
    EXPECT_EQ(0, memcmp(before.data(), m_base, before.size()))
            << "a put wrote outside the registration";
    ASSERT_EQ(hipSuccess, hipMemcpy(local.data(), m_local, local.size(),
                                    hipMemcpyDefault));
    EXPECT_EQ(ones, local) << "a get read outside the registration";

    /* its first and last bytes are served */
    EXPECT_EQ(UCS_OK, op(rkey, 0, first, 64));
    ASSERT_EQ(hipSuccess, hipMemcpy(local.data(), m_local, local.size(),
                                    hipMemcpyDefault));
    EXPECT_EQ(0, memcmp(before.data() + start, local.data(), 64));
    EXPECT_EQ(UCS_OK, op(rkey, 1, first + length - 64, 64));
    span_vmm_cache_put(rkey->vmm);
}

/* UCP registers a few bytes past the device memory it allocates itself
 * (ucp_mem_map with ALLOCATE, as ucx_perftest -m cuda does), which the
 * native transport takes: the key serves the range up to the end of the
 * last allocation, and nothing past it */
TEST_F(rocm_bounds, a_range_past_the_last_allocation_ends_with_it)
{
    const size_t start = 3 * handle + 5, length = handle - 5 + 8;
    const uint64_t first = (uintptr_t)m_base + start;
    std::vector<uint8_t> key(SPAN_RKEY_MAX_SIZE);
    std::vector<uint8_t> storage(sizeof(span_rkey_t));
    span_rkey_t *rkey = (span_rkey_t*)storage.data();
    span_rkey_desc_t desc;

    ASSERT_EQ(UCS_OK, test_rocm_md_pack(m_base + start, length, key.data(),
                                        &m_md));
    ASSERT_EQ(UCS_OK, span_rkey_parse(key.data(), key.size(), &desc));
    EXPECT_EQ(first, desc.win_base);
    EXPECT_EQ(handle - 5, desc.win_length);
    memset(rkey, 0, sizeof(*rkey));
    span_rkey_init(rkey, &desc);
    EXPECT_TRUE(span_rkey_check(rkey, first, handle - 5));
    EXPECT_FALSE(span_rkey_check(rkey, first + handle - 5, 1));
    EXPECT_FALSE(span_rkey_check(rkey, first, length));
}

} // namespace
