"""Every live control of DESIGN §3. Each change is emitted as a dict of Controls field names, which
the window posts to the engine's mailbox (applied at the next step, logged in the trace). Beside
them, what re-plans with another t(N) curve (logged as the new curve): re-running calibration, and
on a CPU the forward pass's thread count.

K belongs to its policy (fixed's K, the adaptive policies' cap): switching policy brings back the
K last used with it, or its default."""
from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt, Signal
from PySide6.QtWidgets import (QAbstractSpinBox, QComboBox, QDoubleSpinBox, QFormLayout, QHBoxLayout, QLabel,
                               QPushButton, QSlider, QSpinBox, QVBoxLayout, QWidget)

from engine.controls import CATEGORIES, DEFAULT_K, Controls
from engine.telemetry.records import LAYOUTS, POLICIES
from engine.thread_tuner import AUTO, usable_cores

DRAFTERS = ("lookup", "self")
MAX_LANES = 64


class _ShortcutKeysPass(QObject):
    """A spin box holding the keyboard focus takes every printable key, so the window's one-key
    shortcuts (Space, S, F, C) did nothing after a value was typed: keys no number is written
    with go to the window."""

    def eventFilter(self, watched, event) -> bool:  # noqa: N802 - Qt's name
        if event.type() == QEvent.Type.ShortcutOverride and event.text() and not (
                event.text().isdigit() or event.text() in ".,-+"
                or event.modifiers() & ~Qt.KeyboardModifier.ShiftModifier):
            return True  # not accepted as input: the shortcut fires
        return False


def _slider(lo: int, hi: int) -> tuple[QSlider, QLabel, QHBoxLayout]:
    slider = QSlider(Qt.Orientation.Horizontal)
    slider.setRange(lo, hi)
    value = QLabel()
    value.setMinimumWidth(24)
    slider.valueChanged.connect(lambda v: value.setText(str(v)))
    row = QHBoxLayout()
    row.addWidget(slider, 1)
    row.addWidget(value)
    return slider, value, row


class ControlsPanel(QWidget):
    changed = Signal(dict)       # {control name: new value}
    recalibrate = Signal()
    threads_changed = Signal(object)  # the CPU threads asked for: a count, or AUTO

    def __init__(self, controls: Controls | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.policy = QComboBox()
        self.policy.addItems(POLICIES)
        self.k = QSpinBox()
        self.k.setRange(0, 64)
        self._k_by_policy = dict(DEFAULT_K)
        self._drafting_policy = "goodput"  # what toggle_speculation turns back on
        self.batch_ceiling, batch_value, batch_row = _slider(1, MAX_LANES)
        self.spec_ceiling, spec_value, spec_row = _slider(0, MAX_LANES)
        self._slider_values = ((self.batch_ceiling, batch_value), (self.spec_ceiling, spec_value))
        self.budget_override = QSpinBox()
        self.budget_override.setRange(0, 512)
        self.budget_override.setSpecialValueText("calibrated")
        self.ragged = QComboBox()
        self.ragged.addItems(LAYOUTS)
        self.drafter = QComboBox()
        self.drafter.addItems(DRAFTERS)
        self.min_acceptance = QDoubleSpinBox()
        self.min_acceptance.setRange(0.0, 1.0)
        self.min_acceptance.setSingleStep(0.05)
        self.swarm_size = QSpinBox()
        self.swarm_size.setRange(0, MAX_LANES)  # 0: only API clients' agents
        self.tool_latency = QDoubleSpinBox()
        self.tool_latency.setRange(0.0, 60.0)
        self.tool_latency.setSingleStep(0.25)
        self.tool_latency.setSuffix(" s")
        self.mix = {}
        for cat in CATEGORIES:
            spin = QDoubleSpinBox()
            spin.setRange(0.0, 10.0)
            spin.setSingleStep(0.5)
            self.mix[cat] = spin
        self.pause = QPushButton("Pause")
        self.pause.setCheckable(True)
        self.pause.setToolTip("Pause or resume the engine (Space)")
        self.threads = QComboBox()
        self.threads.addItems([AUTO] + [str(n) for n in range(1, usable_cores() + 1)])
        self.threads.setToolTip(
            "CPU threads of the forward pass. Fewer can be faster while other programs keep "
            f"cores busy; {AUTO} tunes the count as the session runs, as other programs take "
            "or free cores. Each count has its own t(N), measured the first time and then "
            "cached")
        self.recalibrate_button = QPushButton("Re-run calibration")
        self.recalibrate_button.setToolTip(
            "Measure t(N) and T again, with lanes at the swarm's median context: a swarm's long "
            "contexts cost more than the short one a first calibration times")

        form = QFormLayout()
        form.addRow("policy", self.policy)
        form.addRow("K", self.k)
        form.addRow("batch ceiling", batch_row)
        form.addRow("spec. ceiling", spec_row)
        form.addRow("budget T", self.budget_override)
        form.addRow("layout", self.ragged)
        form.addRow("drafter", self.drafter)
        form.addRow("min acceptance", self.min_acceptance)
        form.addRow("swarm size", self.swarm_size)
        form.addRow("tool latency", self.tool_latency)
        for cat, spin in self.mix.items():
            form.addRow(f"mix: {cat}", spin)
        form.addRow("CPU threads", self.threads)
        self._form = form
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.pause)
        layout.addWidget(self.recalibrate_button)
        layout.addStretch(1)

        self._shortcut_keys = _ShortcutKeysPass(self)
        for spin in self.findChildren(QAbstractSpinBox):
            spin.installEventFilter(self._shortcut_keys)

        self.set_controls(controls or Controls())
        self.policy.currentTextChanged.connect(self._on_policy)
        self.k.valueChanged.connect(self._on_k)
        self.batch_ceiling.valueChanged.connect(lambda v: self.changed.emit({"batch_ceiling": v}))
        self.spec_ceiling.valueChanged.connect(lambda v: self.changed.emit({"spec_ceiling": v}))
        self.budget_override.valueChanged.connect(
            lambda v: self.changed.emit({"budget_override": v or None}))
        self.ragged.currentTextChanged.connect(lambda v: self.changed.emit({"ragged": v}))
        self.drafter.currentTextChanged.connect(lambda v: self.changed.emit({"drafter": v}))
        self.min_acceptance.valueChanged.connect(
            lambda v: self.changed.emit({"min_acceptance": round(v, 3)}))
        self.swarm_size.valueChanged.connect(lambda v: self.changed.emit({"swarm_size": v}))
        self.tool_latency.valueChanged.connect(lambda v: self.changed.emit({"tool_latency_s": v}))
        for spin in self.mix.values():
            spin.valueChanged.connect(self._emit_mix)
        self.pause.toggled.connect(self._on_pause)
        self.recalibrate_button.clicked.connect(self.recalibrate)
        self.threads.currentIndexChanged.connect(self._on_threads)

    def set_controls(self, controls: Controls) -> None:
        """Show `controls` without emitting changes (the engine already has them)."""
        widgets = [self.policy, self.k, self.batch_ceiling, self.spec_ceiling,
                   self.budget_override, self.ragged, self.drafter, self.min_acceptance,
                   self.swarm_size, self.tool_latency, self.pause, *self.mix.values()]
        for widget in widgets:
            widget.blockSignals(True)
        self.policy.setCurrentText(controls.policy)
        if controls.policy != "off":
            self._drafting_policy = controls.policy
        self.k.setValue(controls.k)
        self._k_by_policy[controls.policy] = controls.k
        self.batch_ceiling.setValue(min(controls.batch_ceiling, MAX_LANES))
        self.spec_ceiling.setValue(min(controls.spec_ceiling, MAX_LANES))
        self.budget_override.setValue(controls.budget_override or 0)
        if self.drafter.findText(controls.drafter) < 0:
            self.drafter.addItem(controls.drafter)
        self.ragged.setCurrentText(controls.ragged)
        self.drafter.setCurrentText(controls.drafter)
        self.min_acceptance.setValue(controls.min_acceptance)
        self.swarm_size.setValue(controls.swarm_size)
        self.tool_latency.setValue(controls.tool_latency_s)
        self.pause.setChecked(controls.paused)
        self.pause.setText("Resume" if controls.paused else "Pause")
        for cat, spin in self.mix.items():
            spin.setValue(controls.mix.get(cat, 0.0))
        for widget in widgets:
            widget.blockSignals(False)
        # The slider labels follow valueChanged, which was blocked above.
        for slider, value in self._slider_values:
            value.setText(str(slider.value()))

    def set_threads(self, threads: int | None, tuned: bool = False) -> None:
        """Show the CPU threads a curve was measured with (`tuned`: as the tuner picked them),
        without asking for them; a GPU's curve has none, and the row is hidden."""
        self._form.setRowVisible(self.threads, threads is not None)
        if threads is None:
            return
        if self.threads.findText(str(threads)) < 0:  # a trace from a machine with more cores
            self.threads.addItem(str(threads))
        self.threads.blockSignals(True)
        self.threads.setItemText(0, f"{AUTO} · {threads} now" if tuned else AUTO)
        self.threads.setCurrentIndex(0 if tuned else self.threads.findText(str(threads)))
        self.threads.blockSignals(False)

    def _on_threads(self, index: int) -> None:
        self.threads_changed.emit(AUTO if index == 0 else int(self.threads.itemText(index)))

    def toggle_speculation(self) -> None:
        """Speculation off, or back on with the policy (and its K) it had before."""
        policy = self.policy.currentText()
        self.policy.setCurrentText("off" if policy != "off" else self._drafting_policy)

    def _on_policy(self, policy: str) -> None:
        if policy != "off":
            self._drafting_policy = policy
        k = self._k_by_policy[policy]
        self.k.blockSignals(True)
        self.k.setValue(k)
        self.k.blockSignals(False)
        self.changed.emit({"policy": policy, "k": k})

    def _on_k(self, k: int) -> None:
        self._k_by_policy[self.policy.currentText()] = k
        self.changed.emit({"k": k})

    def _emit_mix(self) -> None:
        mix = {cat: spin.value() for cat, spin in self.mix.items()}
        if sum(mix.values()) > 0:  # an all-zero mix is invalid; wait for a non-zero weight
            self.changed.emit({"mix": mix})

    def _on_pause(self, paused: bool) -> None:
        self.pause.setText("Resume" if paused else "Pause")
        self.changed.emit({"paused": paused})
