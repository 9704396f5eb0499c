"""Speculation policies side by side: tokens/s and acceptance for B = 1..16 decoding lanes.

Two workloads (spec_workloads.py): code edits, copy-heavy, and free chat, with little to copy.
Each lane serves requests, one after another as in a swarm: a request is a prompt decoded until
the model ends its turn or `--max-tokens` tokens, and when it ends the lane takes the next one
(prefilled outside the timed steps), so B lanes decode all the time. Every policy serves the same
requests on its own lanes (a prompt is prefilled once a round and its KV cloned for each), with
prompt-lookup drafts, and the policies run in lockstep, each advancing its lanes by one step in
turn, so a burst of load from another process lands on every policy alike. A round hands out
2B requests and is timed while all B lanes are busy: for a policy it ends when one of its lanes
finishes and no request is left.

Why requests, not a fixed number of steps: a policy that copies faster gets further into the
text in the same steps, past the file it was copying into the talk after it, where there is
nothing to copy. Timing equal steps measured it on more of that text than a slower policy: with
every policy on identical text (fp32), goodput's ratio to fixed K=4 on code edits at 8 lanes
moved by +-0.030 from round to round over equal steps and by +-0.004 over requests.

Each round takes the next 2B of the workload's 48 prompts (wrapping around), and a cell runs at
least `--repeats` rounds and enough to serve 16 distinct prompts, so small B is not judged on a
few prompts' luck, nor B = 16 on one set of sixteen lanes (with bf16 drift, one lane falling into
a loop that lookup drafts perfectly can move a policy's cell by 6 %); each cell is the tokens and
time of all rounds together. Each policy keeps its state across rounds, as in a running engine;
the first round starts it cold.

In bf16 each policy's batch shapes give it a text of its own, the same every run for a fixed K,
and a text that falls into a loop hands its policy more to copy: each policy's text is scored for
how much of it lookup proposes right (`copyable`), so that a lead won by a luckier text shows as
one."""
from __future__ import annotations

import json
import statistics
import sys

from engine.bench import in_turn
from engine.bench.spec_workloads import WORKLOADS
from engine.cli.options import MODEL_HELP, add_device_options
from engine.controls import ADAPTIVE_CAP, Controls
from engine.kv_cache import PagedKVCache
from engine.runner import ModelRunner
from engine.sequence import Sequence
from engine.spec.prompt_lookup import NGRAM_SIZES, NgramIndex
from engine.step import StepExecutor

# (label, policy, K): K is the fixed policy's drafts per lane and the adaptive policies' cap. The
# adaptive ones may go to 16, where a copying lane's drafts can still pay (on a CPU the curve
# climbs in stairs of 8 rows); a fixed 16 at every lane would not.
POLICIES = (("off", "off", 0), ("fixed-2", "fixed", 2), ("fixed-4", "fixed", 4),
            ("fixed-8", "fixed", 8), ("uniform", "uniform", ADAPTIVE_CAP),
            ("goodput", "goodput", ADAPTIVE_CAP))
DISTINCT_PROMPTS = 16  # the least a cell serves; more rounds at small B would only add time
REQUESTS_PER_LANE = 2  # a round's requests per lane: about half of them end inside its timing


def add_arguments(parser) -> None:
    parser.add_argument("--model", default="default", help=MODEL_HELP)
    add_device_options(parser)
    parser.add_argument("--batches", default="1,2,4,8,16", help="comma-separated B values")
    parser.add_argument("--max-tokens", type=int, default=64,
                        help="most tokens a request decodes; it ends sooner where the model ends "
                             "its turn (default %(default)s)")
    parser.add_argument("--repeats", type=int, default=4,
                        help="least rounds of every policy in lockstep, each serving the next 2B "
                             "prompts; small B runs more, to serve 16 distinct prompts; cells "
                             "add up all rounds (default %(default)s)")
    parser.add_argument("--workloads", default=",".join(name for name, _ in WORKLOADS),
                        help="comma-separated workloads (default %(default)s)")
    parser.add_argument("--policies", default=",".join(label for label, _, _ in POLICIES),
                        help="comma-separated policies, off among them (every ratio is against "
                             "it): off, fixed-K, uniform, goodput, and uniform-K or goodput-K "
                             f"for those capped at K drafts a lane, not {ADAPTIVE_CAP} "
                             "(default %(default)s)")
    parser.add_argument("--json", action="store_true", help="print rows as JSON Lines")


def run(args) -> int:
    from engine.bench.spec_targets import judge
    from engine.errors import SwarmscopeError
    from engine.spec.calibration import calibrate_or_load
    from engine.loading import load_model
    say = lambda message, *_: print(message, file=sys.stderr)  # noqa: E731
    try:  # the arguments first: a typo should not wait for a model to load
        try:
            batches = [int(b) for b in args.batches.split(",")]
        except ValueError:
            raise ValueError(f"--batches must be whole numbers separated by commas, got "
                             f"{args.batches!r}") from None
        if args.max_tokens < 1 or args.repeats < 1 or min(batches) < 1:
            raise ValueError("--max-tokens, --repeats and every B must be >= 1")
        policies = parse_policies(args.policies)
        workloads = _chosen_workloads(args.workloads)
        loaded = load_model(args.model, args.dtype, args.device, progress=say,
                            threads=args.threads)
        calibration = calibrate_or_load(loaded, progress=say)
    except (SwarmscopeError, ValueError) as exc:
        print(f"swarmscope bench spec: {exc}", file=sys.stderr)
        return 2
    rows = []
    try:
        for batch in batches:  # B outermost: an interrupted run still compares the workloads
            for workload, prompts in workloads:
                measured = _measure(loaded, calibration, workload, prompts, batch,
                                    args.max_tokens, args.repeats, policies)
                rows += measured
                if args.json:  # as they come: a long run interrupted still leaves its rows
                    for row in measured:
                        print(json.dumps(row), flush=True)
                else:
                    say(f"done {workload} B={batch}")
    except KeyboardInterrupt:  # a run of 20 minutes stopped early: the cells measured so far
        say(f"interrupted; {len(rows) // len(policies)} cell(s) measured")
        if not rows:
            return 1
    if not args.json:
        _print_table(rows, calibration, policies)
    verdicts = judge(rows)
    out = sys.stderr if args.json else sys.stdout  # beside JSON Lines on stdout, on stderr
    if verdicts:
        print("issue #3's targets (set for the default model in bf16 on a 2-core CPU):", file=out)
    for line in verdicts:
        print(f"  {line}", file=out)
    return 0


def parse_policies(text: str) -> tuple[tuple[str, str, int], ...]:
    """(label, policy, K) for each comma-separated label: off, fixed-K, uniform, goodput, or
    uniform-K / goodput-K (capped at K drafts a lane)."""
    policies = []
    for label in (part.strip() for part in text.split(",")):
        name, _, k = label.partition("-")
        if label in ("off", "uniform", "goodput"):
            policies.append((label, label, 0 if label == "off" else ADAPTIVE_CAP))
        elif name in ("fixed", "uniform", "goodput") and k.isdigit() and int(k) >= 1:
            Controls(policy=name, k=int(k))  # K's range is the controls'
            policies.append((label, name, int(k)))
        else:
            raise ValueError(f"unknown policy {label!r} in --policies; use off, fixed-K, "
                             "uniform, goodput, uniform-K or goodput-K (K >= 1)")
    labels = [label for label, _, _ in policies]
    if "off" not in labels or len(set(labels)) != len(labels):
        raise ValueError(f"--policies needs off, as every ratio is against it, and no label "
                         f"twice: got {text!r}")
    return tuple(policies)


def _chosen_workloads(text: str) -> list[tuple[str, list[str]]]:
    known = dict(WORKLOADS)
    names = [part.strip() for part in text.split(",")]
    unknown = [name for name in names if name not in known]
    if unknown:
        raise ValueError(f"unknown workload(s) {', '.join(unknown)} in --workloads; "
                         f"use {', '.join(known)}")
    return [(name, known[name]) for name in names]


def _measure(loaded, calibration, workload, prompts, batch, max_new, repeats,
             policies) -> list[dict]:
    rounds = rounds_for(batch, repeats)
    requests = REQUESTS_PER_LANE * batch  # a round's
    tok = loaded.tokenizer
    encoded = [tok.encode(tok.chat_prompt(prompt)) for prompt in prompts]
    # room for a request's prompt, its output and the drafts past it
    lane_blocks = -(-(max(len(ids) for ids in encoded) + max_new + ADAPTIVE_CAP + 32) // 16)
    kv = PagedKVCache(loaded.config, (requests + len(policies) * batch) * lane_blocks, 16,
                      loaded.model.dtype, loaded.model.device)
    runner = ModelRunner(loaded.model, kv)
    # a round's [ms, steps, emitted, drafted, accepted, tokens agreeing with off, tokens compared,
    # output tokens lookup proposes right, output tokens]
    per_round = {label: [] for label, _, _ in policies}
    # One executor per policy for all rounds: like a running engine, a policy meets each round's
    # new lanes knowing what it learned of their category and of the step cost.
    executors = {label: StepExecutor(runner, calibration, target=loaded)
                 for label, _, _ in policies}
    for round_ in range(rounds):
        served = _Requests(runner, calibration, loaded, workload, encoded, max_new,
                           first=round_ * requests, count=requests)
        if round_ == 0:  # first passes at these shapes pay for allocation
            warm, warmer = [served.lane(i) for i in range(batch)], StepExecutor(runner, calibration)
            for step in range(2):
                warmer.run([(seq, 1) for seq in warm], Controls(policy="off"), step, 0.0)
            _release(kv, warm)
        counts, outputs = _serve_round(executors, policies, served, batch, requests)
        # Requests still running when a policy's timing ended got as far as it went: each is
        # scored for copying up to where every policy got, so that one text scores alike.
        scored = sorted(set.intersection(*(set(texts) for texts in outputs.values())))
        reached = [min(len(texts[r]) for texts in outputs.values()) for r in scored]
        scored_prompts = [served.prompt(r) for r in scored]
        for label, _, _ in policies:
            common = sorted(outputs[label].keys() & outputs["off"].keys())
            counts[label] += agreement([outputs[label][r] for r in common],
                                       [outputs["off"][r] for r in common])
            counts[label] += copyable(scored_prompts, [outputs[label][r][:end]
                                                       for r, end in zip(scored, reached)])
            per_round[label].append(counts[label])
        served.release()
    rows = []
    for label, _, _ in policies:
        ms, steps, emitted, drafted, accepted, agreed, compared, right, written = (
            sum(column) for column in zip(*per_round[label]))
        rows.append({"workload": workload, "B": batch, "policy": label,
                     "tokens_per_s": round(emitted / ms * 1e3, 1), "tokens": emitted,
                     "acceptance": round(accepted / drafted, 3) if drafted else None,
                     "tokens_per_step": round(emitted / steps / batch, 2),
                     "round_tokens_per_s": [round(e / m * 1e3, 1)
                                            for m, _, e, *_ in per_round[label]],
                     "agrees_with_off": round(agreed / compared, 3) if compared else None,
                     "copyable": round(right / written, 3) if written else None})
    return rows


def _serve_round(executors, policies, served, batch, requests):
    """Every policy's B lanes serve the round's requests in lockstep, each policy timed until one
    of its lanes finishes with no request left. Per policy: [ms, steps, emitted, drafted,
    accepted], and each request's output ids (those still running at the end, as far as they
    got)."""
    lanes = {label: [served.lane(i) for i in range(batch)] for label, _, _ in policies}
    serving = {label: list(range(batch)) for label in lanes}  # each lane's request
    handed = dict.fromkeys(lanes, batch)
    outputs = {label: {} for label in lanes}  # request -> output ids
    counts = {label: [0.0, 0, 0, 0, 0] for label in lanes}
    timing, step = set(lanes), 0
    while timing:
        for label, policy, k in in_turn(policies, step):
            if label not in timing:
                continue
            record = executors[label].run([(seq, 1) for seq in lanes[label]],
                                          Controls(policy=policy, k=k), step, 0.0).record
            for i, value in enumerate((record.dt_ms, 1, record.emitted, record.drafted,
                                       record.accepted)):
                counts[label][i] += value
            for lane, seq in enumerate(lanes[label]):
                if not seq.finished:
                    continue
                if handed[label] == requests:  # a lane goes idle: the round's timing ends
                    timing.discard(label)
                    break
                outputs[label][serving[label][lane]] = seq.output_ids
                executors[label].release(seq)
                lanes[label][lane] = served.lane(handed[label])
                serving[label][lane] = handed[label]
                handed[label] += 1
        step += 1
    for label in lanes:
        for request, seq in zip(serving[label], lanes[label]):
            outputs[label][request] = seq.output_ids
            executors[label].release(seq)
    return counts, outputs


class _Requests:
    """A round's `count` requests: request i is prompt first + i of the workload (wrapping), all
    prefilled before any policy's lane takes one, and cloned for each lane that serves it. Lanes
    cloned between two prefills, their blocks interleaved with the prompts', decoded 1-2 % slower
    than lanes cloned after them (off against itself in lockstep, chat at 16 lanes: 1.011-1.020x
    in three runs, 0.997-0.999x prefilled first), and the first policy's lanes were those."""

    def __init__(self, runner, calibration, loaded, workload, encoded, max_new, first,
                 count) -> None:
        self.runner = runner
        self.workload, self.encoded, self.max_new, self.first = workload, encoded, max_new, first
        self.stop_ids = tuple(loaded.tokenizer.eos_ids)
        self._next_id = 0
        prefiller = StepExecutor(runner, calibration, target=loaded)
        self._prefilled = [self._prefill(prefiller, request) for request in range(count)]

    def prompt(self, request: int) -> list[int]:
        return self.encoded[(self.first + request) % len(self.encoded)]

    def lane(self, request: int) -> Sequence:
        return _clone(self.runner.kv, [self._prefilled[request]], self._new_id())[0]

    def _prefill(self, prefiller: StepExecutor, request: int) -> Sequence:
        ids = self.prompt(request)
        base = Sequence(self._new_id(), list(ids), len(ids), max_new_tokens=self.max_new,
                        stop_ids=self.stop_ids, agent=request, cat=self.workload)
        # everything but the last prompt token cached: the timed steps decode from it
        prefiller.run([(base, base.pending - 1)], Controls(policy="off"), 0, 0.0)
        return base

    def release(self) -> None:
        _release(self.runner.kv, self._prefilled)

    def _new_id(self) -> int:
        self._next_id += 1
        return self._next_id


def agreement(outputs: list[list[int]], reference: list[list[int]]) -> list[int]:
    """[tokens before each output first differs from its reference, tokens compared (up to the
    shorter)], summed over the pairs: each a request as a policy and off decoded it. Lossless
    speculation in fp32 agrees fully; bf16 on a CPU is not batch-shape invariant, so there
    policies drift onto texts of their own, and a cell then compares policies on partly
    different text (chat most: a lane that falls into a repeating loop drafts perfectly)."""
    agreed = compared = 0
    for mine, theirs in zip(outputs, reference):
        span = min(len(mine), len(theirs))
        agreed += next((i for i in range(span) if mine[i] != theirs[i]), span)
        compared += span
    return [agreed, compared]


def copyable(prompts: list[list[int]], outputs: list[list[int]]) -> list[int]:
    """[output tokens that prompt lookup, given the text before each, proposes right as its first
    draft; output tokens], summed over requests: how much a policy's own text offers to copy.
    In bf16 each policy writes a text of its own, and one whose text falls into a loop copies
    more than its policy earns: in chat at 2 lanes fixed 2's text was 0.087 copyable, against
    goodput's 0.067 and off's 0.064, from two of 32 requests (docs/PERFORMANCE.md, stop 45)."""
    right = written = 0
    for prompt, output in zip(prompts, outputs, strict=True):
        index, text = NgramIndex(NGRAM_SIZES), list(prompt)
        for token in output:
            index.extend(text)
            proposal, _ = index.continuation(text, 1)
            right += proposal == [token]
            text.append(token)
        written += len(output)
    return [right, written]


def ratio_spread(rounds: list[float], reference: list[float]) -> float | None:
    """Standard error of the per-round ratio of two policies' tokens/s: rounds are paired (the
    same prompts, in lockstep), so this is how far a cell's ratio moves with round-to-round luck
    and machine speed. None with fewer than two rounds."""
    ratios = [a / b for a, b in zip(rounds, reference)]
    if len(ratios) < 2:
        return None
    return statistics.stdev(ratios) / len(ratios) ** 0.5


def rounds_for(batch: int, repeats: int) -> int:
    """At least `repeats` rounds, and enough of 2B requests each to serve DISTINCT_PROMPTS."""
    return max(repeats, -(-DISTINCT_PROMPTS // (REQUESTS_PER_LANE * batch)))


def _clone(kv: PagedKVCache, seqs: list[Sequence], first_id: int) -> list[Sequence]:
    """Copies of prefilled lanes under new sequence ids, with copies of their cached KV."""
    copies = []
    for offset, seq in enumerate(seqs):
        copy = Sequence(first_id + offset, list(seq.token_ids), seq.prompt_len,
                        max_new_tokens=seq.max_new_tokens, stop_ids=seq.stop_ids,
                        agent=seq.agent, cat=seq.cat)
        copy.num_cached = seq.num_cached
        kv.copy_sequence(seq.seq_id, copy.seq_id, seq.num_cached)
        copies.append(copy)
    return copies


def _release(kv: PagedKVCache, seqs: list[Sequence]) -> None:
    for seq in seqs:
        kv.blocks.free(seq.seq_id)


def _print_table(rows, calibration, policies) -> None:
    print(f"budget T = {calibration.budget}, t(1) = {calibration.t_ms(1):.1f} ms "
          f"({calibration.model}, {calibration.dtype}, {calibration.hardware}, calibrated at context "
          f"{calibration.context})")
    labels = [label for label, _, _ in policies]
    judged = "goodput" in labels and len(labels) > 2  # goodput against the best of the others
    print(f"{'workload':10} {'B':>3} " + " ".join(f"{name:>14}" for name in labels)
          + ("    goodput/best     goodput/off" if judged else "") + "  agree")
    by_cell: dict[tuple[str, int], dict[str, dict]] = {}  # (workload, B) -> policy -> row
    for r in rows:
        by_cell.setdefault((r["workload"], r["B"]), {})[r["policy"]] = r
    keys = sorted(by_cell, key=lambda x: (x[0] != "code-edit", x[1]))
    for workload, batch in keys:
        cells = by_cell[workload, batch]
        text = []
        for name in labels:
            acc = cells[name]["acceptance"]
            text.append(f"{cells[name]['tokens_per_s']:7.1f} ({'  -' if acc is None else f'{acc:.2f}'})")
        ratios = []
        if judged:
            best = max((cells[n] for n in labels if n != "goodput"),
                       key=lambda r: r["tokens_per_s"])
            good, off = cells["goodput"], cells["off"]
            for other in (best, off):
                spread = ratio_spread(good["round_tokens_per_s"], other["round_tokens_per_s"])
                ratios.append(f"{good['tokens_per_s'] / other['tokens_per_s']:.3f}"
                              + ("" if spread is None else f" ±{spread:.3f}"))
        agree = min(cells[n]["agrees_with_off"] or 0.0 for n in labels)
        print(f"{workload:10} {batch:3d} " + " ".join(f"{c:>14}" for c in text)
              + "".join(f"  {r:>14}" for r in ratios) + f"  {agree:5.3f}")
    print("cells: tokens/s (acceptance) over all rounds; uniform and goodput capped at "
          f"k={ADAPTIVE_CAP} unless labelled -K; ± is the standard error of the ratio over paired "
          "rounds; agree: the least share of any policy's tokens that equal off's before they "
          "first differ (1 where decoding is batch-shape invariant)")
    print(f"\ncopyable text\n{'workload':10} {'B':>3} "
          + " ".join(f"{name:>14}" for name in labels))
    for workload, batch in keys:
        shares = [by_cell[workload, batch][n]["copyable"] for n in labels]
        print(f"{workload:10} {batch:3d} "
              + " ".join(f"{'-' if share is None else f'{share:.3f}':>14}" for share in shares))
    print("copyable: the share of a policy's own output tokens that prompt lookup, given the "
          "text before each, proposes right as a first draft; where policies write texts of "
          "their own (agree < 1), a text that falls into a loop gives its policy more to copy")
