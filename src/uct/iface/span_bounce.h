/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Put short, put bcopy and get bcopy over the twin's zero-copy ops,
 * through bounce buffers, for the twin of a transport that has only
 * zero-copy RMA (cma) in UCX 1.15 and earlier: there UCP takes an RMA lane
 * only from a transport with those three ops, and emulates every smaller
 * access over active messages, which the target's UCP serves unchecked.
 * With them the twin is UCP's RMA lane, and its range check sees every
 * access (span_bounce.c).
 */
#ifndef SPAN_BOUNCE_H_
#define SPAN_BOUNCE_H_

#include <uct/api/uct.h>

typedef struct span_bounce_pool span_bounce_pool_t;

/* What the ops need, where the twin of inner_tl, whose iface attr and ops
 * are given, offers them (enable: UCX_SPAN_CMA_RMA; UCX 1.15 and earlier;
 * cma, with zero-copy put and get, none of the three, and its copy
 * function found); else NULL */
span_bounce_pool_t *span_bounce_init(int enable, const char *inner_tl,
                                     const uct_iface_attr_t *attr,
                                     const uct_iface_ops_t *ops);

/* Adds the three ops to ops (a twin's, whose zero-copy ops they call where
 * they queue) */
void span_bounce_patch(uct_iface_ops_t *ops);

/* Adds the three ops' flags and limits to attr */
void span_bounce_query(uct_iface_attr_t *attr);

/* Frees pool and its buffers: the iface closed, and its transport calls
 * no completion of its ops any more */
void span_bounce_destroy(span_bounce_pool_t *pool);

#endif
