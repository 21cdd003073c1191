# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown] nbgrader={"grade": false, "grade_id": "title", "locked": true, "schema_version": 3, "solution": false}
# # 06 · Look inside: read the compiler, profile, autotune
#
# The lessons so far told you what the compiler and the hardware do: tiles land in shared memory, loads are 16
# bytes wide when the data is aligned, an accumulator lives in registers. This lesson lets you look. You will
# compile a kernel for an H100/H200 (`sm_90`) without owning one and read every stage the compiler produces, find
# a planted performance bug from the instructions alone, fix it, profile it on the GPU, and let the autotuner choose
# the configuration, knowing why the winner wins.
#
# **You will learn**
# - the compiler's stages: Triton IR (TTIR), Triton GPU IR with its layouts (TTGIR), LLVM IR, PTX and SASS, and
#   how to read registers, spills and shared memory off a compile;
# - what changes with `BLOCK_*`, `num_warps`, `num_stages`, with sizes that are not multiples of 16, and with what
#   the JIT is allowed to assume about its arguments (specialisation);
# - to find a slow kernel's culprit in its PTX or SASS, and to fix it;
# - to profile on the GPU with Triton's own profiler (proton) and Nsight Compute (`ncu`): DRAM and L2 throughput,
#   occupancy, stall reasons;
# - `triton.autotune`: what it measures, what it costs on the first call, and how to check its winner.

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false}
import kernels
from kernels.checks import guard_launches

guard_launches()  # in the interpreter, a load or store out of bounds stops with an error that names it
print(kernels.describe())

# %% nbgrader={"grade": false, "grade_id": "imports", "locked": true, "schema_version": 3, "solution": false}
import inspect
import json
import pathlib
import time

import torch
import triton
import triton.language as tl

from kernels.checks import check
from kernels.device import DEVICE, ON_GPU
from kernels.profile import compiler, measure, planted
from kernels.testing import assert_close, randn, tolerance

ROOT = pathlib.Path(kernels.__file__).resolve().parent.parent
OUT = ROOT / "artifacts" / "06_profile_compile_autotune"
OUT.mkdir(parents=True, exist_ok=True)
CONFIG = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=8, num_stages=3)  # the lesson's Hopper tile

# %% [markdown] nbgrader={"grade": false, "grade_id": "kernel-text", "locked": true, "schema_version": 3, "solution": false}
# ## The kernel: a matmul you already know
#
# The package's `kernels.profile.planted` holds a tiled matmul in the shape of lesson 03 (one `[BLOCK_M, BLOCK_N]`
# tile of `C` per program, a loop over `K` in steps of `BLOCK_K`, `tl.dot` into an fp32 accumulator, masks on
# every edge) in two copies: `planted_matmul`, which carries a **planted performance bug**, and `fixed_matmul`. Both
# compute the same numbers. The cell prints the planted one's source and checks both against a float64
# reference.

# %% nbgrader={"grade": false, "grade_id": "kernel-show", "locked": true, "schema_version": 3, "solution": false}
print(inspect.getsource(planted._planted_matmul_kernel.fn))
a, b = randn(100, 70, dtype=torch.float16), randn(70, 90, dtype=torch.float16)
ref = a.double() @ b.double()
for version in (planted.planted_matmul, planted.fixed_matmul):
    err = assert_close(version.__name__, ref, version(a, b).double(), tolerance(torch.float16) * 4)
    print(f"{version.__name__}: relative error {err:.1e}")

# %% [markdown] nbgrader={"grade": false, "grade_id": "stages-text", "locked": true, "schema_version": 3, "solution": false}
# ## Read the compiler
#
# `kernel[grid](...)` compiles on first call, in five steps, each a text you can read:
#
# 1. **TTIR**, Triton IR: your kernel in MLIR, operations on whole blocks (`tt.load` of a `tensor<128x64xf16>`,
#    `tt.dot`), no threads yet.
# 2. **TTGIR**, Triton GPU IR: the same program with a **layout** on every block: which thread holds which
#    elements. `#blocked` layouts say how a block is spread over threads for loads and stores, `#shared` where it
#    sits in shared memory (with the swizzle that avoids bank conflicts), `#nvidia_mma` the operand layout of the
#    tensor cores. This is where the software pipeline appears: `num_stages` buffers in shared memory, filled by
#    asynchronous copies (`ttg.async_copy_global_to_local`) several iterations ahead.
# 3. **LLIR**, LLVM IR: per thread, scalar code with NVVM intrinsics.
# 4. **PTX**, NVIDIA's virtual assembly (lesson 05): `ld.global.v4.b32` loads 16 bytes per thread,
#    `cp.async.cg.shared.global` copies 16 bytes from global to shared memory without passing through registers,
#    `wgmma.mma_async` is a Hopper warpgroup matrix multiply.
# 5. **SASS**, the machine code `ptxas` makes of the PTX, read back with `cuobjdump -sass` (it ships with Triton):
#    `LDG.E.128`, `LDGSTS.E.BYPASS.128` (the `cp.async`), `HGMMA`. Here the **registers** are allocated:
#    `ptxas -v` reports registers per thread and bytes **spilled** to local memory (`STL`/`LDL`), which is slow.
#
# `compiler.compile_kernel(kernel, args, num_warps=..., num_stages=..., BLOCK_M=...)` does all of it ahead of
# time for `sm_90`, no GPU needed, with the package's AOT helper: it reads the signature off the launch's
# arguments, and assumes what Triton's JIT would (a pointer 16-byte aligned, an int equal to 1 or a multiple of 16).
# Under the interpreter, compiling and interpreting cannot share a process, so it runs in a subprocess (a few
# seconds). The arguments here describe a 4096³ fp16 launch; no memory is allocated.

# %% nbgrader={"grade": false, "grade_id": "stages", "locked": true, "schema_version": 3, "solution": false}
PTR = {"ptr": "fp16", "aligned": True}  # what a 16-byte-aligned fp16 tensor argument looks like to the compiler


def launch_args(M=4096, N=4096, K=4096):
    """The runtime arguments of a row-major [M, K] @ [K, N] launch: pointers, sizes, strides."""
    return [PTR, PTR, PTR, M, N, K, K, 1, N, 1, N, 1]


variants = {
    "fixed": dict(kernel=planted._fixed_matmul_kernel, args=launch_args(), **CONFIG),
    "planted": dict(kernel=planted._planted_matmul_kernel, args=launch_args(), **CONFIG),
    "fixed, 4 warps": dict(kernel=planted._fixed_matmul_kernel, args=launch_args(), **dict(CONFIG, num_warps=4)),
    "fixed, 1 stage": dict(kernel=planted._fixed_matmul_kernel, args=launch_args(), **dict(CONFIG, num_stages=1)),
    "fixed, K = 4100": dict(kernel=planted._fixed_matmul_kernel, args=launch_args(K=4100), **CONFIG),
    "fixed, nothing assumed": dict(kernel=planted._fixed_matmul_kernel, args=launch_args(), specialize=False,
                                   **CONFIG),
}
start = time.perf_counter()
compiled = dict(zip(variants, compiler.compile_many(list(variants.values()))))
print(f"{len(compiled)} compiles for sm_90 in {time.perf_counter() - start:.1f} s")
fixed = compiled["fixed"]
print(fixed.summary())
for stage in compiler.STAGES:
    print(f"  {stage:5s} {len(fixed.stages[stage].splitlines()):6d} lines")

# %% nbgrader={"grade": false, "grade_id": "stages-read", "locked": true, "schema_version": 3, "solution": false}
def grep(text, *words, limit=4):
    """The first lines of ``text`` containing any of ``words``, squeezed."""
    hits = [" ".join(ln.split()) for ln in text.splitlines() if any(w in ln for w in words)]
    return "\n".join(f"    {h[:150]}" for h in hits[:limit]) or "    (none)"


print("TTIR, the loads:\n" + grep(fixed.stages["ttir"], "tt.load"))
print("TTGIR, the layouts:\n" + grep(fixed.stages["ttgir"], "#blocked", "#shared", "#mma", limit=5))
print("TTGIR, the pipeline:\n" + grep(fixed.stages["ttgir"], "async_copy_global_to_local", "local_alloc", limit=3))
print("PTX, memory:\n" + grep(fixed.stages["ptx"], "cp.async.cg", "st.global", limit=3))
print("SASS, memory:\n" + grep(fixed.stages["sass"], "LDGSTS", "STG", limit=3))
print("\nmemory instructions in the PTX, per thread:")
for row in fixed.table():
    print(f"    {row['count']:4d} x {row['kind']:11s} {row['space']:7s} {row['bits']:4d} bits  {row['opcodes'][0]}")

# %% [markdown] nbgrader={"grade": false, "grade_id": "changes-text", "locked": true, "schema_version": 3, "solution": false}
# ### What changes with the configuration
#
# The table compares the compiles. Read it with what you know:
#
# - **`num_warps`** changes threads, not the tiles: the `128 × 128` fp32 accumulator is 16384 values, 64 per
#   thread with 8 warps and 128 with 4; registers per thread follow (the rest hold addresses, tiles in flight,
#   loop state). At 255 registers a thread is full and `ptxas` spills.
# - **`num_stages`** changes shared memory: each stage is one buffer for an `A` tile and one for a `B` tile,
#   filled ahead of time. One stage means no pipelining: loads go through registers (`ld.global.v4`) and wait.
# - **a size that is not a multiple of 16** (`K = 4100`): the JIT no longer knows a row of `A` starts 16-byte
#   aligned (the row stride is `K`), so `A` comes in one element at a time (`ld.global.b16`), while `B` keeps its
#   16-byte copies. Masks cost nothing when the compiler can prove they are constant over 8 elements; `K - k < 16`
#   can no longer be proved.
# - **nothing assumed** (`specialize=False`, as an export for every size in lesson 05 compiles): every load is one
#   element wide.

# %% nbgrader={"grade": false, "grade_id": "changes", "locked": true, "schema_version": 3, "solution": false}
def loads(c):
    """The global loads and async copies of a compile, as 'count x bits'."""
    rows = [r for r in c.table() if r["space"] == "global" and r["kind"] != "store"]
    return ", ".join(f"{r['count']} x {r['bits']}-bit {r['kind']}" for r in rows)


print(f"{'':24s} {'regs':>5s} {'spill':>6s} {'shared B':>9s}  global loads per thread")
for name, c in compiled.items():
    print(f"{name:24s} {c.registers!s:>5s} {c.spills!s:>6s} {c.shared:9d}  {loads(c)}")

# %% [markdown] nbgrader={"grade": false, "grade_id": "widget-text", "locked": true, "schema_version": 3, "solution": false}
# The IR explorer shows two compiles side by side: on the left their memory instructions by kind, space and
# width; on the right one stage as A, as B, or only the **lines that change** between them (registers and labels
# renamed away). It starts on the planted kernel (A) against the fixed one (B), PTX, memory instructions only.

# %% nbgrader={"grade": false, "grade_id": "widget", "locked": true, "schema_version": 3, "solution": false} tags=["widget"]
from kernels.profile import compiler, planted
from kernels.viz import ir_explorer

ptr = {"ptr": "fp16", "aligned": True}
pair = compiler.compile_many([dict(kernel=k, args=[ptr, ptr, ptr, 4096, 4096, 4096, 4096, 1, 4096, 1, 4096, 1],
                                   BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=8, num_stages=3)
                              for k in (planted._planted_matmul_kernel, planted._fixed_matmul_kernel)])
ir_explorer(*pair)

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex1-text", "locked": true, "schema_version": 3, "solution": false}
# ## Exercise 1 · Predict the shared memory (1 + 2 points)
#
# Write `predict_shared(BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages)`: the bytes of shared memory the fixed
# matmul is compiled with for `sm_90`, fp16, at that configuration (`compiled.shared`: dynamic shared memory per
# program). The check compiles the kernel at the configurations it draws and compares: your formula against the
# compiler. Use the table above and the TTGIR's `ttg.local_alloc` lines: what is stored, how many copies, how many
# bytes each; does `num_warps` matter? (No `triton` and no `kernels` inside: a prediction, not a compile.)

# %% nbgrader={"grade": false, "grade_id": "ex1-predict", "locked": false, "schema_version": 3, "solution": true}
def predict_shared(BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages):
    ### BEGIN SOLUTION
    return num_stages * (BLOCK_M * BLOCK_K + BLOCK_K * BLOCK_N) * 2
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "ex1-compare", "locked": true, "schema_version": 3, "solution": false}
for name in ("fixed", "fixed, 4 warps", "fixed, 1 stage"):
    cfg = compiled[name].config
    try:
        guess = predict_shared(*(cfg[k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps", "num_stages")))
    except NotImplementedError:
        guess = "write predict_shared first"
    print(f"{name:16s} compiler {compiled[name].shared:7d} B   predicted {guess}")

# %% nbgrader={"grade": true, "grade_id": "ex1-check", "locked": true, "points": 1, "schema_version": 3, "solution": false}
check("06_profile_compile_autotune.predict_shared", predict_shared)

# %% nbgrader={"grade": true, "grade_id": "ex1-hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false}
# Hidden tests (other shapes and dtypes, fresh seeds) run here when your notebook is graded.
### BEGIN HIDDEN TESTS
check("06_profile_compile_autotune.predict_shared", predict_shared, hidden=True)
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex2-text", "locked": true, "schema_version": 3, "solution": false}
# ## Exercise 2 · Find the planted bug (2 points)
#
# On the H200, `planted_matmul` takes several times longer than `fixed_matmul` at 4096³ (the profile below
# measures it). Their bodies are the same line for line. Compare the two compiles (the explorer, or the cells
# below) and find the instruction that makes the planted kernel slow: the one that does the planted kernel's work
# in the loop over `K`, and that the fixed kernel does not have. Set `SLOW_INSTRUCTION` to its mnemonic as the
# PTX writes it (`"ld.global.v4.b32"`) or as the SASS does (`"LDG.E.128"`). The check compiles both kernels for
# `sm_90` and tells you if your instruction is not in the planted kernel, is in both, or is not what the loop
# waits on.

# %% nbgrader={"grade": false, "grade_id": "ex2-look", "locked": true, "schema_version": 3, "solution": false}
bad = compiled["planted"]
for stage in ("ptx", "sass"):
    only = {op: n for op, n in bad.opcodes(stage).items() if op not in fixed.opcodes(stage)}
    top = sorted(only.items(), key=lambda kv: -kv[1])[:8]
    print(f"{stage.upper()} mnemonics only in the planted kernel: " + ", ".join(f"{op} x{n}" for op, n in top))
print(f"planted: {bad.summary()}")

# %% nbgrader={"grade": false, "grade_id": "ex2-answer", "locked": false, "schema_version": 3, "solution": true}
SLOW_INSTRUCTION = None  # until your answer below sets it (the check then says it is missing)
### BEGIN SOLUTION
# The loads of the A and B tiles: one fp16 element per instruction (64 per thread per iteration), into registers,
# then stored to shared memory one element at a time; the fixed kernel copies 16 bytes per cp.async, pipelined.
SLOW_INSTRUCTION = "ld.global.b16"
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "ex2-check", "locked": true, "points": 2, "schema_version": 3, "solution": false}
check("06_profile_compile_autotune.slow_instruction", SLOW_INSTRUCTION)

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex3-text", "locked": true, "schema_version": 3, "solution": false}
# ## Exercise 3 · Fix it (2 + 1 points, and 2 for speed on a GPU)
#
# The instruction tells you *what* the compiler did; the kernel's source tells you *why*. Look at the planted
# kernel's decorator: it asks Triton not to specialise on its sizes and strides, so the compiler may not assume
# that a row starts 16-byte aligned or that the innermost stride is 1, and it must load element by element. (The
# habit comes from kernels that see a new sequence length on every call and want one binary for all of them. Here
# it is expensive for every argument it names: an unspecialised stride hides the unit inner stride, and an
# unspecialised size hides that it is a multiple of 16, which is what lets the compiler prove that a row of `a`
# starts aligned and that the `K` mask covers whole 16-byte vectors; row K = 4100 of the compile table above shows
# the cost.)
#
# Write `fixed_matmul_kernel` with the planted kernel's signature and launch, `c = a @ b` with an fp32
# accumulator, `c` in `a`'s dtype, that the compiler can vectorise. The check runs it on partial tiles, a
# column-major `b`, fp16 and bf16; it also compiles it for `sm_90` at 4096³ fp16 with the lesson's configuration,
# as the cell below the kernel does, and refuses loads of `a` and `b` that are still one element wide (no GPU
# needed). On a GPU the speed check times it against the planted kernel there: at least **3×** faster, on fresh
# inputs; under the interpreter that part is not graded.

# %% nbgrader={"grade": false, "grade_id": "ex3-kernel", "locked": false, "schema_version": 3, "solution": true}
@triton.jit
def fixed_matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm,
                        stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    ### BEGIN SOLUTION
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)  # [BM]
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)  # [BN]
    ks = tl.arange(0, BLOCK_K)  # [BK]
    a_ptrs = a_ptr + rows[:, None] * stride_am + ks[None, :] * stride_ak  # [BM, BK]
    b_ptrs = b_ptr + ks[:, None] * stride_bk + cols[None, :] * stride_bn  # [BK, BN]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptrs, mask=(rows[:, None] < M) & (ks[None, :] < K - k), other=0.0)
        b = tl.load(b_ptrs, mask=(ks[:, None] < K - k) & (cols[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    tl.store(c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn, acc.to(c_ptr.dtype.element_ty),
             mask=(rows[:, None] < M) & (cols[None, :] < N))
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "ex3-try", "locked": true, "schema_version": 3, "solution": false}
from kernels.checks import describe_error

try:
    mine = compiler.compile_kernel(fixed_matmul_kernel, launch_args(), **CONFIG)
    print(f"yours:   {mine.summary()}\n         global loads per thread: {loads(mine)}")
    print(f"planted: global loads per thread: {loads(bad)}")
except (NotImplementedError, compiler.CompileError) as e:
    print(f"your kernel does not compile yet: {describe_error(e)}")

# %% nbgrader={"grade": true, "grade_id": "ex3-check", "locked": true, "points": 2, "schema_version": 3, "solution": false}
check("06_profile_compile_autotune.fixed", fixed_matmul_kernel)

# %% nbgrader={"grade": true, "grade_id": "ex3-hidden", "locked": true, "points": 1, "schema_version": 3, "solution": false}
# Hidden tests (other shapes and dtypes, fresh seeds) run here when your notebook is graded.
### BEGIN HIDDEN TESTS
check("06_profile_compile_autotune.fixed", fixed_matmul_kernel, hidden=True)
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "ex3-speed", "locked": true, "points": 2, "schema_version": 3, "solution": false}
check("06_profile_compile_autotune.fixed_speed", fixed_matmul_kernel)

# %% [markdown] nbgrader={"grade": false, "grade_id": "profile-text", "locked": true, "schema_version": 3, "solution": false}
# ## Profile on the GPU
#
# Three tools, from cheap to thorough:
#
# - **`triton.testing.do_bench`** (`measure.time_ms`): the median of many launches with L2 flushed in between.
#   Enough to rank versions; it says *how long*, not *why*.
# - **proton** (`import triton.profiler as proton`, in the triton wheel): records every kernel launch in a region
#   with little overhead (`measure.proton_profile`), so one run of a whole model shows which kernels take the time.
# - **Nsight Compute** (`ncu`, with the CUDA toolkit): replays one launch many times to read the hardware counters:
#   achieved **DRAM and L2 throughput** against their peaks, **occupancy** (warps resident per SM against the
#   maximum, limited by registers and shared memory per program), and **stall reasons**: what the warps waited on
#   when they could not issue (`long_scoreboard`: a global load; `barrier`: a `__syncthreads`; `mio_throttle`:
#   the shared-memory queue; `math_pipe_throttle`: the tensor cores are busy, which is what you want in a matmul).
#
# The cell below times the planted and the fixed kernel, and your `fixed_matmul_kernel`, at 4096³ fp16, prints a
# table, writes it as JSON, and profiles with proton and `ncu` where they are available; where one is missing it
# says how to get it. On a GPU, read the `ncu` numbers against the compile above: the planted kernel's warps wait
# on global memory (`long_scoreboard`) at a fraction of the DRAM bandwidth, while the fixed kernel's hardly wait
# and keep its SMs busy. The same `measure.run_ncu(code, kernel_regex)` profiles any kernel, your lesson-04 kernel
# included.
#
# Without a GPU the cell can only say what is missing. This is what it printed on the H200
# (`results/gpu/notebooks/06_profile_compile_autotune.ipynb`), `ncu` trimmed to the readings that differ most:
#
# ```
# version          ms  TFLOP/s  x floor   (floor 0.139 ms)
# planted       5.465       25    39.33
# fixed         0.238      578     1.71
#
# ncu                                planted      fixed
#     DRAM throughput, % of peak        0.71      11.20
#     L2 throughput, % of peak          2.82      51.84
#     SM throughput, % of peak          6.07      72.86
#     stall: waiting on global memory  25.66       0.83
#     duration, ns                   7285952     276128
# ```

# %% nbgrader={"grade": false, "grade_id": "profile", "locked": true, "schema_version": 3, "solution": false}
for tool, info in measure.tools().items():
    print(f"{tool:7s} {'available' if info['available'] else 'missing: ' + info['how']}")

if ON_GPU:
    n = 4096
    a, b = randn(n, n, dtype=torch.float16, device=DEVICE), randn(n, n, dtype=torch.float16, device=DEVICE)
    c = torch.empty(n, n, dtype=torch.float16, device=DEVICE)
    versions = {"planted": planted._planted_matmul_kernel, "fixed": planted._fixed_matmul_kernel}
    if not inspect.getsource(fixed_matmul_kernel.fn).rstrip().endswith("NotImplementedError()"):
        versions["yours"] = fixed_matmul_kernel
    floor = measure.floor_ms(2 * 3 * n * n, 2 * n**3)
    rows = []
    for name, kern in versions.items():
        ms = measure.time_ms(lambda kern=kern: planted.launch(kern, a, b, c, **CONFIG))
        rows.append({"version": name, "ms": ms, "TFLOP/s": 2 * n**3 / ms / 1e9, "x floor": ms / floor})
    print(f"\n{'version':10s} {'ms':>8s} {'TFLOP/s':>8s} {'x floor':>8s}   (floor {floor:.3f} ms)")
    for r in rows:
        print(f"{r['version']:10s} {r['ms']:8.3f} {r['TFLOP/s']:8.0f} {r['x floor']:8.2f}")
    (OUT / "times.json").write_text(json.dumps({"size": n, "config": CONFIG, "floor_ms": floor, "rows": rows}))
    try:
        top = measure.proton_profile(lambda: planted.fixed_matmul(a, b, CONFIG), out_dir=str(OUT))
        print("\nproton:", ", ".join(f"{r['kernel']} x{r['count']} {r['time_ms']:.3f} ms" for r in top[:3]))
    except (RuntimeError, OSError, ValueError, KeyError) as e:
        print(f"proton: {type(e).__name__}: {str(e)[:300]}")
    code = ("import torch\nfrom kernels.profile import planted\n"
            "a = torch.randn(4096, 4096, device='cuda', dtype=torch.float16)\n"
            f"for f in (planted.planted_matmul, planted.fixed_matmul):\n    f(a, a, {CONFIG!r})\n"
            "torch.cuda.synchronize()\n")
    for kern in ("_planted_matmul_kernel", "_fixed_matmul_kernel"):
        try:
            got = measure.run_ncu(code, kern, timeout=120)
            print(f"\nncu, {kern}:")
            for key, label in measure.NCU_METRICS.items():
                if key in got:
                    print(f"    {label:34s} {got[key]:12.2f}")
        except (RuntimeError, OSError) as e:
            print(f"ncu: {str(e)[:300]}")
else:
    print("\nNo GPU here: the times, proton and ncu need an NVIDIA GPU (the text above shows what they printed on "
          "the H200). Everything above works the same without one, and so do the exercises, except the speed "
          "checks: exercise 3's 3x and the autotuned winner of exercise 4 are timed on a GPU only.")

# %% [markdown] nbgrader={"grade": false, "grade_id": "autotune-text", "locked": true, "schema_version": 3, "solution": false}
# ## Autotune
#
# `triton.autotune(configs=[triton.Config({...}, num_warps=..., num_stages=...), ...], key=["M", "N", "K"])`
# wraps a kernel: on the first call with new values of the `key` arguments it compiles every configuration, times
# each (`do_bench`), keeps the fastest, and launches it from then on. `tuned.best_config` is the winner,
# `tuned.configs_timings` every time it measured. It is convenient and it is not free:
#
# - **the first call pays for all of it**: every configuration is a compile (half a second to several seconds)
#   plus a hundred timed launches. flash-linear-attention tunes 48 configurations for some kernels, which is why
#   its first call can take a minute; this lesson's check caps a space at 12;
# - **the winner is a measurement**: with configurations within a few percent of each other, noise picks it. Check
#   it by timing the winner again on fresh inputs (`measure.autotune` does), and explain it: a compile tells you
#   the shared memory (how many programs fit on an SM: 228 KB each), the registers (how many warps fit: 64K
#   registers per SM), and whether anything spills;
# - a configuration that needs more shared memory than an SM has does not fail at compile time but at launch
#   (`OutOfResources`); the autotuner skips it.
#
# The scatter plots a run: each configuration's time against one of its parameters, the winner, and the floor
# (the 4096³ fp16 matmul's FLOPs at the tensor cores' peak). On a GPU it shows a measured sweep; without one it
# shows each configuration's floor from the no-cache traffic model of lesson 03, labelled as a model.
#
# The model counts bytes and nothing else: it cannot see registers. Without a GPU it ranks `128 × 256` tiles with
# 4 warps first, yet their 32768-value accumulator is 256 fp32 values per thread with 4 warps: the compile says 255
# registers and about 3 KB spilled. On the H200 those two configurations were the slowest of the twelve (1.5 ms),
# and the same tile with 8 warps and 4 stages the fastest (0.20 ms; the lesson's configuration 0.24 ms). Read the
# model next to the compile table, never alone.

# %% nbgrader={"grade": false, "grade_id": "autotune", "locked": true, "schema_version": 3, "solution": false} tags=["widget"]
import json
import pathlib

import torch

import kernels
from kernels.device import DEVICE, ON_GPU
from kernels.profile import measure, planted
from kernels.testing import randn
from kernels.viz import autotune_scatter, model_rows

demo_space = [dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, num_warps=w, num_stages=s)
              for bm, bn in ((64, 128), (128, 128), (128, 256)) for bk in (32, 64) for w, s in ((4, 3), (8, 4))]
if ON_GPU:
    n = 4096
    a, b = randn(n, n, dtype=torch.float16, device=DEVICE), randn(n, n, dtype=torch.float16, device=DEVICE)
    c = torch.empty(n, n, dtype=torch.float16, device=DEVICE)
    sweep = measure.sweep(lambda cfg: planted.launch(planted._fixed_matmul_kernel, a, b, c, **cfg), demo_space)
    out = pathlib.Path(kernels.__file__).resolve().parent.parent / "artifacts" / "06_profile_compile_autotune"
    out.mkdir(parents=True, exist_ok=True)
    (out / "sweep.json").write_text(json.dumps(sweep))
    scatter = autotune_scatter(sweep, measure.floor_ms(6 * n * n, 2 * n**3), label="measured on this GPU")
else:
    scatter = autotune_scatter(model_rows(demo_space, 4096, 4096, 4096), measure.floor_ms(6 * 4096**2, 2 * 4096**3),
                               label="model: no-cache traffic floor, no GPU here")
scatter

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex4-text", "locked": true, "schema_version": 3, "solution": false}
# ## Exercise 4 · An autotuning space (1 point, and 2 for the re-timed winner on a GPU)
#
# Set `SPACE` to the configurations to autotune the fixed matmul over at 4096³ fp16: 4 to 12 dicts with keys
# `BLOCK_M`, `BLOCK_N`, `BLOCK_K`, `num_warps`, `num_stages`, varying at least two of them. The check compiles
# every one for `sm_90` and refuses one that needs more shared memory than a program may use (227 KiB). On a GPU
# the hidden check runs `triton.autotune` over your space, times the winner again on fresh inputs and compares it
# with the lesson's configuration (`CONFIG`), timed in the same run: the winner may be at most 10% slower. A space
# of configurations that cannot win (tiny tiles, one stage) fails there. Use the compile table and the scatter:
# which tiles reuse data best, how many stages fit, how many warps the accumulator needs.

# %% nbgrader={"grade": false, "grade_id": "ex4-space", "locked": false, "schema_version": 3, "solution": true}
SPACE = None  # until your answer below sets it (the check then says it is missing)
### BEGIN SOLUTION
# 128-wide tiles reuse each loaded element 128 times (lesson 03); 3-4 stages of them fit (96-192 KiB); 8 warps keep
# the 128 x 256 accumulator at 128 fp32 registers per thread; one 64 x 128 config for contrast.
SPACE = [dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=8, num_stages=3),
         dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=4, num_stages=4),
         dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, num_warps=8, num_stages=3),
         dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=32, num_warps=4, num_stages=4),
         dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=64, num_warps=4, num_stages=4)]
### END SOLUTION

# %% nbgrader={"grade": false, "grade_id": "ex4-compile", "locked": true, "schema_version": 3, "solution": false}
from kernels.checks import value_problem

refused = SPACE is not None and value_problem("06_profile_compile_autotune.autotune_space", SPACE)
if SPACE is None:
    print("set SPACE in the cell above first")
elif refused:  # the check's own rule: a SPACE it refuses is named as the check names it, not compiled
    print(refused)
else:
    for cfg, c in zip(SPACE, compiler.compile_many([dict(kernel=planted._fixed_matmul_kernel, args=launch_args(),
                                                         **cfg) for cfg in SPACE])):
        print(f"{c.registers!s:>4s} registers, {c.spills!s:>3s} B spilled, {c.shared:7d} B shared  {cfg}")

# %% nbgrader={"grade": true, "grade_id": "ex4-check", "locked": true, "points": 1, "schema_version": 3, "solution": false}
check("06_profile_compile_autotune.autotune_space", SPACE)

# %% nbgrader={"grade": true, "grade_id": "ex4-hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false}
# Hidden tests (other shapes and dtypes, fresh seeds) run here when your notebook is graded.
### BEGIN HIDDEN TESTS
check("06_profile_compile_autotune.autotune_space", SPACE, hidden=True)
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "recap", "locked": true, "schema_version": 3, "solution": false}
# ## Recap
#
# - A compile has five readable stages. TTGIR shows the layouts and the software pipeline, PTX the memory
#   instructions by space and width, SASS the machine code; `ptxas -v` gives registers and spills, the metadata
#   the shared memory. All of it comes without a GPU by compiling ahead of time for `sm_90`.
# - Shared memory of the pipelined matmul, for tiles of 64 or more a side at 4 or 8 warps, is one buffer per stage
#   for each operand's tile; `num_warps` changes registers per thread, not shared memory. Smaller tiles or fewer
#   warps take other layouts (the compiler may share or leave out a buffer), so read the figure from the compile's
#   metadata rather than a formula.
# - Vectorised, asynchronous loads need proof: 16-byte alignment and a unit inner stride, which Triton's JIT
#   learns from the arguments (multiples of 16, values of 1). Take that knowledge away (`do_not_specialize` on a
#   stride, an export without hints, a size that is not a multiple of 16) and loads become one element wide.
# - Time with `do_bench`, find the kernels with proton, ask `ncu` why; autotune over a small space, and check the
#   winner by timing it again.

# %% [markdown] nbgrader={"grade": false, "grade_id": "score_md", "locked": true, "schema_version": 3, "solution": false}
# ## Your score
#
# The cell below runs every check of this lesson on your notebook as it stands, the hidden ones included (it
# reuses the outcome of each check you already ran on the same objects), and prints your points per exercise and
# in total. Points for speed are graded on a GPU only; without one they are listed as needing a GPU. From a
# shell, `make score L=06` does the same for your saved notebook in `my-work/`.

# %% nbgrader={"grade": false, "grade_id": "score", "locked": true, "schema_version": 3, "solution": false}
from grader.score import score_here

your_score = score_here("06_profile_compile_autotune", globals())
