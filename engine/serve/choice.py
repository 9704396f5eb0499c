"""One of a request's answers as OpenAI's API hands it back: read from its completion's tokens as
they come (AnswerText), its reasoning apart, its tool calls read, its log-probabilities beside,
as a whole answer's choice or a stream's chunks; and the usage of a request's answers together."""
from __future__ import annotations

import time

from engine.serve.call_form import CallStream, ToolCall
from engine.serve.completion import AnswerText, Completion
from engine.serve.logprobs import AnswerLogprobs
from engine.serve.reasoning import ReasoningSplit
from engine.serve.request import ApiRequest


class Choice:
    def __init__(self, completion: Completion, tokenizer) -> None:
        request = self.request = completion.request
        self.completion, self.index = completion, completion.index
        # the tags of tool calls and reasoning may be special tokens (Hermes', Llama's): an
        # answer read for them keeps them
        self.answer = AnswerText(tokenizer, request.stop,
                                 keep_special=request.tool_form is not None or request.thinking)
        self._logprobs = (AnswerLogprobs(completion, tokenizer, request.chat)
                          if request.logprobs is not None else None)
        self._text: list[str] = []  # the pieces handed out
        self._split = ReasoningSplit(request.inside_reasoning) if request.thinking else None
        self._held = CallStream(request.tool_form) if request.tool_form else None
        self.finish_reason: str | None = None  # once the answer ended
        self.first_token_at: float | None = None  # perf_counter() as its first tokens came
        self._echo = request.echo  # the prompt, till it goes out before the answer's first text

    def take(self, kind: str, value) -> tuple[str, str | None]:
        """A "tokens" or "finish" event of the completion's: the text that may go out now, and
        where the answer ended, its finish reason. A stop string met cancels the completion, so
        the engine stops at its next step."""
        if kind == "tokens" and self.first_token_at is None:
            self.first_token_at = time.perf_counter()
        if self.request.max_tokens == 0:  # the prompt alone (echo): the turn's token dropped
            kind, value = ("tokens", []) if kind == "tokens" else ("finish", "length")
        piece = self.answer.add(value) if kind == "tokens" else self.answer.add([], last=True)
        if self._echo is not None:
            piece, self._echo = self._echo + piece, None
        self._text.append(piece)
        if not (self.answer.stopped or kind == "finish"):
            return piece, None
        self.completion.cancel()
        self.finish_reason = "stop" if self.answer.stopped else value
        return piece, self.finish_reason

    # -- a whole answer --
    def whole(self) -> dict:
        """The ended answer's choice: a chat's message (with its reasoning and the tool calls it
        makes, where any) or a text completion's text."""
        request, text, reason = self.request, "".join(self._text), self.finish_reason
        if not request.chat:
            choice = {"index": self.index, "text": text, "logprobs": None, "finish_reason": reason}
        else:
            message = {"role": "assistant"}
            if request.thinking:
                reasoning, text = ReasoningSplit(request.inside_reasoning).add(text, last=True)
                message["reasoning_content"] = reasoning.strip("\n") or None
            content, calls = request.tool_form.split(text) if request.tool_form else (text, [])
            if calls := _kept(request, calls):
                message.update(content=content.strip() or None,
                               tool_calls=[call.as_api() for call in calls])
                reason = self.finish_reason = "tool_calls"
            else:
                message["content"] = content
            choice = {"index": self.index, "message": message, "finish_reason": reason}
        if self._logprobs:
            choice["logprobs"] = self._logprobs.take(self.answer.tokens, always=True)
        return choice

    # -- a streamed answer --
    def opening(self) -> dict:
        """A chat stream's first chunk of the choice: the speaker."""
        return {"index": self.index, "finish_reason": None,
                "delta": {"role": "assistant", "content": ""}}

    def chunks(self, piece: str, reason: str | None) -> list[dict]:
        """The stream's chunks (their choice) for `piece`, its reasoning then what is not a call,
        and where the answer ended, the calls and the finish `reason`; each with the
        log-probabilities of the tokens come since the last, where they are asked for."""
        out = []

        def emit(choice: dict) -> None:
            if self._logprobs and (taken := self._logprobs.take(self.answer.tokens)):
                choice = {**choice, "logprobs": taken}
            out.append(choice)

        last = reason is not None
        reasoning, text = self._split.add(piece, last) if self._split else ("", piece)
        if reasoning:
            emit({"index": self.index, "finish_reason": None,
                  "delta": {"reasoning_content": reasoning}})
        if text := self._held.add(text) if self._held else text:
            emit(self._piece(text, None))
        if last:
            rest, calls = self._held.end() if self._held else ("", [])
            if rest:
                emit(self._piece(rest, None))
            if calls := _kept(self.request, calls):
                emit({"index": self.index, "finish_reason": None, "delta": {
                    "tool_calls": [call.as_api(i) for i, call in enumerate(calls)]}})
                reason = self.finish_reason = "tool_calls"
            emit(self._piece(None, reason))
        return out

    def _piece(self, text: str | None, reason: str | None) -> dict:
        """A piece of text as each endpoint streams it: a chat's delta (none at the end), or a
        text completion's text."""
        if not self.request.chat:
            return {"index": self.index, "text": text or "", "logprobs": None,
                    "finish_reason": reason}
        return {"index": self.index, "delta": {} if text is None else {"content": text},
                "finish_reason": reason}


def usage(choices: list[Choice]) -> dict:
    """OpenAI's usage of a request's answers: each prompt counted once (by its first answer),
    every answer's tokens; where the request predicted its answer, the drafts read from the
    prediction that the answers kept and refused (read once they ended: the engine counts them
    before it says so)."""
    firsts = [choice for choice in choices if choice.index % choice.request.n == 0]
    prompt = sum(len(choice.request.prompt_ids) for choice in firsts)
    answers = sum(choice.answer.tokens for choice in choices)
    counted = {"prompt_tokens": prompt, "completion_tokens": answers,
               "total_tokens": prompt + answers, "prompt_tokens_details": {
                   "cached_tokens": sum(choice.completion.reused_tokens for choice in firsts)}}
    predictions = [choice.request.prediction for choice in choices
                   if choice.request.prediction is not None]
    if predictions:
        counted["completion_tokens_details"] = {
            "accepted_prediction_tokens": sum(p.kept for p in predictions),
            "rejected_prediction_tokens": sum(p.refused for p in predictions)}
    return counted


def _kept(request: ApiRequest, calls: list[ToolCall]) -> list[ToolCall]:
    """The calls an answer makes: with parallel_tool_calls false, its first only."""
    return calls if request.parallel_tool_calls else calls[:1]
