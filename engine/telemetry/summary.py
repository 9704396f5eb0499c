"""Aggregates step records into the numbers a headless run, a trace check and the swarm bench
print. Records are plain; this is where they are read (STYLE rule 9)."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass, field

from engine.telemetry.records import StepRecord


@dataclass(slots=True)
class PolicyShare:
    """The steps a session ran under one policy (the user may switch policies live)."""
    steps: int
    busy_tokens_per_s: float       # emitted / time spent inside these steps
    mean_batch: float
    acceptance: float | None


@dataclass(slots=True)
class Summary:
    steps: int
    span_s: float                  # session time covered by the steps
    emitted: int                   # tokens emitted (committed + accepted drafts)
    tokens_per_s: float            # emitted / span_s
    busy_tokens_per_s: float       # emitted / time spent inside steps
    mean_batch: float
    min_batch: int
    max_batch: int
    prefill_tokens: int
    drafted: int
    accepted: int
    acceptance: float | None       # accepted / drafted
    mean_acceptance_length: float | None  # counts the bonus token
    acceptance_by_cat: dict[str, float | None] = field(default_factory=dict)
    padding_waste: float = 0.0     # padded slots / pass tokens
    step_ms_mean: float = 0.0
    step_ms_p50: float = 0.0
    step_ms_p95: float = 0.0
    tokens_by_agent: dict[int, int] = field(default_factory=dict)
    by_policy: dict[str, PolicyShare] = field(default_factory=dict)  # in order of first use

    def to_dict(self) -> dict:
        return asdict(self)


def summarize(steps: list[StepRecord]) -> Summary:
    if not steps:
        raise ValueError("no step records to summarise")
    emitted = sum(s.emitted for s in steps)
    span_s = max(steps[-1].t + steps[-1].dt_ms / 1000 - steps[0].t, 1e-9)
    busy_s = max(sum(s.dt_ms for s in steps) / 1000, 1e-9)
    drafted = sum(s.drafted for s in steps)
    accepted = sum(s.accepted for s in steps)
    speculating = sum(1 for s in steps for lane in s.lanes if lane.k > 0)
    cat_k: dict[str, int] = defaultdict(int)
    cat_acc: dict[str, int] = defaultdict(int)
    by_agent: dict[int, int] = defaultdict(int)
    for s in steps:
        for lane in s.lanes:
            cat_k[lane.cat] += lane.k
            cat_acc[lane.cat] += lane.acc
            by_agent[lane.agent] += 1 + lane.acc
    by_policy: dict[str, list[StepRecord]] = defaultdict(list)
    for s in steps:
        by_policy[s.policy].append(s)
    times = sorted(s.dt_ms for s in steps)
    batches = [s.batch for s in steps]
    pass_tokens = sum(s.pass_tokens for s in steps)
    return Summary(
        steps=len(steps), span_s=span_s, emitted=emitted, tokens_per_s=emitted / span_s,
        busy_tokens_per_s=emitted / busy_s, mean_batch=sum(batches) / len(batches),
        min_batch=min(batches), max_batch=max(batches),
        prefill_tokens=sum(s.prefill for s in steps), drafted=drafted, accepted=accepted,
        acceptance=accepted / drafted if drafted else None,
        mean_acceptance_length=1 + accepted / speculating if speculating else None,
        acceptance_by_cat={c: (cat_acc[c] / cat_k[c] if cat_k[c] else None) for c in sorted(cat_k)},
        padding_waste=sum(s.padding for s in steps) / pass_tokens if pass_tokens else 0.0,
        step_ms_mean=sum(times) / len(times), step_ms_p50=_quantile(times, 0.5),
        step_ms_p95=_quantile(times, 0.95), tokens_by_agent=dict(sorted(by_agent.items())),
        by_policy={policy: _share(ran) for policy, ran in by_policy.items()})


def _share(steps: list[StepRecord]) -> PolicyShare:
    drafted = sum(s.drafted for s in steps)
    return PolicyShare(steps=len(steps),
                       busy_tokens_per_s=sum(s.emitted for s in steps)
                       / max(sum(s.dt_ms for s in steps) / 1000, 1e-9),
                       mean_batch=sum(s.batch for s in steps) / len(steps),
                       acceptance=sum(s.accepted for s in steps) / drafted if drafted else None)


def format_summary(summary: Summary) -> str:
    """A plain two-column table."""
    return _table([(name, [value]) for name, value in summary_rows(summary)])


def format_comparison(named: list[tuple[str, Summary]]) -> str:
    """Sessions side by side, a column each (named), their rows as `format_summary` words them
    (but the tokens of each agent, agents being each session's own), and each one's tokens/s
    over the first's."""
    columns = [dict(summary_rows(summary)) for _, summary in named]
    names = dict.fromkeys(name for column in columns for name in column
                          if name != "tokens per agent")
    first = named[0][1]
    rows = [("", [label for label, _ in named])]
    for name in names:
        rows.append((name, [column.get(name, "-") for column in columns]))
        if name == "tokens/s":
            rows.append(("  x the first", [
                f"{s.tokens_per_s / first.tokens_per_s:.2f}  (inside steps: "
                f"{s.busy_tokens_per_s / first.busy_tokens_per_s:.2f})" for _, s in named]))
    return _table(rows)


def _table(rows: list[tuple[str, list[str]]]) -> str:
    """Rows of a name and its values, in columns as wide as their widest cell."""
    widths = [max(len(row_name) for row_name, _ in rows)]
    widths += [max(len(values[i]) for _, values in rows) for i in range(len(rows[0][1]))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in
                               zip([row_name, *values], widths)).rstrip() for row_name, values in rows)


def summary_rows(summary: Summary) -> list[tuple[str, str]]:
    """Each summary line: its name and its value, as worded for people."""
    def pct(x: float | None) -> str:
        return "-" if x is None else f"{100 * x:.1f}%"

    rows = [
        ("steps", f"{summary.steps}"),
        ("session time", f"{summary.span_s:.2f} s"),
        ("tokens emitted", f"{summary.emitted}"),
        ("tokens/s", f"{summary.tokens_per_s:.1f}  (inside steps: {summary.busy_tokens_per_s:.1f})"),
        ("live batch", f"mean {summary.mean_batch:.2f}, min {summary.min_batch}, "
                       f"max {summary.max_batch}"),
        ("prefill tokens", f"{summary.prefill_tokens}"),
        ("drafted / accepted", f"{summary.drafted} / {summary.accepted}"),
        ("acceptance", pct(summary.acceptance)),
        ("mean acceptance length", "-" if summary.mean_acceptance_length is None
         else f"{summary.mean_acceptance_length:.2f} (bonus counted)"),
    ]
    rows += [(f"  acceptance {cat}", pct(rate)) for cat, rate in summary.acceptance_by_cat.items()]
    rows += [
        ("padding waste", pct(summary.padding_waste)),
        ("time per step", f"mean {summary.step_ms_mean:.1f} ms, p50 {summary.step_ms_p50:.1f}, "
                          f"p95 {summary.step_ms_p95:.1f}"),
        ("tokens per agent", ", ".join(f"{a}:{n}" for a, n in summary.tokens_by_agent.items())),
    ]
    if len(summary.by_policy) > 1:  # switched live: each policy's steps on their own
        rows += [(f"  under {policy}", f"{share.steps} steps, {share.busy_tokens_per_s:.1f} tok/s "
                                       f"inside steps, mean batch {share.mean_batch:.2f}, "
                                       f"acceptance {pct(share.acceptance)}")
                 for policy, share in summary.by_policy.items()]
    return rows


def _quantile(sorted_values: list[float], q: float) -> float:
    index = min(len(sorted_values) - 1, int(round(q * (len(sorted_values) - 1))))
    return sorted_values[index]
