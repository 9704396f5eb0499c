"""The decoder against Hugging Face transformers, built from the same random weights."""
from __future__ import annotations

import pytest
import torch

from engine.config import PRESETS
from engine.forward_batch import LaneInput
from engine.model import LlamaModel

transformers = pytest.importorskip("transformers")

TINY = PRESETS["tiny-test"]


def _hf_model(arch: str, tie: bool):
    common = dict(vocab_size=TINY.vocab_size, hidden_size=TINY.hidden_size,
                  intermediate_size=TINY.intermediate_size, num_hidden_layers=TINY.num_layers,
                  num_attention_heads=TINY.num_heads, num_key_value_heads=TINY.num_kv_heads,
                  head_dim=TINY.head_dim, rope_theta=TINY.rope_theta, rms_norm_eps=1e-6,
                  max_position_embeddings=TINY.max_position, tie_word_embeddings=tie)
    cls_config, cls_model = {
        "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
        "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
        "qwen3": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM),
    }[arch]
    torch.manual_seed(0)
    model = cls_model(cls_config(**common)).eval()
    with torch.no_grad():  # HF initialises norms to exactly 1 and biases to 0; make them matter
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or name.endswith("bias"):
                p.add_(0.1 * torch.randn_like(p))
    return model


@pytest.mark.parametrize("arch,tie", [("llama", True), ("llama", False), ("qwen2", False),
                                      ("qwen3", True)])
def test_logits_match_transformers(arch, tie, make_runner):
    hf = _hf_model(arch, tie)
    config = TINY.with_(tie_word_embeddings=tie, rms_norm_eps=1e-6,
                        qkv_bias=arch == "qwen2", qk_norm=arch == "qwen3", architecture=arch)
    ours = LlamaModel.from_state_dict(config, dict(hf.state_dict()), torch.float32)
    ids = [5, 17, 200, 3, 99, 41, 8, 250, 11, 64, 7, 300]
    with torch.no_grad():
        expected = hf(torch.tensor([ids])).logits[0]                     # [12, vocab]
    runner = make_runner(ours)
    # Fed as a 5-token prefill chunk, then a 7-token chunk: the cache path is exercised too.
    first = runner.forward([LaneInput(0, ids[:5], 0, 5)]).logits[0]
    second = runner.forward([LaneInput(0, ids[5:], 5, 7)]).logits[0]
    got = torch.cat([first, second])
    assert got.dtype == torch.float32 and got.shape == expected.shape
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)


def test_from_state_dict_names_problems(tiny_config):
    tensors = {name: p for name, p in LlamaModel.random(tiny_config).hf_state_dict().items()}
    del tensors["model.layers.1.mlp.up_proj.weight"]
    tensors["model.layers.0.self_attn.q_proj.weight"] = torch.zeros(3, 3)
    tensors["model.extra.weight"] = torch.zeros(1)
    with pytest.raises(ValueError) as err:
        LlamaModel.from_state_dict(tiny_config, tensors)
    message = str(err.value)
    assert "missing: model.layers.1.mlp.up_proj.weight" in message
    assert "unexpected: model.extra.weight" in message
    assert "model.layers.0.self_attn.q_proj.weight: (3, 3)" in message


def test_a_checkpoint_of_another_layout_is_named_in_a_few_names(tiny_config):
    """A quantized checkpoint differs in every linear of every layer: hundreds of names for a
    real model. The message names a few of each kind and counts the rest."""
    from engine.checkpoint_layout import check_shapes

    shapes = {name.replace(".weight", ".qweight") if "proj" in name else name: tuple(t.shape)
              for name, t in LlamaModel.random(tiny_config).hf_state_dict().items()}
    with pytest.raises(ValueError) as err:
        check_shapes(tiny_config.with_(num_layers=40), shapes)
    message = str(err.value)
    assert message.startswith("missing: model.layers.2-39.*, model.layers.0.mlp.down_proj.weight")
    assert "and 9 more; unexpected: " in message and message.endswith(" and 8 more")
    assert len(message) < 800


def test_tied_head_must_equal_embedding(tiny_config):
    tensors = LlamaModel.random(tiny_config).hf_state_dict()
    tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"].clone()
    LlamaModel.from_state_dict(tiny_config, tensors)  # an identical stored head is accepted
    tensors["lm_head.weight"] = tensors["lm_head.weight"] + 1
    with pytest.raises(ValueError, match="lm_head.weight differs"):
        LlamaModel.from_state_dict(tiny_config, tensors)


def test_random_is_seeded_and_weight_bytes(tiny_config):
    a, b = LlamaModel.random(tiny_config, seed=3), LlamaModel.random(tiny_config, seed=3)
    c = LlamaModel.random(tiny_config, seed=4)
    assert torch.equal(a.embed, b.embed) and not torch.equal(a.embed, c.embed)
    params = sum(t.numel() for t in a.hf_state_dict().values())  # packed or not
    assert a.num_weight_bytes() == 4 * params
    assert LlamaModel.random(tiny_config, dtype=torch.bfloat16).num_weight_bytes() == 2 * params


# A mixture of four experts, two a token, with a shared expert; its second layer dense
EXPERTS = {"num_experts": 4, "experts_per_token": 2, "expert_size": 32, "shared_expert_size": 48,
           "dense_layers": (1,)}


@pytest.mark.parametrize("tie,bias,experts", [(True, False, {}), (False, True, {}),
                                              (True, False, EXPERTS)])
def test_bf16_weights_prepacked_for_onednn_give_the_same_bits(tie, bias, experts, monkeypatch,
                                                              make_runner):
    """Where oneDNN runs bf16 matmuls on this CPU, a bf16 model's linear weights are handed to it
    prepacked at load: its logits are those of the plain weights, bit for bit, at every row
    count, and hf_state_dict gives the plain weights back. Where it does not, nothing is
    packed."""
    from engine import model as model_module
    config = TINY.with_(tie_word_embeddings=tie, qkv_bias=bias, **experts)
    tensors = LlamaModel.random(config, seed=5).hf_state_dict()
    packed = LlamaModel.from_state_dict(config, tensors, torch.bfloat16)
    expected = model_module.prepacks(torch.device("cpu"), torch.bfloat16)
    # a dense layer's four; a mixture's q/k/v, o, router, shared gate, and its five experts' two
    linears = 4 * config.num_layers + 1 + (10 if experts else 0)
    assert [w.is_mkldnn for w in packed.linear_weights()] == [expected] * linears
    assert packed.builds_kernels_per_row_count == expected
    monkeypatch.setattr(model_module, "prepacks", lambda device, dtype: False)
    plain = LlamaModel.from_state_dict(config, tensors, torch.bfloat16)
    assert not any(w.is_mkldnn for w in plain.linear_weights())
    ids = [5, 17, 200, 3, 99, 41, 8, 250, 11, 64, 7, 300, 1, 2, 3, 4, 5]
    runs = [make_runner(m) for m in (packed, plain)]
    for n in (1, 2, 5, 17):  # one prefill chunk, then decode-sized verifications
        packed_logits, plain_logits = (runner.forward([LaneInput(0, ids[:n], 0, n)]).logits[0]
                                       for runner in runs)
        assert torch.equal(packed_logits, plain_logits), n
        for runner in runs:
            runner.kv.blocks.free(0)
    exported = packed.hf_state_dict()
    assert exported.keys() == tensors.keys()
    assert all(torch.equal(exported[name], tensors[name].bfloat16()) for name in tensors)
    assert packed.num_weight_bytes() == plain.num_weight_bytes()


def test_fp32_weights_prepacked_for_onednn_match_the_plain_ones(monkeypatch, make_runner):
    """fp32 is prepacked only where timed faster (`prepacks`); forced here, so that the path is
    checked on any CPU: oneDNN's GEMM, not MKL's, so equal within fp32 rounding."""
    from engine import model as model_module
    tensors = LlamaModel.random(TINY, seed=6).hf_state_dict()
    monkeypatch.setattr(model_module, "prepacks", lambda device, dtype: True)
    packed = LlamaModel.from_state_dict(TINY, tensors, torch.float32)
    monkeypatch.setattr(model_module, "prepacks", lambda device, dtype: False)
    plain = LlamaModel.from_state_dict(TINY, tensors, torch.float32)
    assert all(w.is_mkldnn for w in packed.linear_weights()) and packed.builds_kernels_per_row_count
    ids = [5, 17, 200, 3, 99, 41, 8, 250, 11]
    got, want = (make_runner(m).forward([LaneInput(0, ids, 0, len(ids))]).logits[0]
                 for m in (packed, plain))
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
