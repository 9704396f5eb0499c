#!/usr/bin/env bash
# On a machine with a ROCm or CUDA GPU: build the kernels for this device, check every kernel
# against its torch reference, check the engine with them against the CPU path, then time kernel
# vs reference (B = 1, 4, 16; k = 0..8; ctx 512..8k) and print one table, and time decode steps
# and t(N) on the GPU (random weights and the tiny model: no download needed).
# Usage: hip_kernels/check_gpu.sh [extra args for python -m hip_kernels.bench]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
echo "== build"
"$PY" -m hip_kernels.build
echo "== kernels vs references"
QT_QPA_PLATFORM=offscreen "$PY" -m pytest tests/hip_kernels/test_gpu.py -q -p no:cacheprovider
echo "== the engine with the kernels vs the CPU path"
QT_QPA_PLATFORM=offscreen "$PY" -m pytest tests/engine/test_gpu_path.py -q -p no:cacheprovider
echo "== timings (ms)"
"$PY" -m hip_kernels.bench "$@"
echo "== decode steps on the GPU"
"$PY" -m engine.cli.main bench decode --model random:smollm2-135m --device cuda --dtype bf16
echo "== t(N) on the GPU"
SWARMSCOPE_CACHE=$(mktemp -d) "$PY" -m engine.cli.main calibrate --model tiny-test --device cuda
