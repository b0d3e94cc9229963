/*
 * The registry's lookups inside device units and its per-thread slots,
 * over entries of its own (no MD): a buffer inside any unit of a
 * registration of several finds it, a unit that holds other memory makes it
 * stale, and however the references are taken and released (through a
 * thread's slot or under the lock, on the same thread or another) an entry
 * is torn down exactly once, when its last user released it and the slots
 * that held it let it go.
 */
#include <gtest/gtest.h>

extern "C" {
#include "span_registry.h"
}

#include <atomic>
#include <map>
#include <thread>
#include <vector>

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

void count_destroy(span_registry_entry_t *entry)
{
    ++destroyed;
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
        entry.destroy   = count_destroy;
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
 * their release elsewhere leaves b's slot holding the entry, released by
 * its users, until the owner purges */
TEST_F(registry, a_live_thread_slot_keeps_a_released_entry_until_purge)
{
    fake_reg reg(owner, base, 1, 64 * MiB, 700);
    std::vector<span_registry_entry_t*> got;
    std::atomic<int> step{0};

    std::thread b([&] {
        got.push_back(within(base + 4096, 4096));
        got.push_back(within(base + 8192, 4096));
        step = 1;
        wait_for(step, 2);
    });
    wait_for(step, 1);
    for (auto entry : got) {
        ASSERT_EQ(&reg.entry, entry);
        release(entry);
    }
    release(&reg.entry); /* the last user, while b's slot holds it */
    EXPECT_EQ(0u, destroyed.load());
    span_registry_purge(owner);
    EXPECT_EQ(1u, destroyed.load());
    step = 2;
    b.join();
    EXPECT_EQ(1u, destroyed.load());
}

/* the last user's release on a thread whose slot holds a reference of its
 * own, after another released the registrant's: that thread tears down */
TEST_F(registry, a_draining_entry_is_torn_down_by_the_slot_that_held_it)
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

} // namespace
