"""Exports a trace to Chrome trace JSON, which ui.perfetto.dev opens.

One process "swarm" with a track (thread) per agent: a "decode turn" slice from each decode event
to the agent's next tool/done event, holding one "step" slice per engine step the agent was in
(args k, acc, ctx); a "tool" slice while it is blocked. Counter tracks: live batch, budget used
(pass tokens against T), acceptance, tokens/s."""
from __future__ import annotations

import json
from bisect import bisect_left
from collections import defaultdict
from pathlib import Path

from engine.errors import TraceError
from engine.telemetry.trace_reader import Trace

PID = 1
COUNTER_TID = 0


def to_chrome_trace(trace: Trace) -> dict:
    events: list[dict] = [{"ph": "M", "pid": PID, "name": "process_name",
                           "args": {"name": f"swarm ({trace.session.get('model', '?')})"}}]
    agent_ids = sorted({e["agent"] for e in trace.agents}
                       | {lane.agent for s in trace.steps for lane in s.lanes})
    for agent in agent_ids:
        events.append({"ph": "M", "pid": PID, "tid": _tid(agent), "name": "thread_name",
                       "args": {"name": f"agent {agent}"}})
    end_t = max([s.t + s.dt_ms / 1000 for s in trace.steps] + [e["t"] for e in trace.agents]
                + [0.0])
    events += _turn_slices(trace, end_t)
    for s in trace.steps:
        for lane in s.lanes:
            events.append({"ph": "X", "pid": PID, "tid": _tid(lane.agent), "name": "step",
                           "cat": lane.cat, "ts": _us(s.t), "dur": max(s.dt_ms * 1000, 1.0),
                           "args": {"step": s.step, "k": lane.k, "accepted": lane.acc,
                                    "pad": lane.pad, "ctx": lane.ctx}})
        counters = {"batch": s.batch, "budget used": s.pass_tokens, "budget": s.budget,
                    "tokens/s": s.emitted / max(s.dt_ms / 1000, 1e-9)}
        if s.acceptance_rate is not None:
            counters["acceptance"] = s.acceptance_rate
        for name, value in counters.items():
            events.append({"ph": "C", "pid": PID, "name": name, "ts": _us(s.t),
                           "args": {name: value}})
    for c in trace.controls:
        events.append({"ph": "i", "pid": PID, "tid": COUNTER_TID, "s": "g", "name": "control",
                       "ts": _us(c["t"]), "args": c["changes"]})
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "metadata": {k: v for k, v in trace.session.items() if k != "calibration"}}


def _turn_slices(trace: Trace, end_t: float) -> list[dict]:
    """Decode-turn and tool slices from agent events; each turn's args total its steps' k/acc."""
    # Per agent: step start times and running totals of (steps, k, acc), so a turn's totals are
    # two bisections rather than a scan of every step.
    times: dict[int, list[float]] = defaultdict(list)
    sums: dict[int, list[tuple[int, int, int]]] = defaultdict(lambda: [(0, 0, 0)])
    for s in trace.steps:
        for lane in s.lanes:
            n, k, acc = sums[lane.agent][-1]
            times[lane.agent].append(s.t)
            sums[lane.agent].append((n + 1, k + lane.k, acc + lane.acc))
    by_agent: dict[int, list[dict]] = defaultdict(list)
    for e in trace.agents:
        by_agent[e["agent"]].append(e)
    slices = []
    for agent, agent_events in by_agent.items():
        for i, event in enumerate(agent_events):
            if event["event"] == "done":
                continue
            start = event["t"]
            stop = agent_events[i + 1]["t"] if i + 1 < len(agent_events) else end_t
            args = {}
            if event["event"] == "decode":
                lo = bisect_left(times[agent], start)
                hi = bisect_left(times[agent], stop)
                (n0, k0, a0), (n1, k1, a1) = sums[agent][lo], sums[agent][hi]
                args = {"steps": n1 - n0, "k": k1 - k0, "accepted": a1 - a0}
            slices.append({"ph": "X", "pid": PID, "tid": _tid(agent),
                           "name": "decode turn" if event["event"] == "decode" else "tool",
                           "ts": _us(start), "dur": max(_us(stop) - _us(start), 1.0),
                           "args": args})
    return slices


def write_perfetto(trace: Trace, path: str | Path) -> None:
    try:
        with open(path, "w") as f:
            json.dump(to_chrome_trace(trace), f)
    except OSError as exc:
        raise TraceError(path, None, f"cannot write Perfetto trace: {exc.strerror}") from None


def _tid(agent: int) -> int:
    return agent + 1  # tid 0 holds global instants


def _us(t: float) -> float:
    return round(t * 1e6, 3)
