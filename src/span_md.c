/*
 * Twin memory domain.
 */
#include "span_md.h"
#include "span_rkey.h"

#include <stdlib.h>
#include <ucs/sys/string.h>
#include <string.h>

/* Memory types whose registration the twin can publish in a span rkey */
static uint64_t span_md_reg_mem_types(const span_md_t *smd)
{
    uint64_t types = (smd->inner_attr.flags & UCT_MD_FLAG_REG) ?
                     smd->inner_attr.reg_mem_types : 0;

    /* Where the inner MD needs no rkey, a registration is only recorded, so
     * that every remote access can be checked against it. */
    if (smd->inner_attr.rkey_packed_size == 0) {
        types |= smd->inner_attr.access_mem_types;
    }
    return types;
}

static ucs_status_t span_md_query(uct_md_h md, uct_md_attr_v2_t *attr)
{
    span_md_t *smd = (span_md_t*)md;

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
    attr->rkey_packed_size = SPAN_RKEY_HDR_SIZE +
                             smd->inner_attr.rkey_packed_size;
    ucs_strncpy_zero(attr->component_name, span_component.name,
                     sizeof(attr->component_name));
    return UCS_OK;
}

static int span_md_inner_registers(const span_md_t *smd,
                                   ucs_memory_type_t mem_type)
{
    return (smd->inner_attr.flags & UCT_MD_FLAG_REG) &&
           (smd->inner_attr.reg_mem_types & UCS_BIT(mem_type));
}

static ucs_status_t
span_md_mem_reg(uct_md_h md, void *address, size_t length,
                const uct_md_mem_reg_params_t *params, uct_mem_h *memh_p)
{
    span_md_t *smd          = (span_md_t*)md;
    ucs_memory_type_t mtype = UCS_MEMORY_TYPE_HOST;
    span_memh_t *memh;
    ucs_status_t status;

    if (length == 0) {
        ucs_error("span md %p: registration of 0 bytes at %p", md, address);
        return UCS_ERR_INVALID_PARAM;
    }

    if (params->field_mask & UCT_MD_MEM_REG_FIELD_MEM_TYPE) {
        mtype = params->mem_type;
    }

    if (!(span_md_reg_mem_types(smd) & UCS_BIT(mtype))) {
        ucs_error("span md %p: cannot register %s memory %p +%zu", md,
                  ucs_memory_type_names[mtype], address, length);
        return UCS_ERR_UNSUPPORTED;
    }

    memh = malloc(sizeof(*memh));
    if (memh == NULL) {
        ucs_error("span md %p: failed to allocate a memory handle", md);
        return UCS_ERR_NO_MEMORY;
    }

    memh->base   = (uintptr_t)address;
    memh->length = length;
    memh->inner  = UCT_MEM_HANDLE_NULL;
    if (span_md_inner_registers(smd, mtype)) {
        status = smd->inner->ops->mem_reg(smd->inner, address, length, params,
                                          &memh->inner);
        if (status != UCS_OK) {
            ucs_debug("span md %p: inner registration of %p +%zu failed: %s",
                      md, address, length, ucs_status_string(status));
            goto err_free;
        }
    }

    *memh_p = memh;
    return UCS_OK;

err_free:
    free(memh);
    return status;
}

static ucs_status_t
span_md_mem_dereg(uct_md_h md, const uct_md_mem_dereg_params_t *params)
{
    span_md_t *smd = (span_md_t*)md;
    uct_md_mem_dereg_params_t inner_params;
    span_memh_t *memh;
    ucs_status_t status = UCS_OK;

    if (!(params->field_mask & UCT_MD_MEM_DEREG_FIELD_MEMH) ||
        (params->memh == NULL)) {
        return UCS_ERR_INVALID_PARAM;
    }

    if ((params->field_mask & UCT_MD_MEM_DEREG_FIELD_FLAGS) &&
        (params->flags & UCT_MD_MEM_DEREG_FLAG_INVALIDATE)) {
        /* not advertised (span_md_query) */
        return UCS_ERR_UNSUPPORTED;
    }

    memh = params->memh;
    if (memh->inner != UCT_MEM_HANDLE_NULL) {
        inner_params            = *params;
        inner_params.field_mask = UCT_MD_MEM_DEREG_FIELD_MEMH;
        inner_params.memh       = memh->inner;
        status = smd->inner->ops->mem_dereg(smd->inner, &inner_params);
        if (status != UCS_OK) {
            ucs_error("span md %p: inner deregistration of [0x%" PRIx64
                      ", +%" PRIu64 ") failed: %s", md, memh->base,
                      memh->length, ucs_status_string(status));
        }
    }

    free(memh);
    return status;
}

static ucs_status_t
span_md_mkey_pack(uct_md_h md, uct_mem_h memh, void *address, size_t length,
                  const uct_md_mkey_pack_params_t *params, void *buffer)
{
    span_md_t *smd    = (span_md_t*)md;
    span_memh_t *smem = memh;
    span_rkey_desc_t desc;
    ucs_status_t status;

    if ((params->field_mask & UCT_MD_MKEY_PACK_FIELD_FLAGS) &&
        (params->flags & (UCT_MD_MKEY_PACK_FLAG_EXPORT |
                          UCT_MD_MKEY_PACK_FLAG_INVALIDATE_RMA |
                          UCT_MD_MKEY_PACK_FLAG_INVALIDATE_AMO))) {
        ucs_error("span md %p: mkey pack flags 0x%x are not supported", md,
                  params->flags);
        return UCS_ERR_UNSUPPORTED;
    }

    if (smd->inner_attr.rkey_packed_size > 0) {
        if (smem->inner == UCT_MEM_HANDLE_NULL) {
            ucs_error("span md %p: [0x%" PRIx64 ", +%" PRIu64 ") has no inner "
                      "registration to pack a key for", md, smem->base,
                      smem->length);
            return UCS_ERR_INVALID_PARAM;
        }

        status = smd->inner->ops->mkey_pack(smd->inner, smem->inner, address,
                                            length, params,
                                            span_rkey_inner_buffer(buffer));
        if (status != UCS_OK) {
            ucs_error("span md %p: inner mkey pack of %p +%zu failed: %s", md,
                      address, length, ucs_status_string(status));
            return status;
        }
    }

    desc.component_id = smd->inner_id;
    desc.base         = smem->base;
    desc.length       = smem->length;
    desc.inner_size   = smd->inner_attr.rkey_packed_size;
    span_rkey_seal(buffer, &desc);
    return UCS_OK;
}

static ucs_status_t
span_md_mem_query(uct_md_h md, const void *address, size_t length,
                  uct_md_mem_attr_v2_t *mem_attr)
{
    span_md_t *smd = (span_md_t*)md;

    return smd->inner->ops->mem_query(smd->inner, address, length, mem_attr);
}

static ucs_status_t
span_md_detect_memory_type(uct_md_h md, const void *address, size_t length,
                           ucs_memory_type_t *mem_type_p)
{
    span_md_t *smd = (span_md_t*)md;

    return smd->inner->ops->detect_memory_type(smd->inner, address, length,
                                               mem_type_p);
}

static ucs_status_t span_md_mem_alloc(uct_md_h md, size_t *length_p,
                                      void **address_p,
                                      ucs_memory_type_t mem_type,
                                      ucs_sys_device_t sys_dev, unsigned flags,
                                      const char *alloc_name,
                                      uct_mem_h *memh_p)
{
    span_md_t *smd = (span_md_t*)md;
    span_memh_t *memh;
    ucs_status_t status;

    memh = malloc(sizeof(*memh));
    if (memh == NULL) {
        return UCS_ERR_NO_MEMORY;
    }

    status = smd->inner->ops->mem_alloc(smd->inner, length_p, address_p,
                                        mem_type, sys_dev, flags, alloc_name,
                                        &memh->inner);
    if (status != UCS_OK) {
        free(memh);
        return status;
    }

    memh->base   = (uintptr_t)*address_p;
    memh->length = *length_p;
    *memh_p      = memh;
    return UCS_OK;
}

static ucs_status_t span_md_mem_free(uct_md_h md, uct_mem_h memh)
{
    span_md_t *smd    = (span_md_t*)md;
    span_memh_t *smem = memh;
    ucs_status_t status;

    status = smd->inner->ops->mem_free(smd->inner, smem->inner);
    free(smem);
    return status;
}

static ucs_status_t span_md_mem_advise(uct_md_h md, uct_mem_h memh,
                                       void *addr, size_t length,
                                       unsigned advice)
{
    return UCS_ERR_UNSUPPORTED;
}

static ucs_status_t span_md_mem_attach(uct_md_h md, const void *mkey_buffer,
                                       uct_md_mem_attach_params_t *params,
                                       uct_mem_h *memh_p)
{
    return UCS_ERR_UNSUPPORTED;
}

static ucs_status_t span_md_mem_elem_pack(uct_md_h md, uct_mem_h memh,
                                          uct_rkey_t rkey,
                                          uct_device_mem_elem_t *mem_elem_p)
{
    return UCS_ERR_UNSUPPORTED;
}

static void span_md_close(uct_md_h md)
{
    span_md_t *smd = (span_md_t*)md;

    uct_md_close(smd->inner);
    free(smd);
}

static uct_md_ops_t span_md_ops = {
    .close              = span_md_close,
    .query              = span_md_query,
    .mem_alloc          = span_md_mem_alloc,
    .mem_free           = span_md_mem_free,
    .mem_advise         = span_md_mem_advise,
    .mem_reg            = span_md_mem_reg,
    .mem_dereg          = span_md_mem_dereg,
    .mem_query          = span_md_mem_query,
    .mkey_pack          = span_md_mkey_pack,
    .mem_attach         = span_md_mem_attach,
    .detect_memory_type = span_md_detect_memory_type,
    .mem_elem_pack      = span_md_mem_elem_pack
};

/* Finds the component that offers an MD named inner_name */
static uct_component_t *span_md_find_inner_component(const char *inner_name)
{
    uct_md_resource_desc_t *resources;
    uct_component_t *component;
    unsigned i, count;
    int found;

    ucs_list_for_each(component, &uct_components_list, list) {
        if ((component == &span_component) ||
            (component->query_md_resources(component, &resources, &count) !=
             UCS_OK)) {
            continue;
        }

        found = 0;
        for (i = 0; i < count; ++i) {
            found |= !strcmp(resources[i].md_name, inner_name);
        }
        ucs_free(resources);
        if (found) {
            return component;
        }
    }

    return NULL;
}

static ucs_status_t span_md_open_inner(span_md_t *smd, const char *inner_name)
{
    uct_md_config_t *config;
    ucs_status_t status;

    status = uct_md_config_read(smd->inner_component, NULL, NULL, &config);
    if (status != UCS_OK) {
        return status;
    }

    status = uct_md_open(smd->inner_component, inner_name, config, &smd->inner);
    uct_config_release(config);
    return status;
}

ucs_status_t span_md_open(uct_component_t *component, const char *md_name,
                          const uct_md_config_t *config, uct_md_h *md_p)
{
    char inner_name[UCT_MD_NAME_MAX];
    size_t name_len = strlen(md_name);
    span_md_t *smd;
    ucs_status_t status;

    if ((name_len < 2) || (name_len > sizeof(inner_name)) ||
        strcmp(md_name + name_len - 1, SPAN_TWIN_SUFFIX)) {
        ucs_error("span: '%s' is not the name of a twin MD", md_name);
        return UCS_ERR_NO_DEVICE;
    }
    ucs_strncpy_zero(inner_name, md_name, name_len);

    smd = calloc(1, sizeof(*smd));
    if (smd == NULL) {
        return UCS_ERR_NO_MEMORY;
    }

    smd->super.ops       = &span_md_ops;
    smd->super.component = component;
    smd->inner_component = span_md_find_inner_component(inner_name);
    if (smd->inner_component == NULL) {
        ucs_error("span: no component offers the MD '%s'", inner_name);
        status = UCS_ERR_NO_DEVICE;
        goto err_free;
    }

    smd->inner_id = span_rkey_component_id(smd->inner_component->name);
    status        = span_md_open_inner(smd, inner_name);
    if (status != UCS_OK) {
        ucs_debug("span: failed to open inner MD '%s': %s", inner_name,
                  ucs_status_string(status));
        goto err_free;
    }

    smd->inner_attr.field_mask = UINT64_MAX;
    status = uct_md_query_v2(smd->inner, &smd->inner_attr);
    if (status != UCS_OK) {
        ucs_error("span: failed to query inner MD '%s': %s", inner_name,
                  ucs_status_string(status));
        goto err_close;
    }

    if (smd->inner_attr.rkey_packed_size > SPAN_RKEY_MAX_INNER) {
        ucs_diag("span: MD '%s' packs %zu-byte rkeys, more than the %d bytes "
                 "a span rkey can hold inline; '%s' is not offered",
                 inner_name, smd->inner_attr.rkey_packed_size,
                 SPAN_RKEY_MAX_INNER, md_name);
        status = UCS_ERR_UNSUPPORTED;
        goto err_close;
    }

    *md_p = &smd->super;
    return UCS_OK;

err_close:
    uct_md_close(smd->inner);
err_free:
    free(smd);
    return status;
}
