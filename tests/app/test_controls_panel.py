"""The controls panel: each policy keeps its own K."""
from app.controls_panel import ControlsPanel
from app.replay import ControlsTimeline
from engine.controls import ADAPTIVE_CAP, FIXED_K, Controls


def test_switching_policy_brings_back_its_k(qtbot):
    panel = ControlsPanel(Controls())
    qtbot.addWidget(panel)
    emitted = []
    panel.changed.connect(emitted.append)
    assert panel.k.value() == ADAPTIVE_CAP                  # goodput's cap
    panel.policy.setCurrentText("fixed")
    assert emitted[-1] == {"policy": "fixed", "k": FIXED_K} and panel.k.value() == FIXED_K
    panel.k.setValue(6)
    assert emitted[-1] == {"k": 6}
    panel.policy.setCurrentText("goodput")
    assert emitted[-1] == {"policy": "goodput", "k": ADAPTIVE_CAP}
    panel.policy.setCurrentText("fixed")
    assert emitted[-1] == {"policy": "fixed", "k": 6}       # the K last used with fixed
    panel.set_controls(Controls(policy="uniform", k=9))     # shown, not emitted
    assert panel.k.value() == 9 and emitted[-1] == {"policy": "fixed", "k": 6}
    panel.policy.setCurrentText("fixed")
    panel.policy.setCurrentText("uniform")
    assert emitted[-1] == {"policy": "uniform", "k": 9}


def test_a_replay_shows_the_controls_in_force_at_each_step():
    """Changes apply at step boundaries and are logged at the step they first apply to; one the
    engine refused changes nothing, and neither does one a reader let through but Controls
    refuses."""
    events = [{"type": "control", "t": 2.0, "changes": {"policy": "off", "k": 4}},
              {"type": "control", "t": 1.0, "changes": {"batch_ceiling": 4}},
              {"type": "control", "t": 3.0, "changes": {}, "rejected": {"k": 99}},
              {"type": "control", "t": 4.0, "changes": {"k": 99}}]
    timeline = ControlsTimeline(Controls(), events)
    assert timeline.at(0.5) == Controls()
    assert timeline.at(1.0) == Controls(batch_ceiling=4)
    assert timeline.at(2.5) == Controls(batch_ceiling=4, policy="off", k=4)
    assert timeline.at(9.0) == timeline.at(2.5)
