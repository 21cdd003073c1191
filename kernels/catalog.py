"""The lessons, in order: the one list that the course build, the checks, the zoo, the grader, the tests and the
scripts read.

A lesson's ``id`` is its file stem in ``solutions/``, its nbgrader assignment id, its notebook's name and the
prefix of its exercise ids (``"00_setup.vector_add"``); its exercises are registered by
``kernels/checks/lessons/l<id>.py``. ``title`` is the lesson's heading (``# NN · <title>``); ``summary``, what
the learner writes, and ``outline``, what the notebook covers, make the lesson tables of ``README.md`` and
``course/README.md`` (the course build writes them). ``exercises`` maps each exercise to the names of the objects
its check cell passes, ``widgets`` each ``kernels.viz`` view the widget cells show to its label. ``topic`` is the
package under ``kernels/`` the lesson builds on, ``sizes`` the key of :func:`kernels.device.sizes` it uses
(``None``: none).
"""

from __future__ import annotations

import pathlib
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["Lesson", "LESSONS", "UnknownLesson", "lesson", "lesson_ids", "exercise_objects"]


@dataclass(frozen=True)
class Lesson:
    id: str
    title: str
    summary: str
    outline: str
    topic: str
    exercises: dict[str, tuple[str, ...]]
    widgets: dict[str, str]
    sizes: str | None

    @property
    def number(self) -> str:
        return self.id.split("_", 1)[0]


LESSONS: tuple[Lesson, ...] = (
    Lesson(
        id="00_setup",
        title="Setup: what runs where, and your first Triton kernel",
        summary="vector add: masks, grids, program ids",
        outline="what runs where; programs, blocks and masks; a vector add and a 2-D strided kernel; how checks grade",
        topic="vector_add",
        exercises={"vector_add": ("add_kernel",), "add_bias": ("add_bias_kernel",)},
        widgets={"grid_explorer": "launch-grid explorer"},
        sizes="vector_add",
    ),
    Lesson(
        id="01_memory_hierarchy",
        title="The memory hierarchy: registers, SRAM, L2 and HBM",
        summary="a copy kernel near `torch`'s bandwidth; a strided copy",
        outline=("copy bandwidth, a grid-stride copy (fast on a GPU), a column read and its sector count; L2 cliff, "
                 "coalescing, roofline"),
        topic="memory",
        exercises={"copy": ("copy_kernel",), "copy_speed": ("copy_kernel",), "column": ("column_kernel",),
                   "sector_bytes": ("sector_bytes",)},
        widgets={"working_set_view": "L2 cliff", "coalescing_view": "coalescing"},
        sizes="memory",
    ),
    Lesson(
        id="02_naive_hbm_loops",
        title="Naive HBM-bound loops: linear attention as a recurrence",
        summary="linear attention as a recurrence: state in HBM, then on-chip",
        outline=("linear attention as a recurrence: the state through HBM every step, then in registers; byte counts "
                 "and floors"),
        topic="recurrent",
        exercises={"naive": ("naive_kernel",), "fused": ("fused_kernel",), "fused_speed": ("fused_kernel",),
                   "bytes": ("naive_bytes", "fused_bytes")},
        widgets={"recurrence_stepper": "recurrence step-through"},
        sizes="recurrent",
    ),
    Lesson(
        id="03_tiled_sram",
        title="Tiled SRAM kernels: matrix multiply with `tl.dot`",
        summary="tiled matmul with `tl.dot`, tile sizes from reuse numbers",
        outline=("a tiled matmul with `tl.dot` and grouped ordering; counting the reuse; choosing tile sizes; TF32 vs "
                 "IEEE"),
        topic="matmul",
        exercises={"tiled_matmul": ("tiled_matmul_kernel",), "tile_traffic": ("tile_traffic",),
                   "tile_choice": ("TILES", "tiled_matmul_kernel")},
        widgets={"tile_explorer": "tile explorer"},
        sizes="matmul",
    ),
    Lesson(
        id="04_chunked_linear_attention",
        title="Chunked linear attention in Triton",
        summary="chunked linear attention: torch, intra-chunk, fused; the chunk size that beats fla on a GPU",
        outline=("the chunked algorithm in torch, the intra-chunk kernel, the fused chunked forward and its chunk "
                 "size, fast on a GPU; the benchmark"),
        topic="linear_attention",
        exercises={"chunked_torch": ("chunked_attention_torch",), "intra_chunk": ("intra_chunk_kernel",),
                   "chunked_fwd": ("chunked_attention_kernel",),
                   "chunked_speed": ("CHUNK", "chunked_attention_kernel")},
        widgets={"chunk_flow": "chunk and state flow", "access_explorer": "access explorer"},
        sizes="linear_attention",
    ),
    Lesson(
        id="05_ptx_export_rust",
        title="Your kernel outside Python: PTX, the driver API and Rust",
        summary="ahead-of-time PTX, a manifest-driven launch, the launch grid in Rust",
        outline=("your kernel compiled ahead of time to PTX: predicting its launch configuration, a manifest-driven "
                 "launch through the driver API, the Rust launcher and its launch grid, written by you"),
        topic="export",
        exercises={"predict_launch": ("predict_launch",), "build_launch": ("build_launch",),
                   "launch_grid": ("YOUR_RUST",)},
        widgets={"ptx_explorer": "PTX explorer"},
        sizes="linear_attention",
    ),
    Lesson(
        id="06_profile_compile_autotune",
        title="Look inside: read the compiler, profile, autotune",
        summary="read the compiler, find and fix a planted slow load, profile, autotune",
        outline=("one kernel through the compiler's stages (TTIR, TTGIR, LLVM IR, PTX, SASS) without a GPU: registers, "
                 "spills, shared memory, load widths; a planted slow load found in the PTX and fixed; proton and "
                 "Nsight Compute on the GPU; an autotuning space whose winner is timed again"),
        topic="profile",
        exercises={"predict_shared": ("predict_shared",), "slow_instruction": ("SLOW_INSTRUCTION",),
                   "fixed": ("fixed_matmul_kernel",), "fixed_speed": ("fixed_matmul_kernel",),
                   "autotune_space": ("SPACE",)},
        widgets={"ir_explorer": "IR explorer", "autotune_scatter": "autotune scatter"},
        sizes=None,
    ),
    Lesson(
        id="07_backward",
        title="The backward pass of chunked linear attention",
        summary="the backward pass: torch, a dq kernel, a dk/dv kernel walking backwards, an `autograd.Function`",
        outline=("the gradients of chunked linear attention: checked against autograd, in torch, a dq kernel walking "
                 "the chunks forwards, a dk/dv kernel walking them backwards, an `autograd.Function` that keeps only "
                 "its inputs; timed against fla's backward on a GPU"),
        topic="linear_attention",
        exercises={"backward_torch": ("chunked_backward_torch",), "dq": ("dq_kernel",), "dkdv": ("dkdv_kernel",),
                   "autograd": ("linear_attention",), "backward_speed": ("dq_kernel", "dkdv_kernel")},
        widgets={"backward_sweeps": "the two sweeps"},
        sizes="linear_attention",
    ),
)

_BY_ID = {les.id: les for les in LESSONS}


class UnknownLesson(KeyError):
    """A lesson id or number that is not in the catalog; the message lists the known ones."""

    def __str__(self) -> str:
        return str(self.args[0])


def lesson(name: str) -> Lesson:
    """The catalog entry of ``name``: a lesson id (``"00_setup"``), its number (``"00"``) or a file named after it."""
    stem = pathlib.Path(name).stem
    hits = [les for les in LESSONS if stem in (les.id, les.number)]
    if len(hits) != 1:
        raise UnknownLesson(f"no lesson {name!r} in the catalog (kernels/catalog.py); known: "
                            f"{', '.join(_BY_ID)}")
    return hits[0]


def lesson_ids(names: Iterable[str] | str | None = None) -> list[str]:
    """The ids of ``names`` (ids, numbers or file names), in the order given, without repeats; ``None``: every
    lesson, in course order."""
    if names is None:
        return list(_BY_ID)
    if isinstance(names, str):
        names = [names]
    return list(dict.fromkeys(lesson(n).id for n in names))


def exercise_objects() -> dict[str, tuple[str, ...]]:
    """Exercise id (``"<lesson>.<name>"``) -> the names of the objects its check cell passes, every lesson."""
    return {f"{les.id}.{name}": objects for les in LESSONS for name, objects in les.exercises.items()}
