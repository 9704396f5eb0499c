"""What the speculation policy decided and why (recent reasons, repeats folded), and whether it
paid: the tokens emitted a second of step time over the recent window against an estimate of the
same work with speculation off."""
from __future__ import annotations

import functools

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QListView, QListWidget, QVBoxLayout, QWidget

from app.history import History
from app.theme import Theme
from app.views.live_label import LiveLabel

WINDOW_STEPS = 128
SHOWN_REASONS = 40


class DecisionsView(QWidget):
    def __init__(self, theme: Theme, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._calibration = None
        self.goodput = LiveLabel("emitted –", role="headline", lines=2)
        self.reasons = QListWidget()
        # A reason reads whole in a narrow pane: it wraps, where it used to run off the right
        # edge behind a sideways scroll bar.
        self.reasons.setWordWrap(True)
        self.reasons.setResizeMode(QListView.ResizeMode.Adjust)
        self.reasons.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.reasons.setSpacing(2)  # wrapped lines: where one reason ends and the next begins
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.goodput)
        layout.addWidget(self.reasons, 1)
        self._shown: list[str] = []

    def set_calibration(self, calibration) -> None:
        self._calibration = calibration

    def show_history(self, history: History, stop: int) -> None:
        if stop == 0:
            return
        lo = max(0, stop - WINDOW_STEPS)
        emitted = history.column("emitted", lo, stop).sum()
        busy_ms = history.column("dt_ms", lo, stop).sum()
        rate = 1000 * emitted / max(busy_ms, 1e-9)
        whole, short, shortest = (f"emitted {rate:.1f} tok/s of step time",
                                  f"emitted {rate:.1f} tok/s", f"{rate:.1f} tok/s")
        if self._calibration is not None:
            off_rate = self._spec_off_rate(history, lo, stop)
            whole += f" · spec-off estimate {off_rate:.1f} tok/s"
            short += f" · spec off {off_rate:.1f}"
            if emitted and off_rate:  # no ratio where nothing was emitted yet
                ratio = f" · ×{rate / off_rate:.2f}"
                whole, short, shortest = whole + ratio, short + ratio, shortest + ratio + " vs off"
        self.goodput.setText(whole, short, shortest)
        lines = _folded_reasons(history, max(0, stop - 4 * WINDOW_STEPS), stop)[-SHOWN_REASONS:]
        if lines != self._shown:
            self._shown = lines
            self.reasons.clear()
            self.reasons.addItems(list(reversed(lines)))

    def _spec_off_rate(self, history: History, lo: int, stop: int) -> float:
        """Tokens a second with speculation off doing the window's work: its prefill, and its
        emitted tokens decoded B a step. A step's parts are its calibrated costs (B lanes
        without drafts, its prefill) times what the step took over its calibrated cost, which
        carries what the calibration cannot see: a swarm's lanes at thousands of tokens of
        context, the window's drawing on the same CPU. Calibrated costs alone read a session
        with speculation off at x0.33 against itself; pricing the same steps without their
        drafts, not the same tokens, read a swarm at x4.8 where runs of each policy gave 2.5."""
        calibrated = functools.lru_cache(maxsize=None)(self._calibration.step_ms)
        columns = [history.column(name, lo, stop).tolist()
                   for name in ("dt_ms", "batch", "prefill", "pass_tokens", "emitted")]
        off_ms = 0.0
        for dt_ms, batch, prefill, pass_tokens, emitted in zip(*columns):
            if not batch:  # prefill alone: the same with speculation off
                off_ms += dt_ms
                continue
            batch, prefill = int(batch), int(prefill)
            decode = calibrated(batch, 0, 0)
            prefill_ms = calibrated(batch, 0, prefill) - decode
            taken = dt_ms / calibrated(batch, int(pass_tokens) - batch - prefill, prefill)
            off_ms += taken * (prefill_ms + emitted / batch * decode)
        return 1000 * sum(columns[4]) / max(off_ms, 1e-9)


def _folded_reasons(history: History, lo: int, stop: int) -> list[str]:
    """Consecutive identical reasons folded into one line with a repeat count."""
    lines: list[str] = []
    last, first_step, count = None, 0, 0
    for rec in history.records(lo, stop):
        key = (rec.policy, rec.reason)
        if key == last:
            count += 1
            continue
        if last is not None:
            lines.append(_line(last, first_step, count))
        last, first_step, count = key, rec.step, 1
    if last is not None:
        lines.append(_line(last, first_step, count))
    return lines


def _line(key: tuple[str, str], step: int, count: int) -> str:
    policy, reason = key
    named = reason if reason.startswith(policy) else f"[{policy}] {reason}"  # not "goodput" twice
    return f"step {step}: {named}" + (f"  ×{count}" if count > 1 else "")
