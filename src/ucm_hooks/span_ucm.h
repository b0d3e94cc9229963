/*
 * Memory events: span learns from UCM when memory is unmapped (host) or
 * freed (GPU memory types) and invalidates the registry. Subscribed while
 * at least one twin MD is open.
 */
#ifndef SPAN_UCM_H_
#define SPAN_UCM_H_

#include <ucs/type/status.h>

/* UCS_OK when events will be seen; the first call installs the handler */
ucs_status_t span_ucm_subscribe(void);

/* After a successful span_ucm_subscribe; the last one removes the handler */
void span_ucm_unsubscribe(void);

#endif
