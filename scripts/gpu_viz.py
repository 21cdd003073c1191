"""On the GPU machine: measure the numbers the lesson-01/02 views show as the H200 reference, and trace a compiled
matmul through the interpreter on CUDA tensors.

    python3 scripts/gpu_viz.py [--out results/gpu]

Writes ``OUT/viz_reference.json`` (re-read bandwidth per working-set size, useful bandwidth per stride, copy
bandwidth, L2 size) and prints both tables. The tracer works around Triton 3.6's interpreter failing with
numpy >= 2.4 (triton#9171); should the trace still fail for that reason and ``artifacts/wheels/numpy-2.3*.whl``
be present, the check is repeated in a child process with that wheel installed into a private directory
(nothing of the image changes).
"""

from __future__ import annotations

import argparse
import glob
import os
import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def measure(out: pathlib.Path) -> None:
    from kernels import describe, viz

    print(describe())
    rec = viz.measure.record_reference(out / "viz_reference.json")
    print(f"copy bandwidth {rec['copy_bandwidth'] / 1e12:.2f} TB/s, L2 {rec['l2_bytes'] / 2**20:.0f} MiB")
    print(f"{'working set':>14} {'re-read TB/s':>13}")
    for b, bw in zip(rec["working_set"]["bytes"], rec["working_set"]["bandwidth"]):
        print(f"{b / 2**20:>10.0f} MiB {bw / 1e12:>13.2f}")
    print(f"{'stride':>14} {'useful TB/s':>13}")
    for s, bw in zip(rec["strided"]["stride"], rec["strided"]["bandwidth"]):
        print(f"{s:>14} {bw / 1e12:>13.2f}")
    print(f"wrote {out / 'viz_reference.json'}")


def trace_check() -> int:
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        rm = tl.program_id(0) * BM + tl.arange(0, BM)
        rn = tl.program_id(1) * BN + tl.arange(0, BN)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, K, BK):
            rk = k + tl.arange(0, BK)
            a = tl.load(a_ptr + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.)
            b = tl.load(b_ptr + rk[:, None] * N + rn[None, :], mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.)
            acc += tl.dot(a, b)
        tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))

    import numpy as np

    from kernels import viz

    M, N, K = 20, 24, 40
    a, b = torch.randn(M, K, device="cuda"), torch.randn(K, N, device="cuda")
    c = torch.empty(M, N, device="cuda")
    tr = viz.trace(matmul_kernel, a, b, c, M, N, K, BM=16, BN=16, BK=16, grid=(2, 2))
    print(tr)
    want = {(i, k) for i in range(16, 20) for k in range(32, 40)}
    ok = (tr.steps((1, 1)) == 3 and tr.elements("a_ptr", "load", pid=(1, 0), step=2, coords=True) == want
          and torch.allclose(c, a @ b, rtol=1e-4, atol=1e-4))
    print(f"trace of a compiled-mode matmul on CUDA tensors, numpy {np.__version__}: {'PASS' if ok else 'FAIL'}")
    tile = viz.matmul_tile_explorer()
    print("tile explorer (package kernel, interpreter on CPU copies):", tile.caption.splitlines()[0][:160])
    return 0 if ok else 1


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "results" / "gpu"))
    ap.add_argument("--trace-only", action="store_true")
    args = ap.parse_args()
    import numpy as np

    if not args.trace_only:
        measure(pathlib.Path(args.out))
    try:
        return trace_check()
    except RuntimeError as e:
        if "numpy" not in str(e) or args.trace_only:
            raise
        print(f"trace failed with numpy {np.__version__}: {e}")
    wheels = sorted(glob.glob(str(ROOT / "artifacts" / "wheels" / "numpy-2.3*.whl")))
    if not wheels:
        print(f"numpy {np.__version__} is too new for Triton 3.6's interpreter and no numpy 2.3 wheel is in "
              "artifacts/wheels/: trace check skipped")
        return 0
    target = tempfile.mkdtemp(prefix="viz-numpy-")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--target", target,
                    wheels[-1]], check=True)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([target, str(ROOT), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, __file__, "--trace-only"], env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
