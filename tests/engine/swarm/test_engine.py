"""The swarm end to end on the tiny model with the virtual clock (reproducible step for step)."""
import pytest
import torch

from engine.controls import Controls
from engine.engine import Engine
from engine.errors import SwarmscopeError
from engine.kv_cache import PagedKVCache
from engine.swarm.config import SwarmConfig

SHORT = {"chat": 1.0, "json": 1.0}  # short prompts keep prefill (and the test) small


def make_engine(tiny, calibration, agents=8, mix=None, policy="goodput", **config):
    config = {"seed": 3, "clock": "virtual", "max_context": 1024, **config}
    controls = Controls(swarm_size=agents, tool_latency_s=0.3, mix=mix or dict(SHORT),
                        policy=policy)
    return Engine(tiny, SwarmConfig(**config), controls, calibration=calibration)


def fingerprint(engine):
    records = [(r.step, round(r.t, 9), r.batch, r.prefill, r.budget,
                [(l.agent, l.k, l.acc, l.ctx) for l in r.lanes]) for r in engine.records.snapshot()]
    texts = {a.id: list(a.seq.token_ids) for a in engine._agents.values()}
    return records, texts, [(e["t"], e["agent"], e["event"]) for e in engine.events.snapshot()]


def test_a_seeded_swarm_is_reproducible_step_for_step(tiny, calibration):
    runs = []
    for _ in range(2):
        engine = make_engine(tiny, calibration, agents=4)
        engine.run(steps=60)
        runs.append(fingerprint(engine))
    assert runs[0] == runs[1]
    assert len(runs[0][0]) == 60 and any(e[2] == "tool" for e in runs[0][2])
    other = make_engine(tiny, calibration, agents=4, seed=4)
    other.run(steps=60)
    assert fingerprint(other)[1] != runs[0][1]  # the seed matters


def test_a_new_task_starts_from_the_kv_of_the_prompt_it_shares_and_writes_the_same(
        tiny, calibration):
    """Agents of a category share its system prompt: a task started while another agent holds
    its KV starts with its blocks rather than feeding it again, and every agent writes what it
    writes without them (fp32; sampled, as greedy text of the tiny model hardly depends on its
    context). A short context makes tasks start often; what each agent writes depends on its
    seed alone, not on when its steps ran."""
    transcripts = {}
    for share in (True, False):
        # no drafts: a sampled lane writes its seed's text token for token only where it is
        # drafted alike (rejection sampling draws per draft), and the runs' batches differ
        engine = make_engine(tiny, calibration, agents=6, max_context=160, share_prefixes=share,
                             temperature=1.0, policy="off")
        engine.run(steps=200)
        assert (engine.kv_usage().shared_tokens > 0) == share
        transcripts[share] = {view.id: "".join(text for text, _ in view.transcript)
                              for view in engine.agents()}
    for agent, text in transcripts[True].items():
        other = transcripts[False][agent]
        shorter = min(len(text), len(other))
        assert shorter > 200 and text[:shorter] == other[:shorter]


def test_the_live_batch_swings_as_agents_block_on_tools(tiny, calibration):
    engine = make_engine(tiny, calibration, agents=8)
    engine.run(steps=100)
    batches = [r.batch for r in engine.records.snapshot() if r.batch > 0]
    assert max(batches) == 8
    assert max(batches) - min(batches) >= 4, (min(batches), max(batches))
    events = [e["event"] for e in engine.events.snapshot() if e["type"] == "agent"]
    assert events.count("tool") >= 4 and events.count("decode") > 8  # agents came back


def test_a_context_shorter_than_the_workload_still_serves_every_category(tiny, calibration):
    """96 tokens, as a model with a short context would have: the workload's prompts and turns
    are longer, so turns shrink to half the context and prompts keep their end."""
    mix = {"chat": 1.0, "json": 1.0, "code-edit": 1.0}
    engine = make_engine(tiny, calibration, agents=3, mix=mix, max_context=96)
    engine.run(steps=200)
    records = engine.records.snapshot()
    assert {lane.cat for r in records for lane in r.lanes} == set(mix)
    assert max(lane.ctx for r in records for lane in r.lanes) < 96
    assert all(len(a.seq.token_ids) <= 96 for a in engine._agents.values())


def test_the_shortest_context_keeps_one_prompt_token_and_turns_of_one(tiny, calibration):
    """A turn writes at most half the context: at two tokens the prompt keeps its last one (a
    prompt kept whole would need KV the cache, sized for such contexts, does not have)."""
    engine = make_engine(tiny, calibration, agents=2, max_context=2)
    engine.run(steps=20)
    assert all(len(a.seq.token_ids) <= 2 for a in engine._agents.values())
    assert sum(a.tokens for a in engine._agents.values()) > 0
    with pytest.raises(ValueError, match="max_context must be >= 2"):
        SwarmConfig(max_context=1)


def test_kv_exhaustion_preempts_and_no_agent_loses_text(tiny, calibration):
    ample = make_engine(tiny, calibration, agents=12)
    ample.run(steps=100)
    tight = make_engine(tiny, calibration, agents=12, kv_tokens=1536)
    tight.run(steps=100)
    assert tight.scheduler.num_preemptions > 0 and ample.scheduler.num_preemptions == 0
    # Greedy fp32: an agent's text depends only on its own context, so after recompute each
    # agent's context is a prefix of (or extends) the same agent's context with ample KV.
    progressed = 0
    for agent_id, a in ample._agents.items():
        b = tight._agents[agent_id]
        x, y = a.seq.token_ids, b.seq.token_ids
        if a.seq.seq_id == b.seq.seq_id or len(a.turn_times) == len(b.turn_times) == 0:
            n = min(len(x), len(y))
            assert x[:n] == y[:n], f"agent {agent_id} text differs after preemption"
        progressed += b.tokens > 0
    assert progressed == 12  # everyone got to decode despite the small cache


def test_controls_apply_at_the_next_step_and_are_logged(tiny, calibration):
    engine = make_engine(tiny, calibration, agents=6)
    engine.run(steps=20)
    engine.mailbox.post(policy="off", batch_ceiling=2, swarm_size=3)
    rec = engine.step()
    assert rec.policy == "off" and rec.batch <= 2 and all(l.k == 0 for l in rec.lanes)
    controls = [e for e in engine.events.snapshot() if e["type"] == "control"]
    assert controls[-1]["changes"] == {"policy": "off", "batch_ceiling": 2, "swarm_size": 3}
    views = engine.agents()
    assert [v.state for v in views].count("done") == 3
    engine.mailbox.post(swarm_size=5)
    engine.step()
    assert sum(v.state != "done" for v in engine.agents()) == 5
    engine.mailbox.post(k=-1)  # invalid: rejected with a message, engine keeps going
    engine.step()
    assert "k must be" in engine.events.snapshot()[-1]["error"]
    engine.mailbox.post(paused=True)
    assert engine.step() is None and engine.step() is None


def test_agent_views_carry_transcripts(tiny, calibration):
    engine = make_engine(tiny, calibration, agents=3, mix={"code-edit": 1.0})
    engine.run(steps=40)
    views = engine.agents()
    assert {v.cat for v in views} == {"code-edit"}
    for v in views:
        kinds = [kind for _, kind in v.transcript]
        assert kinds[0] == "prompt" and "```" in v.transcript[0][0]  # the file it was shown
        assert v.tokens > 0 and {"committed", "accepted_draft"} & set(kinds)
        assert v.state in ("decode", "tool", "waiting")
    # The window asks for one agent's text, and only its tail: the others are not decoded.
    shown = views[1]
    picked = engine.agents(transcript_of={shown.id}, tail_chars=10)
    assert [v.transcript for v in picked if v.id != shown.id] == [[], []]
    tail = next(v for v in picked if v.id == shown.id).transcript
    assert 0 < len(tail) < len(shown.transcript) and tail == shown.transcript[-len(tail):]
    assert sum(len(text) for text, _ in tail) >= 10


def test_trace_records_the_session(tiny, calibration, tmp_path):
    from engine.telemetry.trace_reader import read_trace
    path = tmp_path / "s.jsonl.gz"
    engine = Engine(tiny, SwarmConfig(seed=3, clock="virtual", max_context=1024),
                    Controls(swarm_size=4, tool_latency_s=0.3, mix=dict(SHORT)),
                    calibration=calibration, trace_path=str(path))
    engine.run(steps=30)
    engine.mailbox.post(k=2)
    engine.run(steps=5)
    engine.close()
    trace = read_trace(path)
    assert trace.warnings == []
    assert [s.to_dict() for s in trace.steps] == [r.to_dict() for r in engine.records.snapshot()]
    assert trace.controls[0]["changes"] == {"k": 2}
    assert trace.session["controls"]["swarm_size"] == 4 and trace.session["dtype"] == "fp32"
    assert {e["agent"] for e in trace.agents} == {0, 1, 2, 3}
    assert "chat_template_variables" not in trace.session  # none were given


def test_a_trace_says_what_the_chat_template_was_rendered_with(tiny, calibration, tmp_path):
    from engine.telemetry.trace_reader import read_trace
    tiny.tokenizer.template_variables["enable_thinking"] = False  # as --no-thinking sets it
    path = tmp_path / "s.jsonl"
    Engine(tiny, SwarmConfig(seed=3, clock="virtual"), Controls(swarm_size=2),
           calibration=calibration, trace_path=str(path)).close()
    assert read_trace(path).session["chat_template_variables"] == {"enable_thinking": False}


def test_recalibrate_measures_a_new_curve_and_applies_it_at_the_next_step(
        tiny, calibration, tmp_path, monkeypatch):
    from engine.spec.calibration import cache_path, model_key
    from engine.telemetry.trace_reader import read_trace
    monkeypatch.setenv("SWARMSCOPE_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "s.jsonl"
    engine = Engine(tiny, SwarmConfig(seed=3, clock="virtual", max_context=1024),
                    Controls(swarm_size=2, tool_latency_s=0.3, mix=dict(SHORT)),
                    calibration=calibration, trace_path=str(path))
    engine.run(steps=3)
    messages = []
    measured = engine.recalibrate(progress=messages.append)
    engine.run(steps=3)
    engine.close()
    assert engine.calibration is measured and measured.model == "tiny-test"
    contexts = sorted(lane.ctx for r in engine.records.snapshot()[:3] for lane in r.lanes)
    median = contexts[(len(contexts) - 1) // 2]
    assert measured.context == -(-median // 16) * 16 > 64  # the swarm's, a block's multiple
    assert measured.points != calibration.points and len(messages) >= 2  # start, ..., done
    records = engine.records.snapshot()
    assert {r.budget for r in records[:3]} == {calibration.budget}
    assert {r.budget for r in records[3:]} == {measured.budget}
    assert cache_path(measured.device, model_key(tiny), measured.dtype, measured.threads).exists()
    logged = [e for e in engine.events.snapshot() if e["type"] == "control"]
    assert logged[-1]["changes"]["calibration"]["points"] == [list(p) for p in measured.points]
    assert read_trace(path).controls[-1]["changes"] == logged[-1]["changes"]


def test_a_cancelled_recalibration_keeps_the_old_curve(tiny, calibration, tmp_path, monkeypatch):
    monkeypatch.setenv("SWARMSCOPE_CACHE", str(tmp_path))
    engine = make_engine(tiny, calibration, agents=2)

    def cancel(message):
        raise KeyboardInterrupt  # what a window closing mid-calibration raises, in effect

    with pytest.raises(KeyboardInterrupt):
        engine.recalibrate(progress=cancel)
    assert engine.calibration is calibration and engine.executor.calibration is calibration
    assert engine.step() is not None and engine.records.snapshot()[-1].budget == calibration.budget


@pytest.fixture
def threads_engine(tiny, calibration, tmp_path, monkeypatch, restore_threads):
    """An engine recording a trace, whose thread counts' curves are made up where measured
    (`measured` lists the counts), in a cache of its own; `logged()`: the counts of the curves
    its trace logged, each with whether the tuner had it in force."""
    import dataclasses

    from engine.spec import calibration as cal
    from engine.telemetry.trace_reader import read_trace
    monkeypatch.setenv("SWARMSCOPE_CACHE", str(tmp_path / "cache"))
    measured = []

    def measure(*args, threads=None, **kwargs):
        measured.append(threads)
        return dataclasses.replace(cal.Calibration.make_dummy(t1_ms=10.0 * threads),
                                   device="cpu", dtype="fp32", threads=threads)

    monkeypatch.setattr(cal, "measure", measure)
    path = tmp_path / "s.jsonl"
    engine = Engine(tiny, SwarmConfig(seed=3, clock="virtual"), Controls(swarm_size=2),
                    calibration=calibration, trace_path=str(path))
    logged = lambda: [(e["changes"]["calibration"]["threads"], e["changes"]["threads_tuned"])
                      for e in read_trace(path).controls]
    return engine, measured, logged


def test_switching_cpu_threads_plans_with_that_counts_curve_from_the_next_step(threads_engine):
    """A count never calibrated is measured, one calibrated before comes from the cache; each
    switch is logged as the curve it brought, and a cancelled one keeps the old count and curve."""
    engine, measured, logged = threads_engine
    engine.run(steps=2)
    curves = [engine.use_threads(threads) for threads in (1, 2, 1)]
    assert measured == [1, 2] and torch.get_num_threads() == 1
    assert [c.threads for c in curves] == [1, 2, 1] and engine.calibration is curves[-1]
    assert engine.step() is not None and engine.records.snapshot()[-1].budget == curves[-1].budget

    def cancel(message):
        raise KeyboardInterrupt  # a window closing while the count's curve is measured

    with pytest.raises(KeyboardInterrupt):
        engine.use_threads(3, progress=cancel)
    assert torch.get_num_threads() == 1 and engine.calibration is curves[-1]
    engine.close()
    assert logged() == [(1, False), (2, False), (1, False)]


def test_tuned_threads_switch_between_steps_as_the_tuner_says(threads_engine, tiny, monkeypatch):
    """Each count's curve is had before tuning starts; a switch the tuner asks for is in force
    from the next step with that count's curve, logged; a count asked for ends tuning."""
    engine, measured, logged = threads_engine
    torch.set_num_threads(2)
    engine.tune_threads(counts=[1, 2])
    assert sorted(measured) == [1, 2] and torch.get_num_threads() == 2
    tuner = engine.thread_tuner
    assert tuner.counts == [1, 2] and tuner.current == 2
    seen = []

    def observe(*step):  # a probe's step at 1 thread, then 1 thread kept
        seen.append(step)
        if len(seen) == 2:
            tuner.current = 1
        return 1

    monkeypatch.setattr(tuner, "observe", observe)
    engine.run(steps=1)
    assert torch.get_num_threads() == 1 and engine.calibration.threads == 2  # probing
    engine.recalibrate()  # mid-probe: the count in force's curve, measured at that count
    assert measured[-1] == 2 and engine.calibration.threads == 2
    engine.run(steps=2)
    assert torch.get_num_threads() == 1 and engine.calibration.threads == 1  # in force
    last = engine.records.snapshot()[-1]
    assert seen[-1][:3] == (last.t, last.dt_ms, last.batch)
    assert last.budget == engine.calibration.budget
    engine.use_threads(2)
    assert engine.thread_tuner is None
    engine.close()
    # the count in force's own curve when tuning starts, and each tuned change, then a count asked
    assert logged() == [(2, True), (2, True), (1, True), (2, False)]
    monkeypatch.setattr(type(tiny.model), "device", property(lambda model: torch.device("cuda")))
    with pytest.raises(SwarmscopeError, match="CPU threads are tuned on a CPU"):
        engine.tune_threads()


def test_tuning_is_logged_even_where_the_curve_in_force_stays(threads_engine):
    """Asked for two threads, then tuned among counts whose curve in force is the same one: the
    trace still says tuning began (replay shows *auto*), and when a count asked for ended it."""
    engine, _, logged = threads_engine
    engine.use_threads(2)
    engine.tune_threads(counts=[2])
    assert engine.thread_tuner is not None and engine.calibration.threads == 2
    engine.use_threads(2)
    engine.close()
    assert logged() == [(2, False), (2, True), (2, False)]


def test_tuning_before_the_first_step_is_not_session_time(tiny, calibration, monkeypatch,
                                                          restore_threads):
    """A window that starts tuned measures its counts' curves before the session's first step:
    that time is not the session's (its plots would start a minute in)."""
    import time
    engine = Engine(tiny, SwarmConfig(seed=3, clock="wall"), Controls(swarm_size=2),
                    calibration=calibration)
    monkeypatch.setattr(engine, "_curve_at", lambda threads, progress: time.sleep(0.3) or
                        calibration)
    engine.tune_threads(counts=[1])
    assert engine.now() < 0.2
    engine.step()
    engine.tune_threads(counts=[1])  # mid-session, time goes on
    assert engine.now() > 0.3


def test_the_kv_cache_takes_at_most_half_the_free_memory_and_one_context_at_least(
        tiny, calibration, monkeypatch):
    """A large model's swarm on a small machine preempts more, rather than allocating a cache
    past the memory; with no room for even one agent's context it says so."""
    import engine.engine as engine_module

    per_block = PagedKVCache.bytes_per_block(tiny.config, 16, tiny.dtype)
    monkeypatch.setattr(engine_module, "free_memory_bytes", lambda device: 200 * per_block)
    engine = make_engine(tiny, calibration, agents=8, max_context=1024)
    assert engine.runner.kv.blocks.num_blocks == 100  # not 8 x 1024 / 16 = 512
    assert engine._session()["kv_tokens"] == 1600
    for _ in range(40):  # it runs, preempting as the cache fills
        engine.step()
    assert engine.records.total > 0
    explicit = make_engine(tiny, calibration, agents=8, max_context=1024, kv_tokens=4096)
    assert explicit.runner.kv.blocks.num_blocks == 256  # asked for: as asked
    monkeypatch.setattr(engine_module, "free_memory_bytes", lambda device: 100 * per_block)
    with pytest.raises(SwarmscopeError, match="no room for the KV cache: one agent's context of "
                                              "1024 tokens needs"):
        make_engine(tiny, calibration, agents=8, max_context=1024)


def test_json_agents_answer_in_their_categorys_schema_and_still_speculate(tiny, calibration):
    """The json corpus gives a schema (a tool call): every turn its agents write keeps to it,
    each checked against the schema compiled afresh (the tiny model's turns mostly end at their
    64 tokens, whitespace filling what the grammar lets it: each is a call so far)."""
    from engine.output_format import json_format
    from engine.swarm.workload import Workload

    engine = make_engine(tiny, calibration, agents=4, mix={"json": 1.0})
    engine.run(steps=200)
    schema, ends = Workload().schema("json"), ("<|im_end|>", "</s>")
    turns = 0
    for view in engine.agents():
        answers = [[]]  # each turn's output segments
        for text, kind in view.transcript:
            if kind in ("prompt", "tool"):
                answers.append([])
            else:
                answers[-1].append(text)
        for answer in filter(None, map("".join, answers)):
            ids = tiny.tokenizer.encode(answer.removesuffix(ends[0]).removesuffix(ends[1]))
            assert json_format(schema, tiny.tokenizer).allowed(ids) == len(ids), answer
            turns += 1
    lanes = [lane for record in engine.records.snapshot() for lane in record.lanes]
    assert turns >= 8 and sum(lane.k for lane in lanes) > 0
