"""Speculation policies side by side: tokens/s and acceptance for B = 1..16 decoding lanes.

Two workloads: code edits (an agent applies a change and re-emits the complete updated file it
just read, shown one worked example first; prompt lookup has real text to find, as much as the
model actually copies) and free chat (little to copy). For each workload and B the prompts are
prefilled once; every policy then decodes the same number of steps from the same state (KV rolled
back between runs), all lanes decoding, with prompt-lookup drafts and a fresh policy state. Timed
runs are interleaved (every policy once per round, `--repeats` rounds) and each cell is the median
round, so a burst of load from another process spoils one round of every policy alike."""
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
                        help="interleaved rounds of every policy; cells are the median round")
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
    room = max(len(p) for p in ids) + steps * 10 + 16
    kv = PagedKVCache(loaded.config, batch * (-(-room // 16)), 16, loaded.model.dtype,
                      loaded.model.device)
    runner = ModelRunner(loaded.model, kv)
    seqs = [Sequence(i, list(p), len(p), max_new_tokens=10**6, agent=i, cat=workload)
            for i, p in enumerate(ids)]
    prefill = StepExecutor(runner, calibration, target=loaded)
    for seq in seqs:  # everything but the last prompt token, which the timed runs decode from
        prefill.run([(seq, seq.pending - 1)], Controls(policy="off"), 0, 0.0)

    def timed(policy: str, k: int) -> tuple[float, int, int, int]:
        """(ms, emitted, drafted, accepted) of one run from the prefilled state."""
        for seq, prompt in zip(seqs, ids):
            seq.token_ids[:] = prompt
            seq.num_cached = len(prompt) - 1
            kv.blocks.truncate(seq.seq_id, seq.num_cached)
        executor = StepExecutor(runner, calibration, target=loaded)
        controls = Controls(policy=policy, k=k)
        ms, emitted, drafted, accepted = 0.0, 0, 0, 0
        for step in range(steps):
            record = executor.run([(s, 1) for s in seqs], controls, step, 0.0).record
            ms += record.dt_ms
            emitted, drafted, accepted = (emitted + record.emitted, drafted + record.drafted,
                                          accepted + record.accepted)
        return ms, emitted, drafted, accepted

    timed("off", 0)  # warm-up: first passes at these shapes pay for allocation
    runs: dict[str, list[tuple[float, int, int, int]]] = {label: [] for label, _, _ in POLICIES}
    for _ in range(repeats):  # interleaved: every policy once per round
        for label, policy, k in POLICIES:
            runs[label].append(timed(policy, k))
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
