/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The registry's lookups inside device units and its per-thread slots,
 * over entries of its own (no MD): a buffer inside any unit of a
 * registration of several finds it, a unit that holds other memory makes it
 * stale, and however the references are taken and released (through a
 * thread's slot or under the lock, on the same thread or another) an entry
 * is torn down exactly once, by the release of its last user, whatever
 * slots held it.
 */
#include <gtest/gtest.h>

extern "C" {
#include "md/span_registry.h"
}

#include <ucs/debug/log_def.h>

#include "test_deadline.h"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <map>
#include <mutex>
#include <random>
#include <shared_mutex>
#include <thread>
#include <vector>

#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

namespace {

constexpr uint64_t MiB = 1ull << 20;

/* The buffer ids the fake driver reports, by unit start */
std::map<uint64_t, uint64_t> fake_ids;
std::atomic<unsigned> destroyed{0};

void wait_for(const std::atomic<int> &step, int value)
{
    while (step != value) {
        std::this_thread::yield();
    }
}
std::atomic<unsigned> checks{0};

int fake_check(const void *owner, uint64_t addr, uint64_t id)
{
    ++checks;
    auto it = fake_ids.find(addr);
    return (it != fake_ids.end()) && (it->second == id);
}

struct fake_reg {
    span_registry_entry_t           entry{};
    std::vector<span_registry_unit_t> units;
    span_registry_stats_t           stats{};

    /* num_units units of unit_size from base, ids id0, id0 + 1, ... */
    fake_reg(const void *owner, uint64_t base, uint32_t num_units,
             uint64_t unit_size, uint64_t id0) : units(num_units)
    {
        for (uint32_t i = 0; i < num_units; ++i) {
            units[i].id                        = id0 + i;
            fake_ids[base + (i * unit_size)] = id0 + i;
        }
        entry.owner     = owner;
        entry.start     = base;
        entry.length    = num_units * unit_size;
        entry.mem_type  = UCS_MEMORY_TYPE_CUDA;
        entry.identity  = 0x1234 + id0;
        entry.caps      = 1;
        entry.unit_size = (num_units > 1) ? unit_size : 0;
        entry.num_units = num_units;
        entry.units     = units.data();
        entry.stats     = &stats;
        span_registry_add(&entry);
    }
};

class registry : public ::testing::Test {
protected:
    void SetUp() override
    {
        fake_ids.clear();
        destroyed = 0;
        checks    = 0;
    }

    /* every test leaves no slot holding its entries */
    void TearDown() override { span_registry_purge(owner); }

    span_registry_entry_t *within(uint64_t addr, uint64_t length)
    {
        auto it = fake_ids.upper_bound(addr);
        EXPECT_NE(it, fake_ids.begin());
        --it;
        return span_registry_find_within(owner, addr, length,
                                         UCS_MEMORY_TYPE_CUDA, it->second, 1,
                                         fake_check);
    }

    /* releases through the API; a teardown it asks for is counted */
    void release(span_registry_entry_t *entry)
    {
        if (span_registry_release(entry)) {
            ++destroyed;
        }
    }

    int        owner_tag = 0;
    const void *owner    = &owner_tag;
    uint64_t   base      = 0x7f0000000000ull;
};

TEST_F(registry, a_buffer_inside_any_unit_finds_the_registration)
{
    fake_reg reg(owner, base, 8, 2 * MiB, 100);

    EXPECT_EQ(&reg.entry, within(base + 5 * 2 * MiB + 4096, 4096));
    EXPECT_EQ(&reg.entry, within(base + 7 * 2 * MiB, 2 * MiB));
    /* over three units: the two past the first are checked */
    checks = 0;
    EXPECT_EQ(&reg.entry, within(base + 2 * MiB + 100, 4 * MiB));
    EXPECT_EQ(2u, checks.load());
    /* past the registration's end: not served */
    EXPECT_EQ(nullptr, within(base + 7 * 2 * MiB + 4096, 2 * MiB));
    for (int i = 0; i < 3; ++i) {
        release(&reg.entry);
    }
    EXPECT_EQ(0u, destroyed.load());
    release(&reg.entry);
    EXPECT_EQ(1u, destroyed.load());
    /* released: not found again */
    EXPECT_EQ(nullptr, within(base + 4096, 4096));
}

TEST_F(registry, a_later_unit_that_holds_other_memory_makes_it_stale)
{
    fake_reg reg(owner, base, 4, 2 * MiB, 200);

    fake_ids[base + 2 * 2 * MiB] = 999; /* unit 2 mapped anew, event missed */
    EXPECT_EQ(nullptr, within(base + 2 * MiB, 4 * MiB));
    EXPECT_FALSE(span_registry_valid(&reg.entry));
    EXPECT_EQ(nullptr, within(base, 4096)); /* stale: never served again */
    release(&reg.entry);
    EXPECT_EQ(1u, destroyed.load());
}

TEST_F(registry, another_owner_or_weaker_caps_are_not_served)
{
    fake_reg reg(owner, base, 2, 2 * MiB, 300);
    int other;

    EXPECT_EQ(nullptr, span_registry_find_within(&other, base, 4096,
                                                 UCS_MEMORY_TYPE_CUDA, 300, 1,
                                                 fake_check));
    EXPECT_EQ(nullptr, span_registry_find_within(owner, base, 4096,
                                                 UCS_MEMORY_TYPE_CUDA, 300, 3,
                                                 fake_check));
    EXPECT_EQ(nullptr, span_registry_find_within(owner, base, 4096,
                                                 UCS_MEMORY_TYPE_CUDA, 301, 1,
                                                 fake_check));
    release(&reg.entry);
    EXPECT_EQ(1u, destroyed.load());
}

/* the pattern of span_bench_gpu reg: many hits in one unit, then every
 * handle released, on one thread: torn down at the last release, by it */
TEST_F(registry, hits_in_a_slot_are_released_in_it_and_the_last_tears_down)
{
    fake_reg reg(owner, base, 1, 64 * MiB, 400);
    const int n = 10000;

    for (int i = 0; i < n; ++i) {
        ASSERT_EQ(&reg.entry, within(base + (i * 4096ull), 4096));
    }
    for (int i = 0; i < n; ++i) {
        release(&reg.entry);
        ASSERT_EQ(0u, destroyed.load()) << i;
    }
    release(&reg.entry); /* the registrant's */
    EXPECT_EQ(1u, destroyed.load());
    EXPECT_EQ(uint64_t(n), reg.stats.hits);
}

TEST_F(registry, an_unmap_ends_slot_hits)
{
    fake_reg reg(owner, base, 1, 64 * MiB, 500);

    ASSERT_EQ(&reg.entry, within(base, 4096));
    ASSERT_EQ(&reg.entry, within(base + 4096, 4096)); /* in the slot */
    span_registry_invalidate(base + 8192, 4096);
    EXPECT_EQ(nullptr, within(base + 4096, 4096));
    for (int i = 0; i < 3; ++i) {
        release(&reg.entry);
    }
    EXPECT_EQ(1u, destroyed.load());
}

/* thread B's slot hands out references that thread A releases: the entry
 * lives until B's slot lets it go (here: B exits), torn down once */
TEST_F(registry, references_of_a_slot_released_by_another_thread)
{
    fake_reg reg(owner, base, 2, 2 * MiB, 600);
    std::vector<span_registry_entry_t*> got;

    std::thread b([&] {
        for (int i = 0; i < 5; ++i) {
            got.push_back(within(base + 2 * MiB + (i * 4096ull), 4096));
        }
    });
    b.join(); /* its slot let the entry go at its exit */
    for (auto entry : got) {
        ASSERT_EQ(&reg.entry, entry);
        release(entry);
    }
    EXPECT_EQ(0u, destroyed.load());
    release(&reg.entry);
    EXPECT_EQ(1u, destroyed.load());
}

/* b takes two references (the second from its slot) and hands both over:
 * their users' last release tears the entry down at once, though b's slot
 * held it and b, alive, does not call the registry meanwhile; b's slot
 * serves it no more */
TEST_F(registry, a_released_entry_is_torn_down_at_once_whatever_slot_held_it)
{
    fake_reg reg(owner, base, 1, 64 * MiB, 700);
    std::vector<span_registry_entry_t*> got;
    std::atomic<int> step{0};

    std::thread b([&] {
        got.push_back(within(base + 4096, 4096));
        got.push_back(within(base + 8192, 4096));
        step = 1;
        wait_for(step, 2);
        EXPECT_EQ(nullptr, within(base + 8192, 4096));
    });
    wait_for(step, 1);
    for (auto entry : got) {
        EXPECT_EQ(&reg.entry, entry);
        release(entry);
    }
    EXPECT_EQ(0u, destroyed.load());
    release(&reg.entry); /* the last user, while b's slot holds it */
    EXPECT_EQ(1u, destroyed.load());
    step = 2;
    b.join();
    span_registry_purge(owner);
    EXPECT_EQ(1u, destroyed.load());
}

/* the last user's release on a thread whose slot holds a reference of its
 * own, after another released the registrant's: that thread tears down */
TEST_F(registry, a_last_release_on_the_thread_whose_slot_held_it_tears_down)
{
    fake_reg reg(owner, base, 1, 64 * MiB, 800);
    std::atomic<int> step{0};

    std::thread b([&] {
        span_registry_entry_t *entry = within(base, 4096);
        EXPECT_EQ(&reg.entry, entry);
        ASSERT_EQ(&reg.entry, within(base + 4096, 4096)); /* slot's */
        step = 1;
        wait_for(step, 2);
        release(entry);
        EXPECT_EQ(0u, destroyed.load());
        release(entry);
        EXPECT_EQ(1u, destroyed.load());
    });
    wait_for(step, 1);
    release(&reg.entry);
    EXPECT_EQ(0u, destroyed.load());
    step = 2;
    b.join();
    EXPECT_EQ(1u, destroyed.load());
}

/* many threads take and give back references to units of one entry, each
 * sometimes releasing another's: torn down once, after the last */
TEST_F(registry, thread_storm_tears_down_once)
{
    fake_reg reg(owner, base, 4, 2 * MiB, 900);
    const int threads = 4, rounds = 2000;
    std::vector<std::vector<span_registry_entry_t*>> held(threads);
    std::vector<std::thread> pool;

    for (int t = 0; t < threads; ++t) {
        pool.emplace_back([&, t] {
            for (int i = 0; i < rounds; ++i) {
                uint64_t unit = (i + t) % 4;
                span_registry_entry_t *entry =
                        within(base + unit * 2 * MiB + 4096 * (i % 7), 4096);
                ASSERT_EQ(&reg.entry, entry);
                if (i % 3) {
                    release(entry);
                } else {
                    held[t].push_back(entry);
                }
            }
        });
    }
    for (auto &thread : pool) {
        thread.join();
    }
    for (auto &list : held) { /* released by this thread, not the takers */
        for (auto entry : list) {
            release(entry);
        }
    }
    EXPECT_EQ(0u, destroyed.load());
    release(&reg.entry);
    EXPECT_EQ(1u, destroyed.load());
}

/*
 * Lifetime across owners: each fake MD below is an object of its own on the
 * heap, freed when it closes, and a registration's teardown reads its owner
 * (as span_md_memh_destroy does), so that ASan sees any teardown that runs
 * after its owner closed.
 */
struct fake_md {
    std::atomic<unsigned> registrations{0};
    std::atomic<unsigned> teardowns{0};
    std::atomic<bool>     closed{false};
};

std::atomic<bool> torn_after_close{false};
std::atomic<const void*> closed_md{nullptr};
/* a teardown on a thread that holds them waits for its owner's close (at
 * most 2 s): one that runs after the close then shows */
thread_local bool hold_teardowns = false;
std::atomic<const void*> tearing_down{nullptr};

/*
 * The page of a guarded registration (below): the test makes it unreadable,
 * so that the next thread to read the registration stops in the fault
 * handler, at that very load, while the others go on (for at most 100 ms,
 * or until the registration is torn down). A teardown makes the page
 * unreadable again: a read after it comes back to the handler, counted.
 */
char *guard_page;
size_t guard_size;
std::atomic<bool> guard_torn{false};
std::atomic<int> guard_faults{0};
std::atomic<int> guard_reads_after_teardown{0};
std::atomic<bool> guard_let_go{false};
double guard_hold = 0.1; /* seconds */

double guard_now()
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + (ts.tv_nsec * 1e-9);
}

void guard_fault(int sig, siginfo_t *info, void *context)
{
    char *addr = static_cast<char*>(info->si_addr);
    double end;

    if ((addr < guard_page) || (addr >= guard_page + guard_size)) {
        signal(SIGSEGV, SIG_DFL); /* not ours: crash as it would */
        return;
    }
    mprotect(guard_page, guard_size, PROT_READ | PROT_WRITE);
    if (guard_torn) {
        ++guard_reads_after_teardown;
        return;
    }
    ++guard_faults;
    for (end = guard_now() + guard_hold;
         !guard_torn && !guard_let_go && (guard_now() < end);) {
        sched_yield();
    }
}

/* A registration of a fake MD with one unit, torn down as an MD's handle
 * is: after the release the registry says was the last, reading its owner */
struct md_reg {
    span_registry_entry_t entry{};
    span_registry_unit_t  unit{};
    span_registry_stats_t stats{};
    bool                  guarded = false;

    static void teardown(span_registry_entry_t *entry)
    {
        auto reg = reinterpret_cast<md_reg*>(entry);
        auto md  = static_cast<fake_md*>(const_cast<void*>(entry->owner));
        auto end = std::chrono::steady_clock::now() + std::chrono::seconds(2);

        if (hold_teardowns) {
            tearing_down = md;
            while ((closed_md.load() != md) &&
                   (std::chrono::steady_clock::now() < end)) {
                std::this_thread::yield();
            }
        }
        if (md->closed) {
            torn_after_close = true;
        }
        ++md->teardowns;
        if (!reg->guarded) {
            delete reg;
            return;
        }
        reg->~md_reg();
        mprotect(guard_page, guard_size, PROT_NONE);
        guard_torn = true;
    }

    static md_reg *guarded_new(fake_md *md, uint64_t start, uint64_t length,
                               uint64_t id)
    {
        guard_size = sysconf(_SC_PAGESIZE);
        guard_page = static_cast<char*>(mmap(NULL, guard_size,
                                             PROT_READ | PROT_WRITE,
                                             MAP_PRIVATE | MAP_ANONYMOUS, -1,
                                             0));
        if (guard_page == MAP_FAILED) {
            return nullptr;
        }
        guard_torn                 = false;
        guard_faults               = 0;
        guard_reads_after_teardown = 0;
        guard_let_go               = false;
        guard_hold                 = 0.1;
        auto reg     = new (guard_page) md_reg(md, start, length, id);
        reg->guarded = true;
        return reg;
    }

    md_reg(fake_md *md, uint64_t start, uint64_t length, uint64_t id)
    {
        ++md->registrations;
        unit.id        = id;
        entry.owner    = md;
        entry.start    = start;
        entry.length   = length;
        entry.mem_type = UCS_MEMORY_TYPE_CUDA;
        entry.identity = id;
        entry.caps     = 1;
        entry.num_units = 1;
        entry.units    = &unit;
        entry.stats    = &stats;
        span_registry_add(&entry);
    }
};

span_registry_entry_t *md_within(fake_md *md, uint64_t addr, uint64_t id)
{
    return span_registry_find_within(md, addr, 4096, UCS_MEMORY_TYPE_CUDA, id,
                                     1, fake_check);
}

/* A release that the registry says ends the registration tears it down */
void md_release(span_registry_entry_t *entry)
{
    if (span_registry_release(entry)) {
        md_reg::teardown(entry);
    }
}

/* Counts and silences the warnings that say a registration leaked */
std::atomic<unsigned> leak_warnings{0};

ucs_log_func_rc_t count_leak_warnings(const char *, unsigned, const char *,
                                      ucs_log_level_t level,
                                      const ucs_log_component_config_t *,
                                      const char *message, va_list ap)
{
    char line[256];

    vsnprintf(line, sizeof(line), message, ap);
    if ((level != UCS_LOG_LEVEL_WARN) ||
        (strstr(line, "not released before it closed") == nullptr)) {
        return UCS_LOG_FUNC_RC_CONTINUE;
    }
    ++leak_warnings;
    return UCS_LOG_FUNC_RC_STOP;
}

class registry_owners : public ::testing::Test {
protected:
    void SetUp() override
    {
        torn_after_close = false;
        closed_md        = nullptr;
        tearing_down     = nullptr;
    }

    /* as span_md_close: purge, then the MD is freed */
    void close(fake_md *md)
    {
        span_registry_purge(md);
        md->closed = true;
        closed_md  = md;
        delete md;
    }

    uint64_t base = 0x7e0000000000ull;
};

/* thread a's slot held x's registration when its users released it;
 * a then asks for memory of y while x closes: nothing of x's may be torn
 * down after x closed */
TEST_F(registry_owners, a_request_of_one_md_never_tears_down_another_closed_md)
{
    deadline bound(20, "registry_owners.a_request_of_one_md_never_tears_down"
                       "_another_closed_md");
    auto x = new fake_md, y = new fake_md;
    auto *rx = new md_reg(x, base, 64 * MiB, 0xb0);
    auto *ry = new md_reg(y, base + 64 * MiB, 64 * MiB, 0xb1);
    std::vector<span_registry_entry_t*> got;
    std::atomic<int> step{0};
    unsigned x_torn;

    std::thread a([&] {
        got.push_back(md_within(x, base + 4096, 0xb0));  /* its slot takes it */
        got.push_back(md_within(x, base + 8192, 0xb0));  /* from its slot */
        step = 1;
        wait_for(step, 2);
        /* of y, while x closes */
        hold_teardowns = true;
        span_registry_entry_t *entry = md_within(y, base + 64 * MiB, 0xb1);
        hold_teardowns = false;
        EXPECT_EQ(&ry->entry, entry);
        step = 3;
        md_release(entry);
    });
    wait_for(step, 1);
    for (auto entry : got) {
        EXPECT_EQ(&rx->entry, entry);
        md_release(entry);
    }
    md_release(&rx->entry); /* x's users are done with it */
    step = 2;
    /* x closes once a's request is over or tears down in it */
    while ((step != 3) && (tearing_down.load() == nullptr)) {
        std::this_thread::yield();
    }
    x_torn = x->teardowns;
    close(x);
    a.join();
    EXPECT_FALSE(torn_after_close.load());
    EXPECT_EQ(1u, x_torn) << "x's registration was not torn down when x "
                             "closed";
    md_release(&ry->entry);
    EXPECT_EQ(1u, y->teardowns.load());
    close(y);
}

/* thread a's slot holds x's registration; a asks for the same buffer
 * registered by y (two contexts, one tensor), and its slot hit reads x's
 * registration: it stops right there while x's users release it and x
 * closes. Nothing may read the registration after its teardown. */
TEST_F(registry_owners, a_slot_hit_never_reads_a_torn_down_registration)
{
    deadline bound(20, "registry_owners.a_slot_hit_never_reads_a_torn_down_"
                       "registration");
    auto x = new fake_md, y = new fake_md;
    md_reg *rx = md_reg::guarded_new(x, base, 64 * MiB, 0xa0);
    auto *ry   = new md_reg(y, base, 64 * MiB, 0xa0); /* the same buffer */
    span_registry_entry_t *got = nullptr;
    struct sigaction action = {}, saved;
    std::atomic<int> step{0};

    ASSERT_NE(nullptr, rx) << strerror(errno);
    action.sa_sigaction = guard_fault;
    action.sa_flags     = SA_SIGINFO;
    ASSERT_EQ(0, sigaction(SIGSEGV, &action, &saved));
    std::thread a([&] {
        got  = md_within(x, base + 4096, 0xa0); /* its slot takes it */
        step = 1;
        wait_for(step, 2);
        span_registry_entry_t *entry = md_within(y, base + 8192, 0xa0);
        EXPECT_EQ(&ry->entry, entry);
        md_release(entry);
    });
    wait_for(step, 1);
    EXPECT_EQ(&rx->entry, got);
    mprotect(guard_page, guard_size, PROT_NONE);
    step = 2;
    while (guard_faults == 0) { /* a is inside its slot hit */
        std::this_thread::yield();
    }
    md_release(got);
    md_release(&rx->entry); /* x's users are done with it */
    close(x);
    a.join();
    sigaction(SIGSEGV, &saved, NULL);
    EXPECT_EQ(1, guard_faults.load());
    EXPECT_EQ(0, guard_reads_after_teardown.load())
            << "a slot hit read a registration after its teardown";
    EXPECT_TRUE(guard_torn.load());
    EXPECT_FALSE(torn_after_close.load());
    md_release(&ry->entry);
    close(y);
    munmap(guard_page, guard_size);
}

/* a process forks while thread a is inside its slot hit (its slot marked
 * busy): in the child, where a is not, the release of the registration's
 * last reference must not wait for a's slot */
TEST_F(registry_owners, a_child_of_fork_never_waits_for_a_slot_of_its_parent)
{
    deadline bound(30, "registry_owners.a_child_of_fork_never_waits_for_a_"
                       "slot_of_its_parent");
    auto x     = new fake_md;
    md_reg *rx = md_reg::guarded_new(x, base, 64 * MiB, 0xd0);
    span_registry_entry_t *got = nullptr, *hit = nullptr;
    struct sigaction action = {}, saved;
    std::atomic<int> step{0};
    int status        = -1;
    double end;
    pid_t pid;

    ASSERT_NE(nullptr, rx) << strerror(errno);
    action.sa_sigaction = guard_fault;
    action.sa_flags     = SA_SIGINFO;
    ASSERT_EQ(0, sigaction(SIGSEGV, &action, &saved));
    guard_hold = 20;
    std::thread a([&] {
        got  = md_within(x, base + 4096, 0xd0); /* its slot takes it */
        step = 1;
        wait_for(step, 2);
        hit = md_within(x, base + 8192, 0xd0); /* stops inside */
    });
    wait_for(step, 1);
    mprotect(guard_page, guard_size, PROT_NONE);
    step = 2;
    while (guard_faults == 0) {
        std::this_thread::yield();
    }
    pid = fork();
    if (pid == 0) {
        span_registry_release(got);
        _exit(span_registry_release(&rx->entry) ? 0 : 3);
    }
    ASSERT_GT(pid, 0) << strerror(errno);
    for (end = guard_now() + 5; guard_now() < end;) {
        if (waitpid(pid, &status, WNOHANG) == pid) {
            break;
        }
        usleep(10000);
    }
    if (status == -1) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
    }
    guard_let_go = true;
    a.join();
    sigaction(SIGSEGV, &saved, NULL);
    EXPECT_TRUE(WIFEXITED(status) && (WEXITSTATUS(status) == 0))
            << "the child did not release the registration in 5 s (status "
            << status << ")";
    EXPECT_EQ(&rx->entry, hit);
    for (auto entry : {got, hit, &rx->entry}) {
        md_release(entry);
    }
    EXPECT_TRUE(guard_torn.load());
    close(x);
    munmap(guard_page, guard_size);
}

/* a registration still held when its MD closes (a leak: UCT asks for every
 * one to be released first) is never served again, from a slot or not:
 * not to a new MD that the allocator puts at the closed one's address */
TEST_F(registry_owners, a_registration_held_at_close_is_never_served_again)
{
    auto x   = new fake_md;
    auto *rx = new md_reg(x, base, 64 * MiB, 0xc0);
    std::vector<span_registry_entry_t*> got;
    std::atomic<int> step{0};

    std::thread a([&] {
        got.push_back(md_within(x, base + 4096, 0xc0));
        got.push_back(md_within(x, base + 8192, 0xc0)); /* from its slot */
        step = 1;
        wait_for(step, 2);
        got.push_back(md_within(x, base + 8192, 0xc0));
    });
    wait_for(step, 1);
    leak_warnings = 0;
    ucs_log_push_handler(count_leak_warnings);
    span_registry_purge(x); /* x closes; a new MD at its address: */
    ucs_log_pop_handler();
    EXPECT_EQ(1u, leak_warnings.load());
    step = 2;
    a.join();
    EXPECT_EQ(nullptr, got[2]) << "served after its MD closed";
    EXPECT_EQ(nullptr, md_within(x, base + 4096, 0xc0));
    EXPECT_FALSE(span_registry_valid(&rx->entry));
    /* the leaked handles' late releases still tear it down once */
    got.push_back(&rx->entry);
    for (auto entry : got) {
        if (entry != nullptr) {
            md_release(entry);
        }
    }
    EXPECT_EQ(1u, x->teardowns.load());
    delete x;
}

/*
 * Several MDs in one process, as NIXL agents (one UCP context per thread)
 * have them: threads register the same device buffers with any of them,
 * hand references to each other, release them, see memory freed, exit and
 * start again, while MDs close and open. An MD closes as UCT asks (no call
 * on it meanwhile, all its registrations released, by whichever thread),
 * while the other threads' slots may hold its registrations and they go on
 * with the other MDs. Every registration is torn down exactly once, by the
 * release of its last user, before its MD closes (ASan and TSan see the
 * rest). SPAN_STRESS_SECONDS long (2 s by default).
 */
class registry_stress : public registry_owners {
protected:
    static constexpr int MDS = 4, UNITS = 8, WORKERS = 4;

    struct md_state {
        std::shared_mutex                   use;  /* exclusive: closing */
        std::mutex                          lock; /* of refs */
        std::vector<span_registry_entry_t*> refs; /* handed out */
        fake_md                             *md = new fake_md;
    };

    static double seconds()
    {
        const char *env = getenv("SPAN_STRESS_SECONDS");
        return (env != nullptr) ? atof(env) : 2.0;
    }

    uint64_t unit_start(int k) { return base + (k * 2 * MiB); }
    static uint64_t unit_id(int k) { return 0x5000 + k; }

    /* a reference to unit k registered with md: shared, else a new one */
    span_registry_entry_t *take(fake_md *md, int k, uint64_t offset)
    {
        span_registry_entry_t *entry = md_within(md, unit_start(k) + offset,
                                                 unit_id(k));

        return (entry != nullptr) ? entry :
               &(new md_reg(md, unit_start(k), 2 * MiB, unit_id(k)))->entry;
    }

    /* UCT's order: nothing in use, every registration released, then the
     * MD closes: by then each of them is torn down */
    void close_md(md_state &state)
    {
        std::unique_lock<std::shared_mutex> closing(state.use);

        for (auto entry : state.refs) {
            md_release(entry);
        }
        state.refs.clear();
        EXPECT_EQ(state.md->registrations.load(),
                  state.md->teardowns.load())
                << "registrations released by all their users are not torn "
                   "down before their MD closes";
        span_registry_purge(state.md);
        /* kept, not freed, until the end: a new MD never comes at its
         * address, so a teardown after its close is told apart */
        state.md->closed = true;
        closed.push_back(state.md);
        state.md = new fake_md;
    }

    /* one request, release or unmap with md, around unit k */
    void step(md_state &state, int k, std::minstd_rand &rand)
    {
        int op = rand() % 64;
        span_registry_entry_t *entry;

        if (op < 32) {
            entry = take(state.md, k, (rand() % 512) * 4096);
            if (op < 12) {
                md_release(entry); /* at once, on this thread */
            } else {
                std::lock_guard<std::mutex> guard(state.lock);
                state.refs.push_back(entry);
            }
        } else if (op < 63) {
            std::unique_lock<std::mutex> guard(state.lock);
            if (state.refs.empty()) {
                return;
            }
            size_t i = rand() % state.refs.size();
            entry    = state.refs[i];
            state.refs[i] = state.refs.back();
            state.refs.pop_back();
            guard.unlock();
            md_release(entry); /* maybe another thread's */
        } else {
            span_registry_invalidate(unit_start(k) + 4096, 4096);
        }
        ++ops;
    }

    /* bursts with one MD around one unit: served by the thread's slot */
    void work(unsigned seed, double until)
    {
        std::minstd_rand rand(seed);

        while (guard_now() < until) {
            md_state &state = mds[rand() % MDS];
            std::shared_lock<std::shared_mutex> use(state.use);
            int k = rand() % UNITS;

            for (int n = 1 + (rand() % 16); n > 0; --n) {
                step(state, k, rand);
            }
        }
    }

    md_state              mds[MDS];
    std::vector<fake_md*> closed; /* by the closer, then the test's end */
    std::atomic<unsigned> ops{0};
};

TEST_F(registry_stress, threads_register_release_and_close_mds_at_once)
{
    const double duration = seconds(), until = guard_now() + duration;
    deadline bound(unsigned(duration) + 60,
                   "registry_stress.threads_register_release_and_close_mds_"
                   "at_once");
    std::atomic<bool> done{false};
    unsigned generations = 0;

    std::thread closer([&] {
        std::minstd_rand rand(1);
        while (!done) {
            std::this_thread::sleep_for(
                    std::chrono::microseconds(200 + (rand() % 2000)));
            close_md(mds[rand() % MDS]);
        }
    });
    /* threads live 50 ms: their slots let go at their exit too */
    while (guard_now() < until) {
        std::vector<std::thread> pool;
        double end = std::min(until, guard_now() + 0.05);
        for (int t = 0; t < WORKERS; ++t) {
            pool.emplace_back([&, t] { work(generations * WORKERS + t, end); });
        }
        for (auto &thread : pool) {
            thread.join();
        }
        ++generations;
    }
    done = true;
    closer.join();
    for (auto &state : mds) {
        close_md(state);
        delete state.md;
    }
    EXPECT_FALSE(torn_after_close.load());
    printf("%u ops, %zu MD closes, %u thread generations in %.1f s\n",
           ops.load(), closed.size(), generations, duration);
    for (auto md : closed) {
        delete md;
    }
}

} // namespace
