"""A request's way back: the engine hands a Completion its tokens at step boundaries; the thread
answering the client reads them and turns them into text with AnswerText."""
from __future__ import annotations

import queue
import threading

from engine.serve.held_text import tag_start
from engine.serve.request import ApiRequest


class Completion:
    """One answer a request asks for, in the engine. The engine calls `add`, then `finish` or
    `fail`; the answering thread reads `next_event` and may `cancel` (its client left, or a stop
    string was met), which the engine honours at its next step."""

    def __init__(self, request: ApiRequest, index: int = 0,
                 events: queue.SimpleQueue | None = None) -> None:
        self.request = request
        self.index = index  # among the request's choices
        self.agent: int | None = None  # the agent that took it, set by the engine
        self.reused_tokens = 0         # of the prompt, tokens whose KV the agent already held
        self.logprobs: list = []  # per answer token, where asked: sampling.token_logprobs's
        self.prompt_logprobs: list | None = None  # the prompt's (Sequence's), where asked: set
                                                  # before its first tokens are added
        self._events = queue.SimpleQueue() if events is None else events
        self._cancelled = threading.Event()

    @classmethod
    def choices(cls, requests: list[ApiRequest]) -> list["Completion"]:
        """A completion for each of a request's choices, answered through one queue: any of
        them reads the events of all, in the order the engine made them."""
        events = queue.SimpleQueue()
        return [cls(request, index, events) for index, request in enumerate(requests)]

    # -- the engine's side --
    def add(self, ids: list[int], logprobs: list | None = None) -> None:
        """The answer's next tokens, and their log-probabilities where it asked for them (read
        once the tokens are: the queue orders them)."""
        self.logprobs.extend(logprobs or ())
        self._events.put((self.index, "tokens", list(ids)))

    def finish(self, reason: str) -> None:
        """`reason`: stop (a stop token) or length (max_tokens or the context's end)."""
        self._events.put((self.index, "finish", reason))

    def fail(self, message: str) -> None:
        self._events.put((self.index, "error", message))

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    # -- the answering side --
    def cancel(self) -> None:
        self._cancelled.set()

    def next_event(self, timeout_s: float | None = None) -> tuple[int, str, object] | None:
        """(index, "tokens", ids), (index, "finish", reason) or (index, "error", message), of
        this completion or one it shares its queue with (`choices`), waiting for it (None after
        `timeout_s` where given). The engine always ends each with one of the last two, when it
        closes too."""
        try:
            return self._events.get(timeout=timeout_s)
        except queue.Empty:
            return None


class AnswerText:
    """The answer's text as its tokens arrive, in pieces that never change once handed out: a
    character whose bytes span tokens waits for its last one, text that may be the start of a
    stop string waits until it is not, and the answer ends before the first stop string.

    Decoded a few tokens at a time as vLLM does (the newest tokens with the ones before them,
    less those ones' own text), so a long answer costs no more a token than a short one and a
    tokenizer that drops a word's leading space at the start of a decode keeps it."""

    def __init__(self, tokenizer, stops: tuple[str, ...], keep_special: bool = False) -> None:
        self._decode = lambda ids: tokenizer.decode(ids, skip_special=not keep_special)
        self._stop_ids, self._stops = set(tokenizer.eos_ids), stops  # the lane's stop tokens
        self._ids: list[int] = []
        self._prefix = self._read = 0  # token offsets: context for the next decode, and read up to
        self._text = ""                # decoded so far
        self._sent = 0                 # characters of it handed out
        self.tokens = 0                # tokens the answer took (up to a stop string)
        self.stop_string: str | None = None  # the stop string met, where one was

    @property
    def stopped(self) -> bool:
        """Whether a stop string ended the answer."""
        return self.stop_string is not None

    def add(self, ids: list[int], last: bool = False) -> str:
        """Take the engine's next tokens; return the text that is now safe to hand out (with
        `last`, the answer's end: all of it, a character cut short or a stop string's start
        included)."""
        if self.stopped:
            return ""
        self.tokens += len(ids)
        self._ids.extend(i for i in ids if i not in self._stop_ids)
        before = self._decode(self._ids[self._prefix:self._read])
        after = self._decode(self._ids[self._prefix:])
        if len(after) > len(before) and (last or not after.endswith("\ufffd")):
            self._text += after[len(before):]
            self._prefix, self._read = self._read, len(self._ids)
        met = min(((at, at + len(s)) for at, s in ((self._text.find(s, max(
            0, self._sent - len(s) + 1)), s) for s in self._stops) if at >= 0), default=None)
        if met is not None:
            self.stop_string = self._text[met[0]:met[1]]
            self._count_to(met[1], ids)
            return self._take(met[0])
        held = 0 if last else max((tag_start(self._text, s) for s in self._stops), default=0)
        return self._take(len(self._text) - held)

    def _count_to(self, end: int, new_ids: list[int]) -> None:
        """The answer's tokens are those up to the one whose text reached `end` (a stop string's
        end), not the rest of the `new_ids` that came with it: as many whether its tokens came
        one a step or several (speculation)."""
        kept_new = sum(i not in self._stop_ids for i in new_ids)
        first = len(self._ids) - kept_new
        for needed in range(1, kept_new + 1):
            if len(self._decode(self._ids[:first + needed])) >= end:
                self.tokens += needed - len(new_ids)
                return

    def _take(self, end: int) -> str:
        piece = self._text[self._sent:max(end, self._sent)]
        self._sent = max(end, self._sent)
        return piece
