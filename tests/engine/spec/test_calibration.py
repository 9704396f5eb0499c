import pytest

from engine.spec import calibration as cal
from engine.spec.calibration import Calibration


def test_budget_is_the_last_n_within_eps_of_t1():
    c = Calibration(points=[(1, 10.0), (2, 10.2), (4, 10.5), (8, 10.9), (16, 14.0), (32, 20.0)])
    assert c.budget == 8  # t(9) = 10.9 + 3.1/8 > 11.0 fails; t(8) = 10.9 fits
    c.eps = 0.5
    assert c.budget == 18  # t(18) = 14 + 6 * 2/16 = 14.75 <= 15


def test_t_interpolates_extrapolates_and_never_decreases():
    c = Calibration(points=[(1, 10.0), (4, 9.0), (8, 12.0), (16, 20.0)])
    assert c.t_ms(4) == 10.0         # noise dip ironed out
    assert c.t_ms(12) == pytest.approx(16.0)
    assert c.t_ms(24) == pytest.approx(28.0)


def test_dict_round_trip_and_dummy():
    c = Calibration.make_dummy(knee=8)
    assert Calibration.from_dict(c.to_dict()) == c
    assert c.budget == 9  # t(9) = 26.25 + 4/4 ms, interpolated on the way to N=12, still fits 27.5


def test_cache_path_honours_env(tmp_path, monkeypatch):
    monkeypatch.setenv("SWARMSCOPE_CACHE", str(tmp_path))
    c = Calibration.make_dummy()
    path = cal.save(c)
    assert path.parent == tmp_path / "calibration"
    assert cal.load_cached("dummy", "dummy", "none", eps=0.2).points == c.points


def test_needs_a_point_at_one():
    with pytest.raises(ValueError):
        Calibration(points=[(2, 1.0)])
