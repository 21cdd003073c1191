"""Can the grader's sandbox compile and launch a Triton kernel on this machine? Starts the grader's probe (the
templates, one worker of each kind, a warm-up kernel in a forked worker) and, when that fails, runs the same
warm-up in the same bubblewrap sandbox without the fork, so the two ways can be told apart. Prints what each
printed; exit status 0 when the probe passes."""

import json
import subprocess
import sys

from grader.grade import Grader, Settings
from grader.sandbox import SandboxConfig, SetupError, bwrap_args

WARM = ("import torch, triton; from kernels.memory.copy import copy_memory; "
        "x = torch.ones(4096, device='cuda'); copy_memory(x); torch.cuda.synchronize(); print('warm-up kernel ran')")


def main() -> int:
    try:
        g = Grader(Settings())
    except SetupError as e:
        print(f"probe failed: {e}")
    else:
        print(f"probe passed ({g.isolation})")
        g.sandbox.close()
        return 0
    cfg = SandboxConfig(mode="gpu")
    args = bwrap_args(cfg, "kernel", "gpu") + [sys.executable, "-c", WARM]
    print("the same warm-up in the sandbox, unforked, as root:")
    r = subprocess.run(args, capture_output=True, text=True, timeout=240)
    print(f"exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}")
    print("bwrap arguments:", json.dumps(args[:-3]))
    cfg.close()
    return 1


if __name__ == "__main__":
    sys.exit(main())
