"""The live step-time excess over the calibrated curve, and how goodput plans with it."""
import pytest

from engine.controls import Controls
from engine.spec.acceptance import AcceptanceStats
from engine.spec.calibration import Calibration
from engine.spec.live_cost import LiveOverhead, Overhead
from engine.spec.policies import LaneView, SpeculationPolicy


def test_per_lane_and_per_draft_excess_are_told_apart():
    overhead = LiveOverhead(decay=0.9)
    assert overhead.estimate() == Overhead()          # nothing seen: plan on the curve alone
    for step in range(60):                            # 6 ms a lane, 0.5 ms a draft
        lanes, drafts = 4 + step % 3, 8 * (step % 4)
        overhead.observe(lanes, drafts, 6.0 * lanes + 0.5 * drafts)
    fitted = overhead.estimate()
    assert fitted.per_lane_ms == pytest.approx(6.0, abs=0.05)
    assert fitted.per_draft_ms == pytest.approx(0.5, abs=0.05)
    assert fitted.ms(16, 10) == pytest.approx(16 * fitted.per_lane_ms + 10 * fitted.per_draft_ms)


def test_without_drafts_the_excess_is_all_per_lane_and_follows_recent_steps():
    overhead = LiveOverhead(decay=0.5)
    for _ in range(20):
        overhead.observe(lanes=4, drafts=0, excess_ms=40.0)
    assert overhead.estimate() == Overhead(per_lane_ms=pytest.approx(10.0), per_draft_ms=0.0)
    for _ in range(20):
        overhead.observe(lanes=4, drafts=0, excess_ms=8.0)
    assert overhead.estimate().per_lane_ms == pytest.approx(2.0, abs=0.01)


def test_steps_faster_than_the_calibration_never_plan_below_it():
    overhead = LiveOverhead()
    overhead.observe(lanes=2, drafts=6, excess_ms=-30.0)
    assert overhead.estimate() == Overhead()
    with pytest.raises(ValueError):
        LiveOverhead(decay=1.0)


CURVE = Calibration(points=[(1, 20.0), (2, 40.0), (4, 60.0), (8, 100.0), (16, 180.0),
                            (32, 340.0), (64, 660.0)])  # every token costs 10 ms past N=2


def _decide(overhead):
    stats = AcceptanceStats()
    for lane in range(8):
        for _ in range(10):
            stats.record(lane, "code-edit", 4, 2)  # each later draft lands half the time
    lanes = [LaneView(i, "code-edit", 8) for i in range(8)]
    return SpeculationPolicy(stats).decide(lanes, 0, Controls(policy="goodput", k=8), CURVE,
                                           lambda ks: 0.0, overhead=overhead)


def test_goodput_drafts_more_when_the_step_around_the_pass_is_costly():
    """A draft's cost is weighed against the whole step: the dearer the step, the cheaper the
    same draft is in comparison, so more drafts pay."""
    assert sum(_decide(Overhead(per_lane_ms=50.0)).ks) > sum(_decide(Overhead()).ks)


def test_goodput_drafts_less_when_drafts_cost_more_than_the_curve_says():
    assert sum(_decide(Overhead(per_draft_ms=10.0)).ks) < sum(_decide(Overhead()).ks)
