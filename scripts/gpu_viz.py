"""On the GPU machine: measure the numbers the lesson-01/02 views show as the H200 reference.

    python3 scripts/gpu_viz.py [--out results/gpu]

Writes ``OUT/viz_reference.json`` (re-read bandwidth per working-set size, useful bandwidth per stride, copy
bandwidth, L2 size) and prints both tables. That the tracer runs a compiled kernel on CUDA tensors (working around
Triton 3.6's interpreter failing with numpy >= 2.4, triton#9171) is the GPU tests' to show (tests/viz/test_gpu.py).
"""

from __future__ import annotations

import argparse
import pathlib
import sys

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


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "results" / "gpu"))
    measure(pathlib.Path(ap.parse_args().out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
