"""One agent of the swarm: a client of the engine that loops decode turn -> tool call -> tool
output (prefill) -> decode turn, and keeps a transcript the app can show and the trace records.

The agent owns its context as a Sequence; the engine feeds it through the scheduler. Its text is
the Sequence's token_ids, so preemption (which only drops KV) never loses any of it.

For the trace, `take_text()` hands over the transcript since its last call as text. Steps only
note where each run of output ends; decoding waits until the engine takes the text at a state
change, and decodes the turn's output as a whole, so a character whose bytes span two steps (or an
accepted draft and the token after it) comes out as one character, as in a decode of the turn."""
from __future__ import annotations

import os
import random
from collections import deque
from dataclasses import dataclass, field

from engine.sampling import SamplingParams
from engine.sequence import Sequence
from engine.swarm.workload import Task, Workload

STATES = ("decode", "tool", "waiting", "done")
MAX_SEGMENTS = 2000  # transcript segments kept per agent (older ones scroll away)


@dataclass(slots=True)
class AgentView:
    """What the app's agent table and transcript pane show; a copy, safe to hand to a thread."""
    id: int
    state: str                         # decode | tool | waiting | done
    cat: str
    tokens: int                        # tokens emitted over the agent's life
    acceptance: float | None           # accepted / drafted over its life
    transcript: list[tuple[str, str]] = field(default_factory=list)  # (text, kind)
    first_segment: int = 0             # the number of transcript[0] among all the agent's segments
    turns: int = 0
    mean_turn_s: float | None = None   # mean time from a turn's start to its last token

    @classmethod
    def make_dummy(cls, id: int = 0, cat: str = "code-edit") -> "AgentView":
        return cls(id=id, state="decode", cat=cat, tokens=42, acceptance=0.6,
                   transcript=[("Fix the bug.", "prompt"), ("def f(x):", "committed"),
                               ("\n    return", "accepted_draft")], turns=1, mean_turn_s=1.5)


class Agent:
    def __init__(self, agent_id: int, workload: Workload, tokenizer, rng: random.Random,
                 temperature: float, max_context: int, record_text: bool = False) -> None:
        self.id = agent_id
        self.workload, self.tokenizer, self.rng = workload, tokenizer, rng
        self.temperature, self.max_context = temperature, max_context
        self.state = "decode"
        self.cat = ""
        self.task: Task | None = None
        self.seq: Sequence | None = None
        self.tool_until = 0.0       # session time the running tool call ends
        self.turn_started = 0.0
        self.turn_times: list[float] = []
        self.tokens = self.drafted = self.accepted = 0
        # Segments hold text, or token ids decoded only when someone looks (keeps steps cheap).
        self._segments: deque[list] = deque(maxlen=MAX_SEGMENTS)
        self._segments_made = 0  # over the agent's life (a view numbers its segments by it)
        # Text not yet taken for the trace (None: not recorded): [text, kind] for prompt and tool
        # output, [end, kind] for a run of this turn's output ending at _turn_ids[end].
        self._unsent: list[list] | None = [] if record_text else None
        self._turn_ids: list[int] = []  # this turn's output so far
        self._taken_ids = 0             # of _turn_ids, how many are already taken as text
        self._taken_chars = 0           # of the turn's decoded output, how much was taken

    # -- transitions (the engine calls these at step boundaries) --
    def start_task(self, cat: str, seq_id: int, t: float) -> Sequence:
        """A fresh task in a fresh sequence (the old one's KV is the engine's to free)."""
        self.cat = cat
        self.task = self.workload.new_task(cat, self.rng)
        text = self.tokenizer.chat_prompt(self.task.text, self.workload.system(cat))
        ids = self.tokenizer.encode(text)
        room = self.max_context - self._turn_tokens()
        # Too long: keep the end, the question. Sliced from a start, as ids[-0:] would keep all.
        ids = ids[max(0, len(ids) - room):]
        sampling = SamplingParams(temperature=self.temperature,
                                  seed=self.rng.randrange(2 ** 31))
        self.seq = Sequence(seq_id=seq_id, token_ids=ids, prompt_len=len(ids), sampling=sampling,
                            stop_ids=tuple(self.tokenizer.eos_ids), agent=self.id, cat=cat)
        self._add_segment(text, "prompt")
        self._note(text, "prompt")
        self._begin_turn(t)
        return self.seq

    def call_tool(self, t: float, latency_s: float) -> None:
        self.turn_times.append(t - self.turn_started)
        self.state = "tool"
        self.tool_until = t + latency_s

    def tool_output_fits(self, text_ids: list[int]) -> bool:
        """Whether the tool output and one more turn still fit the context limit; if not, the
        engine starts a fresh task instead (contexts never grow without bound)."""
        need = len(self.seq.token_ids) + len(text_ids) + self._turn_tokens()
        return need <= self.max_context

    def tool_output(self) -> tuple[str, list[int]]:
        """The tool's answer as the conversation's next turn, and its ids."""
        text = self.tokenizer.follow_up(self.workload.tool_output(self.task, self.rng))
        ids = self.tokenizer.encode(text)
        last = self.seq.token_ids[-1]
        if ids and ids[0] == last and last in self.seq.stop_ids:
            # the turn's close the template writes is the stop token the model already wrote
            ids, text = ids[1:], text.removeprefix(self.tokenizer.decode([last]))
        return text, ids

    def resume(self, text: str, ids: list[int], t: float) -> None:
        self.seq.token_ids.extend(ids)
        self._add_segment(text, "tool")
        self._note(text, "tool")
        self._begin_turn(t)

    def _add_segment(self, content: str | list[int], kind: str) -> None:
        self._segments.append([content, kind])
        self._segments_made += 1

    def _turn_tokens(self) -> int:
        """Most tokens a turn writes: the workload's, but at most half the context, so that a
        model with a short one still has room for the prompt."""
        return max(1, min(self.workload.max_new_tokens(self.cat), self.max_context // 2))

    def _turn_asks(self, seq: Sequence) -> None:
        """What this turn's answer keeps to and comes with: its category's schema, where it
        gives one (the json agents' tool calls); no prediction, no log-probabilities (a
        client's agent takes these from its request)."""
        held_to = self.workload.answer_format(self.cat, self.tokenizer)
        seq.output_format = held_to and held_to.copy()
        seq.prediction = seq.logprobs = None

    def _begin_turn(self, t: float) -> None:
        seq = self.seq
        seq.prompt_len = len(seq.token_ids)  # the turn's output is what follows
        seq.max_new_tokens = self._turn_tokens()
        self._turn_asks(seq)
        seq.finished = False
        self.state = "decode"
        self.turn_started = t
        self._settle_output()  # the last turn's output, decoded before its ids are dropped
        self._turn_ids, self._taken_ids, self._taken_chars = [], 0, 0

    def on_tokens(self, new_ids: list[int], accepted: int, drafted: int,
                  logprobs: list | None = None) -> None:
        """Tokens this step committed for the agent: the first `accepted` were drafts;
        `logprobs`, where the turn asked for them (LaneResult.logprobs), are a client's."""
        self.tokens += len(new_ids)
        self.accepted += accepted
        self.drafted += drafted
        for kind, ids in (("accepted_draft", new_ids[:accepted]), ("committed", new_ids[accepted:])):
            if not ids:
                continue
            if self._segments and self._segments[-1][1] == kind:
                self._segments[-1][0].extend(ids)
            else:
                self._add_segment(list(ids), kind)
            if self._unsent is None:
                continue
            self._turn_ids.extend(ids)
            last = self._unsent[-1] if self._unsent else None
            if last is not None and last[1] == kind and isinstance(last[0], int):
                last[0] = len(self._turn_ids)
            else:
                self._unsent.append([len(self._turn_ids), kind])

    # -- text for the trace --
    def take_text(self) -> list[list[str]]:
        """The transcript since the last call as [[text, kind], ...] (trace_writer.SEGMENT_KINDS),
        decoded now. The engine calls it at state changes and at close, never per step."""
        if not self._unsent:
            return []
        self._settle_output()
        taken = [item for item in self._unsent if item[0]]
        self._unsent = []
        return taken

    def _note(self, text: str, kind: str) -> None:
        if self._unsent is not None:
            self._unsent.append([text, kind])

    def _settle_output(self) -> None:
        """Replace the pending runs of output ([end, kind]) by their text. The decode of the
        whole turn is the authority; the runs split it where their own decodes agree with it."""
        pending = [item for item in (self._unsent or ()) if isinstance(item[0], int)]
        if not pending:
            return
        ids, decode = self._turn_ids, self.tokenizer.decode
        ends = [item[0] for item in pending]
        full = decode(ids[:ends[-1]])
        pieces = [decode(ids[a:b]) for a, b in zip([self._taken_ids] + ends[:-1], ends)]
        if "".join(pieces) != full[self._taken_chars:]:
            # A run boundary splits a character (or the tokenizer joins tokens with context):
            # cut the whole decode where each run's prefix decode stops agreeing with it.
            cuts = [self._taken_chars]
            for end in ends[:-1]:
                agree = len(os.path.commonprefix([decode(ids[:end]), full]))
                cuts.append(max(cuts[-1], agree))
            cuts.append(len(full))
            pieces = [full[a:b] for a, b in zip(cuts, cuts[1:])]
        for item, text in zip(pending, pieces):
            item[0] = text
        self._taken_ids, self._taken_chars = ends[-1], len(full)

    # -- views --
    def view(self, state: str | None = None, transcript: bool = True,
             tail_chars: int | None = None) -> AgentView:
        """`transcript`: decode the text at all (the costly part); `tail_chars`: only the newest
        segments that together hold at least that many characters."""
        segments = []
        for seg, kind in reversed(self._segments if transcript else ()):
            segments.append((seg if isinstance(seg, str) else self.tokenizer.decode(seg), kind))
            if tail_chars is not None:
                tail_chars -= len(segments[-1][0])
                if tail_chars <= 0:
                    break
        transcript = segments[::-1]
        return AgentView(id=self.id, state=state or self.state, cat=self.cat, tokens=self.tokens,
                         acceptance=self.accepted / self.drafted if self.drafted else None,
                         transcript=transcript,
                         first_segment=self._segments_made - len(transcript),
                         turns=len(self.turn_times),
                         mean_turn_s=(sum(self.turn_times) / len(self.turn_times)
                                      if self.turn_times else None))
