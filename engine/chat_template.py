"""Chat templates: render a model's Jinja chat template (or ChatML) into prompt text."""
from __future__ import annotations

from datetime import datetime
from functools import lru_cache

import jinja2
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


@lru_cache(maxsize=16)
def _compile(source: str) -> jinja2.Template:
    # The sandbox is what transformers uses too: templates come with downloaded models.
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=["jinja2.ext.loopcontrols"])
    env.globals["raise_exception"] = _raise_exception
    # Llama 3.1-3.3 templates write today's date into the system header when they can
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    try:
        return env.from_string(source)
    except jinja2.TemplateError as exc:
        raise ChatTemplateError(f"chat template does not parse: {exc}") from exc


def check_template(source) -> None:
    """Raise ChatTemplateError when the template is not text or does not parse."""
    if not isinstance(source, str):
        raise ChatTemplateError(f"chat template must be text, got {source!r}")
    _compile(source)


def render_chat(template: str | None, messages: list[dict[str, str]], *,
                bos_token: str = "", eos_token: str = "") -> str:
    """Text of `messages` in the template, ending with the prompt for the assistant's turn."""
    try:
        return _compile(template or CHATML).render(
            messages=messages, add_generation_prompt=True, bos_token=bos_token,
            eos_token=eos_token)
    except jinja2.TemplateError as exc:
        raise ChatTemplateError(f"chat template failed to render: {exc}") from exc
