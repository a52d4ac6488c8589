"""Answers that say two things at once (:func:`parse_answer`), or hold what no file can
(:func:`mend_surrogates`).

JSON lets an object repeat a key, and every JSON parser the libraries use keeps the last value, so a
judge's ``{"verdict": 1, "verdict": 0}`` would be read as 0 by one library and could be read as 1
by another; which value the judge meant cannot be known. The gateway parses every 2xx answer once,
noting any key an object repeats, in the answer itself and in the JSON its messages hold (a message's
text, a tool call's arguments, a responses-API output text: the JSON object or array in it, as the
libraries find it, also inside a Markdown code fence or after a sentence), and such an answer is
refused (:class:`~ragbridge.judge.upstream.Forwarder`): the score becomes an error, never a value
read one way.

JSON can also spell a lone UTF-16 surrogate (``"\\ud800"``, a high half with no low half after it,
or a low half alone), which is no character: no UTF-8 file can hold it, so a reason that carries one
made every writer fail (a run stopped with a traceback, and the answer, cached, did it again on every
later run). :func:`mend_surrogates` writes each as U+FFFD (the replacement character), at every depth
of escaping (a message's text that is itself JSON), before anything else sees the answer.
"""

from __future__ import annotations

import json
import re
from typing import Any, Optional

__all__ = ["parse_answer", "repeated_key", "mend_surrogates"]

_SURROGATE_ESCAPE = re.compile(rb"\\[uU][dD][89a-fA-F]")
#: a high half escaped with no low half escaped right after it, or a low half with no high half before
_LONE_ESCAPE = re.compile(
    rb"(\\+)[uU]([dD][89abAB][0-9a-fA-F]{2})(?!\\+[uU][dD][c-fC-F][0-9a-fA-F]{2})"
    rb"|(?<![\\][uU][dD][89abAB][0-9a-fA-F]{2})(\\+)[uU]([dD][c-fC-F][0-9a-fA-F]{2})")
_RAW_SURROGATE = re.compile("[\ud800-\udfff]")


class _Pairs:
    """An ``object_pairs_hook`` that builds dicts and keeps the first key an object repeats."""

    def __init__(self) -> None:
        self.repeated: Optional[str] = None

    def __call__(self, pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out = dict(pairs)
        if len(out) != len(pairs) and self.repeated is None:
            seen: set[str] = set()
            for key, _ in pairs:
                if key in seen:
                    self.repeated = key
                    break
                seen.add(key)
        return out


def _texts(parsed: Any) -> list[str]:
    """The texts of an answer that may hold JSON: each message's content and tool-call arguments (chat
    completions), each output text (the responses API), each completion's text."""
    if not isinstance(parsed, dict):
        return []
    found = []
    for choice in parsed.get("choices") or ():
        if not isinstance(choice, dict):
            continue
        message = choice.get("message")
        if isinstance(message, dict):
            found.append(message.get("content"))
            for call in message.get("tool_calls") or ():
                function = call.get("function") if isinstance(call, dict) else None
                found.append(function.get("arguments") if isinstance(function, dict) else None)
        found.append(choice.get("text"))
    for item in parsed.get("output") or ():
        for part in (item.get("content") or ()) if isinstance(item, dict) else ():
            found.append(part.get("text") if isinstance(part, dict) else None)
    return [t for t in found if isinstance(t, str)]


def repeated_key(text: str) -> Optional[str]:
    """The first key an object of the JSON in ``text`` repeats (the text from its first ``{`` or
    ``[`` to its last ``}`` or ``]``), or None (none repeated, or no JSON there)."""
    starts = [i for i in (text.find("{"), text.find("[")) if i >= 0]
    if not starts or '":' not in text and '" :' not in text:
        return None
    start = min(starts)
    end = max(text.rfind("}"), text.rfind("]"))
    if end <= start:
        return None
    hook = _Pairs()
    try:
        json.loads(text[start:end + 1], object_pairs_hook=hook)
    except (ValueError, RecursionError):
        return None
    return hook.repeated


def parse_answer(body: bytes) -> tuple[Any, Optional[str]]:
    """(the answer ``body`` as JSON, the first key one of its objects or its messages' JSON repeats,
    or None); ValueError when ``body`` is not JSON."""
    hook = _Pairs()
    parsed = json.loads(body, object_pairs_hook=hook)
    if hook.repeated is not None:
        return parsed, hook.repeated
    for text in _texts(parsed):
        repeated = repeated_key(text)
        if repeated is not None:
            return parsed, repeated
    return parsed, None


def mend_surrogates(body: bytes) -> bytes:
    """``body`` with every lone surrogate in it written as U+FFFD: escaped (``\\ud800``, behind any
    number of backslashes), or as the bytes a lax encoder makes of one (which JSON parsers read with
    ``surrogatepass``). A body without either is returned as it is."""
    raw = b"\xed" in body
    if not raw and _SURROGATE_ESCAPE.search(body) is None:
        return body
    if raw:
        try:
            body.decode("utf-8")
        except UnicodeDecodeError:
            text = body.decode("utf-8", "surrogatepass")
            body = _RAW_SURROGATE.sub("\ufffd", text).encode("utf-8", "replace")
    return _LONE_ESCAPE.sub(lambda m: (m.group(1) or m.group(3)) + b"ufffd", body)
