"""`swarmscope models`: the models this machine has at hand, as --model takes them, and with
--check whether each would load."""
from __future__ import annotations

from engine.errors import SwarmscopeError
from engine.loading import check_model_folder, known_models
from engine.loading.hub_cache import cache_dir
from engine.loading.ollama_store import models_dir


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "models", help="list the models at hand (the default, the Hugging Face cache's, "
                       "Ollama's), as --model takes them")
    parser.add_argument("--check", action="store_true",
                        help="check each as loading would before it reads the weights (config, "
                             "tokenizer, the weights' names and shapes, the chat template), "
                             "and say what it is or why it would not load")
    parser.set_defaults(func=run)


def run(args) -> int:
    known = known_models()
    width = max(len(spec) for spec, _ in known)
    where_width = max(len(where) for _, where in known)
    for spec, where in known:
        print(f"{spec:<{width}}  {where:<{where_width}}  {_checked(spec)}" if args.check else
              f"{spec:<{width}}  {where}")
    print(f"\nlooked in {cache_dir()} and {models_dir()}; a model folder or a GGUF file loads "
          "by its path too")
    return 0


def _checked(spec: str) -> str:
    """What the model is, as loading would find it, or why it would not load."""
    try:
        config = check_model_folder(spec)
    except SwarmscopeError as exc:
        return f"would not load: {exc}"
    if config is None:
        return "loads"
    return f"loads: {config.describe()}"
