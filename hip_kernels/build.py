"""Compiles the kernel sources into one shared library, with hipcc (ROCm) or nvcc (CUDA).

The same command builds the library a GPU run loads and the one CI compiles without a GPU, so a
kernel that CI accepts is the kernel that runs. Built libraries are cached by a hash of the
sources and the command; `python -m hip_kernels.build --check` compiles for every toolchain found.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from hip_kernels.errors import BuildError

KERNEL_DIR = Path(__file__).resolve().parent
SOURCES = ("runtime.hip", "paged_attention.hip", "write_kv.hip", "verify.hip")
HEADERS = ("portability.h",)
LIBRARY_NAME = "libswarmscope_kernels.so"
# What CI compiles for: Debian's hipcc is ROCm 5.2, whose clang predates gfx1201 (RDNA4), so the
# closest RDNA target it knows stands in; nvcc targets Hopper.
CHECK_ARCHS = {"hipcc": "gfx1030", "nvcc": "sm_90"}
_SEARCH = {"hipcc": ("/opt/rocm/bin/hipcc",), "nvcc": ("/usr/local/cuda/bin/nvcc", "/usr/local/bin/nvcc")}


@dataclass(frozen=True, slots=True)
class Toolchain:
    compiler: str    # "hipcc" | "nvcc"
    executable: str  # path of the compiler driver
    arch: str        # "gfx1030", "gfx1201", "sm_90" ...

    def __post_init__(self) -> None:
        if self.compiler not in CHECK_ARCHS:
            raise ValueError(f"unknown compiler {self.compiler!r}; expected one of {sorted(CHECK_ARCHS)}")
        prefix = "gfx" if self.compiler == "hipcc" else "sm_"
        if not self.arch.startswith(prefix):
            raise ValueError(f"{self.compiler} arch must start with {prefix!r}, got {self.arch!r}")

    def command(self, sources: list[Path], output: Path) -> list[str]:
        common = ["-O3", "-std=c++17", f"-I{KERNEL_DIR}", "-shared", "-o", str(output)]
        if self.compiler == "hipcc":
            return [self.executable, f"--offload-arch={self.arch}", "-fPIC", *common, *map(str, sources)]
        # nvcc decides the language by extension; -x cu makes it read .hip as CUDA.
        return [self.executable, f"-arch={self.arch}", "-Xcompiler", "-fPIC", *common, "-x", "cu", *map(str, sources)]

    def env(self) -> dict[str, str]:
        # hipcc picks NVIDIA when it sees nvcc on the machine unless told otherwise.
        extra = {"HIP_PLATFORM": "amd"} if self.compiler == "hipcc" else {}
        return {**os.environ, **extra}


def find_compiler(compiler: str) -> str | None:
    found = shutil.which(compiler)
    if found:
        return found
    return next((path for path in _SEARCH[compiler] if os.access(path, os.X_OK)), None)


def toolchain_for_current_device() -> Toolchain:
    """The toolchain for torch's current GPU, for its own arch. Raises BuildError if none fits."""
    import torch

    if torch.version.hip:
        arch = torch.cuda.get_device_properties(torch.cuda.current_device()).gcnArchName.split(":")[0]
        compiler = "hipcc"
    else:
        major, minor = torch.cuda.get_device_capability()
        arch, compiler = f"sm_{major}{minor}", "nvcc"
    executable = find_compiler(compiler)
    if executable is None:
        raise BuildError([compiler], f"{compiler} not found on PATH or in {', '.join(_SEARCH[compiler])}")
    return Toolchain(compiler, executable, arch)


def cache_dir() -> Path:
    override = os.environ.get("SWARMSCOPE_KERNEL_CACHE")
    if override:
        return Path(override)
    import platformdirs

    return Path(platformdirs.user_cache_dir("swarmscope")) / "hip_kernels"


def compile_library(toolchain: Toolchain, output: Path, sources: list[Path] | None = None) -> Path:
    """Runs the compiler once; any diagnostic that stops it becomes a BuildError with its text."""
    sources = sources or [KERNEL_DIR / name for name in SOURCES]
    command = toolchain.command(sources, output)
    try:
        done = subprocess.run(command, env=toolchain.env(), capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BuildError(command, str(exc)) from exc
    if done.returncode != 0:
        raise BuildError(command, (done.stderr or done.stdout).strip()[-4000:])
    return output


def build(toolchain: Toolchain) -> Path:
    """The cached library for this toolchain, compiling it if the sources changed."""
    digest = hashlib.sha256(" ".join(toolchain.command([], Path(LIBRARY_NAME))[1:]).encode())
    for name in (*SOURCES, *HEADERS):
        digest.update((KERNEL_DIR / name).read_bytes())
    target = cache_dir() / f"{toolchain.compiler}-{toolchain.arch}-{digest.hexdigest()[:16]}" / LIBRARY_NAME
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    # Compile beside the target and rename, so a concurrent process never loads half a file.
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        compile_library(toolchain, Path(scratch) / LIBRARY_NAME)
        os.replace(Path(scratch) / LIBRARY_NAME, target)
    return target


def check_toolchains() -> dict[str, str]:
    """Compiles every kernel with every compiler found, for CI's stand-in archs; compiler -> result."""
    results = {}
    for compiler, arch in CHECK_ARCHS.items():
        executable = find_compiler(compiler)
        if executable is None:
            results[compiler] = "not installed"
            continue
        with tempfile.TemporaryDirectory() as scratch:
            compile_library(Toolchain(compiler, executable, arch), Path(scratch) / LIBRARY_NAME)
        results[compiler] = f"ok ({arch})"
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hip_kernels.build", description=__doc__)
    parser.add_argument("--check", action="store_true", help="compile with every compiler found (no GPU needed)")
    parser.add_argument("--require", action="append", default=[], choices=sorted(CHECK_ARCHS),
                        help="fail if this compiler is missing (CI passes --require hipcc)")
    args = parser.parse_args(argv)
    try:
        if not args.check:
            import torch
            if not torch.cuda.is_available():
                print("no GPU: torch sees no ROCm or CUDA device (--check compiles without one)",
                      file=sys.stderr)
                return 1
            print(build(toolchain_for_current_device()))
            return 0
        results = check_toolchains()
    except BuildError as exc:
        print(exc, file=sys.stderr)
        return 1
    for compiler, result in results.items():
        print(f"{compiler}: {result}")
    missing = [c for c in args.require if results.get(c) == "not installed"]
    if missing:
        print(f"required compiler missing: {', '.join(missing)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
