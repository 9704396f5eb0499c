"""`swarmscope run --headless` and `swarmscope trace check/export` on the tiny model."""
import argparse
import json

from engine.cli import run_cmd, trace_cmd


def cli(argv):
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    run_cmd.register(sub)
    trace_cmd.register(sub)
    args = parser.parse_args(argv)
    return args.func(args)


def test_headless_run_writes_a_trace_and_prints_a_summary(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("SWARMSCOPE_CACHE", str(tmp_path / "cache"))  # calibrates fresh
    trace = tmp_path / "run.jsonl.gz"
    code = cli(["run", "--headless", "--model", "tiny-test", "--dtype", "fp32", "--agents", "3",
                "--steps", "12", "--clock", "virtual", "--max-context", "512", "--seed", "5",
                "--trace", str(trace), "--json"])
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["steps"] == 12 and summary["max_batch"] <= 3
    assert 0 <= summary["telemetry_share"] < 0.2
    assert cli(["trace", "check", str(trace)]) == 0
    assert "12 steps" in capsys.readouterr().out
    assert cli(["trace", "export", str(trace), "--csv", str(tmp_path / "s.csv")]) == 0
    assert len((tmp_path / "s.csv").read_text().splitlines()) == 13
    assert cli(["trace", "export", str(trace), "--perfetto", str(tmp_path / "p.json")]) == 0
    assert json.loads((tmp_path / "p.json").read_text())["traceEvents"]


def test_trace_none_writes_no_trace(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("SWARMSCOPE_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    assert cli(["run", "--headless", "--model", "tiny-test", "--dtype", "fp32", "--agents", "2",
                "--steps", "3", "--clock", "virtual", "--trace", "none"]) == 0
    assert not (tmp_path / "none").exists() and "trace " not in capsys.readouterr().out


def test_errors_are_messages_not_tracebacks(tmp_path, capsys):
    assert cli(["run", "--model", "tiny-test"]) == 2
    assert "--headless" in capsys.readouterr().err
    assert cli(["run", "--headless", "--model", str(tmp_path / "nope"), "--steps", "1"]) == 2
    assert "nope" in capsys.readouterr().err
    for option in (["--steps", "0"], ["--duration", "-5"]):
        assert cli(["run", "--headless", "--model", "tiny-test", *option]) == 2
        assert "--steps must be >= 1 and --duration > 0" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"type": "session", "version": 1}\n{"type": "step"\n')
    assert cli(["trace", "check", str(bad)]) == 2
    assert "bad.jsonl:2:" in capsys.readouterr().err
