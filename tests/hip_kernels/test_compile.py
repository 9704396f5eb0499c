"""Every kernel compiles with Debian's hipcc (ROCm 5.2, gfx1030 stands in for gfx1201) and with
nvcc (sm_90), through the same command the loader uses on a GPU machine. No GPU needed.

Where a compiler is missing the test skips and says so, except where it must be there: hipcc when
running as root with apt-get (make setup installs it there, as in CI), or any compiler named in
SWARMSCOPE_REQUIRE_COMPILERS (comma-separated); then it fails."""
import os
import shutil

import pytest

from hip_kernels.build import CHECK_ARCHS, KERNEL_DIR, Toolchain, compile_library, find_compiler
from hip_kernels.errors import BuildError

REQUIRED = set(filter(None, os.environ.get("SWARMSCOPE_REQUIRE_COMPILERS", "").split(",")))
if os.geteuid() == 0 and shutil.which("apt-get"):
    REQUIRED.add("hipcc")


def toolchain(compiler: str) -> Toolchain:
    executable = find_compiler(compiler)
    if executable is None:
        message = f"could not compile with {compiler}: it is not installed"
        if compiler in REQUIRED:
            pytest.fail(message + " (required here: root with apt-get, where make setup installs it)")
        pytest.skip(message + (" (make setup installs Debian's hipcc when run as root with apt)"
                               if compiler == "hipcc" else ""))
    return Toolchain(compiler, executable, CHECK_ARCHS[compiler])


@pytest.mark.slow
@pytest.mark.parametrize("compiler", sorted(CHECK_ARCHS))
def test_every_kernel_compiles_and_links(compiler, tmp_path):
    library = compile_library(toolchain(compiler), tmp_path / "lib.so")
    exported = library.read_bytes()
    for symbol in ("ss_paged_attention", "ss_write_kv", "ss_verify_greedy", "ss_verify_rejection", "ss_error_name"):
        assert symbol.encode() in exported, f"{symbol} missing from the {compiler} build"


@pytest.mark.parametrize("compiler", sorted(CHECK_ARCHS))
def test_a_type_error_fails_the_build(compiler, tmp_path):
    # Proves a broken kernel cannot pass: the same command on a copy with a type error must fail.
    source = (KERNEL_DIR / "write_kv.hip").read_text()
    assert "k_dst[i] = k_src[i];" in source
    broken = tmp_path / "write_kv.hip"
    broken.write_text(source.replace("k_dst[i] = k_src[i];", "k_dst[i] = &k_src[i];"))
    with pytest.raises(BuildError, match="write_kv.hip"):
        compile_library(toolchain(compiler), tmp_path / "lib.so", [broken])


def test_toolchain_rejects_a_foreign_arch():
    with pytest.raises(ValueError, match="must start with 'gfx'"):
        Toolchain("hipcc", "/usr/bin/hipcc", "sm_90")
