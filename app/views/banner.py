"""The error banner over the views: it stays until the user dismisses it (its ✕) or the window
moves on to something that worked (a session started, a trace opened)."""
from __future__ import annotations

from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QToolButton


class Banner(QFrame):
    def __init__(self) -> None:
        super().__init__()
        self.setProperty("role", "error")
        self._label = QLabel()
        self._label.setWordWrap(True)
        close = QToolButton()
        close.setText("✕")
        close.setToolTip("Dismiss")
        close.clicked.connect(self.hide)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(6, 4, 4, 4)
        layout.addWidget(self._label, 1)
        layout.addWidget(close)
        self.hide()

    def show_message(self, text: str) -> None:
        self._label.setText(text)
        self.show()

    def text(self) -> str:
        return self._label.text()
