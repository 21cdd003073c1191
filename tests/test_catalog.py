"""The lesson catalog (``kernels/catalog.py``) says what the lessons are: each entry agrees with the lesson's source,
its checks module, the views and the sizes it uses, and an unknown lesson is refused by name."""

import importlib
import re

import pytest

import kernels.viz
from grader.course import SOLUTIONS, source_text
from kernels import catalog
from kernels.checks.spec import lesson_exercises
from kernels.device import _SIZES

IDS = catalog.lesson_ids()


def test_ids_are_numbered_in_order_and_every_source_is_listed():
    assert [les.number for les in catalog.LESSONS] == [f"{i:02d}" for i in range(len(IDS))]
    assert sorted(p.stem for p in SOLUTIONS.glob("[0-9][0-9]_*.py")) == IDS


def test_lessons_resolve_by_id_number_or_file_and_an_unknown_one_is_named():
    assert catalog.lesson_ids(["03", "00_setup", "course/03_tiled_sram.ipynb"]) == ["03_tiled_sram", "00_setup"]
    with pytest.raises(catalog.UnknownLesson, match="no lesson '77_nothing'.*00_setup"):
        catalog.lesson_ids("77_nothing")


@pytest.mark.parametrize("lesson", catalog.LESSONS, ids=IDS)
def test_entry_agrees_with_the_lesson(lesson):
    source = source_text(SOLUTIONS / f"{lesson.id}.py")
    assert f"# # {lesson.number} · {lesson.title}\n" in source, "the title is the lesson's heading"
    assert set(lesson_exercises(lesson.id)) == {f"{lesson.id}.{name}" for name in lesson.exercises}
    for name, objects in lesson.exercises.items():
        assert len(objects) == len(lesson_exercises(lesson.id)[f"{lesson.id}.{name}"].args), name
        calls = re.findall(rf"""^check\(\s*["']{re.escape(lesson.id)}\.{name}["']\s*,\s*([^)]*)\)""", source, re.M)
        assert calls, f"no check cell for {name}"
        for call in calls:
            assert [a.strip() for a in call.split(",") if "=" not in a] == list(objects), (name, call)
    for view in lesson.widgets:
        assert view in kernels.viz.__all__ and re.search(rf"from kernels\.viz import [\w, ]*\b{view}\b", source), view
    if lesson.sizes is not None:
        assert lesson.sizes in _SIZES and f'sizes("{lesson.sizes}")' in source
    importlib.import_module(f"kernels.{lesson.topic}")
