"""Policies on their own, fed synthetic acceptance streams."""
import random

import pytest

from engine.controls import Controls
from engine.spec.acceptance import AcceptanceStats
from engine.spec.calibration import Calibration
from engine.spec.policies import HOLD_STEPS, PROBE_EVERY, LaneView, SpeculationPolicy

CURVE = Calibration.make_dummy(t1_ms=25.0, per_token_ms=1.0, knee=12)  # T = 12


def _free(ks):
    return 0.0


def _feed(stats, seq_id, cat, rate, steps=40, k=4, seed=0):
    rng = random.Random(seed + seq_id)
    for _ in range(steps):
        acc = 0
        while acc < k and rng.random() < rate:
            acc += 1
        stats.record(seq_id, cat, k, acc)


def _expected_rate(ks, rates, curve=CURVE):
    tokens = len(ks) + sum(sum(a ** j for j in range(1, k + 1)) for k, a in zip(ks, rates))
    return tokens / curve.t_ms(len(ks) + sum(ks))


def test_off_and_fixed():
    policy = SpeculationPolicy(AcceptanceStats())
    lanes = [LaneView(i, "chat", 8) for i in range(3)]
    assert policy.decide(lanes, 0, Controls(policy="off"), CURVE, _free).ks == [0, 0, 0]
    assert policy.decide(lanes, 0, Controls(policy="fixed", k=5), CURVE, _free).ks == [5, 5, 5]
    short = [LaneView(0, "chat", 2)]  # the drafter had only two tokens to offer
    assert policy.decide(short, 0, Controls(policy="fixed", k=5), CURVE, _free).ks == [2]


def test_uniform_is_the_seed_rule():
    policy = SpeculationPolicy(AcceptanceStats())
    decision = policy.decide([LaneView(i, "chat", 16) for i in range(4)], 0,
                             Controls(policy="uniform", k=16), CURVE, _free)
    assert decision.ks == [2] * 4  # floor((12 - 4) / 4)
    assert "uniform" in decision.reason


def test_goodput_beats_uniform_on_mixed_lanes():
    stats = AcceptanceStats()
    rates = [0.9, 0.9, 0.1, 0.1]
    cats = ["code-edit", "code-edit", "chat", "chat"]
    for i, (a, cat) in enumerate(zip(rates, cats)):
        _feed(stats, i, cat, a)
    estimates = [stats.estimate(i, c) for i, c in enumerate(cats)]
    lanes = [LaneView(i, c, 16) for i, c in enumerate(cats)]
    controls = Controls(policy="goodput", k=16, min_acceptance=0.0)
    good = SpeculationPolicy(stats).decide(lanes, 0, controls, CURVE, _free)
    uni = SpeculationPolicy(stats).decide(lanes, 0, controls.updated({"policy": "uniform"}),
                                          CURVE, _free)
    assert good.ks[0] > good.ks[2] and good.ks[1] > good.ks[3]  # different k in one step
    assert _expected_rate(good.ks, estimates) > 1.1 * _expected_rate(uni.ks, estimates)


def test_goodput_k_falls_as_the_batch_grows():
    stats = AcceptanceStats()
    totals = []
    for batch in (1, 4, 16, 32):
        for i in range(batch):
            _feed(stats, i, "code-edit", 0.7, steps=10)
        policy = SpeculationPolicy(stats)
        decision = policy.decide([LaneView(i, "code-edit", 16) for i in range(batch)], 0,
                                 Controls(policy="goodput", k=16), CURVE, _free)
        totals.append(sum(decision.ks) / batch)
    assert totals == sorted(totals, reverse=True) and totals[0] > totals[-1]
    assert totals[-1] < 1


def test_goodput_charges_drafting_cost():
    stats = AcceptanceStats()
    _feed(stats, 0, "chat", 0.5)
    lanes = [LaneView(0, "chat", 16)]
    controls = Controls(policy="goodput", k=16)
    cheap = SpeculationPolicy(stats).decide(lanes, 0, controls, CURVE, _free)
    costly = SpeculationPolicy(stats).decide(lanes, 0, controls, CURVE,
                                             lambda ks: 20.0 * max(ks, default=0))
    assert sum(costly.ks) < sum(cheap.ks)


def test_speculation_ceiling_stops_drafting():
    policy = SpeculationPolicy(AcceptanceStats())
    lanes = [LaneView(i, "chat", 8) for i in range(5)]
    decision = policy.decide(lanes, 0, Controls(policy="fixed", k=4, spec_ceiling=4), CURVE, _free)
    assert decision.ks == [0] * 5 and "ceiling" in decision.reason


def test_low_acceptance_lane_is_muted_then_reprobed():
    stats = AcceptanceStats()
    _feed(stats, 0, "chat", 0.0)
    _feed(stats, 1, "code-edit", 0.9)
    policy = SpeculationPolicy(stats)
    controls = Controls(policy="fixed", k=4, min_acceptance=0.2)
    lanes = [LaneView(0, "chat", 8), LaneView(1, "code-edit", 8)]
    seen = [policy.decide(lanes, 0, controls, CURVE, _free).ks for _ in range(PROBE_EVERY)]
    assert all(ks[1] == 4 for ks in seen)
    assert [ks[0] for ks in seen] == [0] * (PROBE_EVERY - 1) + [1]  # one cheap re-probe
    for _ in range(5):  # the probes succeed: the lane recovers
        stats.record(0, "chat", 1, 1)
    assert policy.decide(lanes, 0, controls, CURVE, _free).ks[0] == 4


def test_hysteresis_holds_one_step_wobbles():
    stats = AcceptanceStats()
    policy = SpeculationPolicy(stats)
    controls = Controls(policy="uniform", k=16)
    lanes = [LaneView(0, "chat", 16), LaneView(1, "chat", 16)]
    first = policy.decide(lanes, 0, controls, CURVE, _free).ks        # floor(10 / 2) = 5
    three = lanes + [LaneView(2, "chat", 16)]
    wobble = policy.decide(three, 0, controls, CURVE, _free).ks       # wish 3: a jump of 2
    assert first == [5, 5] and wobble == [3, 3, 3]
    override = controls.updated({"budget_override": 13})             # wish floor(10/3) = 3
    four = controls.updated({"budget_override": 15})                  # wish 4: a step of one
    held = [policy.decide(three, 0, four, CURVE, _free).ks for _ in range(HOLD_STEPS)]
    assert held[0] == [3, 3, 3] and held[-1] == [4, 4, 4]
    assert policy.decide(three, 0, override, CURVE, _free).ks == [4, 4, 4]  # held again


def test_budget_override_moves_the_goodput_knee():
    stats = AcceptanceStats()
    _feed(stats, 0, "code-edit", 0.95)
    lanes = [LaneView(0, "code-edit", 32)]
    base = SpeculationPolicy(stats).decide(lanes, 0, Controls(k=32), CURVE, _free)
    wide = SpeculationPolicy(stats).decide(lanes, 0, Controls(k=32, budget_override=24), CURVE,
                                           _free)
    assert sum(wide.ks) > sum(base.ks)


@pytest.mark.parametrize("policy", ["off", "fixed", "uniform", "goodput"])
def test_every_decision_has_a_reason_and_one_k_per_lane(policy):
    lanes = [LaneView(i, "json", 3) for i in range(6)]
    decision = SpeculationPolicy(AcceptanceStats()).decide(lanes, 10, Controls(policy=policy),
                                                           CURVE, _free)
    assert len(decision.ks) == 6 and decision.reason
    assert all(0 <= k <= 3 for k in decision.ks)
