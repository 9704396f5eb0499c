"""Live controls: K defaults by policy."""
import pytest

from engine.controls import ADAPTIVE_CAP, FIXED_K, Controls


def test_k_defaults_to_its_policy_and_an_explicit_k_wins():
    assert Controls().policy == "goodput" and Controls().k == ADAPTIVE_CAP
    assert Controls(policy="fixed").k == FIXED_K < ADAPTIVE_CAP == Controls(policy="uniform").k
    assert Controls(policy="goodput", k=2).k == 2
    assert Controls(policy="fixed").updated({"policy": "goodput"}).k == FIXED_K  # kept live
    with pytest.raises(ValueError):
        Controls(k=65)
