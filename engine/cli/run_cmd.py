"""`swarmscope run --headless`: a swarm session without a window; progress, then a summary.
`swarmscope serve` is one that serves OpenAI's API (`run --headless --serve`) until Ctrl+C."""
from __future__ import annotations

import argparse
import json
import math
import signal
import sys
import time

from engine.cli.options import (MODEL_HELP, add_device_options, add_serve_address,
                                add_serve_option, add_thinking_option, check_at_least,
                                check_drafter)
from engine.controls import (ADAPTIVE_CAP, DEFAULT_K, FIXED_K, Controls, parse_change,
                             parse_mix)
from engine.errors import SwarmscopeError
from engine.serve.http_api import CLIENT_LANES, ApiServer
from engine.telemetry.records import LAYOUTS, POLICIES
from engine.telemetry.summary import format_summary, summarize
from engine.thread_tuner import AUTO

PROGRESS_EVERY_S = 1.0


def register(subparsers) -> None:
    p = subparsers.add_parser("run", help="run a swarm session headless and print a summary")
    p.add_argument("--headless", action="store_true",
                   help="run without a window (required; the window is `swarmscope`)")
    _add_session_options(p, serving=False)
    p = subparsers.add_parser("serve", help="serve OpenAI's chat completions API and "
                                            "Anthropic's Messages API (and /metrics for "
                                            "Prometheus) headless until Ctrl+C, then "
                                            "summarise (run --headless --serve)")
    add_serve_address(p)
    p.set_defaults(headless=True)
    _add_session_options(p, serving=True)


def _add_session_options(p, serving: bool) -> None:
    """run's options; `serving`: serve's, whose address is its argument."""
    p.add_argument("--model", default="default", help=MODEL_HELP)
    add_device_options(p, tuned=True)
    add_thinking_option(p)
    p.add_argument("--agents", type=int, default=None,
                   help="simulated agents (default 8, or 0 with --serve)" if not serving else
                        "simulated agents beside the API's clients (default 0)")
    if not serving:
        add_serve_option(p, "the session (with no --duration or --steps, until Ctrl+C)")
    length = p.add_mutually_exclusive_group()
    length.add_argument("--duration", type=float,
                        help="session seconds to run (default 30; with --serve, until Ctrl+C)")
    length.add_argument("--steps", type=int, help="engine steps to run")
    p.add_argument("--policy", choices=POLICIES, default="goodput")
    p.add_argument("--k", type=int, default=None,
                   help=f"drafts per lane for --policy fixed (default {FIXED_K}); the cap for "
                        f"uniform and goodput (default {ADAPTIVE_CAP})")
    p.add_argument("--drafter", default="lookup",
                   help="lookup | self | a draft model folder or GGUF file")
    p.add_argument("--ragged", choices=LAYOUTS, default="packed")
    p.add_argument("--batch-ceiling", type=int, default=16,
                   help="most lanes decoding at once; the rest wait (default 16)")
    p.add_argument("--spec-ceiling", type=int, default=64,
                   help="no drafting while more lanes than this decode (default 64)")
    p.add_argument("--budget", type=int, default=None,
                   help="budget T to plan with instead of the calibrated one")
    p.add_argument("--min-acceptance", type=float, default=0.1,
                   help="a lane or category accepting less stops drafting, re-probed "
                        "(default 0.1)")
    p.add_argument("--mix", type=_checked(_mix), default=None,
                   help="workload weights, e.g. code-edit=2,chat=1 (a category not named: 0; "
                        "default all 1)")
    p.add_argument("--tool-latency", type=float, default=1.0, help="median tool call seconds")
    p.add_argument("--change", type=_checked(parse_change), action="append", default=[],
                   metavar="SECONDS:NAME=VALUE",
                   help="set a control at that session second, as the window's controls do, "
                        "e.g. 30:policy=off or 60:mix=chat=1 (repeatable; names as in the "
                        "trace: policy, k, batch_ceiling, spec_ceiling, budget_override, ragged, "
                        "drafter, min_acceptance, swarm_size, tool_latency_s, mix, paused)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--clock", choices=("wall", "virtual", "measured"), default="wall",
                   help="wall: real tool waits; virtual: reproducible step for step; "
                        "measured: real step times, idle gaps skipped")
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--max-context", type=int,
                   help="most tokens in an agent's context; past it the agent starts a fresh "
                        "task (default 3072, or the model's positions if fewer)")
    p.add_argument("--trace", type=lambda path: None if path == "none" else path,
                   help="write a trace (.jsonl or .jsonl.gz); none (the default): no trace, as "
                        "the window's --trace-out none")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=run)


def _checked(parse):
    """An argparse type that reports parse's ValueError as the option's error message."""
    def checked(text: str):
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return checked


def _mix(text: str) -> dict[str, float]:
    """--mix's weights, checked as the controls check them."""
    return Controls(mix=parse_mix(text)).mix


def run(args) -> int:
    if not args.headless:
        print("swarmscope run: pass --headless (the window is started by `swarmscope`)",
              file=sys.stderr)
        return 2
    try:
        return _run(args)
    except SwarmscopeError as exc:
        print(f"swarmscope run: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:  # a bad option value caught by a config's validation
        print(f"swarmscope run: {exc}", file=sys.stderr)
        return 2


def _run(args) -> int:
    if args.agents is None:
        args.agents = 0 if args.serve else 8
    _check_numbers(args)
    check_drafter("--drafter", args.drafter)
    controls = Controls(policy=args.policy, k=args.k, drafter=args.drafter, ragged=args.ragged,
                        batch_ceiling=args.batch_ceiling, spec_ceiling=args.spec_ceiling,
                        budget_override=args.budget, min_acceptance=args.min_acceptance,
                        swarm_size=args.agents, tool_latency_s=args.tool_latency,
                        **({"mix": args.mix} if args.mix else {}))
    changes = _timed_changes(controls, args.change, args.clock, ends_by_time=args.steps is None)
    if not args.serve:
        return _session(args, controls, changes)
    live = []  # the engine once it steps: until then the API answers 503, loading
    server = ApiServer(lambda: live[0] if live else None, *args.serve).start()
    print(f"serving OpenAI's chat completions API at {server.url} (Anthropic's Messages API at "
          f"{server.root}) once the model is ready, Prometheus metrics at {server.metrics_url} "
          "(Ctrl+C ends the session)", file=sys.stderr)

    def ready(engine) -> None:
        live.append(engine)
        print(f"ready at {server.describe(engine)}", file=sys.stderr)

    try:
        return _session(args, controls, changes, ready)
    finally:
        server.close()


def _session(args, controls: Controls, changes: list[tuple[float, dict]],
             publish=lambda engine: None) -> int:
    """Load, calibrate, run and summarise; `publish(engine)` once it is ready to step."""
    from engine.devices import cpu_threads, hardware
    from engine.engine import Engine
    from engine.loading import load_model
    from engine.spec.calibration import calibrate_or_load
    from engine.swarm.config import SwarmConfig

    def say(message: str, *_) -> None:
        print(f"  {message}", file=sys.stderr)

    tuned = args.threads == AUTO
    loaded = load_model(args.model, dtype=args.dtype, device=args.device, progress=say,
                        thinking=args.thinking, threads=None if tuned else args.threads)
    print(f"model {loaded.name} ({loaded.dtype}, "
          f"{hardware(str(loaded.device), cpu_threads(loaded.device))})", file=sys.stderr)
    _check_against_model(args, changes, loaded)
    # without --max-context the config's default, which the engine holds to the model's positions
    config = SwarmConfig(seed=args.seed, clock=args.clock, temperature=args.temperature,
                         client_lanes=CLIENT_LANES if args.serve else 0,
                         **({"max_context": args.max_context} if args.max_context else {}))
    engine = Engine(loaded, config, controls, calibration=calibrate_or_load(loaded, progress=say),
                    trace_path=args.trace)
    if tuned:
        engine.tune_threads(say)
        print(f"CPU threads tuned among {', '.join(map(str, engine.thread_tuner.counts))}",
              file=sys.stderr)
    print(f"budget T = {engine.calibration.budget} (calibrated with lanes at context "
          f"{engine.calibration.context}); {args.agents} agents, policy {args.policy}",
          file=sys.stderr)
    publish(engine)
    steps = args.steps
    duration = (args.duration if args.duration is not None or steps is not None or args.serve
                else 30.0)
    wall_start = last_report = time.perf_counter()
    reported = 0
    failure = None
    sigterm = signal.signal(signal.SIGTERM, _interrupted)  # as Ctrl+C: summarise, finish
    try:
        done, deadline = 0, None if duration is None else engine.now() + duration
        while (steps is None or done < steps) and (deadline is None or engine.now() < deadline):
            while changes and engine.now() >= changes[0][0]:
                engine.mailbox.post(**changes.pop(0)[1])
            if engine.step() is not None:
                done += 1
            if time.perf_counter() - last_report >= PROGRESS_EVERY_S and done > reported:
                last_report, reported = time.perf_counter(), done  # a server waiting says nothing
                _progress(engine, done)
    except KeyboardInterrupt:
        print("\ninterrupted; summarising what ran", file=sys.stderr)
    except Exception as exc:  # an engine fault: what ran is summarised (and traced) all the same
        failure = f"{type(exc).__name__}: {exc}"
        print(f"engine error at step {engine.records.total}: {failure}; summarising what ran",
              file=sys.stderr)
    finally:
        signal.signal(signal.SIGTERM, sigterm)
        engine.close()
    if engine.trace_error:
        print(f"warning: {engine.trace_error}", file=sys.stderr)
    wall_s = time.perf_counter() - wall_start
    records = engine.records.snapshot()
    if not records:
        print("no request came" if args.serve else "no step ran", file=sys.stderr)
        return 0 if args.serve and not failure else 1
    if engine.records.total > len(records):  # the engine keeps the newest record_capacity
        print(f"the summary covers the last {len(records)} of {engine.records.total} steps"
              + (f"; `swarmscope trace check {args.trace}` summarises them all" if args.trace
                 else ""), file=sys.stderr)
    summary = summarize(records)
    kv = engine.kv_usage()
    overhead = engine.telemetry_s / engine.busy_s if engine.busy_s else 0.0
    threads = engine.thread_tuner.shares() if engine.thread_tuner else None  # tuned: the split
    if args.json:
        print(json.dumps({**summary.to_dict(), "wall_s": wall_s, "telemetry_share": overhead,
                          "preemptions": kv.preemptions,
                          "prefix_tokens_shared": kv.shared_tokens,
                          "kv_peak_bytes": kv.peak_bytes, "kv_bytes": kv.total_bytes,
                          "engine_error": failure, "cpu_threads_share": threads}))
    else:
        print(format_summary(summary))
        print(f"{'preemptions':<22}  {kv.preemptions}")
        print(f"{'shared prefixes':<22}  {kv.shared_tokens} prompt tokens' KV shared, not fed")
        print(f"{'KV cache':<22}  at most {kv.peak_bytes / 1e6:.1f} MB held of "
              f"{kv.total_bytes / 1e6:.1f} MB")
        print(f"{'telemetry cost':<22}  {100 * overhead:.2f}% of step time")
        if threads:
            print(f"{'CPU threads (tuned)':<22}  " + ", ".join(
                f"{count}: {share:.0%}" for count, share in threads.items()) + " of step time")
        print(f"{'wall time':<22}  {wall_s:.1f} s")
        if args.trace:
            print(f"{'trace':<22}  {args.trace}")
    return 1 if failure else 0


def _check_numbers(args) -> None:
    """The numeric options against their bounds, so that an error names the option as typed:
    the configs' own errors name their fields (swarm_size for --agents)."""
    from engine.swarm.config import MIN_CONTEXT

    check_at_least({"--agents": (args.agents, 0 if args.serve else 1),
                    "--batch-ceiling": (args.batch_ceiling, 1),
                    "--spec-ceiling": (args.spec_ceiling, 0), "--budget": (args.budget, 1),
                    "--steps": (args.steps, 1), "--max-context": (args.max_context, MIN_CONTEXT),
                    "--tool-latency": (args.tool_latency, 0),
                    "--temperature": (args.temperature, 0)})
    if args.serve and args.clock != "wall":
        raise SwarmscopeError(f"--serve answers clients in real time: it needs --clock wall, "
                              f"not {args.clock}")
    if args.duration is not None and not 0 < args.duration < math.inf:
        raise SwarmscopeError(f"--duration must be a finite number > 0, got {args.duration:g}")
    if not 0 <= args.min_acceptance <= 1:
        raise SwarmscopeError(f"--min-acceptance must be in [0, 1], got {args.min_acceptance:g}")
    try:
        Controls(policy=args.policy, k=args.k)  # K's range is the controls'
    except ValueError as exc:
        raise SwarmscopeError(f"--k: {exc}") from None


def _check_against_model(args, changes: list[tuple[float, dict]], loaded) -> None:
    """What only the loaded model can tell: draft models share its tokenizer, and
    --max-context fits its positions."""
    for option, drafter in [("--drafter", args.drafter)] + [
            (f"--change at {at:g} s: drafter", change["drafter"])
            for at, change in changes if "drafter" in change]:
        check_drafter(option, drafter, loaded)
    positions = loaded.config.max_position
    if args.max_context is not None and args.max_context > positions:
        raise SwarmscopeError(f"--max-context must be at most {positions}, the positions "
                              f"{loaded.name} has, got {args.max_context}")


def _interrupted(*_) -> None:
    raise KeyboardInterrupt


def _timed_changes(controls: Controls, changes: list[tuple[float, dict]], clock: str = "wall",
                   ends_by_time: bool = True) -> list[tuple[float, dict]]:
    """--change's changes in time order, those at one time merged, each checked against the
    controls in force then, so that a bad value is an error now, not minutes into the run. As in
    the window, K belongs to its policy: a change of policy without a K brings back the K that
    policy last had (its default at first). A pause must let the run end: on the virtual and
    measured clocks session time stands still while paused, and a run of --steps left paused
    would wait for good."""
    merged: dict[float, dict] = {}
    for at, change in sorted(changes, key=lambda timed: timed[0]):
        merged.setdefault(at, {}).update(change)
    k_by_policy = {**DEFAULT_K, controls.policy: controls.k}
    timed = []
    for at, change in merged.items():
        if "policy" in change and "k" not in change and change["policy"] in k_by_policy:
            change["k"] = k_by_policy[change["policy"]]
        try:
            controls = controls.updated(change)
        except ValueError as exc:
            raise SwarmscopeError(f"--change at {at:g} s: {exc}") from None
        if "drafter" in change:
            check_drafter(f"--change at {at:g} s: drafter", change["drafter"])
        k_by_policy[controls.policy] = controls.k
        timed.append((at, change))
        if change.get("paused") and clock != "wall":
            raise SwarmscopeError(f"--change at {at:g} s pauses the run, but on the {clock} "
                                  "clock session time stands still while paused, so it would "
                                  "never resume or end: pause with --clock wall")
    if controls.paused and not ends_by_time:
        raise SwarmscopeError("--change leaves the run paused before it reaches --steps, so it "
                              "would never end: resume it with a later --change "
                              "SECONDS:paused=false, or give --duration")
    return timed


def _progress(engine, done: int) -> None:
    recent, _ = engine.records.since(max(0, engine.records.total - 20))
    emitted = sum(r.emitted for r in recent)
    busy = sum(r.dt_ms for r in recent) / 1000
    batch = recent[-1].batch if recent else 0
    tuned = f"  threads={engine.thread_tuner.current}" if engine.thread_tuner else ""
    print(f"  t={engine.now():7.1f}s  steps={done:6d}  batch={batch:2d}  "
          f"tok/s(in steps)={emitted / busy if busy else 0:7.1f}{tuned}", file=sys.stderr)
