"""A request's way back: the engine hands a Completion its tokens at step boundaries; the thread
answering the client reads them and turns them into text with AnswerText."""
from __future__ import annotations

import queue
import threading

from engine.serve.held_text import tag_start
from engine.serve.request import ApiRequest


class Completion:
    """One request in the engine. The engine calls `add`, then `finish` or `fail`; the answering
    thread reads `next_event` and may `cancel` (its client left, or a stop string was met),
    which the engine honours at its next step."""

    def __init__(self, request: ApiRequest) -> None:
        self.request = request
        self.agent: int | None = None  # the agent that took it, set by the engine
        self.reused_tokens = 0         # of the prompt, tokens whose KV the agent already held
        self.logprobs: list = []  # per answer token, where asked: sampling.token_logprobs's
        self._events: queue.SimpleQueue = queue.SimpleQueue()
        self._cancelled = threading.Event()

    # -- the engine's side --
    def add(self, ids: list[int], logprobs: list | None = None) -> None:
        """The answer's next tokens, and their log-probabilities where it asked for them (read
        once the tokens are: the queue orders them)."""
        self.logprobs.extend(logprobs or ())
        self._events.put(("tokens", list(ids)))

    def finish(self, reason: str) -> None:
        """`reason`: stop (a stop token) or length (max_tokens or the context's end)."""
        self._events.put(("finish", reason))

    def fail(self, message: str) -> None:
        self._events.put(("error", message))

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    # -- the answering side --
    def cancel(self) -> None:
        self._cancelled.set()

    def next_event(self, timeout_s: float | None = None) -> tuple[str, object] | None:
        """("tokens", ids), ("finish", reason) or ("error", message), waiting for it (None
        after `timeout_s` where given). The engine always ends with one of the last two, when
        it closes too."""
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
        self.stopped = False           # a stop string was met

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
        cut = min((at for at in (self._text.find(s, max(0, self._sent - len(s) + 1))
                                 for s in self._stops) if at >= 0), default=None)
        if cut is not None:
            self.stopped = True
            return self._take(cut)
        held = 0 if last else max((tag_start(self._text, s) for s in self._stops), default=0)
        return self._take(len(self._text) - held)

    def _take(self, end: int) -> str:
        piece = self._text[self._sent:max(end, self._sent)]
        self._sent = max(end, self._sent)
        return piece
