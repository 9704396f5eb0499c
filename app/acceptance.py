"""Acceptance aggregated over a run of step records: per draft position, per category, per agent,
and the mean acceptance length (bonus token counted, DESIGN §3). Qt-free; readers aggregate."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from engine.telemetry.records import StepRecord


@dataclass(slots=True)
class AcceptanceStats:
    by_position: np.ndarray          # [max_k] P(draft j accepted | draft j proposed), j = 1..max_k
    by_category: dict[str, float]    # accepted / drafted
    by_agent: dict[int, float]       # accepted / drafted
    mean_acceptance_length: float | None

    @classmethod
    def from_records(cls, records: list[StepRecord]) -> "AcceptanceStats":
        ks = [lane.k for rec in records for lane in rec.lanes if lane.k > 0]
        accs = [lane.acc for rec in records for lane in rec.lanes if lane.k > 0]
        if not ks:
            return cls(np.zeros(0), {}, {}, None)
        width = max(ks) + 1
        # Draft j was proposed by every lane with k >= j and accepted by every lane with acc >= j:
        # reverse cumulative counts give both without a loop over positions.
        proposed = np.cumsum(np.bincount(ks, minlength=width)[::-1])[::-1][1:]
        accepted = np.cumsum(np.bincount(accs, minlength=width)[::-1])[::-1][1:]
        drafted_by = defaultdict(lambda: [0, 0])
        for rec in records:
            for lane in rec.lanes:
                for key in (("cat", lane.cat), ("agent", lane.agent)):
                    drafted_by[key][0] += lane.acc
                    drafted_by[key][1] += lane.k
        ratio = {key: acc / k for key, (acc, k) in drafted_by.items() if k}
        return cls(
            by_position=accepted / np.maximum(proposed, 1),
            by_category={name: r for (kind, name), r in ratio.items() if kind == "cat"},
            by_agent={name: r for (kind, name), r in ratio.items() if kind == "agent"},
            mean_acceptance_length=1 + sum(accs) / len(ks))
