"""The lesson-source rules the course build enforces, each shown failing on a source that breaks it."""

import pytest

from grader.course import SOLUTIONS, CourseError, graded_cells, lesson_ids, solution_notebook, source_text
from kernels.catalog import LESSONS

MD = '# %% [markdown] nbgrader={{"grade": false, "grade_id": "{gid}", "locked": {locked}, "schema_version": 3, ' \
     '"solution": false}}\n# {text}\n'
CODE = '# %% nbgrader={{"grade": false, "grade_id": "{gid}", "locked": true, "schema_version": 3, ' \
       '"solution": false}}{tags}\n{src}\n'
SOL = '# %% nbgrader={{"grade": false, "grade_id": "{gid}", "locked": false, "schema_version": 3, ' \
      '"solution": true}}\n{src}\n'
TEST = '# %% nbgrader={{"grade": true, "grade_id": "{gid}", "locked": true, "points": {points}, ' \
       '"schema_version": 3, "solution": false}}\n{src}\n'

SETUP = "import kernels\nfrom kernels.checks import check\n\nprint(kernels.describe())"
ANSWER = "def f(x):\n    ### BEGIN SOLUTION\n    return x\n    ### END SOLUTION"
CHECKS = ('check("99_demo.f", f)\n### BEGIN HIDDEN TESTS\ncheck("99_demo.f", f, hidden=True)\n'
          '### END HIDDEN TESTS')


def lesson(*, md_locked="true", setup=SETUP, answer=ANSWER, checks=CHECKS, points=1, widget=True, extra=""):
    tags = ' tags=["widget"]' if widget else ""
    return "\n".join([
        MD.format(gid="title", locked=md_locked, text="# 99 · Demo"),
        CODE.format(gid="setup", tags="", src=setup),
        SOL.format(gid="f", src=answer),
        TEST.format(gid="check_f", points=points, src=checks),
        CODE.format(gid="view", tags=tags, src="print('picture')"),
        extra,
    ])


def read(tmp_path, text):
    path = tmp_path / "99_demo.py"
    path.write_text(text)
    return solution_notebook("99_demo", source=path)


def test_a_good_source_builds_with_stable_ids(tmp_path):
    nb = read(tmp_path, lesson())
    assert [c.id for c in nb.cells] == ["title", "setup", "f", "check_f", "view"]
    assert graded_cells(nb) == ["check_f"]
    assert nb.metadata.kernelspec.name == "python3" and "jupytext" not in nb.metadata
    assert all(c.outputs == [] for c in nb.cells if c.cell_type == "code")


@pytest.mark.parametrize("kwargs, match", [
    (dict(md_locked="false"), "markdown cells are locked"),
    (dict(setup="print(1)"), "first code cell starts with `import kernels`"),
    (dict(answer="def f(x):\n    return x"), "BEGIN SOLUTION"),
    (dict(checks='check("99_demo.f", f)\nassert f(1) == 1'), "one-line check"),
    (dict(checks='check("98_other.f", f)'), "must start with the lesson id"),
    (dict(checks='check("99_demo.f", f, hidden=True)'), "hidden=True checks go inside"),
    (dict(checks='### BEGIN HIDDEN TESTS\ncheck("99_demo.f", f, hidden=True)'), "without ### END HIDDEN"),
    (dict(checks='### BEGIN HIDDEN TESTS\ncheck("99_demo.f", f, hidden=True)\n### END HIDDEN TESTS'),
     "empty in the student's copy"),
    (dict(points=0), "points > 0"),
    (dict(widget=False), "no cell tagged 'widget'"),
    (dict(extra=CODE.format(gid="title", tags="", src="x = 1")), "duplicate grade_id"),
    (dict(extra=CODE.format(gid="bad id", tags="", src="x = 1")), "grade_id must be"),
    (dict(extra="# %%\nx = 1\n"), "needs nbgrader metadata"),
    (dict(extra=CODE.format(gid="leak", tags="", src="### BEGIN SOLUTION\nx = 1\n### END SOLUTION")),
     "solution delimiters outside"),
])
def test_a_broken_source_is_refused_with_a_reason(tmp_path, kwargs, match):
    with pytest.raises(CourseError, match=match):
        read(tmp_path, lesson(**kwargs))


INCLUDE = SOL.format(gid="g", src="# include: 98_base f")


def test_an_included_cell_is_built_from_the_other_lessons_cell(tmp_path):
    (tmp_path / "98_base.py").write_text(lesson())
    nb = read(tmp_path, lesson(extra=INCLUDE))
    (g,) = (c for c in nb.cells if c.id == "g")
    assert g.source == ANSWER and g.metadata["nbgrader"]["grade_id"] == "g" and g.cell_type == "code"


@pytest.mark.parametrize("base, include, match", [
    (None, INCLUDE, r"there is no .*/98_base\.py"),
    (lesson(), SOL.format(gid="g", src="# include: 98_base nothing"), "'nothing' of lesson '98_base', which has no"),
    (lesson(extra=SOL.format(gid="g", src="# include: 97_other f")), SOL.format(gid="h", src="# include: 98_base g"),
     "itself an include"),
    (lesson(), MD.format(gid="g", locked="true", text="include: 98_base f"), "a cell of the other kind"),
    (lesson(), SOL.format(gid="g", src="x = 1\n# include: 98_base f"), "the cell's whole body"),
])
def test_a_broken_include_is_refused_with_a_reason(tmp_path, base, include, match):
    if base is not None:
        (tmp_path / "98_base.py").write_text(base)
    with pytest.raises(CourseError, match=match):
        read(tmp_path, lesson(extra=include))


@pytest.mark.parametrize("name", lesson_ids())
def test_a_lesson_source_reads_as_written_but_for_its_includes(name):
    text = (SOLUTIONS / f"{name}.py").read_text()
    read_back = source_text(SOLUTIONS / f"{name}.py")
    if "\n# include: " in text:
        assert "\n# include: " not in read_back and len(read_back) > len(text)
    else:
        assert read_back == text


def test_lesson_ids_resolve_numbers_and_refuse_unknown_ones():
    present = lesson_ids()
    assert present == [les.id for les in LESSONS]
    if present:
        assert lesson_ids(present[0][:2]) == [present[0]]
    with pytest.raises(CourseError, match="no lesson"):
        lesson_ids(["77_nothing"])


@pytest.mark.parametrize("name", lesson_ids())
def test_every_lesson_source_follows_the_rules(name):
    nb = solution_notebook(name)
    assert graded_cells(nb)


@pytest.mark.parametrize("name", lesson_ids())
def test_every_check_names_a_registered_exercise_with_matching_points(name):
    import re

    from kernels.checks.spec import lesson_exercises

    exercises = lesson_exercises(name)
    used = set()
    for cell in solution_notebook(name).cells:
        meta = cell.metadata["nbgrader"]
        if not meta["grade"]:
            continue
        calls = re.findall(r"""check\(\s*["']([^"']+)["'][^\n]*""", cell.source)
        hidden = "hidden=True" in cell.source
        for ex_id in set(calls):
            assert ex_id in exercises, f"{name}: cell {cell.id!r} checks {ex_id!r}, which the lesson does not register"
            want = exercises[ex_id].points[1 if hidden else 0]
            assert meta["points"] == want, (f"{name}: cell {cell.id!r} carries {meta['points']} points; "
                                            f"{ex_id} gives {want} to its {'hidden' if hidden else 'visible'} cell")
            used.add((ex_id, hidden))
    for ex_id, ex in exercises.items():
        assert (ex_id, False) in used, f"{name}: exercise {ex_id} has no visible check cell"
        assert ((ex_id, True) in used) == bool(ex.hidden), f"{name}: {ex_id}: hidden cases and hidden cell disagree"


def test_the_lesson_tables_are_written_from_the_catalog(tmp_path):
    import importlib

    from kernels.catalog import LESSONS

    build = importlib.import_module("grader.course.build")
    readme, course = tmp_path / "README.md", tmp_path / "course"
    course.mkdir()
    readme.write_text(f"# intro\n{build._TABLE}\n| 00 | a row from an older catalog |\n{build._TABLE_END}\nafter\n")
    (course / "README.md").write_text("no table markers here\n")
    tables = build._lesson_tables(readme, course)
    assert list(tables) == [readme], "a file without the markers is left alone"
    text = tables[readme]
    assert text.startswith("# intro\n") and text.endswith(f"{build._TABLE_END}\nafter\n")
    assert "older catalog" not in text
    rows = [ln for ln in text.splitlines() if ln.startswith("| 0")]
    assert [r.split(" | ")[1] for r in rows] == [f"`course/{les.id}.ipynb`" for les in LESSONS]
