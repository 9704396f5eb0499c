"""An answer's token log-probabilities as OpenAI's API spells them: a chat choice's
`logprobs.content` (each token's text, bytes, log-probability and likeliest alternatives), a text
completion's `tokens` / `token_logprobs` / `top_logprobs` / `text_offset`. The engine computes them
(sampling.token_logprobs) for a lane that asks; they are read here as the answer's tokens are, up to
the tokens its text took (a stop string's end). A chat's leave out the turn's end token as its
text does; a text completion's keep it, as OpenAI's legacy completions and vLLM give it (an
entry for every token the usage counts, which evaluation harnesses read by position). An echoed
prompt's come first (its first token's log-probability null, as OpenAI's)."""
from __future__ import annotations

from engine.output_format import vocabulary
from engine.serve.completion import Completion


class AnswerLogprobs:
    """The log-probabilities of an answer's tokens, handed out in order as its text goes out."""

    def __init__(self, completion: Completion, tokenizer, chat: bool) -> None:
        self._completion, self._chat = completion, chat
        self._words, self._named = vocabulary(tokenizer), tokenizer.vocab_size
        self._ends = set(tokenizer.eos_ids) if chat else set()  # tokens left out
        self._given = 0      # of the completion's entries, those handed out or passed over
        self._offset = 0     # characters of the text completion's tokens handed out
        request = completion.request
        self._prompt = request.prompt_ids if request.prompt_logprobs else None  # till handed out

    def take(self, tokens: int, always: bool = False) -> dict | None:
        """The entries of the answer's first `tokens` tokens not yet handed out, as the choice's
        `logprobs` (None where none are, unless `always`)."""
        entries = [entry for entry in self._completion.logprobs[self._given:tokens]
                   if entry[0] not in self._ends]
        self._given = max(self._given, tokens)
        if self._prompt is not None and self._completion.prompt_logprobs is not None:
            entries = [(self._prompt[0], None, None), *self._completion.prompt_logprobs, *entries]
            self._prompt = None
        if not entries and not always:
            return None
        if self._chat:
            return {"content": [{**self._token(token), "logprob": logprob,
                                 "top_logprobs": [{**self._token(other), "logprob": theirs}
                                                  for other, theirs in alternatives]}
                                for token, logprob, alternatives in entries]}
        texts = [self._text(token) for token, _, _ in entries]
        offsets = []
        for text in texts:
            offsets.append(self._offset)
            self._offset += len(text)
        return {"tokens": texts, "token_logprobs": [logprob for _, logprob, _ in entries],
                "top_logprobs": [None if alternatives is None else
                                 {self._text(other): theirs for other, theirs in alternatives}
                                 for _, _, alternatives in entries],
                "text_offset": offsets}

    def _token(self, token: int) -> dict:
        """A token's text and bytes, as a chat entry gives them."""
        words = self._bytes(token)
        return {"token": words.decode("utf-8", errors="replace"), "bytes": list(words)}

    def _text(self, token: int) -> str:
        return self._bytes(token).decode("utf-8", errors="replace")

    def _bytes(self, token: int) -> bytes:
        """A token's bytes (a character's may span tokens; the model's ids past the tokenizer's
        name none)."""
        return self._words.decode_bytes([token]) if token < self._named else b""
