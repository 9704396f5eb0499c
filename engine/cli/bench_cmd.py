"""`swarmscope bench NAME`: benchmarks that report ratios measured side by side in one run."""
from __future__ import annotations

import importlib

# name -> module exposing add_arguments(parser) and run(args) -> int. The GUI benchmark lives in
# app/ (engine/ never imports Qt), so it is loaded by name.
BENCHES = {
    "decode": "engine.bench.decode",
    "attention": "engine.bench.attention",
    "spec": "engine.bench.spec",
    "swarm": "engine.bench.swarm",
    "threads": "engine.bench.threads",
    "memory": "engine.bench.memory",
    "serve": "engine.bench.serve",
    "experts": "engine.bench.experts",
    "dequant": "engine.bench.dequant",
    "recurrent": "engine.bench.recurrent",
    "gui": "app.bench",
}


def register(subparsers) -> None:
    parser = subparsers.add_parser("bench", help="run a benchmark (decode, attention, spec, swarm, "
                                                  "threads, memory, serve, experts, dequant, "
                                                  "recurrent, gui)")
    benches = parser.add_subparsers(dest="bench", metavar="NAME", required=True)
    for name, module_name in BENCHES.items():
        module = importlib.import_module(module_name)
        sub = benches.add_parser(name, help=(module.__doc__ or "").strip().splitlines()[0])
        module.add_arguments(sub)
        sub.set_defaults(func=module.run)
