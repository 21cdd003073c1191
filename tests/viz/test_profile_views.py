"""Lesson 06's views: the IR explorer over two compiles of the planted matmul, the autotune scatter."""

import pytest
import torch

from kernels import viz
from kernels.profile import compiler, planted

from .test_views import changes, pixels

# one pytest-xdist worker runs this module: its module-scoped fixtures (the two compiles) are built once
pytestmark = pytest.mark.xdist_group("test_profile_views")


@pytest.fixture(scope="module")
def pair():
    a, b, c = torch.empty(256, 256, dtype=torch.float16), torch.empty(256, 256, dtype=torch.float16), \
        torch.empty(256, 256, dtype=torch.float16)
    args = [a, b, c, 256, 256, 256, 256, 1, 256, 1, 256, 1]
    cfg = dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, num_warps=4, num_stages=2)
    return compiler.compile_many([dict(kernel=planted._planted_matmul_kernel, args=args, **cfg),
                                  dict(kernel=planted._fixed_matmul_kernel, args=args, **cfg)])


def test_ir_explorer(pair):
    view = viz.ir_explorer(*pair)
    assert "registers/thread" in view.caption and not view.error
    assert any("ld.global.b16" in ln for ln in view.lines("ptx", "changed lines"))
    memory = view.lines("ptx", "changed lines", "memory instructions")
    assert memory and all("ld." in ln or "st." in ln or "cp.async" in ln or "matrix" in ln for ln in memory)
    assert changes(view, only="all lines") > 0.001
    assert changes(view, show="A") > 0.001
    assert changes(view, stage="sass") > 0.001
    assert view.spec["page"].hi >= 1
    assert changes(view, page=1) > 0.001
    assert changes(view, stage="ttgir", show="changed lines") > 0.001
    assert pixels(view.png()).shape[0] > 100


def test_autotune_scatter():
    configs = [dict(BLOCK_M=m, BLOCK_N=n, BLOCK_K=64, num_warps=w, num_stages=3)
               for m in (64, 128) for n in (64, 128, 256) for w in (4, 8)]
    rows = viz.model_rows(configs, 4096, 4096, 4096)
    assert rows[0]["ms"] > rows[-1]["ms"]  # bigger tiles move fewer bytes
    rows.append({"config": dict(configs[0], num_stages=9), "ms": None, "error": "out of resources"})
    view = viz.autotune_scatter(rows, floor_ms=0.14, label="model")
    assert "Winner" in view.caption and not view.error
    assert changes(view, pick=5) > 0.001
    assert changes(view, x="rank") > 0.001
    with pytest.raises(ValueError, match="no configuration"):
        viz.autotune_scatter([{"config": {}, "ms": None}])
