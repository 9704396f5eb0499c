"""Fill in the middle: a text completion's `suffix` (OpenAI's legacy completions, as code
editors send it). The prompt is the text before a hole and the text after it, written in the
code model's own tokens for them, so that the answer is what goes in the hole."""
from __future__ import annotations

PREFIX, SUFFIX = object(), object()  # where the prompt's two texts go
# Each family's tokens, in the order its models were trained to read them
LAYOUTS = (
    # Qwen2.5-Coder, Qwen3-Coder, CodeGemma
    ("<|fim_prefix|>", PREFIX, "<|fim_suffix|>", SUFFIX, "<|fim_middle|>"),
    # StarCoder, StarCoder2 and the SmolLMs, whose vocabularies came from them
    ("<fim_prefix>", PREFIX, "<fim_suffix>", SUFFIX, "<fim_middle>"),
    # DeepSeek-Coder
    ("<｜fim▁begin｜>", PREFIX, "<｜fim▁hole｜>", SUFFIX, "<｜fim▁end｜>"),
    # Codestral: the text after the hole first
    ("[SUFFIX]", SUFFIX, "[PREFIX]", PREFIX),
)


class NoInfill(ValueError):
    """The model's vocabulary has none of the layouts' tokens."""


def infill_prompt(tokenizer, prefix: str, suffix: str) -> str:
    """The prompt for what goes between `prefix` and `suffix`, in the first layout whose tokens
    the tokenizer has; NoInfill where it has none."""
    for layout in LAYOUTS:
        if all(tokenizer.has_token(part) for part in layout if isinstance(part, str)):
            return "".join(prefix if part is PREFIX else suffix if part is SUFFIX else part
                           for part in layout)
    known = ", ".join(next(p for p in layout if isinstance(p, str)) for layout in LAYOUTS)
    raise NoInfill(f"this model's vocabulary has no fill-in-the-middle tokens ({known}, ...): "
                   "it was not trained to fill a hole")
