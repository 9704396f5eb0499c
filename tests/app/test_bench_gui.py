"""`swarmscope bench gui` on the tiny model: both measurements run and report what they claim."""
import json

import pytest

from engine.cli.main import main


@pytest.mark.slow
def test_bench_gui_runs_the_same_work_headless_and_windowed(capsys, qapp):
    rc = main(["bench", "gui", "--model", "tiny-test", "--steps", "200", "--frames", "5",
               "--engine-steps", "20", "--rounds", "1", "--agents", "3", "--json"])
    assert rc == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["fps"] > 0 and result["rounds"] == 1
    # Each run emitted the same tokens (checked by the bench itself), so the ratio is of times.
    assert result["headless_tok_s"] > 0 and result["windowed_tok_s"] > 0
    assert result["ratio"] == pytest.approx(result["windowed_tok_s"] / result["headless_tok_s"],
                                            rel=0.01)


def test_bench_gui_rejects_bad_counts(capsys):
    for option in ("--engine-steps", "--lanes", "--frames"):
        assert main(["bench", "gui", option, "0", "--skip-engine"]) == 2
        assert "must be >= 1" in capsys.readouterr().err
