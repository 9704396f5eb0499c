import pytest

from engine.spec.acceptance import AcceptanceCounter, AcceptanceStats, Estimate, run_bucket


def test_untested_drafts_after_a_rejection_are_not_failures():
    counter = AcceptanceCounter()
    counter.update(k=4, acc=1)  # one success, one failure, two never tested
    assert counter.rate == pytest.approx(0.5)
    assert counter.per_position() == [1.0, 0.0, 0.0, 0.0]


def test_rolling_rate_follows_recent_steps():
    counter = AcceptanceCounter(decay=0.5)
    for _ in range(10):
        counter.update(4, 4, run=8)
    for _ in range(10):
        counter.update(4, 0)
    assert counter.rate < 0.01


def test_rates_by_run_separate_all_or_nothing_drafts():
    counter = AcceptanceCounter()
    for _ in range(10):  # half the matches are the copied text (all accepted), half miss at once
        counter.update(k=4, acc=4)
        counter.update(k=4, acc=0)
    assert counter.start[0].value == pytest.approx(0.5, abs=0.05)
    assert [counter.rate_at(run).value for run in (1, 2, 3)] == [1.0] * 3  # the rest follow
    assert counter.rate == pytest.approx(0.8, abs=0.05)  # the per-token rate blurs the two
    counter.update(k=4, acc=2)                         # right on runs 0 and 1, wrong on run 2
    assert counter.rate_at(1).value == 1.0 and 0.5 < counter.rate_at(2).value < 1.0
    assert counter.rate_at(3) is counter.rate_at(2)
    start, long_run = counter.start[0].trials, counter.rate_at(20).trials
    counter.update(k=2, acc=0, run=20)                 # a long run's miss is not a cold start
    assert counter.start[0].trials == start and counter.rate_at(20).trials == long_run + 1
    assert counter.rate_at(4) is counter.rate_at(100)


def test_runs_share_rates_in_widening_buckets():
    assert [run_bucket(run) for run in (0, 1, 2, 3, 4, 500)] == [-1, 0, 1, 1, 2, 2]


def test_cold_starts_are_rated_by_what_the_drafter_matched():
    """A 4-gram match that is the copied text and a 2-gram coincidence: one start rate would
    blur them to 0.5 for both."""
    stats = AcceptanceStats()
    for step in range(20):
        stats.record(1, "code-edit", 3, 3 if step % 2 else 0, match=4 if step % 2 else 2)
        stats.record(1, "code-edit", 0, 0)  # the lane goes cold again
    strong = stats.estimate(1, "code-edit", match=4, depth=3)
    weak = stats.estimate(1, "code-edit", match=2, depth=3)
    assert strong.first > 0.8 and weak.first < 0.2
    assert stats.estimate(1, "code-edit", match=3).first == pytest.approx(0.5)  # nothing known
    # once right, a copy goes on; no copy from a 2-gram went on yet, so it goes on as all runs do
    assert strong.hit(2) > weak.hit(2) > 0.8


def test_runs_are_rated_by_the_match_their_source_was_found_on():
    """Copies found on a 2-gram break off after one right draft, those found on a 4-gram go on:
    a lane on a run of 1 is forecast by its source's match, not by all runs alike."""
    stats = AcceptanceStats()
    for step in range(30):
        lane = step % 2
        stats.record(lane, "code-edit", 4, 4 if lane else 1, match=4 if lane else 2)
        stats.record(lane, "code-edit", 0, 0)  # cold again
    stats.record(2, "code-edit", 1, 1, match=4)  # a new lane, one right: now on a run of 1
    from_4gram = stats.estimate(2, "code-edit", match=4, depth=3)
    from_2gram = stats.estimate(2, "code-edit", match=2, depth=3)
    assert stats.run(2) == 1
    assert from_4gram.first > 0.8 and from_2gram.first < 0.3
    pooled = stats.category("code-edit").rate_at(1).value
    assert from_2gram.first < pooled < from_4gram.first


def test_a_lanes_own_runs_count_only_for_sources_matched_alike():
    """Lane 1's copies found on 4-grams go on; lane 2's found on 2-grams break off. Back on a run
    of 1 from a 2-gram source, lane 1 is forecast as a lane without runs of its own would be:
    its 4-gram copies say nothing of this one."""
    stats = AcceptanceStats()
    for _ in range(10):
        stats.record(1, "code-edit", 4, 4, match=4)
        stats.record(1, "code-edit", 0, 0)
        stats.record(2, "code-edit", 4, 1, match=2)
        stats.record(2, "code-edit", 0, 0)
    for lane in (1, 3):  # lane 3 is new
        stats.record(lane, "code-edit", 1, 1, match=2)
    copier, newcomer = (stats.estimate(lane, "code-edit", match=2) for lane in (1, 3))
    assert stats.run(1) == stats.run(3) == 1
    assert copier.first == pytest.approx(newcomer.first) and copier.first < 0.3


def test_shadow_checks_feed_the_rates_but_not_the_per_position_counts():
    counter = AcceptanceCounter()
    counter.observe(True)
    counter.observe(False, run=5)
    assert counter.start[0].value == 1.0 and counter.rate_at(5).value == 0.0
    assert counter.rate == pytest.approx(0.5, abs=0.02)
    assert counter.steps == 0 and counter.proposed_at == []


def test_a_lane_runs_while_its_predictions_hit():
    stats = AcceptanceStats()
    assert stats.run(1) == 0
    stats.record(1, "code-edit", 4, 4)                 # every draft accepted: the run goes on
    assert stats.run(1) == 4
    stats.record(1, "code-edit", 4, 4, next_hit=True)  # ...and the token after them was right
    assert stats.run(1) == 9
    stats.record(1, "code-edit", 4, 4, next_hit=False)  # ...until the token after them missed
    assert stats.run(1) == 0
    stats.record(1, "code-edit", 0, 0, next_hit=True)  # an idle lane's shadow check hit
    assert stats.run(1) == 1
    stats.record(1, "code-edit", 3, 1, next_hit=True)  # a rejected draft breaks the run; the
    assert stats.run(1) == 0                           # bonus replaced it, nothing was checked
    stats.record(1, "code-edit", 0, 0, next_hit=True)
    stats.record(1, "code-edit", 0, 0)                 # the drafter predicted nothing
    assert stats.run(1) == 0


def test_a_drafts_chance_depends_on_the_run_it_is_predicted_on():
    """Lanes whose copies always break on the third token: from cold the first two drafts land
    and the third fails, so a lane already two tokens into its run should expect nothing."""
    stats = AcceptanceStats()
    for lane in range(2, 32):
        stats.record(lane, "code-edit", 8, 2)
    cold = stats.estimate(1, "code-edit", depth=4)
    assert cold.first > 0.85 and cold.hit(2) > 0.85 and cold.hit(3) < 0.25
    assert cold.expected(8) == pytest.approx(cold.expected(2), abs=0.2)
    stats.record(1, "code-edit", 0, 0, next_hit=True)
    stats.record(1, "code-edit", 0, 0, next_hit=True)  # its own shadow checks: a run of two
    assert stats.run(1) == 2 and stats.estimate(1, "code-edit", depth=4).first < 0.25


def test_estimate_gains_and_expected_drafts():
    estimate = Estimate((0.5, 0.9))                    # the last rate holds past the end
    assert estimate.expected(1) == 0.5
    assert estimate.expected(3) == pytest.approx(0.5 + 0.45 + 0.405)
    assert estimate.expected(0) == 0
    climbing = Estimate((0.5, 0.8, 1.0))
    assert climbing.expected(5) - climbing.expected(4) == pytest.approx(0.4)
    assert climbing.hit(10) == 1.0
    with pytest.raises(ValueError):
        Estimate(())


def test_estimate_shrinks_lane_towards_category_towards_prior():
    stats = AcceptanceStats()
    nothing = stats.estimate(1, "code-edit", prior=0.3, depth=4)
    assert [nothing.hit(j) for j in range(1, 9)] == [0.3] * 8
    for lane in range(2, 22):  # cold lanes whose drafts all land
        stats.record(lane, "code-edit", 4, 4)
    fresh = stats.estimate(1, "code-edit", depth=4)
    assert fresh.first > 0.85 and fresh.hit(2) > 0.85  # a new lane starts from its category
    stats.record(1, "code-edit", 2, 0)
    one_miss = stats.estimate(1, "code-edit", depth=4)
    assert 0.3 < one_miss.first < 0.9  # one miss does not pin it at zero, nor says anything of
    assert [one_miss.hit(j) for j in (2, 3, 4)] == [fresh.hit(j) for j in (2, 3, 4)]  # nor runs
    for _ in range(20):
        stats.record(1, "code-edit", 2, 0)
    assert stats.estimate(1, "code-edit").first < one_miss.first / 2


def test_bad_counts_are_rejected():
    with pytest.raises(ValueError):
        AcceptanceCounter().update(2, 3)
