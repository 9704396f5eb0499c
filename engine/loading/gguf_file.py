"""A GGUF file given as the model (llama.cpp's and Ollama's format): converted once into a Hugging
Face folder in the user cache, and loaded as that folder from then on; converted again when the
file changes. Quantized tensors are kept as fp16 there (half of fp32's room; each value within a
part in 2,000 of the dequantized one): this engine computes in bf16 or fp32, not quantized."""
from __future__ import annotations

import hashlib
from pathlib import Path

import torch

from engine.errors import ModelLoadError
from engine.loading import converted
from engine.loading.gguf_convert import Progress, convert_gguf
from engine.user_cache import cache_root

CONVERTER_VERSION = 3  # bump when the converted folder's contents change (3: YaRN, OLMo 3)
MAGIC = b"GGUF"  # a GGUF file's first bytes (Ollama's store names its files by digest alone)


def is_gguf(path: Path) -> bool:
    """A file named .gguf, or one that starts as a GGUF does."""
    if path.suffix.lower() == ".gguf":
        return True
    try:
        with path.open("rb") as file:
            return file.read(len(MAGIC)) == MAGIC
    except OSError:
        return False


def converted_folder(path: Path, progress: Progress) -> Path:
    """The folder the GGUF at `path` converts to, converting it first where needed."""
    folder, stamp = _place(path)
    if not converted.is_cached(folder, stamp):
        progress(f"converting {path.name} into {folder} (once)", 0.0)
        converted.convert_into(folder, stamp, lambda scratch, staged: convert_gguf(
            path, staged, lambda message, fraction: progress(message, 0.9 * fraction),
            dequantized=torch.float16))
    return folder


def converted_already(path: Path) -> Path | None:
    """The GGUF's converted folder where it has one, up to date; else None."""
    folder, stamp = _place(path)
    return folder if converted.is_cached(folder, stamp) else None


def _place(path: Path) -> tuple[Path, dict]:
    """Where the GGUF's conversion is kept, and the stamp that says it is of the file as it is."""
    try:
        source = path.resolve()
        stat = source.stat()
    except OSError as exc:
        raise ModelLoadError(path, f"cannot read the GGUF file ({exc.strerror or exc})") from None
    stamp = {"gguf": str(source), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns,
             "converter": CONVERTER_VERSION}
    digest = hashlib.sha256(str(source).encode()).hexdigest()[:12]
    return cache_root() / "models" / "gguf" / f"{path.stem}-{digest}", stamp
