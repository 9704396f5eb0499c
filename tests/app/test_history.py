import numpy as np
import pytest

from app.acceptance import AcceptanceStats
from app.agent_rows import AgentTally
from app.history import History
from engine.telemetry.records import LaneRecord, StepRecord


def _rec(step, lanes, t=None, dt_ms=10.0, prefill=0):
    return StepRecord(step=step, t=step * 0.01 if t is None else t, dt_ms=dt_ms, batch=len(lanes),
                      prefill=prefill, budget=8, policy="fixed", ragged="packed",
                      lanes=[LaneRecord(i, "chat", k, acc, 0, 10) for i, (k, acc) in enumerate(lanes)])


def test_columns_grow_past_capacity_and_match_records():
    history = History(capacity=2)
    records = [StepRecord.make_dummy(i, batch=1 + i % 5) for i in range(50)]
    history.extend(records[:3])
    history.extend(records[3:])
    assert len(history) == 50
    np.testing.assert_array_equal(history.column("batch"), [r.batch for r in records])
    np.testing.assert_array_equal(history.column("emitted", 10, 20), [r.emitted for r in records[10:20]])


def test_a_live_history_keeps_every_steps_numbers_and_its_newest_records():
    history = History(keep=100)
    records = [StepRecord.make_dummy(i, batch=1 + i % 5) for i in range(1000)]
    for lo in range(0, 1000, 7):  # as a window polls: a few records at a time
        history.extend(records[lo:lo + 7])
    assert len(history) == 1000 and history.index_at(records[-1].t) == 1000
    np.testing.assert_array_equal(history.column("batch"), [r.batch for r in records])
    assert history.stats(0, 1000).tokens == sum(r.emitted for r in records)  # all steps
    assert history.record(999) is records[999] and history.record(-1) is records[999]
    assert history.record(0) is None  # dropped, in chunks: between 100 and 200 are kept
    kept = history.records()
    assert 100 <= len(kept) < 200 and kept == records[-len(kept):]
    assert history.records(990) == records[990:] and history.records(0, 10) == []
    everything = History()
    everything.extend(records)
    assert everything.records() == records  # a replay keeps them all


def test_a_live_history_keeps_its_newest_events_and_the_agent_rows_read_them():
    history = History(keep=100)
    events = [{"type": "text", "t": i / 10, "agent": i % 3, "segments": [[f"{i},", "committed"]]}
              for i in range(1000)]
    for lo in range(0, 1000, 7):
        history.add_events(events[lo:lo + 7])
    assert history.event_count == 1000
    kept, first = history.events_from(0)
    assert 100 <= len(kept) < 200 and kept == events[first:] and first == 1000 - len(kept)
    assert history.events_from(990) == (events[990:], 990)
    rows = AgentTally().rows(history, 0)  # no steps: every event kept, the older ones gone
    assert [r.id for r in rows] == [0, 1, 2]
    assert rows[1].transcript[-1] == ("997,", "committed")
    assert ("1,", "committed") not in rows[1].transcript
    everything = History()
    everything.add_events(events)
    assert everything.events_from(0) == (events, 0)  # a replay keeps them all


def test_stats_follow_the_design_definitions():
    history = History()
    history.extend([_rec(0, [(2, 1), (0, 0)]), _rec(1, [(4, 4)])])
    stats = history.stats(0, 2)
    assert stats.tokens == (2 + 1) + (1 + 4)
    assert stats.acceptance_rate == pytest.approx(5 / 6)
    assert stats.mean_acceptance_length == pytest.approx(1 + 5 / 2)  # two lanes drafted
    assert stats.max_batch == 2 and stats.seconds == pytest.approx(0.02)
    assert history.stats(5, 9).steps == 0


def test_tokens_per_s_over_a_window():
    history = History()
    history.extend([_rec(i, [(0, 0)] * 4, t=i * 0.1, dt_ms=100.0) for i in range(20)])
    rate = history.tokens_per_s(window=5)
    assert rate[-1] == pytest.approx(4 / 0.1)
    assert len(history.tokens_per_s(10, 20)) == 10


def test_index_at_counts_started_steps():
    history = History()
    history.extend([_rec(i, [(0, 0)], t=float(i)) for i in range(5)])
    assert history.index_at(2.5) == 3 and history.index_at(-1) == 0


def test_acceptance_by_position_counts_prefixes():
    stats = AcceptanceStats.from_records([_rec(0, [(3, 1), (1, 1)]), _rec(1, [(2, 0)])])
    # position 1 proposed 3x, accepted 2x; position 2 proposed 2x, accepted 0; position 3: 1, 0
    np.testing.assert_allclose(stats.by_position, [2 / 3, 0.0, 0.0])
    assert stats.mean_acceptance_length == pytest.approx(1 + 2 / 3)
    assert stats.by_category == {"chat": pytest.approx(2 / 6)}
    assert AcceptanceStats.from_records([_rec(0, [(0, 0)])]).mean_acceptance_length is None


def test_agent_rows_rebuilt_from_trace_events():
    history = History()
    history.extend([_rec(0, [(2, 2), (1, 0)], t=0.0), _rec(1, [(2, 1)], t=1.0)])
    history.add_events([{"type": "agent", "t": 0.5, "agent": 1, "event": "tool"},
                        {"type": "text", "t": 0.5, "agent": 1, "segments": [["ab", "committed"]]},
                        {"type": "text", "t": 1.5, "agent": 1, "segments": [["c", "tool"]]},
                        {"type": "agent", "t": 2.0, "agent": 0, "event": "done"}])
    # After step 0: what was recorded before step 1 began (t < 1.0).
    rows = AgentTally().rows(history, 1)
    assert [(r.id, r.state, r.tokens) for r in rows] == [(0, "waiting", 3), (1, "tool", 1)]
    assert rows[1].transcript == [("ab", "committed")] and rows[0].transcript == []
    # At the end: everything, also what was recorded after the last step began.
    rows = AgentTally().rows(history, 2)
    assert [(r.id, r.state, r.tokens) for r in rows] == [(0, "done", 3 + 2), (1, "tool", 1)]
    assert rows[0].acceptance == pytest.approx(3 / 4)
    assert rows[1].transcript == [("ab", "committed"), ("c", "tool")]
    assert rows[1].first_segment == 0


def test_replayed_segments_are_numbered_once_the_oldest_scrolled_away(monkeypatch):
    """The transcript pane appends what a transcript grew by, placed by the segments' numbers."""
    import app.agent_rows
    monkeypatch.setattr(app.agent_rows, "MAX_SEGMENTS", 2)
    history = History()
    history.extend([_rec(0, [(1, 0)], t=0.0)])
    history.add_events([{"type": "text", "t": 0.1 * i, "agent": 1,
                         "segments": [[str(i), "committed"], [str(i), "tool"]]} for i in range(3)])
    rows = AgentTally().rows(history, 1)
    assert rows[1].transcript == [("2", "committed"), ("2", "tool")]
    assert rows[1].first_segment == 4
