"""tool_choice "required" or a named tool, and response_format beside tools: the answer held to
calls in its model's form (each call's JSON to its tool's parameters), or to a call or the
format's JSON, and read back as any answer's calls are."""
import json

import pytest

from engine.loading import load_model
from engine.serve.request import ApiRequest, RequestError
from tests.engine.serve.serving import (ASK, CALL_TEXT, DEVSTRAL, DEVSTRAL_CALL, GRANITE,
                                        GRANITE_CALL, HERMES, LFM2, LFM2_CALL, LFM2_TAGS, LLAMA,
                                        LLAMA_CALL, MISTRAL, MISTRAL_CALL, QWEN35, QWEN35_CALL,
                                        TOOLS, call_tokenizer, serving, thinker)

LS = {"type": "function", "function": {"name": "ls", "parameters": {
    "type": "object", "properties": {"all": {"type": "boolean"}}, "required": ["all"],
    "additionalProperties": False}}}
# Qwen3's, in brief: Hermes' calls, from a model that may reason first
HERMES_THINKING = HERMES + "{# drops what a past answer reasoned, up to its </think> #}"
FORMS = {"hermes": (HERMES, CALL_TEXT), "llama": (LLAMA, LLAMA_CALL),
         "mistral": (MISTRAL, MISTRAL_CALL), "devstral": (DEVSTRAL, DEVSTRAL_CALL),
         "granite": (GRANITE, GRANITE_CALL)}


def held_to(tokenizer, **body):
    """Whether the request's answer may be each text, whole."""
    request = ApiRequest.parse({"messages": ASK, "tools": TOOLS + [LS], **body}, tokenizer, 4096)

    def takes(text: str) -> bool:
        ids = tokenizer.encode(text)
        return request.output_format.allowed(ids) == len(ids)
    return request, takes


@pytest.mark.parametrize("form", FORMS)
def test_a_required_call_is_a_call_of_a_tool_offered_in_the_models_form(tmp_path, form):
    template, call = FORMS[form]
    tokenizer = call_tokenizer(tmp_path, template)
    request, takes = held_to(tokenizer, tool_choice="required")
    assert takes(call) and not takes("It holds x = 1.")
    assert not takes(call.replace("read_file", "write_file"))  # no such tool
    [read] = request.tool_form.split(call)[1]
    assert (read.name, json.loads(read.arguments)) == ("read_file", {"path": "a.py"})
    # a named tool: its calls alone, each held to its parameters
    _, takes_ls = held_to(tokenizer, tool_choice={"type": "function", "function": {"name": "ls"}})
    ls_call = call.replace("read_file", "ls").replace('"path": "a.py"', '"all": true')
    assert takes_ls(ls_call) and not takes_ls(call)
    assert not takes_ls(ls_call.replace("true", '"yes"'))


def test_a_required_lfm2_call_is_a_python_list_of_calls_of_the_tools_offered(tmp_path):
    """Each call's keyword arguments in its schema's order, those it requires first, each value
    JSON under its schema."""
    tokenizer = call_tokenizer(tmp_path, LFM2, LFM2_TAGS)
    request, takes = held_to(tokenizer, tool_choice="required")
    assert takes(LFM2_CALL) and not takes("It holds x = 1.")
    assert takes(LFM2_CALL.replace('path="a.py"', ""))  # path is not required
    assert takes(LFM2_CALL.replace('read_file(path="a.py")', "ls(all=true)"))
    assert takes(LFM2_CALL.replace(")]", "), ls(all=false)]"))  # parallel calls
    for wrong in ('read_file(path=1)', 'write_file(path="a.py")', "ls()", 'ls(all="yes")',
                  'ls(all=true, depth=2)'):  # ls takes `all` alone, and must have it
        assert not takes(LFM2_CALL.replace('read_file(path="a.py")', wrong)), wrong
    [read] = request.tool_form.split(LFM2_CALL)[1]
    assert (read.name, json.loads(read.arguments)) == ("read_file", {"path": "a.py"})
    _, takes_ls = held_to(tokenizer, tool_choice={"type": "function", "function": {"name": "ls"}})
    assert takes_ls(LFM2_CALL.replace('read_file(path="a.py")', "ls(all=false)"))
    assert not takes_ls(LFM2_CALL)
    _, one = held_to(tokenizer, tool_choice="required", parallel_tool_calls=False)
    assert not one(LFM2_CALL.replace(")]", "), ls(all=false)]"))


def test_a_required_lfm2_calls_arguments_are_those_required_then_any_others(tmp_path):
    """In the schema's order, the required first; a tool whose parameters name none takes any
    keyword arguments."""
    now = {"type": "function", "function": {"name": "now"}}
    grep = {"type": "function", "function": {"name": "grep", "parameters": {
        "type": "object", "properties": {"path": {"type": "string"}, "pattern": {"type": "string"},
                                         "limit": {"type": "integer"}}, "required": ["pattern"]}}}
    tokenizer = call_tokenizer(tmp_path, LFM2, LFM2_TAGS)
    request = ApiRequest.parse({"messages": ASK, "tools": [now, grep], "tool_choice": "required"},
                               tokenizer, 4096)

    def takes(call: str) -> bool:
        ids = tokenizer.encode(f"<|tool_call_start|>[{call}]<|tool_call_end|>")
        return request.output_format.allowed(ids) == len(ids)
    assert takes("now()") and takes('now(tz="UTC", fine=true)')
    assert not takes('now("UTC")') and not takes("later()")
    for call in ('grep(pattern="x")', 'grep(pattern="x", path="a")', 'grep(pattern="x", limit=3)',
                 'grep(pattern="x", path="a", limit=3)'):
        assert takes(call), call
    for call in ('grep(path="a")', 'grep()', 'grep(path="a", pattern="x")',
                 'grep(pattern="x", limit=3, path="a")', 'grep(pattern="x", limit="3")'):
        assert not takes(call), call


def test_a_required_qwen3_5_call_is_xml_of_a_tool_offered(tmp_path):
    """Each argument an element in its schema's order, those required first; a string's value
    any text (markup and newlines too) up to its closing tag, the others' JSON under their
    schemas."""
    tokenizer = call_tokenizer(tmp_path, QWEN35)
    request, takes = held_to(tokenizer, tool_choice="required")
    assert takes(QWEN35_CALL) and not takes("It holds x = 1.")
    assert takes(QWEN35_CALL.replace("a.py", "<b>a\n.py</b>"))
    assert takes(QWEN35_CALL.replace("<parameter=path>\na.py\n</parameter>\n", ""))
    ls_call = QWEN35_CALL.replace("read_file", "ls").replace("path>\na.py", "all>\ntrue")
    assert takes(ls_call) and takes(QWEN35_CALL + "\n" + ls_call)  # parallel calls
    for wrong in (ls_call.replace("true", "yes"), ls_call.replace("all>", "any>"),
                  QWEN35_CALL.replace("read_file", "write_file"),
                  ls_call.replace("<parameter=all>\ntrue\n</parameter>\n", "")):  # required
        assert not takes(wrong), wrong
    [read] = request.tool_form.split(QWEN35_CALL)[1]
    assert (read.name, json.loads(read.arguments)) == ("read_file", {"path": "a.py"})
    [ls] = request.tool_form.split(ls_call)[1]
    assert json.loads(ls.arguments) == {"all": True}  # typed by the request's tools
    _, takes_ls = held_to(tokenizer, tool_choice={"type": "function", "function": {"name": "ls"}})
    assert takes_ls(ls_call) and not takes_ls(QWEN35_CALL)
    _, one = held_to(tokenizer, tool_choice="required", parallel_tool_calls=False)
    assert not one(QWEN35_CALL + "\n" + ls_call)
    # a tool whose parameters name none takes any arguments, as text
    now = ApiRequest.parse({"messages": ASK, "tools": [{"type": "function", "function": {
        "name": "now"}}], "tool_choice": "required"}, tokenizer, 4096).output_format
    for call, takes_it in (("", True), ("<parameter=tz>\nUTC\n</parameter>\n", True),
                           ("tz=UTC\n", False)):
        ids = tokenizer.encode(f"<tool_call>\n<function=now>\n{call}</function>\n</tool_call>")
        assert (now.copy().allowed(ids) == len(ids)) == takes_it, call


def test_one_call_unless_parallel_calls_are_allowed(tmp_path):
    tokenizer = call_tokenizer(tmp_path, HERMES)
    two = CALL_TEXT + "\n" + CALL_TEXT
    assert held_to(tokenizer, tool_choice="required")[1](two)
    assert not held_to(tokenizer, tool_choice="required", parallel_tool_calls=False)[1](two)


def test_a_thinking_models_calls_come_after_its_reasoning(tmp_path):
    _, takes = held_to(call_tokenizer(tmp_path, HERMES_THINKING), tool_choice="required")
    assert takes(f"<think>\nThe file, then.</think>\n\n{CALL_TEXT}") and takes(CALL_TEXT)
    assert not takes("<think>\nThe file, then.</think>\n\nIt holds x = 1.")


def test_with_tools_a_response_format_is_a_call_or_the_formats_json(tmp_path):
    tokenizer = call_tokenizer(tmp_path, HERMES)
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    _, takes = held_to(tokenizer, response_format={
        "type": "json_schema", "json_schema": {"name": "verdict", "schema": schema}})
    assert takes(CALL_TEXT) and takes('{"ok": true}')
    assert not takes("It holds x = 1.") and not takes('{"ok": 1}')


@pytest.mark.parametrize("body, says", [
    ({"tool_choice": {"type": "function", "function": {"name": "rm"}}},
     "tool_choice: names 'rm', which is not among the tools"),
    ({"tool_choice": {"type": "function"}}, "tool_choice: 'auto', 'none', 'required' or"),
])
def test_a_forced_choice_that_cannot_be_made_is_refused(tmp_path, body, says):
    with pytest.raises(RequestError, match=says):
        held_to(call_tokenizer(tmp_path, HERMES), **body)


@pytest.mark.parametrize("reasons", [False, True])
def test_a_real_models_forced_call_comes_back_whole_and_streamed(qwen2, tagged_qwen2,
                                                                 calibration, reasons):
    """A random model that would never call a tool, made to (and speculating meanwhile); a
    thinking model's after its reasoning."""
    import openai
    loaded = (thinker(tagged_qwen2, HERMES_THINKING) if reasons
              else load_model(str(qwen2), dtype="fp32", device="cpu"))
    choice = {"type": "function", "function": {"name": "ls"}}
    with serving(loaded, calibration, max_context=1024, client_lanes=2) as (_, server):
        client = openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0)
        whole = client.chat.completions.create(
            model="x", messages=ASK, tools=TOOLS + [LS], tool_choice=choice, temperature=0,
            parallel_tool_calls=False,
            max_tokens=200).choices[0]
        chunks = list(client.chat.completions.create(
            model="x", messages=ASK, tools=TOOLS + [LS], tool_choice=choice, temperature=0,
            parallel_tool_calls=False,
            max_tokens=200, stream=True))
    assert whole.finish_reason == "tool_calls" and not whole.message.content
    assert not getattr(whole.message, "reasoning_content", None)  # none, or closed at once
    [call] = whole.message.tool_calls
    assert call.function.name == "ls" and json.loads(call.function.arguments) in (
        {"all": True}, {"all": False})
    streamed = [c for chunk in chunks if chunk.choices
                for c in chunk.choices[0].delta.tool_calls or []]
    assert [(c.function.name, c.function.arguments) for c in streamed] == [
        ("ls", call.function.arguments)]
