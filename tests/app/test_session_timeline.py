"""A replay shows what was in force at each step of the session: its controls and its t(N) curve."""
import dataclasses

from app.replay import SessionTimeline
from engine.controls import Controls
from engine.spec.calibration import Calibration


def test_a_replay_shows_the_controls_in_force_at_each_step():
    """Changes apply at step boundaries and are logged at the step they first apply to; one the
    engine refused changes nothing, and neither does one a reader let through but Controls
    refuses."""
    events = [{"type": "control", "t": 2.0, "changes": {"policy": "off", "k": 4}},
              {"type": "control", "t": 1.0, "changes": {"batch_ceiling": 4}},
              {"type": "control", "t": 3.0, "changes": {}, "rejected": {"k": 99}},
              {"type": "control", "t": 4.0, "changes": {"k": 99}}]
    timeline = SessionTimeline(Controls(), None, events)
    assert timeline.controls_at(0.5) == Controls()
    assert timeline.controls_at(1.0) == Controls(batch_ceiling=4)
    assert timeline.controls_at(2.5) == Controls(batch_ceiling=4, policy="off", k=4)
    assert timeline.controls_at(9.0) == timeline.controls_at(2.5)


def test_a_replay_plans_each_step_with_the_curve_in_force_then():
    """A recalibration or a switch of CPU threads puts a new curve in force from the step that
    starts when it is logged; one that does not read leaves the one before, and says so."""
    first = Calibration.make_dummy(knee=12)
    one_thread = dataclasses.replace(Calibration.make_dummy(knee=6), device="cpu", threads=1)
    broken = dict(first.to_dict(), points=[[1, -3.0]])
    events = [{"type": "control", "t": 5.0, "changes": {"calibration": one_thread.to_dict()}},
              {"type": "control", "t": 2.0, "changes": {"policy": "off"}},
              {"type": "control", "t": 8.0, "changes": {"calibration": broken}}]
    timeline = SessionTimeline(Controls(), first, events)
    assert timeline.calibration_at(4.9) is first
    assert timeline.calibration_at(5.0) == one_thread != first
    assert timeline.calibration_at(99.0) == one_thread
    assert timeline.unreadable_curves == 1
    assert timeline.controls_at(99.0) == Controls().updated({"policy": "off"})  # not a curve


def test_a_replay_knows_when_the_engine_tuned_its_cpu_threads():
    """Tuning is logged with each curve the engine puts in force on a CPU; a count asked for
    ends it. Traces from before it was logged (no flag) read as not tuned."""
    two = dataclasses.replace(Calibration.make_dummy(knee=8), device="cpu", threads=2)
    one = dataclasses.replace(two, threads=1)
    events = [{"type": "control", "t": 1.0,
               "changes": {"calibration": two.to_dict(), "threads_tuned": True}},
              {"type": "control", "t": 3.0,
               "changes": {"calibration": one.to_dict(), "threads_tuned": True}},
              {"type": "control", "t": 6.0,
               "changes": {"calibration": two.to_dict(), "threads_tuned": False}},
              {"type": "control", "t": 7.0, "changes": {"threads_tuned": "yes"}}]
    timeline = SessionTimeline(Controls(), two, events)
    assert [timeline.threads_tuned_at(t) for t in (0.5, 1.0, 3.5, 6.0, 9.0)] == [
        False, True, True, False, False]
    assert timeline.calibration_at(3.5) == one
    assert timeline.controls_at(9.0) == Controls()  # the flag is not a control
    older = [{"type": "control", "t": 1.0, "changes": {"calibration": one.to_dict()}}]
    assert not SessionTimeline(Controls(), two, older).threads_tuned_at(2.0)
