/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The copy kernel of CUDA batches (span_cuda_kernel.cu, built with nvcc
 * where configure found it, and loaded through the driver by
 * span_cuda_copy.c): one launch moves many small pieces, each by one
 * thread block, where the copy engine takes microseconds per copy. The
 * pieces travel in the launch's parameters, which the driver copies at
 * the launch: nothing of the batch must outlive it.
 */
#ifndef SPAN_CUDA_KERNEL_H_
#define SPAN_CUDA_KERNEL_H_

#include <stdint.h>

/* Pieces per launch: the parameters stay under the 32 KiB a launch takes
 * (CUDA 12.1 and later, compute capability 7.0 and later) */
#define SPAN_CUDA_KERNEL_PIECES  1024
/* The driver copies a launch's whole parameters, 24 KiB for 1024 pieces,
 * at every launch: kernels of 16, 64, 256 and 1024 pieces (each 4 times
 * the one before), and a launch takes the smallest that holds its batch */
#define SPAN_CUDA_KERNEL_SIZES   4
#define SPAN_CUDA_KERNEL_MIN     16
/* The most bytes one thread block copies */
#define SPAN_CUDA_KERNEL_SEGMENT 65536
/* Its threads */
#define SPAN_CUDA_KERNEL_THREADS 512
/* Followed by the kernel's pieces: span_cuda_kernel_copy_16 */
#define SPAN_CUDA_KERNEL_NAME    "span_cuda_kernel_copy_"

typedef struct span_cuda_kernel_piece {
    uint64_t dst;
    uint64_t src;
    uint64_t length; /* at most SPAN_CUDA_KERNEL_SEGMENT */
} span_cuda_kernel_piece_t;

/* The parameters of the largest kernel; a smaller one's are their first
 * bytes */
typedef struct span_cuda_kernel_args {
    uint64_t                 count; /* pieces, one per thread block */
    span_cuda_kernel_piece_t piece[SPAN_CUDA_KERNEL_PIECES];
} span_cuda_kernel_args_t;

#ifndef __CUDACC__
/* The kernel's image for every architecture nvcc built (a fat binary);
 * absent where span was built without nvcc */
extern const unsigned char span_cuda_kernel_image[];
#endif

#endif
