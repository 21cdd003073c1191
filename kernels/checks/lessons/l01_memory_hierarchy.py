"""Lesson 01 (memory hierarchy): a grid-stride copy (correct, then fast on a GPU), a column read of a row-major
matrix (the uncoalesced pattern), and the sector count that predicts its slowdown."""

import numbers
from collections import Counter

import torch
import triton

from ...device import ON_GPU, pick
from ...testing import randn
from ..spec import Case, CheckFailed, Exercise, Performance, register, wrong_call

__all__ = ["COPY", "COPY_SPEED", "COLUMN", "SECTOR_BYTES"]

_SMS = torch.cuda.get_device_properties(0).multi_processor_count if ON_GPU else 1


def _copy_inputs(case, gen):
    return {"x": randn(case["n"], gen=gen, dtype=case.dtype, device="cpu")}


def _copy_run(args, inputs, outputs, case):
    (kernel,) = args
    kernel[(case["P"],)](inputs["x"], outputs["out"], case["n"], BLOCK_SIZE=case["BLOCK_SIZE"],
                         num_warps=case.get("num_warps", 4))


def _copy_outputs(case, inputs):
    return {"out": ((case["n"],), case.dtype)}


_COPY_SIGNATURE = ("copy_kernel(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr), launched on grid (P,) "
                   "with P <= cdiv(n_elements, BLOCK_SIZE): a grid-stride loop")

def _copy_traffic(found, case):
    """Each element copied once: programs that copy the same blocks give the right output and do P times the
    work (every program walking the whole array, or a loop stepping by one block instead of P)."""
    n, stored = case["n"], found.stored("out")
    if stored > n:
        return (f"the programs stored {stored} elements of out for n_elements={n}: {stored - n} were written more than "
                "once, so the programs copy the same blocks. Program p copies blocks p, p + P, p + 2P, ...: start at "
                "pid · BLOCK_SIZE and step by tl.num_programs(0) · BLOCK_SIZE")
    return None


# what the copy's two exercises share: its signature, inputs, launch, oracle and traffic rule
_COPY_KERNEL = dict(args=("kernel",), signature=_COPY_SIGNATURE, make_inputs=_copy_inputs, outputs=_copy_outputs,
                    run=_copy_run, reference=lambda inputs, case: {"out": inputs["x"]}, traffic=_copy_traffic)

COPY = Exercise(
    id="01_memory_hierarchy.copy",
    description="out[i] = x[i] for i < n_elements, whatever the number of programs P",
    **_COPY_KERNEL,
    visible=[Case("n=10000 BLOCK_SIZE=512 P=3 fp32", dict(n=10000, BLOCK_SIZE=512, P=3)),
             Case("n=1000 BLOCK_SIZE=1024 P=1 fp32", dict(n=1000, BLOCK_SIZE=1024, P=1)),
             Case("n=2047 BLOCK_SIZE=512 P=2 fp32", dict(n=2047, BLOCK_SIZE=512, P=2),
                  purpose="leaves the last block one element short (n % BLOCK_SIZE = BLOCK_SIZE - 1): a full-block "
                          "test must not take it for a full block"),
             Case("n=2049 BLOCK_SIZE=256 P=3 fp32", dict(n=2049, BLOCK_SIZE=256, P=3),
                  purpose="has a last block of one element (n % BLOCK_SIZE = 1)"),
             Case("n=4096 BLOCK_SIZE=256 P=5 fp32", dict(n=4096, BLOCK_SIZE=256, P=5),
                  purpose="is a whole number of blocks (n % BLOCK_SIZE = 0), not a multiple of P blocks")],
    hidden=[Case("n=1 BLOCK_SIZE=16 P=1 fp32", dict(n=1, BLOCK_SIZE=16, P=1)),
            Case("n=5003 BLOCK_SIZE=128 P=7 fp16", dict(n=5003, BLOCK_SIZE=128, P=7), torch.float16),
            Case("n=3001 BLOCK_SIZE=256 P=12 bf16", dict(n=3001, BLOCK_SIZE=256, P=12), torch.bfloat16),
            Case("n=8191 BLOCK_SIZE=1024 P=3 fp16", dict(n=8191, BLOCK_SIZE=1024, P=3), torch.float16,
                 purpose="leaves the last block one element short (n % BLOCK_SIZE = BLOCK_SIZE - 1)"),
            Case("n=2048 BLOCK_SIZE=128 P=16 fp32", dict(n=2048, BLOCK_SIZE=128, P=16),
                 purpose="has exactly one block per program"),
            Case("n=1025 BLOCK_SIZE=1024 P=2 bf16", dict(n=1025, BLOCK_SIZE=1024, P=2), torch.bfloat16),
            Case("n=65541 BLOCK_SIZE=1024 P=5 fp32", dict(n=65541, BLOCK_SIZE=1024, P=5))]
    + pick(cpu=[], gpu=[Case("n=2**24+3 BLOCK_SIZE=4096 P=8·SMs fp32",
                             dict(n=2**24 + 3, BLOCK_SIZE=4096, P=8 * _SMS, num_warps=8))]),
    points=(2, 2),
)

_SPEED_N = 2**27 + 17


def _copy_widths(ptx: list[str]) -> str | None:
    """Under the interpreter, what the GPU's timing of the copy will find in its code: with no 16-byte (``.v4``)
    load or store anywhere, every block was masked (a mask over n elements, n not a multiple of 4, proves nothing
    about alignment), and such a copy runs at about 0.73 of torch's on an H100/H200, short of the 0.75 asked."""
    from ...profile.compiler import parse_accesses

    bits = Counter()
    for text in ptx:
        for access, n in parse_accesses(text).items():
            if access.space == "global" and access.kind in ("load", "store"):
                bits[access.bits] += n
    if not bits or max(bits) >= 128:
        return None
    return (f"all {bits.total()} of its global loads and stores are {max(bits) // 8} bytes wide or less, none of "
            "16 (ld.global.v4): every block is masked. On a GPU that copy runs at about 0.73 of torch's, below the "
            "0.75 the speed check asks; copy the full blocks without a mask and mask only the last one")


COPY_SPEED = Exercise(
    id="01_memory_hierarchy.copy_speed",
    description="the grid-stride copy at >= 75% of the speed of torch's copy on 2**27 fp32 elements (GPU only)",
    **_COPY_KERNEL,
    visible=[Case("n=4099 BLOCK_SIZE=256 P=4 fp32", dict(n=4099, BLOCK_SIZE=256, P=4)),
             Case("n=2047 BLOCK_SIZE=512 P=2 fp32", dict(n=2047, BLOCK_SIZE=512, P=2),
                  purpose="leaves the last block one element short (n % BLOCK_SIZE = BLOCK_SIZE - 1): a full-block "
                          "test must not take it for a full block")],
    performance=Performance(
        case=Case("n=2**27+17 BLOCK_SIZE=4096 P=8·SMs fp32 (1 GiB moved)",
                  dict(n=_SPEED_N, BLOCK_SIZE=4096, P=8 * _SMS, num_warps=8)),
        baseline=lambda args, inputs, outputs, case: outputs["out"].copy_(inputs["x"]),
        baseline_name="torch's copy (out.copy_(x))",
        min_speedup=0.75,
        floor=lambda case: (2 * case["n"] * case.dtype.itemsize, 0),
        compiled=_copy_widths,
    ),
    points=(2, 0),
)


def _column_inputs(case, gen):
    M, ld = case["M"], case["ld"]
    col = int(torch.randint(ld, (1,), generator=gen))
    return {"x": randn(M, ld, gen=gen, dtype=case.dtype, device="cpu"), "col": col}


def _column_run(args, inputs, outputs, case):
    (kernel,) = args
    x = inputs["x"]
    block = case["BLOCK_M"]
    kernel[(triton.cdiv(x.shape[0], block),)](x, outputs["out"], x.shape[0], x.stride(0), inputs["col"],
                                              BLOCK_M=block)


def _column_diagnose(inputs, got, case, ref):
    """Names the two address mistakes of a column read: the rows' offsets without ``col`` (column 0), and ``col``
    taken as a row (``offs + col · stride_m``: row ``col`` and the ones after it, read along)."""
    x, col, out = inputs["x"].double(), int(inputs["col"]), got["out"]
    M = x.shape[0]
    flat = x.flatten()
    if col and torch.equal(out, x[:, 0]):
        return (f"out: every value is column 0's, where column col={col} was asked for: add col to each row's "
                "offset, x_ptr + offs_m · stride_m + col")
    if 0 < col and col * x.stride(0) + M <= flat.numel() and torch.equal(out, flat[col * x.stride(0):][:M]):
        return (f"out: the values of row {col} and the rows after it, read along memory: the offsets "
                "offs_m + col · stride_m step one element a row and start at row col; a row is stride_m elements "
                "apart, so offs_m · stride_m + col")
    if torch.equal(out, flat[:M]) and x.shape[1] > 1:
        return ("out: the first M elements in memory, a contiguous copy: step a row's stride between rows and add "
                "the column, x_ptr + offs_m · stride_m + col")
    return None


COLUMN = Exercise(
    id="01_memory_hierarchy.column",
    args=("kernel",),
    signature="column_kernel(x_ptr, out_ptr, M, stride_m, col, BLOCK_M: tl.constexpr), launched on grid "
              "(cdiv(M, BLOCK_M),); x is row-major [M, ld] with row stride stride_m",
    description="out[m] = x[m, col] for m < M",
    make_inputs=_column_inputs,
    outputs=lambda case, inputs: {"out": ((case["M"],), case.dtype)},
    run=_column_run,
    reference=lambda inputs, case: {"out": inputs["x"][:, int(inputs["col"])]},
    diagnose=_column_diagnose,
    visible=[Case("M=1000 row stride 33 BLOCK_M=128 fp32", dict(M=1000, ld=33, BLOCK_M=128)),
             Case("M=300 row stride 129 BLOCK_M=64 fp32", dict(M=300, ld=129, BLOCK_M=64),
                  purpose="has a last block of 44 rows: loads and stores past row M must be masked")],
    hidden=[Case("M=1 row stride 1 BLOCK_M=16 fp32", dict(M=1, ld=1, BLOCK_M=16)),
            Case("M=777 row stride 8 BLOCK_M=256 fp16", dict(M=777, ld=8, BLOCK_M=256), torch.float16),
            Case("M=300 row stride 129 BLOCK_M=64 bf16", dict(M=300, ld=129, BLOCK_M=64), torch.bfloat16),
            Case("M=1023 row stride 3 BLOCK_M=512 fp32", dict(M=1023, ld=3, BLOCK_M=512),
                 purpose="leaves the last block one row short (M % BLOCK_M = BLOCK_M - 1)"),
            Case("M=1024 row stride 5 BLOCK_M=256 fp16", dict(M=1024, ld=5, BLOCK_M=256), torch.float16),
            Case("M=5000 row stride 2 BLOCK_M=1024 fp32", dict(M=5000, ld=2, BLOCK_M=1024))],
    points=(2, 1),
)


def _sectors_reference(n: int, stride: int, itemsize: int) -> int:
    """Brute force: every 32-byte sector holding a byte of one of the n elements."""
    touched = set()
    for i in range(n):
        first = i * stride * itemsize
        touched.update({first // 32, (first + itemsize - 1) // 32})
    return 32 * len(touched)


def _sector_inputs(case, gen):
    fixed = list(case.get("fixed", ()))
    count = case.get("count", 0)
    ns = torch.randint(1, case.get("max_n", 2000), (count,), generator=gen).tolist()
    strides = torch.randint(1, 70, (count,), generator=gen).tolist()
    sizes = [(1, 2, 4, 8)[i] for i in torch.randint(4, (count,), generator=gen).tolist()]
    return {"reads": fixed + list(zip(ns, strides, sizes))}


def _sector_run(args, inputs, outputs, case):
    (fn,) = args
    got = []
    for n, stride, itemsize in inputs["reads"]:
        value = fn(n, stride, itemsize)
        if value is None:
            raise CheckFailed(f"sector_bytes({n}, {stride}, {itemsize}) returned None: is a `return` missing?")
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):  # numpy's integers are ints too
            raise CheckFailed(f"sector_bytes({n}, {stride}, {itemsize}) returned {value!r}; expected an int")
        got.append(int(value))
    return {"bytes": torch.tensor(got, dtype=torch.float64)}


def _sector_reference(inputs, case):
    return {"bytes": torch.tensor([_sectors_reference(*r) for r in inputs["reads"]], dtype=torch.float64)}


_SECTOR_MISTAKES = (
    (lambda n, stride, itemsize: n * stride * itemsize, "that is the span n·stride·itemsize in bytes: a warp's loads "
                                                       "move whole 32-byte sectors, so count the sectors the "
                                                       "elements touch, 32 bytes each"),
    (lambda n, stride, itemsize: n * itemsize, "that is the bytes asked for; a warp's loads move whole 32-byte "
                                              "sectors: count the sectors the elements touch, 32 bytes each"),
    (lambda n, stride, itemsize: _sectors_reference(n, stride, itemsize) // 32,
     "that is the number of sectors; the function returns their bytes, 32 a sector"),
    (lambda n, stride, itemsize: 32 * n, "one sector per element: neighbouring elements closer than 32 bytes share "
                                         "a sector, which moves once"),
    (lambda n, stride, itemsize: 32 * -(-n * stride * itemsize // 32), "the whole span up to n·stride·itemsize: "
                                                                       "the last element ends at (n-1)·stride·"
                                                                       "itemsize + itemsize, and a sector no "
                                                                       "element touches is not moved"),
)


def _sector_diagnose(inputs, got, case, ref):
    return wrong_call("sector_bytes", ("n", "stride", "itemsize"), inputs["reads"], got["bytes"].tolist(),
                      ref["bytes"].tolist(), _SECTOR_MISTAKES)


SECTOR_BYTES = Exercise(
    id="01_memory_hierarchy.sector_bytes",
    args=("function",),
    signature="sector_bytes(n, stride, itemsize) -> int",
    description="bytes of the 32-byte sectors holding n elements of itemsize bytes, stride elements apart, "
                "the first at a sector boundary",
    make_inputs=_sector_inputs,
    outputs=lambda case, inputs: {},
    run=_sector_run,
    reference=_sector_reference,
    diagnose=_sector_diagnose,
    tolerance=lambda case: 0,
    visible=[Case("a coalesced warp, a stride-8 warp and 20 random reads",
                  dict(fixed=[(32, 1, 4), (32, 8, 4), (32, 2, 4)], count=20))],
    hidden=[Case("edge cases", dict(fixed=[(1, 1, 1), (1, 64, 8), (2, 31, 1), (2, 32, 1), (33, 1, 1),
                                           (5, 4, 8), (4, 16, 2), (1000, 7, 4)])),
            Case("200 random reads", dict(count=200, max_n=5000))],
    points=(1, 1),
)

register(COPY, COPY_SPEED, COLUMN, SECTOR_BYTES)
