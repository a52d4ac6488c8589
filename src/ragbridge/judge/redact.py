"""Redaction of the judge's keys, in every form a server may echo them in: :class:`Redactor`.

An endpoint that echoes the key in an error body may encode it: JSON-escaped (``sk-a\\/b``, or every
character as ``\\u0073``), URL-encoded (``sk-a%2Fb``), or inside the base64 of ``user:key`` (an
``Authorization: Basic`` header it repeats). A library that decodes the body would then write the
plain key into a score's error. The gateway passes every answer (and every line of its audit log)
through the redactor before anything else sees it, so no form of the key reaches a library, the
cache, the audit log, ``scores.jsonl`` or a report.

Each character of a key may appear as itself, as a JSON ``\\uXXXX`` escape (hex in either case,
the backslash doubled when the JSON was escaped again), as ``\\/`` for ``/``, or as ``%XX``; any
mix is recognised. The base64 forms are found by the part of the encoding that the key alone
decides, at each of the three alignments, in the standard and the URL-safe alphabet; the whole
base64 run that holds it is replaced. A key shorter than :data:`MIN_ENCODED` characters is redacted
only as itself (its encodings would match ordinary text).
"""

from __future__ import annotations

import base64
import re
from typing import Iterable

__all__ = ["Redactor", "MASK", "MIN_ENCODED"]

MASK = b"[REDACTED]"
MIN_ENCODED = 8
_B64_RUN = re.compile(rb"[A-Za-z0-9+/_-]*")


def _hex_class(value: int) -> bytes:
    """A pattern for the two hex digits of ``value`` in either case."""
    out = b""
    for digit in f"{value:02x}":
        out += f"[{digit}{digit.upper()}]".encode() if digit.isalpha() else digit.encode()
    return out


def _char_pattern(ch: int) -> bytes:
    alternatives = [re.escape(bytes([ch])), rb"\\{1,2}u00" + _hex_class(ch), rb"%" + _hex_class(ch)]
    if ch == ord("/"):
        alternatives.append(rb"\\{1,2}/")
    return b"(?:" + b"|".join(alternatives) + b")"


def _forms(ch: int) -> list[bytes]:
    """A character's forms in lowercased text: itself and its escapes."""
    hexed = f"{ch:02x}".encode()
    forms = [bytes([ch]).lower(), b"\\u00" + hexed, b"%" + hexed]
    return forms + ([b"\\/"] if ch == ord("/") else [])


def _base64_cores(key: bytes) -> list[bytes]:
    """The parts of base64 text that only ``key`` decides, wherever it sits in the encoded bytes."""
    cores = []
    for offset in range(3):
        start = (3 - offset) % 3  # the first byte of the key that begins a 3-byte group
        body = key[start:]
        body = body[: len(body) // 3 * 3]
        if len(body) >= 6:
            encoded = base64.b64encode(body)
            cores += [encoded, encoded.replace(b"+", b"-").replace(b"/", b"_")]
    return list(dict.fromkeys(cores))


class Redactor:
    """``redactor(data)``: ``data`` with every form of the keys it was given replaced by ``[REDACTED]``."""

    def __init__(self) -> None:
        self._raw: tuple[bytes, ...] = ()
        self._pattern: re.Pattern[bytes] | None = None
        self._cores: tuple[bytes, ...] = ()
        self._starts: tuple[bytes, ...] = ()

    def keys(self, keys: Iterable[str]) -> None:
        """Redact these keys from now on (and no others)."""
        raw = tuple(dict.fromkeys(k.encode("utf-8") for k in keys if k))
        self._raw = raw
        encoded = [k for k in raw if len(k) >= MIN_ENCODED]
        self._pattern = (re.compile(b"|".join(b"".join(_char_pattern(c) for c in k) for k in encoded))
                         if encoded else None)
        self._cores = tuple(core for k in encoded for core in _base64_cores(k))
        self._starts = tuple({a + b for k in encoded for a in _forms(k[0]) for b in _forms(k[1])})

    def __call__(self, data: bytes) -> bytes:
        if not self._raw or not data:
            return data
        for key in self._raw:
            if key in data:
                data = data.replace(key, MASK)
        if self._pattern is not None:
            # any form of a key starts with one form of its first two characters: look for those first
            # (on the lowercased data, so each hex escape has one spelling), and only then for the whole
            low = data.lower()
            if any(start in low for start in self._starts):
                data = self._pattern.sub(MASK, data)
        for core in self._cores:
            while core in data:
                at = data.index(core)
                start = at
                while start > 0 and _B64_RUN.fullmatch(data[start - 1:start]):
                    start -= 1
                end = _B64_RUN.match(data, at).end()
                while end < len(data) and data[end:end + 1] == b"=":
                    end += 1
                data = data[:start] + MASK + data[end:]
        return data
