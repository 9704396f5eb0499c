"""SwarmConfig: how the engine builds and runs a swarm session (the live knobs are Controls)."""
from __future__ import annotations

import math
from dataclasses import dataclass

CLOCKS = ("wall", "virtual", "measured")
# The shortest context an agent can work in: a turn writes at most half of it
# (Agent._turn_tokens), so two tokens leave the prompt one.
MIN_CONTEXT = 2


@dataclass(slots=True)
class SwarmConfig:
    seed: int = 0
    # wall: tool calls last real seconds (the live app). virtual: session time advances by the
    # calibrated cost of each step, which is also all goodput plans with, so a seeded run is
    # reproducible step for step (tests).
    # measured: session time advances by each step's measured time and jumps over idle gaps
    # (benchmarks: real step costs, no waiting for tools).
    clock: str = "wall"
    temperature: float = 0.0        # 0: greedy, so every policy emits the same text
    max_context: int = 3072         # past this an agent starts a fresh task
    tool_latency_sigma: float = 1.0  # log-normal spread around Controls.tool_latency_s
    max_step_tokens: int = 256      # tokens fed per step (decode + prefill chunks)
    rotate_after_steps: int = 256   # fair rotation when agents wait for a batch slot
    kv_tokens: int | None = None    # KV cache size; None: max_context x the lanes below
    client_lanes: int = 0           # lanes the cache holds for API clients beside the swarm's
    block_size: int = 16
    # A new sequence starts from a copy of the KV of the longest prefix it shares with one that
    # holds KV (a system prompt, an agent framework's tools), not feeding those tokens again
    share_prefixes: bool = True
    record_capacity: int = 100_000  # step records (and events) kept for the app
    workload_dir: str | None = None  # None: resources/workloads

    def __post_init__(self) -> None:
        if self.clock not in CLOCKS:
            raise ValueError(f"clock must be one of {CLOCKS}, got {self.clock!r}")
        if not (0 <= self.temperature < math.inf and 0 <= self.tool_latency_sigma < math.inf):
            raise ValueError("temperature and tool_latency_sigma must be finite and >= 0")
        if self.max_context < MIN_CONTEXT:
            raise ValueError(f"max_context must be >= {MIN_CONTEXT} (a prompt token and a "
                             f"turn's), got {self.max_context}")
        if self.client_lanes < 0:
            raise ValueError(f"SwarmConfig.client_lanes must be >= 0, got {self.client_lanes}")
        for name in ("max_step_tokens", "rotate_after_steps", "block_size", "record_capacity"):
            if getattr(self, name) < 1:
                raise ValueError(f"SwarmConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.kv_tokens is not None and self.kv_tokens < self.block_size:
            raise ValueError(f"kv_tokens must hold at least one block, got {self.kv_tokens}")
