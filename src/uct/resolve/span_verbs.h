/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Verbs resolver: the largest region the RDMA device under an ib MD can
 * register, its max_mr_size. UCX's ib MD reports no limit (max_reg
 * SIZE_MAX) although the device has one, and a registration past it fails
 * in the kernel. libibverbs is loaded at run time (the one the process
 * already runs, else libibverbs.so.1): without it the resolver is off and
 * the MD's own max_reg stands.
 */
#ifndef SPAN_VERBS_H_
#define SPAN_VERBS_H_

#include <ucs/type/status.h>
#include <stdint.h>

struct ibv_device;
struct ibv_context;

/* The libibverbs calls the resolver makes; a fake table in the unit tests */
typedef struct span_verbs_ops {
    struct ibv_device  **(*get_device_list)(int *num_devices);
    void               (*free_device_list)(struct ibv_device **list);
    const char         *(*get_device_name)(struct ibv_device *device);
    struct ibv_context *(*open_device)(struct ibv_device *device);
    int                (*close_device)(struct ibv_context *context);
    /* max_mr_size of ibv_query_device; 0 or an errno */
    int                (*max_mr_size)(struct ibv_context *context,
                                      uint64_t *max_mr_size_p);
} span_verbs_ops_t;

/* The real library, or NULL where libibverbs.so.1 cannot be loaded */
const span_verbs_ops_t *span_verbs_library(void);

/* max_mr_size of the device named dev_name: UCS_ERR_NO_DEVICE where no
 * device has that name, UCS_ERR_IO_ERROR where it cannot be opened or
 * queried */
ucs_status_t span_verbs_max_mr_size(const span_verbs_ops_t *ops,
                                    const char *dev_name,
                                    uint64_t *max_mr_size_p);

/* The registration limit of the ib MD md_name (its device's name): the
 * smaller of max_reg, what the MD reports, and the device's max_mr_size;
 * max_reg where ops is NULL or the device cannot be asked */
uint64_t span_verbs_md_max_reg(const span_verbs_ops_t *ops,
                               const char *md_name, uint64_t max_reg);

#endif
