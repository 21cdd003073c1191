"""The cubin path: a graded kernel crosses from its sandbox as machine code, bound and launched by the grader's
side without importing its source. The compile runs here for sm_90 (no GPU needed); the launch needs a GPU."""

import pytest
import torch

from kernels.checks.cubin import CubinError, check_reply, kernel_params, manifest, specialize, wire_spec

ADD = '''import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr, SCALE: "tl.constexpr" = 1.0):
    offs = tl.program_id(axis=0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, (x + tl.load(y_ptr + offs, mask=mask)) * SCALE, mask=mask)
'''
TORCH_IN_KERNEL = ADD.replace("    mask = offs", "    torch.ones(3)\n    mask = offs")


def test_parameters_are_read_not_run():
    p = kernel_params(ADD, "add_kernel")
    assert [(q["name"], q["constexpr"]) for q in p["params"]] == [
        ("x_ptr", False), ("y_ptr", False), ("out_ptr", False), ("n_elements", False), ("BLOCK_SIZE", True),
        ("SCALE", True)]
    assert p["params"][-1]["default"] == 1.0
    with pytest.raises(CubinError, match="not a literal"):
        kernel_params(ADD.replace("= 1.0", "= float('1')"), "add_kernel")
    with pytest.raises(CubinError, match="no function"):
        kernel_params(ADD, "other")


def test_a_launch_is_specialised_as_the_jit_does():
    p = kernel_params(ADD, "add_kernel")
    x = torch.zeros(1024)
    s = specialize(p, (x, x[1:], x, 64), {"BLOCK_SIZE": 128, "num_warps": 2})
    assert s["signature"] == {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n_elements": "i32",
                              "BLOCK_SIZE": "constexpr", "SCALE": "constexpr"}
    assert set(s["attrs"]) == {"x_ptr", "out_ptr", "n_elements"}  # x[1:] is not 16-byte aligned
    assert s["constexprs"] == {"BLOCK_SIZE": 128, "SCALE": 1.0} and s["options"] == {"num_warps": 2}
    one = specialize(p, (x, x, x, 1), {"BLOCK_SIZE": 128})
    assert one["constexprs"]["n_elements"] == 1 and one["runtime"] == ["x_ptr", "y_ptr", "out_ptr"]
    assert one["key"] != s["key"] and specialize(p, (x, x[1:], x, 64), {"BLOCK_SIZE": 128, "num_warps": 2})["key"] \
        == s["key"]
    with pytest.raises(CubinError, match="no parameter 'BLOCK'"):
        specialize(p, (x, x, x, 64), {"BLOCK": 128})
    with pytest.raises(CubinError, match="nothing is passed for 'BLOCK_SIZE'"):
        specialize(p, (x, x, x, 64), {})


@pytest.fixture(scope="module")
def box():
    from grader.sandbox import SandboxConfig

    cfg = SandboxConfig(mode="interpreter", memory_limit=1 << 30)
    yield cfg
    cfg.close()


def _compile_worker(box, text, uid=97):
    from grader.sandbox import Worker

    w = Worker(box, uid=box.uid_base + uid, mode="compile", kind="compile", name=f"cubin{uid}")
    w.send({"op": "cubin", "kernels": [{"entry": "add_kernel", "text": text}]})
    return w


def test_the_sandbox_compiles_a_cubin_the_grader_can_check(box):
    p = kernel_params(ADD, "add_kernel")
    x = torch.zeros(1000)
    spec = specialize(p, (x, x, x, 1000), {"BLOCK_SIZE": 256, "num_warps": 4}, arch=90)
    w = _compile_worker(box, ADD)
    try:
        w.send({"op": "spec", "kernel": 0, "spec": wire_spec(spec)})
        reply = w.recv(120, what="compiling")
        blob, meta = check_reply(reply)
        assert blob[:4] == b"\x7fELF" and meta["name"] == "add_kernel" and meta["num_warps"] == 4
        m = manifest("add_kernel", spec, meta)
        assert [q["name"] for q in m["params"]] == ["x_ptr", "y_ptr", "out_ptr", "n_elements"]
        assert m["params"][0]["align"] == 16 and m["threads_per_block"] == 128 and len(m["scratch"]) == 2
    finally:
        w.close()
    w = _compile_worker(box, TORCH_IN_KERNEL, uid=98)
    try:
        w.send({"op": "spec", "kernel": 0, "spec": wire_spec(spec)})
        reply = w.recv(120, what="compiling")
        assert "does not compile" in reply.get("error", ""), reply
    finally:
        w.close()


def test_a_forged_reply_is_refused():
    good = {"name": "k", "num_warps": 4, "num_ctas": 1, "shared": 0, "global_scratch_size": 0,
            "global_scratch_align": 1, "profile_scratch_size": 0, "profile_scratch_align": 1, "tmem_size": 0}
    elf = torch.frombuffer(bytearray(b"\x7fELF" + b"\0" * 60), dtype=torch.uint8)
    assert check_reply({"cubin": elf, "meta": good})[1]["name"] == "k"
    for bad, why in ((dict(good, num_warps=64), "num_warps"), (dict(good, name="k; rm"), "identifier"),
                     (dict(good, shared=-1), "shared"), (dict(good, launch_pdl=True), "launch_pdl")):
        with pytest.raises(CubinError, match=why):
            check_reply({"cubin": elf, "meta": bad})
    with pytest.raises(CubinError, match="ELF"):
        check_reply({"cubin": torch.zeros(8, dtype=torch.uint8), "meta": good})
    with pytest.raises(CubinError, match="at most"):
        check_reply({"cubin": torch.zeros(5 << 20, dtype=torch.uint8), "meta": good})


@pytest.mark.gpu
def test_the_grader_side_launches_the_cubin(tmp_path):
    """On a GPU: compile in this process (a test: no sandbox), launch through the package's launcher."""
    import importlib.util

    from kernels.checks.cubin import CubinKernel, compile_spec, metadata

    path = tmp_path / "cubin_add.py"
    path.write_text(ADD)
    spec = importlib.util.spec_from_file_location("cubin_add", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    asked = []

    def compiler(s):
        asked.append(s["key"])
        c = compile_spec(mod.add_kernel, s)
        return check_reply({"cubin": torch.frombuffer(bytearray(c.asm["cubin"]), dtype=torch.uint8),
                            "meta": metadata(c)})

    k = CubinKernel(kernel_params(ADD, "add_kernel"), compiler)
    for n in (1000, 4096, 4097):
        x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
        out = torch.full_like(x, float("nan"))
        k[(triton_cdiv(n, 256),)](x, y, out, n, BLOCK_SIZE=256)
        torch.cuda.synchronize()
        torch.testing.assert_close(out, x + y)
        k[lambda meta: (triton_cdiv(meta["n_elements"], meta["BLOCK_SIZE"]),)](x, y, out, n, BLOCK_SIZE=128,
                                                                             SCALE=2.0)
        torch.testing.assert_close(out, 2 * (x + y))
    assert len(asked) == len(set(asked)) == 4  # n=4096 is divisible by 16; each specialisation compiled once


def triton_cdiv(a, b):
    return -(-a // b)


# ---- timing forgery: what the timed launches did is checked, whichever way a kernel tells them apart ---------

def _timed(launch, **kw):
    from kernels.checks.engine import time_fresh
    from kernels.testing import poisoned

    outs = {"out": poisoned(4099, dtype=torch.float32, guard=64, device="cpu")}
    return time_fresh(launch, outs, warmup=0.2, rep=1.0, flush_bytes=0, **kw), outs


def test_work_done_only_on_the_first_launch_is_found():
    x = torch.randn(4099)
    seen = {"launches": 0}

    def first_only(o):  # state kept between launches (on a GPU: a flag in memory the kernel can reach)
        seen["launches"] += 1
        if seen["launches"] == 1:
            o["out"].copy_(2 * x)

    r, _ = _timed(first_only, verify=1e-6)
    assert r["skipped"][0] == seen["launches"] - 2, r["skipped"]  # all but the reference launch and "after"
    assert r["skipped"][1] == 4099 * r["skipped"][0]
    seen["launches"] = 0
    r, _ = _timed(first_only)  # unverified, the same forgery passes every check time_fresh made before
    assert r["skipped"] == (0, 0)


def test_outputs_are_poisoned_before_every_timed_launch():
    x = torch.randn(4099)
    seen = {"launches": 0, "work": 0}

    def skip_if_filled(o):  # "this output already holds a number: the work was done"
        seen["launches"] += 1
        if not torch.isnan(o["out"][0]):
            return
        seen["work"] += 1
        o["out"].copy_(2 * x)

    r, outs = _timed(skip_if_filled, verify=1e-6)
    assert seen["work"] == seen["launches"] and r["skipped"] == (0, 0)
    assert torch.equal(r["after"]["out"].out, 2 * x) and outs["out"].stray_writes() == (0, 0)


def test_a_wrong_or_flaky_launch_while_timed_is_counted():
    x = torch.randn(4099)
    seen = {"launches": 0}

    def every_fifth_wrong(o):
        seen["launches"] += 1
        o["out"].copy_(2 * x if seen["launches"] % 5 else x)

    r, _ = _timed(every_fifth_wrong, verify=1e-3)
    assert 0 < r["skipped"][0] <= seen["launches"] // 5 + 1
