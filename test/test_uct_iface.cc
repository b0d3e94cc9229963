/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * UCT level: the table of twin ifaces, and the uniform ops that call the
 * inner op without a lookup (test_uct.h has the fixtures).
 */
#include "test_uct.h"

/* The ops of one access call the inner op without a lookup only while every
 * open twin has the same inner ops: the fixture's twin is opened first (its
 * ops are the shared ones), then a twin of another transport, whose atomics
 * are strict's own; each must reach its own inner op */
class span_uct_mixed : public span_uct {
};

TEST_P(span_uct_mixed, one_access_ops_beside_a_twin_of_another_transport)
{
    const char *other = (std::string(GetParam()) == "self+") ? "strict+" :
                                                                "self+";
    uint64_t *target  = reinterpret_cast<uint64_t*>(&remote[256]);
    uint64_t result   = 0;
    {
        twin_side side(other);
        ASSERT_NE(nullptr, side.ep) << other;
        for (int round = 0; round < 2; ++round) {
            side.fetch_add();
            *target = 40;
            completion c;
            wait(uct_ep_atomic64_fetch(ep, UCT_ATOMIC_OP_ADD, 2, &result,
                                       raddr(256), rkey.rkey, &c.super), c);
            EXPECT_EQ(40u, result);
            EXPECT_EQ(42u, *target);
        }
    }
    /* the other closed: the fixture's ops still reach theirs */
    *target = 1;
    completion c;
    wait(uct_ep_atomic64_fetch(ep, UCT_ATOMIC_OP_ADD, 2, &result, raddr(256),
                               rkey.rkey, &c.super), c);
    EXPECT_EQ(1u, result);
    EXPECT_EQ(3u, *target);
}

INSTANTIATE_TEST_SUITE_P(twin, span_uct_mixed,
                         ::testing::Values("self+", "strict+"));

/* A twin whose transport reads no local memh (cma+) hands it the caller's
 * iov, twin memhs and all, only while no open twin's transport reads them:
 * beside strict+, which checks every local memh as a NIC does, opened
 * before it or after, each twin's zero-copy ops translate them and move
 * their bytes, in one iov entry or two */
class span_uct_mixed_zcopy : public span_uct {
};

TEST_P(span_uct_mixed_zcopy, memhs_are_translated_beside_a_twin_that_reads_them)
{
    const char *other = (std::string(GetParam()) == "cma+") ? "strict+" :
                                                              "cma+";
    std::vector<uint8_t> local(256);
    uct_mem_h lmemh = reg(local.data(), local.size());
    twin_side side(other);
    ASSERT_NE(nullptr, side.ep) << other;
    for (size_t iovcnt = 1; iovcnt <= 2; ++iovcnt) {
        uint64_t src[2] = {iovcnt * 10 + 1, iovcnt * 10 + 2};
        side.put_zcopy(src, iovcnt);

        for (size_t i = 0; i < local.size(); ++i) {
            local[i] = uint8_t(i * 5 + iovcnt);
        }
        uct_iov_t iov[2] = {{local.data(), local.size() / iovcnt, lmemh, 0, 1},
                            {local.data() + 128, 128, lmemh, 0, 1}};
        completion c;
        wait(uct_ep_put_zcopy(ep, iov, iovcnt, raddr(0), rkey.rkey,
                              &c.super), c);
        EXPECT_EQ(0, memcmp(local.data(), remote.data(), local.size()));
    }
    EXPECT_TRUE(guard_intact());
    dereg(lmemh);
}

INSTANTIATE_TEST_SUITE_P(twin, span_uct_mixed_zcopy,
                         ::testing::Values("cma+", "strict+"));


/*
 * The table that finds a twin iface's state: every open takes a slot, every
 * close gives it back. Ifaces opened and closed by the thousand, each at a
 * new address (allocations kept alive in between move the allocator on),
 * and more ifaces open at once than the table holds: an open succeeds or
 * fails with a clear error, never hangs, and every open iface moves bytes.
 */
class span_iface_table : public ::testing::Test {
protected:
    void SetUp() override
    {
        ASSERT_NO_FATAL_FAILURE(open_twin_md("self+", &component, &md));
        ASSERT_NO_FATAL_FAILURE(open_worker(&async, &worker));
        ASSERT_EQ(UCS_OK, uct_md_iface_config_read(md, "self+", NULL, NULL,
                                                   &config));
        ASSERT_EQ(UCS_OK, uct_md_mem_reg(md, buf, sizeof(buf),
                                         UCT_MD_MEM_ACCESS_ALL, &memh));
        uct_md_attr_t attr;
        ASSERT_EQ(UCS_OK, uct_md_query(md, &attr));
        std::vector<uint8_t> packed(attr.rkey_packed_size);
        ASSERT_EQ(UCS_OK, uct_md_mkey_pack(md, memh, packed.data()));
        ASSERT_EQ(UCS_OK, uct_rkey_unpack(component, packed.data(), &rkey));
    }

    void TearDown() override
    {
        uct_rkey_release(component, &rkey);
        uct_md_mem_dereg(md, memh);
        uct_config_release(config);
        uct_worker_destroy(worker);
        ucs_async_context_destroy(async);
        uct_md_close(md);
    }

    ucs_status_t open(uct_iface_h *iface_p, uct_worker_h on = NULL)
    {
        return open_iface(md, (on != NULL) ? on : worker, "self+", "memory",
                          config, iface_p);
    }

    /* A put_short through a new ep of iface lands in buf */
    void put(uct_iface_h iface, uint64_t value)
    {
        uct_ep_h ep;
        ASSERT_EQ(UCS_OK, connect_to_self(iface, &ep));
        EXPECT_EQ(UCS_OK, uct_ep_put_short(ep, &value, sizeof(value),
                                           (uintptr_t)&buf[8], rkey.rkey));
        uct_ep_destroy(ep);
        uint64_t landed;
        memcpy(&landed, &buf[8], sizeof(landed));
        EXPECT_EQ(value, landed);
    }

    uct_component_h     component;
    uct_md_h            md;
    ucs_async_context_t *async;
    uct_worker_h        worker;
    uct_iface_config_t  *config;
    uint8_t             buf[64];
    uct_mem_h           memh;
    uct_rkey_bundle_t   rkey;
};

TEST_F(span_iface_table, open_close_cycles_at_new_addresses)
{
    const unsigned cycles = 20000;
    std::vector<void*> kept;
    std::set<uintptr_t> addresses;
    deadline limit(60, std::to_string(cycles) + " open/close cycles of a "
                   "twin iface");
    for (unsigned i = 0; i < cycles; ++i) {
        uct_iface_h iface;
        ASSERT_EQ(UCS_OK, open(&iface)) << "cycle " << i;
        addresses.insert((uintptr_t)iface);
        put(iface, i);
        size_t size = malloc_usable_size(iface);
        uct_iface_close(iface);
        kept.push_back(malloc(size)); /* takes the iface's memory */
    }
    for (void *p : kept) {
        free(p);
    }
    EXPECT_GT(addresses.size(), cycles / 2) << "ifaces kept their addresses";
}

TEST_F(span_iface_table, more_ifaces_than_the_table_holds)
{
    std::vector<uct_iface_h> ifaces;
    deadline limit(60, "opening 1100 twin ifaces");
    log_counter logs;
    ucs_status_t status = UCS_OK;
    while ((ifaces.size() < 1100) && (status == UCS_OK)) {
        uct_iface_h iface;
        status = open(&iface);
        if (status == UCS_OK) {
            ifaces.push_back(iface);
        }
    }
    if (status != UCS_OK) {
        EXPECT_EQ(UCS_ERR_EXCEEDS_LIMIT, status);
        EXPECT_EQ(1u, logs.count("twin ifaces are open"));
        EXPECT_GE(ifaces.size(), 1024u);
    }
    for (size_t i = 0; i < ifaces.size(); i += 97) {
        put(ifaces[i], i + 1);
    }
    /* a closed iface's slot takes a new one */
    uct_iface_close(ifaces.back());
    ifaces.pop_back();
    uct_iface_h iface;
    ASSERT_EQ(UCS_OK, open(&iface));
    ifaces.push_back(iface);
    put(iface, 7);
    for (uct_iface_h i : ifaces) {
        uct_iface_close(i);
    }
}

/* Ops find their iface without a lock while other ifaces open and close in
 * another thread (on a worker of its own): run under TSan too */
TEST_F(span_iface_table, ops_while_other_ifaces_open_and_close)
{
    uct_iface_h iface;
    ASSERT_EQ(UCS_OK, open(&iface));
    std::atomic<bool> stop(false);
    std::atomic<unsigned> cycles(0);
    std::thread churn([&] {
        ucs_async_context_t *async2;
        uct_worker_h worker2;
        ASSERT_NO_FATAL_FAILURE(open_worker(&async2, &worker2));
        while (!stop) {
            uct_iface_h other;
            ASSERT_EQ(UCS_OK, open(&other, worker2));
            uct_iface_close(other);
            ++cycles;
        }
        uct_worker_destroy(worker2);
        ucs_async_context_destroy(async2);
    });
    deadline limit(60, "ops beside opens and closes");
    for (uint64_t i = 0; (i < 2000) || (cycles < 500); ++i) {
        put(iface, i);
    }
    stop = true;
    churn.join();
    uct_iface_close(iface);
}
