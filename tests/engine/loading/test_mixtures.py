"""Mixtures of experts (Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE, GraniteMoE) from folders
transformers saved and from GGUF files: their logits, whole or fed in pieces beside other
lanes, speculation that keeps the output, and every fault named."""
from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from engine.cli.main import main
from engine.errors import ModelLoadError
from engine.forward_batch import LaneInput
from engine.kv_cache import PagedKVCache
from engine.loading import load_model
from engine.loading.hf_folder import read_config
from engine.runner import ModelRunner
from engine.spec.draft_model import first_layers

from .conftest import (as_stored, engine_logits, hf_tiny, reference_logits, save_hf_folder,
                       write_tiny_gguf)

PROMPT = [5, 17, 99, 3, 250, 42, 7, 7, 120, 64, 1, 200]

# (arch, config fields, the layers that keep a dense MLP)
MIXTURES = [("mixtral", {}, ()),
            ("qwen2_moe", {}, ()),
            ("qwen2_moe", {"norm_topk_prob": True, "mlp_only_layers": [1]}, (1,)),
            ("qwen3_moe", {"norm_topk_prob": True}, ()),
            ("qwen3_moe", {"decoder_sparse_step": 2, "num_hidden_layers": 4}, (0, 2)),
            ("olmoe", {"tie_word_embeddings": True}, ()),
            # with Granite's scalars (its 3.0 1B-A400M's, in kind), its experts stacked
            ("granitemoe", {"embedding_multiplier": 12.0, "residual_multiplier": 0.22,
                            "attention_multiplier": 0.1, "logits_scaling": 6.0}, ())]


@pytest.mark.parametrize("arch,fields,dense", MIXTURES)
def test_logits_match_transformers(tmp_path, arch, fields, dense):
    hf = hf_tiny(arch, **fields)
    loaded = load_model(str(save_hf_folder(hf, tmp_path / arch)), dtype="fp32", device="cpu")
    c = loaded.config
    assert (c.architecture, c.num_experts, c.experts_per_token, c.dense_layers) == (
        arch, 4, 2, dense)
    assert c.normalize_expert_weights == (arch in ("mixtral", "granitemoe")
                                          or fields.get("norm_topk_prob", False))
    assert c.shared_expert_size == (48 if arch == "qwen2_moe" else 0)
    torch.testing.assert_close(engine_logits(loaded.model, PROMPT), reference_logits(hf, PROMPT),
                               atol=1e-4, rtol=0)


@pytest.mark.parametrize("arch,gguf_arch", [("mixtral", "llama"), ("qwen2_moe", "qwen2moe"),
                                            ("qwen3_moe", "qwen3moe"), ("olmoe", "olmoe"),
                                            ("granitemoe", "granitemoe")])
def test_a_gguf_of_a_mixture_loads_as_the_model_it_holds(tmp_path, monkeypatch, arch, gguf_arch):
    """As llama.cpp's converters write them: each layer's experts one tensor of each kind,
    Mixtral's as llama's (its Q/K rows permuted), the weights rescaled as llama.cpp does by
    architecture (Qwen3-MoE's and Mixtral's)."""
    monkeypatch.setenv("SWARMSCOPE_CACHE", str(tmp_path / "cache"))
    hf = hf_tiny(arch, norm_topk_prob=arch == "qwen3_moe",
                 **({"embedding_multiplier": 12.0, "logits_scaling": 6.0}
                    if arch == "granitemoe" else {}))
    loaded = load_model(str(write_tiny_gguf(hf, tmp_path / f"{arch}.gguf", arch=gguf_arch)),
                        dtype="fp32", device="cpu")
    c = loaded.config
    assert (c.architecture, c.num_experts, c.experts_per_token, c.expert_size) == (
        arch, 4, 2, 32 if arch.startswith("qwen") else 96)
    assert c.normalize_expert_weights == (arch in ("mixtral", "qwen3_moe", "granitemoe"))
    assert c.shared_expert_size == (48 if arch == "qwen2_moe" else 0)
    torch.testing.assert_close(engine_logits(loaded.model, PROMPT),
                               reference_logits(as_stored(hf), PROMPT), atol=1e-4, rtol=0)


@pytest.mark.parametrize("layout", ["packed", "padded"])
@pytest.mark.parametrize("arch", ["mixtral", "qwen2_moe", "granitemoe"])
def test_lanes_fed_in_pieces_match_their_whole_prompts(tmp_path, arch, layout):
    """Three lanes fed a few tokens a step, as decoding and verifying drafts feed them: the
    experts run over whichever lanes' tokens chose them, and each lane's logits are still its
    whole prompt's."""
    hf = hf_tiny(arch)
    loaded = load_model(str(save_hf_folder(hf, tmp_path / arch)), dtype="fp32", device="cpu")
    prompts = [PROMPT, PROMPT[::-1], PROMPT[3:] + PROMPT[:3]]
    pieces = [[5, 1, 4, 2], [1, 1, 6, 1, 3], [12]]
    refs = [reference_logits(hf, p) for p in prompts]
    runner = ModelRunner(loaded.model, PagedKVCache(loaded.config, 16, 4, torch.float32, "cpu"))
    fed = [0, 0, 0]
    for step in range(5):
        lanes = [LaneInput(i, prompts[i][fed[i]:fed[i] + n[step]], fed[i], n[step])
                 for i, n in enumerate(pieces) if step < len(n)]
        out = runner.forward(lanes, layout)
        for lane, logits in zip(lanes, out.logits):
            torch.testing.assert_close(logits, refs[lane.seq_id][lane.start_pos:lane.end_pos],
                                       atol=1e-4, rtol=0)
            fed[lane.seq_id] = lane.end_pos


def test_a_step_streams_the_chosen_experts_only(tmp_path):
    hf = hf_tiny("qwen3_moe", mlp_only_layers=[1], tie_word_embeddings=True)
    model = load_model(str(save_hf_folder(hf, tmp_path / "moe")), dtype="fp32",
                       device="cpu").model
    expert = 3 * 64 * 32 * 4  # gate, up and down of 32 x 64, fp32
    # layer 0's four experts of which a token runs two; layer 1 is dense
    assert model.num_weight_bytes() - model.streamed_weight_bytes() == 2 * expert


def test_speculation_keeps_a_mixtures_output(tmp_path, monkeypatch, capsys):
    """Drafts verified in a batch route their tokens as one token at a time would: greedy
    answers with speculation (prompt lookup and a self-draft, both layouts) are those without."""
    monkeypatch.setenv("SWARMSCOPE_CACHE", str(tmp_path / "cache"))
    folder = save_hf_folder(hf_tiny("qwen2_moe", num_hidden_layers=3), tmp_path / "moe")
    assert first_layers(load_model(str(folder), dtype="fp32").model, 1).config.num_experts == 4

    def answers(*spec):
        assert main(["generate", "--model", str(folder), "--dtype", "fp32", "--no-chat",
                     "--max-tokens", "16", "--json", "--prompt", "the cat the cat the", "12 12 1",
                     *spec]) == 0
        return [json.loads(line) for line in capsys.readouterr().out.splitlines()]

    plain = answers("--spec", "off")
    for spec in (["--drafter", "lookup", "--ragged", "packed"],
                 ["--drafter", "self", "--ragged", "padded"]):
        drafted = answers("--spec", "fixed", "--k", "3", *spec)
        assert [r["token_ids"] for r in drafted] == [r["token_ids"] for r in plain]
        assert sum(r["drafted"] for r in drafted) > 0


@pytest.mark.parametrize("arch,change,message", [
    ("mixtral", {"num_experts_per_tok": 5}, "needs 1 to 4 experts a token (got 5)"),
    ("qwen3_moe", {"num_local_experts": None}, "missing field 'num_experts'"),
    ("qwen2_moe", {"shared_expert_intermediate_size": None},
     "missing field 'shared_expert_intermediate_size'"),
    ("qwen2_moe", {"mlp_only_layers": [2]}, "mlp_only_layers ([2]) list layers of the 2"),
    ("qwen3_moe", {"decoder_sparse_step": 0}, "decoder_sparse_step (0) must be at least 1"),
    ("olmoe", {"clip_qkv": 8.0}, "clip_qkv (8.0) is not supported"),
])
def test_config_faults_name_the_file_and_field(tmp_path, arch, change, message):
    folder = save_hf_folder(hf_tiny(arch), tmp_path / arch)
    path = folder / "config.json"
    cfg = json.loads(path.read_text())
    for name, value in change.items():
        cfg.pop(name) if value is None else cfg.__setitem__(name, value)
    path.write_text(json.dumps(cfg))
    with pytest.raises(ModelLoadError) as err:
        load_model(str(folder), dtype="fp32")
    assert str(path) in str(err.value) and message in str(err.value)


def test_a_missing_expert_is_named_as_mixtral_stores_it(tmp_path):
    folder = save_hf_folder(hf_tiny("mixtral"), tmp_path / "mixtral")
    tensors = load_file(folder / "model.safetensors")
    del tensors["model.layers.1.block_sparse_moe.experts.3.w2.weight"]
    save_file(tensors, folder / "model.safetensors")
    with pytest.raises(ModelLoadError) as err:
        load_model(str(folder), dtype="fp32")
    assert "missing: model.layers.1.mlp.experts.3.down_proj.weight" in str(err.value)
    assert "block_sparse_moe.experts.E.w1, w3, w2 named as mlp.gate and mlp.experts.E." in str(
        err.value)


def test_granitemoes_stacked_experts_are_counted_against_its_config(tmp_path):
    """Five experts said, four stacked: the fifth's tensors are missing, as the model names them,
    and the message says how GraniteMoE's stacked ones are read."""
    folder = save_hf_folder(hf_tiny("granitemoe"), tmp_path / "granitemoe")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(config | {"num_local_experts": 5}))
    with pytest.raises(ModelLoadError) as err:
        load_model(str(folder), dtype="fp32")
    assert "missing: model.layers.0.mlp.experts.4.down_proj.weight" in str(err.value)
    assert "wrong shape: model.layers.0.mlp.gate.weight: (4, 64) != (5, 64)" in str(err.value)
    assert "expert E's halves of input_linear[E]" in str(err.value)


def test_a_mixtures_gguf_without_its_experts_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("SWARMSCOPE_CACHE", str(tmp_path / "cache"))
    path = write_tiny_gguf(hf_tiny("qwen3"), tmp_path / "dense.gguf", arch="qwen3moe")
    with pytest.raises(ModelLoadError) as err:
        load_model(str(path), dtype="fp32")
    assert str(path) in str(err.value) and "no qwen3moe.expert_count" in str(err.value)


# The hub's configs, as their models ship them (the fields that shape the model): a mixture's
# count, width and routing read from each as transformers reads it
HUB_CONFIGS = {
    "Qwen3-30B-A3B": ({"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
                       "attention_bias": False, "decoder_sparse_step": 1, "head_dim": 128,
                       "hidden_size": 2048, "intermediate_size": 6144,
                       "max_position_embeddings": 40960, "max_window_layers": 48,
                       "mlp_only_layers": [], "moe_intermediate_size": 768,
                       "norm_topk_prob": True, "num_attention_heads": 32, "num_experts": 128,
                       "num_experts_per_tok": 8, "num_hidden_layers": 48,
                       "num_key_value_heads": 4, "rms_norm_eps": 1e-06, "rope_scaling": None,
                       "rope_theta": 1000000.0, "sliding_window": None,
                       "tie_word_embeddings": False, "use_sliding_window": False,
                       "vocab_size": 151936, "bos_token_id": 151643, "eos_token_id": 151645},
                      ("qwen3_moe", 128, 8, 768, True, 0, ())),
    "Mixtral-8x7B-Instruct-v0.1": ({"architectures": ["MixtralForCausalLM"],
                                    "model_type": "mixtral", "hidden_size": 4096,
                                    "intermediate_size": 14336, "max_position_embeddings": 32768,
                                    "num_attention_heads": 32, "num_experts_per_tok": 2,
                                    "num_hidden_layers": 32, "num_key_value_heads": 8,
                                    "num_local_experts": 8, "rms_norm_eps": 1e-05,
                                    "rope_theta": 1000000.0, "sliding_window": None,
                                    "tie_word_embeddings": False, "vocab_size": 32000,
                                    "bos_token_id": 1, "eos_token_id": 2},
                                   ("mixtral", 8, 2, 14336, True, 0, ())),
    "Qwen1.5-MoE-A2.7B": ({"architectures": ["Qwen2MoeForCausalLM"], "model_type": "qwen2_moe",
                           "hidden_size": 2048, "intermediate_size": 5632,
                           "max_position_embeddings": 8192, "max_window_layers": 21,
                           "num_attention_heads": 16, "num_hidden_layers": 24,
                           "num_key_value_heads": 16, "rms_norm_eps": 1e-06,
                           "rope_theta": 1000000.0, "sliding_window": 32768,
                           "tie_word_embeddings": False, "use_sliding_window": False,
                           "vocab_size": 151936, "decoder_sparse_step": 1,
                           "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632,
                           "num_experts_per_tok": 4, "num_experts": 60, "norm_topk_prob": False,
                           "bos_token_id": 151643, "eos_token_id": 151643},
                          ("qwen2_moe", 60, 4, 1408, False, 5632, ())),
    "OLMoE-1B-7B-0924": ({"architectures": ["OlmoeForCausalLM"], "model_type": "olmoe",
                          "attention_bias": False, "clip_qkv": None, "hidden_size": 2048,
                          "intermediate_size": 1024, "max_position_embeddings": 4096,
                          "norm_topk_prob": False, "num_attention_heads": 16, "num_experts": 64,
                          "num_experts_per_tok": 8, "num_hidden_layers": 16,
                          "num_key_value_heads": 16, "pad_token_id": 1, "rms_norm_eps": 1e-05,
                          "rope_scaling": None, "rope_theta": 10000.0,
                          "tie_word_embeddings": False, "vocab_size": 50304,
                          "eos_token_id": 50279},
                         ("olmoe", 64, 8, 1024, False, 0, ())),
    "granite-3.1-1b-a400m": ({"architectures": ["GraniteMoeForCausalLM"],
                              "model_type": "granitemoe", "attention_bias": False,
                              "attention_multiplier": 0.015625, "embedding_multiplier": 12.0,
                              "hidden_size": 1024, "intermediate_size": 512,
                              "logits_scaling": 6.0, "max_position_embeddings": 131072,
                              "num_attention_heads": 16, "num_experts_per_tok": 8,
                              "num_hidden_layers": 24, "num_key_value_heads": 8,
                              "num_local_experts": 32, "residual_multiplier": 0.22,
                              "rms_norm_eps": 1e-06, "rope_scaling": None,
                              "rope_theta": 10000000.0, "tie_word_embeddings": True,
                              "vocab_size": 49155, "bos_token_id": 0, "eos_token_id": 0},
                             ("granitemoe", 32, 8, 512, True, 0, ())),
}


@pytest.mark.parametrize("name", HUB_CONFIGS)
def test_the_hubs_mixture_configs_read_as_their_models(tmp_path, name):
    config, (arch, experts, per_token, width, normalized, shared, dense) = HUB_CONFIGS[name]
    (tmp_path / "config.json").write_text(json.dumps(config))
    c = read_config(tmp_path)
    assert (c.architecture, c.num_experts, c.experts_per_token, c.expert_size,
            c.normalize_expert_weights, c.shared_expert_size, c.dense_layers) == (
        arch, experts, per_token, width, normalized, shared, dense)
    assert c.sliding_layers == () and c.num_layers == config["num_hidden_layers"]
    if arch == "granitemoe":
        assert (c.embedding_multiplier, c.logits_scaling) == (12.0, 6.0)
