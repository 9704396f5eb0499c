"""Shadow checks: unsent free drafts scored against what the lane then emitted."""
import pytest

from engine.spec.shadow import ShadowChecks


def test_a_check_resolves_at_the_first_mismatch_or_when_all_matched():
    checks = ShadowChecks(max_tokens=3)
    checks.watch(1, [10, 11, 12, 13])                 # only the first three are watched
    assert checks.observe(1, [10]) is None            # one step, one token: still open
    assert checks.observe(1, [11, 12]) == (3, 3)       # a drafting step may commit several
    checks.watch(1, [20, 21])
    assert checks.observe(1, [20, 99]) == (2, 1)
    assert checks.observe(1, [5]) is None              # nothing pending any more


def test_one_check_per_lane_and_forget():
    checks = ShadowChecks()
    checks.watch(1, [10, 11])
    checks.watch(1, [30, 31])                          # ignored: a check is pending
    checks.watch(2, [])                                # nothing offered, nothing to check
    assert checks.observe(2, [1]) is None
    assert checks.observe(1, [30]) == (2, 0)
    checks.watch(3, [1])
    checks.forget(3)
    assert checks.observe(3, [1]) is None


def test_needs_a_token():
    with pytest.raises(ValueError):
        ShadowChecks(max_tokens=0)
