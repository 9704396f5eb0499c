"""GET /metrics: the engine's numbers in Prometheus' text format, read back with Prometheus' own
client library's parser, and checked against the step records they total."""
import dataclasses
import http.client
import json
import threading

import pytest
from prometheus_client.parser import text_string_to_metric_families

from engine.controls import Controls
from engine.engine import Engine
from engine.serve import metrics
from engine.serve.http_api import ApiServer
from engine.swarm.config import SwarmConfig
from engine.telemetry.summary import summarize
from engine.telemetry.totals import STEP_BUCKETS_S
from tests.engine.serve.serving import (ASK, CALL_TEXT, HERMES, TOOLS, ScriptedEngine,
                                        call_tokenizer, serving)


def scrape(server) -> tuple[int, str, dict]:
    """(status, content type, {(sample name, labels as a sorted tuple): value})."""
    host, port = server._server.server_address[:2]
    connection = http.client.HTTPConnection(host, port, timeout=60)
    connection.request("GET", "/metrics")
    response = connection.getresponse()
    return response.status, response.getheader("Content-Type"), samples(response.read().decode())


def samples(text: str) -> dict:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def by_label(scraped: dict, name: str, label: str) -> dict:
    return {dict(labels)[label]: value for (sample, labels), value in scraped.items()
            if sample == name}


def test_metrics_total_the_step_records_of_an_answer(tiny, calibration):
    with serving(tiny, calibration, max_context=512, client_lanes=4) as (engine, server):
        host, port = server._server.server_address[:2]
        connection = http.client.HTTPConnection(host, port, timeout=60)
        connection.request("POST", "/v1/chat/completions", body=json.dumps({
            "messages": [{"role": "user", "content": "def f(x):\n    return x\n\nRepeat it."}],
            "temperature": 0, "max_tokens": 24}), headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        assert response.status == 200
        usage = json.loads(response.read())["usage"]
        for _ in range(200):  # the handler counts the request once it has answered it
            if server.served.snapshot().answers:
                break
            threading.Event().wait(0.05)
        status, content_type, scraped = scrape(server)  # the engine idles: no client is waiting
        records = engine.records.snapshot()

    assert status == 200 and content_type == metrics.CONTENT_TYPE
    summary = summarize(records)
    emitted = by_label(scraped, "swarmscope_emitted_tokens_total", "category")
    assert set(emitted) == {"api"} and emitted["api"] == summary.emitted >= 24
    assert by_label(scraped, "swarmscope_drafted_tokens_total", "category") == {
        "api": summary.drafted}
    assert by_label(scraped, "swarmscope_accepted_tokens_total", "category") == {
        "api": summary.accepted}
    assert scraped[("swarmscope_prefill_tokens_total", ())] == summary.prefill_tokens > 0
    assert scraped[("swarmscope_pass_tokens_total", ())] == sum(r.pass_tokens for r in records)
    assert scraped[("swarmscope_step_duration_seconds_count", ())] == len(records)
    assert scraped[("swarmscope_step_duration_seconds_sum", ())] == pytest.approx(
        sum(r.dt_ms for r in records) / 1000)
    buckets = by_label(scraped, "swarmscope_step_duration_seconds_bucket", "le")
    assert buckets["+Inf"] == len(records)
    for bound in STEP_BUCKETS_S:  # cumulative, as Prometheus reads a histogram
        assert buckets[f"{bound:g}"] == sum(r.dt_ms / 1000 <= bound for r in records)

    # the request's own numbers, as its usage gave them
    assert by_label(scraped, "swarmscope_api_answers_total", "finish_reason") == {"length": 1}
    assert scraped[("swarmscope_api_prompt_tokens_total", ())] == usage["prompt_tokens"] > 0
    assert scraped[("swarmscope_api_completion_tokens_total", ())] == 24
    assert scraped[("swarmscope_api_cached_prompt_tokens_total", ())] == 0
    first = scraped[("swarmscope_api_time_to_first_token_seconds_sum", ())]
    whole = scraped[("swarmscope_api_request_duration_seconds_sum", ())]
    assert scraped[("swarmscope_api_time_to_first_token_seconds_count", ())] == scraped[
        ("swarmscope_api_request_duration_seconds_count", ())] == 1
    assert 0 < first < whole < 60

    assert scraped[("swarmscope_ready", ())] == 1
    assert scraped[("swarmscope_model_info", (("device", "cpu"), ("dtype", "float32"),
                                              ("model", "tiny-test")))] == 1
    assert scraped[("swarmscope_controls_info", (("drafter", "lookup"), ("policy", "goodput"),
                                                 ("ragged", "packed")))] == 1
    assert scraped[("swarmscope_batch_size", ())] == records[-1].batch
    assert scraped[("swarmscope_budget_tokens", ())] == calibration.budget
    # the conversation's agent waits for its client's next request
    assert scraped[("swarmscope_agents", (("category", "api"), ("state", "tool")))] == 1
    kv = engine.kv_usage()
    assert scraped[("swarmscope_kv_cache_capacity_bytes", ())] == kv.total_bytes > 0
    assert 0 < scraped[("swarmscope_kv_cache_held_bytes", ())] <= scraped[
        ("swarmscope_kv_cache_peak_bytes", ())]


def test_an_answer_that_calls_a_tool_is_counted_so_whole_and_streamed(tmp_path):
    engine = ScriptedEngine(call_tokenizer(tmp_path, HERMES), "Let me look." + CALL_TEXT)
    server = ApiServer(lambda: engine, "127.0.0.1", 0).start()
    try:
        for stream in (False, True):
            host, port = server._server.server_address[:2]
            connection = http.client.HTTPConnection(host, port, timeout=60)
            connection.request("POST", "/v1/chat/completions", body=json.dumps(
                {"messages": ASK, "tools": TOOLS, "stream": stream}))
            assert '"tool_calls"' in connection.getresponse().read().decode()
        assert server.served.snapshot().answers == {"tool_calls": 2}
    finally:
        server.close()


def test_totals_keep_counting_past_the_records_the_engine_holds(tiny, calibration):
    engine = Engine(tiny, SwarmConfig(max_context=256, clock="virtual", record_capacity=3),
                    Controls(swarm_size=2, tool_latency_s=0.0), calibration=calibration)
    try:
        engine.run(steps=12)
        totals = engine.totals.snapshot()
        assert len(engine.records) == 3
        assert engine.records.total == totals.steps == totals.step_s.count == 12
        assert totals.last == engine.records.snapshot()[-1]
        emitted = samples(metrics.render(engine))
        assert sum(by_label(emitted, "swarmscope_emitted_tokens_total", "category").values()) \
            == sum(totals.emitted.values()) > sum(r.emitted for r in engine.records.snapshot())
    finally:
        engine.close()


def test_label_values_are_escaped_so_any_model_name_reads_back(tiny, calibration):
    name = 'my "odd"\\model\nname'
    engine = Engine(dataclasses.replace(tiny, name=name), SwarmConfig(max_context=128),
                    Controls(swarm_size=0), calibration=calibration)
    try:
        scraped = samples(metrics.render(engine))
    finally:
        engine.close()
    assert by_label(scraped, "swarmscope_model_info", "model") == {name: 1}
    assert scraped[("swarmscope_step_duration_seconds_count", ())] == 0


def test_while_a_model_loads_metrics_say_that_it_is_not_ready_and_no_request_was_answered():
    server = ApiServer(lambda: None, "127.0.0.1", 0).start()
    try:
        status, _, scraped = scrape(server)
    finally:
        server.close()
    assert status == 200 and scraped[("swarmscope_ready", ())] == 0
    assert {name for name, _ in scraped if not name.startswith("swarmscope_api_")} == {
        "swarmscope_ready"}
    assert scraped[("swarmscope_api_request_duration_seconds_count", ())] == 0
