"""The engine's numbers in Prometheus' text format, for GET /metrics: what the window shows, for a
headless server watched from Prometheus and Grafana. Counters run from the engine's start (a new
model is a new engine: they start again, which Prometheus reads as a reset); gauges are now.

Token names as the step record's (DESIGN.md §3): emitted = committed + accepted drafts."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from engine.telemetry.totals import Histogram

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
PREFIX = "swarmscope_"
# Upper bounds (seconds) of the API's latency histograms: a first token at one lane to a long
# answer in a full batch
LATENCY_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


@dataclass(slots=True)
class ServedTotals:
    """The requests the API answered over the server's life (models loaded in the window
    included): added to from the HTTP threads, through a Guarded."""
    answers: Counter = field(default_factory=Counter)  # by finish reason, "unfinished" where
    # the client left or the engine stopped first
    prompt_tokens: int = 0       # usage's: a prompt once however many answers it has
    cached_tokens: int = 0       # of which the KV was held already
    completion_tokens: int = 0
    first_token_s: Histogram = field(default_factory=lambda: Histogram(LATENCY_BUCKETS_S))
    request_s: Histogram = field(default_factory=lambda: Histogram(LATENCY_BUCKETS_S))

    def add(self, reasons: list[str | None], usage: dict, first_token_s: float | None,
            request_s: float) -> None:
        self.answers.update(reason or "unfinished" for reason in reasons)
        self.prompt_tokens += usage["prompt_tokens"]
        self.cached_tokens += usage["prompt_tokens_details"]["cached_tokens"]
        self.completion_tokens += usage["completion_tokens"]
        if first_token_s is not None:
            self.first_token_s.add(first_token_s)
        self.request_s.add(request_s)


def render(engine, served: ServedTotals | None = None) -> str:
    """The exposition of `engine` (None while a model loads: not ready) and of the requests
    `served`."""
    out = _Exposition()
    out.one("ready", "gauge", "1 once a model is loaded and the engine steps",
            0 if engine is None else 1)
    if served is not None:
        _requests(out, served)
    if engine is None:
        return out.text()
    loaded, controls, totals = engine.loaded, engine.controls, engine.totals.snapshot()
    out.family("model_info", "gauge", "the model served", [(
        {"model": loaded.name, "dtype": str(loaded.dtype).removeprefix("torch."),
         "device": str(loaded.device)}, 1)])
    out.family("controls_info", "gauge", "the controls in force", [(
        {"policy": controls.policy, "ragged": controls.ragged, "drafter": controls.drafter}, 1)])
    out.one("paused", "gauge", "1 while the session is paused", int(controls.paused))
    out.one("budget_tokens", "gauge", "the budget T: tokens a step computes at little more than "
            "one token's time", controls.budget_override or engine.calibration.budget)
    out.one("batch_ceiling", "gauge", "most lanes decoding at once", controls.batch_ceiling)
    out.one("speculation_ceiling", "gauge", "no drafting while more lanes than this decode",
            controls.spec_ceiling)
    out.one("batch_size", "gauge", "lanes that decoded in the newest step (B)",
            totals.last.batch if totals.last else 0)
    agents = Counter((view.cat, view.state) for view in engine.agents(transcript_of=set()))
    out.family("agents", "gauge", "agents by category and state (api: the API's conversations, "
               "in state tool while they wait for their client)",
               [({"category": cat, "state": state}, n)
                for (cat, state), n in sorted(agents.items())])

    by_cat = sorted(totals.emitted)
    out.family("emitted_tokens_total", "counter", "tokens emitted: committed and accepted drafts",
               [({"category": cat}, totals.emitted[cat]) for cat in by_cat])
    out.family("drafted_tokens_total", "counter", "draft tokens proposed and verified",
               [({"category": cat}, totals.drafted[cat]) for cat in by_cat])
    out.family("accepted_tokens_total", "counter", "draft tokens accepted (the bonus not counted)",
               [({"category": cat}, totals.accepted[cat]) for cat in by_cat])
    out.one("prefill_tokens_total", "counter", "prompt tokens fed", totals.prefill)
    out.one("padding_tokens_total", "counter", "slots the padded layout computed for nothing",
            totals.padding)
    out.one("pass_tokens_total", "counter", "tokens the forward passes computed, padding "
            "included", totals.pass_tokens)
    out.histogram("step_duration_seconds", "wall time of an engine step (drafting, forward pass "
                  "and verification)", totals.step_s)

    kv = engine.kv_usage()
    out.one("kv_cache_held_bytes", "gauge", "KV cache the sequences hold (a shared block once)",
            kv.held_bytes)
    out.one("kv_cache_peak_bytes", "gauge", "the most KV cache held at once", kv.peak_bytes)
    out.one("kv_cache_capacity_bytes", "gauge", "the whole KV cache", kv.total_bytes)
    out.one("shared_prompt_tokens_total", "counter", "prompt tokens a sequence started with from "
            "a shared prefix's KV blocks, not fed", kv.shared_tokens)
    out.one("preemptions_total", "counter", "times a sequence lost its KV for want of room",
            kv.preemptions)
    return out.text()


def _requests(out: "_Exposition", served: ServedTotals) -> None:
    out.family("api_answers_total", "counter", "answers the API gave (a request's choices), by "
               "finish reason", [({"finish_reason": reason}, n)
                                 for reason, n in sorted(served.answers.items())])
    out.one("api_prompt_tokens_total", "counter", "prompt tokens of the API's requests",
            served.prompt_tokens)
    out.one("api_cached_prompt_tokens_total", "counter", "of those, the ones whose KV was held "
            "already", served.cached_tokens)
    out.one("api_completion_tokens_total", "counter", "tokens of the API's answers",
            served.completion_tokens)
    out.histogram("api_time_to_first_token_seconds", "from a request's arrival to its first "
                  "answer tokens", served.first_token_s)
    out.histogram("api_request_duration_seconds", "from a request's arrival to its last answer's "
                  "end", served.request_s)


class _Exposition:
    def __init__(self) -> None:
        self._lines: list[str] = []

    def family(self, name: str, kind: str, help_text: str,
               samples: list[tuple[dict[str, str], float]]) -> None:
        self._head(name, kind, help_text)
        self._lines += [f"{PREFIX}{name}{_labels(labels)} {value!r}"
                        for labels, value in samples]

    def one(self, name: str, kind: str, help_text: str, value: float) -> None:
        """A family of one sample, unlabelled."""
        self.family(name, kind, help_text, [({}, value)])

    def histogram(self, name: str, help_text: str, histogram: Histogram) -> None:
        self._head(name, "histogram", help_text)
        self._lines += [f'{PREFIX}{name}_bucket{{le="{bound:g}"}} {n}'
                        for bound, n in histogram.cumulative()]
        self._lines += [f'{PREFIX}{name}_bucket{{le="+Inf"}} {histogram.count}',
                        f"{PREFIX}{name}_sum {histogram.total!r}",
                        f"{PREFIX}{name}_count {histogram.count}"]

    def _head(self, name: str, kind: str, help_text: str) -> None:
        self._lines += [f"# HELP {PREFIX}{name} {help_text}", f"# TYPE {PREFIX}{name} {kind}"]

    def text(self) -> str:
        return "\n".join(self._lines) + "\n"


def _labels(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{key}="{_escaped(value)}"' for key, value in labels.items()) + "}"


def _escaped(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
