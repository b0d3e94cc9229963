/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The inner transport's configuration through its twin (issue 38 D): a
 * field of the inner MD set on the twin MD's configuration
 * (uct_config_modify, as UCX's tests do with "POSIX_DIR") or in the
 * environment reaches the inner MD, and the inner iface's UCX_<TL>_* fields
 * reach the twin iface as they reach the native one.
 */
#include "test_uct.h"

#include <stdlib.h>

namespace {

/* The rkey_packed_size of MD name of component, opened after setting
 * fields on its configuration (each status of that in *modified). posix
 * packs its directory, where not /dev/shm and it does not name files by
 * /proc links, in its key: the size tells which directory the MD uses. */
size_t packed_size(const char *component, const char *name,
                   const md_options_t &fields = {},
                   std::vector<ucs_status_t> *modified = nullptr)
{
    uct_component_h comp = find_component(component);
    uct_md_config_t *config;
    uct_md_h md = NULL;
    uct_md_attr_t attr = {};

    EXPECT_NE(nullptr, comp) << component;
    if ((comp == nullptr) ||
        (uct_md_config_read(comp, NULL, NULL, &config) != UCS_OK)) {
        ADD_FAILURE() << "no configuration of " << component;
        return 0;
    }
    for (auto &f : fields) {
        modified->push_back(config_modify(config, f.first, f.second));
    }
    EXPECT_EQ(UCS_OK, uct_md_open(comp, name, config, &md)) << name;
    uct_config_release(config);
    if (md != NULL) {
        EXPECT_EQ(UCS_OK, uct_md_query(md, &attr));
        uct_md_close(md);
    }
    return attr.rkey_packed_size;
}

struct temp_dir {
    temp_dir() { EXPECT_NE(nullptr, mkdtemp(path)); }
    ~temp_dir() { rmdir(path); }
    char path[40] = "/tmp/span-config-XXXXXX";
};

} // namespace

TEST(span_uct_config, an_inner_md_field_is_set_on_the_twin_configuration)
{
    temp_dir dir;
    md_options_t fields = {{"POSIX_USE_PROC_LINK", "n"},
                           {"POSIX_DIR", dir.path}};
    std::vector<ucs_status_t> native_status, twin_status;
    size_t native0 = packed_size("posix", "posix");
    size_t twin0   = packed_size("span", "posix+");
    size_t native  = packed_size("posix", "posix", fields, &native_status);
    size_t twin    = packed_size("span", "posix+", fields, &twin_status);

    EXPECT_EQ(std::vector<ucs_status_t>(2, UCS_OK), native_status);
    EXPECT_EQ(std::vector<ucs_status_t>(2, UCS_OK), twin_status)
            << "posix's MD fields are not fields of posix+";
    EXPECT_EQ(native0 + strlen(dir.path) + 1, native)
            << "native posix did not use " << dir.path;
    EXPECT_EQ(native - native0, twin - twin0)
            << "the inner posix MD did not use " << dir.path;

    /* a field no component has is still refused */
    uct_md_config_t *config;
    ASSERT_EQ(UCS_OK, uct_md_config_read(find_component("span"), NULL, NULL,
                                         &config));
    EXPECT_EQ(UCS_ERR_NO_ELEM,
              uct_config_modify(config, "POSIX_NO_SUCH_FIELD", "1"));
    uct_config_release(config);
}

TEST(span_uct_config, an_inner_md_field_in_the_environment_reaches_the_twin)
{
    temp_dir dir;
    size_t native0 = packed_size("posix", "posix");
    size_t twin0   = packed_size("span", "posix+");
    setenv("UCX_POSIX_USE_PROC_LINK", "n", 1);
    setenv("UCX_POSIX_DIR", dir.path, 1);
    size_t native  = packed_size("posix", "posix");
    size_t twin    = packed_size("span", "posix+");
    unsetenv("UCX_POSIX_DIR");
    unsetenv("UCX_POSIX_USE_PROC_LINK");
    EXPECT_EQ(native0 + strlen(dir.path) + 1, native);
    EXPECT_EQ(native - native0, twin - twin0)
            << "the inner posix MD did not use " << dir.path;
}

/* The twin's iface configuration is the inner transport's table: a field
 * set there, or in the environment, changes the twin iface as the native */
TEST(span_uct_config, inner_iface_fields_reach_the_twin_iface)
{
    auto max_bcopy = [](const char *component, const char *tl,
                        const char *seg_size) {
        uct_md_h md = open_md(find_component(component), tl);
        EXPECT_NE(nullptr, md) << tl;
        ucs_async_context_t *async;
        uct_worker_h worker;
        open_worker(&async, &worker);
        uct_iface_config_t *config;
        EXPECT_EQ(UCS_OK, uct_md_iface_config_read(md, tl, NULL, NULL,
                                                   &config));
        if (seg_size != nullptr) {
            /* UCX 1.16 names it by the mm sub-table's own prefix */
            ucs_status_t status = config_modify(config, "POSIX_SEG_SIZE",
                                                seg_size);
            if (status == UCS_ERR_NO_ELEM) {
                status = uct_config_modify(config, "MM_SEG_SIZE", seg_size);
            }
            EXPECT_EQ(UCS_OK, status);
        }
        uct_iface_h iface;
        EXPECT_EQ(UCS_OK, open_iface(md, worker, tl, "memory", config,
                                     &iface));
        uct_iface_attr_t attr;
        EXPECT_EQ(UCS_OK, uct_iface_query(iface, &attr));
        uct_iface_close(iface);
        uct_config_release(config);
        uct_worker_destroy(worker);
        ucs_async_context_destroy(async);
        uct_md_close(md);
        return attr.cap.am.max_bcopy;
    };

    size_t dflt = max_bcopy("posix", "posix", nullptr);
    size_t set  = max_bcopy("posix", "posix", "4k");
    EXPECT_NE(dflt, set);
    EXPECT_EQ(dflt, max_bcopy("span", "posix+", nullptr));
    EXPECT_EQ(set, max_bcopy("span", "posix+", "4k"));

    setenv("UCX_POSIX_SEG_SIZE", "4k", 1);
    EXPECT_EQ(set, max_bcopy("posix", "posix", nullptr));
    EXPECT_EQ(set, max_bcopy("span", "posix+", nullptr));
    unsetenv("UCX_POSIX_SEG_SIZE");
}

/* An inner MD whose keys are larger than a span rkey holds inline (UCX
 * 1.18's cuda_ipc packs 200 bytes) gets a twin where its keys can spill
 * (within the node), and bytes move through the spilled key, every byte of
 * it read back (strict checks its padding); where keys cannot spill
 * (UCX_SPAN_SPILL=n) there is no twin */
TEST(span_uct_config, an_inner_key_too_large_to_hold_inline_spills)
{
    setenv("UCX_STRICT_RKEY_SIZE", "200", 1);
    {
        twin_side side("strict+");
        ASSERT_NE(nullptr, side.md);
        uct_md_attr_t attr;
        ASSERT_EQ(UCS_OK, uct_md_query(side.md, &attr));
        EXPECT_EQ(255u, attr.rkey_packed_size);
        const uint64_t src[2] = {0x1122334455667788ull,
                                 0x99aabbccddeeff00ull};
        side.put_zcopy(src, 1);
        side.put_zcopy(src, 2);
    }
    setenv("UCX_SPAN_SPILL", "n", 1);
    EXPECT_EQ(nullptr, open_md(find_component("span"), "strict+"));
    unsetenv("UCX_SPAN_SPILL");
    unsetenv("UCX_STRICT_RKEY_SIZE");
}

/* A batch holds at most the pieces of the largest copy kernel: a count
 * past it (what "-1" or "inf" parse to) or a byte bound of 0 fails the
 * MD's open with a line that names the variable, where it once made every
 * op posted while copies were queued fail for a descriptor of 515 GB */
TEST(span_uct_config, copy_batch_bounds_fail_the_open_with_a_clear_line)
{
    const std::vector<std::pair<std::string, std::string>> bad = {
            {"SPAN_COPY_BATCH", "-1"}, {"SPAN_COPY_BATCH", "inf"},
            {"SPAN_COPY_BATCH", "-5"}, {"SPAN_COPY_BATCH", "1025"},
            {"SPAN_COPY_BATCH_SIZE", "0"}, {"SPAN_COPY_BURST_GAP", "2s"},
            {"SPAN_COPY_BURST_GAP", "-1us"}};
    uct_component_h comp = find_component("span");

    ASSERT_NE(nullptr, comp);
    for (const auto &field : bad) {
        uct_md_config_t *config;
        uct_md_h md = NULL;

        ASSERT_EQ(UCS_OK, uct_md_config_read(comp, NULL, NULL, &config));
        ucs_status_t modified = config_modify(config, field.first,
                                              field.second);
        if (modified == UCS_OK) {
            log_counter log;
            EXPECT_EQ(UCS_ERR_INVALID_PARAM,
                      uct_md_open(comp, "posix+", config, &md))
                    << field.first << "=" << field.second;
            EXPECT_EQ(1u, log_counter::count("UCX_" + field.first))
                    << field.first << "=" << field.second;
        } else {
            /* refused by UCX's parser: as clear */
            EXPECT_EQ(UCS_ERR_INVALID_PARAM, modified) << field.second;
        }
        if (md != NULL) {
            uct_md_close(md);
        }
        uct_config_release(config);
    }
    uct_md_h md = open_md(comp, "posix+", {{"SPAN_COPY_BATCH", "1024"},
                                           {"SPAN_COPY_BATCH_SIZE", "1"},
                                           {"SPAN_COPY_BURST_GAP", "1s"}});
    EXPECT_NE(nullptr, md) << "the largest batch and the smallest bound";
    if (md != NULL) {
        uct_md_close(md);
    }
}
