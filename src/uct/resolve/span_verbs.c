/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Verbs resolver.
 */
#ifdef HAVE_CONFIG_H
#  include "config.h"
#endif

#include "span_verbs.h"
#include "ucx/span_dl_loaded.h"

#include <ucs/debug/log_def.h>
#include <ucs/sys/math.h>
#include <inttypes.h>
#include <string.h>

/* The device's own context answers; the ib MD's context is UCX's and not
 * reachable from a plugin */
static ucs_status_t span_verbs_device_query(const span_verbs_ops_t *ops,
                                            struct ibv_device *device,
                                            const char *dev_name,
                                            uint64_t *max_mr_size_p)
{
    struct ibv_context *ctx;
    int ret;

    ctx = ops->open_device(device);
    if (ctx == NULL) {
        ucs_diag("span verbs: cannot open device %s to read its max_mr_size",
                 dev_name);
        return UCS_ERR_IO_ERROR;
    }
    ret = ops->max_mr_size(ctx, max_mr_size_p);
    ops->close_device(ctx);
    if (ret != 0) {
        ucs_diag("span verbs: ibv_query_device(%s) failed: %s", dev_name,
                 strerror(ret));
        return UCS_ERR_IO_ERROR;
    }
    return UCS_OK;
}

ucs_status_t span_verbs_max_mr_size(const span_verbs_ops_t *ops,
                                    const char *dev_name,
                                    uint64_t *max_mr_size_p)
{
    ucs_status_t status = UCS_ERR_NO_DEVICE;
    struct ibv_device **list;
    const char *name;
    int i, num = 0;

    list = ops->get_device_list(&num);
    if (list == NULL) {
        ucs_debug("span verbs: no device list (%d devices)", num);
        return UCS_ERR_NO_DEVICE;
    }
    for (i = 0; i < num; ++i) {
        name = ops->get_device_name(list[i]);
        if ((name != NULL) && !strcmp(name, dev_name)) {
            status = span_verbs_device_query(ops, list[i], dev_name,
                                             max_mr_size_p);
            break;
        }
    }
    ops->free_device_list(list);
    return status;
}

uint64_t span_verbs_md_max_reg(const span_verbs_ops_t *ops,
                               const char *md_name, uint64_t max_reg)
{
    uint64_t max_mr_size;

    if ((ops == NULL) ||
        (span_verbs_max_mr_size(ops, md_name, &max_mr_size) != UCS_OK)) {
        ucs_debug("span verbs: md '%s': no device max_mr_size, max_reg %"
                  PRIu64 " stands", md_name, max_reg);
        return max_reg;
    }
    ucs_diag("span verbs: md '%s': device max_mr_size %" PRIu64 ", md "
             "max_reg %" PRIu64 ": chunk limit %" PRIu64 ", or "
             "UCX_SPAN_MAX_CHUNK where smaller", md_name, max_mr_size,
             max_reg, ucs_min(max_reg, max_mr_size));
    return ucs_min(max_reg, max_mr_size);
}

#if HAVE_INFINIBAND_VERBS_H
#include <infiniband/verbs.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <pthread.h>

static typeof(ibv_query_device) *span_verbs_query_device;
static span_verbs_ops_t         span_verbs_library_ops;
static pthread_once_t           span_verbs_once = PTHREAD_ONCE_INIT;
static int                      span_verbs_loaded;

static int span_verbs_query_max_mr_size(struct ibv_context *context,
                                        uint64_t *max_mr_size_p)
{
    struct ibv_device_attr attr;
    int ret;

    ret = span_verbs_query_device(context, &attr);
    if (ret == 0) {
        *max_mr_size_p = attr.max_mr_size;
    }
    return ret;
}

/* The libibverbs the process loaded, by path, opened after the iteration
 * that lists the loaded objects (span_dl_loaded.h); NULL where none */
static void *span_verbs_find_loaded(void)
{
    char **names = span_dl_loaded(), **name;
    const char *base;
    void *lib = NULL;

    if (names == NULL) {
        return NULL;
    }
    for (name = names; (*name != NULL) && (lib == NULL); ++name) {
        base = strrchr(*name, '/');
        base = (base != NULL) ? base + 1 : *name;
        if (strncmp(base, "libibverbs", 10)) {
            continue;
        }
        lib = dlopen(*name, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
        if (lib != NULL) {
            ucs_debug("span verbs: using %s, loaded by the process", *name);
        }
    }
    free(names);
    return lib;
}

/* The libibverbs the ib module already runs on (a wheel's is renamed, as
 * NIXL's libibverbs-<hash>.so), else the system's. The exported functions,
 * not verbs.h's inline wrapper of ibv_get_device_list. */
static void span_verbs_load(void)
{
    span_verbs_ops_t *ops = &span_verbs_library_ops;
    void *lib             = span_verbs_find_loaded();

    if (lib == NULL) {
        lib = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    }
    if (lib == NULL) {
        ucs_debug("span verbs: resolver off: %s", dlerror());
        return;
    }
    ops->get_device_list    = dlsym(lib, "ibv_get_device_list");
    ops->free_device_list   = dlsym(lib, "ibv_free_device_list");
    ops->get_device_name    = dlsym(lib, "ibv_get_device_name");
    ops->open_device        = dlsym(lib, "ibv_open_device");
    ops->close_device       = dlsym(lib, "ibv_close_device");
    ops->max_mr_size        = span_verbs_query_max_mr_size;
    span_verbs_query_device = dlsym(lib, "ibv_query_device");
    span_verbs_loaded = ops->get_device_list && ops->free_device_list &&
                        ops->get_device_name && ops->open_device &&
                        ops->close_device && span_verbs_query_device;
    if (!span_verbs_loaded) {
        ucs_warn("span verbs: libibverbs.so.1 lacks a call span needs: the "
                 "ib MDs' own max_reg stands");
        dlclose(lib);
    }
}

const span_verbs_ops_t *span_verbs_library(void)
{
    pthread_once(&span_verbs_once, span_verbs_load);
    return span_verbs_loaded ? &span_verbs_library_ops : NULL;
}
#else
const span_verbs_ops_t *span_verbs_library(void)
{
    return NULL; /* built without infiniband/verbs.h */
}
#endif
