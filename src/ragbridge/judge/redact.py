"""Redaction of the judge's keys, in every form and charset a server may echo them in: :class:`Redactor`,
and the reading of an answer in the charset it says it is in (:func:`as_utf8`).

An endpoint that echoes the key in an error body may encode it: JSON-escaped (``sk-a\\/b``, or every
character as ``\\u0073``), URL-encoded (``sk-a%2Fb``), as HTML character references (``&#x2F;``,
``&#115;``, ``&sol;``), as hexadecimal (``736b2d61``, ``\\x73``), or inside the base64 of ``user:key``
(an ``Authorization: Basic`` header it repeats). It may also answer in a charset other than UTF-8
(UTF-16 or UTF-32, EBCDIC, UTF-7) and say so in its ``Content-Type``: a library that decodes the body
as told would then write the plain key into a score's error. So every answer is first read as what it
says it is (:func:`as_utf8`: a charset that does not spell ASCII as ASCII, declared or, for UTF-16
and UTF-32, recognised as JSON's own rule does, is decoded and the body re-encoded in UTF-8), then
every form of the key is replaced (:meth:`Redactor.__call__`); an answer that still holds a key when
read in another common charset (:data:`VIEWS`: undeclared UTF-16 or UTF-32 in a UTF-8 body, EBCDIC,
UTF-7) is withheld whole (:meth:`Redactor.reply`). The gateway does this to every answer (and every
line of its audit log) before anything else sees it, so no form of the key reaches a library, the
cache, the audit log, ``scores.jsonl`` or a report.

Each character of a key may appear as itself, as a JSON ``\\uXXXX`` escape (hex in either case,
the backslash doubled when the JSON was escaped again), as ``\\/`` for ``/``, as ``%XX``, as
``\\xXX``, as its two hex digits, or as an HTML character reference (hexadecimal or decimal, leading
zeros and the semicolon optional, or its HTML name); any mix is recognised. The base64 forms are
found by the part of the encoding that the key alone decides, at each of the three alignments, in the
standard and the URL-safe alphabet; the whole base64 run that holds it is replaced; so are base32
forms (either case), found the same way. A key shorter than :data:`MIN_ENCODED` characters is redacted
only as itself (its encodings would match ordinary text).

A judge may also echo the key in pieces (two halves in two strings of one answer): every run of at
least :data:`FRAGMENT` characters of a key is redacted too, as itself, with its characters escaped or
referenced in any mix of the forms above, or as hexadecimal (a run that begins with letters of one
case only is found from its next character on: ``required`` of a placeholder key such as
``sk-no-key-required`` is an ordinary word, and no secret).
"""

from __future__ import annotations

import base64
import codecs
import html.entities
import json
import re
from typing import Iterable, Optional

__all__ = ["Redactor", "MASK", "MIN_ENCODED", "FRAGMENT", "VIEWS", "as_utf8"]

MASK = b"[REDACTED]"
MIN_ENCODED = 8
#: the shortest run of a key's characters redacted on its own (a piece of a key split up)
FRAGMENT = 8
_BLOCK = (FRAGMENT + 1) // 2  # a run of FRAGMENT characters holds one aligned block of these whole
_B64_RUN = re.compile(rb"[A-Za-z0-9+/_-]*")
_B32_RUN = re.compile(rb"[A-Za-z2-7]*")
#: one character written as an escape or reference (the forms of `_char_pattern` but two hex digits)
_TOKEN = re.compile(rb"\\{1,2}u00([0-9a-fA-F]{2})|%([0-9a-fA-F]{2})|\\{1,2}[xX]([0-9a-fA-F]{2})"
                    rb"|&#[xX]0*([0-9a-fA-F]{1,6});?|&#0*([0-9]{1,7})(?![0-9]);?|&([A-Za-z][A-Za-z0-9]*;)"
                    rb"|\\{1,2}(/)")
_TOKEN_START = (b"\\", b"%", b"&")
_HEX_RUN = re.compile(rb"[0-9a-fA-F]{%d,}" % (2 * FRAGMENT))
#: the other charsets an answer is read in, to find a key it holds that its own charset hides
VIEWS = ("utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be", "cp500", "utf-7")
_PRINTABLE = bytes(range(0x20, 0x7F))
#: ASCII characters' HTML names (``/``: ``sol``, ``+``: ``plus`` ...)
_HTML_NAMES: dict[int, list[bytes]] = {}
for _name, _char in html.entities.html5.items():
    if len(_char) == 1 and 0x20 < ord(_char) < 0x7F and _name.endswith(";"):
        _HTML_NAMES.setdefault(ord(_char), []).append(_name.encode())


def _hex_class(value: int) -> bytes:
    """A pattern for the two hex digits of ``value`` in either case."""
    out = b""
    for digit in f"{value:02x}":
        out += f"[{digit}{digit.upper()}]".encode() if digit.isalpha() else digit.encode()
    return out


def _char_pattern(ch: int) -> bytes:
    hexed = _hex_class(ch)
    alternatives = [re.escape(bytes([ch])), rb"\\{1,2}u00" + hexed, rb"%" + hexed, rb"\\{1,2}[xX]" + hexed,
                    rb"&#[xX]0*" + hexed + rb";?", b"&#0*" + str(ch).encode() + rb"(?![0-9]);?", hexed]
    alternatives += [b"&" + re.escape(name) for name in _HTML_NAMES.get(ch, ())]
    if ch == ord("/"):
        alternatives.append(rb"\\{1,2}/")
    return b"(?:" + b"|".join(alternatives) + b")"


def _forms(ch: int) -> list[bytes]:
    """A character's forms in lowercased text that may begin a key (the others, HTML references and
    ``\\x`` escapes, are looked for by their first characters)."""
    hexed = f"{ch:02x}".encode()
    forms = [bytes([ch]).lower(), b"\\u00" + hexed, b"%" + hexed, hexed]
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


def _base32_cores(key: bytes) -> list[bytes]:
    """The parts of base32 text that only ``key`` decides (upper and lower case), wherever it sits."""
    cores = []
    for offset in range(5):
        start = (5 - offset) % 5
        body = key[start:]
        body = body[: len(body) // 5 * 5]
        if len(body) >= 5:
            encoded = base64.b32encode(body)
            cores += [encoded, encoded.lower()]
    return list(dict.fromkeys(cores))


def _secret_like(run: bytes) -> bool:
    """Whether a run of a key's characters is redacted: not letters of one case only (a word)."""
    return not (run.isalpha() and (run.islower() or run.isupper()))


def _decoded_view(data: bytes) -> Optional[tuple[bytes, list[int], list[int]]]:
    """``data`` with every escaped or referenced character (`_TOKEN`) as itself, and where each byte
    of that view starts and ends in ``data``; None when nothing is escaped."""
    view, starts, ends, at = bytearray(), [], [], 0
    for m in _TOKEN.finditer(data):
        digits = m.group(1) or m.group(2) or m.group(3) or m.group(4)
        if digits is not None:
            code = int(digits, 16)
        elif m.group(5) is not None:
            code = int(m.group(5))
        elif m.group(6) is not None:
            char = html.entities.html5.get(m.group(6).decode())
            code = ord(char) if char is not None and len(char) == 1 else 0x100
        else:
            code = ord("/")
        if code >= 0x80:
            continue
        view += data[at:m.start()]
        starts += range(at, m.start())
        ends += range(at + 1, m.start() + 1)
        view.append(code)
        starts.append(m.start())
        ends.append(m.end())
        at = m.end()
    if not starts:
        return None
    view += data[at:]
    starts += range(at, len(data))
    ends += range(at + 1, len(data) + 1)
    return bytes(view), starts, ends


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for start, end in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return [(a, b) for a, b in out]


def _charset(content_type: Optional[str]) -> Optional[str]:
    """The text encoding a ``Content-Type`` declares (Python's name for it), or None (none declared,
    or one Python does not know as a text encoding)."""
    for param in (content_type or "").split(";")[1:]:
        name, _, value = param.partition("=")
        if name.strip().lower() == "charset":
            try:
                info = codecs.lookup(value.strip().strip("\"'"))
            except LookupError:
                return None
            return info.name if getattr(info, "_is_text_encoding", True) else None
    return None


def _spells_ascii(encoding: str) -> bool:
    """Whether ``encoding`` writes printable ASCII as ASCII (UTF-8, Latin-1 ...: a key is then the
    same bytes in it)."""
    try:
        return _PRINTABLE.decode("ascii").encode(encoding) == _PRINTABLE
    except (UnicodeError, LookupError):
        return False


def as_utf8(body: bytes, content_type: Optional[str]) -> tuple[bytes, Optional[str]]:
    """``body`` and its content type as UTF-8, when the answer is in a charset that does not spell
    ASCII as ASCII: the charset its ``Content-Type`` declares, or, when it declares none, UTF-16 or
    UTF-32 as JSON's own rule recognises them (a byte-order mark, or the zero bytes of the first
    characters). Any other answer is returned as it is."""
    encoding = _charset(content_type)
    if encoding is None and body[:4].count(0):
        encoding = json.detect_encoding(body)
    if not body or encoding is None or _spells_ascii(encoding):
        return body, content_type
    text = body.decode(encoding, "replace")
    if text[:1] == "\ufeff":
        text = text[1:]
    params = [p for p in (content_type or "application/json").split(";")
              if p.partition("=")[0].strip().lower() != "charset"]
    return text.encode("utf-8", "replace"), "; ".join(p.strip() for p in params) + "; charset=utf-8"


class Redactor:
    """``redactor(data)``: ``data`` with every form of the keys it was given replaced by ``[REDACTED]``;
    ``redactor.reply(body, content_type)`` for an answer, whatever its charset."""

    def __init__(self) -> None:
        self._raw: tuple[bytes, ...] = ()
        self._pattern: re.Pattern[bytes] | None = None
        self._cores: tuple[bytes, ...] = ()
        self._b32: tuple[bytes, ...] = ()
        self._keys: tuple[bytes, ...] = ()
        self._starts: tuple[bytes, ...] = ()

    def keys(self, keys: Iterable[str]) -> None:
        """Redact these keys from now on (and no others)."""
        raw = tuple(dict.fromkeys(k.encode("utf-8") for k in keys if k))
        self._raw = raw
        encoded = [k for k in raw if len(k) >= MIN_ENCODED]
        self._pattern = (re.compile(b"|".join(b"".join(_char_pattern(c) for c in k) for k in encoded))
                         if encoded else None)
        self._cores = tuple(core for k in encoded for core in _base64_cores(k))
        self._b32 = tuple(core for k in encoded for core in _base32_cores(k))
        self._keys = tuple(encoded)
        starts = ({a + b for k in encoded for a in _forms(k[0]) for b in _forms(k[1])} | {b"&#", b"\\x"}
                  | {b"&" + name.lower() for k in encoded for name in _HTML_NAMES.get(k[0], ())})
        self._starts = tuple(starts)

    @property
    def active(self) -> bool:
        """Whether there is a key to redact."""
        return bool(self._raw)

    def __call__(self, data: bytes) -> bytes:
        if not self._raw or not data:
            return data
        for key in self._raw:
            if key in data:
                data = data.replace(key, MASK)
        if self._pattern is not None:
            # any form of a key starts with one form of its first two characters (or an HTML reference
            # or a \x escape): look for those first (on the lowercased data, so each hex escape has one
            # spelling), and only then for the whole
            low = data.lower()
            if any(start in low for start in self._starts):
                data = self._pattern.sub(MASK, data)
        for cores, run in ((self._cores, _B64_RUN), (self._b32, _B32_RUN)):
            for core in cores:
                while core in data:
                    at = data.index(core)
                    start = at
                    while start > 0 and run.fullmatch(data[start - 1:start]):
                        start -= 1
                    end = run.match(data, at).end()
                    while end < len(data) and data[end:end + 1] == b"=":
                        end += 1
                    data = data[:start] + MASK + data[end:]
        return self._without_pieces(data)

    def _runs(self, text: bytes) -> list[tuple[int, int]]:
        """Where ``text`` holds a run of at least `FRAGMENT` characters of a key, each as long as it goes
        on matching the key on either side. Every such run holds one of the key's aligned blocks of
        `_BLOCK` characters whole, so those are looked for (a search for a string, in C) and each
        place found is grown along the key."""
        found = []
        for key in self._keys:
            for i in range(0, len(key) - _BLOCK + 1, _BLOCK):
                block = key[i:i + _BLOCK]
                at = text.find(block)
                while at >= 0:
                    start, end, j, k = at, at + _BLOCK, i + _BLOCK, i
                    while end < len(text) and j < len(key) and text[end] == key[j]:
                        end, j = end + 1, j + 1
                    while start > 0 and k > 0 and text[start - 1] == key[k - 1]:
                        start, k = start - 1, k - 1
                    if end - start >= FRAGMENT and any(_secret_like(text[a:a + FRAGMENT])
                                                       for a in range(start, end - FRAGMENT + 1)):
                        found.append((start, end))
                    at = text.find(block, at + 1)
        return found

    def _without_pieces(self, data: bytes) -> bytes:
        """``data`` with each run of a key's characters (`FRAGMENT` or more) replaced: as it is, with
        its characters escaped or referenced, or in hexadecimal."""
        if not self._keys:
            return data
        spans = self._runs(data)
        if any(start in data for start in _TOKEN_START):
            view = _decoded_view(data)
            if view is not None:
                text, starts, ends = view
                spans += [(starts[a], ends[b - 1]) for a, b in self._runs(text)]
        for m in _HEX_RUN.finditer(data):
            for align in (0, 1):
                digits = m.group()[align:]
                decoded = bytes.fromhex(digits[: len(digits) // 2 * 2].decode())
                base = m.start() + align
                spans += [(base + 2 * a, base + 2 * b) for a, b in self._runs(decoded)]
        if not spans:
            return data
        out, at = [], 0
        for start, end in _merged(spans):
            out += [data[at:start], MASK]
            at = end
        out.append(data[at:])
        return b"".join(out)

    def hidden_in(self, data: bytes) -> Optional[str]:
        """The charset of :data:`VIEWS` in which ``data`` holds a key, or None."""
        if not self._raw or not data:
            return None
        wide = b"\x00" in data
        for view in VIEWS:
            if (view.startswith("utf-16") or view.startswith("utf-32")) and not wide:
                continue  # every ASCII character is a zero byte and its own in these
            if view == "utf-7" and b"+" not in data:
                continue  # UTF-7 without a "+" is ASCII
            if view == "cp500":  # a single-byte charset: the key's own bytes in it
                if any(k.decode("utf-8", "replace").encode(view, "replace") in data for k in self._raw):
                    return view
                continue
            shifts = range(4 if view.startswith("utf-32") else 2 if view.startswith("utf-16") else 1)
            for shift in shifts:
                text = data[shift:].decode(view, "replace").encode("utf-8", "replace")
                if self(text) != text:
                    return view
        return None

    def reply(self, body: bytes, content_type: Optional[str]) -> tuple[bytes, Optional[str], Optional[str]]:
        """An answer's body and content type with the keys removed, and None; read as the charset it
        says it is in (:func:`as_utf8`), every form of the keys replaced. An answer that then still
        holds a key in another charset (:meth:`hidden_in`) is withheld: an error body that says so,
        and that charset third."""
        if not self._raw or not body:
            return body, content_type, None
        body, content_type = as_utf8(body, content_type)
        body = self(body)
        view = self.hidden_in(body)
        if view is None:
            return body, content_type, None
        from .server import error_body

        return (error_body(f"ragbridge judge gateway: the judge's answer held its API key written in "
                           f"{view}; the answer is withheld", code="ragbridge_key_in_answer"),
                "application/json", view)
