/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * NVLink detection for the twin of cuda_ipc.
 *
 * cuda_ipc offers get zero-copy only where its own NVLink probe counts
 * links, and in UCX 1.22 and 1.23 that probe is not to be trusted: a probe
 * that fails is not cached, a count of 0 is, and neither is logged with its
 * reason. On a 4-GPU NVLink node, inside the twin's iface_open, it found "no
 * nvlinks" in 16 of 40 fresh processes (with tcp beside; never natively),
 * and UCP then emulated every get in software, thousands of times slower.
 * So the twin asks NVML itself, until it answers, with every field of its
 * requests set and failed calls tried again, and offers get zero-copy where
 * GPU 0 has an active NVLink, whatever the inner probe said.
 *
 * NVML is loaded at run time (span links no vendor library); only the few
 * calls below are declared, with the layouts of NVML's ABI.
 */
#ifdef HAVE_CONFIG_H
#  include "config.h"
#endif

#include "span_nvml.h"

#include "base/span_fork.h"

#include <ucs/debug/log_def.h>
#include <ucs/sys/math.h>
#include <dlfcn.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#define SPAN_NVML_SUCCESS              0
#define SPAN_NVML_ERROR_NOT_SUPPORTED  3
#define SPAN_NVML_FI_NVLINK_LINK_COUNT 91 /* NVML_FI_DEV_NVLINK_LINK_COUNT */
#define SPAN_NVML_VALUE_UINT           1  /* NVML_VALUE_TYPE_UNSIGNED_INT */
#define SPAN_NVML_FEATURE_ENABLED      1  /* NVML_FEATURE_ENABLED */
/* NVML_NVLINK_MAX_LINKS of the newest NVML: a bound on a count read from
 * the driver */
#define SPAN_NVML_MAX_LINKS            18
/* A probe whose NVML calls fail is tried again, this many times in all,
 * this far apart: an NVML call can fail for a moment while another
 * process sets the GPU up */
#define SPAN_NVML_TRIES                10
#define SPAN_NVML_RETRY_USEC           20000
/* Probes a process makes at most: each that fails costs an iface open up
 * to SPAN_NVML_TRIES x SPAN_NVML_RETRY_USEC, and a process may open many */
#define SPAN_NVML_PROBES               3

/* What the process learnt from NVML: only an answer is kept (a count, or
 * NVML absent); a probe whose calls kept failing is made again when the
 * next twin of cuda_ipc opens (cuda_ipc retries its own at every query),
 * up to SPAN_NVML_PROBES in all */
static pthread_mutex_t span_nvml_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned        span_nvml_probes; /* made so far, failed */
static int             span_nvml_known;
static unsigned        span_nvml_links;
static unsigned        span_nvml_gpus; /* 0: NVML did not tell */

/* a child forked during a probe must not inherit the lock held */
static const span_fork_handlers_t span_nvml_fork = {.lock = &span_nvml_lock};

static void UCS_F_CTOR span_nvml_fork_register(void)
{
    span_fork_register(SPAN_FORK_NVML, &span_nvml_fork);
}

static int span_nvml_load(void *lib, span_nvml_ops_t *nvml)
{
    nvml->init            = dlsym(lib, "nvmlInit_v2");
    nvml->device_by_index = dlsym(lib, "nvmlDeviceGetHandleByIndex_v2");
    nvml->field_values    = dlsym(lib, "nvmlDeviceGetFieldValues");
    nvml->link_state      = dlsym(lib, "nvmlDeviceGetNvLinkState");
    nvml->error_string    = dlsym(lib, "nvmlErrorString");
    nvml->device_count    = dlsym(lib, "nvmlDeviceGetCount_v2");
    return (nvml->init != NULL) && (nvml->device_by_index != NULL) &&
           (nvml->field_values != NULL) && (nvml->link_state != NULL) &&
           (nvml->error_string != NULL);
}

/* Active links of GPU 0 in *active_p; an error where NVML failed */
static ucs_status_t span_nvml_count(const span_nvml_ops_t *nvml,
                                    unsigned *active_p)
{
    span_nvml_field_value_t count;
    unsigned link, active = 0;
    void *device;
    int res, state;

    res = nvml->device_by_index(0, &device);
    if (res != SPAN_NVML_SUCCESS) {
        ucs_debug("span nvml: GPU 0: %s", nvml->error_string(res));
        return UCS_ERR_IO_ERROR;
    }

    memset(&count, 0, sizeof(count));
    count.field_id = SPAN_NVML_FI_NVLINK_LINK_COUNT;
    res            = nvml->field_values(device, 1, &count);
    if ((res == SPAN_NVML_SUCCESS) &&
        (count.nvml_return == SPAN_NVML_ERROR_NOT_SUPPORTED)) {
        /* an answer: a GPU without NVLink (an H200 PCIe alone says so) */
        ucs_debug("span nvml: GPU 0 has no NVLink (its count is not "
                  "supported)");
        *active_p = 0;
        return UCS_OK;
    }
    if ((res != SPAN_NVML_SUCCESS) ||
        (count.nvml_return != SPAN_NVML_SUCCESS) ||
        (count.value_type != SPAN_NVML_VALUE_UINT)) {
        ucs_debug("span nvml: GPU 0: NVLink count: %s (value: %s, type %d)",
                  nvml->error_string(res),
                  nvml->error_string(count.nvml_return), count.value_type);
        return UCS_ERR_IO_ERROR;
    }

    for (link = 0; link < ucs_min(count.value.ui, SPAN_NVML_MAX_LINKS);
         ++link) {
        state = 0;
        res   = nvml->link_state(device, link, &state);
        if (res != SPAN_NVML_SUCCESS) {
            ucs_debug("span nvml: GPU 0: state of NVLink %u: %s", link,
                      nvml->error_string(res));
            return UCS_ERR_IO_ERROR;
        }
        active += (state == SPAN_NVML_FEATURE_ENABLED);
    }
    ucs_debug("span nvml: GPU 0: %u NVLinks, %u active", count.value.ui,
              active);
    *active_p = active;
    return UCS_OK;
}

void span_nvml_gpus_of(const span_nvml_ops_t *nvml, unsigned *gpus_p)
{
    int res;

    *gpus_p = 0;
    if (nvml->device_count == NULL) {
        return;
    }
    res = nvml->device_count(gpus_p);
    if (res != SPAN_NVML_SUCCESS) {
        ucs_debug("span nvml: no count of GPUs: %s", nvml->error_string(res));
        *gpus_p = 0;
    }
}

/* UCS_OK with the count in *links_p and the node's GPUs in *gpus_p where
 * NVML answered or is absent (0 links, 0 GPUs); an error where its calls
 * failed every try */
static ucs_status_t span_nvml_probe(unsigned *links_p, unsigned *gpus_p)
{
    /* never unloaded: NVML keeps threads and exit handlers of its own */
    void *lib = dlopen("libnvidia-ml.so.1",
                       RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    span_nvml_ops_t nvml;
    ucs_status_t status;
    int (*shutdown)(void);
    int res;

    *links_p = 0;
    *gpus_p  = 0;
    if (lib == NULL) {
        ucs_debug("span nvml: no NVML: %s", dlerror());
        return UCS_OK;
    }
    if (!span_nvml_load(lib, &nvml)) {
        ucs_debug("span nvml: libnvidia-ml.so.1 lacks a call span needs");
        dlclose(lib);
        return UCS_OK;
    }
    if ((res = nvml.init()) != SPAN_NVML_SUCCESS) {
        ucs_diag("span nvml: nvmlInit failed: %s: cuda_ipc+ offers get "
                 "zero-copy as cuda_ipc does", nvml.error_string(res));
        dlclose(lib);
        return UCS_ERR_IO_ERROR;
    }
    status = span_nvml_links_of(&nvml, links_p);
    if (status == UCS_OK) {
        span_nvml_gpus_of(&nvml, gpus_p);
    }
    /* NVML counts its inits: this leaves UCX's own as it was, and the
     * process without the descriptors NVML holds while initialised */
    shutdown = (int (*)(void))dlsym(lib, "nvmlShutdown");
    if (shutdown != NULL) {
        shutdown();
    }
    return status;
}

ucs_status_t span_nvml_links_of(const span_nvml_ops_t *nvml,
                                unsigned *links_p)
{
    int tries;

    for (tries = 1; span_nvml_count(nvml, links_p) != UCS_OK; ++tries) {
        if (tries == SPAN_NVML_TRIES) {
            ucs_diag("span nvml: GPU 0: NVML failed %d times: cuda_ipc+ "
                     "offers get zero-copy as cuda_ipc does", tries);
            return UCS_ERR_IO_ERROR;
        }
        usleep(SPAN_NVML_RETRY_USEC);
    }
    return UCS_OK;
}

/* NVML's answer, probed where none is kept yet */
static void span_nvml_node(unsigned *links_p, unsigned *gpus_p)
{
    pthread_mutex_lock(&span_nvml_lock);
    if (!span_nvml_known &&
        ((span_nvml_probe(&span_nvml_links, &span_nvml_gpus) == UCS_OK) ||
         (++span_nvml_probes == SPAN_NVML_PROBES))) {
        span_nvml_known = 1;
    }
    *links_p = span_nvml_links;
    *gpus_p  = span_nvml_gpus;
    pthread_mutex_unlock(&span_nvml_lock);
}

unsigned span_nvml_nvlinks(void)
{
    unsigned links, gpus;

    span_nvml_node(&links, &gpus);
    return links;
}

int span_nvml_get_zcopy(void)
{
    unsigned links, gpus;

    span_nvml_node(&links, &gpus);
    if (links > 0) {
        ucs_debug("span nvml: GPU 0 has %u active NVLinks", links);
    } else if (gpus == 1) {
        ucs_debug("span nvml: no NVLink, one GPU on the node: every peer's "
                  "device memory is on it");
    }
    return (links > 0) || (gpus == 1);
}
