"""Tokenizers: a Hugging Face `tokenizers` wrapper and a byte-level one for the tiny test model."""
from __future__ import annotations

from pathlib import Path

import tokenizers

from engine.chat_template import ChatTemplateError, pick_template, render_chat, render_follow_up
from engine.errors import ModelLoadError


def _token_text(value) -> str | None:
    # tokenizer_config.json spells special tokens either as strings or as AddedToken dicts.
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _conversation(user: str, system: str | None) -> list[dict[str, str]]:
    """One user message, after a system message if given."""
    return ([{"role": "system", "content": system}] if system is not None else []) + [
        {"role": "user", "content": user}]


class Tokenizer:
    """Text <-> ids for one model, plus its chat template."""

    def __init__(self, inner: tokenizers.Tokenizer, *, chat_template: str | None = None,
                 tool_template: str | None = None, bos_token: str | None = None,
                 eos_tokens: tuple[str, ...] = (), eos_ids: tuple[int, ...] = ()) -> None:
        self.inner = inner
        self.chat_template = chat_template
        self.tool_template = tool_template or chat_template  # renders conversations with tools
        self.template_source: Path | None = None  # the file the template came from
        # More variables for the template: {"enable_thinking": False} turns Qwen3's off
        self.template_variables: dict[str, object] = {}
        self.bos_token = bos_token
        self.vocab_size: int = inner.get_vocab_size(with_added_tokens=True)
        known = [inner.token_to_id(t) for t in eos_tokens]
        self.eos_ids: tuple[int, ...] = tuple(dict.fromkeys(
            [*eos_ids, *(i for i in known if i is not None)]))
        # A template's eos_token is tokenizer_config's, as transformers passes it (Llama 3.1's
        # config.json lists <|end_of_text|> first, its tokenizer_config names <|eot_id|>).
        named = [t for t, i in zip(eos_tokens, known) if i is not None]
        self.eos_token = (named[0] if named else
                          inner.id_to_token(self.eos_ids[0]) if self.eos_ids else None)

    @classmethod
    def from_file(cls, path: str | Path, tokenizer_config: dict | None = None, *,
                  eos_ids: tuple[int, ...] = ()) -> "Tokenizer":
        """Read tokenizer.json; tokenizer_config (the parsed tokenizer_config.json) adds the chat
        template and special tokens; eos_ids (from config.json) are merged with its eos_token.
        ChatTemplateError: its chat_template lists named ones and none is the default."""
        path = Path(path)
        if not path.is_file():
            raise ModelLoadError(path, "file not found")
        try:
            inner = tokenizers.Tokenizer.from_file(str(path))
        except Exception as exc:  # the Rust side raises a bare Exception on malformed JSON
            raise ModelLoadError(path, f"not a valid tokenizer.json ({exc})") from None
        # A tokenizer.json saved with truncation or padding on would cut a long prompt or pad a
        # short one with every encode; transformers turns both off unless a call asks for them.
        inner.no_truncation()
        inner.no_padding()
        cfg = tokenizer_config or {}
        template = pick_template(cfg.get("chat_template"))
        eos = _token_text(cfg.get("eos_token"))
        return cls(inner, chat_template=template,
                   tool_template=pick_template(cfg.get("chat_template"), "tool_use"),
                   bos_token=_token_text(cfg.get("bos_token")), eos_tokens=(eos,) if eos else (),
                   eos_ids=eos_ids)

    def encode(self, text: str) -> list[int]:
        # Special tokens written in the text (e.g. "<|im_start|>") become their single ids, and
        # no BOS/EOS is added: prompts come from the chat template, which places its own.
        return self.inner.encode(text, add_special_tokens=False).ids

    def encode_plain(self, text: str) -> list[int]:
        """Text that no chat template wraps, as transformers' tokenizer(text) encodes it: with
        what tokenizer.json's post-processor adds (Llama's and Mistral's BOS; Qwen's nothing)."""
        return self.inner.encode(text).ids

    def decode(self, ids: list[int], skip_special: bool = False) -> str:
        return self.inner.decode(list(ids), skip_special_tokens=skip_special)

    def has_token(self, text: str) -> bool:
        """Whether `text` is one token of the vocabulary."""
        return self.inner.token_to_id(text) is not None

    def chat_prompt(self, user: str, system: str | None = None) -> str:
        """The prompt for a conversation of one user message, after a system message if given
        (`render_chat` folds it into the user's where the template refuses it); ChatTemplateError,
        naming the template's file, when the template refuses them."""
        return self.chat_messages(_conversation(user, system))

    def chat_messages(self, messages: list[dict], tools: list[dict] | None = None,
                      variables: dict | None = None) -> str:
        """The prompt for a whole conversation (an API client's), ending with the assistant's
        turn, with the `tools` it may call (in OpenAI's form) where given and the template's
        `variables` for this conversation (enable_thinking); ChatTemplateError, naming the
        template's file, when the template refuses it."""
        try:
            return self._render(messages, tools, variables)
        except ChatTemplateError as exc:
            raise self._named(exc) from None

    def follow_up(self, user: str) -> str:
        """What follows an assistant's turn when the user (a tool) answers: the turn's close, the
        message and the next turn's prompt, without the conversation's once-only start. A template
        that cannot render it so gets the message as a conversation of its own."""
        try:
            text = render_follow_up(self.chat_template, user, bos_token=self.bos_token or "",
                                    eos_token=self.eos_token or "",
                                    variables=self.template_variables)
        except ChatTemplateError:
            text = None
        return self.chat_prompt(user) if text is None else text

    def template_for(self, tools: bool) -> str | None:
        """The template a conversation is rendered in, with tools offered or without."""
        return self.tool_template if tools else self.chat_template

    def _render(self, messages: list[dict], tools: list[dict] | None = None,
                variables: dict | None = None) -> str:
        variables = {**self.template_variables, **(variables or {}),
                     **({"tools": tools} if tools else {})}
        return render_chat(self.template_for(bool(tools)), messages,
                           bos_token=self.bos_token or "", eos_token=self.eos_token or "",
                           variables=variables)

    def _named(self, problem) -> ChatTemplateError:
        """The model's own template's error names its file."""
        if self.template_source is None or not self.chat_template:
            return problem if isinstance(problem, ChatTemplateError) else ChatTemplateError(problem)
        return ChatTemplateError(f"{self.template_source}: {problem}")


class ByteTokenizer:
    """Ids 0..255 are bytes; a few specials follow. For the tiny-test model (vocab 320)."""

    SPECIALS = ("<s>", "</s>", "<|im_start|>", "<|im_end|>")  # ids 256, 257, 258, 259
    BOS, EOS, IM_START, IM_END = 256, 257, 258, 259
    bos_token, eos_token = "<s>", "</s>"

    def __init__(self) -> None:
        self.vocab_size = 256 + len(self.SPECIALS)
        # A chat turn ends with <|im_end|>; plain text ends with </s>.
        self.eos_ids: tuple[int, ...] = (self.EOS, self.IM_END)
        self.chat_template = self.tool_template = self.template_source = None
        self.template_variables: dict[str, object] = {}  # ChatML reads none

    def template_for(self, tools: bool) -> None:
        return None  # ChatML, built in

    def encode(self, text: str) -> list[int]:
        ids: list[int] = []
        pos = 0
        while pos < len(text):
            nxt = min(((i, s) for s in self.SPECIALS if (i := text.find(s, pos)) >= 0),
                      default=(len(text), ""))
            ids.extend(text[pos:nxt[0]].encode("utf-8"))
            if nxt[1]:
                ids.append(256 + self.SPECIALS.index(nxt[1]))
            pos = nxt[0] + len(nxt[1])
        return ids

    encode_plain = encode  # no post-processor: plain text is its bytes

    def has_token(self, text: str) -> bool:
        return text in self.SPECIALS or len(text.encode("utf-8")) == 1

    def decode(self, ids: list[int], skip_special: bool = False) -> str:
        out, run = [], bytearray()
        for i in ids:
            if 0 <= i < 256:
                run.append(i)
                continue
            out.append(run.decode("utf-8", errors="replace"))
            run = bytearray()
            # Ids past the specials exist in the model's vocab (320) but name nothing.
            if not skip_special and 256 <= i < 256 + len(self.SPECIALS):
                out.append(self.SPECIALS[i - 256])
        out.append(run.decode("utf-8", errors="replace"))
        return "".join(out)

    def chat_prompt(self, user: str, system: str | None = None) -> str:
        return render_chat(None, _conversation(user, system))

    def chat_messages(self, messages: list[dict], tools: list[dict] | None = None,
                      variables: dict | None = None) -> str:
        # ChatML has no tools (nor does the server offer any)
        return render_chat(None, messages, variables=variables)

    def follow_up(self, user: str) -> str:
        return render_follow_up(None, user)  # ChatML shows the assistant's words as given
