"""Lesson 07's checks: the solutions pass; broken twins (the mask, the order of use and update of dS, the scale),
a token loop, autograd, a Function that saves more than its inputs and one whose backward runs torch instead of the
kernels fail with a message that says why."""

import os

import pytest
import torch
from lessonkit import assert_fails as fails
from lessonkit import edit, function, grade, kernel, solution_cells, zoo_source

from kernels.checks.lessons.l04_chunked_linear_attention import recurrent
from kernels.checks.lessons.l07_backward import REFERENCE_CHUNK, gradients
from kernels.checks.provenance import Rejected, check_function_static
from kernels.device import DEVICE
from kernels.linear_attention.reference import reference_backward

CELLS = solution_cells("07_backward")
TORCH = CELLS["ex1-torch"]
DQ = CELLS["ex2-dq"]
DKDV = CELLS["ex3-dkdv"]
AUTOGRAD = zoo_source("07_backward.backward_torch", "autograd")

def test_reference_agrees_with_the_packages_chunked_reference():
    q, k = torch.randn(2, 2, 29, 3, 6, dtype=torch.float64)
    v, do = torch.randn(2, 2, 29, 3, 5, dtype=torch.float64)
    mine = gradients(q, k, v, do, 0.3)
    theirs = reference_backward(q, k, v, do, 0.3, chunk_size=8)
    for name, b in zip(("dq", "dk", "dv"), theirs):
        torch.testing.assert_close(mine[name], b)
    torch.testing.assert_close(mine["o"], recurrent(q, k, v, 0.3))


def test_reference_past_one_chunk_agrees_with_quadratic_attention():
    # longer than REFERENCE_CHUNK, and not a whole number of its chunks: the reference goes chunk by chunk there
    T = REFERENCE_CHUNK * 2 + 37
    q, k = torch.randn(2, 1, T, 2, 5, dtype=torch.float64)
    v, do = torch.randn(2, 1, T, 2, 7, dtype=torch.float64)
    mine = gradients(q, k, v, do, 0.4)
    quadratic = reference_backward(q, k, v, do, 0.4, chunk_size=T, with_output=True)
    for name, b in zip(("dq", "dk", "dv", "", "o"), quadratic):
        if name:
            torch.testing.assert_close(mine[name], b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("hidden", [False, True])
def test_torch_solution_passes(hidden):
    fn = function(TORCH, "chunked_backward_torch", {"torch": torch})
    out = grade("07_backward.backward_torch", fn, hidden=hidden)
    assert out.passed, out.message


def test_torch_twins_fail():
    def check(src):
        return grade("07_backward.backward_torch", function(src, "chunked_backward_torch", {"torch": torch}))

    fails(check(AUTOGRAD), "autograd")
    fails(check(edit(TORCH, "a = (kc @ qc.transpose(-1, -2)).triu()", "a = (kc @ qc.transpose(-1, -2)).tril()")),
          "the forward's mask M")  # the forward's mask in the backward pass
    fails(check(edit(TORCH, "dstate = dstate + scale * qc", "dstate = dstate + qc")), "relative error")


def test_torch_mistakes_are_named():
    """The mistakes the lesson warns of are named, not only measured: dH added before the chunk uses it, the
    forward's mask in dk and dv, the dH term scaled again."""
    def check(src):
        return grade("07_backward.backward_torch", function(src, "chunked_backward_torch", {"torch": torch}))

    update = "        dstate = dstate + scale * qc.transpose(-1, -2) @ doc\n"
    first_use = "        dk[:, :, t0:t0 + chunk_size]"
    early = edit(edit(TORCH, update, ""), first_use, update + first_use)
    fails(check(early), "dk and dv: what dH gives when", "counted twice")
    fails(check(edit(TORCH, "a = (kc @ qc.transpose(-1, -2)).triu()", "a = (kc @ qc.transpose(-1, -2)).tril()")),
          "dv: what the forward's mask M gives")
    fails(check(edit(TORCH, "vc @ dstate.transpose(-1, -2)", "scale * vc @ dstate.transpose(-1, -2)")),
          "dk: what the carried state gives when it is scaled twice")
    fails(check(edit(TORCH, "dstate = dstate + scale * qc", "dstate = dstate + qc")),
          "dk and dv: what dH gives without its scale")
    swapped = edit(TORCH, "    return dq.transpose(1, 2), dk.transpose(1, 2), dv.transpose(1, 2)",
                   "    return dk.transpose(1, 2), dq.transpose(1, 2), dv.transpose(1, 2)")
    fails(check(swapped), "dq and dk: each holds the other's gradient")


def test_more_torch_mistakes_are_named():
    """An off-by-one mask (one diagonal too many), float32 arithmetic on float64 inputs, and a do scaled in place
    (the right gradients, the caller's tensor changed) fail with a message naming the fault."""
    def check(src, hidden=False):
        return grade("07_backward.backward_torch", function(src, "chunked_backward_torch", {"torch": torch}),
                     hidden=hidden)

    fails(check(edit(TORCH, "b = (vc @ doc.transpose(-1, -2)).triu()", "b = (vc @ doc.transpose(-1, -2)).triu(-1)")),
          "dk: what a mask one diagonal too wide gives")
    in_float32 = TORCH
    for old, new in (("    q, k, v, do = (x.transpose(1, 2) for x in (q, k, v, do))",
                      "    dtype = q.dtype\n    q, k, v, do = (x.float().transpose(1, 2) for x in (q, k, v, do))"),
                     ("return dq.transpose(1, 2), dk.transpose(1, 2), dv.transpose(1, 2)",
                      "return tuple(x.transpose(1, 2).to(dtype) for x in (dq, dk, dv))")):
        in_float32 = edit(in_float32, old, new)
    fails(check(in_float32), "dq, dk and dv: right to float32's precision")
    in_place = TORCH
    for old, new in (("    V = v.shape[-1]\n", "    V = v.shape[-1]\n    do.mul_(scale)\n"),
                     ("scale * (doc @ state.transpose(-1, -2) + p @ kc)", "doc @ state.transpose(-1, -2) + p @ kc"),
                     ("scale * (b @ qc)", "b @ qc"), ("scale * (a @ doc)", "a @ doc"),
                     ("dstate = dstate + scale * qc", "dstate = dstate + qc")):
        in_place = edit(in_place, old, new)
    fails(check(in_place), "changed its input do in place")


def test_one_token_left_at_zero_is_not_called_a_mask_mistake_alone():
    """With T=1, shorter than a chunk, a loop that never starts and a mask without its diagonal both leave zeros:
    the message names the loop, and the mask as the other way there."""
    def check(src):
        return grade("07_backward.backward_torch", function(src, "chunked_backward_torch", {"torch": torch}),
                     hidden=True)

    zeroed = edit(TORCH, "torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)",
                  "torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)")
    stops = edit(zeroed, "    starts = list(range(0, T, chunk_size))\n",
                 "    starts = list(range(0, T - 1, chunk_size))\n")
    fails(check(stops), "for T=1, less than one chunk: the only chunk, a short one, is never walked",
          "without its diagonal")


def test_rows_a_chunk_loop_never_writes_are_named():
    """A dq loop whose slice stops one token short leaves the last token of every chunk at zero (the gradients were
    zeroed): the message names those tokens."""
    short = edit(TORCH, "torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)",
                 "torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)")
    short = edit(short, "kc, vc, doc = (x[:, :, t0:t0 + chunk_size] for x",
                 "kc, vc, doc = (x[:, :, t0:t0 + chunk_size - 1] for x")
    short = edit(short, "dq[:, :, t0:t0 + chunk_size] =", "dq[:, :, t0:t0 + chunk_size - 1] =")
    out = grade("07_backward.backward_torch", function(short, "chunked_backward_torch", {"torch": torch}))
    fails(out, "dq: the rows of tokens 63, 127 (2 of 150) are all zero")


def test_unwritten_last_chunk_is_named_whatever_the_memory_held():
    """A backward that never walks the last, short chunk leaves those rows as torch.empty_like found them: NaN
    here, on a GPU whatever the allocator held (1e307 was seen; its square overflows a plain norm, which must not
    make the rows look right)."""
    def check(src):
        return grade("07_backward.backward_torch", function(src, "chunked_backward_torch", {"torch": torch}))

    drops = edit(TORCH, "    starts = list(range(0, T, chunk_size))\n",
                 "    starts = [i * chunk_size for i in range(T // chunk_size)]\n")
    def left(fill):
        return edit(drops, "torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)",
                    f"[torch.full_like(x, {fill}) for x in (q, k, v)]")

    for fill in ("2.2e307", "0.0"):
        fails(check(left(fill)), "the last, short chunk")
    # NaN in the rows never written (what CPU memory may hold): named too, beside the NaN lines
    fails(check(left("float('nan')")), "the last, short chunk", "never written", "ends in a chunk of 22 tokens")


def test_torch_answer_may_not_call_autograd_or_the_package():
    src = "import torch\nfrom kernels.linear_attention import chunk_linear_attn\n" + TORCH.replace(
        "    ### BEGIN SOLUTION", "    chunk_linear_attn(q, k, v)")
    with pytest.raises(Rejected, match=r"kernels\.linear_attention"):
        check_function_static([src], "chunked_backward_torch", forbid=("fla", "torch.autograd"))
    grad = "import torch\n" + AUTOGRAD.replace("o.backward(do)", "torch.autograd.grad(o, leaves, do)")
    with pytest.raises(Rejected, match=r"torch\.autograd"):
        check_function_static([grad], "chunked_backward_torch", forbid=("fla", "torch.autograd"))


@pytest.mark.parametrize("hidden", [False, True])
@pytest.mark.parametrize("cell, name, exercise", [("ex2-dq", "dq_kernel", "dq"), ("ex3-dkdv", "dkdv_kernel", "dkdv")])
def test_solution_kernels_pass(hidden, cell, name, exercise):
    out = grade(f"07_backward.{exercise}", kernel(CELLS[cell], name), hidden=hidden)
    assert out.passed, out.message


@pytest.mark.parametrize("source, name, exercise, old, new, words", [
    (DQ, "dq_kernel", "dq", "offs_c[:, None] >= offs_c[None, :]", "offs_c[:, None] <= offs_c[None, :]",
     ["relative error"]),  # the backward's mask in the dq pass
    (DKDV, "dkdv_kernel", "dkdv", "        dstate += tl.dot(tl.trans(q), do, input_precision=PRECISION) * scale\n",
     "", ["relative error"]),  # dS never carried
    (DKDV, "dkdv_kernel", "dkdv", "offs_t = (n - 1 - i) * BT + offs_c", "offs_t = i * BT + offs_c",
     ["walk from the last chunk to the first"]),  # walks forwards
    (DKDV, "dkdv_kernel", "dkdv", "offs_t = (n - 1 - i) * BT + offs_c", "offs_t = (n - i) * BT + offs_c",
     ["output not written", "exactly indices 0-", "of dimension 1", "at every index of the others"]),  # never chunk 0
])
def test_broken_kernels_fail(source, name, exercise, old, new, words):
    fails(grade(f"07_backward.{exercise}", kernel(edit(source, old, new), name)), *words)



def test_kernel_updates_before_use_are_named():
    """A kernel that adds chunk c to its carried state (S, or dH) before using that state for chunk c fails with a
    message naming the order, not only the relative error."""
    s_update = "        state = tl.dot(tl.trans(v), k, state, input_precision=PRECISION)\n"
    s_first = edit(edit(DQ, s_update, ""), "        dq = tl.dot(do, state", s_update + "        dq = tl.dot(do, state")
    fails(grade("07_backward.dq", kernel(s_first, "dq_kernel")), "dq: what the state S gives when it is updated "
          "before the chunk uses it")
    dh_update = "        dstate += tl.dot(tl.trans(q), do, input_precision=PRECISION) * scale\n"
    dh_first = edit(edit(DKDV, dh_update, ""), "        a = tl.where(later", dh_update + "        a = tl.where(later")
    fails(grade("07_backward.dkdv", kernel(dh_first, "dkdv_kernel")), "dk and dv: what dH gives when",
          "counted twice")

def test_kernel_mask_mistakes_are_named():
    """A mask one diagonal too wide, and one comparing positions in the sequence (t0 + offsets) with positions in
    the chunk, right in the first chunk only, are named."""
    wide = edit(DQ, "causal = offs_c[:, None] >= offs_c[None, :]", "causal = offs_c[:, None] + 1 >= offs_c[None, :]")
    fails(grade("07_backward.dq", kernel(wide, "dq_kernel")), "dq: what a mask one diagonal too wide gives")
    absolute = edit(DQ, "p = tl.where(causal,", "p = tl.where(offs_t[:, None] >= offs_c[None, :],")
    fails(grade("07_backward.dq", kernel(absolute, "dq_kernel")), "dq: what a mask comparing positions in the sequence")


def test_kernel_state_read_without_its_transpose_is_named():
    """V_c dH for V_c dHᵀ compiles wherever K and V pad to one block size, as in both visible cases: named there,
    K and V padded with zeros in the comparison as the kernel's blocks pad them."""
    untransposed = edit(DKDV, "dk = tl.dot(v, tl.trans(dstate).to(v.dtype), dk,",
                        "dk = tl.dot(v, dstate.to(v.dtype), dk,")
    fails(grade("07_backward.dkdv", kernel(untransposed, "dkdv_kernel")),
          "dk: what the carried state gives read without its transpose")


def _lesson_namespace():
    """The notebook's names an autograd answer relies on: the kernels, the launchers, the forward."""
    import triton
    import triton.language as tl

    ns = {"torch": torch, "triton": triton, "tl": tl}
    from kernels.device import ON_GPU, pick

    ns.update(ON_GPU=ON_GPU, pick=pick)
    prelude = "import triton\nimport triton.language as tl\n"
    for cell, name in (("ex2-dq", "dq_kernel"), ("ex3-dkdv", "dkdv_kernel"), ("forward", "forward_kernel")):
        ns[name] = kernel(CELLS[cell], name, prelude)
    for cell in ("launch-dq", "launch-dkdv", "forward"):
        src = CELLS[cell]
        src = src[:src.index("\ntry:")] if "\ntry:" in src else src
        src = src[src.index("\ndef chunked_forward"):] if cell == "forward" else src
        src = src[:src.index("\nq32, k32")] if "\nq32, k32" in src else src
        exec(compile(src, f"<{cell}>", "exec"), ns)
    return ns


@pytest.mark.parametrize("hidden", [False, True])
def test_autograd_solution_passes(hidden):
    ns = _lesson_namespace()
    fn = function(CELLS["ex4-function"], "linear_attention", ns)
    out = grade("07_backward.autograd", fn, hidden=hidden)
    assert out.passed, out.message


def test_autograd_twins_fail():
    ns = _lesson_namespace()
    plain = function("def linear_attention(q, k, v, scale):\n"
                     "    S = torch.cumsum(k[..., :, None] * v[..., None, :], dim=1)\n"
                     "    return scale * torch.einsum('bthk,bthkv->bthv', q, S)\n", "linear_attention", ns)
    fails(grade("07_backward.autograd", plain), "YourFunction.apply")
    keeps = function(edit(CELLS["ex4-function"], "ctx.save_for_backward(q, k, v)",
                          "ctx.save_for_backward(q, k, v, o)"), "linear_attention", ns)
    fails(grade("07_backward.autograd", keeps), "saved a tensor")
    copies = function(edit(CELLS["ex4-function"], "ctx.save_for_backward(q, k, v)",
                           "ctx.save_for_backward(q.contiguous(), k.contiguous(), v.contiguous())"),
                      "linear_attention", ns)
    fails(grade("07_backward.autograd", copies, hidden=True), "saved a tensor", "a copy of q")


_LAUNCH_DQ = """        dq = launch_dq(k, v, do, ctx.scale, chunk=chunk, block_k=min(pow2(q.shape[-1]), 64),
                       precision=precision_for(q), num_warps=warps)
"""
_LAUNCH_DKDV = ("        dk, dv = launch_dkdv(q, k, v, do, ctx.scale, chunk=chunk, precision=precision_for(q), "
                "num_warps=warps)\n")


def test_autograd_backward_must_launch_both_kernels():
    """A backward that calls exercise 1's torch backward has the right gradients; only the Triton launches counted
    during the backward (``kernels.gradcall.Launches``) tell it from one that runs the dq and dk/dv kernels."""
    ns = _lesson_namespace()
    ns["chunked_backward_torch"] = function(TORCH, "chunked_backward_torch", {"torch": torch})
    in_torch = edit(CELLS["ex4-function"], _LAUNCH_DQ + _LAUNCH_DKDV,
                    "        dq, dk, dv = chunked_backward_torch(q, k, v, do, ctx.scale, chunk_size=chunk)\n")
    fails(grade("07_backward.autograd", function(in_torch, "linear_attention", ns)), "launched no Triton kernel",
          "Call your dq kernel and your dk/dv kernel")
    dq_only = edit(CELLS["ex4-function"], _LAUNCH_DKDV,
                   "        _, dk, dv = chunked_backward_torch(q, k, v, do, ctx.scale, chunk_size=chunk)\n")
    fails(grade("07_backward.autograd", function(dq_only, "linear_attention", ns), hidden=True),
          "launched a single Triton kernel")


def test_launches_are_counted_during_the_block_only():
    """Every ``kernel[grid](...)`` inside the block counts, one launch each however the grid is given; the patched
    ``KernelInterface.__getitem__`` is put back on the way out, an exception included."""
    from triton.runtime.jit import KernelInterface

    from kernels.gradcall import Launches

    original = KernelInterface.__dict__["__getitem__"]
    dq_kernel = _lesson_namespace()["dq_kernel"]
    k, v, do = (torch.randn(1, 5, 1, 16, device=DEVICE) for _ in range(3))  # on a GPU machine the launches compile
    dq = torch.empty_like(k)
    args = (k, v, do, dq, 5, 1, 16, 16, 0.5, *k.stride()[:3], *v.stride()[:3], *do.stride()[:3], *dq.stride()[:3])
    with Launches() as counter:
        dq_kernel[(1, 1)](*args, BT=16, BK=16, BV=16, PRECISION="ieee")
        dq_kernel[lambda meta: (1, 1)](*args, BT=16, BK=16, BV=16, PRECISION="ieee")
    dq_kernel[(1, 1)](*args, BT=16, BK=16, BV=16, PRECISION="ieee")
    assert counter.count == 2 and KernelInterface.__dict__["__getitem__"] is original
    with pytest.raises(RuntimeError, match="a backward that raises"), Launches():
        raise RuntimeError("a backward that raises")
    assert KernelInterface.__dict__["__getitem__"] is original


def test_hidden_cases_catch_a_guessed_scale_and_a_do_taken_as_it_comes():
    """The hidden cases scale by 0.3 rather than K^-1/2, and hand the Function's backward a do with stride 0 along V
    (as the backward of ``o.sum(-1)`` does), which kernels assuming a unit last stride misread; the autograd
    exercise's visible check does both too (its text promises them)."""
    guessed = edit(TORCH, "    V = v.shape[-1]\n", "    V = v.shape[-1]\n    scale = K ** -0.5\n")
    fn = function(guessed, "chunked_backward_torch", {"torch": torch})
    assert grade("07_backward.backward_torch", fn).passed
    fails(grade("07_backward.backward_torch", fn, hidden=True), "relative error", "scales by 0.3")
    ns = _lesson_namespace()
    as_it_comes = function(edit(CELLS["ex4-function"], "        do = do.contiguous()\n", ""), "linear_attention", ns)
    fails(grade("07_backward.autograd", as_it_comes), "stride 0 along V")
    fails(grade("07_backward.autograd", as_it_comes, hidden=True), "stride 0 along V")


def test_speed_check_grades_correctness_in_the_interpreter():
    out = grade("07_backward.backward_speed", kernel(DQ, "dq_kernel"), kernel(DKDV, "dkdv_kernel"))
    assert out.passed, out.message


@pytest.mark.gpu
@pytest.mark.parametrize("cell, name, exercise", [("ex2-dq", "dq_kernel", "dq"), ("ex3-dkdv", "dkdv_kernel", "dkdv")])
def test_gpu_hidden_cases_bf16_and_large(cell, name, exercise):
    out = grade(f"07_backward.{exercise}", kernel(CELLS[cell], name), hidden=True)
    assert out.passed and not out.not_graded, out.message


@pytest.mark.gpu
@pytest.mark.timed
def test_gpu_speed_against_the_package():
    out = grade("07_backward.backward_speed", kernel(DQ, "dq_kernel"), kernel(DKDV, "dkdv_kernel"))
    assert out.passed and out.perf, out.message
    print(out.message)


def test_gpu_launches_fit_the_h200_shared_memory(tmp_path, monkeypatch):
    """The hidden and timed GPU launches of the lesson's kernels, compiled for sm_90 as the check launches them, fit
    in the 232,448 bytes of shared memory a block may have on an H100/H200. With Triton's default of three stages the
    dk/dv kernel at chunks of 64 and K = V = 128 in bf16 asks 233,472 and dies with OutOfResources on the GPU, which
    the interpreter never sees."""
    from kernels.checks.lessons import l07_backward as l07
    from kernels.profile.compiler import compile_many

    (tmp_path / "l07_kernels.py").write_text("import triton\nimport triton.language as tl\n\n" + DQ + "\n\n" + DKDV)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    import l07_kernels

    case = l07._TIMED
    B, H, K, V, T = 2, 3, case["K"], case["V"], 77
    q, k, do = (torch.empty(B, T, H, n, dtype=torch.bfloat16) for n in (K, K, V))
    v, dq, dk, dv = torch.empty_like(do), torch.empty_like(q), torch.empty_like(k), torch.empty_like(do)
    st = l07._strides
    opts = l07._opts(case)
    const = dict(BT=case["BT"], BV=l07._pow2(V), PRECISION="tf32")
    jobs = [dict(kernel=l07_kernels.dq_kernel, args=[k, v, do, dq, T, H, K, V, 0.5, *st(k), *st(v), *st(do), *st(dq)],
                 BK=case["BK"], **const, **opts),
            dict(kernel=l07_kernels.dkdv_kernel, args=[q, k, v, do, dk, dv, T, H, K, V, 0.5, *st(q), *st(k), *st(v),
                                                       *st(do), *st(dk), *st(dv)], BK=l07._pow2(K), **const, **opts)]
    for job, compiled in zip(jobs, compile_many(jobs, detail=False)):
        assert compiled.shared is not None and compiled.shared <= 232448, (job["kernel"].fn.__name__, compiled.shared)
