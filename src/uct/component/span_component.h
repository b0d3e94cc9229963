/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The span component: twins of other components' MDs and transports, and
 * span's configuration.
 */
#ifndef SPAN_COMPONENT_H_
#define SPAN_COMPONENT_H_

#include "ucx/span_ucx.h"

extern uct_component_t span_component;

#endif
