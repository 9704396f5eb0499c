import csv
import json

from engine.telemetry.csv_export import COLUMNS, write_csv
from engine.telemetry.perfetto_export import write_perfetto
from engine.telemetry.records import LaneRecord, StepRecord
from engine.telemetry.summary import format_comparison, format_summary, summarize
from engine.telemetry.trace_reader import Trace


def sample_trace():
    steps = [StepRecord.make_dummy(step=i, batch=2, seed=i) for i in range(6)]
    for s in steps:
        s.t, s.dt_ms = s.step * 0.1, 50.0
    agents = [{"type": "agent", "t": 0.0, "agent": 0, "event": "decode"},
              {"type": "agent", "t": 0.0, "agent": 1, "event": "decode"},
              {"type": "agent", "t": 0.3, "agent": 1, "event": "tool"},
              {"type": "agent", "t": 0.45, "agent": 1, "event": "decode"}]
    controls = [{"type": "control", "t": 0.2, "changes": {"k": 2}}]
    return Trace(session={"model": "m", "version": 1}, steps=steps, controls=controls,
                 agents=agents)


def test_perfetto_export_has_agent_tracks_slices_and_counters(tmp_path):
    trace = sample_trace()
    write_perfetto(trace, tmp_path / "p.json")
    data = json.loads((tmp_path / "p.json").read_text())
    events = data["traceEvents"]
    names = {e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    assert names == {"agent 0", "agent 1"}
    turns = [e for e in events if e.get("name") == "decode turn" and e["tid"] == 2]
    tools = [e for e in events if e.get("name") == "tool"]
    assert len(turns) == 2 and len(tools) == 1
    assert tools[0]["ts"] == 300_000 and tools[0]["dur"] == 150_000
    # The first turn of agent 1 holds steps 0..2; its args total their k and accepted.
    first = [l for s in trace.steps[:3] for l in s.lanes if l.agent == 1]
    assert turns[0]["args"] == {"steps": 3, "k": sum(l.k for l in first),
                                "accepted": sum(l.acc for l in first)}
    steps = [e for e in events if e.get("name") == "step"]
    assert len(steps) == 12 and {"k", "accepted", "ctx"} <= set(steps[0]["args"])
    counters = {e["name"] for e in events if e["ph"] == "C"}
    assert {"batch", "budget used", "tokens/s"} <= counters
    assert any(e["ph"] == "i" and e["args"] == {"k": 2} for e in events)


def test_csv_export_one_row_per_step_with_derived_columns(tmp_path):
    trace = sample_trace()
    write_csv(trace.steps, tmp_path / "s.csv")
    rows = list(csv.DictReader(open(tmp_path / "s.csv")))
    assert list(rows[0]) == list(COLUMNS) and len(rows) == 6
    for row, s in zip(rows, trace.steps):
        assert int(row["emitted"]) == s.emitted and int(row["pass_tokens"]) == s.pass_tokens
        assert len(json.loads(row["lanes"])) == s.batch


def test_summary_aggregates_records():
    steps = sample_trace().steps
    summary = summarize(steps)
    assert summary.emitted == sum(s.emitted for s in steps)
    assert summary.max_batch == summary.min_batch == 2 and summary.steps == 6
    assert abs(summary.span_s - 0.55) < 1e-9
    assert sum(summary.tokens_by_agent.values()) == summary.emitted
    drafted = sum(s.drafted for s in steps)
    assert summary.acceptance == (sum(s.accepted for s in steps) / drafted if drafted else None)
    table = format_summary(summary)
    assert "tokens/s" in table and "acceptance" in table and "tokens per agent" in table
    assert "under " not in table  # one policy: no breakdown


def test_summary_splits_a_session_by_the_policies_it_switched_between():
    lanes = [LaneRecord(0, "chat", 2, 1, 0, 10), LaneRecord(1, "chat", 2, 0, 0, 10)]
    steps = [StepRecord(0, 0.0, 10.0, 2, 0, 8, "goodput", "packed", lanes, ""),
             StepRecord(1, 0.1, 30.0, 2, 0, 8, "goodput", "packed", lanes, ""),
             StepRecord(2, 0.2, 20.0, 1, 0, 8, "off", "packed",
                        [LaneRecord(0, "chat", 0, 0, 0, 12)], "")]
    summary = summarize(steps)
    assert list(summary.by_policy) == ["goodput", "off"]
    goodput, off = summary.by_policy["goodput"], summary.by_policy["off"]
    assert goodput.steps == 2 and goodput.busy_tokens_per_s == 6 / 0.040  # 2 steps of 2 + 1
    assert goodput.acceptance == 2 / 8 and goodput.mean_batch == 2
    assert off.steps == 1 and off.busy_tokens_per_s == 1 / 0.020 and off.acceptance is None
    table = format_summary(summary)
    assert "under goodput  " in table and "2 steps, 150.0 tok/s" in table
    assert "under off" in table and "acceptance -" in table


def test_a_comparison_marks_what_one_session_lacks():
    """A workload only one session drafted for reads "-" in the other's column."""
    def session(cat):
        return summarize([StepRecord(0, 0.0, 10.0, 1, 0, 8, "fixed", "packed",
                                     [LaneRecord(0, cat, 2, 1, 0, 10)], "")])
    table = format_comparison([("a", session("chat")), ("b", session("json"))]).splitlines()
    assert [line.split() for line in table if "acceptance chat" in line] == [
        ["acceptance", "chat", "50.0%", "-"]]
    assert [line.split() for line in table if "acceptance json" in line] == [
        ["acceptance", "json", "-", "50.0%"]]
