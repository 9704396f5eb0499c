"""LFM2 and LFM3 (Liquid AI's hybrids): gated short convolutions in most layers, attention in the
others, from a Hugging Face folder and from a GGUF, against transformers' own model."""
import json

import pytest
import torch

from engine.controls import Controls
from engine.engine import Engine
from engine.errors import ModelLoadError
from engine.forward_batch import LaneInput
from engine.kv_cache import PagedKVCache
from engine.loading import load_model
from engine.loading.hf_folder import read_config
from engine.runner import ModelRunner
from engine.spec.calibration import Calibration
from engine.spec.draft_model import first_layers
from engine.swarm.config import SwarmConfig

from .conftest import (as_stored, engine_logits, hf_tiny, reference_logits, save_hf_folder,
                       write_tiny_gguf)

PROMPT = [5, 70, 80, 100, 3, 9, 200, 150, 12, 13, 14, 40, 41, 42, 43, 44, 45, 46, 47, 48]
LAYERS = ["conv", "full_attention", "conv", "conv"]


def hf_lfm2(**fields):
    """A random LFM2 of four layers, the second attending; its MLP as transformers works it
    out (two thirds of 96, rounded up to 16: 64)."""
    return hf_tiny("lfm2", **{"num_hidden_layers": 4, "layer_types": LAYERS,
                              "block_multiple_of": 16, "norm_eps": 1e-5} | fields)


@pytest.mark.parametrize("fields", [{}, {"conv_bias": True, "tie_word_embeddings": True}])
def test_lfm2_matches_transformers(tmp_path, fields):
    hf = hf_lfm2(**fields)
    loaded = load_model(str(save_hf_folder(hf, tmp_path / "lfm2")), dtype="fp32", device="cpu")
    c = loaded.config
    assert (c.architecture, c.conv_layers, c.intermediate_size, c.conv_bias) == (
        "lfm2", (0, 2, 3), 64, bool(fields))
    assert "4 layers (3 short-convolution)" in c.describe()
    torch.testing.assert_close(engine_logits(loaded.model, PROMPT), reference_logits(hf, PROMPT),
                               atol=1e-4, rtol=0)


@pytest.mark.parametrize("layout", ["packed", "padded"])
def test_lfm2_decodes_in_pieces_as_it_reads_whole(tmp_path, layout):
    """Two lanes fed a few tokens a pass, across blocks of 4 (a short convolution reads the
    positions before each token from the cache, some of them written in the same pass): every
    row's logits are those transformers gives the whole prompt."""
    hf = hf_lfm2()
    model = load_model(str(save_hf_folder(hf, tmp_path / "lfm2")), dtype="fp32",
                       device="cpu").model
    prompts = [PROMPT, PROMPT[7:]]
    expected = [reference_logits(hf, prompt) for prompt in prompts]
    runner = ModelRunner(model, PagedKVCache(model.config, 32, 4, model.dtype, "cpu"))
    done = [0, 0]
    for sizes in ([3, 5], [4, 1], [1, 3], [5, 2], [7, 2]):
        lanes = [LaneInput(i, prompts[i][done[i]:done[i] + n], done[i], n)
                 for i, n in enumerate(sizes) if done[i] + n <= len(prompts[i])]
        for lane, logits in zip(lanes, runner.forward(lanes, layout).logits):
            torch.testing.assert_close(logits, expected[lane.seq_id][lane.start_pos:lane.end_pos],
                                       atol=1e-4, rtol=0)
            done[lane.seq_id] = lane.end_pos
    assert done == [len(prompt) for prompt in prompts]


def test_the_cache_holds_a_row_of_each_short_convolution_beside_the_attentions_kv(tmp_path):
    config = load_model(str(save_hf_folder(hf_lfm2(), tmp_path / "lfm2")), dtype="fp32",
                        device="cpu").config
    kv = PagedKVCache(config, 8, 4)
    assert kv.k.shape == (1, 8, 4, 2, 16) and kv.conv.shape == (3, 9, 4, 64)  # a zero block more
    per_token = 2 * 2 * 16 + 3 * 64  # one layer's k and v, three layers' B * x
    assert PagedKVCache.bytes_per_block(config, 4, torch.float32) == 4 * per_token * 4
    assert kv.num_bytes == 8 * 4 * per_token * 4


def test_a_fork_carries_the_short_convolutions_rows(tmp_path):
    """A forked sequence continues as the one it was copied from."""
    model = load_model(str(save_hf_folder(hf_lfm2(), tmp_path / "lfm2")), dtype="fp32",
                       device="cpu").model
    kv = PagedKVCache(model.config, 16, 4)
    runner = ModelRunner(model, kv)
    runner.forward([LaneInput(0, PROMPT[:10], 0, 1)])
    kv.copy_sequence(0, 1, 10)
    nexts = runner.forward([LaneInput(0, PROMPT[10:12], 10, 2),
                            LaneInput(1, PROMPT[10:12], 10, 2)]).logits
    torch.testing.assert_close(nexts[0], nexts[1], atol=0, rtol=0)


def test_a_self_draft_of_lfm2_keeps_its_layers_kinds(tmp_path):
    model = load_model(str(save_hf_folder(hf_lfm2(), tmp_path / "lfm2")), dtype="fp32",
                       device="cpu").model
    draft = first_layers(model, 2)
    assert draft.config.conv_layers == (0,) and draft.config.attention_layers == (1,)
    kv = PagedKVCache(draft.config, 8, 4)
    assert ModelRunner(draft, kv).forward([LaneInput(0, PROMPT, 0, 1)]).logits[0].isfinite().all()


# LFM2's configs as Liquid AI ships them (their shaping fields): the MLP's width worked out
# from block_ff_dim, the attention layers by full_attn_idxs or layer_types
HUB_CONFIGS = {
    "LFM2-350M": ({"architectures": ["Lfm2ForCausalLM"], "model_type": "lfm2",
                   "hidden_size": 1024, "num_hidden_layers": 16, "num_attention_heads": 16,
                   "num_key_value_heads": 8, "max_position_embeddings": 128000,
                   "norm_eps": 1e-05, "conv_bias": False, "conv_L_cache": 3,
                   "rope_theta": 1000000.0, "full_attn_idxs": [2, 5, 8, 10, 12, 14],
                   "block_dim": 1024, "block_ff_dim": 6656, "block_multiple_of": 256,
                   "block_ffn_dim_multiplier": 1.0, "block_auto_adjust_ff_dim": True,
                   "vocab_size": 65536, "eos_token_id": 7, "bos_token_id": 1},
                  (4608, 64, 10, True)),
    "LFM2-1.2B": ({"architectures": ["Lfm2ForCausalLM"], "model_type": "lfm2",
                   "hidden_size": 2048, "num_hidden_layers": 16, "num_attention_heads": 32,
                   "num_key_value_heads": 8, "max_position_embeddings": 128000,
                   "norm_eps": 1e-05, "conv_L_cache": 3, "block_ff_dim": 12288,
                   "intermediate_size": 12288, "block_multiple_of": 256,
                   "block_ffn_dim_multiplier": 1.0, "block_auto_adjust_ff_dim": True,
                   "layer_types": ["conv", "conv", "full_attention", "conv", "conv",
                                   "full_attention", "conv", "conv", "full_attention", "conv",
                                   "full_attention", "conv", "full_attention", "conv",
                                   "full_attention", "conv"],
                   "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"},
                   "tie_embedding": True, "vocab_size": 65536, "eos_token_id": 7},
                  (8192, 64, 10, True)),
    # LFM2.5-230M's kind: its MLP's width as given
    "unadjusted": ({"architectures": ["Lfm2ForCausalLM"], "hidden_size": 1024,
                    "num_hidden_layers": 2, "num_attention_heads": 16, "num_key_value_heads": 8,
                    "intermediate_size": 2560, "block_ff_dim": 2560,
                    "block_auto_adjust_ff_dim": False, "layer_types": ["conv", "full_attention"],
                    "tie_embedding": False, "vocab_size": 65536},
                   (2560, 64, 1, False)),
}


@pytest.mark.parametrize("name", HUB_CONFIGS)
def test_the_hubs_lfm2_configs_read_as_their_models(tmp_path, name):
    config, (width, head_dim, convs, tied) = HUB_CONFIGS[name]
    (tmp_path / "config.json").write_text(json.dumps(config))
    c = read_config(tmp_path)
    assert (c.intermediate_size, c.head_dim, len(c.conv_layers), c.tie_word_embeddings) == (
        width, head_dim, convs, tied)
    assert (c.rope_theta, c.rms_norm_eps, c.conv_kernel, c.qk_norm) == (1e6, 1e-5, 3, True)
    assert not c.sliding_layers


@pytest.mark.parametrize("fields,words", [
    ({"layer_types": ["conv", "mamba", "conv", "conv"]}, "layer_types must name each"),
    ({"layer_types": ["conv"]}, "layer_types must name each"),
    ({"layer_types": None, "full_attn_idxs": "2"}, "full_attn_idxs must list")])
def test_bad_lfm2_layer_kinds_name_config_json(tmp_path, fields, words):
    folder = save_hf_folder(hf_lfm2(), tmp_path / "lfm2")
    config = json.loads((folder / "config.json").read_text()) | fields
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadError) as err:
        load_model(str(folder), dtype="fp32", device="cpu")
    assert "config.json" in str(err.value) and words in str(err.value)


def test_an_lfm2_gguf_loads_as_the_model_it_holds(tmp_path):
    """As llama.cpp's converter writes it: a count of KV heads for each layer (0: a short
    convolution), the convolutions' kernels squeezed, the last norm as token_embd_norm, the
    MLP's worked-out width, Llama 3's split."""
    hf = hf_lfm2(tie_word_embeddings=True)
    path = write_tiny_gguf(hf, tmp_path / "lfm2.gguf", arch="lfm2", pre="lfm2")
    loaded = load_model(str(path), dtype="fp32", device="cpu")
    assert (loaded.config.conv_layers, loaded.config.intermediate_size) == ((0, 2, 3), 64)
    torch.testing.assert_close(engine_logits(loaded.model, PROMPT),
                               reference_logits(as_stored(hf), PROMPT), atol=1e-4, rtol=0)
    # and as transformers' own GGUF reader reads the same file (its Q8_0 embedding kept in
    # fp32 where the converted folder keeps fp16: a few 1e-4 apart)
    transformers = pytest.importorskip("transformers")
    theirs = transformers.AutoModelForCausalLM.from_pretrained(
        str(tmp_path), gguf_file=path.name, dtype=torch.float32).eval()
    torch.testing.assert_close(engine_logits(loaded.model, PROMPT),
                               reference_logits(theirs, PROMPT), atol=1e-3, rtol=0)


def test_lfm2_vls_text_model_loads_as_lfm2(tmp_path):
    """LFM2-VL (Lfm2VlForConditionalGeneration): its language_model is an LFM2, under
    model.language_model. and LFM2's own names; its vision tower and projector are not read."""
    transformers = pytest.importorskip("transformers")
    text = transformers.Lfm2Config(
        vocab_size=265, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2,
        layer_types=["conv", "full_attention", "conv"], block_multiple_of=16,
        max_position_embeddings=256, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    vision = transformers.Siglip2VisionConfig(hidden_size=32, intermediate_size=64,
                                              num_hidden_layers=1, num_attention_heads=2,
                                              num_patches=16, patch_size=4)
    torch.manual_seed(0)
    hf = transformers.Lfm2VlForConditionalGeneration(transformers.Lfm2VlConfig(
        vision_config=vision, text_config=text, image_token_id=10)).eval()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if name.endswith("norm.weight"):
                p.add_(0.1 * torch.randn_like(p))
    loaded = load_model(str(save_hf_folder(hf, tmp_path / "lfm2-vl")), dtype="fp32", device="cpu")
    assert (loaded.config.architecture, loaded.config.conv_layers) == ("lfm2", (0, 2))
    torch.testing.assert_close(engine_logits(loaded.model, PROMPT), reference_logits(hf, PROMPT),
                               atol=1e-4, rtol=0)


@pytest.mark.parametrize("fields", [{}, {"use_expert_bias": False, "routed_scaling_factor": 2.5,
                                         "norm_topk_prob": False}])
def test_lfm2_moe_matches_transformers(tmp_path, fields):
    """LFM2-MoE (LFM2-8B-A1B's kind): its first layer's MLP dense, the others' four experts,
    two a token, chosen by sigmoid scores plus a bias of each expert's (random here, so that
    it moves the choices), weighted by the scores alone."""
    hf = hf_tiny("lfm2_moe", **{"num_hidden_layers": 3,
                                "layer_types": ["conv", "full_attention", "conv"],
                                "num_dense_layers": 1, "num_experts": 4, "num_experts_per_tok": 2,
                                "moe_intermediate_size": 32, "norm_eps": 1e-5} | fields)
    with torch.no_grad():
        for name, buffer in hf.named_buffers():
            if name.endswith("expert_bias"):
                buffer.copy_(torch.randn_like(buffer))
    loaded = load_model(str(save_hf_folder(hf, tmp_path / "lfm2-moe")), dtype="fp32",
                        device="cpu")
    c = loaded.config
    assert (c.architecture, c.conv_layers, c.dense_layers, c.num_experts, c.expert_size) == (
        "lfm2_moe", (0, 2), (0,), 4, 32)
    assert (c.sigmoid_routing, c.expert_bias, c.intermediate_size) == (
        True, "use_expert_bias" not in fields, 96)
    torch.testing.assert_close(engine_logits(loaded.model, PROMPT), reference_logits(hf, PROMPT),
                               atol=1e-4, rtol=0)


LFM3_LAYERS = ["conv", "sliding_attention", "full_attention", "conv", "sliding_attention",
               "full_attention"]


def hf_lfm3(**fields):
    """A random LFM3 of six layers, a window of 4 tokens in two, heads of 16 (RoPE on the full
    layers' first half of frequencies, proportional RoPE, and a base of its own in the sliding
    ones, as transformers defaults them)."""
    return hf_tiny("lfm3", **{"pad_token_id": 0, "num_hidden_layers": 6, "head_dim": 16,
                              "sliding_window": 4, "norm_eps": 1e-5, "layer_types": LFM3_LAYERS}
                   | fields)


@pytest.mark.parametrize("fields", [{}, {"use_sandwich_norm": False, "use_attention_gate": False}])
def test_lfm3_matches_transformers(tmp_path, fields):
    """LFM3: LFM2's short convolutions (7 wide), norms after each sublayer too, windowed layers,
    each head's attention output gated by a sigmoid of the layer's input."""
    hf = hf_lfm3(**fields)
    loaded = load_model(str(save_hf_folder(hf, tmp_path / "lfm3")), dtype="fp32", device="cpu")
    c = loaded.config
    assert (c.conv_layers, c.conv_kernel, c.sliding_layers, c.sliding_window) == (
        (0, 3), 7, (1, 4), 4)
    assert (c.norm_after, c.attention_gate) == (not fields, not fields)
    assert (c.rope_scaling.kind, c.rope_scaling.rotated_share, c.rotary_dim) == (
        "proportional", 0.5, 16)
    assert (c.rope_theta, c.local_rope_theta) == (1e6, 1e4)
    torch.testing.assert_close(engine_logits(loaded.model, PROMPT), reference_logits(hf, PROMPT),
                               atol=1e-4, rtol=0)


@pytest.mark.parametrize("layout", ["packed", "padded"])
def test_lfm3_decodes_in_pieces_as_it_reads_whole(tmp_path, layout):
    """Past the window, a piece at a time: the windowed layers' keys slide as transformers'."""
    hf = hf_lfm3()
    model = load_model(str(save_hf_folder(hf, tmp_path / "lfm3")), dtype="fp32",
                       device="cpu").model
    expected = reference_logits(hf, PROMPT)
    runner = ModelRunner(model, PagedKVCache(model.config, 16, 4, model.dtype, "cpu"))
    done = 0
    for size in (3, 1, 5, 2, 1, 8):
        logits = runner.forward([LaneInput(0, PROMPT[done:done + size], done, size)],
                                layout).logits[0]
        torch.testing.assert_close(logits, expected[done:done + size], atol=1e-4, rtol=0)
        done += size
    assert done == len(PROMPT)


def test_a_swarms_agents_write_the_same_with_their_prompts_blocks_shared(tmp_path):
    """Agents of a category start from the blocks of the system prompt another holds: its
    convolutions' rows come with them, as its keys and values do, so every agent writes what it
    writes without sharing (fp32, sampled, no drafts; a short context starts tasks often)."""
    loaded = load_model(str(save_hf_folder(hf_lfm2(), tmp_path / "lfm2")), dtype="fp32",
                        device="cpu")
    written = {}
    for share in (True, False):
        engine = Engine(loaded, SwarmConfig(seed=3, clock="virtual", max_context=160,
                                            share_prefixes=share, temperature=1.0),
                        Controls(swarm_size=6, tool_latency_s=0.3, policy="off",
                                 mix={"chat": 1.0, "json": 1.0}),
                        calibration=Calibration.make_dummy())
        engine.run(steps=150)
        assert (engine.kv_usage().shared_tokens > 0) == share
        written[share] = {view.id: "".join(text for text, _ in view.transcript)
                          for view in engine.agents()}
    for agent, text in written[True].items():
        shorter = min(len(text), len(written[False][agent]))
        assert shorter > 200 and text[:shorter] == written[False][agent][:shorter]
