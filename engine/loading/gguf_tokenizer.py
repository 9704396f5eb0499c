"""A GGUF's tokenizer rebuilt as a `tokenizers.Tokenizer` (what tokenizer.json holds).

A GGUF keeps the vocabulary, its merges (or, for SentencePiece, each token's score) and llama.cpp's
name for the way text is split before BPE (`tokenizer.ggml.pre`); the rest is put back here as
transformers' GGUF reader does: byte-level BPE (GPT-2's alphabet: SmolLM, Qwen, Llama 3, Mistral's
Tekken) split by the named regex, or SentencePiece BPE (Llama 2, Mistral 7B) with byte fallback
and merges recovered from the scores. A split this file does not know is refused rather than
guessed: a wrong one encodes every prompt differently from the model's training."""
from __future__ import annotations

from pathlib import Path

from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers,
                        pre_tokenizers, processors)

from engine.errors import ModelLoadError

CONTROL, USER_DEFINED = 3, 4  # llama.cpp's token types: special tokens, and added plain ones

# llama.cpp's pre-tokenizers' regexes (llama-vocab.cpp), as the models' tokenizer.json spell them
_LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
           r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
          r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# Qwen3.5's: a letter run takes the combining marks in it, and punctuation leaves them out
_QWEN35 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
           r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_TEKKEN = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
           r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
           r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
SPLITS = {"llama-bpe": _LLAMA3, "llama3": _LLAMA3, "llama-v3": _LLAMA3, "smaug-bpe": _LLAMA3,
          "dbrx": _LLAMA3, "falcon3": _LLAMA3, "pixtral": _LLAMA3, "glm4": _LLAMA3,
          "chatglm-bpe": _LLAMA3, "lfm2": _LLAMA3, "qwen2": _QWEN2, "deepseek-r1-qwen": _QWEN2,
          "qwen35": _QWEN35, "tekken": _TEKKEN}
# GPT-2's own regex (ByteLevel's), and the same after every digit is made a word of its own
GPT2_SPLITS = ("gpt2", "gpt-2", "default", "olmo", "mpt", "jais", "trillion", "exaone4")
DIGIT_SPLITS = ("smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva")
# Qwen's tokenizer.json composes characters first
NFC_SPLITS = ("qwen2", "deepseek-r1-qwen", "qwen35")


def gguf_tokenizer(path: Path, get) -> tuple[Tokenizer, bool]:
    """The tokenizer of the GGUF at `path` whose metadata `get(key, default)` reads, and
    whether text encoded plain starts with BOS (`tokenizer.ggml.add_bos_token`; SentencePiece
    vocabularies that do not say add it, as llama.cpp does)."""
    kind = get("tokenizer.ggml.model")
    tokens = list(get("tokenizer.ggml.tokens"))
    types = list(get("tokenizer.ggml.token_type", [1] * len(tokens)))
    if kind == "gpt2":
        tok, bos_default = _byte_level(path, get, tokens), False
    elif kind == "llama":
        tok, bos_default = _sentencepiece(get, tokens), True
    else:
        raise ModelLoadError(path, f"GGUF tokenizer {kind!r} is not supported (gpt2-style "
                                   "byte-level BPE, or llama-style SentencePiece)")
    # Added tokens are kept as written (DeepSeek's <｜begin▁of▁sentence｜> is no byte-level
    # spelling), and so are in the vocabulary as they are: each is matched whole, as its own id
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t, kind_ in zip(tokens, types) if kind_ == CONTROL])
    tok.add_tokens([AddedToken(t, special=False, normalized=False)
                    for t, kind_ in zip(tokens, types) if kind_ == USER_DEFINED])
    add_bos = bool(get("tokenizer.ggml.add_bos_token", bos_default))
    if add_bos:
        bos_id = int(get("tokenizer.ggml.bos_token_id"))
        bos = tokens[bos_id]
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos}:0 $A:0", pair=f"{bos}:0 $A:0 {bos}:1 $B:1",
            special_tokens=[(bos, bos_id)])
    return tok, add_bos


def _byte_level(path: Path, get, tokens: list[str]) -> Tokenizer:
    merges = [tuple(m.split(" ", 1)) for m in get("tokenizer.ggml.merges")]
    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges,
                               fuse_unk=False, byte_fallback=False))
    pre = get("tokenizer.ggml.pre", "default")
    if pre in DIGIT_SPLITS:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)])
    elif pre in GPT2_SPLITS:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    elif pre in SPLITS:
        if pre in NFC_SPLITS:
            tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(SPLITS[pre]), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    else:
        raise ModelLoadError(path, f"GGUF pre-tokenizer {pre!r} is not supported (known: "
                                   f"{', '.join([*DIGIT_SPLITS, *GPT2_SPLITS, *SPLITS])})")
    tok.decoder = decoders.ByteLevel()
    return tok


def _sentencepiece(get, tokens: list[str]) -> Tokenizer:
    """SentencePiece BPE as transformers' Llama tokenizer is: "▁" for a space (and before the
    text, unless the file says not), characters outside the vocabulary as their bytes'
    <0xNN> tokens, merges best-scored first."""
    scores = list(get("tokenizer.ggml.scores"))
    vocab = {t: i for i, t in enumerate(tokens)}
    unk = tokens[int(get("tokenizer.ggml.unknown_token_id", 0))]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=_merges(tokens, scores, vocab), unk_token=unk,
                               fuse_unk=True, byte_fallback=True))
    prepend = "first" if get("tokenizer.ggml.add_space_prefix", True) else "never"
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme=prepend,
                                                 split=False)
    tok.decoder = decoders.Sequence([
        decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
        *([decoders.Strip(" ", 1, 0)] if prepend == "first" else [])])
    return tok


def _merges(tokens: list[str], scores: list[float], vocab: dict[str, int]) -> list[tuple]:
    """Every split of a token into two tokens, the splits of better-scored tokens first (a
    SentencePiece score is its token's log-probability: the likelier merge first)."""
    found = []
    for token, score in zip(tokens, scores):
        pairs = sorted(((token[:i], token[i:]) for i in range(1, len(token))
                        if token[:i] in vocab and token[i:] in vocab),
                       key=lambda pair: (vocab[pair[0]], vocab[pair[1]]))
        found += [(score, len(left), len(right), left, right) for left, right in pairs]
    found.sort(key=lambda merge: merge[:3], reverse=True)
    return [(left, right) for _, _, _, left, right in found]
