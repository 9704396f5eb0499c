"""Live controls: K defaults by policy; their command-line spelling."""
import math

import pytest

from engine.controls import ADAPTIVE_CAP, FIXED_K, Controls, parse_change, parse_mix


def test_k_defaults_to_its_policy_and_an_explicit_k_wins():
    assert Controls().policy == "goodput" and Controls().k == ADAPTIVE_CAP
    assert Controls(policy="fixed").k == FIXED_K < ADAPTIVE_CAP == Controls(policy="uniform").k
    assert Controls(policy="goodput", k=2).k == 2
    assert Controls(policy="fixed").updated({"policy": "goodput"}).k == FIXED_K  # kept live
    with pytest.raises(ValueError):
        Controls(k=65)


def test_a_mix_names_its_categories_and_the_others_weigh_nothing():
    assert parse_mix("code-edit=2, chat=0.5") == {"code-edit": 2.0, "chat": 0.5, "json": 0.0}
    for bad, words in (("code=1", "CATEGORY=WEIGHT"), ("chat", "CATEGORY=WEIGHT"),
                       ("chat=lots", "the weight of chat, 'lots', is not a number")):
        with pytest.raises(ValueError, match=words):
            parse_mix(bad)
    with pytest.raises(ValueError, match="not all 0"):
        Controls(mix=parse_mix("chat=0"))


def test_a_timed_change_is_parsed_by_its_controls_type():
    assert parse_change("30:policy=off") == (30.0, {"policy": "off"})
    assert parse_change("1.5:batch-ceiling=4") == (1.5, {"batch_ceiling": 4})
    assert parse_change("0:budget_override=calibrated") == (0.0, {"budget_override": None})
    assert parse_change("2:budget_override=12") == (2.0, {"budget_override": 12})
    assert parse_change("2:paused=true") == (2.0, {"paused": True})
    assert parse_change("9:mix=chat=1") == (9.0, {"mix": {"code-edit": 0.0, "chat": 1.0,
                                                           "json": 0.0}})
    assert parse_change("3:min_acceptance=0.25") == (3.0, {"min_acceptance": 0.25})
    for bad, words in (("policy=off", "SECONDS:NAME=VALUE"), ("30:policy", "SECONDS:NAME=VALUE"),
                       ("soon:k=2", "not a number of seconds"), ("-1:k=2", ">= 0"),
                       ("nan:k=2", "finite"), ("inf:k=2", "finite"),
                       ("5:speed=9", "no control 'speed'"), ("5:k=two", "'5:k=two'"),
                       ("5:paused=maybe", "not true or false")):
        with pytest.raises(ValueError, match=words):
            parse_change(bad)


@pytest.mark.parametrize("bad", [dict(tool_latency_s=float("nan")), dict(tool_latency_s=math.inf),
                                 dict(mix={"code-edit": float("nan"), "chat": 1.0, "json": 1.0}),
                                 dict(min_acceptance=float("nan"))])
def test_numbers_that_are_not_finite_are_refused(bad):
    """NaN passed every `x < 0` check: a NaN tool latency left agents in their tool for good."""
    with pytest.raises(ValueError):
        Controls(**bad)

