"""The kernels ``python -m kernels.export`` knows by name, with how each is launched.

Each entry types the kernel's parameters and says, as expressions over the problem sizes, how big every buffer
is, what each stride is for contiguous inputs, and how many programs to launch. The defaults are the tiles the
package's wrappers pick for the GPU sizes of :func:`kernels.device.sizes`.
"""

from __future__ import annotations

from .aot import ExportError, KernelSpec

__all__ = ["KERNELS", "get"]


def _matmul_precision(dtype: str, cx: dict) -> dict:
    """As ``tiled_matmul`` launches it on a GPU: no interpreter upcast, TF32 dots unless asked otherwise."""
    return {"UPCAST": False, "DOT_PRECISION": cx.get("DOT_PRECISION") or "tf32"}


def _attention_precision(dtype: str, cx: dict) -> dict:
    """As ``chunked_linear_attention`` launches it on a GPU: IEEE fp32 dots for fp32 inputs."""
    return {"UPCAST": False, "PRECISION": cx.get("PRECISION") or ("ieee" if dtype == "fp32" else None)}


def _check_blocks(*names: str, lo: int = 16):
    def check(cx: dict) -> None:
        for n in names:
            v = cx.get(n)
            if not isinstance(v, int) or v < lo or v & (v - 1):
                raise ExportError(f"{n}={v!r} must be a power of two >= {lo}")
    return check


def _linear_attention_buffers(cx: dict) -> dict:
    return {
        "q_ptr": ("in", "B*T*H*K"), "k_ptr": ("in", "B*T*H*K"), "v_ptr": ("in", "B*T*H*V"),
        "o_ptr": ("out", "B*T*H*V"),
        "h0_ptr": ("in", "B*H*K*V") if cx.get("USE_H0") else ("unused", "0"),
        "ht_ptr": ("out", "B*H*K*V") if cx.get("STORE_HT") else ("unused", "0"),
        "cu_ptr": ("unused", "0"),
    }


def _check_linear_attention(cx: dict) -> None:
    _check_blocks("BT", "BK", "BV")(cx)
    if cx.get("IS_VARLEN"):
        raise ExportError("IS_VARLEN=True is not exported: its grid depends on the number of packed sequences; "
                          "export the fixed-length kernel and launch one manifest per batch")


KERNELS: dict[str, KernelSpec] = {
    "vector_add": KernelSpec(
        name="vector_add",
        module="kernels.vector_add.naive",
        attr="_naive_vector_add_kernel",
        signature={"x_ptr": "*{dtype}", "y_ptr": "*{dtype}", "out_ptr": "*{dtype}", "n_elements": "i32"},
        buffers={"x_ptr": ("in", "n_elements"), "y_ptr": ("in", "n_elements"), "out_ptr": ("out", "n_elements")},
        sizes=("n_elements",),
        grid=("cdiv(n_elements, BLOCK_SIZE)",),
        constexprs={"BLOCK_SIZE": 1024},
        requires=("n_elements >= 1", "n_elements <= 2147483647 - BLOCK_SIZE"),
        aligned=("n_elements",),
        dtypes=("fp32", "fp16", "bf16"),
        num_warps=4,
        num_stages=3,
        check=_check_blocks("BLOCK_SIZE"),
        doc="out = x + y, one program per BLOCK_SIZE elements",
    ),
    "matmul": KernelSpec(
        name="matmul",
        module="kernels.matmul.tiled",
        attr="_tiled_matmul_kernel",
        signature={"a_ptr": "*{dtype}", "b_ptr": "*{dtype}", "c_ptr": "*{dtype}", "M": "i32", "N": "i32",
                   "K": "i32", "stride_am": "i32", "stride_ak": "i32", "stride_bk": "i32", "stride_bn": "i32",
                   "stride_cm": "i32", "stride_cn": "i32"},
        buffers={"a_ptr": ("in", "M*K"), "b_ptr": ("in", "K*N"), "c_ptr": ("out", "M*N")},
        sizes=("M", "N", "K"),
        values={"stride_am": "K", "stride_ak": "1", "stride_bk": "N", "stride_bn": "1", "stride_cm": "N",
                "stride_cn": "1"},
        grid=("cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N)",),
        constexprs={"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8},
        requires=("M >= 1", "N >= 1", "K >= 1", "M*K <= 2147483647", "K*N <= 2147483647", "M*N <= 2147483647"),
        aligned=("K", "N", "stride_am", "stride_bk", "stride_cm"),
        dtypes=("fp16", "bf16", "fp32"),
        num_warps=8,
        num_stages=3,
        derived=_matmul_precision,
        check=_check_blocks("BLOCK_M", "BLOCK_N", "BLOCK_K", lo=16),
        doc="C = A @ B for row-major A [M, K], B [K, N]; C [M, N] in A's dtype; grouped tile order",
    ),
    "linear_attention": KernelSpec(
        name="linear_attention",
        module="kernels.linear_attention.chunked",
        attr="_chunked_linear_attention_kernel",
        signature={"q_ptr": "*{dtype}", "k_ptr": "*{dtype}", "v_ptr": "*{dtype}", "o_ptr": "*{dtype}",
                   "h0_ptr": "*fp32", "ht_ptr": "*fp32", "cu_ptr": "*i32",
                   "T": "i32", "H": "i32", "K": "i32", "V": "i32", "scale": "fp32",
                   **{f"stride_{x}{d}": "i32" for x in "qkvo" for d in "bth"}},
        buffers=_linear_attention_buffers,
        sizes=("B", "T", "H", "K", "V"),
        values={"scale": None,
                "stride_qb": "T*H*K", "stride_qt": "H*K", "stride_qh": "K",
                "stride_kb": "T*H*K", "stride_kt": "H*K", "stride_kh": "K",
                "stride_vb": "T*H*V", "stride_vt": "H*V", "stride_vh": "V",
                "stride_ob": "T*H*V", "stride_ot": "H*V", "stride_oh": "V"},
        grid=("cdiv(V, BV)", "B*H"),
        constexprs={"BT": 64, "BK": 128, "BV": 64, "USE_H0": False, "STORE_HT": False, "IS_VARLEN": False},
        requires=("B >= 1", "T >= 1", "H >= 1", "K >= 1", "V >= 1", "K <= BK",
                  "B*T*H*K <= 2147483647", "B*T*H*V <= 2147483647"),
        aligned=("K", "V", *(f"stride_{x}{d}" for x in "qkvo" for d in "bth")),
        dtypes=("bf16", "fp16", "fp32"),
        num_warps=4,
        num_stages=3,
        derived=_attention_precision,
        check=_check_linear_attention,
        doc="causal chunked linear attention, unnormalised: q, k [B, T, H, K], v, o [B, T, H, V]; "
            "one program per (V-block, sequence x head)",
    ),
}


def get(name: str) -> KernelSpec:
    try:
        return KERNELS[name]
    except KeyError:
        raise ExportError(f"no exportable kernel {name!r}; known: {', '.join(KERNELS)}") from None
