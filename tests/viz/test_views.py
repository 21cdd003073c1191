"""Every lesson view builds, answers its controls (from code and through the live widget), and renders a PNG whose
pixels change with the control; errors surface as the lessons expect; static output keeps a PNG."""

import io

import matplotlib.image
import numpy as np
import pytest
import torch

from kernels import viz
from kernels.viz import demo


def pixels(png: bytes) -> np.ndarray:
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    return matplotlib.image.imread(io.BytesIO(png), format="png")


def changes(view, **values) -> float:
    """Fraction of pixels that differ after ``view.set(**values)``."""
    before = pixels(view.png())
    view.set(**values)
    assert not view.error, view.error
    after = pixels(view.png())
    assert before.shape == after.shape
    return float((np.abs(before - after).sum(axis=-1) > 0).mean())


def _other(view, key):
    """A value of control ``key`` other than its current one."""
    c, now = view.spec[key], view.values[key]
    if hasattr(c, "options"):
        return next(o for o in c.options if o != now)
    return now - 1 if now > c.lo else now + 1


def ptx_text():
    return viz.sample_ptx()


CASES = {
    "grid": (lambda: viz.grid_explorer(), [dict(pid=7), dict(n=1500), dict(BLOCK=256)]),
    "working_set": (lambda: viz.working_set_view({"bytes": [2**20 * 2**i for i in range(8)],
                                                  "bandwidth": [9e12] * 6 + [4e12] * 2, "l2_bytes": 50 * 2**20}),
                    [dict(size=2**27)]),
    "coalescing": (lambda: viz.coalescing_view(), [dict(stride=8), dict(stride=2)]),
    "recurrence": (lambda: viz.recurrence_stepper(), [dict(t=10), dict(strategy="state on chip")]),
    "tiles": (lambda: viz.tile_explorer(), [dict(pid=5), dict(step=2), dict(GROUP_M=1)]),
    "matmul_lesson": (lambda: viz.matmul_tile_explorer(), [dict(pid=4), dict(BLOCK_K=32)]),
    "chunks": (lambda: viz.chunk_flow(), [dict(i=3), dict(chunk=32)]),
    "chunk_lesson": (lambda: viz.chunk_state_explorer(), [dict(i=2)]),
    "backward_sweeps": (lambda: viz.backward_sweeps(), [dict(step=3), dict(show="dk/dv program"), dict(chunk=32)]),
    "ptx": (lambda: viz.ptx_explorer(ptx_text()), [dict(k=3), dict(category="global memory")]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_view_renders_and_follows_its_controls(case, tmp_path):
    make, moves = CASES[case]
    view = make()
    assert view.caption and not view.error
    for values in moves:
        assert changes(view, **values) > 0.001, f"{case}: the picture did not change for {values}"
    path = view.save(tmp_path / f"{case}.png")
    assert pixels(path.read_bytes()).shape[0] > 100
    bundle = view.static_bundle()
    assert bundle["image/png"] and "data:image/png;base64," in bundle["text/html"]
    assert "kw-static" in bundle["text/html"]
    # the live widget: a control moved in the browser redraws the same Image in place
    box = view.widget
    first = view._image.value
    key = next(iter(moves[0]))
    view._controls[key].value = _other(view, key)
    assert view._image.value != first and view.widget is box
    view._ipython_display_()


def test_dependent_slider_ranges_follow():
    view = viz.grid_explorer(n=1000, BLOCK=128)
    assert view.widget is not None and view._controls["pid"].max == 7
    view.set(BLOCK=512)
    assert view.spec["pid"].hi == 1 and view._controls["pid"].max == 1
    with pytest.raises(ValueError, match="outside"):
        view.set(pid=5)


def test_grid_explorer_counts_what_the_kernel_does():
    view = viz.grid_explorer(n=1000, BLOCK=128)
    view.set(pid=7)
    assert "8 programs" in view.caption.replace("(8,) programs", "8 programs")
    assert "keeps 104 of 128 lanes (24 masked off)" in view.caption


def test_learner_launch_error_reaches_the_lesson_on_build():
    def stub(n, BLOCK):
        raise NotImplementedError

    with pytest.raises(NotImplementedError):
        viz.grid_explorer(stub)


def test_later_failure_is_drawn_not_raised():
    def launch(M, N, K, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M):
        if BLOCK_K == 64:
            raise ValueError("BLOCK_K=64 is too big for this kernel")
        return demo.grouped_matmul_launch(M, N, K, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M)

    view = viz.tile_explorer(launch)
    view.set(BLOCK_K=64)
    assert "BLOCK_K=64 is too big" in view.error and "ValueError" in view.caption
    view.set(BLOCK_K=16)
    assert not view.error


def test_matmul_lesson_falls_back_or_flags():
    import triton
    import triton.language as tl

    @triton.jit
    def stub_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                    PRECISION: tl.constexpr):
        raise NotImplementedError()

    @triton.jit
    def first_tile_only_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                               stride_cm, stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                               BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, PRECISION: tl.constexpr):
        rm = tl.program_id(0) * 0 + tl.arange(0, BLOCK_M)
        rn = tl.arange(0, BLOCK_N)
        rk = tl.arange(0, BLOCK_K)
        a = tl.load(a_ptr + rm[:, None] * stride_am + rk[None, :] * stride_ak)
        b = tl.load(b_ptr + rk[:, None] * stride_bk + rn[None, :] * stride_bn)
        tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, tl.dot(a, b, input_precision=PRECISION))

    view = viz.matmul_tile_explorer(stub_kernel)
    assert "package's tiled kernel: yours raised NotImplementedError" in view.caption
    view = viz.matmul_tile_explorer(first_tile_only_kernel)
    assert "Your kernel; its C is WRONG" in view.caption


def test_measured_numbers_are_used_and_reference_is_labelled():
    measured = {"bytes": [2**20, 2**26], "bandwidth": [8.5e12, 3.3e12], "l2_bytes": 50 * 2**20,
                "label": "measured on this GPU (NVIDIA H200)"}
    view = viz.working_set_view(measured)
    view.set(size=2**20)
    assert "8.50 TB/s" in view.caption and "measured on this GPU" in view.caption
    view.set(size=2**26)
    assert "does not fit" in view.caption and "3.30 TB/s" in view.caption
    assert "reference" in viz.working_set_view().caption and "not this machine" in viz.working_set_view().caption
    rec = viz.recurrence_stepper(bandwidth=2e12, label="mine")
    assert "2.00 TB/s [mine]" in rec.caption
    assert "reference" in viz.recurrence_stepper().caption
    with pytest.raises(ValueError, match="2 sizes"):
        viz.working_set_view({"bytes": [1, 2], "bandwidth": [1.0]})


def test_measure_needs_a_gpu_or_says_so():
    if torch.cuda.is_available():
        pytest.skip("measures on this GPU (tests/viz/test_gpu.py)")
    with pytest.raises(RuntimeError, match="reference"):
        viz.measure.working_set()


def test_recurrence_traced_bytes_from_a_kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def naive_recurrent_kernel(k_ptr, v_ptr, s_ptr, T, K: tl.constexpr, V: tl.constexpr):
        rk = tl.arange(0, K)
        rv = tl.arange(0, V)
        for t in range(T):
            s = tl.load(s_ptr + rk[:, None] * V + rv[None, :])
            kt = tl.load(k_ptr + t * K + rk)
            vt = tl.load(v_ptr + t * V + rv)
            tl.store(s_ptr + rk[:, None] * V + rv[None, :], s + kt[:, None] * vt[None, :])

    def launch(T, K, V):
        s = torch.zeros(K, V)
        naive_recurrent_kernel[(1,)](torch.randn(T, K), torch.randn(T, V), s, T, K=K, V=V)
        return s

    view = viz.recurrence_stepper(launch, T=12, K=8, V=8)
    view.set(t=4)
    # steps 1..4: each loads S (256 B), k_t (32 B), v_t (32 B) and stores S (256 B)
    assert "loaded 1280 B and stored 1024 B through step 4" in view.caption


def test_recurrence_totals_are_the_lessons_byte_counts():
    from kernels.viz.recurrence import _NAIVE, _ONCHIP, global_bytes

    B, T, H, K, V, e = 4, 2048, 16, 64, 64, 2
    naive = B * H * sum(global_bytes(K, V, e, _NAIVE, T, T).values())
    onchip = B * H * sum(global_bytes(K, V, e, _ONCHIP, T, T).values())
    assert naive == B * T * H * (2 * K + 2 * V) * e + B * H * K * V * 4 * (2 * T + 1)  # naive_bytes
    assert onchip == B * T * H * (2 * K + 2 * V) * e + B * H * K * V * 4  # fused_bytes with one V block
    view = viz.recurrence_stepper()
    assert "4.363 GB asked of global memory" in view.caption and "stays in L2" in view.caption
    view.set(t=1)
    assert "S_0 = 0" in view._art["ax"][2].get_title()


def test_chunk_view_checks_the_kernel_against_the_recurrence():
    view = viz.chunk_state_explorer(T=50)
    assert "matches the recurrence" in view.caption and "Q 1.00x, K 1.00x, V 1.00x" in view.caption
    assert "none (the state stays in registers)" in view.caption


def test_ptx_parse():
    p = viz.parse_ptx(ptx_text())
    assert p.entry == "sample_matmul_kernel" and p.target.startswith("sm_90")
    # 9 declared parameters (three pointers, six ints) then the two scratch pointers Triton appends
    assert [t for t, _ in p.params] == ["ptr"] * 3 + ["u32"] * 6 + ["ptr"] * 2
    assert p.threads == 128
    counts = p.counts()
    assert counts["tensor cores"] > 0 and all(i.opcode.startswith("wgmma") for i in p.select("tensor cores"))
    assert any(i.opcode.startswith("ld.global") for i in p.select("global memory"))
    assert counts["parameters"] >= 9
    with pytest.raises(ValueError, match="no .entry"):
        viz.parse_ptx("// nothing here\n")


def test_save_button_writes_the_current_picture(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    view = viz.coalescing_view()
    view.set(stride=4)
    save = next(w for w in view.widget.children[0].children[-1].children if getattr(w, "description", "") ==
                "Save PNG")
    save.click()
    written = tmp_path / "artifacts" / "coalescing_view.png"
    assert written.read_bytes() == view.png()


def test_backward_sweeps_gradients_match_autograd():
    """The chunked gradients the view draws are autograd's, and each program's chunk is named in the caption."""
    view = viz.backward_sweeps(T=50, chunk=16)
    view.set(step=1)
    assert "dq program uses S from chunks 0..0 for chunk 1" in view.caption and "for chunk 2" in view.caption
    view.set(step=0)  # the first step: nothing carried yet in either sweep, no empty range of chunks
    assert "S = 0 (no chunk before 0)" in view.caption and "dH = 0 (no chunk after 3)" in view.caption, view.caption
    for part in ("dq", "dk", "dv"):
        err = float(view.caption.split(f"{part} ")[-1].split(",")[0].rstrip("."))
        assert err < 1e-12, view.caption


def test_the_tile_explorer_warns_of_lanes_out_of_bounds():
    """A learner's matmul without masks is traced as it is, with a warning naming the stray lanes above the
    numbers; a masked one gets none."""
    import triton
    import triton.language as tl

    @triton.jit
    def unmasked(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                 PRECISION: tl.constexpr):
        num_n = tl.cdiv(N, BLOCK_N)
        rm = (tl.program_id(0) // num_n) * BLOCK_M + tl.arange(0, BLOCK_M)
        rn = (tl.program_id(0) % num_n) * BLOCK_N + tl.arange(0, BLOCK_N)
        rk = tl.arange(0, BLOCK_K)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            a = tl.load(a_ptr + rm[:, None] * stride_am + (k0 + rk[None, :]) * stride_ak)
            b = tl.load(b_ptr + (k0 + rk[:, None]) * stride_bk + rn[None, :] * stride_bn)
            acc = tl.dot(a, b, acc, input_precision=PRECISION)
        tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, acc)

    view = viz.matmul_tile_explorer(unmasked)
    assert "Warning:" in view.caption and "outside their tensor" in view.caption, view.caption
    assert "Warning:" not in viz.tile_explorer().caption
