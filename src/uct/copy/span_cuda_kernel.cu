/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The copy kernel of CUDA batches (span_cuda_kernel.h): thread block b
 * copies piece b, by 16 bytes a thread where both ends and the length
 * allow, else by bytes. Each thread loads SPAN_CUDA_KERNEL_UNROLL vectors
 * before it stores them: over NVLink one load in flight per thread leaves
 * the link idle for most of a load's latency.
 */
#include "span_cuda_kernel.h"

#define SPAN_CUDA_KERNEL_UNROLL 4

template <typename T>
__device__ static void span_cuda_kernel_move(T *dst, const T *src, uint64_t n)
{
    const uint64_t step = (uint64_t)blockDim.x * SPAN_CUDA_KERNEL_UNROLL;
    T v[SPAN_CUDA_KERNEL_UNROLL];
    uint64_t i;
    int k;

    for (i = threadIdx.x; i < n; i += step) {
#pragma unroll
        for (k = 0; k < SPAN_CUDA_KERNEL_UNROLL; ++k) {
            if (i + (k * blockDim.x) < n) {
                v[k] = src[i + (k * blockDim.x)];
            }
        }
#pragma unroll
        for (k = 0; k < SPAN_CUDA_KERNEL_UNROLL; ++k) {
            if (i + (k * blockDim.x) < n) {
                dst[i + (k * blockDim.x)] = v[k];
            }
        }
    }
}

extern "C" __global__ void __launch_bounds__(SPAN_CUDA_KERNEL_THREADS)
span_cuda_kernel_copy(const span_cuda_kernel_args_t args)
{
    const span_cuda_kernel_piece_t piece = args.piece[blockIdx.x];

    if (((piece.dst | piece.src | piece.length) & 15) == 0) {
        span_cuda_kernel_move((int4*)piece.dst, (const int4*)piece.src,
                              piece.length / 16);
    } else {
        span_cuda_kernel_move((unsigned char*)piece.dst,
                              (const unsigned char*)piece.src, piece.length);
    }
}
