"""The window at a desktop's, a laptop's and a small size: it is as large as asked, down to 800x500
(the grid of views scrolls rather than holding the window larger); every view's text is whole
and apart, in the labels and in the plots; shorter wordings take over where the longest would
be cut."""
import pytest
from PySide6.QtCore import QRectF
from PySide6.QtGui import QFontMetricsF, QImage
from PySide6.QtWidgets import QApplication, QLayout, QWidget

from app.main import main
from app.main_window import CONTROLS_DOCK_PX, LEAST_SIZE, MainWindow
from app.theme import Theme
from app.history import History
from app.views.budget_view import BudgetView
from app.views.live_label import LiveLabel
from app.views.plot_text import AxisLabel, PlotTitle, thinned_row_ticks
from engine.telemetry.records import LaneRecord, StepRecord
from tests.app.fake_engine import FakeEngine, record_trace

SIZES = [(1600, 1000), (1366, 740), (1024, 640), (800, 500)]


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    return record_trace(tmp_path_factory.mktemp("sizes") / "s.jsonl", 300)


def _window(qtbot, size: tuple[int, int]) -> MainWindow:
    window = MainWindow(Theme.load("dark"))
    qtbot.addWidget(window)
    window.resize(*size)
    window.show()
    QApplication.processEvents()
    return window


def _settle() -> None:
    for _ in range(3):  # layouts of layouts, then the plots' scenes
        QApplication.processEvents()


def _layout_widgets(layout: QLayout):
    for i in range(layout.count()):
        item = layout.itemAt(i)
        if item.widget() is not None and item.widget().isVisible():
            yield item.widget()
        elif item.layout() is not None:
            yield from _layout_widgets(item.layout())


def _problems(window: MainWindow) -> list[str]:
    """What the eye would catch: labels cut or run over, a plot's text past its edge, widgets
    of one view drawn over each other."""
    problems = []
    for label in window.findChildren(LiveLabel):
        if label.isVisible() and not label.fits(label.text()):
            problems.append(f"label cut: {label.text()!r} in {label.width()} px")
    for text in window.findChildren(PlotTitle) + window.findChildren(AxisLabel):
        plot = text.parent()
        if not plot.isVisible() or text.text is None:
            continue
        item = plot.getPlotItem()
        shown = (item.titleLabel.item if isinstance(text, PlotTitle)
                 else item.getAxis("bottom").label)
        drawn = shown.mapRectToScene(shown.boundingRect())
        # (a text item's box has 4 px of margin round its glyphs, pyqtgraph nudges 5 px)
        if not QRectF(plot.viewport().rect()).adjusted(-6, -6, 6, 6).contains(drawn):
            problems.append(f"plot text past the plot's edge: {text.text!r} {drawn} in "
                            f"{plot.size().toTuple()}")
        if item.geometry().width() > plot.width() + 1:
            problems.append(f"plot of {text.text!r} wider than its widget")
    dashboard = window.dashboard
    for view in (dashboard.batch, dashboard.budget, dashboard.lanes, dashboard.acceptance,
                 dashboard.cost, dashboard.decisions, dashboard.agents):
        least = view.minimumSizeHint()
        if view.width() < least.width() or view.height() < least.height():
            problems.append(f"{type(view).__name__} squeezed: {view.size().toTuple()} < "
                            f"{least.toTuple()}")
        widgets = list(_layout_widgets(view.layout()))
        for i, a in enumerate(widgets):
            for b in widgets[i + 1:]:
                if a.geometry().intersects(b.geometry()):
                    problems.append(f"{type(view).__name__}: {type(a).__name__} over "
                                    f"{type(b).__name__}")
    return problems


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_a_replay_at_each_size_is_that_size_with_its_text_whole_and_apart(qtbot, trace, size):
    window = _window(qtbot, size)
    assert window.open_trace(trace)
    _settle()
    assert window.size().toTuple() == size
    assert _problems(window) == []


def test_a_live_window_at_a_laptops_size_has_its_text_whole_and_apart(qtbot):
    window = _window(qtbot, (1024, 640))
    window.start_live(build=lambda progress: FakeEngine())
    qtbot.waitUntil(lambda: len(window.history) > 50, timeout=5000)
    window.poll(force=True)
    _settle()
    assert window.size().toTuple() == (1024, 640)
    assert _problems(window) == []


def test_the_window_can_be_800x500_and_the_views_scroll_below_their_least_size(qtbot, trace):
    window = _window(qtbot, (800, 500))
    hint = window.minimumSizeHint()
    assert hint.width() <= 800 and hint.height() <= 500  # it held the window at 818x611
    assert window.open_trace(trace)
    _settle()
    grid = window.dashboard.grid
    assert grid.widget().height() >= window.dashboard.least_grid_size().height()
    assert grid.verticalScrollBar().maximum() > 0  # the rest is a scroll away, not squeezed


def test_the_controls_and_every_view_fit_side_by_side_at_1024_px(qtbot):
    """Else a laptop's window would open with its controls hidden, or scroll sideways."""
    window = _window(qtbot, (1024, 640))
    assert window.controls_action.isChecked()
    assert CONTROLS_DOCK_PX + window.dashboard.least_grid_size().width() < 1024 - 10
    assert not window.dashboard.grid.horizontalScrollBar().isVisible()


@pytest.mark.parametrize(("size", "controls_shown"), [((1366, 740), True), ((800, 500), False)])
def test_a_window_too_narrow_for_the_controls_and_the_views_opens_without_the_controls(
        qtbot, size, controls_shown):
    window = _window(qtbot, size)
    assert window.controls_action.isChecked() is controls_shown
    if not controls_shown:
        assert "C shows it" in window.statusBar().currentMessage()


def test_main_opens_800x500_as_asked(qtbot, trace, tmp_path):
    shot = tmp_path / "small.png"
    assert main(["--replay", trace, "--screenshot", str(shot), "--quit-after", "0.5",
                 "--size", "800x500"]) == 0
    assert QImage(str(shot)).size().toTuple() == (800, 500)


def test_a_size_below_the_least_says_so_and_names_the_least(qtbot, trace, tmp_path, capsys):
    shot = tmp_path / "tiny.png"
    assert main(["--replay", trace, "--screenshot", str(shot), "--quit-after", "0.2",
                 "--size", "500x300"]) == 0
    err = capsys.readouterr().err
    assert f"least size {LEAST_SIZE[0]}x{LEAST_SIZE[1]}" in err and len(err.splitlines()) == 1
    assert QImage(str(shot)).size().toTuple() == LEAST_SIZE


def test_the_qa_rounds_cuts_at_1366x740_are_whole(qtbot, trace):
    """The lane strip's waste line, the agents table's last column and the acceptance view's
    position plot's title, each cut at 1366x740 before."""
    window = _window(qtbot, (1366, 740))
    assert window.open_trace(trace)
    _settle()
    dashboard = window.dashboard
    waste = dashboard.lanes.waste
    assert waste.fontMetrics().horizontalAdvance(waste.text()) <= waste.contentsRect().width()
    assert waste.text().startswith("padding waste (packed)")  # a shorter wording, not cut
    table = dashboard.agents.table
    header = table.horizontalHeader()
    last = table.columnCount() - 1
    assert header.sectionViewportPosition(last) + header.sectionSize(last) \
        <= table.viewport().width()
    assert not table.horizontalScrollBar().isVisible()
    assert dashboard.acceptance.titles[0].text in ("by draft position", "by position")
    plot = dashboard.acceptance.position_plot
    title = plot.getPlotItem().titleLabel.item
    assert QRectF(plot.viewport().rect()).contains(title.mapRectToScene(title.boundingRect()))


def test_a_live_label_shows_the_longest_wording_that_fits_and_the_whole_in_its_tooltip(qtbot):
    holder = QWidget()
    qtbot.addWidget(holder)
    label = LiveLabel(parent=holder)
    label.setText("a long wording of the numbers 12.5", "short 12.5")
    assert label.text() == "a long wording of the numbers 12.5"  # not shown: nothing to fit
    metrics = label.fontMetrics()
    label.resize(metrics.horizontalAdvance("short 12.5") + 10, label.height())
    holder.show()
    assert label.text() == "short 12.5" and label.toolTip() == "a long wording of the numbers 12.5"
    label.resize(metrics.horizontalAdvance("short") + 4, label.height())
    assert label.text().endswith("…") and label.fits(label.text())
    label.resize(1000, label.height())
    assert label.text() == "a long wording of the numbers 12.5" and label.toolTip() == ""


def test_row_ticks_thin_to_what_the_rows_leave_room_for(qapp):
    metrics = QFontMetricsF(qapp.font())
    ticks = [(i, str(i)) for i in range(8)]
    assert thinned_row_ticks(ticks, 3 * metrics.height(), metrics) == ticks
    assert thinned_row_ticks(ticks, metrics.height() / 2, metrics) == ticks[::3]


def test_the_budget_charts_live_label_stays_whole_when_the_chart_narrows_between_steps(qtbot):
    """In replay no step may come after a resize (the grid's scroll bar appearing, the controls
    shown): the axis's room for the live bar's label follows the chart's width, not only the
    next step ('231 of T=5, +226 over' was cut at 1024x640)."""
    view = BudgetView(Theme.load("dark"))
    qtbot.addWidget(view)
    view.resize(900, 300)
    view.show()
    history = History()
    lanes = [LaneRecord(i, "chat", 6, 2, 0, 10) for i in range(3)]
    history.extend([StepRecord(0, 0.0, 30.0, 3, 210, 5, "fixed", "packed", lanes, "k=6")])
    view.show_history(history, 1)
    view.resize(720, 300)  # the table still beside the chart, which narrows
    _settle()
    live = view._labels[0]
    assert live.toPlainText() == "231 of T=5, +226 over"
    drawn = live.mapRectToScene(live.boundingRect())
    assert drawn.right() <= view.plot.viewport().width() + 1
