"""Chat templates: render a model's Jinja chat template (or ChatML) into prompt text."""
from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from functools import lru_cache

import jinja2
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment

from engine.errors import SwarmscopeError

# ChatML, used when a tokenizer ships no template (and by the tiny byte-level test model).
CHATML = ("{% for message in messages %}"
          "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
          "{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


class ChatTemplateError(SwarmscopeError):
    pass


def _raise_exception(message: str) -> None:
    # Hugging Face templates call raise_exception() to reject message lists they cannot render.
    raise ChatTemplateError(f"chat template refused the messages: {message}")


class _GenerationTag(Extension):
    """`{% generation %}...{% endgeneration %}`, which transformers' templates may wrap an
    assistant's reply in (its training masks find the reply's characters by it; fine-tuned
    models ship such templates). A prompt renders just the body."""
    tags = {"generation"}

    def parse(self, parser):
        next(parser.stream)
        return parser.parse_statements(("name:endgeneration",), drop_needle=True)


@lru_cache(maxsize=16)
def _compile(source: str) -> jinja2.Template:
    # The sandbox is what transformers uses too: templates come with downloaded models.
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=["jinja2.ext.loopcontrols", _GenerationTag])
    env.globals["raise_exception"] = _raise_exception
    # Llama 3.1-3.3 templates write today's date into the system header when they can
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    try:
        return env.from_string(source)
    except jinja2.TemplateError as exc:
        raise ChatTemplateError(f"chat template does not parse: {exc}") from exc


def pick_template(value, name: str = "default"):
    """tokenizer_config.json's chat_template: its text, or, where it lists named templates
    ([{"name", "template"}, ...]), the one named `name`. transformers renders a conversation
    without tools in "default" (without one it refuses, and so does this) and one with tools in
    "tool_use" (Hermes' models ship it; None without one)."""
    if not isinstance(value, list):
        return value
    named = {t.get("name"): t.get("template") for t in value if isinstance(t, dict)}
    if name == "default" and name not in named:
        names = ", ".join(repr(n) for n in named) or "none"
        raise ChatTemplateError("chat_template lists named templates but none named 'default' "
                                f"(names: {names})")
    return named.get(name)


def check_template(source) -> None:
    """Raise ChatTemplateError when the template is not text or does not parse."""
    if not isinstance(source, str):
        raise ChatTemplateError(f"chat template must be text, got {source!r}")
    _compile(source)


# Stands for the assistant's words; no template writes it, and no `trim` takes its ends (Gemma's
# templates trim each message; Python counts \x1f as space, private-use characters not)
TURN_MARK = "\ue000swarmscope-turn\ue000"


def render_follow_up(template: str | None, user: str, *, bos_token: str = "", eos_token: str = "",
                     variables: Mapping[str, object] | None = None) -> str | None:
    """The text that continues a conversation after an assistant's turn with a user message,
    ending with the prompt for the next assistant turn: the tail of a whole conversation past the
    assistant's words, so what a template writes once (BOS, a default system message, a date
    header) is not written again. None when the template does not show those words as given."""
    messages = [{"role": "user", "content": "Go on."}, {"role": "assistant", "content": TURN_MARK},
                {"role": "user", "content": user}]
    text = render_chat(template, messages, bos_token=bos_token, eos_token=eos_token,
                       variables=variables)
    at = text.rfind(TURN_MARK)
    return None if at < 0 else text[at + len(TURN_MARK):]


def render_chat(template: str | None, messages: list[dict[str, str]], *,
                bos_token: str = "", eos_token: str = "",
                variables: Mapping[str, object] | None = None) -> str:
    """Text of `messages` in the template, ending with the prompt for the assistant's turn.
    `variables`: more of the template's own, e.g. Qwen3's enable_thinking (those a template does
    not read change nothing, as in transformers' apply_chat_template). A template that refuses a
    system message (Mistral v0.1's, Gemma 1's and 2's) gets its text at the head of the first
    user message instead, as Gemma 3's own template and other tools put it; one in Granite 3's
    roles gets past calls and tool answers in them (`_granite_roles`), LFM2's past calls in the
    answers' text (`_lfm2_calls`)."""
    def render(messages: list[dict[str, str]]) -> str:
        try:
            return _compile(template or CHATML).render(
                messages=messages, add_generation_prompt=True, bos_token=bos_token,
                eos_token=eos_token, **(variables or {}))
        except jinja2.TemplateError as exc:
            raise ChatTemplateError(f"chat template failed to render: {exc}") from exc

    if template and "assistant_tool_call" in template:
        messages = _granite_roles(messages)
    elif template and LFM2_TOOLS in template and "tool_calls" not in template:
        messages = _lfm2_calls(messages)
    try:
        return render(messages)
    except ChatTemplateError as exc:
        folded = _system_folded(messages)
        if folded is None:
            raise
        try:
            return render(folded)
        except ChatTemplateError as again:
            if str(again) == str(exc):
                raise
            raise ChatTemplateError(f"{exc}; with the system message folded into the user's: "
                                    f"{again}") from None


def _granite_roles(messages: list[dict]) -> list[dict]:
    """The conversation in Granite 3's roles: its templates take an assistant's calls as a
    message of their own, role assistant_tool_call (the calls' JSON list, which is what the model
    writes after <|tool_call|>), and a tool's answer as role tool_response."""
    renamed = []
    for message in messages:
        calls = message.get("tool_calls") if message.get("role") == "assistant" else None
        if calls:
            if message.get("content"):
                renamed.append({"role": "assistant", "content": message["content"]})
            listed = [{"name": call["function"]["name"],
                       "arguments": call["function"].get("arguments", {})} for call in calls]
            renamed.append({"role": "assistant_tool_call",
                            "content": json.dumps(listed, ensure_ascii=False)})
        elif message.get("role") == "tool":
            renamed.append({**message, "role": "tool_response"})
        else:
            renamed.append(message)
    return renamed


LFM2_TOOLS = "<|tool_list_start|>"  # where LFM2's templates list the tools
LFM2_CALLS = ("<|tool_call_start|>", "<|tool_call_end|>")  # around the calls it writes


def _lfm2_calls(messages: list[dict]) -> list[dict]:
    """The conversation with each assistant's calls written before its text as LFM2 writes
    them (its templates render an answer's text alone): a Python list of calls between
    <|tool_call_start|> and <|tool_call_end|>."""
    written = []
    for message in messages:
        calls = message.get("tool_calls") if message.get("role") == "assistant" else None
        if calls:
            listed = ", ".join(_pythonic_call(call["function"]) for call in calls)
            opening, closing = LFM2_CALLS
            message = {**message, "content": f"{opening}[{listed}]{closing}"
                                             f"{message.get('content') or ''}"}
        written.append(message)
    return written


def _pythonic_call(function: dict) -> str:
    arguments = function.get("arguments", {})
    keywords = (", ".join(f"{name}={_pythonic(value)}" for name, value in arguments.items())
                if isinstance(arguments, dict) else "")
    return f"{function['name']}({keywords})"


def _pythonic(value) -> str:
    """`value` (JSON's) as a Python literal: strings double-quoted as LFM2 writes them."""
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(map(_pythonic, value)) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_pythonic(k)}: {_pythonic(v)}" for k, v in value.items()) + "}"
    return json.dumps(value, ensure_ascii=False)


def _system_folded(messages: list[dict[str, str]]) -> list[dict[str, str]] | None:
    """The messages with a leading system message's text put before the first user message's,
    a blank line between; None where they do not start system, user with plain text."""
    if (len(messages) < 2 or messages[0].get("role") != "system"
            or messages[1].get("role") != "user"
            or not all(isinstance(m.get("content"), str) for m in messages[:2])):
        return None
    head = {**messages[1], "content": f"{messages[0]['content']}\n\n{messages[1]['content']}"}
    return [head, *messages[2:]]
