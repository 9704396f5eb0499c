"""The step record (DESIGN.md §3): one per engine step, the single source for views, traces and
benchmarks. Field names are fixed by the design; derived numbers are properties, never stored.

Naming convention, in one place: *mean acceptance length* counts the bonus token (as vLLM does),
*acceptance rate* does not."""
from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field

POLICIES = ("off", "fixed", "uniform", "goodput")
LAYOUTS = ("packed", "padded")


@dataclass(slots=True)
class LaneRecord:
    agent: int   # agent (or prompt) id
    cat: str     # workload category
    k: int       # drafts proposed
    acc: int     # drafts accepted, 0..k; the bonus token is not counted here
    pad: int     # padded slots wasted for this lane (0 in the packed layout)
    ctx: int     # context length before the step

    def __post_init__(self) -> None:
        if not 0 <= self.acc <= self.k:
            raise ValueError(f"lane {self.agent}: acc={self.acc} outside 0..k={self.k}")
        if self.pad < 0 or self.ctx < 0:
            raise ValueError(f"lane {self.agent}: pad and ctx must be >= 0")


@dataclass(slots=True)
class StepRecord:
    step: int
    t: float        # seconds since session start, at step start
    dt_ms: float    # wall time of the step (drafting + forward + verification)
    batch: int      # decoding lanes in this step (B)
    prefill: int    # prefill tokens scheduled in this step
    budget: int     # T in force
    policy: str
    ragged: str
    lanes: list[LaneRecord] = field(default_factory=list)
    reason: str = ""

    # -- derived (DESIGN.md §3) --
    @property
    def committed(self) -> int:
        return self.batch

    @property
    def drafted(self) -> int:
        return sum(lane.k for lane in self.lanes)

    @property
    def accepted(self) -> int:
        return sum(lane.acc for lane in self.lanes)

    @property
    def emitted(self) -> int:
        return self.batch + self.accepted

    @property
    def padding(self) -> int:
        return sum(lane.pad for lane in self.lanes)

    @property
    def pass_tokens(self) -> int:
        return self.batch + self.drafted + self.prefill + self.padding

    @property
    def acceptance_rate(self) -> float | None:
        drafted = self.drafted
        return self.accepted / drafted if drafted else None

    @property
    def mean_acceptance_length(self) -> float | None:
        speculating = sum(1 for lane in self.lanes if lane.k > 0)
        return 1 + self.accepted / speculating if speculating else None

    # -- serialisation --
    def to_dict(self) -> dict:
        return {"type": "step", **asdict(self)}

    @classmethod
    def from_dict(cls, data: dict) -> "StepRecord":
        fields = {k: v for k, v in data.items() if k != "type"}
        fields["lanes"] = [LaneRecord(**lane) for lane in fields.get("lanes", [])]
        return cls(**fields)

    @classmethod
    def make_dummy(cls, step: int = 0, batch: int = 4, budget: int = 16, policy: str = "goodput",
                   ragged: str = "packed", seed: int | None = None) -> "StepRecord":
        """A plausible record for tests and for building views before an engine runs."""
        rng = random.Random(step if seed is None else seed)
        cats = ("code-edit", "chat", "json")
        lanes = []
        for i in range(batch):
            k = 0 if policy == "off" else rng.randint(0, max(0, (budget - batch) // max(batch, 1)))
            lanes.append(LaneRecord(agent=i, cat=cats[i % 3], k=k, acc=rng.randint(0, k), pad=0,
                                    ctx=rng.randint(50, 2000)))
        if ragged == "padded":
            width = max(lane.k for lane in lanes) if lanes else 0
            for lane in lanes:
                lane.pad = width - lane.k
        return cls(step=step, t=step * 0.05, dt_ms=40.0 + rng.random() * 10, batch=batch,
                   prefill=rng.choice((0, 0, 0, 32)), budget=budget, policy=policy, ragged=ragged,
                   lanes=lanes, reason=f"dummy: B={batch}")
