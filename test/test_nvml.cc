/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The NVLink probe of cuda_ipc+ (span_nvml.c) against a scripted NVML: what
 * it counts, and that NVML calls which fail for a while are tried again,
 * within a bound, rather than taken for "no NVLink" (what cuda_ipc's own
 * probe does, and why get zero-copy came and went); then the process's
 * probe against a scripted libnvidia-ml.so.1 (test/nvml_fake).
 */
extern "C" {
#include "iface/span_nvml.h"
}

#include "test_fork.h"

#include <gtest/gtest.h>
#include <chrono>
#include <thread>
#include <dlfcn.h>

namespace {

/* The scripted NVML: links in all, how many of them are active, and how
 * many calls fail (NVML_ERROR_UNKNOWN) before they answer */
struct fake_nvml {
    unsigned links, active, failures, calls;
    bool     wrong_type;
    int      count_return; /* of the count field: 3, NOT_SUPPORTED */
} fake;

int fake_init() { return 0; }

int fake_device(unsigned index, void **device)
{
    *device = &fake;
    return ((index != 0) || (fake.calls++ < fake.failures)) ? 999 : 0;
}

int fake_fields(void *device, int count, span_nvml_field_value_t *values)
{
    EXPECT_EQ(&fake, device);
    EXPECT_EQ(1, count);
    EXPECT_EQ(91u, values->field_id); /* NVML_FI_DEV_NVLINK_LINK_COUNT */
    EXPECT_EQ(0u, values->scope_id) << "every field of a request set";
    values->nvml_return = fake.count_return;
    values->value_type  = fake.wrong_type ? 3 : 1;
    values->value.ui    = fake.links;
    return 0;
}

int fake_state(void *device, unsigned link, int *active)
{
    EXPECT_LT(link, fake.links);
    *active = (link < fake.active);
    return 0;
}

const char *fake_error(int) { return "scripted"; }

int fake_count(unsigned *count)
{
    *count = fake.links; /* any number the test can tell apart */
    return (fake.failures > fake.calls) ? 999 : 0;
}

const span_nvml_ops_t ops = {fake_init, fake_device, fake_fields, fake_state,
                             fake_error, fake_count};

/* the count, or ~0u where the probe gave up */
unsigned links_of(fake_nvml f)
{
    unsigned links = 12345;

    fake = f;
    if (span_nvml_links_of(&ops, &links) != UCS_OK) {
        EXPECT_EQ(12345u, links) << "a probe that failed answered a count";
        return ~0u;
    }
    return links;
}

} // namespace

TEST(span_nvml, counts_the_active_links_of_gpu_0)
{
    EXPECT_EQ(18u, links_of({18, 18, 0, 0, false}));
    EXPECT_EQ(4u, links_of({18, 4, 0, 0, false}));
    EXPECT_EQ(0u, links_of({0, 0, 0, 0, false}));
    /* a count past what NVML has links for reads no more of them */
    EXPECT_EQ(18u, links_of({200, 200, 0, 0, false}));
    EXPECT_EQ(~0u, links_of({18, 18, 0, 0, true})) << "not a count";
}

/* A GPU without NVLink (one H200 PCIe) answers NOT_SUPPORTED for the count
 * field: no link, an answer at once, not a failure tried 10 times */
TEST(span_nvml, a_count_not_supported_is_no_link)
{
    EXPECT_EQ(0u, links_of({18, 18, 0, 0, false, 3}));
    EXPECT_EQ(1u, fake.calls);
    EXPECT_EQ(~0u, links_of({18, 18, 0, 0, false, 999})) << "another error";
}

/* the node's GPUs, or 0 where NVML cannot count them (then get zero-copy
 * is not offered on that ground) */
TEST(span_nvml, counts_the_gpus_of_the_node)
{
    unsigned gpus = 12345;

    fake = {1, 0, 0, 0, false};
    span_nvml_gpus_of(&ops, &gpus);
    EXPECT_EQ(1u, gpus);
    fake = {1, 0, 1, 0, false};
    span_nvml_gpus_of(&ops, &gpus);
    EXPECT_EQ(0u, gpus) << "a failed count is no count";
    span_nvml_ops_t old = ops;
    old.device_count    = NULL; /* an NVML without nvmlDeviceGetCount_v2 */
    gpus                = 12345;
    span_nvml_gpus_of(&old, &gpus);
    EXPECT_EQ(0u, gpus);
}

TEST(span_nvml, calls_that_fail_for_a_while_are_tried_again)
{
    EXPECT_EQ(18u, links_of({18, 18, 3, 0, false}));
    EXPECT_EQ(4u, fake.calls);
}

/* a failure, not "no NVLink": the twin asks again at its next query */
TEST(span_nvml, calls_that_always_fail_give_up_within_a_bound)
{
    auto start = std::chrono::steady_clock::now();
    EXPECT_EQ(~0u, links_of({18, 18, 1000, 0, false}));
    EXPECT_EQ(10u, fake.calls);
    EXPECT_LT(std::chrono::steady_clock::now() - start,
              std::chrono::seconds(2));
}

/*
 * span_nvml_nvlinks in a process whose NVML is the scripted one
 * (test/nvml_fake: its first SPAN_FAKE_NVML_FAILURES asks for GPU 0 fail),
 * each test in a process of its own (ctest nvml_probe, nvml_fork): what the
 * process keeps is per process.
 */
class span_nvml_process : public ::testing::Test {
protected:
    void SetUp() override
    {
        if (getenv("SPAN_FAKE_NVML_FAILURES") == NULL) {
            GTEST_SKIP() << "run by ctest as nvml_probe and nvml_fork, with "
                            "the scripted NVML first on LD_LIBRARY_PATH";
        }
        void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
        ASSERT_NE(nullptr, lib) << dlerror();
        calls = (int*)dlsym(lib, "span_fake_nvml_calls");
        ASSERT_NE(nullptr, calls) << "libnvidia-ml.so.1 is not the scripted "
                                     "one (test/nvml_fake)";
    }

    int asked() const
    {
        return __atomic_load_n(calls, __ATOMIC_SEQ_CST);
    }

    int *calls = nullptr;
};

TEST_F(span_nvml_process, a_failed_probe_is_made_again_and_an_answer_kept)
{
    EXPECT_EQ(0u, span_nvml_nvlinks()) << "10 failed asks: no NVLink known";
    EXPECT_EQ(10, asked());
    EXPECT_EQ(18u, span_nvml_nvlinks()) << "the next probe answers";
    EXPECT_EQ(11, asked());
    EXPECT_EQ(18u, span_nvml_nvlinks()) << "and its answer is kept";
    EXPECT_EQ(11, asked()) << "NVML asked again after it answered";
}

/* cuda_ipc+ offers get zero-copy where GPU 0 has an active NVLink or the
 * node has one GPU (ctest nvml_one_gpu, nvml_pcie: no NVLink, 1 or 2 GPUs),
 * the ground of its answer NVML's, kept */
TEST_F(span_nvml_process, get_zcopy_where_nvlink_or_one_gpu)
{
    const char *links = getenv("SPAN_FAKE_NVML_LINKS");
    const char *gpus  = getenv("SPAN_FAKE_NVML_GPUS");
    bool expected     = ((links == NULL) || (atoi(links) > 0)) ||
                        ((gpus != NULL) && (atoi(gpus) == 1));

    EXPECT_EQ(expected, span_nvml_get_zcopy() != 0)
            << "links " << (links ? links : "18") << ", GPUs "
            << (gpus ? gpus : "8");
    EXPECT_EQ(expected, span_nvml_get_zcopy() != 0);
    EXPECT_EQ(1, asked()) << "NVML asked again after it answered";
}

/* NVML that never answers (ctest nvml_give_up): each failed probe costs an
 * iface open 10 tries, so the third is kept */
TEST_F(span_nvml_process, a_third_failed_probe_is_kept)
{
    for (int probe = 1; probe <= 3; ++probe) {
        EXPECT_EQ(0u, span_nvml_nvlinks());
        EXPECT_EQ(10 * probe, asked()) << "probe " << probe;
    }
    EXPECT_EQ(0u, span_nvml_nvlinks());
    EXPECT_EQ(30, asked()) << "NVML asked again after three failed probes";
}

/* A child forked while another thread probes (and holds the probe's lock
 * for its 10 tries) must find the lock free: fork waits for the probe */
TEST_F(span_nvml_process, a_child_forked_during_a_probe_probes)
{
    std::atomic<unsigned> parent_links{~0u};
    std::atomic<bool> forked{false};
    /* alive until the fork is done: a child that inherits a thread that
     * ended unjoined reports it as a leak under TSan */
    std::thread prober([&] {
        parent_links = span_nvml_nvlinks();
        while (!forked) {
            usleep(100);
        }
    });

    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while ((asked() == 0) && (std::chrono::steady_clock::now() < end)) {
        usleep(100);
    }
    int at_fork = asked();
    pid_t pid   = ((at_fork > 0) && (at_fork < 10)) ? test_fork([] {
        TEST_CHILD_CHECK(span_nvml_nvlinks() == 18);
        return 0;
    }) : -1;
    forked = true;
    prober.join();
    ASSERT_GT(at_fork, 0) << "the probe did not start";
    ASSERT_LT(at_fork, 10) << "the probe ended before the fork";
    EXPECT_EQ(0, test_fork_wait(pid, 5)) << "the child hung or failed";
    EXPECT_EQ(0u, parent_links) << "10 failed asks in the parent's probe";
}
