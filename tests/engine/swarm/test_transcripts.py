"""Text records: a trace of a real tiny-model session carries each agent's transcript, written as
turns end (so a cut-off file still holds it), and its output text is the decode of each turn."""
import random

from engine.controls import Controls
from engine.engine import Engine
from engine.sequence import Sequence
from engine.swarm.agent import Agent
from engine.swarm.config import SwarmConfig
from engine.telemetry.trace_reader import read_trace
from engine.tokenizer import ByteTokenizer

SHORT = {"chat": 1.0, "json": 1.0}


def _record_turns(monkeypatch):
    """Spy on every agent: the ids each of its turns emitted, as the engine handed them over."""
    turns: dict[int, list[list[int]]] = {}
    begin, on_tokens = Agent._begin_turn, Agent.on_tokens

    def spy_begin(self, t):
        turns.setdefault(self.id, []).append([])
        begin(self, t)

    def spy_tokens(self, new_ids, accepted, drafted, logprobs=None):
        turns[self.id][-1].extend(new_ids)
        on_tokens(self, new_ids, accepted, drafted, logprobs)

    monkeypatch.setattr(Agent, "_begin_turn", spy_begin)
    monkeypatch.setattr(Agent, "on_tokens", spy_tokens)
    return turns


def test_text_records_hold_each_agents_decoded_output(tiny, calibration, tmp_path, monkeypatch):
    turns = _record_turns(monkeypatch)
    path = tmp_path / "s.jsonl"
    engine = Engine(tiny, SwarmConfig(seed=3, clock="virtual", max_context=1024),
                    Controls(swarm_size=3, tool_latency_s=0.3, mix=dict(SHORT)),
                    calibration=calibration, trace_path=str(path))
    engine.run(steps=120)
    engine.trace.flush()
    # Before close (as a killed session leaves it): the turns that ended are already there.
    early = read_trace(path)
    assert {r["agent"] for r in early.texts} == {0, 1, 2}
    assert any(kind == "committed" for r in early.texts for _, kind in r["segments"])
    engine.close()
    trace = read_trace(path)
    assert len(trace.texts) > len(early.texts)  # close added each agent's unfinished turn
    decode = tiny.tokenizer.decode
    highlighted = 0
    for agent in range(3):
        segments = [seg for r in trace.texts if r["agent"] == agent for seg in r["segments"]]
        output = "".join(text for text, kind in segments if kind in ("committed", "accepted_draft"))
        assert output == "".join(decode(ids) for ids in turns[agent])
        assert len(output) > 50
        prompts = [text for text, kind in segments if kind == "prompt"]
        assert prompts and prompts[0].startswith("<|im_start|>")
        assert sum(kind == "tool" for _, kind in segments) >= 1  # the agent came back from a tool
        highlighted += sum(kind == "accepted_draft" for _, kind in segments)
    assert highlighted > 0
    times = [r["t"] for r in trace.texts]
    assert times[-1] >= max(s.t for s in trace.steps)


def test_a_character_split_across_steps_and_draft_runs_is_decoded_whole():
    agent = Agent(0, None, ByteTokenizer(), random.Random(0), 0.0, 100, record_text=True)
    e_acute, euro = list("é".encode()), list("€".encode())  # 2 and 3 bytes
    agent.on_tokens([ord("a"), e_acute[0]], accepted=1, drafted=2)   # draft "a", byte 1 of é
    agent.on_tokens([e_acute[1], euro[0], euro[1]], accepted=2, drafted=2)
    agent.on_tokens([euro[2], ord("b")], accepted=0, drafted=0)
    # Each character goes to the run its last byte came in; the run holding only the first
    # byte of é is then empty and dropped.
    assert agent.take_text() == [["a", "accepted_draft"], ["é", "accepted_draft"],
                                 ["€b", "committed"]]
    assert agent.take_text() == []  # taken once
    agent.on_tokens([ord("c")], accepted=0, drafted=0)
    assert agent.take_text() == [["c", "committed"]]


def test_an_agent_that_records_no_text_keeps_nothing_for_the_trace():
    agent = Agent(0, None, ByteTokenizer(), random.Random(0), 0.0, 100)
    agent.on_tokens([ord("a")], accepted=0, drafted=0)
    assert agent.take_text() == [] and agent.view().transcript == [("a", "committed")]


class _OneTool:
    """A workload whose tool always answers the same."""
    def tool_output(self, task, rng):
        return "3 files"


def test_a_tool_answer_follows_the_turn_once_closed():
    """The model's own end-of-turn token is not written twice; a turn cut at its token limit
    gets the template's close. No second system message or BOS either way."""
    tok = ByteTokenizer()
    agent = Agent(0, _OneTool(), tok, random.Random(0), 0.0, 100)
    turn = tok.encode(tok.chat_prompt("ls", "sys") + "done")
    for ended, expected in ((True, "\n"), (False, "<|im_end|>\n")):
        agent.seq = Sequence(seq_id=0, token_ids=turn + [tok.IM_END] * ended, prompt_len=1,
                             stop_ids=tok.eos_ids)
        text, ids = agent.tool_output()
        assert text == expected + "<|im_start|>user\n3 files<|im_end|>\n<|im_start|>assistant\n"
        assert ids == tok.encode(text)


def test_a_views_segments_are_numbered_over_the_agents_life(monkeypatch):
    """The app appends what a transcript grew by: a view's tail says which segment it starts
    at, also once the oldest segments have scrolled away."""
    monkeypatch.setattr("engine.swarm.agent.MAX_SEGMENTS", 4)
    agent = Agent(0, None, ByteTokenizer(), random.Random(0), 0.0, 100)
    for letter, accepted in zip("abcdef", (1, 0, 1, 0, 1, 0)):  # runs of alternating kinds
        agent.on_tokens([ord(letter)], accepted=accepted, drafted=accepted)
    agent.on_tokens([ord("z")], accepted=0, drafted=0)  # the sixth run grows
    whole = agent.view()
    assert len(whole.transcript) == 4 and whole.first_segment == 2
    assert whole.transcript[-1] == ("fz", "committed")
    tail = agent.view(tail_chars=3)
    assert tail.transcript == whole.transcript[-2:] and tail.first_segment == 4
