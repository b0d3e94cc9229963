/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The ops table a twin gives its inner MD object (span_md_inner.h): only an
 * object of its own open gets one. UCX's rocm_ipc hands out one static MD
 * object to every open, UCP's own among them: a twin that replaced its ops
 * freed them at its close, and UCP's close of the native MD then called
 * through freed memory (ucp_cleanup crashed in every process that loaded
 * span beside UCX's rocm module, twins selected or not).
 */
#include <gtest/gtest.h>

extern "C" {
#include "md/span_md_inner.h"
}

#include <cstdlib>

/* What span_ucx_select() fills in from the loaded UCX: the size of its
 * uct_md_ops_t, all span_md_inner.c reads */
static span_ucx_layout_t test_layout = [] {
    span_ucx_layout_t layout = {};

    layout.md_ops_size = sizeof(uct_md_ops_t);
    return layout;
}();
const span_ucx_layout_t *span_ucx = &test_layout;

namespace {

uct_md_ops_t test_ops = {};
uct_md_t     static_md = {&test_ops, nullptr};

TEST(md_inner, an_md_object_of_a_library_keeps_its_ops)
{
    const uct_md_ops_t *orig = nullptr;
    span_md_inner_t *wrap    = nullptr;

    EXPECT_EQ(UCS_ERR_UNSUPPORTED,
              span_md_inner_wrap(&static_md, &wrap, &orig));
    EXPECT_EQ(&test_ops, static_md.ops);
    EXPECT_EQ(nullptr, wrap);
}

TEST(md_inner, an_md_object_of_one_open_gets_ops_of_its_own)
{
    uct_md_t *md = (uct_md_t*)calloc(1, sizeof(uct_md_t));
    const uct_md_ops_t *orig = nullptr;
    span_md_inner_t *wrap    = nullptr;

    ASSERT_NE(nullptr, md);
    md->ops = &test_ops;
    ASSERT_EQ(UCS_OK, span_md_inner_wrap(md, &wrap, &orig));
    EXPECT_EQ(&test_ops, orig);
    EXPECT_NE(&test_ops, md->ops);
    span_md_inner_free(wrap);
    free(md);
}

} // namespace
