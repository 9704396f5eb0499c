"""Trace writer/reader round trip, clear errors for bad files, and crash safety."""
import gzip
import json
import os
import signal
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest

from engine.errors import TraceError
from engine.telemetry.records import StepRecord
from engine.telemetry.trace_reader import complete_lines, read_trace
from engine.telemetry.trace_writer import TraceWriter

TEXT = [["<|im_start|>user\nFix it.", "prompt"], ["def f(x):", "committed"],
        ["\n    return x", "accepted_draft"]]
SESSION = {"model": "tiny-test", "device": "cpu", "dtype": "fp32",
           "calibration": {"points": [[1, 2.0]]}, "controls": {"policy": "goodput"}}


def write_sample(path, steps=20):
    records = [StepRecord.make_dummy(step=i, batch=1 + i % 6, ragged="padded" if i % 3 else "packed")
               for i in range(steps)]
    with TraceWriter(path, SESSION) as writer:
        writer.write_agent(0.0, 0, "decode")
        for rec in records:
            writer.write_step(rec)
        writer.write_control(0.5, {"k": 2})
        writer.write_agent(0.7, 0, "tool")
        writer.write_text(0.7, 0, TEXT)
    return records


@pytest.mark.parametrize("name", ["t.jsonl", "t.jsonl.gz"])
def test_round_trip(tmp_path, name):
    records = write_sample(tmp_path / name)
    trace = read_trace(tmp_path / name)
    assert trace.session["version"] == 1 and trace.session["model"] == "tiny-test"
    assert [s.to_dict() for s in trace.steps] == [r.to_dict() for r in records]
    assert trace.controls == [{"type": "control", "t": 0.5, "changes": {"k": 2}}]
    assert [a["event"] for a in trace.agents] == ["decode", "tool"] and trace.warnings == []
    assert trace.texts == [{"type": "text", "t": 0.7, "agent": 0, "segments": TEXT}]
    if name.endswith(".gz"):
        assert gzip.open(tmp_path / name).readline().startswith(b'{"type":"session"')


def test_a_version_1_trace_without_text_records_still_reads(tmp_path):
    path = tmp_path / "old.jsonl"
    write_sample(path)
    lines = [line for line in lines_of(path) if '"type":"text"' not in line]
    path.write_text("\n".join(lines) + "\n")
    trace = read_trace(path)
    assert trace.texts == [] and len(trace.steps) == 20 and len(trace.agents) == 2


def lines_of(path):
    return Path(path).read_text().splitlines()


def _edit_line(index, edit):
    """A mutation that edits line `index` (0-based) as a JSON object."""
    def mutate(lines):
        obj = json.loads(lines[index])
        edit(obj)
        lines[index] = json.dumps(obj)
    return mutate


@pytest.mark.parametrize("mutate, line, problem", [
    (lambda ls: ls.__setitem__(5, ls[5][:-10]), 6, "not JSON"),
    (lambda ls: ls.__setitem__(3, json.dumps({"type": "step", "step": 1})), 4, "missing"),
    (lambda ls: ls.__setitem__(2, ls[2].replace('"packed"', '"diagonal"')
                               .replace('"padded"', '"diagonal"')), 3, "unknown policy"),
    (lambda ls: ls.__setitem__(4, '{"type": "agent", "t": 1, "agent": 0, "event": "nap"}'), 5,
     "event in"),
    (lambda ls: ls.__setitem__(4, '{"type": "text", "t": 1, "agent": 0, "segments": [["hi", '
                               '"shouted"]]}'), 5, "kind in"),
    (lambda ls: ls.__setitem__(4, '{"type": "text", "t": 1, "agent": 0, "segments": [["hi"]]}'),
     5, "is not [text, kind]"),
    (lambda ls: ls.__setitem__(4, '{"type": "text", "t": 1, "agent": "0", "segments": []}'), 5,
     "int agent"),
    (_edit_line(3, lambda step: step["lanes"][0].update(agent="a")), 4, "step lanes need counts"),
    (_edit_line(3, lambda step: step["lanes"][0].update(ctx=10**20)), 4, "step lanes need counts"),
    (_edit_line(3, lambda step: step["lanes"][0].update(cat=7)), 4, "text cat"),
    (_edit_line(3, lambda step: step.update(reason=None)), 4, "reason must be text"),
    (_edit_line(3, lambda step: step.update(batch=-1)), 4, "not numbers >= 0"),
    (_edit_line(3, lambda step: step.update(dt_ms=float("nan"))), 4, "not numbers >= 0"),
    (lambda ls: ls.__setitem__(slice(2, 22), ls[21:1:-1]), 4, "step out of order"),
    (_edit_line(4, lambda step: step.update(t=0.01)), 5, "step out of order"),
    (_edit_line(4, lambda step: step.update(step=1)), 5, "step out of order"),
    (lambda ls: ls.__setitem__(4, '{"type": "mystery"}'), 5, "unknown record type"),
    (lambda ls: ls.__setitem__(4, '[1, 2]'), 5, "JSON object"),
    (lambda ls: ls.__setitem__(0, ls[0].replace('"version":1', '"version":9')), 1, "version 9"),
])
def test_malformed_lines_are_errors_with_their_line_number(tmp_path, mutate, line, problem):
    path = tmp_path / "t.jsonl"
    write_sample(path)
    lines = lines_of(path)
    mutate(lines)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(TraceError) as info:
        read_trace(path)
    assert info.value.line == line and problem in info.value.problem
    assert str(info.value).startswith(f"{path}:{line}: ")
    if line > 1:  # lenient mode skips the line and says so
        trace = read_trace(path, lenient=True)
        assert trace.warnings and f"line {line}:" in trace.warnings[0]


@pytest.mark.parametrize("damage", [dict(step=10**9), dict(t=1e9), dict(step=0)])
def test_lenient_reading_skips_one_damaged_step_not_every_step_after_it(tmp_path, damage):
    path = tmp_path / "t.jsonl"
    write_sample(path)
    lines = lines_of(path)
    _edit_line(6, lambda step: step.update(damage))(lines)  # line 7: step 4
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(TraceError, match="step out of order"):
        read_trace(path)
    trace = read_trace(path, lenient=True)
    assert [s.step for s in trace.steps] == [i for i in range(20) if i != 4]
    assert len(trace.warnings) == 1 and trace.warnings[0].startswith("line 7: step out of order")


def test_truncated_last_line_and_empty_and_missing_files(tmp_path):
    path = tmp_path / "t.jsonl"
    write_sample(path, steps=5)
    text = path.read_text()
    path.write_text(text[:-30])
    with pytest.raises(TraceError, match=r"t.jsonl:\d+: truncated line"):
        read_trace(path)
    assert len(read_trace(path, lenient=True).steps) == 5  # the cut line was the text record
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(TraceError, match="empty file"):
        read_trace(tmp_path / "empty.jsonl")
    with pytest.raises(TraceError, match="cannot read trace"):
        read_trace(tmp_path / "nope.jsonl")
    (tmp_path / "bad.jsonl.gz").write_bytes(b"not gzip at all")
    with pytest.raises(TraceError, match="not a readable gzip"):
        read_trace(tmp_path / "bad.jsonl.gz")


def jsonl(lines):
    return "".join(line + "\n" for line in lines).encode()


def gzip_members(path, lines, cuts):
    """Writes lines as gzip members split at cuts, as cat, pigz or bgzip would."""
    bounds = [0, *cuts, len(lines)]
    path.write_bytes(b"".join(gzip.compress(jsonl(lines[a:b])) for a, b in zip(bounds, bounds[1:])))


@pytest.mark.parametrize("chunk", [7, 1 << 16])  # 7: member ends fall inside and across chunks
def test_every_gzip_member_is_read(tmp_path, monkeypatch, chunk):
    import engine.telemetry.trace_reader as trace_reader

    monkeypatch.setattr(trace_reader, "GZIP_CHUNK", chunk)
    write_sample(tmp_path / "t.jsonl")
    lines = lines_of(tmp_path / "t.jsonl")
    path = tmp_path / "members.jsonl.gz"
    gzip_members(path, lines, [1, 2, 10, 11])
    assert read_trace(path) == read_trace(tmp_path / "t.jsonl")
    gzip_members(path, lines + lines, [len(lines)])  # two sessions, as `cat a.gz b.gz`
    with pytest.raises(TraceError, match=rf":{len(lines) + 1}: a second session record"):
        read_trace(path)
    # A last member its writer never closed still reads up to its last flush, with the warning.
    deflate = zlib.compressobj(6, zlib.DEFLATED, 31)
    path.write_bytes(gzip.compress(jsonl(lines[:10])) + deflate.compress(jsonl(lines[10:]))
                     + deflate.flush(zlib.Z_SYNC_FLUSH))
    trace = read_trace(path)
    assert len(trace.steps) == 20 and "no end" in trace.warnings[0]
    # Zeros after the last member (a crash on a filesystem that had the blocks ready), as many
    # as cross a chunk's end: ignored, as gzip does; zeros then more data are not.
    path.write_bytes(gzip.compress(jsonl(lines)) + b"\0" * 20)
    assert read_trace(path) == read_trace(tmp_path / "t.jsonl")
    path.write_bytes(gzip.compress(jsonl(lines)) + b"\0" * 20 + gzip.compress(jsonl(lines)))
    with pytest.raises(TraceError, match="not a readable gzip file"):
        read_trace(path)
    # ... and after the last flush of a member its writer never closed
    deflate = zlib.compressobj(6, zlib.DEFLATED, 31)
    path.write_bytes(deflate.compress(jsonl(lines)) + deflate.flush(zlib.Z_SYNC_FLUSH)
                     + b"\0" * 512)
    trace = read_trace(path)
    assert len(trace.steps) == 20 and "no end" in trace.warnings[0]


def test_a_line_of_garbled_bytes_is_skipped_when_lenient(tmp_path):
    write_sample(tmp_path / "t.jsonl")
    raw = (tmp_path / "t.jsonl").read_bytes().split(b"\n")
    raw[3] = raw[3][:10] + b"\xff\xfe" + raw[3][12:]
    path = tmp_path / "garbled.jsonl"
    path.write_bytes(b"\n".join(raw))
    with pytest.raises(TraceError, match=r"garbled.jsonl:4: not UTF-8 text"):
        read_trace(path)
    trace = read_trace(path, lenient=True)
    assert trace.warnings[0] == "line 4: not UTF-8 text, read with replacement characters"
    assert any(w.startswith("line 4: ") and w.endswith("(skipped)") for w in trace.warnings)


WRITER = """
import sys, time
from engine.telemetry.records import StepRecord
from engine.telemetry.trace_writer import TraceWriter
w = TraceWriter(sys.argv[1], {"model": "m"}, flush_interval_s=0.05)
i = 0
while True:
    w.write_step(StepRecord.make_dummy(step=i, batch=3))
    i += 1
    if i % 50 == 0:
        time.sleep(0.01)
"""


@pytest.mark.parametrize("name", ["crash.jsonl", "crash.jsonl.gz"])
def test_a_writer_killed_mid_run_leaves_a_readable_file(tmp_path, name):
    path = tmp_path / name
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)],
                            cwd=Path(__file__).resolve().parents[3])
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (not path.exists() or path.stat().st_size < 20_000):
            time.sleep(0.05)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    trace = read_trace(path)  # strict: every flushed line is whole
    assert len(trace.steps) > 50
    assert [s.step for s in trace.steps] == list(range(len(trace.steps)))
    if name.endswith(".gz"):
        assert "no end" in trace.warnings[0]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
def test_a_trace_that_cannot_take_even_its_first_line_is_a_clear_error():
    with pytest.raises(TraceError, match="cannot write trace: No space left on device"):
        TraceWriter("/dev/full", {"model": "m"})


@pytest.mark.parametrize("name", ["s.jsonl", "s.jsonl.gz"])
def test_a_disk_that_fills_mid_session_stops_the_trace_not_the_session(tmp_path, monkeypatch,
                                                                       name):
    """Writing stops with the reason kept (the engine shows it); later lines are dropped rather
    than held in memory, and closing does not raise. The file keeps what came before."""
    import engine.telemetry.trace_writer as trace_writer

    path = tmp_path / name
    writer = TraceWriter(path, {"model": "m"}, flush_interval_s=60)
    writer.write_step(StepRecord.make_dummy(0))
    writer.flush()

    def full(fd, data):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(trace_writer.os, "write", full)
    writer.write_step(StepRecord.make_dummy(1))
    writer.flush()
    assert writer.error == (f"{path}: trace writing stopped (No space left on device); the file "
                            "keeps the steps before")
    writer.write_step(StepRecord.make_dummy(2))
    assert writer._pending == []  # dropped, not piling up for the rest of the session
    writer.close()
    monkeypatch.undo()
    assert [s.step for s in read_trace(path, lenient=True).steps] == [0]


def test_complete_lines_of_a_live_trace_stop_at_its_last_whole_line(tmp_path):
    writer = TraceWriter(tmp_path / "live.jsonl.gz", {"model": "m"}, flush_interval_s=60)
    for step in range(3):
        writer.write_step(StepRecord.make_dummy(step))
    writer.flush()  # not closed: no gzip trailer yet, as while the window records
    lines = complete_lines(tmp_path / "live.jsonl.gz")
    assert [json.loads(line)["type"] for line in lines] == ["session", "step", "step", "step"]
    writer.close()
    cut = tmp_path / "cut.jsonl"
    cut.write_text("\n".join(lines) + "\n" + lines[-1][:20])  # a line being written
    assert complete_lines(cut) == lines
