"""`swarmscope models`: the models this machine has at hand, as --model takes them."""
from __future__ import annotations

from engine.loading import known_models
from engine.loading.hub_cache import cache_dir
from engine.loading.ollama_store import models_dir


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "models", help="list the models at hand (the default, the Hugging Face cache's, "
                       "Ollama's), as --model takes them")
    parser.set_defaults(func=run)


def run(args) -> int:
    known = known_models()
    width = max(len(spec) for spec, _ in known)
    for spec, where in known:
        print(f"{spec:<{width}}  {where}")
    print(f"\nlooked in {cache_dir()} and {models_dir()}; a model folder or a GGUF file loads "
          "by its path too")
    return 0
