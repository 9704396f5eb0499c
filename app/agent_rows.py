"""Rows of the agents table. Live they come from Engine.agents(); in replay they are rebuilt from
the trace's step lanes, agent events and text records. Qt-free."""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from app.history import History
from engine.swarm.agent import MAX_SEGMENTS


@dataclass(slots=True)
class AgentRow:
    id: int
    state: str                 # decode | tool | waiting | done
    cat: str
    tokens: int                # emitted for this agent
    acceptance: float | None   # accepted / drafted
    transcript: list[tuple[str, str]] = field(default_factory=list)  # [(text, kind)]
    first_segment: int = 0     # the number of transcript[0] among all the agent's segments

    @classmethod
    def from_view(cls, view) -> "AgentRow":
        """Copy an engine AgentView, so the table never holds engine objects across threads."""
        return cls(view.id, view.state, view.cat, int(view.tokens), view.acceptance,
                   list(view.transcript), view.first_segment)


class AgentTally:
    """Agent rows as of any step, rebuilt from the history incrementally: moving forward only
    reads the new records and events (a live session or a playing replay), moving back starts
    over. Of a live session's oldest steps and events, not kept, only the numbers count."""

    def __init__(self) -> None:
        self._history: History | None = None
        self._stop = 0
        self._rows: dict[int, AgentRow] = {}
        self._drafted: dict[int, int] = {}
        self._accepted: dict[int, int] = {}
        self._events_read = 0
        self._states: dict[int, str] = {}
        self._transcripts: dict[int, deque] = {}
        self._segments_read: dict[int, int] = {}  # per agent, over the session

    def rows(self, history: History, stop: int) -> list[AgentRow]:
        if history is not self._history or stop < self._stop:
            self.__init__()
            self._history = history
        for rec in history.records(self._stop, stop):
            for lane in rec.lanes:
                row = self._rows.setdefault(lane.agent, AgentRow(lane.agent, "waiting", lane.cat,
                                                                 0, None))
                row.cat = lane.cat
                row.tokens += 1 + lane.acc
                self._drafted[lane.agent] = self._drafted.get(lane.agent, 0) + lane.k
                self._accepted[lane.agent] = self._accepted.get(lane.agent, 0) + lane.acc
        self._stop = stop
        self._read_events(history, stop)
        states = self._states
        out = []
        for agent in sorted(set(self._rows) | set(states) | set(self._transcripts)):
            row = self._rows.get(agent) or AgentRow(agent, "waiting", "?", 0, None)
            drafted = self._drafted.get(agent, 0)
            transcript = list(self._transcripts.get(agent, ()))
            out.append(AgentRow(agent, states.get(agent, "waiting"), row.cat, row.tokens,
                                self._accepted[agent] / drafted if drafted else None,
                                transcript, self._segments_read.get(agent, 0) - len(transcript)))
        return out

    def _read_events(self, history: History, stop: int) -> None:
        """Events before the next step started: what a viewer saw once step `stop - 1` was done
        (the text of a turn is recorded as the turn ends, after its last step began). At the
        end of the history, everything (the text recorded as the session closed, too)."""
        bound = float(history.column("t")[stop]) if stop < len(history) else math.inf
        events, self._events_read = history.events_from(self._events_read)
        for event in events:
            if event["t"] >= bound:
                break
            self._events_read += 1
            if event.get("type") == "agent":
                self._states[event["agent"]] = event["event"]
            elif event.get("type") == "text":
                shown = self._transcripts.setdefault(event["agent"], deque(maxlen=MAX_SEGMENTS))
                shown.extend((text, kind) for text, kind in event["segments"])
                self._segments_read[event["agent"]] = (self._segments_read.get(event["agent"], 0)
                                                       + len(event["segments"]))
