"""Lesson 06's package: the planted matmul and its fix, the sm_90 compile and its readings, the measuring tools."""

import pytest
import torch

from kernels.checks.interp import bf16_fixed
from kernels.device import DEVICE, ON_GPU
from kernels.profile import compiler, measure, planted
from kernels.testing import assert_close, check_bad_input, randn, tolerance

# one pytest-xdist worker runs this module: its module-scoped fixtures (the sm_90 compiles) are built once
pytestmark = pytest.mark.xdist_group("test_profile")

CONFIG = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64)


def _args(M=256, N=256, K=256, dtype=torch.float16):
    a, b = randn(M, K, dtype=dtype, device="cpu"), randn(K, N, dtype=dtype, device="cpu")
    c = torch.empty(M, N, dtype=dtype)
    return [a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1)]


@pytest.fixture(scope="module")
def compiled():
    """The planted and the fixed kernel at one config, the fixed one at other stage counts and without the JIT's
    assumptions (as an export for every size): one subprocess for all of them."""
    jobs = {
        "planted": dict(kernel=planted._planted_matmul_kernel, num_warps=8, num_stages=3, **CONFIG),
        "fixed": dict(kernel=planted._fixed_matmul_kernel, num_warps=8, num_stages=3, **CONFIG),
        "fixed s2": dict(kernel=planted._fixed_matmul_kernel, num_warps=4, num_stages=2, BLOCK_M=64, BLOCK_N=128,
                         BLOCK_K=32),
        "fixed unspecialised": dict(kernel=planted._fixed_matmul_kernel, num_warps=8, num_stages=3,
                                    specialize=False, **CONFIG),
    }
    out = compiler.compile_many([dict(job, args=_args()) for job in jobs.values()])
    return dict(zip(jobs, out))


@pytest.mark.parametrize("version", [planted.planted_matmul, planted.fixed_matmul])
@pytest.mark.parametrize("M,N,K,dtype", [(37, 45, 70, torch.float16), (64, 33, 100, torch.bfloat16)])
def test_matmul_matches_reference(version, M, N, K, dtype):
    a, b = randn(M, K, dtype=dtype), randn(K, N, dtype=dtype)
    with bf16_fixed():  # the interpreter's bf16 tl.dot multiplies bit patterns; a GPU does not need this
        out = version(a, b)
    ref = a.double() @ b.double()
    assert_close(version.__name__, ref, out.double(), tolerance(dtype) * 4)


def test_matmul_bad_input():
    a = randn(8, 16, dtype=torch.float16)
    check_bad_input(planted.fixed_matmul, a, randn(8, 8, dtype=torch.float16), match="a [M, K] and b")
    check_bad_input(planted.fixed_matmul, a.float(), randn(16, 8), match="fp16 or bf16")


def test_planted_loads_one_element_per_instruction(compiled):
    bad, good = compiled["planted"], compiled["fixed"]
    bad_loads = {(a.kind, a.space, a.bits) for a in bad.accesses()}
    good_loads = {(a.kind, a.space, a.bits) for a in good.accesses()}
    assert ("load", "global", 16) in bad_loads
    assert not any(k == "async copy" for k, _, _ in bad_loads)
    assert ("async copy", "global", 128) in good_loads
    assert ("load", "global", 16) not in good_loads
    assert bad.sass_accesses()["LDG.E.U16"] > 0
    assert any(op.startswith("LDGSTS") and op.endswith(".128") for op in good.sass_accesses())


def test_export_without_assumptions_is_the_planted_bug(compiled):
    """Compiled with no assumptions about its arguments, the fixed kernel loads like the planted one."""
    loads = {(a.kind, a.bits) for a in compiled["fixed unspecialised"].accesses() if a.space == "global"}
    assert ("load", 16) in loads and not any(k == "async copy" for k, _ in loads)


def test_shared_memory_is_the_pipeline_buffers(compiled):
    """Each stage holds one [BM, BK] tile of a and one [BK, BN] tile of b, fp16: what lesson 06 asks to predict."""
    for name, (bm, bn, bk, stages) in {"fixed": (128, 128, 64, 3), "fixed s2": (64, 128, 32, 2)}.items():
        assert compiled[name].shared == stages * (bm * bk + bk * bn) * 2, name
    assert compiled["planted"].shared < compiled["fixed"].shared


def test_stages_registers_and_diff(compiled):
    c = compiled["fixed"]
    assert set(compiler.STAGES) <= set(c.stages)
    assert "tt.func" in c.stages["ttir"] and "#ttg.blocked" in c.stages["ttgir"]
    assert ".entry _fixed_matmul_kernel" in c.stages["ptx"] and "LDGSTS" in c.stages["sass"]
    assert 32 <= c.registers <= 255 and c.spills == 0 and c.threads == 256
    assert c.notes == []
    lines = compiler.diff(compiled["planted"], c)
    assert any(ln.startswith("-") and "ld.global.b16" in ln for ln in lines)
    assert any(ln.startswith("+") and "cp.async" in ln for ln in lines)
    assert not compiler.diff(c, c)
    assert "registers/thread" in c.summary()


def test_without_detail_only_the_slow_readings_are_missing(compiled):
    quick = compiler.compile_kernel(planted._fixed_matmul_kernel, _args(), num_warps=8, num_stages=4,
                                    detail=False, **CONFIG)
    assert quick.registers is None and "sass" not in quick.stages and quick.notes
    assert quick.shared == 4 * compiled["fixed"].shared // 3
    again = compiler.compile_kernel(planted._fixed_matmul_kernel, _args(), num_warps=8, num_stages=4, **CONFIG)
    assert again.registers and again.stages["sass"]  # a detailed request is not served the quick one
    served = compiler.compile_kernel(planted._fixed_matmul_kernel, _args(), num_warps=8, num_stages=3,
                                     detail=False, **CONFIG)
    assert served.registers == compiled["fixed"].registers  # a quick request may be served a detailed one


def test_compile_errors_name_the_problem():
    with pytest.raises(compiler.CompileError, match="constexpr BLOCK_K needs a value"):
        compiler.compile_kernel(planted._fixed_matmul_kernel, _args(), BLOCK_M=64, BLOCK_N=64)
    with pytest.raises(compiler.CompileError, match="takes 12 runtime arguments"):
        compiler.compile_kernel(planted._fixed_matmul_kernel, _args()[:3], **CONFIG)
    with pytest.raises(TypeError, match="@triton.jit kernel"):
        compiler.compile_kernel(len, [])


def test_parse_accesses():
    ptx = """
.visible .entry k(.param .u64 .ptr .global .align 1 k_param_0)
{
    ld.param.b64 %rd1, [k_param_0];
    @%p1 ld.global.v4.b32 { %r1, %r2, %r3, %r4 }, [ %rd1 + 0 ];
    ld.global.b16 %rs1, [ %rd1 + 0 ];  // one element
    cp.async.cg.shared.global [ %r5 + 0 ], [ %rd2 + 0 ], 0x10, %r6;
    st.shared.v2.f32 [ %r7 ], { %f1, %f2 };
    ldmatrix.sync.aligned.m8n8.x4.shared.b16 { %r1, %r2, %r3, %r4 }, [ %r8 ];
    st.local.b32 [ %rd3 ], %r9;
    atom.global.add.f32 %f3, [ %rd4 ], %f4;
}"""
    got = {(a.kind, a.space, a.bits): n for a, n in compiler.parse_accesses(ptx).items()}
    assert got == {("load", "global", 128): 1, ("load", "global", 16): 1, ("async copy", "global", 128): 1,
                   ("store", "shared", 64): 1, ("load", "shared", 128): 1, ("store", "local", 32): 1,
                   ("atomic", "global", 32): 1}
    sass = "        /*0040*/                   LDG.E.U16 R4, desc[UR4][R2.64] ;\n" \
           "        /*0050*/              @!P0 STG.E.128 desc[UR4][R6.64], R8 ;\n" \
           "        /*0060*/                   FFMA R1, R2, R3, R4 ;"
    assert compiler.parse_sass_accesses(sass) == {"LDG.E.U16": 1, "STG.E.128": 1}


def test_tools_and_messages():
    found = measure.tools()
    assert set(found) == {"gpu", "proton", "ncu"} and all("how" in v for v in found.values())
    assert compiler.tool("ptxas") and compiler.tool("cuobjdump")
    cmd = measure.ncu_command("x.py", "matmul")
    assert "--metrics" in cmd and "regex:matmul" in cmd
    if not ON_GPU:
        for call in (lambda: measure.time_ms(lambda: None), lambda: measure.proton_profile(lambda: None),
                     lambda: measure.sweep(lambda c: None, [{}])):
            with pytest.raises(measure.NeedsGpu, match="NVIDIA GPU"):
                call()


def test_ncu_csv():
    out = '"ID","Kernel Name","dram__throughput.avg.pct_of_peak_sustained_elapsed","gpu__time_duration.sum"\n' \
          '"","","%","nsecond"\n"0","k","81.5","1,234"\n'
    assert measure._parse_ncu_csv(out) == {"ID": 0.0, "dram__throughput.avg.pct_of_peak_sustained_elapsed": 81.5,
                                           "gpu__time_duration.sum": 1234.0}
    with pytest.raises(RuntimeError, match="performance counters"):
        measure._parse_ncu_csv("==ERROR== ERR_NVGPUCTRPERM", "")
    assert measure.floor_ms(4.26e12, 0) == pytest.approx(1000.0)


@pytest.mark.gpu
@pytest.mark.timed
def test_fixed_is_3x_faster_on_gpu():
    a, b = randn(4096, 4096, dtype=torch.float16, device=DEVICE), randn(4096, 4096, dtype=torch.float16,
                                                                         device=DEVICE)
    slow = measure.time_ms(lambda: planted.planted_matmul(a, b))
    fast = measure.time_ms(lambda: planted.fixed_matmul(a, b))
    assert slow / fast >= 3, f"planted {slow:.3f} ms, fixed {fast:.3f} ms: {slow / fast:.2f}x"


@pytest.mark.gpu
def test_proton_and_autotune_on_gpu(tmp_path):
    a, b = randn(1024, 1024, dtype=torch.float16, device=DEVICE), randn(1024, 1024, dtype=torch.float16,
                                                                         device=DEVICE)
    rows = measure.proton_profile(lambda: planted.fixed_matmul(a, b), repeat=5, out_dir=str(tmp_path))
    assert any("fixed_matmul" in r["path"] and r["count"] >= 5 and r["time_ms"] > 0 for r in rows), rows

    def run(tuned, args):
        x, y, c = args
        grid = lambda meta: (triton.cdiv(1024, meta["BLOCK_M"]), triton.cdiv(1024, meta["BLOCK_N"]))  # noqa: E731
        tuned[grid](x, y, c, 1024, 1024, 1024, 1024, 1, 1024, 1, 1024, 1)

    import triton

    configs = [dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, num_warps=4, num_stages=2),
               dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=8, num_stages=3)]
    fresh = lambda: (torch.randn_like(a), torch.randn_like(b), torch.empty_like(a))  # noqa: E731
    out = measure.autotune(planted._fixed_matmul_kernel, configs, run, fresh)
    assert out["winner"] in configs and len(out["rows"]) == 2 and out["winner_ms"] > 0
