#!/usr/bin/env bash
# Chunked linear attention on the GPU machine: the whole test file (GPU-marked tests included), then the ladder
# benchmark. Run from the repository root: `bash scripts/gpu_linear_attention.sh [tests|bench|all] [--quick]`.
# Logs, the bench JSON/PNG and tests.json go to $OUT/linear_attention (or results/gpu/linear_attention).
set -uo pipefail
what=${1:-all}
shift || true
dest=${OUT:-results/gpu}/linear_attention
mkdir -p "$dest"
python3 -c "import kernels" 2>/dev/null || python3 -m pip install -q --no-deps -e .
python3 -c "import fla; print('fla-core', fla.__version__)" 2>/dev/null || echo "fla-core not importable: its rows and test skip"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
status=0
if [[ $what == tests || $what == all ]]; then
  python3 -m pytest -q -p no:cacheprovider tests/kernels/test_linear_attention.py 2>&1 | tee "$dest/tests.log"
  status=${PIPESTATUS[0]}
  cp results/gpu/tests.json "$dest/tests.json" 2>/dev/null || true
fi
if [[ $what == bench || $what == all ]]; then
  python3 -m kernels.bench linear_attention --out "$dest" "$@" 2>&1 | tee "$dest/bench.log"
  [[ ${PIPESTATUS[0]} == 0 ]] || status=1
fi
exit "$status"
