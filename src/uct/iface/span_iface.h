/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Twin ifaces: the inner transport's iface, with the ops that carry an rkey
 * or a memory handle patched in place.
 */
#ifndef SPAN_IFACE_H_
#define SPAN_IFACE_H_

#include "md/span_md.h"

/* Makes iface, just opened by the inner transport inner_tl of smd, a twin:
 * patches its ops; closing it restores them and closes the inner iface */
ucs_status_t span_iface_attach(uct_iface_h iface, span_md_t *smd,
                               uct_worker_h worker, const char *inner_tl);

#endif
