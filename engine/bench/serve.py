"""Serving benchmark: real HTTP clients of the OpenAI-compatible API, each policy side by side.

`--clients` agents (threads, the standard library's HTTP client) each hold `--conversations`
conversations one after another, each of `--turns` requests from the swarm's workload: a task (a
code edit re-emits the file it read), then the tool's output after each answer, the answer sent
back as an agent loop sends it; no tool wait. Every conversation starts with a system message:
the workload's own, or (`--system agent`) a coding agent's instructions and tools of 1,300
tokens, as agent frameworks send; with `--response-format`, every answer is held to JSON (any
object, or a schema's). Every policy serves the same conversations from an engine of
its own on the loaded model, behind a server of its own, one policy at a time, the first
rotating from round to round so that a slow spell of the machine lands on each alike. A policy
named POLICY:unshared runs with new conversations feeding their whole prompt, not sharing the
KV blocks of a prefix another conversation holds (engine/swarm/scheduler.py); one named
POLICY:predicted has each request predict its answer (OpenAI's Predicted Outputs) to be the
last one, or for a task's first the file it gives (code edits). Both may be named. Reports the
answers' tokens a second of wall time as the clients saw them (HTTP, tokenizing and text
included; the answers streamed), the mean time to an answer's first text and to its end, the
prompt tokens whose KV was reused (a conversation going on, or a shared prefix), the most KV
cache held at once, and tokens/s over the first policy's with the spread of the per-round
ratio."""
from __future__ import annotations

import http.client
import json
import random
import statistics
import sys
import threading
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from engine.bench import in_turn
from engine.bench.spec import ratio_spread
from engine.cli.options import (MODEL_HELP, RESPONSE_FORMAT_HELP, add_device_options,
                                check_at_least, read_response_format)
from engine.controls import CATEGORIES, Controls
from engine.errors import SwarmscopeError
from engine.swarm.workload import WORKLOAD_DIR
from engine.telemetry.records import POLICIES

AGENT_SYSTEM = WORKLOAD_DIR / "agent_system.md"
# A policy's variants, named after it as POLICY:VARIANT: new conversations share no prefix's KV
# blocks; requests predict their answers
VARIANTS = ("unshared", "predicted")


@dataclass(frozen=True, slots=True)
class Conversation:
    messages: list[dict]  # the system message and the task, then the tool's outputs
    source: str | None    # the file the task gives, where it gives one (code edits)


def _variants(policy: str) -> tuple[str, set[str]]:
    """A --policies entry's policy and variants; SwarmscopeError where it names others."""
    name, *variants = policy.split(":")
    if name not in POLICIES or not set(variants) <= set(VARIANTS) or \
            len(set(variants)) != len(variants):
        raise SwarmscopeError(f"--policies: each of {', '.join(POLICIES)}, with any of "
                              f"{', '.join(':' + v for v in VARIANTS)} after it, got {policy!r}")
    return name, set(variants)


def add_arguments(parser) -> None:
    parser.add_argument("--model", default="default", help=MODEL_HELP)
    add_device_options(parser)
    parser.add_argument("--clients", type=int, default=4, help="agents asking at once (default 4)")
    parser.add_argument("--conversations", type=int, default=1,
                        help="conversations each client holds, one after another (default 1)")
    parser.add_argument("--turns", type=int, default=3,
                        help="requests in each conversation (default 3)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="times each policy serves them (default 3)")
    parser.add_argument("--category", choices=CATEGORIES, default="code-edit",
                        help="the workload the conversations come from (default code-edit)")
    parser.add_argument("--system", default="workload", metavar="workload|agent|FILE",
                        help="each conversation's system message: the workload's (default), a "
                             "coding agent's instructions and tools, or a file's text")
    parser.add_argument("--policies", default="off,goodput",
                        help="comma-separated, the first the reference (default off,goodput); "
                             "POLICY:unshared: new conversations share no prefix's KV; "
                             "POLICY:predicted: requests predict their answers")
    parser.add_argument("--response-format", metavar="json|FILE", help=RESPONSE_FORMAT_HELP)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")


def run(args) -> int:
    try:
        check_at_least({"--clients": (args.clients, 1), "--turns": (args.turns, 1),
                        "--rounds": (args.rounds, 1), "--conversations": (args.conversations, 1)})
        policies = [p.strip() for p in args.policies.split(",")]
        for policy in policies:
            _variants(policy)
        if len(set(policies)) != len(policies):
            raise SwarmscopeError(f"--policies: each at most once, got {args.policies!r}")
        rows = measure(args, policies)
    except SwarmscopeError as exc:
        print(f"swarmscope bench serve: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    width, ratio_width = max(10, *(len(p) + 2 for p in policies)), max(12, len(policies[0]) + 4)
    print(f"{'policy':<{width}}{'tokens/s':>10}{'first s':>9}{'answer s':>10}{'reused':>8}"
          f"{'KV MB':>8}{'accept':>8}{f'x {policies[0]}':>{ratio_width}}")
    for r in rows:
        spread = "" if r["ratio_spread"] is None else f" ±{r['ratio_spread']:.3f}"
        accept = "-" if r["acceptance"] is None else f"{100 * r['acceptance']:.0f}%"
        first = "-" if r["mean_first_token_s"] is None else f"{r['mean_first_token_s']:.2f}"
        print(f"{r['policy']:<{width}}{r['tokens_per_s']:>10.1f}{first:>9}"
              f"{r['mean_answer_s']:>10.2f}{100 * r['reused_share']:>7.0f}%"
              f"{r['kv_peak_bytes'] / 1e6:>8.1f}{accept:>8}"
              f"{r['ratio']:>{ratio_width}.3f}{spread:<7}")
    return 0


def measure(args, policies: list[str]) -> list[dict]:
    from engine.loading import load_model
    from engine.spec.calibration import calibrate_or_load
    from engine.swarm.workload import Workload

    system = _system(args.system)  # before loading: a wrong path is said at once
    schema = args.response_format and read_response_format(args.response_format)
    extra = {"response_format": {"type": "json_schema", "json_schema": {
        "name": "answer", "schema": schema}}} if schema else {}
    loaded = load_model(args.model, dtype=args.dtype, device=args.device, threads=args.threads)
    calibration = calibrate_or_load(loaded, progress=lambda message, *_: print(
        f"  {message}", file=sys.stderr))
    workload = Workload()
    clients = [[_conversation(workload, args.category, args.turns, system,
                              random.Random(f"{args.seed}:{i}:{j}"))
                for j in range(args.conversations)] for i in range(args.clients)]
    max_tokens = workload.max_new_tokens(args.category)
    served = {policy: [] for policy in policies}
    for round_no in range(args.rounds):
        for policy in in_turn(policies, round_no):
            served[policy].append(_serve(loaded, calibration, policy, clients, max_tokens,
                                         extra))
            print(f"  round {round_no + 1}, {policy}: "
                  f"{served[policy][-1]['tokens_per_s']:.1f} tokens/s", file=sys.stderr)
    reference = [r["tokens_per_s"] for r in served[policies[0]]]
    rows = []
    for policy, rounds in served.items():
        rates = [r["tokens_per_s"] for r in rounds]
        answers = [s for r in rounds for s in r["answer_s"]]
        firsts = [s for r in rounds for s in r["first_s"]]
        drafted = sum(r["drafted"] for r in rounds)
        rows.append({
            "policy": policy, "tokens_per_s": statistics.fmean(rates),
            "rounds_tokens_per_s": rates, "mean_answer_s": statistics.fmean(answers),
            "mean_first_token_s": statistics.fmean(firsts) if firsts else None,
            "reused_share": sum(r["reused"] for r in rounds) / sum(r["prompt"] for r in rounds),
            "kv_peak_bytes": max(r["kv_peak_bytes"] for r in rounds),
            "acceptance": sum(r["accepted"] for r in rounds) / drafted if drafted else None,
            "ratio": statistics.fmean(a / b for a, b in zip(rates, reference)),
            "ratio_spread": ratio_spread(rates, reference)})
    return rows


def _system(choice: str) -> str | None:
    """The system message `--system` names; None: the workload's."""
    if choice == "workload":
        return None
    path = AGENT_SYSTEM if choice == "agent" else Path(choice)
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SwarmscopeError(f"--system: cannot read {path} ({exc})") from None


def _conversation(workload, category: str, turns: int, system: str | None,
                  rng: random.Random) -> Conversation:
    """The user's side of one conversation: the system message and task, then tool outputs."""
    task = workload.new_task(category, rng)
    users = [task.text] + [workload.tool_output(task, rng) for _ in range(turns - 1)]
    return Conversation([{"role": "system", "content": system or workload.system(category)}] + [
        {"role": "user", "content": text} for text in users], task.fields.get("source"))


def _serve(loaded, calibration, policy: str, clients: list[list[Conversation]],
           max_tokens: int, extra: dict) -> dict:
    """Every client's conversations through a server of its own, on an engine of `policy`'s;
    `extra`: more fields of every request."""
    from engine.engine import Engine
    from engine.serve.http_api import ApiServer
    from engine.swarm.config import SwarmConfig

    name, variants = _variants(policy)
    config = SwarmConfig(client_lanes=len(clients), share_prefixes="unshared" not in variants)
    engine = Engine(loaded, config, Controls(policy=name, swarm_size=0), calibration=calibration)
    stop = threading.Event()
    stepping = threading.Thread(target=engine.run, kwargs={"stop": stop}, daemon=True)
    stepping.start()
    server = ApiServer(lambda: engine, "127.0.0.1", 0).start()
    results: list[dict] = [{} for _ in clients]
    failures: list[str] = []
    threads = [threading.Thread(target=_client, args=(server.url, c, max_tokens, extra,
                                                      "predicted" in variants, r, failures))
               for c, r in zip(clients, results)]
    start = time.perf_counter()
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        wall_s = time.perf_counter() - start
    finally:
        server.close()
        stop.set()
        stepping.join()
        engine.close()
    if failures:
        raise SwarmscopeError(f"a request failed under {policy}: {failures[0]}")
    lanes = [lane for record in engine.records.snapshot() for lane in record.lanes]
    return {"tokens_per_s": sum(r["tokens"] for r in results) / wall_s,
            "answer_s": [s for r in results for s in r["answer_s"]],
            "first_s": [s for r in results for s in r["first_s"]],
            "reused": sum(r["reused"] for r in results), "prompt": sum(r["prompt"] for r in results),
            "kv_peak_bytes": engine.kv_usage().peak_bytes,
            "drafted": sum(lane.k for lane in lanes), "accepted": sum(lane.acc for lane in lanes)}


def _client(url: str, conversations: list[Conversation], max_tokens: int, extra: dict,
            predicts: bool, result: dict, failures: list[str]) -> None:
    """One agent: ask (streamed, as an agent that shows its progress does; with `predicts`,
    predicting the answer to be its last, or the task's file), take the answer into the
    conversation, go on with the next message; then the next conversation."""
    address = urllib.parse.urlparse(url)
    connection = http.client.HTTPConnection(address.hostname, address.port, timeout=600)
    answer_s, first_s = [], []
    result.update(tokens=0, reused=0, prompt=0, answer_s=answer_s, first_s=first_s)
    try:
        for conversation in conversations:
            messages, predicted = conversation.messages[:2], conversation.source
            for user in [None] + conversation.messages[2:]:
                if user is not None:
                    messages.append(user)
                prediction = {"prediction": {"type": "content", "content": predicted}} \
                    if predicts and predicted else {}
                asked = time.perf_counter()
                connection.request("POST", f"{address.path}/chat/completions", json.dumps(
                    {"messages": messages, "temperature": 0, "max_tokens": max_tokens,
                     "stream": True, "stream_options": {"include_usage": True}, **prediction,
                     **extra}))
                text, usage = [], None
                for chunk in _events(connection.getresponse()):
                    if "error" in chunk:
                        raise SwarmscopeError(chunk["error"]["message"])
                    piece = chunk["choices"][0]["delta"].get("content") if chunk["choices"] \
                        else None
                    if piece and not text:
                        first_s.append(time.perf_counter() - asked)
                    text += [piece] if piece else []
                    usage = chunk.get("usage") or usage
                answer_s.append(time.perf_counter() - asked)
                result["tokens"] += usage["completion_tokens"]
                result["prompt"] += usage["prompt_tokens"]
                result["reused"] += usage["prompt_tokens_details"]["cached_tokens"]
                predicted = "".join(text)
                messages.append({"role": "assistant", "content": predicted})
    except (OSError, SwarmscopeError, ValueError, KeyError, TypeError) as exc:
        failures.append(f"{type(exc).__name__}: {exc}")
    finally:
        connection.close()


def _events(response):
    """A streamed answer's chunks, as server-sent events carry them."""
    if response.status != 200:
        yield json.loads(response.read())
        return
    for line in response:
        line = line.strip()
        if line == b"data: [DONE]":
            return
        if line.startswith(b"data: "):
            yield json.loads(line[6:])
