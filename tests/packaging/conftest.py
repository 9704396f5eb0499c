import os

import pytest

from packaging_support import load_manifest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


@pytest.fixture(scope="session")
def manifest():
    return load_manifest()
