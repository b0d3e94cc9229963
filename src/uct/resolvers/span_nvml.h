/*
 * NVLinks of the GPUs, as NVML reports them: the twin of cuda_ipc decides
 * from this whether it offers get zero-copy.
 */
#ifndef SPAN_NVML_H_
#define SPAN_NVML_H_

/* Active NVLinks of GPU 0 (cuda_ipc assumes a uniform node, and so does
 * the twin); 0 where NVML or the driver is missing. Asked once a process */
unsigned span_nvml_nvlinks(void);

#endif
