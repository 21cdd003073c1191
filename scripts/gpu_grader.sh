#!/usr/bin/env bash
# The grader on the GPU machine, in one call: its GPU tests, then the demo class with the GPU-only cases (a hung
# kernel, an illegal address, a race the interpreter hides, speed requirements), then the red-team class (timing
# forgery among them). Kernels are graded as cubins compiled in the sandbox and launched by the grader's own
# launcher (GRADER_CUBIN=0: Triton's JIT in the sandbox, as before; COMPARE_JIT=1 times the full solution that way
# too, into results/gpu/jit/). Writes results/gpu/grade-demo.json and redteam.json (and $OUT/grade-demo.json,
# $OUT/redteam.json, $OUT/grader-gpu.log). Expects .gpu-wheels/ (../shared/gpu/wheelhouse.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-$ROOT/artifacts/gpu}
mkdir -p "$OUT" results/gpu
exec > >(tee -a "$OUT/grader-gpu.log") 2>&1
export PYTHONUNBUFFERED=1
umask 022  # the grader's sandboxed workers run as other uids: what is installed here must be readable by them
if [ -d .gpu-wheels ] && ! python3 -c "import nbgrader" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .gpu-wheels/*.whl \
    || echo "wheel install failed"
  export PYTHONPATH=/tmp/site:$ROOT PATH=/tmp/site/bin:$PATH JUPYTER_PATH=/tmp/site/share/jupyter
else  # already importable (gpu_batch.sh put /tmp/site on PYTHONPATH): keep that path, add the checkout
  export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$ROOT
fi
python3 -c "import nbgrader, IPython" || echo "nbgrader or IPython is missing: the demo grades without nbgrader"
# the sandbox is bubblewrap: on an offline machine without it, unpack the Debian package carried in .gpu-wheels/
# (`apt-get download bubblewrap` on a networked machine)
if ! command -v bwrap >/dev/null; then
  for deb in .gpu-wheels/bubblewrap_*.deb; do
    [ -f "$deb" ] && dpkg-deb -x "$deb" /tmp/bwrap && export PATH=/tmp/bwrap/usr/bin:$PATH
  done
  if ! command -v bwrap >/dev/null; then
    echo "bubblewrap is missing and no .gpu-wheels/bubblewrap_*.deb was found: the grader cannot sandbox"
    echo "  (on a networked Debian/Ubuntu machine: apt-get download bubblewrap; copy the .deb into .gpu-wheels/)"
  fi
fi
if command -v bwrap >/dev/null; then  # bwrap links libselinux, libcap and libpcre2: name any the image lacks
  bwrap --version
  ldd "$(command -v bwrap)" | grep "not found" && echo "bubblewrap's libraries above are missing on this machine"
  bwrap --ro-bind / / --dev /dev --proc /proc -- /bin/true || echo "bwrap cannot start a sandbox here (namespaces?)"
fi
python3 -c "import cuda.bindings.driver" 2>/dev/null \
  || echo "cuda-bindings is missing: the grader's cubin launcher cannot load kernels (GRADER_CUBIN=0 grades as before)"
# the sandbox must compile and launch one kernel before anything is graded (it prints why not)
timeout 300 python3 scripts/gpu_sandbox_check.py || { echo "the grader's sandbox cannot run a kernel here"; exit 3; }
t0=$(date +%s)
if [ "${TESTS_LIMIT:-240}" != 0 ]; then  # TESTS_LIMIT=0: the demo only
  echo "=== grader GPU tests"
  timeout "${TESTS_LIMIT:-240}" python3 -m pytest -q -p no:cacheprovider -m gpu tests/grader 2>&1 | tail -30
fi
echo "=== [$(( $(date +%s) - t0 ))s] grader demo class on the GPU ${DEMO_STUDENTS:+(students: $DEMO_STUDENTS)}"
# DEMO_STUDENTS, DEMO_LESSONS: space-separated subsets of the demo class and its lessons (default: all of them);
# DEMO_SLOTS: submissions at once
# shellcheck disable=SC2086
timeout "${DEMO_LIMIT:-560}" python3 -m grader demo --gpu --report results/gpu "$OUT" \
  ${DEMO_STUDENTS:+--students $DEMO_STUDENTS} ${DEMO_LESSONS:+--lessons $DEMO_LESSONS} ${DEMO_SLOTS:+--slots $DEMO_SLOTS}
rc=$?
red=0
if [ "${REDTEAM_LIMIT:-240}" != 0 ]; then  # REDTEAM_LIMIT=0: no red-team class
  echo "=== [$(( $(date +%s) - t0 ))s] red-team class on the GPU (crafted attacks on lessons 00 and 02)"
  timeout "${REDTEAM_LIMIT:-240}" python3 -m grader redteam --report results/gpu/redteam.json
  red=$?
  [ -n "${OUT:-}" ] && cp results/gpu/redteam.json "$OUT/" 2>/dev/null
fi
if [ "${COMPARE_JIT:-0}" != 0 ]; then  # the full solution again, kernels run by Triton's JIT in the sandbox
  echo "=== [$(( $(date +%s) - t0 ))s] the full solution with GRADER_CUBIN=0 (for the time beside the cubin path's)"
  GRADER_CUBIN=0 timeout "${COMPARE_LIMIT:-200}" python3 -m grader demo --gpu --direct --students solution \
    --work /tmp/grader-demo-jit --report results/gpu/jit || echo "the JIT comparison failed ($?)"
fi
echo "=== [$(( $(date +%s) - t0 ))s] done (demo exit $rc, red team exit $red)"
[ $rc = 0 ] && exit $red
exit $rc
