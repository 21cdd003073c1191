"""The tracer's access sets against hand-computed ones: tail masks, strides, tiles, out of bounds, skipped elements."""

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

from kernels.testing import poisoned, randn
from kernels.viz import trace


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


@triton.jit
def add_off_by_one_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs <= n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


@triton.jit
def unmasked_copy_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs))


@triton.jit
def strided_copy_kernel(x_ptr, out_ptr, n, stride, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs * stride, mask=mask), mask=mask)


@triton.jit
def copy_2d_kernel(x_ptr, out_ptr, M, N, stride_xm, stride_xn, stride_om, BM: tl.constexpr, BN: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    x = tl.load(x_ptr + rm[:, None] * stride_xm + rn[None, :] * stride_xn, mask=mask)
    tl.store(out_ptr + rm[:, None] * stride_om + rn[None, :], x, mask=mask)


@triton.jit
def every_other_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = (offs < n) & (offs % 2 == 0)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        rk = k + tl.arange(0, BK)
        a = tl.load(a_ptr + rm[:, None] * stride_am + rk[None, :] * stride_ak,
                    mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + rk[:, None] * stride_bk + rn[None, :] * stride_bn,
                    mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b, input_precision="ieee")
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def add_rows_kernel(q_ptr, k_ptr, out_ptr, T, D, stride_q, stride_k, BT: tl.constexpr, BD: tl.constexpr):
    rt = tl.program_id(0) * BT + tl.arange(0, BT)
    rd = tl.arange(0, BD)
    mask = (rt[:, None] < T) & (rd[None, :] < D)
    q = tl.load(q_ptr + rt[:, None] * stride_q + rd[None, :], mask=mask)
    k = tl.load(k_ptr + rt[:, None] * stride_k + rd[None, :], mask=mask)
    tl.store(out_ptr + rt[:, None] * D + rd[None, :], q + k, mask=mask)


@triton.jit
def histogram_kernel(x_ptr, bins_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    idx = tl.load(x_ptr + offs, mask=mask, other=0)
    tl.atomic_add(bins_ptr + idx, 1, mask=mask)


def test_vector_add_tail_mask():
    n, B = 100, 32
    x, y, out = randn(n, seed=1, device="cpu"), randn(n, seed=2, device="cpu"), poisoned(n, device="cpu")
    tr = trace(add_kernel, x, y, out.out, n, BLOCK=B, grid=(triton.cdiv(n, B),))
    assert len(tr) == 1 and tr.grid == (4, 1, 1) and tr.kernel == "add_kernel"
    for p in range(4):
        want = set(range(p * B, min(n, (p + 1) * B)))
        assert tr.elements("x_ptr", "load", pid=p) == want
        assert tr.elements("y_ptr", "load", pid=p) == want
        assert tr.elements("out_ptr", "store", pid=p) == want
        assert tr.elements("out_ptr", "load", pid=p) == set()
        assert tr.bytes(pid=p)["x_ptr"] == {"load": 4 * len(want), "store": 0}
    last = tr.select("out_ptr", "store", pid=3)[0]
    assert int((~last.mask).sum()) == 4 * B - n and not last.oob.any()
    assert tr.out_of_bounds == []  # masked-off lanes are not errors
    assert tr.bytes_per_program() == {(0, 0, 0): 384, (1, 0, 0): 384, (2, 0, 0): 384, (3, 0, 0): 48}
    assert tr.unwritten()["out_ptr"].size == 0
    assert [a.order for a in tr.select(pid=1)] == [0, 1, 2]
    assert [a.kind for a in tr.select(pid=1)] == ["load", "load", "store"]
    tr.check()
    out.check()
    torch.testing.assert_close(out.out, x + y)


def test_off_by_one_mask_is_out_of_bounds():
    n, B = 100, 32
    x, y, out = randn(n, seed=1, device="cpu"), randn(n, seed=2, device="cpu"), poisoned(n, device="cpu")
    tr = trace(add_off_by_one_kernel, x, y, out.out, n, BLOCK=B, grid=(triton.cdiv(n, B),))
    oob = {(o.kind, o.tensor, o.pid, tuple(o.offsets.tolist())) for o in tr.out_of_bounds}
    assert oob == {("load", "x_ptr", (3, 0, 0), (100,)), ("load", "y_ptr", (3, 0, 0), (100,)),
                   ("store", "out_ptr", (3, 0, 0), (100,))}
    assert out.guards_intact(), "the out-of-bounds store must be switched off, not run"
    with pytest.raises(AssertionError, match="out of bounds"):
        tr.check()


def test_unmasked_tail_is_out_of_bounds_and_stopped():
    n, B = 50, 16
    x, out = randn(n, seed=3, device="cpu"), poisoned(n, device="cpu")
    tr = trace(unmasked_copy_kernel, x, out.out, BLOCK=B, grid=(4,))
    assert [(o.kind, o.tensor, o.pid, sorted(o.offsets.tolist())) for o in tr.out_of_bounds] == [
        ("load", "x_ptr", (3, 0, 0), list(range(50, 64))), ("store", "out_ptr", (3, 0, 0), list(range(50, 64)))]
    assert tr.elements("out_ptr", "store") == set(range(n))
    assert "14 unmasked lane(s)" in str(tr.out_of_bounds[0]) and "line" in str(tr.out_of_bounds[0])
    assert out.guards_intact()
    torch.testing.assert_close(out.out, x)


def test_strided_copy():
    n, stride, B = 37, 3, 16
    x = randn(n * stride, seed=4, device="cpu")
    out = poisoned(n, device="cpu")
    tr = trace(strided_copy_kernel, x, out.out, n, stride, BLOCK=B, grid=(triton.cdiv(n, B),))
    assert tr.elements("x_ptr", "load") == {stride * i for i in range(n)}
    for p in range(3):
        assert tr.elements("x_ptr", "load", pid=p) == {stride * i for i in range(p * B, min(n, (p + 1) * B))}
    assert tr.counts("x_ptr").reshape(-1)[::stride].tolist() == [1] * n
    assert tr.counts("x_ptr").sum() == n
    assert tr.out_of_bounds == []
    torch.testing.assert_close(out.out, x[::stride])


def test_transposed_view_maps_to_its_own_indices():
    M, N = 13, 10
    base = randn(N, M, seed=5, device="cpu")
    x = base.t()  # [M, N], strides (1, M): not contiguous
    out = torch.full((M, N), float("nan"))
    tr = trace(copy_2d_kernel, x, out, M, N, *x.stride(), out.stride(0), BM=8, BN=8, grid=(2, 2))
    for pm in range(2):
        for pn in range(2):
            want = {(i, j) for i in range(8 * pm, min(M, 8 * pm + 8)) for j in range(8 * pn, min(N, 8 * pn + 8))}
            assert tr.elements("x_ptr", "load", pid=(pm, pn), coords=True) == want
            assert tr.elements("out_ptr", "store", pid=(pm, pn), coords=True) == want
    torch.testing.assert_close(out, x)


def test_interleaved_views_of_one_storage():
    """q and k as column slices of one packed [T, 3D] tensor: their address ranges interleave."""
    T, D = 10, 8
    qkv = randn(T, 3 * D, seed=12, device="cpu")
    q, k = qkv[:, :D], qkv[:, D:2 * D]
    out = torch.full((T, D), float("nan"))
    tr = trace(add_rows_kernel, q, k, out, T, D, q.stride(0), k.stride(0), BT=4, BD=8, grid=(3,))
    assert tr.out_of_bounds == []
    for p in range(3):
        rows = range(4 * p, min(T, 4 * p + 4))
        want = {(t, d) for t in rows for d in range(D)}
        assert tr.elements("q_ptr", "load", pid=p, coords=True) == want
        assert tr.elements("k_ptr", "load", pid=p, coords=True) == want
    torch.testing.assert_close(out, q + k)


def test_tiled_matmul_tiles_per_step():
    M, N, K, BM, BN, BK = 20, 12, 26, 8, 8, 8
    a, b = randn(M, K, seed=6, device="cpu"), randn(K, N, seed=7, device="cpu")
    c = torch.full((M, N), float("nan"))
    tr = trace(matmul_kernel, a, b, c, M, N, K, *a.stride(), *b.stride(), *c.stride(), BM=BM, BN=BN, BK=BK,
               grid=(triton.cdiv(M, BM), triton.cdiv(N, BN)))
    steps = triton.cdiv(K, BK)
    assert tr.grid == (3, 2, 1)
    for pm in range(3):
        for pn in range(2):
            rows = range(BM * pm, min(M, BM * pm + BM))
            cols = range(BN * pn, min(N, BN * pn + BN))
            assert tr.steps((pm, pn)) == steps
            for s in range(steps):
                ks = range(BK * s, min(K, BK * s + BK))
                assert tr.elements("a_ptr", "load", pid=(pm, pn), step=s, coords=True) == {(i, k) for i in rows
                                                                                           for k in ks}
                assert tr.elements("b_ptr", "load", pid=(pm, pn), step=s, coords=True) == {(k, j) for k in ks
                                                                                           for j in cols}
            assert tr.elements("c_ptr", "store", pid=(pm, pn), coords=True) == {(i, j) for i in rows for j in cols}
    # every A element is loaded once per column of programs, every B element once per row of programs
    assert (tr.counts("a_ptr", "load") == 2).all() and (tr.counts("b_ptr", "load") == 3).all()
    assert tr.bytes()["a_ptr"]["load"] == 2 * M * K * 4
    assert tr.out_of_bounds == [] and tr.unwritten()["c_ptr"].size == 0
    torch.testing.assert_close(c, a @ b, rtol=1e-5, atol=1e-5)


def test_skipped_elements_are_unwritten():
    n = 45
    x, out = randn(n, seed=8, device="cpu"), poisoned(n, device="cpu")
    tr = trace(every_other_kernel, x, out.out, n, BLOCK=16, grid=(3,))
    assert set(tr.unwritten()["out_ptr"].tolist()) == set(range(1, n, 2))
    assert tr.elements("out_ptr", "store") == set(range(0, n, 2))
    assert tr.out_of_bounds == []
    with pytest.raises(AssertionError, match="22 of 45 elements never written"):
        tr.check()
    assert out.unwritten() == 22


def test_outputs_named_even_if_never_stored():
    n = 20
    x, out = randn(n, seed=9, device="cpu"), torch.empty(n)
    tr = trace(strided_copy_kernel, x, out, 0, 1, BLOCK=16, grid=(2,), outputs=["out_ptr"])
    assert tr.unwritten()["out_ptr"].tolist() == list(range(n))


def test_atomics_are_recorded():
    n, bins = 50, 7
    x = torch.arange(n, dtype=torch.int32) % bins
    h = torch.zeros(bins, dtype=torch.int32)
    tr = trace(histogram_kernel, x, h, n, BLOCK=16, grid=(4,))
    assert tr.elements("bins_ptr", "atomic") == set(range(bins))
    assert int(tr.counts("bins_ptr", "atomic").sum()) == n
    assert h.tolist() == torch.bincount(x.long(), minlength=bins).int().tolist()


def test_wrapper_records_every_launch():
    def two_adds(x, y):
        out, out2 = torch.empty_like(x), torch.empty_like(x)
        add_kernel[(2,)](x, y, out, x.numel(), BLOCK=32)
        add_kernel[(2,)](out, y, out2, x.numel(), BLOCK=32)
        return out2

    x, y = randn(40, seed=10, device="cpu"), randn(40, seed=11, device="cpu")
    tr = trace(two_adds, x, y)
    assert len(tr) == 2 and all(la.elements("out_ptr", "store") == set(range(40)) for la in tr)
    torch.testing.assert_close(tr.result, x + 2 * y)
    assert "add_kernel" in repr(tr)


def test_bad_calls():
    x = torch.zeros(4)
    with pytest.raises(TypeError, match="grid"):
        trace(add_kernel, x, x, x, 4, BLOCK=4)
    with pytest.raises(TypeError, match="grid= is only for"):
        trace(lambda: None, grid=(1,))
    tr = trace(add_kernel, x, x, x, 4, BLOCK=4, grid=(1,))
    with pytest.raises(KeyError, match="no tensor argument named 'z'"):
        tr.elements("z")


def test_a_kernel_that_raises_reports_its_own_error():
    @triton.jit
    def unfinished_kernel(x_ptr):
        raise NotImplementedError("write me")

    with pytest.raises(NotImplementedError):
        trace(unfinished_kernel, torch.zeros(1), grid=(1,))


def test_hooks_are_removed_afterwards():
    import triton.runtime.interpreter as interp

    before = dict(vars(interp.interpreter_builder))
    trace(add_kernel, torch.zeros(8), torch.zeros(8), torch.zeros(8), 8, BLOCK=8, grid=(1,))
    assert dict(vars(interp.interpreter_builder)).keys() == before.keys()
    x, y = randn(8, seed=1), randn(8, seed=2)
    out = torch.empty_like(x)
    add_kernel[(1,)](x, y, out, 8, BLOCK=8)
    torch.testing.assert_close(out, x + y)
    assert np.isfinite(out.cpu().numpy()).all()


def test_compiled_mode_kernel_traces_through_the_interpreter():
    """What happens on a GPU machine: a JITFunction (not an interpreted one) with a @triton.jit helper."""
    import os
    import pathlib
    import subprocess
    import sys

    root = pathlib.Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(root), env.get("PYTHONPATH", "")])
    res = subprocess.run([sys.executable, str(pathlib.Path(__file__).with_name("compiled_mode.py"))], env=env,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0 and "compiled-mode trace OK" in res.stdout, res.stdout + res.stderr[-3000:]
