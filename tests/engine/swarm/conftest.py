import pytest

from engine.loading import load_model
from engine.spec.calibration import Calibration


@pytest.fixture(scope="session")
def tiny():
    return load_model("tiny-test", dtype="fp32", device="cpu")


@pytest.fixture
def calibration():
    # A fixed step-cost curve: the virtual clock then advances identically on every machine.
    return Calibration.make_dummy(t1_ms=20.0, per_token_ms=1.0, knee=8)
