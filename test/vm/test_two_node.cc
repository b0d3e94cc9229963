/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Two nodes (test/vm/run_two_node.sh): this process on node a, every target
 * on node b, a process that span-check -l there (SPAN_TWO_NODE_PEER, its
 * host:port) forks for each pair; rxe0 on each node, NIXL's UCX 1.23.
 * A span rkey packed on b is unpacked and used here: a registration cut
 * into chunks is reached across every chunk boundary; keys that spilled on
 * b are refused without opening anything of this node; and a target killed
 * in the middle of a get fails the get, not this process, which leaks
 * nothing and goes on with a new target.
 */
#include "tools/harness/span_pair.h"
#include "../test_fds.h"
#include "../test_log.h"

#include <ucs/sys/uid.h>

#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace {

const size_t KiB = 1024, MiB = 1024 * KiB, page = 4096;
const char *twin_tls = "rc_verbs+,ud_verbs+";
const unsigned seed_old = 21, seed_new = 22, seed_get = 23;

std::string peer_address()
{
    const char *p = getenv("SPAN_TWO_NODE_PEER");
    return p ? p : "";
}

double now()
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* UCX_SPAN_* settings while alive: the remote target reads them too */
class span_env {
public:
    span_env(std::initializer_list<std::pair<const char*, const char*>> vars)
    {
        for (auto &v : vars) {
            setenv(v.first, v.second, 1);
            m_names.push_back(v.first);
        }
    }
    ~span_env()
    {
        for (auto &n : m_names) {
            unsetenv(n.c_str());
        }
    }
private:
    std::vector<std::string> m_names;
};

/* VmPin of this process, in bytes */
size_t pinned_bytes()
{
    std::ifstream status("/proc/self/status");
    std::string line;
    while (std::getline(status, line)) {
        if (line.compare(0, 7, "VmPin:\t") == 0) {
            return std::stoul(line.substr(7)) * KiB;
        }
    }
    ADD_FAILURE() << "no VmPin in /proc/self/status";
    return 0;
}

/* Objects of this process that the kernel's RDMA resource tracking lists
 * (rdma resource show mr|qp); -1 where the tool cannot say */
int rdma_objects(const char *kind)
{
    std::string cmd = std::string("rdma resource show ") + kind +
                      " 2>/dev/null";
    std::string want = " pid " + std::to_string(getpid()) + " ";
    FILE *f          = popen(cmd.c_str(), "r");
    char line[512];
    int n = 0;

    if (f == NULL) {
        return -1;
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        n += (strstr(line, want.c_str()) != NULL);
    }
    return (pclose(f) == 0) ? n : -1;
}

/* What must be the same before and after: nothing leaked */
struct footprint {
    int    fds;
    size_t pinned;
    int    mrs;
    int    qps;

    static footprint take()
    {
        return {test_open_fds(), pinned_bytes(), rdma_objects("mr"),
                rdma_objects("qp")};
    }
    std::string str() const
    {
        return std::to_string(fds) + " fds, " +
               std::to_string(pinned / KiB) + " KiB pinned, " +
               std::to_string(mrs) + " MRs, " + std::to_string(qps) +
               " QPs";
    }
    bool operator==(const footprint &o) const
    {
        return (fds == o.fds) && (pinned == o.pinned) && (mrs == o.mrs) &&
               (qps == o.qps);
    }
};

/* A page-aligned buffer of its own */
struct local_buf {
    explicit local_buf(size_t len) : length(len)
    {
        ptr = static_cast<uint8_t*>(mmap(NULL, len, PROT_READ | PROT_WRITE,
                                         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
        EXPECT_NE(MAP_FAILED, static_cast<void*>(ptr));
    }
    ~local_buf() { munmap(ptr, length); }
    uint8_t *ptr;
    size_t  length;
};

/* Chunk boundaries of [0, length) cut into chunks of chunk bytes starting
 * every chunk - overlap (span_chunk.h): where each chunk after the first
 * starts and where each before the last ends; *num_p chunks */
std::vector<size_t> chunk_boundaries(size_t length, size_t chunk,
                                     size_t overlap, unsigned *num_p)
{
    std::vector<size_t> b;
    size_t start = 0;
    unsigned n   = 1;
    while (start + chunk < length) {
        b.push_back(start + chunk); /* end of this chunk */
        start += chunk - overlap;
        b.push_back(start);         /* start of the next */
        ++n;
    }
    std::sort(b.begin(), b.end());
    *num_p = n;
    return b;
}

class two_node : public ::testing::Test {
protected:
    void SetUp() override
    {
        if (peer_address().empty()) {
            GTEST_SKIP() << "SPAN_TWO_NODE_PEER (host:port of span-check -l "
                            "on the other node) is not set";
        }
    }

    void TearDown() override
    {
        if (m_started) {
            if (m_region.rkey != NULL) {
                span_pair_unmap(&m_pair, &m_region);
            }
            EXPECT_EQ(0, span_pair_stop(&m_pair)) << "target did not exit "
                                                     "cleanly";
        }
    }

    void start(const char *tls, unsigned flags = 0)
    {
        ASSERT_EQ(UCS_OK, span_pair_start_remote(&m_pair,
                                                 peer_address().c_str(), tls,
                                                 UCP_FEATURE_RMA, flags));
        m_started = true;
    }

    span_pair_t        m_pair    = {};
    span_pair_region_t m_region  = {};
    bool               m_started = false;
};

} // namespace

/* The two ends are two hosts as UCX tells hosts apart */
TEST_F(two_node, the_target_is_another_host)
{
    start(twin_tls);
    char host[64] = {};
    gethostname(host, sizeof(host) - 1);
    printf("  initiator: %s, pid %d, UCX system id 0x%016lx\n", host,
           (int)getpid(), (unsigned long)ucs_get_system_id());
    printf("  target:    %s, pid %u, UCX system id 0x%016lx\n",
           m_pair.peer.hostname, m_pair.peer.pid,
           (unsigned long)m_pair.peer.system_id);
    EXPECT_STRNE(host, m_pair.peer.hostname);
    EXPECT_NE(ucs_get_system_id(), m_pair.peer.system_id);
}

/* A registration on b cut into 21 chunks of 256 KiB (each an ibv_reg_mr
 * there, seen in its VmPin): a put and a get across each of the 40 chunk
 * boundaries, then the whole region; every byte of the target's allocation
 * and of what came back is checked */
TEST_F(two_node, every_chunk_boundary_of_a_remote_registration)
{
    const size_t len = 4 * MiB, chunk = 256 * KiB, overlap = 64 * KiB;
    const size_t alloc = len + 2 * page; /* a page either side */
    span_env env{{"UCX_SPAN_MAX_CHUNK", "256k"},
                 {"UCX_SPAN_CHUNK_OVERLAP", "64k"}};
    unsigned num_chunks;
    std::vector<size_t> bounds = chunk_boundaries(len, chunk, overlap,
                                                  &num_chunks);
    start(twin_tls);

    uint64_t pinned, map_pinned;
    ASSERT_EQ(UCS_OK, span_pair_map(&m_pair, alloc, page, len, seed_old,
                                    &m_region));
    ASSERT_EQ(UCS_OK, span_pair_target_pinned(&m_pair, &pinned, &map_pinned));
    size_t expect_pinned = 0;
    for (unsigned k = 0; k < num_chunks; ++k) {
        expect_pinned += std::min(chunk, len - k * (chunk - overlap));
    }
    printf("  %u chunks of %zu KiB on %s: %lu KiB pinned there for a %zu "
           "KiB region; %zu chunk boundaries\n", num_chunks, chunk / KiB,
           m_pair.peer.hostname, (unsigned long)map_pinned / KiB,
           len / KiB, bounds.size());
    ASSERT_GE(num_chunks, 16u);
    EXPECT_EQ(expect_pinned, map_pinned) << "not registered as "
                                         << num_chunks << " chunks";

    /* pieces at odd offsets straddling each boundary, apart from each
     * other, at the same offsets here and there */
    const size_t before = 4097, after = 4099;
    local_buf src(alloc), back(alloc);
    span_pair_fill(src.ptr, alloc, seed_new, 0);
    size_t verified = 0, wrong = 0, pos = 0;
    for (size_t b : bounds) {
        size_t off = page + b - before;
        ASSERT_EQ(UCS_OK, span_pair_put(&m_pair, &m_region, off,
                                        src.ptr + off, before + after))
                << "put across the boundary at " << b;
        wrong    += span_pair_check(&m_pair, &m_region, pos, off - pos,
                                    seed_old);
        wrong    += span_pair_check(&m_pair, &m_region, off, before + after,
                                    seed_new);
        verified += off + before + after - pos;
        pos       = off + before + after;
    }
    wrong    += span_pair_check(&m_pair, &m_region, pos, alloc - pos,
                                seed_old);
    verified += alloc - pos;
    EXPECT_EQ(alloc, verified);
    EXPECT_EQ(0u, wrong) << "bytes of the target's allocation after the puts";

    /* gets: the target holds another pattern; a piece of it across each
     * boundary lands here at the same offset, nothing else is written */
    ASSERT_EQ(UCS_OK, span_pair_refill(&m_pair, &m_region, seed_get));
    memset(back.ptr, 0, alloc);
    size_t got = 0;
    for (size_t b : bounds) {
        size_t off = page + b - 6007;
        ASSERT_EQ(UCS_OK, span_pair_get(&m_pair, &m_region, off,
                                        back.ptr + off, 6007 + 2011))
                << "get across the boundary at " << b;
        EXPECT_EQ(0u, span_pair_mismatches(back.ptr + off, 6007 + 2011,
                                           seed_get, off)) << b;
        got += 6007 + 2011;
        memset(back.ptr + off, 0, 6007 + 2011);
    }
    for (size_t i = 0; i < alloc; ++i) {
        ASSERT_EQ(0, back.ptr[i]) << "byte " << i << " written by no get";
    }

    /* the whole registered region, each way */
    ASSERT_EQ(UCS_OK, span_pair_put(&m_pair, &m_region, page, src.ptr + page,
                                    len));
    EXPECT_EQ(0u, span_pair_check(&m_pair, &m_region, page, len, seed_new));
    EXPECT_EQ(0u, span_pair_check(&m_pair, &m_region, 0, page, seed_get));
    EXPECT_EQ(0u, span_pair_check(&m_pair, &m_region, page + len, page,
                                  seed_get));
    ASSERT_EQ(UCS_OK, span_pair_get(&m_pair, &m_region, page,
                                    back.ptr + page, len));
    EXPECT_EQ(0u, span_pair_mismatches(back.ptr + page, len, seed_new, page));
    printf("  %zu pieces put and %zu got across the boundaries, the whole "
           "region each way: %zu + %zu + %zu bytes checked\n",
           bounds.size(), bounds.size(), verified + alloc, got + alloc,
           len);
}

namespace {

/* A process of this node holding one file at every descriptor from 3 to
 * 1023, with the pid a process of the other node has: where a key of that
 * node names /proc/<pid>/fd/<fd>, opening it here opens that file, and an
 * inotify watch on the file sees it. Needs root (ns_last_pid). */
class decoy {
public:
    explicit decoy(pid_t pid) : m_path("/tmp/span-decoy.XXXXXX")
    {
        int fd = mkstemp(&m_path[0]);
        if (fd < 0) {
            m_why = "mkstemp failed";
            return;
        }
        close(fd);
        if (kill(pid, 0) == 0) {
            m_why = "pid " + std::to_string(pid) + " is taken on this node";
            return;
        }
        int ready[2];
        if (pipe(ready) != 0) {
            m_why = "pipe failed";
            return;
        }
        FILE *last = fopen("/proc/sys/kernel/ns_last_pid", "w");
        if ((last == NULL) || (fprintf(last, "%d", pid - 1) < 0) ||
            (fclose(last) != 0)) {
            m_why = "cannot write /proc/sys/kernel/ns_last_pid (not root?)";
            close(ready[0]);
            close(ready[1]);
            return;
        }
        fflush(NULL);
        m_pid = fork();
        if (m_pid == 0) {
            int file = open(m_path.c_str(), O_RDONLY);
            char c   = 'r';
            for (int d = 3; d < 1024; ++d) {
                if ((d != ready[1]) && (d != file)) {
                    dup2(file, d);
                }
            }
            bool ok = (write(ready[1], &c, 1) == 1);
            dup2(file, ready[1]);
            if (!ok) {
                _exit(1);
            }
            for (;;) {
                pause();
            }
        }
        close(ready[1]);
        char c;
        bool ok = (m_pid == pid) && (read(ready[0], &c, 1) == 1);
        close(ready[0]);
        if (!ok) {
            m_why = "the decoy got pid " + std::to_string(m_pid) +
                    ", not " + std::to_string(pid);
            return;
        }
        m_inotify = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
        if ((m_inotify < 0) ||
            (inotify_add_watch(m_inotify, m_path.c_str(),
                               IN_OPEN | IN_ACCESS) < 0)) {
            m_why = "inotify failed";
        }
    }

    ~decoy()
    {
        if (m_pid > 0) {
            kill(m_pid, SIGKILL);
            waitpid(m_pid, NULL, 0);
        }
        if (m_inotify >= 0) {
            close(m_inotify);
        }
        unlink(m_path.c_str());
    }

    /* empty when it is in place */
    const std::string &why_not() const { return m_why; }

    /* Whether anything opened or read the file since the watch began */
    bool touched() const
    {
        char buf[4096];
        return read(m_inotify, buf, sizeof(buf)) > 0;
    }

    const std::string &path() const { return m_path; }

private:
    std::string m_path;
    std::string m_why;
    pid_t       m_pid     = -1;
    int         m_inotify = -1;
};

} // namespace

/* Keys that spilled on b (UCX_SPAN_SPILL=yes) name a slot in the memfd of
 * a process there, as /proc/<pid>/fd/<fd>: that path means nothing here.
 * The importer must refuse the key without opening anything of this node,
 * even where a process here has the same pid in a PID namespace of the
 * same inode number (every host's initial one has 4026531836): a decoy
 * there holds a watched file at every descriptor. The twin's unpack says
 * UCS_ERR_UNREACHABLE, on which UCP drops that MD's key from the rkey (as
 * it drops a cuda_ipc key of another host) and serves what it can without
 * it: whatever it does, no byte may land wrong. */
TEST_F(two_node, keys_spilled_on_another_host_are_refused_unopened)
{
    const size_t len = 64 * KiB, off = 4096 + 13, n = 8192 + 7;
    span_env env{{"UCX_SPAN_SPILL", "yes"}};
    start(twin_tls);
    decoy d(m_pair.peer.pid);
    if (d.why_not().empty()) {
        printf("  decoy: pid %u here holds %s at descriptors 3..1023\n",
               m_pair.peer.pid, d.path().c_str());
    } else {
        printf("  no decoy (%s): only the status and the log are checked\n",
               d.why_not().c_str());
    }

    ucs_status_t status, put_status = UCS_ERR_NO_ELEM,
                 get_status = UCS_ERR_NO_ELEM;
    size_t refusals, lines;
    local_buf src(len), back(len);
    span_pair_fill(src.ptr, len, seed_new, 0);
    memset(back.ptr, 0, len);
    {
        log_counter logs;
        status   = span_pair_map(&m_pair, len, 0, len, seed_old, &m_region);
        refusals = logs.count("is on another host");
        lines    = logs.count();
        if (status == UCS_OK) {
            put_status = span_pair_put(&m_pair, &m_region, off, src.ptr + off,
                                       n);
            get_status = span_pair_get(&m_pair, &m_region, off,
                                       back.ptr + off, n);
        }
    }
    printf("  rkey of %s unpacked here: %s (%zu error lines, %zu saying the "
           "key is of another host); then put %s, get %s\n",
           m_pair.peer.hostname, ucs_status_string(status), lines, refusals,
           ucs_status_string(put_status), ucs_status_string(get_status));
    EXPECT_TRUE((status == UCS_OK) || (status == UCS_ERR_UNREACHABLE))
            << ucs_status_string(status);
    EXPECT_EQ(1u, refusals) << "no log line says the key is of another host";
    if (d.why_not().empty()) {
        EXPECT_FALSE(d.touched()) << "the importer opened " << d.path()
                                  << " through the decoy's /proc/"
                                  << m_pair.peer.pid << "/fd";
    }
    if (status != UCS_OK) {
        return;
    }
    /* the target holds the put's bytes where it succeeded, else its own */
    EXPECT_EQ(0u, span_pair_check(&m_pair, &m_region, 0, off, seed_old));
    EXPECT_EQ(0u, span_pair_check(&m_pair, &m_region, off, n,
                                  (put_status == UCS_OK) ? seed_new :
                                                           seed_old));
    EXPECT_EQ(0u, span_pair_check(&m_pair, &m_region, off + n,
                                  len - off - n, seed_old));
    if (get_status == UCS_OK) {
        EXPECT_EQ(0u, span_pair_mismatches(back.ptr + off, n,
                                           (put_status == UCS_OK) ? seed_new :
                                                                    seed_old,
                                           off));
    }
}

/* b's target is killed (SIGKILL) while a get of a region of 1 MiB chunks
 * in 4 hard units of 8 MiB is under way, with UCP's peer error handling and
 * UCX's defaults: the get completes with an error within a bound (rc_verbs
 * retries 7 times, UCX_RC_RETRY_COUNT, before the connection fails: about
 * 53 s over rxe in these VMs; 3 s with 2 retries), this process leaks
 * nothing (descriptors, pinned pages, the kernel's MRs and QPs of it) and a
 * new target (started by the same server) moves the right bytes */
TEST_F(two_node, target_killed_during_a_chunked_get)
{
    const size_t len = 32 * MiB;
    const double bound_s = 120;
    span_env env{{"UCX_SPAN_MAX_CHUNK", "1m"},
                 {"UCX_SPAN_CHUNK_OVERLAP", "256k"},
                 {"UCX_SPAN_TEST_UNIT_SIZE", "8m"}};

    /* UCX's process-wide state (its async thread, the loaded modules)
     * comes with the first pair: the footprint is taken after one */
    start(twin_tls);
    ASSERT_EQ(UCS_OK, span_pair_map(&m_pair, 64 * KiB, 0, 64 * KiB, seed_old,
                                    &m_region));
    span_pair_unmap(&m_pair, &m_region);
    m_region = {};
    ASSERT_EQ(0, span_pair_stop(&m_pair));
    m_started = false;
    footprint before = footprint::take();
    printf("  before: %s\n", before.str().c_str());

    local_buf dst(len);
    {
        span_pair_t pair;
        span_pair_region_t region;
        ASSERT_EQ(UCS_OK, span_pair_start_remote(&pair, peer_address().c_str(),
                                                 twin_tls, UCP_FEATURE_RMA,
                                                 SPAN_PAIR_FLAG_PEER_ERRORS));
        uint64_t pinned, map_pinned;
        ASSERT_EQ(UCS_OK, span_pair_map(&pair, len, 0, len, seed_old,
                                        &region));
        ASSERT_EQ(UCS_OK, span_pair_target_pinned(&pair, &pinned,
                                                  &map_pinned));
        memset(dst.ptr, 0, len);
        ucp_request_param_t param = {};
        void *req = ucp_get_nbx(pair.ep, dst.ptr, len, region.base,
                                region.rkey, &param);
        ASSERT_TRUE(UCS_PTR_IS_PTR(req)) << "the get completed at once: "
                << ucs_status_string(UCS_PTR_STATUS(req));

        /* some bytes have arrived: the get is under way */
        double t0 = now();
        while ((ucp_request_check_status(req) == UCS_INPROGRESS) &&
               (span_pair_mismatches(dst.ptr, page, seed_old, 0) != 0) &&
               (now() - t0 < bound_s)) {
            ucp_worker_progress(pair.worker);
        }
        ASSERT_EQ(UCS_INPROGRESS, ucp_request_check_status(req))
                << "the get ended before the target could be killed";
        size_t arrived = 0;
        while ((arrived < len) &&
               !span_pair_mismatches(dst.ptr + arrived, page, seed_old,
                                     arrived)) {
            arrived += page;
        }
        double t_kill = now();
        ASSERT_EQ(UCS_OK, span_pair_kill_target(&pair));

        ucs_status_t status;
        while (((status = ucp_request_check_status(req)) == UCS_INPROGRESS) &&
               (now() - t_kill < 2 * bound_s)) {
            ucp_worker_progress(pair.worker);
        }
        double waited = now() - t_kill;
        printf("  get of %zu MiB registered on %s as 1 MiB chunks in 8 MiB "
               "units (%lu KiB pinned there), target pid %u killed after "
               "%.1f s with the first %zu KiB here; the get completed %.1f "
               "s later: %s (endpoint: %s)\n", len / MiB, pair.peer.hostname,
               (unsigned long)map_pinned / KiB, pair.peer.pid,
               t_kill - t0, arrived / KiB, waited, ucs_status_string(status),
               ucs_status_string(pair.ep_error));
        EXPECT_LT(len, map_pinned) << "the region was not chunked";
        EXPECT_NE(UCS_INPROGRESS, status) << "no completion in "
                                          << 2 * bound_s << " s";
        EXPECT_NE(UCS_OK, status);
        EXPECT_LT(waited, bound_s);
        if (status != UCS_INPROGRESS) {
            ucp_request_free(req);
        }
        ucp_rkey_destroy(region.rkey);
        EXPECT_NE(0, span_pair_stop(&pair)) << "the target was not killed";
    }
    footprint after_death = footprint::take();
    printf("  after the killed pair is closed: %s\n",
           after_death.str().c_str());
    EXPECT_TRUE(before == after_death) << before.str() << " before, "
                                       << after_death.str() << " after";

    /* a new target from the same server, the same chunking */
    start(twin_tls, SPAN_PAIR_FLAG_PEER_ERRORS);
    const size_t len2 = 8 * MiB;
    ASSERT_EQ(UCS_OK, span_pair_map(&m_pair, len2, 0, len2, seed_old,
                                    &m_region));
    span_pair_fill(dst.ptr, len2, seed_new, 0);
    ASSERT_EQ(UCS_OK, span_pair_put(&m_pair, &m_region, 0, dst.ptr, len2));
    EXPECT_EQ(0u, span_pair_check(&m_pair, &m_region, 0, len2, seed_new));
    ASSERT_EQ(UCS_OK, span_pair_refill(&m_pair, &m_region, seed_get));
    memset(dst.ptr, 0, len2);
    ASSERT_EQ(UCS_OK, span_pair_get(&m_pair, &m_region, 0, dst.ptr, len2));
    EXPECT_EQ(0u, span_pair_mismatches(dst.ptr, len2, seed_get, 0));
    printf("  new target pid %u on %s: %zu MiB put and got back, every byte "
           "right\n", m_pair.peer.pid, m_pair.peer.hostname, len2 / MiB);
    span_pair_unmap(&m_pair, &m_region);
    m_region = {};
    EXPECT_EQ(0, span_pair_stop(&m_pair));
    m_started = false;
    footprint after = footprint::take();
    printf("  after the new pair is closed: %s\n", after.str().c_str());
    EXPECT_TRUE(before == after) << before.str() << " before, "
                                 << after.str() << " after";
}
