"""The tokenizer's endpoints as vLLM spells them, through which evaluation harnesses tokenize as
the server does, with no copy of the tokenizer of their own (lm-evaluation-harness's remote
tokenizer): POST /tokenize, POST /detokenize, GET /tokenizer_info."""
from __future__ import annotations

from engine.serve.request import RequestError, tokenized


def tokenize(body, tokenizer, max_context: int) -> dict:
    ids = tokenized(body, tokenizer)
    return {"count": len(ids), "max_model_len": max_context, "tokens": ids}


def detokenize(body, tokenizer) -> dict:
    tokens = body.get("tokens") if isinstance(body, dict) else None
    if not isinstance(tokens, list) or not all(
            isinstance(t, int) and not isinstance(t, bool) and 0 <= t < tokenizer.vocab_size
            for t in tokens):
        raise RequestError(f"tokens: must be a list of this model's token ids, 0 to "
                           f"{tokenizer.vocab_size - 1}")
    return {"prompt": tokenizer.decode(tokens)}


def tokenizer_info(tokenizer, max_context: int) -> dict:
    """What a client tokenizing for itself needs: the special tokens' text, the chat template
    (none where the built-in ChatML renders conversations), the most tokens a lane holds."""
    return {"bos_token": tokenizer.bos_token, "eos_token": tokenizer.eos_token,
            "chat_template": tokenizer.template_for(tools=False),
            "model_max_length": max_context, "vocab_size": tokenizer.vocab_size}
