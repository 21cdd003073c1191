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
# # 05 · Your kernel outside Python: PTX, the driver API and Rust
#
# Every kernel so far was compiled by Triton the first time Python called it, and launched by Triton's Python
# launcher. A service written in Rust or C++ has neither. This lesson compiles your fused chunked kernel from
# lesson 04 **ahead of time** into PTX and a cubin, reads what the compiler made of it, and launches it with nothing
# but the CUDA driver: first from Python, then from the workbook's Rust launcher.
#
# **You will learn**
# - to compile a `@triton.jit` kernel ahead of time for a GPU you do not have (`sm_90`, an H100/H200);
# - to read the PTX: the entry point and its parameters (including the **two hidden scratch pointers** Triton
#   appends), the thread count, the shared memory, the memory instructions by space, and the tensor-core
#   instructions (`mma` on Ampere, `wgmma` on Hopper);
# - what a launch needs that the PTX does not say (the grid, buffer sizes, scalar values) and how the export's
#   *manifest* records it;
# - to turn a manifest and tensors into a driver-API launch yourself, and to compare the outputs of Triton's
#   launch, your Python launch and the Rust launch;
# - what the same launch looks like with the `cudarc` crate, and what the workbook's crate does in its place.
# - to write part of the launcher in Rust yourself: the launch grid from the manifest, within CUDA's limits and
#   without wrapping around in `u32`, built with `cargo build --offline`, graded by the crate's tests, and (on a GPU)
#   launching your kernel through a launcher that uses your grid.

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false}
import kernels
from kernels.checks import guard_launches

guard_launches()  # in the interpreter, a load or store out of bounds stops with an error that names it
print(kernels.describe())

# %% nbgrader={"grade": false, "grade_id": "imports", "locked": true, "schema_version": 3, "solution": false}
import collections
import inspect
import json
import pathlib
import re
import subprocess
import textwrap

import torch
import triton
import triton.language as tl

from kernels.checks import check
from kernels.device import DEVICE, ON_GPU, sizes
from kernels.export import export_spec
from kernels.export.ptx import ptx_entry, ptx_isa, ptx_target
from kernels.testing import assert_close, randn, tolerance

ROOT = pathlib.Path(kernels.__file__).resolve().parent.parent
OUT = ROOT / "artifacts" / "05_ptx_export_rust"

# %% [markdown] nbgrader={"grade": false, "grade_id": "why", "locked": true, "schema_version": 3, "solution": false}
# ## Why export
#
# When you call `kernel[grid](...)`, Triton hashes the argument types, the constexprs and (for integers) whether
# each is divisible by 16, looks for a compiled binary in its cache, compiles one if needed (seconds), and then
# packs the arguments and calls `cuLaunchKernel`. All of that lives in Python. Exporting splits it:
#
# - **compile time** (any machine, no GPU): Triton lowers the kernel to LLVM IR, then to PTX, NVIDIA's virtual
#   assembly, and `ptxas` turns the PTX into a cubin, machine code for one architecture;
# - **run time** (the GPU machine, no Python): load the PTX (the driver compiles it for the GPU at hand) or the
#   cubin, find the entry point, and launch it with the right grid, block, shared memory and argument list.
#
# From Rust, launching is also cheaper. Measured on the H200 with a one-program kernel (median per launch,
# `results/gpu/export.json`): **11.5 µs** through Triton's own Python launcher, **14.4 µs** through the driver API
# from Python with the arguments packed once, **40 µs** when Python packs them anew for every call, and **3.9 µs**
# from the Rust launcher: from Python, Triton's launcher is already about as cheap as a hand-made driver call
# (the cost is Python's, not Triton's), and only leaving Python removes it. These are CPU costs, and a launch is
# asynchronous: while the GPU runs one kernel the CPU is already preparing the next, so as long as each kernel
# runs longer than its launch costs, the overhead overlaps with execution and costs nothing. Lesson 04's kernel at T = 4k runs about 0.1 ms, several times Triton's 11.5 µs:
# in a stream of such launches the GPU never waits. The overhead shows when kernels are shorter than their
# launches, as in the many small launches of token-by-token decoding; there the usual fix is a **CUDA graph**:
# record the sequence of launches once, then replay it with one call, and the per-launch work is skipped. The cell
# below measures one.

# %% nbgrader={"grade": false, "grade_id": "graph", "locked": true, "schema_version": 3, "solution": false}
from kernels.bench import graph_launch_us
from kernels.vector_add import naive_vector_add

if ON_GPU:
    xs = randn(4096, seed=0), randn(4096, seed=1)
    got = graph_launch_us(lambda: naive_vector_add(*xs))
    print(f"a one-program vector add, {got['launches']} launches: {got['eager_us']:.1f} µs each through Triton's "
          f"launcher one by one, {got['graph_us']:.1f} µs each replayed from a CUDA graph")
else:
    print("no GPU: CUDA graphs record launches on a CUDA stream (kernels.bench.graph_launch_us measures one there)")

# %% [markdown] nbgrader={"grade": false, "grade_id": "why-manifest", "locked": true, "schema_version": 3, "solution": false}
# The catch is the argument list. Constexprs are compiled in and gone; the order and types of the remaining
# parameters, the two extra pointers Triton appends, the grid your wrapper computed, the number of threads Triton
# chose: a launcher has to get every one of them right, and a wrong one is not an error message but garbage
# output or an illegal memory access. The export therefore writes a **manifest** next to the binaries, and the
# launchers follow it.

# %% [markdown] nbgrader={"grade": false, "grade_id": "kernel-text", "locked": true, "schema_version": 3, "solution": false}
# ## Your kernel
#
# Paste the body of your `chunked_attention_kernel` from lesson 04 into the cell below, in place of the
# `raise NotImplementedError()`. Until you do, the lesson exports the package's chunked kernel,
# `kernels.linear_attention.chunked`, which has the same grid and a few more parameters (an initial and a final
# state, and offsets for packed sequences); everything below follows whichever kernel is exported, because it
# reads the manifest. The exporter copies the function's source into a file of its own, so the kernel may use
# `tl` and `triton` but not other helpers defined in this notebook.

# %% nbgrader={"grade": false, "grade_id": "kernel", "locked": false, "schema_version": 3, "solution": true}
# include: 04_chunked_linear_attention ex3-fused


# %% [markdown] nbgrader={"grade": false, "grade_id": "export-text", "locked": true, "schema_version": 3, "solution": false}
# ## Compile ahead of time
#
# Triton compiles for `sm_90` without asking any GPU (`kernels.compile.compile_for` hands `triton.compile` an
# `ASTSource` of the kernel, its signature and constexprs, and the target `GPUTarget("cuda", 90, 32)`); the
# package's exporter (`python -m kernels.export`, `kernels.export.export_spec` for a kernel of your own) wraps it
# and writes the manifest. It needs, besides the kernel:
#
# - a **signature**: the type of every runtime parameter, `*bf16` for a pointer to bf16, `i32` for an int,
#   `fp32` for a float. In a JIT launch Triton reads these off the actual arguments;
# - the **constexprs**: the block sizes, compiled in;
# - for the manifest, each buffer's **role** and **element count**, each scalar's **value** (as an expression over
#   the problem sizes, or *given by the caller*), and the **grid**, as expressions such as `cdiv(V, BV)`.
#
# In the interpreter, `@triton.jit` makes interpreter wrappers that cannot be compiled, so the export runs in a
# fresh Python process with the interpreter off (`kernels.compile.run_compiled`); on a GPU machine the same code
# runs unchanged.
# The block sizes are lesson 04's GPU ones (`BT = 64`, whole 128-wide key head, `BV = 64`), for bf16.

# %% nbgrader={"grade": false, "grade_id": "export", "locked": true, "schema_version": 3, "solution": false}
STRIDES = {f"stride_{x}{d}": e for x in "qkvo" for d, e in
           zip("bth", ("T*H*K", "H*K", "K") if x in "qk" else ("T*H*V", "H*V", "V"))}
YOURS = dict(
    name="chunked_attention", attr="chunked_attention_kernel",
    signature={"q_ptr": "*{dtype}", "k_ptr": "*{dtype}", "v_ptr": "*{dtype}", "o_ptr": "*{dtype}",
               "T": "i32", "H": "i32", "K": "i32", "V": "i32", "scale": "fp32", **dict.fromkeys(STRIDES, "i32")},
    buffers={"q_ptr": ["in", "B*T*H*K"], "k_ptr": ["in", "B*T*H*K"], "v_ptr": ["in", "B*T*H*V"],
             "o_ptr": ["out", "B*T*H*V"]},
    sizes=["B", "T", "H", "K", "V"], values={"scale": None, **STRIDES},
    grid=["cdiv(V, BV)", "B*H"], constexprs={"BT": 64, "BK": 128, "BV": 64, "PRECISION": None},
    requires=["B >= 1", "T >= 1", "H >= 1", "K >= 1", "V >= 1", "K <= BK", "B*T*H*K <= 2147483647",
              "B*T*H*V <= 2147483647"],
    dtypes=["bf16", "fp16", "fp32"], num_warps=4, num_stages=2,
    doc="your lesson-04 kernel: causal chunked linear attention, q, k [B, T, H, K], v, o [B, T, H, V]")

def export_kernel(kernel, spec, out_dir, dtype="bf16", **options):
    """Copy the kernel's source into a module of its own and export it from a fresh compile process."""
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    source = textwrap.dedent(inspect.getsource(kernel.fn))
    (out / "yours_kernel.py").write_text("import triton\nimport triton.language as tl\n\n\n" + source)
    return export_spec(dict(spec, module="yours_kernel"), out, dtype=dtype, paths=[str(out)], **options)


def export_package_kernel(out_dir, dtype="bf16", **options):
    from kernels.export import export

    return export("linear_attention", out_dir, dtype=dtype, constexprs={"BT": 64, "BK": 128, "BV": 64},
                  num_warps=4, num_stages=2, **options)


try:
    manifest, mine = export_kernel(chunked_attention_kernel, YOURS, OUT), True
    aligned = export_kernel(chunked_attention_kernel, YOURS, OUT, hint16=[*STRIDES, "K", "V"], stem="aligned")
except NameError as e:  # lesson 04's fused kernel (its exercise 3) not pasted in yet
    print(f"exporting the package's kernel instead of yours ({e})")
    manifest, mine = export_package_kernel(OUT), False
    aligned = export_package_kernel(OUT, hint16=[*STRIDES, "K", "V"], stem="aligned")
except ValueError as e:  # it did not compile for sm_90: say why, in full, then go on with the package's
    if "NotImplementedError" in str(e):
        print("exporting the package's kernel instead of yours (chunked_attention_kernel is still the stub)")
    else:
        print("YOUR KERNEL DID NOT COMPILE for sm_90, so the rest of the lesson uses the package's kernel. "
              "The compiler said:\n")
        print(textwrap.indent(str(e).strip()[-3000:], "    "))
    manifest, mine = export_package_kernel(OUT), False
    aligned = export_package_kernel(OUT, hint16=[*STRIDES, "K", "V"], stem="aligned")
ptx = (OUT / manifest["images"]["ptx"]).read_text()
print(f"exported {'your kernel' if mine else 'the package kernel'}: .entry {manifest['entry']}, "
      f"{manifest['target']['ptx_target']}, PTX ISA {manifest['ptx_isa']}, {len(ptx.splitlines())} lines of PTX, "
      f"{(OUT / manifest['images']['cubin']).stat().st_size} bytes of cubin")

# %% [markdown] nbgrader={"grade": false, "grade_id": "ptx-text", "locked": true, "schema_version": 3, "solution": false}
# ## Read the PTX
#
# PTX is text. Its header says which ISA version it uses (`.version`; a driver refuses PTX newer than it knows,
# `CUDA_ERROR_UNSUPPORTED_PTX_VERSION`) and which GPU it targets (`.target sm_90a`; the `a` allows Hopper-only
# instructions such as `wgmma`). That `a` has a price: plain `sm_90` PTX is forward-compatible, and a newer GPU's
# driver JIT-compiles it, but architecture-specific `sm_90a` PTX runs on compute capability 9.0 alone; a
# Blackwell GPU refuses it. To ship a kernel for several generations, export once per target (or an `sm_90`
# build without the Hopper-only instructions). Then comes the entry point:
#
# - **`.visible .entry name(.param … )`** lists the parameters in order. Each of your pointers is a
#   `.param .u64 .ptr .global`, each `i32` a `.param .u32`, the fp32 `scale` a `.param .f32`. Your constexprs
#   are not there: they became constants inside the code.
# - After your parameters come **two more `.u64` pointers**: Triton's *global scratch* and *profile scratch*
#   buffers. The first is a per-program workspace in global memory that some of Triton's lowerings ask for (a
#   tensor-memory-accelerator descriptor built on the device, for instance); register spills do not go there
#   (they go to *local* memory, which the driver provides). The second is for Triton's profiler's
#   instrumentation. The compiled metadata gives each one's size per program, and when both are 0, as here, the
#   launcher passes NULL. Leave them out and the driver reads whatever lies past your arguments.
# - **`.reqntid 128`** requires the block to be exactly `32 · num_warps` threads: a launch with any other block
#   size fails. **`.maxntid 128`**, which some compilers emit instead, is only an upper bound: a smaller block
#   launches without complaint, and a kernel written for 128 threads then computes garbage. Either way, launch
#   exactly `32 · num_warps` threads.
# - **`.extern .shared .align 16 .b8 global_smem[]`** declares *dynamic* shared memory: the PTX does not say how
#   much, the metadata's `shared` does, and the launch must pass it. Above 48 KiB the launcher must first raise the
#   function's limit (`cuFuncSetAttribute(…, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, …)`).
#
# In the body, the address space is part of every memory instruction (`ld.global`, `st.shared`, …), so counting
# them shows where the data moves. Count the `ld.global`s: a JIT launch sees that your strides are multiples of 16
# and specialises on it, so the compiler can load eight bf16 values in one 16-byte instruction; compiled once for
# every size, the export knows nothing of the kind and loads one element per instruction (`ld.global.b16`).
# (Pointers are another matter: both exports, like every Triton launch, assume that each tensor starts at a
# multiple of 16 bytes, and the manifest records it as each pointer's `align`: a launcher must refuse a tensor
# that does not, a view such as `x[1:]`, or the 16-byte loads fault or read the wrong bytes.)
# Declaring the strides and the head sizes `K`, `V` multiples of 16 (`hint16`; the masks `offs_k < K` then switch
# whole groups of lanes on or off) lets the compiler copy 16 bytes at a time straight into shared memory with
# `cp.async`, pipelined across loop iterations (hence more shared memory), and the manifest then *requires* those
# multiples of every launch. On Hopper, Triton turns `tl.dot` into **warpgroup** matrix multiplies,
# `wgmma.mma_async.sync.aligned.m64nNk16`, issued by four warps together and reading one operand straight from
# shared memory; on Ampere (`sm_80`) the same dot becomes `mma.sync.aligned.m16n8k16` per warp.

# %% nbgrader={"grade": false, "grade_id": "ptx-read", "locked": true, "schema_version": 3, "solution": false}
def ptx_summary(ptx):
    entry, params = ptx_entry(ptx)
    print(f".version {ptx_isa(ptx)}, .target {ptx_target(ptx)}, .entry {entry}: {len(params)} parameters")
    names = [p["name"] for p in manifest["params"]] + [s["name"] for s in manifest["scratch"]]
    for name, decl in zip(names, params):
        print(f"   {decl:58s} <- {name}")
    threads = re.search(r"\.(?:reqntid|maxntid)\s+(\d+)", ptx)
    print(f"threads per block: {threads.group(1) if threads else '?'}; dynamic shared memory: "
          f"{manifest['shared_bytes']} bytes (from the metadata)")
    ops = collections.Counter(m.group(1) for m in re.finditer(
        r"\b(ld\.global|st\.global|ld\.shared|st\.shared|cp\.async|ldmatrix|stmatrix|wgmma\.mma_async|mma\.sync)",
        ptx))
    print("instructions:", ", ".join(f"{k} × {v}" for k, v in ops.most_common()))


ptx_summary(ptx)
aligned_ptx = (OUT / aligned["images"]["ptx"]).read_text()


def loads(text):
    found = collections.Counter(m.group(0) for m in re.finditer(r"\b(?:ld\.global|cp\.async)(?:\.\w+)*", text))
    return ", ".join(f"{k} × {v}" for k, v in found.most_common(3))


print(f"\nloads from global memory as exported: {loads(ptx)}")
print(f"with the strides, K and V declared multiples of 16: {loads(aligned_ptx)}; {aligned['shared_bytes']} bytes "
      f"of shared memory instead of {manifest['shared_bytes']}; the manifest now also requires "
      f"{', '.join(dict.fromkeys(r for r in aligned['requires'] if '%' in r))}")

# %% [markdown] nbgrader={"grade": false, "grade_id": "widget-text", "locked": true, "schema_version": 3, "solution": false}
# The explorer below shows the same PTX interactively: pick a group of instructions (memory by space, tensor-core
# instructions, barriers, …) and step through each occurrence in context, with the kernel line it came from.
# Notice the `ld.global` count: with no hint that the strides are multiples of 16, the exporter's kernel loads one
# element per instruction, where a JIT launch with 16-divisible strides gets vectorised loads. That is the price of
# compiling once for every size.

# %% nbgrader={"grade": false, "grade_id": "widget", "locked": true, "schema_version": 3, "solution": false} tags=["widget"]
from kernels.viz import ptx_explorer, sample_ptx

# the export made by the cell above in this notebook, never an older file left in artifacts/
just_exported = globals().get("manifest")
if just_exported is not None:
    print(f"exploring the export just made: {just_exported['kernel']} ({just_exported['images']['ptx']})")
    view = ptx_explorer((OUT / just_exported["images"]["ptx"]).read_text(),
                        names=[p["name"] for p in just_exported["params"]])
else:
    print("nothing exported in this notebook yet (run the export cell above): exploring the PTX of the package's "
          "sample matmul")
    view = ptx_explorer(sample_ptx(90))
view

# %% [markdown] nbgrader={"grade": false, "grade_id": "manifest-text", "locked": true, "schema_version": 3, "solution": false}
# ## The manifest
#
# The manifest is JSON. Its `params` list follows the PTX's parameter order exactly; each entry is either a
# pointer (`kind: "pointer"`, its element `dtype`, a `role` of `in`, `out`, `inout` or `unused`, `numel`, its
# element count as an expression over the sizes, and `align`, the bytes its address must be a multiple of) or a
# scalar (`kind: "scalar"`, a `type` such as `i32` or
# `fp32`, and a `value` expression, or `null` when the caller supplies it, like `scale`). `grid` holds three
# expressions, `requires` the conditions a launch must meet (`K <= BK`: the whole key head fits one block),
# `scratch` the two hidden buffers' sizes per program, and `threads_per_block` and `shared_bytes` the block.
# The expressions use a small grammar (integers, names, `+ - * // %`, `cdiv`, `min`, `max`, one comparison) that
# any launcher can evaluate. It is a subset of Python's expression syntax, so the cell below evaluates it with
# Python's own parser, allowing nothing else; the Rust crate has a small parser of its own.

# %% nbgrader={"grade": false, "grade_id": "evaluate", "locked": true, "schema_version": 3, "solution": false}
import ast
import operator

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
        ast.Mod: operator.mod, ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
        ast.Eq: operator.eq, ast.NotEq: operator.ne}
_FUNCS = {"cdiv": lambda a, b: -(-a // b), "min": min, "max": max}


def evaluate(text, env):
    """The integer value of a manifest expression such as ``cdiv(V, BV)`` or ``K <= BK`` (1 or 0)."""
    def ev(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in env:
                raise ValueError(f"{text!r} uses {node.id!r}, which is neither a size nor a constexpr")
            return env[node.id]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand)
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _OPS:
            return int(_OPS[type(node.ops[0])](ev(node.left), ev(node.comparators[0])))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCS:
            return _FUNCS[node.func.id](*(ev(a) for a in node.args))
        raise ValueError(f"{text!r} is not a manifest expression ({ast.dump(node)[:60]})")

    return ev(ast.parse(text.strip(), mode="eval").body)


print(evaluate("cdiv(V, BV)", {"V": 130, "BV": 64}), evaluate("K <= BK", {"K": 129, "BK": 128}))

# %% nbgrader={"grade": false, "grade_id": "manifest-show", "locked": true, "schema_version": 3, "solution": false}
print(json.dumps({k: manifest[k] for k in ("kernel", "entry", "threads_per_block", "shared_bytes", "constexprs",
                                           "sizes", "grid", "requires", "scratch") if k in manifest}, indent=1))
for p in manifest["params"][:6]:
    print(p)
print(f"... {len(manifest['params'])} parameters in all")

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex1-text", "locked": true, "schema_version": 3, "solution": false}
# ## Exercise 1 · predict the launch configuration (2 points)
#
# The compiled kernel's metadata (`compiled.metadata` in Triton; the manifest copies it) holds `num_warps`,
# `warp_size` and `shared` (dynamic shared memory in bytes). Together with what you know about your kernel, that
# is everything a launch needs besides the arguments. Write `predict_launch(metadata, sizes, constexprs)` for
# **your lesson-04 fused kernel**: return a dict with
#
# - `grid`: the three grid dimensions `(x, y, z)`, from the sizes `B, T, H, K, V` and the constexpr `BV`;
# - `block`: `(threads, 1, 1)`;
# - `shared`: the dynamic shared memory in bytes.
#
# `metadata` has attributes `num_warps`, `warp_size` and `shared`; `sizes` and `constexprs` are dicts. The check
# tries many configurations, including ones no real compile produced (`num_warps = 2`, odd sizes).

# %% nbgrader={"grade": false, "grade_id": "ex1-predict", "locked": false, "schema_version": 3, "solution": true}
def predict_launch(metadata, sizes, constexprs):
    ### BEGIN SOLUTION
    grid = (triton.cdiv(sizes["V"], constexprs["BV"]), sizes["B"] * sizes["H"], 1)
    return {"grid": grid, "block": (metadata.num_warps * metadata.warp_size, 1, 1), "shared": metadata.shared}
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "ex1-compare", "locked": true, "schema_version": 3, "solution": false}
problem = dict(B=4, T=4096, H=16, K=128, V=128)
meta = collections.namedtuple("Metadata", "num_warps warp_size shared")(
    manifest["num_warps"], manifest["target"]["warp_size"], manifest["shared_bytes"])
exported = {"grid": tuple(evaluate(g, {**problem, **manifest["constexprs"]}) for g in manifest["grid"]),
            "block": (manifest["threads_per_block"], 1, 1), "shared": manifest["shared_bytes"]}
try:
    print("predicted:", predict_launch(meta, problem, manifest["constexprs"]))
except NotImplementedError:
    print("write predict_launch first")
print("manifest: ", exported)

# %% nbgrader={"grade": true, "grade_id": "ex1-check", "locked": true, "points": 2, "schema_version": 3, "solution": false}
check("05_ptx_export_rust.predict_launch", predict_launch)

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex2-text", "locked": true, "schema_version": 3, "solution": false}
# ## Exercise 2 · the manifest-driven launch (4 + 2 points)
#
# Write `build_launch(manifest, sizes, tensors, scalars, alloc)`: everything `cuLaunchKernel` needs, from the
# manifest alone, without calling the package (its launcher in `kernels.export.launch` does this for you, which is
# why the check refuses it). Use `evaluate` from above for the expressions. Arguments:
#
# - `manifest`: the dict above; `sizes`: the problem sizes it names (`{"B": 4, "T": 4096, ...}`);
# - `tensors`: `{parameter name: tensor}` for every pointer whose role is not `unused`;
# - `scalars`: `{parameter name: number}` for every scalar whose `value` is `null`;
# - `alloc(nbytes, align) -> address`: call it for a scratch buffer whose size is not 0.
#
# Return `{"grid": (x, y, z), "block": (threads, 1, 1), "shared": bytes, "args": [...]}`, where `args` lists one
# `(type, value)` pair per PTX parameter, in order: `("u64", tensor.data_ptr())` for a pointer (`("u64", 0)` for
# an unused one), `(param["type"], value)` for a scalar (an `int` for integer types, a `float` for `fp32`), and
# then the two scratch pointers: `("u64", 0)` when `bytes_per_program` is 0, otherwise
# `("u64", alloc(bytes_per_program · number of programs, align))`.
#
# Before returning, refuse (raise `ValueError`, naming what is wrong) a missing or unknown size, a failed
# `requires` condition, a grid dimension outside CUDA's limits (x up to 2³¹ − 1, y and z up to 65535), a missing
# tensor or scalar, a tensor of the wrong dtype (`TypeError`), a tensor with fewer elements than `numel`, a
# tensor whose address (`data_ptr()`) is not a multiple of its pointer's `align`, and an
# integer scalar that does not fit its type (`i32`: −2³¹ … 2³¹ − 1). A launcher that passes these on launches
# garbage.

# %% nbgrader={"grade": false, "grade_id": "ex2-build", "locked": false, "schema_version": 3, "solution": true}
TORCH_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32, "fp64": torch.float64,
                "i32": torch.int32, "i64": torch.int64}
INT_RANGE = {"i32": (-(2**31), 2**31 - 1), "i64": (-(2**63), 2**63 - 1), "u32": (0, 2**32 - 1),
             "u64": (0, 2**64 - 1)}


def build_launch(manifest, sizes, tensors, scalars, alloc):
    ### BEGIN SOLUTION
    missing = sorted(set(manifest["sizes"]) - set(sizes))
    unknown = sorted(set(sizes) - set(manifest["sizes"]))
    if missing or unknown:
        raise ValueError(f"sizes: missing {missing}, unknown {unknown}; the kernel needs {manifest['sizes']}")
    env = {k: v for k, v in manifest["constexprs"].items() if isinstance(v, int) and not isinstance(v, bool)}
    env.update(sizes)
    for cond in manifest.get("requires", []):
        if not evaluate(cond, env):
            raise ValueError(f"requirement {cond!r} fails for sizes {sizes}")
    grid = tuple(evaluate(g, env) for g in manifest["grid"])
    for axis, (g, limit) in enumerate(zip(grid, (2**31 - 1, 65535, 65535))):
        if not 1 <= g <= limit:
            raise ValueError(f"grid {'xyz'[axis]} = {manifest['grid'][axis]} = {g} is outside 1..{limit}")
    args = []
    for p in manifest["params"]:
        name = p["name"]
        if p["kind"] == "pointer":
            if p["role"] == "unused":
                args.append(("u64", 0))
                continue
            if name not in tensors:
                raise ValueError(f"no tensor for pointer {name}")
            t = tensors[name]
            if t.dtype != TORCH_DTYPES[p["dtype"]]:
                raise TypeError(f"{name} has dtype {t.dtype}; the kernel was compiled for {p['dtype']}")
            need = evaluate(p["numel"], env)
            if t.numel() < need:
                raise ValueError(f"{name} holds {t.numel()} elements; {p['numel']} = {need} needed")
            if t.data_ptr() % p["align"]:
                raise ValueError(f"{name} starts at an address that is not a multiple of {p['align']} bytes (a view "
                                 "such as x[1:]); the kernel was compiled assuming it is")
            args.append(("u64", t.data_ptr()))
        else:
            if p.get("value") is None:
                if name not in scalars:
                    raise ValueError(f"no value for scalar {name}")
                value = scalars[name]
            else:
                value = evaluate(p["value"], env)
            if p["type"].startswith("fp"):
                args.append((p["type"], float(value)))
                continue
            lo, hi = INT_RANGE[p["type"]]
            if not lo <= int(value) <= hi:
                raise ValueError(f"{name} = {value} does not fit {p['type']}")
            args.append((p["type"], int(value)))
    programs = grid[0] * grid[1] * grid[2]
    for s in manifest["scratch"]:
        nbytes = s["bytes_per_program"] * programs
        args.append(("u64", alloc(nbytes, s["align"]) if nbytes else 0))
    return {"grid": grid, "block": (manifest["threads_per_block"], 1, 1), "shared": manifest["shared_bytes"],
            "args": args}
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "ex2-try", "locked": true, "schema_version": 3, "solution": false}
shape = sizes("linear_attention")
small = dict(B=shape["B"], T=shape["T"], H=shape["H"], K=shape["K"], V=shape["V"])
q, k = (randn(small["B"], small["T"], small["H"], small["K"], dtype=torch.bfloat16, seed=s) for s in (0, 1))
v = randn(small["B"], small["T"], small["H"], small["V"], dtype=torch.bfloat16, seed=2)
o = torch.full_like(v, float("nan"))
tensors = {"q_ptr": q, "k_ptr": k, "v_ptr": v, "o_ptr": o}
scalars = {"scale": small["K"] ** -0.5}
try:
    plan = build_launch(manifest, small, tensors, scalars, alloc=None)
    print(f"grid {plan['grid']}, block {plan['block']}, {plan['shared']} bytes of shared memory")
    print("args:", ", ".join(f"{t}:{hex(v) if t == 'u64' and v else v}" for t, v in plan["args"]))
except NotImplementedError:
    plan = None
    print("write build_launch first")

# %% nbgrader={"grade": true, "grade_id": "ex2-check", "locked": true, "points": 4, "schema_version": 3, "solution": false}
check("05_ptx_export_rust.build_launch", build_launch)

# %% nbgrader={"grade": true, "grade_id": "ex2-hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false}
# Hidden tests (other shapes and dtypes, fresh seeds) run here when your notebook is graded.
### BEGIN HIDDEN TESTS
check("05_ptx_export_rust.build_launch", build_launch, hidden=True)
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "driver-text", "locked": true, "schema_version": 3, "solution": false}
# ## Launch it through the driver API
#
# On a GPU, the cell below does by hand what Triton's launcher does: load the PTX into torch's context
# (`cuModuleLoadData`; the driver JIT-compiles it for this GPU), look up the entry point
# (`cuModuleGetFunction`), raise its shared-memory limit if it needs more than 48 KiB, pack **your** argument
# list into an array of pointers to the values (`void **kernelParams`), and call `cuLaunchKernel` on torch's
# stream. It launches the **aligned** export, the one a launcher should use whenever the sizes allow it, and
# compares three outputs of the same kernel on the same inputs: Triton's own launch, your driver-API launch, and
# the float64 reference. The first two must agree to the last bit; both must match the reference within bf16's
# tolerance. Then it times both exports at B = 4, T = 4096, H = 16, D = 128. On the project's H200 the any-size
# export took **0.414 ms** and the aligned one **0.097 ms**, the same as Triton's JIT launch (0.096 ms): without
# the multiple-of-16 hints every load is one bf16 element wide and nothing is staged ahead through shared memory,
# so the kernel waits on memory; with them, 16-byte `cp.async` copies are pipelined across chunks, as a JIT launch
# does when it sees aligned strides. (Those figures are the package's export of this kernel with three pipeline
# stages, `results/gpu/export.json`; the cells here export with two, so your times will not be exactly these:
# compare the two lines the cell prints.) Without a GPU there is no driver to call, and the cell says so.

# %% nbgrader={"grade": false, "grade_id": "driver", "locked": true, "schema_version": 3, "solution": false}
import ctypes

from kernels.bench import time_ms

CTYPES = {"u64": ctypes.c_uint64, "i64": ctypes.c_int64, "i32": ctypes.c_int32, "u32": ctypes.c_uint32,
          "fp32": ctypes.c_float, "fp64": ctypes.c_double}


def _ok(result, what):
    from cuda.bindings import driver as cu

    err, *rest = result if isinstance(result, tuple) else (result,)
    if err != cu.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"{what}: {cu.cuGetErrorName(err)[1]}")
    return rest[0] if rest else None


def load_function(manifest, shared, image="ptx"):
    """Load the exported image into torch's context and return its entry point (once per export)."""
    from cuda.bindings import driver as cu

    torch.cuda.init()
    _ok(cu.cuInit(0), "cuInit")
    context = _ok(cu.cuDevicePrimaryCtxRetain(_ok(cu.cuDeviceGet(torch.cuda.current_device()), "cuDeviceGet")),
                 "cuDevicePrimaryCtxRetain")  # the context torch's runtime uses
    _ok(cu.cuCtxSetCurrent(context), "cuCtxSetCurrent")
    data = (OUT / manifest["images"][image]).read_bytes() + (b"\0" if image == "ptx" else b"")
    module = _ok(cu.cuModuleLoadData(data), "cuModuleLoadData")
    function = _ok(cu.cuModuleGetFunction(module, manifest["entry"].encode()), "cuModuleGetFunction")
    if shared > 48 * 1024:
        attr = cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        _ok(cu.cuFuncSetAttribute(function, attr, shared), "cuFuncSetAttribute")
    return function


def driver_launch(function, plan):
    """Pack the plan's argument list and launch on torch's current stream (asynchronous, like any launch)."""
    from cuda.bindings import driver as cu

    values = [CTYPES[t](v) for t, v in plan["args"]]
    params = (ctypes.c_void_p * len(values))(*[ctypes.addressof(x) for x in values])
    stream = cu.CUstream(torch.cuda.current_stream().cuda_stream)
    _ok(cu.cuLaunchKernel(function, *plan["grid"], *plan["block"], plan["shared"], stream,
                          ctypes.addressof(params), 0), "cuLaunchKernel")


def triton_launch(q, k, v, scale):
    """The same kernel through Triton's own launcher, with the exported constexprs."""
    o = torch.empty_like(v)
    B, T, H, K = q.shape
    V = v.shape[-1]
    cx = manifest["constexprs"]
    grid = (triton.cdiv(V, cx["BV"]), B * H)
    st = [x.stride(i) for x in (q, k, v, o) for i in range(3)]
    if mine:
        chunked_attention_kernel[grid](q, k, v, o, T, H, K, V, scale, *st, BT=cx["BT"], BK=cx["BK"], BV=cx["BV"],
                                       PRECISION=cx["PRECISION"], num_warps=manifest["num_warps"],
                                       num_stages=manifest["num_stages"])
    else:
        from kernels.linear_attention import chunked_linear_attention

        o, _ = chunked_linear_attention(q, k, v, scale, chunk_size=cx["BT"])
    return o


def reference(q, k, v, scale):
    from kernels.linear_attention.reference import recurrent_linear_attention

    return recurrent_linear_attention(q.double(), k.double(), v.double(), scale, normalize=False)[0]


if ON_GPU and plan is not None:
    gpu = dict(B=2, T=1000, H=4, K=128, V=128)
    q, k = (randn(gpu["B"], gpu["T"], gpu["H"], gpu["K"], dtype=torch.bfloat16, seed=s) for s in (3, 4))
    v = randn(gpu["B"], gpu["T"], gpu["H"], gpu["V"], dtype=torch.bfloat16, seed=5)
    o_driver = torch.full_like(v, float("nan"))
    scale = gpu["K"] ** -0.5
    scratch = []  # keeps any scratch buffer alive until the launch is done

    def alloc(nbytes, align):
        scratch.append(torch.empty(nbytes + align, dtype=torch.uint8, device="cuda"))
        return scratch[-1].data_ptr() + (-scratch[-1].data_ptr()) % align

    functions = {name: load_function(m, m["shared_bytes"]) for name, m in (("any size", manifest),
                                                                            ("aligned", aligned))}
    plan = build_launch(aligned, gpu, {"q_ptr": q, "k_ptr": k, "v_ptr": v, "o_ptr": o_driver}, {"scale": scale},
                        alloc)
    driver_launch(functions["aligned"], plan)
    torch.cuda.synchronize()
    o_triton = triton_launch(q, k, v, scale)
    ref = reference(q, k, v, scale)
    print("driver launch vs float64 reference:", assert_close("driver", ref, o_driver, tolerance(torch.bfloat16)))
    print("Triton launch vs float64 reference:", assert_close("triton", ref, o_triton, tolerance(torch.bfloat16)))
    print("driver launch == Triton launch, bit for bit:", torch.equal(o_driver, o_triton))
    big = dict(B=4, T=4096, H=16, K=128, V=128)
    bq, bk = (randn(big["B"], big["T"], big["H"], big["K"], dtype=torch.bfloat16, seed=s) for s in (6, 7))
    bv = randn(big["B"], big["T"], big["H"], big["V"], dtype=torch.bfloat16, seed=8)
    bo = torch.empty_like(bv)
    print(f"B=4 T=4096 H=16 D=128 bf16, median ms: Triton JIT "
          f"{time_ms(lambda: triton_launch(bq, bk, bv, big['K'] ** -0.5)):.3f}", end="")
    for name, m in (("any-size export", manifest), ("aligned export", aligned)):
        big_plan = build_launch(m, big, {"q_ptr": bq, "k_ptr": bk, "v_ptr": bv, "o_ptr": bo},
                                {"scale": big["K"] ** -0.5}, alloc)
        fn = functions["aligned" if m is aligned else "any size"]
        print(f", {name} {time_ms(lambda p=big_plan, f=fn: driver_launch(f, p)):.3f}", end="")
    print()
else:
    print("no GPU here (or no build_launch yet): the driver-API launch runs on a CUDA machine only")

# %% [markdown] nbgrader={"grade": false, "grade_id": "rust-text", "locked": true, "schema_version": 3, "solution": false}
# ## Launch it from Rust
#
# The workbook's crate in `rust/` is a launcher with **no dependencies**: it opens `libcuda.so.1` at run time
# (`dlopen`), so it builds offline with plain `cargo build --release` and runs on any machine with an NVIDIA
# driver, with no CUDA toolkit. It reads the same manifest, evaluates the same expressions, checks the same
# conditions you did in exercise 2, passes NULL for the two scratch pointers, and launches the PTX (or the cubin)
# on files of raw little-endian tensors that the cell below writes. It then writes the output next to them, and
# the cell compares it with the driver-API and Triton launches.
#
# With the [`cudarc`](https://crates.io/crates/cudarc) crate (0.19), the same launch reads:
#
# ```rust
# use cudarc::driver::{CudaContext, LaunchConfig, PushKernelArg};
# use cudarc::nvrtc::Ptx;
#
# let ctx = CudaContext::new(0)?;                       // primary context of GPU 0
# let stream = ctx.default_stream();
# let module = ctx.load_module(Ptx::from_file("chunked_attention.ptx"))?;
# let f = module.load_function("chunked_attention_kernel")?;
# let q = stream.clone_htod(&q_host)?;                  // Vec<half::bf16> -> device, same for k and v
# let mut o = stream.alloc_zeros::<half::bf16>(b * t * h * v_dim)?;
# // sizes checked small enough beforehand: exercise 3 shows why an unchecked `as u32` is a bug
# let cfg = LaunchConfig { grid_dim: (v_dim.div_ceil(64) as u32, (b * h) as u32, 1),
#                          block_dim: (128, 1, 1), shared_mem_bytes: shared };
# let (t_, h_, k_, v_, scale) = (t as i32, h as i32, k_dim as i32, v_dim as i32, (k_dim as f32).powf(-0.5));
# let strides: Vec<i32> = /* 12 strides, in the kernel's order */;
# let null: u64 = 0;
# let mut launch = stream.launch_builder(&f);
# launch.arg(&q).arg(&k).arg(&v).arg(&mut o).arg(&t_).arg(&h_).arg(&k_).arg(&v_).arg(&scale);
# for s in &strides { launch.arg(s); }
# launch.arg(&null).arg(&null);                         // Triton's global and profile scratch
# unsafe { launch.launch(cfg) }?;
# let o_host = stream.clone_dtoh(&o)?;
# ```
#
# Everything in it is what your `build_launch` produced, written out by hand: the grid and block, the shared
# memory (above 48 KiB it also has to raise the function's limit through the driver's `cuFuncSetAttribute`,
# which cudarc exposes in its raw `sys` bindings), and the argument list with the two scratch pointers at the end.
# The workbook's crate does not hard-code any of it: it is the manifest-driven launch of exercise 2, in Rust, with
# its own small driver bindings in place of cudarc (so it needs neither a crate registry nor the CUDA toolkit).

# %% nbgrader={"grade": false, "grade_id": "rust", "locked": true, "schema_version": 3, "solution": false}
BIN = ROOT / "rust" / "target" / "release" / "workbook-launch"
_RAW = {torch.bfloat16: torch.int16, torch.float16: torch.int16, torch.float32: torch.int32}


def rust_launch(manifest, sizes, tensors, scalars, output="o_ptr", binary=BIN):
    """Run the Rust launcher on raw little-endian files of the inputs; return the output it wrote."""
    folder = OUT / "rust-run"
    folder.mkdir(parents=True, exist_ok=True)
    cmd = [str(binary), "run", "--manifest", str(OUT / (pathlib.Path(manifest["images"]["cubin"]).stem + ".json"))]
    cmd += [a for k, n in sizes.items() for a in ("--size", f"{k}={n}")]
    cmd += [a for k, x in scalars.items() for a in ("--scalar", f"{k}={x!r}")]
    for name, t in tensors.items():
        path = folder / f"{name}.bin"
        path.write_bytes(t.detach().cpu().contiguous().view(_RAW[t.dtype]).numpy().tobytes())
        cmd += ["--in", f"{name}={path}"]
    cmd += ["--out", f"{output}={folder / 'out.bin'}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if proc.returncode:
        raise RuntimeError(f"workbook-launch failed ({proc.returncode}): {proc.stderr.strip()}")
    report = json.loads(proc.stdout)
    like = tensors["v_ptr"]
    raw = torch.frombuffer(bytearray((folder / "out.bin").read_bytes()), dtype=_RAW[like.dtype])
    return raw.view(like.dtype).reshape(like.shape), report


if not BIN.exists():
    print(f"no Rust launcher at {BIN.relative_to(ROOT)}: build it with `cargo build --offline --release` in rust/")
elif not ON_GPU or plan is None:
    info = subprocess.run([str(BIN), "info", "--manifest", str(OUT / f"{manifest['kernel']}.json")],
                          capture_output=True, text=True, timeout=60)
    print(info.stdout or info.stderr)
    print("(no GPU here: the Rust launch itself runs on a CUDA machine)")
else:
    o_rust, report = rust_launch(aligned, gpu, {"q_ptr": q, "k_ptr": k, "v_ptr": v}, {"scale": scale})
    print({key: report[key] for key in list(report)[:8]})
    print("Rust launch vs float64 reference:", assert_close("rust", ref, o_rust.cuda(), tolerance(torch.bfloat16)))
    print("Rust launch == driver-API launch, bit for bit:", torch.equal(o_rust.cuda(), o_driver))

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex3-rust-text", "locked": true, "schema_version": 3, "solution": false}
# ## Exercise 3 · a part of the launcher, in Rust (3 points)
#
# Now write some of it yourself. `launch_grid(manifest, sizes)` returns the launch grid the manifest describes:
# its three `grid` expressions evaluated over the integer constexprs and the problem sizes, each within CUDA's
# limits (x up to 2³¹ − 1, y and z up to 65535, every axis at least 1), and an `Err` naming the problem for a
# missing or unknown size, an expression that fails, or a grid outside the limits: what your Python `build_launch`
# did for the grid, in Rust. The crate gives you what you need: `Manifest` (its fields `constexprs: Vec<(String, Json)>` with
# `Json::as_i64()`, `sizes: Vec<String>` and `grid: [String; 3]`) and `workbook_launch::expr::evaluate(text,
# &HashMap<String, i64>) -> Result<i64, ExprError>` (`ExprError.0` is its message). The expressions evaluate to
# `i64`, the grid is `u32`: a value past `u32::MAX` must be refused, not wrapped around by `as u32`. Compute the
# grid yourself: the launcher's own `Manifest::resolve` is what the tests compare with, and the check refuses it.
#
# Write the body of the function inside the string below, in place of the two placeholder lines. The cell after
# it writes your code into a crate of its own beside the workbook's (`artifacts/05_ptx_export_rust/rust-yours`),
# builds it with `cargo build --offline` and runs the crate's tests (`rust/exercise/grid.rs`): they compare your
# grid with the launcher's own `Manifest::resolve` for the lesson's kernels at ragged sizes, check CUDA's limits
# on each axis (at them, one past them, past `u32`), a zero-sized grid and the refusals, and name the fault when
# one fails (axes swapped, a ceiling division off by one, a value wrapped around in `u32`). The graded cell then
# runs them again, and your function on cases drawn fresh. No GPU is needed for the points; on a GPU, the cell
# after them builds your launcher (`workbook-launch` with your grid) and runs the exported kernel with it.
#
# **Without `cargo`** these cells say how to get it (rustup, or `apt-get install cargo`) and skip: the exercise is
# then "not graded here (needs cargo)", in your score as in the grader's, never passed or failed.

# %% nbgrader={"grade": false, "grade_id": "ex3-rust", "locked": false, "schema_version": 3, "solution": true}
YOUR_RUST = r"""
use std::collections::HashMap;

use workbook_launch::expr::evaluate;
use workbook_launch::Manifest;

/// The launch grid of `manifest` for `sizes`, or why there is none.
pub fn launch_grid(manifest: &Manifest, sizes: &[(String, i64)]) -> Result<[u32; 3], String> {
### BEGIN SOLUTION
    let mut env: HashMap<String, i64> = HashMap::new();
    for (name, value) in &manifest.constexprs {
        if let Some(v) = value.as_i64() {
            env.insert(name.clone(), v);
        }
    }
    for name in &manifest.sizes {
        let (_, v) = sizes.iter().find(|(k, _)| k == name).ok_or(format!("missing size {name}"))?;
        env.insert(name.clone(), *v);
    }
    if let Some((name, _)) = sizes.iter().find(|(k, _)| !manifest.sizes.contains(k)) {
        return Err(format!("unknown size {name}: the kernel takes {}", manifest.sizes.join(", ")));
    }
    let limits = [2_147_483_647i64, 65_535, 65_535];
    let mut grid = [0u32; 3];
    for axis in 0..3 {
        let v = evaluate(&manifest.grid[axis], &env).map_err(|e| e.0)?;
        if v < 1 || v > limits[axis] {
            return Err(format!("grid axis {axis} = {v} is outside 1..{}", limits[axis]));
        }
        grid[axis] = v as u32;
    }
    Ok(grid)
### END SOLUTION
}
"""


# %% nbgrader={"grade": false, "grade_id": "ex3-rust-check", "locked": true, "schema_version": 3, "solution": false}
from kernels.export.rust_exercise import build_and_test

rust_result = build_and_test(YOUR_RUST, OUT / "rust-yours")
print(rust_result.message)
if rust_result.passed is None:
    print("(skipped)")
elif rust_result.tests:
    print("\n".join(f"  {'ok  ' if ok else 'FAIL'} {name}" for name, ok in rust_result.tests.items()))

# %% nbgrader={"grade": true, "grade_id": "ex3-rust-grade", "locked": true, "points": 3, "schema_version": 3, "solution": false}
check("05_ptx_export_rust.launch_grid", YOUR_RUST)

# %% [markdown] nbgrader={"grade": false, "grade_id": "ex3-gpu-text", "locked": true, "schema_version": 3, "solution": false}
# ### Your grid on the GPU
#
# Your function inside a launcher: `yours-launch` is `workbook-launch` whose grid comes from your `launch_grid`
# (`cargo build --offline --release` of the crate above; it refuses the launch with your `Err`). On a GPU it
# launches the aligned export on the tensors of the driver-API launch, and the output is compared with the float64
# torch reference and, bit for bit, with the driver-API launch. A GPU machine without `cargo` runs a launcher built
# elsewhere from the same source: `python -m kernels.export.rust_exercise --source FILE` writes
# `rust/target/release/yours-launch` with the SHA-256 of the source beside it, and the cell uses it only when that
# matches your `YOUR_RUST`.

# %% nbgrader={"grade": false, "grade_id": "ex3-gpu", "locked": true, "schema_version": 3, "solution": false}
import hashlib

from kernels.export.rust_exercise import build_launcher

if not ON_GPU or plan is None:
    print("(no GPU here: your launcher runs the kernel on a CUDA machine)")
else:
    yours, how = build_launcher(YOUR_RUST, OUT / "rust-yours")
    print(how)
    prebuilt = ROOT / "rust" / "target" / "release" / "yours-launch"
    stamp = prebuilt.with_name(prebuilt.name + ".sha256")
    same = stamp.is_file() and stamp.read_text().strip() == hashlib.sha256(YOUR_RUST.encode()).hexdigest()
    if yours is None and same:
        yours = prebuilt
        print(f"using {prebuilt.relative_to(ROOT)}, built elsewhere from this same YOUR_RUST")
    if yours is None:
        print("no launcher built from this YOUR_RUST: the GPU launch with your grid is skipped")
    else:
        o_yours, report = rust_launch(aligned, gpu, {"q_ptr": q, "k_ptr": k, "v_ptr": v}, {"scale": scale},
                                      binary=yours)
        print("your launcher's grid:", report["grid"])
        print("your launcher vs float64 reference:",
              assert_close("yours", ref, o_yours.cuda(), tolerance(torch.bfloat16)))
        print("your launcher == driver-API launch, bit for bit:", torch.equal(o_yours.cuda(), o_driver))

# %% [markdown] nbgrader={"grade": false, "grade_id": "no-gpu", "locked": true, "schema_version": 3, "solution": false}
# > **Without a GPU.** The export, the PTX, the manifest and all three exercises work the same on a laptop:
# > Triton compiles for `sm_90` without asking the hardware, exercise 2 is checked on CPU tensors (their addresses
# > are as good as a GPU's for building an argument list), and exercise 3's Rust needs cargo, not a GPU. What
# > needs a GPU is the launching: loading the PTX, the driver-API launch, the Rust launch and the output
# > comparison. The crate still builds without one (`cargo build --release` in `rust/`), and running it reports
# > that no driver was found.

# %% [markdown] nbgrader={"grade": false, "grade_id": "recap", "locked": true, "schema_version": 3, "solution": false}
# ## Recap
#
# - Ahead-of-time compilation needs the kernel, a signature, the constexprs and a target; no GPU.
# - The PTX entry lists your runtime parameters in order, then Triton's **two scratch pointers** (NULL when their
#   sizes are 0); `.reqntid` fixes the block at `32 · num_warps` threads; dynamic shared memory is declared but
#   sized only by the metadata, and above 48 KiB needs an explicit opt-in.
# - The instructions show the data's path: `ld.global` from HBM, `st.shared`/`ld.shared` through shared memory,
#   `wgmma.mma_async` (Hopper) or `mma.sync` (Ampere) on the tensor cores.
# - A launch is grid + block + shared memory + an argument list; the manifest records how to compute each, and a
#   launcher in any language can follow it and refuse what does not fit before launching.
#
# That completes the forward path: from counting bytes through the memory hierarchy, to tiles in SRAM, to a fused
# chunked kernel near the HBM floor, to that kernel running without Python. Two lessons follow: 06 asks the
# compiler and the profiler where a kernel's time goes, 07 writes the backward pass that training needs.

# %% [markdown] nbgrader={"grade": false, "grade_id": "what_next", "locked": true, "schema_version": 3, "solution": false}
# ## What next
#
# - **Check your score** (below, or `make score` for every lesson) and go back to any exercise short of its
#   points; on a GPU, the speed points of lessons 01–04 are graded too.
# - **Lesson 06** reads what the compiler made of a kernel (TTGIR, PTX, SASS, registers, shared memory), finds
#   the time with a profiler and `ncu`, and autotunes: the tools to ask why your lesson-04 kernel is where it is.
# - **Lesson 07** writes the backward pass: the gradients of `q`, `k`, `v` as two more chunked kernels, the state's
#   gradient carried from the end of the sequence, wrapped in a `torch.autograd.Function`.
# - **Ship it.** The manifest and the launcher are all a C++, Rust or Go service needs: export the aligned
#   build where sizes and strides are multiples of 16, and keep the any-size one as the fallback.

# %% [markdown] nbgrader={"grade": false, "grade_id": "score_md", "locked": true, "schema_version": 3, "solution": false}
# ## Your score
#
# The cell below runs every check of this lesson on your notebook as it stands, the hidden ones included (it
# reuses the outcome of each check you already ran on the same kernel), and prints your points per exercise and
# in total. Points for speed are graded on a GPU only; without one they are listed as needing a GPU. From a
# shell, `make score L=05` does the same for your saved notebook in `my-work/`.

# %% nbgrader={"grade": false, "grade_id": "score", "locked": true, "schema_version": 3, "solution": false}
from grader.score import score_here

your_score = score_here("05_ptx_export_rust", globals())
