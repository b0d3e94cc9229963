/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The import of VMM units (span_vmm_import.h), the same for every driver,
 * over real exports of this process (the export table, with memfds as
 * units) and a driver that records its calls: the units are taken, imported
 * and mapped in order, and a failure at any call undoes what was done, the
 * last first, leaving no handle, mapping, reservation or descriptor.
 * A program of its own: the unit tests fake span_vmm_import for the cache.
 */
#include "test_fds.h"
#include "test_log.h"

#include <gtest/gtest.h>

extern "C" {
#include "vmm/span_vmm_export.h"
#include "vmm/span_vmm_import.h"
}

#include <sys/mman.h>
#include <unistd.h>

#include <string>
#include <vector>

namespace {

const uint64_t unit     = 2 << 20;
const uint64_t reserved = 0x7a0000000000ull; /* where the driver reserves */

/* The driver's calls, in order, as "name arg": arg the unit's index for
 * import, map, release and unmap */
std::vector<std::string> calls;
std::string              fail_at; /* the call that fails, as recorded */
int                      device = 3;

uint32_t index_of(uint64_t va)
{
    return (va - reserved) / unit;
}

ucs_status_t record(const std::string &call)
{
    calls.push_back(call);
    return (call == fail_at) ? UCS_ERR_IO_ERROR : UCS_OK;
}

ucs_status_t fake_enter(int *device_p, int *entered_p)
{
    *device_p  = device;
    *entered_p = 1;
    return record("enter");
}

void fake_leave(int dev, int entered)
{
    record("leave " + std::to_string(dev) + " " + std::to_string(entered));
}

ucs_status_t fake_reserve(uint64_t length, uint64_t *va_p)
{
    *va_p = reserved;
    return record("reserve " + std::to_string(length / unit));
}

void fake_free(uint64_t va, uint64_t length)
{
    record("free " + std::to_string(length / unit));
}

/* a handle is the unit's index, told by the memfd's size */
ucs_status_t fake_import(int fd, uint64_t *handle_p)
{
    *handle_p = lseek(fd, 0, SEEK_END) / unit - 1;
    return record("import " + std::to_string(*handle_p));
}

void fake_release(uint64_t handle)
{
    record("release " + std::to_string(handle));
}

ucs_status_t fake_map(uint64_t va, uint64_t length, uint64_t handle)
{
    EXPECT_EQ(index_of(va), handle) << "a unit mapped out of its place";
    EXPECT_EQ(unit, length);
    return record("map " + std::to_string(handle));
}

void fake_unmap(uint64_t va, uint64_t length)
{
    record("unmap " + std::to_string(index_of(va)) + "+" +
           std::to_string(length / unit));
}

ucs_status_t fake_set_access(uint64_t va, uint64_t length, int dev)
{
    return record("access " + std::to_string(dev));
}

const span_vmm_import_ops_t fake_ops =
        SPAN_VMM_IMPORT_OPS(fake, "fake", SPAN_CUDA_VMM_MAGIC, 0);

/* the export's buffer id and descriptor: unit i is a memfd of i + 1 units,
 * so that an import can tell which unit a descriptor is */
ucs_status_t unit_buffer_id(uint64_t addr, uint64_t *id_p)
{
    *id_p = addr;
    return UCS_OK;
}

ucs_status_t unit_export_fd(uint64_t base, int *fd_p)
{
    *fd_p = memfd_create("span-test-unit", MFD_CLOEXEC);
    return ((*fd_p >= 0) &&
            (ftruncate(*fd_p, (base - 0x7d0000000000ull) + unit) == 0)) ?
           UCS_OK : UCS_ERR_IO_ERROR;
}

const span_vmm_export_ops_t unit_ops = {unit_buffer_id, unit_export_fd};

class vmm_import : public ::testing::Test {
protected:
    static constexpr uint32_t units = 4;

    void SetUp() override
    {
        span_vmm_key_t key;
        span_vmm_export_t *e;
        uint32_t i;

        calls.clear();
        fail_at.clear();
        m_fds_before = test_open_fds();
        for (i = 0; i < units; ++i) {
            ASSERT_EQ(UCS_OK, span_vmm_export_get(&unit_ops,
                                                  0x7d0000000000ull +
                                                  (i * unit), unit, &key, &e));
            m_keys.push_back(key);
            m_exports.push_back(e);
        }
        ASSERT_EQ(UCS_OK, span_chunk_plan_from(&m_geom, 0x100000000ull,
                                               units * unit, 0x100000000ull,
                                               unit, 0, 0));
        ASSERT_EQ(units, m_geom.num_chunks);
    }

    void TearDown() override
    {
        for (auto e : m_exports) {
            span_vmm_export_put(e);
        }
        EXPECT_EQ(m_fds_before, test_open_fds()) << "a descriptor was left";
    }

    ucs_status_t import(span_vmm_map_t *map)
    {
        log_counter logs;
        ucs_status_t status;

        status = span_vmm_import(&fake_ops, m_keys.data(), &m_geom, map);
        EXPECT_EQ((status == UCS_OK) ? 0u : 1u, logs.count("span vmm import"))
                << "a failure is logged once, by the import";
        return status;
    }

    /* The calls of an import that fails at fail_at, after the units before
     * unit failed were mapped */
    std::vector<std::string> undone(uint32_t failed)
    {
        std::vector<std::string> c = {"enter", "reserve 4"};
        uint32_t i;

        for (i = 0; i < failed; ++i) {
            c.insert(c.end(), {"import " + std::to_string(i),
                               "map " + std::to_string(i),
                               "release " + std::to_string(i)});
        }
        return c;
    }

    int                              m_fds_before;
    std::vector<span_vmm_key_t>      m_keys;
    std::vector<span_vmm_export_t*>  m_exports;
    span_chunk_geom_t                m_geom;
};

TEST_F(vmm_import, units_are_mapped_in_place_and_the_device_given_access)
{
    span_vmm_map_t map;
    std::vector<std::string> c = undone(units);

    ASSERT_EQ(UCS_OK, import(&map));
    c.insert(c.end(), {"access 3", "leave 3 1"});
    EXPECT_EQ(c, calls);
    EXPECT_EQ(reserved, map.base);
    EXPECT_EQ(units * unit, map.length);
    EXPECT_EQ(getpid(), (pid_t)map.pid);
    EXPECT_EQ(3, map.device);
    EXPECT_EQ(1ull << 3, map.devices);
    EXPECT_FALSE(map.rocm);

    calls.clear();
    EXPECT_EQ(UCS_OK, span_vmm_access(&map, 3)) << "once per device";
    EXPECT_EQ(UCS_OK, span_vmm_access(&map, 5));
    EXPECT_EQ(std::vector<std::string>({"access 5"}), calls);
    EXPECT_EQ((1ull << 3) | (1ull << 5), map.devices);
    {
        log_counter logs;
        EXPECT_EQ(UCS_ERR_NO_DEVICE, span_vmm_access(&map, 64));
        EXPECT_EQ(1u, logs.count("beyond the 64 a mapping tracks"));
    }

    calls.clear();
    span_vmm_unmap(&map);
    EXPECT_EQ(std::vector<std::string>({"unmap 0+4", "free 4"}), calls);
}

TEST_F(vmm_import, a_failed_reservation_leaves_the_context)
{
    span_vmm_map_t map;
    std::vector<std::string> c = undone(0);

    fail_at = "reserve 4";
    EXPECT_EQ(UCS_ERR_NO_MEMORY, import(&map));
    c.insert(c.end(), {"leave 3 1"});
    EXPECT_EQ(c, calls);
}

/* A unit's import or mapping fails: the units before are unmapped, the
 * last first, then the range freed and the context left */
TEST_F(vmm_import, a_failure_halfway_is_undone_in_reverse)
{
    for (uint32_t failed = 0; failed < units; ++failed) {
        for (std::string call : {"import", "map"}) {
            SCOPED_TRACE(call + " of unit " + std::to_string(failed));
            std::vector<std::string> c = undone(failed);
            std::string which          = " " + std::to_string(failed);
            span_vmm_map_t map;

            calls.clear();
            fail_at = call + which;
            c.push_back("import" + which);
            if (call == "map") {
                c.insert(c.end(), {"map" + which, "release" + which});
            }
            for (uint32_t i = failed; i-- > 0;) {
                c.push_back("unmap " + std::to_string(i) + "+1");
            }
            c.insert(c.end(), {"free 4", "leave 3 1"});
            EXPECT_EQ((call == "map") ? UCS_ERR_NO_MEMORY :
                                        UCS_ERR_UNREACHABLE,
                      import(&map));
            EXPECT_EQ(c, calls);
        }
    }
}

TEST_F(vmm_import, a_device_that_cannot_access_maps_nothing)
{
    span_vmm_map_t map;
    std::vector<std::string> c = undone(units);

    fail_at = "access 3";
    EXPECT_EQ(UCS_ERR_NO_DEVICE, import(&map));
    c.push_back("access 3");
    for (uint32_t i = units; i-- > 0;) {
        c.push_back("unmap " + std::to_string(i) + "+1");
    }
    c.insert(c.end(), {"free 4", "leave 3 1"});
    EXPECT_EQ(c, calls);
}

TEST_F(vmm_import, keys_that_do_not_describe_the_geometry_are_refused)
{
    span_vmm_map_t map;
    std::vector<std::string> c = undone(2);

    /* the third unit's key says it is another driver's */
    m_keys[2].magic = SPAN_ROCM_VMM_MAGIC;
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, import(&map));
    c.insert(c.end(), {"unmap 1+1", "unmap 0+1", "free 4", "leave 3 1"});
    EXPECT_EQ(c, calls);

    /* units of half the size */
    m_keys[2].magic = SPAN_CUDA_VMM_MAGIC;
    ASSERT_EQ(UCS_OK, span_chunk_plan_from(&m_geom, 0x100000000ull,
                                           units * unit / 2, 0x100000000ull,
                                           unit / 2, 0, 0));
    calls.clear();
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, import(&map));
    EXPECT_EQ(std::vector<std::string>({"enter", "reserve 2", "free 2",
                                        "leave 3 1"}),
              calls);
}

TEST_F(vmm_import, units_of_a_driver_the_build_lacks_are_refused)
{
    span_vmm_map_t map;
    log_counter logs;

    EXPECT_EQ(UCS_ERR_UNREACHABLE,
              span_vmm_import(nullptr, m_keys.data(), &m_geom, &map));
    EXPECT_EQ(1u, logs.count("span was built without the driver"));
}

} // namespace
