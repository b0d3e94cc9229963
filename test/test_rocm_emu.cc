/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The emulated ROCm runtime itself (test/rocm_emu): the contracts UCX's
 * rocm modules and span rely on, checked where a real runtime would be, and
 * the failures a test may inject. Cross-process cases run a second process
 * (this program again, test_rocm_child.h).
 */
#include "test_rocm_child.h"

#include <gtest/gtest.h>

#include <hip/hip_runtime_api.h>
#include <hsa/hsa.h>
#include <hsa/hsa_ext_amd.h>

extern "C" {
#include "rocm_emu/hsa_emu.h"
}

#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

constexpr size_t KiB = 1ul << 10;
constexpr size_t MiB = 1ul << 20;

hsa_status_t collect_agent(hsa_agent_t agent, void *data)
{
    static_cast<std::vector<hsa_agent_t>*>(data)->push_back(agent);
    return HSA_STATUS_SUCCESS;
}

std::vector<hsa_agent_t> agents()
{
    std::vector<hsa_agent_t> list;

    EXPECT_EQ(HSA_STATUS_SUCCESS, hsa_iterate_agents(collect_agent, &list));
    return list;
}

hsa_device_type_t agent_type(hsa_agent_t agent)
{
    hsa_device_type_t type;

    EXPECT_EQ(HSA_STATUS_SUCCESS,
              hsa_agent_get_info(agent, HSA_AGENT_INFO_DEVICE, &type));
    return type;
}

hsa_amd_pointer_info_t pointer_info(const void *ptr)
{
    hsa_amd_pointer_info_t info = {};

    info.size = sizeof(info);
    EXPECT_EQ(HSA_STATUS_SUCCESS,
              hsa_amd_pointer_info(ptr, &info, nullptr, nullptr, nullptr));
    return info;
}

void *device_alloc(int device, size_t size)
{
    void *ptr = nullptr;

    EXPECT_EQ(hipSuccess, hipSetDevice(device));
    EXPECT_EQ(hipSuccess, hipMalloc(&ptr, size));
    return ptr;
}

class rocm_emu : public ::testing::Test {
protected:
    void SetUp() override
    {
        ASSERT_EQ(0, hsa_emu_fail(nullptr));
        ASSERT_EQ(HSA_STATUS_SUCCESS, hsa_init());
        ASSERT_EQ(0, hsa_emu_set("fault", 1)); /* faults return errors */
        ASSERT_EQ(0, hsa_emu_set("copy_delay_us", 0));
    }

    void TearDown() override
    {
        hsa_emu_fail(nullptr);
        EXPECT_EQ(HSA_STATUS_SUCCESS, hsa_shut_down());
    }
};

TEST_F(rocm_emu, agents_and_pools)
{
    std::vector<hsa_agent_t> list = agents();
    hsa_amd_memory_pool_link_info_t link;
    hsa_amd_memory_pool_t pool;
    uint32_t bdf[2], flags;
    char name[64];
    bool allowed;

    ASSERT_EQ(3u, list.size()) << "a CPU and HSA_EMU_GPUS=2 GPUs";
    EXPECT_EQ(HSA_DEVICE_TYPE_CPU, agent_type(list[0]));
    for (int i = 1; i <= 2; ++i) {
        EXPECT_EQ(HSA_DEVICE_TYPE_GPU, agent_type(list[i]));
        ASSERT_EQ(HSA_STATUS_SUCCESS,
                  hsa_agent_get_info(list[i], HSA_AGENT_INFO_NAME, name));
        EXPECT_STREQ("gfx90a", name);
        ASSERT_EQ(HSA_STATUS_SUCCESS,
                  hsa_agent_get_info(list[i],
                                     (hsa_agent_info_t)HSA_AMD_AGENT_INFO_BDFID,
                                     &bdf[i - 1]));
        ASSERT_EQ(HSA_STATUS_INFO_BREAK,
                  hsa_amd_agent_iterate_memory_pools(
                          list[i],
                          [](hsa_amd_memory_pool_t p, void *data) {
                              *(hsa_amd_memory_pool_t*)data = p;
                              return HSA_STATUS_INFO_BREAK;
                          },
                          &pool));
        ASSERT_EQ(HSA_STATUS_SUCCESS,
                  hsa_amd_memory_pool_get_info(
                          pool, HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS, &flags));
        EXPECT_EQ(HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED, flags);
        ASSERT_EQ(HSA_STATUS_SUCCESS,
                  hsa_amd_memory_pool_get_info(
                          pool, HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED,
                          &allowed));
        EXPECT_TRUE(allowed);
        ASSERT_EQ(HSA_STATUS_SUCCESS,
                  hsa_amd_agent_memory_pool_get_info(
                          list[1], pool,
                          HSA_AMD_AGENT_MEMORY_POOL_INFO_LINK_INFO, &link));
        EXPECT_EQ(HSA_AMD_LINK_INFO_TYPE_PCIE, link.link_type);
    }
    EXPECT_NE(bdf[0], bdf[1]) << "one bus id per device";
}

TEST_F(rocm_emu, allocations_and_pointer_info)
{
    std::vector<hsa_agent_t> list = agents();
    char *a0 = (char*)device_alloc(0, 3 * MiB);
    char *a1 = (char*)device_alloc(1, 1 * MiB);
    unsigned long long id0, id1;
    hsa_amd_pointer_info_t info;
    hipDeviceptr_t base;
    size_t size;
    int stack = 0, ordinal;

    ASSERT_NE(nullptr, a0);
    ASSERT_NE(nullptr, a1);
    info = pointer_info(a0 + 12345);
    EXPECT_EQ(HSA_EXT_POINTER_TYPE_HSA, info.type);
    EXPECT_EQ(a0, info.agentBaseAddress);
    EXPECT_EQ(3 * MiB, info.sizeInBytes);
    EXPECT_EQ(list[1].handle, info.agentOwner.handle);
    info = pointer_info(a1 + 1 * MiB - 1);
    EXPECT_EQ(a1, info.agentBaseAddress);
    EXPECT_EQ(list[2].handle, info.agentOwner.handle);
    EXPECT_GE(std::labs(a1 - a0), (long)(3 * MiB)) << "own address ranges";

    ASSERT_EQ(hipSuccess, hipMemGetAddressRange(&base, &size, a0 + 2 * MiB));
    EXPECT_EQ(a0, base);
    EXPECT_EQ(3 * MiB, size);
    ASSERT_EQ(hipSuccess,
              hipPointerGetAttribute(&ordinal,
                                     HIP_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                     a1 + 5));
    EXPECT_EQ(1, ordinal);
    ASSERT_EQ(hipSuccess,
              hipPointerGetAttribute(&id0, HIP_POINTER_ATTRIBUTE_BUFFER_ID,
                                     a0));
    ASSERT_EQ(hipSuccess,
              hipPointerGetAttribute(&id1, HIP_POINTER_ATTRIBUTE_BUFFER_ID,
                                     a1));
    EXPECT_NE(id0, id1);

    EXPECT_EQ(HSA_EXT_POINTER_TYPE_UNKNOWN, pointer_info(&stack).type);
    EXPECT_EQ(hipErrorNotFound, hipMemGetAddressRange(&base, &size, &stack));

    /* freed: unknown, and the next allocation of its size lands there with
     * another buffer id */
    ASSERT_EQ(hipSuccess, hipFree(a0));
    EXPECT_EQ(HSA_EXT_POINTER_TYPE_UNKNOWN, pointer_info(a0 + 12345).type);
    EXPECT_EQ(hipErrorNotFound, hipMemGetAddressRange(&base, &size, a0));
    EXPECT_EQ(hipErrorInvalidValue, hipFree(a0)) << "freed twice";
    char *again = (char*)device_alloc(0, 3 * MiB);
    EXPECT_EQ(a0, again);
    ASSERT_EQ(hipSuccess,
              hipPointerGetAttribute(&id1, HIP_POINTER_ATTRIBUTE_BUFFER_ID,
                                     again));
    EXPECT_NE(id0, id1);
    EXPECT_EQ(hipSuccess, hipFree(again));
    EXPECT_EQ(hipSuccess, hipFree(a1));
}

TEST_F(rocm_emu, pointer_info_of_an_older_caller)
{
    void *a = device_alloc(0, 64 * KiB);
    hsa_amd_pointer_info_t info;

    /* a caller built with a shorter structure: nothing past its size */
    memset(&info, 0xab, sizeof(info));
    info.size = offsetof(hsa_amd_pointer_info_t, userData);
    ASSERT_EQ(HSA_STATUS_SUCCESS,
              hsa_amd_pointer_info(a, &info, nullptr, nullptr, nullptr));
    EXPECT_EQ(offsetof(hsa_amd_pointer_info_t, userData), info.size);
    EXPECT_EQ(64 * KiB, info.sizeInBytes);
    EXPECT_EQ(0xababababababababull, info.agentOwner.handle);
    EXPECT_EQ(hipSuccess, hipFree(a));
}

TEST_F(rocm_emu, ipc_create_takes_whole_allocations_only)
{
    char *a = (char*)device_alloc(0, 2 * MiB);
    hsa_amd_ipc_memory_t handle;

    EXPECT_EQ(HSA_STATUS_ERROR_INVALID_ARGUMENT,
              hsa_amd_ipc_memory_create(a + 4 * KiB, 2 * MiB - 4 * KiB,
                                        &handle))
            << "an interior pointer";
    EXPECT_EQ(HSA_STATUS_ERROR_INVALID_ARGUMENT,
              hsa_amd_ipc_memory_create(a, 1 * MiB, &handle))
            << "part of the allocation";
    EXPECT_EQ(HSA_STATUS_SUCCESS,
              hsa_amd_ipc_memory_create(a, 2 * MiB, &handle));
    EXPECT_EQ(hipSuccess, hipFree(a));
    EXPECT_EQ(HSA_STATUS_ERROR_INVALID_ARGUMENT,
              hsa_amd_ipc_memory_create(a, 2 * MiB, &handle)) << "freed";
}

void fill(void *ptr, size_t size, uint8_t seed)
{
    for (size_t i = 0; i < size; ++i) {
        ((uint8_t*)ptr)[i] = (uint8_t)(seed + i * 7);
    }
}

size_t mismatches(const void *ptr, size_t size, uint8_t seed)
{
    size_t bad = 0;

    for (size_t i = 0; i < size; ++i) {
        bad += ((const uint8_t*)ptr)[i] != (uint8_t)(seed + i * 7);
    }
    return bad;
}

/* A device copy of size bytes, waited for where it started: its status */
hsa_status_t copied(void *dst, hsa_agent_t dst_agent, const void *src,
                    hsa_agent_t src_agent, size_t size)
{
    hsa_signal_t done;
    hsa_status_t status;

    EXPECT_EQ(HSA_STATUS_SUCCESS, hsa_signal_create(1, 0, nullptr, &done));
    status = hsa_amd_memory_async_copy(dst, dst_agent, src, src_agent, size, 0,
                                       nullptr, done);
    if (status == HSA_STATUS_SUCCESS) {
        EXPECT_EQ(0, hsa_signal_wait_scacquire(done, HSA_SIGNAL_CONDITION_EQ,
                                               0, UINT64_MAX,
                                               HSA_WAIT_STATE_BLOCKED));
    }
    hsa_signal_destroy(done);
    return status;
}

/* Bytes wrong after a device copies size bytes from locked host memory
 * (host) through its agent pointer into dev, and new ones back the same
 * way: what a device writes there the CPU reads at the host pointer */
size_t wrong_both_ways(const std::vector<hsa_agent_t> &list, char *host,
                       char *agent, char *dev, size_t size, uint8_t seed)
{
    size_t wrong;

    fill(host, size, seed);
    EXPECT_EQ(HSA_STATUS_SUCCESS, copied(dev, list[1], agent, list[0], size));
    wrong = mismatches(dev, size, seed);
    fill(dev, size, seed + 1);
    EXPECT_EQ(HSA_STATUS_SUCCESS, copied(agent, list[0], dev, list[1], size));
    return wrong + mismatches(host, size, seed + 1);
}

TEST_F(rocm_emu, ipc_across_processes)
{
    char *a = (char*)device_alloc(1, 3 * MiB);
    hsa_amd_ipc_memory_t handle;

    fill(a, 3 * MiB, 11);
    ASSERT_EQ(HSA_STATUS_SUCCESS,
              hsa_amd_ipc_memory_create(a, 3 * MiB, &handle));
    /* the child attaches, checks the bytes, writes its own in the middle
     * MiB and detaches */
    EXPECT_EQ(0, test_rocm_child_run({"ipc_rw", test_rocm_hex(&handle,
                                                               sizeof(handle)),
                                     std::to_string(3 * MiB)}));
    EXPECT_EQ(0u, mismatches(a, 1 * MiB, 11));
    EXPECT_EQ(0u, mismatches(a + 1 * MiB, 1 * MiB, 99));
    EXPECT_EQ(0u,
              mismatches(a + 2 * MiB, 1 * MiB, (uint8_t)(11 + 2 * MiB * 7)));
    EXPECT_EQ(hipSuccess, hipFree(a));
    /* the exporter freed it: nobody holds it, the handle is stale */
    EXPECT_EQ(test_rocm_child_attach_fails,
              test_rocm_child_run({"ipc_attach", test_rocm_hex(&handle,
                                                               sizeof(handle)),
                                   std::to_string(3 * MiB)}));
}

TEST_F(rocm_emu, ipc_handle_of_a_reused_descriptor_is_refused)
{
    char *a = (char*)device_alloc(0, 1 * MiB);
    hsa_amd_ipc_memory_t old_handle, handle;

    ASSERT_EQ(HSA_STATUS_SUCCESS,
              hsa_amd_ipc_memory_create(a, 1 * MiB, &old_handle));
    ASSERT_EQ(hipSuccess, hipFree(a));
    /* the same size at the same address, likely on the same descriptor
     * number: another allocation all the same */
    a = (char*)device_alloc(0, 1 * MiB);
    ASSERT_EQ(HSA_STATUS_SUCCESS,
              hsa_amd_ipc_memory_create(a, 1 * MiB, &handle));
    EXPECT_NE(0, memcmp(&handle, &old_handle, sizeof(handle)));
    EXPECT_EQ(test_rocm_child_attach_fails,
              test_rocm_child_run({"ipc_attach",
                                   test_rocm_hex(&old_handle, sizeof(handle)),
                                   std::to_string(1 * MiB)}));
    EXPECT_EQ(0, test_rocm_child_run({"ipc_attach",
                                      test_rocm_hex(&handle, sizeof(handle)),
                                      std::to_string(1 * MiB)}));
    EXPECT_EQ(hipSuccess, hipFree(a));
}

TEST_F(rocm_emu, ipc_handle_stays_valid_while_attached_here)
{
    hsa_amd_ipc_memory_t handle;
    void *first, *second;

    /* an exporter that exits once this process attached its memory */
    test_rocm_exporter_t exporter;
    ASSERT_EQ(0, test_rocm_exporter_start(&exporter, 2 * MiB, &handle));
    ASSERT_EQ(HSA_STATUS_SUCCESS,
              hsa_amd_ipc_memory_attach(&handle, 2 * MiB, 0, nullptr, &first));
    EXPECT_EQ(HSA_EXT_POINTER_TYPE_IPC, pointer_info(first).type);
    EXPECT_EQ(0u, mismatches(first, 2 * MiB, 5));
    ASSERT_EQ(0, test_rocm_exporter_finish(&exporter));
    /* "a handle is valid while the allocation it references remains
     * accessible in any process": here, through the first attachment */
    ASSERT_EQ(HSA_STATUS_SUCCESS,
              hsa_amd_ipc_memory_attach(&handle, 2 * MiB, 0, nullptr, &second));
    EXPECT_NE(first, second) << "each attach maps anew";
    EXPECT_EQ(0u, mismatches(second, 2 * MiB, 5));
    EXPECT_EQ(HSA_STATUS_SUCCESS, hsa_amd_ipc_memory_detach(first));
    EXPECT_EQ(HSA_STATUS_SUCCESS, hsa_amd_ipc_memory_detach(second));
    EXPECT_EQ(HSA_STATUS_ERROR_INVALID_ARGUMENT,
              hsa_amd_ipc_memory_detach(second));
    EXPECT_EQ(HSA_STATUS_ERROR_INVALID_ARGUMENT,
              hsa_amd_ipc_memory_attach(&handle, 2 * MiB, 0, nullptr, &first))
            << "nobody holds it any more";
}

TEST_F(rocm_emu, async_copy_completes_through_its_signal)
{
    std::vector<hsa_agent_t> list = agents();
    char *src = (char*)device_alloc(0, 1 * MiB);
    char *dst = (char*)device_alloc(1, 1 * MiB);
    hsa_signal_t done, gate, done2;

    fill(src, 1 * MiB, 3);
    memset(dst, 0, 1 * MiB);
    ASSERT_EQ(0, hsa_emu_set("copy_delay_us", 100000));
    ASSERT_EQ(HSA_STATUS_SUCCESS, hsa_signal_create(1, 0, nullptr, &done));
    ASSERT_EQ(HSA_STATUS_SUCCESS, hsa_signal_create(1, 0, nullptr, &gate));
    ASSERT_EQ(HSA_STATUS_SUCCESS, hsa_signal_create(1, 0, nullptr, &done2));
    ASSERT_EQ(HSA_STATUS_SUCCESS,
              hsa_amd_memory_async_copy(dst, list[2], src, list[1], 1 * MiB, 0,
                                        nullptr, done));
    EXPECT_EQ(1, hsa_signal_load_scacquire(done)) << "the copy is not done yet";
    EXPECT_EQ(0, hsa_signal_wait_scacquire(done, HSA_SIGNAL_CONDITION_LT, 1,
                                           UINT64_MAX, HSA_WAIT_STATE_BLOCKED));
    EXPECT_EQ(0u, mismatches(dst, 1 * MiB, 3));

    /* a copy waits for its dependencies to reach 0 */
    ASSERT_EQ(0, hsa_emu_set("copy_delay_us", 0));
    ASSERT_EQ(HSA_STATUS_SUCCESS,
              hsa_amd_memory_async_copy(src, list[1], dst + 4096, list[2], 4096,
                                        1, &gate, done2));
    EXPECT_EQ(1, hsa_signal_wait_scacquire(done2, HSA_SIGNAL_CONDITION_LT, 1,
                                           50000000, HSA_WAIT_STATE_BLOCKED));
    hsa_signal_store_screlease(gate, 0);
    EXPECT_EQ(0, hsa_signal_wait_scacquire(done2, HSA_SIGNAL_CONDITION_LT, 1,
                                           UINT64_MAX, HSA_WAIT_STATE_BLOCKED));
    EXPECT_EQ(0, memcmp(src, dst + 4096, 4096));

    hsa_signal_destroy(done);
    hsa_signal_destroy(gate);
    hsa_signal_destroy(done2);
    EXPECT_EQ(hipSuccess, hipFree(src));
    EXPECT_EQ(hipSuccess, hipFree(dst));
}

TEST_F(rocm_emu, async_copy_of_memory_no_device_reaches)
{
    std::vector<hsa_agent_t> list = agents();
    char *dev = (char*)device_alloc(0, 64 * KiB);
    std::vector<char> host(64 * KiB);
    hsa_signal_t done;
    void *locked;

    ASSERT_EQ(HSA_STATUS_SUCCESS, hsa_signal_create(1, 0, nullptr, &done));
    EXPECT_EQ(HSA_STATUS_ERROR_INVALID_ARGUMENT,
              hsa_amd_memory_async_copy(dev, list[1], host.data(), list[0],
                                        host.size(), 0, nullptr, done))
            << "pageable host memory";
    EXPECT_EQ(HSA_STATUS_ERROR_INVALID_ARGUMENT,
              hsa_amd_memory_async_copy(dev + 32 * KiB, list[1], dev, list[1],
                                        64 * KiB, 0, nullptr, done))
            << "past the end of the allocation";
    EXPECT_EQ(1, hsa_signal_load_scacquire(done));
    /* locked, it may */
    ASSERT_EQ(HSA_STATUS_SUCCESS,
              hsa_amd_memory_lock(host.data(), host.size(), nullptr, 0,
                                  &locked));
    EXPECT_EQ(HSA_EXT_POINTER_TYPE_LOCKED, pointer_info(host.data() + 5).type);
    fill(host.data(), host.size(), 77);
    ASSERT_EQ(HSA_STATUS_SUCCESS,
              copied(dev, list[1], locked, list[0], host.size()));
    EXPECT_EQ(0u, mismatches(dev, 64 * KiB, 77));
    EXPECT_EQ(HSA_STATUS_SUCCESS, hsa_amd_memory_unlock(host.data()));
    EXPECT_EQ(HSA_EXT_POINTER_TYPE_UNKNOWN, pointer_info(host.data()).type);
    hsa_signal_destroy(done);
    EXPECT_EQ(hipSuccess, hipFree(dev));
}

/* Locked host memory whose agent pointer is not its host pointer, as on a
 * GPU that maps the pages elsewhere in its own address space: both name the
 * buffer, a device reaches it through the agent pointer only, and what it
 * writes there the CPU reads at the host pointer */
TEST_F(rocm_emu, locked_memory_has_an_agent_pointer_of_its_own)
{
    std::vector<hsa_agent_t> list = agents();
    char *dev = (char*)device_alloc(0, 64 * KiB);
    std::vector<char> buf(64 * KiB + 100);
    char *host = buf.data() + 100; /* not page aligned */
    hsa_signal_t done;
    char *agent = nullptr;

    ASSERT_EQ(HSA_STATUS_SUCCESS, hsa_signal_create(1, 0, nullptr, &done));
    ASSERT_EQ(HSA_STATUS_SUCCESS,
              hsa_amd_memory_lock(host, 64 * KiB, nullptr, 0,
                                  (void**)&agent));
    ASSERT_NE(host, agent) << "HSA_EMU_LOCK_ALIAS=0?";
    EXPECT_EQ((uintptr_t)host % 4096, (uintptr_t)agent % 4096);
    for (const char *p : {host + 5, agent + 5}) {
        hsa_amd_pointer_info_t info = pointer_info(p);
        EXPECT_EQ(HSA_EXT_POINTER_TYPE_LOCKED, info.type) << (void*)p;
        EXPECT_EQ(host, info.hostBaseAddress) << (void*)p;
        EXPECT_EQ(agent, info.agentBaseAddress) << (void*)p;
        EXPECT_EQ(64 * KiB, info.sizeInBytes) << (void*)p;
    }
    EXPECT_EQ(HSA_EXT_POINTER_TYPE_UNKNOWN,
              pointer_info(agent + 64 * KiB).type) << "past its end";

    EXPECT_EQ(0u, wrong_both_ways(list, host, agent, dev, 64 * KiB, 31));
    /* the host pointer is no address of the device's */
    EXPECT_EQ(HSA_STATUS_ERROR_INVALID_ARGUMENT,
              hsa_amd_memory_async_copy(dev, list[1], host, list[0],
                                        64 * KiB, 0, nullptr, done));
    EXPECT_EQ(HSA_STATUS_ERROR_INVALID_ARGUMENT,
              hsa_amd_memory_async_copy(dev, list[1], agent + 1, list[0],
                                        64 * KiB, 0, nullptr, done))
            << "past the end of the locked range";
    EXPECT_EQ(HSA_STATUS_SUCCESS, hsa_amd_memory_unlock(host));
    EXPECT_EQ(HSA_EXT_POINTER_TYPE_UNKNOWN, pointer_info(agent).type);
    hsa_signal_destroy(done);
    EXPECT_EQ(hipSuccess, hipFree(dev));
}

/* Locks of one host address with different lengths, then an unlock by that
 * address, as UCX's rocm_copy lock cache does when it locks a range again
 * with a new length: ROCr keeps one registration per address and length,
 * and an unlock by an address two of them start at finds neither, so both
 * stay locked (and reports success). A second lock of the same address and
 * length is the same registration, which one unlock releases. */
TEST_F(rocm_emu, unlock_of_an_address_locked_twice_keeps_both)
{
    std::vector<hsa_agent_t> list = agents();
    char *dev = (char*)device_alloc(0, 64 * KiB);
    /* never unmapped: the two locks outlive the test (as they would in a
     * real process), and no later buffer may come back at their address */
    char *host = (char*)mmap(nullptr, 64 * KiB, PROT_READ | PROT_WRITE,
                             MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) + 100;
    char *first = nullptr, *second = nullptr, *again = nullptr;

    ASSERT_EQ(HSA_STATUS_SUCCESS,
              hsa_amd_memory_lock(host, 8 * KiB, nullptr, 0, (void**)&first));
    ASSERT_EQ(HSA_STATUS_SUCCESS,
              hsa_amd_memory_lock(host, 32 * KiB, nullptr, 0,
                                  (void**)&second));
    if (first != host) { /* HSA_EMU_LOCK_ALIAS: a mapping each */
        EXPECT_NE(first, second);
    }
    EXPECT_EQ(HSA_STATUS_SUCCESS, hsa_amd_memory_unlock(host));
    /* the longer lock, taken last, is whole, and so is the first */
    EXPECT_EQ(0u, wrong_both_ways(list, host, second, dev, 32 * KiB, 41));
    EXPECT_EQ(0u, wrong_both_ways(list, host, first, dev, 8 * KiB, 43));
    EXPECT_EQ(HSA_STATUS_SUCCESS, hsa_amd_memory_unlock(host));
    EXPECT_EQ(HSA_EXT_POINTER_TYPE_LOCKED, pointer_info(second).type)
            << "a second unlock finds neither either";

    /* one address and length locked twice: one registration */
    ASSERT_EQ(HSA_STATUS_SUCCESS,
              hsa_amd_memory_lock(host + 40 * KiB, 4 * KiB, nullptr, 0,
                                  (void**)&first));
    ASSERT_EQ(HSA_STATUS_SUCCESS,
              hsa_amd_memory_lock(host + 40 * KiB, 4 * KiB, nullptr, 0,
                                  (void**)&again));
    EXPECT_EQ(first, again);
    EXPECT_EQ(HSA_STATUS_SUCCESS, hsa_amd_memory_unlock(host + 40 * KiB));
    EXPECT_EQ(HSA_EXT_POINTER_TYPE_UNKNOWN, pointer_info(host + 40 * KiB).type);
    EXPECT_EQ(HSA_STATUS_SUCCESS, hsa_amd_memory_unlock(host + 40 * KiB))
            << "nothing locked there: ROCr reports success";
    EXPECT_EQ(hipSuccess, hipFree(dev));
}

TEST_F(rocm_emu, host_register_and_its_device_pointer)
{
    char *dev = (char*)device_alloc(0, 64 * KiB);
    std::vector<char> buf(64 * KiB);
    char *dptr = nullptr, *ptr = nullptr;
    unsigned type = 0;
    hipDeviceptr_t base;
    size_t size;

    ASSERT_EQ(hipErrorInvalidValue,
              hipHostGetDevicePointer((void**)&dptr, buf.data(), 0))
            << "not registered";
    ASSERT_EQ(hipSuccess, hipHostRegister(buf.data(), buf.size(), 0));
    EXPECT_EQ(hipErrorHostMemoryAlreadyRegistered,
              hipHostRegister(buf.data(), buf.size(), 0));
    ASSERT_EQ(hipSuccess,
              hipHostGetDevicePointer((void**)&dptr, buf.data() + 10, 0));
    ASSERT_NE(buf.data() + 10, dptr);
    EXPECT_EQ(HSA_EXT_POINTER_TYPE_LOCKED, pointer_info(dptr).type);
    /* HIP knows both addresses, as host memory */
    for (char *p : {buf.data() + 10, dptr}) {
        EXPECT_EQ(hipSuccess,
                  hipPointerGetAttribute(&type,
                                         HIP_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                         (hipDeviceptr_t)p));
        EXPECT_EQ((unsigned)hipMemoryTypeHost, type) << (void*)p;
        EXPECT_EQ(hipSuccess,
                  hipPointerGetAttribute(&ptr,
                                         HIP_POINTER_ATTRIBUTE_DEVICE_POINTER,
                                         (hipDeviceptr_t)p));
        EXPECT_EQ(dptr, ptr);
        EXPECT_EQ(hipSuccess,
                  hipPointerGetAttribute(&ptr,
                                         HIP_POINTER_ATTRIBUTE_HOST_POINTER,
                                         (hipDeviceptr_t)p));
        EXPECT_EQ(buf.data() + 10, ptr);
    }
    EXPECT_EQ(hipSuccess, hipMemGetAddressRange(&base, &size, dptr + 5));
    EXPECT_EQ(dptr - 10, base);
    EXPECT_EQ(buf.size(), size);

    /* device memory to the buffer and back, through the device pointer */
    fill(buf.data(), buf.size(), 41);
    ASSERT_EQ(hipSuccess, hipMemcpy(dev, dptr - 10, buf.size(),
                                    hipMemcpyDefault));
    EXPECT_EQ(0u, mismatches(dev, 64 * KiB, 41));
    fill(dev, 64 * KiB, 42);
    ASSERT_EQ(hipSuccess, hipMemcpy(dptr - 10, dev, buf.size(),
                                    hipMemcpyDefault));
    EXPECT_EQ(0u, mismatches(buf.data(), buf.size(), 42));

    EXPECT_EQ(hipSuccess, hipHostUnregister(buf.data()));
    EXPECT_EQ(hipErrorHostMemoryNotRegistered, hipHostUnregister(buf.data()));
    EXPECT_EQ(HSA_EXT_POINTER_TYPE_UNKNOWN, pointer_info(dptr).type);
    EXPECT_EQ(hipSuccess, hipFree(dev));
}

TEST(rocm_emu_death, a_bad_device_access_kills_the_process)
{
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH(
            {
                std::vector<char> host(4096);
                hsa_signal_t done;
                hsa_agent_t gpu;
                void *dev;

                hsa_init();
                hsa_emu_set("fault", 0);
                gpu = agents()[1];
                (void)!hipMalloc(&dev, 4096);
                hsa_signal_create(1, 0, nullptr, &done);
                hsa_amd_memory_async_copy(dev, gpu, host.data(), gpu, 4096, 0,
                                          nullptr, done);
            },
            "Memory access fault by GPU");
}

/* A VMM range of units POSIX-fd handles, mapped back to back */
struct vmm_range {
    std::vector<hipMemGenericAllocationHandle_t> handles;
    char   *base = nullptr;
    size_t unit  = 0;

    hipError_t map(int device, size_t unit_size, unsigned units,
                   hipMemAllocationHandleType type =
                           hipMemHandleTypePosixFileDescriptor)
    {
        hipMemAllocationProp prop = {};
        hipMemAccessDesc access   = {};
        hipError_t err;

        prop.type                = hipMemAllocationTypePinned;
        prop.location.type       = hipMemLocationTypeDevice;
        prop.location.id         = device;
        prop.requestedHandleType = type;
        unit                     = unit_size;
        err = hipMemAddressReserve((void**)&base, unit * units, 0, nullptr, 0);
        for (unsigned i = 0; (err == hipSuccess) && (i < units); ++i) {
            handles.push_back(nullptr);
            err = hipMemCreate(&handles.back(), unit, &prop, 0);
            if (err == hipSuccess) {
                err = hipMemMap(base + i * unit, unit, 0, handles.back(), 0);
            }
        }
        access.location.type = hipMemLocationTypeDevice;
        access.location.id   = device;
        access.flags         = hipMemAccessFlagsProtReadWrite;
        return (err != hipSuccess) ? err :
               hipMemSetAccess(base, unit * units, &access, 1);
    }

    void unmap()
    {
        EXPECT_EQ(hipSuccess, hipMemUnmap(base, unit * handles.size()));
        for (auto h : handles) {
            EXPECT_EQ(hipSuccess, hipMemRelease(h));
        }
        EXPECT_EQ(hipSuccess, hipMemAddressFree(base, unit * handles.size()));
        handles.clear();
    }
};

TEST_F(rocm_emu, vmm_units_and_their_attributes)
{
    std::vector<hsa_agent_t> list = agents();
    hipMemGenericAllocationHandle_t retained;
    unsigned long long id[4], types;
    hsa_amd_ipc_memory_t ipc;
    hipDeviceptr_t base;
    vmm_range r;
    size_t size;

    ASSERT_EQ(hipSuccess, r.map(1, 64 * KiB, 4));
    for (int i = 0; i < 4; ++i) {
        char *p = r.base + i * r.unit + 100;

        ASSERT_EQ(hipSuccess, hipMemGetAddressRange(&base, &size, p));
        EXPECT_EQ(r.base + i * r.unit, base) << "unit " << i;
        EXPECT_EQ(64 * KiB, size);
        ASSERT_EQ(hipSuccess,
                  hipPointerGetAttribute(&id[i],
                                         HIP_POINTER_ATTRIBUTE_BUFFER_ID, p));
        ASSERT_EQ(hipSuccess,
                  hipPointerGetAttribute(
                          &types, HIP_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES,
                          p));
        EXPECT_EQ((unsigned long long)hipMemHandleTypePosixFileDescriptor,
                  types);
        hsa_amd_pointer_info_t info = pointer_info(p);
        EXPECT_EQ(HSA_EXT_POINTER_TYPE_HSA, info.type);
        EXPECT_EQ(r.base + i * r.unit, info.agentBaseAddress);
        EXPECT_EQ(list[2].handle, info.agentOwner.handle);
    }
    EXPECT_NE(id[0], id[1]);
    EXPECT_NE(id[2], id[3]);
    ASSERT_EQ(hipSuccess,
              hipMemRetainAllocationHandle(&retained,
                                           r.base + 2 * r.unit + 7));
    EXPECT_EQ(r.handles[2], retained);
    EXPECT_EQ(hipSuccess, hipMemRelease(retained));
    EXPECT_EQ(HSA_STATUS_ERROR_INVALID_ARGUMENT,
              hsa_amd_ipc_memory_create(r.base, r.unit, &ipc))
            << "IPC handles refuse VMM memory (ROCm/clr #265)";
    EXPECT_EQ(hipErrorInvalidValue, hipMemUnmap(r.base, r.unit / 2))
            << "part of a mapping";
    EXPECT_EQ(hipErrorInvalidValue, hipMemAddressFree(r.base, 4 * r.unit))
            << "still mapped";
    r.unmap();
    EXPECT_EQ(hipErrorNotFound, hipMemGetAddressRange(&base, &size, r.base));
}

TEST_F(rocm_emu, vmm_without_access_is_not_reachable)
{
    std::vector<hsa_agent_t> list = agents();
    hipMemAllocationProp prop = {};
    hipMemGenericAllocationHandle_t h;
    char *dev = (char*)device_alloc(0, 64 * KiB);
    hsa_signal_t done;
    void *va;

    prop.type                = hipMemAllocationTypePinned;
    prop.location.type       = hipMemLocationTypeDevice;
    prop.location.id         = 0;
    prop.requestedHandleType = hipMemHandleTypePosixFileDescriptor;
    ASSERT_EQ(hipSuccess, hipMemAddressReserve(&va, 64 * KiB, 0, nullptr, 0));
    ASSERT_EQ(hipSuccess, hipMemCreate(&h, 64 * KiB, &prop, 0));
    ASSERT_EQ(hipSuccess, hipMemMap(va, 64 * KiB, 0, h, 0));
    ASSERT_EQ(HSA_STATUS_SUCCESS, hsa_signal_create(1, 0, nullptr, &done));
    EXPECT_EQ(HSA_STATUS_ERROR_INVALID_ARGUMENT,
              hsa_amd_memory_async_copy(dev, list[1], va, list[1], 64 * KiB, 0,
                                        nullptr, done))
            << "mapped, but no device was given access";
    hsa_signal_destroy(done);
    EXPECT_EQ(hipSuccess, hipMemUnmap(va, 64 * KiB));
    EXPECT_EQ(hipSuccess, hipMemRelease(h));
    EXPECT_EQ(hipSuccess, hipMemAddressFree(va, 64 * KiB));
    EXPECT_EQ(hipSuccess, hipFree(dev));
}

TEST_F(rocm_emu, vmm_export_import_across_processes)
{
    vmm_range r, none;
    std::vector<std::string> args = {"vmm_rw", std::to_string(getpid()),
                                     std::to_string(64 * KiB)};
    int fd = -1;

    ASSERT_EQ(hipSuccess, r.map(0, 64 * KiB, 3));
    fill(r.base, 3 * r.unit, 21);
    for (auto h : r.handles) {
        ASSERT_EQ(hipSuccess,
                  hipMemExportToShareableHandle(
                          &fd, h, hipMemHandleTypePosixFileDescriptor, 0));
        args.push_back(std::to_string(fd));
    }
    /* the child takes the descriptors (pidfd_getfd), imports, maps the
     * units back to back, checks them and writes its pattern */
    EXPECT_EQ(0, test_rocm_child_run(args));
    EXPECT_EQ(0u, mismatches(r.base, 3 * r.unit, 121));
    for (size_t i = 3; i < args.size(); ++i) {
        close(std::stoi(args[i]));
    }
    r.unmap();

    ASSERT_EQ(hipSuccess, none.map(0, 64 * KiB, 1, hipMemHandleTypeNone));
    EXPECT_EQ(hipErrorNotSupported,
              hipMemExportToShareableHandle(&fd, none.handles[0],
                                            hipMemHandleTypePosixFileDescriptor,
                                            0))
            << "a handle not made for POSIX fds";
    none.unmap();
}

/* The ranges UCX 1.22's scan of /proc/self/maps reports as memory of an
 * unknown type (ucm_rocm_scan_regions_cb, at its first lookup): a line is
 * taken where it has no access at all, or its path starts with "/dev/dri" */
std::vector<std::pair<uint64_t, uint64_t>> ucx_rocm_maps_scan()
{
    static const char pattern[] = "/dev/dri";
    std::vector<std::pair<uint64_t, uint64_t>> found;
    char line[4096], prot_c[4];
    unsigned long start, end;
    FILE *maps = fopen("/proc/self/maps", "r");
    int n;

    EXPECT_NE(nullptr, maps);
    while ((maps != nullptr) && (fgets(line, sizeof(line), maps) != nullptr)) {
        line[strcspn(line, "\n")] = '\0';
        n = 0;
        if (sscanf(line, "%lx-%lx %4c %*x %*x:%*x %*d %n", &start, &end,
                   prot_c, &n) < 3) {
            continue;
        }
        bool access = (prot_c[0] == 'r') || (prot_c[1] == 'w') ||
                      (prot_c[2] == 'x');
        if (!access || !strncmp(line + n, pattern, sizeof(pattern) - 1)) {
            found.emplace_back(start, end);
        }
    }
    if (maps != nullptr) {
        fclose(maps);
    }
    return found;
}

/* Whether the ranges cover [addr, +size) */
bool covered(const std::vector<std::pair<uint64_t, uint64_t>> &ranges,
             const void *addr, size_t size)
{
    uint64_t cur = (uintptr_t)addr, end = cur + size;
    bool moved = true;

    while ((cur < end) && moved) {
        moved = false;
        for (const auto &r : ranges) {
            if ((r.first <= cur) && (cur < r.second)) {
                cur   = r.second;
                moved = true;
            }
        }
    }
    return cur >= end;
}

/* ROCm memory allocated before UCX's first lookup is found by its mapping
 * of a /dev/dri render node: the emulator's device memory must be found
 * the same way, or a test passes only where a memory type hint is given */
TEST_F(rocm_emu, ucx_finds_device_memory_in_proc_self_maps)
{
    std::vector<void*> allocs;
    std::vector<char> pageable(64 * KiB);
    hsa_amd_ipc_memory_t ipc;
    vmm_range vmm;
    void *attached = nullptr;

    if (hsa_emu_dri()[0] == '\0') {
        GTEST_SKIP() << "device memory is in memfds here (HSA_EMU_DRI_DIR "
                        "empty, or /dev/dri cannot be written)";
    }
    for (int i = 0; i < hsa_emu_gpu_count(); ++i) {
        allocs.push_back(device_alloc(i, 3 * MiB + 5));
    }
    ASSERT_EQ(hipSuccess, hipSetDevice(0));
    ASSERT_EQ(hipSuccess, vmm.map(0, 64 * KiB, 2));
    ASSERT_EQ(HSA_STATUS_SUCCESS,
              hsa_amd_ipc_memory_create(allocs[0], 3 * MiB + 5, &ipc));
    ASSERT_EQ(HSA_STATUS_SUCCESS,
              hsa_amd_ipc_memory_attach(&ipc, 3 * MiB + 5, 0, nullptr,
                                        &attached));
    fill(pageable.data(), pageable.size(), 1); /* its pages exist */

    auto found = ucx_rocm_maps_scan();
    for (size_t i = 0; i < allocs.size(); ++i) {
        EXPECT_TRUE(covered(found, allocs[i], 3 * MiB + 5))
                << "hipMalloc on device " << i << " at " << allocs[i];
    }
    EXPECT_TRUE(covered(found, vmm.base, 2 * vmm.unit)) << "a VMM mapping";
    EXPECT_TRUE(covered(found, attached, 3 * MiB + 5)) << "an IPC attachment";
    EXPECT_FALSE(covered(found, pageable.data(), pageable.size()))
            << "pageable host memory is not ROCm memory";

    EXPECT_EQ(HSA_STATUS_SUCCESS, hsa_amd_ipc_memory_detach(attached));
    vmm.unmap();
    for (void *ptr : allocs) {
        EXPECT_EQ(hipSuccess, hipFree(ptr));
    }
}

TEST_F(rocm_emu, failure_injection)
{
    void *a = nullptr, *b = nullptr, *c = nullptr;

    ASSERT_EQ(0, hsa_emu_fail("hipMalloc@2"));
    EXPECT_EQ(hipSuccess, hipMalloc(&a, 4096));
    EXPECT_EQ(hipErrorOutOfMemory, hipMalloc(&b, 4096));
    EXPECT_EQ(hipSuccess, hipMalloc(&c, 4096));
    EXPECT_EQ(hipSuccess, hipFree(a));
    EXPECT_EQ(hipSuccess, hipFree(c));

    ASSERT_EQ(0, hsa_emu_fail("hsa_amd_pointer_info@2+,hsa_init@1"));
    hsa_amd_pointer_info_t info = {};
    info.size = sizeof(info);
    EXPECT_EQ(HSA_STATUS_SUCCESS, hsa_amd_pointer_info(&info, &info, nullptr,
                                                       nullptr, nullptr));
    for (int i = 0; i < 3; ++i) {
        EXPECT_EQ(HSA_STATUS_ERROR_OUT_OF_RESOURCES,
                  hsa_amd_pointer_info(&info, &info, nullptr, nullptr,
                                       nullptr));
    }
    /* what hsa_init says without /dev/kfd */
    EXPECT_EQ(HSA_STATUS_ERROR_OUT_OF_RESOURCES, hsa_init());
    EXPECT_EQ(HSA_STATUS_SUCCESS, hsa_init());
    EXPECT_EQ(HSA_STATUS_SUCCESS, hsa_shut_down());

    EXPECT_EQ(-1, hsa_emu_fail("hipMalloc@0"));
    EXPECT_EQ(-1, hsa_emu_fail("hipMalloc@2x"));
    EXPECT_EQ(-1, hsa_emu_fail("@3"));
    EXPECT_EQ(0, hsa_emu_fail(""));
    EXPECT_EQ(-1, hsa_emu_set("no_such_setting", 1));
}

} // namespace
