"""A completion request as OpenAI's API spells it (chat: messages; text: a prompt), checked field
by field: what a client sends becomes the prompt's token ids and the lane's sampling, or a
RequestError that says which field is wrong and why (the server answers it with HTTP 400)."""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace

from engine.chat_template import ChatTemplateError
from engine.errors import SwarmscopeError
from engine.output_format import OutputFormat, json_rule, lark_tag
from engine.sampling import SamplingParams
from engine.sequence import Prediction
from engine.serve.call_form import CallForm
from engine.serve.call_forms import form_of
from engine.serve.infill import NoInfill, infill_prompt
from engine.serve.tool_calls import offered_tools, template_calls
from engine.thinking import answer_format, json_answer, opened, reasons

ROLES = ("system", "user", "assistant", "tool", "developer")
MAX_STOPS = 4  # stop strings a request may give, as OpenAI's API allows
# Fields that ask for what this server does not do; refused rather than ignored, so that a
# client is not answered as if its format had been honoured. (`functions` and `function_call`
# are OpenAI's old spelling of tools.)
UNSUPPORTED = ("functions", "function_call", "audio", "best_of")
FORMATS = ("text", "json_object", "json_schema")  # response_format's types
MAX_CHOICES = 64  # the most answers one request may ask for: its prompts times n
LOGIT_BIAS = 100  # the most a token's logit may be moved either way, as OpenAI's API allows
TOP_LOGPROBS = {True: 20, False: 5}  # the most alternatives a token may come with: chat, text
TOOL_CHOICES = ("auto", "none", "required")  # or {"type": "function", "function": {"name"}}
# A message's fields, beside role and content, that reach the template (for those that read them)
PASSED_ON = {"tool": ("tool_call_id", "name"), "assistant": ("reasoning_content",)}
# The template's variables the server sets; chat_template_kwargs gives the others
RENDERED = ("messages", "tools", "add_generation_prompt", "bos_token", "eos_token")


class RequestError(SwarmscopeError):
    """A request the server cannot serve; the message names the field."""


@dataclass(slots=True)
class ApiRequest:
    chat: bool                # /v1/chat/completions; else /v1/completions
    prompt_ids: list[int]
    max_tokens: int           # the most tokens the answer may have (0: none, with echo)
    sampling: SamplingParams
    stop: tuple[str, ...]     # the answer ends before the first of these
    stream: bool
    include_usage: bool       # a streamed answer ends with a usage chunk
    tool_form: CallForm | None = None  # how the model writes calls to the tools offered
                                       # (call_forms.py); None: no tools offered
    parallel_tool_calls: bool = True  # else an answer's first call is its only one
    thinking: bool = False            # a thinking model's chat whose answer may reason first:
                                      # its reasoning goes apart
    inside_reasoning: bool = False    # the prompt opened the reasoning (reasoning.py)
    output_format: OutputFormat | None = None  # the JSON response_format holds the answer to
    prediction: Prediction | None = None  # the answer as the client predicts it
    logprobs: int | None = None  # each token's log-probability is wanted, with this many of the
                                 # likeliest alternatives (None: not wanted)
    n: int = 1                   # answers asked for the prompt (choices), this one among them
    echo: str | None = None      # a text completion's prompt, which its text starts with (echo)

    @property
    def prompt_logprobs(self) -> bool:
        """Whether the prompt's tokens come with their log-probabilities (echo and logprobs):
        then its rows are all fed, none taken from KV held already."""
        return self.echo is not None and self.logprobs is not None

    @classmethod
    def parse(cls, body, tokenizer, max_context: int, chat: bool = True,
              field: str | None = None) -> "ApiRequest":
        """`body`: the decoded JSON; `max_context`: the most tokens a lane may hold; `chat`:
        `messages` in the chat template, else a plain `prompt` (text as transformers'
        tokenizer(text) encodes it, BOS and all, or token ids) named `field` in errors."""
        if not isinstance(body, dict):
            raise RequestError("the request body must be a JSON object")
        asked = [name for name in UNSUPPORTED if body.get(name) not in (None, False, [], {})]
        if asked:
            raise RequestError(f"{', '.join(asked)}: not supported")
        field = field or ("messages" if chat else "prompt")
        if chat and body.get("suffix") is not None:
            raise RequestError("suffix: only /v1/completions fills a hole before a suffix")
        tools, tool_form, forced = _tools(body, tokenizer) if chat else (None, None, None)
        prompt = _chat_prompt(body, tokenizer, tools) if chat else None
        prompt_ids = (tokenizer.encode(prompt) if chat else
                      _plain_prompt(_infilled(body, tokenizer, field), tokenizer, field))
        room = max_context - len(prompt_ids)
        if room < 1:
            raise RequestError(f"{field}: the prompt is {len(prompt_ids)} tokens, which leaves "
                               f"no room for an answer in the {max_context} tokens a lane holds")
        echo = _echo(body, chat, prompt_ids, tokenizer)
        # 0 with echo: the prompt alone, scored (its log-probabilities), as OpenAI's legacy API
        max_tokens = _number(body, ("max_completion_tokens", "max_tokens"), int,
                             0 if echo is not None else 1, math.inf)
        for name in ("top_p", "repetition_penalty"):
            if body.get(name) == 0:
                raise RequestError(f"{name}: must be above 0, got 0")
        sampling = SamplingParams(
            temperature=_number(body, ("temperature",), float, 0.0, 2.0, default=1.0),
            top_p=_number(body, ("top_p",), float, 0.0, 1.0, default=1.0),
            top_k=_number(body, ("top_k",), int, 0, math.inf, default=0),
            seed=_number(body, ("seed",), int, -math.inf, math.inf,
                         default=random.randrange(2 ** 31)) % 2 ** 31,
            presence_penalty=_number(body, ("presence_penalty",), float, -2.0, 2.0, default=0.0),
            frequency_penalty=_number(body, ("frequency_penalty",), float, -2.0, 2.0,
                                      default=0.0),
            repetition_penalty=_number(body, ("repetition_penalty",), float, 0.0, math.inf,
                                       default=1.0),
            logit_bias=_logit_bias(body.get("logit_bias"), tokenizer.vocab_size))
        stream_options = body.get("stream_options") or {}
        if not isinstance(stream_options, dict):
            raise RequestError("stream_options: must be an object")
        thinking = chat and reasons(tokenizer, prompt, bool(tools))
        parallel = _flag(body, "parallel_tool_calls", default=True)
        return cls(chat=chat, prompt_ids=prompt_ids,
                   max_tokens=room if max_tokens is None else min(max_tokens, room),
                   sampling=sampling, stop=_stops(body.get("stop")),
                   stream=_flag(body, "stream"),
                   include_usage=_flag(stream_options, "include_usage"), tool_form=tool_form,
                   parallel_tool_calls=parallel,
                   thinking=thinking, inside_reasoning=chat and opened(prompt),
                   output_format=_output_format(_answer_schema(body.get("response_format")),
                                                tokenizer, tools, tool_form, forced, parallel,
                                                prompt if chat else None),
                   prediction=_prediction(body.get("prediction"), tokenizer),
                   logprobs=_logprobs(body, chat),
                   n=_number(body, ("n",), int, 1, MAX_CHOICES, default=1), echo=echo)

    def choice(self, index: int) -> "ApiRequest":
        """The request for the prompt's `index`-th answer: its own seed (the ones after the
        request's, so that sampled answers differ), its own place in the grammar and its own
        count of predicted drafts."""
        return replace(
            self, sampling=replace(self.sampling, seed=(self.sampling.seed + index) % 2 ** 31),
            output_format=self.output_format and self.output_format.copy(),
            prediction=self.prediction and Prediction(self.prediction.tokens))


def parse_choices(body, tokenizer, max_context: int, chat: bool = True,
                  defaults: dict | None = None) -> list[ApiRequest]:
    """The answers a request asks for, in the order of its choices (as OpenAI's API numbers
    them): for each prompt (a text completion's `prompt` may be a list of them), its `n`.
    `defaults`: the model's sampling fields, for those the request leaves out."""
    if isinstance(body, dict) and defaults:
        body = {**body, **{name: value for name, value in defaults.items()
                           if body.get(name) is None}}
    prompts = body.get("prompt") if not chat and isinstance(body, dict) else None
    if isinstance(prompts, list) and prompts and all(isinstance(p, (str, list)) for p in prompts):
        requests = [ApiRequest.parse({**body, "prompt": prompt}, tokenizer, max_context, False,
                                     f"prompt[{i}]") for i, prompt in enumerate(prompts)]
    else:  # one prompt: text, token ids, or a chat's messages
        requests = [ApiRequest.parse(body, tokenizer, max_context, chat)]
    if len(requests) * requests[0].n > MAX_CHOICES:
        raise RequestError(f"n: {len(requests)} prompts times n={requests[0].n} asks for more "
                           f"than the {MAX_CHOICES} answers a request may have")
    return [request.choice(i) for request in requests for i in range(request.n)]


def tokenized(body, tokenizer) -> list[int]:
    """A /tokenize request's token ids (vLLM's form): `messages` in the chat template, as a chat
    completion's prompt is, or `prompt` text with the special tokens tokenizer(text) adds
    unless `add_special_tokens` is false."""
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    if "messages" in body:
        return tokenizer.encode(_chat_prompt(body, tokenizer, None))
    text = _text(body.get("prompt"), "prompt")
    return (tokenizer.encode_plain if _flag(body, "add_special_tokens", default=True)
            else tokenizer.encode)(text)


def _answer_schema(asked) -> dict | None:
    """The JSON schema `response_format` asks the answer to keep to (None: text)."""
    if asked is None:
        return None
    kind = asked.get("type") if isinstance(asked, dict) else None
    if kind not in FORMATS:
        raise RequestError(f"response_format: an object whose type is {', '.join(FORMATS)}; "
                           f"got {asked!r}")
    if kind != "json_schema":
        return None if kind == "text" else {"type": "object"}
    given = asked.get("json_schema")
    schema = given.get("schema", {"type": "object"}) if isinstance(given, dict) else None
    if not isinstance(schema, dict):
        raise RequestError("response_format: json_schema must be an object whose schema is a "
                           "JSON Schema object")
    return schema


def _output_format(schema: dict | None, tokenizer, tools: list[dict] | None,
                   form: CallForm | None, forced: list[dict] | None, parallel: bool,
                   prompt: str | None) -> OutputFormat | None:
    """What the answer to `prompt` (a chat's; None: a plain text's) is held to, compiled here, on
    the HTTP thread (a large schema's grammar takes a while, and the engine steps on): calls of
    the `forced` tools, or where tools are offered and a schema asked for, a call or the schema's
    JSON, or the JSON alone; after the reasoning where a thinking model reasons first."""
    if forced is None and schema is None:
        return None
    field = "tool_choice" if forced is not None else "response_format"
    try:
        if tools is None:
            return json_answer(schema, tokenizer, prompt)
        calls = form.grammar(forced or tools, parallel, lambda text: lark_tag(tokenizer, text))
        answer = ("answer: calls" if forced is not None
                  else f"answer: json | calls\njson: {json_rule(schema)}")
        return answer_format(f"{answer}\n{calls}", tokenizer, prompt, tools=True)
    except ValueError as exc:
        raise RequestError(f"{field}: the answer cannot be held to it: {exc}") from None


def _tools(body: dict, tokenizer) -> tuple[list[dict] | None, CallForm | None,
                                           list[dict] | None]:
    """The tools offered to the model, the form it writes calls in, and the tools it must call
    one of (tool_choice "required" or a named one; None: the model chooses). No tools without
    `tools`, or with tool_choice "none"."""
    choice = body.get("tool_choice")
    named = choice.get("function", {}).get("name") if isinstance(choice, dict) and \
        choice.get("type") == "function" and isinstance(choice.get("function"), dict) else None
    if choice is not None and choice not in TOOL_CHOICES and not isinstance(named, str):
        raise RequestError(f"tool_choice: {', '.join(map(repr, TOOL_CHOICES))} or "
                           f"{{type: function, function: {{name}}}}, got {choice!r}")
    if body.get("tools") in (None, []) or choice == "none":
        if named is not None or choice == "required":
            raise RequestError("tool_choice: asks for a call, and no tools are offered")
        return None, None, None
    try:
        tools = offered_tools(body["tools"])
    except ValueError as exc:
        raise RequestError(str(exc)) from None
    forced = tools if choice == "required" else None
    if named is not None:
        forced = [tool for tool in tools if tool["function"]["name"] == named]
        if not forced:
            raise RequestError(f"tool_choice: names {named!r}, which is not among the tools")
    form = form_of(tokenizer.template_for(tools=True))
    if form is None:
        source = tokenizer.template_source
        raise RequestError(f"tools: not supported by this model: its chat template"
                           f"{f' ({source})' if source else ''} asks for tool calls in no form "
                           "this server reads (JSON in <tool_call> tags, as Qwen2.5, Qwen3 and "
                           "Hermes write them; <function=...> in <tool_call> tags, as Qwen3.5; "
                           "a JSON object for an answer, as Llama 3.1-3.3; [TOOL_CALLS] and a "
                           "list, as Mistral; [TOOL_CALLS]name[ARGS], as Devstral; a Python "
                           "list, as LFM2)")
    return tools, form.for_tools(tools), forced


def _chat_prompt(body: dict, tokenizer, tools: list[dict] | None) -> str:
    """The conversation in the model's chat template, with the template variables the request
    gives (`chat_template_kwargs`, as vLLM and SGLang take them: enable_thinking for Qwen3)."""
    variables = body.get("chat_template_kwargs") or {}
    if not isinstance(variables, dict) or any(name in RENDERED for name in variables):
        raise RequestError("chat_template_kwargs: an object of the template's variables, but "
                           f"none of {', '.join(RENDERED)} (the server sets those)")
    try:
        return tokenizer.chat_messages(_messages(body.get("messages")), tools, variables)
    except ChatTemplateError as exc:
        raise RequestError(f"messages: {exc}") from None


def _text(content, where: str) -> str:
    """A content's text: given as text, or as OpenAI's list of parts, joined from its text ones."""
    if isinstance(content, list):
        if not all(isinstance(p, dict) and p.get("type") == "text" and
                   isinstance(p.get("text"), str) for p in content):
            raise RequestError(f"{where}: only text parts are supported")
        content = "".join(part["text"] for part in content)
    if not isinstance(content, str):
        raise RequestError(f"{where}: must be text")
    return content


def _logprobs(body: dict, chat: bool) -> int | None:
    """How many alternatives each token's log-probability comes with (None: not wanted): chat's
    `logprobs` true and `top_logprobs`, or a text completion's `logprobs` count, as OpenAI's."""
    most = TOP_LOGPROBS[chat]
    if not chat:
        return _number(body, ("logprobs",), int, 0, most)
    top = _number(body, ("top_logprobs",), int, 0, most)
    if not _flag(body, "logprobs"):
        if top is not None:
            raise RequestError("top_logprobs: needs logprobs true")
        return None
    return top or 0


def _prediction(given, tokenizer) -> Prediction | None:
    """The answer as OpenAI's Predicted Outputs give it, {type: content, content}."""
    if given is None:
        return None
    if not isinstance(given, dict) or given.get("type") != "content":
        raise RequestError(f"prediction: an object whose type is content, got {given!r}")
    return Prediction(tokenizer.encode(_text(given.get("content"), "prediction.content")))


def _plain_prompt(prompt, tokenizer, field: str) -> list[int]:
    """A text prompt's token ids: text, or the ids themselves (a list of one of either, as some
    clients send it). None is refused, since the answer's first token needs a token before it."""
    prompt = _one_prompt(prompt)
    if isinstance(prompt, list) and prompt and all(
            isinstance(token, int) and not isinstance(token, bool) for token in prompt):
        if not all(0 <= token < tokenizer.vocab_size for token in prompt):
            raise RequestError(f"{field}: token ids of this model's are 0 to "
                               f"{tokenizer.vocab_size - 1}")
        return list(prompt)
    if not isinstance(prompt, str) or not prompt:
        raise RequestError(f"{field}: must be non-empty text or token ids (a list of prompts "
                           "of either gives each its answers)")
    ids = tokenizer.encode_plain(prompt)
    if not ids:
        raise RequestError(f"{field}: encodes to no tokens")
    return ids


def _infilled(body: dict, tokenizer, field: str):
    """A text completion's prompt, or, where a `suffix` follows the hole the answer is to fill,
    the two written around it in the model's fill-in-the-middle tokens (infill.py)."""
    prompt, suffix = body.get("prompt"), body.get("suffix")
    if suffix is None:
        return prompt
    if not isinstance(suffix, str):
        raise RequestError("suffix: must be text")
    if _flag(body, "echo"):
        raise RequestError("suffix: not with echo (the answer is what fills the hole)")
    prefix = _one_prompt(prompt)
    if not isinstance(prefix, str):
        raise RequestError(f"suffix: needs {field} as text, the code before the hole")
    try:
        return infill_prompt(tokenizer, prefix, suffix)
    except NoInfill as exc:
        raise RequestError(f"suffix: {exc}") from None


def _one_prompt(prompt):
    """A text completion's prompt, out of the list of one that some clients send."""
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        return prompt[0]
    return prompt


def _echo(body: dict, chat: bool, prompt_ids: list[int], tokenizer) -> str | None:
    """The prompt a text completion's answer is to start with (`echo`): its text as given, or
    its token ids' text."""
    if not _flag(body, "echo"):
        return None
    if chat:
        raise RequestError("echo: only /v1/completions echoes its prompt")
    prompt = _one_prompt(body.get("prompt"))
    return prompt if isinstance(prompt, str) else tokenizer.decode(prompt_ids)


def _messages(messages) -> list[dict]:
    """The conversation as the chat template takes it: roles and text (a content given as
    OpenAI's list of parts is joined from its text parts), an assistant's tool calls and
    reasoning, and a tool message's call id."""
    if not isinstance(messages, list) or not messages:
        raise RequestError("messages: must be a non-empty list of {role, content} objects")
    checked = []
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            raise RequestError(f"{where}: must be an object whose role is one of "
                               f"{', '.join(ROLES)}")
        content = message.get("content")
        if content is None and message["role"] == "assistant":
            content = ""
        checked.append({"role": message["role"], "content": _text(content, f"{where}.content")})
        if message["role"] == "assistant" and message.get("tool_calls"):
            try:
                checked[-1]["tool_calls"] = template_calls(message["tool_calls"],
                                                           f"{where}.tool_calls")
            except ValueError as exc:
                raise RequestError(str(exc)) from None
        for name in PASSED_ON.get(message["role"], ()):
            if isinstance(message.get(name), str):
                checked[-1][name] = message[name]
    return checked


def _number(body: dict, names: tuple[str, ...], kind: type, low: float, high: float,
            default=None):
    """The first of `names` given, as `kind`, within [low, high]; `default` when none is."""
    name = next((n for n in names if body.get(n) is not None), None)
    if name is None:
        return default
    value = body[name]
    whole = isinstance(value, int) or isinstance(value, float) and value.is_integer()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            kind is int and not whole or not low <= value <= high:
        kind_name = "an integer" if kind is int else "a number"
        bounds = " and ".join(part for part in (
            f">= {low:g}" if low > -math.inf else "", f"<= {high:g}" if high < math.inf else "")
            if part)
        raise RequestError(f"{name}: must be {kind_name}" + (f" {bounds}" if bounds else "") +
                           f", got {value!r}")
    return kind(value)


def _logit_bias(given, vocab_size: int) -> tuple[tuple[int, float], ...]:
    """OpenAI's logit_bias, {"token id": bias}, as (id, bias) pairs."""
    if given is None:
        return ()
    if not isinstance(given, dict):
        raise RequestError(f"logit_bias: an object of token ids and biases, got {given!r}")
    pairs = []
    for token, bias in given.items():
        if not (isinstance(token, str) and token.isdigit() and int(token) < vocab_size):
            raise RequestError(f"logit_bias: {token!r} is not a token id of this model's "
                               f"(0 to {vocab_size - 1})")
        pairs.append((int(token), _number({f"logit_bias[{token}]": bias},
                                          (f"logit_bias[{token}]",), float, -LOGIT_BIAS,
                                          LOGIT_BIAS)))
    return tuple(pairs)


def _stops(stop) -> tuple[str, ...]:
    stops = [stop] if isinstance(stop, str) else stop if stop is not None else []
    if not isinstance(stops, list) or len(stops) > MAX_STOPS or \
            not all(isinstance(s, str) and s for s in stops):
        raise RequestError(f"stop: must be a non-empty string or a list of at most {MAX_STOPS}")
    return tuple(stops)


def _flag(body: dict, name: str, default: bool = False) -> bool:
    value = body.get(name, default)
    if not isinstance(value, bool):
        raise RequestError(f"{name}: must be true or false, got {value!r}")
    return value
