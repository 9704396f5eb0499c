import pytest

from engine.spec.acceptance import AcceptanceCounter, AcceptanceStats, Estimate


def test_untested_drafts_after_a_rejection_are_not_failures():
    counter = AcceptanceCounter()
    counter.update(k=4, acc=1)  # one success, one failure, two never tested
    assert counter.rate == pytest.approx(0.5)
    assert counter.per_position() == [1.0, 0.0, 0.0, 0.0]


def test_rolling_rate_follows_recent_steps():
    counter = AcceptanceCounter(decay=0.5)
    for _ in range(10):
        counter.update(4, 4)
    for _ in range(10):
        counter.update(4, 0)
    assert counter.rate < 0.01


def test_first_and_continuation_rates_separate_all_or_nothing_drafts():
    counter = AcceptanceCounter()
    for _ in range(10):  # half the matches are the copied text (all accepted), half miss at once
        counter.update(k=4, acc=4)
        counter.update(k=4, acc=0)
    assert counter.first.value == pytest.approx(0.5, abs=0.05)
    assert counter.cont.value == 1.0                   # once the first is right the rest follow
    assert counter.rate == pytest.approx(0.8, abs=0.05)  # the per-token rate blurs the two
    counter.update(k=4, acc=2)                         # 1 continuation accepted, 1 rejected
    assert 0.5 < counter.cont.value < 1.0


def test_estimate_gains_and_expected_drafts():
    estimate = Estimate(first=0.5, cont=0.9)
    assert estimate.gain(1) == 0.5 and estimate.gain(3) == pytest.approx(0.5 * 0.81)
    assert estimate.expected(3) == pytest.approx(0.5 + 0.45 + 0.405)
    assert estimate.expected(0) == 0


def test_estimate_shrinks_lane_towards_category_towards_prior():
    stats = AcceptanceStats()
    assert stats.estimate(1, "code-edit", prior=Estimate(0.3, 0.6)) == Estimate(0.3, 0.6)
    for _ in range(20):
        stats.record(2, "code-edit", 4, 4)
    fresh = stats.estimate(1, "code-edit")
    assert fresh.first > 0.85 and fresh.cont > 0.85   # a new lane starts from its category
    stats.record(1, "code-edit", 2, 0)
    one_miss = stats.estimate(1, "code-edit")
    assert 0.3 < one_miss.first < 0.9                  # one miss does not pin it at zero
    assert one_miss.cont == fresh.cont                 # a first-draft miss says nothing of runs
    for _ in range(20):
        stats.record(1, "code-edit", 2, 0)
    assert stats.estimate(1, "code-edit").first < one_miss.first / 2


def test_bad_counts_are_rejected():
    with pytest.raises(ValueError):
        AcceptanceCounter().update(2, 3)
