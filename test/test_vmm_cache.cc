/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The import cache of VMM mappings, over real exports of this process (the
 * export table, with memfds as units) and an import that maps nothing: one
 * mapping per exporter's units while they are exported, a new one once the
 * exporter withdrew them or another export took a descriptor's number, a
 * bounded number kept unused, and every mapping unmapped and every
 * descriptor and table view released in the end.
 */
#include "test_fds.h"
#include "test_fork.h"

#include <gtest/gtest.h>

extern "C" {
#include "vmm/span_vmm_cache.h"
#include "vmm/span_vmm_export.h"
#include "vmm/span_vmm_import.h"
#include "base/span_peer.h"
}

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <vector>

namespace {

int imports, unmaps;
std::vector<uint64_t> unmapped; /* the local bases unmapped, in order */

ucs_status_t unit_buffer_id(uint64_t addr, uint64_t *id_p)
{
    *id_p = addr >> 21;
    return UCS_OK;
}

ucs_status_t unit_export_fd(uint64_t base, int *fd_p)
{
    *fd_p = memfd_create("span-test-unit", MFD_CLOEXEC);
    return (*fd_p >= 0) ? UCS_OK : UCS_ERR_IO_ERROR;
}

const span_vmm_export_ops_t unit_ops = {unit_buffer_id, unit_export_fd};

} // namespace

/* The import the cache calls, faked: no driver's calls (whatever the
 * vendor's ops), and no table checked but the cache's */
extern "C" ucs_status_t span_vmm_import(const span_vmm_import_ops_t *ops,
                                        const span_vmm_key_t *keys,
                                        const span_chunk_geom_t *geom,
                                        span_vmm_map_t *map)
{
    memset(map, 0, sizeof(*map));
    map->pid    = getpid();
    map->pid_ns = span_peer_pid_ns();
    map->base   = 0x7000000000ull + ((uint64_t)++imports << 30);
    return UCS_OK;
}

extern "C" void span_vmm_unmap(span_vmm_map_t *map)
{
    ++unmaps;
    unmapped.push_back(map->base);
}

/* ROCm's copy engine, linked in beside the cache, names it: no copy runs
 * in this program */
extern "C" ucs_status_t span_vmm_access(span_vmm_map_t *map, int device)
{
    ADD_FAILURE() << "span_vmm_access(" << map << ", " << device << ")";
    return UCS_ERR_UNSUPPORTED;
}

namespace {

class vmm_cache : public ::testing::Test {
protected:
    static void SetUpTestSuite()
    {
        /* the export table lives as long as the process: made first */
        span_vmm_key_t key;
        span_vmm_export_t *e;
        ASSERT_EQ(UCS_OK, span_vmm_export_get(&unit_ops, 0x7c0000000000ull,
                                              2 << 20, &key, &e));
        span_vmm_export_put(e);
    }

    void SetUp() override
    {
        imports = unmaps = 0;
        m_fds_before     = test_open_fds();
    }

    void TearDown() override
    {
        span_vmm_cache_purge();
        for (auto &e : m_exports) {
            span_vmm_export_put(e.second);
        }
        EXPECT_EQ(imports, unmaps) << "a mapping was left";
        EXPECT_EQ(m_fds_before, test_open_fds()) << "a descriptor was left";
    }

    /* A unit the exporter (this process) exports, of 2 MiB */
    span_vmm_key_t export_unit()
    {
        static uint64_t next = 0x7d0000000000ull;
        span_vmm_key_t key;
        span_vmm_export_t *e;

        EXPECT_EQ(UCS_OK, span_vmm_export_get(&unit_ops, next, 2 << 20,
                                              &key, &e));
        next += 2 << 20;
        m_exports[key.serial] = e;
        return key;
    }

    /* The exporter deregisters the unit; with reuse, the next export takes
     * its descriptor's number (returned) */
    span_vmm_key_t unexport(const span_vmm_key_t &key, bool reuse)
    {
        span_vmm_export_put(m_exports[key.serial]);
        m_exports.erase(key.serial);
        if (!reuse) {
            return key;
        }
        span_vmm_key_t again = export_unit();
        EXPECT_EQ(key.fd, again.fd);
        return again;
    }

    span_chunk_geom_t geom(uint32_t units)
    {
        span_chunk_geom_t g = {};
        g.base       = 0x100000000ull;
        g.length     = (uint64_t)units << 21;
        g.num_chunks = units;
        return g;
    }

    span_vmm_map_t *get(const std::vector<span_vmm_key_t> &k)
    {
        span_chunk_geom_t g = geom(k.size());
        span_vmm_map_t *map = NULL;

        EXPECT_EQ(UCS_OK, span_vmm_cache_get(k.data(), &g, &map));
        return map;
    }

    int m_fds_before;
    std::map<uint64_t, span_vmm_export_t*> m_exports; /* by serial */
};

TEST_F(vmm_cache, units_still_exported_are_mapped_once)
{
    std::vector<span_vmm_key_t> k = {export_unit(), export_unit()};
    span_vmm_map_t *a = get(k), *b = get(k);

    EXPECT_EQ(a, b);
    span_vmm_cache_put(a);
    span_vmm_cache_put(b);
    /* unused, kept: the next rendezvous message maps nothing */
    span_vmm_map_t *c = get(k);
    EXPECT_EQ(a, c);
    EXPECT_EQ(1, imports);
    EXPECT_EQ(0, unmaps);
    span_vmm_cache_put(c);
}

TEST_F(vmm_cache, a_deregistered_unit_is_mapped_anew)
{
    span_vmm_key_t unit = export_unit();
    std::vector<span_vmm_key_t> k = {export_unit(), unit};

    span_vmm_cache_put(get(k));
    unexport(unit, false);
    span_vmm_map_t *m = get(k); /* the fake import maps anyway */
    EXPECT_EQ(2, imports);
    EXPECT_EQ(1, unmaps) << "the stale unused mapping was kept";
    span_vmm_cache_put(m);
    EXPECT_EQ(2, unmaps) << "a mapping of a withdrawn export was cached";
}

TEST_F(vmm_cache, a_number_used_again_is_another_unit)
{
    span_vmm_key_t unit = export_unit();
    std::vector<span_vmm_key_t> k = {unit};

    span_vmm_map_t *old = get(k);
    /* while an rkey still uses the mapping */
    std::vector<span_vmm_key_t> k2 = {unexport(unit, true)};
    span_vmm_map_t *m = get(k2);
    EXPECT_NE(old, m);
    EXPECT_EQ(2, imports);
    EXPECT_EQ(0, unmaps);
    span_vmm_cache_put(old); /* its last user: unmapped now */
    EXPECT_EQ(1, unmaps);
    span_vmm_cache_put(m);
    EXPECT_EQ(m, get(k2)) << "the live mapping is kept";
    span_vmm_cache_put(m);
}

/* A child inherits the parent's cached mappings, which live in the
 * parent's CUDA context (CUDA does not survive fork): the child maps the
 * units anew, never unmaps the parent's, and the parent keeps serving its
 * own */
TEST_F(vmm_cache, a_child_maps_anew_and_leaves_the_parents_mappings)
{
    std::vector<span_vmm_key_t> k = {export_unit()}, k2 = {export_unit()};
    span_vmm_map_t *idle = get(k), *held = get(k2);
    uint64_t idle_base = idle->base, held_base = held->base;

    span_vmm_cache_put(idle); /* cached, unused */
    ASSERT_EQ(2, imports);
    pid_t child = test_fork([&] {
        auto parents = [&] {
            return std::count(unmapped.begin(), unmapped.end(), idle_base) +
                   std::count(unmapped.begin(), unmapped.end(), held_base);
        };
        span_chunk_geom_t g = geom(1);
        span_vmm_map_t *m;

        unmapped.clear();
        TEST_CHILD_CHECK(span_vmm_cache_get(k.data(), &g, &m) == UCS_OK);
        TEST_CHILD_CHECK(imports == 3); /* not the parent's mapping */
        TEST_CHILD_CHECK(m->base != idle_base);
        span_vmm_cache_put(m);
        span_vmm_cache_put(held); /* an rkey inherited, released */
        span_vmm_cache_purge();
        TEST_CHILD_CHECK(parents() == 0);
        TEST_CHILD_CHECK(unmapped.size() == 1); /* its own */
        return 0;
    });
    ASSERT_GE(child, 0);
    EXPECT_EQ(0, test_fork_wait(child, 10));

    EXPECT_EQ(idle, get(k)) << "the parent's mapping is no longer served";
    EXPECT_EQ(2, imports);
    span_vmm_cache_put(idle);
    span_vmm_cache_put(held);
}

/* A fork while another thread walks the cache: the child can use it (it
 * must not inherit the cache's lock held by a thread it does not have) */
TEST_F(vmm_cache, a_fork_amid_lookups_leaves_the_child_a_cache)
{
    const int held = 64;
    std::vector<span_vmm_map_t*> maps;
    std::vector<span_vmm_key_t> k = {export_unit()};

    for (int i = 0; i < held; ++i) { /* a long list to walk */
        maps.push_back(get({export_unit()}));
    }
    test_fork_amid(span_vmm_cache_purge, [&] {
        span_chunk_geom_t g = geom(1);
        span_vmm_map_t *m;

        TEST_CHILD_CHECK(span_vmm_cache_get(k.data(), &g, &m) == UCS_OK);
        span_vmm_cache_put(m);
        span_vmm_cache_purge();
        return 0;
    });
    for (auto m : maps) {
        span_vmm_cache_put(m);
    }
}

TEST_F(vmm_cache, unused_mappings_are_bounded)
{
    const int n = SPAN_VMM_CACHE_IDLE + 3;
    std::vector<std::vector<span_vmm_key_t>> k;

    for (int i = 0; i < n; ++i) {
        k.push_back({export_unit()});
        span_vmm_cache_put(get(k.back()));
    }
    EXPECT_EQ(n, imports);
    EXPECT_EQ(n - SPAN_VMM_CACHE_IDLE, unmaps);
    /* the least recently used went first: the last ones are still mapped */
    span_vmm_cache_put(get(k.back()));
    EXPECT_EQ(n, imports);
    span_vmm_cache_purge();
    EXPECT_EQ(n, unmaps);
}

/* The engine counts the copies through a mapping (span_vmm_map_t.busy):
 * an rkey released while they run, or its units withdrawn, or a full
 * cache, never unmaps it before they ran */
TEST_F(vmm_cache, a_mapping_is_not_unmapped_while_copies_through_it_run)
{
    std::vector<span_vmm_key_t> k = {export_unit()};
    span_vmm_map_t *map = get(k);
    const uint64_t base = map->base;

    unmapped.clear();
    map->busy = 1;
    span_vmm_cache_put(map); /* the last rkey, with copies in flight */
    span_vmm_cache_purge();
    unexport(k[0], false);
    span_vmm_cache_put(get({export_unit()})); /* a lookup drops dead ones */
    EXPECT_EQ(0, unmaps);
    for (int i = 0; i < SPAN_VMM_CACHE_IDLE + 2; ++i) {
        span_vmm_cache_put(get({export_unit()}));
    }
    EXPECT_EQ(std::find(unmapped.begin(), unmapped.end(), base),
              unmapped.end()) << "a full cache unmapped it";
    map->busy = 0; /* they ran */
    span_vmm_cache_purge();
    EXPECT_NE(std::find(unmapped.begin(), unmapped.end(), base),
              unmapped.end());
}

} // namespace
