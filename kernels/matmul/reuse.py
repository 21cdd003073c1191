"""How often a tiled matmul loads each input element, and the arithmetic intensity that follows.

Lesson 03 uses :func:`reuse` to pick tile sizes: intensity grows with BLOCK_M and BLOCK_N, while BLOCK_K only
sets the on-chip footprint of one K step.
"""

from dataclasses import dataclass

__all__ = ["Reuse", "reuse"]


@dataclass(frozen=True)
class Reuse:
    a_loads: int  # times each element of a is fetched: one per tile column
    b_loads: int  # times each element of b is fetched: one per tile row
    bytes: int  # bytes fetched (a, b) plus written (C)
    flops: int  # 2·M·N·K
    intensity: float  # FLOP per byte fetched or written
    loads_per_element: float  # average fetches per input element
    sram_bytes: int  # one K step's a and b tiles on chip

    def __str__(self) -> str:
        return (f"a loaded {self.a_loads}x, b loaded {self.b_loads}x, {self.bytes / 2**20:.1f} MiB moved, "
                f"{self.intensity:.1f} FLOP/byte, {self.sram_bytes // 1024} KiB of tiles per K step")


def reuse(BLOCK_M: int, BLOCK_N: int, BLOCK_K: int, M: int, N: int, K: int, itemsize: int = 2) -> Reuse:
    """Loads per element and arithmetic intensity of ``[M, K] @ [K, N]`` in ``BLOCK_M×BLOCK_N`` tiles.

    ``BLOCK_M = 1`` describes the naive kernel (one row of C per program). Counts assume no cache hits, so they
    are the traffic the tiling alone guarantees; L2 can only lower it.
    """
    for name, value in dict(BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, M=M, N=N, K=K).items():
        if value < 1:
            raise ValueError(f"{name}={value} must be at least 1")
    a_loads = -(-N // BLOCK_N)
    b_loads = -(-M // BLOCK_M)
    nbytes = (M * K * a_loads + K * N * b_loads + M * N) * itemsize
    flops = 2 * M * N * K
    return Reuse(a_loads=a_loads, b_loads=b_loads, bytes=nbytes, flops=flops, intensity=flops / nbytes,
                 loads_per_element=(M * K * a_loads + K * N * b_loads) / (M * K + K * N),
                 sram_bytes=(BLOCK_M * BLOCK_K + BLOCK_K * BLOCK_N) * itemsize)
