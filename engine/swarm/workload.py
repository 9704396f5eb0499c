"""The swarm's workload: tasks, tool outputs and tool latencies per category, from the corpora in
resources/workloads/ (written for this project).

Categories differ in how predictable their text is: `code-edit` re-emits a file it was shown
(prompt lookup drafts well), `chat` is free text (drafts poorly), `json` emits structured tool
calls. A category's corpus may give a JSON `schema` its answers are held to (output_format.py),
as an agent framework holds its tool calls; json's does. All randomness comes from the caller's
`random.Random`, so a seed fixes a run."""
from __future__ import annotations

import json
import math
import random
import re
from dataclasses import dataclass, field
from pathlib import Path

from engine.controls import CATEGORIES
from engine.errors import SwarmscopeError
from engine.output_format import OutputFormat
from engine.thinking import json_answer

WORKLOAD_DIR = Path(__file__).resolve().parents[2] / "resources" / "workloads"


@dataclass(slots=True)
class Task:
    cat: str
    text: str                 # the user turn that starts the task
    fields: dict = field(default_factory=dict)  # what tool outputs may refer to ({path}, ...)


@dataclass(slots=True)
class CategoryCorpus:
    system: str
    prompts: list[str]        # user turns; code-edit builds them from `task`, sources and edits
    tool_outputs: list[str]   # templates formatted with the task's fields
    max_new_tokens: int       # a turn stops at EOS or this many tokens
    schema: dict | None = None  # the JSON schema its answers keep to, if any


class Workload:
    def __init__(self, root: str | Path = WORKLOAD_DIR) -> None:
        self.root = Path(root)
        self.corpora = {cat: self._load(cat) for cat in CATEGORIES}
        self._formats: dict[tuple, OutputFormat | None] = {}  # (category, tokenizer) -> format
        self.sources = sorted((self.root / "sources").glob("*"))
        if not self.sources:
            raise SwarmscopeError(f"{self.root / 'sources'}: no source files for code-edit tasks")

    def _load(self, cat: str) -> CategoryCorpus:
        path = self.root / f"{cat}.json"
        try:
            data = json.loads(path.read_text())
            if cat == "code-edit":
                prompts = [data["task"].replace("{edit}", edit) for edit in data["edits"]]
            else:
                prompts = list(data["prompts"])
            corpus = CategoryCorpus(system=data["system"], prompts=prompts,
                                    tool_outputs=list(data["tool_outputs"]),
                                    max_new_tokens=int(data["max_new_tokens"]),
                                    schema=data.get("schema"))
        except OSError as exc:
            raise SwarmscopeError(f"{path}: cannot read workload corpus ({exc.strerror})") from None
        except (ValueError, KeyError, TypeError) as exc:
            raise SwarmscopeError(f"{path}: malformed workload corpus ({exc!r})") from None
        if not corpus.prompts or not corpus.tool_outputs or corpus.max_new_tokens < 1:
            raise SwarmscopeError(f"{path}: needs prompts, tool_outputs and max_new_tokens >= 1")
        if not isinstance(corpus.schema, (dict, type(None))):
            raise SwarmscopeError(f"{path}: schema must be a JSON Schema object")
        return corpus

    def new_task(self, cat: str, rng: random.Random) -> Task:
        corpus = self.corpora[cat]
        prompt = rng.choice(corpus.prompts)
        fields: dict = {}
        if cat == "code-edit":
            source = rng.choice(self.sources)
            text = source.read_text()
            outline = "\n".join(f"{i}:{line}" for i, line in enumerate(text.splitlines(), 1)
                                if re.match(r"\s*(def|class|fn|pub fn|export class)\b", line))
            fields = {"path": source.name, "source": text.rstrip("\n"), "outline": outline}
        return Task(cat=cat, text=_fill(prompt, fields), fields=fields)

    def tool_output(self, task: Task, rng: random.Random) -> str:
        return _fill(rng.choice(self.corpora[task.cat].tool_outputs), task.fields)

    def system(self, cat: str) -> str:
        return self.corpora[cat].system

    def max_new_tokens(self, cat: str) -> int:
        return self.corpora[cat].max_new_tokens

    def schema(self, cat: str) -> dict | None:
        return self.corpora[cat].schema

    def answer_format(self, cat: str, tokenizer) -> OutputFormat | None:
        """What `cat`'s answers keep to: its schema compiled for `tokenizer`, once (each answer
        takes a copy), after the reasoning where the model's chat reasons first; None where it
        gives none."""
        if (cat, tokenizer) not in self._formats:
            schema = self.schema(cat)
            self._formats[cat, tokenizer] = schema and json_answer(schema, tokenizer,
                                                                   tokenizer.chat_prompt(""))
        return self._formats[cat, tokenizer]


def pick_category(mix: dict[str, float], rng: random.Random) -> str:
    cats = [c for c in CATEGORIES if mix.get(c, 0) > 0]
    return rng.choices(cats, weights=[mix[c] for c in cats])[0]


def tool_latency_s(median_s: float, sigma: float, rng: random.Random) -> float:
    """Log-normal around `median_s`: most calls are quick, a few (a test run) take many times
    longer. sigma=1 puts the 95th percentile at ~5x the median."""
    if median_s <= 0:
        return 0.0
    return median_s * math.exp(sigma * rng.gauss(0.0, 1.0))


def _fill(template: str, fields: dict) -> str:
    # str.format would choke on the braces of JSON and source code; replace only known names.
    for name, value in fields.items():
        template = template.replace("{" + name + "}", value)
    return template
