"""Which launch of the fused kernel serves a call: tile tables by head size and dtype, and the time model.

One program per (sequence, head, V block) walks its whole sequence when those chains keep the GPU busy to the
end (:func:`one_pass_fills`); otherwise sequences are cut into segments chained through L2, short enough
that about two programs per SM have work. fp32 tiles take the ``tl.dot`` precision that
``torch.get_float32_matmul_precision()`` asks for (:data:`PRECISIONS`). The tables are the H200's
measurements where there are any (``PERF.md``), compiled without spills for sm_90 elsewhere.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from dataclasses import dataclass

import torch

from ..device import INTERPRET
from ..validate import check_power_of_two

__all__ = ["Launch", "PRECISIONS", "NORM_MMA_FORMS", "launch_for", "plan", "float32_precision",
           "normaliser_on_tensor_cores", "trying", "settings", "cdiv", "next_power_of_2", "contiguous_strides",
           "PlanCache", "ONE_PASS", "CHAINED", "MIN_SEGMENT", "NORM_MMA", "CANDIDATES", "applies", "change_of"]

#: ``torch.get_float32_matmul_precision()`` -> the ``tl.dot`` input precision of fp32 tiles.
PRECISIONS = {"highest": "tf32x3", "high": "tf32", "medium": "tf32"}
#: ``Launch.norm_mma`` -> (the kernel's QZ_MMA: how ``q · z`` is computed, KSUM_MMA: ``Σ k`` as ``kᵀ · e₀``).
#: QZ_MMA 0: on the CUDA cores; 1: ``q · [z_hi | z_lo]`` with a [BK, 16] operand written from registers (wrong
#: outputs on the H200, PERF.md); 2: the same with a [BK, 64] operand (128-byte rows, as the state product's);
#: 3: ``[z_hi; z_lo] · qᵀ`` [64, BT], z the register operand; 4: as 2 with a [BK, 32] operand (64-byte rows): wrong
#: outputs and illegal addresses on the H100 at 4 warps (K=64 and 128), right at 8 (K=256); PERF.md, "norm-mid".
NORM_MMA_FORMS = {"": (0, False), "both": (1, True), "qz": (1, False), "ksum": (0, True), "wide": (2, True),
                  "qzt": (3, True), "mid": (4, True)}


#: How much longer the lookback takes than the chunked kernel's single pass when both keep every SM busy (H200,
#: B=4 H=16 D=128 bf16: 0.530 / 0.361 ms at 16k, 2.209 / 1.455 at 64k, 8.508 / 5.869 at 256k: 1.45-1.52; 1.16 at
#: 4k). It reads K and V twice and passes states along its chain; what it buys is splitting long sequences.
LOOKBACK_COST = 1.4


def one_pass_fills(programs: int, sms: int, lengths: list[int] | None = None, cost: float = LOOKBACK_COST) -> bool:
    """Whether the chunked kernel's single pass beats the lookback: ``programs`` chains (one per sequence, head and
    V block; packed sequences of ``lengths``, or all of one length) each walk their sequence on one SM, so the
    pass takes as long as the longest chain or as the work spread over ``sms`` SMs, whichever is more; the
    lookback spreads the work evenly but costs ``cost`` times as much per token. Measured on the H200:
    chunked for B=4 H=16 or H=32 (128 chains, 0.36 vs 0.53 ms at 16k) and for eight packed sequences of 1 to 20,000
    tokens (0.56 vs 0.99 ms), the lookback for one sequence of 64k with 16 heads (32 chains: 0.54 vs 1.4 ms)."""
    lengths = [1] if not lengths else lengths  # one length: only the number of chains matters
    per_sequence = programs / len(lengths)
    work = per_sequence * sum(lengths)  # chain-tokens
    return max(lengths) <= cost * work / sms


@dataclass(frozen=True)
class Launch:
    """How one call is cut into programs: ``L`` tokens a segment (None: each program walks its whole sequence),
    chunks of ``BT`` tokens, ``BV`` value columns a program, warps, pipeline stages, chunks prefetched into L2
    ahead of use (``prefetch``), tiles moved by tensor descriptors (``tma``), the fp32 dot precision, and which
    of the normaliser's two sums run as products on the tensor cores, each chunk's from zero (``norm_mma``, one of
    :data:`NORM_MMA_FORMS`: "both", "qz" for ``q · z`` alone, "ksum" for ``Σ k`` alone, "wide" for both with
    ``q · z``'s operand 64 columns wide ("mid": 32), "qzt" for both with ``q · z`` as ``zᵀ qᵀ``; "" for
    reductions on the CUDA cores); ``kt``: kᵀ of the state update loaded from memory a second time, in its own
    layout (for fp32, whose products cannot read one shared-memory copy of k both ways); ``states``: chunks a
    state is stored for (``states.py``: a kernel writes the state before every ``states · BT`` tokens, another
    computes every block of that many tokens at once, in V blocks of ``BV``; ``L`` is then unused), 0 for the
    fused kernel; ``prefix``: how a chained launch's segments find their prefix state (0: each waits for its
    predecessor's, handed on along the chain; 1: the decoupled look-back, each adding up its predecessors' own
    sums back to the nearest published prefix; 2: the same with no prefix published but segment 0's, so that
    every walk sums all its predecessors: the summing path, for tests; 3: stored before every segment by
    ``states.py``'s states kernel, which runs first, so that every segment runs at once, with no phase A and no
    wait; not for packed sequences); ``states_loop``: the states kernel walks the chunks of a stored state in a loop,
    one set of pipeline buffers for all of them, where it otherwise unrolls them, a set each (fp32 K=V=256: 96 KiB
    of shared memory, two programs an SM, against 208 KiB and one); ``kv_t``: k and v copied token-contiguous before
    the states kernels, which then read the operands of their products over tokens as TF32 products need them
    (K-major) with 16-byte copies, where otherwise each tile is copied transposed 4 bytes at a time."""

    L: int | None
    BT: int
    BV: int
    num_warps: int
    num_stages: int
    prefetch: int = 0
    tma: bool = False
    precision: str = "tf32x3"
    norm_mma: str = ""
    kt: bool = False
    states: int = 0
    prefix: int = 0
    states_loop: bool = False
    kv_t: bool = False

    def check(self) -> None:
        check_power_of_two("BT", self.BT, lo=16, hi=128)
        check_power_of_two("BV", self.BV, lo=16, hi=256)
        check_power_of_two("num_warps", self.num_warps, lo=1, hi=16)
        if self.L is not None and (self.L < self.BT or self.L % self.BT):
            raise ValueError(f"segment length L={self.L} must be a positive multiple of the chunk BT={self.BT}")
        if self.num_stages < 1 or self.prefetch < 0:
            raise ValueError(f"num_stages={self.num_stages} must be >= 1 and prefetch={self.prefetch} >= 0")
        if self.norm_mma not in NORM_MMA_FORMS:
            raise ValueError(f"norm_mma={self.norm_mma!r} must be one of {sorted(NORM_MMA_FORMS)}")
        if self.states not in (0, 1, 2) or self.states * self.BT > 128:
            raise ValueError(f"states={self.states} must be 0, 1 or 2 chunks, and states·BT at most 128 tokens "
                             f"(BT={self.BT})")
        if self.prefix not in (0, 1, 2, 3):
            raise ValueError(f"prefix={self.prefix} must be 0 (the serial chain), 1 (the decoupled look-back), "
                             f"2 (the look-back summing every segment's own state) or 3 (stored by a states pass)")
        if self.precision not in ("tf32", "tf32x3", "ieee"):
            raise ValueError(f"precision={self.precision!r} must be 'tf32', 'tf32x3' or 'ieee'")


# (BK, kind) -> the whole-sequence launch; kind is "16" for bf16/fp16 inputs, else the fp32 dot precision.
# bf16/fp16 D=128: chunked.py's measured tiles (BV = 64, 4 warps, 3 stages: 0.36 ms at B=4 H=16 T=16k). The
# others are the sm_90 compiles with the fewest spills (PERF.md, "the fused kernel offline"), untimed.
ONE_PASS: dict[tuple[int, str], Launch] = {
    (64, "16"): Launch(None, 64, 64, 4, 3),
    (128, "16"): Launch(None, 64, 64, 4, 3),
    (256, "16"): Launch(None, 64, 32, 8, 2),
    (64, "tf32"): Launch(None, 64, 64, 4, 2),
    (128, "tf32"): Launch(None, 64, 64, 4, 2),
    (256, "tf32"): Launch(None, 32, 32, 8, 2),
    (64, "tf32x3"): Launch(None, 64, 64, 8, 2),
    (128, "tf32x3"): Launch(None, 64, 64, 8, 2),
    (256, "tf32x3"): Launch(None, 32, 32, 8, 2),
}
ONE_PASS = {key: dataclasses.replace(lo, precision=key[1]) if key[1] != "16" else lo for key, lo in ONE_PASS.items()}
# (BK, kind) -> the chained launch; L is the longest segment (the dispatch cuts shorter ones for small batches).
# bf16/fp16 D=64 and D=128: the lookback's measured tiles (PERF.md, runs 1-9: L2048 for one sequence of 64k);
# the rest as ONE_PASS.
CHAINED: dict[tuple[int, str], Launch] = {
    (64, "16"): Launch(2048, 64, 64, 4, 3),
    (128, "16"): Launch(2048, 64, 64, 4, 2),
    (256, "16"): Launch(1024, 64, 32, 8, 2),
    **{key: dataclasses.replace(one, L=1024) for key, one in ONE_PASS.items() if key[1] != "16"},
}
#: Segments shorter than this spend more time handing the state on than computing (PERF.md, "chain latency").
MIN_SEGMENT = 256
#: Every launch the dispatch picks runs the normaliser's two sums on the tensor cores (``Launch.norm_mma``: at
#: D=128 16 bytes of spill a thread instead of 84, at D=256 none instead of 200-828) when True. Off until the H200
#: has checked that form family by family (``scripts/gpu_la_check.py``): the earlier tensor-core normaliser, which
#: carried z in an MMA accumulator, gave wrong results there (PERF.md, "the normaliser on the H200"), and so
#: does this one: on the H200 its ``q · [z_hi | z_lo]`` product gave outputs off by 2.4 (relative) while its key
#: sum came out right. Leave it off.
NORM_MMA = False
#: Which of the two sums NORM_MMA puts on the tensor cores (``Launch.norm_mma``).
NORM_MMA_PARTS = "both"
#: Launch changes not yet the default: name -> {(BK, kind): the fields it changes}, for the (whole and chained)
#: launches of those keys. Each is checked family by family on the H200 (``scripts/gpu_la_check.py``, cases
#: ending in the name) and timed beside the default (the benchmark's "targets" set) before it may become one
#: (PERF.md, "the normaliser from one product, fp32 without the register round trip").
#: "norm-wide": ``q · z`` as a product whose operand is 64 columns wide (128-byte rows, as the state product
#: ``q · S``), the key sum as ``kᵀ · e₀``: no spills at D=128 and D=256 (84 and 200 bytes on the CUDA cores).
#: "fp32-kt": kᵀ loaded a second time in the layout the state update reads, so that every tile of an fp32 chunk
#: is loaded asynchronously (the default loads k into registers and writes it to shared memory twice a chunk).
#: "d256-bv64", "d256-bt32": 16-bit D=256 with the chunk's scores ``q · kᵀ`` recomputed for 4 V blocks instead
#: of 8, or over chunks of 32 tokens (half their cost a token, on mma.sync); PERF.md, "D=256 in 16 bits".
#: "v64-bv32": 16-bit K=128 heads with V <= 64 in V blocks of 32, so that a batch whose one-block-a-head chains
#: do not fill the GPU (B=4 H=16: 64 chains on 132 SMs) runs one pass of twice the chains instead of the chained
#: launch (PERF.md, "K=128, V=64"). A change may hold ``max_V``: it applies to calls with V up to that only.
#: "d256-states": 16-bit D=256 in two kernels (``states.py``): the states before every 128 tokens written by one
#: (the sequential chain, 16 programs a head), every 128-token block's output computed at once by the other;
#: normalising too, ``q · z`` as the fused kernel's adopted wide product. Packed sequences (cu_seqlens) keep the
#: fused kernel (PERF.md, "D=256 by materialised chunk states"). "d256-states-cuda": the same with ``q · z`` on the
#: CUDA cores and the output kernel's K loop not pipelined: the H200 found that form, pipelined, 1.6-3.1e-2 off
#: when normalising (right under the interpreter); an H100 found it right unpipelined (``states.output_stages``).
#: "d256-states-bv128": the adopted states launch with output V blocks of 128 (half the recomputed scores, one
#: program an SM at 229-236 registers); "d256-states-s64": a state every 64 tokens and V blocks of 128 (120
#: registers, two programs an SM, twice the states' traffic): PERF.md, "D=256 by materialised chunk states".
#: "fp32-norm-wide": the adopted 16-bit normaliser form (``q · z`` through a 64-column operand, the key sum as
#: ``kᵀ · e₀``) on fp32 TF32 launches of K <= 128, whose CUDA-core sums spill 772 bytes at D=128 (240 with it):
#: TF32 is the precision those calls asked for, and z is split into two TF32 parts (PERF.md, "fp32 normalising").
#: "fp32-d256-states": "d256-states"'s launch for fp32 at D=256, whose one-pass launch (BT 32) runs on mma.sync and
#: spills (300 bytes at TF32 normalising, 5,200 at 3xTF32 raw): the states kernels compile to wgmma without spill
#: at TF32 (PERF.md, "fp32 at D=256").
#: "fp32-d256-bv128", "fp32-d256-bv128-s2": the adopted fp32 states launch under TF32 with output V blocks of 128
#: (half the recomputed scores and half the re-reads of q and k), unpipelined (96 KiB of shared memory, but 254
#: registers at 8 warps: one program an SM) or in two stages (192-208 KiB); no spill at TF32 either way (PERF.md,
#: "fp32 at D=256").
#: "states-loop": every D=256 states launch (16-bit, TF32, 3xTF32) with the states kernel's two chunks a stored
#: state walked as a loop (``Launch.states_loop``): one set of pipeline buffers instead of one a chunk, so its
#: programs (a [64, 64] tile of a head's state each, 1,024 at B4H16, each walking every chunk of its head) fit two
#: an SM at fp32 (96 KiB against 208; 3xTF32 96 against 160) and four at 16 bits (48 against 104). "fp32-d256-
#: bv128-loop": that and "fp32-d256-bv128" together (PERF.md, "fp32 at D=256").
#: "fp32-d128-states": the states kernels for fp32 TF32 at K=128 (whose fused launch waits each chunk for k's
#: synchronous load: TF32 products need k in two shared layouts), every tile copied asynchronously; the states'
#: traffic is a quarter of the inputs' again each way. The normaliser's sums on the CUDA cores, as the fused TF32
#: default keeps them (the wide form's error at TF32 was 3.5e-4 against 3e-7: "fp32-norm-wide").
#: "fp32-d256-kvt": the fp32 D=256 states launches with k and v copied token-contiguous first
#: (``Launch.kv_t``): an H100 found the states kernel bound by L1 (86.8% busy, DRAM 18%), whose TF32 tiles
#: Triton copies transposed 4 bytes at a time; from the copies the tiles come 16 bytes a copy, K-major as TF32
#: reads them, and the output kernel's stored states and ``scores · v`` likewise, for 2 x T·D·4 bytes a head and
#: sequence written and read once more. "fp32-d256-kvt-loop": that with "states-loop"'s one set of buffers (96 KiB,
#: two programs an SM, where the L1 the 4-byte copies filled is freed). "fp32-d128-kvt": "fp32-d128-states" so
#: (PERF.md, "fp32 at D=256").
#: "fp32x3-d256-cuda": 3xTF32 D=256 normalising with the normaliser's sums on the CUDA cores: the wide form's
#: products, three a sum at 3xTF32, spill 3,748 bytes a thread in the output kernel (sm_90a, K=V=256 BV 64), the
#: CUDA-core sums 1,008 (raw: 660; both with k and v copied, ``kv_t``), and an H100 took 16.1 ms normalising against
#: 4.3 raw. "fp32x3-d256-bv32": that in output V blocks of 32 (736 bytes; twice the recomputed scores), which
#: changes raw calls too; "fp32x3-d256-cuda" leaves them as they are (PERF.md, "fp32 at D=256").
#: "fp32x3-d128-states": 3xTF32 at K <= 128 through the states kernels as D=256 runs them (k and v
#: token-contiguous, the sums on the CUDA cores), where the fused kernel spills 1,152 bytes a thread raw and 1,580
#: normalising at K=V=128 (sm_90a): the output kernel spills 672 and 932, the states kernel none (PERF.md, "3xTF32
#: at K <= 128").
#: "norm-mid-w8": 16-bit D=128 at 8 warps with ``q · z`` through a 32-column operand, half the wide form's added
#: tensor work: that form was wrong at 4 warps and right at 8 on an H100 (PERF.md, "norm-mid at 8 warps").
#: "d128-s2": 16-bit D=128 one-pass launches in two stages (98 KiB of shared memory, two programs an SM, where three
#: stages' 138 KiB hold one): K=128 V=256 at B4H16 makes 256 programs, two waves at one an SM (1.86x its floor
#: against V=128's 1.42x on an H100); PERF.md, "The generality grid's launches".
#: "lookback-512", "lookback-1024": 16-bit D <= 128 chained launches with the decoupled look-back
#: (``Launch.prefix``) and segments of at most 512 or 1024 tokens, short enough that the segments in flight fit
#: in L2 for phase B's re-read, where the serial chain's one-by-one hand-on limits how short they can be; PERF.md,
#: "The decoupled look-back". "lookback-512-sums": the same with no prefix published but the first segment's, so
#: that every segment sums its predecessors' own states: the look-back's summing path, which the interpreter
#: (programs one after another, every predecessor done) never takes; a check, not a candidate for speed.
#: "d256-stored-512", "d256-stored-1024": 16-bit D=256 as segments of 512 or 1024 tokens, each segment's prefix
#: state stored by ``states.py``'s states kernel (``Launch.prefix`` 3), then the fused kernel's chunk loop over
#: every segment at once (BV 64, 8 warps; "-bv32": V blocks of 32, which compile without spill): the states
#: launch's stored states every 128 tokens, four to eight times fewer, where the output is computed chunk by chunk
#: rather than a block at once; PERF.md, "D=256 from stored segment prefixes". "stored-1024": the same for 16-bit
#: D <= 128 calls that would chain (one long sequence): segments of 1024 from stored prefixes instead of the serial
#: chain, k and v read by the states pass, then the segments with no wait.
CANDIDATES: dict[str, dict[tuple[int, str], dict]] = {
    "norm-wide": {(bk, "16"): dict(norm_mma="wide") for bk in (64, 128, 256)},
    "fp32-kt": {(64, "tf32"): dict(kt=True), (128, "tf32"): dict(kt=True, BV=32)},
    "d256-bv64": {(256, "16"): dict(BV=64)},
    "d256-bt32": {(256, "16"): dict(BT=32)},
    "v64-bv32": {(128, "16"): dict(BV=32, max_V=64)},
    "d256-states": {(256, "16"): dict(states=2, BV=64, num_warps=8, num_stages=2, norm_mma="wide")},
    "d256-states-cuda": {(256, "16"): dict(states=2, BV=64, num_warps=8, num_stages=1, norm_mma="")},
    "d256-states-bv128": {(256, "16"): dict(states=2, BV=128, num_warps=8, num_stages=2, norm_mma="wide")},
    "d256-states-s64": {(256, "16"): dict(states=1, BV=128, num_warps=8, num_stages=2, norm_mma="wide")},
    "fp32-norm-wide": {(bk, "tf32"): dict(norm_mma="wide") for bk in (64, 128)},
    "fp32-d256-states": {(256, kind): dict(BT=64, states=2, BV=64, num_warps=8, num_stages=2, norm_mma="wide")
                         for kind in ("tf32", "tf32x3")},
    "fp32-d256-bv128": {(256, "tf32"): dict(BT=64, states=2, BV=128, num_warps=8, num_stages=1, norm_mma="wide")},
    "fp32-d256-bv128-s2": {(256, "tf32"): dict(BT=64, states=2, BV=128, num_warps=8, num_stages=2,
                                               norm_mma="wide")},
    "states-loop": {(256, kind): dict(states_loop=True) for kind in ("16", "tf32", "tf32x3")},
    "fp32-d256-bv128-loop": {(256, "tf32"): dict(BT=64, states=2, BV=128, num_warps=8, num_stages=1,
                                                 norm_mma="wide", states_loop=True)},
    "fp32-d128-states": {(128, "tf32"): dict(BT=64, states=2, BV=64, num_warps=8, num_stages=2, norm_mma="",
                                             states_loop=True)},
    "fp32-d256-kvt": {(256, kind): dict(kv_t=True) for kind in ("tf32", "tf32x3")},
    "fp32-d256-kvt-loop": {(256, kind): dict(kv_t=True, states_loop=True) for kind in ("tf32", "tf32x3")},
    "fp32-d128-kvt": {(128, "tf32"): dict(BT=64, states=2, BV=64, num_warps=8, num_stages=2, norm_mma="",
                                          kv_t=True)},
    "fp32x3-d256-cuda": {(256, "tf32x3"): dict(norm_mma="")},
    "fp32x3-d256-bv32": {(256, "tf32x3"): dict(norm_mma="", BV=32)},
    "fp32x3-d128-states": {(bk, "tf32x3"): dict(BT=64, states=2, BV=64, num_warps=8, num_stages=2, norm_mma="",
                                                kv_t=True) for bk in (64, 128)},
    "norm-mid-w8": {(128, "16"): dict(norm_mma="mid", num_warps=8)},
    "d128-s2": {(128, "16"): dict(num_stages=2)},
    "lookback-512": {(bk, "16"): dict(prefix=1, L=512) for bk in (64, 128)},
    "lookback-1024": {(bk, "16"): dict(prefix=1, L=1024) for bk in (64, 128)},
    "lookback-512-sums": {(bk, "16"): dict(prefix=2, L=512) for bk in (64, 128)},
    "d256-stored-512": {(256, "16"): dict(prefix=3, L=512, states=0, BV=64, num_warps=8, num_stages=2)},
    "d256-stored-1024": {(256, "16"): dict(prefix=3, L=1024, states=0, BV=64, num_warps=8, num_stages=2)},
    "d256-stored-512-bv32": {(256, "16"): dict(prefix=3, L=512, states=0, BV=32, num_warps=8, num_stages=2)},
    "stored-1024": {(bk, "16"): dict(prefix=3, L=1024) for bk in (64, 128)},
}
TRYING = ""
#: Candidates an sm_90 GPU found right on every family they change and faster on the rows that decided (where one
#: was slower on a row it was timed on, the note below says so): their changes are made in ONE_PASS and CHAINED
#: (PERF.md says which run decided). "norm-wide": an H100's
#: la-check (27 cases of it, every family) and targets benchmark, 2026-12-06: 0.48 ms against 0.79 at bf16 D=128
#: T=16k, 1.20 against 1.92 at D=256. "fp32-kt" was slower on both its rows there, and stays a candidate.
#: "d256-bv64": the same H100, 2026-12-06 (26 la-check cases; K=V=256 B2H8 T=16k bf16): 0.815 ms against 0.944
#: raw, 1.035 against 1.195 normalising. "d256-bt32" was slower on both (1.50, 1.68), and stays a candidate.
#: "v64-bv32": the same H100 (4 la-check cases; K=128 V=64 B4H16 T=16k bf16): 0.324 ms against 0.418 raw, 0.396
#: against 0.434 normalising. "d256-states": an H100, 2026-12-06 (18 la-check cases, then the 61 of every K=256
#: family with it as the default; K=V=256 B2H8 T=16k bf16): 0.685 ms against 0.804 raw, 0.982 against 1.025
#: normalising; "d256-states-cuda" slower on both (0.825, 1.145), and stays a candidate. "d256-states-bv128": an
#: H100, 2026-12-07 (18 la-check cases; the same row): 0.576 ms against 0.685 raw (fla 0.672), 0.773 against 0.989
#: normalising; at B4H16 T=4k normalising 0.423 against 0.520 (V=128), 0.778 against 0.993 (V=256).
#: "d256-states-s64" was between them (0.696, 0.866), "norm-mid-w8" slower on every row (0.729 against 0.477 ms
#: normalising at D=128, 0.513 against 0.389 raw): both stay candidates. "fp32-norm-wide" is faster (2.070 against
#: 2.674 ms, fla 3.959) but its error against float64 is 3.5e-4 where the CUDA-core sums' and fla's are 3e-7: not
#: adopted (PERF.md). "fp32-d256-states": an H100, 2026-12-07 (8 la-check cases; fp32 K=256 B4H16 T=4k, V 64 / 128
#: / 256): TF32 raw 0.685 / 1.267 / 2.334 ms against 1.063 / 2.112 / 4.179, normalising 0.838 / 1.541 / 2.989
#: against 2.229 / 4.413 / 8.771; 3xTF32 3.7 to 13 times faster (4.237 against 56.671 raw at V=256), its error
#: against float64 lower (1.2e-7 against 1.7e-7 normalising). "fp32-d256-bv128-s2": an H100, 2026-12-07, eleventh
#: batch (4 la-check cases; the same rows under TF32): raw 0.686 / 1.208 / 2.280 ms against 0.687 / 1.264 / 2.336,
#: normalising 0.847 / 1.447 / 2.795 against 0.848 / 1.544 / 2.990; "fp32-d256-bv128" (one stage) between them,
#: "states-loop" and "fp32-d256-bv128-loop" slower on every row (the states kernel is bound by L1, whose 4-byte
#: transposing copies a second program an SM only crowds), "fp32-d128-states" slower (3.822 against 2.651 ms
#: normalising, fp32 D=128 B4H16 T=16k): candidates all (PERF.md, "fp32 at D=256"). "fp32-d256-kvt": an H100,
#: 2026-12-07, twelfth batch (8 la-check cases; the same rows): TF32 normalising 0.726 / 0.946 / 1.504 ms against
#: 0.843 / 1.476 / 2.854 (fla 1.365 / 1.708 / 2.440), raw 0.709 / 0.927 ms against 0.689 / 1.225 at V 64 / 128
#: (V 64 raw 3% slower); 3xTF32 raw 1.089 / 1.792 / 3.286 against 1.169 / 2.205 / 4.309, 3xTF32 normalising 1-3%
#: slower at V 64 / 128 (its spill, which "fp32x3-d256-cuda" removes).
#: "fp32-d256-kvt-loop" was wrong once there (a large normalising case with states, o 5e-3 off): a candidate
#: still, and "fp32-d128-kvt" no faster (2.755 against 2.677 ms): one too. "fp32x3-d256-cuda": an H100,
#: 2026-12-07, thirteenth batch (2 la-check cases; 3xTF32 K=256 B4H16 T=4k normalising, V 64 / 128 / 256): 1.352 /
#: 2.318 / 4.257 ms against 4.323 / 8.175 / 15.936 (fla, at TF32: 1.363 / 1.704 / 2.429), its error against float64
#: the same 1.2e-7; "fp32x3-d256-bv32" between them (1.670 / 2.989 / 5.588, raw 22-34% slower): a candidate.
#: "fp32x3-d128-states": an H200, 2026-12-07 (10 la-check cases; 3xTF32 B4H16 T=16k, K 64 / 128, V 64 / 128 /
#: 256): normalising 1.616 / 2.441 / 4.661 ms against 2.329 / 3.218 / 6.411 at K=64, 2.663 / 4.863 / 9.287
#: against 4.962 / 7.171 / 14.059 at K=128; raw 1.366 / 2.156 / 4.117 against 1.783 / 2.460 / 4.898 (K=64),
#: 2.229 / 3.970 / 7.528 against 3.156 / 4.728 / 9.142 (K=128); its error against float64 the same (2.4-4.4e-7),
#: its workspace 0.8-1.25x the inputs (the fused launch's: none).
ADOPTED: tuple[str, ...] = ("norm-wide", "d256-bv64", "v64-bv32", "d256-states", "d256-states-bv128",
                            "fp32-d256-states", "fp32-d256-bv128-s2", "fp32-d256-kvt", "fp32x3-d256-cuda",
                            "fp32x3-d128-states")


def change_of(name: str, key: tuple[int, str], V: int | None = None, packed: bool = False) -> dict:
    """The launch fields candidate ``name`` changes for table key ``key`` (BK, kind) and calls with ``V`` value
    columns (None: any V the change may apply to); empty where it changes nothing, and for ``packed`` sequences
    where it runs the states kernels, which take none."""
    change = dict(CANDIDATES[name].get(key, {})) if name else {}
    max_V = change.pop("max_V", None)
    if (max_V is not None and V is not None and V > max_V) or (packed and _of_states(change)):
        return {}
    return change


def _adopt(names: tuple[str, ...]) -> None:
    for name in names:
        for key, change in CANDIDATES[name].items():
            if "max_V" in change:  # a change for some V only: _plan applies it call by call
                continue
            ONE_PASS[key] = _one_pass(dataclasses.replace(ONE_PASS[key], **change))
            CHAINED[key] = dataclasses.replace(CHAINED[key], **change)
            if not _of_states(change):  # the states kernels have no packed form: packed calls keep the fused
                PACKED_ONE_PASS[key] = _one_pass(dataclasses.replace(PACKED_ONE_PASS[key], **change))
                PACKED_CHAINED[key] = dataclasses.replace(PACKED_CHAINED[key], **change)


def _of_states(change: dict) -> bool:
    """Whether a candidate's change is to the states kernels' launch (which packed calls never run)."""
    return bool(change.get("states") or change.get("states_loop") or change.get("kv_t"))


def _one_pass(launch: Launch) -> Launch:
    """A whole-sequence launch: a change's segment length ``L`` and look-back are the chained launch's alone."""
    return launch if launch.L is None and not launch.prefix else dataclasses.replace(launch, L=None, prefix=0)


#: The launches of packed sequences (cu_seqlens): the tables with every adopted change but those that run the states
#: kernels, which have no packed form. A states launch's tiles would not fit the fused kernel (fp32 K=V=256 at BT 64
#: BV 64: 352 KiB of shared memory; bf16 at BV 128: 226 KiB and 444-568 bytes of spill a thread, at BV 64 176 KiB
#: and 60-132): packed D=256 calls run the fused launch that was the default before the states kernels.
PACKED_ONE_PASS: dict[tuple[int, str], Launch] = dict(ONE_PASS)
PACKED_CHAINED: dict[tuple[int, str], Launch] = dict(CHAINED)
_adopt(ADOPTED)
# Under the interpreter: small chunks and V blocks, so small test sizes still cross several of each.
_INTERPRETER = Launch(None, 16, 16, 4, 1)


@contextlib.contextmanager
def normaliser_on_tensor_cores(on: bool = True, parts: str = "both"):
    """Within the block, the dispatch's launches run the normaliser's sums (``parts``: "both", "qz" or "ksum") on
    the tensor cores (or not)."""
    global NORM_MMA, NORM_MMA_PARTS
    old, NORM_MMA, NORM_MMA_PARTS = (NORM_MMA, NORM_MMA_PARTS), on, parts
    try:
        yield
    finally:
        NORM_MMA, NORM_MMA_PARTS = old


@contextlib.contextmanager
def trying(name: str):
    """Within the block, the dispatch's launches take the changes of candidate ``name`` (:data:`CANDIDATES`)
    where it has any for the call; "" for none."""
    global TRYING
    if name and name not in CANDIDATES:
        raise ValueError(f"no candidate {name!r} (candidates: {', '.join(CANDIDATES)})")
    old, TRYING = TRYING, name
    try:
        yield
    finally:
        TRYING = old


def applies(name: str, K: int, kind: str, normalize: bool, V: int | None = None) -> bool:
    """Whether candidate ``name`` (:data:`CANDIDATES`) changes the launch of a call with head sizes ``K`` and
    ``V`` (None: some V), inputs of ``kind`` ("16", or fp32's dot precision) and the normaliser or not: it changes
    that key (K's tile, kind) at that V, and a change of the normaliser's form alone only where there is a
    normaliser (a change that also moves tiles or kernels, as "d256-states" does, applies to both)."""
    change = change_of(name, (max(64, next_power_of_2(K)), kind), V)
    return bool(change) and (normalize or set(change) - {"norm_mma", "max_V"} != set())


def settings() -> tuple:
    """What a launch depends on beyond the call's tensors: the module's switches (interpreter, normaliser form,
    candidate tried) and the fp32 precision torch asks for. Part of the key under which a call's plan is kept."""
    return INTERPRET, NORM_MMA, NORM_MMA_PARTS, TRYING, torch.get_float32_matmul_precision()


def cdiv(a: int, b: int) -> int:
    """``ceil(a / b)`` of host integers (``triton.cdiv`` is a constexpr function: microseconds a call)."""
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    """The smallest power of two >= ``n`` (0 for 0), as ``triton.next_power_of_2``, in host integers."""
    return 1 << (n - 1).bit_length() if n > 0 else 0


def contiguous_strides(*shape: int) -> tuple[int, ...]:
    """The strides of ``torch.empty(*shape)`` (a size 0 counts as 1, as torch counts it), without making it."""
    strides, n = [], 1
    for size in reversed(shape):
        strides.append(n)
        n *= max(size, 1)
    return tuple(reversed(strides))


class PlanCache(dict):
    """key -> plan of the calls seen (a training loop repeats a few shapes); emptied when a new key finds ``size``
    kept. A dict, so a hit is a plain ``get``."""

    def __init__(self, size: int = 256):
        super().__init__()
        self.size = size

    def put(self, key, plan) -> None:
        if len(self) >= self.size:
            self.clear()
        self[key] = plan


def _tried(key: tuple[int, str], launch: Launch, V: int, packed: bool = False) -> Launch:
    """``launch`` with the changes of the candidate tried and of the adopted ones that apply call by call (for
    ``packed`` sequences, none that runs the states kernels)."""
    change = {}
    per_call = [n for n in ADOPTED if any("max_V" in c for c in CANDIDATES[n].values())]  # the rest: in the tables
    for name in per_call + [TRYING]:
        change.update(change_of(name, key, V, packed))
    return dataclasses.replace(launch, **change) if change else launch


def _norm_mma() -> str:
    return NORM_MMA_PARTS if NORM_MMA else ""


def float32_precision() -> str:
    """The fp32 ``tl.dot`` input precision that ``torch.get_float32_matmul_precision()`` asks for."""
    return PRECISIONS[torch.get_float32_matmul_precision()]


@functools.cache
def _sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def plan(K: int, V: int, dtype: torch.dtype, N: int, H: int, lengths: list[int], sms: int,
         precision: str | None = None, packed: bool = False) -> Launch:
    """The launch for ``N`` sequences of ``lengths`` tokens (one entry each, or one for all when they are equal)
    with ``H`` heads of sizes ``K``, ``V`` and inputs of ``dtype``, on ``sms`` multiprocessors; ``packed``: the
    sequences are packed (cu_seqlens), which the fused kernel alone takes."""
    launch = _plan(K, V, dtype, N, H, lengths, sms, precision, packed)
    return dataclasses.replace(launch, norm_mma=_norm_mma()) if NORM_MMA else launch


def _plan(K, V, dtype, N, H, lengths, sms, precision, packed=False) -> Launch:
    BK = max(64, next_power_of_2(K))
    precision = precision or float32_precision()
    kind = precision if dtype == torch.float32 else "16"
    whole, chain = (PACKED_ONE_PASS, PACKED_CHAINED) if packed else (ONE_PASS, CHAINED)
    one = _tried((BK, kind), whole[(BK, kind)], V, packed)
    # segments from the prefixes a states pass stores (every segment at once) take the place of whatever would
    # store states or chain segments otherwise
    stored = one.prefix == 3
    one = _one_pass(one)
    chains = N * H * cdiv(V, min(one.BV, next_power_of_2(V)))
    fills = one_pass_fills(chains, sms, lengths if len(lengths) > 1 else None, LOOKBACK_COST)
    if stored and (whole[(BK, kind)].states or not fills):  # the candidate's segments, however few the chains
        return dataclasses.replace(_tried((BK, kind), chain[(BK, kind)], V, packed), states=0, precision=precision)
    if one.states or fills:  # every block at once, or whole sequences that keep the GPU busy: nothing to chain
        return dataclasses.replace(one, precision=precision)
    chained = _tried((BK, kind), chain[(BK, kind)], V, packed)
    longest = max(lengths, default=0)
    nv = cdiv(V, min(chained.BV, next_power_of_2(V)))
    tokens = sum(lengths) * (N if len(lengths) == 1 else 1)
    # about two programs per SM: segments of tokens · chains / (2 · sms), a power of two between the bounds
    want = tokens * H * nv // (2 * sms)
    L = max(MIN_SEGMENT, min(chained.L, 1 << max(want, 1).bit_length() - 1))
    if longest <= L:  # one segment a sequence: nothing to chain
        return dataclasses.replace(one, precision=precision)
    return dataclasses.replace(chained, L=L, precision=precision)


def launch_for(q: torch.Tensor, v: torch.Tensor, lengths: list[int] | None = None, *, fused: bool = False) -> Launch:
    """The launch for inputs ``q`` [B, T, H, K], ``v`` [B, T, H, V], packed as sequences of ``lengths`` if given;
    ``fused``: the fused kernel's launch even where the plan would run the states kernels (the launch packed calls
    take, for a call whose states launch's workspace does not fit on the device)."""
    B, T, H, K = q.shape
    fused = fused or lengths is not None  # the tables without the states changes
    if INTERPRET or not q.is_cuda:  # small tiles, with the kernel's forms the GPU's launch would take
        precision = float32_precision()
        kind = precision if q.dtype == torch.float32 else "16"
        change = {}
        for name in ADOPTED + ((TRYING,) if TRYING else ()):
            change.update(change_of(name, (max(64, next_power_of_2(K)), kind), v.shape[-1], fused))
        # the interpreter's own tiles (chunks of 16: small sizes cross several chunks and stored states)
        launch = dataclasses.replace(_INTERPRETER, precision=precision,
                                     **{f: x for f, x in change.items() if f not in ("BT", "BV", "L")})
        launch = dataclasses.replace(launch, norm_mma=_norm_mma()) if NORM_MMA else launch
        if launch.prefix == 3:  # segments from stored prefixes: the interpreter's short ones
            launch = dataclasses.replace(launch, L=2 * _INTERPRETER.BT)
    else:
        N = B if lengths is None else len(lengths)
        launch = plan(K, v.shape[-1], q.dtype, N, H, [T] if lengths is None else lengths,
                      _sm_count(q.device.index or 0), packed=fused)
    # packed sequences keep the fused kernel, and its chain (a states pass has no packed form; no launch planned
    # for them runs the states kernels: change_of)
    if fused and launch.prefix == 3:
        launch = dataclasses.replace(launch, prefix=0)
    return launch
