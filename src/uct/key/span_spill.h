/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Spill table: inner keys too large for the 255 bytes of a span rkey (one
 * cuda_ipc key is 192 bytes) are kept by the exporting process and fetched
 * by an importer on the same node; the rkey carries a reference to them
 * (span_rkey.c). A child forked after spills spills into an arena of its
 * own, and releasing a reference it inherited leaves the parent's slot.
 */
#ifndef SPAN_SPILL_H_
#define SPAN_SPILL_H_

#include "span_rkey.h"

/* Stores n keys of K bytes, contiguous, and fills in the reference */
ucs_status_t span_spill_put(const void *keys, uint32_t n, size_t K,
                            span_rkey_spill_t *spill);

/* Releases the slot: a reference to it is refused from now on */
void span_spill_remove(const span_rkey_spill_t *spill);

/* Reads the n keys of K bytes a reference names into keys, validated */
ucs_status_t span_spill_fetch(const span_rkey_spill_t *spill, uint32_t n,
                              size_t K, void *keys);

#endif
