"""Hugging Face model folders: config.json -> ModelConfig (which architectures, as what:
architectures.py; the fields of families that have their own: hf_families.py) and
generation_config.json's sampling (the tokenizer: hf_tokenizer.py; the weights: weights.py).

Every problem a user's folder can have becomes a ModelLoadError naming the file at fault."""
from __future__ import annotations

import math
from pathlib import Path

from engine import rope
from engine.config import ModelConfig
from engine.errors import ModelLoadError
from engine.loading.architectures import (ACTIVATIONS, COHERES, CONFIG_DEFAULTS, GRANITE,
                                          GRANITES, LLAMA_DEFAULTS, MIXTURES, MULTIMODAL,
                                          NORM_EPS, QWEN3_5, ROTARY_SHARES, SUPPORTED,
                                          TIED_BY_DEFAULT)
from engine.loading.config_fields import boolean, integer, number, read_json, token_ids
from engine.loading.hf_families import (cohere, experts, gated_delta, gemma, granite_hybrid,
                                        liquid, local_rope, query_scaling)
from engine.loading.quantization_config import read_quantization


def _rope(cfg: dict, path: Path, max_position: int, default_share: float
          ) -> tuple[float, rope.RopeScaling | None, float]:
    """RoPE's base, scaling and the share of a head it turns (`default_share` where the config
    does not say). transformers >= 5 nests them in rope_parameters; older configs use rope_theta
    and rope_scaling, and give the share (partial_rotary_factor) and the original context
    (Phi-3's) beside them."""
    params = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    if not isinstance(params, dict):
        raise ModelLoadError(path, f"rope parameters must be an object, got {params!r}")
    if "full_attention" in params:  # by layer type (Gemma 3's): the full layers' (`gemma`)
        params = params["full_attention"] or {}
    params = {name: cfg[name] for name in ("original_max_position_embeddings",
                                           "partial_rotary_factor") if cfg.get(name)} | params
    theta = number(params if "rope_theta" in params else cfg, path, "rope_theta", 10000.0)
    share = number(params, path, "partial_rotary_factor", default_share)
    if not 0 < share <= 1:
        raise ModelLoadError(path, f"partial_rotary_factor must be in (0, 1], got {share}")
    try:
        scaling = rope.RopeScaling.from_params(params, max_position)
    except (KeyError, TypeError, ValueError) as exc:
        raise ModelLoadError(path, f"rope parameters {params!r}: {exc}") from None
    # proportional RoPE's share is of the whole head's frequencies, which it turns (rope.py)
    return theta, scaling, 1.0 if scaling and scaling.kind == "proportional" else share


def read_config(folder: Path) -> ModelConfig:
    """ModelConfig from config.json (+ generation_config.json for extra end-of-sequence ids)."""
    path = folder / "config.json"
    cfg = read_json(path)
    archs = cfg.get("architectures")
    named = archs[0] if isinstance(archs, list) and archs else archs
    if named in MULTIMODAL:
        cfg = _text_config(cfg, path, *MULTIMODAL[named])
        named = cfg["architectures"][0]
    if named is None:  # older conversions name only the model_type, as transformers then reads
        named = {a: name for name, (a, _) in SUPPORTED.items()}.get(cfg.get("model_type"))
    if not isinstance(named, str) or named not in SUPPORTED:
        kind = f" (model_type {cfg.get('model_type')!r})" if archs is None else ""
        raise ModelLoadError(path, f"architecture {named!r}{kind} is not supported; supported: "
                                   f"{', '.join(SUPPORTED)}")
    arch, switches = SUPPORTED[named]
    cfg = CONFIG_DEFAULTS.get(arch, {}) | cfg
    if arch in MIXTURES and "intermediate_size" not in cfg:  # no dense MLP (Qwen3.5's mixtures)
        cfg = cfg | {"intermediate_size": cfg.get(MIXTURES[arch][0])}
    quantization = read_quantization(cfg, path)  # one not read is refused here
    activation = _activation(cfg, path, arch)
    if arch in ("seed_oss", "glm4"):  # their attention_bias is q's, k's and v's
        switches = switches | {"qkv_bias": boolean(cfg, path, "attention_bias", True)}
        cfg = {name: value for name, value in cfg.items() if name != "attention_bias"}
    if arch == "starcoder2":  # use_bias: every projection's, and its MLP's
        biased = boolean(cfg, path, "use_bias", True)
        switches = switches | {"qkv_bias": biased, "linear_bias": biased}
        cfg = {name: value for name, value in cfg.items() if name != "use_bias"}
    if any(cfg.get(name) for name in ("attention_bias", "attention_out_bias", "mlp_bias",
                                      "use_bias")):  # (Qwen2's q/k/v biases are implied)
        raise ModelLoadError(path, "attention_bias / attention_out_bias / mlp_bias / use_bias "
                                   "are not supported for " + arch)
    if arch == "qwen2_moe":
        switches = switches | {"qkv_bias": boolean(cfg, path, "qkv_bias", True)}
    if arch in ("stablelm", "phi"):
        if cfg.get("qk_layernorm"):
            raise ModelLoadError(path, "qk_layernorm (q and k LayerNorms by head) is not supported")
    if arch == "stablelm":
        switches = switches | {"qkv_bias": boolean(cfg, path, "use_qkv_bias", False),
                               "parallel_block": boolean(cfg, path, "use_parallel_residual", False)}
    if arch == "granitemoehybrid":
        cfg = granite_hybrid(cfg, path)
    mixers = {}  # the fields of the layers that do not attend
    if arch in ("lfm2", "lfm2_moe", "lfm3"):
        cfg, mixers = liquid(cfg, path, arch)
    if arch in QWEN3_5:
        cfg, mixers = gated_delta(cfg, path)
    if arch == "olmoe" and cfg.get("clip_qkv") is not None:
        raise ModelLoadError(path, f"clip_qkv ({cfg['clip_qkv']}) is not supported")
    if cfg.get("use_bidirectional_attention"):
        raise ModelLoadError(path, "use_bidirectional_attention (an encoder's) is not supported")
    max_position = integer(cfg, path, "max_position_embeddings", 8192)
    theta, scaling, rotary_share = _rope(cfg, path, max_position, ROTARY_SHARES.get(arch, 1.0))
    if scaling is not None and scaling.kind == "longrope":  # its short factors' context (rope.py)
        max_position = min(max_position, scaling.original_max_position)
    generation_path = folder / "generation_config.json"
    generation = read_json(generation_path, required=False) or {}
    eos = tuple(dict.fromkeys(
        token_ids(cfg.get("eos_token_id"), path, "eos_token_id")
        + token_ids(generation.get("eos_token_id"), generation_path, "eos_token_id")))
    heads = integer(cfg, path, "num_attention_heads")
    layers = integer(cfg, path, "num_hidden_layers")
    sliding = _sliding_window(cfg, path, arch, layers)
    if arch == "smollm3":
        nope = _nope_layers(cfg, path, layers)
    elif arch == "cohere2" or arch == "exaone4" and cfg.get("sliding_window") is not None:
        # with a window, RoPE turns in the sliding layers alone (as transformers has it)
        nope = tuple(i for i in range(layers) if i not in sliding.get("sliding_layers", ()))
    else:
        nope = ()
    rotary_dim = 0  # all of a head
    if rotary_share < 1:
        head_dim = (integer(cfg, path, "head_dim", 0)
                    or integer(cfg, path, "hidden_size") // max(heads, 1))
        rotary_dim = int(head_dim * rotary_share)
    try:
        config = ModelConfig(
            vocab_size=integer(cfg, path, "vocab_size"),
            hidden_size=integer(cfg, path, "hidden_size"),
            intermediate_size=integer(cfg, path, "intermediate_size"),
            num_layers=layers, num_heads=heads, nope_layers=nope,
            **({name: number(cfg, path, name, default) for name, default in GRANITE.items()}
               if arch in GRANITES else {}),
            **(gemma(cfg, path, arch) if arch.startswith("gemma") else {}),
            **(experts(cfg, path, arch, layers) if arch in MIXTURES else {}),
            **(local_rope(cfg, path, theta) if arch == "olmo3" and sliding else {}),
            **(query_scaling(cfg, path) if arch == "ministral3" else {}),
            **(cohere(cfg, path) if arch in COHERES else {}),
            **mixers,
            **sliding, activation=activation,
            num_kv_heads=integer(cfg, path, "num_key_value_heads", heads) or heads,
            head_dim=integer(cfg, path, "head_dim", 0), rotary_dim=rotary_dim, rope_theta=theta,
            rope_scaling=scaling,
            rms_norm_eps=(number(cfg, path, NORM_EPS[arch], 1e-5) if arch in NORM_EPS else
                          number(cfg, path, "rms_norm_eps", 1e-6)), max_position=max_position,
            tie_word_embeddings=boolean(cfg, path, "tie_word_embeddings",  # transformers' defaults
                                      arch in TIED_BY_DEFAULT),
            bos_token_id=cfg.get("bos_token_id"), eos_token_ids=eos, architecture=arch,
            quantization=quantization.label if quantization else "", **switches)
    except (TypeError, ValueError) as exc:
        raise ModelLoadError(path, f"invalid model shape: {exc}") from None
    try:  # a longrope factor for each frequency
        rope.frequencies(config.rotary_dim, theta, scaling)
    except ValueError as exc:
        raise ModelLoadError(path, f"rope parameters: {exc}") from None
    return config


# generation_config.json's sampling fields that the API takes where a request leaves them out,
# as vLLM serves them, with the bounds the API holds a request's to (open where the bound is 0)
SAMPLING = {"temperature": (0.0, 2.0), "top_p": (0.0, 1.0), "top_k": (0, math.inf),
            "repetition_penalty": (0.0, math.inf)}


def read_sampling_defaults(folder: Path) -> dict[str, float]:
    """The sampling generation_config.json recommends (Qwen2.5's temperature 0.7, top_p 0.8,
    top_k 20, say)."""
    path = folder / "generation_config.json"
    return checked_sampling(read_json(path, required=False) or {}, path)


def checked_sampling(given: dict, path: Path) -> dict[str, float]:
    """The fields of SAMPLING that `given` (read from `path`) has, each checked. A negative
    top_k is none, as vLLM has it."""
    defaults = {}
    for name, (low, high) in SAMPLING.items():
        value = number(given, path, name, None)
        if value is None:
            continue
        if name == "top_k":
            value = max(0, int(value))
        elif not low <= value <= high or value == 0 and name in ("top_p", "repetition_penalty"):
            raise ModelLoadError(path, f"{name} {value:g} is outside the API's range for it "
                                       f"({low:g} to {high:g})")
        defaults[name] = value
    return defaults


def _text_config(cfg: dict, path: Path, arch: str | dict[str, str], defaults: dict) -> dict:
    """A model's text_config, as a text-only model of `arch` (or of the architecture `arch`
    names for its model_type) has its config: transformers' defaults where it leaves a field
    out, the end-of-sequence ids and quantization from beside it, and tying from beside it where
    it says (transformers 5 ties the whole model's head by it, whatever the text_config says)."""
    text = cfg.get("text_config")
    if text is None and "vision_config" in cfg:  # Qwen2-VL's first configs: the text's beside it
        text = {name: value for name, value in cfg.items() if name != "vision_config"}
    if not isinstance(text, dict):
        raise ModelLoadError(path, f"text_config must be an object, got {text!r}")
    if isinstance(arch, dict):
        kind = text.get("model_type")
        if kind not in arch:
            raise ModelLoadError(path, f"text_config's model_type {kind!r} is not supported "
                                       f"({', '.join(arch)})")
        arch = arch[kind]
        defaults = (LLAMA_DEFAULTS if kind == "llama" else {}) | defaults
    beside = {name: cfg[name] for name in ("eos_token_id", "bos_token_id", "quantization_config")
              if cfg.get(name) is not None}
    tying = ({"tie_word_embeddings": cfg["tie_word_embeddings"]}
             if cfg.get("tie_word_embeddings") is not None else {})
    return defaults | beside | text | tying | {"architectures": [arch]}


def _activation(cfg: dict, path: Path, arch: str) -> str:
    """The MLP's activation. Gemma 2 and 3 name theirs hidden_activation; Gemma's first
    releases say gelu where they mean its tanh approximation, as transformers reads them."""
    named = cfg.get("hidden_activation") or cfg.get("hidden_act") or (
        "gelu_pytorch_tanh" if arch.startswith("gemma") else "silu")
    if arch == "gemma" and named == "gelu":
        named = "gelu_pytorch_tanh"
    if named not in ACTIVATIONS:
        raise ModelLoadError(path, f"hidden activation {named!r} is not supported "
                                   f"({', '.join(ACTIVATIONS)})")
    return ACTIVATIONS[named]


# Which layers slide where config.json has no layer_types, as transformers reads it: every layer
# (Mistral, Ministral 3, Phi-3, Mixtral, Qwen3-MoE, StarCoder2), all but every pattern-th
# (Gemma 3, pattern 6; Gemma 2, 2; EXAONE 4, 4 or its L and G; OLMo 3 and Cohere 2, 4), those
# from max_window_layers (Qwen2 and 3 with use_sliding_window), every other one below it
# (Qwen2-MoE's)
def _sliding_window(cfg: dict, path: Path, arch: str, layers: int) -> dict:
    """sliding_window and sliding_layers: the layers where a query sees only the window's keys
    up to its own (and Gemma 3's local RoPE turns, however long its window)."""
    window = integer(cfg, path, "sliding_window", 0)
    if window < 0:
        raise ModelLoadError(path, f"sliding_window must not be negative, got {window}")
    if (arch.startswith("qwen") and not boolean(cfg, path, "use_sliding_window", False)
            or arch == "olmoe"):  # OLMoE's attention never slides, whatever its config says
        window = 0
    types = cfg.get("layer_types")
    if types is not None:
        kinds = ("sliding_attention", "full_attention")
        if not isinstance(types, list) or len(types) != layers or any(t not in kinds
                                                                      for t in types):
            raise ModelLoadError(path, f"layer_types must name one of {kinds} for each of the "
                                       f"{layers} layers, got {types!r}")
        sliding = [i for i, kind in enumerate(types) if kind == "sliding_attention"]
    elif arch == "exaone4" and isinstance(cfg.get("sliding_window_pattern"), str):
        pattern = cfg["sliding_window_pattern"]  # "LLLG": three local layers, then a global one
        if not pattern or set(pattern) - {"L", "G"}:
            raise ModelLoadError(path, f"sliding_window_pattern must be of L and G, got "
                                       f"{pattern!r}")
        sliding = [i for i in range(layers) if pattern[i % len(pattern)] == "L"]
    elif arch in ("gemma2", "gemma3", "exaone4", "olmo3", "cohere2"):
        pattern = (2 if arch == "gemma2" else 4 if arch == "olmo3" else
                   integer(cfg, path, "sliding_window_pattern", 6 if arch == "gemma3" else 4))
        if pattern < 1:
            raise ModelLoadError(path, f"sliding_window_pattern must be at least 1, got {pattern}")
        sliding = [i for i in range(layers) if (i + 1) % pattern]
    elif arch in ("mistral", "ministral3", "phi3", "mixtral", "qwen3_moe", "starcoder2"):
        sliding = list(range(layers))
    elif arch in ("qwen2", "qwen3"):
        sliding = list(range(integer(cfg, path, "max_window_layers", 28), layers))
    elif arch == "qwen2_moe":  # every other layer below max_window_layers
        below = integer(cfg, path, "max_window_layers", 28)
        sliding = [i for i in range(min(below, layers)) if (i + 1) % 2]
    else:
        sliding = []
    if not sliding or not window:
        return {}
    return {"sliding_window": window, "sliding_layers": tuple(sliding)}


def _nope_layers(cfg: dict, path: Path, layers: int) -> tuple[int, ...]:
    """SmolLM3's layers without RoPE: its no_rope_layers flags (1: RoPE, 0: none; a flag for
    each layer at least), else every no_rope_layer_interval-th layer (4 unless given), as
    transformers reads them."""
    flags = cfg.get("no_rope_layers")
    if flags is None:
        interval = integer(cfg, path, "no_rope_layer_interval", 4)
        if interval < 1:
            raise ModelLoadError(path, f"no_rope_layer_interval must be at least 1, got {interval}")
        flags = [int((i + 1) % interval != 0) for i in range(layers)]
    if not isinstance(flags, list) or len(flags) < layers or any(f not in (0, 1) for f in flags):
        raise ModelLoadError(path, f"no_rope_layers must be a 0 or 1 for each of the {layers} "
                                   f"layers, got {flags!r}")
    return tuple(i for i in range(layers) if not flags[i])
