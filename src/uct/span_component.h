/*
 * The span component: twins of other components' MDs and transports, and
 * span's configuration.
 */
#ifndef SPAN_COMPONENT_H_
#define SPAN_COMPONENT_H_

#include "ucx/span_ucx.h"

/* A twin is named after its inner MD or transport with this suffix */
#define SPAN_TWIN_SUFFIX "+"

extern uct_component_t span_component;

/* The inner component whose name hashes to component_id, or NULL */
uct_component_t *span_component_find_inner(uint32_t component_id);

#endif
