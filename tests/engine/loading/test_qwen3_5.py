"""Qwen3.5: gated DeltaNet in three layers of four, gated attention in the others, from a Hugging
Face folder (as it ships, with its vision tower and multi-token prediction head beside the text
model), against transformers' own model; fed in pieces with guesses taken back, as speculation
feeds it."""
import json
import random

import numpy as np
import pytest
import torch
from gguf import GGUFWriter
from safetensors.torch import load_file, save_file

from engine.controls import Controls
from engine.engine import Engine
from engine.errors import ModelLoadError
from engine.forward_batch import LaneInput
from engine.kv_cache import PagedKVCache, recurrent_bytes_per_sequence
from engine.loading import load_model
from engine.loading.gguf_delta import DELTA_NAMES
from engine.loading.hf_folder import read_config
from engine.recurrent_state import RecurrentStates
from engine.runner import ModelRunner
from engine.serve.completion import Completion
from engine.serve.request import ApiRequest
from engine.spec.calibration import Calibration
from engine.swarm.agent import Agent
from engine.swarm.config import SwarmConfig

from .conftest import (GGUF_TEMPLATE, VOCAB, engine_logits, hf_tiny, save_hf_folder,
                       write_gguf_vocabulary)

PROMPT = [5, 70, 80, 100, 3, 9, 200, 150, 12, 13, 14, 40, 41, 42, 43, 44, 45, 46, 47, 48] * 2


def hf_qwen3_5(**fields):
    return hf_tiny("qwen3_5", **{"num_hidden_layers": 4} | fields)


def reference(hf, prompt):
    with torch.no_grad():  # (transformers' cache needs an attention layer to size its mask)
        return hf(torch.tensor([prompt]), use_cache=False).logits[0].float()


def load(hf, folder):
    return load_model(str(save_hf_folder(hf, folder)), dtype="fp32", device="cpu")


# as Qwen3.5 ships its RoPE: by sections (all alike where every position is text)
SECTIONS = {"rope_type": "default", "rope_theta": 5000.0, "partial_rotary_factor": 0.25,
            "mrope_section": [1, 1, 0], "mrope_interleaved": True}


@pytest.mark.parametrize("fields, deltas", [
    ({}, (0, 1, 2)),
    ({"tie_word_embeddings": True, "layer_types": ["full_attention", "linear_attention"] * 2,
      "linear_num_value_heads": 2, "rope_parameters": SECTIONS}, (1, 3))])
def test_qwen3_5_matches_transformers(tmp_path, fields, deltas):
    """A prompt of 40 tokens (the DeltaNet by chunks) and its first 12 (token by token)."""
    hf = hf_qwen3_5(**fields)
    loaded = load(hf, tmp_path / "qwen3_5")
    c = loaded.config
    assert (c.architecture, c.rotary_dim, c.conv_kernel, c.output_gate) == ("qwen3_5", 4, 4, True)
    assert c.delta_layers == deltas
    assert f"4 layers ({len(deltas)} gated DeltaNet)" in c.describe()
    for prompt in (PROMPT, PROMPT[:12]):
        torch.testing.assert_close(engine_logits(loaded.model, prompt), reference(hf, prompt),
                                   atol=1e-4, rtol=0)


@pytest.mark.parametrize("layout", ["packed", "padded"])
def test_fed_in_pieces_with_guesses_taken_back_as_read_whole(tmp_path, layout):
    """Two lanes fed a few tokens a pass across blocks of 4, each pass's last few tokens
    guesses of which a random number are then kept (the rest taken back, as rejected drafts
    are): every row's logits are those transformers gives the whole prompt."""
    hf = hf_qwen3_5()
    model = load(hf, tmp_path / "qwen3_5").model
    prompts = [PROMPT, PROMPT[7:]]
    expected = [reference(hf, prompt) for prompt in prompts]
    kv = PagedKVCache(model.config, 64, 4, model.dtype, "cpu")
    runner = ModelRunner(model, kv)
    rng, done, passes = random.Random(0), [0, 0], 0
    while done != [len(p) for p in prompts]:
        lanes = []
        for i, prompt in enumerate(prompts):
            n = min(rng.randint(1, 6), len(prompt) - done[i])
            if n:
                lanes.append(LaneInput(i, prompt[done[i]:done[i] + n], done[i], n,
                                       guesses=rng.randint(0, n - 1)))
        for lane, logits in zip(lanes, runner.forward(lanes, layout).logits):
            torch.testing.assert_close(logits, expected[lane.seq_id][lane.start_pos:lane.end_pos],
                                       atol=1e-4, rtol=0)
            kept = lane.end_pos - lane.guesses + rng.randint(0, lane.guesses)
            done[lane.seq_id] = kv.truncate(lane.seq_id, kept)
            assert done[lane.seq_id] == kept
        passes += 1
    assert passes > 8


def test_a_sequence_goes_back_no_further_than_its_last_certain_token(tmp_path):
    """Cut back past it, a sequence starts again from its first token (its state holds every
    token up to there); a pass from anywhere else is refused, naming where it can go on."""
    model = load(hf_qwen3_5(), tmp_path / "qwen3_5").model
    kv = PagedKVCache(model.config, 32, 4)
    runner = ModelRunner(model, kv)
    runner.forward([LaneInput(0, PROMPT[:10], 0, 1, guesses=3)])
    assert kv.recurrent.reach(0) == range(7, 11)
    with pytest.raises(ValueError, match="from position 5, but .* only from positions 7 to 10"):
        runner.forward([LaneInput(0, PROMPT[5:7], 5, 1)])
    assert kv.truncate(0, 9) == 9  # a guess kept
    assert kv.truncate(0, 6) == 0 and kv.recurrent.reach(0) == range(0, 1)
    first = runner.forward([LaneInput(0, PROMPT[:12], 0, 1)]).logits[0]
    torch.testing.assert_close(first, reference(hf_qwen3_5(), PROMPT[:12])[-1:], atol=1e-4,
                               rtol=0)


def test_a_fork_carries_the_state_and_a_freed_sequence_gives_its_slot_back(tmp_path):
    model = load(hf_qwen3_5(), tmp_path / "qwen3_5").model
    kv = PagedKVCache(model.config, 32, 4)
    runner = ModelRunner(model, kv)
    runner.forward([LaneInput(0, PROMPT[:10], 0, 1, guesses=2)])
    kv.copy_sequence(0, 1, 9)
    kv.truncate(0, 9)
    nexts = runner.forward([LaneInput(0, PROMPT[9:12], 9, 3), LaneInput(1, PROMPT[9:12], 9, 3)])
    torch.testing.assert_close(nexts.logits[0], nexts.logits[1], atol=0, rtol=0)
    with pytest.raises(ValueError, match="cannot be forked at 3"):
        kv.copy_sequence(0, 2, 3)
    kv.blocks.free(1)
    runner.forward([LaneInput(5, PROMPT[:2], 0, 1)])  # the next pass frees 1's slot for 5
    assert kv.recurrent.capacity == 4 and kv.recurrent.reach(1) == range(0, 1)


def test_a_state_kept_at_a_prefixs_end_starts_a_later_sequence_there_exactly(tmp_path):
    """A sequence whose state stood at the end of a prompt prefix kept it there; another that
    starts with that prefix, after the first has gone past it, goes on from the kept state and a
    share of the first's blocks to transformers' logits for its whole prompt. A state that does
    not stand at a prefix's end is not kept as that prefix's."""
    hf = hf_qwen3_5()
    model = load(hf, tmp_path / "qwen3_5").model
    kv = PagedKVCache(model.config, 32, 4)
    runner = ModelRunner(model, kv)
    states = kv.recurrent
    runner.forward([LaneInput(0, PROMPT[:8], 0, 0)])
    states.keep(0, PROMPT[:4])  # its state stands at 8, not 4
    states.keep(0, PROMPT[:8])
    assert states.kept_prefix(PROMPT, len(PROMPT)) == 8 and states.kept_prefix(PROMPT, 7) == 0
    assert states.held_bytes == 2 * states.bytes_per_sequence  # the sequence's and the kept one
    runner.forward([LaneInput(0, PROMPT[8:12], 8, 0)])  # the holder goes past the prefix
    later = PROMPT[:8] + PROMPT[2:9]
    kv.blocks.share(0, 1, 8)
    states.share(0, 1, later[:8])
    rows = runner.forward([LaneInput(1, later[8:], 8, len(later) - 8)]).logits[0]
    with torch.no_grad():
        expected = hf(input_ids=torch.tensor([later]), use_cache=False).logits[0, 8:].float()
    torch.testing.assert_close(rows, expected, atol=1e-4, rtol=0)
    with pytest.raises(ValueError, match="no state stands there"):
        states.share(0, 2, PROMPT[:12] + [5])


def test_qwen3_5_moe_matches_transformers(tmp_path):
    """Qwen3.5's layers with every MLP a mixture (4 experts, 2 a token, weights normalized) and
    a gated shared expert, fed whole and in pieces with guesses taken back."""
    hf = hf_tiny("qwen3_5_moe", num_hidden_layers=4)
    folder = save_hf_folder(hf, tmp_path / "qwen3_5_moe")
    cfg = json.loads((folder / "config.json").read_text())
    del cfg["intermediate_size"]  # (its config names no dense MLP's width: it has none)
    (folder / "config.json").write_text(json.dumps(cfg))
    loaded = load_model(str(folder), dtype="fp32", device="cpu")
    c = loaded.config
    assert (c.architecture, c.delta_layers, c.num_experts, c.experts_per_token, c.expert_size,
            c.shared_expert_size, c.normalize_expert_weights, c.dense_layers) == (
        "qwen3_5_moe", (0, 1, 2), 4, 2, 32, 48, True, ())
    expected = reference(hf, PROMPT)
    torch.testing.assert_close(engine_logits(loaded.model, PROMPT), expected, atol=1e-4, rtol=0)
    kv = PagedKVCache(c, 32, 4)
    runner, done = ModelRunner(loaded.model, kv), 0
    while done < len(PROMPT):
        piece = PROMPT[done:done + 5]
        lane = LaneInput(0, piece, done, len(piece), guesses=len(piece) - 1)
        logits = runner.forward([lane]).logits[0]
        torch.testing.assert_close(logits, expected[done:lane.end_pos], atol=1e-4, rtol=0)
        done = kv.truncate(0, lane.end_pos - (len(piece) > 1))  # a guess taken back


def test_qwen3_next_matches_transformers(tmp_path):
    """Qwen3-Next: Qwen3.5's layers, its DeltaNet's projections stored by key head (in_proj_qkvz,
    in_proj_ba: reordered at load), mixtures of experts in every other layer (decoder_sparse_step)
    but those mlp_only_layers keeps dense."""
    hf = hf_tiny("qwen3_next", num_hidden_layers=4, decoder_sparse_step=2, mlp_only_layers=[3])
    loaded = load(hf, tmp_path / "qwen3_next")
    c = loaded.config
    assert (c.architecture, c.delta_layers, c.delta_by_key_head, c.dense_layers,
            c.shared_expert_size, c.normalize_expert_weights) == (
        "qwen3_next", (0, 1, 2), True, (0, 2, 3), 48, True)
    for prompt in (PROMPT, PROMPT[:12]):
        torch.testing.assert_close(engine_logits(loaded.model, prompt), reference(hf, prompt),
                                   atol=1e-4, rtol=0)
    # and saved back under its own names, in its own order
    tensors = loaded.model.hf_state_dict()
    name = "model.layers.0.linear_attn.in_proj_qkvz.weight"
    torch.testing.assert_close(tensors[name], hf.state_dict()[name], atol=0, rtol=0)


def test_qwen3_5_as_it_ships_loads_its_text_model(tmp_path):
    """Qwen3_5ForConditionalGeneration: the text model under model.language_model, a vision
    tower and an MTP head beside it (neither read)."""
    transformers = pytest.importorskip("transformers")
    text = hf_qwen3_5().config.to_dict()
    vision = transformers.Qwen3_5VisionConfig(depth=1, hidden_size=32, intermediate_size=64,
                                              num_heads=2, out_hidden_size=64, patch_size=4,
                                              num_position_embeddings=16)
    torch.manual_seed(0)
    hf = transformers.Qwen3_5ForConditionalGeneration(transformers.Qwen3_5Config(
        text_config=text, vision_config=vision.to_dict())).eval()
    folder = save_hf_folder(hf, tmp_path / "qwen3_5_vl")
    weights = folder / "model.safetensors"
    tensors = load_file(weights)
    assert any(name.startswith("model.visual.") for name in tensors)
    save_file(tensors | {"mtp.fc.weight": torch.zeros(64, 128)}, weights,
              metadata={"format": "pt"})
    loaded = load_model(str(folder), dtype="fp32", device="cpu")
    assert loaded.config.architecture == "qwen3_5" and loaded.config.vocab_size == VOCAB
    with torch.no_grad():
        expected = hf(input_ids=torch.tensor([PROMPT]), use_cache=False).logits[0].float()
    torch.testing.assert_close(engine_logits(loaded.model, PROMPT), expected, atol=1e-4, rtol=0)


def test_a_config_without_layer_types_attends_every_fourth_layer_and_bad_ones_are_named(
        tmp_path):
    folder = save_hf_folder(hf_qwen3_5(num_hidden_layers=8), tmp_path / "qwen3_5")
    cfg = json.loads((folder / "config.json").read_text())
    del cfg["layer_types"]
    (folder / "config.json").write_text(json.dumps(cfg))
    assert read_config(folder).delta_layers == (0, 1, 2, 4, 5, 6)
    (folder / "config.json").write_text(json.dumps(cfg | {"layer_types": ["mamba"] * 8}))
    with pytest.raises(ModelLoadError, match=r"config\.json.*layer_types must name each of the 8"):
        read_config(folder)


def test_a_qwen3_5_swarm_writes_with_drafts_and_shared_prompts_what_it_writes_without(
        tmp_path, monkeypatch):
    """Agents decoding greedily, in and out of tool calls, self-drafting 4 tokens a step (their
    guesses folded into the DeltaNet's state once accepted, taken back otherwise), emit the
    tokens they emit without drafts; and agents whose tasks start with a system prompt another
    holds, sharing its blocks and a copy of the DeltaNet's state at their end (the holder's,
    where they start at once, else one kept there for later tasks), the tokens they emit
    feeding it each."""
    loaded = load(hf_qwen3_5(), tmp_path / "qwen3_5")
    emitted, on_tokens = {}, Agent.on_tokens
    kept_shares, share = [], RecurrentStates.share

    def recorded(agent, token_ids, *args):
        emitted.setdefault(agent.id, []).extend(token_ids)
        return on_tokens(agent, token_ids, *args)

    def shared_state(states, source_id, target_id, prefix):  # from a kept state, or the source's
        kept_shares.append(len(prefix) not in states.reach(source_id))
        return share(states, source_id, target_id, prefix)
    monkeypatch.setattr(Agent, "on_tokens", recorded)
    monkeypatch.setattr(RecurrentStates, "share", shared_state)
    runs = {}
    for policy, sharing in (("off", False), ("off", True), ("fixed", True)):
        emitted = {}
        engine = Engine(loaded, SwarmConfig(seed=3, clock="virtual", max_context=400,
                                            temperature=0.0, share_prefixes=sharing),
                        Controls(swarm_size=6, tool_latency_s=0.3, policy=policy, k=4,
                                 drafter="self", mix={"chat": 1.0, "json": 1.0}),
                        calibration=Calibration.make_dummy())
        engine.run(steps=120)
        totals = engine.totals.snapshot()
        runs[policy, sharing] = (emitted, sum(totals.accepted.values()),
                               engine.kv_usage().shared_tokens)
    plain, _, unshared = runs["off", False]
    assert unshared == 0 and True in kept_shares and False in kept_shares
    for policy in ("off", "fixed"):
        tokens_of, accepted, shared = runs[policy, True]
        assert shared >= 8 * 64  # of the chat agents' 64 tokens alike, the json ones' 112-176
        assert accepted > 20 if policy == "fixed" else accepted == 0
        for agent, tokens in tokens_of.items():
            shorter = min(len(tokens), len(plain[agent]))
            assert shorter > 80 and tokens[:shorter] == plain[agent][:shorter]


def test_a_passs_lanes_take_the_first_slots_their_states_and_rows_moving_with_them(tmp_path):
    """Three sequences, then passes of some of them in another order: each pass's lanes hold
    the first slots (its layers read the states in place), and every row's logits are still
    transformers' for the whole prompt."""
    hf = hf_qwen3_5()
    model = load(hf, tmp_path / "qwen3_5").model
    prompts = [PROMPT, PROMPT[3:], PROMPT[11:]]
    expected = [reference(hf, prompt) for prompt in prompts]
    kv = PagedKVCache(model.config, 64, 4)
    runner = ModelRunner(model, kv)
    done = [0, 0, 0]
    for order, size in (([0, 1, 2], 5), ([2, 1], 3), ([1, 0, 2], 2), ([2], 4), ([0, 2], 3)):
        lanes = [LaneInput(i, prompts[i][done[i]:done[i] + size], done[i], size, guesses=1)
                 for i in order]
        for lane, logits in zip(lanes, runner.forward(lanes).logits):
            torch.testing.assert_close(logits, expected[lane.seq_id][lane.start_pos:lane.end_pos],
                                       atol=1e-4, rtol=0)
            done[lane.seq_id] = kv.truncate(lane.seq_id, lane.end_pos)  # the guess kept
        assert sorted(kv.recurrent._slot[i] for i in order) == list(range(len(order)))
    assert kv.recurrent.capacity == 4


def test_the_caches_bytes_count_each_sequences_states_beside_its_blocks(tmp_path):
    """A sequence holds, for each of the 3 DeltaNet layers, a state of 4 heads x 8 x 12 (fp32)
    and a ring of 3 + 64 rows of q, k and v (2 x 2 x 8 + 4 x 12) and b and a (2 x 4)."""
    model = load(hf_qwen3_5(), tmp_path / "qwen3_5").model
    per_sequence = 3 * (4 * 8 * 12 * 4 + 67 * (32 + 48 + 8) * 4)
    assert recurrent_bytes_per_sequence(model.config, torch.float32) == per_sequence
    kv = PagedKVCache(model.config, 16, 4)
    block = PagedKVCache.bytes_per_block(model.config, 4, torch.float32)
    assert block == 4 * 2 * 2 * 16 * 4  # one attention layer's k and v alone
    runner = ModelRunner(model, kv)
    runner.forward([LaneInput(0, PROMPT[:10], 0, 1), LaneInput(1, PROMPT[:3], 0, 1)])
    assert kv.held_bytes == 4 * block + 2 * per_sequence
    assert kv.num_bytes == 16 * block + 4 * per_sequence  # room for 4 sequences' states made
    kv.blocks.free(1)
    runner.forward([LaneInput(0, PROMPT[10:11], 10, 1)])
    assert kv.held_bytes == 3 * block + per_sequence
    assert kv.peak_bytes == 4 * block + 2 * per_sequence


def write_qwen35_gguf(hf, path, mtp_layers: int = 1, bos: bool = True):
    """What llama.cpp's converter writes for a Qwen3.5 (as transformers' GGUF reader undoes it):
    ggml's names, the zero-centred norms as 1 + weight but the DeltaNet's, A_log as -exp(A_log),
    the convolution squeezed, value heads tiled rather than grouped by key head, and a
    multi-token-prediction block counted as a last layer (here a stand-in norm); `bos`: the
    vocabulary names a BOS token (Qwen's files may not)."""
    c = hf.config
    arch = "qwen35moe" if c.model_type == "qwen3_5_moe_text" else "qwen35"
    w = GGUFWriter(str(path), arch)
    key_heads, per_key = c.linear_num_key_heads, c.linear_num_value_heads // c.linear_num_key_heads
    for add, value in (
            ("block_count", c.num_hidden_layers + mtp_layers), ("nextn_predict_layers", mtp_layers),
            ("context_length", c.max_position_embeddings), ("embedding_length", c.hidden_size),
            ("attention.head_count", c.num_attention_heads),
            ("attention.head_count_kv", c.num_key_value_heads),
            ("attention.key_length", c.head_dim), ("attention.value_length", c.head_dim),
            ("rope.dimension_count", int(c.head_dim * c.rope_parameters["partial_rotary_factor"])),
            ("full_attention_interval", 4), ("ssm.conv_kernel", c.linear_conv_kernel_dim),
            ("ssm.state_size", c.linear_key_head_dim), ("ssm.group_count", key_heads),
            ("ssm.time_step_rank", c.linear_num_value_heads),
            ("ssm.inner_size", c.linear_num_value_heads * c.linear_value_head_dim),
            ("vocab_size", c.vocab_size)):
        w.add_uint32(f"{arch}.{add}", value)
    w.add_float32(f"{arch}.rope.freq_base", c.rope_parameters["rope_theta"])
    w.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", c.rms_norm_eps)
    w.add_array(f"{arch}.rope.dimension_sections", [*c.rope_parameters["mrope_section"], 0])
    if arch == "qwen35moe":
        w.add_uint32(f"{arch}.expert_count", c.num_experts)
        w.add_uint32(f"{arch}.expert_used_count", c.num_experts_per_tok)
        w.add_uint32(f"{arch}.expert_feed_forward_length", c.moe_intermediate_size)
        w.add_uint32(f"{arch}.expert_shared_feed_forward_length",
                     c.shared_expert_intermediate_size)
    else:
        w.add_uint32(f"{arch}.feed_forward_length", c.intermediate_size)
    write_gguf_vocabulary(w, "qwen35", bos)
    w.add_chat_template(GGUF_TEMPLATE)

    def tiled(width: int) -> np.ndarray:  # grouped -> tiled, as ggml repeats the key heads
        return np.arange(key_heads * per_key * width).reshape(key_heads, per_key, width) \
            .transpose(1, 0, 2).reshape(-1)
    names = {"input_layernorm.weight": "attn_norm.weight",
             "post_attention_layernorm.weight": "post_attention_norm.weight",
             "self_attn.q_norm.weight": "attn_q_norm.weight",
             "self_attn.k_norm.weight": "attn_k_norm.weight",
             **{f"self_attn.{x}_proj.weight": f"attn_{x}.weight" for x in "qkv"},
             "self_attn.o_proj.weight": "attn_output.weight",
             **{f"mlp.{x}_proj.weight": f"ffn_{x}.weight" for x in ("gate", "up", "down")},
             "mlp.gate.weight": "ffn_gate_inp.weight",
             **{f"mlp.shared_expert.{x}_proj.weight": f"ffn_{x}_shexp.weight"
                for x in ("gate", "up", "down")}}
    ours = {value: key for key, value in DELTA_NAMES.items()}
    qk = 2 * key_heads * c.linear_key_head_dim
    for name, t in hf.state_dict().items():
        a = t.float().numpy()
        if name.endswith("norm.weight") and ".linear_attn." not in name:
            a = a + 1
        if name == "model.embed_tokens.weight":
            w.add_tensor("token_embd.weight", a)
        elif name == "lm_head.weight":
            if not c.tie_word_embeddings:
                w.add_tensor("output.weight", a)
        elif name == "model.norm.weight":
            w.add_tensor("output_norm.weight", a)
        else:
            layer, rest = name.removeprefix("model.layers.").split(".", 1)
            if rest == "mlp.experts.gate_up_proj":  # a layer's experts, gate and up, as one
                for kind, half in zip(("gate", "up"), np.split(a, 2, axis=1)):
                    w.add_tensor(f"blk.{layer}.ffn_{kind}_exps.weight", np.ascontiguousarray(half))
                continue
            if rest == "mlp.experts.down_proj":
                w.add_tensor(f"blk.{layer}.ffn_down_exps.weight", a)
                continue
            if rest.startswith("linear_attn."):
                leaf = rest.removeprefix("linear_attn.")
                if leaf == "A_log":
                    a = -np.exp(a)
                if leaf in ("A_log", "dt_bias", "in_proj_a.weight", "in_proj_b.weight"):
                    a = a[tiled(1)]
                elif leaf == "in_proj_z.weight":
                    a = a[tiled(c.linear_value_head_dim)]
                elif leaf in ("in_proj_qkv.weight", "conv1d.weight"):
                    a = np.concatenate((a[:qk], a[qk:][tiled(c.linear_value_head_dim)]))
                elif leaf == "out_proj.weight":
                    a = a[:, tiled(c.linear_value_head_dim)]
                if leaf == "conv1d.weight":
                    a = a.squeeze(1)
                w.add_tensor(f"blk.{layer}.{ours['linear_attn.' + leaf]}", np.ascontiguousarray(a))
            elif rest == "mlp.shared_expert_gate.weight":
                w.add_tensor(f"blk.{layer}.ffn_gate_inp_shexp.weight", a.reshape(-1))
            else:
                w.add_tensor(f"blk.{layer}.{names[rest]}", np.ascontiguousarray(a))
    w.add_tensor(f"blk.{c.num_hidden_layers}.attn_norm.weight",
                 np.ones(c.hidden_size, np.float32))  # the MTP block's, not read
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.mark.parametrize("arch", ["qwen3_5", "qwen3_5_moe"])
def test_a_qwen35_gguf_loads_as_the_model_it_holds(tmp_path, arch):
    """llama.cpp's qwen35 and qwen35moe: the model's logits, and transformers' own GGUF reader's
    on the same file (the mixture's naming no BOS token)."""
    # (RoPE on half of each head: four frequencies, one section or more for each of its axes)
    hf = hf_tiny(arch, num_hidden_layers=4, tie_word_embeddings=arch == "qwen3_5",
                 rope_parameters=SECTIONS | {"partial_rotary_factor": 0.5,
                                             "mrope_section": [2, 1, 1]})
    path = write_qwen35_gguf(hf, tmp_path / f"{arch}.gguf", bos=arch == "qwen3_5")
    loaded = load_model(str(path), dtype="fp32", device="cpu")
    assert loaded.config.bos_token_id == (1 if arch == "qwen3_5" else None)
    assert (loaded.config.architecture, loaded.config.delta_layers, loaded.config.num_layers) == (
        arch, (0, 1, 2), 4)
    ours = engine_logits(loaded.model, PROMPT)
    torch.testing.assert_close(ours, reference(hf, PROMPT), atol=1e-4, rtol=0)
    transformers = pytest.importorskip("transformers")
    theirs = transformers.AutoModelForCausalLM.from_pretrained(
        str(tmp_path), gguf_file=path.name, dtype=torch.float32).eval()
    torch.testing.assert_close(ours, reference(theirs, PROMPT), atol=1e-4, rtol=0)


def test_a_sequence_cut_back_past_its_state_goes_on_from_its_checkpoint(tmp_path):
    """A client's turn keeps its state as of its prompt's end: cut back past the answer written
    after it (a template that writes the answer back otherwise), the sequence goes on from
    there, and what follows is transformers' whole-prompt logits; without one, from its first
    token."""
    hf = hf_qwen3_5()
    model = load(hf, tmp_path / "qwen3_5").model
    kv = PagedKVCache(model.config, 64, 4)
    runner = ModelRunner(model, kv)
    runner.forward([LaneInput(0, PROMPT[:10], 0, 1, guesses=2, checkpoint=True)])  # 8 certain
    for start in range(10, 16):  # an answer, and drafts taken back
        runner.forward([LaneInput(0, PROMPT[start:start + 3], start, 3, guesses=2)])
        kv.truncate(0, start + 1)
    other = PROMPT[:8] + [7, 8, 9, 10, 11, 12]  # the conversation as the next turn writes it
    assert kv.truncate(0, 11) == 8 and kv.recurrent.reach(0) == range(8, 9)
    logits = runner.forward([LaneInput(0, other[8:], 8, 6)]).logits[0]
    torch.testing.assert_close(logits, reference(hf, other)[8:], atol=1e-4, rtol=0)
    per_sequence = kv.recurrent.bytes_per_sequence
    assert kv.held_bytes == 4 * PagedKVCache.bytes_per_block(model.config, 4, torch.float32) \
        + 2 * per_sequence  # its state and its checkpoint's
    assert kv.truncate(0, 5) == 0  # before the checkpoint: fed again from its first token
    assert kv.held_bytes == 0


def test_a_qwen3_5_clients_next_turn_goes_on_from_its_last_prompt(tmp_path):
    """Over the API, a conversation's second turn, its first answer written back otherwise (as
    a template dropping reasoning does), reuses the first turn's prompt (its DeltaNet's state
    kept there) and answers as a fresh engine does."""
    loaded = load(hf_qwen3_5(), tmp_path / "qwen3_5")

    def engine():
        return Engine(loaded, SwarmConfig(clock="virtual", max_context=512, client_lanes=2),
                      Controls(swarm_size=0, policy="fixed", k=3, drafter="self"),
                      calibration=Calibration.make_dummy())

    def answer(engine, messages):
        completion = Completion(ApiRequest.parse(
            {"messages": messages, "temperature": 0, "max_tokens": 12}, loaded.tokenizer, 512))
        engine.submit(completion)
        ids = []
        for _ in range(200):
            engine.step()
            while (event := completion.next_event(0)) is not None:
                if event[1] != "tokens":
                    return ids, completion
                ids += event[2]
        raise AssertionError("no answer")

    first = [{"role": "user", "content": "the cat sat on the mat"}]
    going = engine()
    answer(going, first)
    second = first + [{"role": "assistant", "content": "(an answer written back otherwise)"},
                      {"role": "user", "content": "and then?"}]
    again, completion = answer(going, second)
    prompt_len = len(ApiRequest.parse({"messages": first}, loaded.tokenizer, 512).prompt_ids)
    assert completion.reused_tokens == prompt_len
    assert answer(engine(), second)[0] == again
