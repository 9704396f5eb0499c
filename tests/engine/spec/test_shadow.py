"""Shadow checks: the drafter's unsent prediction of the token after the sent drafts."""
from engine.spec.shadow import ShadowChecks


def test_the_token_after_the_sent_drafts_is_checked_against_the_bonus():
    checks = ShadowChecks()
    checks.watch(1, [10, 11, 12], sent=0)              # an idle lane: its first offer
    assert checks.check(1, sent=0, accepted=0, bonus=10) is True
    checks.watch(1, [10, 11, 12], sent=2)              # two sent, both accepted: 12 is checked
    assert checks.check(1, sent=2, accepted=2, bonus=13) is False
    assert checks.check(1, sent=0, accepted=0, bonus=13) is None  # checked once only


def test_nothing_to_check_after_a_rejection_or_without_an_offer():
    checks = ShadowChecks()
    checks.watch(1, [10, 11, 12], sent=2)
    assert checks.check(1, sent=2, accepted=1, bonus=11) is None  # the bonus replaced a draft
    checks.watch(2, [10, 11], sent=2)                  # every offered token was sent
    assert checks.check(2, sent=2, accepted=2, bonus=12) is None
    checks.watch(3, [7], sent=0)
    checks.forget(3)
    assert checks.check(3, sent=0, accepted=0, bonus=7) is None
