"""Rows made as they are read: every case of a large run, listed without holding them.

An output that lists every case (a diff's cases that got worse, the cases behind a gate's rule, the
flips of a calibration, a report's cases) would hold a dict per case; at a million cases that is
more than memory. `Rows` is a list whose rows are made when read, a block at a time, from what the
analysis keeps (the cases' places in NumPy arrays): its length, slices and iteration behave as a
list's, and `ragbridge.commands.output.print_json` and `ragbridge.report.text.jsonable` write it
row by row. Anything that needs a real list (pandas) gets ``list(rows)``.
"""

from __future__ import annotations

import json
import math
import pickle
import re
import tempfile
from array import array
from json.encoder import c_make_encoder, encode_basestring
from typing import Any, Callable, Iterator, Optional

__all__ = ["Rows", "Spool", "BLOCK", "plain_json"]

#: rows made at a time
BLOCK = 2000


class Rows(list):
    """``n`` rows, row ``i`` being ``make(i, i + 1)[0]``; ``make(start, stop)`` makes a block."""

    def __init__(self, n: int, make: Callable[[int, int], list], block: int = BLOCK):
        super().__init__()
        self._n, self._make, self._block = n, make, block

    def __len__(self) -> int:
        return self._n

    def __bool__(self) -> bool:
        return self._n > 0

    def __iter__(self) -> Iterator[Any]:
        for start in range(0, self._n, self._block):
            yield from self._make(start, min(self._n, start + self._block))

    def __getitem__(self, i):
        if isinstance(i, slice):
            start, stop, step = i.indices(self._n)
            if step != 1:
                return list(self)[i]
            return self._make(start, stop) if stop > start else []
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError("row index out of range")
        return self._make(i, i + 1)[0]

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, list) and len(self) == len(other)
                and all(a == b for a, b in zip(self, other)))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Rows({self._n} rows)"

    def mapped(self, f: Callable[[Any], Any]) -> "Rows":
        """These rows, each passed through ``f`` as it is made."""
        return Rows(self._n, lambda start, stop: [f(r) for r in self._make(start, stop)], self._block)

    def head(self, k: int) -> list:
        return self[:k]


class Spool:
    """Records kept on disk in order (a nameless scratch file that goes with the object), added one at
    a time and read back as `Rows`: results made one by one that are too many to hold (a diagnosis
    of every failing case of a large run).

    With ``plain`` (a record as JSON values) and ``back`` (the record again from them), a record whose
    ``plain`` holds only plain JSON values is kept as their JSON text (`plain_json`), which reads back
    to the same values, and `texts` gives that text as it is (what writes the records as JSON needs
    nothing else); any other record is pickled."""

    def __init__(self, plain: Optional[Callable[[Any], Any]] = None,
                 back: Optional[Callable[[Any], Any]] = None) -> None:
        self._file = tempfile.TemporaryFile()
        self._plain, self._back = plain, back
        self._at = array("q")  # where each record starts
        self._json = bytearray()  # whether each is JSON text (1) or a pickle (0)
        self._end = 0  # where the next one goes
        self._read = False  # the file was read since the last record was added: seek its end first

    def __len__(self) -> int:
        return len(self._at)

    def add(self, record: Any) -> None:
        data = None
        if self._plain is not None:
            try:
                data = plain_json(self._plain(record)).encode("utf-8")
            except (TypeError, ValueError):  # not plain JSON values (or half a surrogate pair)
                pass
        self._json.append(data is not None)
        if data is None:
            data = pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL)
        if self._read:
            self._file.seek(self._end)
            self._read = False
        self._at.append(self._end)
        self._file.write(data)
        self._end += len(data)

    def rows(self) -> Rows:
        """The records, in the order they were added."""
        return self._kept(lambda text: self._back(json.loads(text)))

    def texts(self) -> Rows:
        """Per record, in order: its JSON text (`plain_json` at level 0) where it is kept as one, else
        the record."""
        return self._kept(lambda text: text)

    def _kept(self, from_text: Callable[[str], Any]) -> Rows:
        at = array("q", self._at)
        at.append(self._end)
        kinds = bytes(self._json)

        def make(start: int, stop: int) -> list:
            if stop <= start:
                return []
            self._read = True
            self._file.seek(at[start])
            data = memoryview(self._file.read(at[stop] - at[start]))
            base = at[start]
            return [from_text(str(data[at[k] - base:at[k + 1] - base], "utf-8")) if kinds[k]
                    else pickle.loads(data[at[k] - base:at[k + 1] - base]) for k in range(start, stop)]
        return Rows(len(at) - 1, make)


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
