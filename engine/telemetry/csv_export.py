"""Exports step records to CSV, one row per step, for notebooks. Derived columns are computed by
StepRecord's properties (one definition); lanes go in as a JSON column."""
from __future__ import annotations

import csv
import json
from dataclasses import asdict
from pathlib import Path

from engine.errors import TraceError
from engine.telemetry.records import StepRecord

COLUMNS = ("step", "t", "dt_ms", "batch", "prefill", "budget", "policy", "ragged", "drafted",
           "accepted", "emitted", "padding", "pass_tokens", "acceptance_rate", "reason", "lanes")


def write_csv(steps: list[StepRecord], path: str | Path) -> None:
    try:
        with open(path, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(COLUMNS)
            for s in steps:
                rate = s.acceptance_rate
                writer.writerow([s.step, s.t, s.dt_ms, s.batch, s.prefill, s.budget, s.policy,
                                 s.ragged, s.drafted, s.accepted, s.emitted, s.padding,
                                 s.pass_tokens, "" if rate is None else rate, s.reason,
                                 json.dumps([asdict(lane) for lane in s.lanes])])
    except OSError as exc:
        raise TraceError(path, None, f"cannot write CSV: {exc.strerror}") from None
