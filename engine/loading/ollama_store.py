"""Models that Ollama has pulled, named as Ollama names them (`ollama:qwen2.5:0.5b`): each is a
GGUF file in Ollama's store, which a manifest per name and tag points to
(<models>/manifests/HOST/NAMESPACE/MODEL/TAG, its model layer's digest naming a file in
<models>/blobs). The file is read where it lies (gguf_file.py converts it once); nothing is
downloaded."""
from __future__ import annotations

import json
import os
from pathlib import Path

from engine.errors import ModelLoadError

PREFIX = "ollama:"
MODEL_LAYER = "application/vnd.ollama.image.model"
DEFAULT_HOST, DEFAULT_NAMESPACE, DEFAULT_TAG = "registry.ollama.ai", "library", "latest"


def models_dir() -> Path:
    """$OLLAMA_MODELS, else ~/.ollama/models, else the Linux service's store."""
    if os.environ.get("OLLAMA_MODELS"):
        return Path(os.environ["OLLAMA_MODELS"]).expanduser()
    home = Path("~/.ollama/models").expanduser()
    service = Path("/usr/share/ollama/.ollama/models")
    return service if not home.is_dir() and service.is_dir() else home


def model_file(spec: str) -> tuple[Path, str]:
    """The GGUF file of the model `spec` (ollama:[HOST/][NAMESPACE/]MODEL[:TAG]) names, and its
    name as Ollama lists it."""
    name, _, tag = spec.removeprefix(PREFIX).partition(":")
    parts = name.split("/")
    if not name or len(parts) > 3 or not all(parts):
        raise ModelLoadError(spec, "an Ollama model is ollama:MODEL[:TAG], as `ollama list` "
                                   "names it")
    # the parts not given are the defaults': MODEL, NAMESPACE/MODEL, HOST/NAMESPACE/MODEL
    host, namespace = (*(DEFAULT_HOST, DEFAULT_NAMESPACE)[:3 - len(parts)], *parts[:-1])
    store = models_dir()
    manifest = store / "manifests" / host / namespace / parts[-1] / (tag or DEFAULT_TAG)
    if not manifest.is_file():
        raise ModelLoadError(manifest, f"Ollama has not pulled {spec.removeprefix(PREFIX)} "
                                       f"(in {store}: {', '.join(pulled()) or 'none'})")
    try:
        layers = json.loads(manifest.read_text())["layers"]
        digest = next(layer["digest"] for layer in layers
                      if layer.get("mediaType") == MODEL_LAYER)
    except (OSError, ValueError, KeyError, TypeError, StopIteration):
        raise ModelLoadError(manifest, "not an Ollama manifest with a model layer") from None
    blob = store / "blobs" / digest.replace(":", "-")
    if not blob.is_file():
        raise ModelLoadError(blob, "the model's file is missing from Ollama's store")
    return blob, f"{parts[-1]}:{tag or DEFAULT_TAG}"


def pulled() -> list[str]:
    """The models Ollama has pulled, as `ollama list` names them (the default host's and
    namespace's by model and tag alone)."""
    names = []
    for manifest in sorted((models_dir() / "manifests").glob("*/*/*/*")):
        if not manifest.is_file():
            continue
        tag, model = manifest.name, manifest.parent.name
        namespace, host = manifest.parent.parent.name, manifest.parent.parent.parent.name
        where = ("" if (host, namespace) == (DEFAULT_HOST, DEFAULT_NAMESPACE) else
                 f"{namespace}/" if host == DEFAULT_HOST else f"{host}/{namespace}/")
        names.append(f"{where}{model}:{tag}")
    return names
