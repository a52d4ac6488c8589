"""A judge request as the responders read it (`JudgeRequest`: a chat-completions or Responses-API
body, normalised) and what a responder answers (`JudgeReply`)."""

from __future__ import annotations

import contextlib
import json
import re
from dataclasses import dataclass, field
from typing import Any, Optional

__all__ = ["JudgeRequest", "JudgeReply"]


def _part_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for p in content:
            if isinstance(p, str):
                parts.append(p)
            elif isinstance(p, dict):
                if isinstance(p.get("text"), str):
                    parts.append(p["text"])
                elif isinstance(p.get("content"), (str, list)):
                    parts.append(_part_text(p["content"]))
        return "\n".join(parts)
    if isinstance(content, dict) and isinstance(content.get("text"), str):
        return content["text"]
    return str(content)


#: the paragraph the judge gateway adds to the last user message when it asks for a JSON object in
#: words (``ragbridge.judge.structured.instruction``: JSON mode, or the prompt alone)
_ASKED = re.compile(r"\n\nReply with only one JSON object(?:, named (?P<name>[\w-]+), that follows this JSON "
                    r"schema:\n(?P<schema>\{.*\})|, with no other text\.)\s*$", re.S)


@dataclass
class JudgeRequest:
    """A chat-completions or Responses-API request, normalised for the responders."""

    endpoint: str  # "chat" or "responses"
    model: str
    messages: list[tuple[str, str]]  # (role, text)
    schema: Optional[dict] = None
    schema_name: Optional[str] = None
    schema_origin: Optional[str] = None  # "json_schema", "tool", "prompt", "example"
    json_mode: bool = False  # the caller wants JSON (json_object / json_schema / a tool)
    tool_name: Optional[str] = None  # answer as a call of this function
    body: dict = field(default_factory=dict)

    @property
    def system(self) -> str:
        return "\n\n".join(t for r, t in self.messages if r in ("system", "developer"))

    @property
    def user(self) -> str:
        """The first user message (re-asks append more; the task is in the first)."""
        for r, t in self.messages:
            if r == "user":
                return t
        return ""

    @property
    def prompt(self) -> str:
        return "\n\n".join(t for _, t in self.messages)

    @classmethod
    def from_chat(cls, body: dict) -> "JudgeRequest":
        msgs = [(str(m.get("role", "user")), _part_text(m.get("content"))) for m in body.get("messages") or []
                if isinstance(m, dict)]
        asked = None
        for i, (role, text) in enumerate(msgs):  # the paragraph the judge gateway adds, taken out
            m = _ASKED.search(text) if role == "user" else None
            if m is not None:
                msgs[i], asked = (role, text[:m.start()]), m
        req = cls(endpoint="chat", model=str(body.get("model", "")), messages=msgs, body=body)
        if asked is not None:
            req.json_mode, req.schema_name = True, asked.group("name")
            with contextlib.suppress(ValueError):
                schema = json.loads(asked.group("schema") or "null")
                if isinstance(schema, dict):
                    req.schema, req.schema_origin = schema, "json_schema"
        rf = body.get("response_format") or {}
        tools = body.get("tools") or []
        tool_choice = body.get("tool_choice")
        if isinstance(rf, dict) and rf.get("type") == "json_schema":
            js = rf.get("json_schema") or {}
            req.schema, req.schema_name = js.get("schema") or {}, js.get("name")
            req.schema_origin = "json_schema"
            req.json_mode = True
        elif tools and tool_choice != "none":
            chosen = None
            if isinstance(tool_choice, dict):
                chosen = (tool_choice.get("function") or {}).get("name") or tool_choice.get("name")
            fns = [t.get("function", t) for t in tools if isinstance(t, dict)]
            fn = next((f for f in fns if f.get("name") == chosen), fns[0] if fns else None)
            if fn is not None:
                params = fn.get("parameters")
                # any object (a JSON-mode request given as a tool): the prompt says what, as in JSON mode
                if params != {"type": "object"}:
                    req.schema = params or {"type": "object", "properties": {}}
                    req.schema_origin = "tool"
                req.schema_name = fn.get("name")
                req.tool_name = fn.get("name")
                req.json_mode = True
        elif isinstance(rf, dict) and rf.get("type") == "json_object":
            req.json_mode = True
            sch = rf.get("schema")  # llama.cpp / vLLM extension
            if isinstance(sch, dict):
                req.schema, req.schema_origin = sch, "json_schema"
        return req

    @classmethod
    def from_responses(cls, body: dict) -> "JudgeRequest":
        msgs: list[tuple[str, str]] = []
        if body.get("instructions"):
            msgs.append(("system", _part_text(body["instructions"])))
        inp = body.get("input")
        if isinstance(inp, str):
            msgs.append(("user", inp))
        elif isinstance(inp, list):
            for m in inp:
                if isinstance(m, dict):
                    msgs.append((str(m.get("role", "user")), _part_text(m.get("content"))))
        req = cls(endpoint="responses", model=str(body.get("model", "")), messages=msgs, body=body)
        fmt = ((body.get("text") or {}).get("format") or {}) if isinstance(body.get("text"), dict) else {}
        if fmt.get("type") == "json_schema":
            req.schema, req.schema_name = fmt.get("schema") or {}, fmt.get("name")
            req.schema_origin = "json_schema"
            req.json_mode = True
        elif fmt.get("type") == "json_object":
            req.json_mode = True
        return req


@dataclass
class JudgeReply:
    """What to answer: message text (or function arguments when ``tool_name`` is set)."""

    content: str
    tool_name: Optional[str] = None
    score: Optional[int] = None  # the score token, for logprobs
    responder: str = ""
