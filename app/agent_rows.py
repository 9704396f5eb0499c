"""Rows of the agents table. Live they come from Engine.agents(); in replay they are rebuilt from
the trace's agent events and step lanes (a trace has no transcripts). Qt-free."""
from __future__ import annotations

from dataclasses import dataclass, field

from app.history import History


@dataclass(slots=True)
class AgentRow:
    id: int
    state: str                 # decode | tool | waiting | done
    cat: str
    tokens: int                # emitted for this agent
    acceptance: float | None   # accepted / drafted
    transcript: list[tuple[str, str]] = field(default_factory=list)  # [(text, kind)]

    @classmethod
    def from_view(cls, view) -> "AgentRow":
        """Copy an engine AgentView, so the table never holds engine objects across threads."""
        return cls(view.id, view.state, view.cat, int(view.tokens), view.acceptance,
                   list(view.transcript))


def rows_from_history(history: History, stop: int) -> list[AgentRow]:
    """Agent table as of step `stop`: state from the last agent event before it, the rest from lanes."""
    rows: dict[int, AgentRow] = {}
    drafted: dict[int, int] = {}
    accepted: dict[int, int] = {}
    for rec in history.records[:stop]:
        for lane in rec.lanes:
            row = rows.setdefault(lane.agent, AgentRow(lane.agent, "waiting", lane.cat, 0, None))
            row.cat = lane.cat
            row.tokens += 1 + lane.acc
            drafted[lane.agent] = drafted.get(lane.agent, 0) + lane.k
            accepted[lane.agent] = accepted.get(lane.agent, 0) + lane.acc
    t_stop = history.records[stop - 1].t if stop else 0.0
    for event in history.events:
        if event.get("type") == "agent" and event["t"] <= t_stop:
            row = rows.setdefault(event["agent"], AgentRow(event["agent"], "waiting", "?", 0, None))
            row.state = event["event"]
    for agent, row in rows.items():
        if drafted.get(agent):
            row.acceptance = accepted[agent] / drafted[agent]
    return [rows[a] for a in sorted(rows)]
