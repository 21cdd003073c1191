"""The fused kernel beyond the shared version tests: the normaliser in the kernel (running key sum, ``z_state`` in
and out, the saved normaliser), both launches (whole sequences and chained segments), K != V, the dtypes fla-core
gives the outputs, the dispatch rule, and broken normalisers that the checks must catch. On a GPU: full-size
rows against float64, each fp32 precision mode's error, determinism of chained launches.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from kernels.bench import float32_matmul_precision
from kernels.device import DEVICE, ON_GPU, pick
from kernels.linear_attention import chunk_linear_attn, dispatch
from kernels.linear_attention import fused as fz
from kernels.linear_attention.fused import Launch, fused_forward
from kernels.linear_attention.reference import normalizer, reference_linear_attention
from kernels.linear_attention.states import token_major
from kernels.testing import assert_close, check_bad_input, randn, rel_error, tolerance

# Whole sequences, and chained segments of 32 or 48 tokens with V split into blocks (ragged at V = 40).
LAUNCHES = {"whole": Launch(None, 16, 16, 4, 1), "chain32": Launch(32, 16, 16, 4, 1),
            "chain48_bv32": Launch(48, 16, 32, 4, 1)}


def features(x: torch.Tensor) -> torch.Tensor:
    """Positive features, as models feed a normalised linear attention: elu(x) + 1."""
    return torch.nn.functional.elu(x) + 1


def make(B, T, H, K, V, dtype, *, seed, h0=False, z0=False, cu=None, z_dtype=torch.float32):
    q, k = (features(randn(B, T, H, K, seed=seed + i)).to(dtype) for i in range(2))
    v = randn(B, T, H, V, dtype=dtype, seed=seed + 2)
    N = B if cu is None else len(cu) - 1
    return dict(q=q, k=k, v=v, scale=K ** -0.5,
                initial_state=randn(N, H, K, V, seed=seed + 3) if h0 else None,
                z_state=features(randn(N, 1, H, K, seed=seed + 4)).to(z_dtype) if z0 else None,
                cu_seqlens=None if cu is None else torch.tensor(cu, dtype=torch.int32, device=DEVICE))


def _d(x):
    return None if x is None else x.double()


def reference(case, normalize=True):
    """The float64 oracle's (o, final_state, z_state, normaliser)."""
    q, k, v = (case[n].double() for n in ("q", "k", "v"))
    init = (_d(case["initial_state"]), _d(case["z_state"])) if normalize else _d(case["initial_state"])
    o, final = reference_linear_attention(q, k, v, case["scale"], init, True, normalize, case["cu_seqlens"],
                                          chunk_size=32)
    if not normalize:
        return o, final, None, None
    den, _ = normalizer(q, k, case["scale"], _d(case["z_state"]), case["cu_seqlens"])
    return o, final[0], final[1], den


def check(case, launch=None, made=(), *, normalize=True, tol=None):
    f = fused_forward(case["q"], case["k"], case["v"], case["scale"], case["initial_state"], case["z_state"], True,
                      normalize, case["cu_seqlens"], save_norm=normalize, launch=launch)
    ro, rht, rz, rden = reference(case, normalize)
    for p in made:  # the ring is scratch, partly unused: only its guard bands are checked
        assert p.guards_intact(), "the kernel wrote out of bounds (into a guard band)"
    tol = tol or tolerance(case["q"].dtype, tf32=ON_GPU)
    assert_close("o", ro, f.o, tol)
    assert_close("final_state", rht, f.final_state, tol)
    if normalize:
        assert_close("z_state", rz, f.z_state, tol)
        assert_close("norm", rden, f.norm, tol)
    return f


def agrees(case, o, final, normalize=True):
    """``chunk_linear_attn``'s output and final state(s) (the pair ``(S, z)`` when normalising) against the float64
    oracle, at the inputs' dtype's tolerance."""
    ro, rht, rz, _ = reference(case, normalize)
    tol = tolerance(case["q"].dtype)
    assert_close("o", ro, o, tol)
    assert_close("final_state", rht, final[0] if normalize else final, tol)
    if normalize:
        assert_close("z_state", rz, final[1], tol)


NORMALIZE_CASES = [(launch, dtype, states) for i, (launch, dtype) in enumerate(
    (lo, dt) for lo in LAUNCHES for dt in (torch.float32, torch.float16, torch.bfloat16))
    for states in (("none", "h0", "z0", "both")[i % 4], ("both", "none", "h0", "z0")[i % 4])]


@pytest.mark.parametrize("launch, dtype, states", NORMALIZE_CASES, ids=lambda x: str(x).removeprefix("torch."))
def test_normalize(launch, dtype, states, allocations):
    """K = 24, V = 40 (neither a block multiple), T = 77: several chunks, a ragged last one, 2-3 segments."""
    case = make(1, 77, 2, 24, 40, dtype, seed=len(states) + 7 * len(launch), h0=states in ("h0", "both"),
                z0=states in ("z0", "both"))
    check(case, LAUNCHES[launch], allocations)


# The normaliser's sums as tensor-core products (Launch.norm_mma), through both launches.
MMA_LAUNCHES = {"whole_mma": dataclasses.replace(LAUNCHES["whole"], norm_mma="both"),
                "chain48_bv32_mma": dataclasses.replace(LAUNCHES["chain48_bv32"], norm_mma="both"),
                "whole_wide": dataclasses.replace(LAUNCHES["whole"], norm_mma="wide"),
                "chain48_bv32_wide": dataclasses.replace(LAUNCHES["chain48_bv32"], norm_mma="wide"),
                "whole_mid": dataclasses.replace(LAUNCHES["whole"], norm_mma="mid"),
                "chain32_qzt": dataclasses.replace(LAUNCHES["chain32"], norm_mma="qzt")}


@pytest.mark.parametrize("launch", MMA_LAUNCHES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_normalize_mma(launch, dtype, allocations):
    """As test_normalize, every state in and out, packed sequences with empty ones."""
    cu = [0, 0, 30, 31, 77]
    case = make(1, 77, 2, 24, 40, dtype, seed=31 + len(launch), h0=True, z0=True, cu=cu)
    f = check(case, MMA_LAUNCHES[launch], allocations)
    # the normaliser itself (fp32) keeps z to about twice the operands' bits: far inside the outputs' tolerance
    err = rel_error(f.norm, reference(case)[3])
    assert err <= (2e-5 if dtype == torch.bfloat16 else 1e-6), f"normaliser: relative error {err:.1e}"


@pytest.mark.parametrize("launch", [LAUNCHES["chain32"], MMA_LAUNCHES["whole_mma"], MMA_LAUNCHES["whole_wide"],
                                    MMA_LAUNCHES["whole_mid"], MMA_LAUNCHES["chain32_qzt"]],
                         ids=["cuda_cores", "mma", "wide", "mid", "qzt"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_normalize_large_key_sum(launch, dtype):
    """A key sum far past fp16's range (a long history in z_state): q · z must neither overflow nor lose z's
    low part (fp16 products scale z by a power of two first)."""
    case = make(1, 45, 2, 16, 24, dtype, seed=33, z0=True)
    case["z_state"] = case["z_state"] * 3e5 + torch.arange(16, device=DEVICE)  # up to ~1e6, distinct entries
    check(case, launch, normalize=True)


@pytest.mark.parametrize("launch", ["whole", "chain48_bv32"])
@pytest.mark.parametrize("normalize", [True, False], ids=["norm", "raw"])
def test_second_key_load(launch, normalize, allocations):
    """``Launch.kt``: kᵀ of the state update loaded again from memory (fp32's layout), every state in and out,
    packed sequences with empty ones, ragged K."""
    cu = [0, 0, 30, 31, 77]
    case = make(1, 77, 2, 24, 40, torch.float32, seed=41 + len(launch), h0=True, z0=normalize, cu=cu)
    check(case, dataclasses.replace(LAUNCHES[launch], kt=True), allocations, normalize=normalize)


@pytest.mark.parametrize("launch", LAUNCHES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_normalize_varlen(launch, dtype, allocations):
    """Empty sequences (first, middle and last), one token, a segment's length exactly, and longer ones."""
    lengths = [0, 1, 32, 0, 57, 0]
    cu = [0]
    for n in lengths:
        cu.append(cu[-1] + n)
    check(make(1, cu[-1], 2, 32, 24, dtype, seed=5, h0=True, z0=True, cu=cu), LAUNCHES[launch], allocations)


@pytest.mark.parametrize("launch", LAUNCHES)
def test_unnormalised_k_not_v(launch, allocations):
    """K != V both ways, without the normaliser, through the same launches."""
    check(make(1, 50, 2, 48, 16, torch.float16, seed=9, h0=True), LAUNCHES[launch], allocations, normalize=False)
    check(make(1, 50, 2, 16, 72, torch.float32, seed=10), LAUNCHES[launch], allocations, normalize=False)


def test_empty_batch_and_no_tokens():
    """T = 0: the final states are the initial ones; B = 0: empty outputs."""
    case = make(2, 0, 2, 16, 16, torch.float32, seed=11, h0=True, z0=True)
    f = fused_forward(case["q"], case["k"], case["v"], 0.5, case["initial_state"], case["z_state"], True, True)
    assert f.o.shape == (2, 0, 2, 16)
    assert torch.equal(f.final_state, case["initial_state"]) and torch.equal(f.z_state, case["z_state"])
    case = make(0, 5, 2, 16, 16, torch.float32, seed=12)
    f = fused_forward(case["q"], case["k"], case["v"], 0.5, None, None, True, True)
    assert f.o.shape == (0, 5, 2, 16) and f.final_state.shape == (0, 2, 16, 16)


@pytest.mark.parametrize("z_dtype", [None, torch.float32, torch.bfloat16], ids=str)
def test_output_dtypes_follow_fla(z_dtype):
    """fla-core divides in the promoted dtype: an fp32 z_state widens bf16 outputs and the returned z_state."""
    case = make(1, 20, 2, 16, 16, torch.bfloat16, seed=13, z0=z_dtype is not None, z_dtype=z_dtype)
    f = fused_forward(case["q"], case["k"], case["v"], 0.25, None, case["z_state"], False, True)
    wide = z_dtype == torch.float32
    assert f.o.dtype == (torch.float32 if wide else torch.bfloat16)
    assert f.z_state.dtype == (torch.float32 if wide else torch.bfloat16)
    assert f.final_state is None and f.norm is None
    raw = fused_forward(case["q"], case["k"], case["v"], 0.25)
    assert raw.o.dtype == torch.bfloat16 and raw.z_state is None


def test_drop_in_runs_the_fused_normaliser(monkeypatch):
    """chunk_linear_attn(normalize=True) divides inside the kernel: the torch normaliser is never called."""
    import kernels.linear_attention as la

    def refuse(*a, **kw):
        raise AssertionError("the torch normaliser ran")

    monkeypatch.setattr(la, "normalize_linear_attention", refuse)
    case = make(1, 40, 2, 16, 24, torch.float32, seed=14, h0=True, z0=True)
    o, (ht, z) = chunk_linear_attn(case["q"], case["k"], case["v"], initial_state=(case["initial_state"],
                                                                                 case["z_state"]),
                                   output_final_state=True)
    ro, rht, rz, _ = reference(dict(case, scale=16 ** -0.5))
    tol = tolerance(torch.float32, tf32=ON_GPU)
    assert_close("o", ro, o, tol)
    assert_close("final_state", rht, ht, tol)
    assert_close("z_state", rz, z, tol)


def test_bad_input():
    case = make(1, 12, 2, 16, 8, torch.float32, seed=15, h0=True, z0=True)
    q, k, v, h0, z0 = (case[n] for n in ("q", "k", "v", "initial_state", "z_state"))
    check_bad_input(fused_forward, q, k, v, 0.5, h0, z0[:, :, :1].contiguous(), True, True, match="z_state")
    check_bad_input(fused_forward, q, k, v, 0.5, h0, z0.double(), True, True, match="dtype")
    check_bad_input(fused_forward, q, k, v, 0.5, h0, z0, True, False, match="normalize=True")
    check_bad_input(fused_forward, q, k, v, 0.5, h0, None, True, "yes", match="bool")
    for launch, match in ((Launch(40, 16, 16, 4, 1), "multiple"), (Launch(None, 24, 16, 4, 1), "BT"),
                          (Launch(None, 16, 8, 4, 1), "BV"), (Launch(None, 16, 16, 3, 1), "num_warps"),
                          (Launch(None, 16, 16, 4, 0), "num_stages"), (Launch(None, 16, 16, 4, 1, precision="x"),
                                                                       "precision"),
                          (Launch(None, 16, 16, 4, 1, norm_mma="yes"), "norm_mma"),
                          (Launch(None, 16, 16, 4, 1, states=3), "states"),
                          (Launch(None, 64, 16, 4, 1, states=4), "states")):
        check_bad_input(fused_forward, q, k, v, 0.5, launch=launch, match=match)


# Broken normalisers, each plausible, each must fail the checks above.

def _z_not_carried(case, launch):
    """The key sum restarts every 32 tokens (the state still carries): only the first stretch is right."""
    f = fused_forward(case["q"], case["k"], case["v"], case["scale"], case["initial_state"], None, True, False,
                      launch=launch)
    den = torch.cat([normalizer(case["q"][:, t:t + 32].double(), case["k"][:, t:t + 32].double(), case["scale"],
                                _d(case["z_state"]))[0] for t in range(0, case["q"].shape[1], 32)], 1)
    return f._replace(o=(f.o.double() / den[..., None]).to(f.o.dtype))


def _exclusive_key_sum(case, launch):
    """The normaliser without the token's own key: z_{t-1} instead of z_t."""
    f = fused_forward(case["q"], case["k"], case["v"], case["scale"], case["initial_state"], case["z_state"], True,
                      True, save_norm=True, launch=launch)
    own = case["scale"] * (case["q"].double() * case["k"].double()).sum(-1)
    return f._replace(o=(f.o.double() * f.norm.double()[..., None] / (f.norm.double() - own)[..., None]).to(f.o.dtype))


def _z0_ignored(case, launch):
    return fused_forward(case["q"], case["k"], case["v"], case["scale"], case["initial_state"], None, True, True,
                         launch=launch)


def _z_state_from_first_segment(case, launch):
    f = fused_forward(case["q"], case["k"], case["v"], case["scale"], case["initial_state"], case["z_state"], True,
                      True, launch=launch)
    first = fused_forward(*(case[n][:, :32] for n in ("q", "k", "v")), case["scale"], case["initial_state"],
                          case["z_state"], True, True, launch=launch)
    return f._replace(z_state=first.z_state)


@pytest.mark.parametrize("broken", [_z_not_carried, _exclusive_key_sum, _z0_ignored, _z_state_from_first_segment],
                         ids=lambda f: f.__name__.strip("_"))
def test_broken_normalisers_fail(broken):
    case = make(1, 100, 2, 16, 16, torch.float32, seed=16, h0=True, z0=True)
    launch = LAUNCHES["chain32"]
    f = broken(case, launch)
    ro, rht, rz, _ = reference(case)
    tol = tolerance(torch.float32, tf32=ON_GPU)
    with pytest.raises(AssertionError):
        assert_close("o", ro, f.o, tol)
        assert_close("z_state", rz, f.z_state, tol)


# Materialised chunk states (``states.py``, ``Launch.states``): a state stored every chunk or every two chunks,
# each block of that many tokens computed from its stored state.

STATES_LAUNCHES = {f"states{n}": Launch(None, 16, 16, 4, 1, states=n) for n in (1, 2)}
STATES_LAUNCHES["states2-wide"] = Launch(None, 16, 16, 4, 1, states=2, norm_mma="wide")  # q · z as a product


@pytest.mark.parametrize("T", [37, 150])
@pytest.mark.parametrize("launch", STATES_LAUNCHES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("normalize", [False, True], ids=["raw", "norm"])
def test_states_launch(normalize, dtype, launch, T, allocations):
    """K = 24, V = 40 (ragged tiles of 16), T no multiple of a block, B·H = 6; the initial state (and key sum) in
    every other case, the final ones always out; the workspace of states is NaN-filled too."""
    h0 = T == 37
    case = make(2, T, 3, 24, 40, dtype, seed=T + len(launch), h0=h0, z0=h0 and normalize)
    check(case, STATES_LAUNCHES[launch], allocations, normalize=normalize)
    assert [p.out.dim() for p in allocations].count(5) == 1  # the workspace [B, H, NS, K, V] was NaN-filled


def test_states_launch_k_not_v_and_no_tokens(allocations):
    """K > V and K < V; T = 0 passes the initial states through."""
    check(make(1, 50, 2, 48, 16, torch.float16, seed=51, h0=True, z0=True), STATES_LAUNCHES["states2"], allocations)
    check(make(1, 50, 2, 16, 72, torch.float32, seed=52), STATES_LAUNCHES["states1"], allocations, normalize=False)
    case = make(2, 0, 2, 16, 16, torch.float32, seed=53, h0=True, z0=True)
    f = fused_forward(case["q"], case["k"], case["v"], 0.5, case["initial_state"], case["z_state"], True, True,
                      launch=STATES_LAUNCHES["states2"])
    assert torch.equal(f.final_state, case["initial_state"]) and torch.equal(f.z_state, case["z_state"])


@pytest.mark.parametrize("candidate", ["d256-states", "d256-states-cuda", "d256-states-bv128", "d256-states-s64"])
@pytest.mark.parametrize("normalize", [False, True], ids=["raw", "norm"])
def test_trying_d256_states(normalize, candidate):
    """``dispatch.trying`` a states candidate: a 16-bit call whose K maps to the D=256 tables runs the states
    kernels (under the interpreter at its small chunk: a state every 16 or 32 tokens), right against float64;
    packed sequences keep the fused kernel; on the GPU's plan the launch is one pass with a state every 64 ·
    states tokens, and "d256-states", adopted, is that plan without trying anything."""
    case = make(1, 70, 2, 136, 40, torch.bfloat16, seed=54, h0=True, z0=normalize)
    init = (case["initial_state"], case["z_state"]) if normalize else case["initial_state"]
    with dispatch.trying(candidate):
        launch = dispatch.launch_for(case["q"], case["v"])
        change = dispatch.CANDIDATES[candidate][(256, "16")]
        assert launch.states == change["states"] and launch.L is None
        assert launch.norm_mma == change["norm_mma"]
        o, final = chunk_linear_attn(case["q"], case["k"], case["v"], case["scale"], init, True, normalize)
        packed = dispatch.launch_for(case["q"], case["v"], [30, 40])
        gpu = dispatch.plan(256, 256, torch.bfloat16, 2, 8, [16384], 132)
    assert packed.states == 0
    assert gpu.states == change["states"] and gpu.L is None and gpu.BT * gpu.states == 64 * change["states"]
    assert gpu.BV == change["BV"]
    default = dispatch.plan(256, 256, torch.bfloat16, 2, 8, [16384], 132)  # not tried: "d256-states" is adopted
    assert default.states == 2 and default.norm_mma == "wide"
    agrees(case, o, final, normalize)


@pytest.mark.parametrize("precision", ["high", "highest"])
def test_trying_fp32_norm_wide(precision):
    """``dispatch.trying("fp32-norm-wide")``: an fp32 normalising call under TF32 ("high") takes the 64-column
    ``q · z`` form and the key sum as a product, right against float64 with every state in and out; under
    "highest" (3xTF32) and on the D=256 tables nothing changes, and the default plan keeps the CUDA-core sums."""
    case = make(1, 70, 2, 40, 24, torch.float32, seed=57, h0=True, z0=True)
    init = (case["initial_state"], case["z_state"])
    with float32_matmul_precision(precision):
        with dispatch.trying("fp32-norm-wide"):
            launch = dispatch.launch_for(case["q"], case["v"])
            o, (ht, zt) = chunk_linear_attn(case["q"], case["k"], case["v"], case["scale"], init, True, True)
            gpu = [dispatch.plan(K, K, torch.float32, 4, 16, [16384], 132) for K in (64, 128, 256)]
        default = dispatch.plan(128, 128, torch.float32, 4, 16, [16384], 132)
        d256 = dispatch.plan(256, 256, torch.float32, 4, 16, [16384], 132)
    tf32 = precision == "high"
    assert launch.norm_mma == ("wide" if tf32 else "")
    assert [lo.norm_mma for lo in gpu[:2]] == (["wide", "wide"] if tf32 else ["", ""])
    assert gpu[2] == d256  # D=256: the states launch (fp32-d256-states, adopted), whatever is tried here
    assert default.norm_mma == ""
    agrees(case, o, (ht, zt))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_trying_norm_mid_w8(dtype):
    """``dispatch.trying("norm-mid-w8")``: a 16-bit call whose K maps to the D=128 tables takes ``q · z`` through a
    32-column operand (8 warps on the GPU), right against float64 with every state in and out; D=256 keeps its
    launch and the default plan the wide form at 4 warps."""
    case = make(1, 70, 2, 72, 40, dtype, seed=59, h0=True, z0=True)
    init = (case["initial_state"], case["z_state"])
    with dispatch.trying("norm-mid-w8"):
        launch = dispatch.launch_for(case["q"], case["v"])
        o, (ht, zt) = chunk_linear_attn(case["q"], case["k"], case["v"], case["scale"], init, True, True)
        gpu = dispatch.plan(128, 128, dtype, 4, 16, [16384], 132)
        wide = dispatch.plan(256, 256, dtype, 2, 8, [16384], 132)
    default = dispatch.plan(128, 128, dtype, 4, 16, [16384], 132)
    assert launch.norm_mma == "mid" and (gpu.norm_mma, gpu.num_warps) == ("mid", 8)
    assert wide.norm_mma == "wide" and (default.norm_mma, default.num_warps) == ("wide", 4)
    agrees(case, o, (ht, zt))


def test_trying_d128_s2():
    """``dispatch.trying("d128-s2")``: the 16-bit D=128 launches take two stages (the one pass of K=128 V=256 at
    B4H16, and every other D=128 one), nothing else; the default keeps three."""
    with dispatch.trying("d128-s2"):
        tried = [dispatch.plan(128, v, torch.bfloat16, 4, 16, [4096], 132) for v in (128, 256)]
        d256 = dispatch.plan(256, 256, torch.bfloat16, 4, 16, [4096], 132)
    default = dispatch.plan(128, 256, torch.bfloat16, 4, 16, [4096], 132)
    assert [lo.num_stages for lo in tried] == [2, 2] and default.num_stages == 3
    assert dataclasses.replace(tried[1], num_stages=3) == default
    assert d256 == dispatch.plan(256, 256, torch.bfloat16, 4, 16, [4096], 132)
    assert dispatch.applies("d128-s2", 128, "16", False, 256) and not dispatch.applies("d128-s2", 256, "16", True)


# The decoupled look-back (Launch.prefix): publishing inclusive prefixes (1), and summing every predecessor's own
# state back to the first segment (2: the path a GPU takes when predecessors are still running, which the
# interpreter, running programs one after another, never takes on its own).
LOOKBACK_LAUNCHES = {f"lookback{mode}_{name}": dataclasses.replace(LAUNCHES[name], prefix=mode)
                     for mode in (1, 2) for name in ("chain32", "chain48_bv32")}


@pytest.mark.parametrize("launch", LOOKBACK_LAUNCHES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("normalize", [False, True], ids=["raw", "norm"])
def test_lookback(launch, dtype, normalize, allocations):
    """K = 24, V = 40, T = 151 (five segments of 32, four of 48, a ragged last one), both states in and out; then
    packed sequences, empty ones and one of a single segment among them."""
    lo = LOOKBACK_LAUNCHES[launch]
    check(make(2, 151, 2, 24, 40, dtype, seed=31 + lo.prefix, h0=True, z0=normalize), lo, allocations,
          normalize=normalize)
    check(make(1, 163, 2, 24, 40, dtype, seed=33, h0=True, z0=normalize, cu=[0, 0, 30, 31, 131, 131, 163]), lo,
          allocations, normalize=normalize)


def test_lookback_workspace(allocations):
    """Two slots (own sum, inclusive prefix) for every segment of every chain: N·H·NV chains of the longest
    sequence's segments, [BK, BV] and the key sum each."""
    case = make(1, 200, 2, 24, 40, torch.bfloat16, seed=35, cu=[0, 20, 200])
    f = fused_forward(case["q"], case["k"], case["v"], case["scale"], None, None, False, True, case["cu_seqlens"],
                      launch=LOOKBACK_LAUNCHES["lookback1_chain32"])
    sizes = sorted(p.out.numel() for p in allocations if p.out.numel() not in (f.o.numel(), f.z_state.numel()))
    chains, nseg, slot = 2 * 2 * 3, -(-180 // 32), 32 * 16 + 32  # N·H·NV; BK = 32, BV = 16
    assert sizes == [chains * 2 * nseg * slot], sizes


# Segments whose prefixes a states pass stores first (Launch.prefix 3): whole segments, a ragged last one, T under
# one segment, no tokens.
STORED = dataclasses.replace(LAUNCHES["chain32"], prefix=3)


@pytest.mark.parametrize("T", [151, 32, 5, 0])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("normalize", [False, True], ids=["raw", "norm"])
def test_stored_prefixes(T, dtype, normalize, allocations):
    check(make(2, T, 2, 24, 40, dtype, seed=41 + T, h0=T % 2 == 1, z0=normalize and T % 2 == 1), STORED, allocations,
          normalize=normalize)


def test_stored_prefixes_refuse_packed():
    case = make(1, 40, 2, 24, 40, torch.float32, seed=43, cu=[0, 10, 40])
    with pytest.raises(ValueError, match="prefix=3.*cu_seqlens"):
        fused_forward(case["q"], case["k"], case["v"], case["scale"], cu_seqlens=case["cu_seqlens"], launch=STORED)


@pytest.mark.parametrize("candidate", ["d256-stored-512", "d256-stored-1024", "d256-stored-512-bv32"])
@pytest.mark.parametrize("normalize", [False, True], ids=["raw", "norm"])
def test_trying_d256_stored(candidate, normalize):
    """``dispatch.trying`` a stored-prefix candidate: a 16-bit call whose K maps to the D=256 tables runs segments
    from stored prefixes (under the interpreter segments of 32), right against float64; packed sequences take
    the serial chain; the GPU's plan has the candidate's segments for any batch, the other tables unchanged."""
    case = make(1, 70, 2, 136, 40, torch.bfloat16, seed=56, h0=True, z0=normalize)
    init = (case["initial_state"], case["z_state"]) if normalize else case["initial_state"]
    change = dispatch.CANDIDATES[candidate][(256, "16")]
    with dispatch.trying(candidate):
        launch = dispatch.launch_for(case["q"], case["v"])
        o, final = chunk_linear_attn(case["q"], case["k"], case["v"], case["scale"], init, True, normalize)
        packed = dispatch.launch_for(case["q"], case["v"], [30, 40])
        gpu = [dispatch.plan(256, 256, torch.bfloat16, b, h, [t], 132) for b, h, t in ((2, 8, 16384), (4, 16, 4096))]
        d128 = dispatch.plan(128, 128, torch.bfloat16, 1, 8, [262144], 132)
    assert (launch.prefix, launch.L, launch.states) == (3, 32, 0) and packed.prefix == 0
    assert all((lo.prefix, lo.L, lo.states, lo.BV) == (3, change["L"], 0, change["BV"]) for lo in gpu), gpu
    assert d128 == dispatch.plan(128, 128, torch.bfloat16, 1, 8, [262144], 132)
    agrees(case, o, final, normalize)


def test_trying_stored_d128():
    """"stored-1024": a 16-bit D=128 call that would chain takes segments of 1024 from stored prefixes; one that
    fills the GPU in one pass keeps it; D=256 keeps its states launch."""
    bf16 = torch.bfloat16
    with dispatch.trying("stored-1024"):
        long = dispatch.plan(128, 128, bf16, 1, 8, [262144], 132)
        many = dispatch.plan(128, 128, bf16, 4, 16, [16384], 132)
        d256 = dispatch.plan(256, 256, bf16, 2, 8, [16384], 132)
    assert (long.L, long.prefix, long.states) == (1024, 3, 0)
    assert many == dispatch.plan(128, 128, bf16, 4, 16, [16384], 132) and many.L is None and many.prefix == 0
    assert d256 == dispatch.plan(256, 256, bf16, 2, 8, [16384], 132) and d256.states


def test_trying_lookback():
    """``dispatch.trying("lookback-512")``: the 16-bit chained launches of D <= 128 take the decoupled look-back with
    segments of at most 512 tokens; whole-sequence launches and the other keys are unchanged."""
    bf16 = torch.bfloat16
    with dispatch.trying("lookback-512"):
        long = dispatch.plan(128, 128, bf16, 1, 8, [262144], 132)
        many = dispatch.plan(128, 128, bf16, 4, 16, [16384], 132)
        d256 = dispatch.plan(256, 256, bf16, 1, 8, [262144], 132)
    assert (long.L, long.prefix) == (512, 1)
    assert many == dispatch.plan(128, 128, bf16, 4, 16, [16384], 132) and many.L is None
    assert d256 == dispatch.plan(256, 256, bf16, 1, 8, [262144], 132)
    assert dispatch.plan(128, 128, bf16, 1, 8, [262144], 132).prefix == 0
    assert dispatch.applies("lookback-512", 128, "16", False) and not dispatch.applies("lookback-512", 256, "16", True)
    with pytest.raises(ValueError, match="prefix=4"):
        dataclasses.replace(long, prefix=4).check()


@pytest.mark.parametrize("precision", ["high", "highest"])
@pytest.mark.parametrize("normalize", [False, True], ids=["raw", "norm"])
def test_trying_fp32_d256_states(precision, normalize):
    """``dispatch.trying("fp32-d256-states")`` (adopted: the default too): fp32 calls whose K maps to the D=256
    tables run the states kernels in either precision, right against float64 with every state in and out; packed
    sequences keep the fused kernel."""
    case = make(1, 70, 2, 136, 40, torch.float32, seed=58, h0=True, z0=normalize)
    init = (case["initial_state"], case["z_state"]) if normalize else case["initial_state"]
    with float32_matmul_precision(precision):
        with dispatch.trying("fp32-d256-states"):
            launch = dispatch.launch_for(case["q"], case["v"])
            packed = dispatch.launch_for(case["q"], case["v"], [30, 40])
            o, final = chunk_linear_attn(case["q"], case["k"], case["v"], case["scale"], init, True, normalize)
            gpu = dispatch.plan(256, 256, torch.float32, 2, 8, [16384], 132)
        default = dispatch.plan(256, 256, torch.float32, 2, 8, [16384], 132)
    assert launch.states == 2 and packed.states == 0
    assert gpu.states == 2 and gpu.BT == 64 and gpu.BV == 64 and gpu.precision == dispatch.PRECISIONS[precision]
    # adopted after it: under TF32 "fp32-d256-bv128-s2", output V blocks of 128; under 3xTF32 "fp32x3-d256-cuda",
    # the normaliser's sums on the CUDA cores
    assert default == dataclasses.replace(gpu, **dict(BV=128) if precision == "high" else dict(norm_mma=""))
    agrees(case, o, final, normalize)


@pytest.mark.parametrize("name", ["fp32-d256-bv128", "fp32-d256-bv128-s2"])
@pytest.mark.parametrize("normalize", [False, True], ids=["raw", "norm"])
def test_trying_fp32_d256_bv128(name, normalize):
    """The TF32 states launch with output V blocks of 128: right against float64 with every state in and out
    (V = 40 and 200: one V block and, under the interpreter's blocks, several); 3xTF32 and packed calls keep
    their launches."""
    with float32_matmul_precision("high"):
        for V in (40, 200):
            case = make(1, 70, 2, 136, V, torch.float32, seed=61, h0=True, z0=normalize)
            init = (case["initial_state"], case["z_state"]) if normalize else case["initial_state"]
            with dispatch.trying(name):
                o, final = chunk_linear_attn(case["q"], case["k"], case["v"], case["scale"], init, True, normalize)
            agrees(case, o, final, normalize)
        with dispatch.trying(name):
            gpu = dispatch.plan(256, 256, torch.float32, 4, 16, [4096], 132)
            packed = dispatch.plan(256, 256, torch.float32, 8, 8, [100, 5000], 132, packed=True)
        assert packed == dispatch.plan(256, 256, torch.float32, 8, 8, [100, 5000], 132, packed=True)
    assert (gpu.states, gpu.BV, gpu.num_stages) == (2, 128, 1 if name == "fp32-d256-bv128" else 2)
    with float32_matmul_precision("highest"), dispatch.trying(name):
        assert dispatch.plan(256, 256, torch.float32, 4, 16, [4096], 132).BV == 64


@pytest.mark.parametrize("name", ["states-loop", "fp32-d256-bv128-loop"])
@pytest.mark.parametrize("dtype,precision", [(torch.bfloat16, "high"), (torch.float32, "high"),
                                             (torch.float32, "highest")], ids=["bf16", "tf32", "tf32x3"])
@pytest.mark.parametrize("normalize", [False, True], ids=["raw", "norm"])
def test_trying_states_loop(name, dtype, precision, normalize):
    """The states kernel walking a stored state's chunks in a loop (``Launch.states_loop``): right against
    float64 with every state in and out, over V blocks and K tiles of several pieces under the interpreter; the
    GPU plans of the calls it applies to carry it, packed calls and D <= 128 keep their launches."""
    if name == "fp32-d256-bv128-loop" and (dtype, precision) != (torch.float32, "high"):
        pytest.skip("a TF32 candidate")
    case = make(1, 70, 2, 136, 40, dtype, seed=62, h0=True, z0=normalize)
    init = (case["initial_state"], case["z_state"]) if normalize else case["initial_state"]
    with float32_matmul_precision(precision):
        with dispatch.trying(name):
            launch = dispatch.launch_for(case["q"], case["v"])
            o, final = chunk_linear_attn(case["q"], case["k"], case["v"], case["scale"], init, True, normalize)
            gpu = dispatch.plan(256, 256, dtype, 4, 16, [4096], 132)
            packed = dispatch.plan(256, 256, dtype, 8, 8, [100, 5000], 132, packed=True)
            d128 = dispatch.plan(128, 128, dtype, 4, 16, [4096], 132)
        assert launch.states == 2 and launch.states_loop
        assert gpu.states == 2 and gpu.states_loop
        assert packed == dispatch.plan(256, 256, dtype, 8, 8, [100, 5000], 132, packed=True)
        assert d128 == dispatch.plan(128, 128, dtype, 4, 16, [4096], 132)
        assert not dispatch.plan(256, 256, dtype, 4, 16, [4096], 132).states_loop
    agrees(case, o, final, normalize)


@pytest.mark.parametrize("normalize", [False, True], ids=["raw", "norm"])
def test_trying_fp32_d128_states(normalize):
    """fp32 TF32 at K=128 through the states kernels: right against float64 with every state in and out (V = 40
    and 136: one V block and several); 3xTF32, 16-bit and packed calls keep their launches."""
    with float32_matmul_precision("high"):
        for V in (40, 136):
            case = make(1, 70, 2, 72, V, torch.float32, seed=63, h0=True, z0=normalize)
            init = (case["initial_state"], case["z_state"]) if normalize else case["initial_state"]
            with dispatch.trying("fp32-d128-states"):
                launch = dispatch.launch_for(case["q"], case["v"])
                o, final = chunk_linear_attn(case["q"], case["k"], case["v"], case["scale"], init, True, normalize)
            assert launch.states == 2 and launch.norm_mma == ""
            agrees(case, o, final, normalize)
        with dispatch.trying("fp32-d128-states"):
            gpu = dispatch.plan(128, 128, torch.float32, 4, 16, [16384], 132)
            packed = dispatch.plan(128, 128, torch.float32, 8, 8, [100, 5000], 132, packed=True)
            bf16 = dispatch.plan(128, 128, torch.bfloat16, 4, 16, [16384], 132)
        assert (gpu.states, gpu.BT, gpu.BV, gpu.states_loop) == (2, 64, 64, True)
        assert packed == dispatch.plan(128, 128, torch.float32, 8, 8, [100, 5000], 132, packed=True)
        assert bf16 == dispatch.plan(128, 128, torch.bfloat16, 4, 16, [16384], 132)
    with float32_matmul_precision("highest"):
        default = dispatch.plan(128, 128, torch.float32, 4, 16, [16384], 132)
        with dispatch.trying("fp32-d128-states"):
            assert dispatch.plan(128, 128, torch.float32, 4, 16, [16384], 132) == default


@pytest.mark.parametrize("K", [40, 72, 128])
def test_fp32x3_up_to_d128_runs_the_states_kernels(K):
    """3xTF32 at K <= 128 runs the states kernels with k and v copied token-contiguous and the normaliser's sums on
    the CUDA cores (``fp32x3-d128-states``, adopted): a batch, and one long sequence that a fused launch would
    chain; packed calls, TF32 and 16-bit keep the fused kernel."""
    with float32_matmul_precision("highest"):
        for N, T in ((4, 16384), (1, 262144)):
            plan = dispatch.plan(K, K, torch.float32, N, 16, [T], 132)
            assert (plan.states, plan.kv_t, plan.BT, plan.BV, plan.norm_mma) == (2, True, 64, 64, "")
        assert dispatch.plan(K, K, torch.float32, 8, 8, [100, 5000], 132, packed=True).states == 0
        assert dispatch.plan(K, K, torch.bfloat16, 4, 16, [16384], 132).states == 0
    with float32_matmul_precision("high"):
        assert dispatch.plan(K, K, torch.float32, 4, 16, [16384], 132).states == 0


@pytest.mark.parametrize("dtype,K,precision,where", [
    (torch.float32, 40, "highest", "token_major"), (torch.bfloat16, 136, "high", "stored_prefixes")],
    ids=["fp32x3-k-copy", "bf16-d256-states"])
@pytest.mark.parametrize("normalize", [False, True], ids=["raw", "norm"])
def test_states_workspace_out_of_memory_runs_the_fused_kernel(monkeypatch, dtype, K, precision, where, normalize):
    """A call planned for the states kernels whose workspace (k and v's copies, the stored states) does not fit on
    the device runs the fused kernel instead, with a warning that says so: the same answer against float64, every
    state in and out, never a crash; calls that fit keep the states launch."""
    from kernels.linear_attention import states

    with float32_matmul_precision(precision):
        case = make(2, 70, 2, K, 40, dtype, seed=71, h0=True, z0=normalize)
        assert check(case, normalize=normalize).launch.states == 2  # it fits: the states launch

        def no_room(*args, **kwargs):
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

        monkeypatch.setattr(states, where, no_room)
        with pytest.warns(RuntimeWarning, match="workspace did not fit.*Tried to allocate 2.00 GiB.*fused kernel"):
            f = check(case, normalize=normalize)
        assert f.launch.states == 0 and not f.launch.kv_t
        with pytest.warns(RuntimeWarning, match="workspace did not fit"):
            o, final = chunk_linear_attn(case["q"], case["k"], case["v"], case["scale"],
                                         (case["initial_state"], case["z_state"]) if normalize else
                                         case["initial_state"], True, normalize)
        agrees(case, o, final, normalize)


@pytest.mark.parametrize("name,K,precision", [
    ("fp32-d256-kvt", 136, "high"), ("fp32-d256-kvt", 136, "highest"), ("fp32-d256-kvt-loop", 136, "high"),
    ("fp32-d128-kvt", 72, "high"), ("fp32x3-d256-cuda", 136, "highest"), ("fp32x3-d256-bv32", 136, "highest"),
    ("fp32x3-d128-states", 72, "highest"), ("fp32x3-d128-states", 40, "highest")],
    ids=["d256-tf32", "d256-tf32x3", "d256-loop", "d128", "d256-tf32x3-cuda", "d256-tf32x3-bv32", "d128-tf32x3",
         "d64-tf32x3"])
@pytest.mark.parametrize("normalize", [False, True], ids=["raw", "norm"])
def test_trying_fp32_kvt(name, K, precision, normalize):
    """k and v copied token-contiguous before the fp32 states kernels (``Launch.kv_t``): right against float64 with
    every state in and out, at lengths that are not whole blocks (the copies' zero padding read as tokens) and V
    blocks and K tiles of several pieces; the copy itself is [B, H, D, T'] with T' whole blocks and zeros after T;
    packed and 16-bit plans unchanged."""
    with float32_matmul_precision(precision):
        for T, V in ((70, 40), (33, 136)):
            case = make(2, T, 2, K, V, torch.float32, seed=64, h0=True, z0=normalize)
            init = (case["initial_state"], case["z_state"]) if normalize else case["initial_state"]
            with dispatch.trying(name):
                launch = dispatch.launch_for(case["q"], case["v"])
                o, final = chunk_linear_attn(case["q"], case["k"], case["v"], case["scale"], init, True, normalize)
            assert launch.states == 2 and launch.kv_t
            agrees(case, o, final, normalize)
        with dispatch.trying(name):
            gpu = dispatch.plan(K, K, torch.float32, 4, 16, [4096], 132)
            packed = dispatch.plan(K, K, torch.float32, 8, 8, [100, 5000], 132, packed=True)
            bf16 = dispatch.plan(K, K, torch.bfloat16, 4, 16, [4096], 132)
        assert gpu.states == 2 and gpu.kv_t
        key = (max(64, dispatch.next_power_of_2(K)), dispatch.PRECISIONS[precision])
        change = dispatch.change_of(name, key)
        assert change and all(getattr(gpu, field) == want for field, want in change.items())
        assert packed == dispatch.plan(K, K, torch.float32, 8, 8, [100, 5000], 132, packed=True)
        assert bf16 == dispatch.plan(K, K, torch.bfloat16, 4, 16, [4096], 132)
    for x in (torch.randn(2, 70, 3, 5), torch.randn(2, 3, 70, 5).transpose(1, 2)):  # D=5; a strided view
        torch.empty(2 * 3 * 5 * 96).fill_(float("nan"))  # memory the copy may be handed next: poisoned
        t = token_major(x, 32)
        assert t.shape == (2, 3, 5, 96) and t.is_contiguous()
        assert torch.equal(t[..., :70], x.permute(0, 2, 3, 1)) and torch.equal(t[..., 70:], torch.zeros(2, 3, 5, 26))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
def test_packed_d256_keeps_the_fused_launch(dtype):
    """The states kernels have no packed form: packed D=256 calls run the fused kernel's own launch (the tables
    without the states changes), not the states launch's tiles with its states dropped, which the fused kernel
    cannot hold (fp32 at BT 64 BV 64: 352 KiB of shared memory; bf16 at BV 128: 226 KiB and 444 bytes of spill a
    thread, 60 at BV 64)."""
    lens = [1, 4095, 63, 16384, 8192, 20000, 2048, 14753]
    dense = dispatch.plan(256, 256, dtype, 2, 8, [16384], 132)
    packed = dispatch.plan(256, 256, dtype, len(lens), 8, lens, 132, packed=True)
    assert dense.states == 2
    assert packed.states == 0 and (packed.BT, packed.BV) == ((64, 64) if dtype == torch.bfloat16 else (32, 32))
    assert dispatch.change_of("fp32-d256-states", (256, "tf32"), packed=True) == {}  # packed: no states change
    assert dispatch.change_of("fp32-d256-states", (256, "tf32"))["states"] == 2
    with dispatch.trying("d256-states-s64"):  # a states candidate tried leaves packed calls alone too
        assert dispatch.plan(256, 256, dtype, len(lens), 8, lens, 132, packed=True) == packed
    # K <= 128 has no states launch but at 3xTF32 (test_fp32x3_up_to_d128_runs_the_states_kernels): packed and
    # dense plans come from the same tables
    with float32_matmul_precision("high"):
        assert dispatch.plan(128, 128, dtype, len(lens), 8, lens, 132, packed=True) == dispatch.plan(
            128, 128, dtype, len(lens), 8, lens, 132)


def test_states_output_runs_cuda_core_q_z_unpipelined():
    """The GPU found ``q · z`` on the CUDA cores wrong with the output kernel's K loop pipelined (an H100's la-check:
    the "ksum" form, 2 stages, failed; 1 stage passed): that form gets one stage, every other keeps its launch's."""
    from kernels.linear_attention.states import output_stages

    assert output_stages(2, normalize=True, qz_mma=False) == 1
    assert output_stages(2, normalize=True, qz_mma=True) == 2
    assert output_stages(3, normalize=False, qz_mma=False) == 3


@pytest.mark.slow
def test_states_kernels_compile_for_sm90():
    """Both kernels compile for an H100/H200 at the default K = V = 256 launch (the adopted states launch),
    normalising with every state, their products on wgmma (PERF.md's table: no spill there)."""
    from sm90 import compile_for_sm90

    from kernels.linear_attention import states

    lo = dispatch.ONE_PASS[(256, "16")]
    assert lo.states, "the D=256 default is no longer the states launch: this test compiles the wrong kernels"
    change = dict(BV=lo.BV, num_warps=lo.num_warps, num_stages=lo.num_stages)
    BT = lo.BT
    common = dict(K=256, V=256, BK=states.TILE, S=lo.states * BT, NORMALIZE=True, UPCAST=False, PRECISION="tf32")
    module = "kernels.linear_attention.states"
    ptx = compile_for_sm90([
        (module, "_states_kernel", dict(common, BV=states.TILE, BT=BT, HAS_H0=True, STORE_HT=True, HAS_Z0=True,
                                        LOOP_ABOVE=states.loop_above(lo.states_loop), KV_T=lo.kv_t),
         dict(num_warps=states.STATE_WARPS, num_stages=states.STATE_STAGES)),
        (module, "_states_output_kernel", dict(common, BV=change["BV"], STORE_DEN=True, QZ_MMA=True, KV_T=lo.kv_t),
         dict(num_warps=change["num_warps"], num_stages=change["num_stages"])),
    ], dtypes=("bf16",), scalars={"scale": "fp32", **{f"{n}_ptr": "*fp32" for n in ("z", "h0", "ht", "z0", "zt",
                                                                                    "den")}})
    assert all("wgmma.mma_async" in p for p in ptx.values()), "a product fell back to mma.sync"


# The dispatch rule: whole sequences when their chains fill the GPU, otherwise chained segments.

def test_dispatch_rule():
    sms = 132
    bf16 = torch.bfloat16
    assert dispatch.plan(128, 128, bf16, 4, 16, [16384], sms).L is None  # 128 chains
    assert dispatch.plan(64, 64, bf16, 64, 16, [256], sms).L is None  # many short sequences
    one_seq = dispatch.plan(128, 128, bf16, 1, 8, [262144], sms)
    assert one_seq.L is not None and one_seq.L % one_seq.BT == 0
    assert dispatch.plan(128, 128, bf16, 1, 8, [256], sms).L is None  # one segment would cover it: no chain
    # segments of ~tokens·chains/(2·SMs), within [MIN_SEGMENT, the table's L]
    assert dispatch.plan(128, 128, bf16, 1, 8, [8192], sms).L == dispatch.MIN_SEGMENT  # 8192·16 / 264 → 256
    assert dispatch.plan(128, 128, bf16, 1, 8, [1 << 20], sms).L == dispatch.CHAINED[(128, "16")].L
    # V = 64 at K = 128: V blocks of 32 ("v64-bv32"), 128 chains in one pass instead of 64 chained ones
    narrow = dispatch.plan(128, 64, bf16, 4, 16, [16384], sms)
    assert narrow.L is None and narrow.BV == 32
    assert dispatch.plan(128, 96, bf16, 4, 16, [16384], sms).BV == 64  # wider V: the table's blocks
    assert dispatch.plan(128, 64, bf16, 1, 16, [65536], sms).L is not None  # 32 chains still need the chain
    uneven = [1, 4095, 63, 16384, 8192, 20000, 2048, 14753]
    assert dispatch.plan(128, 128, bf16, 8, 16, uneven, sms).L is None
    for table, chained in ((dispatch.ONE_PASS, False), (dispatch.CHAINED, True)):
        for key, lo in table.items():
            lo.check()
            assert (lo.L is not None) == chained, key


def test_candidate_change_limited_to_narrow_v():
    """A candidate's change that holds ``max_V`` applies to calls with V up to it only, tried or adopted, and never
    reaches the tables (whose launches serve every V)."""
    key = (128, "16")
    assert dispatch.change_of("v64-bv32", key, 64) == {"BV": 32}
    assert dispatch.change_of("v64-bv32", key, 65) == {}
    assert dispatch.change_of("v64-bv32", key) == {"BV": 32}  # any V it may apply to
    assert dispatch.change_of("v64-bv32", (64, "16"), 64) == {}
    assert dispatch.applies("v64-bv32", 128, "16", False, 64)
    assert not dispatch.applies("v64-bv32", 128, "16", False, 128)
    assert dispatch.ONE_PASS[key].BV == 64 and dispatch.CHAINED[key].BV == 64


@pytest.mark.parametrize("mode, precision", [("highest", "tf32x3"), ("high", "tf32"), ("medium", "tf32")])
def test_precision_follows_torch(mode, precision):
    with float32_matmul_precision(mode):
        assert dispatch.plan(128, 128, torch.float32, 4, 16, [4096], 132).precision == precision
        assert dispatch.float32_precision() == precision


def test_segment_tables():
    """Chained: every sequence's segment j before any sequence's j + 1, one row for an empty sequence; whole
    sequences: the longest first."""
    seg, rows = fz._segments([5, 0, 70, 33], 32, "cpu")
    pairs = seg.view(-1, 2).tolist()
    assert rows == len(pairs) == 1 + 1 + 3 + 2
    assert [j for _, j in pairs] == sorted(j for _, j in pairs)
    assert sorted(pairs) == [[0, 0], [1, 0], [2, 0], [2, 1], [2, 2], [3, 0], [3, 1]]
    seg, rows = fz._segments([5, 0, 70, 33], None, "cpu")
    assert seg.view(-1, 2)[:, 0].tolist() == [2, 3, 0, 1] and rows == 4


def test_packed_plan_kept_by_offsets():
    """A packed call's plan and segment table are kept by the offsets' values: the same offsets again take the
    kept plan (no second table), and offsets written in place into the same tensor are planned anew (a plan kept
    by the tensor alone would run the old table and pass the checks of the old offsets)."""
    fz._PACKED_PLANS.clear()
    case = make(1, 77, 2, 16, 24, torch.float32, seed=60, cu=[0, 5, 40, 77])
    for _ in range(2):
        o, final = chunk_linear_attn(case["q"], case["k"], case["v"], case["scale"], output_final_state=True,
                                     cu_seqlens=case["cu_seqlens"])
        agrees(case, o, final)
    packed = [key for key in fz._PACKED_PLANS if key[2] == (0, 5, 40, 77)]
    assert len(packed) == 1 and fz._PACKED_PLANS[packed[0]].seg is not None
    assert not any(len(key) == 3 for key in fz._PLANS)  # the dense calls' plans are kept apart
    case["cu_seqlens"].copy_(torch.tensor([0, 30, 31, 77], dtype=torch.int32))  # same tensor, new sequences
    o, final = chunk_linear_attn(case["q"], case["k"], case["v"], case["scale"], output_final_state=True,
                                 cu_seqlens=case["cu_seqlens"])
    agrees(case, o, final)
    case["cu_seqlens"].copy_(torch.tensor([0, 30, 31, 70], dtype=torch.int32))  # no longer ends at T
    check_bad_input(chunk_linear_attn, case["q"], case["k"], case["v"], cu_seqlens=case["cu_seqlens"],
                    match="end at T=77")


# On the GPU: full-size rows against float64 (errors computed on the device), fp32 precision modes, determinism.

def _gpu_check(case, launch=None, normalize=True, tol=None):
    f = fused_forward(case["q"], case["k"], case["v"], case["scale"], case["initial_state"], case["z_state"], True,
                      normalize, case["cu_seqlens"], launch=launch)
    ro, rht, rz, _ = reference(case, normalize)
    tol = tol or tolerance(case["q"].dtype, tf32=True)
    for name, ref, got in (("o", ro, f.o), ("final_state", rht, f.final_state), ("z_state", rz, f.z_state)):
        if ref is None:
            continue
        assert torch.isfinite(got).all(), f"{name}: NaN/inf"
        err = ((got.double() - ref).norm() / ref.norm()).item()
        assert err <= tol, f"{name}: relative error {err:.2e} > {tol:.1e} ({f.launch})"
    return f


BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32
GPU_ROWS = pick(cpu=[], gpu=[(4, 4096, 16, 128, 128, BF16, True), (4, 4096, 16, 128, 128, BF16, False),
                             (1, 20000 - 3, 8, 128, 128, BF16, True), (2, 4099, 8, 256, 256, FP16, True),
                             (2, 3000, 16, 128, 64, BF16, False), (1, 9000, 8, 64, 256, BF16, True),
                             (2, 2048, 8, 128, 128, FP32, False), (1, 10000, 4, 256, 128, BF16, False),
                             (2, 2500, 8, 256, 256, FP32, True)])


@pytest.mark.gpu
@pytest.mark.parametrize("row", GPU_ROWS, ids=lambda r: "B{}_T{}_H{}_K{}_V{}_{}_{}".format(
    *r[:5], str(r[5])[6:], "norm" if r[6] else "raw"))
def test_gpu_rows(row):
    B, T, H, K, V, dtype, normalize = row
    f = _gpu_check(make(B, T, H, K, V, dtype, seed=T % 97, h0=True, z0=normalize), normalize=normalize)
    assert f.launch == dispatch.plan(K, V, dtype, B, H, [T], torch.cuda.get_device_properties(0).multi_processor_count)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [BF16, FP32], ids=["bf16", "fp32"])
def test_gpu_packed_d256(dtype):
    """Packed D=256 calls as users make them: the fused kernel at the packed tables' launch (the states launch's
    tiles do not fit it), right against float64 with both states in and out."""
    cu = [0, 1, 2049, 2112, 5000]
    case = make(1, cu[-1], 8, 256, 256, dtype, seed=41, h0=True, z0=True, cu=cu)
    o, final = chunk_linear_attn(case["q"], case["k"], case["v"], case["scale"],
                                 (case["initial_state"], case["z_state"]), True, True, cu_seqlens=case["cu_seqlens"])
    agrees(case, o, final)


@pytest.mark.gpu
@pytest.mark.parametrize("chained", [False, True], ids=["whole", "chained"])
def test_gpu_varlen(chained):
    cu = [0, 0, 1, 4095, 6000, 6000, 14000, 14001]
    one = dispatch.ONE_PASS[(128, "16")]
    launch = dataclasses.replace(dispatch.CHAINED[(128, "16")], L=1024) if chained else one
    _gpu_check(make(1, cu[-1], 16, 128, 128, torch.bfloat16, seed=3, h0=True, z0=True, cu=cu), launch)


@pytest.mark.gpu
@pytest.mark.parametrize("chained", [False, True], ids=["whole", "chained"])
def test_gpu_float32_precision_modes(chained):
    """Each mode's error against float64: 'highest' (3xTF32) near fp32's, far below 'high' (TF32)."""
    case = make(2, 4096 + 5, 8, 128, 128, torch.float32, seed=21, h0=True, z0=True)
    errs = {}
    for mode, tol in (("highest", 2e-5), ("high", tolerance(torch.float32, tf32=True))):
        precision = dispatch.PRECISIONS[mode]
        table = dispatch.CHAINED if chained else dispatch.ONE_PASS
        launch = table[(128, precision)]
        assert launch.precision == precision
        f = _gpu_check(case, launch, tol=tol)
        ro = reference(case)[0]
        errs[mode] = rel_error(f.o, ro)
    assert errs["highest"] * 10 < errs["high"], errs


@pytest.mark.gpu
@pytest.mark.parametrize("prefix", [1, 2, 3], ids=["lookback", "lookback_sums", "stored"])
@pytest.mark.parametrize("normalize", [False, True], ids=["raw", "norm"])
def test_gpu_prefix_modes(prefix, normalize):
    """The ways a segment finds its prefix (Launch.prefix) at full size against float64: the decoupled look-back,
    its summing path (which the interpreter never takes on its own), and prefixes stored by a states pass;
    D=128 with segments of 512, D=256 stored at the stored candidates' tiles."""
    launch = dataclasses.replace(dispatch.CHAINED[(128, "16")], L=512, prefix=prefix)
    _gpu_check(make(1, 20000 - 3, 8, 128, 128, torch.bfloat16, seed=24 + prefix, h0=True, z0=normalize), launch,
               normalize=normalize)
    if prefix == 3:
        d256 = dispatch.Launch(512, 64, 64, 8, 2, norm_mma="wide", prefix=3)
        _gpu_check(make(2, 4099, 8, 256, 256, torch.float16, seed=27, h0=True, z0=normalize), d256,
                   normalize=normalize)


@pytest.mark.gpu
def test_gpu_chained_deterministic():
    """Twenty chained launches, bit-identical outputs, final states and key sums (a stale ring slot, flag or key sum
    would change some bits)."""
    case = make(1, 16384 + 5, 8, 128, 128, torch.bfloat16, seed=22, h0=True, z0=True)
    launch = dataclasses.replace(dispatch.CHAINED[(128, "16")], L=512)
    f0 = _gpu_check(case, launch)
    for _ in range(20):
        f = fused_forward(case["q"], case["k"], case["v"], case["scale"], case["initial_state"], case["z_state"],
                          True, True, launch=launch)
        assert torch.equal(f.o, f0.o) and torch.equal(f.final_state, f0.final_state)
        assert torch.equal(f.z_state, f0.z_state)


@pytest.mark.gpu
def test_gpu_tma_matches_pointer_loads():
    case = make(2, 8192 + 37, 8, 128, 128, torch.bfloat16, seed=23, h0=True, z0=True)
    for L in (None, 1024):
        a = dataclasses.replace(dispatch.ONE_PASS[(128, "16")], L=L)
        fa = fused_forward(case["q"], case["k"], case["v"], case["scale"], case["initial_state"], case["z_state"],
                           True, True, launch=a)
        fb = fused_forward(case["q"], case["k"], case["v"], case["scale"], case["initial_state"], case["z_state"],
                           True, True, launch=dataclasses.replace(a, tma=True))
        assert torch.equal(fa.o, fb.o) and torch.equal(fa.final_state, fb.final_state), f"L={L}"


def test_reads_the_offsets_once(monkeypatch):
    """Called directly (not through chunk_linear_attn), the fused forward still reads cu_seqlens once."""
    from kernels.linear_attention import checks

    reads = []
    real = checks._read
    monkeypatch.setattr(checks, "_read", lambda cu: reads.append(1) or real(cu))
    case = make(1, 40, 2, 16, 16, torch.float32, seed=17, cu=[0, 7, 7, 40])
    fused_forward(case["q"], case["k"], case["v"], 0.25, None, None, True, True, case["cu_seqlens"])
    assert len(reads) == 1
