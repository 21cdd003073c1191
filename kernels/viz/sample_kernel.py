"""A tiled fp16 matmul compiled ahead of time for sm_90 (no GPU needed); run as a module it prints the PTX.

It runs in a compile process of its own (:func:`kernels.viz.ptx.sample_ptx`:
``kernels.compile.run_compiled("kernels.viz.sample_kernel", [ARCH])``), so that ``@triton.jit`` makes a real
``JITFunction`` even where the workbook runs kernels in the interpreter; a plain ``python -m`` would import
:mod:`kernels.viz`, and so Triton, in interpreter mode first.
"""

import sys

import triton
import triton.language as tl

from kernels.compile import compile_for


@triton.jit
def sample_matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # [BM]
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)  # [BN]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        offs_k = k + tl.arange(0, BLOCK_K)  # [BK]
        a = tl.load(a_ptr + offs_m[:, None] * stride_am + offs_k[None, :],
                    mask=(offs_m[:, None] < M) & (offs_k[None, :] < K), other=0.0)  # [BM, BK]
        b = tl.load(b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :],
                    mask=(offs_k[:, None] < K) & (offs_n[None, :] < N), other=0.0)  # [BK, BN]
        acc += tl.dot(a, b)
    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :], acc.to(tl.float16),
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def compile_sample(arch: int = 90):
    sig = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "M": "i32", "N": "i32", "K": "i32",
           "stride_am": "i32", "stride_bk": "i32", "stride_cm": "i32",
           "BLOCK_M": "constexpr", "BLOCK_N": "constexpr", "BLOCK_K": "constexpr"}
    return compile_for(sample_matmul_kernel, sig, {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64}, arch=arch)


if __name__ == "__main__":
    print(compile_sample(int(sys.argv[1]) if len(sys.argv) > 1 else 90).asm["ptx"])
