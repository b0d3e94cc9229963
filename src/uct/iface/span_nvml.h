/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * NVLinks and GPUs of the node, as NVML reports them: the twin of cuda_ipc
 * decides from this whether it offers get zero-copy.
 */
#ifndef SPAN_NVML_H_
#define SPAN_NVML_H_

#include <ucs/type/status.h>

/* nvmlFieldValue_t */
typedef struct span_nvml_field_value {
    unsigned  field_id;
    unsigned  scope_id;
    long long timestamp;
    long long latency_usec;
    int       value_type;
    int       nvml_return;
    union {
        double             d;
        unsigned           ui;
        unsigned long long ull;
    } value;
} span_nvml_field_value_t;

/* The NVML calls span makes (a test passes scripted ones) */
typedef struct span_nvml_ops {
    int (*init)(void);
    int (*device_by_index)(unsigned index, void **device);
    int (*field_values)(void *device, int count,
                        span_nvml_field_value_t *values);
    int (*link_state)(void *device, unsigned link, int *active);
    const char *(*error_string)(int result);
    int (*device_count)(unsigned *count); /* NULL: an NVML without it */
} span_nvml_ops_t;

/* Active NVLinks of GPU 0 in *links_p through initialised NVML calls, the
 * probe tried again a bounded number of times where a call fails; an error
 * where it always does */
ucs_status_t span_nvml_links_of(const span_nvml_ops_t *nvml,
                                unsigned *links_p);

/* The GPUs of the node through initialised NVML calls (NVML sees them
 * all, whatever CUDA_VISIBLE_DEVICES hides), in *gpus_p; 0 where NVML
 * cannot tell */
void span_nvml_gpus_of(const span_nvml_ops_t *nvml, unsigned *gpus_p);

/* Whether cuda_ipc's get zero-copy reaches every peer's device memory at a
 * device's speed: GPU 0 has an active NVLink (span_nvml_nvlinks), or the
 * node has one GPU, which every peer's memory is on. Kept as the links */
int span_nvml_get_zcopy(void);

/* Active NVLinks of GPU 0 (cuda_ipc assumes a uniform node, and so does
 * the twin); 0 where NVML or the driver is missing or NVML failed. An
 * answer is kept for the process; a failure is asked again next time, and
 * a third one kept */
unsigned span_nvml_nvlinks(void);

#endif
