"""A small swarm of agents written against OpenAI's Python client, to run beside
`swarmscope --serve 8000` (or `swarmscope run --headless --serve 8000`) and watch it served.

Each agent reads a source file of this checkout, asks for an edit of it, "runs a tool" (sleeps a
while, as agents block on tools), sends the tool's output back in the conversation and asks for
the next edit: the copy-heavy loop prompt lookup drafts well for. Each request predicts its
answer to be the file as it last was (OpenAI's Predicted Outputs), which the lane drafts from;
`--no-prediction` leaves that to the context.

    python examples/openai_agents.py --agents 4 --turns 3 [--url http://127.0.0.1:8000/v1]
"""
from __future__ import annotations

import argparse
import pathlib
import random
import time
from concurrent.futures import ThreadPoolExecutor

from openai import NOT_GIVEN, OpenAI

SOURCES = sorted((pathlib.Path(__file__).resolve().parents[1] / "engine" / "serve").glob("*.py"))
EDITS = ["Add type hints where they are missing.", "Rename one local variable to a clearer name.",
         "Add a short comment above the longest function.", "Fix any typo in the docstrings."]


def agent(client: OpenAI, number: int, args: argparse.Namespace) -> None:
    rng = random.Random(number)
    source = rng.choice(SOURCES)
    text = source.read_text()[:args.file_chars]
    messages = [{"role": "system", "content": "You are a coding agent. Answer with the whole "
                                              "file, edited, and nothing else."},
                {"role": "user", "content": f"{source.name}:\n```python\n{text}\n```\n"
                                            f"{EDITS[0]}"}]
    for turn in range(args.turns):
        predicted = {"type": "content", "content": text} if args.prediction else NOT_GIVEN
        reply = client.chat.completions.create(model="default", messages=messages,
                                               temperature=0, max_tokens=args.max_tokens,
                                               prediction=predicted)
        answer = reply.choices[0].message.content
        kept = (f", {reply.usage.completion_tokens_details.accepted_prediction_tokens} kept "
                "from the prediction" if args.prediction else "")
        # one write a line: print's text and its newline are two, which threads interleave
        print(f"agent {number} turn {turn + 1}: {reply.usage.completion_tokens} tokens{kept}, "
              f"{reply.usage.prompt_tokens_details.cached_tokens} of "
              f"{reply.usage.prompt_tokens} prompt tokens already held\n", end="", flush=True)
        text = answer  # the file as this edit leaves it
        time.sleep(rng.uniform(0, 2 * args.tool_seconds))  # the tool runs
        messages += [{"role": "assistant", "content": answer},
                     {"role": "user", "content": f"Tool output: the file was saved and its "
                                                 f"tests pass. {rng.choice(EDITS)}"}]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000/v1")
    parser.add_argument("--agents", type=int, default=4)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--tool-seconds", type=float, default=1.0, help="mean tool time")
    parser.add_argument("--max-tokens", type=int, default=200)
    parser.add_argument("--file-chars", type=int, default=2000, help="of the file, shown")
    parser.add_argument("--prediction", action=argparse.BooleanOptionalAction, default=True,
                        help="predict each answer to be the file as it last was (default on)")
    args = parser.parse_args()
    client = OpenAI(base_url=args.url, api_key="unused")
    with ThreadPoolExecutor(args.agents) as pool:
        agents = [pool.submit(agent, client, i, args) for i in range(args.agents)]
    for done in agents:
        done.result()  # an agent's error, raised here


if __name__ == "__main__":
    main()
