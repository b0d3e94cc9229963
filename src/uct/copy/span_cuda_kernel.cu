/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The copy kernels of CUDA batches (span_cuda_kernel.h): thread block b
 * copies piece b, by 16 bytes a thread where both ends and the length
 * allow, else by bytes. One kernel per size of launch: their parameters
 * differ only in how many pieces they hold.
 */
#include "span_cuda_kernel.h"

template <unsigned N> struct span_cuda_kernel_params {
    uint64_t                 count;
    span_cuda_kernel_piece_t piece[N];
};

template <unsigned N>
__device__ static void
span_cuda_kernel_run(const span_cuda_kernel_params<N> &args)
{
    const span_cuda_kernel_piece_t piece = args.piece[blockIdx.x];
    uint64_t i;

    if (((piece.dst | piece.src | piece.length) & 15) == 0) {
        const int4 *src = (const int4*)piece.src;
        int4 *dst       = (int4*)piece.dst;

        for (i = threadIdx.x; i < piece.length / 16; i += blockDim.x) {
            dst[i] = src[i];
        }
    } else {
        const unsigned char *src = (const unsigned char*)piece.src;
        unsigned char *dst       = (unsigned char*)piece.dst;

        for (i = threadIdx.x; i < piece.length; i += blockDim.x) {
            dst[i] = src[i];
        }
    }
}

#define SPAN_CUDA_KERNEL_DEFINE(_n) \
    extern "C" __global__ void __launch_bounds__(SPAN_CUDA_KERNEL_THREADS) \
    span_cuda_kernel_copy_##_n(const span_cuda_kernel_params<_n> args) \
    { \
        span_cuda_kernel_run(args); \
    }

SPAN_CUDA_KERNEL_DEFINE(16)
SPAN_CUDA_KERNEL_DEFINE(64)
SPAN_CUDA_KERNEL_DEFINE(256)
SPAN_CUDA_KERNEL_DEFINE(1024)
