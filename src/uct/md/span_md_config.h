/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The twin MDs' configuration table: span's own fields (UCX_SPAN_*), then
 * each inner component's MD fields under that component's prefix, so that
 * a field of the inner MD ("POSIX_DIR") is set on a twin's configuration
 * as on the native one (uct_config_modify, UCX_POSIX_DIR).
 */
#ifndef SPAN_MD_CONFIG_H_
#define SPAN_MD_CONFIG_H_

#include "span_md.h"

/* span's own fields, which a table made for the inner MDs starts with */
extern ucs_config_field_t span_md_config_table[];

/* Makes span's MD configuration (span->md_config) hold the MD fields of
 * every other component registered now, where the table does not yet:
 * UCS_OK, or UCS_ERR_NO_MEMORY (logged; the table stays as it was and the
 * call may be made again). Callers serialize. */
ucs_status_t span_md_config_extend(uct_component_t *span);

/* The inner component's configuration inside config, a twin MD's, read by
 * uct_md_config_read(); NULL where the table config was read by did not
 * hold it (the inner MD then reads its own from the environment) */
const uct_md_config_t *span_md_config_inner(const uct_md_config_t *config,
                                            const uct_component_t *inner);

/* Gives span's own table back to span->md_config */
void span_md_config_cleanup(uct_component_t *span);

#endif
