"""kernels.compile: the launch -> signature rules (no compiler needed), and a compile process that compiles."""

import pytest
import torch
import triton.language as tl
from triton.runtime.jit import JITFunction

from kernels.compile import SignatureError, bind, describe, run_compiled, specialise, specialise_arg


def _kernel(x_ptr, n, stride, scale, flag, out_ptr, BLOCK: tl.constexpr, EVEN: tl.constexpr = False):
    pass


KERNEL = JITFunction(_kernel)  # a compiled-mode function object: nothing is compiled until asked
DIV16 = [["tt.divisibility", 16]]


def test_a_launch_is_specialised_as_the_jit_does():
    x = torch.zeros(64, dtype=torch.bfloat16)
    values = bind(KERNEL, (x, 48, 1, 0.5, True, None), {"BLOCK": 32})
    sig, const, attrs = specialise(KERNEL, values, specialize=True)
    assert sig == {"x_ptr": "*bf16", "n": "i32", "stride": "constexpr", "scale": "fp32", "flag": "u1",
                   "out_ptr": "constexpr", "BLOCK": "constexpr", "EVEN": "constexpr"}
    assert const == {"stride": 1, "out_ptr": None, "BLOCK": 32, "EVEN": False}
    assert attrs == {(0,): DIV16, (1,): DIV16}  # the aligned pointer and n = 48; not scale, flag, stride


def test_without_specialisation_nothing_is_assumed():
    x = torch.zeros(64)
    sig, const, attrs = specialise(KERNEL, bind(KERNEL, (x, 48, 1, 0.5, False, x, 16), {}))
    assert sig["stride"] == "i32" and sig["out_ptr"] == "*fp32" and attrs == {}
    assert const == {"BLOCK": 16, "EVEN": False}


def test_described_and_typed_arguments():
    t = describe(torch.zeros(3, dtype=torch.float16)[1:])  # 2 bytes past an aligned address
    assert t == {"ptr": "fp16", "aligned": False}
    values = {"x_ptr": t, "n": {"type": "i64", "div16": True}, "stride": {"type": "i32"}, "scale": 2.0,
              "flag": 2**40 + 1, "out_ptr": {"ptr": "i32", "aligned": True}, "BLOCK": 64}
    sig, _, attrs = specialise(KERNEL, values, specialize=True)
    assert (sig["x_ptr"], sig["n"], sig["stride"], sig["flag"], sig["out_ptr"]) == ("*fp16", "i64", "i32", "i64",
                                                                                    "*i32")
    assert attrs == {(1,): DIV16, (5,): DIV16}


def test_a_launch_that_does_not_fit_is_refused():
    with pytest.raises(SignatureError, match="no parameter 'BLOK'"):
        bind(KERNEL, (), {"BLOK": 16})
    with pytest.raises(SignatureError, match="nothing is passed for 'n'"):
        bind(KERNEL, (torch.zeros(1),), {})
    with pytest.raises(SignatureError, match="constexpr BLOCK needs a value"):
        specialise(KERNEL, {"x_ptr": None, "n": 1, "stride": 1, "scale": 1.0, "flag": 1, "out_ptr": None})


@pytest.mark.slow
def test_a_compile_process_compiles_for_sm90(tmp_path):
    """The way out of the interpreter: a module run by run_compiled sees compiled-mode kernels, Triton's own
    helpers included, and compiles one for sm_90 (a few seconds, no GPU)."""
    (tmp_path / "probe_compile.py").write_text(
        "import triton, triton.language as tl\n"
        "from kernels.compile import compile_for\n\n\n"
        "@triton.jit\n"
        "def fill(o_ptr, n, BLOCK: tl.constexpr):\n"
        "    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
        "    tl.store(o_ptr + offs, tl.zeros([BLOCK], dtype=tl.float32) + tl.cdiv(n, 2), mask=offs < n)\n\n\n"
        "k = compile_for(fill, {'o_ptr': '*fp32', 'n': 'i32', 'BLOCK': 'constexpr'}, {'BLOCK': 32})\n"
        "print(k.asm['ptx'].count('.entry fill'))\n")
    r = run_compiled("probe_compile", paths=[str(tmp_path)], timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "1", r.stderr[-2000:]


@pytest.mark.parametrize("specialize, align", [(True, True), (True, False), (False, True)])
def test_one_argument_is_specialised_by_tritons_own_rule(specialize, align):
    from triton.backends.compiler import BaseBackend
    from triton.runtime.jit import native_specialize_impl

    x = torch.zeros(8)
    for v in (True, False, 0, 1, 16, 17, -2**31, 2**31 - 1, 2**31, -2**31 - 1, -2**63, 2**63 - 16, 2**63, 2**64 - 1,
              0.5, None, x, x[1:], x.bool(), x.half()):
        t, key = native_specialize_impl(BaseBackend, v, False, specialize, align)
        ours, div16, value = specialise_arg(v, specialize=specialize, align=align)
        assert ours == t, v
        assert (value == key) if t == "constexpr" else (div16 == (key == "D")), v
    for v in (2**64, -2**63 - 1):
        with pytest.raises(OverflowError):
            native_specialize_impl(BaseBackend, v, False, specialize, align)
        with pytest.raises(SignatureError, match="64 bits"):
            specialise_arg(v, specialize=specialize, align=align)
