"""The prompts `bench spec` decodes: code edits and free chat, one distinct prompt per lane.

Code edits are copy-heavy: an agent applies a change and re-emits the complete updated file it
just read, shown one worked example first, so prompt lookup has real text to find, as much as
the model actually copies. Free chat has little to copy. Sixteen prompts each (four files times
four changes; sixteen questions): at B = 16 every lane is its own prompt, so lanes are not
copies of one another that win or lose together."""
from __future__ import annotations

_EXAMPLE_BEFORE = '''def area(width, height):
    return width * height


def describe(shape):
    return f"{shape['name']}: {area(shape['w'], shape['h'])}"
'''
_EXAMPLE_AFTER = '''def area(width: float, height: float) -> float:
    return width * height


def describe(shape):
    return f"{shape['name']}: {area(shape['w'], shape['h'])}"
'''
_TASK = ("Apply the change to the file and output the complete updated file, nothing else.\n\n"
         "Example.\nFile:\n```python\n{ex_before}```\nChange: add type hints to area.\n"
         "Updated file:\n```python\n{ex_after}```\n\n"
         "Now your turn.\nFile:\n```python\n{file}```\nChange: {change}.\nUpdated file:")

_FILES = (('''import json
from pathlib import Path


def load_settings(path):
    """Read the settings file and fill in defaults."""
    data = json.loads(Path(path).read_text())
    data.setdefault("retries", 3)
    data.setdefault("timeout", 30)
    return data


def save_settings(path, data):
    Path(path).write_text(json.dumps(data, indent=2))


def merge(base, extra):
    out = dict(base)
    for key, value in extra.items():
        out[key] = value
    return out
''', ("rename load_settings to read_settings", "change the default timeout from 30 to 60",
      "make save_settings sort the keys", "rename merge to merged")),
    ('''from dataclasses import dataclass


@dataclass
class Order:
    item: str
    quantity: int
    price: float

    def total(self):
        return self.quantity * self.price


def summarize(orders):
    lines = []
    for order in orders:
        lines.append(f"{order.item}: {order.quantity} x {order.price}")
    return "\\n".join(lines)
''', ("rename total to subtotal", "rename summarize to report",
      "make quantity default to 1", "add a docstring to summarize")),
    ('''import time


class RateLimiter:
    def __init__(self, per_second):
        self.per_second = per_second
        self.last = 0.0

    def wait(self):
        gap = 1.0 / self.per_second
        now = time.monotonic()
        if now - self.last < gap:
            time.sleep(gap - (now - self.last))
        self.last = time.monotonic()


def fetch_all(urls, fetch, limiter):
    results = []
    for url in urls:
        limiter.wait()
        results.append(fetch(url))
    return results
''', ("rename per_second to rate", "rename fetch_all to fetch_every",
      "make fetch_all return a dict keyed by url", "add type hints to fetch_all")),
    ('''def parse_line(line):
    name, _, value = line.partition("=")
    return name.strip(), value.strip()


def parse_config(text):
    config = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, value = parse_line(line)
        config[name] = value
    return config


def render_config(config):
    return "\\n".join(f"{name} = {value}" for name, value in sorted(config.items()))
''', ("rename parse_line to split_line", "skip lines that start with a semicolon too",
      "rename render_config to format_config", "make render_config leave the order unsorted")),
)

# Lane i edits file i % 4: any B above one mixes files.
CODE_EDITS = tuple(_TASK.format(ex_before=_EXAMPLE_BEFORE, ex_after=_EXAMPLE_AFTER, file=source,
                                change=changes[i // len(_FILES)])
                   for i in range(16) for source, changes in [_FILES[i % len(_FILES)]])

CHATS = ("What are three good habits for a new programmer?",
         "Explain why the sky is blue to a ten-year-old.",
         "Write a short poem about autumn leaves.",
         "What should I pack for a weekend hiking trip?",
         "How do I make a good cup of coffee?",
         "Tell me about the history of the bicycle.",
         "Give me tips for a job interview.",
         "Describe a day in the life of a lighthouse keeper.",
         "Why do cats purr?",
         "Suggest a name for a small bakery and explain it.",
         "What is the difference between weather and climate?",
         "How can I sleep better?",
         "Write a short story about a robot who learns to paint.",
         "What are the benefits of learning a second language?",
         "Explain how a rainbow forms.",
         "Plan a simple vegetarian dinner for four people.")

WORKLOADS = (("code-edit", CODE_EDITS), ("chat", CHATS))
