"""The Engine: one swarm session. It owns the scheduler, the model runner, the step executor
(drafters, policy) and the agents; applies control changes at step boundaries; and records every
step (a ring buffer for the app, a trace file on disk).

Threading: one worker thread calls step()/run(); any thread may post to `mailbox`, read the ring
buffers, or call agents(). Agent state is mutated only under `_lock`, never during the forward
pass, so agents() waits at most for bookkeeping, not for a step."""
from __future__ import annotations

import math
import random
import statistics
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable

import torch

from engine.controls import CATEGORIES, ControlMailbox, Controls
from engine.devices import dtype_name, free_memory_bytes, others_cpu_seconds, set_cpu_threads
from engine.errors import SwarmscopeError
from engine.kv_cache import PagedKVCache, recurrent_bytes_per_sequence
from engine.native_memory import MemoryTrimmer
from engine.recurrent_state import MAX_PREFIXES
from engine.runner import ModelRunner
from engine.sequence import Sequence
from engine.serve.client_agent import ClientAgent
from engine.serve.completion import Completion
from engine.spec.calibration import (DEFAULT_CONTEXT, Calibration, calibrate_or_load,
                                      longest_context)
from engine.step import StepExecutor
from engine.swarm.agent import Agent, AgentView
from engine.swarm.config import SwarmConfig
from engine.swarm.scheduler import Scheduler, SchedulerConfig
from engine.swarm.workload import Workload, WORKLOAD_DIR, pick_category, tool_latency_s
from engine.telemetry.records import StepRecord
from engine.telemetry.ring_buffer import RingBuffer
from engine.telemetry.totals import Guarded, Totals
from engine.telemetry.trace_writer import TraceWriter
from engine.thread_tuner import ThreadTuner, default_counts, physical_cores

# Most of the memory free beside the model that the KV cache may take: activations, the window
# and the rest of the machine need the remainder.
KV_SHARE = 0.5
IDLE_SLEEP_S = 0.02  # longest nap while every agent is in a tool call (wall clock)
IDLE_CLIENTS = 32  # API clients' agents kept waiting for their next request; the oldest go


@dataclass(frozen=True, slots=True)
class KvUsage:
    held_bytes: int     # the KV cache's bytes sequences hold now (a shared block once)
    peak_bytes: int     # the most held at once
    total_bytes: int    # the whole cache
    shared_tokens: int  # prompt tokens sequences started with from a shared prefix's blocks
    preemptions: int    # times a sequence lost its KV for want of room (it is fed again)


class Engine:
    def __init__(self, loaded, config: SwarmConfig, controls: Controls | None = None,
                 calibration=None, trace_path: str | None = None) -> None:
        self.loaded, self.config = loaded, config
        self.controls = controls or Controls()
        self.mailbox = ControlMailbox()
        self.records = RingBuffer(config.record_capacity)
        self.events = RingBuffer(config.record_capacity)
        self.totals = Guarded(Totals())  # every step's, however many the ring buffer still holds
        max_context = min(config.max_context, loaded.config.max_position)
        kv = PagedKVCache(loaded.config, self._kv_blocks(loaded, config, max_context),
                          config.block_size, loaded.dtype, loaded.device)
        self.runner = ModelRunner(loaded.model, kv)
        self.calibration = calibration or calibrate_or_load(loaded)
        self.executor = StepExecutor(self.runner, self.calibration, target=loaded,
                                     measures_cost=config.clock != "virtual")
        self.scheduler = Scheduler(
            SchedulerConfig(config.max_step_tokens, config.rotate_after_steps), kv.blocks,
            share_prefixes=config.share_prefixes, states=kv.recurrent)
        self.workload = Workload(config.workload_dir or WORKLOAD_DIR)
        for cat in CATEGORIES:  # compiled before any step (the vocabulary read takes 0.4 s)
            self.workload.answer_format(cat, loaded.tokenizer)
        self.max_context = max_context  # the most tokens a lane holds
        self._agents: dict[int, Agent] = {}
        self._requests: deque[Completion] = deque()  # API requests not yet taken
        self._closed = False  # requests are refused once it is
        self._next_seq_id = 0
        self._next_agent_id = 0
        self._step_no = 0
        self._virtual_t = 0.0
        self._t0: float | None = None  # the wall clock's start: the first step's
        self._lock = threading.RLock()
        self.busy_s = 0.0       # time inside step() doing work
        self.telemetry_s = 0.0  # of which: recording (ring buffers, trace, agent events)
        self._shared_tokens = 0  # prompt tokens whose KV blocks a new sequence shared
        self.trace = TraceWriter(trace_path, self._session()) if trace_path else None
        self.thread_tuner: ThreadTuner | None = None  # set by tune_threads
        self._curves: dict[int, Calibration] = {}  # the tuner's counts' curves
        self._trimmer = MemoryTrimmer()
        with self._lock:
            self._resize(self.controls.swarm_size, 0.0)

    def _kv_blocks(self, loaded, config: SwarmConfig, max_context: int) -> int:
        """KV blocks for every agent's full context (or config.kv_tokens), but no more than
        KV_SHARE of the memory left free beside the model: a large model's swarm on a small
        machine then preempts more, where a cache past the memory would swap the machine or get
        the process killed. Fewer than one agent's full context is an error."""
        per_block = PagedKVCache.bytes_per_block(loaded.config, config.block_size, loaded.dtype)
        lanes = max(1, self.controls.swarm_size + config.client_lanes)
        tokens = config.kv_tokens or max_context * lanes
        blocks = -(-tokens // config.block_size)
        free = free_memory_bytes(loaded.device)
        if free is not None:  # (a recurrent model's lanes and kept prefixes hold states)
            free -= (lanes + MAX_PREFIXES) * recurrent_bytes_per_sequence(loaded.config,
                                                                          loaded.dtype)
        if config.kv_tokens is None and free is not None and blocks * per_block > KV_SHARE * free:
            blocks = int(KV_SHARE * free) // per_block
            if blocks * config.block_size < max_context:
                raise SwarmscopeError(
                    f"no room for the KV cache: one agent's context of {max_context} tokens "
                    f"needs {max_context * per_block / config.block_size / 1e6:.0f} MB, and "
                    f"{free / 1e6:.0f} MB is free beside the model; a smaller --max-context or "
                    "model")
        return blocks

    # -- clock --
    def now(self) -> float:
        """Seconds since the session started with its first step (on the virtual and measured
        clocks, session time): what comes before it (measuring curves, a window's start) is
        not the session's."""
        if self.config.clock != "wall":
            return self._virtual_t
        return 0.0 if self._t0 is None else time.perf_counter() - self._t0

    # -- the loop --
    def step(self) -> StepRecord | None:
        self._trimmer.maybe_trim()  # between steps: neither the step's time nor busy time
        start = time.perf_counter()
        if self._t0 is None:
            self._t0 = start
        with self._lock:
            self._apply_controls(self.now())
            paused = self.controls.paused
            if not paused:
                self._serve_clients(self.now())
                self._wake_agents(self.now())
                out = self.scheduler.schedule(self.controls.batch_ceiling)
                self._count_shared(out.shared)
        if paused:
            return self._idle(None)
        if not out.scheduled:
            return self._idle(self._next_tool_end())
        t = self.now()
        outcome = self.executor.run(out.scheduled, self.controls, self._step_no, t)
        rec = outcome.record
        computed = rec.pass_tokens - rec.batch - rec.prefill  # drafts and padding
        with self._lock:
            if self.config.clock == "virtual":
                self._virtual_t += self.calibration.step_ms(rec.batch, computed,
                                                            rec.prefill) / 1000
            elif self.config.clock == "measured":
                self._virtual_t += rec.dt_ms / 1000
            t_end = self.now()
            mark = time.perf_counter()
            by_seq = {seq.seq_id: seq for seq, _ in out.scheduled}
            drafted = {lane.agent: lane.k for lane in rec.lanes}
            for seq_id, lane in outcome.lanes.items():
                agent = self._agents[by_seq[seq_id].agent]
                agent.on_tokens(lane.new_token_ids, sum(lane.accepted_flags), drafted[agent.id],
                                lane.logprobs)
                if lane.finished:
                    self._send_to_tool(agent, t_end)
            self.records.append(rec)
            self.totals.add(rec)
            if self.trace:
                self.trace.write_step(rec)
            self._step_no += 1
            self.telemetry_s += time.perf_counter() - mark
        if self.thread_tuner is not None:
            self._tune_threads(rec, computed)
        self.busy_s += time.perf_counter() - start
        return rec

    def run(self, steps: int | None = None, duration_s: float | None = None,
            stop: threading.Event | None = None) -> None:
        """Step until `steps` records were made, `duration_s` of session time passed, or `stop`
        is set (whichever comes first; with none given, until `stop`)."""
        done, deadline = 0, None if duration_s is None else self.now() + duration_s
        while not (stop is not None and stop.is_set()):
            if steps is not None and done >= steps or deadline is not None and self.now() >= deadline:
                return
            if self.step() is not None:
                done += 1

    def recalibrate(self, progress: Callable[[str], None] | None = None):
        """Measure t(N) again on this device, model and dtype, with lanes at the swarm's context
        (`swarm_context`), replacing the cached curve, and put it in force from the next step;
        logged as a control change carrying the new curve.

        Call it from the thread that steps the engine, between steps: it times forward passes of
        the same model (on a KV cache of its own, so the agents' cache is untouched). An exception
        raised by `progress` (a cancelled window, say) aborts it and keeps the old curve."""
        if self.thread_tuner is not None:  # the count in force's, not a probe's
            set_cpu_threads(self.thread_tuner.current)
        measured = calibrate_or_load(self.loaded, self.calibration.eps, progress, force=True,
                                     context=self.swarm_context())
        if self.thread_tuner is not None:
            self._curves[self.thread_tuner.current] = measured
        self._put_in_force(measured)
        return measured

    def use_threads(self, threads: int, progress: Callable[[str], None] | None = None):
        """Run a CPU's forward passes on `threads` threads from the next step, planned with that
        count's t(N): cached, or measured now as `recalibrate` measures; logged as a control
        change carrying the curve (whose `threads` is the count); it ends `tune_threads`. Between
        steps, on the engine's thread, like `recalibrate`; an exception from `progress` keeps the
        old count and curve."""
        before = torch.get_num_threads()
        try:
            curve = self._curve_at(threads, progress)
        except BaseException:
            set_cpu_threads(before)
            raise
        self.thread_tuner = None  # a count asked for is kept
        self._put_in_force(curve)
        return curve

    def tune_threads(self, progress: Callable[[str], None] | None = None,
                     counts: list[int] | None = None):
        """Tune the CPU threads as the session runs, among `counts` (default: every physical
        core this process may run on, then halvings down to one) and the count in force
        (engine/thread_tuner.py), each change of the count in force logged as `use_threads`
        logs one, until `use_threads` sets a count.
        Each count's curve is cached or measured now, as `use_threads` does; on the engine's
        thread, between steps; an exception from `progress` leaves the threads as they were.
        Returns the curve in force."""
        if self.loaded.model.device.type != "cpu":
            raise SwarmscopeError(f"CPU threads are tuned on a CPU; this engine runs on "
                                  f"{self.loaded.model.device}")
        now = torch.get_num_threads()
        try:
            curves = {count: self._curve_at(count, progress) for count in
                      sorted(set(counts or default_counts(physical_cores())) | {now},
                             reverse=True)}
        finally:
            set_cpu_threads(now)
        self._curves = curves
        self.thread_tuner = ThreadTuner(list(curves), now, curves[max(curves)].step_ms,
                                        others=others_cpu_seconds)
        self._put_in_force(curves[now])  # logged even where the curve is the same: now tuned
        return self.calibration

    def _curve_at(self, threads: int, progress: Callable[[str], None] | None):
        """Set `threads` and return their curve, cached or measured; oneDNN's kernels are
        built per count, so a count's first use warms them first."""
        set_cpu_threads(threads)
        model = self.loaded.model
        if model.builds_kernels_per_row_count and threads not in model.warm_threads:
            model.warm_up()
        return calibrate_or_load(self.loaded, self.calibration.eps, progress,
                                 context=self.swarm_context())

    def _tune_threads(self, rec: StepRecord, drafts: int) -> None:
        """The count the tuner runs the next step at (a probe's steps take turns between two),
        and, where the count in force changed, its curve."""
        tuner = self.thread_tuner
        count = tuner.observe(rec.t, rec.dt_ms, rec.batch, drafts, rec.prefill)
        if count != torch.get_num_threads():
            set_cpu_threads(count)
        if tuner.current != self.calibration.threads:
            self._put_in_force(self._curves[tuner.current])

    def _put_in_force(self, calibration) -> None:
        with self._lock:
            self.calibration = self.executor.calibration = calibration
            t = self.now()
            changes = {"calibration": calibration.to_dict()}
            if calibration.threads is not None:  # a CPU's: replay shows a count or "auto · N"
                changes["threads_tuned"] = self.thread_tuner is not None
            self._event({"type": "control", "t": t, "changes": changes})
            if self.trace:
                self.trace.write_control(t, changes)

    def swarm_context(self, steps: int = 200) -> int:
        """The median context of the lanes decoded in the newest `steps` steps, rounded up to a
        block and within what calibration can time; the curve's own context (or the default)
        before any lane decoded. Calibrated there, the curve is what the swarm's steps cost."""
        recent, _ = self.records.since(self.records.total - steps)
        contexts = [lane.ctx for record in recent for lane in record.lanes]
        if not contexts:
            return self.calibration.context or DEFAULT_CONTEXT
        block = self.config.block_size
        median = -(-statistics.median_low(contexts) // block) * block
        return max(1, min(median, longest_context(self.loaded.config)))

    def agents(self, transcript_of: set[int] | None = None,
               tail_chars: int | None = None) -> list[AgentView]:
        """Every agent's view; transcripts (decoding them is the costly part, under the lock the
        engine steps with) only for the agents in `transcript_of` (None: all), and only their
        newest `tail_chars` characters when given."""
        with self._lock:
            return [agent.view(self._state(agent), transcript_of is None or agent.id in transcript_of,
                               tail_chars) for agent in self._agents.values()]

    def kv_usage(self) -> KvUsage:
        kv = self.runner.kv
        return KvUsage(kv.held_bytes, kv.peak_bytes, kv.num_bytes, self._shared_tokens,
                       self.scheduler.num_preemptions)

    @property
    def trace_error(self) -> str | None:
        """Why the trace stopped being written (a full disk), while the session runs on."""
        return self.trace.error if self.trace else None

    def submit(self, completion: Completion) -> None:
        """Serve an API request from the next step (from any thread): it goes on with the
        conversation of a waiting client agent whose context it extends, or starts a new one."""
        with self._lock:
            if self._closed:
                completion.fail("the engine stopped")
            else:
                self._requests.append(completion)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            for completion in [*self._requests, *(a.completion for a in self._clients("decode"))]:
                completion.fail("the engine stopped")
            self._requests.clear()
            if self.trace:  # the text since each agent's last state change
                for agent in self._agents.values():
                    self._record_text(self.now(), agent)
        if self.trace:
            self.trace.close()

    # -- controls --
    def _apply_controls(self, t: float) -> None:
        changes = self.mailbox.drain()
        if not changes:
            return
        try:
            self.controls = self.controls.updated(changes)
        except (ValueError, TypeError) as exc:
            self._event({"type": "control", "t": t, "changes": {}, "rejected": changes,
                         "error": str(exc)})
            return
        self._event({"type": "control", "t": t, "changes": changes})
        if self.trace:
            self.trace.write_control(t, changes)
        if "swarm_size" in changes:
            self._resize(self.controls.swarm_size, t)

    def _resize(self, size: int, t: float) -> None:
        live = [a for a in self._agents.values()
                if a.state != "done" and not isinstance(a, ClientAgent)]
        for agent in live[size:]:  # the newest leave first
            self._retire(agent.seq)
            agent.state = "done"
            self._agent_event(t, agent.id, "done")
        for _ in range(size - len(live)):
            agent_id = self._new_agent_id()
            rng = random.Random(f"{self.config.seed}:{agent_id}")
            agent = Agent(agent_id, self.workload, self.loaded.tokenizer, rng,
                          self.config.temperature, self.max_context,
                          record_text=self.trace is not None)
            self._agents[agent_id] = agent
            # First tasks go round the categories in the mix, so every category is present.
            cats = [c for c in CATEGORIES if self.controls.mix.get(c, 0) > 0]
            self._start_task(agent, cats[agent_id % len(cats)], t)

    def _new_agent_id(self) -> int:
        self._next_agent_id += 1
        return self._next_agent_id - 1

    # -- API clients --
    def _serve_clients(self, t: float) -> None:
        """Requests taken, and turns whose client cancelled them ended."""
        for agent in self._clients("decode"):
            if agent.completion.cancelled:
                self._send_to_tool(agent, t)
        while self._requests:
            completion = self._requests.popleft()
            if completion.cancelled:
                continue
            request = completion.request
            waiting = self._clients("tool")
            # a prompt whose log-probabilities are asked for is fed whole, by a new agent
            held = {agent: agent.held(request.prompt_ids) for agent in waiting
                    if not request.prompt_logprobs}
            agent = max(held, key=held.get, default=None)
            if agent is not None and held[agent]:
                self.executor.restart(agent.seq, held[agent])
                agent.go_on(completion, t)
                self.scheduler.add(agent.seq)
            else:
                if len(waiting) >= IDLE_CLIENTS:
                    self._retire_client(min(waiting, key=lambda a: a.idle_since), t)
                agent = ClientAgent(self._new_agent_id(), self.loaded.tokenizer,
                                    self.max_context, record_text=self.trace is not None)
                self._agents[agent.id] = agent
                self._next_seq_id += 1
                self.scheduler.add(agent.start(completion, self._next_seq_id, t))
            self._agent_event(t, agent.id, "decode")

    def _count_shared(self, shared: list[tuple[Sequence, int]]) -> None:
        """Prompt tokens new sequences started with from a shared prefix's KV blocks
        (Scheduler), an API client's counted as cached in its answer's usage."""
        for seq, tokens in shared:
            self._shared_tokens += tokens
            agent = self._agents.get(seq.agent)
            if isinstance(agent, ClientAgent) and agent.seq is seq:
                agent.completion.reused_tokens = tokens

    def _clients(self, state: str) -> list[ClientAgent]:
        return [a for a in self._agents.values() if isinstance(a, ClientAgent) and a.state == state]

    def _retire_client(self, agent: ClientAgent, t: float) -> None:
        """A client agent no request went on with for longest: gone, KV and all."""
        self._retire(agent.seq)
        agent.state = "done"
        self._agent_event(t, agent.id, "done")
        del self._agents[agent.id]

    # -- agent transitions --
    def _start_task(self, agent: Agent, cat: str, t: float) -> None:
        if agent.seq is not None:
            self._retire(agent.seq)
        self._next_seq_id += 1
        self.scheduler.add(agent.start_task(cat, self._next_seq_id, t))
        self._agent_event(t, agent.id, "decode")

    def _send_to_tool(self, agent: Agent, t: float) -> None:
        agent.call_tool(t, tool_latency_s(self.controls.tool_latency_s,
                                          self.config.tool_latency_sigma, agent.rng))
        self.scheduler.park(agent.seq)
        self._agent_event(t, agent.id, "tool")

    def _wake_agents(self, t: float) -> None:
        for agent in self._agents.values():
            if agent.state != "tool" or agent.tool_until > t:
                continue
            text, ids = agent.tool_output()
            if self.controls.mix.get(agent.cat, 0) <= 0 or not agent.tool_output_fits(ids):
                self._start_task(agent, pick_category(self.controls.mix, agent.rng), t)
            else:
                agent.resume(text, ids, t)
                self.scheduler.add(agent.seq)
                self._agent_event(t, agent.id, "decode")

    def _retire(self, seq: Sequence) -> None:
        self.scheduler.drop(seq)
        self.executor.release(seq)

    def _state(self, agent: Agent) -> str:
        if agent.state == "decode" and self.scheduler.place(agent.seq) != "running":
            return "waiting"
        return agent.state

    # -- idling --
    def _next_tool_end(self) -> float | None:
        with self._lock:
            # a client agent's "tool" is its client, which may never come back
            ends = [a.tool_until for a in self._agents.values()
                    if a.state == "tool" and a.tool_until < math.inf]
        return min(ends) if ends else None

    def _idle(self, wake_at: float | None) -> None:
        """Nothing could run: let session time reach the next tool completion. The wall clock
        naps (never busy-spins); the other clocks jump, and nap only when paused."""
        if self.config.clock != "wall" and wake_at is not None:
            self._virtual_t = max(self._virtual_t, wake_at)
            return None
        nap = IDLE_SLEEP_S if wake_at is None else min(IDLE_SLEEP_S, wake_at - self.now())
        time.sleep(max(nap, 0.001))
        return None

    # -- recording --
    def _agent_event(self, t: float, agent: int, event: str) -> None:
        self._event({"type": "agent", "t": t, "agent": agent, "event": event})
        if self.trace:
            self.trace.write_agent(t, agent, event)
            self._record_text(t, self._agents[agent])

    def _record_text(self, t: float, agent: Agent) -> None:
        segments = agent.take_text()  # decoded here, at a state change: never per step
        if segments:
            self.trace.write_text(t, agent.id, segments)

    def _event(self, event: dict) -> None:
        self.events.append(event)

    def _session(self) -> dict:
        session = {"model": self.loaded.name, "device": str(self.loaded.device),
                   "dtype": dtype_name(self.loaded.dtype),
                   "calibration": self.calibration.to_dict(),
                   "controls": self.controls.to_dict(), "seed": self.config.seed,
                   "clock": self.config.clock,
                   "kv_tokens": self.runner.kv.blocks.num_blocks * self.runner.kv.block_size}
        variables = self.loaded.tokenizer.template_variables
        if variables:  # what the agents' prompts were rendered with (--no-thinking)
            session["chat_template_variables"] = dict(variables)
        return session
