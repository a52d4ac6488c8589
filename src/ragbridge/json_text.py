"""Plain values as the indented JSON ``json.dumps(o, indent=2, ensure_ascii=False, allow_nan=False)``
writes, the same characters, by the C encoder: `plain_json` for a value (each dict or list of plain
values in one call) and `rows_text` for a list's rows (dicts of plain values and lists of them, a
thousand cases' rows in one call: marks for the encoder's separators, then the line breaks and
indents of their level). `plain_json_utf8` writes `plain_json`'s text as UTF-8 in one C call
(``ragbridge._json_text``, where the package was built with it) for a value however nested. The JSON
outputs (`ragbridge.report.text.json_chunks`) and the scratch copies of diagnoses
(`ragbridge.analysis.rows.Spool`) write through them; nothing of ragbridge is imported but that C
module.
"""

from __future__ import annotations

import json
import math
import re
from json.encoder import c_make_encoder, encode_basestring
from typing import Any, Callable

try:  # built with the package where a C compiler was found: plain_json's text, in one call
    from ._json_text import indented as _indented
except ImportError:  # pragma: no cover - the package built without it
    _indented = None

__all__ = ["plain_json", "plain_json_utf8", "is_row", "rows_text"]


def plain_json_utf8(o: Any) -> bytes:
    """``plain_json(o).encode("utf-8")``: the same bytes and the same errors (TypeError or ValueError
    for a value that is not plain, UnicodeEncodeError for half a surrogate pair), written in one C
    call where the package was built with it."""
    if _indented is not None:
        got = _indented(o, 0, encode_basestring)
        if got is not None:
            return got
    return plain_json(o).encode("utf-8")


def plain_json(o: Any, level: int = 0) -> str:
    """``o`` as ``json.dumps(o, indent=2, ensure_ascii=False, allow_nan=False)`` writes it at ``level``
    (its members indented ``level + 1`` steps), the same characters, each dict or list of plain values
    by one call of the C encoder; TypeError or ValueError for anything but dicts with string keys,
    lists, strings, whole numbers, finite floats, booleans and None (what reads back as it was)."""
    t = type(o)
    if t is str:
        return encode_basestring(o)
    if t is dict or t is list:
        if not o:
            return "{}" if t is dict else "[]"
        inner = "\n" + "  " * (level + 1)
        if t is dict:
            if not _STR.issuperset(map(type, o)):
                raise TypeError("a key that is not a string")
            values: Any = o.values()
        else:
            values = o
        if _PLAIN.issuperset(map(type, values)):
            text = _flat(level)(o)
            return text[0] + inner + text[1:-1] + "\n" + "  " * level + text[-1]
        if t is list and all(is_row(r, tuples=False) for r in o):
            return "[" + inner + rows_text(o, level + 1) + "\n" + "  " * level + "]"
        if t is dict:
            parts = [encode_basestring(k) + ": " + plain_json(v, level + 1) for k, v in o.items()]
        else:
            parts = [plain_json(v, level + 1) for v in o]
        return ("{" if t is dict else "[") + inner + ("," + inner).join(parts) + "\n" + "  " * level \
            + ("}" if t is dict else "]")
    if o is None or o is True or o is False:
        return "null" if o is None else "true" if o else "false"
    if t is int:
        return int.__repr__(o)
    if t is float and math.isfinite(o):
        return float.__repr__(o)
    raise TypeError(f"{t.__name__} is not a plain JSON value")


#: the types the C encoder writes as they read back (a float only when finite: it refuses others)
_PLAIN = frozenset((str, int, float, bool, type(None)))
_STR = frozenset((str,))
_FLAT: dict[int, Callable[[Any], str]] = {}


def is_row(o: Any, tuples: bool = True) -> bool:
    """Whether ``o`` is a row `rows_text` writes: a dict (not empty) of string keys and plain values or
    lists of them (or tuples, with ``tuples``)."""
    if type(o) is not dict or not o:
        return False
    for k, v in o.items():
        t = type(v)
        if type(k) is not str or (t not in _PLAIN and not ((t is list or (tuples and t is tuple))
                                                          and _PLAIN.issuperset(map(type, v)))):
            return False
    return True


# in the C encoder's text of rows without its first and last brace (members apart by \x01, keys by
# \x02: neither is ever in a string, whose control characters it escapes), a list in a row: from its
# key's \x02 to the bracket that closes it, the only "]" followed by the next member, the next row or
# the end
_ROW_LIST = re.compile(r"\x02\[(.*?)\](?=\x01|\}\x01\{|$)")


def rows_text(rows: list, level: int) -> str:
    """Rows (`is_row`) at ``level`` as ``json.dumps(indent=2)`` writes them, one after the other with
    the separator of their list: one call of the C encoder with marks for its separators, then each
    mark given the line break and indent of its level. TypeError or ValueError as `plain_json`."""
    got = _FLAT.get(-1)
    if got is None:
        got = _FLAT[-1] = _encoder("\x01", "\x02")
    text = got(rows)[2:-2]  # without the list's brackets and the first and last row's braces
    ind = "  " * level
    fields = "\n" + ind + "  "
    deeper = fields + "  "
    text = _ROW_LIST.sub(lambda m: "\x02[" + deeper + m.group(1).replace("\x01", "," + deeper) + fields + "]"
                         if m.group(1) else "\x02[]", text)
    text = text.replace("}\x01{", "\x03").replace("\x01", "," + fields).replace("\x02", ": ")
    return "{" + fields + text.replace("\x03", "\n" + ind + "},\n" + ind + "{" + fields) + "\n" + ind + "}"


def _refused(o: Any) -> Any:
    raise TypeError(f"{type(o).__name__} is not a plain JSON value")


def _flat(level: int) -> Callable[[Any], str]:
    """The C encoder of a dict or list of plain values at ``level``: its item separator the line break
    and indent of its members (made once: `json.JSONEncoder.encode` makes it again at every call)."""
    got = _FLAT.get(level)
    if got is None:
        got = _FLAT[level] = _encoder(",\n" + "  " * (level + 1))
    return got


def _encoder(separator: str, key_separator: str = ": ") -> Callable[[Any], str]:
    """The C encoder with ``separator`` between members (made once: `json.JSONEncoder.encode` makes it
    again at every call)."""
    if c_make_encoder is None:  # pragma: no cover - a Python built without the C encoder
        return json.JSONEncoder(ensure_ascii=False, allow_nan=False, default=_refused,
                                separators=(separator, key_separator)).encode
    # JSONEncoder's own arguments for ensure_ascii=False, allow_nan=False, no indent
    encode = c_make_encoder(None, _refused, encode_basestring, None, key_separator, separator, False, False,
                            False)

    def got(o: Any) -> str:
        return "".join(encode(o, 0))
    return got
