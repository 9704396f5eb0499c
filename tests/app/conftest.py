import os

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


@pytest.fixture
def window(qtbot):
    """The main window, shown, dark theme; its engine stopped afterwards."""
    from app.main_window import MainWindow
    from app.theme import Theme
    win = MainWindow(Theme.load("dark"))
    qtbot.addWidget(win)
    win.resize(1400, 900)
    win.show()
    yield win
    win.stop_engine()
