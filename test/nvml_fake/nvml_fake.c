/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A scripted NVML for the tests of span's NVLink probe (test_nvml.cc, which
 * ctest runs as nvml_probe and nvml_fork with this library first on
 * LD_LIBRARY_PATH): GPU 0 has 18 NVLinks (SPAN_FAKE_NVML_LINKS), all
 * active, the node 8 GPUs (SPAN_FAKE_NVML_GPUS), and the first
 * SPAN_FAKE_NVML_FAILURES asks for its handle fail, each taking
 * SPAN_FAKE_NVML_DELAY_US. Only the calls span makes, with NVML's ABI,
 * and those UCX's cuda module needs to load, unsupported (the releases
 * leg, with test/cuda_fake).
 */
#include "iface/span_nvml.h"

#include <stdlib.h>
#include <unistd.h>

#define FAKE_NVML_ERROR_UNKNOWN 999
#define FAKE_NVML_LINKS         18

/* asks for GPU 0's handle so far: the tests read it through dlsym */
int span_fake_nvml_calls;

static int fake_env(const char *name)
{
    const char *value = getenv(name);

    return (value != NULL) ? atoi(value) : 0;
}

int nvmlInit_v2(void)
{
    return 0;
}

int nvmlShutdown(void)
{
    return 0;
}

const char *nvmlErrorString(int result)
{
    return (result == 0) ? "success" : "scripted failure";
}

int nvmlDeviceGetHandleByIndex_v2(unsigned index, void **device)
{
    int call = __atomic_add_fetch(&span_fake_nvml_calls, 1, __ATOMIC_SEQ_CST);

    if ((index != 0) || (call <= fake_env("SPAN_FAKE_NVML_FAILURES"))) {
        usleep(fake_env("SPAN_FAKE_NVML_DELAY_US"));
        return FAKE_NVML_ERROR_UNKNOWN;
    }
    *device = &span_fake_nvml_calls;
    return 0;
}

/* GPU 0's NVLinks: SPAN_FAKE_NVML_LINKS where set */
static unsigned fake_links(void)
{
    return (getenv("SPAN_FAKE_NVML_LINKS") != NULL) ?
           (unsigned)fake_env("SPAN_FAKE_NVML_LINKS") : FAKE_NVML_LINKS;
}

int nvmlDeviceGetFieldValues(void *device, int count,
                             span_nvml_field_value_t *values)
{
    int i;

    for (i = 0; i < count; ++i) {
        values[i].nvml_return = 0;
        values[i].value_type  = 1; /* NVML_VALUE_TYPE_UNSIGNED_INT */
        values[i].value.ui    = fake_links();
    }
    return 0;
}

int nvmlDeviceGetNvLinkState(void *device, unsigned link, int *state)
{
    *state = 1; /* NVML_FEATURE_ENABLED */
    return (link < fake_links()) ? 0 : FAKE_NVML_ERROR_UNKNOWN;
}

/* The node's GPUs: SPAN_FAKE_NVML_GPUS, else 8 */
int nvmlDeviceGetCount_v2(unsigned *count)
{
    *count = (getenv("SPAN_FAKE_NVML_GPUS") != NULL) ?
             (unsigned)fake_env("SPAN_FAKE_NVML_GPUS") : 8;
    return 0;
}

#define FAKE_NVML_ERROR_NOT_SUPPORTED 3

int nvmlDeviceGetGpuFabricInfo(void *device, void *info)
{
    return FAKE_NVML_ERROR_NOT_SUPPORTED;
}

int nvmlDeviceGetNvLinkRemotePciInfo_v2(void *device, unsigned link,
                                        void *pci)
{
    return FAKE_NVML_ERROR_NOT_SUPPORTED;
}
