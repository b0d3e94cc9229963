#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""How span resolves a real PyTorch tensor under expandable_segments:True.

PyTorch maps an expandable segment as one VMM physical allocation per
20 MiB page (H100), so a large tensor spans many handles while
cuMemGetAddressRange at its address names one. The resolver must return
every handle the tensor touches. Usage (GPU machine with torch):
    contrib/gpu/span_torch_check.py .gpu/bin/libspan_resolve.so
"""
import ctypes
import os
import sys

os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
import torch  # noqa: E402

MiB = 1 << 20


def resolve(lib, ptr, length):
    out = (ctypes.c_uint64 * 4)()
    status = lib.span_resolve(ctypes.c_uint64(ptr), ctypes.c_uint64(length),
                              out)
    return status, list(out)


def main():
    lib = ctypes.CDLL(sys.argv[1])
    lib.span_resolve.restype = ctypes.c_int
    torch.cuda.init()
    print("torch", torch.__version__, "allocator",
          os.environ["PYTORCH_CUDA_ALLOC_CONF"])
    small = torch.empty(50 * MiB, dtype=torch.uint8, device="cuda")
    tensor = torch.empty(300 * MiB, dtype=torch.uint8, device="cuda")
    failed = 0
    for name, t, off, length in (
            ("50 MiB tensor", small, 0, small.numel()),
            ("300 MiB tensor", tensor, 0, tensor.numel()),
            ("its second half", tensor, 150 * MiB, 150 * MiB),
            ("8 bytes at +100 MiB", tensor, 100 * MiB, 8)):
        ptr = t.data_ptr() + off
        status, (base, ext_len, unit, units) = resolve(lib, ptr, length)
        covers = status == 0 and base <= ptr and ptr + length <= base + ext_len
        failed |= not covers
        print(f"| {name:20} | 0x{ptr:x} +{length} | status {status} | "
              f"{units} units of {unit} bytes from 0x{base:x} +{ext_len} | "
              f"covers it: {covers} |")
    return failed


if __name__ == "__main__":
    sys.exit(main())
