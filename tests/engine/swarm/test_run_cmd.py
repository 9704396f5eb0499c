"""`swarmscope run --headless` and `swarmscope trace check/export` on the tiny model."""
import argparse
import json
import os
import signal
import subprocess
import sys

import pytest

from engine.cli import run_cmd, trace_cmd
from engine.controls import ADAPTIVE_CAP, Controls
from engine.errors import SwarmscopeError
from engine.loading.hub_cache import cache_dir
from engine.telemetry.records import StepRecord
from engine.telemetry.trace_reader import read_trace
from engine.telemetry.trace_writer import TraceWriter
from tests.recording import wait_for_steps


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


def test_a_headless_run_with_tuned_threads_has_each_counts_curve_first(
        tmp_path, capsys, monkeypatch, restore_threads):
    """--threads auto: the curves of every count it may switch to are had before the session
    starts (measured once, then cached), the first the one per core; the session runs."""
    import torch
    from engine.thread_tuner import default_counts, physical_cores
    monkeypatch.setenv("SWARMSCOPE_CACHE", str(tmp_path / "cache"))
    torch.set_num_threads(physical_cores())
    assert cli(["run", "--headless", "--model", "tiny-test", "--dtype", "fp32", "--agents", "2",
                "--steps", "30", "--clock", "virtual", "--max-context", "256",
                "--threads", "auto", "--trace", str(tmp_path / "run.jsonl"), "--json"]) == 0
    out, err = capsys.readouterr()
    counts = default_counts(physical_cores())
    assert f"CPU threads tuned among {', '.join(map(str, counts))}" in err
    summary = json.loads(out)
    assert summary["steps"] == 30 and sum(summary["cpu_threads_share"].values()) == \
        pytest.approx(1.0)
    assert {int(count) for count in summary["cpu_threads_share"]} <= set(counts)
    cached = sorted((tmp_path / "cache" / "calibration").glob("cpu-*threads_tiny-test-*"))
    assert len(cached) == len(counts)


def test_progress_lines_say_the_threads_in_force_where_tuned(capsys):
    from types import SimpleNamespace

    from engine.telemetry.ring_buffer import RingBuffer
    records = RingBuffer()
    records.append(StepRecord.make_dummy(0, batch=3))
    engine = SimpleNamespace(records=records, now=lambda: 1.0,
                             thread_tuner=SimpleNamespace(current=1))
    run_cmd._progress(engine, 1)
    assert capsys.readouterr().err.rstrip().endswith("  threads=1")
    engine.thread_tuner = None
    run_cmd._progress(engine, 1)
    assert "threads=" not in capsys.readouterr().err


def test_controls_set_at_the_start_and_changed_at_a_session_second(tmp_path, capsys,
                                                                    monkeypatch):
    """The headless run's controls: set from options, then changed at session seconds as the
    window's controls change them, each change a control event in the trace and the summary
    split by the policies the run switched between."""
    monkeypatch.setenv("SWARMSCOPE_CACHE", str(tmp_path / "cache"))
    trace = tmp_path / "run.jsonl"
    assert cli(["run", "--headless", "--model", "tiny-test", "--dtype", "fp32", "--agents", "3",
                "--steps", "20", "--clock", "virtual", "--max-context", "512",
                "--mix", "chat=1", "--spec-ceiling", "2", "--budget", "7",
                "--min-acceptance", "0.2", "--change", "0.000001:policy=off",
                "--trace", str(trace), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    recorded = read_trace(trace)
    assert recorded.session["controls"]["mix"] == {"code-edit": 0.0, "chat": 1.0, "json": 0.0}
    assert {k: recorded.session["controls"][k] for k in
            ("spec_ceiling", "budget_override", "min_acceptance")} == {
        "spec_ceiling": 2, "budget_override": 7, "min_acceptance": 0.2}
    [change] = recorded.controls
    assert change["changes"] == {"policy": "off", "k": 4} and change["t"] >= 0.000001
    before = [s for s in recorded.steps if s.t < change["t"]]
    after = [s for s in recorded.steps if s.t >= change["t"]]
    assert before and after
    assert {s.policy for s in before} == {"goodput"} and {s.policy for s in after} == {"off"}
    assert all(lane.cat == "chat" and s.budget == 7 for s in recorded.steps for lane in s.lanes)
    assert summary["by_policy"]["goodput"]["steps"] == len(before)
    assert summary["by_policy"]["off"]["steps"] == len(after)


def test_a_change_of_policy_brings_back_the_k_that_policy_had():
    timed = run_cmd._timed_changes(Controls(policy="fixed", k=2),
                                   [(9.0, {"policy": "fixed"}), (3.0, {"policy": "goodput"}),
                                    (5.0, {"k": 8}), (5.0, {"swarm_size": 4})])
    assert timed == [(3.0, {"policy": "goodput", "k": ADAPTIVE_CAP}),
                     (5.0, {"k": 8, "swarm_size": 4}), (9.0, {"policy": "fixed", "k": 2})]
    with pytest.raises(SwarmscopeError, match="--change at 5 s: k must be in 0..64"):
        run_cmd._timed_changes(Controls(), [(5.0, {"k": 99})])


def test_a_pause_must_let_the_run_end():
    pause, resume = (1.0, {"paused": True}), (2.0, {"paused": False})
    with pytest.raises(SwarmscopeError, match="on the virtual clock session time stands still"):
        run_cmd._timed_changes(Controls(), [pause, resume], "virtual")
    with pytest.raises(SwarmscopeError, match="paused before it reaches --steps"):
        run_cmd._timed_changes(Controls(), [pause], "wall", ends_by_time=False)
    assert run_cmd._timed_changes(Controls(), [pause, resume], "wall", ends_by_time=False)
    assert run_cmd._timed_changes(Controls(), [pause], "wall", ends_by_time=True)


def test_an_engine_fault_mid_run_keeps_what_ran(tmp_path, capsys, monkeypatch):
    """The summary of the steps before the fault, the trace closed and readable, exit 1."""
    from engine.engine import Engine

    monkeypatch.setenv("SWARMSCOPE_CACHE", str(tmp_path / "cache"))
    step = Engine.step

    def failing(self):
        if self.records.total == 6:
            raise RuntimeError("injected fault")
        return step(self)

    monkeypatch.setattr(Engine, "step", failing)
    trace = tmp_path / "run.jsonl"
    assert cli(["run", "--headless", "--model", "tiny-test", "--dtype", "fp32", "--agents", "2",
                "--steps", "20", "--clock", "virtual", "--trace", str(trace), "--json"]) == 1
    out, err = capsys.readouterr()
    assert "engine error at step 6: RuntimeError: injected fault; summarising what ran" in err
    summary = json.loads(out)
    assert summary["steps"] == 6 and summary["engine_error"] == "RuntimeError: injected fault"
    assert len(read_trace(trace).steps) == 6


def test_a_summary_of_fewer_steps_than_ran_says_so(tmp_path, capsys, monkeypatch):
    """The engine keeps its newest record_capacity records; a longer run's summary covers those."""
    import functools

    import engine.swarm.config as swarm_config

    monkeypatch.setenv("SWARMSCOPE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(swarm_config, "SwarmConfig",
                        functools.partial(swarm_config.SwarmConfig, record_capacity=5))
    trace = tmp_path / "run.jsonl"
    assert cli(["run", "--headless", "--model", "tiny-test", "--dtype", "fp32", "--agents", "2",
                "--steps", "12", "--clock", "virtual", "--trace", str(trace), "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["steps"] == 5
    assert (f"the summary covers the last 5 of 12 steps; `swarmscope trace check {trace}` "
            "summarises them all") in err


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
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"type": "session", "version": 1}\n{"type": "step"\n')
    assert cli(["trace", "check", str(bad)]) == 2
    assert "bad.jsonl:2:" in capsys.readouterr().err


def test_export_refuses_to_write_over_the_trace_it_reads(tmp_path, capsys):
    trace = tmp_path / "t.jsonl.gz"
    with TraceWriter(trace, {"model": "m"}) as writer:
        writer.write_step(StepRecord.make_dummy(0))
    recorded = trace.read_bytes()
    (tmp_path / "link.csv").symlink_to(trace)
    for out in (trace, tmp_path / "link.csv"):
        for target in ("--csv", "--perfetto"):
            assert cli(["trace", "export", str(trace), target, str(out)]) == 2
            assert capsys.readouterr().err == (f"swarmscope trace export: {out}: is the trace being "
                                               "exported; writing there would destroy it (choose "
                                               "another output file)\n")
    assert trace.read_bytes() == recorded


def test_compare_puts_sessions_side_by_side_over_the_first(tmp_path, capsys):
    """The same rows as `trace check`, a column a trace, and each one's tokens/s over the
    first's; too few traces, or one without steps, is a clear error naming it."""
    paths = []
    for name, step_ms in (("first", 50.0), ("second", 100.0)):
        paths.append(str(tmp_path / f"{name}.jsonl"))
        with TraceWriter(paths[-1], {"model": "m"}) as writer:
            for i in range(4):
                step = StepRecord.make_dummy(i, batch=2, seed=1)
                step.t, step.dt_ms = i * step_ms / 1000, step_ms
                writer.write_step(step)
    assert cli(["trace", "compare", *paths]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == paths
    assert lines[lines.index(next(l for l in lines if l.startswith("tokens/s"))) + 1].split() == [
        "x", "the", "first", "1.00", "(inside", "steps:", "1.00)",
        "0.50", "(inside", "steps:", "0.50)"]
    assert not any(line.startswith("tokens per agent") for line in lines)
    assert cli(["trace", "compare", paths[0]]) == 2
    assert "give two traces or more to compare" in capsys.readouterr().err
    with TraceWriter(tmp_path / "empty.jsonl", {"model": "m"}):
        pass
    assert cli(["trace", "compare", paths[0], str(tmp_path / "empty.jsonl")]) == 2
    assert f"{tmp_path / 'empty.jsonl'}: has no steps to compare" in capsys.readouterr().err


@pytest.mark.parametrize("option, says", [
    (["--agents", "0"], "--agents must be >= 1, got 0"),
    (["--batch-ceiling", "0"], "--batch-ceiling must be >= 1, got 0"),
    (["--spec-ceiling", "-1"], "--spec-ceiling must be >= 0, got -1"),
    (["--budget", "0"], "--budget must be >= 1, got 0"),
    (["--steps", "0"], "--steps must be >= 1, got 0"),
    (["--max-context", "0"], "--max-context must be >= 2, got 0"),
    (["--max-context", "1"], "--max-context must be >= 2, got 1"),
    (["--temperature", "-1"], "--temperature must be a finite number >= 0, got -1"),
    (["--tool-latency", "inf"], "--tool-latency must be a finite number >= 0, got inf"),
    (["--duration", "-5"], "--duration must be a finite number > 0, got -5"),
    (["--duration", "nan"], "--duration must be a finite number > 0, got nan"),
    (["--duration", "inf"], "--duration must be a finite number > 0, got inf"),
    (["--min-acceptance", "2"], "--min-acceptance must be in [0, 1], got 2"),
    (["--k", "99"], "--k: k must be in 0..64, got 99"),
    (["--drafter", "nonsense"], "--drafter nonsense: no such folder; a drafter is lookup, self, "
                                "default, tiny-test, a draft model folder or a repo id "
                                "downloaded to {hub}"),
])
def test_a_bad_option_is_one_line_that_names_it(capsys, option, says):
    """Before the model loads, named as typed: the configs' own errors name their fields."""
    assert cli(["run", "--headless", "--model", "/no/such/model", *option]) == 2
    says = says.replace("{hub}", str(cache_dir()))  # the Hugging Face cache, where a drafter may be
    assert capsys.readouterr().err == f"swarmscope run: {says}\n"


def test_mix_weights_are_checked_as_the_option_is_read(capsys):
    with pytest.raises(SystemExit):
        cli(["run", "--headless", "--model", "tiny-test", "--mix", "chat=0"])
    assert "argument --mix: mix must weigh" in capsys.readouterr().err


def test_a_draft_model_folder_is_read_before_the_session_starts(tmp_path, capsys):
    """At the start and in every --change, not at the first step that drafts with it."""
    (tmp_path / "empty").mkdir()
    assert cli(["run", "--headless", "--model", "tiny-test", "--steps", "1",
                "--drafter", str(tmp_path / "empty")]) == 2
    assert capsys.readouterr().err.startswith(f"swarmscope run: --drafter {tmp_path}/empty: "
                                              f"{tmp_path}/empty/config.json: ")
    with pytest.raises(SwarmscopeError, match="--change at 2 s: drafter /nope: no such folder"):
        run_cmd._timed_changes(Controls(), [(1.0, {"drafter": "self"}),
                                            (2.0, {"drafter": "/nope"})])


def test_max_context_must_fit_the_model_and_defaults_to_what_it_holds(tmp_path, capsys,
                                                                        monkeypatch):
    import dataclasses

    import engine.loading
    from engine.model import LlamaModel

    monkeypatch.setenv("SWARMSCOPE_CACHE", str(tmp_path / "cache"))
    loaded = engine.loading.load_model("tiny-test", dtype="fp32", device="cpu")
    config = loaded.config.with_(max_position=1024)  # fewer than the default 3072
    short = dataclasses.replace(loaded, config=config, model=LlamaModel.random(config))
    monkeypatch.setattr(engine.loading, "load_model", lambda *args, **kwargs: short)
    run = ["run", "--headless", "--model", "tiny-test", "--steps", "2", "--clock", "virtual"]
    assert cli(run + ["--max-context", "1025"]) == 2
    assert capsys.readouterr().err.endswith(
        "swarmscope run: --max-context must be at most 1024, the positions tiny-test has, "
        "got 1025\n")
    assert cli(run) == 0


def test_sigterm_summarises_what_ran_and_finishes_the_trace(tmp_path):
    trace = tmp_path / "run.jsonl.gz"
    proc = subprocess.Popen(
        [sys.executable, "-m", "engine.cli.main", "run", "--headless", "--model", "tiny-test",
         "--dtype", "fp32", "--duration", "120", "--trace", str(trace), "--json"],
        env={**os.environ, "SWARMSCOPE_CACHE": str(tmp_path)}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for_steps(trace)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0 and "interrupted; summarising what ran" in err
    assert json.loads(out)["steps"] == len(read_trace(trace).steps) > 0  # gzip stream complete
