/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * UCT level: registration over strict+, the transport with an RDMA NIC's
 * registration rules: regions its MD refuses, the registry that shares
 * registrations, access flags (test_uct.h has the fixtures).
 */
#include "test_uct.h"

/* A region larger than a refusing NIC's limit: the native MD fails, the twin
 * registers it in chunks */
TEST(span_strict, refused_natively_registered_by_the_twin)
{
    setenv("UCX_STRICT_MAX_MR_SIZE", "16k", 1);
    uct_component_h strict = find_component("strict");
    ASSERT_NE(nullptr, strict) << "the strict test transport is not loaded";
    uct_md_h native = open_md(strict, "strict");
    uct_md_h twin   = open_md(find_component("span"), "strict+");
    unsetenv("UCX_STRICT_MAX_MR_SIZE");
    ASSERT_NE(nullptr, native);
    ASSERT_NE(nullptr, twin);

    std::vector<uint8_t> buf(100000);
    uct_mem_h h;
    {
        log_counter logs;
        EXPECT_EQ(UCS_ERR_EXCEEDS_LIMIT,
                  uct_md_mem_reg(native, buf.data(), buf.size(),
                                 UCT_MD_MEM_ACCESS_ALL, &h));
    }
    ASSERT_EQ(UCS_OK, uct_md_mem_reg(twin, buf.data(), buf.size(),
                                     UCT_MD_MEM_ACCESS_ALL, &h));
    EXPECT_EQ(UCS_OK, uct_md_mem_dereg(twin, h));
    uct_md_close(twin);
    uct_md_close(native);
}

/*
 * The registry, over strict+ (whose MD counts its registrations): a request
 * for a range registered already shares it and still gets a complete key;
 * memory unmapped and mapped again at the same address is registered anew.
 */
class registry : public ::testing::Test {
protected:
    /* Under TSan, UCM's hooks cannot run: a thread's exit calls the hooked
     * madvise after TSan tore the thread down. contrib/sanitize/sanitize.sh then
     * turns them off, and these tests report their unmaps themselves, as an
     * application with its own allocator does (UCM external events). */
    static bool hooks_off()
    {
        const char *mode = getenv("UCX_MEM_MMAP_HOOK_MODE");
        return (mode != NULL) && !strcmp(mode, "none");
    }

    /* New memory at p, in one call: MAP_FIXED replaces what is mapped
     * there, and UCM reports the range unmapped first. munmap, then mmap,
     * would leave a hole in between that another thread's mmap may get,
     * which MAP_FIXED then overwrites (issue 38: ASan's record of a new
     * thread; remap_leaves_no_hole_another_thread_can_take). */
    static void *remap(void *p, size_t len)
    {
        if (hooks_off()) {
            ucm_vm_munmap(p, len);
        }
        return mmap(p, len, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    }

    static void SetUpTestSuite()
    {
        if (hooks_off()) {
            ucm_set_external_event(UCM_EVENT_VM_UNMAPPED);
        }
    }

    void SetUp() override
    {
        ASSERT_NO_FATAL_FAILURE(open_twin_md("strict+", &component, &md));
        uct_md_attr_t attr;
        ASSERT_EQ(UCS_OK, uct_md_query(md, &attr));
        rkey_size = attr.rkey_packed_size;
        live      = strict_counter("strict_md_live_registrations");
        ASSERT_GE(live, 0) << "the strict test transport is not loaded";
        buf = mmap(NULL, length, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        ASSERT_NE(MAP_FAILED, buf);
    }

    void TearDown() override
    {
        if (buf != MAP_FAILED) {
            munmap(buf, length);
        }
        if (md != NULL) {
            uct_md_close(md);
        }
        EXPECT_EQ(live, strict_counter("strict_md_live_registrations"))
                << "inner registrations leaked";
    }

    uct_mem_h reg(void *p, size_t len)
    {
        uct_mem_h h = NULL;
        EXPECT_EQ(UCS_OK, uct_md_mem_reg(md, p, len, UCT_MD_MEM_ACCESS_ALL,
                                         &h));
        return h;
    }

    std::vector<uint8_t> pack(uct_mem_h h, ucs_status_t expect = UCS_OK)
    {
        std::vector<uint8_t> key(rkey_size);
        EXPECT_EQ(expect, uct_md_mkey_pack(md, h, key.data()));
        return key;
    }

    static long made()
    {
        return strict_counter("strict_md_registrations");
    }

    static constexpr size_t length = 65536;
    uct_component_h component = NULL;
    uct_md_h        md        = NULL;
    size_t          rkey_size = 0;
    long            live      = 0;
    void           *buf       = MAP_FAILED;
};

TEST_F(registry, hit_shares_and_yields_a_complete_key)
{
    long before    = made();
    uct_mem_h h1   = reg(buf, length);
    uct_mem_h h2   = reg(buf, length);
    EXPECT_EQ(before + 1, made()) << "the second request was not shared";
    EXPECT_EQ(h1, h2);
    auto k1 = pack(h1), k2 = pack(h2);
    EXPECT_EQ(k1, k2);
    uct_rkey_bundle_t b;
    ASSERT_EQ(UCS_OK, uct_rkey_unpack(component, k2.data(), &b));
    EXPECT_EQ(UCS_OK, uct_rkey_release(component, &b));

    /* a different range is not a hit */
    uct_mem_h h3 = reg(buf, length / 2);
    EXPECT_EQ(before + 2, made());
    EXPECT_NE(h1, h3);

    ASSERT_EQ(UCS_OK, uct_md_mem_dereg(md, h1));
    EXPECT_EQ(before + 2, made());
    pack(h2); /* still held */
    ASSERT_EQ(UCS_OK, uct_md_mem_dereg(md, h2));
    ASSERT_EQ(UCS_OK, uct_md_mem_dereg(md, h3));
}

/* Thousands of live registrations: every request for one of them is a hit
 * on it, not on a neighbour that shares its index bucket */
TEST_F(registry, many_registrations_each_hit_their_own)
{
    const size_t pages = 5000, page = 4096;
    uint8_t *area = (uint8_t*)mmap(NULL, pages * page, PROT_READ | PROT_WRITE,
                                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(MAP_FAILED, (void*)area);
    long before = made();
    std::vector<uct_mem_h> first(pages), second(pages);
    for (size_t i = 0; i < pages; ++i) {
        first[i] = reg(area + i * page, page);
    }
    EXPECT_EQ(before + long(pages), made());
    for (size_t i = 0; i < pages; ++i) {
        second[i] = reg(area + i * page, page);
        ASSERT_EQ(first[i], second[i]) << "page " << i;
    }
    EXPECT_EQ(before + long(pages), made()) << "a request was not shared";
    /* a range that starts like a registered one but is longer is no hit */
    uct_mem_h longer = reg(area, 2 * page);
    EXPECT_NE(first[0], longer);
    for (auto h : first) {
        ASSERT_EQ(UCS_OK, uct_md_mem_dereg(md, h));
    }
    for (auto h : second) {
        ASSERT_EQ(UCS_OK, uct_md_mem_dereg(md, h));
    }
    ASSERT_EQ(UCS_OK, uct_md_mem_dereg(md, longer));
    munmap(area, pages * page);
}

TEST_F(registry, memory_mapped_again_is_registered_anew)
{
    long before  = made();
    uct_mem_h h1 = reg(buf, length);
    auto k1      = pack(h1);

    /* free, and map new memory at the same address: here with munmap, so
     * that its hook is tested too (remap replaces in one call), and
     * MAP_FIXED_NOREPLACE, which fails rather than overwrite a mapping that
     * another thread got in between */
    if (hooks_off()) {
        ASSERT_EQ(buf, remap(buf, length));
    } else {
        ASSERT_EQ(0, munmap(buf, length));
        void *again = mmap(buf, length, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
                           -1, 0);
        if (again != buf) {
            if (again != MAP_FAILED) {
                munmap(again, length);
            }
            buf = MAP_FAILED; /* not ours now: TearDown leaves it */
            FAIL() << "the buffer's range was mapped by another thread";
        }
    }

    uct_mem_h h2 = reg(buf, length);
    EXPECT_NE(h1, h2) << "the stale registration was served";
    EXPECT_EQ(before + 2, made()) << "the inner MD saw no new registration";
    pack(h2);
    {
        log_counter logs;
        pack(h1, UCS_ERR_INVALID_ADDR);
        EXPECT_EQ(1u, logs.count("was unmapped since"));
    }
    ASSERT_EQ(UCS_OK, uct_md_mem_dereg(md, h1)) << "the owner still frees it";
    ASSERT_EQ(UCS_OK, uct_md_mem_dereg(md, h2));
}

/* Events find registrations through a grid of levels by length, filed
 * under the region of their start (span_registry.c): a registration of
 * every level that straddles a region boundary of its level goes stale on
 * an unmap of its first page, of the page at the boundary or of its last */
TEST_F(registry, an_unmap_anywhere_inside_makes_a_registration_stale)
{
    const size_t page = 4096, GiB = size_t(1) << 30;
    const std::pair<size_t, size_t> cases[] = {/* size, region of level */
        {2 * page, size_t(2) << 20},
        {size_t(3) << 20, size_t(128) << 20},
        {size_t(200) << 20, 8 * GiB},
        {9 * GiB, 512 * GiB}};
    for (auto &c : cases) {
        size_t size = c.first, region = c.second;
        /* address space only: enough to straddle a region boundary, of
         * which the registration's pages are mapped (no more: under TSan
         * a terabyte of it is not always there) */
        uint8_t *area = (uint8_t*)mmap(NULL, region + size, PROT_NONE,
                                       MAP_PRIVATE | MAP_ANONYMOUS |
                                       MAP_NORESERVE, -1, 0);
        ASSERT_NE(MAP_FAILED, (void*)area);
        uintptr_t boundary = ((uintptr_t)area + size / 2 + region - 1) /
                             region * region;
        uint8_t *buf = (uint8_t*)(boundary - size / 2);
        ASSERT_EQ(buf, mmap(buf, size, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE |
                            MAP_FIXED, -1, 0));
        for (size_t at : {size_t(0), size / 2, size - page}) {
            long before  = made();
            uct_mem_h h1 = reg(buf, size);
            ASSERT_EQ(buf + at, remap(buf + at, page));
            {
                log_counter logs;
                pack(h1, UCS_ERR_INVALID_ADDR);
                EXPECT_EQ(1u, logs.count("was unmapped since"))
                        << size << " bytes, page at " << at;
            }
            uct_mem_h h2 = reg(buf, size);
            EXPECT_NE(h1, h2) << size << " bytes, page at " << at;
            EXPECT_LT(before + 1, made()) << "no new registration";
            ASSERT_EQ(UCS_OK, uct_md_mem_dereg(md, h1));
            ASSERT_EQ(UCS_OK, uct_md_mem_dereg(md, h2));
        }
        munmap(area, region + size);
    }
}

/* ... and an unmap just before or just after one leaves it served */
TEST_F(registry, an_unmap_next_to_a_registration_leaves_it_valid)
{
    const size_t page = 4096, size = size_t(3) << 20;
    uint8_t *area = (uint8_t*)mmap(NULL, size + 2 * page,
                                   PROT_READ | PROT_WRITE,
                                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(MAP_FAILED, (void*)area);
    uct_mem_h h1 = reg(area + page, size);
    ASSERT_EQ(area, remap(area, page));
    ASSERT_EQ(area + page + size, remap(area + page + size, page));
    long before  = made();
    uct_mem_h h2 = reg(area + page, size);
    EXPECT_EQ(h1, h2) << "a registration was made stale by its neighbours";
    EXPECT_EQ(before, made());
    pack(h2);
    ASSERT_EQ(UCS_OK, uct_md_mem_dereg(md, h1));
    ASSERT_EQ(UCS_OK, uct_md_mem_dereg(md, h2));
    munmap(area, size + 2 * page);
}

/* 8 threads register, share, deregister and unmap overlapping ranges of
 * one area: no crash, no stale hit, nothing leaked (run under TSan by
 * contrib/sanitize/sanitize.sh thread) */
TEST_F(registry, thread_storm)
{
    const size_t slot = 4096, slots = length / slot;
    std::atomic<int> failures{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t) {
        threads.emplace_back([&, t]() {
            std::mt19937 rng(t);
            std::vector<uct_mem_h> held;
            for (int i = 0; i < 3000; ++i) {
                size_t first = rng() % slots;
                size_t count = 1 + rng() % std::min<size_t>(3, slots - first);
                uint8_t *p   = (uint8_t*)buf + first * slot;
                switch (rng() % 4) {
                case 0:
                case 1: {
                    uct_mem_h h;
                    if (uct_md_mem_reg(md, p, count * slot,
                                       UCT_MD_MEM_ACCESS_ALL, &h) != UCS_OK) {
                        ++failures;
                    } else {
                        held.push_back(h);
                    }
                    break;
                }
                case 2:
                    if (!held.empty()) {
                        size_t k = rng() % held.size();
                        if (uct_md_mem_dereg(md, held[k]) != UCS_OK) {
                            ++failures;
                        }
                        held.erase(held.begin() + k);
                    }
                    break;
                default:
                    /* new memory at the same address: events invalidate */
                    if (remap(p, slot) != p) {
                        ++failures;
                    }
                }
            }
            for (auto h : held) {
                if (uct_md_mem_dereg(md, h) != UCS_OK) {
                    ++failures;
                }
            }
        });
    }
    for (auto &th : threads) {
        th.join();
    }
    EXPECT_EQ(0, failures.load());
    EXPECT_EQ(live, strict_counter("strict_md_live_registrations"));
}

/*
 * remap (above) puts new memory at an address while other threads map
 * memory of their own (issue 38): the storm's threads, and ASan, which maps
 * its records of a new thread a page at a time. Unmapping first, then
 * mapping again with MAP_FIXED, left a hole between the two calls that the
 * kernel could hand to such a mapping, which MAP_FIXED then replaced with
 * zeros: ASan's record of a starting thread read as the main thread's
 * (CHECK failed in ThreadRegistry::StartThread), or a SEGV. Here one thread
 * maps pages while this one remaps the buffer's: none may land inside it.
 */
TEST_F(registry, remap_leaves_no_hole_another_thread_can_take)
{
    const size_t page = 4096, pages = length / page, most = 16384;
    const int rounds = 200000;
    std::atomic<bool> done{false};
    std::vector<uint8_t*> mine;
    std::thread mapper([&]() {
        while (mine.size() < most) {
            void *p = mmap(NULL, page, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (p == MAP_FAILED) {
                break;
            }
            mine.push_back((uint8_t*)p);
        }
        done = true;
    });
    int failed = 0;
    for (int i = 0; (i < rounds) && !done; ++i) {
        uint8_t *p = (uint8_t*)buf + (i % pages) * page;
        failed += (remap(p, page) != p);
    }
    mapper.join();
    EXPECT_EQ(0, failed);
    EXPECT_EQ(most, mine.size()) << "the mapper's mmap failed";

    size_t inside = 0;
    for (uint8_t *p : mine) {
        if ((p >= (uint8_t*)buf) && (p < (uint8_t*)buf + length)) {
            ++inside; /* the buffer's now: TearDown unmaps it */
        } else {
            munmap(p, page);
        }
    }
    EXPECT_EQ(0u, inside) << "pages another thread mapped in a hole remap "
                             "left, then overwritten by it";
}

/*
 * A child forked while other threads register and unmap uses UCX (issue
 * 29, item 3): its first unmap takes the registry's lock, which fork must
 * not have copied held. Each child unmaps, registers, packs and exits; one
 * that does not exit in a bound is killed and fails the test.
 */
TEST_F(registry, a_child_forked_while_threads_unmap_uses_ucx)
{
    const size_t slot = 4096, slots = length / slot;
    const int forks = 600;
    deadline guard(240, "fork while threads unmap");
    std::atomic<bool> stop{false};
    std::atomic<int> failures{0};
    std::vector<std::thread> threads;

    for (int t = 0; t < 2; ++t) {
        threads.emplace_back([&, t]() {
            uint8_t *p = (uint8_t*)buf + t * (length / 2);
            for (size_t i = 0; !stop; i = (i + 1) % (slots / 2)) {
                uct_mem_h h;
                if (uct_md_mem_reg(md, p + i * slot, slot,
                                   UCT_MD_MEM_ACCESS_ALL, &h) != UCS_OK) {
                    ++failures;
                    continue;
                }
                if (remap(p + i * slot, slot) != p + i * slot) {
                    ++failures;
                }
                if (uct_md_mem_dereg(md, h) != UCS_OK) {
                    ++failures;
                }
            }
        });
    }

    int hung = 0, failed = 0, in_runtime = 0;
    for (int i = 0; (i < forks) && (hung == 0) && (in_runtime < 3); ++i) {
        pid_t pid = test_fork([&]() {
            void *own = mmap(NULL, 2 * slot, PROT_READ | PROT_WRITE,
                             MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            TEST_CHILD_CHECK(own != MAP_FAILED);
            TEST_CHILD_CHECK(remap(own, slot) == own);
            uct_mem_h h;
            TEST_CHILD_CHECK(uct_md_mem_reg(md, own, 2 * slot,
                                            UCT_MD_MEM_ACCESS_ALL, &h) ==
                             UCS_OK);
            std::vector<uint8_t> key(rkey_size);
            TEST_CHILD_CHECK(uct_md_mkey_pack(md, h, key.data()) == UCS_OK);
            TEST_CHILD_CHECK(uct_md_mem_dereg(md, h) == UCS_OK);
            TEST_CHILD_CHECK(munmap(own, 2 * slot) == 0);
            return 0;
        });
        ASSERT_GT(pid, 0);
        int status = test_fork_wait(pid, 10);
        if (status == TEST_FORK_HUNG_IN_SANITIZER) {
            /* not span's (test_fork_print_stacks) */
            fprintf(stderr, "fork %d of %d: the child hung inside the "
                    "sanitizer's runtime: not counted\n", i + 1, forks);
            ++in_runtime;
            continue;
        }
        hung      += (status == -1);
        failed    += (status != 0) && (status != -1);
        if (status != 0) {
            fprintf(stderr, "fork %d of %d: child status %d\n", i + 1, forks,
                    status);
        }
    }
    stop = true;
    for (auto &th : threads) {
        th.join();
    }
    EXPECT_EQ(0, hung) << "a child hung (killed after 10 s)";
    EXPECT_GT(3, in_runtime) << "children hung inside the sanitizer's "
                                "runtime again and again";
    EXPECT_EQ(0, failed);
    EXPECT_EQ(0, failures.load());
}

namespace {

std::vector<std::string> info_lines;

ucs_log_func_rc_t capture_info(const char *, unsigned, const char *,
                               ucs_log_level_t level,
                               const ucs_log_component_config_t *,
                               const char *message, va_list ap)
{
    char buf[1024];
    if (level == UCS_LOG_LEVEL_INFO) {
        vsnprintf(buf, sizeof(buf), message, ap);
        info_lines.push_back(buf);
    }
    return UCS_LOG_FUNC_RC_CONTINUE;
}

} // namespace

/* What a user reads at MD close (UCX_LOG_LEVEL=info) */
TEST_F(registry, counters_at_close)
{
    uct_mem_h h1 = reg(buf, length);
    uct_mem_h h2 = reg(buf, length);          /* a shared hit */
    ASSERT_EQ(buf, remap(buf, length));       /* an invalidation */
    uct_mem_h h3 = reg(buf, length);          /* registered anew */
    for (auto h : {h1, h2, h3}) {
        ASSERT_EQ(UCS_OK, uct_md_mem_dereg(md, h));
    }

    ucs_log_level_t level = ucs_global_opts.log_component.log_level;
    ucs_global_opts.log_component.log_level = UCS_LOG_LEVEL_INFO;
    ucs_log_push_handler(capture_info);
    info_lines.clear();
    uct_md_close(md);
    md = NULL;
    ucs_log_pop_handler();
    ucs_global_opts.log_component.log_level = level;

    std::string expect = "2 registrations of 2 chunks, 1 shared hits, "
                         "1 invalidations";
    bool found = false;
    for (auto &l : info_lines) {
        found |= (l.find(expect) != std::string::npos);
    }
    EXPECT_TRUE(found) << "no line with '" << expect << "' among "
                       << info_lines.size();
}

/*
 * Access flags are part of what a shared registration is (issue 16, item
 * 4). UCP registers a region again with wider flags when an op needs them;
 * over strict+, whose rkeys carry the flags they were registered with and
 * whose transport refuses an atomic on a region registered for RMA only
 * (a NIC's remote access error), the wider request must get a registration
 * that allows atomics.
 */
class span_uct_access : public span_uct {
protected:
    uct_mem_h reg_flags(unsigned flags)
    {
        uct_mem_h h = UCT_MEM_HANDLE_NULL;
        EXPECT_EQ(UCS_OK, uct_md_mem_reg(md, area.data(), sizeof(area),
                                         flags, &h));
        return h;
    }

    ucs_status_t atomic_add(uct_mem_h h, uint64_t value)
    {
        std::vector<uint8_t> key(rkey_buf.size());
        uct_rkey_bundle_t b;
        EXPECT_EQ(UCS_OK, uct_md_mkey_pack(md, h, key.data()));
        EXPECT_EQ(UCS_OK, uct_rkey_unpack(component, key.data(), &b));
        ucs_status_t status = uct_ep_atomic64_post(ep, UCT_ATOMIC_OP_ADD,
                                                   value,
                                                   (uintptr_t)&area[32],
                                                   b.rkey);
        EXPECT_EQ(UCS_OK, uct_rkey_release(component, &b));
        return status;
    }

    /* apart from the fixture's registration, which allows everything */
    std::array<uint64_t, 512> area = {};
};

TEST_P(span_uct_access, a_wider_request_gets_a_registration_that_allows_it)
{
    long made      = strict_counter("strict_md_registrations");
    uct_mem_h rma  = reg_flags(UCT_MD_MEM_ACCESS_RMA);
    {
        /* the transport enforces the flags: RMA only refuses atomics */
        log_counter logs;
        EXPECT_EQ(UCS_ERR_IO_ERROR, atomic_add(rma, 1));
        EXPECT_EQ(1u, logs.count("remote access error"));
    }

    uct_mem_h all = reg_flags(UCT_MD_MEM_ACCESS_ALL);
    EXPECT_EQ(UCS_OK, atomic_add(all, 5)) << "served the RMA-only registration";
    EXPECT_EQ(5u, area[32]);

    /* narrower and equal requests share what allows them */
    uct_mem_h rma2 = reg_flags(UCT_MD_MEM_ACCESS_RMA);
    uct_mem_h all2 = reg_flags(UCT_MD_MEM_ACCESS_ALL);
    EXPECT_EQ(all, all2);
    EXPECT_TRUE((rma2 == rma) || (rma2 == all));
    EXPECT_EQ(made + 2, strict_counter("strict_md_registrations"));
    for (auto h : {rma, all, rma2, all2}) {
        EXPECT_EQ(UCS_OK, uct_md_mem_dereg(md, h));
    }
}

INSTANTIATE_TEST_SUITE_P(twin, span_uct_access, ::testing::Values("strict+"));
