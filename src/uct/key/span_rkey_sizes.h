/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Which key sizes the twin MDs open in this process pack, per inner
 * component, and the check of a peer's key against them: a key's inner
 * keys must be of the size an open twin of their component packs (a peer
 * configured otherwise sends keys this process cannot read).
 */
#ifndef SPAN_RKEY_SIZES_H_
#define SPAN_RKEY_SIZES_H_

#include "span_rkey.h"

/* A twin MD of the inner component component_id, whose keys are key_size
 * bytes, is open: keys of that component from peers are accepted while it
 * is. UCS_ERR_EXCEEDS_LIMIT when too many kinds are noted. */
ucs_status_t span_rkey_size_add(uint32_t component_id, size_t key_size);

void span_rkey_size_remove(uint32_t component_id, size_t key_size);

/* Parses a key from a peer, whose length UCT does not pass: it is read up
 * to the size its exporter packed, which the key carries, whatever the
 * twins of this process pack; its inner keys must be of the size of an
 * open twin MD of that component. UCS_ERR_UNREACHABLE where no twin MD of
 * the component is open. */
ucs_status_t span_rkey_parse_peer(const void *buffer, span_rkey_desc_t *desc);

#endif
