"""Answers that say two things at once: :func:`parse_answer`.

JSON lets an object repeat a key, and every JSON parser the libraries use keeps the last value, so a
judge's ``{"verdict": 1, "verdict": 0}`` would be read as 0 by one library and could be read as 1
by another; which value the judge meant cannot be known. The gateway parses every 2xx answer once,
noting any key an object repeats, in the answer itself and in the JSON its messages hold (a message's
text, a tool call's arguments, a responses-API output text: the JSON object or array in it, as the
libraries find it, also inside a Markdown code fence or after a sentence), and such an answer is
refused (:class:`~ragbridge.judge.upstream.Forwarder`): the score becomes an error, never a value
read one way.
"""

from __future__ import annotations

import json
from typing import Any, Optional

__all__ = ["parse_answer", "repeated_key"]


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
