#!/usr/bin/env bash
# On a machine with a ROCm or CUDA GPU: build the kernels for this device, check every kernel
# against its torch reference, then time kernel vs reference (B = 1, 4, 16; k = 0..8; ctx 512..8k)
# and print one table. Usage: hip_kernels/check_gpu.sh [extra args for python -m hip_kernels.bench]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
echo "== build"
"$PY" -m hip_kernels.build
echo "== kernels vs references"
QT_QPA_PLATFORM=offscreen "$PY" -m pytest tests/hip_kernels/test_gpu.py -q -p no:cacheprovider
echo "== timings (ms)"
"$PY" -m hip_kernels.bench "$@"
