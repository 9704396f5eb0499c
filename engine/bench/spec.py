"""Speculation policies side by side: tokens/s and acceptance for B = 1..16 decoding lanes.

Two workloads: code edits (an agent applies a change and re-emits the complete updated file it
just read, shown one worked example first; prompt lookup has real text to find, as much as the
model actually copies) and free chat (little to copy). For each workload and B the prompts are
prefilled once; every policy then decodes the same number of steps from that state on its own
copy of the lanes (KV cloned), all lanes decoding, with prompt-lookup drafts and a fresh policy
state. The policies run in lockstep — each advances its lanes by one step in turn — so a burst of
load from another process lands on every policy alike instead of spoiling one policy's run;
`--repeats` such rounds are run and each cell is the median round."""
from __future__ import annotations

import json
import sys

from engine.controls import Controls
from engine.kv_cache import PagedKVCache
from engine.runner import ModelRunner
from engine.sequence import Sequence
from engine.step import StepExecutor

POLICIES = (("off", "off", 0), ("fixed-2", "fixed", 2), ("fixed-4", "fixed", 4),
            ("fixed-8", "fixed", 8), ("uniform", "uniform", 8), ("goodput", "goodput", 8))

_EXAMPLE_BEFORE = '''def area(width, height):
    return width * height


def describe(shape):
    return f"{shape['name']}: {area(shape['w'], shape['h'])}"
'''
_EXAMPLE_AFTER = '''def area(width: float, height: float) -> float:
    return width * height


def describe(shape):
    return f"{shape['name']}: {area(shape['w'], shape['h'])}"
'''
_FILE = '''import json
from pathlib import Path


def load_settings(path):
    """Read the settings file and fill in defaults."""
    data = json.loads(Path(path).read_text())
    data.setdefault("retries", 3)
    data.setdefault("timeout", 30)
    return data


def save_settings(path, data):
    Path(path).write_text(json.dumps(data, indent=2))


def merge(base, extra):
    out = dict(base)
    for key, value in extra.items():
        out[key] = value
    return out
'''
_TASK = ("Apply the change to the file and output the complete updated file, nothing else.\n\n"
         "Example.\nFile:\n```python\n{ex_before}```\nChange: add type hints to area.\n"
         "Updated file:\n```python\n{ex_after}```\n\n"
         "Now your turn.\nFile:\n```python\n{file}```\nChange: {change}.\nUpdated file:")
CODE_EDITS = tuple(_TASK.format(ex_before=_EXAMPLE_BEFORE, ex_after=_EXAMPLE_AFTER, file=_FILE,
                                change=change)
                   for change in ("rename load_settings to read_settings",
                                  "change the default timeout from 30 to 60",
                                  "make save_settings sort the keys",
                                  "rename merge to merged"))
CHATS = ("What are three good habits for a new programmer?",
         "Explain why the sky is blue to a ten-year-old.",
         "Write a short poem about autumn leaves.",
         "What should I pack for a weekend hiking trip?")
WORKLOADS = (("code-edit", CODE_EDITS), ("chat", CHATS))


def add_arguments(parser) -> None:
    parser.add_argument("--model", default="default")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--batches", default="1,2,4,8,16", help="comma-separated B values")
    parser.add_argument("--steps", type=int, default=32, help="decode steps timed per run")
    parser.add_argument("--repeats", type=int, default=3,
                        help="rounds of every policy in lockstep; cells are the median round")
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
    tok = loaded.tokenizer
    ids = [tok.encode(tok.chat_prompt(prompts[i % len(prompts)])) for i in range(batch)]
    lane_blocks = -(-(max(len(p) for p in ids) + steps * 10 + 16) // 16)
    kv = PagedKVCache(loaded.config, (1 + len(POLICIES)) * batch * lane_blocks, 16,
                      loaded.model.dtype, loaded.model.device)
    runner = ModelRunner(loaded.model, kv)
    base = [Sequence(i, list(p), len(p), max_new_tokens=10**6, agent=i, cat=workload)
            for i, p in enumerate(ids)]
    prefill = StepExecutor(runner, calibration, target=loaded)
    for seq in base:  # everything but the last prompt token, which the timed runs decode from
        prefill.run([(seq, seq.pending - 1)], Controls(policy="off"), 0, 0.0)
    warm = _clone(kv, base, batch)  # first passes at these shapes pay for allocation
    for step in range(2):
        prefill.run([(seq, 1) for seq in warm], Controls(policy="off"), step, 0.0)
    _release(kv, warm)

    runs: dict[str, list[list[float]]] = {label: [] for label, _, _ in POLICIES}
    for _ in range(repeats):
        lanes = {label: _clone(kv, base, (2 + index) * batch)
                 for index, (label, _, _) in enumerate(POLICIES)}
        executors = {label: StepExecutor(runner, calibration, target=loaded)
                     for label, _, _ in POLICIES}
        totals = {label: [0.0, 0, 0, 0] for label, _, _ in POLICIES}  # ms, emitted, drafted, acc
        for step in range(steps):
            turn = step % len(POLICIES)  # who goes first rotates: no policy always follows another
            for label, policy, k in POLICIES[turn:] + POLICIES[:turn]:
                record = executors[label].run([(seq, 1) for seq in lanes[label]],
                                              Controls(policy=policy, k=k), step, 0.0).record
                for i, value in enumerate((record.dt_ms, record.emitted, record.drafted,
                                           record.accepted)):
                    totals[label][i] += value
        for label, _, _ in POLICIES:
            runs[label].append(totals[label])
            _release(kv, lanes[label])
    rows = []
    for label, _, _ in POLICIES:
        rates = sorted(emitted / ms * 1e3 for ms, emitted, _, _ in runs[label])
        drafted = sum(run[2] for run in runs[label])
        accepted = sum(run[3] for run in runs[label])
        emitted = sum(run[1] for run in runs[label])
        rows.append({"workload": workload, "B": batch, "policy": label,
                     "tokens_per_s": round(rates[len(rates) // 2], 1),
                     "acceptance": round(accepted / drafted, 3) if drafted else None,
                     "tokens_per_step": round(emitted / (steps * len(runs[label])) / batch, 2)})
    return rows


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
          + "  goodput/best  goodput/off")
    keys = sorted({(r["workload"], r["B"]) for r in rows}, key=lambda x: (x[0] != "code-edit", x[1]))
    for workload, batch in keys:
        cells = {r["policy"]: r for r in rows if r["workload"] == workload and r["B"] == batch}
        text = []
        for name in labels:
            acc = cells[name]["acceptance"]
            text.append(f"{cells[name]['tokens_per_s']:7.1f} ({'  -' if acc is None else f'{acc:.2f}'})")
        best = max(cells[n]["tokens_per_s"] for n in labels if n != "goodput")
        good = cells["goodput"]["tokens_per_s"]
        print(f"{workload:10} {batch:3d} " + " ".join(f"{c:>14}" for c in text)
              + f"  {good / best:12.2f}  {good / cells['off']['tokens_per_s']:11.2f}")
    print("cells: median tokens/s (acceptance over all rounds); uniform and goodput capped at k=8")
