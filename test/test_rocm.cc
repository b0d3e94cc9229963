/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The ROCm resolver against the emulated runtime (test/rocm_emu): the
 * units under hipMalloc memory and VMM ranges as span registers them, the
 * buffer ids that tell memory allocated again at the same address from the
 * old, the registry's lookups inside units by those ids, and the export of
 * VMM units; with the runtime's failures injected.
 */
#include <gtest/gtest.h>

#include <hip/hip_runtime_api.h>
#include <hsa/hsa.h>

extern "C" {
#include "resolve/span_rocm.h"
#include "vendor/span_vendor.h"
#include "md/span_registry.h"
#include "md/span_md_reg.h"
#include "rocm_emu/hsa_emu.h"
}

#include <sys/stat.h>
#include <unistd.h>

#include <vector>

namespace {

constexpr uint64_t KiB = 1ull << 10;
constexpr uint64_t MiB = 1ull << 20;

/* A VMM range of handles of one device, back to back */
struct vmm_range {
    std::vector<hipMemGenericAllocationHandle_t> handles;
    char     *base = nullptr;
    uint64_t size  = 0;

    void map(const std::vector<uint64_t> &sizes,
             hipMemAllocationHandleType type =
                     hipMemHandleTypePosixFileDescriptor,
             int device = 0)
    {
        hipMemAllocationProp prop = {};
        hipMemAccessDesc access   = {};
        uint64_t offset           = 0;

        for (uint64_t s : sizes) {
            size += s;
        }
        prop.type                = hipMemAllocationTypePinned;
        prop.location.type       = hipMemLocationTypeDevice;
        prop.location.id         = device;
        prop.requestedHandleType = type;
        ASSERT_EQ(hipSuccess, hipMemAddressReserve((void**)&base, size, 0,
                                                   nullptr, 0));
        for (uint64_t s : sizes) {
            handles.push_back(nullptr);
            ASSERT_EQ(hipSuccess, hipMemCreate(&handles.back(), s, &prop, 0));
            ASSERT_EQ(hipSuccess, hipMemMap(base + offset, s, 0,
                                            handles.back(), 0));
            offset += s;
        }
        access.location.type = hipMemLocationTypeDevice;
        access.location.id   = device;
        access.flags         = hipMemAccessFlagsProtReadWrite;
        ASSERT_EQ(hipSuccess, hipMemSetAccess(base, size, &access, 1));
    }

    /* unit i replaced by a new handle of its size at the same address */
    void remap(unsigned i, uint64_t unit)
    {
        hipMemAllocationProp prop = {};
        hipMemAccessDesc access   = {};

        prop.type                = hipMemAllocationTypePinned;
        prop.location.type       = hipMemLocationTypeDevice;
        prop.requestedHandleType = hipMemHandleTypePosixFileDescriptor;
        ASSERT_EQ(hipSuccess, hipMemUnmap(base + i * unit, unit));
        ASSERT_EQ(hipSuccess, hipMemRelease(handles[i]));
        ASSERT_EQ(hipSuccess, hipMemCreate(&handles[i], unit, &prop, 0));
        ASSERT_EQ(hipSuccess,
                  hipMemMap(base + i * unit, unit, 0, handles[i], 0));
        access.location.type = hipMemLocationTypeDevice;
        access.flags         = hipMemAccessFlagsProtReadWrite;
        ASSERT_EQ(hipSuccess,
                  hipMemSetAccess(base + i * unit, unit, &access, 1));
    }

    ~vmm_range()
    {
        if (base == nullptr) {
            return;
        }
        EXPECT_EQ(hipSuccess, hipMemUnmap(base, size));
        for (auto h : handles) {
            EXPECT_EQ(hipSuccess, hipMemRelease(h));
        }
        EXPECT_EQ(hipSuccess, hipMemAddressFree(base, size));
    }
};

class rocm_resolver : public ::testing::Test {
protected:
    const span_device_ops_t *ops = nullptr;

    void SetUp() override
    {
        ASSERT_EQ(0, hsa_emu_fail(nullptr));
        ASSERT_EQ(hipSuccess, hipSetDevice(0));
        ops = span_vendor_driver(UCS_MEMORY_TYPE_ROCM);
        ASSERT_NE(nullptr, ops) << "the emulated HIP library loads";
    }

    void TearDown() override
    {
        hsa_emu_fail(nullptr);
    }

    uint64_t buffer_id(const void *addr)
    {
        uint64_t id = 0;

        EXPECT_EQ(UCS_OK, ops->buffer_id((uintptr_t)addr, &id));
        return id;
    }
};

TEST_F(rocm_resolver, a_buffer_inside_an_allocation_is_the_allocation)
{
    span_device_extent_t extent;
    char *a, *b;

    ASSERT_EQ(hipSuccess, hipMalloc((void**)&a, 6 * MiB));
    /* a layer view at an odd offset, as MoRI-IO's XGMI path took one */
    ASSERT_EQ(UCS_OK, span_device_resolve(ops, (uintptr_t)a + 1234567, 3 * MiB,
                                          &extent));
    EXPECT_EQ((uintptr_t)a, extent.base);
    EXPECT_EQ(6 * MiB, extent.length);
    EXPECT_EQ(1u, extent.num_units);
    EXPECT_EQ(0u, extent.unit_size);
    EXPECT_EQ(span_device_identity_add(SPAN_DEVICE_IDENTITY_INIT, buffer_id(a)),
              extent.identity);

    /* freed and allocated again at the same address: other memory */
    uint64_t identity = extent.identity;
    ASSERT_EQ(hipSuccess, hipFree(a));
    ASSERT_EQ(hipSuccess, hipMalloc((void**)&b, 6 * MiB));
    ASSERT_EQ(a, b);
    ASSERT_EQ(UCS_OK, span_device_resolve(ops, (uintptr_t)b + 1234567, 3 * MiB,
                                          &extent));
    EXPECT_NE(identity, extent.identity);
    EXPECT_EQ(hipSuccess, hipFree(b));
}

/* uct_md_mem_reg (and UCP of UCX 1.21 and older) names no memory type:
 * the twin finds it, as rocm_ipc does (issue 38 E) */
TEST_F(rocm_resolver, a_registration_that_names_no_memory_type_finds_it)
{
    span_md_t smd             = {};
    smd.device                  = ops;
    smd.dev_mem_type          = UCS_MEMORY_TYPE_ROCM;
    uct_md_mem_reg_params_t none  = {};
    uct_md_mem_reg_params_t named = {};
    named.field_mask          = UCT_MD_MEM_REG_FIELD_MEM_TYPE;
    named.mem_type            = UCS_MEMORY_TYPE_HOST;
    void *dev = nullptr;
    std::vector<char> host(4096), locked(64 * KiB);

    ASSERT_EQ(hipSuccess, hipMalloc(&dev, 1 << 20));
    ASSERT_EQ(hipSuccess, hipHostRegister(locked.data(), locked.size(), 0));
    EXPECT_EQ(UCS_MEMORY_TYPE_ROCM,
              span_md_reg_mem_type(&smd, &none, (char*)dev + 4096));
    EXPECT_EQ(UCS_MEMORY_TYPE_HOST,
              span_md_reg_mem_type(&smd, &none, host.data()));
    EXPECT_EQ(UCS_MEMORY_TYPE_HOST,
              span_md_reg_mem_type(&smd, &none, locked.data()));
    EXPECT_EQ(UCS_MEMORY_TYPE_HOST, span_md_reg_mem_type(&smd, &named, dev));
    named.mem_type = UCS_MEMORY_TYPE_UNKNOWN;
    EXPECT_EQ(UCS_MEMORY_TYPE_ROCM, span_md_reg_mem_type(&smd, &named, dev));
    smd.device = nullptr; /* no driver: host, as before */
    EXPECT_EQ(UCS_MEMORY_TYPE_HOST, span_md_reg_mem_type(&smd, &none, dev));
    EXPECT_EQ(hipSuccess, hipHostUnregister(locked.data()));
    EXPECT_EQ(hipSuccess, hipFree(dev));
}

TEST_F(rocm_resolver, host_memory_is_not_resolved)
{
    std::vector<char> host(64 * KiB);
    span_device_extent_t extent;

    EXPECT_EQ(UCS_ERR_INVALID_ADDR,
              span_device_resolve(ops, (uintptr_t)host.data(), host.size(),
                                  &extent));
}

/* Host memory of hipHostRegister, which HIP knows by its host and by its
 * device pointer (another address where the GPU maps it elsewhere): by
 * neither is it a device allocation, whatever range and buffer id HIP
 * tells for it */
TEST_F(rocm_resolver, host_registered_memory_is_not_resolved)
{
    std::vector<char> host(256 * KiB);
    span_device_extent_t extent = {};
    char *dptr = nullptr;

    ASSERT_EQ(hipSuccess, hipHostRegister(host.data(), host.size(), 0));
    ASSERT_EQ(hipSuccess, hipHostGetDevicePointer((void**)&dptr, host.data(),
                                                  0));
    EXPECT_NE(host.data(), dptr) << "the emulator's agent pointer";
    for (char *p : {host.data(), dptr}) {
        EXPECT_EQ(UCS_ERR_INVALID_ADDR,
                  span_device_resolve(ops, (uintptr_t)p + 100, 64 * KiB,
                                      &extent))
                << (void*)p << ": a unit at 0x" << std::hex << extent.base
                << " of " << std::dec << extent.num_units;
    }
    EXPECT_EQ(hipSuccess, hipHostUnregister(host.data()));
}

TEST_F(rocm_resolver, vmm_units_of_one_size)
{
    span_device_extent_t extent;
    vmm_range r;
    int device = -1;

    ASSERT_NO_FATAL_FAILURE(r.map(std::vector<uint64_t>(16, 256 * KiB)));
    ASSERT_EQ(UCS_OK,
              span_device_resolve(ops, (uintptr_t)r.base, r.size, &extent));
    EXPECT_EQ((uintptr_t)r.base, extent.base);
    EXPECT_EQ(r.size, extent.length);
    EXPECT_EQ(16u, extent.num_units);
    EXPECT_EQ(256 * KiB, extent.unit_size);

    /* an odd interior range over units 3 to 5: those units, whole */
    ASSERT_EQ(UCS_OK, span_device_resolve(ops,
                                          (uintptr_t)r.base + 3 * 256 * KiB + 7,
                                          2 * 256 * KiB, &extent));
    EXPECT_EQ((uintptr_t)r.base + 3 * 256 * KiB, extent.base);
    EXPECT_EQ(3u, extent.num_units);

    ASSERT_EQ(UCS_OK, ops->vmm_device((uintptr_t)r.base + 5, &device));
    EXPECT_EQ(0, device);
}

TEST_F(rocm_resolver, a_request_for_one_vmm_handle_is_widened)
{
    span_device_widen_limits_t limits = {UINT64_MAX, 1024};
    span_device_extent_t extent;
    vmm_range r;

    ASSERT_NO_FATAL_FAILURE(r.map({2 * MiB, 2 * MiB, 2 * MiB, 1 * MiB}));
    /* what UCP asks for by default: the handle under the first byte */
    ASSERT_EQ(UCS_OK, span_device_resolve(ops, (uintptr_t)r.base, 2 * MiB,
                                          &extent));
    EXPECT_EQ(3u, span_device_widen(ops, &extent, &limits));
    EXPECT_EQ(4u, extent.num_units);
    EXPECT_EQ(7 * MiB, extent.length);
    EXPECT_EQ(2 * MiB, extent.unit_size);
}

TEST_F(rocm_resolver, vmm_handles_not_made_for_posix_fds)
{
    span_device_widen_limits_t limits = {UINT64_MAX, 1024};
    span_device_extent_t extent;
    vmm_range r;
    int device;
    int fd;

    ASSERT_NO_FATAL_FAILURE(r.map({1 * MiB, 1 * MiB}, hipMemHandleTypeNone));
    EXPECT_EQ(UCS_ERR_UNSUPPORTED, ops->vmm_device((uintptr_t)r.base, &device));
    ASSERT_EQ(UCS_OK, span_device_resolve(ops, (uintptr_t)r.base, 1 * MiB,
                                          &extent));
    EXPECT_EQ(0u, span_device_widen(ops, &extent, &limits)) << "not exported";
    EXPECT_EQ(UCS_ERR_UNSUPPORTED,
              span_rocm_vmm_export_fd((uintptr_t)r.base, &fd));
}

TEST_F(rocm_resolver, allocations_of_several_sizes)
{
    span_device_extent_t extent;
    char *a, *b;

    /* back to back in the emulator's arena, as UCP's memtype cache may
     * merge two neighbours into one region it registers whole */
    ASSERT_EQ(hipSuccess, hipMalloc((void**)&a, 1 * MiB));
    ASSERT_EQ(hipSuccess, hipMalloc((void**)&b, 3 * MiB));
    ASSERT_EQ(a + 1 * MiB, b);
    ASSERT_EQ(UCS_OK, span_device_resolve(ops, (uintptr_t)a, 4 * MiB, &extent));
    EXPECT_EQ(2u, extent.num_units);
    EXPECT_EQ(1 * MiB, extent.unit_size) << "cut at the sizes' common divisor";
    EXPECT_EQ(4 * MiB, extent.length);
    EXPECT_EQ(hipSuccess, hipFree(a));
    EXPECT_EQ(hipSuccess, hipFree(b));
}

TEST_F(rocm_resolver, runtime_failures)
{
    span_device_extent_t extent;
    vmm_range r;
    char *a;

    ASSERT_EQ(hipSuccess, hipMalloc((void**)&a, 1 * MiB));
    ASSERT_EQ(0, hsa_emu_fail("hipPointerGetAttribute"));
    EXPECT_EQ(UCS_ERR_INVALID_ADDR,
              span_device_resolve(ops, (uintptr_t)a, 1 * MiB, &extent))
            << "no buffer id: not resolved";
    ASSERT_EQ(0, hsa_emu_fail("hipMemGetAddressRange"));
    EXPECT_EQ(UCS_ERR_INVALID_ADDR,
              span_device_resolve(ops, (uintptr_t)a, 1 * MiB, &extent));
    ASSERT_EQ(0, hsa_emu_fail(nullptr));
    EXPECT_EQ(hipSuccess, hipFree(a));

    /* the runtime stops answering at the third unit: the units found */
    ASSERT_NO_FATAL_FAILURE(r.map(std::vector<uint64_t>(4, 64 * KiB)));
    ASSERT_EQ(0, hsa_emu_fail("hipMemGetAddressRange@3+"));
    ASSERT_EQ(UCS_OK,
              span_device_resolve(ops, (uintptr_t)r.base, r.size, &extent));
    EXPECT_EQ(2u, extent.num_units);
    EXPECT_EQ(128 * KiB, extent.length);
}

TEST_F(rocm_resolver, vmm_export_fd)
{
    struct stat st;
    vmm_range r;
    int fd = -1;
    char *a;

    ASSERT_NO_FATAL_FAILURE(r.map({1 * MiB, 2 * MiB}));
    ASSERT_EQ(UCS_OK,
              span_rocm_vmm_export_fd((uintptr_t)r.base + 1 * MiB, &fd));
    ASSERT_EQ(0, fstat(fd, &st));
    EXPECT_EQ((off_t)(2 * MiB), st.st_size) << "the handle of the second unit";
    close(fd);

    ASSERT_EQ(hipSuccess, hipMalloc((void**)&a, 1 * MiB));
    EXPECT_EQ(UCS_ERR_UNSUPPORTED, span_rocm_vmm_export_fd((uintptr_t)a, &fd))
            << "hipMalloc memory is no VMM handle";
    EXPECT_EQ(hipSuccess, hipFree(a));

    ASSERT_EQ(0, hsa_emu_fail("hipMemExportToShareableHandle"));
    EXPECT_EQ(UCS_ERR_IO_ERROR, span_rocm_vmm_export_fd((uintptr_t)r.base, &fd))
            << "a failure of the runtime, not a handle that cannot be shared";
}

/* The registry as a twin MD fills it: an entry per registration, its units
 * indexed by HIP buffer ids, checked with the resolver */
const span_device_ops_t *registry_ops;

int rocm_unit_holds(const void *owner, uint64_t addr, uint64_t id)
{
    uint64_t now;

    return (registry_ops->buffer_id(addr, &now) == UCS_OK) && (now == id);
}

struct rocm_entry {
    span_registry_entry_t             entry{};
    std::vector<span_registry_unit_t> units;
    span_registry_stats_t             stats{};

    rocm_entry(const void *owner, const span_device_extent_t &extent)
        : units(extent.num_units)
    {
        for (uint32_t i = 0; i < extent.num_units; ++i) {
            EXPECT_EQ(UCS_OK, registry_ops->buffer_id(
                                      extent.base + i * extent.unit_size,
                                      &units[i].id));
        }
        entry.owner     = owner;
        entry.start     = extent.base;
        entry.length    = extent.length;
        entry.mem_type  = UCS_MEMORY_TYPE_ROCM;
        entry.identity  = extent.identity;
        entry.caps      = 1;
        entry.unit_size = extent.unit_size;
        entry.num_units = extent.num_units;
        entry.units     = units.data();
        entry.stats     = &stats;
        span_registry_add(&entry);
    }
};

TEST_F(rocm_resolver, registry_units_by_buffer_id)
{
    static const int owner = 0;
    span_registry_entry_t *found;
    span_device_extent_t extent;
    uint64_t unit = 512 * KiB;
    vmm_range r;

    registry_ops = ops;
    ASSERT_NO_FATAL_FAILURE(r.map(std::vector<uint64_t>(8, unit)));
    ASSERT_EQ(UCS_OK,
              span_device_resolve(ops, (uintptr_t)r.base, r.size, &extent));
    rocm_entry reg(&owner, extent);

    /* a tensor inside unit 5, and one over units 2 to 4 */
    found = span_registry_find_within(&owner, (uintptr_t)r.base + 5 * unit + 99,
                                      1000, UCS_MEMORY_TYPE_ROCM,
                                      buffer_id(r.base + 5 * unit), 1,
                                      rocm_unit_holds);
    EXPECT_EQ(&reg.entry, found);
    if (found != nullptr) {
        EXPECT_EQ(0, span_registry_release(found));
    }
    found = span_registry_find_within(&owner, (uintptr_t)r.base + 2 * unit + 1,
                                      2 * unit, UCS_MEMORY_TYPE_ROCM,
                                      buffer_id(r.base + 2 * unit), 1,
                                      rocm_unit_holds);
    EXPECT_EQ(&reg.entry, found);
    if (found != nullptr) {
        EXPECT_EQ(0, span_registry_release(found));
    }

    /* unit 6 unmapped and another handle mapped there: a buffer inside it
     * has another id and misses; one from unit 5 into it finds the entry
     * stale */
    ASSERT_NO_FATAL_FAILURE(r.remap(6, unit));
    EXPECT_EQ(nullptr, span_registry_find_within(
                               &owner, (uintptr_t)r.base + 6 * unit, 100,
                               UCS_MEMORY_TYPE_ROCM,
                               buffer_id(r.base + 6 * unit),
                               1, rocm_unit_holds));
    EXPECT_EQ(nullptr, span_registry_find_within(
                               &owner, (uintptr_t)r.base + 5 * unit, 2 * unit,
                               UCS_MEMORY_TYPE_ROCM,
                               buffer_id(r.base + 5 * unit),
                               1, rocm_unit_holds));
    EXPECT_FALSE(span_registry_valid(&reg.entry));
    EXPECT_EQ(nullptr, span_registry_find_within(
                               &owner, (uintptr_t)r.base + 5 * unit + 99, 1000,
                               UCS_MEMORY_TYPE_ROCM,
                               buffer_id(r.base + 5 * unit),
                               1, rocm_unit_holds))
            << "a stale entry serves nobody";
    EXPECT_EQ(1, span_registry_release(&reg.entry));
}

} // namespace
