/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A libuct_span.so without a layout for the UCX it is loaded into must not
 * register: ctest runs this program with UCX_MODULE_DIR pointing at a
 * module built knowing only a UCX 1.99.
 */
#include <ucp/api/ucp.h>
#include <uct/api/uct.h>
#include <ucs/debug/log_def.h>

#include <gtest/gtest.h>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

std::vector<std::string> warnings;

ucs_log_func_rc_t capture(const char *file, unsigned line,
                          const char *function, ucs_log_level_t level,
                          const ucs_log_component_config_t *comp_conf,
                          const char *message, va_list ap)
{
    char buf[1024];

    if (level <= UCS_LOG_LEVEL_WARN) {
        vsnprintf(buf, sizeof(buf), message, ap);
        warnings.push_back(buf);
    }
    return UCS_LOG_FUNC_RC_CONTINUE;
}

} // namespace

TEST(span_version, mismatched_build_does_not_register)
{
    uct_component_h *components;
    unsigned count;

    ucs_log_push_handler(capture);
    unsigned major, minor, release;
    /* the version comes from the process's libucp, as in a UCP user */
    ucp_get_version(&major, &minor, &release);
    /* The first query loads the modules of UCX_MODULE_DIR */
    ASSERT_EQ(UCS_OK, uct_query_components(&components, &count));
    ucs_log_pop_handler();

    bool found_self = false;
    for (unsigned i = 0; i < count; ++i) {
        uct_component_attr_t attr;
        attr.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME;
        ASSERT_EQ(UCS_OK, uct_component_query(components[i], &attr));
        EXPECT_STRNE("span", attr.name);
        found_self |= !strcmp(attr.name, "self");
    }
    uct_release_component_list(components);
    EXPECT_TRUE(found_self) << "UCX itself must keep working";

    std::string loaded = std::to_string(major) + "." + std::to_string(minor);
    int naming_both = 0;
    for (auto &w : warnings) {
        naming_both += (w.find("1.99") != std::string::npos) &&
                       (w.find(loaded) != std::string::npos);
    }
    EXPECT_EQ(1, naming_both) << "expected one warning naming UCX 1.99 and "
                              << loaded << ", got " << warnings.size()
                              << " lines";
}
