"""Lesson 06 (profile, read the compiler, autotune): predict shared memory, name the planted bug's instruction, fix
it, and an autotuning space whose winner is re-measured.

Everything the compiler says comes from compiling the package's matmul (:mod:`kernels.profile.planted`) for sm_90
ahead of time (:mod:`kernels.profile.compiler`), which needs no GPU: in the grader's trusted process (the inputs of
``predict_shared``, the rules of the values), never in the sandbox. Speed is graded on a GPU only.
"""

import contextlib
import numbers
import re

import torch
import triton

from ...device import ON_GPU
from ..bounds import compile_reason
from ..spec import Case, CheckFailed, Exercise, Performance, register
from .l03_tiled_sram import _matmul_inputs

__all__ = ["PREDICT_SHARED", "SLOW_INSTRUCTION", "FIXED", "FIXED_SPEED", "AUTOTUNE_SPACE", "LESSON_CONFIG",
           "SMEM_LIMIT", "compile_matmul", "shared_pool", "space_problems", "instruction_problems"]

LESSON = "06_profile_compile_autotune"
SMEM_LIMIT = 232_448  # bytes of shared memory one H100/H200 program may use (227 KiB)
#: The configuration the lesson compiles and times: a Hopper-sized tile.
LESSON_CONFIG = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=8, num_stages=3)
_SIZE = 4096  # the compiled launch's M = N = K (every size and stride a multiple of 16, as on the GPU)
_KEYS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps", "num_stages")


def _launch_args(M=_SIZE, N=_SIZE, K=_SIZE, dtype="fp16") -> list:
    ptr = {"ptr": dtype, "aligned": True}
    return [ptr, ptr, ptr, M, N, K, K, 1, N, 1, N, 1]


def compile_matmul(configs: list[dict], *, planted: bool = False, detail: bool = False) -> list:
    """The package's fixed (or planted) matmul compiled for sm_90 at each config, fp16, M = N = K = 4096
    (``detail``: with registers, spills and SASS)."""
    from ...profile import compiler
    from ...profile import planted as p

    kernel = p._planted_matmul_kernel if planted else p._fixed_matmul_kernel
    return compiler.compile_many([dict(kernel=kernel, args=_launch_args(), **cfg) for cfg in configs], detail=detail)


# ---- exercise 1: predict the shared memory of a configuration ------------------------------------------------

def shared_pool() -> list[dict]:
    """The configurations the hidden check draws from: tiles 64-256, one to four stages, 4 or 8 warps."""
    out = []
    for i, (bm, bn, bk) in enumerate(((64, 64, 32), (64, 128, 32), (128, 64, 64), (128, 128, 32), (64, 256, 64),
                                      (256, 64, 32))):
        for stages in (1, 2, 3, 4):
            out.append(dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, num_warps=(4, 8)[(i + stages) % 2],
                            num_stages=stages))
    return out


def _shared_inputs(case, gen):
    configs = [dict(c) for c in case.get("fixed", ())]
    if case.get("count"):
        pool = shared_pool()
        configs += [pool[i] for i in torch.randperm(len(pool), generator=gen)[: case["count"]].tolist()]
    compiled = [c.shared for c in compile_matmul(configs)]
    return {"configs": configs, "compiled": torch.tensor(compiled, dtype=torch.float64)}


_TILES = "a stage holds one [BLOCK_M, BLOCK_K] tile of a and one [BLOCK_K, BLOCK_N] tile of b, in fp16"
_OUTPUT = ("that counts the output tile, which is not staged in shared memory: the accumulator lives in registers "
           "and is stored once; " + _TILES)
#: What a wrong prediction most likely counted: formulas a learner writes, each with its explanation. The first
#: that agrees with the answer on every probe configuration names the fault (one value alone is ambiguous: for
#: the lesson's 128 x 128 x 64 tiles, fp32 bytes and the output tile give the same number).
_MISTAKES = [
    (lambda m, n, k, s: (m * k + k * n) * 2 if s > 1 else None,
     "that is one stage's tiles; the software pipeline keeps num_stages copies of them in flight"),
    (lambda m, n, k, s: s * (m * k + k * n), "that counts elements; shared memory is in bytes, and an fp16 element "
                                             "takes 2"),
    (lambda m, n, k, s: s * (m * k + k * n) * 4, "that is 4 bytes per element; the tiles hold fp16 (2 bytes); the "
                                                 "fp32 accumulator lives in registers"),
    (lambda m, n, k, s: (s - 1) * (m * k + k * n) * 2 if s > 1 else None,
     "that is num_stages - 1 copies of the tiles; Triton allocates one buffer per stage"),
    (lambda m, n, k, s: s * m * k * 2, "that is A's tile alone; B's [BLOCK_K, BLOCK_N] tile is staged beside it, "
                                       "num_stages copies of each"),
    (lambda m, n, k, s: s * k * n * 2, "that is B's tile alone; A's [BLOCK_M, BLOCK_K] tile is staged beside it, "
                                       "num_stages copies of each"),
    *[(lambda m, n, k, s, e=e, per=per: (s if per else 1) * m * n * e, _OUTPUT) for e in (2, 4) for per in (1, 0)],
    *[(lambda m, n, k, s, e=e: s * (m * k + k * n) * 2 + m * n * e, _OUTPUT) for e in (2, 4)],
]
_PROBES = [(64, 128, 32, 2), (128, 64, 64, 4), (64, 256, 64, 3)]


def _shared_hint(cfg: dict, got, want: int, fn=None) -> str:
    """What a wrong prediction ``got`` (``want`` right) most likely counted, probing ``fn`` at other
    configurations: a formula that moves with num_warps, then the first of :data:`_MISTAKES` that agrees with it
    everywhere, then what the value alone suggests."""
    bm, bn, bk, s, w = (cfg[k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_stages", "num_warps"))
    probes = [(bm, bn, bk, s)] + _PROBES
    values = None
    if fn is not None:
        with contextlib.suppress(Exception):
            if any(fn(bm, bn, bk, other, s) != got for other in (4, 8) if other != w):
                return "shared memory belongs to the program, not to a warp: num_warps does not change it"
        try:
            values = [got] + [fn(m, n, k, 4, st) for m, n, k, st in probes[1:]]
        except Exception:
            values = None
        for formula, why in _MISTAKES if values else []:
            if all(formula(*p) is not None and formula(*p) == v for p, v in zip(probes, values)):
                return why
    # one value alone is ambiguous (the lesson's square tiles): only where the other configurations could not be
    # probed is a mistake named from it
    for formula, why in _MISTAKES if values is None else []:
        if formula(bm, bn, bk, s) == got:
            return why
    if w > 1 and (got == want * w or got * w == want):
        return "shared memory belongs to the program, not to a warp: num_warps does not change it"
    if got * 1024 == want:
        return "that is the size in KiB: return bytes (the compile's metadata counts bytes)"
    if s == 1 and got == 0:
        return ("one stage pipelines nothing, but tl.dot still reads its operands from shared memory: the one stage "
                "is one buffer for each tile (the compile table's 1-stage row); " + _TILES)
    return _TILES


def _shared_run(args, inputs, outputs, case):
    (fn,) = args
    got = []
    for cfg, want in zip(inputs["configs"], inputs["compiled"].tolist()):
        call = ", ".join(f"{k}={cfg[k]}" for k in _KEYS)
        value = fn(cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"], cfg["num_warps"], cfg["num_stages"])
        if isinstance(value, float) and value.is_integer():  # 98304.0 from a true division is a whole count
            value = int(value)
        elif isinstance(value, numbers.Integral) and not isinstance(value, bool):  # numpy's too (np.prod)
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise CheckFailed(f"predict_shared({call}) returned {value!r}; expected a whole number of bytes")
        if value != int(want):
            raise CheckFailed(f"predict_shared({call}) = {value} B, but the compiler allocates {int(want)} B of "
                              f"shared memory: {_shared_hint(cfg, value, int(want), fn)}")
        got.append(value)
    return {"shared": torch.tensor(got, dtype=torch.float64)}


PREDICT_SHARED = Exercise(
    id=f"{LESSON}.predict_shared",
    args=("function",),
    signature="predict_shared(BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages) -> int, bytes of shared memory "
              "the fixed fp16 matmul is compiled with for sm_90",
    description="shared memory of the fixed matmul for a configuration, checked against the sm_90 compiler",
    make_inputs=_shared_inputs,
    outputs=lambda case, inputs: {},
    run=_shared_run,
    reference=lambda inputs, case: {"shared": inputs["compiled"]},
    tolerance=lambda case: 0,
    visible=[Case("the lesson's configuration and a 2-stage one",
                  dict(fixed=(LESSON_CONFIG, dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=32, num_warps=4, num_stages=2))))],
    hidden=[Case("one stage, 4 warps vs 8", dict(fixed=(
                dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=4, num_stages=1),
                dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=8, num_stages=1))),
                 purpose="has num_stages=1: one buffer per stage, and num_warps does not matter"),
            Case("a 4-stage 64 x 256 tile and 2 configurations drawn from 24", dict(fixed=(
                dict(BLOCK_M=64, BLOCK_N=256, BLOCK_K=64, num_warps=8, num_stages=4),), count=2))],
    forbid=("triton",),
    points=(1, 2),
)


# ---- exercise 2: name the instruction that makes the planted kernel slow ------------------------------------

def _planted_and_fixed() -> list:
    from ...profile import compiler
    from ...profile import planted as p

    return compiler.compile_many([dict(kernel=k, args=_launch_args(), **LESSON_CONFIG)
                                  for k in (p._planted_matmul_kernel, p._fixed_matmul_kernel)])


def _value_only(args, inputs, outputs, case):
    raise RuntimeError("a value exercise is judged by its rule; nothing runs")


def _opcode(answer: str) -> str:
    """The mnemonic of ``answer``: a mnemonic, or a whole line of a listing without its SASS address (``/*0eb0*/``)
    and its predicate (``@P4``, ``@%p3``)."""
    words = answer.strip().split()
    while words and (words[0].startswith("@") or (words[0].startswith("/*") and words[0].endswith("*/"))):
        words = words[1:]
    return words[0].rstrip(";,") if words else ""


def instruction_problems(answer) -> str | None:
    """Why ``answer`` is not the planted kernel's slow instruction (None: it is)."""
    if not isinstance(answer, str) or not answer.strip():
        return (f"SLOW_INSTRUCTION must be a string: an instruction's mnemonic as the PTX or SASS writes it "
                f"(got {answer!r})")
    planted, fixed = _planted_and_fixed()
    op = _opcode(answer)
    sass = op[:1].isupper()
    stage = "sass" if sass else "ptx"
    counts_p, counts_f = planted.opcodes(stage), fixed.opcodes(stage)
    where = "SASS" if sass else "PTX"
    if counts_p[op] == 0:
        if counts_f[op]:
            return (f"{op!r} occurs only in the fixed kernel's {where} ({counts_f[op]} times): it is what the fix "
                    "brings; which instruction of the planted kernel does its work there?")
        near = sorted(o for o in counts_p if o.split(".")[0] == op.split(".")[0])[:6]
        return (f"{op!r} does not occur in the planted kernel's {where} (compiled for sm_90 with "
                f"{LESSON_CONFIG}); " + (f"its {op.split('.')[0]} instructions are {near}" if near else
                                         "copy a mnemonic from its listing, as the PTX or SASS writes it"))
    if counts_f[op]:
        return (f"{op!r} occurs {counts_p[op]} times in the planted kernel and {counts_f[op]} times in the fixed one: "
                "it is not what makes the planted kernel slow; look for an instruction only the planted one has")
    head = op.split(".")[0]
    is_load = head in ("LDG",) if sass else (head == "ld" and ".global" in op)
    if not is_load:
        what = "a store" if head in ("st", "STG", "STS") else "not a load from global memory"
        return (f"{op!r} occurs only in the planted kernel, but it is {what}: the time goes into the loop over K, "
                "into what brings the tiles of a and b from global memory")
    return None


SLOW_INSTRUCTION = Exercise(
    id=f"{LESSON}.slow_instruction",
    args=("value",),
    signature="SLOW_INSTRUCTION: str, the mnemonic (PTX or SASS) of the instruction that makes the planted matmul "
              "slow, e.g. 'ld.global.v4.b32' or 'LDG.E.128'",
    description="the planted kernel's one-element global loads, named from its PTX or SASS (compiled for sm_90)",
    run=_value_only,
    rule=lambda values, hidden: instruction_problems(values[0]),
    points=(2, 0),
)


# ---- exercise 3: fix the planted kernel ------------------------------------------------------------------------

_SIGNATURE = ("fixed_matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, "
              "stride_cm, stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr), "
              "launched on grid (cdiv(M, BLOCK_M), cdiv(N, BLOCK_N)); c = a @ b, fp32 accumulate, c in a's dtype")
_TWINS = ("kernels.profile.planted._planted_matmul_kernel", "kernels.profile.planted._fixed_matmul_kernel")


def _config(case) -> dict:
    return {k: case.get(k, LESSON_CONFIG[k]) for k in _KEYS}


def _launch(kernel, inputs, outputs, case):
    a, b, c = inputs["a"], inputs["b"], outputs["c"]
    cfg = _config(case)
    M, K = a.shape
    N = b.shape[1]
    grid = (triton.cdiv(M, cfg["BLOCK_M"]), triton.cdiv(N, cfg["BLOCK_N"]))
    kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                 BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], BLOCK_K=cfg["BLOCK_K"],
                 num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])


def _loads_wide(kernel) -> None:
    """Refuse a kernel that, compiled for sm_90 like the planted one (4096^3 fp16, the lesson's configuration),
    still brings a and b in one element at a time: right numbers, the planted kernel's speed. No GPU needed."""
    from ...profile import compiler

    try:
        c = compiler.compile_kernel(kernel, _launch_args(), detail=False, **LESSON_CONFIG)
    except compiler.CompileError as e:
        why = compile_reason(str(e)) or re.sub(r"^\S+ does not compile for a GPU \(sm_90\): ", "", str(e))[:600]
        raise CheckFailed(f"fixed_matmul_kernel does not compile for sm_90: {why}") from None
    # TMA copies (tensor descriptors) move whole tiles: they have no per-thread width and are never narrow
    rows = [r for r in c.table() if r["space"] == "global" and r["kind"] not in ("store", "async copy (TMA)")]
    # one element-at-a-time load is enough: a kernel that keeps one stride unspecialised loads that operand
    # narrow and the other wide, and runs at about the planted kernel's speed
    if any(0 < r["bits"] <= 16 for r in rows):
        found = ", ".join(f"{r['count']} x {r['bits']}-bit {r['kind']} ({r['opcodes'][0]})" for r in rows)
        some = "" if max(r["bits"] for r in rows) <= 16 else "part of "
        raise CheckFailed(f"compiled for sm_90 at M = N = K = {_SIZE} fp16 with {LESSON_CONFIG}, your kernel loads "
                          f"{some}a and b one element at a time ({found} per thread), as the planted kernel does: "
                          "right numbers, the planted kernel's speed. The compiler uses 16-byte loads only where it "
                          f"may assume the sizes and strides {_why_narrow(kernel)}; the cell above the check prints "
                          "your compile's loads")


def _why_narrow(kernel) -> str:
    """Where to look for what keeps a load one element wide: the decorator if it keeps anything unspecialised,
    else the masks and offsets."""
    kernel = getattr(kernel, "jit_fn", kernel)  # the check's compile pass hands a Recorder wrapping the kernel
    kept = getattr(kernel, "do_not_specialize", None) or (getattr(kernel, "kwargs", None) or {}).get(
        "do_not_specialize")  # a compiled kernel's, or the interpreter's (it keeps the decorator's arguments)
    if kept:
        return "(look at the decorator: every size and stride it keeps unspecialised costs one)"
    return ("and can prove 8 neighbouring elements alike in a load's mask and offsets (your decorator keeps "
            "everything specialised, so look at the loads: a mask such as `< K + 1` or `<= K`, or an offset "
            "that is not a multiple of 8 elements, costs one)")


def _matmul_run(args, inputs, outputs, case):
    if case.get("wide_loads") and hasattr(args[0], "fn"):  # a graded cubin's stand-in has no source to compile
        _loads_wide(args[0])
    _launch(args[0], inputs, outputs, case)


def _planted_baseline(args, inputs, outputs, case):
    from ...profile.planted import _planted_matmul_kernel

    _launch(_planted_matmul_kernel, inputs, outputs, case)


def _matmul_outputs(case, inputs):
    return {"c": ((case["M"], case["N"]), case.dtype)}


_SMALL = dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, num_warps=4, num_stages=2)
_FIXED_CASES = dict(
    visible=[Case("M=37 N=45 K=70 fp16, 32x32x32 tiles", dict(M=37, N=45, K=70, **_SMALL),
                  torch.float16, purpose="has partial tiles in M, N and K: every load and the store need masks"),
             Case("M=64 N=33 K=100 bf16, 32x32x32 tiles", dict(M=64, N=33, K=100, **_SMALL), torch.bfloat16),
             Case("M=40 N=48 K=57 fp16, b column-major", dict(M=40, N=48, K=57, b_t=True, **_SMALL), torch.float16,
                  purpose="passes b as a column-major view: address it through stride_bk and stride_bn"),
             Case("M=N=K=64 fp16, and compiled for sm_90 at 4096^3", dict(M=64, N=64, K=64, wide_loads=True, **_SMALL),
                  torch.float16, purpose="also compiles the kernel as the lesson does: its loads of a and b must be "
                                         "wider than one element")],
    hidden=[Case("M=1 N=17 K=16 fp16", dict(M=1, N=17, K=16, **_SMALL), torch.float16),
            Case("M=N=K=32 fp16, and compiled for sm_90 at 4096^3", dict(M=32, N=32, K=32, wide_loads=True, **_SMALL),
                 torch.float16, purpose="also compiles the kernel: its loads of a and b must be wider than one "
                                        "element"),
            Case("M=50 N=40 K=63 fp16, b column-major", dict(M=50, N=40, K=63, b_t=True, **_SMALL), torch.float16,
                 purpose="passes b as a column-major view: address it through stride_bk and stride_bn"),
            Case("M=33 N=64 K=31 bf16, 16x64x16 tiles", dict(M=33, N=64, K=31, BLOCK_M=16, BLOCK_N=64, BLOCK_K=16,
                                                            num_warps=4, num_stages=1), torch.bfloat16),
            Case("M=45 N=32 K=40 fp16, a column-major", dict(M=45, N=32, K=40, a_t=True, **_SMALL), torch.float16,
                 purpose="passes a as a column-major view: address it through stride_am and stride_ak"),
            Case("M=20 N=24 K=576 fp16, running sums past fp16's range",
                 dict(M=20, N=24, K=576, overflow=True, **_SMALL), torch.float16,
                 purpose="has running sums over K that pass fp16's largest value (65504) before they cancel: only an "
                         "fp32 accumulator holds them")],
)

# what the fixed kernel's two exercises share: its signature, inputs, launch and oracle
_FIXED_KERNEL = dict(args=("kernel",), signature=_SIGNATURE, make_inputs=_matmul_inputs, outputs=_matmul_outputs,
                     run=_matmul_run, reference=lambda inputs, case: {"c": inputs["a"] @ inputs["b"]},
                     magnitude=True, twins=_TWINS)

FIXED = Exercise(
    id=f"{LESSON}.fixed",
    description="the planted matmul, fixed: correct results on partial tiles, strided b, fp16 and bf16, and loads "
                "wider than one element when compiled for sm_90",
    **_FIXED_KERNEL,
    points=(2, 1),
    **_FIXED_CASES,
)

FIXED_SPEED = Exercise(
    id=f"{LESSON}.fixed_speed",
    description="the fixed matmul at least 3x faster than the planted one at 4096^3 fp16 (GPU only)",
    **_FIXED_KERNEL,
    visible=_FIXED_CASES["visible"][:1],
    performance=Performance(
        case=Case(f"M=N=K={_SIZE} fp16, {LESSON_CONFIG}", dict(M=_SIZE, N=_SIZE, K=_SIZE, **LESSON_CONFIG),
                  torch.float16),
        baseline=_planted_baseline,
        baseline_name="the planted kernel",
        min_speedup=3.0,
        floor=lambda case: (2 * (case["M"] * case["K"] + case["K"] * case["N"] + case["M"] * case["N"]),
                            2 * case["M"] * case["N"] * case["K"]),
    ),
    points=(2, 0),
)


# ---- exercise 4: an autotuning space whose winner is re-measured --------------------------------------------

_ALLOWED = {"BLOCK_M": (16, 32, 64, 128, 256), "BLOCK_N": (16, 32, 64, 128, 256), "BLOCK_K": (16, 32, 64, 128),
            "num_warps": (1, 2, 4, 8, 16), "num_stages": (1, 2, 3, 4, 5, 6)}
MAX_CONFIGS = 12
#: The re-measured winner may be at most this much slower than the lesson's configuration, timed in the same run.
WINNER_SLACK = 1.10


def _structure(space) -> str | None:
    if not isinstance(space, (list, tuple)) or not all(isinstance(c, dict) for c in space):
        return f"SPACE must be a list of dicts such as {LESSON_CONFIG}; got {type(space).__name__}"
    if len(space) < 4:
        return (f"SPACE has {len(space)} configuration(s); an autotuning space needs at least 4 to choose from "
                f"(at most {MAX_CONFIGS}: every one is compiled and timed on the first call)")
    if len(space) > MAX_CONFIGS:
        return (f"SPACE has {len(space)} configurations; keep it to {MAX_CONFIGS} (every one is compiled and timed on "
                "the first call: that is the cost of autotuning)")
    for i, cfg in enumerate(space):
        if set(cfg) != set(_KEYS):
            return f"SPACE[{i}] has keys {sorted(cfg)}; each configuration sets exactly {list(_KEYS)}"
        for k, v in cfg.items():
            if isinstance(v, bool) or v not in _ALLOWED[k]:
                return f"SPACE[{i}]: {k}={v!r}; allowed: {_ALLOWED[k]}"
    seen = [tuple(c[k] for k in _KEYS) for c in space]
    if len(set(seen)) < len(seen):
        return "SPACE lists the same configuration twice"
    varied = [k for k in _KEYS if len({c[k] for c in space}) > 1]
    if len(varied) < 2:
        return f"SPACE varies only {varied or 'nothing'}; vary at least two of {list(_KEYS)}"
    return None


def space_problems(space, *, measure: bool) -> str | None:
    """Why ``space`` is not an acceptable autotuning space (None: it is): its shape, then every configuration
    compiled for sm_90 within the shared-memory limit, then (``measure``, on a GPU) the autotuner's winner
    re-measured on fresh inputs against the lesson's configuration."""
    why = _structure(space)
    if why:
        return why
    from ...profile.compiler import CompileError

    try:
        compiled = compile_matmul([dict(c) for c in space])
    except CompileError as e:
        return f"a configuration of SPACE does not compile for sm_90: {str(e)[:600]}"
    for i, c in enumerate(compiled):
        if c.shared > SMEM_LIMIT:
            return (f"SPACE[{i}] = {space[i]} needs {c.shared} B of shared memory; an H100/H200 program may use "
                    f"{SMEM_LIMIT} B (out of resources: fewer stages or smaller tiles)")
    if measure and ON_GPU:
        return _remeasured(space)
    return None


def _remeasured(space) -> str | None:
    from ...profile import measure
    from ...profile.planted import _fixed_matmul_kernel, launch

    n = _SIZE

    def fresh():
        return (torch.randn(n, n, device="cuda", dtype=torch.float16),
                torch.randn(n, n, device="cuda", dtype=torch.float16),
                torch.empty(n, n, device="cuda", dtype=torch.float16))

    def run_tuned(tuned, args):
        a, b, c = args
        grid = lambda meta: (triton.cdiv(n, meta["BLOCK_M"]), triton.cdiv(n, meta["BLOCK_N"]))  # noqa: E731
        tuned[grid](a, b, c, n, n, n, n, 1, n, 1, n, 1)

    out = measure.autotune(_fixed_matmul_kernel, [dict(c) for c in space], run_tuned, fresh)
    winner, base = [out["winner_ms"]], []
    a, b, c = fresh()
    again = fresh()
    for _ in range(3):  # alternate, and keep each one's best: other work on the GPU slows both, not one
        base.append(measure.time_ms(lambda: launch(_fixed_matmul_kernel, a, b, c, **LESSON_CONFIG)))
        winner.append(measure.time_ms(lambda: run_tuned(out["tuned"], again)))
    if min(winner) > WINNER_SLACK * min(base):
        return (f"the autotuner's winner {out['winner']} re-measured on fresh inputs takes {min(winner):.4f} "
                f"ms, slower than the lesson's configuration {LESSON_CONFIG} ({min(base):.4f} ms) by more than "
                f"{WINNER_SLACK - 1:.0%}: the space misses the configurations that win on this GPU")
    return None


AUTOTUNE_SPACE = Exercise(
    id=f"{LESSON}.autotune_space",
    args=("value",),
    signature=f"SPACE: a list of 4 to {MAX_CONFIGS} dicts with keys {', '.join(_KEYS)}, the configurations to "
              "autotune the fixed matmul over at M = N = K = 4096 fp16",
    description="an autotuning space: compiles for sm_90 within shared memory; on a GPU its winner, re-measured on "
                "fresh inputs, is within 10% of the lesson's configuration",
    run=_value_only,
    rule=lambda values, hidden: space_problems(values[0], measure=hidden),
    hidden=[Case("on a GPU: autotuned, the winner timed again on fresh inputs against the lesson's configuration")],
    points=(1, 2),
    timed_hidden=True,
)

register(PREDICT_SHARED, SLOW_INSTRUCTION, FIXED, FIXED_SPEED, AUTOTUNE_SPACE)
