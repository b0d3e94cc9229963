/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Twin MD registration (span_md_reg.c). A request is widened to what it
 * lies in (for device memory the physical units under it: an inner
 * transport never sees an interior pointer), served by a live registration
 * of the registry where one covers it, else registered with the inner MD in
 * chunks and sealed with its span rkey (span_md_pack.h).
 */
#ifndef SPAN_MD_REG_H_
#define SPAN_MD_REG_H_

#include "span_md.h"

/* Memory types whose registration the twin can publish in a span rkey */
uint64_t span_md_reg_mem_types(const span_md_t *smd);

/* The memory type of a registration: the one params names, else (UCX's
 * uct_md_mem_reg, and UCP of UCX 1.21 and older, name none) the twin's
 * device memory where its driver knows the address as an allocation, host
 * memory otherwise, as the inner MD would tell it */
ucs_memory_type_t span_md_reg_mem_type(const span_md_t *smd,
                                       const uct_md_mem_reg_params_t *params,
                                       const void *address);

/* The twin MD's registration ops */
ucs_status_t span_md_mem_reg(uct_md_h md, void *address, size_t length,
                             const uct_md_mem_reg_params_t *params,
                             uct_mem_h *memh_p);

/* span_md_mem_reg as UCX 1.13 calls it: flags, no params */
ucs_status_t span_md_mem_reg_1_13(uct_md_h md, void *address, size_t length,
                                  unsigned flags, uct_mem_h *memh_p);

ucs_status_t span_md_mem_dereg(uct_md_h md,
                               const uct_md_mem_dereg_params_t *params);

ucs_status_t span_md_mem_alloc(uct_md_h md, size_t *length_p,
                               void **address_p, ucs_memory_type_t mem_type,
                               ucs_sys_device_t sys_dev, unsigned flags,
                               const char *alloc_name, uct_mem_h *memh_p);

/* span_md_mem_alloc as UCX 1.18 and earlier call it: no sys_dev */
ucs_status_t span_md_mem_alloc_1_18(uct_md_h md, size_t *length_p,
                                    void **address_p,
                                    ucs_memory_type_t mem_type,
                                    unsigned flags, const char *alloc_name,
                                    uct_mem_h *memh_p);

ucs_status_t span_md_mem_free(uct_md_h md, uct_mem_h memh);

#endif
