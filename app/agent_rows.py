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


class AgentTally:
    """Agent rows as of any step, rebuilt from the history incrementally: moving forward only
    reads the new records (a live session or a playing replay), moving back starts over."""

    def __init__(self) -> None:
        self._history: History | None = None
        self._stop = 0
        self._rows: dict[int, AgentRow] = {}
        self._drafted: dict[int, int] = {}
        self._accepted: dict[int, int] = {}

    def rows(self, history: History, stop: int) -> list[AgentRow]:
        if history is not self._history or stop < self._stop:
            self.__init__()
            self._history = history
        for rec in history.records[self._stop:stop]:
            for lane in rec.lanes:
                row = self._rows.setdefault(lane.agent, AgentRow(lane.agent, "waiting", lane.cat,
                                                                 0, None))
                row.cat = lane.cat
                row.tokens += 1 + lane.acc
                self._drafted[lane.agent] = self._drafted.get(lane.agent, 0) + lane.k
                self._accepted[lane.agent] = self._accepted.get(lane.agent, 0) + lane.acc
        self._stop = stop
        t_stop = history.records[stop - 1].t if stop else 0.0
        states: dict[int, str] = {}
        for event in history.events:  # events are few (one per agent state change)
            if event.get("type") == "agent" and event["t"] <= t_stop:
                states[event["agent"]] = event["event"]
        out = []
        for agent in sorted(set(self._rows) | set(states)):
            row = self._rows.get(agent) or AgentRow(agent, "waiting", "?", 0, None)
            drafted = self._drafted.get(agent, 0)
            out.append(AgentRow(agent, states.get(agent, "waiting"), row.cat, row.tokens,
                                self._accepted[agent] / drafted if drafted else None))
        return out


def rows_from_history(history: History, stop: int) -> list[AgentRow]:
    """Agent table as of step `stop`: state from the last agent event before it, the rest from lanes."""
    return AgentTally().rows(history, stop)
