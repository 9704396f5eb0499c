"""Tools in the chat API: offered through the model's chat template, and the calls its answer
writes read back as tool_calls, whole and streamed."""
import json
import shutil
import types

import pytest

from engine.errors import ModelLoadError
from engine.loading import load_model
from engine.serve.call_form import CallStream
from engine.serve.call_forms import form_of
from engine.serve.json_calls import GraniteCalls, JsonCalls, ListedCalls, NamedCalls, TaggedCalls
from engine.serve.keyword_calls import PythonicCalls, XmlCalls
from engine.serve.http_api import ApiServer
from engine.serve.request import ApiRequest, RequestError
from engine.serve.tool_calls import template_calls
from engine.tokenizer import ByteTokenizer, Tokenizer
from tests.engine.loading.conftest import make_tokenizer_json
from tests.engine.serve.serving import (ASK, CALL_TEXT, DEVSTRAL, DEVSTRAL_CALL, GRANITE,
                                        GRANITE_CALL, HERMES, LFM2, LFM2_CALL, LFM2_TAGS, LLAMA,
                                        LLAMA_CALL, MISTRAL, MISTRAL_CALL, QWEN35, QWEN35_CALL,
                                        TOOLS, call_tokenizer, scripted_client, serving)

QWEN3_TOOLS = HERMES + "{# strips </think> from past answers #}"
split_calls = TaggedCalls().split


@pytest.fixture(scope="module")
def hermes(tmp_path_factory) -> Tokenizer:
    return call_tokenizer(tmp_path_factory.mktemp("hermes"), HERMES)


def test_calls_are_read_out_of_an_answer_and_the_rest_is_its_text():
    text, calls = split_calls("Let me look." + CALL_TEXT + "\n<tool_call>{\"name\": \"ls\", "
                              "\"parameters\": {}}</tool_call>\n")
    assert text == "Let me look.\n\n"
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [
        ("read_file", {"path": "a.py"}), ("ls", {})]
    assert calls[0].as_api(0)["index"] == 0 and calls[0].as_api()["type"] == "function"
    assert calls[0].id != calls[1].id and calls[0].id.startswith("call_")
    string_arguments = split_calls('<tool_call>{"name": "f", "arguments": "{\\"a\\": 1}"}'
                                   "</tool_call>")[1][0]
    assert json.loads(string_arguments.arguments) == {"a": 1}


@pytest.mark.parametrize("text", [
    "no calls at all",
    "<tool_call>{not json}</tool_call>",
    '<tool_call>{"arguments": {}}</tool_call>',           # no name
    '<tool_call>["read_file"]</tool_call>',
    CALL_TEXT + '<tool_call>{"name": "cut short", "argu',  # the answer ended inside a call
])
def test_what_is_not_a_well_formed_call_is_answered_as_text(text):
    assert split_calls(text) == (text, [])


@pytest.mark.parametrize("step", [1, 3, 7])
def test_a_stream_sends_the_text_before_a_call_and_never_part_of_a_tag(step):
    answer = "Let me <look> at it <tool" + CALL_TEXT
    stream, sent = CallStream(TaggedCalls()), []
    for i in range(0, len(answer), step):
        sent.append(stream.add(answer[i:i + step]))
    rest, calls = stream.end()
    # what went out is never taken back: had a piece of the tag gone, it would be in the text
    assert "".join(sent) + rest == "Let me <look> at it <tool" and rest in ("", "<tool")
    assert [call.name for call in calls] == ["read_file"]


def test_a_stream_whose_call_is_malformed_ends_with_it_as_text():
    stream = CallStream(TaggedCalls())
    sent = stream.add("Hi. <tool_call>{oops}</tool_call> bye")
    assert sent == "Hi. " and stream.end() == ("<tool_call>{oops}</tool_call> bye", [])


@pytest.mark.parametrize("text, calls", [
    (LLAMA_CALL, [("read_file", {"path": "a.py"})]),
    ("  <|python_tag|>" + LLAMA_CALL + "; " + LLAMA_CALL.replace("a.py", "b.py") + "\n",
     [("read_file", {"path": "a.py"}), ("read_file", {"path": "b.py"})]),
    ('{"name": "ls", "arguments": {}}', [("ls", {})]),
    ("Sure: " + LLAMA_CALL, []),                  # a call is the whole answer
    (LLAMA_CALL + " and some words", []),
    ('{"answer": 42}', []),                       # JSON, but no call
    (LLAMA_CALL[:-3], []),                        # cut short
])
def test_a_llama_answer_is_calls_when_it_is_json_calls_and_nothing_else(text, calls):
    content, found = JsonCalls().split(text)
    assert [(c.name, json.loads(c.arguments)) for c in found] == calls
    assert content == ("" if calls else text)


@pytest.mark.parametrize("answer, sent", [
    (LLAMA_CALL, ""), ("\n<|python_tag|>" + LLAMA_CALL, "\n"),
    ("<b>not a call</b>", "<b>not a call</b>"), ("Hello " + LLAMA_CALL, "Hello " + LLAMA_CALL)])
def test_a_llama_answer_that_may_be_a_call_is_held_back_whole(answer, sent):
    stream = CallStream(JsonCalls())
    out = "".join(stream.add(char) for char in answer)
    rest, calls = stream.end()
    assert out == sent and out + rest == (answer if not calls else out)


@pytest.mark.parametrize("text, content, calls", [
    (MISTRAL_CALL, "", [("read_file", {"path": "a.py"})]),
    ("Let me look. " + MISTRAL_CALL[:-1] + ', {"name": "ls", "arguments": {}}]',
     "Let me look. ", [("read_file", {"path": "a.py"}), ("ls", {})]),
    ("[TOOL_CALLS] read_file", None, []),
    (MISTRAL_CALL[:-5], None, []),
])
def test_a_mistral_answer_lists_its_calls_after_its_text(text, content, calls):
    found = _reads(ListedCalls(), text, content, calls)
    assert all(len(c.id) == 9 and c.id.isalnum() for c in found)


def _reads(form, text: str, content: str | None, calls: list) -> list:
    """The calls `form` reads in `text`, which must be `calls` (name, arguments) after
    `content` (None: the text is all content, no calls)."""
    said, found = form.split(text)
    assert [(c.name, json.loads(c.arguments)) for c in found] == calls
    assert said == (text if content is None else content)
    return found


@pytest.mark.parametrize("text, content, calls", [
    (DEVSTRAL_CALL, "", [("read_file", {"path": "a.py"})]),
    ("Let me look.\n" + DEVSTRAL_CALL + "[TOOL_CALLS]ls[ARGS]{}", "Let me look.\n",
     [("read_file", {"path": "a.py"}), ("ls", {})]),
    ("[TOOL_CALLS]read_file[ARGS]", None, []),
    (DEVSTRAL_CALL[:-3], None, []),
    ('[TOOL_CALLS]read the file[ARGS]{"path": "a.py"}', None, []),
    ('[TOOL_CALLS]ls[ARGS]["a.py"]', None, []),
    ("[TOOL_CALLS]read_file", None, []),
])
def test_a_newer_mistral_answer_names_each_call_after_its_text(text, content, calls):
    found = _reads(NamedCalls(), text, content, calls)
    assert all(len(c.id) == 9 and c.id.isalnum() for c in found)


@pytest.mark.parametrize("text, content, calls", [
    (GRANITE_CALL, "", [("read_file", {"path": "a.py"})]),
    ('<|tool_call|>[{"arguments": {"path": "a.py"}, "name": "read_file"}]', "",
     [("read_file", {"path": "a.py"})]),  # the order IBM's examples write
    ("Let me look. " + GRANITE_CALL[:-1] + ', {"name": "ls", "arguments": {}}]',
     "Let me look. ", [("read_file", {"path": "a.py"}), ("ls", {})]),
    ("<|tool_call|>read_file", None, []),
    (GRANITE_CALL[:-3], None, []),
])
def test_a_granite_answer_lists_its_calls_after_its_text(text, content, calls):
    found = _reads(GraniteCalls(), text, content, calls)
    assert all(c.id.startswith("call_") for c in found)


@pytest.mark.parametrize("text, content, calls", [
    (LFM2_CALL, "", [("read_file", {"path": "a.py"})]),
    ("Let me look. " + LFM2_CALL + " Then ls.", "Let me look.  Then ls.",
     [("read_file", {"path": "a.py"})]),
    ('<|tool_call_start|>[read_file(path="a.py"), ls(all=True, depth=2, only=None)]'
     '<|tool_call_end|>', "", [("read_file", {"path": "a.py"}),
                               ("ls", {"all": True, "depth": 2, "only": None})]),
    # JSON's literals, a call without its list, nested values
    ('<|tool_call_start|>ls(all=true, skip=null, sort={"by": ["name", 1.5]})<|tool_call_end|>',
     "", [("ls", {"all": True, "skip": None, "sort": {"by": ["name", 1.5]}})]),
    ('<|tool_call_start|>[read_file("a.py")]<|tool_call_end|>', None, []),  # positional
    ('<|tool_call_start|>[read_file(path=open("a.py"))]<|tool_call_end|>', None, []),
    ('<|tool_call_start|>[read_file(path="a.py"]<|tool_call_end|>', None, []),
    ('<|tool_call_start|>[os.remove(path="a.py")]<|tool_call_end|>', None, []),
    (LFM2_CALL[:-5], None, []),  # cut short
])
def test_an_lfm2_answer_writes_its_calls_as_a_python_list(text, content, calls):
    _reads(PythonicCalls(), text, content, calls)


@pytest.mark.parametrize("form, call, opening", [(PythonicCalls(), LFM2_CALL, "<|"),
                                                (XmlCalls(), QWEN35_CALL, "<tool")])
@pytest.mark.parametrize("step", [1, 4, 5])
def test_a_stream_of_lfm2s_or_qwen3_5s_calls_never_sends_part_of_one(form, call, opening, step):
    answer = "Let me <look>. " + call
    stream, sent = CallStream(form), []
    for i in range(0, len(answer), step):
        sent.append(stream.add(answer[i:i + step]))
    rest, calls = stream.end()
    assert "".join(sent) + rest == "Let me <look>. " and opening not in "".join(sent)
    assert [c.name for c in calls] == ["read_file"]


def test_an_lfm2_models_past_calls_go_back_into_its_answers_text(tmp_path):
    """LFM2's templates render an answer's text alone: its calls are written there, before
    it, as the model writes them, and read back as the calls they were."""
    tokenizer = call_tokenizer(tmp_path, LFM2, LFM2_TAGS)
    arguments = {"path": "a.py", "lines": [1, 2], "all": True, "skip": None, "how": {"x": "y"}}
    request = ApiRequest.parse({"messages": ASK + [
        {"role": "assistant", "content": "Reading.", "tool_calls": [{
            "id": "call_1", "type": "function",
            "function": {"name": "read_file", "arguments": json.dumps(arguments)}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "x = 1"}], "tools": TOOLS},
        tokenizer, 4096)
    prompt = tokenizer.decode(request.prompt_ids)
    assert "List of tools: <|tool_list_start|>[" in prompt
    assert ('<|tool_call_start|>[read_file(path="a.py", lines=[1, 2], all=True, skip=None, '
            'how={"x": "y"})]<|tool_call_end|>Reading.<|im_end|>') in prompt
    assert "<|tool_response_start|>x = 1<|tool_response_end|>" in prompt
    [call] = PythonicCalls().split(prompt[prompt.index("<|tool_call_start|>"):])[1]
    assert (call.name, json.loads(call.arguments)) == ("read_file", arguments)


# a tool whose arguments are typed: read back as their schema says, text kept as written
WRITE = {"type": "function", "function": {"name": "write", "parameters": {
    "type": "object", "properties": {
        "path": {"type": "string"}, "count": {"type": "integer"}, "force": {"type": "boolean"},
        "meta": {"type": "object"}, "lines": {"type": "array"}, "note": {"type": ["string", "null"]},
        "any": {}}}}}


@pytest.mark.parametrize("text, content, calls", [
    (QWEN35_CALL, "", [("read_file", {"path": "a.py"})]),
    ("Let me look.\n\n" + QWEN35_CALL + "\n" + QWEN35_CALL.replace("a.py", "b.py"),
     "Let me look.\n\n\n", [("read_file", {"path": "a.py"}), ("read_file", {"path": "b.py"})]),
    # typed by the schema; text as written (its inner newlines and markup kept); compact
    ("<tool_call>\n<function=write>\n<parameter=path>\n 001 <b>\nx\n</parameter>\n"
     "<parameter=count>\n2\n</parameter><parameter=force>true</parameter>\n"
     '<parameter=meta>\n{"a": [1]}\n</parameter>\n<parameter=lines>\n[1, "x"]\n</parameter>\n'
     "<parameter=note>\n12\n</parameter>\n<parameter=any>\n1.5\n</parameter>\n"
     "<parameter=extra>\n3\n</parameter>\n</function>\n</tool_call>", "",
     [("write", {"path": " 001 <b>\nx", "count": 2, "force": True, "meta": {"a": [1]},
                 "lines": [1, "x"], "note": "12", "any": 1.5, "extra": "3"})]),
    ("<tool_call>\n<function=ls>\n</function>\n</tool_call>", "", [("ls", {})]),
    ("<tool_call>\n<function=ls>\nall\n</function>\n</tool_call>", None, []),  # no element
    ("<tool_call>\n<function=ls>\n<parameter=a>\nx\n</function>\n</tool_call>", None, []),
    ('<tool_call>\n{"name": "ls", "arguments": {}}\n</tool_call>', None, []),  # Hermes' form
    (QWEN35_CALL[:-20], None, []),  # cut short
])
def test_a_qwen3_5_answer_writes_its_calls_as_xml(text, content, calls):
    _reads(XmlCalls().for_tools(TOOLS + [WRITE]), text, content, calls)


def test_a_qwen3_5_models_past_calls_go_back_as_it_writes_them(tmp_path):
    """Its template writes an assistant's calls back as XML, each argument an element (arguments
    as an object: template_calls), and they read back as the calls they were."""
    tokenizer = call_tokenizer(tmp_path, QWEN35)
    arguments = {"path": "a.py", "count": 3, "force": False, "meta": {"x": [1]}}
    request = ApiRequest.parse({"messages": ASK + [
        {"role": "assistant", "content": "", "tool_calls": [{
            "id": "call_1", "type": "function",
            "function": {"name": "write", "arguments": json.dumps(arguments)}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "done"}], "tools": TOOLS + [WRITE]},
        tokenizer, 4096)
    assert isinstance(request.tool_form, XmlCalls)
    prompt = tokenizer.decode(request.prompt_ids)
    assert ("<tool_call>\n<function=write>\n<parameter=path>\na.py\n</parameter>\n"
            "<parameter=count>\n3\n</parameter>\n") in prompt
    start = prompt.index("<tool_call>\n<function=write>")
    block = prompt[start:prompt.index("</tool_call>", start) + len("</tool_call>")]
    [call] = request.tool_form.split(block)[1]
    assert (call.name, json.loads(call.arguments)) == ("write", arguments)


def test_a_granite_models_call_comes_back_and_goes_back_in_its_templates_roles(tmp_path):
    """Granite 3's templates have no tool role and leave an assistant's tool_calls out: the
    calls go back as an assistant_tool_call message, the answer as a tool_response one."""
    with scripted_client(call_tokenizer(tmp_path, GRANITE), GRANITE_CALL) as (engine, client):
        whole = client.chat.completions.create(model="x", messages=ASK, tools=TOOLS).choices[0]
        assert whole.finish_reason == "tool_calls" and whole.message.content is None
        [call] = whole.message.tool_calls
        assert (call.function.name, json.loads(call.function.arguments)) == (
            "read_file", {"path": "a.py"})
        engine.answer = "It holds x = 1."
        went_on = client.chat.completions.create(model="x", tools=TOOLS, messages=[
            *ASK, whole.message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": "x = 1"}]).choices[0]
    assert went_on.message.content == "It holds x = 1."
    assert engine.prompts[-1].endswith(
        '<|start_of_role|>assistant<|end_of_role|><|tool_call|>[{"name": "read_file", '
        '"arguments": {"path": "a.py"}}]<|end_of_text|>\n<|start_of_role|>tool_response'
        '<|end_of_role|>x = 1<|end_of_text|>\n<|start_of_role|>assistant<|end_of_role|>')


def test_a_call_id_the_model_wrote_is_the_calls():
    _, [call] = NamedCalls().split('[TOOL_CALLS]ls[CALL_ID]a1b2c3d4e[ARGS]{"dir": "."}')
    assert (call.name, call.id, json.loads(call.arguments)) == ("ls", "a1b2c3d4e", {"dir": "."})


@pytest.mark.parametrize("template, says", [
    (LLAMA, "m, tools offered, calls read as a JSON object for an answer"),
    (QWEN3_TOOLS, "m, tools offered, calls read as JSON in <tool_call> tags; reasoning apart"),
    ("{{ messages[0].content }}", "m, no tools (its chat template asks for tool calls in no")])
def test_a_server_says_what_it_offers_with_its_model(tmp_path, template, says):
    server = ApiServer(lambda: None, "127.0.0.1", 0)
    try:
        said = server.describe(types.SimpleNamespace(loaded=types.SimpleNamespace(
            name="m", tokenizer=call_tokenizer(tmp_path, template), sampling_defaults={})))
    finally:
        server.close()
    assert said.startswith(server.url + ": " + says)


def test_a_server_says_the_sampling_a_request_gets_by_default(tmp_path):
    server = ApiServer(lambda: None, "127.0.0.1", 0)
    try:
        said = server.describe(types.SimpleNamespace(loaded=types.SimpleNamespace(
            name="m", tokenizer=call_tokenizer(tmp_path, LLAMA),
            sampling_defaults={"temperature": 0.7, "top_k": 20})))
    finally:
        server.close()
    assert said.endswith("; by default temperature 0.7, top_k 20")


def test_a_template_asks_for_the_form_its_marker_names():
    assert isinstance(form_of(MISTRAL), ListedCalls) and not isinstance(form_of(MISTRAL),
                                                                           NamedCalls)
    assert isinstance(form_of(DEVSTRAL), NamedCalls)  # its template holds [TOOL_CALLS] too
    assert isinstance(form_of(GRANITE), GraniteCalls) and isinstance(form_of(LFM2), PythonicCalls)
    assert isinstance(form_of(HERMES), TaggedCalls) and isinstance(form_of(LLAMA), JsonCalls)
    assert isinstance(form_of(QWEN35), XmlCalls)  # its template holds <tool_call> too
    assert form_of(None) is None and form_of("{{ messages[0].content }}") is None


def test_the_tools_go_into_the_template_and_past_calls_and_results_come_back_in_it(hermes):
    request = ApiRequest.parse({"messages": ASK, "tools": TOOLS}, hermes, 4096)
    prompt = hermes.decode(request.prompt_ids)
    assert isinstance(request.tool_form, TaggedCalls) and '"name": "read_file"' in prompt
    assert prompt.startswith("<|im_start|>system\nTools:")
    went_on = ApiRequest.parse({"tools": TOOLS, "messages": [*ASK, {
        "role": "assistant", "content": None, "tool_calls": [{
            "id": "call_1", "type": "function",
            "function": {"name": "read_file", "arguments": '{"path": "a.py"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "x = 1"}]}, hermes, 4096)
    # arguments given as JSON text are written as the object, not quoted a second time
    assert hermes.decode(went_on.prompt_ids).endswith(
        CALL_TEXT + "<|im_end|>\n<|im_start|>user\n<tool_response>\nx = 1\n</tool_response>"
        "<|im_end|>\n<|im_start|>assistant\n")
    not_offered = ApiRequest.parse({"messages": ASK, "tools": TOOLS, "tool_choice": "none"},
                                   hermes, 4096)
    assert not_offered.tool_form is None
    assert "read_file" not in hermes.decode(not_offered.prompt_ids)


def test_a_named_tool_use_template_renders_the_requests_with_tools(tmp_path):
    config = {"chat_template": [{"name": "default", "template": "{{ messages[0].content }}"},
                                {"name": "tool_use", "template": HERMES}]}
    tokenizer = Tokenizer.from_file(make_tokenizer_json(tmp_path / "tokenizer.json"), config)
    plain = ApiRequest.parse({"messages": ASK}, tokenizer, 4096)
    offered = ApiRequest.parse({"messages": ASK, "tools": TOOLS}, tokenizer, 4096)
    assert tokenizer.decode(plain.prompt_ids) == "What is in a.py?"
    assert "<tools>" in tokenizer.decode(offered.prompt_ids)


@pytest.mark.parametrize("body,says", [
    ({"tools": TOOLS}, "tools: not supported by this model: its chat template asks for tool "
                       "calls in no form this server reads"),
    ({"tools": [{"type": "function"}]}, "tools[0]: must be {type: function"),
    ({"tools": [{"type": "function", "function": {"name": ""}}]},
     "tools[0].function.name: must be non-empty text"),
    ({"tools": "read_file"}, "tools: must be a non-empty list"),
    ({"tools": TOOLS, "tool_choice": "always"},
     "tool_choice: 'auto', 'none', 'required' or {type: function, function: {name}}"),
    ({"tool_choice": "required"}, "tool_choice: asks for a call, and no tools are offered"),
    ({"messages": [*ASK, {"role": "assistant", "tool_calls": [{"function": {"name": "f"}}]},
                   *ASK], "tool_choice": "none"}, None),  # arguments default to ""
    ({"messages": [*ASK, {"role": "assistant", "tool_calls": [{"function": {"name": 3}}]}]},
     "messages[1].tool_calls[0]: must be {id, type: function"),
    ({"functions": [{"name": "f"}]}, "functions: not supported"),
])
def test_a_bad_tools_field_is_named(body, says):
    parse = lambda: ApiRequest.parse({"messages": ASK, **body}, ByteTokenizer(), 4096)  # noqa
    if says is None:
        parse()
        return
    with pytest.raises(RequestError) as caught:
        parse()
    assert says in str(caught.value)


def test_arguments_that_are_not_a_json_object_reach_the_template_as_given():
    calls = template_calls([{"function": {"name": "f", "arguments": "not json"}},
                            {"function": {"name": "g", "arguments": '{"a": [1]}'}}], "calls")
    assert [c["function"]["arguments"] for c in calls] == ["not json", {"a": [1]}]


@pytest.fixture
def scripted(hermes):
    """(engine, OpenAI's client), the engine answering with text and a call."""
    with scripted_client(hermes, "Let me look." + CALL_TEXT) as pair:
        yield pair


def test_openais_client_gets_the_calls_whole_and_streamed(scripted):
    engine, client = scripted
    reply = client.chat.completions.create(model="x", messages=ASK, tools=TOOLS)
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content == "Let me look."
    [call] = choice.message.tool_calls
    assert call.function.name == "read_file" and json.loads(call.function.arguments) == {
        "path": "a.py"}
    assert '"name": "read_file"' in engine.prompts[-1]

    content, calls, reasons = "", {}, []
    for chunk in client.chat.completions.create(model="x", messages=ASK, tools=TOOLS,
                                                stream=True):
        delta = chunk.choices[0].delta
        content += delta.content or ""
        for piece in delta.tool_calls or []:
            calls.setdefault(piece.index, []).append(piece)
        reasons.append(chunk.choices[0].finish_reason)
    assert content == "Let me look." and reasons[-1] == "tool_calls"
    [[piece]] = calls.values()
    assert piece.id.startswith("call_") and piece.function.name == "read_file"
    assert json.loads(piece.function.arguments) == {"path": "a.py"}


def test_without_tools_the_same_answer_is_text_and_one_call_is_kept_if_asked(scripted, hermes):
    engine, client = scripted
    plain = client.chat.completions.create(model="x", messages=ASK).choices[0]
    # without tools the tags are special tokens the answer's text leaves out, as any answer's
    assert plain.finish_reason == "stop" and plain.message.tool_calls is None
    assert plain.message.content == hermes.decode(hermes.encode(engine.answer), skip_special=True)
    engine.answer = CALL_TEXT + CALL_TEXT.replace("a.py", "b.py")
    both = client.chat.completions.create(model="x", messages=ASK, tools=TOOLS).choices[0]
    one = client.chat.completions.create(model="x", messages=ASK, tools=TOOLS,
                                         parallel_tool_calls=False).choices[0]
    assert [json.loads(c.function.arguments)["path"] for c in both.message.tool_calls] == [
        "a.py", "b.py"]
    assert both.message.content is None
    assert [json.loads(c.function.arguments)["path"] for c in one.message.tool_calls] == ["a.py"]


def test_a_folders_tool_use_template_file_renders_conversations_with_tools(qwen2, tmp_path):
    """transformers saves a tokenizer's named templates in additional_chat_templates/."""
    folder = tmp_path / "named"
    shutil.copytree(qwen2, folder)
    (folder / "chat_template.jinja").write_text("{{ messages[0].content }}")
    (folder / "additional_chat_templates").mkdir()
    (folder / "additional_chat_templates" / "tool_use.jinja").write_text(HERMES)
    tokenizer = load_model(str(folder), dtype="fp32", device="cpu").tokenizer
    assert tokenizer.chat_messages(ASK) == "What is in a.py?"
    assert "<tools>" in tokenizer.chat_messages(ASK, TOOLS)
    (folder / "additional_chat_templates" / "tool_use.jinja").write_text("{% if %}")
    with pytest.raises(ModelLoadError, match="tool_use.jinja"):
        load_model(str(folder), dtype="fp32", device="cpu")


def test_a_real_model_is_offered_the_tools_and_its_agent_goes_on_after_a_call(qwen2,
                                                                              calibration):
    """The folder above served by the engine: the tools reach the prompt, and a conversation
    that goes on with a call and its result keeps its agent's KV."""
    import openai

    loaded = load_model(str(qwen2), dtype="fp32", device="cpu")
    with serving(loaded, calibration, max_context=1024, client_lanes=2) as (_, server):
        client = openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0)
        first = client.chat.completions.create(model="x", messages=ASK, tools=TOOLS,
                                               temperature=0, max_tokens=6)
        prompt = loaded.tokenizer.encode(loaded.tokenizer.chat_messages(ASK, TOOLS))
        assert first.usage.prompt_tokens == len(prompt)
        assert first.choices[0].finish_reason in ("stop", "length", "tool_calls")
        went_on = client.chat.completions.create(model="x", tools=TOOLS, temperature=0,
                                                 max_tokens=6, messages=[*ASK, {
            "role": "assistant", "content": None, "tool_calls": [{
                "id": "call_1", "type": "function",
                "function": {"name": "read_file", "arguments": '{"path": "a.py"}'}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "x = 1"}])
        assert went_on.usage.prompt_tokens_details.cached_tokens >= len(prompt)


def test_a_llama_models_call_comes_back_whole_and_streamed(tmp_path):
    with scripted_client(call_tokenizer(tmp_path, LLAMA),
                         "<|python_tag|>" + LLAMA_CALL) as (engine, client):
        whole = client.chat.completions.create(model="x", messages=ASK, tools=TOOLS).choices[0]
        chunks = list(client.chat.completions.create(model="x", messages=ASK, tools=TOOLS,
                                                     stream=True))
    assert whole.finish_reason == "tool_calls" and whole.message.content is None
    assert [(c.function.name, json.loads(c.function.arguments))
            for c in whole.message.tool_calls] == [("read_file", {"path": "a.py"})]
    assert "Respond in the format" in engine.prompts[-1]
    assert not any(chunk.choices and chunk.choices[0].delta.content for chunk in chunks)
    [piece] = [call for chunk in chunks if chunk.choices
               for call in chunk.choices[0].delta.tool_calls or []]
    assert piece.function.name == "read_file" and chunks[-1].choices[0].finish_reason == \
        "tool_calls"


def test_a_mistral_models_call_goes_back_to_its_template_with_the_id_it_was_given(tmp_path):
    """Mistral's template refuses a call id that is not nine letters and digits."""
    with scripted_client(call_tokenizer(tmp_path, MISTRAL), MISTRAL_CALL) as (engine, client):
        call = client.chat.completions.create(model="x", messages=ASK,
                                              tools=TOOLS).choices[0].message.tool_calls[0]
        engine.answer = "It holds x = 1."
        went_on = client.chat.completions.create(model="x", tools=TOOLS, messages=[
            *ASK, {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
            {"role": "tool", "tool_call_id": call.id, "content": "x = 1"}]).choices[0]
    assert went_on.message.content == "It holds x = 1."
    assert engine.prompts[-1].endswith('[TOOL_CALLS] [{"arguments": {"path": "a.py"}, "name": '
                                       '"read_file"}]</s>[TOOL_RESULTS] x = 1[/TOOL_RESULTS]')


def test_a_newer_mistral_models_calls_come_back_whole_and_streamed_and_go_back_to_its_template(
        tmp_path):
    answer = "Let me look.\n" + DEVSTRAL_CALL
    with scripted_client(call_tokenizer(tmp_path, DEVSTRAL), answer) as (engine, client):
        whole = client.chat.completions.create(model="x", messages=ASK, tools=TOOLS).choices[0]
        chunks = list(client.chat.completions.create(model="x", messages=ASK, tools=TOOLS,
                                                     stream=True))
        engine.answer = "It holds x = 1."
        went_on = client.chat.completions.create(model="x", tools=TOOLS, messages=[
            *ASK, whole.message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": whole.message.tool_calls[0].id,
             "content": "x = 1"}]).choices[0]
    assert whole.finish_reason == "tool_calls" and whole.message.content == "Let me look."
    assert [(c.function.name, json.loads(c.function.arguments))
            for c in whole.message.tool_calls] == [("read_file", {"path": "a.py"})]
    streamed = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    assert streamed == "Let me look.\n" and "[" not in streamed
    assert went_on.message.content == "It holds x = 1."
    assert engine.prompts[-1].endswith('Let me look.[TOOL_CALLS]read_file[ARGS]{"path": '
                                       '"a.py"}</s>[TOOL_RESULTS]x = 1[/TOOL_RESULTS]')
