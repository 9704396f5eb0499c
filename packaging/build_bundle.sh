#!/usr/bin/env bash
# Builds the CPU bundle dist/swarmscope/ with PyInstaller, then starts it offscreen once and saves a
# screenshot, so a bundle that misses a resource or a Qt plugin fails here rather than on a desktop.
# Usage: packaging/build_bundle.sh   (PYTHON=/path/to/python to use another environment)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-$root/.venv/bin/python}
cd "$root"

if ! "$python" -c "import PyInstaller" 2>/dev/null; then
    echo "build_bundle.sh: PyInstaller is missing; run: $python -m pip install -e '.[bundle]'" >&2
    exit 1
fi
# A ROCm or CUDA torch would drag gigabytes of GPU libraries into the bundle; GPU users install the
# package into their own torch environment instead (packaging/README.md).
if ! "$python" -c "import sys, torch; sys.exit(torch.version.hip is not None or torch.version.cuda is not None)"; then
    echo "build_bundle.sh: $python has a GPU build of torch; the bundle is CPU-only" >&2
    exit 1
fi

"$python" -m PyInstaller --noconfirm --clean --log-level WARN \
    --distpath dist --workpath build/pyinstaller packaging/swarmscope.spec

shot=$(mktemp --suffix=.png)
trap 'rm -f "$shot"' EXIT
QT_QPA_PLATFORM=offscreen timeout 300 dist/swarmscope/swarmscope \
    --model tiny-test --trace-out none --screenshot "$shot" --quit-after 3
if [ ! -s "$shot" ]; then
    echo "build_bundle.sh: the bundle started but saved no screenshot" >&2
    exit 1
fi
echo "bundle: dist/swarmscope ($(du -sh dist/swarmscope | cut -f1)); it starts and draws its window"
