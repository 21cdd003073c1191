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
# torch's allocator opens NVML on an out-of-memory error; in the sandbox its init failed (an internal assert in
# place of the OOM message): NVML's own return code, as root and as a worker's uid, and what it reads
NVML = ("import ctypes, os, glob\n"
        "print('driver proc:', os.path.isdir('/proc/driver/nvidia'), 'nodes:', "
        "[(d, oct(os.stat(d).st_mode & 0o777)) for d in sorted(glob.glob('/dev/nvidia*'))])\n"
        "def init(who):\n"
        "    try:\n"
        "        lib = ctypes.CDLL('libnvidia-ml.so.1')\n"
        "    except OSError as e:\n"
        "        print(who, 'cannot open libnvidia-ml.so.1:', e); return\n"
        "    rc = lib.nvmlInit_v2(); lib.nvmlErrorString.restype = ctypes.c_char_p\n"
        "    print(who, 'nvmlInit_v2 ->', rc, lib.nvmlErrorString(rc).decode())\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    os.setgid(61000); os.setuid(61000); init('uid 61000:'); os._exit(0)\n"
        "os.waitpid(pid, 0); init('root:')\n")


def main() -> int:
    try:
        g = Grader(Settings())
    except SetupError as e:
        print(f"probe failed: {e}")
    else:
        print(f"probe passed ({g.isolation})")
        g.sandbox.close()
        cfg = SandboxConfig(mode="gpu")
        r = subprocess.run(bwrap_args(cfg, "kernel", "gpu") + [sys.executable, "-c", NVML], capture_output=True,
                           text=True, timeout=60)
        print(f"NVML in the sandbox (exit {r.returncode}):\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
        cfg.close()
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
