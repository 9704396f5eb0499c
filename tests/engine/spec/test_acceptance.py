import pytest

from engine.spec.acceptance import AcceptanceCounter, AcceptanceStats, Estimate


def test_untested_drafts_after_a_rejection_are_not_failures():
    counter = AcceptanceCounter()
    counter.update(k=4, acc=1, copying=False)  # one success, one failure, two never tested
    assert counter.rate == pytest.approx(0.5)
    assert counter.per_position() == [1.0, 0.0, 0.0, 0.0]


def test_rolling_rate_follows_recent_steps():
    counter = AcceptanceCounter(decay=0.5)
    for _ in range(10):
        counter.update(4, 4, copying=True)
    for _ in range(10):
        counter.update(4, 0, copying=False)
    assert counter.rate < 0.01


def test_start_and_continuation_rates_separate_all_or_nothing_drafts():
    counter = AcceptanceCounter()
    for _ in range(10):  # half the matches are the copied text (all accepted), half miss at once
        counter.update(k=4, acc=4, copying=False)
        counter.update(k=4, acc=0, copying=False)
    assert counter.start[0].value == pytest.approx(0.5, abs=0.05)
    assert counter.cont.value == 1.0                   # once the first is right the rest follow
    assert counter.rate == pytest.approx(0.8, abs=0.05)  # the per-token rate blurs the two
    counter.update(k=4, acc=2, copying=False)          # 1 continuation accepted, 1 rejected
    assert 0.5 < counter.cont.value < 1.0
    start, cont = counter.start[0].trials, counter.cont.value
    counter.update(k=2, acc=0, copying=True)           # a copying lane's miss is a broken run
    assert counter.start[0].trials == start and counter.cont.value < cont


def test_cold_starts_are_rated_by_what_the_drafter_matched():
    """A 4-gram match that is the copied text and a 2-gram coincidence: one start rate would
    blur them to 0.5 for both."""
    stats = AcceptanceStats()
    for step in range(20):
        stats.record(1, "code-edit", 3, 3 if step % 2 else 0, match=4 if step % 2 else 2)
        stats.record(1, "code-edit", 0, 0)  # the lane goes cold again
    strong = stats.estimate(1, "code-edit", match=4)
    weak = stats.estimate(1, "code-edit", match=2)
    assert strong.first > 0.8 and weak.first < 0.2
    assert stats.estimate(1, "code-edit", match=3).first == pytest.approx(0.5)  # nothing known
    assert strong.cont == weak.cont


def test_shadow_checks_feed_the_rates_but_not_the_per_position_counts():
    counter = AcceptanceCounter()
    counter.observe(True, copying=False)
    counter.observe(False, copying=True)
    assert counter.start[0].value == 1.0 and counter.cont.value == 0.0
    assert counter.rate == pytest.approx(0.5, abs=0.02)
    assert counter.steps == 0 and counter.proposed_at == []


def test_a_lane_copies_while_its_predictions_hit():
    stats = AcceptanceStats()
    assert not stats.copying(1)
    stats.record(1, "code-edit", 4, 4)                 # every draft accepted: the run goes on
    assert stats.copying(1)
    stats.record(1, "code-edit", 4, 4, next_hit=False)  # ...until the token after them missed
    assert not stats.copying(1)
    stats.record(1, "code-edit", 0, 0, next_hit=True)  # an idle lane's shadow check hit
    assert stats.copying(1)
    stats.record(1, "code-edit", 3, 1, next_hit=True)  # a rejected draft breaks the run; the
    assert not stats.copying(1)                        # bonus replaced it, nothing was checked
    stats.record(1, "code-edit", 0, 0, next_hit=True)
    stats.record(1, "code-edit", 0, 0)                 # the drafter predicted nothing
    assert not stats.copying(1)


def test_estimate_of_a_copying_lane_starts_at_the_continuation_rate():
    stats = AcceptanceStats()
    for _ in range(10):  # a cold start is a coin flip; once copying, the copy runs on
        stats.record(1, "code-edit", 4, 4)
        stats.record(1, "code-edit", 0, 0)             # the copied text ran out
        stats.record(1, "code-edit", 4, 0)
    cold = stats.estimate(1, "code-edit")
    stats.record(1, "code-edit", 0, 0, next_hit=True)
    hot = stats.estimate(1, "code-edit")
    assert cold.first < 0.6 < 0.9 < hot.first == hot.cont == cold.cont


def test_estimate_gains_and_expected_drafts():
    estimate = Estimate(first=0.5, cont=0.9)
    assert estimate.gain(1) == 0.5 and estimate.gain(3) == pytest.approx(0.5 * 0.81)
    assert estimate.expected(3) == pytest.approx(0.5 + 0.45 + 0.405)
    assert estimate.expected(0) == 0


def test_estimate_shrinks_lane_towards_category_towards_prior():
    stats = AcceptanceStats()
    assert stats.estimate(1, "code-edit", prior=Estimate(0.3, 0.6)) == Estimate(0.3, 0.6)
    for lane in range(2, 22):  # cold lanes whose drafts all land
        stats.record(lane, "code-edit", 4, 4)
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
        AcceptanceCounter().update(2, 3, copying=False)
