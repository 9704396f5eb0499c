"""A label whose text changes every frame without re-laying out the window.

A plain QLabel reports a new size hint whenever its text changes; the layouts above it then move
the neighbouring plots by a pixel or two and every plot in the row repaints (measured: one status
line cost ~40 ms of painting per frame at 1600x1000). This label takes the width its layout gives
it and a fixed height of `lines` text lines, so setText repaints the label alone."""
from __future__ import annotations

from PySide6.QtWidgets import QLabel, QSizePolicy, QWidget


class LiveLabel(QLabel):
    def __init__(self, text: str = " ", role: str = "", lines: int = 1,
                 parent: QWidget | None = None) -> None:
        super().__init__(text, parent)
        if role:
            self.setProperty("role", role)
        self.setWordWrap(lines > 1)
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)
        self._lines = lines
        self._fit_height()

    def _fit_height(self) -> None:
        margins = self.contentsMargins()
        self.setFixedHeight(self._lines * self.fontMetrics().lineSpacing()
                            + margins.top() + margins.bottom() + 2)

    def changeEvent(self, event) -> None:  # noqa: N802 - Qt's name
        # The theme's QSS sets headline fonts after construction: keep `lines` lines of room.
        super().changeEvent(event)
        if event.type() in (event.Type.FontChange, event.Type.StyleChange):
            self._fit_height()

    def setText(self, text: str) -> None:  # noqa: N802 - Qt's name
        if text != self.text():  # an unchanged label is not repainted at all
            super().setText(text)
