/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The copy kernel of CUDA batches (span_cuda_kernel.h): thread block b
 * copies piece b, by 16 bytes a thread where both ends and the length
 * allow, else by bytes.
 */
#include "span_cuda_kernel.h"

extern "C" __global__ void __launch_bounds__(SPAN_CUDA_KERNEL_THREADS)
span_cuda_kernel_copy(const span_cuda_kernel_args_t args)
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
