"""Goodput's plan: per-lane k maximising expected emitted tokens per second (DESIGN.md §1).

Lane i's j-th draft is accepted with a chance that falls with j, at a pace set by how long the lane
has been predicted right (acceptance.Estimate), so a step emits B + the sum of those over every
draft in t(B, sum k, prefill) + drafting ms, where t is the calibrated decode shapes
(Calibration.step_ms) plus the live overhead (spec/live_cost.py). Drafts are added greedily, best
marginal gain first; the allocation kept is the prefix of that order with the most expected tokens
less `value` x its time, `value` being the run's recent rate in tokens per ms (so a curve with a
cost jump from 1 to 2 rows, or a draft model whose first pass is costly, can still pay off over
several drafts), kept as a speed-up over the batch without drafts so that it carries over when B
changes. A run's tokens/s is a ratio of sums, so a draft pays when it adds tokens faster than the
run does, not faster than its own step: maximising each step's own rate drafts too little in steps
where lanes are copying and too much in poor ones (Dinkelbach; on simulated copy bursts at B=1 it
took goodput from 1.01x to 1.30x the best fixed K, test_policies.py). Where the curve is flat every
draft with positive gain is nearly free; past it a draft must pay for itself. Lanes with no
evidence yet get only drafts that are free (fill_free), and a costly drafter's probes as many as
cost what one draft does (probe_size)."""
from __future__ import annotations

import heapq
from typing import Callable

from engine.spec.acceptance import Estimate


def plan_drafts(rates, limits, batch, budget, step_ms, alone, least_ms, parked, speedup):
    """The plan for the lanes of `rates` (`parked`: the draft counts of the batch's
    other lanes), its reason, and the ms it is expected to save: its accepted drafts at the
    run's rate, less what its drafts add to the step. `speedup`: the run's recent tokens per token
    the batch alone would emit (None before there is one); `alone`: the batch's tokens per ms
    without drafts."""
    ks = [0] * len(rates)
    tokens = float(batch)
    plans = [(tokens, step_ms(ks))]  # (tokens, ms) of each prefix of the greedy order
    order = []  # the lane of each draft, in the greedy order
    # What a millisecond is worth: the run's recent rate, as its speed-up over the batch
    # alone (so it carries over when B changes), or before there is one this step's best.
    value = speedup * alone if speedup else None
    # With a worth known in advance the order stops where no longer prefix can beat the
    # best so far (_order_is_done; past the knee, in chat, at the first draft or two: the
    # order to 16 drafts a lane, with a step_ms each, took 0.14 ms of a 16-lane step).
    bounded = value is not None and least_ms is not None
    left = sum(rate.expected(limit) for rate, limit in zip(rates, limits) if limit)
    best = tokens - value * plans[0][1] if bounded else 0.0
    # max-heap of each lane's next draft's expected gain (falling with k)
    heap = [(-rate.first, i) for i, (rate, limit) in enumerate(zip(rates, limits))
            if limit > 0 and rate.first > 0]
    heapq.heapify(heap)
    while heap:
        if bounded and _order_is_done(best, tokens, left, -heap[0][0], value, least_ms,
                                      len(order)):
            break
        neg_gain, i = heapq.heappop(heap)
        ks[i] += 1
        order.append(i)
        tokens, left = tokens - neg_gain, left + neg_gain
        plans.append((tokens, step_ms(ks)))
        if bounded:
            best = max(best, tokens - value * plans[-1][1])
        if ks[i] < limits[i]:
            heapq.heappush(heap, (neg_gain * rates[i].hit(ks[i] + 1), i))
    if value is None:
        value = max(tokens / ms for tokens, ms in plans)

    def gain(trial: list[int]) -> float:
        return expected_accepted(rates, trial) - value * step_ms(trial)

    drafts = max(range(len(plans)),  # ties: fewer drafts
                 key=lambda n: plans[n][0] - value * plans[n][1])
    ks = [0] * len(rates)
    for i in order[:drafts]:
        ks[i] += 1
    ks = _fewer_groups(ks, limits, gain, parked)
    tokens = batch + expected_accepted(rates, ks)
    offered = [rate for rate, limit in zip(rates, limits) if limit]
    odds = (f" at mean p(1st)={sum(r.first for r in offered) / len(offered):.2f} "
            f"p(2nd)={sum(r.hit(2) for r in offered) / len(offered):.2f}" if offered else "")
    # the decision first: the Decisions pane shows as much of a reason as fits
    ms = step_ms(ks)
    reason = (f"goodput: B={batch} T={budget} -> sum k={sum(ks)}, {tokens:.1f} tok in "
              f"{ms:.1f} ms; {len(offered)} lane(s) planned{odds}")
    return ks, reason, (tokens - batch) / value - (ms - plans[0][1])


def _order_is_done(best: float, tokens: float, left: float, gain: float, value: float,
                   least_ms: Callable[[int], float], drafts: int, reach: int = 4) -> bool:
    """Whether no longer prefix of goodput's greedy order can beat `best`, its best worth so far
    (tokens less `value` x ms). The order is at `drafts` drafts and `tokens` expected tokens; r
    more drafts add at most min(r x `gain`, `left`), `gain` being the largest left (a lane's
    next draft is worth no more than its last), and take at least least_ms(drafts + r), which
    never falls as r grows. Past `reach` drafts more only `left` bounds them: each r costs a
    least_ms, and the cut is wanted where few drafts are on offer (chat at 16 lanes, most steps).
    """
    if tokens + left - value * least_ms(drafts + 1) < best - 1e-9:
        return True  # not even with every draft left, in the least time of one draft more
    for r in range(1, reach + 1):
        if tokens + min(r * gain, left) - value * least_ms(drafts + r) >= best - 1e-9:
            return False
        if r * gain >= left:
            return True
    return tokens + left - value * least_ms(drafts + reach + 1) < best - 1e-9


def expected_accepted(rates: list[Estimate], ks: list[int]) -> float:
    """Drafts a step is expected to have accepted (it emits those and one token per lane)."""
    return sum(estimate.expected(k) for estimate, k in zip(rates, ks) if k)


def _fewer_groups(ks: list[int], limits: list[int], gain: Callable[[list[int]], float],
                  parked: set[int]) -> list[int]:
    """Move lanes alone in their draft count into another lane's count while that raises the
    plan's gain: each distinct count is one more attention call per layer (live_cost.py), which
    the greedy order, one draft at a time, cannot see to avoid. `parked`: the draft counts of
    the batch's lanes outside `ks`."""
    ks, best = list(ks), gain(ks)
    moved = True
    while moved:
        moved = False
        for i, k in enumerate(ks):
            if k == 0 or ks.count(k) > 1:
                continue
            for other in sorted((set(ks) | parked) - {k}):
                if other > limits[i]:
                    break
                trial = ks[:i] + [other] + ks[i + 1:]
                trial_gain = gain(trial)
                if trial_gain > best + 1e-9:
                    ks, best, moved = trial, trial_gain, True
                    break
    return ks


def fill_free(ks: list[int], limits: list[int], step_ms: Callable[[list[int]], float],
               eps: float) -> None:
    """Give lanes drafts one at a time, round robin up to `limits`, while the step is planned at
    most eps slower than without them: such drafts are free, whatever they are worth (the
    budget's T - B on a roofline; on a curve with a cost jump, the flat stretch past it)."""
    limit = (1 + eps) * step_ms(ks)
    while True:
        grew = False
        for i, cap in enumerate(limits):
            if ks[i] < cap:
                ks[i] += 1
                if step_ms(ks) > limit:
                    ks[i] -= 1
                    return
                grew = True
        if not grew:
            return


def probe_size(available: int, lane: int, ks: list[int],
                step_ms: Callable[[list[int]], float], eps: float) -> int:
    """Most drafts for `lane` whose extra cost, on top of the step as planned, is at most
    (1 + eps) x that of one draft: past a cost jump (1 -> 2 rows on a CPU) the curve is flat,
    so a longer probe costs what a one-draft probe does and tells more; on a rising stretch it
    is one draft."""
    def cost(k: int) -> float:
        trial = list(ks)
        trial[lane] = k
        return step_ms(trial)

    if available <= 0:
        return 0
    base = cost(0)
    limit, size = base + (1 + eps) * (cost(1) - base), 1
    while size < available and cost(size + 1) <= limit:
        size += 1
    return size
