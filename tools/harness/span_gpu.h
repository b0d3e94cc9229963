/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Device memory for the GPU tests, span-check and the GPU benchmarks:
 * the kinds of allocation users register (cudaMalloc, stream-ordered pool,
 * VMM of one or many physical handles), through libcuda loaded at run time,
 * so that the tools build and run (and report GPUs absent) without one.
 * CUDA does not survive fork: a process initializes it after forking.
 * With SPAN_GPU_RUNTIME=rocm, the same through HIP (hipMalloc, hipMemCreate
 * handles of POSIX fds; no stream-ordered pool, no PyTorch), for the ROCm
 * GPU test.
 */
#ifndef SPAN_GPU_H_
#define SPAN_GPU_H_

#include <ucs/memory/memory_type.h>
#include <ucs/type/status.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    SPAN_GPU_HOST,    /* not device memory: mmap */
    SPAN_GPU_MALLOC,  /* cuMemAlloc, as cudaMalloc */
    SPAN_GPU_ASYNC,   /* cuMemAllocAsync from the device's default pool */
    SPAN_GPU_VMM,     /* cuMemCreate handles (POSIX fd shareable) mapped
                         back to back into one reserved range */
    SPAN_GPU_EXTERNAL, /* device memory of another allocator of this process
                          (a PyTorch tensor), see span_gpu_external_set */
    SPAN_GPU_MALLOC_PAIR, /* two cuMemAlloc blocks back to back, of a quarter
                             and three quarters of the length (UCP's
                             memtype cache may merge them into one region) */
    SPAN_GPU_KIND_LAST
} span_gpu_kind_t;

typedef struct {
    span_gpu_kind_t kind;
    void            *ptr;
    size_t          length;
    unsigned        handles;  /* SPAN_GPU_VMM */
    size_t          reserved; /* SPAN_GPU_VMM: bytes of the range */
    void            *second;  /* SPAN_GPU_MALLOC_PAIR: the block at ptr's
                                 end */
} span_gpu_buf_t;

extern const char *span_gpu_kind_names[];

/* Whether a CUDA device can be used; a reason when not. Initializes CUDA
 * in this process, on device $SPAN_GPU_DEVICE (default 0). */
int span_gpu_init(char *reason, size_t size);

/* Whether a CUDA device can be used, asked in a child process, so that the
 * caller can still fork before it initializes CUDA */
int span_gpu_probe(char *reason, size_t size);

/* The handle size VMM allocations round to (the granularity), 0 w/o GPU */
size_t span_gpu_vmm_granularity(void);

/* length bytes; for SPAN_GPU_VMM, handles handles of length / handles bytes
 * each (a multiple of the granularity). at: ask for this address (VMM), or
 * NULL. SPAN_GPU_MALLOC_PAIR: UCS_ERR_UNSUPPORTED where the driver places
 * the second block right after the first. */
ucs_status_t span_gpu_alloc(span_gpu_kind_t kind, size_t length,
                            unsigned handles, void *at, span_gpu_buf_t *buf);
void span_gpu_free(span_gpu_buf_t *buf);

/* Hands [ptr, ptr + length) of device memory that this process got from
 * another allocator to the next SPAN_GPU_EXTERNAL allocation (of at most
 * length bytes, at no requested address); freeing it hands it back. The
 * memory stays the other allocator's: it is never freed here. */
void span_gpu_external_set(void *ptr, size_t length);

/* Synchronous copy between any two of host and device memory */
ucs_status_t span_gpu_copy(void *dst, const void *src, size_t length);

/* UCS_MEMORY_TYPE_CUDA, or ROCM where SPAN_GPU_RUNTIME=rocm */
ucs_memory_type_t span_gpu_memory_type(void);

#ifdef __cplusplus
}
#endif

#endif
