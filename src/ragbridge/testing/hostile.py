"""A hostile judge: the stub judge's faults that a judge could commit on purpose or by accident,
selected in the request's path: ``stub.url + "/hostile/<mode>/v1"`` (then the plain stub's routes).

=================== ========================================================================
mode                what the judge does
=================== ========================================================================
drip                sends its (normal) answer one byte every ``stub.drip_interval`` seconds (0.5)
drip-head           ... its status line and headers too, one byte at a time
huge                answers 200 with a JSON body of ``stub.huge_bytes`` (64 MiB), made as it is sent
same-500            answers HTTP 500 with the same body every time (a server that fails on the request)
late                answers normally, but only after ``stub.late_seconds`` (2): after the deadline of
                    a gateway whose ``timeout`` is shorter
late-once           ... late the first time it gets a request (the same body), at once after that
tool-only           takes a forced tool call only: answers ``json_schema`` with HTTP 400 "response_format.type
                    json_schema is not supported; use grammar", ``json_object`` with HTTP 400 "JSON mode
                    not available for this model"
one-slot            answers one request at a time, each after ``stub.late_seconds``: a server started
                    with one slot, the others waiting for it
usage-negative      a normal answer whose usage says ``prompt_tokens: -1000000``
usage-float         ... ``completion_tokens: 12.5``
usage-string        ... ``prompt_tokens: "many"``
usage-absurd        ... ``prompt_tokens: 10**12``
echo-key            answers 400, with the key it was given (``Authorization: Bearer``, ``api-key``,
                    and the value of any other header whose name speaks of authorisation)
                    written in its error body in every form of `key_forms`: as it is, JSON-escaped
                    with ``\\/``, every character ``\\u``-escaped, URL-encoded, the base64 of
                    ``user:key`` (as an ``Authorization: Basic`` value), HTML character references
                    (``&#x2F;``, every character hexadecimal or decimal) and hexadecimal
echo-key-<charset>  answers 401 with that error body in ``<charset>`` (one of `ECHO_CHARSETS`:
                    UTF-16 with its byte-order mark, UTF-16BE, UTF-32, EBCDIC cp500, UTF-7), declared
                    in its ``Content-Type``
echo-key-bom        ... in UTF-16 with its byte-order mark, declaring no charset (JSON's own rule
                    still reads it)
echo-key-each       each answer the next of `ECHO_MODES` in turn
repeated-key        a normal answer whose every ``"verdict"`` is given twice, the second time
                    contradicting the first (``"verdict": 1, "verdict": 0``)
lone-surrogate      a normal answer whose every ``"reason"`` begins with a lone surrogate (``\\ud800``,
                    escaped as JSON allows)
key-split           a normal answer whose every ``"reason"`` ends with the key it was given cut in
                    two halves (``KEYECHO-A <first half> KEYECHO-B <second half>``)
key-b32             ... ends with the key in base32
gzip                a normal answer compressed with gzip (``Content-Encoding: gzip``), whatever the
                    request accepts
=================== ========================================================================
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any, Optional
from urllib.parse import quote

__all__ = ["MODES", "tool_only_refusal", "USAGE_LIES", "ECHO_CHARSETS", "echo_key_body", "key_forms",
           "given_key", "given_secrets", "ECHO_MODES", "key_leaks", "lie_about_usage",
           "repeat_verdicts", "lone_surrogates"]

USAGE_LIES: dict[str, dict[str, Any]] = {
    "usage-negative": {"prompt_tokens": -1_000_000},
    "usage-float": {"completion_tokens": 12.5},
    "usage-string": {"prompt_tokens": "many"},
    "usage-absurd": {"prompt_tokens": 10**12},
}
#: the charsets ``echo-key-<charset>`` answers in (declared in the answer's Content-Type)
ECHO_CHARSETS = ("utf-16", "utf-16-be", "utf-32", "cp500", "utf-7")
#: the modes that change a normal answer's message text
CONTENT_MODES = ("repeated-key", "lone-surrogate", "key-split", "key-b32")
#: the ways ``echo-key*`` echoes the key
ECHO_MODES = ("echo-key", *(f"echo-key-{c}" for c in ECHO_CHARSETS), "echo-key-bom")
MODES = ("drip", "drip-head", "same-500", "huge", "late", "late-once", "one-slot", "tool-only",
         *ECHO_MODES, "echo-key-each", *CONTENT_MODES, "gzip", *USAGE_LIES)


def tool_only_refusal(body: Any) -> Optional[str]:
    """What the ``tool-only`` judge says to a request for a JSON object by ``response_format`` (None:
    it takes the request)."""
    fmt = body.get("response_format") if isinstance(body, dict) else None
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind == "json_schema":
        return "response_format.type json_schema is not supported; use grammar"
    if kind == "json_object":
        return "JSON mode not available for this model"
    return None


def given_key(headers: Any) -> Optional[str]:
    """The key a request presents (``Authorization: Bearer``, else ``api-key``)."""
    value = headers.get("authorization") or ""
    if value[:7].lower() == "bearer ":
        return value[7:].strip()
    return headers.get("api-key")


def given_secrets(headers: Any) -> list[str]:
    """The key a request presents (or the password of its ``Authorization: Basic``), and the value of
    every other header whose name speaks of authorisation (``Helicone-Auth``, ``cf-aig-authorization``,
    ``X-Authorization``): what ``echo-key`` echoes."""
    found = [given_key(headers) or ""]
    basic = headers.get("authorization") or ""
    if basic[:6].lower() == "basic ":  # a user:pass@ URL's: the password
        found.append(base64.b64decode(basic[6:].strip() + "==").decode("utf-8", "replace").partition(":")[2])
    for name, value in headers.items():
        if "auth" in name.lower() and name.lower() != "authorization":
            found.append(value.split()[-1] if value.split() else value)
    return [s for s in dict.fromkeys(found) if s]


def key_forms(key: str) -> dict[str, bytes]:
    """``key`` as a server may echo it, each form as the bytes of a JSON body would hold it."""
    raw = key.encode()
    return {
        "raw": raw,
        "json-slash": json.dumps(key)[1:-1].replace("/", "\\/").encode(),
        "json-unicode": "".join(f"\\u{ord(c):04x}" for c in key).encode(),
        "json-unicode-upper": "".join(f"\\u{ord(c):04X}" for c in key).encode(),
        "url": quote(key, safe="").encode(),
        "basic": base64.b64encode(f"ragbridge:{key}".encode()),
        "html-slash": key.replace("/", "&#x2F;").replace("+", "&#43;").encode(),
        "html-hex": "".join(f"&#x{ord(c):X};" for c in key).encode(),
        "html-dec": "".join(f"&#{ord(c)};" for c in key).encode(),
        "hex": raw.hex().encode(),
        "hex-upper": raw.hex().upper().encode(),
        "hex-escaped": "".join(f"\\\\x{b:02x}" for b in raw).encode(),  # \\x73 in JSON: \x73 as text
    }


def echo_key_body(*keys: Optional[str]) -> bytes:
    """An OpenAI-style error body that repeats each of ``keys`` in every form of `key_forms`."""
    message = b"; ".join(b"%s: %s" % (name.encode(), form) for key in keys or ("",)
                         for name, form in key_forms(key or "").items())
    return (b'{"error": {"message": "invalid request for key ' + message
            + b'", "type": "invalid_request_error", "param": null, "code": null}}')


def echo_key_answer(mode: str, keys: list[str]) -> tuple[int, bytes, str]:
    """(status, body, content type) of an ``echo-key*`` mode, echoing ``keys``."""
    body = echo_key_body(*keys)
    if mode == "echo-key":
        return 400, body, "application/json"
    if mode == "echo-key-bom":
        return 401, body.decode().encode("utf-16"), "application/json"
    charset = mode[len("echo-key-"):]
    return 401, body.decode().encode(charset), f"application/json; charset={charset}"


def key_leaks(data: bytes, key: str) -> list[str]:
    """The forms of ``key`` that ``data`` (a file's bytes) holds: each of `key_forms` (hexadecimal
    digits and escapes in either case), and the key itself in each charset of `ECHO_CHARSETS`
    (searched as bytes, and in the text ``data`` is in that charset)."""
    low = data.lower()
    found = [name for name, form in key_forms(key).items() if form in data or form.lower() in low]
    for charset in ("utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be", "cp500", "utf-7"):
        if key.encode(charset) in data or key in data.decode(charset, "replace"):
            found.append(charset)
    return found


def lie_about_usage(payload: Any, mode: str) -> Any:
    """``payload`` (an answer) with the usage of ``mode`` (a key of `USAGE_LIES`)."""
    if isinstance(payload, dict) and isinstance(payload.get("usage"), dict):
        payload["usage"].update(USAGE_LIES[mode])
    return payload


_FLIPPED = {"1": "0", "0": "1", '"yes"': '"no"', '"no"': '"yes"', '"SUPPORTED"': '"CONTRADICTED"',
            '"CONTRADICTED"': '"SUPPORTED"', "true": "false", "false": "true"}
_VERDICT = re.compile(r'("verdict"\s*:\s*)(-?\d+(?:\.\d+)?|"[^"\\]*"|true|false)')


def repeat_verdicts(content: str) -> str:
    """Every ``"verdict": v`` in ``content`` (a JSON text) followed by a second ``"verdict"`` that
    contradicts it."""
    return _VERDICT.sub(lambda m: f"{m.group(0)}, {m.group(1)}{_FLIPPED.get(m.group(2), '0')}", content)


def lone_surrogates(content: str) -> str:
    """Every ``"reason"`` string in ``content`` (a JSON text) begun with a lone surrogate."""
    return re.sub(r'("reason"\s*:\s*")', lambda m: m.group(1) + "\ud800", content)


def key_in_reasons(content: str, mode: str, key: str) -> str:
    """Every ``"reason"`` string in ``content`` (a JSON text) ended with ``key`` in two halves
    (``key-split``) or in base32 (``key-b32``)."""
    half = len(key) // 2
    echo = (f" KEYECHO-A {key[:half]} KEYECHO-B {key[half:]}" if mode == "key-split"
            else f" KEYECHO {base64.b32encode(key.encode()).decode()}")
    tail = json.dumps(echo)[1:-1]
    return re.sub(r'("reason"\s*:\s*"(?:[^"\\]|\\.)*)"', lambda m: m.group(1) + tail + '"', content)


def change_content(payload: Any, mode: str, key: str = "") -> Any:
    """``payload`` (an answer) with its message text (or tool-call arguments) changed by ``mode``
    (one of `CONTENT_MODES`; ``key``: the key the request presented)."""
    change = {"repeated-key": repeat_verdicts, "lone-surrogate": lone_surrogates}.get(
        mode, lambda content: key_in_reasons(content, mode, key))
    for choice in payload.get("choices") or () if isinstance(payload, dict) else ():
        message = choice.get("message") or {}
        if isinstance(message.get("content"), str):
            message["content"] = change(message["content"])
        for call in message.get("tool_calls") or ():
            call["function"]["arguments"] = change(call["function"]["arguments"])
    for item in payload.get("output") or () if isinstance(payload, dict) else ():
        for part in item.get("content") or ():
            if isinstance(part.get("text"), str):
                part["text"] = change(part["text"])
    return payload
