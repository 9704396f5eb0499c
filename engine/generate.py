"""Batch generation: every prompt runs as one lane of the same steps, until all have finished.

`decode` drives a StepExecutor over ready-made Sequences (tests and benchmarks use it directly);
`generate` adds tokenizing, chat templating, the KV cache, calibration and the results."""
from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Callable

from engine.controls import Controls
from engine.errors import SwarmscopeError
from engine.kv_cache import PagedKVCache
from engine.output_format import OutputFormat
from engine.runner import ModelRunner
from engine.sampling import SamplingParams
from engine.sequence import Sequence
from engine.spec import calibration as calib
from engine.step import StepExecutor
from engine.telemetry.records import StepRecord

PREFILL_CHUNK = 512   # prompt tokens fed per step across all lanes
KV_HEADROOM = 80      # tokens of KV room per lane beyond prompt + max tokens (drafts in flight)


@dataclass(slots=True)
class GenerationResult:
    prompt: str
    token_ids: list[int]   # generated ids (the prompt excluded)
    text: str              # the generated ids' text, less the stop token that ended them
    drafted: int           # draft tokens proposed for this prompt
    accepted: int          # draft tokens accepted

    def to_dict(self) -> dict:
        return {"prompt": self.prompt, "token_ids": self.token_ids, "text": self.text,
                "drafted": self.drafted, "accepted": self.accepted}


def schedule(seqs: list[Sequence], chunk: int = PREFILL_CHUNK) -> list[tuple[Sequence, int]]:
    """Every unfinished lane: decoding lanes feed their last token, prompts feed up to `chunk`
    tokens shared across lanes (at least one lane always advances)."""
    plan, left = [], chunk
    for seq in seqs:
        if seq.finished or seq.pending == 0:
            continue
        if seq.pending == 1:
            plan.append((seq, 1))
        elif left > 0 or not plan:
            n = min(seq.pending, max(left, 1))
            left -= n
            plan.append((seq, n))
    return plan


def decode(executor: StepExecutor, seqs: list[Sequence], controls: Controls,
           on_step: Callable[[StepRecord], None] | None = None,
           chunk: int = PREFILL_CHUNK) -> list[StepRecord]:
    """Run steps until every sequence has finished; returns the step records."""
    records, clock0 = [], time.perf_counter()
    while True:
        plan = schedule(seqs, chunk)
        if not plan:
            return records
        outcome = executor.run(plan, controls, step=len(records), t=time.perf_counter() - clock0)
        records.append(outcome.record)
        if on_step:
            on_step(outcome.record)


def generate(loaded, prompts: list[str], controls: Controls, max_new_tokens: int = 64,
             sampling: SamplingParams = SamplingParams(), chat: bool = True,
             calibration: calib.Calibration | None = None,
             progress: Callable[[str], None] | None = None,
             output_format: OutputFormat | None = None) -> list[GenerationResult]:
    """Generate for all prompts as one batch. Lane i samples with seed `sampling.seed + i` and
    stops after `max_new_tokens` or at the model's context (config.max_position), if sooner;
    with `output_format`, every answer keeps to it (each from a copy).
    Without `calibration`, the cached one is used or t(N) measured first, unless speculation is
    off."""
    tok = loaded.tokenizer
    texts = [tok.chat_prompt(p) if chat else p for p in prompts]
    context = loaded.config.max_position  # a lane stops there: the model knows no further
    seqs = []
    for i, text in enumerate(texts):
        ids = tok.encode(text) if chat else tok.encode_plain(text)
        if not 0 < len(ids) < context:
            raise SwarmscopeError(f"prompt {i + 1} is {len(ids)} tokens; it needs at least one, "
                                  f"and {loaded.name} holds {context} in all")
        seqs.append(Sequence(seq_id=i, token_ids=ids, prompt_len=len(ids),
                             sampling=replace(sampling, seed=sampling.seed + i),
                             max_new_tokens=min(max_new_tokens, context - len(ids)),
                             stop_ids=tuple(tok.eos_ids), agent=i,
                             output_format=output_format and output_format.copy()))
    block = 16
    blocks = sum(-(-(s.prompt_len + s.max_new_tokens + KV_HEADROOM) // block) for s in seqs)
    kv = PagedKVCache(loaded.config, blocks, block, loaded.model.dtype, loaded.model.device)
    runner = ModelRunner(loaded.model, kv)
    if calibration is None and controls.policy != "off":  # off drafts nothing: no t(N) needed
        calibration = calib.calibrate_or_load(loaded, progress=progress)
    executor = StepExecutor(runner, calibration, target=loaded)
    records = decode(executor, seqs, controls)
    drafted = {s.agent: 0 for s in seqs}
    accepted = dict(drafted)
    for record in records:
        for lane in record.lanes:
            drafted[lane.agent] += lane.k
            accepted[lane.agent] += lane.acc
    return [GenerationResult(prompt, s.output_ids, tok.decode(_before_stop(s)), drafted[s.agent],
                             accepted[s.agent]) for prompt, s in zip(prompts, seqs)]


def _before_stop(seq: Sequence) -> list[int]:
    """The generated ids less a stop token that ended them (<|im_end|> is not the answer's)."""
    ids = seq.output_ids
    return ids[:-1] if ids and ids[-1] in seq.stop_ids else ids
