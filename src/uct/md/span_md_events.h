/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What memory events mean to twin MDs: a range that is unmapped or freed
 * is forgotten by the registry (span_registry.h), and the VMM units span
 * exported there are withdrawn (vmm/span_vmm_export.h). The
 * UCM hooks layer delivers the events (src/ucm_hooks/span_ucm.h).
 */
#ifndef SPAN_MD_EVENTS_H_
#define SPAN_MD_EVENTS_H_

#include "span_md.h"

/* UCS_OK where smd will see memory events: its registrations of a range
 * can be shared */
ucs_status_t span_md_events_subscribe(const span_md_t *smd);

/* After a successful span_md_events_subscribe */
void span_md_events_unsubscribe(void);

#endif
