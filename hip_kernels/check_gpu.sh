#!/usr/bin/env bash
# On a machine with a ROCm or CUDA GPU: build the kernels for this device, check every kernel
# against its torch reference, check the engine with them against the CPU path (logits, and text
# with and without drafts). Then time the attention kernel against its reference (B = 1, 4, 16;
# k = 0..8; ctx 512..8k) and against the engine's torch attention (SDPA), time decode steps (at
# ctx 4096 with the kernels and with the torch path) and t(N), and run a short swarm session on
# the GPU (random weights and the tiny model: no download needed).
# Every section runs even when one before it fails (a lent GPU's time is short); the exit status
# says whether any failed, and the last line names them.
# Usage: hip_kernels/check_gpu.sh [extra args for python -m hip_kernels.bench]
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
export QT_QPA_PLATFORM=offscreen
cache=$(mktemp -d)   # the calibration below is this run's, and the swarm session reuses it
failed=()

section() {  # section NAME COMMAND...
    echo "== $1"
    local start=$SECONDS
    "${@:2}" || failed+=("$1")
    echo "   ($1: $((SECONDS - start)) s)"
}

section build "$PY" -m hip_kernels.build
# The hipcc compile check is CI's (gfx1030 stand-in); the build above compiled for this device.
section "kernels vs references" "$PY" -m pytest tests/hip_kernels -q -p no:cacheprovider -k "not hipcc"
section "the engine with the kernels vs the CPU path" \
    "$PY" -m pytest tests/engine/test_gpu_path.py -q -p no:cacheprovider
section "timings (ms)" "$PY" -m hip_kernels.bench "$@"
section "the engine's attention: the kernel against its torch path" \
    "$PY" -m engine.cli.main bench attention --device cuda --dtype bf16
section "decode steps on the GPU" \
    "$PY" -m engine.cli.main bench decode --model random:smollm2-135m --device cuda --dtype bf16
# The engine's own attention with the kernels and with its torch path (SDPA), side by side, at a
# context long enough for attention to count.
section "decode steps at ctx 4096, kernels" \
    "$PY" -m engine.cli.main bench decode --model random:smollm2-135m --device cuda --dtype bf16 --ctx 4096
section "decode steps at ctx 4096, torch attention" \
    env SWARMSCOPE_KERNELS=0 "$PY" -m engine.cli.main bench decode --model random:smollm2-135m \
    --device cuda --dtype bf16 --ctx 4096
section "t(N) on the GPU" \
    env SWARMSCOPE_CACHE="$cache" "$PY" -m engine.cli.main calibrate --model tiny-test --device cuda
section "a swarm session on the GPU" \
    env SWARMSCOPE_CACHE="$cache" "$PY" -m engine.cli.main run --headless --model tiny-test \
    --device cuda --duration 15 --clock measured

if [ ${#failed[@]} -gt 0 ]; then
    printf 'FAILED: %s\n' "$(IFS=';'; echo "${failed[*]}")"
    exit 1
fi
echo "all sections passed"
