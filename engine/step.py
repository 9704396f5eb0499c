"""The step executor: one engine step from a schedule to committed tokens and a step record.

The scheduler says, per sequence, how many of its uncached tokens to feed. A lane whose fed
tokens reach the end of its committed tokens is *decoding*: it gets drafts appended (k from the
policy) and logits for its last token and every draft. Otherwise it is a prefill chunk and needs
no logits. One forward pass serves all lanes; then each decoding lane is verified, its committed
tokens appended, its KV rolled back past the rejected drafts, and its stop conditions checked."""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from engine.controls import Controls
from engine.errors import KVCacheFull
from engine.forward_batch import LaneInput
from engine.sampling import LaneSampler, adjusted_logits, greedy_tokens, token_logprobs
from engine.sequence import Sequence
from engine.spec.acceptance import AcceptanceStats
from engine.spec.calibration import Calibration
from engine.spec.drafters import Draft, Drafter, make_drafter
from engine.spec.live_cost import LiveOverhead
from engine.spec.policies import Decision, LaneView, SpeculationPolicy
from engine.spec.shadow import ShadowChecks
from engine.spec.verification import Verdict, verify_greedy, verify_sampled
from engine.telemetry.records import LaneRecord, StepRecord


@dataclass(slots=True)
class LaneResult:
    seq_id: int
    new_token_ids: list[int]   # committed this step, in order
    accepted_flags: list[bool]  # per new token: True if it was an accepted draft (else the bonus)
    finished: bool
    # per new token, where the sequence asks for them: (token, its log-probability, the row's
    # likeliest (token, log-probability) pairs), sampling.token_logprobs
    logprobs: list | None = None

    @classmethod
    def make_dummy(cls, seq_id: int = 0, accepted: int = 2) -> "LaneResult":
        return cls(seq_id, list(range(30, 31 + accepted)), [True] * accepted + [False], False)


@dataclass(slots=True)
class StepOutcome:
    record: StepRecord
    lanes: dict[int, LaneResult] = field(default_factory=dict)  # decoding lanes by seq_id

    @classmethod
    def make_dummy(cls, batch: int = 2) -> "StepOutcome":
        return cls(StepRecord.make_dummy(batch=batch),
                   {i: LaneResult.make_dummy(i) for i in range(batch)})


class StepExecutor:
    """Owns per-lane samplers, drafters, acceptance stats and the policy's state across steps.

    `target` is the LoadedModel (needed only to build model drafters; may be None for lookup).
    `measures_cost`: goodput plans with what steps took beyond the calibrated curve
    (spec/live_cost.py); without it, with the curve alone, so that where time is the curve (the
    virtual clock) the plans, and so the run, do not depend on how fast the machine ran.
    `calibration` may be None for a run with speculation off throughout (`generate --spec off`):
    nothing then needs t(N), and its steps record a budget of 0, as no T was measured."""

    def __init__(self, runner, calibration: Calibration | None, target=None,
                 stats: AcceptanceStats | None = None, measures_cost: bool = True) -> None:
        self.runner, self.calibration, self.target = runner, calibration, target
        self.measures_cost = measures_cost
        self.stats = stats or AcceptanceStats()
        self.policy = SpeculationPolicy(self.stats)
        self.shadows = ShadowChecks()
        self.overhead = LiveOverhead()
        self._drafters: dict[str, Drafter] = {}
        self._samplers: dict[int, LaneSampler] = {}

    def drafter(self, name: str) -> Drafter:
        if name not in self._drafters:
            self._drafters[name] = make_drafter(name, self.target,
                                                num_blocks=self.runner.kv.blocks.num_blocks)
        return self._drafters[name]

    def release(self, seq: Sequence) -> None:
        """Free everything held for a sequence that will not be scheduled again."""
        blocks = self.runner.kv.blocks
        if seq.seq_id in blocks:
            blocks.free(seq.seq_id)
        for drafter in self._drafters.values():
            drafter.release(seq.seq_id)
        self._samplers.pop(seq.seq_id, None)
        self.policy.forget(seq.seq_id)
        self.shadows.forget(seq.seq_id)
        self.stats.forget(seq.seq_id)

    def restart(self, seq: Sequence, keep: int) -> None:
        """A lane's context cut to its first `keep` tokens (an API client's conversation goes
        on from there), its KV past them dropped in O(1) as a rejected draft's is, and what the
        drafters built on the rest forgotten; its next tokens drawn with its sampling params as
        they are now (a client's next request brings its own), from a generator seeded afresh."""
        if keep < len(seq.token_ids):
            del seq.token_ids[keep:]
            # a block shared with another sequence is let go where the next token would land
            seq.num_cached = self.runner.kv.truncate(seq.seq_id, min(seq.num_cached, keep))
            for drafter in self._drafters.values():
                drafter.release(seq.seq_id)
            self.shadows.forget(seq.seq_id)
        self._samplers.pop(seq.seq_id, None)

    def run(self, scheduled: list[tuple[Sequence, int]], controls: Controls, step: int,
            t: float) -> StepOutcome:
        start = time.perf_counter()
        fed, decoding = [], []
        for seq, n in scheduled:
            if not 0 < n <= seq.pending:
                raise ValueError(f"seq {seq.seq_id}: cannot feed {n} of {seq.pending} pending tokens")
            fed.append(seq.token_ids[seq.num_cached:seq.num_cached + n])
            decoding.append(seq.num_cached + n == len(seq.token_ids))
        decode_seqs = [seq for (seq, _), dec in zip(scheduled, decoding) if dec]
        prefill = sum(len(tokens) for tokens in fed) - len(decode_seqs)
        decision, drafts = self._draft(decode_seqs, prefill, controls)
        drafts = [self._within_format(seq, draft) for seq, draft in zip(decode_seqs, drafts)]

        by_seq = dict(zip((seq.seq_id for seq in decode_seqs), drafts))
        try:
            out = self.runner.forward(self._lanes(scheduled, fed, decoding, by_seq), controls.ragged)
        except KVCacheFull:
            if not any(d.tokens for d in drafts):
                raise
            drafts = [Draft([]) for _ in decode_seqs]  # retry plainly: drafts must never evict
            for seq in decode_seqs:  # the watched predictions were for the dropped drafts' ends
                self.shadows.forget(seq.seq_id)
            by_seq = dict(zip((seq.seq_id for seq in decode_seqs), drafts))
            decision.reason += "; KV full: drafts dropped"
            out = self.runner.forward(self._lanes(scheduled, fed, decoding, by_seq), controls.ragged)

        lanes, results = [], {}
        greedy = out.greedy() if any(seq.sampling.greedy for seq in decode_seqs) else None
        for index, ((seq, n), dec) in enumerate(zip(scheduled, decoding)):
            if rows := _prompt_rows(seq, n):
                seq.prompt_logprobs += token_logprobs(
                    out.logits[index], seq.token_ids[rows.start + 1:rows.stop + 1], seq.logprobs)
            if not dec:
                seq.num_cached += n
                continue
            draft = by_seq[seq.seq_id]
            verified = 1 + len(draft.tokens)  # the lane's last rows: its last token's and drafts'
            verdict = self._verify(seq, draft, out.logits[index][-verified:],
                                   greedy[index][-verified:] if seq.sampling.greedy else None)
            ctx = len(seq.token_ids)
            result = self._commit(seq, n, draft, verdict)
            if seq.output_format is not None:
                seq.output_format.advance(result.new_token_ids)
            if seq.logprobs is not None and result.new_token_ids:
                result.logprobs = token_logprobs(out.logits[index][-verified:],
                                                 result.new_token_ids, seq.logprobs)
            results[seq.seq_id] = result
            # A lane that ends inside its accepted drafts (a stop token, max_new_tokens) commits
            # no bonus: its last draft is the step's committed token, so that emitted = batch +
            # sum(acc) stays what was committed.
            lanes.append(LaneRecord(agent=seq.agent, cat=seq.cat, k=len(draft.tokens),
                                    acc=len(result.new_token_ids) - 1, pad=out.pad[index],
                                    ctx=ctx))
        dt_ms = (time.perf_counter() - start) * 1e3
        # prefill chunks are not what the policy plans for
        if self.measures_cost and self.calibration and decode_seqs and not prefill:
            self._learn_overhead([len(d.tokens) for d in drafts], controls, dt_ms)
        record = StepRecord(step=step, t=t, dt_ms=dt_ms,
                            batch=len(decode_seqs), prefill=prefill,
                            budget=controls.budget_override
                            or (self.calibration.budget if self.calibration else 0),
                            policy=controls.policy, ragged=controls.ragged, lanes=lanes,
                            reason=decision.reason)
        return StepOutcome(record, results)

    # -- parts of a step --
    def _draft(self, seqs: list[Sequence], prefill: int,
               controls: Controls) -> tuple[Decision, list[Draft]]:
        if not seqs:
            return Decision([], "prefill only"), []
        resting = self.policy.idle([seq.seq_id for seq in seqs], controls, self.calibration)
        if resting:
            return resting, [Draft([]) for _ in seqs]
        drafter = self.drafter(controls.drafter)  # made before the clock: a model loads once
        looking = time.perf_counter()
        decision, drafts = self._look(seqs, prefill, controls, drafter)
        if self.measures_cost and controls.policy == "goodput":
            self.policy.looked(len(seqs), (time.perf_counter() - looking) * 1e3,
                               any(decision.ks))
        return decision, drafts

    def _look(self, seqs: list[Sequence], prefill: int, controls: Controls,
              drafter: Drafter) -> tuple[Decision, list[Draft]]:
        """The drafter's offers and the policy's plan for a step in which lanes may draft."""
        # A free drafter is asked for one token more than may be sent: its prediction of the
        # token after the last draft, for the shadow check. Its proposals cost nothing, so they
        # are made before the plan, which weighs what each was matched on.
        # A lane may still commit max_new_tokens - num_output tokens, its drafts and the bonus
        # after them: more drafts would be verified only to be cut.
        caps = [min(controls.k, seq.max_new_tokens - seq.num_output - 1) for seq in seqs]
        offers = [drafter.available(seq, cap + drafter.free) for seq, cap in zip(seqs, caps)]
        offered = drafter.propose(seqs, offers) if drafter.free else [Draft([]) for _ in seqs]
        views = [LaneView(seq.seq_id, seq.cat, min(n, cap), draft.match)
                 for seq, n, cap, draft in zip(seqs, offers, caps, offered)]
        decision = self.policy.plan(views, prefill, controls, self.calibration, drafter.cost_ms,
                                    shadowed=drafter.free, overhead=self.overhead.estimate)
        if not drafter.free:
            return decision, drafter.propose(seqs, decision.ks)
        for seq, draft, k in zip(seqs, offered, decision.ks):
            self.shadows.watch(seq.seq_id, draft.tokens, k)
        return decision, [draft.cut(k) for draft, k in zip(offered, decision.ks)]

    def _within_format(self, seq: Sequence, draft: Draft) -> Draft:
        """The draft cut where the lane's output format refuses a token: the target, held to
        the format, could never choose it."""
        if seq.output_format is None or not draft.tokens:
            return draft
        allowed = seq.output_format.allowed(draft.tokens)
        if allowed < len(draft.tokens):
            self.shadows.forget(seq.seq_id)  # its watched prediction was for the cut draft's end
        return draft.cut(allowed)

    def _learn_overhead(self, drafted: list[int], controls: Controls, dt_ms: float) -> None:
        draft_ms = self.drafter(controls.drafter).cost_ms(drafted) if any(drafted) else 0.0
        planned = self.calibration.step_ms(len(drafted), sum(drafted)) + draft_ms
        self.overhead.observe(drafted, dt_ms - planned)

    @staticmethod
    def _lanes(scheduled, fed, decoding, drafts: dict[int, Draft]) -> list[LaneInput]:
        lanes = []
        for (seq, _), tokens, dec in zip(scheduled, fed, decoding):
            extra = drafts[seq.seq_id].tokens if dec else []
            rows = 1 + len(extra) if dec else 0
            if prompt := _prompt_rows(seq, len(tokens)):  # and the rows after them: trailing
                rows = seq.num_cached + len(tokens) - prompt.start + len(extra)
            # (a decoding lane's fed tokens end at its last: the turn's prompt's, on its first)
            lanes.append(LaneInput(seq.seq_id, tokens + extra, seq.num_cached, rows, len(extra),
                                   checkpoint=dec and seq.turn_end == len(seq.token_ids)))
        return lanes

    def _verify(self, seq: Sequence, draft: Draft, logits, top: list[int] | None) -> Verdict:
        """The lane's verdict on its draft from its logits rows (`top`: their greedy tokens,
        for a greedy lane); a lane held to a format, against the model within it; a lane with a
        logit bias or penalties, against the model as they adjust it."""
        if seq.sampling.adjusts:
            logits = adjusted_logits(logits, seq.sampling, seq.token_ids, seq.prompt_len,
                                     draft.tokens)
            top = None if top is None else greedy_tokens(logits)
        held_to = seq.output_format
        if top is not None:
            return verify_greedy(draft.tokens, top if held_to is None else
                                 held_to.greedy(logits, draft.tokens, top))
        return self._verify_sampled(seq, draft, logits if held_to is None else
                                    held_to.mask(logits, draft.tokens))

    def _verify_sampled(self, seq: Sequence, draft: Draft, logits) -> Verdict:
        # logits: [1 + k, vocab]
        sampler = self._samplers.get(seq.seq_id)
        if sampler is None:  # a sampler seeds a generator: made once per lane, not per step
            sampler = self._samplers[seq.seq_id] = LaneSampler(seq.sampling)
        return verify_sampled(draft.tokens, sampler.probs(logits).cpu(), draft.probs,
                              sampler.generator)

    def _commit(self, seq: Sequence, n: int, draft: Draft, verdict: Verdict) -> LaneResult:
        tokens = verdict.tokens
        room = seq.max_new_tokens - seq.num_output
        cut = next((j + 1 for j, tok in enumerate(tokens) if tok in seq.stop_ids), len(tokens))
        tokens = tokens[:max(0, min(cut, room))]
        kept_drafts = min(verdict.accepted, len(tokens))
        fed_end = seq.num_cached + n
        seq.token_ids.extend(tokens)
        # KV is valid for the fed tokens and the accepted drafts; the bonus is fed next step.
        seq.num_cached = self.runner.kv.truncate(seq.seq_id, fed_end + kept_drafts)
        seq.finished = bool(tokens and tokens[-1] in seq.stop_ids) or \
            seq.num_output >= seq.max_new_tokens
        sent = len(draft.tokens)
        self.stats.record(seq.seq_id, seq.cat, sent, verdict.accepted,
                          self.shadows.check(seq.seq_id, sent, verdict.accepted, verdict.bonus),
                          draft.match)
        if sent:
            self._drafters_commit(seq, sent, verdict.accepted)
        return LaneResult(seq.seq_id, tokens, [j < kept_drafts for j in range(len(tokens))],
                          seq.finished)

    def _drafters_commit(self, seq: Sequence, drafted: int, accepted: int) -> None:
        for drafter in self._drafters.values():
            drafter.commit(seq, drafted, accepted)


def _prompt_rows(seq: Sequence, n: int) -> range:
    """The positions, among the `n` a step feeds `seq`, whose rows give the log-probabilities
    of prompt tokens still wanted (row p: token p + 1's); first of the lane's logits rows."""
    if seq.prompt_logprobs is None:
        return range(0)
    return range(max(seq.num_cached, len(seq.prompt_logprobs)),
                 min(seq.num_cached + n, seq.prompt_len - 1))
