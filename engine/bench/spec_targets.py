"""Issue #3's targets for `bench spec`, judged from its rows: goodput at least 0.97x the best of
the other policies and at least 1.0x off in every cell, and at least 1.5x off on code edits at
B=1 (set for bf16 on a 2-core CPU). Each verdict gives the ratio and its standard error over the
paired rounds, so that a miss by less than the noise can be told from a real one, and where the
two policies' texts offered unlike shares to copy (bench.spec.copyable), those shares."""
from __future__ import annotations

from engine.bench.spec import ratio_spread

AT_LEAST_BEST = 0.97
AT_LEAST_OFF = 1.0
COPYING_AT_ONE = 1.5  # x off, code edits at B=1


def judge(rows: list[dict]) -> list[str]:
    """One line per target the rows can judge (they need goodput and off; the first target also
    a third policy, the last the code-edit B=1 cell)."""
    cells: dict[tuple[str, int], dict[str, dict]] = {}
    for row in rows:
        cells.setdefault((row["workload"], row["B"]), {})[row["policy"]] = row
    cells = {key: cell for key, cell in cells.items() if {"goodput", "off"} <= set(cell)}
    if not cells:
        return []
    against_best, against_off = [], []
    for (workload, batch), cell in sorted(cells.items()):
        where = f"{workload} B={batch}"
        good, off = cell["goodput"], cell["off"]
        against_off.append((_ratio(good, off), where, _texts(good, off)))
        others = [row for name, row in cell.items() if name != "goodput"]
        if len(others) > 1:
            best = max(others, key=lambda row: row["tokens_per_s"])
            against_best.append((_ratio(good, best), f"{where} against {best['policy']}",
                                 _texts(good, best)))
    lines = []
    if against_best:
        lines.append(_verdict(f"goodput >= {AT_LEAST_BEST:g}x the best other policy at every B",
                              against_best, AT_LEAST_BEST))
    lines.append(_verdict(f"goodput >= {AT_LEAST_OFF:g}x off at every B", against_off,
                          AT_LEAST_OFF))
    if ("code-edit", 1) in cells:
        cell = cells["code-edit", 1]
        lines.append(_verdict(f"goodput >= {COPYING_AT_ONE:g}x off on code edits at B=1",
                              [(_ratio(cell["goodput"], cell["off"]), "code-edit B=1", "")],
                              COPYING_AT_ONE))
    return lines


def _ratio(row: dict, reference: dict) -> tuple[float, float | None]:
    return (row["tokens_per_s"] / reference["tokens_per_s"],
            ratio_spread(row["round_tokens_per_s"], reference["round_tokens_per_s"]))


def _texts(row: dict, other: dict) -> str:
    """How much each text offered to copy, where the two policies wrote texts that differ in
    it (bf16): a miss by a lucky text is told from a miss by the policy."""
    mine, theirs = row.get("copyable"), other.get("copyable")
    if mine is None or theirs is None or round(mine, 3) == round(theirs, 3):
        return ""
    return f" [copyable text: {other['policy']} {theirs:.3f}, goodput {mine:.3f}]"


def _verdict(target: str, ratios: list[tuple[tuple[float, float | None], str, str]],
             least: float) -> str:
    missed = [entry for entry in ratios if entry[0][0] < least]
    shown = missed or [min(ratios)]
    cells = ", ".join(f"{where} {_fmt(ratio)}{texts}" for ratio, where, texts in shown)
    return f"{target}: " + (f"missed at {cells}" if missed else f"met (lowest {cells})")


def _fmt(ratio: tuple[float, float | None]) -> str:
    value, spread = ratio
    return f"{value:.3f}" + ("" if spread is None else f" ± {spread:.3f}")
