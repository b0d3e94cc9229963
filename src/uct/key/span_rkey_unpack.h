/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The span component's rkey ops: a peer's packed span rkey (span_rkey.c)
 * unpacked into the span_rkey_t that uct_rkey_t points to for a twin.
 */
#ifndef SPAN_RKEY_UNPACK_H_
#define SPAN_RKEY_UNPACK_H_

#include "ucx/span_ucx.h"

ucs_status_t span_rkey_unpack(uct_component_t *component, const void *buffer,
                              const uct_rkey_unpack_params_t *params,
                              uct_rkey_t *rkey_p, void **handle_p);

/* span_rkey_unpack as UCX 1.18 and earlier call it: no params */
ucs_status_t span_rkey_unpack_1_18(uct_component_t *component,
                                   const void *buffer, uct_rkey_t *rkey_p,
                                   void **handle_p);

ucs_status_t span_rkey_release(uct_component_t *component, uct_rkey_t rkey,
                               void *handle);

ucs_status_t span_rkey_ptr(uct_component_t *component, uct_rkey_t rkey,
                           void *handle, uint64_t remote_addr,
                           void **local_addr_p);

ucs_status_t span_rkey_compare(uct_component_t *component, uct_rkey_t rkey1,
                               uct_rkey_t rkey2,
                               const uct_rkey_compare_params_t *params,
                               int *result);

#endif
