#!/usr/bin/env bash
# Everything the GPU machine checks, in one call: install, GPU tests, benchmarks, tuning, export, notebooks,
# grading. Usage: scripts/gpu_batch.sh [stage ...]  (default: all stages, in order)
#   stages: tests bench tune export notebooks grade
# Expects an offline machine with python3 holding torch and triton (the project is put on PYTHONPATH, the
# image's torch/triton stay), wheels for the Jupyter/nbgrader stack in .gpu-wheels/ (see README), and, for the
# export stage, a prebuilt Rust launcher in rust/target/release/. Results land in results/gpu/ and, when OUT is
# set, in $OUT/gpu-results.tgz with the full log.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-$ROOT/artifacts/gpu}
mkdir -p "$OUT" results/gpu bench-results
LOG=$OUT/gpu-batch.log
exec > >(tee -a "$LOG") 2>&1
export PYTHONUNBUFFERED=1
stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(tests bench tune export notebooks grade)
want() { local s; for s in "${stages[@]}"; do [ "$s" = "$1" ] && return 0; done; return 1; }
t0=$(date +%s)
stamp() { echo "=== [$(( $(date +%s) - t0 ))s] $*"; }

stamp "setup"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
if [ -d .gpu-wheels ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .gpu-wheels/*.whl \
    || echo "wheel install failed"
  export PYTHONPATH=/tmp/site:$ROOT
  export PATH=/tmp/site/bin:$PATH
else
  export PYTHONPATH=$ROOT
fi
python3 -c "import torch, triton, numpy; print('torch', torch.__version__, 'triton', triton.__version__, 'numpy', numpy.__version__, torch.cuda.get_device_name(0))"

if want tests; then
  stamp "pytest -m gpu"
  python3 -m pytest -q -m gpu -p no:cacheprovider tests 2>&1 | tail -40
fi

if want bench; then
  for topic in memory matmul recurrent linear_attention; do
    stamp "bench $topic"
    timeout 240 python3 -m kernels.bench "$topic" --out results/gpu || echo "bench $topic failed ($?)"
  done
fi

if want tune && [ -f scripts/tune_linear_attention.py ]; then
  stamp "tune linear_attention"
  timeout 300 python3 scripts/tune_linear_attention.py || echo "tune failed ($?)"
fi

if want export && [ -f scripts/gpu_export.sh ]; then
  stamp "export + launchers"
  timeout 240 bash scripts/gpu_export.sh || echo "export failed ($?)"
fi

if want notebooks && [ -f scripts/gpu_notebooks.py ]; then
  stamp "solution notebooks on the GPU"
  timeout 400 python3 scripts/gpu_notebooks.py || echo "notebooks failed ($?)"
fi

if want grade && [ -f grader/__main__.py ]; then
  stamp "grade demo on the GPU"
  timeout 500 python3 -m grader demo --gpu || echo "grade demo failed ($?)"
fi

stamp "done"
tar czf "$OUT/gpu-results.tgz" results/gpu bench-results 2>/dev/null
ls -la "$OUT"
