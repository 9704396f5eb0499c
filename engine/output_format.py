"""Answers held to a grammar, by llguidance (the grammar engine of llama.cpp, vLLM and SGLang): a
JSON schema (OpenAI's `response_format`, a workload category's tool call) or calls of the tools a
request forces (each call form writes its grammar: serve/call_forms.py), compiled once; a matcher
per lane that follows its answer token by token; and the masks that keep the target's choice
inside it.

Speculation stays lossless: the target a lane is verified against is the model's distribution
with the tokens the grammar forbids removed, at every row. Row j of a lane's logits follows its
answer and drafts 1..j, so the matcher steps through the drafts and back; drafts are first cut
where the grammar would refuse one (the target could never choose it). A greedy row needs no
mask where the grammar allows the model's best token, as it mostly does. A JSON answer is laid
out as the model likes (WHITESPACE), then an end-of-turn token."""
from __future__ import annotations

import json
import weakref

import llguidance
import torch

from engine.tokenizer import ByteTokenizer

# A tokenizer's vocabulary as llguidance reads it (~0.4 s for SmolLM2's 49k tokens): made once.
_VOCABULARIES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
# Whitespace between a JSON answer's tokens, as much as a pretty-printed nesting needs: without a
# bound a weak model's answer can be whitespace to its last token (the tiny test model's was).
WHITESPACE = r"[\x20\x0A\x0D\x09]{0,24}"


def json_format(schema: dict, tokenizer) -> "OutputFormat":
    """Answers that are JSON valid under `schema`, from their first token; ValueError saying
    why where the schema cannot be compiled (llguidance's own words)."""
    grammar = llguidance.LLMatcher.grammar_from_json_schema(
        json.dumps(schema), defaults={"whitespace_pattern": WHITESPACE})
    return OutputFormat(llguidance.LLMatcher(vocabulary(tokenizer), grammar), tokenizer)


def lark_format(lark: str, tokenizer) -> "OutputFormat":
    """Answers in a grammar of llguidance's Lark syntax (its `start` rule); ValueError saying
    why where it cannot be compiled."""
    grammar = llguidance.LLMatcher.grammar_from_lark(lark)
    return OutputFormat(llguidance.LLMatcher(vocabulary(tokenizer), grammar), tokenizer)


def json_rule(schema: dict, whitespace: str = WHITESPACE) -> str:
    """A Lark rule's body for JSON valid under `schema`, `whitespace` between its tokens unless
    the schema's x-guidance options say otherwise."""
    options = {"whitespace_pattern": whitespace, **schema.get("x-guidance", {})}
    return "%json " + json.dumps({**schema, "x-guidance": options})


def lark_tag(tokenizer, text: str) -> str:
    """`text` as a Lark grammar names it: the special token it is in this tokenizer (a model
    writes it as that token, never as its letters), or else the text itself."""
    ids = tokenizer.encode(text)
    if len(ids) == 1 and vocabulary(tokenizer).is_special_token(ids[0]):
        return f"<[{ids[0]}]>"
    return json.dumps(text)


def vocabulary(tokenizer) -> llguidance.LLTokenizer:
    words = _VOCABULARIES.get(tokenizer)
    if words is None:
        words = _VOCABULARIES[tokenizer] = llguidance.LLTokenizer(
            _ByteWords(tokenizer) if isinstance(tokenizer, ByteTokenizer)
            else tokenizer.inner.to_str(),
            n_vocab=tokenizer.vocab_size, eos_token=list(tokenizer.eos_ids))
    return words


class OutputFormat:
    """One answer's grammar and where the answer is in it."""

    def __init__(self, matcher: llguidance.LLMatcher, tokenizer) -> None:
        if matcher.is_error():  # its first line: a Lark grammar's error goes on to quote it
            raise ValueError(matcher.get_error().splitlines()[0])
        self._matcher, self._tokenizer = matcher, tokenizer
        self._ends = list(tokenizer.eos_ids)

    def copy(self) -> "OutputFormat":
        """The same grammar, where this answer is now, for another answer."""
        return OutputFormat(self._matcher.deep_copy(), self._tokenizer)

    def allowed(self, draft: list[int]) -> int:
        """How many of the draft's leading tokens the grammar takes: the answer's end (an end
        token, which nothing follows) only where the answer may end."""
        # Asked here, not by llguidance: its validate passes an end token anywhere, and one
        # consumed stops the matcher for good, as does an id past the tokenizer's (no text)
        cut = next((i for i, token in enumerate(draft)
                    if token in self._ends or token >= self._tokenizer.vocab_size), len(draft))
        taken = self._matcher.validate_tokens(draft[:cut]) if cut else 0
        if taken == cut < len(draft) and draft[cut] in self._ends:
            self._matcher.consume_tokens(draft[:cut])
            taken += self._matcher.is_accepting()
            self._matcher.rollback(cut)
        return taken

    def greedy(self, logits: torch.Tensor, draft: list[int], top: list[int]) -> list[int]:
        """Each row's highest-scoring token of those the grammar allows there (row j: after the
        answer and draft[:j]; the draft as `allowed` cut it). `top`: each row's highest of all
        (ForwardOutput.greedy), which is it wherever the grammar allows it, as it mostly does:
        only other rows are masked (a mask over the vocabulary costs torch ~100 us a row)."""
        chosen = []
        for token in self._rows(draft):
            best = top[len(chosen)]
            if not self.allowed([best]):
                best = int(logits[len(chosen)].masked_fill(
                    ~self._allowed(logits.shape[1], logits.device), float("-inf")).argmax())
            chosen.append(best)
        return chosen + top[len(chosen):]

    def mask(self, logits: torch.Tensor, draft: list[int]) -> torch.Tensor:
        """`logits` [1 + len(draft), vocab] with what the grammar forbids at each row at -inf
        (rows as `greedy` has them), for a sampled lane's distributions."""
        rows = [self._allowed(logits.shape[1], logits.device) for _ in self._rows(draft)]
        masked = logits.clone()
        masked[:len(rows)].masked_fill_(~torch.stack(rows), float("-inf"))
        return masked

    def advance(self, tokens: list[int]) -> None:
        """The answer's tokens committed this step, each one the masks allowed; its end is not
        the grammar's to take."""
        self._matcher.consume_tokens([token for token in tokens if token not in self._ends])

    def _rows(self, draft: list[int]):
        """Walks the matcher through the draft, row by row (yielding at each row's state), and
        back. Rows after a drafted end are none of the answer's (verification and the commit
        stop at it): the walk stops there."""
        walked = 0
        for token in [*draft, None]:
            yield token
            if token is None or token in self._ends:
                break
            self._matcher.consume_token(token)
            walked += 1
        self._matcher.rollback(walked)

    def _allowed(self, width: int, device: torch.device) -> torch.Tensor:
        """[width] True where the grammar allows the token next (the model's ids past the
        tokenizer's never)."""
        words = torch.frombuffer(bytearray(self._matcher.compute_logit_bias()),
                                 dtype=torch.uint8)[:width]
        allowed = torch.zeros(width, dtype=torch.bool)
        allowed[:len(words)] = words > 0
        if not allowed.any():  # a finished answer (llguidance's mask lists no end) ends here
            allowed[self._ends] = True
        return allowed.to(device)


class _ByteWords(llguidance.TokenizerWrapper):
    """The tiny-test model's byte vocabulary, as llguidance reads a tokenizer: ids 0..255 are
    the bytes, then its named specials, then ids that name nothing."""

    def __init__(self, tokenizer: ByteTokenizer) -> None:
        self.eos_token_id = tokenizer.EOS
        self.bos_token_id = tokenizer.BOS
        self.tokens = [bytes([i]) for i in range(256)] + [
            name.encode() for name in tokenizer.SPECIALS]
        self.special_token_ids = list(range(256, 256 + len(tokenizer.SPECIALS)))
        self.is_tokenizer_wrapper = True
        self._encode = tokenizer.encode

    def __call__(self, text: str) -> list[int]:
        return self._encode(text)
