/*
 * The import cache of VMM mappings, over an import that takes real copies of
 * this process's descriptors (pidfd_getfd) and maps nothing: one mapping per
 * exporter's units while they are exported, a new one once the exporter
 * closed or reused a descriptor, a bounded number kept unused, and every
 * mapping unmapped and every copy closed in the end.
 */
#include <gtest/gtest.h>

extern "C" {
#include "resolvers/span_cuda_vmm_cache.h"
#include "span_spill.h"
}

#include <dirent.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>
#include <vector>

namespace {

int imports, unmaps;

/* Descriptors open in this process */
int open_fds()
{
    DIR *dir = opendir("/proc/self/fd");
    int n    = 0;

    while (readdir(dir) != NULL) {
        ++n;
    }
    closedir(dir);
    return n;
}

} // namespace

/* The import the cache calls, faked: the descriptor copies are real */
extern "C" ucs_status_t span_cuda_vmm_import(const span_cuda_vmm_key_t *keys,
                                             const span_chunk_geom_t *geom,
                                             span_cuda_vmm_map_t *map,
                                             int *fds)
{
    int pidfd = syscall(SYS_pidfd_open, getpid(), 0);
    uint32_t i;

    for (i = 0; i < geom->num_chunks; ++i) {
        fds[i] = syscall(SYS_pidfd_getfd, pidfd, (int)keys[i].fd, 0);
    }
    close(pidfd);
    memset(map, 0, sizeof(*map));
    map->pid    = getpid();
    map->pid_ns = span_spill_pid_ns();
    map->base   = 0x7000000000ull + ((uint64_t)++imports << 30);
    return UCS_OK;
}

extern "C" void span_cuda_vmm_unmap(span_cuda_vmm_map_t *map)
{
    ++unmaps;
}

namespace {

class vmm_cache : public ::testing::Test {
protected:
    void SetUp() override
    {
        imports = unmaps = 0;
        m_fds_before     = open_fds();
    }

    void TearDown() override
    {
        span_cuda_vmm_cache_purge();
        for (int fd : m_exported) {
            if (fd >= 0) {
                close(fd);
            }
        }
        EXPECT_EQ(imports, unmaps) << "a mapping was left";
        EXPECT_EQ(m_fds_before, open_fds()) << "a descriptor was left";
    }

    /* An exporter's unit: a descriptor of its own file */
    int export_unit()
    {
        int fd = memfd_create("span-test-unit", MFD_CLOEXEC);
        m_exported.push_back(fd);
        return fd;
    }

    /* Keys of units with these descriptors, 2 MiB each */
    std::vector<span_cuda_vmm_key_t> keys(const std::vector<int> &fds)
    {
        std::vector<span_cuda_vmm_key_t> k(fds.size());

        for (size_t i = 0; i < fds.size(); ++i) {
            k[i]        = {};
            k[i].magic  = SPAN_CUDA_VMM_MAGIC;
            k[i].pid    = getpid();
            k[i].fd     = fds[i];
            k[i].size   = 2 << 20;
            k[i].pid_ns = span_spill_pid_ns();
            k[i].serial = 1 + i;
        }
        return k;
    }

    span_chunk_geom_t geom(uint32_t units)
    {
        span_chunk_geom_t g = {};
        g.base       = 0x100000000ull;
        g.length     = (uint64_t)units << 21;
        g.num_chunks = units;
        return g;
    }

    span_cuda_vmm_map_t *get(const std::vector<span_cuda_vmm_key_t> &k)
    {
        span_chunk_geom_t g = geom(k.size());
        span_cuda_vmm_map_t *map = NULL;

        EXPECT_EQ(UCS_OK, span_cuda_vmm_cache_get(k.data(), &g, &map));
        return map;
    }

    /* The exporter deregisters a unit: closes its descriptor; with reuse,
     * another file takes the same number */
    void unexport(int fd, bool reuse)
    {
        int other = reuse ? memfd_create("span-test-other", MFD_CLOEXEC) :
                            -1;

        close(fd);
        for (int &e : m_exported) {
            e = (e == fd) ? -1 : e;
        }
        if (reuse) {
            ASSERT_EQ(fd, dup2(other, fd));
            close(other);
            m_exported.push_back(fd);
        }
    }

    int              m_fds_before;
    std::vector<int> m_exported;
};

TEST_F(vmm_cache, units_still_exported_are_mapped_once)
{
    auto k = keys({export_unit(), export_unit()});
    span_cuda_vmm_map_t *a = get(k), *b = get(k);

    EXPECT_EQ(a, b);
    span_cuda_vmm_cache_put(a);
    span_cuda_vmm_cache_put(b);
    /* unused, kept: the next rendezvous message maps nothing */
    span_cuda_vmm_map_t *c = get(k);
    EXPECT_EQ(a, c);
    EXPECT_EQ(1, imports);
    EXPECT_EQ(0, unmaps);
    span_cuda_vmm_cache_put(c);
}

TEST_F(vmm_cache, a_deregistered_unit_is_mapped_anew)
{
    int fd = export_unit();
    auto k = keys({export_unit(), fd});

    span_cuda_vmm_cache_put(get(k));
    unexport(fd, false);
    span_cuda_vmm_map_t *m = get(k); /* the import sees whatever is there */
    EXPECT_EQ(2, imports);
    EXPECT_EQ(1, unmaps) << "the stale unused mapping was kept";
    span_cuda_vmm_cache_put(m);
}

TEST_F(vmm_cache, a_number_used_again_is_another_unit)
{
    int fd = export_unit();
    auto k = keys({fd});

    span_cuda_vmm_map_t *old = get(k);
    unexport(fd, true); /* while an rkey still uses the mapping */
    span_cuda_vmm_map_t *m = get(k);
    EXPECT_NE(old, m);
    EXPECT_EQ(2, imports);
    EXPECT_EQ(0, unmaps);
    span_cuda_vmm_cache_put(old); /* its last user: unmapped now */
    EXPECT_EQ(1, unmaps);
    span_cuda_vmm_cache_put(m);
    EXPECT_EQ(m, get(k)) << "the live mapping is kept";
    span_cuda_vmm_cache_put(m);
}

TEST_F(vmm_cache, unused_mappings_are_bounded)
{
    const int n = SPAN_CUDA_VMM_CACHE_IDLE + 3;
    std::vector<std::vector<span_cuda_vmm_key_t>> k;

    for (int i = 0; i < n; ++i) {
        k.push_back(keys({export_unit()}));
        span_cuda_vmm_cache_put(get(k.back()));
    }
    EXPECT_EQ(n, imports);
    EXPECT_EQ(n - SPAN_CUDA_VMM_CACHE_IDLE, unmaps);
    /* the least recently used went first: the last ones are still mapped */
    span_cuda_vmm_cache_put(get(k.back()));
    EXPECT_EQ(n, imports);
    span_cuda_vmm_cache_purge();
    EXPECT_EQ(n, unmaps);
}

} // namespace
