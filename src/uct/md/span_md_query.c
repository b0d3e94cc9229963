/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Twin memory domain: what it reports (span_md_query.h) and the limits it
 * keeps, from the inner MD and the configuration.
 */
#include "span_md_query.h"
#include "span_md_reg.h"

#include <sys/resource.h>
#include <ucs/sys/string.h>

/* The default overlap: ops of 4 MiB already run at line rate on RDMA NICs
 * (posting one costs about a microsecond, moving it 80 at 50 GB/s), and a
 * 2 GiB chunk registers 0.2% of its bytes twice */
#define SPAN_MD_OVERLAP_DEFAULT (4ul << 20)
/* The chunk size travels in 32 bits of pages: larger limits are no limit */
#define SPAN_MD_CHUNK_MAX       ((uint64_t)UINT32_MAX * SPAN_RKEY_PAGE)

/* Whether device memory registrations are cut at physical units */
static int span_md_resolves(const span_md_t *smd)
{
    return (smd->device != NULL) &&
           (span_md_reg_mem_types(smd) & UCS_BIT(smd->dev_mem_type));
}

/* Writes the caller's uct_md_attr_v2_t as its UCX lays it out: 1.21 and
 * earlier end it before required_mem_flags; 1.13's MDs write
 * uct_md_attr_t (span_ucx_md_attr_export) */
ucs_status_t span_md_query(uct_md_h md, uct_md_attr_v2_t *out)
{
    span_md_t *smd = (span_md_t*)md;
    uct_md_attr_v2_t full, *attr = &full;

    *attr                  = smd->inner_attr;
    attr->reg_mem_types    = span_md_reg_mem_types(smd);
    attr->cache_mem_types |= attr->reg_mem_types &
                             ~smd->inner_attr.reg_mem_types;
    attr->flags           |= UCT_MD_FLAG_NEED_RKEY;
    attr->flags           &= ~(UCT_MD_FLAG_REG | UCT_MD_FLAG_FIXED |
                               UCT_MD_FLAG_EXPORTED_MKEY |
                               UCT_MD_FLAG_REG_DMABUF |
                               UCT_MD_FLAG_INVALIDATE_RMA |
                               UCT_MD_FLAG_INVALIDATE_AMO |
                               UCT_MD_FLAG_INVALIDATE);
    if (attr->reg_mem_types != 0) {
        attr->flags |= UCT_MD_FLAG_REG;
    }
    attr->dmabuf_mem_types = 0;
    attr->exported_mkey_packed_size = 0;
    attr->rkey_packed_size = smd->rkey_packed_size;
    attr->max_reg          = SIZE_MAX;
    ucs_strncpy_zero(attr->component_name, md->component->name,
                     sizeof(attr->component_name));
    span_ucx_md_attr_export(attr, out);
    return UCS_OK;
}

size_t span_md_rkey_packed_size(const span_md_t *smd)
{
    return ((smd->chunk_size == 0) && (smd->unit_size == 0) &&
            !span_md_resolves(smd) && (smd->spill != UCS_YES) &&
            (smd->inner_attr.rkey_packed_size <= SPAN_RKEY_MAX_KEY)) ?
           SPAN_RKEY_HDR_SIZE + smd->inner_attr.rkey_packed_size :
           SPAN_RKEY_MAX_SIZE;
}

static uint64_t span_md_page_align(uint64_t size, int up)
{
    return (size + (up ? SPAN_RKEY_PAGE - 1 : 0)) & ~(SPAN_RKEY_PAGE - 1);
}

/* span may export one fd per handle of a widened registration: a quarter of
 * the descriptors this process may open */
static uint32_t span_md_widen_max_units(void)
{
    struct rlimit limit;

    if ((getrlimit(RLIMIT_NOFILE, &limit) != 0) ||
        (limit.rlim_cur == RLIM_INFINITY)) {
        return SPAN_CHUNK_MAX;
    }
    return ucs_min(limit.rlim_cur / 4, SPAN_CHUNK_MAX);
}

ucs_status_t span_md_limits(span_md_t *smd, const span_md_config_t *config)
{
    uint64_t limit = ucs_min(smd->inner_attr.max_reg, config->max_chunk);

    smd->chunk_size = (limit > SPAN_MD_CHUNK_MAX) ? 0 :
                      span_md_page_align(limit, 0);
    smd->overlap    = 0;
    if (smd->chunk_size != 0) {
        smd->overlap = (config->chunk_overlap == UCS_MEMUNITS_AUTO) ?
                       span_md_page_align(ucs_min(SPAN_MD_OVERLAP_DEFAULT,
                                                  smd->chunk_size / 4), 0) :
                       span_md_page_align(config->chunk_overlap, 1);
        if ((smd->overlap == 0) || (smd->overlap >= smd->chunk_size)) {
            ucs_error("span md %p: chunks of %" PRIu64 " bytes (limit %"
                      PRIu64 ", inner max_reg %zu) cannot overlap by %" PRIu64
                      " bytes: UCX_SPAN_MAX_CHUNK must be at least 4 pages "
                      "and UCX_SPAN_CHUNK_OVERLAP below it", smd,
                      smd->chunk_size, limit, smd->inner_attr.max_reg,
                      smd->overlap);
            return UCS_ERR_INVALID_PARAM;
        }
    }

    smd->unit_size = (config->test_unit_size == UCS_MEMUNITS_INF) ? 0 :
                     config->test_unit_size;
    if ((smd->unit_size % SPAN_RKEY_PAGE) != 0) {
        ucs_error("span md %p: UCX_SPAN_TEST_UNIT_SIZE=%" PRIu64 " is not a "
                  "whole number of 4 KiB pages", smd, smd->unit_size);
        return UCS_ERR_INVALID_PARAM;
    }

    if (config->test_no_resource == 1) {
        ucs_error("span md %p: UCX_SPAN_TEST_NO_RESOURCE=1 would refuse every "
                  "op forever; the first piece to refuse is 2 or later", smd);
        return UCS_ERR_INVALID_PARAM;
    }

    if (config->copy_batch > SPAN_VMM_COPY_MAX_BATCH) {
        ucs_error("span md %p: UCX_SPAN_COPY_BATCH=%u is more ops than a batch "
                  "holds (at most %u, the pieces of the largest copy kernel; "
                  "0 or 1: no batches)", smd, config->copy_batch,
                  SPAN_VMM_COPY_MAX_BATCH);
        return UCS_ERR_INVALID_PARAM;
    }
    if (config->copy_batch_size == 0) {
        ucs_error("span md %p: UCX_SPAN_COPY_BATCH_SIZE=0 would queue every "
                  "batch before it holds an op; give a size of at least one "
                  "byte, or 'inf' for no bound", smd);
        return UCS_ERR_INVALID_PARAM;
    }
    if (!(config->copy_burst_gap >= 0) || (config->copy_burst_gap > 1.0)) {
        ucs_error("span md %p: UCX_SPAN_COPY_BURST_GAP=%g s is not a time "
                  "from 0 to 1s", smd, config->copy_burst_gap);
        return UCS_ERR_INVALID_PARAM;
    }
    smd->widen.max_bytes = (config->vmm_widen == UCS_MEMUNITS_INF) ?
                           UINT64_MAX : config->vmm_widen;
    smd->widen.max_units = span_md_widen_max_units();
    smd->copy_params.batch_ops  = config->copy_batch;
    smd->copy_params.batch_bytes = (config->copy_batch_size ==
                                    UCS_MEMUNITS_INF) ?
                                   SIZE_MAX : config->copy_batch_size;
    smd->copy_params.burst_gap  = (uint64_t)(config->copy_burst_gap * 1e9);
    smd->copy_params.kernel_max = (config->copy_kernel_max ==
                                   UCS_MEMUNITS_INF) ?
                                  SIZE_MAX : config->copy_kernel_max;
    smd->test_fail_reg    = config->test_fail_reg;
    smd->test_fail_dereg  = config->test_fail_dereg;
    smd->test_no_resource = config->test_no_resource;
    smd->cma_rma          = config->cma_rma;
    ucs_debug("span md %p: chunks of %" PRIu64 " bytes overlapping by %"
              PRIu64 ", units of %" PRIu64, smd, smd->chunk_size,
              smd->overlap, smd->unit_size);
    return UCS_OK;
}

int span_md_spill_mode(span_md_t *smd, int config)
{
    uct_tl_resource_desc_t *resources;
    unsigned i, count;
    int local = 1;

    if (config != UCS_TRY) {
        return config;
    }
    if (uct_md_query_tl_resources(smd->inner, &resources, &count) != UCS_OK) {
        return UCS_NO;
    }
    for (i = 0; i < count; ++i) {
        local &= (resources[i].dev_type != UCT_DEVICE_TYPE_NET);
    }
    uct_release_tl_resource_list(resources);
    return local ? UCS_TRY : UCS_NO;
}
