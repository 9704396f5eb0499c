"""One sequence (a prompt, or an agent's running context) as the scheduler and the step see it.

There are no phases: a sequence has tokens and a count of how many are in the KV cache. A step
feeds some of the uncached tokens; if it reaches the last one, the lane is decoding this step and
may carry drafts after it."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from engine.sampling import SamplingParams

if TYPE_CHECKING:
    from engine.output_format import OutputFormat


@dataclass(slots=True)
class Prediction:
    """What a client predicts an answer will be (OpenAI's Predicted Outputs), which prompt lookup
    drafts from, and how those drafts fared: kept (accepted) and refused (rejected)."""
    tokens: list[int]
    kept: int = 0
    refused: int = 0


@dataclass(slots=True)
class Sequence:
    seq_id: int
    token_ids: list[int]               # prompt + committed output
    prompt_len: int
    sampling: SamplingParams = field(default_factory=SamplingParams)
    max_new_tokens: int = 256
    stop_ids: tuple[int, ...] = ()
    agent: int = 0
    cat: str = "chat"
    num_cached: int = 0                # tokens whose KV is valid in the cache
    finished: bool = False
    output_format: OutputFormat | None = None  # the grammar its output keeps to, if any
    prediction: Prediction | None = None  # what a client predicts the output will be
    logprobs: int | None = None  # each output token's log-probability is wanted, with this many
                                 # of the likeliest alternatives (None: not wanted)
    # The prompt's tokens' log-probabilities as its rows are fed (entry j: token j + 1's, in
    # row j), where a client asks for them (echo); None: not wanted. Its rows are fed, never
    # taken from a shared prefix or an earlier turn.
    prompt_logprobs: list | None = None
    # Where an API client's turn's prompt ends: its conversation goes on from there, so recurrent
    # layers keep their state as of it (recurrent_state.py); None: not a client's
    turn_end: int | None = None

    @property
    def pending(self) -> int:
        """Tokens still to feed through the model (the last committed token included)."""
        return len(self.token_ids) - self.num_cached

    @property
    def output_ids(self) -> list[int]:
        return self.token_ids[self.prompt_len:]

    @property
    def num_output(self) -> int:
        """len(output_ids) without copying them (every decoding lane asks, every step)."""
        return len(self.token_ids) - self.prompt_len

    @classmethod
    def make_dummy(cls, seq_id: int = 0, prompt_len: int = 8, cat: str = "chat") -> "Sequence":
        return cls(seq_id=seq_id, token_ids=[(seq_id + i) % 200 + 1 for i in range(prompt_len)],
                   prompt_len=prompt_len, agent=seq_id, cat=cat)


def longest_held_prefix(tokens: list[int], holders) -> tuple[int | None, int]:
    """Of `holders` ((id, their tokens, how many of them have KV held)), the first holding the
    longest start of `tokens` short of their last (which is fed whatever is held: the next token
    comes from it), and its length; (None, 0) where none holds any."""
    last = len(tokens) - 1
    return max(((holder, common_prefix(text, tokens, min(held, last)))
                for holder, text, held in holders), key=lambda pair: pair[1], default=(None, 0))


def common_prefix(a: list[int], b: list[int], limit: int | None = None) -> int:
    """How many tokens `a` and `b` start with alike, `limit` at most: halving searches over
    slice compares, each at C speed, as contexts run to thousands of tokens."""
    high = min(len(a), len(b), len(a) if limit is None else limit)
    if a[:high] == b[:high]:
        return high
    low = 0  # a[:low] == b[:low]; a[:high] != b[:high]
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if a[:mid] == b[:mid] else (low, mid)
    return low
