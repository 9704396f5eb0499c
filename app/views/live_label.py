"""A label whose text changes every frame without re-laying out the window, and gives way in a
small window rather than being cut.

A plain QLabel reports a new size hint whenever its text changes; the layouts above it then move
the neighbouring plots by a pixel or two and every plot in the row repaints (measured: one status
line cost ~40 ms of painting per frame at 1600x1000). This label takes the width its layout gives
it and a fixed height of `lines` text lines, so setText repaints the label alone.

Text that would not fit those lines (a laptop's window, a narrow pane) was cut mid-word at the
label's edge. setText takes shorter wordings too: the label shows the first that fits, else the
shortest cut short with an ellipsis, and the whole text in its tooltip whenever it shows less."""
from __future__ import annotations

from PySide6.QtCore import QRect, Qt
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
        self._wordings: tuple[str, ...] = (text,)
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
            self._show_fitting()

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt's name
        super().resizeEvent(event)
        self._show_fitting()

    def showEvent(self, event) -> None:  # noqa: N802 - Qt's name
        super().showEvent(event)
        self._show_fitting()

    def setText(self, text: str, *shorter: str) -> None:  # noqa: N802 - Qt's name
        """Show `text`, or where it does not fit, the first of the `shorter` wordings that
        does (longest first)."""
        wordings = (text, *shorter)
        if wordings != self._wordings:
            self._wordings = wordings
            self._show_fitting()

    def fits(self, text: str) -> bool:
        """Whether `text` fits the label's width in its lines."""
        width = self.contentsRect().width() - 2 * self.margin()
        metrics = self.fontMetrics()
        if self._lines == 1:
            return metrics.horizontalAdvance(text) <= width
        bound = metrics.boundingRect(QRect(0, 0, width, 100 * metrics.lineSpacing()),
                                     Qt.TextFlag.TextWordWrap, text)
        return bound.width() <= width and bound.height() <= self._lines * metrics.lineSpacing()

    def _show_fitting(self) -> None:
        """The first wording that fits; a label not laid out yet has no width to fit, so it
        holds the whole text until it is shown."""
        shown = self._wordings[0]
        if self.isVisible() and not self.fits(shown):
            shown = next((w for w in self._wordings[1:] if self.fits(w)), None)
            if shown is None:  # one line of the shortest, cut with an ellipsis
                shown = self.fontMetrics().elidedText(self._wordings[-1],
                                                      Qt.TextElideMode.ElideRight,
                                                      self.contentsRect().width())
        if shown != self.text():  # an unchanged label is not repainted at all
            super().setText(shown)
            self.setToolTip("" if shown == self._wordings[0] else self._wordings[0])
