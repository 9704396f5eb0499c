"""The ROCm/CUDA route is `pip install` into the user's own torch environment, so the wheel must
carry every resource the bundle does (setuptools only takes package data matching pyproject's
patterns: a new file type is silently dropped)."""
import shutil
import subprocess
import sys
import zipfile

from packaging_support import ROOT

SOURCES = ("pyproject.toml", "README.md", "engine", "app", "hip_kernels", "resources")


def test_wheel_contains_every_bundled_resource(tmp_path, manifest):
    # Built from a copy so setuptools' build/ and egg-info never touch the shared checkout.
    tree = tmp_path / "src"
    for name in SOURCES:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, tree / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            tree.mkdir(exist_ok=True)
            shutil.copy(source, tree / name)
    result = subprocess.run([sys.executable, "-m", "pip", "wheel", str(tree), "--no-deps",
                             "--no-build-isolation", "-q", "-w", str(tmp_path / "wheel")],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    (wheel,) = (tmp_path / "wheel").glob("swarmscope-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = [p.as_posix() for p in manifest.resource_files(ROOT) if p.as_posix() not in names]
    assert not missing, f"pyproject package-data drops these from the wheel: {missing}"
