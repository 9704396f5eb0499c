"""Acceptance statistics, per lane and per workload category.

Two views of the same drafts:
- **per draft position**: of the drafts proposed at position j (1-based), how many were accepted —
  cumulative counts of verified drafts, for plots and reports;
- **rolling rates**, exponentially decayed, for the policies. Drafts are closer to runs than to
  independent coin flips: a prompt-lookup match is either the text being copied, and then runs
  on, or a coincidence that fails at once. So each lane is modelled by its *run*: how many of
  its latest tokens in a row the drafter predicted right. A prediction's chance of being right
  is kept per run length (RUN_EDGES): from a run of 0 it is `start`, kept apart by how much
  context the drafter matched (a 2-gram match is often a coincidence, a 4-gram one the text
  being copied); longer runs have their own rates, which climb as the run grows (code edits at
  16 lanes: 0.52 from cold, 0.81 after one right prediction, 0.85 after two or three, 0.94 after
  four or more). One rate for every run would be the mean over tokens, which long runs
  dominate: it forecast 1.2x what deep drafts from lanes on a run got. The run rates are also
  kept per match, since a copy found on a short match breaks off sooner. A lane's j-th draft is
  accepted with the product of the rates at its run, its run + 1, ... its run + j - 1.
  `tokens` is the plain per-token rate the minimum-acceptance guard reads.

Evidence comes from verified drafts (`record`: k drafts, `acc` accepted; drafts after the first
rejected one were never tested, so they are not counted as failures) and from shadow checks
(`record`'s `next_hit`): the drafter's unsent prediction of the token after the sent drafts,
compared with the token the lane emitted there (spec/shadow.py).
"""
from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field
from functools import partial

# Run lengths that share a rate: 1, 2-3, 4 and more (a run of 0 is `start`). Finer buckets for
# long runs are seldom tested: a draft model's lane that never drafts from one never learns it.
RUN_EDGES = (1, 2, 4)


@dataclass(slots=True)
class Rate:
    """A decayed success/trial count (also goodput's speed-up: tokens per baseline token)."""

    successes: float = 0.0
    trials: float = 0.0

    def add(self, successes: float, trials: float, decay: float) -> None:
        self.successes = self.successes * decay + successes
        self.trials = self.trials * decay + trials

    def shrunk(self, prior: float, weight: float) -> float:
        """The rate shrunk towards `prior` by `weight` pseudo-trials."""
        return (self.successes + prior * weight) / (self.trials + weight)

    @property
    def value(self) -> float | None:
        return self.successes / self.trials if self.trials > 0 else None


def _bucket_rates() -> list[Rate]:
    return [Rate() for _ in RUN_EDGES]


@dataclass(slots=True)
class AcceptanceCounter:
    decay: float = 0.95           # weight kept by older evidence at each update (~20 steps)
    tokens: Rate = field(default_factory=Rate)  # every tested prediction
    # Predictions from a run of 0, by the drafter's match size (prompt lookup: the n of the
    # n-gram it matched; 0 for a model's drafts). In code edits at 8 lanes a cold 2-gram match's
    # first draft was right 0.40 of the time, a 3- or 4-gram's 0.65.
    start: dict[int, Rate] = field(default_factory=dict)
    runs: list[Rate] = field(default_factory=_bucket_rates)  # predictions on a run, by run_bucket
    # The same kept apart by what the source the lane copies from was matched on: a copy found
    # on a 2-gram breaks off sooner (code edits, 4 lanes: lanes on a run given 6 or more drafts
    # from a 2-gram source got 0.55x their forecast when all runs shared their rates, 0.79x
    # with rates of their own).
    runs_by_match: dict[int, list[Rate]] = field(default_factory=dict)
    proposed_at: list[int] = field(default_factory=list)  # [position] drafts proposed
    accepted_at: list[int] = field(default_factory=list)  # [position] drafts accepted
    steps: int = 0                # verifications with at least one draft

    def update(self, k: int, acc: int, run: int = 0, match: int = 0) -> None:
        """k verified drafts, `acc` accepted, sent by a lane on a run of `run`, proposed from a
        match of `match` tokens. Each rate takes this step's evidence as one update."""
        if not 0 <= acc <= k:
            raise ValueError(f"accepted {acc} outside 0..{k}")
        if k == 0:
            return
        missed = 1 if acc < k else 0
        self.tokens.add(acc, acc + missed, self.decay)
        tested: dict[int, list[int]] = {}  # run bucket (-1: start) -> [right, tested]
        for j in range(acc + missed):  # the j-th draft was predicted on a run of run + j
            counts = tested.setdefault(run_bucket(run + j), [0, 0])
            counts[0] += j < acc
            counts[1] += 1
        for bucket, (right, total) in tested.items():
            for rate in self._rates(bucket, match):
                rate.add(right, total, self.decay)
        self.steps += 1
        if len(self.proposed_at) < k:
            grow = k - len(self.proposed_at)
            self.proposed_at += [0] * grow
            self.accepted_at += [0] * grow
        for j in range(k):
            self.proposed_at[j] += 1
            self.accepted_at[j] += 1 if j < acc else 0

    def observe(self, hit: bool, run: int = 0, match: int = 0) -> None:
        """One shadow-checked prediction on a run of `run` (not a sent draft: rates only)."""
        self.tokens.add(int(hit), 1, self.decay)
        for rate in self._rates(run_bucket(run), match):
            rate.add(int(hit), 1, self.decay)

    def rate_at(self, run: int, match: int = 0) -> Rate:
        """The rate of predictions made on a run of `run` (from a `match`, at run 0)."""
        bucket = run_bucket(run)
        return self.start.get(match, Rate()) if bucket < 0 else self.runs[bucket]

    def _rates(self, bucket: int, match: int) -> tuple[Rate, ...]:
        """The rates a prediction in `bucket` from a `match` counts towards."""
        if bucket < 0:
            return (_made(self.start, match, Rate),)
        return self.runs[bucket], _made(self.runs_by_match, match, _bucket_rates)[bucket]

    @property
    def trials(self) -> float:
        """Decayed count of tested predictions."""
        return self.tokens.trials

    @property
    def rate(self) -> float | None:
        """Rolling per-token acceptance rate; None before anything was tested."""
        return self.tokens.value

    def per_position(self) -> list[float]:
        """Fraction of drafts accepted at each draft position (index 0 = first draft)."""
        return [a / p for a, p in zip(self.accepted_at, self.proposed_at)]


def run_bucket(run: int) -> int:
    """Which of the run rates a prediction on a run of `run` uses; -1 for a run of 0 (start)."""
    return bisect_right(RUN_EDGES, run) - 1


@dataclass(frozen=True, slots=True)
class Estimate:
    """What a policy plans with: `hits[j - 1]` is the chance the j-th draft is accepted once
    drafts 1..j-1 were; past the end the last one holds. Estimate((first, cont)) is a chain that
    starts at `first` and goes on at `cont`."""

    hits: tuple[float, ...]

    def __post_init__(self) -> None:
        if not self.hits:
            raise ValueError("an estimate needs at least one rate")

    def hit(self, j: int) -> float:
        return self.hits[min(j, len(self.hits)) - 1]

    @property
    def first(self) -> float:
        return self.hits[0]

    def expected(self, k: int) -> float:
        """Expected accepted drafts out of k."""
        total, chance = 0.0, 1.0
        for j in range(1, k + 1):
            chance *= self.hit(j)
            total += chance
        return total


class AcceptanceStats:
    """Counters per lane (sequence id) and per category, and each lane's current run."""

    def __init__(self, decay: float = 0.95) -> None:
        if not 0.0 < decay < 1.0:
            raise ValueError(f"decay must be in (0, 1), got {decay}")
        self.decay = decay
        self.lanes: dict[int, AcceptanceCounter] = {}
        self.categories: dict[str, AcceptanceCounter] = {}
        self._runs: dict[int, int] = {}

    def record(self, seq_id: int, cat: str, k: int, acc: int,
               next_hit: bool | None = None, match: int = 0) -> None:
        """One verified lane: `acc` of its `k` sent drafts accepted. `next_hit`: whether the
        drafter's unsent prediction of the token after the drafts matched the token emitted there
        (None: no prediction, or a draft was rejected so that token was never predicted).
        `match`: what the proposal was matched on (Draft.match)."""
        if k == 0 and next_hit is None:  # nothing predicted the token this lane just emitted
            self._runs[seq_id] = 0
            return
        make = partial(AcceptanceCounter, self.decay)
        counters = (_made(self.lanes, seq_id, make), _made(self.categories, cat, make))
        run = self._runs.get(seq_id, 0)
        if k:
            for counter in counters:
                counter.update(k, acc, run, match)
            # all accepted: as far as anyone knows the run goes on; else the bonus broke it
            run = run + k if acc == k else 0
        if acc == k and next_hit is not None:
            for counter in counters:
                counter.observe(next_hit, run, match)
            run = run + 1 if next_hit else 0
        self._runs[seq_id] = run

    def lane(self, seq_id: int) -> AcceptanceCounter | None:
        return self.lanes.get(seq_id)

    def category(self, cat: str) -> AcceptanceCounter | None:
        return self.categories.get(cat)

    def run(self, seq_id: int) -> int:
        """How many of the lane's latest tokens in a row its drafter predicted right."""
        return self._runs.get(seq_id, 0)

    def estimate(self, seq_id: int, cat: str, prior: float = 0.5, weight: float = 4.0,
                 match: int = 0, depth: int = 1, run_weight: float = 16.0) -> Estimate:
        """A lane's rates for its next `depth` drafts: its rolling counts at each run length
        shrunk towards its category's by `weight` pseudo-trials, so a few unlucky drafts do not
        pin a lane at zero and a new lane starts from what its category does. The category's
        start rates are shrunk towards `prior`, and each of its run rates towards the rate of
        the next shorter run (the first towards `prior`): a run longer than any seen yet goes on
        at least as well as the longest seen. Both are read for the proposal's `match`: a lane
        on a run of 0 starts at that match's rate, and a run goes on at the rates of runs from
        sources so matched, shrunk towards those of all runs.

        A lane's own rates past a run of 0 are shrunk harder, by `run_weight`. Lanes differ most
        in whether their matches are the text being copied, which their start rates learn fast;
        how a copy goes on is more the category's, and a lane's few deep drafts are noisy: the
        plan gives its deepest drafts to the lanes they flatter (code edits, 16 lanes: lanes on a
        run given 8 or more drafts got 0.91x their forecast with 4 pseudo-trials, 0.96x with 16)."""
        category = self.categories.get(cat) or AcceptanceCounter()
        lane = self.lanes.get(seq_id) or AcceptanceCounter()
        category_runs, rate = [], prior
        for counts in category.runs:
            rate = counts.shrunk(rate, weight)
            category_runs.append(rate)
        by_match = category.runs_by_match.get(match)
        if by_match:  # how copies from sources found on this match go on, shrunk towards all
            category_runs = [counts.shrunk(pooled, weight)
                             for counts, pooled in zip(by_match, category_runs)]

        lane_runs = lane.runs_by_match.get(match)

        def rate_at(run: int) -> float:
            bucket = run_bucket(run)
            if bucket < 0:
                return lane.rate_at(0, match).shrunk(
                    category.rate_at(0, match).shrunk(prior, weight), weight)
            if lane_runs is None:  # no run of the lane's own from a source so matched
                return category_runs[bucket]
            return lane_runs[bucket].shrunk(category_runs[bucket], run_weight)

        run = self.run(seq_id)
        # past the longest bucket's edge every rate is the same, and the last one holds
        reach = max(1, min(depth, RUN_EDGES[-1] - run + 1))
        return Estimate(tuple(rate_at(run + j) for j in range(reach)))

    def forget(self, seq_id: int) -> None:
        self.lanes.pop(seq_id, None)
        self._runs.pop(seq_id, None)


def _made(table: dict, key, make):
    """The table's entry for key, made on first use (setdefault would build one and throw it away
    on every call, and these run for every lane every step)."""
    entry = table.get(key)
    if entry is None:
        entry = table[key] = make()
    return entry
