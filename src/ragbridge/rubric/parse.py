"""Structured output that is checked: asking the judge, parsing its reply strictly, re-asking.

How a reply is asked for is the backend's ``structured_output`` (`ragbridge.rubric.options.
RubricOptions`, else the judge's; `ragbridge.judge.structured`): with ``prompt`` the request carries
no ``response_format`` and the system prompt alone asks for the JSON object; in every other mode it
carries ``response_format = {"type": "json_schema", ...}`` with the task's schema, and the judge
gateway sends it in the mode chosen (``auto``: as it is, and when the server refuses it, whatever the
status, asked again in the mode the server takes: every request, whenever its refusal arrives). The
mode an answer was asked in is recorded (``structured``: ``json_schema``, ``json_object``, ``tool``
or ``prompt``).

Either way the reply is parsed by the same strict parser: the message content must be exactly one
JSON object (white space, or one surrounding Markdown code fence, allowed; nothing else), and every
value is checked in code (a level on the rubric's scale, one verdict per claim, a known winner),
whatever the schema promised. A reply cut at ``max_tokens`` (``finish_reason = "length"``), one that
is not JSON or one whose values are out of range is *re-asked*: the conversation is sent again with
the bad reply and a user message naming the problem (a different request, so the gateway's cache
cannot return the same bad reply). After ``retries`` re-asks (default 2, never more than the gateway's
``max_retries``) the call fails with :class:`ReplyError` naming the problem and quoting the last
reply: the score becomes an error, never a default value.

HTTP errors are not re-asked here: the gateway has already retried 429, 5xx and timeouts within its
budget, and its last error is raised as :class:`JudgeCallError`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Optional, TypeVar

from .prompts import VERDICTS, WINNERS
from .rubrics import Rubric

if TYPE_CHECKING:  # pragma: no cover - annotations only: a run without the rubric backend never loads httpx
    import httpx

__all__ = ["ReplyError", "JudgeCallError", "Asker", "parse_object", "check_grade", "check_claims",
           "check_verdicts", "check_winner"]

DEFAULT_RETRIES = 2
_FENCE = re.compile(r"^```(?:json|JSON)?\s*\n(?P<body>.*)\n\s*```$", re.S)
#: what the gateway's modes are called in a score's ``structured``
_RECORDED = {"schema": "json_schema", "json_object": "json_object", "tool": "tool", "prompt": "prompt"}
T = TypeVar("T")


class ReplyError(ValueError):
    """The judge's reply could not be used (after the re-asks): what was wrong and what it said."""


class JudgeCallError(RuntimeError):
    """The judge endpoint answered with an HTTP error (after the gateway's own retries)."""


def _snippet(text: Optional[str], n: int = 160) -> str:
    text = " ".join((text or "").split())
    return repr(text if len(text) <= n else text[: n - 3] + "...")


# --------------------------------------------------------------------------------------------
# The strict parser and the checks (each raises ReplyError with the problem)


def parse_object(text: Optional[str]) -> dict[str, Any]:
    """The one JSON object ``text`` holds (optionally in one code fence), or ReplyError."""
    body = (text or "").strip()
    if not body:
        raise ReplyError("the reply is empty")
    m = _FENCE.match(body)
    if m:
        body = m.group("body").strip()
    try:
        obj = json.loads(body)
    except json.JSONDecodeError as exc:
        raise ReplyError(f"the reply is not one JSON object ({exc.msg} at character {exc.pos})") from None
    if not isinstance(obj, dict):
        raise ReplyError(f"the reply is JSON but not an object (it is a {type(obj).__name__})")
    return obj


def _reason(obj: dict, where: str = "") -> str:
    reason = obj.get("reason")
    if not isinstance(reason, str) or not reason.strip():
        raise ReplyError(f'{where}"reason" must be a non-empty string, got {reason!r}')
    return reason.strip()


def _integer(value: Any) -> Optional[int]:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value):
        return int(value)
    return None


def check_grade(obj: dict, rubric: Rubric) -> tuple[int, str]:
    """(level, reason) of a grade reply; the level must be on the rubric's scale."""
    level = _integer(obj.get("score"))
    if level is None or level not in rubric.values:
        allowed = ", ".join(map(str, rubric.values))
        raise ReplyError(f'"score" must be one of {allowed}, got {obj.get("score")!r}')
    return level, _reason(obj)


def check_claims(obj: dict) -> list[str]:
    claims = obj.get("claims")
    if not isinstance(claims, list) or not all(isinstance(c, str) for c in claims):
        raise ReplyError(f'"claims" must be a list of strings, got {_snippet(json.dumps(claims))}')
    claims = [c.strip() for c in claims]
    if any(not c for c in claims):
        raise ReplyError('"claims" holds an empty claim')
    return claims


def check_verdicts(obj: dict, n: int, reasons: bool = True) -> list[tuple[str, str]]:
    """(verdict, reason) for claims 1..n, in order: exactly one verdict per claim (with ``reasons``
    False no reason is asked for, and each is returned as "")."""
    items = obj.get("verdicts")
    if not isinstance(items, list):
        raise ReplyError(f'"verdicts" must be a list, got {type(items).__name__}')
    found: dict[int, tuple[str, str]] = {}
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise ReplyError(f"verdict #{i + 1} is not an object")
        k = _integer(item.get("claim"))
        if k is None or not 1 <= k <= n:
            raise ReplyError(f'verdict #{i + 1}: "claim" must be a claim number from 1 to {n}, '
                             f'got {item.get("claim")!r}')
        if k in found:
            raise ReplyError(f"claim {k} has two verdicts")
        verdict = str(item.get("verdict", "")).strip().upper().replace(" ", "_").replace("-", "_")
        if verdict not in VERDICTS:
            raise ReplyError(f'claim {k}: "verdict" must be one of {", ".join(VERDICTS)}, '
                             f'got {item.get("verdict")!r}')
        found[k] = (verdict, _reason(item, f"claim {k}: ") if reasons else "")
    missing = [k for k in range(1, n + 1) if k not in found]
    if missing:
        raise ReplyError(f"no verdict for claim(s) {', '.join(map(str, missing))} of {n}")
    return [found[k] for k in range(1, n + 1)]


def check_winner(obj: dict) -> tuple[str, str]:
    winner = obj.get("winner")
    norm = {"a": "A", "b": "B", "tie": "tie"}.get(winner.strip().lower()) if isinstance(winner, str) else None
    if norm is None:
        raise ReplyError(f'"winner" must be one of {", ".join(WINNERS)}, got {winner!r}')
    return norm, _reason(obj)


# --------------------------------------------------------------------------------------------
# Asking


@dataclass
class Asker:
    """Sends chat-completions requests through one httpx client (the gateway's transport) and returns
    checked replies. ``state["mode"]`` is the backend's ``structured_output`` (``prompt``: no schema
    is sent); ``state["used"]`` the mode the last answer was asked in (shared by the askers of a
    run)."""

    client: httpx.AsyncClient
    model: str
    state: dict[str, str] = field(default_factory=lambda: {"mode": "auto"})
    retries: int = DEFAULT_RETRIES
    max_tokens: Optional[int] = None
    temperature: float = 0.0

    def __post_init__(self) -> None:
        from ..judge.structured import MODES

        if self.mode not in MODES:
            raise ValueError(f"structured_output must be one of {', '.join(MODES)}, got {self.mode!r}")

    @property
    def mode(self) -> str:
        return self.state["mode"]

    @property
    def structured(self) -> str:
        """How the last reply was asked for: ``json_schema``, ``json_object``, ``tool`` or ``prompt``."""
        if self.mode == "prompt":
            return "prompt"
        return self.state.get("used") or _RECORDED.get(self.mode, "json_schema")

    def _body(self, messages: list[dict], schema: dict, name: str, use_schema: bool) -> dict:
        body: dict[str, Any] = {"model": self.model, "messages": messages, "temperature": self.temperature}
        if self.max_tokens:
            body["max_tokens"] = self.max_tokens
        if use_schema:
            body["response_format"] = {"type": "json_schema",
                                       "json_schema": {"name": name, "schema": schema, "strict": True}}
        return body

    async def _post(self, body: dict) -> httpx.Response:
        return await self.client.post("chat/completions", json=body)

    async def ask(self, messages: list[dict], schema: dict, name: str, check: Callable[[dict], T]) -> T:
        """The checked value of the judge's reply to ``messages`` (see the module docstring)."""
        convo = list(messages)
        problem = ""
        content: Optional[str] = None
        for attempt in range(self.retries + 1):
            r = await self._post(self._body(convo, schema, name, self.mode != "prompt"))
            if r.status_code != 200:
                raise JudgeCallError(_failure_text(r))
            content, finish = _content(r, self.state)
            try:
                if finish == "length":
                    raise ReplyError("the reply was cut off at max_tokens (finish_reason \"length\")")
                return check(parse_object(content))
            except ReplyError as exc:
                problem = str(exc)
            convo = [*convo, {"role": "assistant", "content": content or ""},
                     {"role": "user", "content": f"Your reply could not be used: {problem}. Reply again with "
                                                 "only the JSON object the instructions describe."}]
        raise ReplyError(f"unusable reply after {self.retries + 1} attempt(s): {problem}; "
                         f"last reply: {_snippet(content)}")


def _content(r: httpx.Response, state: Optional[dict] = None) -> tuple[Optional[str], Optional[str]]:
    try:
        data = r.json()
        choice = data["choices"][0]
        message = choice.get("message") or {}
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        raise ReplyError(f"the endpoint's answer is not a chat completion: {_snippet(r.text)}") from None
    used = data.get("ragbridge_structured_output") if isinstance(data, dict) else None
    if state is not None and used in _RECORDED:  # the gateway asked in another mode than the request
        state["used"] = _RECORDED[used]
    content = message.get("content")
    if content is None and message.get("refusal"):
        content = ""
    return (content if isinstance(content, str) else None), choice.get("finish_reason")


def _failure_text(r: httpx.Response) -> str:
    """What a failed call says: the judge's answer, or (the gateway's words) that it never came."""
    try:
        code = (r.json().get("error") or {}).get("code")
    except (ValueError, AttributeError):
        code = None
    if code == "upstream_timeout":
        return f"the judge did not answer in time: {_error_text(r)}"
    if code == "upstream_unreachable":
        return f"the judge could not be reached: {_error_text(r)}"
    return f"the judge answered HTTP {r.status_code}: {_error_text(r)}"


def _error_text(r: httpx.Response) -> str:
    try:
        err = r.json().get("error")
        msg = err.get("message") if isinstance(err, dict) else err
    except (ValueError, AttributeError):
        msg = None
    return " ".join(str(msg or r.text or r.reason_phrase).split())[:300]
