"""For the tests that talk to the API over HTTP: an engine stepping on a thread of its own (wall
clock) behind a server; an engine whose answers are given, since the tiny random models never
write a tool call; tokenizers with call tags, and a template and tools to offer; a random model
that reasons as briefly as it can."""
import contextlib
import dataclasses
import threading
import types

import tokenizers
import torch
from tokenizers import AddedToken

from engine.controls import Controls
from engine.engine import Engine
from engine.loading import load_model
from engine.serve.http_api import ApiServer
from engine.swarm.config import SwarmConfig
from engine.tokenizer import Tokenizer
from tests.engine.loading.conftest import make_tokenizer_json

# Qwen2.5's template in brief: the tools in the system turn, an assistant's calls written back
# in <tool_call> tags (arguments with tojson), tool results in the user's turn.
HERMES = (
    "{% if tools %}<|im_start|>system\nTools:\n<tools>{% for tool in tools %}\n"
    "{{ tool | tojson }}{% endfor %}\n</tools>\nCall one as <tool_call>\n"
    '{"name": <name>, "arguments": <object>}\n</tool_call><|im_end|>\n{% endif %}'
    "{% for m in messages %}"
    "{% if m.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ m.content }}\n"
    "</tool_response><|im_end|>\n"
    "{% else %}<|im_start|>{{ m.role }}\n{{ m.content }}"
    "{% for call in m.tool_calls or [] %}<tool_call>\n"
    '{"name": "{{ call.function.name }}", "arguments": {{ call.function.arguments | tojson }}}'
    "\n</tool_call>{% endfor %}<|im_end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
# Qwen3's template in brief: it strips an answer's reasoning when the answer comes back
QWEN3 = HERMES.replace("{{ m.content }}", "{{ m.content.split('</think>')[-1] }}")
TOOLS = [{"type": "function", "function": {
    "name": "read_file", "description": "Read a file",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}]
ASK = [{"role": "user", "content": "What is in a.py?"}]
CALL_TEXT = '<tool_call>\n{"name": "read_file", "arguments": {"path": "a.py"}}\n</tool_call>'
# Llama 3.1-3.3's ask, in brief: a JSON object for an answer
LLAMA = ("{% if tools %}<|im_start|>system\nRespond in the format {\"name\": function name, "
         "\"parameters\": dictionary of argument name and its value}.{% for tool in tools %}\n"
         "{{ tool | tojson }}{% endfor %}<|im_end|>\n{% endif %}{% for m in messages %}"
         "<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
         "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
LLAMA_CALL = '{"name": "read_file", "parameters": {"path": "a.py"}}'
# Mistral v0.3's, in brief: [TOOL_CALLS] and a list; past calls' ids must be nine characters
MISTRAL = ("{% if tools %}[AVAILABLE_TOOLS] {{ tools | tojson }}[/AVAILABLE_TOOLS]{% endif %}"
           "{% for m in messages %}{% if m.tool_calls %}[TOOL_CALLS] ["
           "{% for call in m.tool_calls %}{% if call.id | length != 9 %}"
           "{{ raise_exception('Tool call IDs should be alphanumeric strings with length 9!') }}"
           "{% endif %}{{ call.function | tojson }}{% endfor %}]</s>"
           "{% elif m.role == 'tool' %}[TOOL_RESULTS] {{ m.content }}[/TOOL_RESULTS]"
           "{% else %}[INST] {{ m.content }}[/INST]{% endif %}{% endfor %}")
MISTRAL_CALL = '[TOOL_CALLS] [{"name": "read_file", "arguments": {"path": "a.py"}}]'
# Mistral's since v11 (Mistral Small 3.2, Devstral), in brief: [TOOL_CALLS]name[ARGS]{...} a call
DEVSTRAL = ("[SYSTEM_PROMPT]x[/SYSTEM_PROMPT]{% if tools %}[AVAILABLE_TOOLS]{{ tools | tojson }}"
            "[/AVAILABLE_TOOLS]{% endif %}{% for m in messages %}{% if m.role == 'user' %}"
            "[INST]{{ m.content }}[/INST]{% elif m.role == 'tool' %}[TOOL_RESULTS]{{ m.content }}"
            "[/TOOL_RESULTS]{% else %}{{ m.content or '' }}{% for call in m.tool_calls or [] %}"
            "{% set arguments = call.function.arguments %}{% if arguments is not string %}"
            "{% set arguments = arguments | tojson %}{% endif %}"
            "{{ '[TOOL_CALLS]' + call.function.name + '[ARGS]' + arguments }}{% endfor %}</s>"
            "{% endif %}{% endfor %}")
DEVSTRAL_CALL = '[TOOL_CALLS]read_file[ARGS]{"path": "a.py"}'
# LFM2's, in brief: the tools listed in the system turn, a call a Python list in tags of its own
LFM2 = ("{% if tools %}<|im_start|>system\nList of tools: <|tool_list_start|>["
        "{% for tool in tools %}{{ tool | tojson }}{% if not loop.last %}, {% endif %}{% endfor %}"
        "]<|tool_list_end|><|im_end|>\n{% endif %}{% for m in messages %}<|im_start|>{{ m.role }}"
        "\n{% if m.role == 'tool' %}<|tool_response_start|>{{ m.content }}<|tool_response_end|>"
        "{% else %}{{ m.content }}{% endif %}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
LFM2_TAGS = ("<|tool_call_start|>", "<|tool_call_end|>")
LFM2_CALL = '<|tool_call_start|>[read_file(path="a.py")]<|tool_call_end|>'
# Qwen3.5's, in brief: the tools and the form of a call in the system turn, an assistant's calls
# written back as XML (a value as text, or as JSON where it is not a string), tool results in the
# user's turn
QWEN35 = ("{% if tools %}<|im_start|>system\n<tools>{% for tool in tools %}\n{{ tool | tojson }}"
          "{% endfor %}\n</tools>\nCall one as <tool_call>\n<function=NAME>\n<parameter=KEY>\n"
          "VALUE\n</parameter>\n</function>\n</tool_call><|im_end|>\n{% endif %}"
          "{% for m in messages %}{% if m.role == 'tool' %}<|im_start|>user\n<tool_response>\n"
          "{{ m.content }}\n</tool_response><|im_end|>\n{% else %}<|im_start|>{{ m.role }}\n"
          "{{ m.content or '' }}{% for call in m.tool_calls or [] %}<tool_call>\n<function="
          "{{ call.function.name }}>\n{% for key, value in call.function.arguments | items %}"
          "<parameter={{ key }}>\n{{ value if value is string else value | tojson }}\n"
          "</parameter>\n{% endfor %}</function>\n</tool_call>{% endfor %}<|im_end|>\n"
          "{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
          "{% endif %}")
QWEN35_CALL = "<tool_call>\n<function=read_file>\n<parameter=path>\na.py\n</parameter>\n" \
    "</function>\n</tool_call>"
# Granite 3's, in brief: past calls and tool answers in roles of its own, no 'tool' role
GRANITE = ("{% if tools %}<|start_of_role|>available_tools<|end_of_role|>{% for tool in tools %}"
           "\n{{ tool | tojson }}{% endfor %}<|end_of_text|>\n{% endif %}"
           "{% for message in messages %}{% if message['role'] == 'assistant_tool_call' %}"
           "{{ '<|start_of_role|>assistant<|end_of_role|><|tool_call|>' + message['content'] + "
           "'<|end_of_text|>\n' }}{% elif message['role'] in ('system', 'user', 'assistant', "
           "'tool_response') %}{{ '<|start_of_role|>' + message['role'] + '<|end_of_role|>' + "
           "message['content'] + '<|end_of_text|>\n' }}{% endif %}{% endfor %}"
           "{{ '<|start_of_role|>assistant<|end_of_role|>' }}")
GRANITE_CALL = '<|tool_call|>[{"name": "read_file", "arguments": {"path": "a.py"}}]'


@contextlib.contextmanager
def serving(loaded, calibration, max_context: int, client_lanes: int):
    """(engine, server) until the block ends."""
    engine = Engine(loaded, SwarmConfig(max_context=max_context, client_lanes=client_lanes),
                    Controls(swarm_size=0), calibration=calibration)
    stop = threading.Event()
    stepping = threading.Thread(target=engine.run, kwargs={"stop": stop})
    stepping.start()
    server = ApiServer(lambda: engine, "127.0.0.1", 0).start()
    try:
        yield engine, server
    finally:
        server.close()
        stop.set()
        stepping.join()
        engine.close()


def call_tokenizer(folder, template: str, tags: tuple[str, ...] = ()) -> Tokenizer:
    """A byte-level BPE tokenizer with `template`, the tags of calls and reasoning special tokens
    (as in Hermes' and Llama's models: an answer decoded without specials would lose them), and
    `tags` after them."""
    inner = tokenizers.Tokenizer.from_file(str(make_tokenizer_json(folder / "tokenizer.json")))
    inner.add_special_tokens([AddedToken(tag, special=True, normalized=False)
                              for tag in ("<tool_call>", "</tool_call>", "<|python_tag|>",
                                          "<think>", "</think>", "<|tool_call|>", *tags)])
    return Tokenizer(inner, chat_template=template, eos_tokens=("<|im_end|>",))


def thinker(folder, template: str):
    """The random model in `folder` (one with room in its vocabulary for call_tokenizer's tags)
    with call_tokenizer and `template`, preferring <think> most and then </think>: where a
    grammar lets it, it opens its reasoning and closes it at once (a random model would never
    close it), and its answer is what the masks make of it."""
    loaded = load_model(str(folder), dtype="fp32", device="cpu")
    loaded = dataclasses.replace(loaded, tokenizer=call_tokenizer(folder, template))
    bias = torch.zeros(loaded.config.vocab_size)
    [opening], [closing] = (loaded.tokenizer.encode(tag) for tag in ("<think>", "</think>"))
    bias[opening], bias[closing] = 200.0, 100.0
    forward = loaded.model.forward
    loaded.model.forward = lambda *args, **kwargs: forward(*args, **kwargs) + bias
    return loaded


class ScriptedEngine:
    """The engine's side of a request, answered with `answer`: the tiny random models never
    write a tool call, so the server's reading of one is tested on text given here."""

    def __init__(self, tokenizer: Tokenizer, answer: str) -> None:
        self.loaded = types.SimpleNamespace(tokenizer=tokenizer, name="scripted",
                                            sampling_defaults={})
        self.requests = []  # each choice's ApiRequest
        self.max_context = 4096
        self.answer = answer
        self.prompts: list[str] = []

    def submit(self, completion) -> None:
        tokenizer = self.loaded.tokenizer
        self.requests.append(completion.request)
        self.prompts.append(tokenizer.decode(completion.request.prompt_ids))
        ids = tokenizer.encode(self.answer) + list(tokenizer.eos_ids)
        for at in range(0, len(ids), 3):
            completion.add(ids[at:at + 3])
        completion.finish("stop")


@contextlib.contextmanager
def scripted_client(tokenizer: Tokenizer, answer: str):
    """(engine, OpenAI's client) for a ScriptedEngine behind a server, until the block ends."""
    import openai

    engine = ScriptedEngine(tokenizer, answer)
    server = ApiServer(lambda: engine, "127.0.0.1", 0).start()
    try:
        yield engine, openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0)
    finally:
        server.close()
