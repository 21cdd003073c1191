"""Lesson 02 (naive HBM-bound loops): causal linear attention as a recurrence, first with the state round-tripping
through a global buffer every step (one program per batch-head), then with the state in registers (V split over
programs), and the byte counts of both.

Both kernels share one signature: ``(q, k, v, o, s, scale, T, H, K, V, stride_qb, stride_qt, stride_qh,
stride_vb, stride_vt, stride_vh, BK, BV)``; ``s`` is a contiguous fp32 ``[B·H, K, V]`` buffer that must hold the
final state ``S_T`` afterwards.
"""

import torch
import triton

from ...device import ON_GPU, pick, sizes
from ...recurrent import naive_recurrent
from ...recurrent.reference import reference_recurrent_loop
from ...testing import randn
from ..spec import Case, CheckFailed, Exercise, Performance, register

__all__ = ["NAIVE", "FUSED", "FUSED_SPEED", "BYTES"]

_SIGNATURE = ("{name}(q_ptr, k_ptr, v_ptr, o_ptr, s_ptr, scale, T, H, K, V, stride_qb, stride_qt, stride_qh, "
              "stride_vb, stride_vt, stride_vh, BK: tl.constexpr, BV: tl.constexpr)")


def _inputs(case, gen):
    B, T, H, K, V = (case[d] for d in "BTHKV")
    dt = case.dtype
    if case.get("packed", False):
        qk = randn(B, T, H, 2 * K + case.get("pad", 0), gen=gen, dtype=dt, device="cpu")
        q, k = qk[..., :K], qk[..., K:2 * K]
    else:
        q, k = (randn(B, T, H, K, gen=gen, dtype=dt, device="cpu") for _ in range(2))
    return {"q": q, "k": k, "v": randn(B, T, H, V, gen=gen, dtype=dt, device="cpu"), "scale": K**-0.5}


def _outputs(case, inputs):
    B, T, H, K, V = (case[d] for d in "BTHKV")
    return {"o": ((B, T, H, V), case.dtype), "s": ((B * H, K, V), torch.float32)}


def _reference(inputs, case):
    B, T, H, K, V = (case[d] for d in "BTHKV")
    o, s = reference_recurrent_loop(inputs["q"], inputs["k"], inputs["v"], scale=float(inputs["scale"]),
                                    output_final_state=True)
    return {"o": o, "s": s.reshape(B * H, K, V)}


def _strides(q, k, v, o):
    if q.stride() != k.stride():
        raise CheckFailed("internal: q and k must share strides")
    if v.stride()[:3] != o.stride()[:3]:
        raise CheckFailed("internal: v and o must share strides")
    return q.stride(0), q.stride(1), q.stride(2), v.stride(0), v.stride(1), v.stride(2)


def _launch(kernel, grid, inputs, outputs, case, BV):
    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    o, s = outputs["o"], outputs["s"]
    B, T, H, K, V = (case[d] for d in "BTHKV")
    kernel[grid](q, k, v, o, s, float(inputs["scale"]), T, H, K, V, *_strides(q, k, v, o),
                 BK=triton.next_power_of_2(K), BV=BV)


def _naive_run(args, inputs, outputs, case):
    (kernel,) = args
    _launch(kernel, (case["B"] * case["H"],), inputs, outputs, case, triton.next_power_of_2(case["V"]))


def _fused_run(args, inputs, outputs, case):
    (kernel,) = args
    BV = case["BV"]
    _launch(kernel, (triton.cdiv(case["V"], BV), case["B"] * case["H"]), inputs, outputs, case, BV)


def _shape(label, B, T, H, K, V, dtype=torch.float32, **extra):
    return Case(f"B={B} T={T} H={H} K={K} V={V} {str(dtype)[6:]}{label}", dict(B=B, T=T, H=H, K=K, V=V, **extra),
                dtype)


def _round_trip(found, case):
    """The naive kernel's state goes through ``s`` at every step: K·V elements loaded and stored per step and
    program, at least."""
    B, T, H, K, V = (case[d] for d in "BTHKV")
    need = B * H * T * K * V
    loaded, stored = found.loaded("s"), found.stored("s")
    if loaded >= need and stored >= need:
        return None
    return (f"s: the kernel loaded {loaded} and stored {stored} element(s) of the state buffer over T={T} steps of "
            f"{B * H} programs; in this exercise the state makes a round trip through s at every step (load S, add "
            f"k v^T, store S: at least {need} of each). Keeping the state in registers is exercise 2's fused kernel")


def _scale_diagnose(inputs, got, case, ref):
    """o off from the reference by one factor everywhere while the state is right: the scale, missing (o is sqrt(K)
    times too large), applied twice or replaced by another (the comparison alone names only the largest
    difference)."""
    o, r = got["o"], ref["o"]
    if not torch.allclose(got["s"], ref["s"], rtol=1e-2, atol=1e-2 * float(ref["s"].abs().max())):
        return None
    # o_t read from S_{t-1}, before k_t v_t^T is added: the reference less each token's own term (all zero at T=1,
    # where the factor below would be 0 and blame the scale)
    q, k, v = (inputs[n].detach().cpu().double() for n in "qkv")  # on the GPU the inputs stay on the device
    ref_o = r.detach().cpu().double()
    before = ref_o - float(inputs["scale"]) * (q * k).sum(-1, keepdim=True) * v
    if float((o.detach().cpu().double() - before).norm()) <= 1e-2 * float(ref_o.norm()):
        return ("o: o_t is computed from the state before token t is added (S_{t-1}), and the final state in s is "
                "right: add k_t v_t^T to the state first, then o_t = scale * q_t^T S_t (token t attends to itself)")
    factor = float((o * r).sum() / (r * r).sum())
    if abs(factor - 1) < 0.05 or float((o - factor * r).norm()) > 1e-2 * abs(factor) * float(r.norm()):
        return None
    K = case["K"]
    return (f"o: every element is {factor:.4g} times the reference, and the final state in s is right: look at the "
            f"scale (the kernel's `scale` argument, K**-0.5 = {K**-0.5:.4g} here), applied once, to q_t or to o_t. "
            f"Without it o is sqrt(K) = {K**0.5:.4g} times too large; applied twice, K**-0.5 times too small")


NAIVE = Exercise(
    id="02_naive_hbm_loops.naive",
    magnitude=True,
    args=("kernel",),
    signature=_SIGNATURE.format(name="naive_kernel") + ", launched on grid (B*H,) with BK, BV = next powers of "
                                                       "two of K, V",
    description="o_t = scale * q_t^T S_t with S_t = S_{t-1} + k_t v_t^T, S_0 = 0, the state kept in s (which "
                "holds S_T at the end)",
    make_inputs=_inputs,
    outputs=_outputs,
    run=_naive_run,
    reference=_reference,
    diagnose=_scale_diagnose,
    traffic=_round_trip,
    visible=[_shape("", 1, 37, 2, 16, 16), _shape("", 2, 20, 1, 24, 40),
             Case("B=1 T=9 H=2 K=24 V=48 float32 q,k packed", dict(B=1, T=9, H=2, K=24, V=48, packed=True, pad=8),
                  purpose="passes q and k as views into one wider [B, T, H, 2K + 8] buffer, K and V not powers of "
                          "two: address them through their strides, and mask past K and V")],
    hidden=[_shape("", 1, 1, 1, 3, 5),
            _shape(" q,k packed", 1, 13, 3, 32, 48, torch.float16, packed=True, pad=8),
            _shape("", 2, 11, 1, 16, 17, torch.bfloat16),
            _shape(" q,k packed", 1, 17, 2, 64, 64, packed=True)]
    + pick(cpu=[], gpu=[_shape(" q,k packed", 2, 300, 4, 64, 128, torch.bfloat16, packed=True)]),
    points=(3, 2),
)

# what the fused kernel's two exercises share: its signature, inputs, launch and oracle
_FUSED_KERNEL = dict(magnitude=True, args=("kernel",),
                     signature=_SIGNATURE.format(name="fused_kernel") + ", launched on grid (cdiv(V, BV), B*H) with "
                                                                        "BK = next_power_of_2(K)",
                     make_inputs=_inputs, outputs=_outputs, run=_fused_run, reference=_reference,
                     diagnose=_scale_diagnose)

FUSED = Exercise(
    id="02_naive_hbm_loops.fused",
    description="the same recurrence with the state in registers, V split in blocks of BV over programs, the "
                "final state written to s once",
    **_FUSED_KERNEL,
    visible=[_shape(" BV=16", 1, 13, 2, 16, 40, BV=16), _shape(" BV=32", 2, 11, 1, 24, 32, BV=32),
             Case("B=1 T=9 H=2 K=24 V=48 float32 q,k packed BV=32",
                  dict(B=1, T=9, H=2, K=24, V=48, packed=True, pad=8, BV=32),
                  purpose="passes q and k as views into one wider buffer, and a last V block half past V")],
    hidden=[_shape(" BV=16", 1, 1, 1, 3, 5, BV=16),
            _shape(" q,k packed BV=16", 1, 11, 2, 32, 48, torch.float16, packed=True, pad=8, BV=16),
            _shape(" BV=32", 2, 9, 2, 16, 70, torch.bfloat16, BV=32),
            _shape(" q,k packed BV=32", 1, 17, 1, 64, 64, packed=True, BV=32)]
    + pick(cpu=[], gpu=[_shape(" q,k packed BV=32", 2, 300, 4, 64, 128, torch.bfloat16, packed=True, BV=32)]),
    points=(3, 2),
)


def _naive_baseline(args, inputs, outputs, case):
    """The package's naive kernel, writing o and the final state where the student's kernel writes them, so the
    timed outputs of the two can be compared."""
    _, s = naive_recurrent(inputs["q"], inputs["k"], inputs["v"], scale=float(inputs["scale"]),
                           output_final_state=True, out=outputs["o"])
    outputs["s"].copy_(s.reshape(outputs["s"].shape))


def _floor(case):
    B, T, H, K, V = (case[d] for d in "BTHKV")
    return (B * T * H * (2 * K + 2 * V) * case.dtype.itemsize + B * H * K * V * 4, 4 * B * T * H * K * V)


_GPU = sizes("recurrent") if ON_GPU else dict(B=4, H=16, T=2048, K=64, V=64)

FUSED_SPEED = Exercise(
    id="02_naive_hbm_loops.fused_speed",
    description="the fused kernel at least 2x as fast as the package's naive kernel at B=4 H=16 T=2048 K=V=64 bf16 "
                "(GPU only)",
    **_FUSED_KERNEL,
    visible=[_shape(" BV=16", 1, 13, 2, 16, 24, BV=16)],
    performance=Performance(
        case=_shape(" BV=32", _GPU["B"], _GPU["T"], _GPU["H"], _GPU["K"], _GPU["V"], torch.bfloat16, BV=32),
        baseline=_naive_baseline,
        baseline_name="the package's naive kernel (kernels.recurrent.naive_recurrent)",
        min_speedup=2.0,
        floor=_floor,
    ),
    points=(2, 0),
)


def _count_reference(B, T, H, K, V, itemsize, BV):
    state = B * H * K * V * 4
    naive = B * T * H * (2 * K + 2 * V) * itemsize + state + 2 * T * state
    fused = B * T * H * (2 * K * -(-V // BV) + 2 * V) * itemsize + state
    return naive, fused


def _count_inputs(case, gen):
    fixed = list(case.get("fixed", ()))
    shapes = []
    for _ in range(case.get("count", 0)):
        B, T, H = (int(torch.randint(1, hi, (1,), generator=gen)) for hi in (9, 5000, 33))
        K, V = (int(torch.randint(1, 257, (1,), generator=gen)) for _ in range(2))
        itemsize = (2, 4)[int(torch.randint(2, (1,), generator=gen))]
        BV = (16, 32, 64, 128)[int(torch.randint(4, (1,), generator=gen))]
        shapes.append((B, T, H, K, V, itemsize, BV))
    return {"shapes": fixed + shapes}


def _as_int(name, args, value):
    if isinstance(value, bool) or not isinstance(value, int):
        how = (": a count of bytes is a whole number, so keep to integers (`//` in place of `/`, `-(-a // b)` for a "
               "division rounded up)") if isinstance(value, float) else ""
        raise CheckFailed(f"{name}{args} returned {value!r}; expected an int{how}")
    return value


def _count_run(args, inputs, outputs, case):
    naive_fn, fused_fn = args
    naive, fused = [], []
    for B, T, H, K, V, itemsize, BV in inputs["shapes"]:
        naive.append(_as_int("naive_bytes", (B, T, H, K, V, itemsize), naive_fn(B, T, H, K, V, itemsize)))
        fused.append(_as_int("fused_bytes", (B, T, H, K, V, itemsize, BV), fused_fn(B, T, H, K, V, itemsize, BV)))
    return {"naive_bytes": torch.tensor(naive, dtype=torch.float64),
            "fused_bytes": torch.tensor(fused, dtype=torch.float64)}


def _count_ref(inputs, case):
    counts = [_count_reference(*s) for s in inputs["shapes"]]
    return {"naive_bytes": torch.tensor([c[0] for c in counts], dtype=torch.float64),
            "fused_bytes": torch.tensor([c[1] for c in counts], dtype=torch.float64)}


def _count_diagnose(inputs, got, case, ref):
    """The first shape each count is wrong on, by name: the comparison alone gives an index into shapes drawn at
    random, and the counts as floats."""
    lines = []
    for name, args in (("naive_bytes", "B, T, H, K, V, itemsize"), ("fused_bytes", "B, T, H, K, V, itemsize, BV")):
        off = [i for i in range(len(inputs["shapes"])) if got[name][i] != ref[name][i]]
        if off:
            shape = inputs["shapes"][off[0]][: len(args.split(", "))]
            named = ", ".join(f"{a}={v}" for a, v in zip(args.split(", "), shape))
            lines.append(f"{name}({named}) returned {int(got[name][off[0]]):,}, expected {int(ref[name][off[0]]):,} "
                         f"({len(off)} of {len(inputs['shapes'])} shapes differ)")
    return "; ".join(lines) or None


BYTES = Exercise(
    id="02_naive_hbm_loops.bytes",
    args=("function", "function"),
    signature="naive_bytes(B, T, H, K, V, itemsize) -> int, fused_bytes(B, T, H, K, V, itemsize, BV) -> int",
    description="the global-memory bytes the naive and fused kernels ask for",
    make_inputs=_count_inputs,
    outputs=lambda case, inputs: {},
    run=_count_run,
    reference=_count_ref,
    diagnose=_count_diagnose,
    tolerance=lambda case: 0,
    visible=[Case("the GPU size and 10 random shapes", dict(fixed=[(4, 2048, 16, 64, 64, 2, 64),
                                                                   (4, 2048, 16, 64, 64, 2, 32)], count=10))],
    hidden=[Case("edge shapes", dict(fixed=[(1, 1, 1, 1, 1, 4, 16), (1, 37, 2, 16, 16, 4, 16),
                                            (2, 100, 3, 100, 72, 2, 32), (1, 5, 1, 3, 129, 4, 128)])),
            Case("100 random shapes", dict(count=100))],
    points=(1, 1),
)

register(NAIVE, FUSED, FUSED_SPEED, BYTES)
