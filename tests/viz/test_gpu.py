"""On a GPU: the lesson-01 measurements show the L2 cliff and the cost of strides, the views show those
measurements, and the tracer still runs a compiled-mode kernel (a JITFunction) through the interpreter."""

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

from kernels import viz

pytestmark = pytest.mark.gpu


@triton.jit
def gpu_add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


@triton.jit
def gpu_matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        rk = k + tl.arange(0, BK)
        a = tl.load(a_ptr + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + rk[:, None] * N + rn[None, :], mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@pytest.mark.timed
def test_working_set_shows_the_l2_cliff():
    small, big = 8 * 2**20, 2 * 2**30
    m = viz.measure.working_set([small, big])
    bw_small, bw_big = m["bandwidth"]
    assert bw_small > 1.3 * bw_big, f"L2-resident re-reads {bw_small:.3g} B/s vs HBM {bw_big:.3g} B/s"
    from kernels.bench import copy_bandwidth

    copy = copy_bandwidth()
    assert 0.4 * copy < bw_big < 1.5 * copy, f"HBM re-read {bw_big:.3g} vs copy {copy:.3g} B/s"
    view = viz.working_set_view(m, copy_bandwidth=copy)
    view.set(size=small)
    assert "measured on this GPU" in view.caption and "fits in L2" in view.caption


@pytest.mark.timed
def test_strides_cost_bandwidth():
    m = viz.measure.strided([1, 8, 32])
    bw1, bw8, bw32 = m["bandwidth"]
    assert bw8 < 0.6 * bw1 and bw32 < 0.6 * bw1, m
    view = viz.coalescing_view(m)
    view.set(stride=8)
    assert "measured" in view.caption and "12%" in view.caption


@pytest.mark.timed
def test_record_the_reference_numbers(tmp_path):
    """What scripts/gpu_viz.py records as the H200 reference (it writes results/gpu/viz_reference.json, run alone
    on the GPU; here other tests may share it, so the numbers only have to show the cliff)."""
    rec = viz.measure.record_reference(tmp_path / "viz_reference.json")
    ws = rec["working_set"]["bandwidth"]
    assert max(ws[:4]) > 1.3 * ws[-1] and rec["strided"]["bandwidth"][3] < 0.6 * rec["strided"]["bandwidth"][0]


def test_tracer_runs_a_compiled_kernel_on_cuda_tensors():
    n = 300
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    out = torch.full((n,), float("nan"), device="cuda")
    tr = viz.trace(gpu_add_kernel, x, y, out, n, BLOCK=128, grid=(3,))
    assert tr.elements("out_ptr", "store", pid=2) == set(range(256, 300)) and tr.out_of_bounds == []
    torch.testing.assert_close(out, x + y)  # the interpreter copies the results back to the GPU tensors
    gpu_add_kernel[(3,)](x, y, out, n, BLOCK=128)  # compiled launches still work afterwards
    torch.cuda.synchronize()


def test_tracer_tiles_of_a_compiled_matmul():
    """A range loop under the interpreter: with numpy >= 2.4 (the GPU image's) the tracer works around
    triton#9171."""
    M, N, K = 20, 24, 40
    a, b = torch.randn(M, K, device="cuda"), torch.randn(K, N, device="cuda")
    c = torch.empty(M, N, device="cuda")
    tr = viz.trace(gpu_matmul_kernel, a, b, c, M, N, K, BM=16, BN=16, BK=16, grid=(2, 2))
    assert tr.steps((1, 1)) == 3
    assert tr.elements("a_ptr", "load", pid=(1, 0), step=2, coords=True) == {(i, k) for i in range(16, 20)
                                                                            for k in range(32, 40)}
    torch.testing.assert_close(c, a @ b, rtol=1e-4, atol=1e-4)
    assert np.__version__  # recorded in the test log by -ra's header
