#!/usr/bin/env bash
# PTX export and the two driver-API launchers on the GPU machine: export vector add, matmul and chunked linear
# attention, run them through the Rust CLI and the Python launcher (PTX and cubin), compare with torch, and time
# launch overhead against Triton's own launcher. Needs no cargo: pass the prebuilt binary (built on the CPU
# machine with `cargo build --offline --release` in rust/).
#   bash scripts/gpu_export.sh [path/to/workbook-launch] [--quick]
# On a GPU it writes results/gpu/export.json, results/gpu/export-table.txt and results/gpu/export/ (manifests,
# PTX, cubins), copied to $OUT/export when OUT is set (without a GPU: bench-results/export-cpu/). Exit status 0
# only if every launch matched. About a minute on an H200.
set -uo pipefail
cd "$(dirname "$0")/.."
bin=rust/target/release/workbook-launch
if [[ $# -gt 0 && $1 != --* ]]; then
  bin=$1
  shift
fi
python3 -c "import kernels" 2>/dev/null || export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
python3 -c "import cuda.bindings.driver" 2>/dev/null || echo "cuda-bindings missing: the Python launcher rows fail"
rust_args=()
if [[ -x $bin ]]; then
  rust_args=(--rust "$bin")
  "$bin" devices || echo "the Rust launcher cannot reach the driver"
else
  echo "no Rust launcher at $bin (build it with: cd rust && cargo build --offline --release); its rows are skipped"
fi
python3 -m kernels.export.roundtrip "${rust_args[@]}" "$@"
status=$?
if [[ -n ${OUT:-} && -f results/gpu/export.json ]]; then
  mkdir -p "$OUT/export"
  cp -r results/gpu/export.json results/gpu/export-table.txt results/gpu/export "$OUT/export/" 2>/dev/null || true
fi
exit "$status"
