"""The controls panel: each policy keeps its own K."""
from app.controls_panel import ControlsPanel
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
