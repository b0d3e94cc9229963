/* SPDX-License-Identifier: BSD-3-Clause */
/* What the UCT-level tests (test_uct*.cc, vm/test_verbs_vm.cc) open alike:
 * components, MDs, device ifaces and an ep of an iface to itself */
#ifndef SPAN_TEST_UCT_UTIL_H_
#define SPAN_TEST_UCT_UTIL_H_

#include "tools/harness/span_md_open.h"

#include <uct/api/uct.h>

#include <gtest/gtest.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

inline uct_component_h find_component(const char *name)
{
    return span_component_by_name(name);
}

/* uct_worker_progress whatever UCX runs: the inline of the build's headers
 * reads the worker's callback queue (its first member) as 1.16 and later
 * lay it out; 1.15 and earlier give each callback 24 bytes ({cb, arg,
 * flags, id}), the fast ones first, up to a NULL cb, and lack
 * ucs_callbackq_add_oneshot, which came with that change */
inline unsigned test_worker_progress(uct_worker_h worker)
{
    struct callbackq_1_15_elem {
        ucs_callback_t cb;
        void           *arg;
        unsigned       flags;
        int            id;
    };
    static const bool before_1_16 =
            dlsym(RTLD_DEFAULT, "ucs_callbackq_add_oneshot") == nullptr;
    const callbackq_1_15_elem *elem;
    unsigned count = 0;

    if (!before_1_16) {
        return uct_worker_progress(worker);
    }
    for (elem = (const callbackq_1_15_elem*)worker; elem->cb != nullptr;
         ++elem) {
        count += elem->cb(elem->arg);
    }
    return count;
}

typedef std::vector<std::pair<std::string, std::string>> md_options_t;

/* uct_config_modify of a field named with its table's prefix ("SPAN_",
 * "POSIX_"), as UCX 1.17 and later name it; UCX 1.16 names a table's own
 * fields without it, and takes the name so where the prefixed one is no
 * field */
inline ucs_status_t config_modify(void *config, const std::string &name,
                                  const std::string &value)
{
    ucs_status_t status = uct_config_modify(config, name.c_str(),
                                            value.c_str());
    size_t prefix       = name.find('_');

    if ((status == UCS_ERR_NO_ELEM) && (prefix != std::string::npos)) {
        status = uct_config_modify(config, name.substr(prefix + 1).c_str(),
                                   value.c_str());
    }
    return status;
}

/* NULL where the MD does not open */
inline uct_md_h open_md(uct_component_h component, const std::string &name,
                        const md_options_t &options = {})
{
    uct_md_config_t *config;
    uct_md_h md = NULL;

    /* a component that is not loaded (strict, where its module failed) */
    if ((component == NULL) ||
        (uct_md_config_read(component, NULL, NULL, &config) != UCS_OK)) {
        return NULL;
    }
    for (auto &o : options) {
        EXPECT_EQ(UCS_OK, config_modify(config, o.first, o.second))
                << o.first;
    }
    if (uct_md_open(component, name.c_str(), config, &md) != UCS_OK) {
        md = NULL;
    }
    uct_config_release(config);
    return md;
}

/* The iface of transport tl on device dev, with config (read from md for tl
 * where NULL) */
inline ucs_status_t open_iface(uct_md_h md, uct_worker_h worker,
                               const char *tl, const char *dev,
                               uct_iface_config_t *config,
                               uct_iface_h *iface_p)
{
    uct_iface_config_t *own = NULL;
    uct_iface_params_t params   = {};
    ucs_status_t status;

    if (config == NULL) {
        status = uct_md_iface_config_read(md, tl, NULL, NULL, &own);
        if (status != UCS_OK) {
            return status;
        }
    }
    params.field_mask           = UCT_IFACE_PARAM_FIELD_OPEN_MODE |
                                  UCT_IFACE_PARAM_FIELD_DEVICE;
    params.open_mode            = UCT_IFACE_OPEN_MODE_DEVICE;
    params.mode.device.tl_name  = tl;
    params.mode.device.dev_name = dev;
    status = uct_iface_open(md, worker, &params, own ? own : config, iface_p);
    if (own != NULL) {
        uct_config_release(own);
    }
    return status;
}

/* An ep of iface to its own iface address */
inline ucs_status_t connect_to_self(uct_iface_h iface, uct_ep_h *ep_p)
{
    uct_iface_attr_t attr;
    ucs_status_t status = uct_iface_query(iface, &attr);

    if (status != UCS_OK) {
        return status;
    }
    std::vector<char> dev(attr.device_addr_len + 1);
    std::vector<char> ifa(attr.iface_addr_len + 1);
    status = uct_iface_get_device_address(iface,
                                          (uct_device_addr_t*)dev.data());
    if (status == UCS_OK) {
        status = uct_iface_get_address(iface, (uct_iface_addr_t*)ifa.data());
    }
    if (status != UCS_OK) {
        return status;
    }
    uct_ep_params_t params = {};
    params.field_mask      = UCT_EP_PARAM_FIELD_IFACE |
                             UCT_EP_PARAM_FIELD_DEV_ADDR |
                             UCT_EP_PARAM_FIELD_IFACE_ADDR;
    params.iface           = iface;
    params.dev_addr        = (uct_device_addr_t*)dev.data();
    params.iface_addr      = (uct_iface_addr_t*)ifa.data();
    return uct_ep_create(&params, ep_p);
}

/* A worker of its own thread-safe async context, as every fixture opens
 * one; a test failure where either does not open */
inline void open_worker(ucs_async_context_t **async_p, uct_worker_h *worker_p)
{
    ASSERT_EQ(UCS_OK, ucs_async_context_create(UCS_ASYNC_MODE_THREAD_SPINLOCK,
                                               async_p));
    ASSERT_EQ(UCS_OK, uct_worker_create(*async_p, UCS_THREAD_MODE_SINGLE,
                                        worker_p));
}

/* span's component and its twin MD of name; a test failure where either
 * does not open */
inline void open_twin_md(const char *name, uct_component_h *component_p,
                         uct_md_h *md_p)
{
    *component_p = find_component("span");
    ASSERT_NE(nullptr, *component_p);
    *md_p = open_md(*component_p, name);
    ASSERT_NE(nullptr, *md_p) << name;
}

/* The strict test transport, a UCX module: UCX 1.21 and older load no
 * module by name from UCX_MODULE_DIR, so the tests load it and call its
 * init as UCX 1.22 would (span, preloaded, makes its twin at the next
 * query). Nothing where UCX loaded it or it is not there. */
inline void strict_load_where_ucx_does_not()
{
    const char *dir = getenv("UCX_MODULE_DIR");
    if ((dir == nullptr) || (find_component("strict") != nullptr)) {
        return;
    }
    std::string path = std::string(dir) + "/libuct_strict.so.0";
    void *dl         = dlopen(path.c_str(), RTLD_NOW | RTLD_NODELETE);
    auto init        = dl ? (ucs_status_t (*)())dlsym(dl,
                                                      "ucs_module_global_init") :
                            nullptr;
    if (init != nullptr) {
        EXPECT_EQ(UCS_OK, init()) << path;
    }
}


/* Runs strict_load_where_ucx_does_not() before a program's tests */
struct strict_loader : ::testing::Environment {
    void SetUp() override { strict_load_where_ucx_does_not(); }
};

#endif
