"""The measured step-time curve t(N) and the budget T it implies (DESIGN.md §1).

`measure` times real forward passes of one lane verifying N = 2 .. 32, 40 .. 128 query tokens,
a few batch shapes of one token per lane, and those batches with one lane drafting D tokens
(the decode shapes the policies choose between), on the actual device, model and dtype, each
paired with the pass just before it: a reference pass of one token, or for a batch with drafts
the same batch without them. A shape's point is its median ratio to its pair over several rounds
after a warm-up round, times the reference passes' median time (a batch with drafts: times its
batch's point), and points whose ratios scatter are re-timed in extra rounds. A shared machine's
speed swings over seconds (here a one-token pass took 19-40 ms from one second to the next);
both passes of a pair feel it alike, so ratios hold where the fastest of several rounds per
point did not: four calibrations in a row here gave T = 1, 3, 1, 1 that way, and T = 6, 7, 4, 5
paired. The fitted curve is the least-squares nondecreasing fit of the points (pool adjacent
violators), interpolated piecewise-linearly: a step never gets cheaper with more tokens, and
noise either side of the truth averages out, where a running maximum kept every high point. T is
the largest N with t(N) <= (1 + eps) * t(1).

The policies price a step of B lanes and D drafts with the decode shapes (`step_ms`), not with
t(B + D) of one lane: past the knee a draft costs what another lane does, far more than one more
query of a lone lane. Chat at 16 lanes, ctx 250, on a 2-core AMX Xeon: a 17th lane or a first
draft took 2.2-2.9 ms more, where t(17) - t(16) of one lane at ctx 64 is 0.6 ms, so goodput
planned its drafts at +1.1 ms and they took +2.8. Results are cached as JSON per (device,
model, dtype) in the user cache's calibration/ (engine/user_cache.py); a cache written by an
older measuring method (another `version`) is ignored and re-measured."""
from __future__ import annotations

import bisect
import hashlib
import json
import math
import os
import re
import statistics
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Callable

import torch

from engine.devices import cpu_threads, dtype_name, hardware
from engine.errors import SwarmscopeError
from engine.forward_batch import LaneInput
from engine.kv_cache import PagedKVCache
from engine.runner import ModelRunner
from engine.user_cache import cache_root

# Every N up to 32: step cost climbs in stairs (the CPU path computes rows in multiples of 8), and
# a policy spending slack must see where a stair ends, not a line smoothed over it.
QUERY_SIZES = (*range(1, 33), 40, 48, 56, 64, 80, 96, 128)
BATCH_SHAPES = (2, 4, 8, 16)
DECODE_DRAFTS = (1, 2, 4, 8, 16)  # drafts of one lane in each batch shape
# How points are measured; caches of another version are re-measured. 1: per-point repeats, not
# interleaved (points spoiled by load); 2: interleaved rounds; 3: CPU linears as weight @ x.T over
# padded rows (a much flatter fp32 curve), every N to 32; 4: ratios to a reference pass just before;
# 5: bf16 calls of many query rows attended by matmuls where the CPU has bf16 dot instructions
# (attention.py); 6: a lone lane's call (every N shape) keeps SDPA; 7: batch shapes with drafts,
# lanes' blocks interleaved as in a cache that has run a while (a gather, not a view); 8: bf16
# matmul attention only where timed faster than SDPA on this CPU.
# 9: a batch with drafts paired with the same batch without them; points whose ratios still
# scatter after the rounds are re-timed. 10: bf16 linear weights prepacked for oneDNN (model.py),
# a flatter curve on CPUs with bf16 dot instructions. 11: bf16 matmul attention only for calls
# of MATMUL_MIN_SCORES scores or more (small calls, two lanes drafting at 64 keys, keep SDPA).
VERSION = 11
# A point is re-timed while its median ratio's standard error exceeds this share of it, for at
# most EXTRA_ROUNDS x the rounds asked for in all: on a 2-core AVX2 EPYC (fp32) two in three points
# still scattered by more after five rounds, and two calibrations in a row priced a lane's first
# draft at two lanes at +4 % and +25 % of the step. A quiet machine's points settle within the
# first rounds, so its calibration takes no longer.
MAX_MEDIAN_ERROR = 0.02
EXTRA_ROUNDS = 3
# Tokens each timed lane has cached unless asked otherwise. Attention reads them all, so a swarm's
# steps at hundreds or thousands of tokens run above this curve: `calibrate --context` and the
# window's re-run measure at a longer one.
DEFAULT_CONTEXT = 64
FILL_PASSES = 8  # most passes a lane takes to fill its context before the timing


@dataclass(slots=True)
class Calibration:
    points: list[tuple[int, float]]   # (query tokens N, fastest step ms), one lane, N ascending
    eps: float = 0.10
    batch_points: list[tuple[int, float]] = field(default_factory=list)  # (B lanes x 1 token, ms)
    # (B lanes, D drafts of one of them, ms): with batch_points, the decode shapes of `step_ms`
    decode_points: list[tuple[int, int, float]] = field(default_factory=list)
    device: str = "cpu"
    model: str = ""
    dtype: str = ""
    context: int | None = None  # tokens each timed lane had cached (None: not recorded)
    threads: int | None = None  # torch's CPU threads when timed (None: a GPU, or not recorded)
    version: int = VERSION  # how the points were measured; caches of another version are stale
    # The fitted curve, as the query sizes and their times. Derived once: goodput reads t(N)
    # dozens of times a step.
    _ns: list[int] = field(init=False, repr=False, compare=False)
    _ms: list[float] = field(init=False, repr=False, compare=False)
    # B -> (drafts, fitted ms) of the decode shapes, and their B ascending; empty without
    # decode points
    _rows: dict[int, tuple[list[int], list[float]]] = field(init=False, repr=False,
                                                            compare=False)
    _batches: list[int] = field(init=False, repr=False, compare=False)
    # (eps, T) of the last `budget`: the policies read T every step, a binary search over t(N)
    _budget: tuple[float, int] | None = field(init=False, repr=False, compare=False)
    # (B, D) -> `step_ms` of a decode step: goodput prices the same few shapes step after step
    # (steps with a prefill chunk, whose sizes vary without end, are not kept)
    _step_ms: dict[tuple[int, float], float] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.points = sorted((int(n), float(ms)) for n, ms in self.points)
        self.batch_points = [(int(b), float(ms)) for b, ms in self.batch_points]
        if not self.points or self.points[0][0] != 1:
            raise ValueError(f"a calibration needs a point at N=1, got {self.points}")
        if not all(0 < ms < math.inf for _, ms in self.points) or not 0 <= self.eps < math.inf:
            raise ValueError("calibration times must be positive and finite, and eps finite "
                             "and >= 0")
        self.decode_points = sorted((int(b), int(d), float(ms)) for b, d, ms in self.decode_points)
        self._ns = [n for n, _ in self.points]
        self._ms = nondecreasing([ms for _, ms in self.points])
        self._rows = {}
        if self.decode_points:
            self._rows[1] = ([0, *DECODE_DRAFTS], [self.t_ms(1 + d) for d in (0, *DECODE_DRAFTS)])
            for b, ms in sorted(self.batch_points):
                drafts = [(d, t) for row_b, d, t in self.decode_points if row_b == b]
                self._rows[b] = ([0] + [d for d, _ in drafts],
                                 nondecreasing([ms] + [t for _, t in drafts]))
        self._batches = list(self._rows)
        self._budget = None
        self._step_ms = {}

    def step_ms(self, batch: int, drafts: float = 0, prefill: int = 0) -> float:
        """A step of `batch` decoding lanes with `drafts` draft tokens among them and `prefill`
        tokens: the decode shapes, interpolated between measured batches and draft counts, where
        they were measured; t(batch + drafts + prefill) of one lane otherwise. Past the shapes
        (more lanes, drafts or prefill) the one-lane curve adds its difference."""
        if prefill:
            return self._shape_ms(batch, drafts, prefill)
        ms = self._step_ms.get((batch, drafts))
        if ms is None:
            ms = self._step_ms[batch, drafts] = self._shape_ms(batch, drafts, 0)
        return ms

    def _shape_ms(self, batch: int, drafts: float, prefill: int) -> float:
        n = batch + drafts + prefill
        if not self._rows or batch <= 1:
            return self.t_ms(n)
        batches = self._batches  # derived once: goodput prices dozens of plans a step
        i = bisect.bisect_left(batches, batch)
        if i == len(batches):
            top = batches[-1]
            ms = self._row_ms(top, drafts) + self.t_ms(batch + drafts) - self.t_ms(top + drafts)
        else:
            low, high = batches[i - 1], batches[i]  # batch >= 2 > batches[0] == 1
            share = (batch - low) / (high - low)
            ms = (1 - share) * self._row_ms(low, drafts) + share * self._row_ms(high, drafts)
        return ms + self.t_ms(n) - self.t_ms(batch + drafts)

    def rises_with_drafts(self, batch: int) -> bool:
        """Whether `step_ms(batch, drafts)` never falls as drafts grow: on the one-lane curve and
        within the measured shapes; past them the one-lane difference added can fall."""
        return not self._rows or batch <= self._batches[-1]

    def _row_ms(self, batch: int, drafts: float) -> float:
        ds, ms = self._rows[batch]
        j = bisect.bisect_left(ds, drafts)
        if j == len(ds):
            return ms[-1] + self.t_ms(batch + drafts) - self.t_ms(batch + ds[-1])
        if ds[j] == drafts:
            return ms[j]
        return ms[j - 1] + (ms[j] - ms[j - 1]) * (drafts - ds[j - 1]) / (ds[j] - ds[j - 1])

    def t_ms(self, n_tokens: float) -> float:
        """Step time for n query tokens, interpolated between measured points on the fitted
        (monotone) curve, and in proportion to n past the last one."""
        ns, ms = self._ns, self._ms
        i = bisect.bisect_left(ns, n_tokens)
        if i == 0:
            return ms[0]
        if i < len(ns):
            return ms[i - 1] + (ms[i] - ms[i - 1]) * (n_tokens - ns[i - 1]) / (ns[i] - ns[i - 1])
        # Past the last point a pass is compute-bound: time grows in proportion to the tokens.
        # (The last segment's slope can be flat or noisy, and a flat one made any depth look free.)
        return ms[-1] * n_tokens / ns[-1]

    @property
    def budget(self) -> int:
        """T: the largest N (up to the largest measured) with t(N) <= (1 + eps) t(1)."""
        if self._budget is not None and self._budget[0] == self.eps:
            return self._budget[1]
        limit = (1 + self.eps) * self.t_ms(1)
        low, high = 1, self.points[-1][0]  # t(low) <= limit; the curve never falls
        while low < high:
            mid = (low + high + 1) // 2
            if self.t_ms(mid) <= limit:
                low = mid
            else:
                high = mid - 1
        self._budget = (self.eps, low)
        return low

    def to_dict(self) -> dict:
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.init}
        data["points"] = [list(p) for p in self.points]
        data["batch_points"] = [list(p) for p in self.batch_points]
        data["decode_points"] = [list(p) for p in self.decode_points]
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "Calibration":
        """Also reads calibrations embedded in older traces, which carry no version (1)."""
        fields = {k: data[k] for k in ("points", "eps", "batch_points", "decode_points", "device",
                                       "model", "dtype", "context", "threads") if k in data}
        return cls(**fields, version=int(data.get("version", 1)))

    @property
    def hardware(self) -> str:
        return hardware(self.device, self.threads)

    @classmethod
    def make_dummy(cls, t1_ms: float = 25.0, per_token_ms: float = 1.0, knee: int = 8,
                   eps: float = 0.10) -> "Calibration":
        """A roofline: flat (slightly rising) up to `knee` tokens, then `per_token_ms` each."""
        def t(n: int) -> float:
            return t1_ms * (1 + 0.5 * eps * (n - 1) / max(knee - 1, 1)) if n <= knee else \
                t1_ms * (1 + 0.5 * eps) + per_token_ms * (n - knee)
        return cls(points=[(n, t(n)) for n in QUERY_SIZES], eps=eps, device="dummy",
                   model="dummy", dtype="none")


def model_key(loaded) -> str:
    """The model's part of its calibration's cache name: its name and a digest of the shapes a
    step's time depends on, as folders of different models can share a name (checkpoint-500)."""
    c = loaded.config
    shapes = (c.vocab_size, c.hidden_size, c.intermediate_size, c.num_layers, c.num_heads,
              c.num_kv_heads, c.head_dim, c.tie_word_embeddings, c.qkv_bias, c.qk_norm)
    if c.conv_layers or c.num_experts:  # (only then: other models' caches keep their names)
        shapes += (c.conv_layers, c.num_experts, c.experts_per_token, c.expert_size)
    return f"{loaded.name}-{hashlib.sha1(repr(shapes).encode()).hexdigest()[:8]}"


def cache_path(device: str, model: str, dtype: str, threads: int | None = None) -> Path:
    """Where the calibration for (device, model: a model_key, dtype) is cached; on a CPU, per
    thread count, as one thread's t(N) is another curve than two threads'."""
    where = device if threads is None else f"{device}-{threads}threads"
    slug = "_".join(re.sub(r"[^A-Za-z0-9.-]+", "-", part) for part in (where, model, dtype))
    return cache_root() / "calibration" / f"{slug}.json"


def load_cached(device: str, model: str, dtype: str, eps: float,
                threads: int | None = None) -> Calibration | None:
    """The cached calibration, or None when there is none or it is stale (another version)."""
    path = cache_path(device, model, dtype, threads)
    if not path.exists():
        return None
    try:
        calibration = Calibration.from_dict(json.loads(path.read_text()))
    except (ValueError, TypeError, KeyError, OSError) as exc:
        raise SwarmscopeError(f"{path}: unreadable calibration ({exc}); delete it to re-measure")
    if calibration.version != VERSION:
        return None
    calibration.eps = eps  # the measured curve does not depend on eps; T is derived from it
    return calibration


def save(calibration: Calibration, model: str) -> Path:
    """Write the cache file whole or not at all (a file beside it, renamed over it): a second
    window calibrating the same model must never read half of one."""
    path = cache_path(calibration.device, model, calibration.dtype, calibration.threads)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        partial.write_text(json.dumps(calibration.to_dict(), indent=1))
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)  # a full disk's partial file, not left behind
    return path


def measure(runner, vocab_size: int, *, device: str, model: str, dtype: str, eps: float = 0.10,
            threads: int | None = None, context: int = DEFAULT_CONTEXT, repeats: int = 5,
            query_sizes=QUERY_SIZES, batch_shapes=BATCH_SHAPES, decode_drafts=DECODE_DRAFTS,
            progress: Callable[[str], None] | None = None) -> Calibration:
    """Time real forward passes on `runner` (a ModelRunner with room for max(batch_shapes)
    sequences of context + max(query_sizes) tokens). Sequence ids from 1_000_000 are used and
    freed afterwards. One warm-up round, then `repeats` timed rounds over every shape, each
    shape's pass just after its pair (module docstring); then rounds of the points whose ratios
    scatter (`median_error` above MAX_MEDIAN_ERROR) until none does or EXTRA_ROUNDS x `repeats`
    rounds have timed them."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    base = 1_000_000
    lanes_needed = max((1, *batch_shapes))
    tokens = [(7 * i + 3) % vocab_size for i in range(
        context + max((*query_sizes, *(1 + d for d in decode_drafts), lanes_needed)))]
    # every timed token a guess: recurrent layers keep their state at the context's end
    reference = [LaneInput(base, tokens[context:context + 1], context, 1, 1)]

    def decode(b: int, d: int) -> list[LaneInput]:  # b lanes, the first verifying d drafts
        # each lane a token of its own: a mixture of experts routes them apart, as it would
        # live lanes (the same token in every lane would read one lane's experts)
        return ([LaneInput(base, tokens[context:context + 1 + d], context, 1 + d, 1 + d)]
                + [LaneInput(base + i, [tokens[context + i]], context, 1, 1) for i in range(1, b)])

    # (kind, key, the pass timed just before, the shape's pass): a batch with drafts follows the
    # same batch without them, so the drafts' increment, what goodput weighs, is measured paired.
    shapes = ([("N", n, reference, [LaneInput(base, tokens[context:context + n], context, n, n)])
               for n in query_sizes if n > 1]
              + [("B", b, reference, decode(b, 0)) for b in batch_shapes]
              + [("D", (b, d), decode(b, 0), decode(b, d))
                 for b in batch_shapes for d in decode_drafts])

    def timed(lanes: list[LaneInput]) -> float:
        start = time.perf_counter()
        runner.forward(lanes)
        runner.synchronize()  # on a GPU the pass runs after forward returns
        ms = (time.perf_counter() - start) * 1e3
        for lane in lanes:
            runner.kv.blocks.truncate(lane.seq_id, context)
        return ms

    reference_ms, ratios = [], [[] for _ in shapes]
    largest = max((i for i, shape in enumerate(shapes) if shape[0] == "N"),  # reported each round
                  key=lambda i: shapes[i][1], default=0)
    block = runner.kv.block_size
    try:
        # A realistic context for attention to read, the lanes' blocks interleaved as a running
        # engine leaves them: gathered, not read as one view of consecutive blocks (which made a
        # 16-lane step 4 ms faster than live ones at ctx 250). A long context goes in runs of
        # blocks, so that filling it takes a few passes a lane, not one a block.
        chunk = block * -(-context // (block * FILL_PASSES))
        for start in range(0, context, chunk):
            for lane in range(lanes_needed):
                runner.forward([LaneInput(base + lane, tokens[start:min(start + chunk, context)],
                                          start, 0)])

        def time_round(indexes, keep: bool) -> None:
            for index in indexes:
                _, _, before_lanes, lanes = shapes[index]
                before = timed(before_lanes)
                ms = timed(lanes)
                if keep:
                    if before_lanes is reference:
                        reference_ms.append(before)
                    ratios[index].append(ms / before)

        for round_ in range(repeats + 1):  # round 0 warms up allocator and kernel choices
            time_round(range(len(shapes)), keep=round_ > 0)
            if progress and round_ > 0:
                progress(f"  round {round_}/{repeats}: t(1) = "
                         f"{statistics.median(reference_ms):.2f} ms, t({shapes[largest][1]})/t(1)"
                         f" = {statistics.median(ratios[largest]):.2f}")
        for extra in range(1, (EXTRA_ROUNDS - 1) * repeats + 1):
            noisy = [i for i, r in enumerate(ratios) if median_error(r) > MAX_MEDIAN_ERROR]
            if not noisy:
                break
            if progress:
                progress(f"  extra round {extra}: re-timing {len(noisy)} noisy point(s)")
            time_round(noisy, keep=True)
    finally:
        for lane in range(lanes_needed):
            if base + lane in runner.kv.blocks:
                runner.kv.blocks.free(base + lane)
    t1 = statistics.median(reference_ms)
    ratio = {(kind, key): statistics.median(r) for (kind, key, _, _), r in zip(shapes, ratios)}
    batches = {b: t1 * ratio["B", b] for b in batch_shapes}
    return Calibration(points=[(1, t1)] + [(n, t1 * ratio["N", n]) for n in query_sizes if n > 1],
                       eps=eps, batch_points=list(batches.items()),
                       decode_points=[(b, d, batches[b] * ratio["D", (b, d)])
                                      for b in batch_shapes for d in decode_drafts],
                       device=device, model=model, dtype=dtype, context=context, threads=threads)


def median_error(values: list[float]) -> float:
    """The standard error of the median of `values`, relative to it, from their median absolute
    deviation (for normal noise: 1.4826 MAD estimates the spread, 1.2533 spread / sqrt(n) the
    median's error); infinite below three values."""
    if len(values) < 3:
        return float("inf")
    middle = statistics.median(values)
    deviation = statistics.median(abs(v - middle) for v in values)
    return 1.858 * deviation / (abs(middle) * len(values) ** 0.5)


def nondecreasing(values: list[float]) -> list[float]:
    """The least-squares nondecreasing fit of `values` (pool adjacent violators): each run of
    points that falls is replaced by its mean."""
    pools: list[tuple[float, int]] = []  # (sum, count) of each pooled run
    for value in values:
        pools.append((value, 1))
        while len(pools) > 1 and pools[-2][0] * pools[-1][1] > pools[-1][0] * pools[-2][1]:
            total, count = pools.pop()
            pools[-1] = (pools[-1][0] + total, pools[-1][1] + count)
    return [total / count for total, count in pools for _ in range(count)]


def longest_context(config) -> int:
    """The longest context calibration can time lanes at: the model's positions less the
    longest query timed on top of it."""
    return config.max_position - max(QUERY_SIZES)


def calibrate_or_load(loaded, eps: float = 0.10,
                      progress: Callable[[str], None] | None = None,
                      force: bool = False, context: int | None = None) -> Calibration:
    """The cached calibration for (device, model, dtype; the CPU threads in force on a CPU),
    whatever its context, or one measured with lanes at `context` (None: DEFAULT_CONTEXT, or
    fewer where the model's positions hold no more) and cached when there is none or `force`."""
    device, dtype = str(loaded.model.device), dtype_name(loaded.model.dtype)
    key, threads = model_key(loaded), cpu_threads(loaded.model.device)
    if not force:
        cached = load_cached(device, key, dtype, eps, threads)
        if cached is not None:
            return cached
    longest, most = max(QUERY_SIZES), longest_context(loaded.config)
    if most < 1:
        raise SwarmscopeError(f"{loaded.name} has {loaded.config.max_position} positions; "
                              f"calibration times up to {longest} query tokens on top of a "
                              f"cached context, so it needs a model of more than {longest}")
    context = min(DEFAULT_CONTEXT, most) if context is None else context
    if not 1 <= context <= most:
        raise SwarmscopeError(f"calibration context must be 1..{most} tokens for {loaded.name} "
                              f"(its {loaded.config.max_position} positions less the {longest} "
                              f"query tokens timed), got {context}")
    # Room for every shape: one lane of context + the longest query beside 15 lanes of context
    # + 1, in blocks of 16 tokens.
    block, lanes = 16, max(BATCH_SHAPES)
    blocks = -(-(context + longest) // block) + (lanes - 1) * -(-(context + 1) // block)
    kv = PagedKVCache(loaded.config, blocks, block, loaded.model.dtype, loaded.model.device)
    runner = ModelRunner(loaded.model, kv)
    if progress:
        progress(f"calibrating {loaded.name} ({dtype}, {hardware(device, threads)}): timing "
                 f"forward passes, lanes at context {context}")
    with torch.inference_mode():
        result = measure(runner, loaded.config.vocab_size, device=device, model=loaded.name,
                         dtype=dtype, eps=eps, threads=threads, context=context,
                         progress=progress)
    try:
        where = f"cached in {save(result, key)}"
    except OSError as exc:  # a read-only or full cache: the curve still serves this session
        where = (f"NOT cached ({cache_path(device, key, dtype, threads)}: "
                 f"{exc.strerror or exc}), so it "
                 "is measured again next time")
    if progress:
        progress(f"budget T = {result.budget} (t(1) = {result.t_ms(1):.2f} ms); {where}")
    return result
