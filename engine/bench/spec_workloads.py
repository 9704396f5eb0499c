"""The prompts `bench spec` decodes: code edits and free chat, one distinct prompt per lane.

Code edits are copy-heavy: an agent applies a change and re-emits the complete updated file it
just read, shown one worked example first, so prompt lookup has real text to find, as much as
the model actually copies. Free chat has little to copy. 48 prompts each (twelve files times
four changes; 48 questions): at B = 16 every lane is its own prompt, so lanes are not copies of
one another that win or lose together, and the rounds of a B = 16 cell decode three different
sets of sixteen."""
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
    ('''import csv


def read_rows(path):
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def column(rows, name):
    return [row[name] for row in rows]


def average(values):
    numbers = [float(value) for value in values]
    return sum(numbers) / len(numbers)
''', ("rename read_rows to load_rows", "make average return 0.0 for an empty list",
      "rename column to values_of", "add a docstring to read_rows")),
    ('''class Stack:
    def __init__(self):
        self.items = []

    def push(self, item):
        self.items.append(item)

    def pop(self):
        if not self.items:
            raise IndexError("pop from an empty stack")
        return self.items.pop()

    def peek(self):
        return self.items[-1]

    def __len__(self):
        return len(self.items)
''', ("rename items to elements", "make peek return None on an empty stack",
      "add an is_empty method", "rename Stack to LifoStack")),
    ('''import logging

log = logging.getLogger(__name__)


def retry(action, attempts=3):
    for attempt in range(1, attempts + 1):
        try:
            return action()
        except OSError as error:
            log.warning("attempt %d failed: %s", attempt, error)
    raise RuntimeError(f"gave up after {attempts} attempts")
''', ("change the default attempts from 3 to 5", "rename action to operation",
      "catch ConnectionError instead of OSError", "rename retry to with_retries")),
    ('''def celsius_to_fahrenheit(celsius):
    return celsius * 9 / 5 + 32


def fahrenheit_to_celsius(fahrenheit):
    return (fahrenheit - 32) * 5 / 9


def describe(celsius):
    if celsius < 0:
        return "freezing"
    if celsius < 20:
        return "mild"
    return "warm"
''', ("rename describe to feel", "make describe call 25 degrees the start of warm",
      "add type hints to both conversions", "add a kelvin_to_celsius function")),
    ('''from collections import Counter


def word_counts(text):
    words = text.lower().split()
    return Counter(words)


def top_words(text, n=5):
    return [word for word, _ in word_counts(text).most_common(n)]


def unique_words(text):
    return sorted(set(text.lower().split()))
''', ("change the default n from 5 to 10", "rename word_counts to count_words",
      "make unique_words keep the case of the text", "rename top_words to most_common_words")),
    ('''import os


def find_files(root, suffix):
    found = []
    for folder, _, names in os.walk(root):
        for name in names:
            if name.endswith(suffix):
                found.append(os.path.join(folder, name))
    return sorted(found)


def total_size(paths):
    return sum(os.path.getsize(path) for path in paths)
''', ("rename find_files to files_with_suffix", "rename total_size to size_of",
      "make find_files skip hidden folders", "rename suffix to extension")),
    ('''from dataclasses import dataclass, field


@dataclass
class Inventory:
    stock: dict = field(default_factory=dict)

    def add(self, item, count=1):
        self.stock[item] = self.stock.get(item, 0) + count

    def remove(self, item, count=1):
        if self.stock.get(item, 0) < count:
            raise ValueError(f"not enough {item}")
        self.stock[item] -= count

    def count(self, item):
        return self.stock.get(item, 0)
''', ("rename stock to items", "rename Inventory to Storeroom",
      "make remove delete an item whose count reaches zero", "add a docstring to add")),
    ('''import re

EMAIL = re.compile(r"[^@ ]+@[^@ ]+\\.[a-z]+")


def is_email(text):
    return EMAIL.fullmatch(text) is not None


def find_emails(text):
    return EMAIL.findall(text)


def mask(email):
    name, _, domain = email.partition("@")
    return name[0] + "***@" + domain
''', ("rename mask to hide_email", "rename EMAIL to EMAIL_PATTERN",
      "make mask keep the first two letters of the name", "rename find_emails to emails_in")),
)

# Prompt i edits file i % 12 (any B above one mixes files), with that file's change i // 12.
CODE_EDITS = tuple(_TASK.format(ex_before=_EXAMPLE_BEFORE, ex_after=_EXAMPLE_AFTER, file=source,
                                change=changes[i // len(_FILES)])
                   for i in range(4 * len(_FILES)) for source, changes in [_FILES[i % len(_FILES)]])

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
         "Plan a simple vegetarian dinner for four people.",
         "How do airplanes stay in the air?",
         "Write a friendly email inviting a neighbour to a garden party.",
         "What is a good way to start learning to draw?",
         "Explain what a black hole is in simple words.",
         "Give me five ideas for a rainy afternoon with children.",
         "How does a refrigerator keep food cold?",
         "Write a haiku about the sea.",
         "What are the pros and cons of working from home?",
         "Describe the taste of a ripe mango to someone who has never had one.",
         "How do bees make honey?",
         "Suggest a weekly exercise routine for a beginner.",
         "Why do we have seasons?",
         "Write a short speech for a friend's birthday.",
         "What is the best way to memorise a poem?",
         "Tell me a fun fact about octopuses and explain it.",
         "How should I prepare for my first marathon?",
         "Explain how vaccines help the body fight disease.",
         "Write a limerick about a forgetful wizard.",
         "What makes a good team leader?",
         "How do I keep houseplants alive?",
         "Describe a bustling market in a small town.",
         "What is the water cycle?",
         "Give me advice on saving money each month.",
         "Why is the ocean salty?",
         "Write a short dialogue between a cat and a dog.",
         "How do I write a good thank-you note?",
         "What were the main causes of the Industrial Revolution?",
         "Explain how a compass works.",
         "Suggest three books for someone who loves mysteries.",
         "How can I be more patient with myself?",
         "Describe the northern lights.",
         "What should I know before adopting a dog?")

WORKLOADS = (("code-edit", CODE_EDITS), ("chat", CHATS))
