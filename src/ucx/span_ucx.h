/*
 * Selects the declarations of UCX internals matching the UCX found at
 * configure time. Another UCX version is one more block here and one more
 * header beside this one, added when it can be tested.
 */
#ifndef SPAN_UCX_H_
#define SPAN_UCX_H_

#include "config.h"

#if (SPAN_UCX_MAJOR == 1) && (SPAN_UCX_MINOR == 22)
#  include "span_ucx_1_22.h"
#else
#  error "ucx-span has no layout of UCX internals for this UCX version"
#endif

#endif
