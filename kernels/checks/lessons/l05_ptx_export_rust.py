"""Lesson 05 (PTX export and Rust): predict a launch from compiled metadata; build a launch from a manifest; the
launch grid in Rust.

Both are function exercises graded on the CPU. ``build_launch`` returns real addresses, so ``run`` turns them back
into names (which tensor, which scratch buffer, NULL) before comparing with the manifest's own reading; it also
feeds the function broken launches (a missing size, a failed requirement, a wrong dtype, a short tensor, a grid or
a scalar out of range), each of which must raise. The visible cases cover every refusal the lesson's text lists,
an unused pointer and the scratch buffers; the hidden ones repeat them on other manifests.
"""

import copy
import math
import re
from types import SimpleNamespace

import torch

from ..spec import Case, CheckFailed, Exercise, NotGradedHere, register

__all__ = ["PREDICT_LAUNCH", "BUILD_LAUNCH", "LAUNCH_GRID", "MANIFESTS", "manifest", "expected_launch"]

GRID_LIMITS = (2**31 - 1, 65535, 65535)
INT_RANGES = {"i32": (-(2**31), 2**31 - 1), "i64": (-(2**63), 2**63 - 1), "u32": (0, 2**32 - 1),
              "u64": (0, 2**64 - 1)}
_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32, "i32": torch.int32,
           "i64": torch.int64}
_TYPE_CODE = {"u64": 1, "i32": 2, "i64": 3, "u32": 4, "fp32": 5, "fp64": 6}


# ---- exercise 1: predict the launch ----------------------------------------------------------------------------

def _predict_configs(seed: int, n: int) -> list[tuple[SimpleNamespace, dict, dict]]:
    gen = torch.Generator().manual_seed(seed)

    def draw(lo, hi):
        return int(torch.randint(lo, hi + 1, (1,), generator=gen))

    out = []
    for _ in range(n):
        md = SimpleNamespace(num_warps=2 ** draw(0, 4), warp_size=32, shared=16 * draw(0, 14528), num_stages=draw(1, 4),
                             name="chunked_attention_kernel")
        sizes = dict(B=draw(1, 64), T=draw(1, 300_000), H=draw(1, 64), K=draw(1, 256), V=draw(1, 300))
        out.append((md, sizes, {"BT": 2 ** draw(4, 7), "BK": 256, "BV": 2 ** draw(4, 7), "PRECISION": None}))
    return out


def _predict_expected(md, sizes, cx) -> list[int]:
    return [math.ceil(sizes["V"] / cx["BV"]), sizes["B"] * sizes["H"], 1, md.num_warps * md.warp_size, 1, 1,
            md.shared]


def _triple(name, v, where):
    if not isinstance(v, (tuple, list)) or len(v) != 3:
        raise CheckFailed(f"{where}: {name} must be three numbers (x, y, z), got {v!r}")
    for x in v:
        if isinstance(x, bool) or not isinstance(x, int):
            hint = (": NumPy's integers are not Python's, convert each with int(...) (a launcher writes them out "
                    "as plain numbers)" if type(x).__module__ == "numpy" else "")
            raise CheckFailed(f"{where}: {name} must hold integers, got {v!r}{hint}")
    return list(v)


def _predict_run(args, inputs, outputs, case):
    (fn,) = args
    rows = []
    for md, sizes, cx in _predict_configs(inputs["seed"], inputs["n"]):
        where = f"predict_launch(metadata(num_warps={md.num_warps}, shared={md.shared}), {sizes}, BV={cx['BV']})"
        got = fn(md, dict(sizes), dict(cx))
        if not isinstance(got, dict) or not {"grid", "block", "shared"} <= set(got):
            raise CheckFailed(f"{where} returned {got!r:.120}; return a dict with 'grid', 'block' and 'shared'")
        row = _triple("grid", got["grid"], where) + _triple("block", got["block"], where)
        if isinstance(got["shared"], bool) or not isinstance(got["shared"], int):
            raise CheckFailed(f"{where}: shared must be an int (bytes), got {got['shared']!r}")
        rows.append(row + [got["shared"]])
        want = _predict_expected(md, sizes, cx)
        if rows[-1] != want:
            raise CheckFailed(f"{where} gave grid {tuple(rows[-1][:3])}, block {tuple(rows[-1][3:6])}, shared "
                              f"{rows[-1][6]}; the launch needs grid {tuple(want[:3])}, block {tuple(want[3:6])}, "
                              f"shared {want[6]}")
    return {"launch": torch.tensor(rows, dtype=torch.float64)}


def _predict_reference(inputs, case):
    rows = [_predict_expected(*c) for c in _predict_configs(inputs["seed"], inputs["n"])]
    return {"launch": torch.tensor(rows, dtype=torch.float64)}


PREDICT_LAUNCH = Exercise(
    id="05_ptx_export_rust.predict_launch",
    args=("function",),
    signature="predict_launch(metadata, sizes, constexprs) -> {'grid': (x, y, z), 'block': (threads, 1, 1), "
              "'shared': bytes}, for lesson 04's fused kernel",
    description="grid (cdiv(V, BV), B*H, 1), 32·num_warps threads, the metadata's dynamic shared memory",
    make_inputs=lambda case, gen: {"seed": int(torch.randint(0, 2**31 - 1, (1,), generator=gen)), "n": case["n"]},
    run=_predict_run,
    reference=_predict_reference,
    tolerance=lambda case: 0.0,
    visible=[Case("50 random configurations", dict(n=50))],
    points=(2, 0),
)


# ---- exercise 2: the manifest-driven launch ---------------------------------------------------------------------

def _strides(qk: str, v: str) -> dict:
    return {f"stride_{x}{d}": e for x in "qkvo" for d, e in zip("bth", (f"T*H*{qk if x in 'qk' else v}",
                                                                       f"H*{qk if x in 'qk' else v}",
                                                                       qk if x in "qk" else v))}


def _pointer(name, dtype, role, numel):
    size = {"fp16": 2, "bf16": 2, "fp32": 4, "i32": 4, "i64": 8}[dtype]
    return {"name": name, "type": f"*{dtype}", "kind": "pointer", "dtype": dtype, "element_bytes": size,
            "align": 16, "role": role, "numel": numel}


def _scalar(name, ty, value):
    return {"name": name, "type": ty, "kind": "scalar", "bytes": 8 if ty in ("i64", "u64", "fp64") else 4,
            "value": value}


def _base(kernel, entry, params, sizes, grid, constexprs, requires, threads, shared, scratch=(0, 0)):
    return {"format": "gpu-kernel-workbook/kernel-manifest", "format_version": 1, "kernel": kernel, "entry": entry,
            "triton_version": "3.6.0", "images": {"ptx": f"{kernel}.ptx", "cubin": f"{kernel}.cubin"},
            "prefer": "ptx", "dtype": params[0].get("dtype", "fp32"), "num_warps": threads // 32,
            "threads_per_block": threads, "shared_bytes": shared, "constexprs": constexprs, "sizes": sizes,
            "grid": grid, "requires": requires, "params": params,
            "scratch": [{"name": "global_scratch", "bytes_per_program": scratch[0], "align": 128},
                        {"name": "profile_scratch", "bytes_per_program": scratch[1], "align": 8}]}


def _yours(dtype="bf16"):
    params = ([_pointer(n, dtype, r, e) for n, r, e in (("q_ptr", "in", "B*T*H*K"), ("k_ptr", "in", "B*T*H*K"),
                                                       ("v_ptr", "in", "B*T*H*V"), ("o_ptr", "out", "B*T*H*V"))]
              + [_scalar(n, "i32", n) for n in "THKV"] + [_scalar("scale", "fp32", None)]
              + [_scalar(n, "i32", e) for n, e in _strides("K", "V").items()])
    return _base("chunked_attention", "chunked_attention_kernel", params, ["B", "T", "H", "K", "V"],
                 ["cdiv(V, BV)", "B*H", "1"], {"BT": 64, "BK": 128, "BV": 64, "PRECISION": None},
                 ["B >= 1", "T >= 1", "H >= 1", "K >= 1", "V >= 1", "K <= BK", "B*T*H*K <= 2147483647",
                  "B*T*H*V <= 2147483647"], 128, 57344)


def _package():
    params = ([_pointer(n, "fp16", r, e) for n, r, e in (("q_ptr", "in", "B*T*H*K"), ("k_ptr", "in", "B*T*H*K"),
                                                        ("v_ptr", "in", "B*T*H*V"), ("o_ptr", "out", "B*T*H*V"))]
              + [_pointer("h0_ptr", "fp32", "unused", "0"), _pointer("ht_ptr", "fp32", "out", "B*H*K*V"),
                 _pointer("cu_ptr", "i32", "unused", "0")]
              + [_scalar(n, "i32", n) for n in "THKV"] + [_scalar("scale", "fp32", None)]
              + [_scalar(n, "i32", e) for n, e in _strides("K", "V").items()])
    return _base("linear_attention", "_chunked_linear_attention_kernel", params, ["B", "T", "H", "K", "V"],
                 ["cdiv(V, BV)", "B*H", "1"], {"BT": 32, "BK": 64, "BV": 32, "USE_H0": False, "STORE_HT": True,
                                               "IS_VARLEN": False, "UPCAST": False, "PRECISION": None},
                 ["K <= BK", "B*T*H*K <= 2147483647"], 256, 40960)


def _scratchy():
    # a scalar between pointers, as a kernel's signature may order them: the arguments follow the manifest
    params = [_pointer("x_ptr", "fp32", "in", "n"), _scalar("n", "i32", "n"), _pointer("out_ptr", "fp32", "out", "n"),
              _pointer("lut_ptr", "fp32", "unused", "0"),
              _scalar("rows", "i64", "cdiv(n, BLOCK) * BLOCK"), _scalar("tail", "u32", "n % BLOCK"),
              _scalar("alpha", "fp32", None)]
    # two programs along y (a copy split in two halves of its rows, say): the scratch is per program, all of them
    return _base("scaled_copy", "scaled_copy_kernel", params, ["n"], ["cdiv(n, BLOCK)", "2", "1"],
                 {"BLOCK": 256, "FAST": True}, ["n >= 1"], 64, 0, scratch=(96, 0))


def _wide():
    params = [_pointer("a_ptr", "fp32", "inout", "M*N"), _scalar("M", "i32", "M"), _scalar("N", "i32", "N"),
              _scalar("MN", "i32", "M*N"), _scalar("gain", "fp32", None), _scalar("bias", "fp32", None)]
    return _base("grid2d", "grid2d_kernel", params, ["M", "N"], ["cdiv(N, BN)", "cdiv(M, BM)", "2"],
                 {"BM": 8, "BN": 32}, [], 256, 2048, scratch=(16, 32))


#: The manifests the checks build launches for, by name.
MANIFESTS = {"yours": _yours, "package": _package, "scratch": _scratchy, "wide": _wide}


def manifest(name: str) -> dict:
    return MANIFESTS[name]()


def _env(m, sizes):
    from ...export import expr

    env = {k: v for k, v in m["constexprs"].items() if isinstance(v, int) and not isinstance(v, bool)}
    env.update(sizes)
    return env, expr


def expected_launch(m: dict, sizes: dict, scalars: dict) -> dict:
    """The launch the manifest describes, with pointers named: ("ptr", name), ("scratch", i) or ("null",)."""
    env, expr = _env(m, sizes)
    grid = tuple(expr.evaluate(g, env) for g in m["grid"])
    args = []
    for p in m["params"]:
        if p["kind"] == "pointer":
            args.append(("u64", ("null",) if p["role"] == "unused" else ("ptr", p["name"])))
        else:
            v = scalars[p["name"]] if p["value"] is None else expr.evaluate(p["value"], env)
            args.append((p["type"], float(v) if p["type"].startswith("fp") else int(v)))
    programs = math.prod(grid)
    for i, s in enumerate(m["scratch"]):
        args.append(("u64", ("scratch", i) if s["bytes_per_program"] else ("null",)))
    return {"grid": grid, "block": (m["threads_per_block"], 1, 1), "shared": m["shared_bytes"], "args": args,
            "scratch_bytes": [s["bytes_per_program"] * programs for s in m["scratch"]]}


def _case_setup(case):
    m = manifest(case["manifest"])
    sizes = dict(case["sizes"])
    return m, sizes, dict(case.get("scalars", {}))


def _build_inputs(case, gen):
    m, sizes, _ = _case_setup(case)
    env, expr = _env(m, sizes)
    out = {}
    for p in m["params"]:
        if p["kind"] == "pointer" and p["role"] != "unused":
            n = expr.evaluate(p["numel"], env)
            dt = _DTYPES[p["dtype"]]
            out[p["name"]] = (torch.randn(n, generator=gen).to(dt) if dt.is_floating_point
                              else torch.randint(0, 100, (n,), generator=gen, dtype=dt))
    return out


class _Alloc:
    """Stands in for a device allocator: hands out distinct aligned fake addresses and records the requests."""

    def __init__(self):
        self.calls = []
        self.addresses = []

    def __call__(self, nbytes, align):
        if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes <= 0:
            raise CheckFailed(f"alloc({nbytes!r}, {align!r}): the scratch size must be a positive int of bytes")
        self.calls.append((nbytes, align))
        self.addresses.append(0x7F00_0000_0000 + len(self.calls) * 0x1000_0000)
        return self.addresses[-1]


def _canonical(plan, tensors, alloc, where):
    """Validate the returned plan's shape and turn addresses back into names."""
    if not isinstance(plan, dict) or not {"grid", "block", "shared", "args"} <= set(plan):
        raise CheckFailed(f"{where} returned {plan!r:.120}; return a dict with 'grid', 'block', 'shared', 'args'")
    grid = tuple(_triple("grid", plan["grid"], where))
    block = tuple(_triple("block", plan["block"], where))
    if isinstance(plan["shared"], bool) or not isinstance(plan["shared"], int):
        raise CheckFailed(f"{where}: shared must be an int, got {plan['shared']!r}")
    by_addr = {t.data_ptr(): n for n, t in tensors.items()}
    scratch = set(alloc.addresses)
    args = []
    for i, a in enumerate(plan["args"]):
        if not isinstance(a, (tuple, list)) or len(a) != 2 or not isinstance(a[0], str):
            raise CheckFailed(f"{where}: args[{i}] is {a!r:.80}; each argument is a (type, value) pair")
        ty, v = a
        if ty not in _TYPE_CODE:
            raise CheckFailed(f"{where}: args[{i}] has type {ty!r}; use the manifest's types ({', '.join(_TYPE_CODE)})")
        if ty == "u64" and isinstance(v, int) and not isinstance(v, bool):
            if v == 0:
                v = ("null",)
            elif v in by_addr:
                v = ("ptr", by_addr[v])
            elif v in scratch:
                v = ("scratch", v)
        args.append((ty, v))
    return {"grid": grid, "block": block, "shared": plan["shared"], "args": args}


def _describe(arg):
    ty, v = arg
    if isinstance(v, tuple):
        return {"null": f"({ty}, NULL)", "ptr": f"({ty}, address of {v[-1]})", "scratch": f"({ty}, scratch)"}[v[0]]
    return f"({ty}, {v!r})"


def _compare_plans(got, want, m, alloc, where):
    for key in ("grid", "block"):
        if tuple(got[key]) != tuple(want[key]):
            raise CheckFailed(f"{where}: {key} {tuple(got[key])}, expected {tuple(want[key])}")
    if got["shared"] != want["shared"]:
        raise CheckFailed(f"{where}: shared {got['shared']}, expected {want['shared']} (the manifest's shared_bytes)")
    names = [p["name"] for p in m["params"]] + [s["name"] for s in m["scratch"]]
    if len(got["args"]) != len(want["args"]):
        raise CheckFailed(f"{where}: {len(got['args'])} arguments, but the PTX entry takes {len(want['args'])}: "
                          f"{len(m['params'])} from the manifest's params and the 2 scratch pointers")
    for i, (g, w) in enumerate(zip(got["args"], want["args"])):
        gw = (g[0], g[1] if not isinstance(g[1], tuple) or g[1][0] != "scratch" else ("scratch",))
        ww = (w[0], w[1] if not isinstance(w[1], tuple) or w[1][0] != "scratch" else ("scratch",))
        same = gw[0] == ww[0] and (gw[1] == ww[1] if not isinstance(ww[1], float)
                                   else isinstance(gw[1], (int, float)) and float(gw[1]) == ww[1])
        if isinstance(ww[1], int) and isinstance(gw[1], float):
            same = False
        if not same:
            raise CheckFailed(f"{where}: args[{i}] ({names[i]}) is {_describe(g)}, expected {_describe(w)}")
    want_bytes = [b for b in want["scratch_bytes"] if b]
    if sorted(n for n, _ in alloc.calls) != sorted(want_bytes):
        raise CheckFailed(f"{where}: alloc was called for {[n for n, _ in alloc.calls]} bytes; the scratch buffers "
                          f"need {want_bytes} (bytes_per_program x number of programs)")
    want_calls = sorted((b, s["align"]) for b, s in zip(want["scratch_bytes"], m["scratch"]) if b)
    if sorted(alloc.calls) != want_calls:
        raise CheckFailed(f"{where}: alloc was called as (bytes, align) {sorted(alloc.calls)}; the scratch buffers "
                          f"need {want_calls}: pass each buffer's own align from the manifest's scratch list")


def _encode(plan) -> dict:
    codes = {"null": 0.0, "scratch": -1.0}
    flat = []
    for ty, v in plan["args"]:
        if isinstance(v, tuple):
            val = codes.get(v[0], -2.0)
        else:
            val = float(v)
        flat += [float(_TYPE_CODE[ty]), val]
    return {"grid": torch.tensor(plan["grid"], dtype=torch.float64),
            "block": torch.tensor(plan["block"], dtype=torch.float64), "shared": float(plan["shared"]),
            "args": torch.tensor(flat, dtype=torch.float64)}


def _refuses(fn, why, expect, m, sizes, tensors, scalars, *names):
    from ..engine import CaseTooLong

    alloc = _Alloc()
    try:
        fn(copy.deepcopy(m), dict(sizes), dict(tensors), dict(scalars), alloc)
    except CaseTooLong:  # the case's time limit, not the answer's refusal
        raise
    except Exception as e:
        if not isinstance(e, expect):
            raise CheckFailed(f"build_launch raised {type(e).__name__} ({str(e)[:120]!r}) for {why}; expected "
                              f"{expect.__name__}, raised on purpose with a message that names the fault") from None
        text = str(e)
        if names and not any(n in text for n in names):
            if re.search(r"\bx\b.*65535|65535.*\bx\b", text):
                raise CheckFailed(f"build_launch refused {why} with {text!r}: 65535 is the limit of grid y and z; "
                                  "x goes up to 2**31 - 1. With the x limit right, this launch's real fault is the "
                                  f"one to name ({' or '.join(names)})") from None
            raise CheckFailed(f"build_launch refused {why} with {text!r}, which does not say what is wrong "
                              f"(mention {' or '.join(names)})") from None
        return
    raise CheckFailed(f"build_launch accepted {why}; it must raise {expect.__name__} before anything is launched")


def _accepts(fn, why, m, sizes, tensors, scalars, grid,
             because="CUDA's grid limits are inclusive (a grid of exactly 65535 along y is allowed)"):
    """A launch at the edge of a rule, which must go through with the grid ``grid``: CUDA's limits, an integer
    type's range and an alignment are inclusive, ``because`` says which."""
    try:
        got = fn(copy.deepcopy(m), dict(sizes), dict(tensors), dict(scalars), _Alloc())
    except (ValueError, TypeError) as e:
        env, expr = _env(m, sizes)
        for p in m["params"]:  # the refusal names a pointer whose tensor is only larger than it needs
            n = p["name"]
            if p["kind"] != "pointer" or p["role"] == "unused" or n not in tensors or n not in str(e):
                continue
            need = expr.evaluate(p["numel"], env)
            if tensors[n].numel() > need:
                raise CheckFailed(f"build_launch refused {why} with {str(e)!r}: {n} holds {tensors[n].numel()} "
                                  f"elements where the launch needs {need}, and a larger buffer is fine (the kernel "
                                  "reads only what it needs): refuse only a tensor with fewer elements than its "
                                  "numel") from None
        raise CheckFailed(f"build_launch refused {why} with {str(e)!r}: {because}, so this launch fits") from None
    given = got.get("grid") if isinstance(got, dict) else got
    if not isinstance(given, (tuple, list)) or tuple(given) != grid:
        raise CheckFailed(f"build_launch gave the grid {given!r} for {why}; it needs {grid}")


def _bad_launches(fn, m, sizes, tensors, scalars):
    some = next(iter(sizes))
    _refuses(fn, f"sizes without {some!r}", ValueError, m, {k: v for k, v in sizes.items() if k != some}, tensors,
             scalars, some)
    _refuses(fn, "an unknown size 'Z'", ValueError, m, {**sizes, "Z": 3}, tensors, scalars, "Z")
    used = [p for p in m["params"] if p["kind"] == "pointer" and p["role"] != "unused"]
    first = used[0]["name"]
    _refuses(fn, f"no tensor for {first}", ValueError, m, sizes, {k: v for k, v in tensors.items() if k != first},
             scalars, first)
    wrong = torch.float16 if tensors[first].dtype != torch.float16 else torch.float32
    _refuses(fn, f"{first} of dtype {wrong}", TypeError, m, sizes, {**tensors, first: tensors[first].to(wrong)},
             scalars, first)
    last = used[-1]["name"]
    _refuses(fn, f"a {last} one element too short", ValueError, m, sizes,
             {**tensors, last: tensors[last].flatten()[:-1]}, scalars, last)
    t = tensors[first]
    _accepts(fn, f"a {first} one element longer than it needs", m, sizes,
             {**tensors, first: torch.empty(t.numel() + 1, dtype=t.dtype, device=t.device)}, scalars,
             expected_launch(m, sizes, scalars)["grid"], "a larger buffer is fine")
    if t.device.type != "meta":  # a view one element in: the same size and dtype, off the 16 bytes assumed
        shifted = torch.zeros(t.numel() + 16, dtype=t.dtype, device=t.device)[1:t.numel() + 1].view_as(t)
        if shifted.data_ptr() % 16:
            _refuses(fn, f"{first} starting {t.element_size()} bytes past a multiple of 16 (align 16)", ValueError, m,
                     sizes, {**tensors, first: shifted}, scalars, first, "align", "16")
        # and a view 16 bytes in, not 32: aligned, though an address counted in elements is not a multiple of 16
        step = 16 // t.element_size()
        inside = torch.zeros(t.numel() + 128, dtype=t.dtype, device=t.device)
        inside = inside[(-inside.data_ptr() % 64) // t.element_size() + step:][:t.numel()].view_as(t)
        _accepts(fn, f"{first} starting 16 bytes past a multiple of 64 (align 16)", m, sizes,
                 {**tensors, first: inside}, scalars, expected_launch(m, sizes, scalars)["grid"],
                 "align is in bytes: the address (data_ptr(), in bytes) is a multiple of 16")
    if scalars:
        name = next(iter(scalars))
        _refuses(fn, f"no value for the scalar {name}", ValueError, m, sizes, tensors,
                 {k: v for k, v in scalars.items() if k != name}, name)


def _special_refusals(fn, name):
    """Launches that break one rule of one manifest, with inputs that are otherwise right (tensors too large to
    allocate are meta tensors: contiguous, of the right dtype and size, holding no memory)."""
    if name == "yours":
        m = manifest("yours")
        sizes = dict(B=1, T=2, H=1, K=200, V=16)
        t = {n: torch.zeros(e, dtype=torch.bfloat16) for n, e in (("q_ptr", 400), ("k_ptr", 400), ("v_ptr", 32),
                                                                   ("o_ptr", 32))}
        _refuses(fn, "K=200 with BK=128 (requirement 'K <= BK')", ValueError, m, sizes, t, {"scale": 0.1},
                 "K <= BK", "K")
        sizes = dict(B=70_000, T=1, H=1, K=1, V=1)
        t = {n: torch.zeros(70_000, dtype=torch.bfloat16) for n in ("q_ptr", "k_ptr", "v_ptr", "o_ptr")}
        _refuses(fn, "B*H = 70000 programs along grid y (CUDA allows 65535)", ValueError, m, sizes, t,
                 {"scale": 0.1}, "grid", "65535", "y")
        sizes = dict(B=65_535, T=1, H=1, K=1, V=1)
        t = {n: v[:65_535] for n, v in t.items()}
        _accepts(fn, "B*H = 65535 programs along grid y, CUDA's limit", m, sizes, t, {"scale": 0.1},
                 (1, 65_535, 1))
    if name == "package":
        m = manifest("package")
        sizes = dict(B=1, T=2, H=1, K=100, V=16)
        t = {n: torch.zeros(e, dtype=torch.float16) for n, e in (("q_ptr", 200), ("k_ptr", 200), ("v_ptr", 32),
                                                                  ("o_ptr", 32))}
        t["ht_ptr"] = torch.zeros(1600)
        _refuses(fn, "K=100 with BK=64 (requirement 'K <= BK')", ValueError, m, sizes, t, {"scale": 0.1},
                 "K <= BK", "K")
    if name == "scratch":
        m = manifest("scratch")
        big = torch.empty(2**31, device="meta")
        _refuses(fn, "n = 2**31 for the i32 scalar n", ValueError, m, dict(n=2**31), {"x_ptr": big, "out_ptr": big},
                 {"alpha": 0.5}, "n", "i32")
        _accepts(fn, "n = 2**31 - 1 for the i32 scalar n", m, dict(n=2**31 - 1), {"x_ptr": big, "out_ptr": big},
                 {"alpha": 0.5}, (2**23, 2, 1), "i32 holds -2**31 ... 2**31 - 1, both ends included")
    if name == "wide":
        m = manifest("wide")
        sizes = dict(M=50_000, N=50_000)
        big = torch.empty(50_000 * 50_000, device="meta")
        _refuses(fn, "M*N = 2.5e9 for the i32 scalar MN", ValueError, m, sizes, {"a_ptr": big},
                 {"gain": 1.0, "bias": 0.0}, "MN", "i32")
        _accepts(fn, "M*N = 2**31 - 1 for the i32 scalar MN (M = 1)", m, dict(M=1, N=2**31 - 1),
                 {"a_ptr": torch.empty(2**31 - 1, device="meta")}, {"gain": 1.0, "bias": 0.0}, (2**26, 1, 2),
                 "i32 holds -2**31 ... 2**31 - 1, both ends included")
        tall = torch.empty(560_000, device="meta")
        _refuses(fn, "M = 560000 rows: cdiv(M, BM) = 70000 programs along grid y (CUDA allows 65535)", ValueError, m,
                 dict(M=560_000, N=1), {"a_ptr": tall}, {"gain": 1.0, "bias": 0.0}, "grid", "65535", "y")


def _build_run(args, inputs, outputs, case):
    (fn,) = args
    m, sizes, scalars = _case_setup(case)
    # in the reverse of the manifest's order: the arguments must follow the manifest's params, not this dict
    tensors = dict(reversed([(k, v) for k, v in inputs.items() if isinstance(v, torch.Tensor)]))
    where = f"build_launch(<{m['kernel']} manifest>, {sizes}, ...)"
    alloc = _Alloc()
    try:
        plan = fn(copy.deepcopy(m), dict(sizes), dict(tensors), dict(scalars), alloc)
    except (ValueError, TypeError) as e:
        raise CheckFailed(f"{where}: build_launch refused a launch that fits the manifest, raising "
                          f"{type(e).__name__}: {e}") from None
    got = _canonical(plan, tensors, alloc, where)
    _compare_plans(got, expected_launch(m, sizes, scalars), m, alloc, where)
    if case.get("refusals"):
        _bad_launches(fn, m, sizes, tensors, scalars)
        _special_refusals(fn, case["manifest"])
    return _encode(got)


def _build_reference(inputs, case):
    m, sizes, scalars = _case_setup(case)
    return _encode(expected_launch(m, sizes, scalars))


BUILD_LAUNCH = Exercise(
    id="05_ptx_export_rust.build_launch",
    magnitude=True,
    args=("function",),
    signature="build_launch(manifest, sizes, tensors, scalars, alloc) -> {'grid': (x, y, z), 'block': "
              "(threads, 1, 1), 'shared': bytes, 'args': [(type, value), ...]}",
    description="one (type, value) per PTX parameter in the manifest's order, then the two scratch pointers; "
                "refuses launches that do not fit the manifest",
    make_inputs=_build_inputs,
    run=_build_run,
    reference=_build_reference,
    tolerance=lambda case: 0.0,
    visible=[
        Case("your lesson-04 kernel, B=2 T=100 H=3 K=32 V=40", dict(manifest="yours", sizes=dict(B=2, T=100, H=3,
                                                                                                  K=32, V=40),
                                                                     scalars={"scale": 32 ** -0.5}, refusals=True)),
        Case("a kernel with a global scratch buffer, a 2-D grid and an unused pointer, n=1000",
             dict(manifest="scratch", sizes=dict(n=1000), scalars={"alpha": 0.75}, refusals=True)),
    ],
    hidden=[
        Case("the package's kernel (unused pointers, an fp32 state), B=1 T=37 H=2 K=20 V=70",
             dict(manifest="package", sizes=dict(B=1, T=37, H=2, K=20, V=70), scalars={"scale": 0.2236},
                  refusals=True)),
        Case("a 3-D grid with both scratch buffers, M=33 N=100", dict(manifest="wide", sizes=dict(M=33, N=100),
                                                                      scalars={"gain": -1.5, "bias": 2.0},
                                                                      refusals=True)),
        Case("your kernel at T=1, K=V=128", dict(manifest="yours", sizes=dict(B=4, T=1, H=16, K=128, V=128),
                                                 scalars={"scale": 128 ** -0.5}, refusals=True)),
    ],
    points=(4, 2),
)



# ---- exercise 3: the launch grid, in Rust ----------------------------------------------------------------------

def _launch_grid_rule(args, hidden):
    """Build the learner's Rust (``YOUR_RUST``) with cargo, run the crate's tests (``rust/exercise/grid.rs``) and
    compare its grid on cases drawn fresh with the manifests' own (:func:`kernels.export.rust_exercise.grade`)."""
    from ...export import rust_exercise
    from ..engine import draw_seed

    (source,) = args
    passed, message = rust_exercise.grade(source, draw_seed())
    if passed is None:
        raise NotGradedHere(message)
    return None if passed else message


LAUNCH_GRID = Exercise(
    id="05_ptx_export_rust.launch_grid",
    args=("value",),
    signature="YOUR_RUST: Rust source defining pub fn launch_grid(manifest: &Manifest, sizes: &[(String, i64)]) -> "
              "Result<[u32; 3], String>",
    description="the grid expressions evaluated over the constexprs and sizes, each within CUDA's limits (x up to "
                "2**31 - 1, y and z up to 65535); Err for a missing or unknown size, a failing expression or a grid "
                "outside them",
    run=lambda args, inputs, outputs, case: None,  # a value exercise: the rule is the whole check
    rule=_launch_grid_rule,
    toolchain="cargo",
    points=(3, 0),
)

register(PREDICT_LAUNCH, BUILD_LAUNCH, LAUNCH_GRID)
