/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Twin transports: discovery, one uct_tl_t per inner transport, and their
 * iface_open, which opens the inner iface and makes it a twin
 * (span_iface.c).
 */
#include "span_tl.h"
#include "iface/span_iface.h"
#include "md/span_md.h"

#include <ucs/sys/string.h>
#include <stdlib.h>
#include <string.h>

typedef struct span_tl {
    uct_tl_t         super;
    uct_tl_t        *inner;
    uct_component_t *inner_component;
} span_tl_t;

/*
 * uct_md_query_tl_resources() calls each transport's query_devices with the
 * MD alone, and asks every twin of the span component: a twin learns which
 * one it is from its own function, one per slot of span_tls[].
 */
#define SPAN_TL_MAX 32

static span_tl_t *span_tls[SPAN_TL_MAX];
static unsigned   span_tl_count;

static ucs_status_t span_tl_query_devices(unsigned index, uct_md_h md,
                                          uct_tl_device_resource_t **devices_p,
                                          unsigned *num_devices_p)
{
    span_md_t *smd = (span_md_t*)md;
    span_tl_t *tl  = span_tls[index];

    if (tl->inner_component != smd->inner_component) {
        *devices_p     = NULL;
        *num_devices_p = 0;
        return UCS_OK;
    }

    return tl->inner->query_devices(smd->inner, devices_p, num_devices_p);
}

#define SPAN_TL_QUERY_DEVICES(_row, _col) \
    static ucs_status_t span_tl_query_devices_##_row##_##_col( \
            uct_md_h md, uct_tl_device_resource_t **devices_p, \
            unsigned *num_devices_p) \
    { \
        return span_tl_query_devices((_row) * 8 + (_col), md, devices_p, \
                                     num_devices_p); \
    }

#define SPAN_TL_QUERY_DEVICES_ROW(_row) \
    SPAN_TL_QUERY_DEVICES(_row, 0) SPAN_TL_QUERY_DEVICES(_row, 1) \
    SPAN_TL_QUERY_DEVICES(_row, 2) SPAN_TL_QUERY_DEVICES(_row, 3) \
    SPAN_TL_QUERY_DEVICES(_row, 4) SPAN_TL_QUERY_DEVICES(_row, 5) \
    SPAN_TL_QUERY_DEVICES(_row, 6) SPAN_TL_QUERY_DEVICES(_row, 7)

SPAN_TL_QUERY_DEVICES_ROW(0)
SPAN_TL_QUERY_DEVICES_ROW(1)
SPAN_TL_QUERY_DEVICES_ROW(2)
SPAN_TL_QUERY_DEVICES_ROW(3)

#define SPAN_TL_QUERY_DEVICES_REF_ROW(_row) \
    span_tl_query_devices_##_row##_0, span_tl_query_devices_##_row##_1, \
    span_tl_query_devices_##_row##_2, span_tl_query_devices_##_row##_3, \
    span_tl_query_devices_##_row##_4, span_tl_query_devices_##_row##_5, \
    span_tl_query_devices_##_row##_6, span_tl_query_devices_##_row##_7

static ucs_status_t (*const span_tl_query_devices_fns[SPAN_TL_MAX])(
        uct_md_h, uct_tl_device_resource_t**, unsigned*) = {
    SPAN_TL_QUERY_DEVICES_REF_ROW(0), SPAN_TL_QUERY_DEVICES_REF_ROW(1),
    SPAN_TL_QUERY_DEVICES_REF_ROW(2), SPAN_TL_QUERY_DEVICES_REF_ROW(3)
};

static span_tl_t *span_tl_find(const char *name)
{
    unsigned i, count = __atomic_load_n(&span_tl_count, __ATOMIC_ACQUIRE);

    for (i = 0; i < count; ++i) {
        if (!strcmp(span_tls[i]->super.name, name)) {
            return span_tls[i];
        }
    }
    return NULL;
}

/* The twin of inner_tl, where it was added */
static span_tl_t *span_tl_find_inner(const uct_tl_t *inner_tl)
{
    unsigned i;

    for (i = 0; i < span_tl_count; ++i) {
        if (span_tls[i]->inner == inner_tl) {
            return span_tls[i];
        }
    }
    return NULL;
}

static ucs_status_t span_tl_iface_open(uct_md_h md, uct_worker_h worker,
                                       const uct_iface_params_t *params,
                                       const uct_iface_config_t *config,
                                       uct_iface_h *iface_p)
{
    span_md_t *smd = (span_md_t*)md;
    uct_iface_params_t inner_params;
    uct_iface_h iface;
    ucs_status_t status;
    span_tl_t *tl;

    if (!(params->open_mode & UCT_IFACE_OPEN_MODE_DEVICE)) {
        ucs_error("span tl: twin transports open in device mode only, not 0x%"
                  PRIx64, params->open_mode);
        return UCS_ERR_UNSUPPORTED;
    }

    tl = span_tl_find(params->mode.device.tl_name);
    if ((tl == NULL) || (tl->inner_component != smd->inner_component)) {
        ucs_error("span md %p: has no twin transport '%s'", md,
                  params->mode.device.tl_name);
        return UCS_ERR_NO_DEVICE;
    }

    inner_params                     = *params;
    inner_params.mode.device.tl_name = tl->inner->name;
    status = tl->inner->iface_open(smd->inner, worker, &inner_params, config,
                                   &iface);
    if (status != UCS_OK) {
        return status;
    }

    if (!span_ucx_iface_check(iface, smd->inner, worker)) {
        status = UCS_ERR_UNSUPPORTED;
        goto err_close;
    }

    status = span_iface_attach(iface, smd, worker, tl->inner->name);
    if (status != UCS_OK) {
        goto err_close;
    }

    ucs_debug("span iface %p: opened %s/%s over %s", iface, tl->super.name,
              params->mode.device.dev_name, tl->inner->name);
    *iface_p = iface;
    return UCS_OK;

err_close:
    iface->ops.iface_close(iface);
    return status;
}

ucs_status_t span_tl_add(uct_component_t *span,
                         uct_component_t *inner_component, uct_tl_t *inner_tl)
{
    span_tl_t *tl;

    if (span_tl_find_inner(inner_tl) != NULL) {
        return UCS_OK;
    }

    if (strlen(inner_tl->name) + strlen(SPAN_TWIN_SUFFIX) >=
        UCT_TL_NAME_MAX) {
        ucs_debug("span tl '%s': gets no twin: its name is too long "
                  "for a suffix", inner_tl->name);
        return UCS_ERR_UNSUPPORTED;
    }

    if (span_tl_count == SPAN_TL_MAX) {
        ucs_warn("span tl '%s': gets no twin: %d twins exist already",
                 inner_tl->name, SPAN_TL_MAX);
        return UCS_ERR_EXCEEDS_LIMIT;
    }

    tl = calloc(1, sizeof(*tl));
    if (tl == NULL) {
        ucs_error("span tl '%s': cannot allocate its twin (%zu bytes); it is "
                  "tried again when the span component is next queried",
                  inner_tl->name, sizeof(*tl));
        return UCS_ERR_NO_MEMORY;
    }

    ucs_snprintf_zero(tl->super.name, sizeof(tl->super.name), "%s%s",
                      inner_tl->name, SPAN_TWIN_SUFFIX);
    tl->super.query_devices = span_tl_query_devices_fns[span_tl_count];
    tl->super.iface_open    = span_tl_iface_open;
    /* the inner transport's own UCX_<TL>_* variables configure the twin
     * (an entry of the release's size: its list link follows) */
    memcpy(&tl->super.config, &inner_tl->config, span_ucx->config_entry_size);
    ucs_list_head_init(&tl->super.config.list);
    tl->inner               = inner_tl;
    tl->inner_component     = inner_component;

    /* readers index span_tls below the count they load: the slot first */
    span_tls[span_tl_count] = tl;
    __atomic_store_n(&span_tl_count, span_tl_count + 1, __ATOMIC_RELEASE);
    ucs_list_add_tail(span_ucx_component_tls(span),
                      span_ucx_tl_link(&tl->super));
    return UCS_OK;
}

uct_component_t *span_tl_inner_component(const uct_tl_t *tl)
{
    return ucs_container_of(tl, span_tl_t, super)->inner_component;
}

void span_tl_remove_all(void)
{
    while (span_tl_count > 0) {
        --span_tl_count;
        ucs_list_del(span_ucx_tl_link(&span_tls[span_tl_count]->super));
        free(span_tls[span_tl_count]);
    }
}
