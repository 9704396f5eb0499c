"""API clients as agents of the engine (tiny model, fp32, virtual clock): answers are what the
model generates, a conversation that goes on reuses its context's KV without changing the
answer, and clients live beside the simulated swarm."""
import pytest

from engine.controls import Controls
from engine.engine import IDLE_CLIENTS, Engine
from engine.generate import generate
from engine.serve.client_agent import CATEGORY
from engine.serve.completion import Completion
from engine.sampling import SamplingParams
from engine.serve.request import ApiRequest, parse_choices
from engine.sequence import common_prefix
from engine.swarm.config import SwarmConfig

USER = "def add(a, b):\n    return a + b\n\nRepeat the function."


def make_engine(tiny, calibration, agents=0, policy="goodput", **config):
    config = {"clock": "virtual", "max_context": 512, "client_lanes": 4, **config}
    return Engine(tiny, SwarmConfig(**config),
                  Controls(swarm_size=agents, policy=policy, tool_latency_s=0.3,
                           mix={"chat": 1.0, "json": 1.0}), calibration=calibration)


def submit(engine, messages, **body):
    completion = Completion(ApiRequest.parse(
        {"messages": messages, "temperature": 0, "max_tokens": 24, **body},
        engine.loaded.tokenizer, engine.max_context))
    engine.submit(completion)
    return completion


def answer(engine, completion, steps=400):
    """Step until `completion` ends; its token ids and finish reason."""
    ids = []
    for _ in range(steps):
        engine.step()
        while (event := completion.next_event(0)) is not None:
            if event[1] != "tokens":
                return ids, event[1:]
            ids += event[2]
    raise AssertionError("no answer")


@pytest.mark.parametrize("policy", ["off", "fixed", "goodput"])
def test_an_answer_is_what_the_model_generates(tiny, calibration, policy):
    engine = make_engine(tiny, calibration, policy=policy)
    ids, end = answer(engine, submit(engine, [{"role": "user", "content": USER}]))
    expected = generate(tiny, [USER], Controls(policy="off"), max_new_tokens=24)[0].token_ids
    assert ids == expected and end[0] == "finish"
    assert end[1] == ("stop" if expected[-1] in tiny.tokenizer.eos_ids else "length")
    lanes = [lane for record in engine.records.snapshot() for lane in record.lanes]
    assert lanes and {lane.cat for lane in lanes} == {CATEGORY}
    if policy != "off":
        assert sum(lane.k for lane in lanes) > 0  # speculation ran, and changed nothing


def test_a_sampled_answer_is_the_models_with_the_seed_asked_for(tiny, calibration):
    engine = make_engine(tiny, calibration, policy="off")
    ids, _ = answer(engine, submit(engine, [{"role": "user", "content": USER}], temperature=1,
                                   seed=7))
    expected = generate(tiny, [USER], Controls(policy="off"), max_new_tokens=24,
                        sampling=SamplingParams(temperature=1.0, seed=7))[0].token_ids
    assert ids == expected and len(set(ids)) > 3


def test_a_conversation_that_goes_on_reuses_its_context_and_answers_the_same(tiny, calibration):
    # The first answer sampled at top_k 1: the tiny model's greedy text (one token over and
    # over), which comes back as the same tokens. The second sampled freely, so that its text
    # tells KV faults, or the first turn's sampler kept, apart.
    engine = make_engine(tiny, calibration, policy="off")
    first = [{"role": "user", "content": USER}]
    ids, _ = answer(engine, submit(engine, first, temperature=1, top_k=1))
    context = engine._agents[0].seq.num_cached  # the last token is fed with the next turn
    text = tiny.tokenizer.decode([i for i in ids if i not in tiny.tokenizer.eos_ids])
    going_on = first + [{"role": "assistant", "content": text},
                        {"role": "user", "content": "Tool output: ok. Once more."}]
    second = submit(engine, going_on, temperature=1, seed=8)
    again, _ = answer(engine, second)
    assert second.agent == 0 and second.reused_tokens == context > 0
    fresh = make_engine(tiny, calibration, policy="off")
    alone = submit(fresh, going_on, temperature=1, seed=8)
    assert answer(fresh, alone)[0] == again and alone.reused_tokens == 0 and len(set(again)) > 3
    # a conversation that does not go on from a waiting one gets an agent of its own
    other = submit(engine, [{"role": "user", "content": "Something else."}])
    answer(engine, other)
    assert other.agent == 1 and other.reused_tokens == 0


def test_a_conversation_that_rewrites_its_last_answer_reuses_what_came_before(tiny, calibration):
    """A template that drops a thinking model's reasoning writes the last answer back otherwise:
    the context is cut where the prompt leaves it, and the answer is a fresh engine's. A
    conversation that starts alike, or asks the same again, is not that agent's: in a swarm
    many do, and one must not take another's context."""
    engine = make_engine(tiny, calibration, policy="off")
    first = [{"role": "system", "content": "You are an agent."}, {"role": "user", "content": USER}]
    answer(engine, submit(engine, first, temperature=1, seed=3))
    before_answer = engine._agents[0].seq.prompt_len
    going_on = first + [{"role": "assistant", "content": "(reasoning dropped)"},
                        {"role": "user", "content": "ok"}]
    again = submit(engine, going_on, temperature=1, seed=8)
    ids, _ = answer(engine, again)
    assert again.agent == 0 and again.reused_tokens == before_answer
    fresh = make_engine(tiny, calibration, policy="off")
    assert answer(fresh, submit(fresh, going_on, temperature=1, seed=8))[0] == ids
    # the first alike, then asked again of the agent it made, then another task: agents of
    # their own, each starting with the KV blocks wholly inside what it shares with another's
    # context (Scheduler), and answering as a fresh engine does
    others, answers = [], []
    another = first[:1] + [{"role": "user", "content": "Another task."}]
    for messages in (first, first, another):
        others.append(submit(engine, messages, temperature=1, seed=5))
        answers.append(answer(engine, others[-1])[0])
    prompts = [len(o.request.prompt_ids) for o in others]
    system = common_prefix(others[0].request.prompt_ids, others[2].request.prompt_ids)
    whole = engine.scheduler.blocks.block_size
    assert [(alike.agent, alike.reused_tokens) for alike in others] == [
        (1, (prompts[0] - 1) // whole * whole), (2, (prompts[1] - 1) // whole * whole),
        (3, system // whole * whole)]
    assert system >= whole  # the three share a block at least
    fresh = make_engine(tiny, calibration, policy="off")
    assert answer(fresh, submit(fresh, another, temperature=1, seed=5))[0] == answers[2]


def test_n_answers_of_one_request_are_lanes_of_their_own_that_share_its_prefill(tiny,
                                                                               calibration):
    """A request for n answers: n client agents, the later ones starting from the first's KV
    blocks of the prompt (fed once), each answering as its seed does alone."""
    engine = make_engine(tiny, calibration, policy="off")
    messages = [{"role": "user", "content": USER * 3}]
    body = {"messages": messages, "temperature": 1, "seed": 11, "max_tokens": 12, "n": 3}
    completions = Completion.choices(parse_choices(body, engine.loaded.tokenizer,
                                                   engine.max_context))
    for completion in completions:
        engine.submit(completion)
    answers, ended = [[], [], []], set()
    for _ in range(400):
        engine.step()
        while (event := completions[0].next_event(0)) is not None:
            index, kind, value = event
            if kind == "tokens":
                answers[index] += value
            else:
                ended.add(index)
        if len(ended) == 3:
            break
    assert sorted(c.agent for c in completions) == [0, 1, 2]
    prompt = len(completions[0].request.prompt_ids)
    whole = engine.scheduler.blocks.block_size
    assert [c.reused_tokens for c in completions] == [0] + [(prompt - 1) // whole * whole] * 2
    for seed, ids in zip((11, 12, 13), answers):
        fresh = make_engine(tiny, calibration, policy="off")
        assert answer(fresh, submit(fresh, messages, temperature=1, seed=seed, max_tokens=12)
                      )[0] == ids
    assert len({tuple(ids) for ids in answers}) == 3


def test_a_cancelled_answer_ends_its_turn_and_the_agent_waits(tiny, calibration):
    engine = make_engine(tiny, calibration, policy="off")
    completion = submit(engine, [{"role": "user", "content": USER}], max_tokens=200)
    while completion.next_event(0) is None:
        engine.step()
    completion.cancel()
    engine.step()
    assert [a.state for a in engine.agents()] == ["tool"]
    assert engine.scheduler.place(engine._agents[0].seq) == "idle"


def test_clients_join_the_swarm_and_resizing_it_leaves_them(tiny, calibration):
    engine = make_engine(tiny, calibration, agents=2)
    completion = submit(engine, [{"role": "user", "content": USER}])
    engine.mailbox.post(swarm_size=1)
    answer(engine, completion)
    views = {view.id: view for view in engine.agents()}
    assert views[completion.agent].cat == CATEGORY and completion.agent == 2
    assert sorted(view.state == "done" for view in views.values()) == [False, False, True]
    engine.mailbox.post(swarm_size=0)
    engine.step()
    assert views[completion.agent].state != "done"
    assert engine.agents()[-1].state == "tool"  # the client's agent waits for its client


def test_the_longest_waiting_clients_go_past_the_most_kept(tiny, calibration):
    engine = make_engine(tiny, calibration, policy="off")
    for i in range(IDLE_CLIENTS + 2):
        answer(engine, submit(engine, [{"role": "user", "content": f"task {i}"}], max_tokens=2))
    agents = engine.agents()
    assert len(agents) == IDLE_CLIENTS and agents[0].id == 2
    done = [e["agent"] for e in engine.events.snapshot() if e.get("event") == "done"]
    assert done == [0, 1]


def test_closing_the_engine_answers_every_open_request_with_an_error(tiny, calibration):
    engine = make_engine(tiny, calibration)
    running = submit(engine, [{"role": "user", "content": USER}], max_tokens=200)
    engine.step()
    queued = submit(engine, [{"role": "user", "content": "later"}])
    engine.close()
    late = submit(engine, [{"role": "user", "content": "too late"}])
    for completion in (running, queued, late):
        events = []
        while (event := completion.next_event(0)) is not None:
            events.append(event[1:])
        assert events[-1] == ("error", "the engine stopped")
