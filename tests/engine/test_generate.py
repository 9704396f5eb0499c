"""`swarmscope generate` on the tiny model: JSON results, speculation counts, clean errors."""
import dataclasses
import json

import pytest

from engine.cli.main import main
from engine.controls import Controls
from engine.errors import SwarmscopeError
from engine.generate import generate
from engine.loading import load_model
from engine.model import LlamaModel
from engine.sampling import SamplingParams
from engine.spec.calibration import Calibration


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SWARMSCOPE_CACHE", str(tmp_path / "cache"))


def _generate(capsys, *extra):
    rc = main(["generate", "--model", "tiny-test", "--dtype", "fp32", "--no-chat",
               "--max-tokens", "12", "--json", *extra])
    out = capsys.readouterr()
    return rc, [json.loads(line) for line in out.out.splitlines()], out.err


def test_prompts_file_runs_as_one_batch_in_input_order(tmp_path, capsys):
    path = tmp_path / "p.jsonl"
    # (a BOM, as some editors save, is not part of the first line)
    path.write_text('\ufeff"abc abc abc abc"\n\n{"prompt": "hello hello hello"}\n')
    rc, rows, _ = _generate(capsys, "--prompts", str(path), "--spec", "off")
    assert rc == 0 and len(rows) == 2
    _, alone, _ = _generate(capsys, "--prompt", "hello hello hello", "--spec", "off")
    assert rows[1]["token_ids"] == alone[0]["token_ids"]
    assert rows[0]["drafted"] == rows[0]["accepted"] == 0


def test_prompts_given_as_arguments_come_first_in_their_order(capsys):
    """`swarmscope generate "a prompt"`, as one would type it, beside --prompt."""
    rc, rows, _ = _generate(capsys, "--prompt", "hello hello hello", "xyz xyz xyz", "abc abc",
                            "--spec", "off")
    assert rc == 0 and len(rows) == 3
    _, alone, _ = _generate(capsys, "--prompt", "abc abc", "--spec", "off")
    assert rows[1]["token_ids"] == alone[0]["token_ids"] != rows[2]["token_ids"]


@pytest.mark.parametrize("drafter", ["lookup", "self"])
def test_speculation_reports_drafts_and_keeps_the_output(capsys, drafter):
    _, plain, _ = _generate(capsys, "--prompt", "xyz xyz xyz xyz", "--spec", "off")
    rc, spec, _ = _generate(capsys, "--prompt", "xyz xyz xyz xyz", "--spec", "fixed", "--k", "4",
                            "--drafter", drafter, "--ragged", "padded")
    assert rc == 0 and spec[0]["token_ids"] == plain[0]["token_ids"]
    assert spec[0]["drafted"] > 0 and 0 <= spec[0]["accepted"] <= spec[0]["drafted"]


def test_penalties_reach_the_answer(capsys):
    """(Speculation keeps a penalized answer: test_step.py.)"""
    _, plain, _ = _generate(capsys, "--prompt", "xyz xyz xyz xyz", "--spec", "off")
    rc, penalized, _ = _generate(capsys, "--prompt", "xyz xyz xyz xyz", "--spec", "off",
                                 "--presence-penalty", "0.5", "--frequency-penalty", "0.5",
                                 "--repetition-penalty", "1.4")
    assert rc == 0 and penalized[0]["token_ids"] != plain[0]["token_ids"]


def test_answers_keep_to_a_response_format_file_or_any_json_object(tmp_path, capsys):
    schema = tmp_path / "flag.json"
    schema.write_text(json.dumps({"type": "object", "properties": {"on": {"type": "boolean"}},
                                  "required": ["on"], "additionalProperties": False,
                                  "x-guidance": {"whitespace_pattern": ""}}))
    rc, rows, _ = _generate(capsys, "--prompt", "a", "--prompt", "b", "--spec", "fixed",
                            "--response-format", str(schema))
    assert rc == 0 and all(json.loads(row["text"]) in ({"on": True}, {"on": False})
                           for row in rows)
    rc, rows, _ = _generate(capsys, "--prompt", "a", "--response-format", "json")
    assert rc == 0 and rows[0]["text"].startswith("{")  # an object opens, and runs to 12 tokens
    schema.write_text('{"type": "sentence"}')
    rc, _, err = _generate(capsys, "--prompt", "a", "--response-format", str(schema))
    assert rc == 2 and f"--response-format: {schema}: the schema cannot be kept to" in err
    rc, _, err = _generate(capsys, "--prompt", "a", "--response-format", "/no/such.json")
    assert rc == 2 and "--response-format: /no/such.json: cannot read a JSON Schema" in err


def test_bad_prompts_file_names_its_line(tmp_path, capsys):
    path = tmp_path / "bad.jsonl"
    path.write_text('"fine"\n{"text": 1}\n')
    rc, _, err = _generate(capsys, "--prompts", str(path))
    assert rc == 2 and f"{path}:2:" in err and "Traceback" not in err


@pytest.mark.parametrize("option, value, says", [
    ("--k", "99", "--k: k must be in 0..64, got 99"),
    ("--temperature", "-1", "--temperature, --top-k, --top-p, --*-penalty: bad sampling params: "
                            "temperature must be >= 0"),
    ("--presence-penalty", "3", "--temperature, --top-k, --top-p, --*-penalty: bad sampling "
                                "params: presence_penalty must be in [-2, 2]")])
def test_a_bad_option_names_its_flag(capsys, option, value, says):
    rc, _, err = _generate(capsys, "--prompt", "hi", option, value)
    assert rc == 2 and err.startswith(f"swarmscope generate: {says}")


def test_bad_model_exits_2_with_a_message(tmp_path, capsys):
    rc = main(["generate", "--model", str(tmp_path / "nope"), "--prompt", "hi"])
    err = capsys.readouterr().err
    assert rc == 2 and "nope" in err


def test_a_draft_model_folder_is_read_at_the_start(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    for drafter, says in (("nonsense", "nonsense: no such folder; a drafter is lookup, self, "
                                       "default, tiny-test, a draft model folder or a repo id"),
                          (str(tmp_path / "empty"), f"{tmp_path}/empty/config.json: ")):
        rc, _, err = _generate(capsys, "--prompt", "hi", "--drafter", drafter)
        assert rc == 2 and err.startswith(f"swarmscope generate: --drafter {drafter}")
        assert says in err and len(err.splitlines()) == 1
    # a model by name drafts as the loader reads it (tiny-test drafting for itself)
    rc, rows, _ = _generate(capsys, "--prompt", "hi", "--drafter", "tiny-test", "--spec", "fixed")
    assert rc == 0 and rows[0]["drafted"] > 0


def test_calibrate_prints_the_curve_and_budget(capsys):
    assert main(["calibrate", "--model", "tiny-test", "--dtype", "fp32", "--eps", "0.2"]) == 0
    out = capsys.readouterr().out
    assert "budget T =" in out and "\n  64 " in out and "lanes at context 64)" in out


def test_calibrate_times_lanes_at_the_context_asked_for(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("SWARMSCOPE_CACHE", str(tmp_path))
    assert main(["calibrate", "--model", "tiny-test", "--dtype", "fp32", "--context", "700"]) == 0
    assert "lanes at context 700)" in capsys.readouterr().out
    cached = json.loads(next((tmp_path / "calibration").iterdir()).read_text())
    assert cached["context"] == 700  # what the engine then plans with
    assert main(["calibrate", "--model", "tiny-test", "--context", "5000"]) == 2
    assert "got 5000" in capsys.readouterr().err


def test_an_empty_prompt_is_refused(capsys):
    rc, results, err = _generate(capsys, "--prompt", "")
    assert rc == 2 and not results and "prompt 1 is 0 tokens" in err


def test_a_lane_stops_at_the_models_context():
    loaded = load_model("tiny-test", dtype="fp32", device="cpu")
    config = loaded.config.with_(max_position=24)
    short = dataclasses.replace(loaded, config=config, model=LlamaModel.random(config, seed=0))
    calibration = Calibration.make_dummy()
    [result] = generate(short, ["hello"], Controls(policy="off"), max_new_tokens=100, chat=False,
                        calibration=calibration)
    assert len(result.token_ids) == 24 - len("hello")  # bytes: one token a character
    with pytest.raises(SwarmscopeError, match="prompt 1 is 30 tokens.*holds 24"):
        generate(short, ["x" * 30], Controls(policy="off"), chat=False, calibration=calibration)


def test_plain_prompts_are_encoded_as_plain_text(monkeypatch):
    """--no-chat prompts get what the tokenizer adds to plain text (Llama's BOS), as in
    transformers; here a BOS put before the prompt takes one more position of the context."""
    loaded = load_model("tiny-test", dtype="fp32", device="cpu")
    config = loaded.config.with_(max_position=24)
    short = dataclasses.replace(loaded, config=config, model=LlamaModel.random(config, seed=0))
    encode = short.tokenizer.encode
    monkeypatch.setattr(short.tokenizer, "encode_plain", lambda text: [256, *encode(text)])
    [result] = generate(short, ["hello"], Controls(policy="off"), max_new_tokens=100, chat=False,
                        calibration=Calibration.make_dummy())
    assert len(result.token_ids) == 24 - 1 - len("hello")


def test_speculation_off_needs_no_calibration(monkeypatch):
    """A model folder new to this machine is not calibrated (a minute or more) for a run that
    never drafts; one that drafts is."""
    import engine.spec.calibration as calib
    calibrated = []
    monkeypatch.setattr(calib, "calibrate_or_load",
                        lambda loaded, **kw: calibrated.append(loaded) or Calibration.make_dummy())
    loaded = load_model("tiny-test")
    plain = generate(loaded, ["hello"], Controls(policy="off"), max_new_tokens=8)
    assert calibrated == [] and len(plain[0].token_ids) == 8 and plain[0].drafted == 0
    drafted = generate(loaded, ["hello"], Controls(policy="goodput"), max_new_tokens=8)
    assert calibrated == [loaded] and drafted[0].token_ids == plain[0].token_ids


def test_the_stop_token_that_ends_a_turn_is_in_the_ids_not_the_text(monkeypatch):
    """A sampled turn whose fourth token is made its stop token: the ids keep it, the text is
    the answer before it (a printed <|im_end|> is noise)."""
    loaded = load_model("tiny-test", dtype="fp32", device="cpu")
    sampled = dict(max_new_tokens=8, sampling=SamplingParams(1.0, 0, 1.0, 7), chat=False)
    [free] = generate(loaded, ["hello"], Controls(policy="off"), **sampled)
    stop = free.token_ids[3]
    assert stop not in free.token_ids[:3]
    monkeypatch.setattr(loaded.tokenizer, "eos_ids", (stop,))
    [ended] = generate(loaded, ["hello"], Controls(policy="off"), **sampled)
    assert ended.token_ids == free.token_ids[:4]
    decode = loaded.tokenizer.decode
    assert ended.text == decode(free.token_ids[:3]) != decode(free.token_ids[:4])
