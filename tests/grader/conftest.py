import sys

import pytest

import kernels  # noqa: F401  (decides GPU or interpreter before anything imports Triton)
from grader.democlass import FIXTURE as FIXTURES  # the grader's fixture lesson and its checks module

if str(FIXTURES) not in sys.path:
    sys.path.append(str(FIXTURES))


@pytest.fixture(scope="session")
def fixture_source():
    from grader.percent import read_percent

    return read_percent((FIXTURES / "90_grader_fixture.py").read_text())


@pytest.fixture(scope="session")
def fixture_release(fixture_source):
    from grader.percent import release

    return release(fixture_source)


@pytest.fixture(scope="session")
def grader_run():
    from grader.grade import Grader, Settings

    return Grader(Settings(problem_timeout=60, memory_limit=2 << 30, lesson_paths=[str(FIXTURES)]))


