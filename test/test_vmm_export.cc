/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Shared VMM exports and the export table, over a driver whose "units" are
 * memfds: one descriptor per unit however many registrations cover it,
 * withdrawn at the last release or at an unmap, and an importer (this
 * process, through pidfd_getfd as a peer would) that takes a descriptor
 * only while the table says it is the export its key names: a number used
 * again by another export is refused, not mapped.
 */
#include "test_fds.h"
#include "test_fork.h"
#include "test_log.h"

#include <gtest/gtest.h>

extern "C" {
#include "vmm/span_vmm_export.h"
#include "base/span_memfd.h"
}

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <map>
#include <thread>
#include <vector>

namespace {

constexpr uint64_t MiB = 1ull << 20;

std::map<uint64_t, uint64_t> fake_ids; /* unit base -> buffer id */
std::atomic<int> exports{0};

ucs_status_t fake_buffer_id(uint64_t addr, uint64_t *id_p)
{
    auto it = fake_ids.find(addr);
    if (it == fake_ids.end()) {
        return UCS_ERR_INVALID_ADDR;
    }
    *id_p = it->second;
    return UCS_OK;
}

ucs_status_t fake_export_fd(uint64_t base, int *fd_p)
{
    *fd_p = memfd_create("span-test-vmm-unit", MFD_CLOEXEC);
    ++exports;
    return (*fd_p >= 0) ? UCS_OK : UCS_ERR_IO_ERROR;
}

const span_vmm_export_ops_t fake_ops = {fake_buffer_id, fake_export_fd};

class vmm_export : public ::testing::Test {
protected:
    void SetUp() override
    {
        fake_ids.clear();
        exports  = 0;
        fds      = test_open_fds();
        pidfd    = syscall(SYS_pidfd_open, getpid(), 0);
        ASSERT_GE(pidfd, 0);
    }

    void TearDown() override
    {
        close(pidfd);
        EXPECT_EQ(fds, test_open_fds()) << "a descriptor was left";
    }

    span_vmm_export_t *get(uint64_t addr, uint64_t size,
                           span_vmm_key_t *key)
    {
        span_vmm_export_t *e = NULL;

        EXPECT_EQ(UCS_OK, span_vmm_export_get(&fake_ops, addr, size, key,
                                              &e));
        return e;
    }

    /* what an importer gets for the key: UCS_OK where it took the
     * descriptor, checked to be the exporter's */
    ucs_status_t take(const span_vmm_key_t &key)
    {
        return take(pidfd, key, 0);
    }

    /* ... of exporter (pidfd), whose descriptor is the file of inode ino
     * (0: this process's key.fd) */
    static ucs_status_t take(int exporter, const span_vmm_key_t &key,
                             ino_t ino)
    {
        ucs_status_t status;
        struct stat a, b;
        int table, fd;

        status = span_vmm_table_open(exporter, &key, &table);
        if (status != UCS_OK) {
            return status;
        }
        status = span_vmm_table_take(exporter, table, &key, &fd);
        if (status == UCS_OK) {
            EXPECT_EQ(0, fstat(fd, &a));
            if (ino == 0) {
                EXPECT_EQ(0, fstat(key.fd, &b));
                ino = b.st_ino;
            }
            EXPECT_EQ(ino, a.st_ino) << "another file";
            close(fd);
        }
        close(table);
        return status;
    }

    static constexpr uint64_t base = 0x7e0000000000ull;
    int fds   = 0;
    int pidfd = -1;
};

TEST_F(vmm_export, registrations_of_a_unit_share_one_export)
{
    span_vmm_key_t k1, k2, k3;

    fake_ids[base]           = 10;
    fake_ids[base + 2 * MiB] = 11;
    span_vmm_export_t *a = get(base, 2 * MiB, &k1);
    span_vmm_export_t *b = get(base, 2 * MiB, &k2);     /* again */
    span_vmm_export_t *c = get(base + 2 * MiB, 2 * MiB, &k3);
    EXPECT_EQ(a, b);
    EXPECT_EQ(2, exports);
    EXPECT_EQ(k1.fd, k2.fd);
    EXPECT_EQ(k1.serial, k2.serial);
    EXPECT_NE(k1.serial, k3.serial);
    EXPECT_EQ(uint64_t(2 * MiB), k1.size);
    EXPECT_EQ(UCS_OK, take(k1));
    EXPECT_EQ(UCS_OK, take(k3));

    span_vmm_export_put(a);
    EXPECT_EQ(UCS_OK, take(k1)) << "still held by the second registration";
    span_vmm_export_put(b);
    EXPECT_EQ(UCS_ERR_INVALID_ADDR, take(k1)) << "withdrawn at the last";
    span_vmm_export_put(c);
}

TEST_F(vmm_export, a_number_used_again_is_refused_for_the_old_key)
{
    span_vmm_key_t old_key, new_key;

    fake_ids[base]           = 20;
    fake_ids[base + 8 * MiB] = 21;
    span_vmm_export_put(get(base, 2 * MiB, &old_key));
    /* another unit's export takes the number the first one freed */
    span_vmm_export_t *e = get(base + 8 * MiB, 2 * MiB, &new_key);
    ASSERT_EQ(old_key.fd, new_key.fd);
    EXPECT_EQ(UCS_ERR_INVALID_ADDR, take(old_key));
    EXPECT_EQ(UCS_OK, take(new_key));
    span_vmm_export_put(e);
}

TEST_F(vmm_export, an_unmap_withdraws_the_export_at_once)
{
    span_vmm_key_t key, again;

    fake_ids[base] = 30;
    span_vmm_export_t *e = get(base, 4 * MiB, &key);
    span_vmm_export_invalidate(base + MiB, 4096);
    EXPECT_EQ(UCS_ERR_INVALID_ADDR, take(key));
    /* memory mapped there again is another unit: exported anew */
    fake_ids[base] = 31;
    span_vmm_export_t *f = get(base, 4 * MiB, &again);
    EXPECT_NE(e, f);
    EXPECT_NE(key.serial, again.serial);
    EXPECT_EQ(UCS_OK, take(again));
    span_vmm_export_put(e); /* withdrawn: only freed */
    span_vmm_export_put(f);
    EXPECT_EQ(2, exports);
}

/* an exporter keeps no descriptor once it exports nothing, and a key of
 * the table it closed is refused, not served by the next one */
TEST_F(vmm_export, a_process_that_exports_nothing_keeps_no_descriptor)
{
    span_vmm_key_t old_key, new_key;
    int before = test_open_fds();

    fake_ids[base] = 35;
    span_vmm_export_put(get(base, 2 * MiB, &old_key));
    EXPECT_EQ(before, test_open_fds()) << "the table stayed open";
    span_vmm_export_t *e = get(base, 2 * MiB, &new_key);
    EXPECT_NE(old_key.table_id, new_key.table_id);
    EXPECT_EQ(UCS_ERR_INVALID_ADDR, take(old_key));
    EXPECT_EQ(UCS_OK, take(new_key));
    span_vmm_export_put(e);
}

TEST_F(vmm_export, an_unmap_elsewhere_leaves_it)
{
    span_vmm_key_t key;

    fake_ids[base] = 40;
    span_vmm_export_t *e = get(base, 2 * MiB, &key);
    span_vmm_export_invalidate(base + 2 * MiB, 2 * MiB);
    span_vmm_export_invalidate(base - 4096, 4096);
    EXPECT_EQ(UCS_OK, take(key));
    span_vmm_export_put(e);
}

TEST_F(vmm_export, a_key_of_another_table_or_size_is_refused)
{
    span_vmm_key_t key, bad;
    int other = memfd_create("ucx-span-vmm", MFD_CLOEXEC); /* an impostor */

    fake_ids[base] = 50;
    span_vmm_export_t *e = get(base, 2 * MiB, &key);

    bad          = key;
    bad.table_id = key.table_id + 1;
    EXPECT_EQ(UCS_ERR_INVALID_ADDR, take(bad));
    bad          = key;
    bad.table_fd = other;
    EXPECT_EQ(UCS_ERR_INVALID_ADDR, take(bad));
    bad          = key;
    bad.table_fd = 0; /* stdin: not a memfd at all */
    EXPECT_EQ(UCS_ERR_INVALID_ADDR, take(bad));
    bad          = key;
    bad.table_fd = 100000; /* no such descriptor */
    EXPECT_EQ(UCS_ERR_INVALID_ADDR, take(bad));
    bad      = key;
    bad.size = 4 * MiB;
    EXPECT_EQ(UCS_ERR_INVALID_ADDR, take(bad));
    bad        = key;
    bad.serial = key.serial + 1;
    EXPECT_EQ(UCS_ERR_INVALID_ADDR, take(bad));
    bad    = key;
    bad.fd = 100000; /* past the table's end */
    EXPECT_EQ(UCS_ERR_INVALID_ADDR, take(bad));
    EXPECT_EQ(UCS_OK, take(key));
    span_vmm_export_put(e);
    close(other);
}

/* threads register, release and unmap units at once: every unit exported
 * at most once at a time, and nothing left open in the end */
TEST_F(vmm_export, threads_share_and_release_exports)
{
    const int units = 8, threads = 4, rounds = 300;
    std::vector<std::thread> pool;

    for (int u = 0; u < units; ++u) {
        fake_ids[base + u * 2 * MiB] = 60 + u;
    }
    for (int t = 0; t < threads; ++t) {
        pool.emplace_back([&, t] {
            std::vector<span_vmm_export_t*> held;
            for (int i = 0; i < rounds; ++i) {
                span_vmm_key_t key;
                span_vmm_export_t *e;
                uint64_t u = (i * 7 + t) % units;
                ASSERT_EQ(UCS_OK, span_vmm_export_get(
                        &fake_ops, base + u * 2 * MiB, 2 * MiB, &key, &e));
                held.push_back(e);
                if (i % 3 == 2) {
                    for (auto h : held) {
                        span_vmm_export_put(h);
                    }
                    held.clear();
                }
                if ((t == 0) && (i % 50 == 49)) {
                    span_vmm_export_invalidate(base, 4 * MiB);
                }
            }
            for (auto h : held) {
                span_vmm_export_put(h);
            }
        });
    }
    for (auto &thread : pool) {
        thread.join();
    }
    EXPECT_GE(exports, units);
}

/* What a child forked after exports sends its parent: a key of its own
 * export and the inode of its descriptor */
struct child_export {
    span_vmm_key_t key;
    ino_t               ino;
};

/* A child (a PyTorch data loader) inherits the parent's exports: its unmap
 * events and releases of them must not withdraw them from the parent's
 * importers, and its own exports are its own */
TEST_F(vmm_export, a_child_leaves_the_parents_exports_alone)
{
    int to_parent[2], hold[2];
    span_vmm_key_t key;
    child_export mine;

    fake_ids[base]            = 70;
    fake_ids[base + 16 * MiB] = 71;
    span_vmm_export_t *e = get(base, 2 * MiB, &key);
    ASSERT_EQ(0, pipe(to_parent));
    ASSERT_EQ(0, pipe(hold));
    pid_t child = test_fork([&] {
        span_vmm_export_t *own;
        struct stat st;

        close(to_parent[0]);
        close(hold[1]);
        span_vmm_export_invalidate(base, 2 * MiB); /* unmapped here */
        span_vmm_export_put(e);                    /* released here */
        TEST_CHILD_CHECK(span_vmm_export_get(&fake_ops,
                                             base + 16 * MiB, 2 * MiB,
                                             &mine.key, &own) == UCS_OK);
        TEST_CHILD_CHECK(fstat(mine.key.fd, &st) == 0);
        mine.ino = st.st_ino;
        TEST_CHILD_CHECK(write(to_parent[1], &mine, sizeof(mine)) ==
                         sizeof(mine));
        TEST_CHILD_CHECK(test_pipe_wait_closed(hold[0], 10));
        span_vmm_export_put(own);
        return 0;
    });
    ASSERT_GE(child, 0);
    close(to_parent[1]);
    close(hold[0]);

    bool exported = test_pipe_read(to_parent[0], &mine, sizeof(mine), 10);
    EXPECT_TRUE(exported) << "the child did not export";
    EXPECT_EQ(UCS_OK, take(key)) << "the child withdrew the parent's export";
    if (exported) {
        EXPECT_EQ(uint32_t(child), mine.key.pid);
        EXPECT_NE(key.table_id, mine.key.table_id)
                << "the child's export is in the parent's table";
        int child_pidfd = syscall(SYS_pidfd_open, child, 0);
        EXPECT_GE(child_pidfd, 0);
        EXPECT_EQ(UCS_OK, take(child_pidfd, mine.key, mine.ino));
        close(child_pidfd);
        EXPECT_EQ(UCS_OK, take(key)) << "the child's export took the parent's";
    }
    close(hold[1]);
    close(to_parent[0]);
    EXPECT_EQ(0, test_fork_wait(child, 10));
    EXPECT_EQ(UCS_OK, take(key));
    span_vmm_export_put(e);
    EXPECT_EQ(UCS_ERR_INVALID_ADDR, take(key));
}

/* A fork while another thread exports and releases: the child can export
 * (it must not inherit the table's lock held by a thread it does not have,
 * nor a half-made entry) */
TEST_F(vmm_export, a_fork_amid_exports_leaves_the_child_a_table)
{
    const int units = 4;
    int i = 0; /* the worker's only */

    for (int u = 0; u < units; ++u) {
        fake_ids[base + u * 2 * MiB] = 80 + u;
    }
    fake_ids[base + 32 * MiB] = 90;
    test_fork_amid([&] {
        span_vmm_key_t key;
        span_vmm_export_t *e;
        ASSERT_EQ(UCS_OK, span_vmm_export_get(
                &fake_ops, base + (i++ % units) * 2 * MiB, 2 * MiB, &key,
                &e));
        span_vmm_export_put(e);
    }, [&] {
        span_vmm_key_t key;
        span_vmm_export_t *e;
        struct stat st;
        int self = syscall(SYS_pidfd_open, getpid(), 0);

        TEST_CHILD_CHECK(span_vmm_export_get(&fake_ops, base + 32 * MiB,
                                             2 * MiB, &key, &e) == UCS_OK);
        TEST_CHILD_CHECK(fstat(key.fd, &st) == 0);
        TEST_CHILD_CHECK(take(self, key, st.st_ino) == UCS_OK);
        span_vmm_export_put(e);
        log_counter logs;
        TEST_CHILD_CHECK(take(self, key, st.st_ino) == UCS_ERR_INVALID_ADDR);
        return 0;
    });
}

TEST_F(vmm_export, memory_that_is_not_a_unit_is_unsupported)
{
    span_vmm_key_t key;
    span_vmm_export_t *e;

    EXPECT_EQ(UCS_ERR_UNSUPPORTED,
              span_vmm_export_get(&fake_ops, base, 2 * MiB, &key, &e));
    EXPECT_EQ(0, exports);
}

} // namespace

/* A table is read only where its seals say it cannot shrink under the
 * mapping; seals that cannot be read (fcntl fails: -1 has every bit set)
 * do not count as sealed */
TEST(span_memfd, seals_that_cannot_be_read_are_not_seals)
{
    int pipefd[2];
    ASSERT_EQ(0, pipe(pipefd));
    EXPECT_FALSE(span_memfd_sealed(pipefd[0], F_SEAL_SHRINK));
    close(pipefd[0]);
    close(pipefd[1]);

    int fd = memfd_create("span-test-seals", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    ASSERT_GE(fd, 0);
    EXPECT_FALSE(span_memfd_sealed(fd, F_SEAL_SHRINK));
    ASSERT_EQ(0, fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK));
    EXPECT_TRUE(span_memfd_sealed(fd, F_SEAL_SHRINK));
    EXPECT_FALSE(span_memfd_sealed(fd, F_SEAL_SHRINK | F_SEAL_GROW));
    close(fd);
}
