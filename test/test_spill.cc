/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Spill arena: keys stored by this process and read back through
 * /proc/self/fd, slots released and reused, stale references refused.
 */
extern "C" {
#include "base/span_peer.h"
#include "key/span_spill.h"
}
#include "test_fork.h"
#include "test_log.h"

#include <gtest/gtest.h>
#include <chrono>
#include <fcntl.h>
#include <future>
#include <thread>
#include <atomic>
#include <sched.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace {

std::vector<uint8_t> keys_of(uint32_t n, size_t K, uint8_t seed)
{
    std::vector<uint8_t> keys(n * K);
    for (size_t i = 0; i < keys.size(); ++i) {
        keys[i] = uint8_t(seed + i * 7);
    }
    return keys;
}

} // namespace

TEST(span_spill, put_fetch_remove)
{
    auto keys = keys_of(21, 192, 3);
    span_rkey_spill_t ref;
    ASSERT_EQ(UCS_OK, span_spill_put(keys.data(), 21, 192, &ref));
    EXPECT_EQ(uint32_t(getpid()), ref.pid);

    std::vector<uint8_t> back(keys.size());
    ASSERT_EQ(UCS_OK, span_spill_fetch(&ref, 21, 192, back.data()));
    EXPECT_EQ(keys, back);

    log_counter logs;
    /* a reference that names other sizes, or a corrupted checksum */
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, span_spill_fetch(&ref, 20, 192,
                                                      back.data()));
    span_rkey_spill_t bad = ref;
    bad.keys_sum ^= 1;
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, span_spill_fetch(&bad, 21, 192,
                                                      back.data()));
    bad          = ref;
    bad.arena_id ^= 1;
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, span_spill_fetch(&bad, 21, 192,
                                                      back.data()));
    bad    = ref;
    bad.fd = 1u << 20; /* no such descriptor */
    EXPECT_EQ(UCS_ERR_UNREACHABLE, span_spill_fetch(&bad, 21, 192,
                                                    back.data()));

    span_spill_remove(&ref);
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, span_spill_fetch(&ref, 21, 192,
                                                      back.data()));
    EXPECT_GE(logs.count("span spill"), 5u);
}

TEST(span_spill, released_slots_are_reused_and_stale_keys_refused)
{
    auto a = keys_of(4, 192, 1), b = keys_of(4, 192, 2);
    auto c = keys_of(4, 192, 3), big = keys_of(8, 192, 4);
    span_rkey_spill_t ra, rb, rc, rbig, rnew;
    ASSERT_EQ(UCS_OK, span_spill_put(a.data(), 4, 192, &ra));
    ASSERT_EQ(UCS_OK, span_spill_put(b.data(), 4, 192, &rb));
    ASSERT_EQ(UCS_OK, span_spill_put(c.data(), 4, 192, &rc));

    /* two neighbours released: one extent, where a larger slot fits */
    span_spill_remove(&ra);
    span_spill_remove(&rb);
    ASSERT_EQ(UCS_OK, span_spill_put(big.data(), 8, 192, &rbig));
    EXPECT_EQ(ra.offset, rbig.offset);

    /* a's reference names a reused slot: refused, never another's keys */
    std::vector<uint8_t> back(big.size());
    {
        log_counter logs;
        EXPECT_EQ(UCS_ERR_INVALID_PARAM, span_spill_fetch(&ra, 4, 192,
                                                          back.data()));
    }
    ASSERT_EQ(UCS_OK, span_spill_fetch(&rbig, 8, 192, back.data()));
    EXPECT_EQ(big, back);
    back.resize(c.size());
    ASSERT_EQ(UCS_OK, span_spill_fetch(&rc, 4, 192, back.data()));
    EXPECT_EQ(c, back);

    span_spill_remove(&rbig);
    span_spill_remove(&rc);
    ASSERT_EQ(UCS_OK, span_spill_put(a.data(), 4, 192, &rnew));
    EXPECT_EQ(ra.offset, rnew.offset); /* everything coalesced again */
    EXPECT_NE(ra.seq, rnew.seq);
    span_spill_remove(&rnew);
}

TEST(span_spill, removing_twice_is_refused_with_a_log_line)
{
    auto a = keys_of(2, 64, 9);
    span_rkey_spill_t ref;
    ASSERT_EQ(UCS_OK, span_spill_put(a.data(), 2, 64, &ref));
    span_spill_remove(&ref);
    log_counter logs;
    span_spill_remove(&ref);
    EXPECT_EQ(1u, logs.count("is not this process's to release"));
}

/* A child inherits the parent's arena and its references: releasing them
 * (its registrations inherited) must leave the parent's slots, and its own
 * spills go to an arena of its own, even where it gave the inherited
 * arena's descriptor number to a file of its own */
TEST(span_spill, a_child_leaves_the_parents_slots_alone)
{
    auto a = keys_of(3, 192, 11), b = keys_of(2, 192, 12);
    auto own = keys_of(4, 192, 13);
    span_rkey_spill_t ra, rb, rown;
    int to_parent[2], hold[2];

    ASSERT_EQ(UCS_OK, span_spill_put(a.data(), 3, 192, &ra));
    ASSERT_EQ(UCS_OK, span_spill_put(b.data(), 2, 192, &rb));
    ASSERT_EQ(0, pipe(to_parent));
    ASSERT_EQ(0, pipe(hold));
    pid_t child = test_fork([&] {
        struct stat before, after;
        log_counter logs;
        int null;

        close(to_parent[0]);
        close(hold[1]);
        span_spill_remove(&ra); /* a registration inherited, released */
        /* the number of the inherited arena's descriptor, a file here */
        null = open("/dev/null", O_RDONLY);
        TEST_CHILD_CHECK((null >= 0) && (dup2(null, ra.fd) == int(ra.fd)));
        TEST_CHILD_CHECK(fstat(ra.fd, &before) == 0);
        TEST_CHILD_CHECK(span_spill_put(own.data(), 4, 192, &rown) ==
                         UCS_OK);
        TEST_CHILD_CHECK(fstat(ra.fd, &after) == 0);
        TEST_CHILD_CHECK(after.st_ino == before.st_ino); /* still open */
        span_spill_remove(&rb); /* released after the child spilled */
        TEST_CHILD_CHECK(logs.count() == 0);
        TEST_CHILD_CHECK(write(to_parent[1], &rown, sizeof(rown)) ==
                         sizeof(rown));
        TEST_CHILD_CHECK(test_pipe_wait_closed(hold[0], 10));
        return 0;
    });
    ASSERT_GE(child, 0);
    close(to_parent[1]);
    close(hold[0]);

    std::vector<uint8_t> back(a.size());
    bool spilled = test_pipe_read(to_parent[0], &rown, sizeof(rown), 10);
    EXPECT_TRUE(spilled) << "the child did not spill";
    EXPECT_EQ(UCS_OK, span_spill_fetch(&ra, 3, 192, back.data()));
    EXPECT_EQ(a, back);
    back.resize(b.size());
    EXPECT_EQ(UCS_OK, span_spill_fetch(&rb, 2, 192, back.data()));
    EXPECT_EQ(b, back);
    if (spilled) {
        /* an importer of the child's key reads the child's arena */
        EXPECT_EQ(uint32_t(child), rown.pid);
        EXPECT_NE(ra.arena_id, rown.arena_id);
        back.resize(own.size());
        EXPECT_EQ(UCS_OK, span_spill_fetch(&rown, 4, 192, back.data()));
        EXPECT_EQ(own, back);
    }
    close(hold[1]);
    close(to_parent[0]);
    EXPECT_EQ(0, test_fork_wait(child, 10));

    log_counter logs; /* the parent's own releases are its own */
    span_spill_remove(&ra);
    span_spill_remove(&rb);
    EXPECT_EQ(0u, logs.count());
}

/* A fork while another thread spills and releases: the child can spill (it
 * must not inherit the arena's lock held by a thread it does not have) */
TEST(span_spill, a_fork_amid_spills_leaves_the_child_an_arena)
{
    auto keys = keys_of(3, 192, 21);

    test_fork_amid([&] {
        span_rkey_spill_t r;
        ASSERT_EQ(UCS_OK, span_spill_put(keys.data(), 3, 192, &r));
        span_spill_remove(&r);
    }, [&] {
        std::vector<uint8_t> back(keys.size());
        span_rkey_spill_t r;

        TEST_CHILD_CHECK(span_spill_put(keys.data(), 3, 192, &r) == UCS_OK);
        TEST_CHILD_CHECK(span_spill_fetch(&r, 3, 192, back.data()) ==
                         UCS_OK);
        TEST_CHILD_CHECK(back == keys);
        span_spill_remove(&r);
        return 0;
    });
}

/* A child forked while other threads fetch spilled keys (each checks the
 * peer's host and PID namespace) fetches too: no lock of UCX's is taken on
 * the way (UCX's system id takes one at every read; span reads it once).
 * Seen hanging in the child before, at forks 112 to 1393 of 3000. */
TEST(span_spill, a_child_forked_amid_fetches_fetches)
{
    auto keys = keys_of(3, 192, 9);
    span_rkey_spill_t r;
    ASSERT_EQ(UCS_OK, span_spill_put(keys.data(), 3, 192, &r));

    test_fork_amid([&] {
        std::vector<uint8_t> back(keys.size());
        (void)span_spill_fetch(&r, 3, 192, back.data());
    }, [&] {
        std::vector<uint8_t> back(keys.size());
        TEST_CHILD_CHECK(span_spill_fetch(&r, 3, 192, back.data()) ==
                         UCS_OK);
        TEST_CHILD_CHECK(back == keys);
        return 0;
    }, 2000, 2);
    span_spill_remove(&r);
}

/*
 * What a peer's reference names is untrusted (issue 16, item 6): the pid
 * and fd may name anything this process can open through /proc.
 */
class span_spill_peer : public ::testing::Test {
protected:
    void SetUp() override
    {
        ASSERT_NE(nullptr, mkdtemp(dir));
        ASSERT_EQ(UCS_OK, span_spill_put(keys.data(), 2, 64, &ref));
    }

    void TearDown() override
    {
        span_spill_remove(&ref);
        if (fd >= 0) {
            close(fd);
        }
        unlink(path().c_str());
        rmdir(dir);
    }

    std::string path() const { return std::string(dir) + "/f"; }

    ucs_status_t fetch(const span_rkey_spill_t &r)
    {
        std::vector<uint8_t> back(keys.size());
        return span_spill_fetch(&r, 2, 64, back.data());
    }

    char                 dir[32] = "/tmp/span-spill-peer-XXXXXX";
    std::vector<uint8_t> keys    = keys_of(2, 64, 5);
    span_rkey_spill_t    ref;
    int                  fd      = -1;
};

/* A FIFO without a writer: an open that waits for one would hang the
 * importer; it must be refused at once */
TEST_F(span_spill_peer, a_fifo_without_writer_fails_fast)
{
    ASSERT_EQ(0, mkfifo(path().c_str(), 0600));
    fd = open(path().c_str(), O_RDONLY | O_NONBLOCK);
    ASSERT_GE(fd, 0);
    span_rkey_spill_t bad = ref;
    bad.fd                = fd;

    log_counter logs;
    auto result = std::async(std::launch::async, [&]() { return fetch(bad); });
    if (result.wait_for(std::chrono::seconds(5)) ==
        std::future_status::timeout) {
        ADD_FAILURE() << "the fetch blocked on the FIFO";
        int w = open(path().c_str(), O_WRONLY | O_NONBLOCK); /* releases it */
        result.wait();
        close(w);
    }
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, result.get());
    EXPECT_EQ(1u, logs.count("is not a spill arena"));
}

/* What a peer names is checked before it is opened: a FIFO whose writer
 * waits in open() for a reader is not released by the fetch (an open of
 * the path itself would be that reader, as it would call a device's or a
 * FUSE file's open) */
TEST_F(span_spill_peer, a_descriptor_is_checked_before_it_is_opened)
{
    ASSERT_EQ(0, mkfifo(path().c_str(), 0600));
    fd = open(path().c_str(), O_PATH);
    ASSERT_GE(fd, 0);
    std::atomic<bool> writer_opened{false};
    std::thread writer([&] {
        int w = open(path().c_str(), O_WRONLY); /* waits for a reader */
        writer_opened = true;
        close(w);
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ASSERT_FALSE(writer_opened);

    span_rkey_spill_t bad = ref;
    bad.fd                = fd;
    log_counter logs;
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, fetch(bad));
    EXPECT_EQ(1u, logs.count("is not a spill arena"));
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    EXPECT_FALSE(writer_opened) << "the fetch opened the FIFO it was named";

    int r = open(path().c_str(), O_RDONLY | O_NONBLOCK); /* releases it */
    writer.join();
    close(r);
    EXPECT_TRUE(writer_opened);
}

/* A regular file that holds a copy of the arena, header and keys: only the
 * exporter's memfd is an arena */
TEST_F(span_spill_peer, a_file_other_than_a_memfd_is_refused)
{
    std::string arena = "/proc/self/fd/" + std::to_string(ref.fd);
    int src = open(arena.c_str(), O_RDONLY);
    ASSERT_GE(src, 0);
    fd = open(path().c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    ASSERT_GE(fd, 0);
    std::vector<char> bytes(1 << 20);
    ssize_t n = pread(src, bytes.data(), bytes.size(), 0);
    close(src);
    ASSERT_GT(n, 0);
    ASSERT_EQ(n, pwrite(fd, bytes.data(), n, 0));

    ASSERT_EQ(UCS_OK, fetch(ref));
    span_rkey_spill_t bad = ref;
    bad.fd                = fd;
    log_counter logs;
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, fetch(bad));
    EXPECT_EQ(1u, logs.count("is not a spill arena"));
}

/* A reference from another PID namespace: its pid would name another
 * process here, so it is not looked up (faked namespace id) */
TEST_F(span_spill_peer, a_reference_of_another_pid_namespace_is_unreachable)
{
    EXPECT_NE(0u, ref.pid_ns) << "this process's PID namespace is unknown";
    ASSERT_EQ(UCS_OK, fetch(ref));
    span_rkey_spill_t bad = ref;
    bad.pid_ns           ^= 1;
    log_counter logs;
    EXPECT_EQ(UCS_ERR_UNREACHABLE, fetch(bad));
    EXPECT_EQ(1u, logs.count("is in PID namespace"));
}

/* A reference from another host: a PID namespace of the same inode number
 * (every host's initial one has 4026531836) and a pid that may well name a
 * process here, but another host's part of the namespace id: refused as
 * unreachable, saying why, before any lookup (faked host: the reference
 * names this very process's live arena, which a lookup would read) */
TEST_F(span_spill_peer, a_reference_of_another_host_is_unreachable)
{
    ASSERT_EQ(UCS_OK, fetch(ref));
    span_rkey_spill_t bad = ref;
    bad.pid_ns           ^= 1ull << 40;
    log_counter logs;
    EXPECT_EQ(UCS_ERR_UNREACHABLE, fetch(bad));
    EXPECT_EQ(1u, logs.count("is on another host"));
    EXPECT_EQ(0u, logs.count("is in PID namespace"));
}

/* ... and from a real one (unshare -p), where this user may create it */
TEST_F(span_spill_peer, a_peer_in_a_new_pid_namespace_is_unreachable)
{
    int refs[2], hold[2];
    ASSERT_EQ(0, pipe(refs));
    ASSERT_EQ(0, pipe(hold));
    pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        close(refs[0]);
        close(hold[1]);
        if (unshare(CLONE_NEWPID) != 0) {
            _exit(77);
        }
        pid_t inner = fork(); /* pid 1 of the new namespace */
        if (inner == 0) {
            span_rkey_spill_t r;
            char c;
            if ((span_spill_put(keys.data(), 2, 64, &r) != UCS_OK) ||
                (write(refs[1], &r, sizeof(r)) != sizeof(r))) {
                _exit(1);
            }
            while (read(hold[0], &c, 1) > 0) {
            }
            _exit(0); /* the arena lives until the test has fetched */
        }
        int st = 1;
        waitpid(inner, &st, 0);
        _exit((inner > 0) && WIFEXITED(st) ? WEXITSTATUS(st) : 1);
    }
    close(refs[1]);
    close(hold[0]);
    span_rkey_spill_t peer;
    ssize_t n = read(refs[0], &peer, sizeof(peer));
    close(refs[0]);
    if (n == sizeof(peer)) {
        EXPECT_EQ(1u, peer.pid);
        EXPECT_NE(ref.pid_ns, peer.pid_ns);
        log_counter logs;
        EXPECT_EQ(UCS_ERR_UNREACHABLE, fetch(peer));
        EXPECT_EQ(1u, logs.count("is in PID namespace"));
    }
    close(hold[1]);
    int st = 0;
    ASSERT_EQ(child, waitpid(child, &st, 0));
    ASSERT_TRUE(WIFEXITED(st));
    if (WEXITSTATUS(st) == 77) {
        GTEST_SKIP() << "unshare(CLONE_NEWPID) is not permitted here: the "
                        "faked namespace id above covers the check";
    }
    EXPECT_EQ(0, WEXITSTATUS(st));
    EXPECT_EQ(ssize_t(sizeof(peer)), n);
}

/* The check every import of a peer's descriptor makes first (spill arenas
 * and span's VMM units, span_vmm_import.c): values no process can have */
TEST(span_peer_check, values_no_process_has_are_refused)
{
    uint64_t ns = span_peer_pid_ns();
    EXPECT_EQ(UCS_OK, span_peer_check(getpid(), ns, 3, "a unit"));
    log_counter logs;
    EXPECT_EQ(UCS_ERR_INVALID_PARAM, span_peer_check(0, ns, 3, "a unit"));
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              span_peer_check(0x80000000u, ns, 3, "a unit"));
    EXPECT_EQ(UCS_ERR_INVALID_PARAM,
              span_peer_check(getpid(), ns, 0x80000000u, "a unit"));
    EXPECT_EQ(UCS_ERR_UNREACHABLE,
              span_peer_check(getpid(), ns + 1, 3, "a unit"));
    EXPECT_EQ(UCS_ERR_UNREACHABLE,
              span_peer_check(getpid(), ns ^ (1ull << 63), 3, "a unit"));
    EXPECT_EQ(5u, logs.count("a unit"));
    EXPECT_EQ(1u, logs.count("is on another host"));
}
