#!/usr/bin/env bash
# Everything the GPU machine checks, in one call: install, GPU tests, benchmarks, tuning, export, notebooks,
# grading. Usage: scripts/gpu_batch.sh [stage[:seconds] ...]  (default: all stages; each 300 s at most)
#   stages: tests alltests checks tests-la bench bench-la bench-la-kernels bench-la-general la-check la-sweep bench-<topic>
#           state-probe profile tune tune-sweep export viz notebooks course course-student course-full grade zoo backward backward-probe fla-tests dask multi
#           learner lesson06 rust-grid
# Expects an offline machine with python3 holding torch and triton (the project is put on PYTHONPATH, the
# image's torch/triton stay), wheels for the Jupyter/nbgrader stack in .gpu-wheels/ (see README), and, for the
# export stage, a prebuilt Rust launcher in rust/target/release/; fla-core's wheel in .whl/ (pip download
# fla-core==0.6.0 --no-deps -d .whl) for the stages that compare with it. Results land in results/gpu/ (a pytest
# stage's as a JSON record, tests/conftest.py), each stage's raw log in artifacts/gpu-logs/STAGE.log (git-ignored),
# and both, with the whole call's log, in $OUT/gpu-results.tgz (OUT defaults to artifacts/gpu).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-$ROOT/artifacts/gpu}
LOGS=$ROOT/artifacts/gpu-logs  # a run's logs travel in its tarball; what is committed is results/gpu/'s records
mkdir -p "$OUT" results/gpu bench-results "$LOGS"
LOG=$OUT/gpu-batch.log
exec > >(tee -a "$LOG") 2>&1
# the stages write under results/gpu/ and artifacts/gpu-logs/; only the log and one tarball go to OUT
BATCH_OUT=$OUT
unset OUT
export PYTHONUNBUFFERED=1
umask 022  # the grader's sandboxed workers run as other uids: what is installed here must be readable by them
stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(tests bench bench-la tune export notebooks grade)
t0=$(date +%s)
stamp() { echo "=== [$(( $(date +%s) - t0 ))s] $*"; }

stamp "setup"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
if [ -d .gpu-wheels ]; then
  # a machine kept warm from an earlier call already has them: pip's "already exists" lines are noise
  { python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .gpu-wheels/*.whl \
      2>&1 || echo "wheel install failed"; } | grep -v "already exists. Specify --upgrade" || true
  chmod -R a+rX /tmp/site  # a machine whose image umask was 077 may have installed them root-only earlier
  echo "umask $(umask); $(ls -ld /tmp/site)"
fi
# a warm machine keeps what an earlier call installed: a call may leave .gpu-wheels/ behind (the carried tree's
# 64 MiB do not hold it beside .dask-wheels/) and still find the stack
if [ -d /tmp/site ]; then
  export PYTHONPATH=/tmp/site:$ROOT
  export PATH=/tmp/site/bin:$PATH
  export JUPYTER_PATH=/tmp/site/share/jupyter  # nbconvert's templates (feedback HTML) came with the wheels' data
else
  export PYTHONPATH=$ROOT
fi
# the grader's sandbox is bubblewrap, unpacked from the Debian package carried in .gpu-wheels/ (kept by a warm machine):
# every grading stage (grade, dask, multi) needs it
if ! command -v bwrap >/dev/null; then
  if [ ! -x /tmp/bwrap/usr/bin/bwrap ]; then
    for deb in .gpu-wheels/bubblewrap_*.deb; do [ -f "$deb" ] && dpkg-deb -x "$deb" /tmp/bwrap; done
  fi
  [ -x /tmp/bwrap/usr/bin/bwrap ] && export PATH=/tmp/bwrap/usr/bin:$PATH
fi
if compgen -G ".whl/*.whl" > /dev/null; then  # fla-core for the comparisons; its one extra need, einops, is on the image
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/fla .whl/*.whl 2>&1 \
    | grep -v "already exists. Specify --upgrade" || true
  export PYTHONPATH=$PYTHONPATH:/tmp/fla
fi
python3 -c "import torch, triton, numpy; print('torch', torch.__version__, 'triton', triton.__version__, 'numpy', numpy.__version__, torch.cuda.get_device_name(0))"
# ipykernel points matplotlib at matplotlib-inline; without it every notebook cell that plots fails ("Key backend:
# 'module://matplotlib_inline.backend_inline' is not a valid value"). A wheelhouse that strips matplotlib* drops it.
python3 -c "import matplotlib_inline" 2>/dev/null \
  || echo "WARNING: matplotlib-inline is not installed: notebooks' plots will fail (pip download --no-deps -d .gpu-wheels matplotlib-inline)"

run_stage() {  # stage name, time limit in seconds
  local name=$1 limit=$2
  local log=$LOGS/$name.log  # the raw log of a stage that writes one
  stamp "$name (limit ${limit}s)"
  case $name in
    # the pytest stages: each one's record (outcomes, seconds, failures' last lines, printed lines) is the
    # results/gpu/ file GPU_TESTS_RECORD names (tests/conftest.py); the log stays in artifacts/gpu-logs/.
    # A timed test waits in a fixture for the GPU alone (conftest's _gpu_turn), behind the other workers' tests:
    # the limit of 150 s a test counts its call only (with 4 workers the wait alone came to 139 s)
    tests) GPU_TESTS_RECORD=pytest-gpu.json timeout "$limit" python3 -m pytest -v -m gpu -p no:cacheprovider -n "${TEST_WORKERS:-2}" --timeout=150 --timeout-method=thread -o timeout_func_only=true --durations=25 --ignore=tests/grader ${TESTS_SELECT:-tests} \
             > "$log" 2>&1; echo "pytest exit $?"; grep -E "PASSED|FAILED|ERROR|SKIPPED" "$log" | grep -v PASSED | tail -30
           tail -35 "$log" ;;
    alltests) GPU_TESTS_RECORD=pytest-all.json timeout "$limit" python3 -m pytest -q -p no:cacheprovider --timeout=120 tests/kernels tests/test_testing.py \
             > "$log" 2>&1; echo "pytest exit $?"; tail -40 "$log" ;;
    # every test of the checks (tests/checks: the engine, the lessons' checks and zoos), not only the GPU-marked ones,
    # run where the checks take their GPU paths (the interpreter pre-check, the case alarm, TMA's rules, the allocator);
    # 360 s a test: with 8 workers sharing one GPU the slowest took 99-133 s and two passed 150 (an H100, 2026-12-07);
    # the whole of it needs more than one call's 600 s there (61% in 250 s): CHECKS_SELECT splits it
    checks) GPU_TESTS_RECORD=pytest-checks.json timeout "$limit" python3 -m pytest -q -p no:cacheprovider -n "${TEST_WORKERS:-4}" --timeout=360 \
              --timeout-method=thread --durations=15 ${CHECKS_SELECT:-tests/checks} > "$log" 2>&1; echo "pytest exit $?"; tail -40 "$log" ;;
    tests-la) GPU_TESTS_RECORD=pytest-la.json timeout "$limit" python3 -m pytest -m gpu -v -p no:cacheprovider --durations=10 \
             tests/kernels/test_linear_attention_fused.py tests/kernels/test_linear_attention.py::test_gpu_agrees_with_fla \
             tests/kernels/test_linear_attention_lookback.py::test_gpu_dispatch_by_occupancy > "$log" 2>&1
           echo "pytest exit $?"; tail -30 "$log" ;;
    # --warm: every row's first calls (compiles, fla-core's autotuning) in parallel children first; fla then tunes
    # again in the timed process on a quiet GPU from cached binaries (FLA_CACHE_RESULTS=0), as a first call would
    # LA_VERSIONS (comma-separated) replaces the versions timed, e.g. "chunk_linear_attn,fla chunk" for the grid;
    # LA_RESUME (an earlier run's JSON, e.g. the committed grid's) keeps its rows done and runs the rest
    bench-la-general) la_versions=(chunk_linear_attn "norm on tensor cores" "try norm-wide" "try fp32-kt" "try d256-bv64" "try d256-bt32"
                                   "try v64-bv32" "try d256-states-cuda" "try d256-states-bv128" "try d256-states-s64" "try fp32-norm-wide"
                                   "try fp32-d256-states" "try norm-mid-w8" "try d128-s2"
                                   "fla chunk")
                      [ -z "${LA_VERSIONS:-}" ] || IFS=, read -ra la_versions <<< "$LA_VERSIONS"
                      FLA_CACHE_RESULTS=0 timeout "$limit" python3 -m kernels.bench linear_attention --set "${LA_SET:-targets}" $([ -n "${LA_FULL:-}" ] || echo --quick) ${LA_WHERE:+--where "$LA_WHERE"} --warm "${LA_WARM:-10}" \
                        ${LA_RESUME:+--resume "$LA_RESUME"} --only "${la_versions[@]}" --budget $(( limit - 45 )) --out results/gpu/linear_attention-general \
                        || echo "bench-la-general failed ($?)" ;;
    # the backward pass: its GPU tests and lesson 07's (gradients against float64 and fla's, the lesson's speed
    # check), then forward + backward timed beside fla's at B=4 H=16 D=128 bf16, T=4k..64k (bench_backward.py), and
    # the host's time to issue one such step at 4k with the launches stubbed (bench_host.py, about 20 s past the limit);
    # the tests' printed errors go to the log as they come and, captured, into the record too (tee-sys)
    backward) GPU_TESTS_RECORD=pytest-backward.json timeout $(( limit * 2 / 5 )) python3 -m pytest -m gpu -v --capture=tee-sys -p no:cacheprovider --durations=10 \
                tests/kernels/test_linear_attention_backward.py tests/checks/lessons/test_l07_backward.py \
                > "$log" 2>&1
              echo "pytest exit $?"; grep -E "PASSED|FAILED|ERROR|ours .* fla|backward_speed" "$log" | tail -30
              timeout $(( limit * 3 / 5 - 5 )) python3 -m kernels.bench linear_attention --set backward --quick \
                --budget $(( limit * 3 / 5 - 70 )) --out results/gpu/linear_attention-backward || echo "backward bench failed ($?)"
              timeout 60 python3 -m kernels.linear_attention.bench_host --calls 1000 --out results/gpu/linear_attention-backward \
                || echo "host bench failed ($?)" ;;
    # fla's own tests of chunk_linear_attn (tests/ops/test_linear_attn.py, carried in the git-ignored .fla-tests/)
    # with ours swapped in (scripts/gpu_fla_tests.py; FLA_TESTS_ALL=1 also runs the file's tests of fla's kernels)
    fla-tests) timeout "$limit" python3 scripts/gpu_fla_tests.py ${FLA_TESTS_ALL:+--all} > "$log" 2>&1
               echo "fla-tests exit $?"; grep -A40 "^ours: " "$log" || tail -30 "$log" ;;
    # every fused family against float64, a process per case (one CUDA fault costs one case), a few under memcheck
    la-check) timeout "$limit" python3 scripts/gpu_la_check.py --budget $(( limit - 35 )) --jobs "${LA_CHECK_JOBS:-12}" \
                --sanitize "${LA_SANITIZE:-3}" ${LA_CHECK_ONLY:+--only $LA_CHECK_ONLY} > "$log" 2>&1
              echo "la-check exit $?"
              grep -vE ": pass \(" "$log" | tail -40 ;;
    la-sweep) timeout "$limit" python3 scripts/gpu_la_sweep.py --budget $(( limit - 40 )) || echo "la-sweep failed ($?)" ;;
    bench) for topic in memory matmul recurrent; do
             timeout "$limit" python3 -m kernels.bench "$topic" --out results/gpu || echo "bench $topic failed ($?)"
           done ;;
    bench-la) timeout "$limit" python3 -m kernels.bench linear_attention --out results/gpu || echo "bench-la failed ($?)" ;;
    bench-la-kernels) timeout "$limit" python3 -m kernels.bench linear_attention --only chunked lookback chunk_linear_attn "fla chunk" ${LA_ROWS:+--rows "$LA_ROWS"} \
                        --out results/gpu/linear_attention-kernels || echo "bench-la-kernels failed ($?)" ;;
    bench-*) timeout "$limit" python3 -m kernels.bench "${name#bench-}" --out results/gpu || echo "$name failed ($?)" ;;
    tune) timeout "$limit" python3 scripts/tune_linear_attention.py --budget $(( limit - 10 )) || echo "tune failed ($?)" ;;
    tune-sweep) timeout "$limit" python3 scripts/tune_linear_attention.py --sweep-only --budget $(( limit - 10 )) \
                || echo "tune failed ($?)" ;;
    backward-probe) timeout "$limit" python3 scripts/gpu_backward_probe.py --budget $(( limit - 40 )) \
                      || echo "backward-probe failed ($?)" ;;
    state-probe) timeout "$limit" python3 scripts/gpu_state_probe.py || echo "state-probe failed ($?)" ;;
    # the fused kernel of each row under ncu (its speed of light, launch and occupancy, or PROFILE_SECTIONS), then the row's time a call
    # back to back and the host's time of one call: results/gpu/profile-ROW.txt
    profile) for row in ${PROFILE_ROWS:-packed dense}; do
               # the kernels one call of the row launches (the fused kernel, or the states launch's two)
               read -r kernel count <<< "$(python3 scripts/profile_row.py "$row" --kernels)"
               { timeout $(( limit / 3 )) /usr/local/cuda/bin/ncu --clock-control none -k "$kernel" -s 2 -c "$count" \
                   $(for s in ${PROFILE_SECTIONS:-SpeedOfLight LaunchStats Occupancy}; do echo --section "$s"; done) \
                   python3 scripts/profile_row.py "$row" \
                   || echo "ncu $row failed ($?)"
                 timeout 60 python3 scripts/profile_row.py "$row" --time || echo "timing $row failed ($?)"
               } > "results/gpu/profile-$row.txt" 2>&1
               tail -3 "results/gpu/profile-$row.txt"
             done ;;
    export) timeout "$limit" bash scripts/gpu_export.sh || echo "export failed ($?)" ;;
    # lesson 05's launcher with the solution's Rust launch_grid (built here by `python -m grader.rust_launcher`
    # and carried in rust/target/release/): the export round trip through it, compared with torch and Triton
    rust-grid) timeout "$limit" python3 -m kernels.export.roundtrip --rust rust/target/release/yours-launch --quick \
                 --launches 500 --repeat 5 --out results/gpu/rust-grid || echo "rust-grid failed ($?)" ;;
    viz) timeout "$limit" python3 scripts/gpu_viz.py || echo "viz failed ($?)" ;;
    notebooks) timeout "$limit" python3 scripts/gpu_notebooks.py || echo "notebooks failed ($?)" ;;
    course) timeout "$limit" python3 scripts/gpu_course.py || echo "course failed ($?)" ;;
    # lessons 00-05's quoted numbers: the capstone speed check (chunks of 16 and 64), the prefetching recurrence,
    # a CUDA graph's launch cost, the changed notebook cells (results/gpu/learner.json)
    learner) timeout "$limit" python3 scripts/gpu_learner.py --budget $(( limit - 40 )) || echo "learner failed ($?)" ;;
    course-student) timeout "$limit" python3 scripts/gpu_course.py --copy student || echo "course-student failed ($?)" ;;
    course-full) timeout "$limit" python3 scripts/gpu_course.py --full --copy solution ${COURSE_LESSONS:-} || echo "course-full failed ($?)" ;;
    grade) timeout "$limit" bash scripts/gpu_grader.sh || echo "grader failed ($?)" ;;
    # every zoo entry's visible and hidden check on the GPU (grader/zoo), the speed-graded ones alone at the end
    zoo) timeout "$limit" python3 -m grader.zoo --jobs "${ZOO_JOBS:-14}" ${ZOO_ARGS:-} --out "${ZOO_OUT:-results/gpu/zoo.json}" \
           > "$log" 2>&1; echo "zoo exit $?"; grep -E "^BAD" -A2 "$log" | head -60
         tail -3 "$log" ;;
    # lesson 06: its tests (GPU ones included), its zoo on the GPU, the solution notebook; results/gpu/lesson06.json
    lesson06) timeout "$limit" python3 scripts/gpu_lesson06.py --budget $(( limit - 20 )) ${LESSON06_ARGS:-} || echo "lesson06 failed ($?)" ;;
    # Dask: the demo class through LocalCUDACluster vs the default executor (same scores, times; DASK_ARGS, e.g.
    # "--students solution release --lessons 00_setup 02_naive_hbm_loops", narrow it); `multi`: one
    # class on 1, 2 and all GPUs of the host. Dask's wheels (and dask-cuda's) from .dask-wheels/, put last on the path.
    dask|multi) (
        if compgen -G ".dask-wheels/*.whl" > /dev/null; then
          python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/dask .dask-wheels/*.whl \
            2>&1 | grep -v "already exists. Specify --upgrade" || true
          chmod -R a+rX /tmp/dask
          export PYTHONPATH=$PYTHONPATH:/tmp/dask
        fi
        script=scripts/gpu_dask.py; [ "$name" = multi ] && script=scripts/gpu_multi.py
        # shellcheck disable=SC2086
        timeout "$limit" python3 "$script" ${DASK_ARGS:-} > "$log" 2>&1; echo "$name exit $?"
        grep -vE "^grading \[" "$log" | tail -25 ) ;;
    *) echo "unknown stage $name" ;;
  esac
}

snapshot() {  # what is done so far, replaced whole so a call cut off mid-write still leaves the previous one
  local part="$BATCH_OUT/.gpu-results.$BASHPID.part"  # one per writer: the loop below and the main shell
  # (the tarball itself, where OUT is under artifacts/, stays out of the next one)
  tar czf "$part" --exclude=gpu-results.tgz --exclude=".gpu-results.*.part" results/gpu bench-results artifacts 2>/dev/null
  mv -f "$part" "$BATCH_OUT/gpu-results.tgz"
}
# also every 30 s during a stage: a call cut off by the device's time limit keeps what the stage saved
( while sleep 30; do snapshot; done ) &
SNAPSHOTS=$!
trap 'kill $SNAPSHOTS 2>/dev/null' EXIT

for s in "${stages[@]}"; do
  run_stage "${s%%:*}" "$( [[ $s == *:* ]] && echo "${s##*:}" || echo 300 )"
  snapshot
done

stamp "done"
kill $SNAPSHOTS 2>/dev/null
snapshot
ls -la "$BATCH_OUT"
