"""The transcript pane appends what a live transcript grew by, shows what a fresh rendering would,
and follows the end unless the user scrolled up to read."""
import random

import pytest

from app.agent_rows import AgentRow
from app.theme import Theme
from app.views import transcript_view
from app.views.transcript_view import TranscriptView


def _tail(segments: list[list], chars: int) -> tuple[list[tuple[str, str]], int]:
    """As Engine.agents(tail_chars=...): the newest segments holding `chars` characters, and
    the number of the first of them."""
    tail, held = [], 0
    for text, kind in reversed(segments):
        tail.append((text, kind))
        held += len(text)
        if held >= chars:
            break
    return tail[::-1], len(segments) - len(tail)


def _row(segments, agent=0, chars=10_000) -> AgentRow:
    transcript, first = _tail(segments, chars)
    return AgentRow(agent, "decode", "code-edit", 0, None, transcript, first)


def _view(qtbot) -> TranscriptView:
    view = TranscriptView(Theme.load("dark"))
    qtbot.addWidget(view)
    view.resize(400, 200)
    view.show()
    return view


def _shown(qtbot, row: AgentRow) -> str:
    view = _view(qtbot)
    view.show_row(row)
    return view.text.toPlainText()


def test_a_growing_transcript_reads_as_a_fresh_rendering_of_it(qtbot, monkeypatch):
    """Segments grow, new ones come (copied text repeats itself, prompts start new tasks), the
    engine hands over a sliding tail: what the pane shows ends with what a pane built from the
    same row alone shows, and the pane stays within its bound."""
    monkeypatch.setattr(transcript_view, "TRANSCRIPT_CHARS", 200)
    monkeypatch.setattr(transcript_view, "KEPT_CHARS", 400)
    rng = random.Random(0)
    view, segments, rebuilds = _view(qtbot), [], []
    original = view._rebuild
    view._rebuild = lambda row: (rebuilds.append(row), original(row))
    for refresh in range(300):
        for _ in range(rng.randrange(3)):
            kind = rng.choice(["committed", "accepted_draft", "committed", "tool", "prompt"])
            text = rng.choice(["ab", "ab\n", "def f(x):", "return x"])
            if segments and segments[-1][1] == kind and kind != "prompt" and kind != "tool":
                segments[-1][0] += text  # a run of generated text grows
            else:
                segments.append([text, kind])
        if not segments:
            continue
        row = _row(segments, chars=200)
        view.show_row(row)
        shown = view.text.toPlainText()
        assert shown.endswith(_shown(qtbot, row)), refresh
        assert len(shown) <= 2 * transcript_view.KEPT_CHARS
    # most refreshes appended: a rebuild only each time the pane had grown to its bound
    assert 3 <= len(rebuilds) <= 40


def test_text_that_changed_or_another_agent_is_shown_anew(qtbot):
    view = _view(qtbot)
    view.show_row(_row([["def f(x", "committed"]]))
    # a character whose bytes were cut decodes differently once its last byte comes
    view.show_row(_row([["def f(\u00e9", "committed"]]))
    assert view.text.toPlainText() == "def f(\u00e9"
    view.show_row(_row([["hello", "prompt"]], agent=1))
    assert view.text.toPlainText() == "hello" and "agent 1" in view.legend.text()
    view.show_row(AgentRow(2, "tool", "chat", 0, None, []))
    assert "no text recorded" in view.text.toPlainText()


def test_the_pane_follows_the_end_unless_the_user_scrolled_up(qtbot):
    view = _view(qtbot)
    segments = [["line\n" * 200, "tool"]]
    view.show_row(_row(segments))
    bar = view.text.verticalScrollBar()
    assert bar.maximum() > 0 and bar.value() == bar.maximum()
    segments.append(["more\n" * 20, "committed"])
    view.show_row(_row(segments))
    assert bar.value() == bar.maximum()  # following: at the new end
    bar.setValue(bar.maximum() // 2)  # the user scrolls up to read
    reading = bar.value()
    segments[-1][0] += "and more\n" * 20
    view.show_row(_row(segments))
    assert bar.value() == reading < bar.maximum()
    assert view.text.toPlainText().endswith("and more\u21b5\n" * 20)


@pytest.mark.parametrize("kind", ["committed", "accepted_draft"])
def test_generated_line_breaks_and_unprintable_bytes_stay_visible(qtbot, kind):
    assert _shown(qtbot, _row([["a\x01b\nc", kind]])) == "a\u00b7b\u21b5\nc"
