"""How models write tool calls, and reading them back out of an answer, whole or as it streams,
as vLLM's and llama.cpp's servers read these models'. Seven forms, each asked for by the chat
templates that hold its marker:
- tagged (Hermes'): each call a JSON object {"name", "arguments"} between <tool_call> tags,
  anywhere in the answer: Qwen2.5, Qwen3, SmolLM3, Hermes;
- bare JSON (Llama 3.1-3.3's): the whole answer a JSON object {"name", "parameters"}, or several
  separated by semicolons, after an optional <|python_tag|>;
- listed (Mistral's to v0.3): [TOOL_CALLS] and a JSON list of {"name", "arguments"}, after any
  text; its templates want call ids of nine letters and digits;
- named (Mistral's since its v11 tokenizers: Mistral Small 3.2, Devstral, Magistral): each call
  [TOOL_CALLS]name[ARGS] and its arguments as a JSON object ([CALL_ID]id before [ARGS] in some),
  after any text;
- Granite 3's: <|tool_call|> and a JSON list of {"name", "arguments"}, after any text;
- pythonic (LFM2's): a Python list of calls, name(argument=value, ...), between
  <|tool_call_start|> and <|tool_call_end|>, anywhere in the answer;
- XML (Qwen3.5's and Qwen3-Coder's): each call <function=name> with an element
  <parameter=argument>value</parameter> an argument, between <tool_call> tags, anywhere in the
  answer; a value is text, read as JSON where its tool's schema types it otherwise.
A model writes what it likes: an answer that is not well-formed calls in its form (not JSON, no
name, a call cut short) is text, as the model wrote it. Where a request forces a call
(tool_choice), the answer is held to calls in its model's form (`grammar`, output_format.py),
each call's JSON to its tool's parameters."""
from __future__ import annotations

from engine.serve.call_form import CallForm
from engine.serve.json_calls import GraniteCalls, JsonCalls, ListedCalls, NamedCalls, TaggedCalls
from engine.serve.keyword_calls import PythonicCalls, XmlCalls

# (XML's templates hold <tool_call> too: asked before the tagged form)
FORMS = (XmlCalls(), TaggedCalls(), JsonCalls(), NamedCalls(), ListedCalls(), GraniteCalls(),
         PythonicCalls())


def form_of(template: str | None) -> CallForm | None:
    """The form a chat template asks for calls in; None where it asks for none read here."""
    return next((form for form in FORMS if template and form.marker in template), None)
