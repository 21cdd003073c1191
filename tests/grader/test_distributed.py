"""Grading on Dask distributed (grader/distributed.py) against a real local cluster: a scheduler and two workers,
each a process of its own started with Dask's command line, as on a cluster.

The class is small (three lesson-00 submissions: a full score, a partial one, the untouched release), graded
once by the default executor and then through the cluster with the same master seed: the scores and the
gradebook must be identical. One worker is killed (SIGKILL) while it grades: its task runs again on the other
worker and nothing is lost. An unreachable scheduler is a clear error and leaves the course folder as it was.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time

import pytest

# one pytest-xdist worker runs this module, so that its module-scoped fixtures (the course folder, the default
# executor's grading, the cluster) are built once, not once per worker
pytestmark = pytest.mark.xdist_group("test_distributed")

pytest.importorskip("distributed", reason="dask.distributed is not installed (pip install -e '.[cluster]')")

LESSON = "00_setup"
SEED = 1234


def _wrong_bias(source: dict, release: dict) -> dict:
    """Lesson 00 with add_bias assuming contiguous rows (``row * N``): the strided views fail, 4 of 8 points."""
    nb = json.loads(json.dumps(source))
    for cell in nb["cells"]:
        src = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        if "def add_bias_kernel" in src:
            assert "row * stride_xm" in src
            cell["source"] = src.replace("row * stride_xm", "row * N").replace("row * stride_om", "row * N")
    return nb


EXPECTED = {("alice", LESSON): 8.0, ("bob", LESSON): 4.0, ("carol", LESSON): 0.0}


def _build(root: pathlib.Path) -> pathlib.Path:
    """A course folder with lesson 00 and the three collected submissions."""
    from grader import democlass, workflow
    from grader.demo import course_lessons

    src, rel = course_lessons([LESSON])[LESSON]
    workflow.build_course(root, {LESSON: src})
    (root / "release" / LESSON / f"{LESSON}.ipynb").write_text(json.dumps(rel, indent=1))
    klass = [democlass.DemoStudent("alice", "solution", {LESSON: "solution"}, {}),
             democlass.DemoStudent("bob", "strided rows wrong", {LESSON: _wrong_bias}, {}),
             democlass.DemoStudent("carol", "untouched", {LESSON: "release"}, {})]
    folder = root.parent / f"{root.name}-incoming"
    democlass.write_class(folder, {LESSON: (src, rel)}, klass)
    workflow.collect(root, folder)
    return root


def _settings():
    from grader.grade import Settings

    return Settings(seed=SEED, problem_timeout=60.0, memory_limit=2 << 30)


class _Cluster:
    """``dask scheduler`` and ``dask worker`` processes on this machine (loopback only)."""

    def __init__(self, tmp: pathlib.Path, workers: int = 2, allowed_failures: int = 1):
        self.tmp = tmp
        self.file = tmp / "scheduler.json"
        self.env = dict(os.environ, DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES=str(allowed_failures),
                        PYTHONPATH=os.pathsep.join(filter(None, [str(pathlib.Path(__file__).parents[2]),
                                                                 os.environ.get("PYTHONPATH")])))
        self.log = open(tmp / "cluster.log", "ab")
        self.scheduler = self._start([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
                                      "--port", "0", "--no-dashboard", "--scheduler-file", str(self.file)])
        self.address = self._address(deadline=time.time() + 60)
        self.workers = {}
        for i in range(workers):
            self.add_worker(f"w{i}")

    def _address(self, deadline: float) -> str:
        # the scheduler creates the file before it writes it: wait for a whole JSON document, not for the name
        while True:
            try:
                return json.loads(self.file.read_text())["address"]
            except (FileNotFoundError, json.JSONDecodeError, KeyError):
                if self.scheduler.poll() is not None or time.time() > deadline:
                    log = self.tmp / "cluster.log"
                    raise RuntimeError(f"the dask scheduler did not start; its log: {log}") from None
                time.sleep(0.1)

    def _start(self, cmd):
        return subprocess.Popen(cmd, env=self.env, stdout=self.log, stderr=subprocess.STDOUT, cwd=self.tmp,
                                start_new_session=True)

    def add_worker(self, name: str) -> None:
        self.workers[name] = self._start(
            [sys.executable, "-m", "distributed.cli.dask_worker", self.address, "--name", name, "--nthreads", "1",
             "--no-nanny", "--no-dashboard", "--host", "127.0.0.1", "--memory-limit", "0",
             "--local-directory", str(self.tmp / name)])

    def client(self, n: int):
        from distributed import Client

        c = Client(self.address, timeout=30)
        c.wait_for_workers(n, timeout=120)
        return c

    def close(self) -> None:
        # workers first, whole process groups (their sandbox's fork server too); the sandboxed processes, each in
        # a session of its own, die with their parent
        for p in [*self.workers.values(), self.scheduler]:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
            p.wait(20)
        self.log.close()


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> pathlib.Path:
    """The course folder, built once (nbgrader's generate_assignment takes a while); each test grades a copy."""
    return _build(tmp_path_factory.mktemp("template") / "course")


@pytest.fixture
def course(template, tmp_path) -> pathlib.Path:
    shutil.copytree(template, tmp_path / "course", symlinks=True)
    return tmp_path / "course"


@pytest.fixture
def without_bob(course) -> pathlib.Path:
    """The class less bob, for the tests that kill the worker grading alice: bob's grading, on the other worker
    at the same time, proved nothing there and halved the cores alice's grading had."""
    from grader import workflow

    workflow.remove_student(course, "bob")
    return course


def _less_bob(d: dict) -> dict:
    return {k: v for k, v in d.items() if k[0] != "bob"}


@pytest.fixture(scope="module")
def default_run(template, tmp_path_factory):
    """The default executor (thread slots in this process) on the class: the scores to match."""
    from grader import workflow

    root = tmp_path_factory.mktemp("default") / "course"
    shutil.copytree(template, root, symlinks=True)
    results, failures, _ = workflow.autograde(root, slots=2, settings=_settings(), progress=False)
    assert not failures
    scores = {(r.student, r.lesson): r.score for r in results}
    assert scores == EXPECTED, scores
    return root, scores, workflow.gradebook_scores(root)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = _Cluster(tmp_path_factory.mktemp("dask"))
    yield c
    c.close()


@pytest.mark.slow  # a real cluster grading real notebooks: 15-25 s each on 2 cores
def test_cluster_grades_like_the_default_executor(default_run, cluster, course):
    from grader import distributed, workflow

    _, scores, book = default_run
    root = course
    client = cluster.client(2)
    try:
        out = distributed.autograde(root, client, settings=_settings(), progress=False)
        # the run's end gave back each worker's grader (sandbox uid range and folder)
        left = client.run(lambda: (len(distributed._RUNS), len(distributed._GRADERS)))
    finally:
        client.close()
    assert set(left.values()) == {(0, 0)}, left
    assert not out.infrastructure and not out.failures
    assert {(r.student, r.lesson): r.score for r in out.results} == scores
    assert workflow.gradebook_scores(root) == book
    assert out.mode == "interpreter" and out.retries == 1
    # a second run grades nothing that is already recorded; --redo grades it all again
    client = cluster.client(2)
    try:
        again = distributed.autograde(root, client, settings=_settings(), progress=False)
    finally:
        client.close()
    assert not again.results and len(again.skipped) == 3


def _killer(cluster, client, student: str, times: int, killed: list):
    """A thread that SIGKILLs the worker grading ``student``'s task, ``times`` times (a fresh worker replaces each),
    1.5 s into the grading (which takes several seconds)."""
    import threading

    def run():
        deadline = time.time() + 150
        while time.time() < deadline and len(killed) < times:
            try:
                busy = [a for a, ks in client.processing().items() if any(f"-{student}-" in str(k) for k in ks)]
            except Exception:  # noqa: BLE001 (the scheduler slow to answer on a loaded machine: ask again)
                time.sleep(0.2)
                continue
            if busy:
                # the first kill lands mid-grading; a retry is killed as soon as it is assigned, since on a worker
                # already warm it can finish within the delay (and the test would see one loss, not two)
                time.sleep(1.5 if not killed else 0.0)
                info = client.scheduler_info()["workers"]
                name = info[busy[0]]["name"]
                cluster.workers[name].send_signal(signal.SIGKILL)
                killed.append((name, busy[0]))
                cluster.add_worker(f"{name}r")
                while any(f"-{student}-" in str(k) for k in client.processing().get(busy[0], ())):
                    time.sleep(0.05)  # until the scheduler has seen the loss
            time.sleep(0.05)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def _grade_killing(cluster, client, course, times: int) -> tuple:
    """Grade ``course`` on ``client``'s cluster while the worker grading alice is killed ``times`` times; the
    outcome and the (name, address) of each worker killed."""
    from grader import distributed

    killed: list = []
    t = _killer(cluster, client, "alice", times, killed)
    out = distributed.autograde(course, client, settings=_settings(), progress=False)
    t.join(30)
    return out, killed


@pytest.fixture
def client_of_two(cluster):
    """A client of the module's cluster once two workers are up, closed after the test."""
    client = cluster.client(2)
    yield client
    client.close()


@pytest.mark.slow  # a real cluster grading real notebooks: 15-25 s each on 2 cores
def test_worker_killed_mid_task_is_retried(default_run, cluster, without_bob, client_of_two):
    """SIGKILL the worker grading a submission: the scheduler reruns it on another worker, nothing is lost."""
    from grader import workflow

    course = without_bob
    scores, book = _less_bob(default_run[1]), _less_bob(default_run[2])
    out, killed = _grade_killing(cluster, client_of_two, course, 1)
    assert killed, "no worker was seen grading"
    assert not out.infrastructure, out.infrastructure
    assert out.placement[("alice", LESSON)] != killed[0][1]
    assert {(r.student, r.lesson): r.score for r in out.results} == scores
    assert workflow.gradebook_scores(course) == book


@pytest.mark.slow  # a real cluster grading real notebooks: 15-25 s each on 2 cores
def test_worker_lost_twice_is_an_infrastructure_failure(default_run, cluster, without_bob, client_of_two):
    """Lost again on its retry: named as an infrastructure failure, not recorded (no 0); a re-run grades only it."""
    from grader import distributed, workflow

    course = without_bob
    scores, book = _less_bob(default_run[1]), _less_bob(default_run[2])
    out, killed = _grade_killing(cluster, client_of_two, course, 2)
    assert len(killed) == 2 and killed[0][1] != killed[1][1]
    assert [(s, lsn) for s, lsn, _ in out.infrastructure] == [("alice", LESSON)]
    assert "lost" in out.infrastructure[0][2]
    assert ("alice", LESSON) not in workflow.gradebook_scores(course)
    assert (course / "submitted" / "alice" / LESSON / f"{LESSON}.ipynb").exists()
    again = distributed.autograde(course, client_of_two, settings=_settings(), progress=False)
    assert sorted(again.skipped) == [("carol", LESSON)]
    assert [(r.student, r.score) for r in again.results] == [("alice", scores[("alice", LESSON)])]
    assert workflow.gradebook_scores(course) == book


def test_unreachable_scheduler_is_a_clear_error_and_writes_nothing(course):
    root = course
    before = sorted((str(p), p.stat().st_mtime_ns) for p in root.rglob("*"))
    proc = subprocess.run([sys.executable, "-m", "grader", "--course", str(root), "autograde", "--scheduler",
                           "tcp://127.0.0.1:9", "--connect-timeout", "3"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "cannot reach the Dask scheduler at tcp://127.0.0.1:9" in proc.stderr
    assert "nothing was graded or written" in proc.stderr
    assert sorted((str(p), p.stat().st_mtime_ns) for p in root.rglob("*")) == before


def test_slurm_config_file(tmp_path):
    """The README's Slurm example (grader/slurm.example.yaml) makes one-GPU worker jobs; bad files are clear."""
    pytest.importorskip("dask_jobqueue")
    from dask_jobqueue import SLURMCluster

    from grader import distributed
    from grader.grade import SetupError

    example = pathlib.Path(distributed.__file__).with_name("slurm.example.yaml")
    opts, jobs = distributed.slurm_options(example)
    assert jobs == 8
    opts["scheduler_options"] = {"host": "127.0.0.1", "dashboard_address": None}
    with SLURMCluster(**opts) as c:
        script = c.job_script()
    assert "#SBATCH --gres=gpu:1" in script and "--resources GPU=1" in script and "--nthreads 3" in script
    bad = tmp_path / "bad.yaml"
    for text, why in [("- a list", "mapping"), ("jobs: 0", "positive"), ("cores: [", "YAML")]:
        bad.write_text(text)
        with pytest.raises(SetupError, match=why):
            distributed.slurm_options(bad)
    with pytest.raises(SetupError, match="--cluster-config"):
        distributed.connect(cluster="slurm")


@pytest.mark.slow  # a real cluster of its own: about 20 s
def test_no_worker_left_is_an_infrastructure_failure(course, tmp_path):
    """Every worker lost and none back within the wait time: the tasks left are named, nothing hangs or is lost."""
    import threading

    from grader import distributed, workflow

    (tmp_path / "dask").mkdir()
    cluster = _Cluster(tmp_path / "dask", workers=1)
    client = cluster.client(1)
    seen = []

    def kill_all():
        deadline = time.time() + 120
        while time.time() < deadline and not any(client.processing().values()):
            time.sleep(0.05)
        seen.append(time.time() < deadline)
        time.sleep(1.0)
        for p in cluster.workers.values():
            p.send_signal(signal.SIGKILL)

    t = threading.Thread(target=kill_all, daemon=True)
    try:
        t.start()
        t0 = time.time()
        out = distributed.autograde(course, client, settings=_settings(), progress=False, timeout=5)
        waited = time.time() - t0
    finally:
        client.close()
        cluster.close()
    assert seen == [True], "no task was seen running"
    assert out.infrastructure and waited < 120, (out.infrastructure, waited, [r.student for r in out.results])
    assert all("no worker left" in why for _, _, why in out.infrastructure), out.infrastructure
    graded = {(r.student, r.lesson) for r in out.results}
    assert not graded & {(s, lsn) for s, lsn, _ in out.infrastructure}
    assert set(workflow.gradebook_scores(course)) == graded


def test_plan_shares_a_gpu_among_its_slots_and_refuses_mixed_workers():
    """GPU tasks take 1/nthreads of a worker's GPU: exactly nthreads of them fit at once; bad layouts are refused."""
    from grader import distributed
    from grader.grade import SetupError

    gpu = {"mode": "gpu", "resources": {"GPU": 1}, "nthreads": 3}
    for n in (1, 2, 3, 5, 7, 8):
        mode, res = distributed.plan({"a": dict(gpu, nthreads=n), "b": dict(gpu, nthreads=n + 1)})
        free, fit = 1.0, 0
        while free >= res["GPU"]:
            free, fit = free - res["GPU"], fit + 1
        assert mode == "gpu" and fit == n
    assert distributed.plan({"a": {"mode": "interpreter", "resources": {}, "nthreads": 2}}) == ("interpreter", None)
    with pytest.raises(SetupError, match="different modes"):
        distributed.plan({"a": gpu, "b": {"mode": "interpreter", "resources": {}, "nthreads": 1}})
    with pytest.raises(SetupError, match="--resources GPU=1"):
        distributed.plan({"a": dict(gpu, resources={})})
