"""Structured output: how a judge is asked for a JSON object, and what a server refuses.

The libraries ask for their verdicts in one of three ways on ``/chat/completions``:

* ``schema``: ``response_format = {"type": "json_schema", "json_schema": {"name", "schema", ...}}``
  (OpenAI's structured outputs: the rubric, and libraries with a model they know);
* ``json_object``: ``response_format = {"type": "json_object"}``, optionally with ``"schema"`` (JSON
  mode; llama-cpp-python and Ollama constrain the reply to the schema given so);
* ``tool``: one function in ``tools`` that ``tool_choice`` forces, its ``parameters`` the schema
  (what some libraries fall back to after a 400);

or by the prompt alone (libraries with a model they do not know), which is left as it is.
Servers differ in what they take: llama-cpp-python answers ``json_schema`` with HTTP 500 ("Input
should be 'text' or 'json_object'"), xllamacpp ignores a forced tool, OpenAI wants the word JSON in a
JSON-mode conversation.

The judge's ``structured_output`` (`ragbridge.judge.JudgeConfig`, per backend: the backend's option
``structured_output``) chooses one of `MODES` for every request that asks for a JSON object:

* ``auto`` (the default): each request as its library made it; when the server refuses it for its
  structured output (`rejects_structured_output`, whatever the status), the same request is asked
  again in the next mode of `FALLBACK` the server has not refused, and every later request of that
  kind goes straight to the mode that worked. Each request refused is asked again, whenever its
  refusal comes back: requests in flight when the first refusal arrives are not lost;
* ``schema``, ``json_object``, ``tool``, ``prompt``: every such request is sent in that mode
  (`reshape`; ``prompt`` sends no ``response_format`` and puts the schema in the last user message;
  a JSON-mode request without a schema is asked for any object, `ANY_OBJECT`).

An answer to a reshaped request is given back in the shape the library asked for (`as_asked`: the
JSON object as the message's content, or as the forced tool's arguments), with the mode that was
used in the answer's ``ragbridge_structured_output``.

`deterministic` tells a 4xx a server would answer the same request with again (its request
validation: a structured-output refusal, a field it does not take, a prompt over its context), which
the gateway does not retry; a 5xx is retried until the same body comes back twice, whatever its words
(only ``auto``'s fallback takes a 5xx refusal of a structured-output mode at once).
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any, Literal, Optional, get_args

__all__ = ["StructuredMode", "MODES", "FALLBACK", "ANY_OBJECT", "Ask", "ask_of", "reshape", "as_asked",
           "rejects_structured_output", "deterministic", "USED_FIELD"]

#: how a request that asks for a JSON object is sent: the judge's ``structured_output`` and a judged
#: backend's option of that name (`ragbridge.judged_backend.JudgedOptions`) take one of these
StructuredMode = Literal["auto", "schema", "json_object", "tool", "prompt"]
MODES: tuple[str, ...] = get_args(StructuredMode)
#: what ``auto`` tries after a refusal, in this order: a forced tool call is OpenAI's own and carries the
#: schema (what libraries fall back to themselves), JSON mode's schema is an extension
#: some servers ignore, the prompt alone constrains nothing
FALLBACK = ("schema", "tool", "json_object", "prompt")
#: the schema of a request in JSON mode that gives none: any JSON object
ANY_OBJECT: dict = {"type": "object"}
#: the field of an answer that says which mode the gateway asked in (only when it reshaped the request)
USED_FIELD = "ragbridge_structured_output"

#: an error that names the request's structured output (``response_format``, a schema, tools)
_STRUCTURED = re.compile(
    r"response_format|json_schema|json_object|structured[ _-]?output|tool_choice|\btools?\b|function[ _]call"
    r"|grammar|guided_(json|decoding)|input should be 'text'|json[ _-]?mode", re.I)
#: an error that says the request itself cannot be served (its validation): the same again would fail
_REQUEST_FAULT = re.compile(
    r"input should be|validation error|field required|extra inputs are not permitted|extra_forbidden"
    r"|unrecognized request argument|unsupported parameter|not supported|does not support|unsupported"
    r"|maximum context length|context length|context window|exceeds? the (available )?context"
    r"|too many tokens|prompt is too long", re.I)
#: statuses a server refuses a structured-output request with (llama-cpp-python: 500)
_REFUSALS = frozenset({400, 422, 500, 501})


@dataclass(frozen=True)
class Ask:
    """How a request asks for its JSON object: ``kind`` (``schema``, ``json_object`` or ``tool``),
    the schema's ``name`` and the ``schema`` (None: JSON mode without one), ``strict`` as given."""

    kind: str
    name: str
    schema: Optional[dict]
    strict: bool = False


def ask_of(body: Any) -> Optional[Ask]:
    """How the chat request ``body`` asks for a JSON object, or None (a prompt alone, or free text)."""
    if not isinstance(body, dict):
        return None
    fmt = body.get("response_format")
    if isinstance(fmt, dict):
        if fmt.get("type") == "json_schema" and isinstance(fmt.get("json_schema"), dict):
            spec = fmt["json_schema"]
            schema = spec.get("schema")
            return Ask("schema", str(spec.get("name") or "response"),
                       schema if isinstance(schema, dict) else None, bool(spec.get("strict")))
        if fmt.get("type") == "json_object":
            schema = fmt.get("schema")
            return Ask("json_object", "response", schema if isinstance(schema, dict) else None)
    tool = _forced_tool(body)
    if tool is not None:
        params = tool.get("parameters")
        return Ask("tool", str(tool.get("name") or "response"), params if isinstance(params, dict) else None,
                   bool(tool.get("strict")))
    return None


def _forced_tool(body: dict) -> Optional[dict]:
    """The function a request forces (``tool_choice`` names it, or ``required`` with one tool)."""
    tools = [t.get("function") for t in body.get("tools") or () if isinstance(t, dict)
             and isinstance(t.get("function"), dict)]
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        function = choice.get("function")
        name = function.get("name") if isinstance(function, dict) else None
        return next((t for t in tools if t.get("name") == name), None)
    if choice == "required" and len(tools) == 1:
        return tools[0]
    return None


def reshape(body: dict, ask: Ask, mode: str) -> dict:
    """``body`` asking for its JSON object in ``mode`` (a new dict; ``body`` itself when it already
    does). A request in JSON mode without a schema (``ask.schema`` None) is asked for any object:
    ``schema`` and ``tool`` take ``{"type": "object"}`` as theirs."""
    if mode == ask.kind or mode == "auto":
        return body
    schema = ask.schema if ask.schema is not None else dict(ANY_OBJECT)
    out = {k: v for k, v in body.items() if k not in ("response_format", "tools", "tool_choice",
                                                      "parallel_tool_calls")}
    if ask.kind != "tool" and "tools" in body:  # tools the library offered besides its JSON: kept
        out.update({k: body[k] for k in ("tools", "tool_choice", "parallel_tool_calls") if k in body})
    if mode == "schema":
        out["response_format"] = {"type": "json_schema", "json_schema": {
            "name": _name(ask.name), "schema": schema, "strict": ask.strict and ask.schema is not None}}
    elif mode == "json_object":
        out["response_format"] = {"type": "json_object", **({"schema": ask.schema} if ask.schema else {})}
        out["messages"] = _with_instruction(body.get("messages"), ask)
    elif mode == "tool":
        out["tools"] = [{"type": "function", "function": {
            "name": _name(ask.name), "description": "Give the answer as this function's arguments.",
            "parameters": schema}}]
        out["tool_choice"] = {"type": "function", "function": {"name": _name(ask.name)}}
    elif mode == "prompt":
        out["messages"] = _with_instruction(body.get("messages"), ask)
    else:
        raise ValueError(f"structured_output must be one of {', '.join(MODES)}, got {mode!r}")
    return out


def _name(name: str) -> str:
    """A function or schema name as OpenAI takes it (letters, digits, _ and -, at most 64)."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", name)[:64] or "response"


def instruction(ask: Ask) -> str:
    """What the last user message gains when the JSON object is asked for in words (one paragraph at
    its end: ragbridge's stub judge reads the name and the schema back from it)."""
    if ask.schema is None:
        return "Reply with only one JSON object, with no other text."
    return (f"Reply with only one JSON object, named {_name(ask.name)}, that follows this JSON schema:\n"
            + json.dumps(ask.schema, ensure_ascii=False, separators=(",", ":")))


def _with_instruction(messages: Any, ask: Ask) -> Any:
    """``messages`` with `instruction` added to the last user message (a new list)."""
    if not isinstance(messages, list):
        return messages
    out = copy.deepcopy(messages)
    text = instruction(ask)
    for message in reversed(out):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                message["content"] = f"{content}\n\n{text}"
            elif isinstance(content, list):
                content.append({"type": "text", "text": text})
            else:
                continue
            return out
    return [*out, {"role": "user", "content": text}]


_FENCE = re.compile(r"^```(?:json|JSON)?\s*\n(?P<body>.*)\n\s*```$", re.S)


def as_asked(payload: Any, ask: Ask, used: str) -> Any:
    """The answer ``payload`` to a request reshaped into ``used``, as the library that asked in
    ``ask.kind`` reads it: the JSON object as the message's content, or as its tool call's arguments
    (a new dict, marked with `USED_FIELD`). An answer that is not a chat completion is left as it is."""
    if used == ask.kind or not isinstance(payload, dict) or not isinstance(payload.get("choices"), list):
        return payload
    out = copy.deepcopy(payload)
    for choice in out["choices"]:
        message = choice.get("message") if isinstance(choice, dict) else None
        if not isinstance(message, dict):
            continue
        text = _json_text(message)
        if ask.kind == "tool":
            message["content"] = None
            message["tool_calls"] = [{
                "id": "call_" + hashlib.sha256((text or "").encode()).hexdigest()[:24], "type": "function",
                "function": {"name": ask.name, "arguments": text or ""}}]
            if choice.get("finish_reason") == "stop":
                choice["finish_reason"] = "tool_calls"
        else:
            message["content"] = text
            message.pop("tool_calls", None)
            if choice.get("finish_reason") == "tool_calls":
                choice["finish_reason"] = "stop"
    out[USED_FIELD] = used
    return out


def _json_text(message: dict) -> Optional[str]:
    """The JSON object an answer's message holds: its first tool call's arguments, else its content
    without a code fence around it."""
    for call in message.get("tool_calls") or ():
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            args = function.get("arguments")
            return args if isinstance(args, str) else json.dumps(args)
    content = message.get("content")
    if not isinstance(content, str):
        return content
    m = _FENCE.match(content.strip())
    return m.group("body").strip() if m else content


def error_text(body: bytes) -> str:
    """The words of an error answer (its ``message``, ``detail`` or the body), one line."""
    text = body[:8192].decode("utf-8", "replace")
    try:
        doc = json.loads(text)
    except ValueError:
        return " ".join(text.split())
    doc = doc[0] if isinstance(doc, list) and doc else doc
    inner = doc.get("error", doc) if isinstance(doc, dict) else doc
    if isinstance(inner, dict):
        words = inner.get("message") or inner.get("detail") or inner.get("msg")
        if isinstance(words, (list, dict)):
            words = json.dumps(words)
        return " ".join(str(words or json.dumps(inner)).split())
    return " ".join(str(inner).split())


def rejects_structured_output(status: int, body: bytes) -> bool:
    """Whether an answer refuses a request for its structured output (``response_format``, a schema,
    a tool), whatever its status: 400 from most servers, 422 from a strict validator, 500 from
    llama-cpp-python, 501 from a server that has no such feature."""
    return status in _REFUSALS and bool(_STRUCTURED.search(error_text(body)))


def deterministic(status: int, body: bytes) -> bool:
    """Whether an error answer is the server's verdict on the request itself (its validation), which
    the same request would get again: a 4xx (not 429) whose words say so. A 5xx is never judged by its
    words on its first occurrence (llama.cpp's "context shift is not supported while another request is
    processing, try again" is busy, not a refusal): the forwarder stops retrying one only when the same
    body comes back for the same request twice."""
    if not 400 <= status < 500 or status == 429:
        return False
    words = error_text(body)
    return bool(_REQUEST_FAULT.search(words)) or (status in _REFUSALS and bool(_STRUCTURED.search(words)))
