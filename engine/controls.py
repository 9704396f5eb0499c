"""Live controls (DESIGN.md §3) and the mailbox the engine reads at step boundaries.

The window (or a CLI) posts changes from any thread; the engine drains them before a step, so a
change takes effect at the next step and is logged once as a control event."""
from __future__ import annotations

import math
import threading
from dataclasses import asdict, dataclass, field, fields, replace

from engine.telemetry.records import LAYOUTS, POLICIES

CATEGORIES = ("code-edit", "chat", "json")
# K when none is given, by policy. Fixed drafts K at every lane, where 4 suits batches. For uniform
# and goodput K is only a cap, and a copying lane's deep drafts pay: in bench spec, code edits at
# B=1-2, fixed 8 beat fixed 4 by 6-13 %, and goodput capped at 16 ran 1.00-1.04x the best.
FIXED_K = 4
ADAPTIVE_CAP = 16
DEFAULT_K = {"off": FIXED_K, "fixed": FIXED_K, "uniform": ADAPTIVE_CAP, "goodput": ADAPTIVE_CAP}


@dataclass(slots=True)
class Controls:
    policy: str = "goodput"          # off | fixed | uniform | goodput
    k: int | None = None             # drafts per lane for fixed, the cap for others;
                                     # None: DEFAULT_K[policy]
    batch_ceiling: int = 16          # most lanes decoding at once; the rest wait
    spec_ceiling: int = 64           # no drafting when the live batch exceeds this
    budget_override: int | None = None  # T to use instead of the calibrated one
    ragged: str = "packed"           # packed | padded
    drafter: str = "lookup"          # lookup | self | a draft model path
    min_acceptance: float = 0.1      # a lane or category below this stops drafting (re-probed)
    swarm_size: int = 8              # simulated agents (0: only API clients' agents)
    tool_latency_s: float = 1.0      # median tool-call latency
    mix: dict[str, float] = field(default_factory=lambda: {c: 1.0 for c in CATEGORIES})
    paused: bool = False

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"policy must be one of {POLICIES}, got {self.policy!r}")
        if self.k is None:
            self.k = DEFAULT_K[self.policy]
        if self.ragged not in LAYOUTS:
            raise ValueError(f"ragged must be one of {LAYOUTS}, got {self.ragged!r}")
        if not 0 <= self.k <= 64:
            raise ValueError(f"k must be in 0..64, got {self.k}")
        if self.batch_ceiling < 1 or self.spec_ceiling < 0 or self.swarm_size < 0:
            raise ValueError("batch_ceiling must be >= 1, spec_ceiling and swarm_size >= 0")
        if self.budget_override is not None and self.budget_override < 1:
            raise ValueError(f"budget_override must be >= 1, got {self.budget_override}")
        if not 0.0 <= self.min_acceptance <= 1.0:
            raise ValueError(f"min_acceptance must be in [0, 1], got {self.min_acceptance}")
        if not 0 <= self.tool_latency_s < math.inf:
            raise ValueError(f"tool_latency_s must be finite and >= 0, got {self.tool_latency_s}")
        unknown = set(self.mix) - set(CATEGORIES)
        if (unknown or not self.mix or not all(0 <= w < math.inf for w in self.mix.values())
                or sum(self.mix.values()) <= 0):
            raise ValueError(f"mix must weigh {', '.join(CATEGORIES)} with finite non-negative "
                             f"weights, not all 0: got {self.mix}")

    def updated(self, changes: dict) -> "Controls":
        """A validated copy with `changes` applied; unknown names are an error."""
        names = {f.name for f in fields(self)}
        unknown = set(changes) - names
        if unknown:
            raise ValueError(f"unknown control(s): {sorted(unknown)}")
        return replace(self, **changes)

    def to_dict(self) -> dict:
        return asdict(self)


def parse_mix(text: str) -> dict[str, float]:
    """`code-edit=2,chat=1`: workload weights by category; a category not named weighs 0."""
    mix = dict.fromkeys(CATEGORIES, 0.0)
    for part in text.split(","):
        name, sep, weight = part.strip().partition("=")
        if not sep or name not in CATEGORIES:
            raise ValueError(f"mix: {part.strip()!r} is not CATEGORY=WEIGHT, the category one of "
                             f"{', '.join(CATEGORIES)}")
        try:
            mix[name] = float(weight)
        except ValueError:
            raise ValueError(f"mix: the weight of {name}, {weight!r}, is not a number") from None
    return mix


def _budget(text: str) -> int | None:
    return None if text in ("calibrated", "none") else int(text)


def _flag(text: str) -> bool:
    if text.lower() not in ("true", "false", "1", "0", "on", "off"):
        raise ValueError(f"{text!r} is not true or false")
    return text.lower() in ("true", "1", "on")


# Each control's value from its command-line spelling.
_PARSERS = {"policy": str, "k": int, "batch_ceiling": int, "spec_ceiling": int,
            "budget_override": _budget, "ragged": str, "drafter": str, "min_acceptance": float,
            "swarm_size": int, "tool_latency_s": float, "mix": parse_mix, "paused": _flag}


def parse_change(text: str) -> tuple[float, dict]:
    """`30:policy=off`: at session second 30, set a control, named as in Controls and the
    trace (dashes for underscores allowed). The change is checked against the controls when
    applied; here only its spelling and its value's type."""
    when, sep, assignment = text.partition(":")
    name, eq, value = assignment.partition("=")
    name = name.strip().replace("-", "_")
    if not sep or not eq:
        raise ValueError(f"{text!r} is not SECONDS:NAME=VALUE (e.g. 30:policy=off)")
    try:
        at = float(when)
    except ValueError:
        raise ValueError(f"{text!r}: the time {when!r} is not a number of seconds") from None
    if not 0 <= at < math.inf:
        raise ValueError(f"{text!r}: the time must be a finite number >= 0")
    if name not in _PARSERS:
        raise ValueError(f"{text!r}: no control {name!r}; use one of {', '.join(_PARSERS)}")
    try:
        return at, {name: _PARSERS[name](value.strip())}
    except ValueError as exc:
        raise ValueError(f"{text!r}: {exc}") from None


class ControlMailbox:
    """Thread-safe inbox of control changes; later posts of the same name win."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict = {}

    def post(self, **changes) -> None:
        with self._lock:
            self._pending.update(changes)

    def drain(self) -> dict:
        with self._lock:
            pending, self._pending = self._pending, {}
        return pending
