/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What a twin MD reports and the limits it keeps: its attributes, the size
 * of its keys, its chunk geometry and the configuration's limits, whether
 * its keys spill.
 */
#ifndef SPAN_MD_QUERY_H_
#define SPAN_MD_QUERY_H_

#include "span_md.h"
#include "span_md_config.h"

/* The twin MD's md_query: the inner MD's attributes as the twin offers them */
ucs_status_t span_md_query(uct_md_h md, uct_md_attr_v2_t *out);

/* Fixed for the MD: one key where registrations are never cut */
size_t span_md_rkey_packed_size(const span_md_t *smd);

/* Chunk size from the inner MD's limit and UCX_SPAN_MAX_CHUNK, overlap and
 * hard boundaries from the configuration */
ucs_status_t span_md_limits(span_md_t *smd, const span_md_config_t *config);

/* Spilled keys can only be read on this node: 'try' spills only for inner
 * MDs none of whose transports reaches another node */
int span_md_spill_mode(span_md_t *smd, int config);

#endif
