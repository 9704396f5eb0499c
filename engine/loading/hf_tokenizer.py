"""A Hugging Face folder's tokenizer: tokenizer.json, with the special tokens and chat templates
that tokenizer_config.json and the template files beside it hold, checked against the model's
vocabulary and each template checked at load (a broken one is the folder's fault)."""
from __future__ import annotations

from pathlib import Path

from engine.chat_template import ChatTemplateError, check_template
from engine.config import ModelConfig
from engine.errors import ModelLoadError
from engine.loading.config_fields import read_json
from engine.tokenizer import Tokenizer


def read_tokenizer(folder: Path, config: ModelConfig) -> Tokenizer:
    """tokenizer.json with tokenizer_config.json's special tokens and chat template, or the
    template in chat_template.jinja, where transformers >= 4.43 saves it (and which wins), or in
    chat_template.json, where a processor keeps it, and a template for conversations with tools
    in additional_chat_templates/tool_use.jinja, where later ones save a tokenizer's named
    templates."""
    template_source = folder / "tokenizer_config.json"
    tokenizer_config = read_json(template_source, required=False) or {}
    template_file = folder / "chat_template.jinja"
    processor_file = folder / "chat_template.json"  # a processor's (Gemma 3's 4B-27B)
    if template_file.is_file():
        tokenizer_config["chat_template"] = _read_template(template_file)
        template_source = template_file
    elif not tokenizer_config.get("chat_template") and processor_file.is_file():
        tokenizer_config["chat_template"] = (read_json(processor_file) or {}).get("chat_template")
        template_source = processor_file
    tool_source = folder / "additional_chat_templates" / "tool_use.jinja"
    if tool_source.is_file():
        named = tokenizer_config.get("chat_template")
        named = ([t for t in named if not isinstance(t, dict) or t.get("name") != "tool_use"]
                 if isinstance(named, list) else [{"name": "default", "template": named}])
        tokenizer_config["chat_template"] = [
            *named, {"name": "tool_use", "template": _read_template(tool_source)}]
    else:
        tool_source = template_source
    if not (folder / "tokenizer.json").is_file() and (folder / "tokenizer.model").is_file():
        raise ModelLoadError(folder / "tokenizer.json",
                             "file not found; tokenizer.model (SentencePiece) is not read: "
                             "save a tokenizer.json beside it with transformers, "
                             "AutoTokenizer.from_pretrained(folder).save_pretrained(folder)")
    try:
        tokenizer = Tokenizer.from_file(folder / "tokenizer.json", tokenizer_config,
                                        eos_ids=config.eos_token_ids)
    except ChatTemplateError as exc:  # a list of named templates without a default
        raise ModelLoadError(template_source, str(exc)) from None
    if tokenizer.vocab_size > config.vocab_size:  # its last ids would index past the embeddings
        past = range(config.vocab_size, tokenizer.vocab_size)
        which = (", ".join(f"{tokenizer.inner.id_to_token(i)!r} (id {i})" for i in past)
                 if len(past) <= 3 else f"ids {past[0]}-{past[-1]}")
        raise ModelLoadError(folder / "tokenizer.json",
                             f"{tokenizer.vocab_size} tokens, but config.json's vocab_size is "
                             f"{config.vocab_size}: {which} would index past the model's "
                             "embeddings (tokens added without resizing the model, or another "
                             "model's tokenizer)")
    if tokenizer.chat_template:  # a broken template is the folder's fault: say so at load
        tokenizer.template_source = template_source
        for template, source in ((tokenizer.chat_template, template_source),
                                 (tokenizer.tool_template, tool_source)):
            try:
                check_template(template)
            except ChatTemplateError as exc:
                raise ModelLoadError(source, str(exc)) from None
    return tokenizer


def _read_template(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelLoadError(path, f"cannot read the chat template ({exc})") from None
