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

/* From now on an unmapped range also withdraws the VMM exports it overlaps:
 * UCM reports no free of ROCm's VMM handles (its rocm hooks see
 * hsa_amd_memory_pool_free only), and their unmap, where the runtime
 * unmaps the host's view too, is an unmapped range. Other processes pay
 * nothing for it on every munmap. */
void span_ucm_unmap_withdraws_exports(void);

#endif
