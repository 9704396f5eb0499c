"""Reads and validates a trace file (DESIGN.md §3). Every line is checked; a bad one is a
TraceError naming the file and line (or, leniently, skipped with a warning) — never a traceback."""
from __future__ import annotations

import json
import math
import zlib
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field, fields
from pathlib import Path

from engine.errors import TraceError
from engine.telemetry.records import LAYOUTS, POLICIES, StepRecord
from engine.telemetry.trace_writer import SEGMENT_KINDS, TRACE_VERSION

AGENT_EVENTS = ("decode", "tool", "done")
LANE_INTS = ("agent", "k", "acc", "pad", "ctx")  # a lane record's fields besides its cat
GZIP_CHUNK = 1 << 16  # compressed bytes fed to zlib at a time
MAX_COUNT = 2**31  # more than any step counts: larger ints are damage, not data
_STEP_FIELDS = {f.name for f in fields(StepRecord)}


@dataclass
class Trace:
    session: dict
    steps: list[StepRecord] = field(default_factory=list)
    controls: list[dict] = field(default_factory=list)  # {"type": "control", "t", "changes"}
    agents: list[dict] = field(default_factory=list)    # {"type": "agent", "t", "agent", "event"}
    texts: list[dict] = field(default_factory=list)     # {"type": "text", "t", "agent", "segments"}
    warnings: list[str] = field(default_factory=list)


def read_trace(path: str | Path, lenient: bool = False) -> Trace:
    path = Path(path)
    lines, warnings = _read_lines(path, lenient)
    if not lines:
        raise TraceError(path, None, "empty file (no session line)")
    trace = Trace(session=_parse_session(path, lines[0]), warnings=warnings)
    step_lines = []  # the line each of trace.steps came from
    for number, text in enumerate(lines[1:], start=2):
        steps_before = len(trace.steps)
        try:
            _add_record(trace, number, text, in_order=not lenient)
        except TraceError as exc:
            if not lenient:
                raise TraceError(path, exc.line, exc.problem) from None
            trace.warnings.append(f"line {exc.line}: {exc.problem} (skipped)")
        step_lines += [number] * (len(trace.steps) - steps_before)
    if lenient:
        _keep_steps_in_order(trace, step_lines)
    return trace


def _keep_steps_in_order(trace: Trace, step_lines: list[int]) -> None:
    """Lenient reading keeps the longest run of steps in order (step numbers rising, then t not
    going back), so one damaged step is skipped, not every step after it."""
    steps = trace.steps
    if all(a.step < b.step and a.t <= b.t for a, b in zip(steps, steps[1:])):
        return  # the usual trace: nothing to search
    kept = range(len(steps))
    for value, strict in ((lambda s: s.step, True), (lambda s: s.t, False)):
        run = _longest_rising([value(steps[i]) for i in kept], strict)
        kept = [kept[i] for i in run]
    dropped = set(range(len(steps))) - set(kept)
    trace.warnings += [f"line {step_lines[i]}: step out of order: step {steps[i].step} at "
                       f"t={steps[i].t} (skipped)" for i in sorted(dropped)]
    trace.steps = [steps[i] for i in kept]


def _longest_rising(values: list, strict: bool) -> list[int]:
    """Indices of a longest rising (strictly, or not falling) subsequence, the earliest such
    indices: where the damage is later, it keeps what the strict reader would have."""
    rising_from = [0] * len(values)  # longest run starting at i
    tails = []  # tails[n]: the largest start of a run of n + 1 (negated, so they rise)
    place = bisect_left if strict else bisect_right
    for i in reversed(range(len(values))):
        at = place(tails, -values[i])
        tails[at:at + 1] = [-values[i]]
        rising_from[i] = at + 1
    kept, left, last = [], len(tails), -math.inf
    for i, value in enumerate(values):
        if rising_from[i] == left and (value > last if strict else value >= last):
            kept.append(i)
            left, last = left - 1, value
    return kept


def complete_lines(path: str | Path) -> list[str]:
    """The trace's lines as text up to its last complete one (a live or killed writer's last
    line may be cut short), gzipped or not: what a copy in the other format holds."""
    lines, _ = _read_lines(Path(path))
    return [line for line in lines if not line.endswith("\0")]


def _read_lines(path: Path, lenient: bool = False) -> tuple[list[str], list[str]]:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise TraceError(path, None, f"cannot read trace: {exc.strerror}") from None
    warnings = []
    if path.name.endswith(".gz"):
        try:
            raw, ended = _gunzip(raw)
        except zlib.error as exc:
            raise TraceError(path, None, f"not a readable gzip file ({exc})") from None
        if not ended:
            # What a killed writer leaves: everything up to its last sync flush, no trailer.
            warnings.append("gzip stream has no end (the writer did not close it); "
                            "read up to its last flush")
    try:
        text = raw.decode()
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        if not lenient:
            raise TraceError(path, line, "not UTF-8 text") from None
        # garbled bytes: a line whose record they broke is skipped as any bad line is
        text = raw.decode(errors="replace")
        warnings.append(f"line {line}: not UTF-8 text, read with replacement characters")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    elif lines:
        lines[-1] += "\0"  # marks a last line cut short (no newline) for a clearer message
    return lines, warnings


def _gunzip(raw: bytes) -> tuple[bytearray, bool]:
    """Every gzip member in turn (cat, pigz and bgzip write several), and whether the last one
    ended. Zeros at the end of the file are ignored, as gzip ignores them: a crash can leave them
    where the filesystem had the file's blocks ready, after a closed member or after the last
    flush of one its writer never closed."""
    try:
        return _inflate_members(raw)
    except zlib.error:
        unpadded = raw.rstrip(b"\0")
        if len(unpadded) == len(raw):
            raise
        return _inflate_members(unpadded)


def _inflate_members(raw: bytes) -> tuple[bytearray, bool]:
    """Fed in chunks: a member's end leaves the rest of its input as unused_data, a copy, so
    feeding the whole file would copy it again at each member of a bgzip file."""
    inflated = bytearray()
    inflate = zlib.decompressobj(47)  # 47: gzip or zlib header, detected
    view = memoryview(raw)
    for start in range(0, len(view), GZIP_CHUNK):
        end = min(start + GZIP_CHUNK, len(view))
        data = view[start:end]
        while data:
            if inflate.eof:
                if data[0] == 0 and not raw[end - len(data):].strip(b"\0"):
                    return inflated, True  # zeros to the end after a closed member
                inflate = zlib.decompressobj(47)
            inflated += inflate.decompress(data)
            data = inflate.unused_data
    return inflated, inflate.eof


def _loads(number: int, text: str) -> dict:
    truncated = text.endswith("\0")
    try:
        obj = json.loads(text.rstrip("\0"))
    except json.JSONDecodeError as exc:
        problem = "truncated line (file ends mid-record)" if truncated else f"not JSON ({exc.msg})"
        raise TraceError(None, number, problem) from None
    if not isinstance(obj, dict):
        raise TraceError(None, number, "a record must be a JSON object")
    return obj


def _parse_session(path: Path, text: str) -> dict:
    try:
        obj = _loads(1, text)
    except TraceError as exc:
        raise TraceError(path, 1, exc.problem) from None
    if obj.get("type") != "session":
        raise TraceError(path, 1, "the first line must be the session record (type=session)")
    if obj.get("version") != TRACE_VERSION:
        raise TraceError(path, 1, f"unsupported trace version {obj.get('version')!r} "
                                  f"(this build reads version {TRACE_VERSION})")
    return obj


def _add_record(trace: Trace, number: int, text: str, in_order: bool) -> None:
    obj = _loads(number, text)
    kind = obj.get("type")
    if kind == "step":
        step = _parse_step(number, obj)
        if in_order and trace.steps:
            _check_order(number, trace.steps[-1], step)
        trace.steps.append(step)
    elif kind == "control":
        if not _is_number(obj.get("t")) or not isinstance(obj.get("changes"), dict):
            raise TraceError(None, number, "control record needs a number t and a dict changes")
        trace.controls.append(obj)
    elif kind == "agent":
        if not _is_number(obj.get("t")) or type(obj.get("agent")) is not int \
                or obj.get("event") not in AGENT_EVENTS:
            raise TraceError(None, number, f"agent record needs a number t, an int agent and "
                                           f"an event in {AGENT_EVENTS}")
        trace.agents.append(obj)
    elif kind == "text":
        trace.texts.append(_check_text(number, obj))
    elif kind == "session":
        raise TraceError(None, number, "a second session record (only line 1 may be one)")
    else:
        raise TraceError(None, number, f"unknown record type {kind!r}")


def _parse_step(number: int, obj: dict) -> StepRecord:
    keys = set(obj) - {"type"}
    if keys != _STEP_FIELDS:
        missing, extra = sorted(_STEP_FIELDS - keys), sorted(keys - _STEP_FIELDS)
        raise TraceError(None, number, f"step record fields wrong (missing {missing}, "
                                       f"unexpected {extra})")
    if obj["policy"] not in POLICIES or obj["ragged"] not in LAYOUTS:
        raise TraceError(None, number, f"unknown policy {obj['policy']!r} or layout "
                                       f"{obj['ragged']!r}")
    bad = [name for name in ("step", "batch", "prefill", "budget") if not _is_count(obj[name])]
    bad += [name for name in ("t", "dt_ms") if not _is_number(obj[name])
            or not 0 <= obj[name] < math.inf]
    if bad:
        raise TraceError(None, number, f"step record has {bad} that are not numbers >= 0 "
                                       f"(counts below {MAX_COUNT})")
    if not isinstance(obj["lanes"], list) or not all(isinstance(x, dict) for x in obj["lanes"]):
        raise TraceError(None, number, "step lanes must be a list of objects")
    if not isinstance(obj["reason"], str) or not all(_is_lane(x) for x in obj["lanes"]):
        raise TraceError(None, number, f"step lanes need counts {', '.join(LANE_INTS)} and a "
                                       f"text cat, and the reason must be text")
    try:
        return StepRecord.from_dict(obj)
    except (TypeError, ValueError) as exc:
        raise TraceError(None, number, f"bad step record: {exc}") from None


def _check_order(number: int, previous: StepRecord, step: StepRecord) -> None:
    # Views and rates assume time order: a step back in time gives negative spans and absurd
    # tokens/s rather than an error.
    if step.step <= previous.step or step.t < previous.t:
        raise TraceError(None, number, f"step out of order: step {step.step} at t={step.t} "
                                       f"comes after step {previous.step} at t={previous.t} "
                                       f"(step numbers must increase, t must not go back)")


def _check_text(number: int, obj: dict) -> dict:
    if not _is_number(obj.get("t")) or type(obj.get("agent")) is not int \
            or not isinstance(obj.get("segments"), list):
        raise TraceError(None, number, "text record needs a number t, an int agent and a list "
                                       "segments")
    for segment in obj["segments"]:
        if not (isinstance(segment, list) and len(segment) == 2 and isinstance(segment[0], str)
                and segment[1] in SEGMENT_KINDS):
            raise TraceError(None, number, f"text segment {segment!r:.60} is not [text, kind] "
                                           f"with kind in {SEGMENT_KINDS}")
    return obj


def _is_lane(lane: dict) -> bool:
    return all(_is_count(lane.get(name)) for name in LANE_INTS) and isinstance(lane.get("cat"), str)


def _is_count(value) -> bool:
    return type(value) is int and 0 <= value < MAX_COUNT


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
