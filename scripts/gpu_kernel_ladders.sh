#!/usr/bin/env bash
# On a CUDA machine: every test of the vector_add, memory, recurrent and matmul ladders (CPU-sized ones compiled
# for the GPU, then the GPU-sized ones), then each topic's benchmark. Results land in ${OUT:-results/gpu}/ladders.
set -uo pipefail
cd "$(dirname "$0")/.."
dest=${OUT:-results/gpu}/ladders
mkdir -p "$dest"
status=0
python3 -m pytest -q -p no:cacheprovider tests/test_testing.py tests/kernels/test_vector_add.py \
  tests/kernels/test_memory.py tests/kernels/test_recurrent.py tests/kernels/test_matmul.py 2>&1 | tee "$dest/pytest.txt"
status=$((status | PIPESTATUS[0]))
cp -f results/gpu/tests.json "$dest/tests.json" 2>/dev/null || true
for topic in ${TOPICS:-vector_add memory recurrent matmul}; do
  python3 -m kernels.bench "$topic" --out "$dest" 2>&1 | tee "$dest/bench-$topic.txt"
  status=$((status | PIPESTATUS[0]))
done
exit "$status"
