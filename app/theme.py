"""One theme dataclass fills both the QSS template and the plot colours, so a theme is one JSON file
in resources/themes/ and nothing else."""
from __future__ import annotations

import json
import string
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QApplication

RESOURCES = Path(__file__).resolve().parents[1] / "resources"
THEMES = ("dark", "light")


@dataclass(slots=True, frozen=True)
class Theme:
    name: str
    background: str   # seed 000: deep oxblood in the dark theme
    surface: str
    border: str
    text: str
    muted: str
    grid: str
    committed: str    # seed 000: amber, one token per lane
    free: str         # seed 000: rose, free to speculate
    accepted: str     # drafts the target agreed with
    rejected: str     # drafts the target threw away
    prefill: str
    padding: str      # slots wasted by the padded layout
    unused: str       # budget nobody spent
    overflow: str     # tokens past the budget: each one costs real time
    line: str
    line_alt: str
    highlight: str

    def __post_init__(self) -> None:
        for f in fields(self):
            if f.name != "name" and not QColor.isValidColorName(getattr(self, f.name)):
                raise ValueError(f"theme {self.name!r}: {f.name}={getattr(self, f.name)!r} "
                                 "is not a colour")

    @classmethod
    def load(cls, name: str) -> "Theme":
        if name not in THEMES:
            raise ValueError(f"theme must be one of {THEMES}, got {name!r}")
        return cls(**json.loads((RESOURCES / "themes" / f"{name}.json").read_text()))

    def qcolor(self, field: str, alpha: int = 255) -> QColor:
        colour = QColor(getattr(self, field))
        colour.setAlpha(alpha)
        return colour

    def rgb(self, field: str) -> tuple[int, int, int]:
        colour = QColor(getattr(self, field))
        return colour.red(), colour.green(), colour.blue()

    def stylesheet(self) -> str:
        template = (RESOURCES / "qss" / "app.qss").read_text()
        arrows = {f"spin_{way}": (RESOURCES / "icons" / f"spin-{way}.svg").as_posix()
                  for way in ("up", "down")}
        return string.Template(template).substitute(asdict(self), **arrows)


def apply_theme(app: QApplication, theme: Theme) -> None:
    """Colours of plain widgets through the palette (cheap), the rest through the QSS template."""
    app.setStyle("Fusion")  # the one built-in style that honours every palette role
    palette = QPalette()
    roles = {QPalette.ColorRole.Window: "background", QPalette.ColorRole.WindowText: "text",
             QPalette.ColorRole.Base: "surface", QPalette.ColorRole.AlternateBase: "background",
             QPalette.ColorRole.Text: "text", QPalette.ColorRole.Button: "surface",
             QPalette.ColorRole.ButtonText: "text", QPalette.ColorRole.Highlight: "highlight",
             QPalette.ColorRole.HighlightedText: "text", QPalette.ColorRole.ToolTipBase: "surface",
             QPalette.ColorRole.ToolTipText: "text", QPalette.ColorRole.PlaceholderText: "muted"}
    for role, field in roles.items():
        palette.setColor(role, theme.qcolor(field))
    app.setPalette(palette)
    app.setStyleSheet(theme.stylesheet())
