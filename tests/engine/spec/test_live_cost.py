"""The live step-time excess over the calibrated curve, and how goodput plans with it."""
import pytest

from engine.controls import Controls
from engine.spec.acceptance import AcceptanceStats
from engine.spec.calibration import Calibration
from engine.spec.live_cost import LiveOverhead
from engine.spec.policies import LaneView, SpeculationPolicy


def test_excess_is_learned_per_lane_and_follows_recent_steps():
    overhead = LiveOverhead(decay=0.5)
    assert overhead.at(8) == 0.0                      # nothing seen: plan on the curve alone
    for _ in range(20):
        overhead.observe(lanes=4, excess_ms=40.0)
    assert overhead.per_lane_ms == pytest.approx(10.0) and overhead.at(16) == pytest.approx(160)
    for _ in range(20):
        overhead.observe(lanes=4, excess_ms=8.0)
    assert overhead.per_lane_ms == pytest.approx(2.0, abs=0.01)


def test_a_step_faster_than_the_calibration_never_plans_below_it():
    overhead = LiveOverhead()
    overhead.observe(lanes=2, excess_ms=-30.0)
    assert overhead.at(2) == 0.0
    with pytest.raises(ValueError):
        LiveOverhead(decay=1.0)


def test_goodput_drafts_more_when_the_step_around_the_pass_is_costly():
    """A draft's cost is weighed against the whole step: the dearer the step, the cheaper the
    same draft is in comparison, so more drafts pay."""
    curve = Calibration(points=[(1, 20.0), (2, 40.0), (4, 60.0), (8, 100.0), (16, 180.0),
                                (32, 340.0), (64, 660.0)])  # every token costs 10 ms past N=2
    stats = AcceptanceStats()
    for lane in range(8):
        for _ in range(10):
            stats.record(lane, "code-edit", 4, 2)  # each later draft lands half the time
    lanes = [LaneView(i, "code-edit", 8) for i in range(8)]
    controls = Controls(policy="goodput", k=8)
    bare = SpeculationPolicy(stats).decide(lanes, 0, controls, curve, lambda ks: 0.0)
    costly = SpeculationPolicy(stats).decide(lanes, 0, controls, curve, lambda ks: 0.0,
                                             overhead_ms=400.0)
    assert sum(costly.ks) > sum(bare.ks)
