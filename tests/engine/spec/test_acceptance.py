import pytest

from engine.spec.acceptance import AcceptanceCounter, AcceptanceStats


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


def test_estimate_shrinks_lane_towards_category_towards_prior():
    stats = AcceptanceStats()
    assert stats.estimate(1, "code-edit", prior=0.3) == 0.3
    for _ in range(20):
        stats.record(2, "code-edit", 4, 4)
    assert stats.estimate(1, "code-edit") > 0.9      # a new lane starts from its category
    stats.record(1, "code-edit", 2, 0)
    one_miss = stats.estimate(1, "code-edit")
    assert 0.3 < one_miss < 0.9                       # one miss does not pin it at zero
    for _ in range(20):
        stats.record(1, "code-edit", 2, 0)
    assert stats.estimate(1, "code-edit") < one_miss / 2


def test_bad_counts_are_rejected():
    with pytest.raises(ValueError):
        AcceptanceCounter().update(2, 3)
