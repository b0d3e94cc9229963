/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Between libuct_span.so (the loader UCX loads, span_loader.c) and
 * libspan_impl.so (the component): the one function the loader calls.
 */
#ifndef SPAN_LOADER_H_
#define SPAN_LOADER_H_

#include <ucs/type/status.h>

/* Selects the UCX layout and registers the component; UCS_OK or why not,
 * said in one warning line */
#define SPAN_IMPL_INIT "span_impl_global_init"

typedef ucs_status_t (*span_impl_init_func_t)(void);

/* A libuct symbol of UCX 1.22 and later, the releases that load modules
 * from UCX_MODULE_DIR by any name (UCX's PR #11206) */
#define SPAN_LOADER_MODULES_SYMBOL "uct_ep_put_sgl_zcopy"

#endif
