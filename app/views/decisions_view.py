"""What the speculation policy decided and why (recent reasons, repeats folded), and whether it
paid: goodput over the recent window against the spec-off estimate from the calibrated step
costs."""
from __future__ import annotations

from collections import Counter

from PySide6.QtWidgets import QListWidget, QVBoxLayout, QWidget

from app.history import History
from app.theme import Theme
from app.views.live_label import LiveLabel

WINDOW_STEPS = 128
SHOWN_REASONS = 40


class DecisionsView(QWidget):
    def __init__(self, theme: Theme, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._calibration = None
        self.goodput = LiveLabel("goodput –", role="headline", lines=2)
        self.reasons = QListWidget()
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
        text = f"goodput {1000 * emitted / max(busy_ms, 1e-9):.1f} tok/s of step time"
        if self._calibration is not None:
            # With speculation off the same steps would emit B tokens each, at the calibrated
            # cost of B lanes without drafts and their prefill.
            batch = history.column("batch", lo, stop)
            prefill = history.column("prefill", lo, stop)
            shapes = Counter(zip(batch.astype(int).tolist(), prefill.astype(int).tolist()))
            off_ms = sum(count * self._calibration.step_ms(b, 0, p)
                         for (b, p), count in shapes.items())
            off_rate = 1000 * batch.sum() / max(off_ms, 1e-9)
            text += (f" · spec-off estimate {off_rate:.1f} tok/s · "
                     f"×{1000 * emitted / max(busy_ms, 1e-9) / max(off_rate, 1e-9):.2f}")
        self.goodput.setText(text)
        lines = _folded_reasons(history, max(0, stop - 4 * WINDOW_STEPS), stop)[-SHOWN_REASONS:]
        if lines != self._shown:
            self._shown = lines
            self.reasons.clear()
            self.reasons.addItems(list(reversed(lines)))


def _folded_reasons(history: History, lo: int, stop: int) -> list[str]:
    """Consecutive identical reasons folded into one line with a repeat count."""
    lines: list[str] = []
    last, first_step, count = None, 0, 0
    for rec in history.records[lo:stop]:
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
    return f"step {step}: [{policy}] {reason}" + (f"  ×{count}" if count > 1 else "")
