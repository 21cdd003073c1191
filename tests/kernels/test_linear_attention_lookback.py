"""The lookback kernel beyond the shared version tests: long chains of segments, V split into blocks, every
launch configuration in the tuned table, varlen segment tables, repeated launches (the ticket counter and ring
flags start fresh each call), the workspace bound, and on a GPU full-size problems and determinism.
"""

from __future__ import annotations

import math

import pytest
import torch

from kernels.device import DEVICE, ON_GPU, pick
from kernels.linear_attention import fused
from kernels.linear_attention import lookback as lb
from kernels.linear_attention.lookback import CONFIGS, Config, config_for, lookback_linear_attention
from kernels.linear_attention.reference import reference_linear_attention
from kernels.testing import assert_close, check_bad_input, randn, tolerance


def case(B, T, H, K, V, dtype, *, seed, h0=True, cu=None):
    q, k, v = (randn(B, T, H, d, dtype=dtype, seed=seed + i) for i, d in enumerate((K, K, V)))
    N = B if cu is None else len(cu) - 1
    state = randn(N, H, K, V, seed=seed + 3) if h0 else None
    cu_t = None if cu is None else torch.tensor(cu, dtype=torch.int32, device=DEVICE)
    return q, k, v, K**-0.5, state, cu_t


def check(args, made=(), *, config=None, tol=None):
    q, k, v, scale, h0, cu = args
    o, ht = lookback_linear_attention(q, k, v, scale, h0, True, cu, config=config)
    d = (lambda x: None if x is None else x.double())
    ro, rht = reference_linear_attention(d(q), d(k), d(v), scale, d(h0), True, normalize=False, cu_seqlens=cu,
                                         chunk_size=32)
    for p in made:  # o and the final state are checked for NaN below; the ring is scratch, partly unused
        assert p.guards_intact(), "the kernel wrote out of bounds (into a guard band)"
    tol = tol or tolerance(q.dtype, tf32=ON_GPU)
    assert_close("o", ro, o, tol)
    assert_close("final_state", rht, ht, tol)
    return o, ht


# Launch configurations that stress the chain: one-chunk segments, V split into blocks with a ragged last block,
# segments longer than a chunk; and two with tiles moved by tensor descriptors (TMA on a GPU), where zero fill
# past a sequence's end and clipped stores replace the masks.
CHAIN_CONFIGS = {
    "L16_BT16_BV16": Config(16, 16, 16, 4, 1),
    "L64_BT32_BV32": Config(64, 32, 32, 4, 1),
    "L48_BT16_BV64": Config(48, 16, 64, 4, 1),
    "L16_BT16_BV16_tma": Config(16, 16, 16, 4, 1, tma=True),
    "L48_BT16_BV64_tma": Config(48, 16, 64, 4, 1, tma=True),
}


@pytest.mark.parametrize("cfg", CHAIN_CONFIGS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_long_chains(cfg, dtype, allocations):
    """T = 203 crosses 4-13 segments; V = 40 leaves a ragged V block; every chain starts from an initial state."""
    check(case(2, 203, 2, 32, 40, dtype, seed=1), allocations, config=CHAIN_CONFIGS[cfg])


@pytest.mark.parametrize("cfg", CHAIN_CONFIGS)
def test_varlen_segment_table(cfg, allocations):
    """Empty sequences, one token, exactly one segment, a segment plus one token, and a long one."""
    L = CHAIN_CONFIGS[cfg].L
    lengths = [0, 1, L, L + 1, 0, 3 * L + 5, 7]
    cu = [0] + [sum(lengths[: i + 1]) for i in range(len(lengths))]
    check(case(1, cu[-1], 2, 32, 32, torch.float16, seed=2, cu=cu), allocations, config=CHAIN_CONFIGS[cfg])


def test_tma_needs_aligned_tensors(allocations):
    """A base or a stride off 16 bytes cannot be described: those calls take pointer loads, and stay right."""
    q, k, v, scale, h0, _ = case(1, 70, 2, 24, 24, torch.float16, seed=23)
    assert fused._tma_ready(q, k, v)
    wide = randn(1, 70, 2, 25, dtype=torch.float16, seed=24)
    q_odd = wide[..., 1:]  # base 2 bytes in, token stride 100 bytes
    assert not fused._tma_ready(q_odd, k, v)
    check((q_odd, k, v, scale, h0, None), allocations, config=CHAIN_CONFIGS["L16_BT16_BV16_tma"])


@pytest.mark.parametrize("cfg", [Config(512, 32, 64, 4, 2), Config(1024, 64, 64, 4, 2)], ids=["L512", "L1024"])
def test_fp32_head_size_64(cfg, allocations):
    """The fp32 K = V = 64 case (B=2, T=1000, H=4) with the fp32 table's old and new launch configurations."""
    check(case(2, 1000, 4, 64, 64, torch.float32, seed=1069), allocations, config=cfg)


def test_without_initial_or_final_state(allocations):
    q, k, v, scale, _, _ = case(1, 90, 2, 16, 16, torch.float32, seed=3, h0=False)
    o, ht = lookback_linear_attention(q, k, v, scale)
    assert ht is None
    ro, _ = reference_linear_attention(q.double(), k.double(), v.double(), scale, normalize=False)
    assert_close("o", ro, o, tolerance(torch.float32, tf32=ON_GPU))
    for p in allocations:
        assert p.guards_intact()


def test_repeated_calls_start_fresh():
    """The ticket counter and flags are zeroed per call: a second, differently shaped call is right, and a
    repeat of the first gives the same bits (each program's arithmetic has a fixed order)."""
    cfg = Config(32, 16, 16, 4, 1)
    a = case(1, 120, 2, 16, 32, torch.float32, seed=4)
    o1, h1 = check(a, config=cfg)
    check(case(2, 50, 3, 16, 16, torch.float32, seed=5), config=cfg)
    o2, h2 = lookback_linear_attention(*a[:5], True, a[5], config=cfg)
    assert torch.equal(o1, o2) and torch.equal(h1, h2)


def test_workspace_is_independent_of_T(allocations):
    """Besides o and the final state, the wrapper allocates only the ring: SLOTS states per chain, any T."""
    q, k, v, scale, h0, cu = case(1, 300, 2, 32, 32, torch.float32, seed=6)
    cfg = Config(32, 16, 16, 4, 1)
    lookback_linear_attention(q, k, v, scale, h0, True, cu, config=cfg)
    sizes = sorted(p.out.numel() for p in allocations)
    o_size, ht_size = v.numel(), h0.numel()
    ring = [n for n in sizes if n not in (o_size, ht_size)]
    assert ring == [1 * 2 * 2 * lb.SLOTS * 32 * 16], sizes  # N * H * NV chains, SLOTS [BK, BV] tiles each


def test_config_table():
    """Every table entry is a valid launch configuration, and every head size and dtype finds one."""
    for key, rows in CONFIGS.items():
        assert rows[-1][0] == math.inf, f"{key}: the last row must cover every T"
        for _, cfg in rows:
            lb._check_config(cfg)
    for d in (16, 64, 100, 128, 256):
        for dtype in (torch.float32, torch.float16, torch.bfloat16):
            for T in (1, 4096, 10**6):
                lb._check_config(config_for(d, d, dtype, T))


def test_bad_config():
    q, k, v, scale, h0, _ = case(1, 20, 2, 16, 16, torch.float32, seed=7)
    for cfg, match in ((Config(40, 32, 16, 4, 1), "multiple"), (Config(64, 24, 16, 4, 1), "BT"),
                       (Config(64, 32, 8, 4, 1), "BV"), (Config(64, 32, 16, 3, 1), "num_warps"),
                       (Config(64, 32, 16, 4, 0), "num_stages")):
        check_bad_input(lookback_linear_attention, q, k, v, scale, h0, True, config=cfg, match=match)


def test_bad_head_size():
    q = randn(1, 8, 1, 300)
    check_bad_input(lookback_linear_attention, q, q, randn(1, 8, 1, 16), 0.1, match="limit 256")


# On the GPU: the tuned table at full size, and the properties a data race would break. Errors are computed on
# the device (a CPU float64 copy of these outputs would take longer than the kernels).

def _gpu_close(name, ref, out, tol):
    assert torch.isfinite(out).all(), f"{name}: NaN/inf in the output (unwritten or overflowed)"
    err = ((out.double() - ref.double()).norm() / ref.double().norm()).item()
    assert err <= tol, f"{name}: relative error {err:.3e} > tolerance {tol:.1e}"


def _check_gpu(args):
    q, k, v, scale, h0, cu = args
    o, ht = lookback_linear_attention(q, k, v, scale, h0, True, cu)
    d = (lambda x: None if x is None else x.double())
    ro, rht = reference_linear_attention(d(q), d(k), d(v), scale, d(h0), True, normalize=False, cu_seqlens=cu,
                                         chunk_size=256)
    _gpu_close("o", ro, o, tolerance(q.dtype, tf32=True))
    _gpu_close("final_state", rht, ht, tolerance(q.dtype, tf32=True))
    return o, ht


GPU_SHAPES = pick(cpu=[], gpu=[(4, 4096, 16, 128, torch.bfloat16), (1, 40000 + 37, 16, 128, torch.bfloat16),
                               (1, 20000 - 3, 16, 128, torch.float16), (2, 16384, 32, 64, torch.bfloat16),
                               (2, 5000, 8, 64, torch.float32)])


@pytest.mark.gpu
@pytest.mark.parametrize("shape", GPU_SHAPES, ids=lambda s: "B{}_T{}_H{}_D{}_{}".format(*s[:4], str(s[4])[6:]))
def test_gpu_table_configs(shape):
    _check_gpu(case(*shape[:4], shape[3], shape[4], seed=11))


@pytest.mark.gpu
def test_gpu_varlen():
    g = torch.Generator().manual_seed(12)
    T = 40000
    cuts = torch.randperm(T - 1, generator=g)[:15].add(1).sort().values.tolist()
    cu = [0, 0, *cuts, T]  # includes an empty sequence
    _check_gpu(case(1, T, 16, 128, 128, torch.bfloat16, seed=12, cu=cu))


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(2, 16384 + 37, 16, 128, torch.bfloat16), (1, 9000 - 5, 32, 64, torch.float16)],
                         ids=["bf16_D128", "fp16_D64"])
def test_gpu_tma_matches_pointer_loads(shape):
    """TMA tiles and pointer loads feed the same products in the same order: outputs bit for bit equal."""
    args = case(*shape[:4], shape[3], shape[4], seed=14)
    q, k, v, scale, s0, _ = args
    for L in (1024, 4096):
        o1, h1 = lookback_linear_attention(q, k, v, scale, s0, True, config=Config(L, 64, 64, 4, 2))
        o2, h2 = lookback_linear_attention(q, k, v, scale, s0, True, config=Config(L, 64, 64, 4, 2, tma=True))
        assert torch.isfinite(o2).all()
        assert torch.equal(o1, o2) and torch.equal(h1, h2), f"L={L}: TMA and pointer loads differ"


def test_one_pass_rule():
    """The chunked kernel's single pass is chosen when its longest chain ends no later than the lookback would
    finish the whole call (the rows the H200 timed both ways), otherwise the lookback splits sequences."""
    sms = 132
    assert lb.one_pass_fills(4 * 16 * 2, sms)  # B=4 H=16 D=128: 128 chains, chunked 0.36 ms, lookback 0.53
    assert lb.one_pass_fills(4 * 32 * 1, sms)  # B=4 H=32 D=64: chunked 0.30, lookback 0.39
    assert not lb.one_pass_fills(1 * 16 * 2, sms)  # one sequence of 64k: chunked 1.4 ms, lookback 0.54
    assert lb.one_pass_fills(95, sms) and not lb.one_pass_fills(94, sms)  # equal lengths: 132 / 1.4 = 94.3 chains
    uneven = [1, 4095, 63, 16384, 8192, 20000, 2048, 14753]  # 256 chains: chunked 0.56 ms, lookback 0.99
    assert lb.one_pass_fills(8 * 16 * 2, sms, uneven)
    assert not lb.one_pass_fills(8 * 16 * 2, sms, [60000] + [700] * 7)  # one long sequence runs on alone
    assert lb.one_pass_fills(8 * 16 * 2, sms, [0] * 8)  # nothing to do: no reason to split


@pytest.mark.gpu
def test_gpu_dispatch_by_occupancy():
    """On the GPU, chunk_linear_attn runs the fused kernel, which follows the rule: whole sequences for a wide
    batch, chained segments (the lookback's scheme) for one sequence."""
    from kernels.linear_attention import pick_version
    from kernels.linear_attention.dispatch import launch_for

    wide = case(4, 4096, 16, 128, 128, torch.bfloat16, seed=15, h0=False)
    narrow = case(1, 4096, 16, 128, 128, torch.bfloat16, seed=16, h0=False)
    assert pick_version(*wide[:3]) == pick_version(*narrow[:3]) == "fused"
    assert launch_for(wide[0], wide[2]).L is None
    assert launch_for(narrow[0], narrow[2]).L is not None


@pytest.mark.gpu
def test_gpu_deterministic_across_launches():
    """Twenty launches, bit-identical: a stale flag or ring slot read anywhere would change some bits."""
    args = case(2, 16384 + 5, 16, 128, 128, torch.bfloat16, seed=13)
    o0, h0 = _check_gpu(args)
    q, k, v, scale, s0, _ = args
    for _ in range(20):
        o, ht = lookback_linear_attention(q, k, v, scale, s0, True)
        assert torch.equal(o, o0) and torch.equal(ht, h0)


@pytest.mark.gpu
def test_gpu_extra_memory_bound():
    """No O(T·D²) intermediate: the extra memory beyond o stays under 1/8 of the inputs' size."""
    q, k, v = (torch.randn(4, 65536, 16, 128, device=DEVICE, dtype=torch.bfloat16) for _ in range(3))
    lookback_linear_attention(q, k, v, 0.1)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    o, _ = lookback_linear_attention(q, k, v, 0.1)
    torch.cuda.synchronize()
    extra = torch.cuda.max_memory_allocated() - base - o.numel() * o.element_size()
    inputs = 3 * q.numel() * q.element_size()
    assert extra <= inputs / 8, f"extra {extra / 2**20:.1f} MiB > 1/8 of the inputs' {inputs / 2**20:.0f} MiB"
