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
from engine.loading.hf_folder import checked_sampling

PREFIX = "ollama:"
MODEL_LAYER = "application/vnd.ollama.image.model"
PARAMS_LAYER = "application/vnd.ollama.image.params"
# Ollama's parameter names -> generation_config.json's
SAMPLING = (("temperature", "temperature"), ("top_k", "top_k"), ("top_p", "top_p"),
            ("repeat_penalty", "repetition_penalty"))
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
    return _layer(spec, MODEL_LAYER, required=True)


def sampling(spec: str) -> dict[str, float]:
    """The sampling the model's Ollama parameters give (its params layer: temperature, top_k,
    top_p, repeat_penalty), under generation_config.json's names; {} where it has none."""
    blob, _ = _layer(spec, PARAMS_LAYER, required=False)
    if blob is None:
        return {}
    try:
        params = json.loads(blob.read_text())
    except (OSError, ValueError) as exc:
        raise ModelLoadError(blob, f"Ollama's parameters for the model do not read ({exc})") \
            from None
    if not isinstance(params, dict):
        raise ModelLoadError(blob, "Ollama's parameters for the model are not an object")
    return checked_sampling({ours: params.get(theirs) for theirs, ours in SAMPLING}, blob)


def _layer(spec: str, media_type: str, required: bool) -> tuple[Path | None, str]:
    """The blob of the model's layer of `media_type` (None where it has none and it is not
    `required`), and the model's name as Ollama lists it."""
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
        digests = [layer["digest"] for layer in layers if layer.get("mediaType") == media_type]
    except (OSError, ValueError, KeyError, TypeError):
        digests = None
    if digests is None or required and not digests:
        raise ModelLoadError(manifest, "not an Ollama manifest with a model layer")
    if not digests:
        return None, ""
    blob = store / "blobs" / digests[0].replace(":", "-")
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
