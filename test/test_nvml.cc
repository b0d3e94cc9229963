/*
 * The NVLink probe of cuda_ipc+ (span_nvml.c) against a scripted NVML: what
 * it counts, and that NVML calls which fail for a while are tried again,
 * within a bound, rather than taken for "no NVLink" (what cuda_ipc's own
 * probe does, and why get zero-copy came and went).
 */
extern "C" {
#include "resolvers/span_nvml.h"
}

#include <gtest/gtest.h>
#include <chrono>

namespace {

/* The scripted NVML: links in all, how many of them are active, and how
 * many calls fail (NVML_ERROR_UNKNOWN) before they answer */
struct fake_nvml {
    unsigned links, active, failures, calls;
    bool     wrong_type;
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
    values->nvml_return = 0;
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

const span_nvml_ops_t ops = {fake_init, fake_device, fake_fields, fake_state,
                             fake_error};

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
