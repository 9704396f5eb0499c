"""The live step-time excess over the calibrated curve, and how goodput plans with it."""
import random
import re

import pytest

from engine.controls import Controls
from engine.spec.acceptance import AcceptanceStats
from engine.spec.calibration import Calibration
from engine.spec.live_cost import LiveOverhead, Overhead, extra_groups, query_groups
from engine.spec.policies import MIN_CURVE_SHARE, LaneView, SpeculationPolicy


def test_per_lane_per_draft_and_per_group_excess_are_told_apart():
    overhead = LiveOverhead(decay=0.95)
    assert overhead.estimate() == Overhead()          # nothing seen: plan on the curve alone
    rng = random.Random(0)
    for _ in range(80):                               # 6 ms a lane, 0.5 a draft, 3 a group
        ks = [rng.choice((0, 1, 2, 4, 8)) for _ in range(rng.randint(2, 8))]
        extra = extra_groups(len(ks), sum(ks), query_groups(ks))
        overhead.observe(ks, 6.0 * len(ks) + 0.5 * sum(ks) + 3.0 * extra)
    fitted = overhead.estimate()
    assert fitted.per_lane_ms == pytest.approx(6.0, abs=0.2)  # the ridge pulls a little
    assert fitted.per_draft_ms == pytest.approx(0.5, abs=0.15)
    assert fitted.per_group_ms == pytest.approx(3.0, abs=0.5)
    assert fitted.ms(16, 10, 3) == pytest.approx(16 * fitted.per_lane_ms
                                                 + 10 * fitted.per_draft_ms
                                                 + 1 * fitted.per_group_ms)
    assert query_groups([0, 2, 2, 5]) == 3


def test_only_query_lengths_beyond_the_calibrated_shape_count():
    """The shapes time one lane drafting among lanes that do not: two query lengths."""
    assert extra_groups(4, 0, 1) == 0             # no drafts: one length, as calibrated
    assert extra_groups(1, 5, 1) == 0             # a lone lane drafting
    assert extra_groups(4, 3, 2) == 0             # one lane drafting among others
    assert extra_groups(4, 5, 3) == 1             # two draft counts among others
    assert extra_groups(4, 8, 1) == 0             # every lane drafting alike: not below


def test_a_lone_drafting_lane_cost_is_not_taken_for_a_group():
    """Two lanes, one drafting deep now and then, each such step 4 ms past the shapes whatever
    its depth (a stair the calibration placed elsewhere). Every such step has one lane drafting
    among one that does not, the calibrated case, so the group term cannot take those 4 ms, and
    a lone lane's two drafts are not planned at 4 ms or more."""
    overhead = LiveOverhead(decay=0.95)
    rng = random.Random(1)
    for _ in range(60):
        k = rng.choice((0, 0, 0, 8, 12, 16))
        overhead.observe([k, 0], 4.0 if k else 0.0)
    fitted = overhead.estimate()
    assert fitted.per_group_ms == pytest.approx(0.0, abs=0.05)
    assert fitted.ms(2, 2, 2) < 1.5


def test_a_slow_drafting_step_is_forgotten_while_no_drafts_are_sent():
    """16 lanes: the first steps run slow (new shapes), among them one that drafts 3, then steps
    without drafts run 8 ms faster. The fit first blames the drafts, but with no drafting step
    since, its draft term fades back to the shapes, or the plan would price drafts out for good."""
    overhead = LiveOverhead()
    for ks, excess in (([0] * 16, 10.0), ([0] * 16, 10.0), ([1, 1, 1] + [0] * 13, 17.0)):
        overhead.observe(ks, excess)
    assert overhead.estimate().per_draft_ms > 0.5
    for _ in range(80):
        overhead.observe([0] * 16, excess_ms=2.0)
    assert overhead.estimate().per_draft_ms < 0.25  # held, it came to 5 ms


def test_without_drafts_the_excess_is_all_per_lane_and_follows_recent_steps():
    overhead = LiveOverhead(decay=0.5)
    for _ in range(20):
        overhead.observe([0] * 4, excess_ms=40.0)
    assert overhead.estimate() == Overhead(per_lane_ms=pytest.approx(10.0))
    for _ in range(20):
        overhead.observe([0] * 4, excess_ms=8.0)
    assert overhead.estimate().per_lane_ms == pytest.approx(2.0, abs=0.01)


def test_a_machine_faster_than_its_calibration_still_pays_for_its_drafts():
    """Steps without drafts run 20 ms under the curve at B=8, and 6 drafts add 18 ms more than
    the curve says: the lanes' offset goes negative, and the drafts keep their cost."""
    overhead = LiveOverhead()
    for _ in range(30):
        overhead.observe([0] * 8, excess_ms=-20.0)
        overhead.observe([0] * 7 + [6], excess_ms=-2.0)
    fitted = overhead.estimate()
    assert fitted.per_lane_ms == pytest.approx(-2.5, abs=0.05)
    assert fitted.ms(8, 6, 2) == pytest.approx(-2.0, abs=0.3)
    assert fitted.per_draft_ms > 0


def test_drafts_that_look_cheaper_than_the_curve_are_held_at_zero_cost():
    overhead = LiveOverhead()
    for _ in range(10):
        overhead.observe([0] * 4, excess_ms=40.0)
        overhead.observe([8] * 4, excess_ms=20.0)
    fitted = overhead.estimate()
    assert fitted.per_draft_ms == 0.0 and fitted.per_group_ms == 0.0 and fitted.per_lane_ms > 0
    with pytest.raises(ValueError):
        LiveOverhead(decay=1.0)


CURVE = Calibration(points=[(1, 20.0), (2, 40.0), (4, 60.0), (8, 100.0), (16, 180.0),
                            (32, 340.0), (64, 660.0)])  # every token costs 10 ms past N=2


def _decide(overhead, idle_lanes: int = 0):
    """Goodput's decision for 8 code-edit lanes offering 8 drafts, and `idle_lanes` more that
    have none to offer."""
    stats = AcceptanceStats()
    for lane in range(8):
        for step in range(10):  # each draft lands less often than the one before
            stats.record(lane, "code-edit", 4, (0, 1, 2, 4)[step % 4])
    lanes = [LaneView(i, "code-edit", 8 if i < 8 else 0) for i in range(8 + idle_lanes)]
    return SpeculationPolicy(stats).decide(lanes, 0, Controls(policy="goodput", k=8), CURVE,
                                           lambda ks: 0.0, overhead=lambda: overhead)


def test_goodput_drafts_more_when_the_step_around_the_pass_is_costly():
    """A draft's cost is weighed against the whole step: the dearer the step, the cheaper the
    same draft is in comparison, so more drafts pay."""
    assert sum(_decide(Overhead(per_lane_ms=50.0)).ks) > sum(_decide(Overhead()).ks)


def test_goodput_drafts_less_when_drafts_cost_more_than_the_curve_says():
    assert sum(_decide(Overhead(per_draft_ms=10.0)).ks) < sum(_decide(Overhead()).ks)


def test_goodput_evens_out_draft_counts_when_each_count_costs_a_call():
    """A lane alone in its draft count costs an attention call per layer: where that is dear,
    lanes share fewer counts."""
    plain, grouped = _decide(Overhead()), _decide(Overhead(per_group_ms=40.0))
    assert query_groups(grouped.ks) <= query_groups(plain.ks)
    assert query_groups(grouped.ks) == 1


def test_lanes_with_nothing_to_offer_are_a_query_group_of_their_own_in_the_price():
    """Goodput plans only the lanes with drafts on offer, but the others still send their one
    query: with them in the batch the drafting lanes cannot share a single count, and the plan
    is priced with the extra attention call."""
    overhead = Overhead(per_group_ms=5.0)  # dear, but not so dear that no draft pays
    decision = _decide(overhead, idle_lanes=1)
    drafts = sum(decision.ks)
    assert decision.ks[8] == 0 and drafts > 0
    planned = float(re.search(r"tok in ([-\d.]+) ms", decision.reason).group(1))
    groups = query_groups(decision.ks)
    assert groups >= 2
    assert planned == pytest.approx(CURVE.step_ms(9, drafts) + overhead.ms(9, drafts, groups),
                                    abs=0.06)


def test_a_step_is_never_planned_below_a_share_of_the_curve():
    """A negative per-lane offset fitted at small B, extrapolated to a large one, would plan a
    step at or below zero: the plan keeps a share of t(N), so rates stay finite and positive."""
    decision = _decide(Overhead(per_lane_ms=-1000.0))
    assert len(decision.ks) == 8 and all(0 <= k <= 8 for k in decision.ks)
    match = re.search(r"tok in ([-\d.]+) ms", decision.reason)
    assert match and float(match.group(1)) >= MIN_CURVE_SHARE * CURVE.t_ms(8)
