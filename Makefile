# `make run` and `make test` are the two commands a fresh machine needs; both go through `setup`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup run test test-fast kernels-check install-desktop bundle screenshots

# Debian tools the checks use (command:package), installed when missing and we are root with
# apt-get: hipcc for the HIP compile test, the desktop-entry and AppStream validators.
APT_TOOLS := hipcc:hipcc desktop-file-validate:desktop-file-utils appstreamcli:appstream

setup: $(STAMP)
	@missing=$$(for t in $(APT_TOOLS); do command -v $${t%%:*} >/dev/null || echo $${t#*:}; done); \
	if [ -z "$$missing" ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	else echo "not installed: $$missing (the HIP compile test skips; validators fall back to structural checks)"; fi
	$(BIN)/swarmscope fetch-model default

# A torch already in the venv (ROCm, CUDA) is kept; otherwise the pinned CPU build goes in first
# so that no dependency pulls a multi-GB CUDA wheel.
$(STAMP): pyproject.toml
	test -d $(VENV) || $(PY) -m venv $(VENV)
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/pip install torch==2.13.0
	$(BIN)/pip install -e '.[test]'
	touch $(STAMP)

run: setup
	$(BIN)/swarmscope

test: setup
	QT_QPA_PLATFORM=offscreen $(BIN)/python -m pytest

test-fast: setup
	QT_QPA_PLATFORM=offscreen $(BIN)/python -m pytest -m "not slow"

# Compile every HIP kernel with each compiler found (Debian's hipcc, nvcc); no GPU needed.
kernels-check: setup
	$(BIN)/python -m hip_kernels.build --check

# The README's two screenshots: a 75 s live session on the default model, then its replay.
screenshots: setup
	trace=$$(mktemp -d)/session.jsonl.gz; \
	QT_QPA_PLATFORM=offscreen $(BIN)/swarmscope --trace-out $$trace --size 1600x1000 \
	  --screenshot docs/screenshots/live.png --quit-after 75 && \
	QT_QPA_PLATFORM=offscreen $(BIN)/swarmscope --replay $$trace --size 1600x1000 \
	  --screenshot docs/screenshots/replay.png --quit-after 3

# Add swarmscope to this user's app menu (under $XDG_DATA_HOME, default ~/.local/share), running
# this checkout's venv with the default model; packaging/install_desktop.sh --uninstall removes it.
install-desktop: setup
	packaging/install_desktop.sh

# Slow and optional (not part of `make test`): the CPU PyInstaller bundle in dist/swarmscope/.
bundle: $(STAMP)
	$(BIN)/pip install -q -e '.[bundle]'
	packaging/build_bundle.sh
