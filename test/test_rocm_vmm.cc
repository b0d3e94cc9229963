/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * ROCm VMM units span exports itself, across processes, on the emulated
 * runtime, with no UCX rocm module: a child exports the POSIX-fd handles of
 * a range through span's export table (the ROCm driver's export), this
 * process imports them as a rocm_ipc+ rkey would (keys marked as ROCm
 * units, the shared import cache, pidfd_getfd, HIP's import and map), and
 * span's ROCm copy engine moves bytes through the mapping asynchronously,
 * checked in the exporter. A withdrawn export is never imported again.
 */
#include "test_deadline.h"
#include "test_log.h"
#include "test_rocm_child.h"

#include <gtest/gtest.h>

#include <hip/hip_runtime_api.h>

extern "C" {
#include "vmm/span_vmm_cache.h"
#include "vmm/span_vmm.h"
#include "vendor/span_vendor.h"
#include "copy/span_vmm_copy.h"
#include "rocm_emu/hsa_emu.h"
}

/* HSA has no batches: what an iface's engine is given */
static const span_vmm_copy_params_t span_test_copy_params = {
        .batch_ops = 1024, .batch_bytes = SIZE_MAX, .kernel_max = 262144};

#include <cstring>
#include <unistd.h>
#include <vector>

namespace {

constexpr size_t KiB  = 1ul << 10;
constexpr size_t unit = 256 * KiB;
constexpr unsigned units = 6;

uint8_t pattern(uint8_t seed, size_t i)
{
    return (uint8_t)(seed + i * 7);
}

struct counted_completion {
    uct_completion_t comp;
    ucs_status_t     status = UCS_OK;
    int              done   = 0;

    counted_completion()
    {
        comp.func   = [](uct_completion_t *c) {
            ((counted_completion*)c)->done = 1;
        };
        comp.count  = 1;
        comp.status = UCS_OK;
    }
};

class rocm_vmm : public ::testing::Test {
protected:
    void SetUp() override
    {
        ASSERT_EQ(0, hsa_emu_fail(nullptr));
        ASSERT_EQ(0, hsa_emu_set("fault", 1));
        ASSERT_EQ(hipSuccess, hipSetDevice(0));
        ASSERT_EQ(0, test_rocm_peer_start(&m_peer, {"vmm_export",
                                                    std::to_string(units),
                                                    std::to_string(unit)}));
        m_keys.resize(units);
        ASSERT_EQ(0, test_rocm_peer_read(&m_peer, m_keys.data(),
                                         units * sizeof(m_keys[0])));
        ASSERT_EQ(0, test_rocm_peer_read(&m_peer, &m_base, sizeof(m_base)));
        span_vmm_keys_mark(m_keys.data(), units, SPAN_ROCM_VMM_MAGIC);
        ASSERT_EQ(UCS_OK, span_chunk_plan_from(&m_geom, m_base, units * unit,
                                               m_base, unit, 0, 0));
        ASSERT_EQ(units, m_geom.num_chunks);
        ASSERT_EQ(hipSuccess, hipMalloc((void**)&m_local, units * unit));
        ASSERT_EQ(UCS_OK, span_vmm_copy_create(
                                  span_vendor_vmm_copy(UCS_MEMORY_TYPE_ROCM),
                                  &span_test_copy_params, &m_copy));
    }

    void TearDown() override
    {
        if (m_copy != nullptr) {
            span_vmm_copy_destroy(m_copy);
        }
        if (m_local != nullptr) {
            EXPECT_EQ(hipSuccess, hipFree(m_local));
        }
        span_vmm_cache_purge();
        EXPECT_EQ(0, test_rocm_peer_finish(&m_peer)) << "the exporter's exit";
        hsa_emu_fail(nullptr);
        hsa_emu_set("copy_delay_us", 0);
    }

    /* The exporter's answer to a command */
    int ask(char cmd)
    {
        char answer = -1;

        EXPECT_EQ(0, test_rocm_peer_write(&m_peer, &cmd, 1));
        EXPECT_EQ(0, test_rocm_peer_read(&m_peer, &answer, 1));
        return answer;
    }

    /* One op of the copy engine, driven to completion by its progress */
    ucs_status_t copy(span_vmm_map_t *map, int is_put, size_t offset,
                      size_t length)
    {
        return copy_at(m_local + offset, map, is_put, offset, length);
    }

    /* The same, between local and the mapping at offset */
    ucs_status_t copy_at(uint8_t *local, span_vmm_map_t *map, int is_put,
                         size_t offset, size_t length)
    {
        uct_iov_t iov = {local, length, nullptr, 0, 1};
        counted_completion c;
        deadline guard(30, "a ROCm VMM copy");
        ucs_status_t status;

        status = span_vmm_copy_post(m_copy, map, is_put, &iov, 1,
                                    (uint8_t*)map->base + offset, &c.comp);
        if (status != UCS_INPROGRESS) {
            return status;
        }
        while (!c.done) {
            span_vmm_copy_progress(m_copy);
        }
        return c.comp.status;
    }

    test_rocm_peer_t                 m_peer  = {};
    std::vector<span_vmm_key_t> m_keys;
    uint64_t                         m_base  = 0;
    span_chunk_geom_t                m_geom;
    uint8_t                          *m_local = nullptr;
    span_vmm_copy_t                  *m_copy  = nullptr;
};

TEST_F(rocm_vmm, units_of_a_peer_move_through_span_copies)
{
    std::vector<uint8_t> host(units * unit);
    span_vmm_map_t *map;

    ASSERT_EQ(UCS_OK, span_vmm_cache_get(m_keys.data(), &m_geom, &map));
    EXPECT_TRUE(map->rocm);
    EXPECT_EQ(units * unit, map->length);

    /* a get of every unit in one op, across their ends */
    ASSERT_EQ(UCS_OK, copy(map, 0, 0, units * unit));
    ASSERT_EQ(hipSuccess, hipMemcpy(host.data(), m_local, host.size(),
                                    hipMemcpyDefault));
    size_t wrong = 0;
    for (size_t i = 0; i < host.size(); ++i) {
        wrong += host[i] != pattern(test_rocm_vmm_seed, i);
    }
    EXPECT_EQ(0u, wrong);

    /* a put, checked by the exporter in its own memory */
    for (size_t i = 0; i < host.size(); ++i) {
        host[i] = pattern(test_rocm_vmm_put_seed, i);
    }
    ASSERT_EQ(hipSuccess, hipMemcpy(m_local, host.data(), host.size(),
                                    hipMemcpyDefault));
    ASSERT_EQ(UCS_OK, copy(map, 1, 0, units * unit));
    EXPECT_EQ(0, ask('c')) << "the exporter's bytes";
    span_vmm_cache_put(map);
}

TEST_F(rocm_vmm, copies_complete_from_progress_and_flushes_behind_them)
{
    uct_iov_t iov = {m_local + 100, 2 * unit, nullptr, 0, 1};
    span_vmm_map_t *map;
    counted_completion op, flush;
    deadline guard(30, "a flush behind a ROCm VMM copy");

    ASSERT_EQ(UCS_OK, span_vmm_cache_get(m_keys.data(), &m_geom, &map));
    ASSERT_EQ(0, hsa_emu_set("copy_delay_us", 100000));
    ASSERT_EQ(UCS_INPROGRESS,
              span_vmm_copy_post(m_copy, map, 0, &iov, 1,
                                 (uint8_t*)map->base + unit - 100, &op.comp));
    EXPECT_TRUE(span_vmm_copy_busy(m_copy));
    EXPECT_EQ(UCS_INPROGRESS, span_vmm_copy_flush(m_copy, nullptr));
    ASSERT_EQ(UCS_INPROGRESS, span_vmm_copy_flush(m_copy, &flush.comp));
    EXPECT_EQ(0u, span_vmm_copy_progress(m_copy)) << "completed too early";
    EXPECT_FALSE(op.done);
    while (!flush.done) {
        span_vmm_copy_progress(m_copy);
    }
    EXPECT_TRUE(op.done);
    EXPECT_TRUE(flush.done);
    EXPECT_FALSE(span_vmm_copy_busy(m_copy));
    EXPECT_EQ(UCS_OK, span_vmm_copy_flush(m_copy, nullptr));
    span_vmm_cache_put(map);
}

/* A get whose second element copy is refused while the first runs (200 ms
 * on the emulator): the refusal is logged by the runtime call and the
 * runtime's words for its error, the op reports its error only once the
 * first copy finished, and the destination never changes after that */
TEST_F(rocm_vmm, a_failed_get_leaves_its_buffer_alone_once_reported)
{
    uct_iov_t iov[2] = {{m_local, unit, nullptr, 0, 1},
                        {m_local + unit, unit, nullptr, 0, 1}};
    std::vector<uint8_t> zero(2 * unit, 0), seen(2 * unit);
    span_vmm_map_t *map;
    counted_completion op;
    ucs_status_t status;
    deadline guard(30, "a failed ROCm VMM get");

    ASSERT_EQ(UCS_OK, span_vmm_cache_get(m_keys.data(), &m_geom, &map));
    ASSERT_EQ(hipSuccess, hipMemcpy(m_local, zero.data(), zero.size(),
                                    hipMemcpyDefault));
    ASSERT_EQ(0, hsa_emu_set("copy_delay_us", 200000));
    ASSERT_EQ(0, hsa_emu_fail("hsa_amd_memory_async_copy@2"));
    {
        log_counter log;
        status = span_vmm_copy_post(m_copy, map, 0, iov, 2,
                                    (uint8_t*)map->base, &op.comp);
        EXPECT_EQ(1u, log_counter::count(
                              "span rocm: hsa_amd_memory_async_copy("));
        EXPECT_EQ(1u, log_counter::count(
                              ") failed: HSA_STATUS_ERROR_OUT_OF_RESOURCES: "));
        EXPECT_EQ(1u, log_counter::count("span rocm copy: get of 262144 "
                                         "bytes"));
    }
    if (status == UCS_INPROGRESS) {
        while (!op.done) {
            span_vmm_copy_progress(m_copy);
        }
        status = op.comp.status;
    }
    EXPECT_EQ(UCS_ERR_IO_ERROR, status);
    /* read by the CPU (the emulator's device memory is host memory):
     * hipMemcpy would wait for the copies still queued */
    memcpy(zero.data(), m_local, zero.size());
    usleep(300000);
    memcpy(seen.data(), m_local, seen.size());
    EXPECT_EQ(0, memcmp(zero.data(), seen.data(), seen.size()))
            << "the buffer of a get reported failed changed afterwards";
    while (span_vmm_copy_busy(m_copy)) {
        span_vmm_copy_progress(m_copy);
    }
    span_vmm_cache_put(map);
}

/* A local buffer of host memory registered with HIP, whose device pointer
 * is another address (the emulator's locked memory): given by its host
 * pointer (as UCT gives a registered buffer) or by its device pointer, a
 * get and a put through a peer's device memory move every byte right. A
 * device reaches the buffer at its device pointer only: given the host
 * pointer, a GPU faults */
TEST_F(rocm_vmm, a_host_pinned_buffer_moves_through_its_device_pointer)
{
    const size_t length = units * unit;
    std::vector<uint8_t> buf(length + 100);
    uint8_t *host = buf.data() + 100, *dptr = nullptr;
    span_vmm_map_t *map;

    ASSERT_EQ(UCS_OK, span_vmm_cache_get(m_keys.data(), &m_geom, &map));
    ASSERT_EQ(hipSuccess, hipHostRegister(host, length, 0));
    ASSERT_EQ(hipSuccess, hipHostGetDevicePointer((void**)&dptr, host, 0));
    EXPECT_NE(host, dptr) << "the emulator's agent pointer";
    for (uint8_t *local : {host, dptr}) {
        SCOPED_TRACE(local == host ? "by its host pointer" :
                                     "by its device pointer");
        /* the peer's memory cleared from device memory first */
        ASSERT_EQ(hipSuccess, hipMemset(m_local, 0, length));
        ASSERT_EQ(UCS_OK, copy(map, 1, 0, length));
        for (size_t i = 0; i < length; ++i) {
            host[i] = pattern(test_rocm_vmm_put_seed, i);
        }
        EXPECT_EQ(UCS_OK, copy_at(local, map, 1, 0, length));
        EXPECT_EQ(0, ask('c')) << "the exporter's bytes after a put";

        memset(host, 0, length);
        EXPECT_EQ(UCS_OK, copy_at(local, map, 0, 0, length));
        size_t wrong = 0;
        for (size_t i = 0; i < length; ++i) {
            wrong += host[i] != pattern(test_rocm_vmm_put_seed, i);
        }
        EXPECT_EQ(0u, wrong) << "bytes of a get";
    }
    EXPECT_EQ(hipSuccess, hipHostUnregister(host));
    span_vmm_cache_put(map);
}

/* An engine is made only where its runtime is: refused, and logged by the
 * runtime's call and words, where hsa_init fails; refused for memory of
 * no vendor span was built with */
TEST(rocm_vmm_copy, no_engine_without_its_runtime)
{
    span_vmm_copy_t *copy = nullptr;
    log_counter log;

    /* the emulator takes HSA_EMU_FAIL at its start: started first */
    ASSERT_EQ(hipSuccess, hipSetDevice(0));
    ASSERT_EQ(0, hsa_emu_fail("hsa_init"));
    EXPECT_EQ(UCS_ERR_NO_DEVICE,
              span_vmm_copy_create(span_vendor_vmm_copy(UCS_MEMORY_TYPE_ROCM),
                                   &span_test_copy_params, &copy));
    EXPECT_EQ(1u, log_counter::count("span rocm: hsa_init() failed: "
                                     "HSA_STATUS_ERROR_OUT_OF_RESOURCES: "));
    ASSERT_EQ(0, hsa_emu_fail(nullptr));
    EXPECT_EQ(nullptr, span_vendor_vmm_copy(UCS_MEMORY_TYPE_HOST));
    EXPECT_EQ(UCS_ERR_UNSUPPORTED,
              span_vmm_copy_create(nullptr, &span_test_copy_params, &copy));
    EXPECT_EQ(nullptr, copy);
}

TEST_F(rocm_vmm, a_local_buffer_of_host_memory_is_refused)
{
    std::vector<uint8_t> host(4096);
    uct_iov_t iov = {host.data(), host.size(), nullptr, 0, 1};
    span_vmm_map_t *map;

    ASSERT_EQ(UCS_OK, span_vmm_cache_get(m_keys.data(), &m_geom, &map));
    EXPECT_EQ(UCS_ERR_UNSUPPORTED,
              span_vmm_copy_post(m_copy, map, 0, &iov, 1,
                                 (uint8_t*)map->base, nullptr));
    EXPECT_FALSE(span_vmm_copy_busy(m_copy));
    span_vmm_cache_put(map);
}

TEST_F(rocm_vmm, a_withdrawn_export_is_not_imported)
{
    span_vmm_map_t *map;

    ASSERT_EQ(UCS_OK, span_vmm_cache_get(m_keys.data(), &m_geom, &map));
    span_vmm_cache_put(map); /* kept idle in the cache */
    ASSERT_EQ(0, ask('w'));
    EXPECT_NE(UCS_OK, span_vmm_cache_get(m_keys.data(), &m_geom, &map))
            << "served after the exporter withdrew its units";
}

TEST_F(rocm_vmm, a_failed_import_maps_nothing)
{
    span_vmm_map_t *map;

    /* the fourth unit's mapping fails: the three before are unmapped, the
     * reserved range freed, and the next import maps all six */
    ASSERT_EQ(0, hsa_emu_fail("hipMemMap@4"));
    EXPECT_EQ(UCS_ERR_NO_MEMORY,
              span_vmm_cache_get(m_keys.data(), &m_geom, &map));
    ASSERT_EQ(0, hsa_emu_fail(nullptr));
    ASSERT_EQ(UCS_OK, span_vmm_cache_get(m_keys.data(), &m_geom, &map));
    EXPECT_EQ(UCS_OK, copy(map, 0, 0, units * unit));
    span_vmm_cache_put(map);

    ASSERT_EQ(0, hsa_emu_fail("hipMemImportFromShareableHandle@2"));
    span_vmm_cache_purge();
    EXPECT_EQ(UCS_ERR_UNREACHABLE,
              span_vmm_cache_get(m_keys.data(), &m_geom, &map));
}

TEST_F(rocm_vmm, a_key_of_another_geometry_is_refused)
{
    span_chunk_geom_t geom;
    span_vmm_map_t *map;

    /* units of half the size: no key describes them */
    ASSERT_EQ(UCS_OK, span_chunk_plan_from(&geom, m_base, units * unit / 2,
                                           m_base, unit / 2, 0, 0));
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              span_vmm_cache_get(m_keys.data(), &geom, &map));
}

} // namespace
