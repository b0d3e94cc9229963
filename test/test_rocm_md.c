/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A twin MD of rocm_ipc on the emulated runtime (test_rocm_md.h): the
 * fields span_md_open would set, and the registration span_md_mem_reg
 * makes of VMM units rocm_ipc cannot share.
 */
#include "test_rocm_md.h"

#include "md/span_md_pack.h"
#include "resolve/span_rocm.h"
#include "vendor/span_vendor.h"

#include <stdlib.h>
#include <string.h>

struct test_rocm_md {
    span_md_t   md;
    span_memh_t *memh;
};

static uct_component_t test_rocm_component = {
    .name = SPAN_ROCM_IPC_COMPONENT
};

/* The UCX layout span_ucx.c selects at load, which this test does not
 * load: the calls of 1.19 and later (the build's UCX) */
static const span_ucx_layout_t test_rocm_ucx_layout = {.major = 1,
                                                       .minor = 22};
const span_ucx_layout_t *span_ucx = &test_rocm_ucx_layout;

/* No handle of the inner MD's own here (span_md_inner.c needs UCX's
 * internals, which this test does not load) */
ucs_status_t span_md_inner_find(span_md_inner_t *wrap, uct_mem_h memh,
                                uint64_t *base_p, uint64_t *length_p)
{
    return UCS_ERR_NO_ELEM;
}

ucs_status_t test_rocm_md_pack(void *address, size_t length, void *rkey_buf,
                               test_rocm_md_t **md_p)
{
    uct_md_mkey_pack_params_t params = {.field_mask = 0};
    test_rocm_md_t *t = calloc(1, sizeof(*t));
    span_md_t *smd    = &t->md;
    span_device_extent_t ext;
    ucs_status_t status;

    smd->inner_component  = &test_rocm_component;
    smd->inner_id         = span_rkey_component_id(SPAN_ROCM_IPC_COMPONENT);
    smd->rkey_packed_size = SPAN_RKEY_MAX_SIZE;
    smd->device             = span_vendor_driver(UCS_MEMORY_TYPE_ROCM);
    smd->dev_mem_type     = UCS_MEMORY_TYPE_ROCM;
    smd->vmm_export_ops   = span_rocm_vmm_export_ops;
    smd->spill            = UCS_TRY;
    t->memh               = calloc(1, sizeof(*t->memh));
    t->memh->magic        = SPAN_MEMH_MAGIC;
    *md_p                 = t;

    status = span_device_resolve(smd->device, (uintptr_t)address, length, &ext);
    if (status != UCS_OK) {
        return status;
    }
    status = span_chunk_plan_from(&t->memh->geom, ext.base, ext.length,
                                  ext.base, ext.unit_size, 0, 0);
    if (status != UCS_OK) {
        return status;
    }
    /* the range registered, as span_md_mem_reg notes it */
    t->memh->win_base   = (uintptr_t)address;
    t->memh->win_length = span_device_covered(&ext, (uintptr_t)address,
                                              length);
    status = span_memh_seal_exported(smd, t->memh);
    if (status != UCS_OK) {
        return status;
    }
    return span_md_mkey_pack(&smd->super, t->memh, address, length, &params,
                             rkey_buf);
}

void test_rocm_md_free(test_rocm_md_t *t)
{
    span_memh_unpublish(t->memh);
    free(t->memh);
    free(t);
}
