"""An agent whose turns come from an API client. Each request is a turn; between requests the
agent waits on its client as a simulated agent waits on a tool, its context's KV kept (the
scheduler's idle sequences), so a request that goes on with the conversation feeds only what is
new: an agent loop sends the whole conversation every time, its last answer and the tool's
output appended."""
from __future__ import annotations

import math
import random

from engine.sequence import Sequence, common_prefix
from engine.serve.completion import Completion
from engine.swarm.agent import Agent

CATEGORY = "api"  # the lanes' category in step records, beside the workload's


class ClientAgent(Agent):
    def __init__(self, agent_id: int, tokenizer, max_context: int, record_text: bool) -> None:
        super().__init__(agent_id, workload=None, tokenizer=tokenizer,
                         rng=random.Random(agent_id), temperature=0.0, max_context=max_context,
                         record_text=record_text)
        self.cat = CATEGORY
        self.completion: Completion | None = None
        self.idle_since = 0.0  # session time its last answer ended

    def held(self, prompt_ids: list[int]) -> int:
        """How much of the prompt this agent's context holds, where the prompt goes on with its
        conversation: it repeats all the agent was given before its last answer, and more (the
        answer itself may come back otherwise: a template that drops a thinking model's
        reasoning, text that tokenizes anew). 0 for another conversation, one that only repeats
        what this agent was last given among them: in a swarm many conversations start alike,
        and one must not take the context of another that is about to go on."""
        same = common_prefix(self.seq.token_ids, prompt_ids)
        given = self.seq.prompt_len
        # the prompt's last token is fed whatever is held: the answer's first comes from it
        return min(same, len(prompt_ids) - 1) if same >= given and len(prompt_ids) > given else 0

    def start(self, completion: Completion, seq_id: int, t: float) -> Sequence:
        """A new conversation in a new sequence (the old one's KV is the engine's to free)."""
        request = self._take(completion)
        self.seq = Sequence(seq_id=seq_id, token_ids=list(request.prompt_ids),
                            prompt_len=len(request.prompt_ids), sampling=request.sampling,
                            stop_ids=tuple(self.tokenizer.eos_ids), agent=self.id, cat=self.cat,
                            turn_end=len(request.prompt_ids))
        text = self.tokenizer.decode(request.prompt_ids)
        self._add_segment(text, "prompt")
        self._note(text, "prompt")
        self._begin_turn(t)
        return self.seq

    def go_on(self, completion: Completion, t: float) -> None:
        """The conversation goes on: the prompt's new tokens follow the context (cut first to
        what the prompt repeats of it: `held`)."""
        request = self._take(completion)
        completion.reused_tokens = self.seq.num_cached
        new_ids = request.prompt_ids[len(self.seq.token_ids):]
        self.seq.sampling = request.sampling
        self.resume(self.tokenizer.decode(new_ids), new_ids, t)
        self.seq.turn_end = len(self.seq.token_ids)

    def _take(self, completion: Completion):
        self.completion = completion
        completion.agent = self.id
        return completion.request

    def _turn_tokens(self) -> int:
        # a turn writes a token at least; an echoed prompt asked for none drops it (Choice)
        return max(1, self.completion.request.max_tokens)

    def _turn_asks(self, seq: Sequence) -> None:
        request = self.completion.request
        seq.output_format, seq.prediction = request.output_format, request.prediction
        seq.logprobs = request.logprobs
        seq.prompt_logprobs = [] if request.prompt_logprobs else None

    def on_tokens(self, new_ids: list[int], accepted: int, drafted: int,
                  logprobs: list | None = None) -> None:
        super().on_tokens(new_ids, accepted, drafted)
        if self.seq.prompt_logprobs is not None and self.completion.prompt_logprobs is None:
            self.completion.prompt_logprobs = self.seq.prompt_logprobs  # whole once it decodes
        self.completion.add(new_ids, logprobs)

    def call_tool(self, t: float, latency_s: float) -> None:
        """The turn ended (or its client cancelled it): answer, then wait for the client."""
        seq = self.seq
        self.completion.finish("stop" if seq.num_output and seq.token_ids[-1] in seq.stop_ids
                               else "length")
        self.idle_since = t
        super().call_tool(t, math.inf)
