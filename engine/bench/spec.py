"""Speculation policies side by side: tokens/s and acceptance for B = 1..16 decoding lanes.

Two workloads (spec_workloads.py): code edits, copy-heavy, and free chat, with little to copy.
For each workload and B, a round prefills B distinct prompts; every policy then decodes the same
number of steps from that state on its own copy of the lanes (KV cloned), all lanes decoding,
with prompt-lookup drafts. The policies run in lockstep — each advances its lanes by one step in
turn — so a burst of load from another process lands on every policy alike instead of spoiling
one policy's run. Each round takes the next B of the workload's 48 prompts (wrapping around), and
a cell runs at least `--repeats` rounds and enough to decode 16 distinct prompts, so small B is
not judged on a few prompts' luck, nor B = 16 on one set of sixteen lanes (with bf16 drift, one
lane falling into a loop that lookup drafts perfectly can move a policy's cell by 6 %); each
cell is the tokens and time of all rounds together.
Each policy keeps its state across rounds, as in a running engine; the first round starts it
cold."""
from __future__ import annotations

import json
import statistics
import sys

from engine.bench import in_turn
from engine.bench.spec_workloads import WORKLOADS
from engine.controls import ADAPTIVE_CAP, Controls
from engine.kv_cache import PagedKVCache
from engine.runner import ModelRunner
from engine.sequence import Sequence
from engine.step import StepExecutor

# (label, policy, K): K is the fixed policy's drafts per lane and the adaptive policies' cap. The
# adaptive ones may go to 16, where a copying lane's drafts can still pay (on a CPU the curve
# climbs in stairs of 8 rows); a fixed 16 at every lane would not.
POLICIES = (("off", "off", 0), ("fixed-2", "fixed", 2), ("fixed-4", "fixed", 4),
            ("fixed-8", "fixed", 8), ("uniform", "uniform", ADAPTIVE_CAP),
            ("goodput", "goodput", ADAPTIVE_CAP))
DISTINCT_PROMPTS = 16  # the least a cell decodes; more rounds at small B would only add time


def add_arguments(parser) -> None:
    parser.add_argument("--model", default="default")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--batches", default="1,2,4,8,16", help="comma-separated B values")
    parser.add_argument("--steps", type=int, default=32, help="decode steps timed per run")
    parser.add_argument("--repeats", type=int, default=6,
                        help="least rounds of every policy in lockstep, each on the next B "
                             "prompts; small B runs more, to decode 16 distinct prompts; cells "
                             "add up all rounds (default %(default)s)")
    parser.add_argument("--json", action="store_true", help="print rows as JSON Lines")


def run(args) -> int:
    from engine.errors import SwarmscopeError
    from engine.spec.calibration import calibrate_or_load
    from engine.loading import load_model
    say = lambda message, *_: print(message, file=sys.stderr)  # noqa: E731
    try:
        loaded = load_model(args.model, args.dtype, args.device, progress=say)
        calibration = calibrate_or_load(loaded, progress=say)
        batches = [int(b) for b in args.batches.split(",")]
        if args.steps < 1 or args.repeats < 1 or min(batches) < 1:
            raise ValueError("--steps, --repeats and every B must be >= 1")
    except (SwarmscopeError, ValueError) as exc:
        print(f"swarmscope bench spec: {exc}", file=sys.stderr)
        return 2
    rows = []
    for batch in batches:  # B outermost: an interrupted run still compares both workloads
        for workload, prompts in WORKLOADS:
            measured = _measure(loaded, calibration, workload, prompts, batch, args.steps,
                                args.repeats)
            rows += measured
            if args.json:  # as they come: a long run interrupted still leaves its rows
                for row in measured:
                    print(json.dumps(row), flush=True)
            else:
                say(f"done {workload} B={batch}")
    if not args.json:
        _print_table(rows, calibration)
    return 0


def _measure(loaded, calibration, workload, prompts, batch, steps, repeats) -> list[dict]:
    rounds = rounds_for(batch, repeats)
    tok = loaded.tokenizer
    encoded = [tok.encode(tok.chat_prompt(prompt)) for prompt in prompts]
    lane_blocks = -(-(max(len(ids) for ids in encoded) + steps * 17 + 32) // 16)
    kv = PagedKVCache(loaded.config, (1 + len(POLICIES)) * batch * lane_blocks, 16,
                      loaded.model.dtype, loaded.model.device)
    runner = ModelRunner(loaded.model, kv)
    # a round's [ms, emitted, drafted, accepted, tokens agreeing with off, tokens compared]
    per_round = {label: [] for label, _, _ in POLICIES}
    # One executor per policy for all rounds: like a running engine, a policy meets each round's
    # new lanes knowing what it learned of their category and of the step cost.
    executors = {label: StepExecutor(runner, calibration, target=loaded)
                 for label, _, _ in POLICIES}
    for round_ in range(rounds):
        base = _prefill(runner, calibration, loaded, workload,
                        [encoded[(round_ * batch + i) % len(encoded)] for i in range(batch)])
        if round_ == 0:  # first passes at these shapes pay for allocation
            warm, warmer = _clone(kv, base, batch), StepExecutor(runner, calibration)
            for step in range(2):
                warmer.run([(seq, 1) for seq in warm], Controls(policy="off"), step, 0.0)
            _release(kv, warm)
        lanes = {label: _clone(kv, base, (2 + index) * batch)
                 for index, (label, _, _) in enumerate(POLICIES)}
        counts = {label: [0.0, 0, 0, 0] for label, _, _ in POLICIES}
        for step in range(steps):
            for label, policy, k in in_turn(POLICIES, step):
                record = executors[label].run([(seq, 1) for seq in lanes[label]],
                                              Controls(policy=policy, k=k), step, 0.0).record
                for i, value in enumerate((record.dt_ms, record.emitted, record.drafted,
                                           record.accepted)):
                    counts[label][i] += value
        for label, _, _ in POLICIES:
            counts[label] += agreement(lanes[label], lanes["off"])
            per_round[label].append(counts[label])
            for seq in lanes[label]:
                executors[label].release(seq)
        _release(kv, base)
    rows = []
    for label, _, _ in POLICIES:
        ms, emitted, drafted, accepted, agreed, compared = (sum(column)
                                                            for column in zip(*per_round[label]))
        rows.append({"workload": workload, "B": batch, "policy": label,
                     "tokens_per_s": round(emitted / ms * 1e3, 1),
                     "acceptance": round(accepted / drafted, 3) if drafted else None,
                     "tokens_per_step": round(emitted / (steps * rounds) / batch, 2),
                     "round_tokens_per_s": [round(e / m * 1e3, 1)
                                            for m, e, *_ in per_round[label]],
                     "agrees_with_off": round(agreed / compared, 3) if compared else None})
    return rows


def agreement(lanes: list[Sequence], reference: list[Sequence]) -> list[int]:
    """[tokens before each lane's output first differs from the reference lane's, tokens compared
    (up to the shorter output)], summed over lanes. Lossless speculation in fp32 agrees fully;
    bf16 on a CPU is not batch-shape invariant, so there policies drift onto texts of their own,
    and a cell then compares policies on partly different text (chat most: a lane that falls
    into a repeating loop drafts perfectly)."""
    agreed = compared = 0
    for seq, ref in zip(lanes, reference):
        mine, theirs = seq.output_ids, ref.output_ids
        span = min(len(mine), len(theirs))
        agreed += next((i for i in range(span) if mine[i] != theirs[i]), span)
        compared += span
    return [agreed, compared]


def ratio_spread(rounds: list[float], reference: list[float]) -> float | None:
    """Standard error of the per-round ratio of two policies' tokens/s: rounds are paired (the
    same prompts, in lockstep), so this is how far a cell's ratio moves with round-to-round luck
    and machine speed. None with fewer than two rounds."""
    ratios = [a / b for a, b in zip(rounds, reference)]
    if len(ratios) < 2:
        return None
    return statistics.stdev(ratios) / len(ratios) ** 0.5


def rounds_for(batch: int, repeats: int) -> int:
    """At least `repeats` rounds, and enough of B prompts each to decode DISTINCT_PROMPTS."""
    return max(repeats, -(-DISTINCT_PROMPTS // batch))


def _prefill(runner, calibration, loaded, workload, prompts) -> list[Sequence]:
    """Lanes with everything but the last prompt token cached: the timed runs decode from it."""
    lanes = [Sequence(i, list(ids), len(ids), max_new_tokens=10**6, agent=i, cat=workload)
             for i, ids in enumerate(prompts)]
    executor = StepExecutor(runner, calibration, target=loaded)
    for seq in lanes:
        executor.run([(seq, seq.pending - 1)], Controls(policy="off"), 0, 0.0)
    return lanes


def _clone(kv: PagedKVCache, seqs: list[Sequence], first_id: int) -> list[Sequence]:
    """Copies of prefilled lanes under new sequence ids, with copies of their cached KV."""
    copies = []
    for offset, seq in enumerate(seqs):
        copy = Sequence(first_id + offset, list(seq.token_ids), seq.prompt_len,
                        max_new_tokens=seq.max_new_tokens, agent=seq.agent, cat=seq.cat)
        copy.num_cached = seq.num_cached
        kv.copy_sequence(seq.seq_id, copy.seq_id, seq.num_cached)
        copies.append(copy)
    return copies


def _release(kv: PagedKVCache, seqs: list[Sequence]) -> None:
    for seq in seqs:
        kv.blocks.free(seq.seq_id)


def _print_table(rows, calibration) -> None:
    print(f"budget T = {calibration.budget}, t(1) = {calibration.t_ms(1):.1f} ms "
          f"({calibration.model}, {calibration.dtype}, {calibration.device})")
    labels = [label for label, _, _ in POLICIES]
    print(f"{'workload':10} {'B':>3} " + " ".join(f"{name:>14}" for name in labels)
          + "    goodput/best     goodput/off  agree")
    keys = sorted({(r["workload"], r["B"]) for r in rows}, key=lambda x: (x[0] != "code-edit", x[1]))
    for workload, batch in keys:
        cells = {r["policy"]: r for r in rows if r["workload"] == workload and r["B"] == batch}
        text = []
        for name in labels:
            acc = cells[name]["acceptance"]
            text.append(f"{cells[name]['tokens_per_s']:7.1f} ({'  -' if acc is None else f'{acc:.2f}'})")
        best = max((cells[n] for n in labels if n != "goodput"), key=lambda r: r["tokens_per_s"])
        good, off = cells["goodput"], cells["off"]
        ratios = []
        for other in (best, off):
            spread = ratio_spread(good["round_tokens_per_s"], other["round_tokens_per_s"])
            ratios.append(f"{good['tokens_per_s'] / other['tokens_per_s']:.3f}"
                          + ("" if spread is None else f" ±{spread:.3f}"))
        agree = min(cells[n]["agrees_with_off"] or 0.0 for n in labels)
        print(f"{workload:10} {batch:3d} " + " ".join(f"{c:>14}" for c in text)
              + "".join(f"  {r:>14}" for r in ratios) + f"  {agree:5.3f}")
    print("cells: tokens/s (acceptance) over all rounds; uniform and goodput capped at "
          f"k={ADAPTIVE_CAP}; ± is the standard error of the ratio over paired rounds; agree: "
          "the least share of any policy's tokens that equal off's before they first differ "
          "(1 where decoding is batch-shape invariant)")
