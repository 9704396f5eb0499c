"""packaging/install_desktop.sh into a temporary XDG_DATA_HOME: what lands where, that the entry
runs the given program, that icons are the sizes their folders claim, and --uninstall."""
import os
import shlex
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from packaging_support import PACKAGING, ROOT, parse_desktop

SCRIPT = PACKAGING / "install_desktop.sh"
SIZES = (16, 32, 48, 64, 128, 256, 512)
VENV_PROGRAM = ROOT / ".venv" / "bin" / "swarmscope"


def install(data: Path, home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "XDG_DATA_HOME": str(data), "HOME": str(home)}
    return subprocess.run([str(SCRIPT), *args], env=env, capture_output=True, text=True)


def png_size(path: Path) -> tuple[int, int]:
    header = path.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n" and header[12:16] == b"IHDR", f"{path}: not a PNG"
    return struct.unpack(">II", header[16:24])


@pytest.fixture
def program(tmp_path) -> Path:
    fake = tmp_path / "bin with space" / "swarmscope"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    return fake


def test_installs_entry_metainfo_and_icons_under_xdg_data_home_only(tmp_path, program):
    data, home = tmp_path / "data", tmp_path / "home"
    home.mkdir()
    result = install(data, home, "--exec", str(program))
    assert result.returncode == 0, result.stderr
    assert not any(home.iterdir()), "wrote outside XDG_DATA_HOME"
    entry = parse_desktop(data / "applications" / "swarmscope.desktop")["Desktop Entry"]
    assert shlex.split(entry["Exec"]) == [str(program), "--model", "default"]
    assert entry["TryExec"] == str(program)
    assert (data / "metainfo" / "io.github.swarmscope.metainfo.xml").read_bytes() == \
        (PACKAGING / "io.github.swarmscope.metainfo.xml").read_bytes()
    icons = data / "icons" / "hicolor"
    assert (icons / "scalable" / "apps" / f"{entry['Icon']}.svg").is_file()
    for size in SIZES:
        assert png_size(icons / f"{size}x{size}" / "apps" / f"{entry['Icon']}.png") == (size, size)


@pytest.mark.skipif(shutil.which("desktop-file-validate") is None,
                    reason="desktop-file-validate not installed (apt-get install desktop-file-utils)")
def test_installed_entry_with_quoted_path_validates(tmp_path, program):
    assert install(tmp_path / "data", tmp_path, "--exec", str(program)).returncode == 0
    result = subprocess.run(["desktop-file-validate",
                             str(tmp_path / "data" / "applications" / "swarmscope.desktop")],
                            capture_output=True, text=True)
    assert result.returncode == 0 and not result.stdout.strip(), result.stdout


@pytest.mark.skipif(not VENV_PROGRAM.exists(), reason="no .venv/bin/swarmscope (run make setup)")
def test_default_program_is_this_checkouts_venv(tmp_path):
    assert install(tmp_path / "data", tmp_path).returncode == 0
    entry = parse_desktop(tmp_path / "data" / "applications" / "swarmscope.desktop")
    assert shlex.split(entry["Desktop Entry"]["Exec"])[0] == str(VENV_PROGRAM)


def test_missing_program_fails_naming_it(tmp_path):
    result = install(tmp_path / "data", tmp_path, "--exec", str(tmp_path / "nope"))
    assert result.returncode == 1
    assert str(tmp_path / "nope") in result.stderr
    assert not (tmp_path / "data" / "applications" / "swarmscope.desktop").exists()


def test_uninstall_removes_every_installed_file(tmp_path, program):
    data = tmp_path / "data"
    assert install(data, tmp_path, "--exec", str(program)).returncode == 0
    assert install(data, tmp_path, "--uninstall").returncode == 0
    assert [p for p in data.rglob("*") if p.is_file()] == []


@pytest.mark.slow
@pytest.mark.default_model
@pytest.mark.skipif(not VENV_PROGRAM.exists(), reason="no .venv/bin/swarmscope (run make setup)")
def test_installed_entry_starts_the_window_with_the_default_model(tmp_path):
    """Runs the Exec line exactly as a desktop would, plus the options that make it exit. 20 s
    lets the model load and calibrate first (2 CPU cores: about 10 s)."""
    assert install(tmp_path / "data", tmp_path).returncode == 0
    entry = parse_desktop(tmp_path / "data" / "applications" / "swarmscope.desktop")
    shot = tmp_path / "window.png"
    command = shlex.split(entry["Desktop Entry"]["Exec"]) + [
        "--trace-out", "none", "--screenshot", str(shot), "--quit-after", "20"]
    result = subprocess.run(command, env={**os.environ, "QT_QPA_PLATFORM": "offscreen"},
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert png_size(shot)[0] > 100
