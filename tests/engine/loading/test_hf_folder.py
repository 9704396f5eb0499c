"""Loading Hugging Face folders saved by transformers, and every way a folder can be broken."""
from __future__ import annotations

import json
import math

import pytest
import torch

from engine.cli.options import check_drafter
from engine.errors import ModelLoadError, SwarmscopeError
from engine.forward_batch import LaneInput
from engine.kv_cache import PagedKVCache
from engine.loading import load_model
from engine.loading.hf_folder import read_config
from engine.loading.weights import Weights
from engine.model import LlamaModel
from engine.runner import ModelRunner
from engine.spec.draft_model import first_layers

from .conftest import (MINISTRAL3_ROPE, VOCAB, engine_logits, hf_mistral3, hf_tiny,
                       reference_logits, save_hf_folder)

PROMPT = [5, 17, 99, 3, 250, 42, 7, 7, 120, 64, 1, 200]


@pytest.mark.parametrize("arch,tie", [("llama", False), ("llama", True), ("mistral", False),
                                      ("qwen2", False), ("qwen3", True), ("phi3", False),
                                      ("phi3", True), ("olmo2", False), ("seed_oss", False),
                                      ("glm4", False), ("ernie4_5", True), ("helium", False)])
def test_saved_folder_logits_match_transformers(tmp_path, arch, tie):
    hf = hf_tiny(arch, tie_word_embeddings=tie)
    folder = save_hf_folder(hf, tmp_path / f"tiny-{arch}")
    loaded = load_model(str(folder), dtype="fp32", device="cpu")
    assert loaded.name == f"tiny-{arch}" and loaded.config.architecture == arch
    assert loaded.config.qkv_bias == (arch in ("qwen2", "seed_oss", "glm4"))
    assert loaded.config.qk_norm == (arch in ("qwen3", "olmo2"))
    assert loaded.config.norm_after == (arch in ("olmo2", "glm4"))  # sublayers' outputs normed
    assert loaded.config.fused_projections == (arch == "phi3")  # qkv_proj, gate_up_proj
    assert loaded.config.tie_word_embeddings == tie
    ours, ref = engine_logits(loaded.model, PROMPT), reference_logits(hf, PROMPT)
    torch.testing.assert_close(ours, ref, atol=1e-4, rtol=0)


@pytest.mark.parametrize("flags,layers,nope", [
    ({"no_rope_layers": [1, 0]}, 2, (1,)),  # as SmolLM3-3B's config lists them
    ({}, 4, (3,)),                          # none listed: every 4th layer
])
def test_smollm3s_layers_without_rope_match_transformers(tmp_path, flags, layers, nope):
    hf = hf_tiny("smollm3", tie_word_embeddings=True, num_hidden_layers=layers, **flags)
    loaded = load_model(str(save_hf_folder(hf, tmp_path / "smollm3")), dtype="fp32", device="cpu")
    assert loaded.config.architecture == "smollm3" and loaded.config.nope_layers == nope
    assert first_layers(loaded.model, layers - 1).config.nope_layers == ()  # a self-draft's
    torch.testing.assert_close(engine_logits(loaded.model, PROMPT), reference_logits(hf, PROMPT),
                               atol=1e-4, rtol=0)


# Granite 3's scalars, in kind (its 8B's: 12, 0.22, 1/128, 16)
GRANITE = {"embedding_multiplier": 12.0, "residual_multiplier": 0.22,
           "attention_multiplier": 0.1, "logits_scaling": 8.0}


def test_granites_scalars_match_transformers(tmp_path):
    hf = hf_tiny("granite", tie_word_embeddings=True, **GRANITE)
    loaded = load_model(str(save_hf_folder(hf, tmp_path / "granite")), dtype="fp32", device="cpu")
    assert {name: getattr(loaded.config, name) for name in GRANITE} == GRANITE
    ref = reference_logits(hf, PROMPT)
    torch.testing.assert_close(engine_logits(loaded.model, PROMPT), ref, atol=1e-4, rtol=0)
    # with Llama's ones the logits differ: the match means the scalars
    llama = hf_tiny("granite", tie_word_embeddings=True, attention_multiplier=16 ** -0.5)
    assert (reference_logits(llama, PROMPT) - ref).abs().max() > 1e-2


# Each Gemma with what sets it apart turned so that it shows in the tiny model: a window of 5 of
# the prompt's 12 tokens, caps its scores and logits reach, a local RoPE base of its own
GEMMAS = {
    "gemma": {},
    "gemma2": {"attn_logit_softcapping": 0.05, "final_logit_softcapping": 0.02},
    "gemma3": {"num_hidden_layers": 3, "sliding_window_pattern": 3,
               "rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 5e3},
                                   "sliding_attention": {"rope_type": "default",
                                                         "rope_theta": 50.0}}},
}


@pytest.mark.parametrize("arch", GEMMAS)
def test_gemmas_match_transformers(tmp_path, arch):
    hf = hf_tiny(arch, tie_word_embeddings=True, **GEMMAS[arch])
    loaded = load_model(str(save_hf_folder(hf, tmp_path / arch)), dtype="fp32", device="cpu")
    c = loaded.config
    assert (c.architecture, c.gemma_norms, c.activation) == (arch, True, "gelu_tanh")
    assert c.norm_after == (arch != "gemma") and c.qk_norm == (arch == "gemma3")
    assert c.embedding_multiplier == 8.0  # sqrt(hidden_size)
    assert (c.sliding_window, c.sliding_layers) == {"gemma": (None, ()), "gemma2": (5, (0,)),
                                                    "gemma3": (5, (0, 1))}[arch]
    assert c.local_rope_theta == (50.0 if arch == "gemma3" else None)
    if arch == "gemma2":
        assert (c.attention_softcap, c.logits_softcap) == (0.05, 0.02)
    torch.testing.assert_close(engine_logits(loaded.model, PROMPT), reference_logits(hf, PROMPT),
                               atol=1e-4, rtol=0)
    assert first_layers(loaded.model, 1).config.sliding_layers == c.sliding_layers[:1]
    # the norms' 1 + weight is the checkpoint's weight again when saved back
    saved = loaded.model.hf_state_dict()
    torch.testing.assert_close(saved["model.norm.weight"], hf.model.norm.weight)


# The fields transformers 4.42-4.50 wrote where 5.x writes rope_parameters and layer_types
HUB_STYLE = {
    "gemma2": ({"rope_theta": 5e3, "hidden_act": "gelu_pytorch_tanh",
                "cache_implementation": "hybrid"}, (0,)),
    "gemma3": ({"rope_theta": 5e3, "rope_local_base_freq": 50.0, "rope_scaling": None,
                "sliding_window_pattern": 3, "attn_logit_softcapping": None,
                "final_logit_softcapping": None, "cache_implementation": "hybrid"}, (0, 1)),
}


@pytest.mark.parametrize("arch", HUB_STYLE)
def test_a_gemma_config_as_the_hub_ships_it_reads_the_same(tmp_path, arch):
    """Gemma 2 2B's and Gemma 3 1B's config.json as the transformers of their day wrote them
    (RoPE bases beside the other fields, the window's pattern or none, no layer_types)."""
    hf = hf_tiny(arch, tie_word_embeddings=True, **GEMMAS[arch])
    folder = save_hf_folder(hf, tmp_path / arch)
    cfg = json.loads((folder / "config.json").read_text())
    for name in ("layer_types", "rope_parameters", "tie_word_embeddings"):
        cfg.pop(name)
    fields, sliding = HUB_STYLE[arch]
    (folder / "config.json").write_text(json.dumps(cfg | fields))
    loaded = load_model(str(folder), dtype="fp32", device="cpu")
    c = loaded.config
    assert (c.rope_theta, c.sliding_layers, c.tie_word_embeddings) == (5e3, sliding, True)
    assert c.local_rope_theta == fields.get("rope_local_base_freq")
    torch.testing.assert_close(engine_logits(loaded.model, PROMPT), reference_logits(hf, PROMPT),
                               atol=1e-4, rtol=0)


def _gemma3_that_sees_images(**text):
    """A tiny Gemma3ForConditionalGeneration: the tiny text model beside a vision tower."""
    transformers = pytest.importorskip("transformers")
    text = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, head_dim=16, pad_token_id=0,
                max_position_embeddings=256, query_pre_attn_scalar=24, sliding_window=5) | text
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                  num_attention_heads=2, image_size=28, patch_size=14)
    torch.manual_seed(0)
    model = transformers.Gemma3ForConditionalGeneration(transformers.Gemma3Config(
        text_config=text, vision_config=vision, mm_tokens_per_image=4,
        boi_token_index=VOCAB - 3, eoi_token_index=VOCAB - 2, image_token_index=VOCAB - 1)).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.add_(0.1 * torch.randn_like(param))
    return model


def test_the_text_model_of_a_gemma_3_that_sees_images_loads_alone(tmp_path):
    """Gemma 3's 4B-27B: Gemma3ForConditionalGeneration, its text model's config in text_config
    and its tensors under language_model.model.*, beside the vision tower's, which are not read."""
    hf = _gemma3_that_sees_images()
    folder = save_hf_folder(hf, tmp_path / "gemma3-mm")
    loaded = load_model(str(folder), dtype="fp32", device="cpu")
    assert loaded.config.architecture == "gemma3" and loaded.config.sliding_layers == (0, 1)
    torch.testing.assert_close(engine_logits(loaded.model, PROMPT), reference_logits(hf, PROMPT),
                               atol=1e-4, rtol=0)


def test_a_text_config_that_leaves_fields_out_gets_transformers_defaults(tmp_path):
    """As the hub's Gemma 3 configs list only what differs: each field left out reads as
    transformers' own default (checked against its Gemma3TextConfig)."""
    transformers = pytest.importorskip("transformers")
    folder = save_hf_folder(_gemma3_that_sees_images(), tmp_path / "gemma3-mm")
    cfg = json.loads((folder / "config.json").read_text())
    kept = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers")
    cfg["text_config"] = {name: cfg["text_config"][name] for name in kept}
    (folder / "config.json").write_text(json.dumps(cfg))
    ours = read_config(folder)
    theirs = transformers.Gemma3TextConfig(**cfg["text_config"])
    assert (ours.num_heads, ours.num_kv_heads, ours.head_dim, ours.rms_norm_eps) == (
        theirs.num_attention_heads, theirs.num_key_value_heads, theirs.head_dim,
        theirs.rms_norm_eps)
    assert ours.attention_multiplier == theirs.query_pre_attn_scalar ** -0.5
    assert ours.rope_theta == theirs.rope_parameters["full_attention"]["rope_theta"]
    assert ours.local_rope_theta == theirs.rope_parameters["sliding_attention"]["rope_theta"]
    assert ours.sliding_window == theirs.sliding_window and ours.tie_word_embeddings
    assert ours.sliding_layers == tuple(i for i, kind in enumerate(theirs.layer_types)
                                        if kind == "sliding_attention")
    assert ours.max_position == theirs.max_position_embeddings


@pytest.mark.parametrize("fields,sliding,nope", [
    ({"sliding_window": 5, "layer_types": ["sliding_attention"] * 3 + ["full_attention"]},
     (0, 1, 2), (3,)),                                   # 32B's kind: LLLG, RoPE in the Ls
    ({"sliding_window": None, "layer_types": ["full_attention"] * 4}, (), ()),  # 1.2B's kind
])
def test_exaone_4_matches_transformers(tmp_path, fields, sliding, nope):
    hf = hf_tiny("exaone4", num_hidden_layers=4, tie_word_embeddings=True, **fields)
    loaded = load_model(str(save_hf_folder(hf, tmp_path / "exaone4")), dtype="fp32",
                        device="cpu")
    c = loaded.config
    assert (c.norm_before, c.norm_after, c.qk_norm, c.qk_norm_whole) == (False, True, True, False)
    assert (c.sliding_layers, c.nope_layers) == (sliding, nope)
    torch.testing.assert_close(engine_logits(loaded.model, PROMPT), reference_logits(hf, PROMPT),
                               atol=1e-4, rtol=0)


# Windows of 5 tokens (Mistral's and Phi-3's in every layer, Qwen2's from max_window_layers)
WINDOWED = {"gemma2": {}, "gemma3": {"sliding_window_pattern": 2},
            "mistral": {"sliding_window": 5}, "phi3": {"sliding_window": 5},
            "qwen2": {"use_sliding_window": True, "sliding_window": 5, "max_window_layers": 1},
            "exaone4": {"sliding_window": 5,
                        "layer_types": ["sliding_attention", "full_attention"]},
            "olmo3": {"sliding_window": 5, "num_hidden_layers": 4}}


@pytest.mark.parametrize("layout", ["packed", "padded"])
@pytest.mark.parametrize("arch", WINDOWED)
def test_windows_hold_when_prompts_are_fed_in_pieces(tmp_path, arch, layout):
    """Two lanes fed a few tokens a step, as decoding and verifying drafts feed them, past the
    window: each piece's logits are the whole prompt's at its positions."""
    hf = hf_tiny(arch, **WINDOWED[arch])
    loaded = load_model(str(save_hf_folder(hf, tmp_path / arch)), dtype="fp32", device="cpu")
    assert loaded.config.sliding_window == 5 and loaded.config.sliding_layers
    prompts = [PROMPT, PROMPT[::-1] + PROMPT[:3]]
    pieces = [[7, 1, 1, 3], [4, 1, 6, 1, 3]]
    refs = [reference_logits(hf, p) for p in prompts]
    runner = ModelRunner(loaded.model, PagedKVCache(loaded.config, 16, 4, torch.float32, "cpu"))
    fed = [0, 0]
    for step in range(5):
        lanes = [LaneInput(i, prompts[i][fed[i]:fed[i] + n[step]], fed[i], n[step])
                 for i, n in enumerate(pieces) if step < len(n)]
        out = runner.forward(lanes, layout)
        for lane, logits in zip(lanes, out.logits):
            want = refs[lane.seq_id][lane.start_pos:lane.end_pos]
            torch.testing.assert_close(logits, want, atol=1e-4, rtol=0)
            fed[lane.seq_id] = lane.end_pos


@pytest.mark.parametrize("arch,fields,sliding", [
    ("gemma2", {}, (0, 2)),
    ("gemma3", {"sliding_window_pattern": 3}, (0, 1, 3)),
    ("gemma3", {}, (0, 1, 2, 3)),  # every 6th is full
    ("mistral", {"sliding_window": 8}, (0, 1, 2, 3)),
    ("qwen2", {"use_sliding_window": True, "sliding_window": 8, "max_window_layers": 2}, (2, 3)),
    ("qwen2", {"use_sliding_window": False, "sliding_window": 8}, ()),
    ("llama", {"sliding_window": 8}, ()),
    ("exaone4", {"sliding_window": 8, "sliding_window_pattern": "LLLG"}, (0, 1, 2)),
    ("exaone4", {"sliding_window": 8, "sliding_window_pattern": 2}, (0, 2)),
])
def test_which_layers_slide_where_the_config_does_not_list_them(tmp_path, arch, fields, sliding):
    folder = save_hf_folder(hf_tiny(arch, num_hidden_layers=4), tmp_path / arch)
    cfg = json.loads((folder / "config.json").read_text())
    cfg.pop("layer_types", None)
    (folder / "config.json").write_text(json.dumps(cfg | fields))
    assert read_config(folder).sliding_layers == sliding


# Scaled RoPE with the tiny models' 16-24 wide heads: an original context of 64 puts most of
# their frequencies inside the range each variant changes.
ROPE_SCALINGS = {
    "linear": {"rope_type": "linear", "factor": 4.0},
    "llama3": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64},
    # Phi-4-mini's form: RoPE on the leading 3/4 of each 16-wide head, a factor for each of its 6
    # frequencies; the context (256) 4x the original, so cos and sin are scaled too
    "longrope": {"rope_type": "longrope", "partial_rotary_factor": 0.75,
                 "short_factor": [1.0, 1.3, 2.1, 3.4, 5.5, 8.9], "long_factor": [9.0] * 6,
                 "original_max_position_embeddings": 64},
}


@pytest.mark.parametrize("text_type,tie", [("mistral", False), ("ministral3", False),
                                           ("ministral3", True)])
def test_mistral3s_text_model_loads_alone(tmp_path, text_type, tie):
    """Mistral3ForConditionalGeneration: the text model its text_config names, its
    language_model tensors read, the vision tower's and projector's not; its head tied as the
    whole model's config says (transformers 5 ties by it, and saves no head then)."""
    hf = hf_mistral3(text_type, tie, **({"rope_parameters": MINISTRAL3_ROPE}
                                      if text_type == "ministral3" else {"rope_theta": 5000.0}))
    loaded = load_model(str(save_hf_folder(hf, tmp_path / f"{text_type}-{tie}")), dtype="fp32",
                        device="cpu")
    c = loaded.config
    assert c.architecture == text_type and c.tie_word_embeddings == tie
    if text_type == "ministral3":
        assert (c.query_scaling_beta, c.query_scaling_context) == (0.1, 8)
        assert c.rope_scaling.kind == "yarn"
    torch.testing.assert_close(engine_logits(loaded.model, PROMPT), reference_logits(hf, PROMPT),
                               atol=1e-4, rtol=0)


# Tiny vision towers for Qwen2.5-VL and Qwen3-VL (not read: a swarm's prompts are text)
QWEN_VL = {"qwen2_5_vl": ("Qwen2_5_VLConfig", "Qwen2_5_VLForConditionalGeneration", {}, {
               "depth": 1, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2,
               "out_hidden_size": 64, "window_size": 56, "fullatt_block_indexes": [0]}),
           "qwen3_vl": ("Qwen3VLConfig", "Qwen3VLForConditionalGeneration", {"head_dim": 16}, {
               "depth": 1, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2,
               "out_hidden_size": 64, "deepstack_visual_indexes": [0],
               "num_position_embeddings": 16})}


@pytest.mark.parametrize("kind,old_layout", [("qwen2_5_vl", False), ("qwen2_5_vl", True),
                                             ("qwen3_vl", False)])
def test_qwen_vl_text_models_load_alone(tmp_path, kind, old_layout):
    """Qwen2.5-VL's text model is Qwen2's, Qwen3-VL's Qwen3's; their multimodal RoPE
    (mrope_section) turns text as plain RoPE does, the vision tower is not read. Qwen2.5-VL's
    first configs keep the text's fields beside vision_config, RoPE as {"type": "mrope"}."""
    transformers = pytest.importorskip("transformers")
    config_cls, model_cls, fields, vision = QWEN_VL[kind]
    text = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=2,
                rope_parameters={"rope_type": "default", "rope_theta": 5000.0,
                                 "mrope_section": [4, 2, 2]}, **fields)
    torch.manual_seed(0)
    hf = getattr(transformers, model_cls)(getattr(transformers, config_cls)(
        text_config=text, vision_config=vision, image_token_id=260, video_token_id=261,
        vision_start_token_id=262)).eval()
    with torch.no_grad():  # the default init leaves norms at exactly 1 and biases at 0
        for name, p in hf.named_parameters():
            if name.endswith("norm.weight") or name.endswith(".bias"):
                p.add_(0.1 * torch.randn_like(p))
    folder = save_hf_folder(hf, tmp_path / kind)
    if old_layout:
        cfg = json.loads((folder / "config.json").read_text())
        text_fields = cfg.pop("text_config")
        text_fields.pop("rope_parameters")
        (folder / "config.json").write_text(json.dumps(cfg | text_fields | {
            "rope_theta": 5000.0, "rope_scaling": {"type": "mrope", "mrope_section": [4, 2, 2]}}))
    loaded = load_model(str(folder), dtype="fp32", device="cpu")
    assert loaded.config.architecture == ("qwen2" if kind == "qwen2_5_vl" else "qwen3")
    torch.testing.assert_close(engine_logits(loaded.model, PROMPT), reference_logits(hf, PROMPT),
                               atol=1e-4, rtol=0)


@pytest.mark.parametrize("kind,text_type", [("Llava", "llama"), ("Llava", "qwen2"),
                                            ("SmolVLM", "llama"), ("Idefics3", "llama")])
def test_llava_and_smolvlm_text_models_load_alone(tmp_path, kind, text_type):
    """LLaVA (its text model Llama's, Mistral's or Qwen2's) and SmolVLM (Idefics3's: Llama's,
    under model.text_model): the text model's tensors read, the vision tower's, projector's and
    connector's not."""
    transformers = pytest.importorskip("transformers")
    text = dict(model_type=text_type, vocab_size=VOCAB, hidden_size=64, intermediate_size=96,
                num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                max_position_embeddings=256, rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=2)
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                  num_attention_heads=2, image_size=32, patch_size=16)
    if kind == "Llava":
        config = transformers.LlavaConfig(text_config=text, image_token_index=260,
                                          vision_config=vision | {
                                              "model_type": "clip_vision_model"})
    else:
        config = getattr(transformers, f"{kind}Config")(text_config=text, vision_config=vision,
                                                         image_token_id=260, scale_factor=2)
    torch.manual_seed(0)
    hf = getattr(transformers, f"{kind}ForConditionalGeneration")(config).eval()
    with torch.no_grad():  # the default init leaves norms at exactly 1 and biases at 0
        for name, p in hf.named_parameters():
            if name.endswith("norm.weight") or name.endswith(".bias"):
                p.add_(0.1 * torch.randn_like(p))
    loaded = load_model(str(save_hf_folder(hf, tmp_path / kind)), dtype="fp32", device="cpu")
    assert loaded.config.architecture == text_type
    torch.testing.assert_close(engine_logits(loaded.model, PROMPT), reference_logits(hf, PROMPT),
                               atol=1e-4, rtol=0)


# The hub's configs of the LayerNormed families, as their models ship them (the fields that
# shape the model), and what each reads as: (architecture, head_dim, rotary_dim, eps, logits
# scaling, q/k/v biases, other biases, parallel block, sliding layers)
LAYER_NORMED_HUB_CONFIGS = {
    "phi-2": ({"architectures": ["PhiForCausalLM"], "model_type": "phi", "hidden_act": "gelu_new",
               "hidden_size": 2560, "intermediate_size": 10240, "layer_norm_eps": 1e-05,
               "max_position_embeddings": 2048, "num_attention_heads": 32,
               "num_hidden_layers": 32, "num_key_value_heads": 32,
               "partial_rotary_factor": 0.4, "qk_layernorm": False, "rope_scaling": None,
               "rope_theta": 10000.0, "tie_word_embeddings": False, "vocab_size": 51200,
               "bos_token_id": 50256, "eos_token_id": 50256},
              ("phi", 80, 32, 1e-05, 1.0, True, True, True, 0)),
    "stablelm-2-1_6b": ({"architectures": ["StableLmForCausalLM"], "model_type": "stablelm",
                         "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 5632,
                         "layer_norm_eps": 1e-05, "max_position_embeddings": 4096,
                         "num_attention_heads": 32, "num_hidden_layers": 24,
                         "num_key_value_heads": 32, "partial_rotary_factor": 0.25,
                         "qk_layernorm": False, "rope_theta": 10000, "tie_word_embeddings": False,
                         "use_parallel_residual": False, "use_qkv_bias": True,
                         "vocab_size": 100352, "bos_token_id": 100257, "eos_token_id": 100257},
                        ("stablelm", 64, 16, 1e-05, 1.0, True, False, False, 0)),
    "starcoder2-3b": ({"architectures": ["Starcoder2ForCausalLM"], "model_type": "starcoder2",
                       "hidden_act": "gelu_pytorch_tanh", "hidden_size": 3072,
                       "intermediate_size": 12288, "max_position_embeddings": 16384,
                       "norm_epsilon": 1e-05, "norm_type": "layer_norm",
                       "num_attention_heads": 24, "num_hidden_layers": 30,
                       "num_key_value_heads": 2, "rope_theta": 999999.4420358813,
                       "sliding_window": 4096, "use_bias": True, "vocab_size": 49152,
                       "bos_token_id": 0, "eos_token_id": 0},
                      ("starcoder2", 128, 128, 1e-05, 1.0, True, True, False, 30)),
    "aya-expanse-8b": ({"architectures": ["CohereForCausalLM"], "model_type": "cohere",
                        "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 14336,
                        "layer_norm_eps": 1e-05, "logit_scale": 0.125,
                        "max_position_embeddings": 8192, "num_attention_heads": 32,
                        "num_hidden_layers": 32, "num_key_value_heads": 8, "rope_theta": 10000,
                        "use_qk_norm": False, "vocab_size": 256000, "bos_token_id": 5,
                        "eos_token_id": 255001},
                       ("cohere", 128, 128, 1e-05, 8.0, False, False, True, 0)),
    "c4ai-command-r7b-12-2024": ({"architectures": ["Cohere2ForCausalLM"],
                                  "model_type": "cohere2", "hidden_act": "silu",
                                  "hidden_size": 4096, "intermediate_size": 14336,
                                  "layer_norm_eps": 1e-05, "logit_scale": 0.25,
                                  "max_position_embeddings": 8192, "num_attention_heads": 32,
                                  "num_hidden_layers": 32, "num_key_value_heads": 8,
                                  "rope_theta": 50000.0, "sliding_window": 4096,
                                  "sliding_window_pattern": 4, "vocab_size": 256000,
                                  "bos_token_id": 5, "eos_token_id": 255001},
                                 ("cohere2", 128, 128, 1e-05, 4.0, False, False, True, 24)),
    "Nemotron-Mini-4B-Instruct": ({"architectures": ["NemotronForCausalLM"],
                                   "model_type": "nemotron", "hidden_act": "relu2",
                                   "hidden_size": 3072, "intermediate_size": 9216,
                                   "max_position_embeddings": 4096, "norm_eps": 1e-05,
                                   "num_attention_heads": 24, "num_hidden_layers": 32,
                                   "num_key_value_heads": 8, "partial_rotary_factor": 0.5,
                                   "rope_theta": 10000, "tie_word_embeddings": False,
                                   "vocab_size": 256000, "bos_token_id": 2, "eos_token_id": 3},
                                  ("nemotron", 128, 64, 1e-05, 1.0, False, False, False, 0)),
}


@pytest.mark.parametrize("name", LAYER_NORMED_HUB_CONFIGS)
def test_the_hubs_layernormed_configs_read_as_their_models(tmp_path, name):
    config, expected = LAYER_NORMED_HUB_CONFIGS[name]
    (tmp_path / "config.json").write_text(json.dumps(config))
    c = read_config(tmp_path)
    assert (c.architecture, c.head_dim, c.rotary_dim, c.rms_norm_eps, c.logits_scaling,
            c.qkv_bias, c.linear_bias, c.parallel_block, len(c.sliding_layers)) == expected
    assert c.layer_norm and c.num_layers == config["num_hidden_layers"]


def test_granite_4_micro_matches_transformers(tmp_path):
    """Granite 4.0 Micro: GraniteMoeHybrid with every layer attention and no experts, its MLP
    shared_mlp (gate and up one tensor), Granite's scalars."""
    hf = hf_tiny("granitemoehybrid", num_local_experts=0, shared_intermediate_size=48,
                 layer_types=["attention"] * 2, position_embedding_type="rope",
                 mamba_n_heads=8, mamba_d_head=16, embedding_multiplier=12.0,
                 residual_multiplier=0.22, attention_multiplier=0.1, logits_scaling=8.0)
    loaded = load_model(str(save_hf_folder(hf, tmp_path / "granite4")), dtype="fp32",
                        device="cpu")
    c = loaded.config
    assert (c.architecture, c.intermediate_size, c.logits_scaling) == ("granitemoehybrid", 48, 8.0)
    torch.testing.assert_close(engine_logits(loaded.model, PROMPT), reference_logits(hf, PROMPT),
                               atol=1e-4, rtol=0)


@pytest.mark.parametrize("fields,named", [
    ({"layer_types": ["mamba", "attention"]}, "Mamba layers"),
    ({"num_local_experts": 4}, "a mixture of 4 experts"),
    ({"position_embedding_type": "nope"}, "position_embedding_type 'nope'")])
def test_granite_4s_hybrids_are_refused_by_what_they_have(tmp_path, fields, named):
    folder = save_hf_folder(hf_tiny("granitemoehybrid", num_local_experts=0,
                                    shared_intermediate_size=48, layer_types=["attention"] * 2,
                                    mamba_n_heads=8, mamba_d_head=16), tmp_path / "granite4h")
    _edit_config(folder, **fields)
    _raises(folder, "config.json", named)


def test_llava_15s_text_config_takes_llamas_defaults(tmp_path):
    """LLaVA 1.5's text_config names a few fields and leaves the rest to LlamaConfig's."""
    folder = tmp_path / "llava"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({
        "architectures": ["LlavaForConditionalGeneration"], "image_token_index": 32000,
        "text_config": {"architectures": ["LlamaForCausalLM"], "max_position_embeddings": 4096,
                        "model_type": "llama", "rms_norm_eps": 1e-5, "vocab_size": 32064},
        "vision_config": {"model_type": "clip_vision_model"}}))
    c = read_config(folder)
    assert (c.architecture, c.hidden_size, c.intermediate_size, c.num_layers, c.num_heads,
            c.vocab_size, c.max_position) == ("llama", 4096, 11008, 32, 32, 32064, 4096)


def test_mistral3_with_another_text_model_is_refused_naming_its_type(tmp_path):
    folder = save_hf_folder(hf_mistral3("mistral"), tmp_path / "mistral3")
    _edit_config(folder, text_config=json.loads((folder / "config.json").read_text())[
        "text_config"] | {"model_type": "llama"})
    _raises(folder, "config.json", "text_config's model_type 'llama' is not supported "
                                   "(mistral, ministral3)")


@pytest.mark.parametrize("arch,fields,sliding", [
    ("cohere", {}, ()),  # Aya Expanse's and Command R's kind
    ("cohere", {"logit_scale": 0.125, "tie_word_embeddings": False}, ()),
    # Command R7B's kind: three sliding layers to a full one, RoPE in the sliding ones alone
    ("cohere2", {"num_hidden_layers": 4, "sliding_window": 5}, (0, 1, 2))])
def test_cohere_matches_transformers(tmp_path, arch, fields, sliding):
    """Cohere: LayerNorms (no bias, in fp32), the attention and MLP side by side on one normed
    input, RoPE on adjacent pairs, logits scaled by logit_scale."""
    hf = hf_tiny(arch, **fields)
    loaded = load_model(str(save_hf_folder(hf, tmp_path / arch)), dtype="fp32", device="cpu")
    c = loaded.config
    assert (c.layer_norm, c.parallel_block, c.rope_interleaved) == (True, True, True)
    assert c.logits_scaling == 1 / fields.get("logit_scale", 0.0625)
    assert (c.sliding_layers, c.nope_layers) == (sliding, (3,) if sliding else ())
    torch.testing.assert_close(engine_logits(loaded.model, PROMPT), reference_logits(hf, PROMPT),
                               atol=1e-4, rtol=0)


@pytest.mark.parametrize("fields,parallel", [
    ({"use_qkv_bias": True}, False),  # StableLM 2 1.6B's (and Zephyr's) kind
    ({"use_parallel_residual": True}, True)])
def test_stablelm_matches_transformers(tmp_path, fields, parallel):
    """StableLM: LayerNorms with biases, RoPE on a quarter of each head (transformers' default,
    left out of the config here), q/k/v biases and the parallel block where told."""
    hf = hf_tiny("stablelm", **fields)
    folder = save_hf_folder(hf, tmp_path / "stablelm")
    cfg = json.loads((folder / "config.json").read_text())
    cfg.get("rope_parameters", {}).pop("partial_rotary_factor", None)
    (folder / "config.json").write_text(json.dumps(cfg))
    loaded = load_model(str(folder), dtype="fp32", device="cpu")
    c = loaded.config
    assert (c.layer_norm, c.norm_bias, c.parallel_block, c.rotary_dim) == (True, True, parallel, 4)
    assert c.qkv_bias == fields.get("use_qkv_bias", False)
    torch.testing.assert_close(engine_logits(loaded.model, PROMPT), reference_logits(hf, PROMPT),
                               atol=1e-4, rtol=0)


@pytest.mark.parametrize("arch,fields", [
    ("arcee", {}),  # AFM-4.5B's kind: Llama's, its MLP ReLU^2 without a gate
    ("starcoder2", {"sliding_window": 5}),  # biases everywhere, every layer windowed
    ("starcoder2", {"use_bias": False, "tie_word_embeddings": False}),
    # Phi-2's and Phi-1.5's kind: all of StarCoder2's, side by side, RoPE on half of each
    # head, gelu_new (GELU's tanh approximation), the head's bias, its own names
    ("phi", {}),
    # Nemotron-Mini's and Minitron's kind: Arcee's MLP, LayerNorms by 1 + weight with biases
    ("nemotron", {})])
def test_mlps_without_a_gate_match_transformers(tmp_path, arch, fields):
    hf = hf_tiny(arch, **fields)
    loaded = load_model(str(save_hf_folder(hf, tmp_path / arch)), dtype="fp32", device="cpu")
    c = loaded.config
    assert not c.gated_mlp and c.activation == ("relu2" if arch in ("arcee", "nemotron") else
                                                "gelu_tanh")
    assert c.linear_bias == c.qkv_bias == (arch == "phi" or arch == "starcoder2"
                                           and fields.get("use_bias", True))
    assert (c.parallel_block, c.head_bias) == ((arch == "phi",) * 2)
    assert c.sliding_layers == (tuple(range(2)) if "sliding_window" in fields else ())
    torch.testing.assert_close(engine_logits(loaded.model, PROMPT), reference_logits(hf, PROMPT),
                               atol=1e-4, rtol=0)


def test_stablelms_q_and_k_layernorms_are_refused_by_name(tmp_path):
    folder = save_hf_folder(hf_tiny("stablelm"), tmp_path / "stablelm")
    _edit_config(folder, qk_layernorm=True)
    _raises(folder, "config.json", "qk_layernorm")


def test_glm4s_names_and_interleaved_rope_are_read_as_the_others(tmp_path):
    """GLM-4: its norms named apart, gate and up fused, RoPE on adjacent pairs of half of each
    head (its q and k rows reordered at load, and back in hf_state_dict)."""
    hf = hf_tiny("glm4", tie_word_embeddings=True, head_dim=16)
    loaded = load_model(str(save_hf_folder(hf, tmp_path / "glm4")), dtype="fp32", device="cpu")
    c = loaded.config
    assert (c.rope_interleaved, c.rotary_dim, c.head_dim) == (True, 8, 16)
    ref = reference_logits(hf, PROMPT)
    torch.testing.assert_close(engine_logits(loaded.model, PROMPT), ref, atol=1e-4, rtol=0)
    saved = loaded.model.hf_state_dict()
    assert torch.equal(saved["model.layers.0.self_attn.q_proj.weight"],
                       hf.state_dict()["model.layers.0.self_attn.q_proj.weight"])
    again = LlamaModel.from_state_dict(c, saved)
    torch.testing.assert_close(engine_logits(again, PROMPT), ref, atol=1e-4, rtol=0)


def test_olmo3_scales_rope_in_its_full_layers_alone(tmp_path):
    """OLMo 3's long-context form: YaRN in its full layers (every 4th), plain RoPE and no YaRN
    factor on the attention's scale in its sliding ones, as transformers gives rope_scaling to
    full_attention alone."""
    hf = hf_tiny("olmo3", num_hidden_layers=4, sliding_window=5, rope_parameters={
        "full_attention": {"rope_theta": 5000.0, **ROPE_SCALINGS["yarn"]},
        "sliding_attention": {"rope_type": "default", "rope_theta": 5000.0}})
    loaded = load_model(str(save_hf_folder(hf, tmp_path / "olmo3")), dtype="fp32", device="cpu")
    c = loaded.config
    assert (c.architecture, c.sliding_layers, c.local_rope_theta) == ("olmo3", (0, 1, 2), 5000.0)
    assert c.rope_scaling.kind == "yarn" and c.norm_after and c.qk_norm_whole
    ref = reference_logits(hf, PROMPT)
    torch.testing.assert_close(engine_logits(loaded.model, PROMPT), ref, atol=1e-4, rtol=0)
    plain = reference_logits(hf_tiny("olmo3", num_hidden_layers=4, sliding_window=5), PROMPT)
    assert (ref - plain).abs().max() > 1e-3  # the scaling shows, so the match means it


@pytest.mark.parametrize("arch,kind", [("llama", "linear"), ("llama", "llama3"),
                                       ("qwen2", "yarn"), ("qwen3", "yarn"), ("phi3", "longrope")])
def test_scaled_rope_logits_match_transformers(tmp_path, arch, kind):
    # Phi3Config sets rope_parameters' original context from its own field (default 4096)
    original = {"original_max_position_embeddings": 64} if arch == "phi3" else {}
    hf = hf_tiny(arch, rope_parameters={"rope_theta": 5000.0, **ROPE_SCALINGS[kind]}, **original)
    folder = save_hf_folder(hf, tmp_path / f"tiny-{arch}-{kind}")
    loaded = load_model(str(folder), dtype="fp32", device="cpu")
    assert loaded.config.rope_scaling.kind == kind
    if kind == "longrope":  # the short factors hold within the original context, capped there
        assert (loaded.config.rotary_dim, loaded.config.max_position) == (12, 64)
    ref = reference_logits(hf, PROMPT)
    torch.testing.assert_close(engine_logits(loaded.model, PROMPT), ref, atol=1e-4, rtol=0)
    # the same weights with plain RoPE: the scaling shows in the logits, so the match means it
    plain = reference_logits(hf_tiny(arch), PROMPT)
    assert (ref - plain).abs().max() > 1e-3  # ten times the match's tolerance


def test_rope_scaling_in_the_older_format(tiny_llama_folder):
    folder, _ = tiny_llama_folder
    _edit_config(folder, rope_parameters=None, rope_theta=5e5,
                 rope_scaling={"type": "yarn", "original_max_position_embeddings": 64})
    config = read_config(folder)  # yarn's factor defaults to max_position / original: 256 / 64
    assert config.rope_theta == 5e5
    assert (config.rope_scaling.kind, config.rope_scaling.factor) == ("yarn", 4.0)


def test_phi_3_5s_older_config_names_its_original_context_beside_its_longrope(tmp_path):
    """As Phi-3.5-mini's config.json has it: rope_scaling of type longrope without a factor,
    original_max_position_embeddings at the top: the factor is the contexts' ratio, and cos and
    sin are scaled by sqrt(1 + ln(factor) / ln(original))."""
    folder = save_hf_folder(hf_tiny("phi3"), tmp_path / "phi-3.5")
    _edit_config(folder, rope_parameters=None, rope_theta=5000.0, max_position_embeddings=256,
                 original_max_position_embeddings=64,
                 rope_scaling={"type": "longrope", "short_factor": [1.0] * 8,
                               "long_factor": [4.0] * 8})
    config = read_config(folder)
    assert (config.rope_scaling.kind, config.rope_scaling.factor) == ("longrope", 4.0)
    assert config.rope_scaling.attention_factor == pytest.approx(
        math.sqrt(1 + math.log(4) / math.log(64)))
    assert config.max_position == 64 and config.rotary_dim == config.head_dim == 16


def test_sharded_folder_loads(tmp_path):
    hf = hf_tiny("llama")
    folder = save_hf_folder(hf, tmp_path / "sharded", max_shard_size="50KB")
    assert (folder / "model.safetensors.index.json").is_file()
    assert len(list(folder.glob("*.safetensors"))) > 1
    loaded = load_model(str(folder), dtype="fp32", device="cpu")
    torch.testing.assert_close(engine_logits(loaded.model, PROMPT),
                               reference_logits(hf, PROMPT), atol=1e-4, rtol=0)


@pytest.mark.parametrize("stored", [torch.bfloat16, torch.float16])
def test_half_precision_weights_on_disk_load_in_fp32(tmp_path, stored):
    """Checkpoints are saved in bf16 (Llama 3, Mistral) or fp16 (Llama 2), and the config's
    torch_dtype, a note only, may be missing: each tensor is cast from its file's dtype."""
    hf = hf_tiny("mistral").to(stored)
    folder = save_hf_folder(hf, tmp_path / "half")
    cfg = json.loads((folder / "config.json").read_text())
    for key in ("torch_dtype", "dtype"):
        cfg.pop(key, None)
    (folder / "config.json").write_text(json.dumps(cfg))
    loaded = load_model(str(folder), dtype="fp32", device="cpu")
    assert loaded.model.dtype == torch.float32
    torch.testing.assert_close(engine_logits(loaded.model, PROMPT),
                               reference_logits(hf.float(), PROMPT), atol=1e-4, rtol=0)


def test_a_hub_cache_snapshot_is_named_for_its_model(tmp_path):
    """huggingface_hub keeps a download as models--ORG--NAME/snapshots/COMMIT/, each file a link
    into blobs/: it loads, and is called NAME, not the commit hash (in the window's title, the
    trace, the calibration cache)."""
    plain = save_hf_folder(hf_tiny("llama"), tmp_path / "plain")
    repo = tmp_path / "hub" / "models--acme--Tiny-Llama-3.1"
    snapshot = repo / "snapshots" / "0123abcd"
    (repo / "blobs").mkdir(parents=True)
    snapshot.mkdir(parents=True)
    for index, file in enumerate(sorted(plain.iterdir())):
        blob = repo / "blobs" / f"blob{index}"
        file.rename(blob)
        (snapshot / file.name).symlink_to(f"../../blobs/{blob.name}")
    assert load_model(str(snapshot), dtype="fp32", device="cpu").name == "Tiny-Llama-3.1"


def test_a_repo_id_or_repo_folder_in_the_hub_cache_loads_its_main_snapshot(tmp_path,
                                                                          monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    repo = tmp_path / "hub" / "models--acme--Tiny"
    save_hf_folder(hf_tiny("llama"), repo / "snapshots" / "0123abcd")
    save_hf_folder(hf_tiny("qwen2"), repo / "snapshots" / "4567ef01")
    with pytest.raises(ModelLoadError, match=r"models--acme--Tiny: a Hugging Face cache folder "
                                             r"with 2 snapshots and no refs/main"):
        load_model("acme/Tiny", dtype="fp32", device="cpu")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("4567ef01")
    for spec in ("acme/Tiny", str(repo)):
        loaded = load_model(spec, dtype="fp32", device="cpu")
        assert loaded.name == "Tiny" and loaded.source == str(repo / "snapshots" / "4567ef01")
    with pytest.raises(ModelLoadError, match=f"no such model folder .*repo id downloaded to "
                                             f"{tmp_path / 'hub'}"):
        load_model("acme/Other", dtype="fp32", device="cpu")
    check_drafter("--drafter", "acme/Tiny")  # a draft model by repo id too,
    check_drafter("--drafter", "acme/Tiny", target=loaded)  # and once the target has loaded
    with pytest.raises(SwarmscopeError, match="--drafter acme/Other: no such folder"):
        check_drafter("--drafter", "acme/Other")


def test_only_model_safetensors_is_read_where_it_is(tiny_llama_folder):
    """As in transformers: Mistral's repos also hold consolidated.safetensors (their own names),
    and a merged fine-tune may keep its adapter's file; neither is this model's weights."""
    from safetensors.torch import save_file

    folder, hf = tiny_llama_folder
    save_file({"layers.0.attention.wq.weight": torch.zeros(4, 4)},
              str(folder / "consolidated.safetensors"))
    save_file({"base_model.model.lm_head.lora_A.weight": torch.zeros(2, 4)},
              str(folder / "adapter_model.safetensors"))
    loaded = load_model(str(folder), dtype="fp32", device="cpu")
    torch.testing.assert_close(engine_logits(loaded.model, PROMPT),
                               reference_logits(hf, PROMPT), atol=1e-4, rtol=0)


def test_weights_that_outgrow_free_memory_are_refused_before_any_is_read(tiny_llama_folder,
                                                                           monkeypatch):
    """Past the machine's memory a load swaps it to a crawl or is killed without a word."""
    import engine.loading as loading

    folder, _ = tiny_llama_folder
    read = []
    monkeypatch.setattr(Weights, "__getitem__", lambda self, name: read.append(name))
    monkeypatch.setattr(loading, "free_memory_bytes", lambda device: 100_000)
    needed = sum(torch.Size(shape).numel() for shape in Weights(folder).shapes.values()) * 4
    with pytest.raises(ModelLoadError, match=rf"its weights need {needed / 1e6:.1f} MB in fp32, "
                                             r"and 0\.1 MB of cpu memory is free; use a smaller "
                                             r"model or --dtype bf16"):
        load_model(str(folder), dtype="fp32", device="cpu")
    assert read == []
    monkeypatch.undo()
    monkeypatch.setattr(loading, "free_memory_bytes", lambda device: None)  # unknown: no check
    assert load_model(str(folder), dtype="fp32", device="cpu").config.num_layers == 2


def test_the_room_a_tied_head_needs_when_prepacked_is_counted(tmp_path, monkeypatch):
    """A tied head prepacked for oneDNN is a copy of the embedding table beside it."""
    import engine.loading as loading

    folder = save_hf_folder(hf_tiny("llama", tie_word_embeddings=True), tmp_path / "tied")
    shapes = Weights(folder).shapes
    plain = sum(torch.Size(shape).numel() for shape in shapes.values()) * 2
    head = torch.Size(shapes["model.embed_tokens.weight"]).numel() * 2
    monkeypatch.setattr(loading, "free_memory_bytes", lambda device: 1000)
    monkeypatch.setattr(loading, "_size", lambda num_bytes: f"{num_bytes} bytes")
    for packed in (False, True):
        monkeypatch.setattr(loading, "prepacks", lambda device, dtype: packed)
        with pytest.raises(ModelLoadError, match=rf"need {plain + packed * head} bytes"):
            load_model(str(folder), dtype="bf16", device="cpu")


def test_bf16_load_casts_weights(tiny_llama_folder):
    folder, _ = tiny_llama_folder
    loaded = load_model(str(folder), dtype="bf16", device="cpu")
    assert loaded.dtype == torch.bfloat16 and loaded.model.dtype == torch.bfloat16


def test_config_mapping_and_eos_from_generation_config(tiny_llama_folder):
    folder, _ = tiny_llama_folder
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": [2, 0]}))
    config = read_config(folder)
    assert (config.hidden_size, config.num_layers, config.num_heads, config.num_kv_heads,
            config.head_dim, config.rope_theta) == (64, 2, 4, 2, 16, 5000.0)
    assert config.eos_token_ids == (2, 0)
    loaded = load_model(str(folder), dtype="fp32", device="cpu")
    # <|im_end|> (id 2, from tokenizer_config) and config's eos ids, each once.
    assert loaded.tokenizer.eos_ids == (2, 0)
    assert loaded.tokenizer.chat_prompt("hi", system="be brief") == \
        "[system] be brief\n[user] hi\n[assistant] "




def _edit_config(folder, **changes):
    path = folder / "config.json"
    cfg = json.loads(path.read_text())
    cfg.update(changes)
    path.write_text(json.dumps(cfg))


def _raises(spec, file_name, *words):
    with pytest.raises(ModelLoadError) as info:
        load_model(str(spec), dtype="fp32", device="cpu")
    assert info.value.path.endswith(file_name), info.value.path
    for word in words:
        assert word in str(info.value), str(info.value)
    return info.value


def test_missing_folder(tmp_path):
    _raises(tmp_path / "nope", "nope", "no such model folder")
    (tmp_path / "weights.bin").write_bytes(b"\0")
    _raises(tmp_path / "weights.bin", "weights.bin", "a file, not a model folder",
            "or a GGUF file")
    (tmp_path / "own.gguf").write_bytes(b"GGUF")
    _raises(tmp_path / "own.gguf", "own.gguf", "not a readable GGUF file")


def test_missing_files(tiny_llama_folder):
    folder, _ = tiny_llama_folder
    (folder / "tokenizer.json").unlink()
    _raises(folder, "tokenizer.json", "not found")
    (folder / "config.json").unlink()
    _raises(folder, "config.json", "not found")


def test_missing_weights(tiny_llama_folder):
    folder, _ = tiny_llama_folder
    (folder / "model.safetensors").unlink()
    _raises(folder, folder.name, "no *.safetensors")
    (folder / "pytorch_model.bin").write_bytes(b"pickle")  # never unpickled: it can run code
    _raises(folder, folder.name, "pytorch_model.bin is a PyTorch pickle, which is not loaded",
            "save_pretrained")


def test_truncated_safetensors(tiny_llama_folder):
    folder, _ = tiny_llama_folder
    path = folder / "model.safetensors"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    _raises(folder, "model.safetensors", "safetensors")


def test_missing_shard(tmp_path):
    folder = save_hf_folder(hf_tiny("llama"), tmp_path / "s", max_shard_size="50KB")
    shard = sorted(folder.glob("model-*.safetensors"))[-1]
    shard.unlink()
    _raises(folder, shard.name, "not found")


def test_a_config_without_architectures_is_read_by_its_model_type(tiny_llama_folder):
    folder, _ = tiny_llama_folder
    _edit_config(folder, architectures=None, model_type="mistral")
    assert read_config(folder).architecture == "mistral"
    _edit_config(folder, model_type="gpt2")
    _raises(folder, "config.json", "architecture None (model_type 'gpt2') is not supported")


def test_a_sentencepiece_model_without_tokenizer_json_says_how_to_make_one(tiny_llama_folder):
    folder, _ = tiny_llama_folder
    (folder / "tokenizer.json").rename(folder / "tokenizer.model")  # its bytes do not matter
    _raises(folder, "tokenizer.json", "file not found; tokenizer.model (SentencePiece) is not read",
            "save_pretrained")


def test_unknown_architecture_lists_supported(tiny_llama_folder):
    folder, _ = tiny_llama_folder
    _edit_config(folder, architectures=["GPTNeoXForCausalLM"])
    _raises(folder, "config.json", "GPTNeoXForCausalLM", "LlamaForCausalLM", "Qwen3ForCausalLM")


def test_weights_are_read_once_each_and_only_after_the_shapes_check(tiny_llama_folder,
                                                                     monkeypatch):
    folder, _ = tiny_llama_folder
    reads = []
    read = Weights.__getitem__
    monkeypatch.setattr(Weights, "__getitem__",
                        lambda self, name: reads.append(name) or read(self, name))
    weights = Weights(folder)
    assert weights.shapes["model.norm.weight"] == (64,) and not reads  # the headers tell
    _edit_config(folder, intermediate_size=100)
    _raises(folder, "model.safetensors", "wrong shape")
    assert not reads  # refused before any tensor was read
    _edit_config(folder, intermediate_size=96)
    load_model(str(folder), dtype="fp32", device="cpu")
    assert sorted(reads) == sorted(weights)


def test_config_weights_mismatch(tiny_llama_folder):
    folder, _ = tiny_llama_folder
    _edit_config(folder, num_hidden_layers=3, intermediate_size=100)
    err = _raises(folder, "model.safetensors", "config.json", "missing", "wrong shape")
    assert "model.layers.2." in str(err)


def test_config_claiming_absurdly_many_layers_is_refused_without_expanding_them(
        tiny_llama_folder):
    folder, _ = tiny_llama_folder
    # a million, not 10**12: expanded name by name (a regression) this still fits in memory
    _edit_config(folder, num_hidden_layers=10**6)
    _raises(folder, "model.safetensors", "missing", f"model.layers.2-{10**6 - 1}.*")


@pytest.mark.parametrize("file_name,content,words", [
    ("tokenizer_config.json", '{"chat_template": 5}', ("must be text",)),
    ("model.safetensors.index.json", '{"weight_map": {"a": 5}}', ("weight_map",)),
    ("generation_config.json", '{"eos_token_id": "x"}', ("eos_token_id",)),
])
def test_bad_side_files_name_themselves(tiny_llama_folder, file_name, content, words):
    folder, _ = tiny_llama_folder
    (folder / file_name).write_text(content)
    _raises(folder, file_name, *words)


@pytest.mark.parametrize("changes,words", [
    ({"hidden_act": "tanh"}, ("tanh", "gelu_pytorch_tanh")),
    ({"attention_bias": True}, ("attention_bias", "not supported")),
    ({"architectures": ["SeedOssForCausalLM"], "attention_out_bias": True},
     ("attention_out_bias", "not supported for seed_oss")),
    ({"architectures": ["Ernie4_5ForCausalLM"], "use_bias": True},
     ("use_bias", "not supported for ernie4_5")),
    ({"sliding_window": 8, "layer_types": ["sliding_attention"]},
     ("layer_types must name one of", "each of the 2 layers")),
    ({"sliding_window": -8}, ("sliding_window must not be negative",)),
    ({"use_bidirectional_attention": True}, ("use_bidirectional_attention",)),
    ({"rope_parameters": {"rope_type": "default", "rope_theta": 0}},
     ("ModelConfig.rope_theta must be positive, got 0",)),
    ({"architectures": ["Gemma3ForConditionalGeneration"]}, ("text_config must be an object",)),
    ({"rope_parameters": {"rope_type": "llama3", "rope_theta": 5e5}}, ("llama3", "factor")),
    ({"rope_parameters": {"rope_type": "dynamic", "factor": 2.0}}, ("dynamic", "not supported")),
    ({"rope_parameters": {"rope_type": "llama3", "factor": 8.0}},
     ("original_max_position_embeddings",)),
    ({"rope_parameters": {"rope_type": "linear", "factor": -1}}, ("factor must be positive",)),
    ({"rope_parameters": {"rope_type": "default", "partial_rotary_factor": 1.5}},
     ("partial_rotary_factor must be in (0, 1], got 1.5",)),
    ({"rope_parameters": {"rope_type": "longrope", "original_max_position_embeddings": 64}},
     ("longrope", "needs short_factor")),
    ({"rope_parameters": {"rope_type": "longrope", "short_factor": [1, 2, 3],
                          "original_max_position_embeddings": 64}},
     ("short_factor has 3 numbers, not one for each of the 8 frequencies",)),
    ({"rope_parameters": "yes"}, ("rope parameters",)),
    ({"max_position_embeddings": "lots"}, ("max_position_embeddings", "lots")),
    ({"num_attention_heads": 3}, ("invalid model shape",)),
    ({"vocab_size": None}, ("vocab_size must be an integer, got None",)),
    # each wrong-typed field named, not a bare int()/float() message or a silent cast
    ({"hidden_size": 64.5}, ("hidden_size must be an integer, got 64.5",)),
    ({"num_key_value_heads": "two"}, ("num_key_value_heads must be an integer, got 'two'",)),
    ({"num_hidden_layers": [2]}, ("num_hidden_layers must be an integer, got [2]",)),
    ({"rms_norm_eps": "tiny"}, ("rms_norm_eps must be a number, got 'tiny'",)),
    ({"tie_word_embeddings": "false"}, ("tie_word_embeddings must be true or false",)),
    ({"rope_parameters": {"rope_type": "default", "rope_theta": "big"}},
     ("rope_theta must be a number, got 'big'",)),
    ({"architectures": ["MistralForCausalLM"], "sliding_window": "x"},
     ("sliding_window must be an integer, got 'x'",)),
    ({"architectures": 5}, ("architecture 5",)),
    ({"architectures": ["GraniteForCausalLM"], "logits_scaling": 0},
     ("logits_scaling and attention_multiplier must be positive",)),
    ({"architectures": ["SmolLM3ForCausalLM"], "no_rope_layers": [1]},
     ("no_rope_layers must be a 0 or 1 for each of the 2 layers, got [1]",)),
    ({"eos_token_id": "x"}, ("eos_token_id", "'x'")),
    ({"eos_token_id": [2, -1]}, ("eos_token_id",)),
    ({"eos_token_id": 10**12}, ("outside the vocabulary",)),
])
def test_bad_config_values(tiny_llama_folder, changes, words):
    folder, _ = tiny_llama_folder
    _edit_config(folder, **changes)
    _raises(folder, "config.json", *words)


@pytest.mark.parametrize("field", ["hidden_size", "num_attention_heads"])
def test_config_missing_field_and_bad_json(tiny_llama_folder, field):
    folder, _ = tiny_llama_folder
    cfg = json.loads((folder / "config.json").read_text())
    del cfg[field]
    (folder / "config.json").write_text(json.dumps(cfg))
    _raises(folder, "config.json", f"missing field {field!r}")
    (folder / "config.json").write_text("{not json")
    _raises(folder, "config.json", "not valid JSON")


def test_chat_template_file_wins_over_tokenizer_config(tiny_llama_folder):
    folder, _ = tiny_llama_folder
    (folder / "chat_template.jinja").write_text(
        "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}<assistant>")
    loaded = load_model(str(folder), dtype="fp32", device="cpu")
    assert loaded.tokenizer.chat_prompt("hi") == "<user>hi<assistant>"


def test_a_processors_chat_template_json_serves_where_the_tokenizer_has_none(
        tiny_llama_folder):
    """Gemma 3's 4B-27B keep theirs in chat_template.json, a processor's file; the tokenizer's
    own wins where it has one, and a broken one names its file."""
    folder, _ = tiny_llama_folder
    (folder / "chat_template.json").write_text(json.dumps({"chat_template": (
        "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}<model>")}))
    assert load_model(str(folder), dtype="fp32", device="cpu").tokenizer.chat_prompt("hi") == \
        "[user] hi\n[assistant] "  # tokenizer_config.json's
    cfg = json.loads((folder / "tokenizer_config.json").read_text())
    del cfg["chat_template"]
    (folder / "tokenizer_config.json").write_text(json.dumps(cfg))
    assert load_model(str(folder), dtype="fp32", device="cpu").tokenizer.chat_prompt("hi") == \
        "<user>hi<model>"
    (folder / "chat_template.json").write_text(json.dumps({"chat_template": "{% if %}"}))
    _raises(folder, "chat_template.json", "does not parse")


def test_generation_configs_sampling_is_the_apis_default(tiny_llama_folder):
    """Qwen2.5's kind of generation_config.json: its temperature, top_p, top_k and
    repetition_penalty serve where an API request leaves them out; a value past the API's range
    names the file."""
    folder, _ = tiny_llama_folder
    path = folder / "generation_config.json"
    given = json.loads(path.read_text()) if path.is_file() else {}
    path.write_text(json.dumps({**given, "temperature": 0.7, "top_p": 0.8, "top_k": 20,
                                "repetition_penalty": 1.05, "do_sample": True}))
    loaded = load_model(str(folder), dtype="fp32", device="cpu")
    assert loaded.sampling_defaults == {"temperature": 0.7, "top_p": 0.8, "top_k": 20,
                                        "repetition_penalty": 1.05}
    path.write_text(json.dumps({**given, "top_k": -1}))  # none, as vLLM reads it
    assert load_model(str(folder), dtype="fp32", device="cpu").sampling_defaults == {"top_k": 0}
    path.write_text(json.dumps({**given, "temperature": 3}))
    _raises(folder, "generation_config.json", "temperature 3 is outside the API's range")


# Qwen3's switch, as its template writes it: an empty thought when thinking is off
QWEN3_STYLE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
               "{% endfor %}<|im_start|>assistant\n"
               "{% if enable_thinking is defined and enable_thinking is false %}"
               "<think>\n\n</think>\n\n{% endif %}")


@pytest.mark.parametrize("thinking", [None, True, False])
def test_thinking_is_the_templates_to_turn_off(tiny_llama_folder, thinking):
    """--no-thinking passes enable_thinking=False, to a task's prompt and to a tool's answer
    alike; without the option the template's own default holds."""
    folder, _ = tiny_llama_folder
    (folder / "chat_template.jinja").write_text(QWEN3_STYLE)
    tokenizer = load_model(str(folder), dtype="fp32", device="cpu", thinking=thinking).tokenizer
    empty_thought = "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    for text in (tokenizer.chat_prompt("hi"), tokenizer.follow_up("3 files")):
        assert text.endswith(empty_thought) == (thinking is False), text


@pytest.mark.parametrize("file_name", ["tokenizer_config.json", "chat_template.jinja"])
def test_broken_chat_template_names_its_file(tiny_llama_folder, file_name):
    folder, _ = tiny_llama_folder
    broken = "{% for m in messages %}"  # never closed
    if file_name == "chat_template.jinja":
        (folder / file_name).write_text(broken)
    else:
        cfg = json.loads((folder / file_name).read_text())
        (folder / file_name).write_text(json.dumps({**cfg, "chat_template": broken}))
    _raises(folder, file_name, "does not parse")


@pytest.mark.parametrize("file_name", ["tokenizer_config.json", "chat_template.jinja"])
def test_a_template_that_refuses_the_messages_names_its_file(tiny_llama_folder, file_name):
    """It parses, so the folder loads; it rejects a conversation only when one is rendered."""
    from engine.chat_template import ChatTemplateError

    folder, _ = tiny_llama_folder
    refusing = "{% if messages[0]['role'] != 'system' %}{{ raise_exception('no system') }}{% endif %}"
    if file_name == "chat_template.jinja":
        (folder / file_name).write_text(refusing)
    else:
        cfg = json.loads((folder / file_name).read_text())
        (folder / file_name).write_text(json.dumps({**cfg, "chat_template": refusing}))
    tokenizer = load_model(str(folder), dtype="fp32", device="cpu").tokenizer
    with pytest.raises(ChatTemplateError, match=rf"^{folder / file_name}: chat template refused "
                                                r"the messages: no system$"):
        tokenizer.chat_prompt("hi")
    assert tokenizer.chat_prompt("hi", system="be brief") == ""  # rendered, if to nothing


def _set_template(folder, template) -> None:
    cfg = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**cfg, "chat_template": template}))


# As Gemma's and Mistral v0.1's templates do, refusing a system message.
NO_SYSTEM = ("{{ bos_token }}{% for m in messages %}{% if m['role'] == 'system' %}"
             "{{ raise_exception('System role not supported') }}{% endif %}"
             "<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}<assistant>")


def test_a_template_that_refuses_a_system_message_gets_it_in_the_users(tiny_llama_folder):
    """The swarm's agents open with a system message: its text starts the user message
    instead, as other tools do, and the folder loads for a swarm."""
    from engine.loading import check_model_folder

    folder, _ = tiny_llama_folder
    _set_template(folder, NO_SYSTEM)
    check_model_folder(str(folder))
    tokenizer = load_model(str(folder), dtype="fp32", device="cpu").tokenizer
    assert tokenizer.chat_prompt("hi", system="be brief") == \
        "<|im_start|><user>be brief\n\nhi\n<assistant>"
    assert tokenizer.chat_prompt("hi") == "<|im_start|><user>hi\n<assistant>"


def test_a_template_refusing_the_folded_message_too_names_both_refusals(tiny_llama_folder):
    from engine.chat_template import ChatTemplateError
    from engine.loading import check_model_folder

    folder, _ = tiny_llama_folder
    _set_template(folder, "{% if '\n\n' in messages[-1]['content'] %}"
                          "{{ raise_exception('one paragraph only') }}{% endif %}" + NO_SYSTEM)
    tokenizer = load_model(str(folder), dtype="fp32", device="cpu").tokenizer
    with pytest.raises(ChatTemplateError, match=rf"^{folder}/tokenizer_config.json: chat template "
                                                r"refused the messages: System role not supported; "
                                                r"with the system message folded into the user's: "
                                                r"chat template refused the messages: one "
                                                r"paragraph only$"):
        tokenizer.chat_prompt("hi", system="be brief")
    with pytest.raises(ModelLoadError, match="a swarm's agents could not start: .*one paragraph"):
        check_model_folder(str(folder))


def test_named_chat_templates_need_a_default(tiny_llama_folder):
    """transformers refuses a conversation without tools when none of a list of named templates
    is "default"; it is the folder's fault, not a reason to fall back to ChatML."""
    folder, _ = tiny_llama_folder
    named = [{"name": "tool_use", "template": "{{ 'tools' }}"},
             {"name": "rag", "template": "{{ 'documents' }}"}]
    _set_template(folder, named)
    _raises(folder, "tokenizer_config.json",
            "chat_template lists named templates but none named 'default' (names: 'tool_use', "
            "'rag')")
    _set_template(folder, named + [{"name": "default", "template": "<{{ messages[0].content }}>"}])
    assert load_model(str(folder), dtype="fp32", device="cpu").tokenizer.chat_prompt("hi") == "<hi>"


def test_corrupt_tokenizer_json(tiny_llama_folder):
    folder, _ = tiny_llama_folder
    (folder / "tokenizer.json").write_text('{"model": 3}')
    _raises(folder, "tokenizer.json", "tokenizer.json")


def test_a_tokenizer_with_more_tokens_than_the_model_is_refused(tmp_path):
    """Its last ids would index past the embedding table mid-generation (an IndexError)."""
    folder = save_hf_folder(hf_tiny("llama", vocab_size=VOCAB - 5), tmp_path / "short-vocab")
    with pytest.raises(ModelLoadError, match=rf"tokenizer.json: {VOCAB} tokens, but config.json's "
                                             rf"vocab_size is {VOCAB - 5}: ids {VOCAB - 5}-"
                                             rf"{VOCAB - 1} would index past the model's "
                                             r"embeddings \(tokens added"):
        load_model(str(folder), dtype="fp32", device="cpu")


def test_added_tokens_past_the_embeddings_are_named(tmp_path):
    """A fine-tune's tokenizer often gains a <pad> the model's embeddings never did: the
    refusal names it. Added tokens within a padded vocab_size (Qwen's) load."""
    from tokenizers import AddedToken, Tokenizer as RustTokenizer

    folder = save_hf_folder(hf_tiny("llama", vocab_size=VOCAB), tmp_path / "added-pad")
    rust = RustTokenizer.from_file(str(folder / "tokenizer.json"))
    rust.add_special_tokens([AddedToken("<pad>", special=True, normalized=False)])
    rust.save(str(folder / "tokenizer.json"))
    _raises(folder, "tokenizer.json", f"{VOCAB + 1} tokens", f"'<pad>' (id {VOCAB}) would index "
                                                             "past the model's embeddings")
    save_hf_folder(hf_tiny("llama", vocab_size=VOCAB + 16), folder)  # embeddings padded past it
    rust.save(str(folder / "tokenizer.json"))
    assert load_model(str(folder), dtype="fp32", device="cpu").tokenizer.encode("<pad>") == [VOCAB]


def test_checking_a_folder_reads_no_tensor_and_finds_what_loading_would(tiny_llama_folder,
                                                                       monkeypatch):
    """The window's Ctrl+M asks before it stops the session it has: config, tokenizer, the
    weights' names and shapes, and a conversation the chat template must render."""
    from engine.loading import check_model_folder

    folder, _ = tiny_llama_folder
    read = []
    monkeypatch.setattr(Weights, "__getitem__", lambda self, name: read.append(name))
    check_model_folder(str(folder))
    cfg = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**cfg, "intermediate_size": 80}))
    with pytest.raises(ModelLoadError, match=r"model.safetensors: weights do not match "
                                             r"config.json: wrong shape: model.layers.0.mlp"):
        check_model_folder(str(folder))
    assert read == []
    (folder / "config.json").write_text(json.dumps(cfg))
    tokenizer_config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {**tokenizer_config, "chat_template": "{{ raise_exception('no tools given') }}"}))
    with pytest.raises(ModelLoadError, match=r"a swarm's agents could not start: .*"
                                             r"tokenizer_config.json: chat template refused "
                                             r"the messages: no tools given"):
        check_model_folder(str(folder))


@pytest.mark.parametrize("arch,fields,expected", [
    # Helium's head of 128 and eps of 1e-8 (its HeliumConfig's)
    ("HeliumForCausalLM", {"num_attention_heads": 4}, (128, 1e-8, 10000.0)),
    # LFM3's head, window, convolutions 7 wide and RoPE by layer type (its Lfm3Config's)
    ("Lfm3ForCausalLM", {"num_attention_heads": 4}, (128, 1e-5, 1e6)),
])
def test_a_config_that_leaves_fields_out_gets_its_config_classs_defaults(tmp_path, arch, fields,
                                                                          expected):
    (tmp_path / "config.json").write_text(json.dumps({
        "architectures": [arch], "vocab_size": 300, "hidden_size": 512, "intermediate_size": 64,
        "num_hidden_layers": 8, **fields}))
    c = read_config(tmp_path)
    assert (c.head_dim, c.rms_norm_eps, c.rope_theta) == expected
    if arch == "Lfm3ForCausalLM":
        assert (c.conv_kernel, c.sliding_window, c.local_rope_theta) == (7, 256, 1e4)
        assert c.conv_layers == (0, 1, 3, 5, 7) and c.sliding_layers == (4,)
