/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Completing a caller's uct_completion_t, as UCT's transports do (the
 * helper UCX has for it is not installed).
 */
#ifndef SPAN_COMPLETION_H_
#define SPAN_COMPLETION_H_

#include <uct/api/uct.h>

static inline void span_completion_invoke(uct_completion_t *comp,
                                          ucs_status_t status)
{
    uct_completion_update_status(comp, status);
    if (--comp->count == 0) {
        comp->func(comp);
    }
}

#endif
