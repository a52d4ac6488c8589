"""A hostile judge: the stub judge's faults that a judge could commit on purpose or by accident,
selected in the request's path: ``stub.url + "/hostile/<mode>/v1"`` (then the plain stub's routes).

============== =============================================================================
mode           what the judge does
============== =============================================================================
drip           sends its (normal) answer one byte every ``stub.drip_interval`` seconds (0.5)
huge           answers 200 with a JSON body of ``stub.huge_bytes`` (64 MiB), made as it is sent
usage-negative a normal answer whose usage says ``prompt_tokens: -1000000``
usage-float    ... ``completion_tokens: 12.5``
usage-string   ... ``prompt_tokens: "many"``
usage-absurd   ... ``prompt_tokens: 10**12``
echo-key       answers 400, with the key it was given (``Authorization: Bearer``, ``api-key``)
               written in its error body in every form a server may use: as it is, JSON-escaped
               with ``\\/``, every character ``\\u``-escaped, URL-encoded, and the base64 of
               ``user:key`` (as an ``Authorization: Basic`` value)
============== =============================================================================
"""

from __future__ import annotations

import base64
import json
from typing import Any, Optional
from urllib.parse import quote

__all__ = ["MODES", "USAGE_LIES", "echo_key_body", "key_forms", "given_key"]

USAGE_LIES: dict[str, dict[str, Any]] = {
    "usage-negative": {"prompt_tokens": -1_000_000},
    "usage-float": {"completion_tokens": 12.5},
    "usage-string": {"prompt_tokens": "many"},
    "usage-absurd": {"prompt_tokens": 10**12},
}
MODES = ("drip", "huge", "echo-key", *USAGE_LIES)


def given_key(headers: Any) -> Optional[str]:
    """The key a request presents (``Authorization: Bearer``, else ``api-key``)."""
    value = headers.get("authorization") or ""
    if value[:7].lower() == "bearer ":
        return value[7:].strip()
    return headers.get("api-key")


def key_forms(key: str) -> dict[str, bytes]:
    """``key`` as a server may echo it, each form as the bytes of a JSON body would hold it."""
    return {
        "raw": key.encode(),
        "json-slash": json.dumps(key)[1:-1].replace("/", "\\/").encode(),
        "json-unicode": "".join(f"\\u{ord(c):04x}" for c in key).encode(),
        "json-unicode-upper": "".join(f"\\u{ord(c):04X}" for c in key).encode(),
        "url": quote(key, safe="").encode(),
        "basic": base64.b64encode(f"ragbridge:{key}".encode()),
    }


def echo_key_body(key: Optional[str]) -> bytes:
    """An OpenAI-style 400 error body that repeats ``key`` in every form of `key_forms`."""
    forms = key_forms(key or "")
    message = b"; ".join(b"%s: %s" % (name.encode(), form) for name, form in forms.items())
    return (b'{"error": {"message": "invalid request for key ' + message
            + b'", "type": "invalid_request_error", "param": null, "code": null}}')


def lie_about_usage(payload: Any, mode: str) -> Any:
    """``payload`` (an answer) with the usage of ``mode`` (a key of `USAGE_LIES`)."""
    if isinstance(payload, dict) and isinstance(payload.get("usage"), dict):
        payload["usage"].update(USAGE_LIES[mode])
    return payload
