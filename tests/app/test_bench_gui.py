"""`swarmscope bench gui` on the tiny model: both measurements run and report what they claim."""
import json
import statistics

import pytest

from engine.cli.main import main


@pytest.mark.slow
def test_bench_gui_runs_the_same_work_headless_and_windowed(capsys, qapp):
    rc = main(["bench", "gui", "--model", "tiny-test", "--steps", "200", "--frames", "5",
               "--engine-steps", "20", "--rounds", "2", "--agents", "3", "--json"])
    assert rc == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["fps"] > 0 and result["rounds"] == 2
    # Each run emitted the same tokens (checked by the bench itself), so the ratio is of times.
    assert result["headless_tok_s"] > 0 and result["windowed_tok_s"] > 0
    assert result["ratio"] == pytest.approx(result["windowed_tok_s"] / result["headless_tok_s"],
                                            rel=0.01)
    # the ratio's spread is that of the paired rounds (each round: headless, then windowed)
    rounds = result["round_ratios"]
    assert len(rounds) == 2 and min(rounds) <= result["ratio"] * 1.01 and \
        max(rounds) >= result["ratio"] * 0.99
    assert result["ratio_se"] == pytest.approx(statistics.stdev(rounds) / 2 ** 0.5, abs=2e-3)


def test_bench_gui_rejects_bad_counts(capsys):
    for option in ("--engine-steps", "--lanes", "--frames"):
        assert main(["bench", "gui", option, "0", "--skip-engine"]) == 2
        assert "must be >= 1" in capsys.readouterr().err
