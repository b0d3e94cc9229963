/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Verbs resolver over a scripted libibverbs: which device an ib MD's name
 * finds, the limit it reads, and that everything opened is closed.
 */
#include <gtest/gtest.h>

extern "C" {
#include "resolve/span_verbs.h"
}

#include <cerrno>
#include <cstdint>
#include <string>
#include <vector>

namespace {

struct fake_device {
    std::string name;
    uint64_t    max_mr_size;
    bool        opens;     /* ibv_open_device succeeds */
    int         query_ret; /* what ibv_query_device returns */
};

/* The devices the fake library lists, and what was done with them */
struct fake_state {
    std::vector<fake_device> devices;
    bool                     list_fails = false;
    int                      lists_out  = 0; /* lists not yet freed */
    int                      open_ctx   = 0; /* contexts not yet closed */
    std::vector<std::string> opened;
} fake;

/* A device handle is the index of its entry plus one; a context the same */
struct ibv_device *fake_handle(size_t i)
{
    return reinterpret_cast<struct ibv_device*>(i + 1);
}

const fake_device &fake_of(const void *handle)
{
    return fake.devices.at(reinterpret_cast<uintptr_t>(handle) - 1);
}

struct ibv_device **fake_get_device_list(int *num)
{
    if (fake.list_fails) {
        *num = 0;
        return nullptr;
    }
    auto **list = new struct ibv_device*[fake.devices.size() + 1];
    for (size_t i = 0; i < fake.devices.size(); ++i) {
        list[i] = fake_handle(i);
    }
    list[fake.devices.size()] = nullptr;
    *num = static_cast<int>(fake.devices.size());
    ++fake.lists_out;
    return list;
}

void fake_free_device_list(struct ibv_device **list)
{
    delete[] list;
    --fake.lists_out;
}

const char *fake_get_device_name(struct ibv_device *device)
{
    return fake_of(device).name.c_str();
}

struct ibv_context *fake_open_device(struct ibv_device *device)
{
    fake.opened.push_back(fake_of(device).name);
    if (!fake_of(device).opens) {
        return nullptr;
    }
    ++fake.open_ctx;
    return reinterpret_cast<struct ibv_context*>(device);
}

int fake_close_device(struct ibv_context *context)
{
    --fake.open_ctx;
    return 0;
}

int fake_max_mr_size(struct ibv_context *context, uint64_t *max_p)
{
    const fake_device &d = fake_of(context);
    if (d.query_ret == 0) {
        *max_p = d.max_mr_size;
    }
    return d.query_ret;
}

const span_verbs_ops_t fake_ops = {
    fake_get_device_list, fake_free_device_list, fake_get_device_name,
    fake_open_device, fake_close_device, fake_max_mr_size
};

const uint64_t GiB = 1ull << 30;

class verbs_resolver : public ::testing::Test {
protected:
    void SetUp() override
    {
        fake = fake_state();
        /* a ConnectX limit, soft-RoCE's "none", and a prefix of another */
        fake.devices = {{"mlx5_1", 1ull << 40, true, 0},
                        {"mlx5_10", 2 * GiB, true, 0},
                        {"rxe0", UINT64_MAX, true, 0}};
    }

    void TearDown() override
    {
        EXPECT_EQ(0, fake.lists_out) << "device list not freed";
        EXPECT_EQ(0, fake.open_ctx) << "device context not closed";
    }
};

} // namespace

TEST_F(verbs_resolver, md_name_finds_its_device_by_exact_name)
{
    uint64_t max = 0;

    ASSERT_EQ(UCS_OK, span_verbs_max_mr_size(&fake_ops, "mlx5_10", &max));
    EXPECT_EQ(2 * GiB, max);
    ASSERT_EQ(UCS_OK, span_verbs_max_mr_size(&fake_ops, "mlx5_1", &max));
    EXPECT_EQ(1ull << 40, max);
    EXPECT_EQ((std::vector<std::string>{"mlx5_10", "mlx5_1"}), fake.opened);
}

TEST_F(verbs_resolver, unknown_name_is_no_device)
{
    uint64_t max = 7;

    EXPECT_EQ(UCS_ERR_NO_DEVICE, span_verbs_max_mr_size(&fake_ops, "mlx5",
                                                        &max));
    EXPECT_EQ(UCS_ERR_NO_DEVICE, span_verbs_max_mr_size(&fake_ops, "mlx5_0",
                                                        &max));
    EXPECT_EQ(7u, max);
    EXPECT_TRUE(fake.opened.empty());
}

TEST_F(verbs_resolver, no_device_list_is_no_device)
{
    uint64_t max = 7;

    fake.list_fails = true;
    EXPECT_EQ(UCS_ERR_NO_DEVICE, span_verbs_max_mr_size(&fake_ops, "rxe0",
                                                        &max));
    EXPECT_EQ(7u, max);
}

TEST_F(verbs_resolver, device_that_cannot_be_opened_or_queried_is_io_error)
{
    uint64_t max = 7;

    fake.devices[0].opens     = false;
    fake.devices[1].query_ret = EPERM;
    EXPECT_EQ(UCS_ERR_IO_ERROR, span_verbs_max_mr_size(&fake_ops, "mlx5_1",
                                                       &max));
    EXPECT_EQ(UCS_ERR_IO_ERROR, span_verbs_max_mr_size(&fake_ops, "mlx5_10",
                                                       &max));
    EXPECT_EQ(7u, max);
}

TEST_F(verbs_resolver, md_limit_is_the_smaller_of_md_and_device)
{
    /* UCX's ib MD reports SIZE_MAX: the device's limit is the one used */
    EXPECT_EQ(2 * GiB, span_verbs_md_max_reg(&fake_ops, "mlx5_10", SIZE_MAX));
    EXPECT_EQ(GiB, span_verbs_md_max_reg(&fake_ops, "mlx5_10", GiB));
    /* rxe reports 2^64-1: no limit */
    EXPECT_EQ(uint64_t(SIZE_MAX), span_verbs_md_max_reg(&fake_ops, "rxe0",
                                                        SIZE_MAX));
}

TEST_F(verbs_resolver, md_limit_stands_where_the_device_cannot_be_asked)
{
    fake.devices[1].query_ret = EIO;
    EXPECT_EQ(uint64_t(SIZE_MAX), span_verbs_md_max_reg(&fake_ops, "mlx5_10",
                                                        SIZE_MAX));
    EXPECT_EQ(GiB, span_verbs_md_max_reg(&fake_ops, "mlx9_9", GiB));
    EXPECT_EQ(GiB, span_verbs_md_max_reg(nullptr, "mlx5_1", GiB));
}

/* The real library where it loads: a name no device has is no device,
 * with or without RDMA hardware */
TEST(verbs_library, unknown_device_is_no_device)
{
    const span_verbs_ops_t *lib = span_verbs_library();
    uint64_t max = 7;

    if (lib == nullptr) {
        GTEST_SKIP() << "libibverbs.so.1 not loadable";
    }
    EXPECT_EQ(UCS_ERR_NO_DEVICE,
              span_verbs_max_mr_size(lib, "span_no_such_device", &max));
    EXPECT_EQ(7u, max);
}
