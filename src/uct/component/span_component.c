/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The span component: discovers the transports of the other components and
 * offers a twin of each MD that has a transport with a twin; its rkey ops
 * are the unpacked rkey's (span_rkey_unpack.c).
 */
#include "span_component.h"
#include "span_tl.h"
#include "span_loader.h"
#include "md/span_md_config.h"
#include "md/span_md_open.h"
#include "key/span_rkey_unpack.h"
#include "base/span_fork.h"
#include "base/span_peer.h"

#include <ucs/sys/string.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct span_global_config {
    ucs_config_allow_list_t transports;
} span_global_config_t;

static ucs_config_field_t span_global_config_table[] = {
    {"TRANSPORTS", "all",
     "Transports that get a twin named <transport>+, selected with UCX_TLS.\n"
     "'all', a comma-separated list of inner transport names (e.g. cma,self),\n"
     "or '^' followed by a list of those that get none. A transport whose\n"
     "name has 9 characters never gets one (UCX caps names at 9).",
     ucs_offsetof(span_global_config_t, transports),
     UCS_CONFIG_TYPE_ALLOW_LIST},

    {NULL}
};

static ucs_config_global_list_entry_t span_global_config_entry = {
    .name   = "Span transports",
    .prefix = "SPAN_",
    .table  = span_global_config_table,
    .size   = sizeof(span_global_config_t),
};

/* Twins are added under the lock until every transport allowed has its
 * own or can have none: a twin lost to a failed allocation is added at a
 * later query, not lost for the process; so is the twin of a component
 * registered later (loaded by the program after UCX's modules) */
static pthread_mutex_t span_twins_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned        span_twins_seen; /* components, where all have twins */

static const span_fork_handlers_t span_twins_fork = {.lock = &span_twins_lock};

static void UCS_F_CTOR span_twins_fork_register(void)
{
    span_fork_register(SPAN_FORK_TWINS, &span_twins_fork);
}

static int span_transport_allowed(const ucs_config_allow_list_t *allow,
                                  const char *name)
{
    int found;

    if (allow->mode == UCS_CONFIG_ALLOW_LIST_ALLOW_ALL) {
        return 1;
    }

    found = ucs_config_names_search(&allow->array, name) >= 0;
    return (allow->mode == UCS_CONFIG_ALLOW_LIST_ALLOW) == found;
}

/* Adds the twins that are not there yet; 1 where none is missing */
static int span_twins_add(void)
{
    span_global_config_t config;
    uct_component_t *component;
    int done = 1;
    uct_tl_t *tl;

    if (span_ucx_config_fill(&config, &span_global_config_entry,
                             UCS_DEFAULT_ENV_PREFIX, 0) != UCS_OK) {
        ucs_error("span component: cannot read UCX_SPAN_TRANSPORTS; no "
                  "twins are offered now");
        return 0;
    }

    span_ucx_components_for_each(component) {
        if (component == &span_component) {
            continue;
        }

        span_ucx_tls_for_each(tl, span_ucx_component_tls(component)) {
            if (span_transport_allowed(&config.transports, tl->name) &&
                (span_tl_add(&span_component, component, tl) ==
                 UCS_ERR_NO_MEMORY)) {
                done = 0;
            }
        }
    }

    ucs_config_parser_release_opts(&config, span_global_config_table);
    return (span_md_config_extend(&span_component) == UCS_OK) && done;
}

/* The components registered now; UCX registers and unregisters them as it
 * loads and unloads modules, under its own lock, rarely */
static unsigned span_twins_components(void)
{
    uct_component_t *component;
    unsigned count = 0;

    span_ucx_components_for_each(component) {
        ++count;
    }
    return count;
}

/* After UCX loaded its modules (the inner components are known), at each
 * query and open until every twin of every component is there */
static void span_twins_init(void)
{
    unsigned count = span_twins_components();

    if (__atomic_load_n(&span_twins_seen, __ATOMIC_ACQUIRE) == count) {
        return;
    }

    pthread_mutex_lock(&span_twins_lock);
    if ((span_twins_seen != count) && span_twins_add()) {
        __atomic_store_n(&span_twins_seen, count, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&span_twins_lock);
}

static int span_component_has_twins(const uct_component_t *inner)
{
    const uct_tl_t *tl;

    span_ucx_tls_for_each(tl, span_ucx_component_tls(&span_component)) {
        if (span_tl_inner_component(tl) == inner) {
            return 1;
        }
    }
    return 0;
}

static ucs_status_t span_md_resources_append(uct_component_t *inner,
                                             uct_md_resource_desc_t **res_p,
                                             unsigned *count_p)
{
    uct_md_resource_desc_t *inner_res, *res;
    unsigned i, inner_count;
    ucs_status_t status;

    status = inner->query_md_resources(inner, &inner_res, &inner_count);
    if (status != UCS_OK) {
        ucs_debug("span component '%s': has no MD resources: %s", inner->name,
                  ucs_status_string(status));
        return UCS_OK;
    }

    res = ucs_realloc(*res_p, sizeof(*res) * (*count_p + inner_count),
                      "span_md_resources");
    if (res == NULL) {
        ucs_error("span component: no memory for %u MD resources",
                  *count_p + inner_count);
        status = UCS_ERR_NO_MEMORY;
        goto out;
    }

    *res_p = res;
    for (i = 0; i < inner_count; ++i) {
        if (strlen(inner_res[i].md_name) + strlen(SPAN_TWIN_SUFFIX) >=
            UCT_MD_NAME_MAX) {
            ucs_debug("span md '%s': gets no twin: its name is too long",
                      inner_res[i].md_name);
            continue;
        }

        ucs_snprintf_zero(res[*count_p].md_name, UCT_MD_NAME_MAX, "%s%s",
                          inner_res[i].md_name, SPAN_TWIN_SUFFIX);
        ++(*count_p);
    }

out:
    ucs_free(inner_res);
    return status;
}

static ucs_status_t
span_query_md_resources(uct_component_t *component,
                        uct_md_resource_desc_t **resources_p,
                        unsigned *num_resources_p)
{
    uct_md_resource_desc_t *resources = NULL;
    unsigned count                    = 0;
    uct_component_t *inner;
    ucs_status_t status;

    span_twins_init();

    span_ucx_components_for_each(inner) {
        if ((inner == &span_component) || !span_component_has_twins(inner)) {
            continue;
        }

        status = span_md_resources_append(inner, &resources, &count);
        if (status != UCS_OK) {
            ucs_free(resources);
            return status;
        }
    }

    *resources_p     = resources;
    *num_resources_p = count;
    return UCS_OK;
}

static ucs_status_t span_component_md_open(uct_component_t *component,
                                           const char *md_name,
                                           const uct_md_config_t *config,
                                           uct_md_h *md_p)
{
    span_twins_init();
    return span_md_open(component, md_name, config, md_p);
}

static ucs_status_t span_cm_open(uct_component_t *component,
                                 uct_worker_h worker,
                                 const uct_cm_config_t *config, uct_cm_h *cm_p)
{
    return UCS_ERR_UNSUPPORTED;
}

static void span_md_vfs_init(uct_md_h md)
{
}

uct_component_t span_component = {
    .name               = "span",
    .query_md_resources = span_query_md_resources,
    .md_open            = span_component_md_open,
    .cm_open            = span_cm_open,
    .rkey_unpack        = span_rkey_unpack,
    .rkey_ptr           = span_rkey_ptr,
    .rkey_release       = span_rkey_release,
    .rkey_compare       = span_rkey_compare,
    .md_config          = {
        .name   = "Span memory domain",
        .prefix = "SPAN_",
        .table  = span_md_config_table,
        .size   = sizeof(span_md_config_t),
    },
    .cm_config          = {
        .name   = "",
        .prefix = "",
        .table  = NULL,
        .size   = 0,
    },
    .tl_list            = UCS_LIST_INITIALIZER(&span_component.tl_list,
                                               &span_component.tl_list),
    .flags              = 0,
    .md_vfs_init        = span_md_vfs_init
};

static int span_component_registered;
static int span_component_fitted;

/* Every component already registered must read as one before span walks
 * them all: a layout span got wrong is found here, not in a crash later */
static ucs_status_t span_components_check(void)
{
    uct_component_t *component;

    span_ucx_components_for_each(component) {
        if (!span_ucx_component_check(component)) {
            ucs_warn("span component %p: UCX %u.%u does not lay it out as "
                     "span reads it; libuct_span does not register",
                     component, span_ucx->major, span_ucx->minor);
            return UCS_ERR_UNSUPPORTED;
        }
    }
    return UCS_OK;
}

/*
 * The structures declared in ucx/span_ucx.h change between UCX minor
 * releases: in a release span has no layout for, or one whose layout does
 * not check out, the component stays unregistered rather than read them
 * wrong. The loader (span_loader.c) calls this once UCX's symbols resolve.
 */
ucs_status_t __attribute__((visibility("protected")))
span_impl_global_init(void)
{
    const uct_component_t *component;

    if (span_component_registered) {
        return UCS_OK;
    }
    /* the layout first: the list of components is walked by it */
    if (span_ucx_select() != UCS_OK) {
        return UCS_ERR_UNSUPPORTED;
    }
    /* another copy of span, installed elsewhere, came first */
    span_ucx_components_for_each(component) {
        if (!strcmp(component->name, span_component.name)) {
            ucs_debug("span component: a component '%s' is registered "
                      "already (%p); this copy does not register",
                      component->name, component);
            return UCS_ERR_ALREADY_EXISTS;
        }
    }
    if (span_components_check() != UCS_OK) {
        return UCS_ERR_UNSUPPORTED;
    }

    span_peer_init();
    if (!span_component_fitted) {
        if (span_ucx->calls_1_18) {
            span_component.rkey_unpack = (void*)span_rkey_unpack_1_18;
        }
        /* once: from here on it is laid out as the release reads it */
        span_ucx_component_fit(&span_component);
        span_component_fitted = 1;
    }
    if (span_md_config_extend(&span_component) != UCS_OK) {
        return UCS_ERR_NO_MEMORY;
    }
    uct_component_register(&span_component);
    span_ucx_config_fit(span_global_config_table); /* once: registered */
    ucs_list_add_tail(&ucs_config_global_list, &span_global_config_entry.list);
    span_component_registered = 1;
    return UCS_OK;
}

static void UCS_F_DTOR span_component_cleanup(void)
{
    if (!span_component_registered) {
        return;
    }

    span_tl_remove_all();
    span_md_config_cleanup(&span_component);
    ucs_list_del(&span_global_config_entry.list);
    uct_component_unregister(&span_component);
    ucs_list_del(span_ucx_component_link(&span_component));
}
