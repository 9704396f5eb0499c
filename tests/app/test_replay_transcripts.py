"""Replay shows the agents' text as recorded: at a scrubbed time only what was written by then,
at the end the whole transcript with accepted drafts highlighted as live."""
import pytest

from app.agent_rows import AgentTally
from engine.controls import Controls
from engine.engine import Engine
from engine.loading import load_model
from engine.spec.calibration import Calibration
from engine.swarm.config import SwarmConfig
from engine.telemetry.trace_reader import read_trace


@pytest.fixture(scope="module")
def trace_path(tmp_path_factory):
    """A real short session of the tiny model, recorded (virtual clock: the same every run)."""
    path = tmp_path_factory.mktemp("replay") / "session.jsonl"
    engine = Engine(load_model("tiny-test", dtype="fp32", device="cpu"),
                    SwarmConfig(seed=3, clock="virtual", max_context=1024),
                    Controls(swarm_size=3, tool_latency_s=0.3, mix={"chat": 1.0, "json": 1.0}),
                    calibration=Calibration.make_dummy(t1_ms=20.0, per_token_ms=1.0, knee=8),
                    trace_path=str(path))
    engine.run(steps=120)
    engine.close()
    return path


def _recorded(trace, agent, before=float("inf")):
    return [tuple(seg) for r in trace.texts if r["agent"] == agent and r["t"] < before
            for seg in r["segments"]]


def test_replay_shows_the_text_recorded_up_to_the_scrubbed_time(window, trace_path):
    trace = read_trace(trace_path)
    assert window.open_trace(str(trace_path))
    history, agents = window.history, window.dashboard.agents
    # Mid-session: after the first turns ended, before the session closed.
    first_output = min(r["t"] for r in trace.texts
                       if any(kind == "committed" for _, kind in r["segments"]))
    mid = history.index_at(first_output) + 5
    window.replay.scrubber.setValue(mid)
    rows = {row.id: row for row in agents._rows}
    for agent in range(3):
        assert rows[agent].transcript == _recorded(trace, agent, history.record(mid).t)
    assert rows[0].transcript != _recorded(trace, 0)  # more text came later
    # The end: each agent's whole recorded transcript, accepted drafts highlighted.
    window.replay.scrubber.setValue(len(history))
    rows = {row.id: row for row in agents._rows}
    for agent in range(3):
        assert rows[agent].transcript == _recorded(trace, agent)
    assert any(kind == "accepted_draft" for _, kind in rows[0].transcript)
    agents.table.selectRow(0)
    pane = agents.transcript.text.toHtml()
    assert "background-color:#e8798f" in pane  # the theme's accepted-draft highlight
    assert "no text recorded" not in pane
    tail = "".join(text for text, _ in rows[0].transcript)[-40:]
    assert tail.strip()[-10:] in agents.transcript.text.toPlainText().replace("\u21b5", "")


def test_the_tally_moving_forward_equals_a_fresh_rebuild(window, trace_path):
    assert window.open_trace(str(trace_path))
    history, tally = window.history, AgentTally()
    for stop in range(1, len(history) + 1, 7):
        moving = [(r.id, r.state, r.tokens, r.transcript) for r in tally.rows(history, stop)]
        fresh = [(r.id, r.state, r.tokens, r.transcript) for r in AgentTally().rows(history, stop)]
        assert moving == fresh
