"""Drafting with a smaller model that shares the target's tokenizer, or with the target's own
first layers ("self-draft": first L layers + final norm + LM head, sharing the weights).

The drafter keeps its own paged KV cache that follows the target's *committed* prefix: for each
lane it remembers how many leading tokens of the lane's context its cache holds (`_valid`).
Before drafting it rolls its cache back to that prefix and catches up on everything committed
since, in one chunk, so a lane that paused drafting for a while is refreshed rather than left
stale. After verification, the drafts it fed and the target kept stay; the rest is rolled back.
A lane with no draft KV yet starts with the blocks of the longest prefix it shares with a lane
that has some (a swarm's system prompt: fed through the draft model once, as the target's is).

Drafts are the draft model's argmax, so verification treats them as one-hot proposals (exact for
greedy lanes and still lossless, by rejection sampling, for sampled ones)."""
from __future__ import annotations

import copy
import time

import torch
from torch import nn

from engine.devices import dtype_name
from engine.errors import KVCacheFull, ModelLoadError
from engine.forward_batch import LaneInput
from engine.kv_cache import PagedKVCache
from engine.runner import ModelRunner
from engine.sequence import Sequence, longest_held_prefix
from engine.spec.drafters import Draft

TOKENIZER_PROBE = "def reverse(s):\n    return s[::-1]  # 42 héllo, wörld! {\"k\": [1, 2]}"


def check_shares_tokenizer(spec: str, config, tokenizer, target) -> None:
    """ModelLoadError unless the draft model `spec` (its config and tokenizer) has the tokenizer
    of `target`, the target's LoadedModel."""
    if config.vocab_size != target.config.vocab_size:
        how = f"{config.vocab_size} vs {target.config.vocab_size} tokens"
    elif tokenizer.encode(TOKENIZER_PROBE) != target.tokenizer.encode(TOKENIZER_PROBE):
        how = "the same number of tokens, encoding text differently"
    else:
        return
    raise ModelLoadError(spec, f"draft model tokenizer differs from the target's ({how}); a "
                               f"draft model must share the target's tokenizer")


def check_draft_folder(spec: str, target) -> None:
    """What `from_path` refuses a draft model folder for that its config and tokenizer show,
    without loading its weights: a session checks its drafters before it starts."""
    from engine.loading import model_folder_of
    from engine.loading.hf_folder import read_config
    from engine.loading.hf_tokenizer import read_tokenizer
    folder, _ = model_folder_of(spec)  # a GGUF's converted now: it loads next
    config = read_config(folder)
    check_shares_tokenizer(spec, config, read_tokenizer(folder, config), target)


def first_layers(model, num_layers: int):
    """A view of `model` running only its first `num_layers` layers; every weight is shared."""
    if not 1 <= num_layers <= model.config.num_layers:
        raise ValueError(f"self-draft needs 1..{model.config.num_layers} layers, got {num_layers}")
    view = copy.copy(model)
    # nn.Module keeps children in dicts; give the view its own dicts so the target is untouched.
    view._modules, view._parameters, view._buffers = (dict(model._modules),
                                                      dict(model._parameters), dict(model._buffers))
    view.layers = nn.ModuleList(list(model.layers)[:num_layers])
    view.config = model.config.first_layers(num_layers)
    return view


class DraftModelDrafter:
    free = False  # every proposal runs the draft model

    def __init__(self, model, name: str, num_blocks: int, block_size: int = 16) -> None:
        kv = PagedKVCache(model.config, num_blocks, block_size, model.dtype, model.device)
        self.runner = ModelRunner(model, kv)
        self.name = name
        self._valid: dict[int, int] = {}     # seq_id -> committed tokens held by the draft KV
        self._texts: dict[int, list[int]] = {}  # seq_id -> its tokens, the first _valid held
        self._drafted_from: dict[int, int] = {}  # seq_id -> context length when it last drafted
        self._pass_ms: float | None = None   # measured ms of one batched draft pass (EMA)

    @classmethod
    def self_draft(cls, target, num_layers: int | None = None,
                   num_blocks: int | None = None) -> "DraftModelDrafter":
        """`target` is the target's LoadedModel; defaults to its first third of layers."""
        model = target.model
        layers = num_layers or max(1, model.config.num_layers // 3)
        return cls(first_layers(model, layers), f"self:{layers}", num_blocks or 4096)

    @classmethod
    def from_path(cls, spec: str, target, num_blocks: int | None = None) -> "DraftModelDrafter":
        from engine.loading import load_model
        loaded = load_model(spec, dtype=dtype_name(target.dtype), device=str(target.device))
        check_shares_tokenizer(spec, loaded.config, loaded.tokenizer, target)
        return cls(loaded.model, loaded.name, num_blocks or 4096)

    def available(self, seq: Sequence, cap: int) -> int:
        return cap

    def cost_ms(self, ks: list[int]) -> float:
        # One batched pass per draft position; unmeasured yet means no evidence of cost.
        return (self._pass_ms or 0.0) * max(ks, default=0)

    @torch.inference_mode()
    def propose(self, seqs: list[Sequence], ks: list[int]) -> list[Draft]:
        drafts = [[] for _ in seqs]
        active = [i for i, k in enumerate(ks) if k > 0]
        if not active:
            return [Draft([]) for _ in seqs]
        lanes = []
        for i in active:
            seq = seqs[i]
            valid = min(self._valid.get(seq.seq_id, 0), len(seq.token_ids) - 1)
            if valid:
                valid = self.runner.kv.truncate(seq.seq_id, valid)
            else:
                valid = self._share_prefix(seq)
            self._texts[seq.seq_id] = seq.token_ids
            lanes.append(LaneInput(seq.seq_id, seq.token_ids[valid:], valid, 1))
        index = {seqs[i].seq_id: i for i in active}
        start = time.perf_counter()
        passes = 0
        try:
            while lanes:
                out = self.runner.forward(lanes)
                if passes == 0:  # the catch-up chunks are committed context; drafts are not yet
                    for i in active:
                        self._valid[seqs[i].seq_id] = len(seqs[i].token_ids)
                        self._drafted_from[seqs[i].seq_id] = len(seqs[i].token_ids)
                passes += 1
                next_lanes = []
                for lane, tokens in zip(lanes, out.greedy()):  # one row's token a lane
                    i = index[lane.seq_id]
                    drafts[i].append(tokens[-1])
                    if len(drafts[i]) < ks[i]:
                        next_lanes.append(LaneInput(lane.seq_id, [drafts[i][-1]], lane.end_pos, 1,
                                                    guesses=1))
                lanes = next_lanes
        except KVCacheFull:
            return [Draft([]) for _ in seqs]  # no room to draft: verify plainly this step
        ms = (time.perf_counter() - start) * 1e3 / passes
        self._pass_ms = ms if self._pass_ms is None else 0.8 * self._pass_ms + 0.2 * ms
        return [Draft(tokens) for tokens in drafts]

    def _share_prefix(self, seq: Sequence) -> int:
        """Start `seq`'s draft KV with the blocks of the longest prefix it shares with a lane
        whose draft KV holds it; the tokens it then holds (0: none shared)."""
        blocks = self.runner.kv.blocks
        blocks.free(seq.seq_id)
        if self.runner.kv.recurrent is not None:  # the others' states are past such blocks
            return 0
        source, shared = longest_held_prefix(seq.token_ids, (
            (other, text, self._valid[other]) for other, text in self._texts.items()
            if other != seq.seq_id and self._valid.get(other)))
        return blocks.share(source, seq.seq_id, shared) if shared >= blocks.block_size else 0

    def commit(self, seq: Sequence, drafted: int, accepted: int) -> None:
        context = self._drafted_from.pop(seq.seq_id, None)
        if context is None or drafted == 0:
            return
        # The draft KV holds drafts 1..k-1 (the last was never fed); the accepted ones are now
        # committed tokens, so they stay valid.
        self._valid[seq.seq_id] = self.runner.kv.truncate(
            seq.seq_id, context + min(accepted, drafted - 1))

    def release(self, seq_id: int) -> None:
        self._valid.pop(seq_id, None)
        self._texts.pop(seq_id, None)
        self._drafted_from.pop(seq_id, None)
        if seq_id in self.runner.kv.blocks:
            self.runner.kv.blocks.free(seq_id)

