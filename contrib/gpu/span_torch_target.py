#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""The target process of the GPU suite's PyTorch cases.

Its memory is one tensor of PyTorch's caching allocator with
expandable_segments:True (one VMM physical allocation per 20 MiB page on
an H100), allocated first so that it starts a segment. The test's
harness, loaded from libspan_pair.so, serves it to the initiator: the
tensor is what UCP registers and packs, what the peer writes and reads,
and what is checked byte by byte. span_gpu_test starts this process
(span_pair_start_exec) where SPAN_GPU_TORCH_TARGET names it, as
contrib/gpu/gpu_suite.sh does where torch imports:
    span_torch_target.py LIBSPAN_PAIR MIB
"""
import ctypes
import os
import sys

os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
import torch  # noqa: E402


def main():
    lib = ctypes.CDLL(sys.argv[1])
    length = int(sys.argv[2]) << 20
    # the suite's second pass puts the target on GPU 1
    device = "cuda:" + os.environ.get("SPAN_PAIR_TARGET_GPU", "0")
    tensor = torch.empty(length, dtype=torch.uint8, device=device)
    torch.cuda.synchronize()
    lib.span_gpu_external_set(ctypes.c_void_p(tensor.data_ptr()),
                              ctypes.c_size_t(length))
    rc = lib.span_pair_target_main()
    del tensor
    return rc


if __name__ == "__main__":
    sys.exit(main())
