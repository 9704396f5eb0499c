"""The selected agent's transcript: prompts, tool output and generated text, with accepted draft
tokens highlighted, under a legend that names the agent and its state.

Live, the text grows a few tokens a refresh. Re-laying out its 6,000-character tail as HTML took
~6 ms a refresh, a fifth of a live frame; appending what is new takes ~0.5 ms. So the pane appends
where the transcript grew and is rebuilt only where it did not (another agent, a replay moved
back, a generated segment whose text changed as its last character's bytes came in) or where it
has grown to twice the tail. It follows the end unless the user has scrolled up to read."""
from __future__ import annotations

import re

from PySide6.QtGui import QFont, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import QLabel, QTextEdit, QVBoxLayout, QWidget

from app.agent_rows import AgentRow
from app.theme import Theme

TRANSCRIPT_CHARS = 6000  # the tail shown (and fetched from the engine)
KEPT_CHARS = 2 * TRANSCRIPT_CHARS  # grown past this, the pane is rebuilt from the tail
GENERATED = ("committed", "accepted_draft")
NEW_TASK_RULE = "\n── new task ──\n"
FOLLOW_SLACK_PX = 4  # a scroll bar this close to its end counts as following the end
# A small random model emits arbitrary bytes; control characters would garble the pane.
_UNPRINTABLE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\ufffd]")


class TranscriptView(QWidget):
    def __init__(self, theme: Theme, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._theme = theme
        self.legend = QLabel()
        self.legend.setWordWrap(True)
        self.legend.setProperty("role", "muted")
        self.text = QTextEdit()
        self.text.setReadOnly(True)
        self._formats = _formats(theme)
        # What the pane holds: (agent, number of its first segment, the segments as given)
        self._shown: tuple[int, int, list[tuple[str, str]]] | None = None
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addWidget(self.legend)
        layout.addWidget(self.text, 1)

    def show_row(self, row: AgentRow | None) -> None:
        """Show `row`'s transcript (None: nothing)."""
        self._set_legend(row)
        if row is None or not row.transcript:
            self._shown = None
            # In replay, text is recorded as each turn ends (traces from before text records
            # have none).
            placeholder = "" if row is None else f"agent {row.id}: no text recorded up to here"
            if self.text.toPlainText() != placeholder:  # not laid out again every refresh
                self.text.setPlainText(placeholder)
            return
        growth = self._growth(row)
        added = None if growth is None else len(growth[0]) + sum(len(t) for t, _ in growth[1])
        if added is None or self.text.document().characterCount() + added > KEPT_CHARS:
            self._rebuild(row)
        elif added:
            grown, later = growth
            bar = self.text.verticalScrollBar()
            following = bar.value() >= bar.maximum() - FOLLOW_SLACK_PX
            agent, first, shown = self._shown
            (last_text, last_kind) = shown[-1]
            self._insert([(grown, last_kind)] * bool(grown) + later, after_text=True)
            self._shown = (agent, first, [*shown[:-1], (last_text + grown, last_kind), *later])
            if following:
                bar.setValue(bar.maximum())

    def _growth(self, row: AgentRow) -> tuple[str, list[tuple[str, str]]] | None:
        """How `row`'s transcript extends what the pane shows: the text the last shown segment
        grew by and the segments after it; None where it does not extend it."""
        if self._shown is None or self._shown[0] != row.id:
            return None
        _, first, shown = self._shown
        last = first + len(shown) - 1 - row.first_segment  # the last shown, in row's numbering
        if not 0 <= last < len(row.transcript):
            return None
        text, kind = row.transcript[last]
        shown_text, shown_kind = shown[-1]
        if kind != shown_kind or not text.startswith(shown_text):
            return None
        return text[len(shown_text):], list(row.transcript[last + 1:])

    def _rebuild(self, row: AgentRow) -> None:
        """The pane anew: the newest segments holding TRANSCRIPT_CHARS characters, the first cut
        to fit."""
        tail, chars = [], 0
        for segment in reversed(row.transcript):
            tail.append(segment)
            chars += len(segment[0])
            if chars >= TRANSCRIPT_CHARS:
                break
        tail.reverse()
        self.text.clear()
        cut = max(0, chars - TRANSCRIPT_CHARS)
        self._insert([(tail[0][0][cut:], tail[0][1]), *tail[1:]], after_text=False)
        self._shown = (row.id, row.first_segment + len(row.transcript) - len(tail), tail)
        bar = self.text.verticalScrollBar()
        bar.setValue(bar.maximum())

    def _insert(self, segments: list[tuple[str, str]], after_text: bool) -> None:
        """Append `segments` at the end, each in its kind's format. A task's prompt starts a
        fresh conversation, so one after other text is marked, lest it read as part of the last
        task's text."""
        cursor = QTextCursor(self.text.document())
        cursor.movePosition(QTextCursor.MoveOperation.End)
        cursor.beginEditBlock()
        for text, kind in segments:
            if kind == "prompt" and after_text:
                cursor.insertText(NEW_TASK_RULE, self._formats["prompt"])
            shown = _UNPRINTABLE.sub("\u00b7", text)
            if kind in GENERATED:
                shown = shown.replace("\n", "\u21b5\n")  # generated line breaks stay visible
            cursor.insertText(shown, self._formats.get(kind, self._formats["committed"]))
            after_text = after_text or bool(text)
        cursor.endEditBlock()

    def _set_legend(self, row: AgentRow | None) -> None:
        th = self._theme
        legend = "" if row is None else (
            f"agent {row.id} · {row.cat} · {row.state} — "
            f"<span style='background:{th.free};color:{th.background}'>accepted draft</span> "
            f"<span style='color:{th.prefill}'>tool output</span> "
            f"<span style='color:{th.muted}'>prompt</span>")
        if legend != self.legend.text():  # an unchanged label is not laid out again
            self.legend.setText(legend)


def _formats(theme: Theme) -> dict[str, QTextCharFormat]:
    """The character format of each kind of segment, in the theme's colours, monospace."""
    colours = {"prompt": ("muted", None), "tool": ("prefill", None), "committed": ("text", None),
               "accepted_draft": ("background", "free")}
    formats = {}
    for kind, (foreground, background) in colours.items():
        fmt = QTextCharFormat()
        fmt.setFontFamilies(["monospace"])
        fmt.setFontStyleHint(QFont.StyleHint.Monospace)
        fmt.setForeground(theme.qcolor(foreground))
        if background is not None:
            fmt.setBackground(theme.qcolor(background))
        formats[kind] = fmt
    return formats
