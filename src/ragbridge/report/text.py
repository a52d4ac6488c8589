"""How values are written out, the same in every output: numbers for people, text for Markdown and
for plain lines, data for JSON.

Numbers: `num` is the one number formatter (``—`` for a missing value, None or NaN); `ci_text`
a figure with its interval (``0.81 [0.70, 0.89]``), `p_text` a p-value.

Text from the data (case ids, tags, metric and backend names, reasons, paths) is escaped for where it
goes: `md_text` for Markdown (HTML-escaped, so no tag survives even where a renderer allows HTML,
a comparison such as ``<=`` or ``> 0.5`` left as it reads; and Markdown-escaped, so it can neither
format nor break a table); `plain_text` for one line of text (JUnit messages, pytest): control
characters shown as escapes, so a value cannot add lines or drive a terminal; `terminal_text` for what
a terminal shows (every command's output goes through it, see `ragbridge.commands.output`): the same,
line breaks and tabs kept; `one_line` folds whitespace for a one-line cell.

JSON: `jsonable` makes any result JSON-ready (NaN and infinities as null, numpy and paths as plain
types), `records` a DataFrame's rows.
"""

from __future__ import annotations

import math
import re
from json.encoder import encode_basestring
from pathlib import Path
from typing import Any, Iterator

from ..json_text import is_row, rows_text
from ..metrics import RAGCHECKER
from ..verdicts import count, p_text  # noqa: F401 (count: the reports' from here)

__all__ = ["MISSING", "num", "interval", "ci_text", "p_text", "md_text", "plain_text", "terminal_text",
           "json_escaped", "one_line", "escape_char", "jsonable", "records", "ragchecker_text", "MISSED",
           "missed_lines", "column_lines", "json_chunks", "version_change_lines"]

MISSING = "—"

# What a terminal acts on instead of showing, or shows other than it reads: the C0 controls but tab and
# line feed, DEL and the C1 controls (ESC and CSI start the sequences that colour, move the cursor,
# clear the screen or set the title), the bidirectional controls (Arabic letter mark, the left-to-right
# and right-to-left marks, embeddings, overrides and isolates: text displayed in another order than
# it reads), the line and paragraph separators, and surrogates (half a character, not printable)
_ACTING = "\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff"
_CONTROL = re.compile(f"[\t\n{_ACTING}]")
_TERMINAL = re.compile(f"[{_ACTING}]")
_MD_SPECIAL = re.compile(r"([\\`*_\[\]|~#])")  # what can format, link or end a table cell mid-line
# ``<`` and ``>`` but in a comparison, where no tag can begin or end: ``<=``, ``>=``, ``< 1``, ``a > 0``
# (``<`` before a space or a digit; ``>`` between spaces or before a digit, not at the start, where
# it would begin a quote)
_ANGLE = re.compile(r"^>|<(?![=\s\d])|(?<!\s)>(?!=)|>(?![=\s\d])")
#: a character `md_text` may change (a text without one is written as it is)
_MD_CHANGED = re.compile(f"[&<>\\\\`*_\\[\\]|~#\r\n\t{_ACTING}]")


def num(value: Any, digits: int = 3, signed: bool = False) -> str:
    """A number with ``digits`` decimals (a sign when ``signed``); ``—`` for None and NaN; anything
    that is not a number as its text."""
    if value is None:
        return MISSING
    try:
        f = float(value)
    except (TypeError, ValueError):
        return str(value)
    if math.isnan(f):
        return MISSING
    text = f"{f:+.{digits}f}" if signed else f"{f:.{digits}f}"
    if text.startswith("-") and not text.strip("-0."):  # -0.000: a value that rounds to zero has no sign
        text = ("+" if signed else "") + text[1:]
    return text


def interval(low: Any, high: Any, digits: int = 2, signed: bool = False) -> str:
    """``[0.70, 0.89]``; ``""`` when either end is missing."""
    lo, hi = num(low, digits, signed), num(high, digits, signed)
    return "" if MISSING in (lo, hi) else f"[{lo}, {hi}]"


def ci_text(value: Any, low: Any, high: Any, digits: int = 2, signed: bool = False) -> str:
    """``0.81 [0.70, 0.89]``; ``—`` when undefined; no brackets when the interval is undefined."""
    text = num(value, digits, signed)
    brackets = interval(low, high, digits, signed)
    return f"{text} {brackets}" if text != MISSING and brackets else text


#: the two ways a backend and the human labels disagree: the key of a validation row, in words
MISSED = (("missed_fails", "failure(s) missed (human fail, backend pass)"),
          ("missed_passes", "pass(es) missed (human pass, backend fail)"))


def missed_lines(row: dict, where: str) -> list[str]:
    """Every case on which a backend and the human labels disagree (a `validate` row), both ways, as
    lines that begin with ``where``."""
    return [f"{where}: {len(row[key])} {what}: " + ", ".join(row[key]) for key, what in MISSED if row[key]]


def column_lines(columns: dict, joined: dict) -> list[str]:
    """Runs read side by side (`ragbridge.analysis.join_runs`): which run and judge each column comes
    from, and the cases the runs do not share, as lines."""
    lines = [f"{len(joined['runs'])} runs read side by side, a column per backend and run: "
             + ", ".join(joined["runs"])]
    for name, c in columns.items():
        judge = c.get("judge")
        lines.append(f"  {name}: {c['backend']}" + (f" {c['version']}" if c.get("version") else "")
                     + f" in {c['run']}, " + (f"judge {judge.get('model')} at {judge.get('base_url')}"
                                                 + (" (stub)" if judge.get("stub") else "")
                                                 if judge else "no judge"))
    if joined.get("differing"):
        lines.append(f"  {joined['differing']:,} case(s) differ between the runs and are left out (first: "
                     + ", ".join(joined["differing_ids"]) + ")")
    if joined.get("only_in_some"):
        lines.append(f"  {joined['only_in_some']} case(s) are in only some of the runs: missing in the "
                     "others' columns")
    return lines


def version_change_lines(version_changes: dict) -> list[str]:
    """What run.json's ``version_changes`` says, as lines: per library held at two or more versions,
    its backends and versions, then what its plugin says changes at each version between them."""
    lines = []
    for library, held in (version_changes or {}).items():
        versions = held.get("versions") or {}
        ordered = list(versions.values())
        lines.append(f"{library} {ordered[0]} to {ordered[-1]} ("
                     + ", ".join(f"{name}: {v}" for name, v in versions.items()) + "): "
                     + ("what changes, by its plugin:" if held.get("changes") else
                        "its plugin names no change between them"))
        lines += [f"  {v}: {text}" for v, text in (held.get("changes") or {}).items()]
    return lines


def escape_char(m: "re.Match[str]") -> str:
    """The ``re.sub`` replacement that writes a matched character as its Python escape (``\\x00``)."""
    return m.group().encode("unicode_escape").decode("ascii")


def plain_text(text: Any) -> str:
    """``text`` for one line of plain text: control characters (newlines included) as ``\\n``-style
    escapes."""
    return _CONTROL.sub(escape_char, str(text))


def terminal_text(text: str) -> str:
    """``text`` as a terminal may show it: every character of `_ACTING` (a control character, ESC
    included; a bidirectional control; half a surrogate pair) as its escape (``\\x1b``, ``\\u202e``),
    line breaks and tabs as they are."""
    return text if text.isprintable() else _TERMINAL.sub(escape_char, text)


def json_escaped(text: str) -> str:
    """JSON ``text`` (a document ``json.dumps(..., ensure_ascii=False)`` wrote) with the characters
    `terminal_text` shows as escapes written as JSON's ``\\uXXXX`` escapes: the same document, the
    same values, nothing a terminal acts on."""
    return _TERMINAL.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def json_chunks(data: Any, size: int = 1 << 16, escaped: bool = True) -> Iterator[str]:
    """``data`` (JSON-ready: `jsonable`) as the JSON document ``json.dumps(data, indent=2,
    ensure_ascii=False, allow_nan=False)`` writes, in pieces of about ``size`` characters, each made
    as it is written: rows made as they are read are written one by one (with ``escaped``,
    `json_escaped` of the pieces: nothing a terminal acts on; without, that document's characters
    exactly, for a file)."""
    buffer: list[str] = []
    held = 0
    done = json_escaped if escaped else (lambda text: text)
    for chunk in _indented(data, 0, {}):
        buffer.append(chunk)
        held += len(chunk)
        if held >= size:
            yield done("".join(buffer))
            buffer, held = [], 0
    if buffer:
        yield done("".join(buffer))


_SCALARS = (str, int, float, bool, type(None))


def _indented(o: Any, level: int, flat: dict) -> Iterator[str]:
    """The pieces of ``json.JSONEncoder(indent=2, ensure_ascii=False, allow_nan=False).iterencode(o)``,
    the same characters: a long list or dict (rows made as they are read among them) a member at a
    time, anything smaller as one piece (`_text`)."""
    if not isinstance(o, (list, tuple, dict)) or not o or (level > 1 and len(o) <= 256
                                                            and type(o) in (dict, list, tuple)):
        yield _text(o, level, flat)
        return
    is_dict = isinstance(o, dict)
    inner = "\n" + "  " * (level + 1)
    yield "{" if is_dict else "["
    first, sub, containers = True, level + 1, (list, tuple, dict)
    rows: list = []  # a list's rows (`is_row`) written together
    for item in (o.items() if is_dict else o):
        row = not is_dict and is_row(item)
        if row:
            rows.append(item)
            if len(rows) < _ROWS:
                continue
        if rows:
            yield (inner if first else "," + inner) + rows_text(rows, sub)
            first, rows = False, []
        if row:
            continue
        lead = inner if first else "," + inner
        first = False
        if is_dict:
            key, item = item
            lead += _key(key) + ": "
        if not isinstance(item, containers) or not item or (sub > 1 and len(item) <= 256
                                                             and type(item) in containers):
            yield lead + _text(item, sub, flat)  # (as the call below would: one piece)
        else:
            yield lead
            yield from _indented(item, sub, flat)
    if rows:
        yield (inner if first else "," + inner) + rows_text(rows, sub)
    yield "\n" + "  " * level + ("}" if is_dict else "]")


_ROWS = 1000  # rows written by one call of the C encoder (`rows_text`)


def _text(o: Any, level: int, flat: dict) -> str:
    """``o`` at ``level`` as the Python encoder indents it: a dict or list of plain values by the C
    encoder (its item separator the line break and indent of its level), about four times faster."""
    import json

    if isinstance(o, (str, int, float)) or o is None:
        return _scalar(o)
    if not isinstance(o, (list, tuple, dict)):
        return "".join(json.JSONEncoder(indent=2, ensure_ascii=False, allow_nan=False).iterencode(o))
    is_dict = isinstance(o, dict)
    if not o:
        return "{}" if is_dict else "[]"
    inner = "\n" + "  " * (level + 1)
    values = o.values() if is_dict else o
    if type(o) in (dict, list, tuple) and all(type(v) in _SCALARS for v in values):
        if level not in flat:
            flat[level] = json.JSONEncoder(ensure_ascii=False, allow_nan=False,
                                           separators=("," + inner, ": ")).encode
        text = flat[level](o)
        return text[0] + inner + text[1:-1] + "\n" + "  " * level + text[-1]
    if is_row(o):  # a dict of plain values and lists of them (a case's tags among its fields)
        return rows_text([o], level)
    if is_dict:
        parts = [_key(k) + ": " + _text(v, level + 1, flat) for k, v in o.items()]
    else:
        parts = [_text(v, level + 1, flat) for v in o]
    return ("{" if is_dict else "[") + inner + ("," + inner).join(parts) + "\n" + "  " * level \
        + ("}" if is_dict else "]")


def _key(key: Any) -> str:
    """A dict key as the encoder writes it: a string, or a number, true, false or null in quotes."""
    return _scalar(key) if isinstance(key, str) else '"' + _scalar(key) + '"'


def _scalar(o: Any) -> str:
    """A plain value as the Python encoder writes it (`_indented`)."""
    if isinstance(o, str):
        return encode_basestring(o)
    if o is None or o is True or o is False:
        return {None: "null", True: "true", False: "false"}[o]
    if isinstance(o, int):
        return int.__repr__(o)
    if o != o or o in (math.inf, -math.inf):
        raise ValueError("Out of range float values are not JSON compliant: " + repr(o))
    return float.__repr__(o)


def md_text(text: Any) -> str:
    """``text`` safe anywhere in Markdown, a table cell included: HTML-escaped (``&``, and ``<`` and
    ``>`` wherever they could be markup: not in ``<=``, ``>= 0.8``, ``< 1``),
    Markdown punctuation and backslashes backslash-escaped, line breaks as ``<br>``, other control
    characters as escapes."""
    if text is None:
        return ""
    if _MD_CHANGED.search(text := str(text)) is None:
        return text
    s = _ANGLE.sub(lambda m: "&lt;" if m.group() == "<" else "&gt;", text.replace("&", "&amp;"))
    s = _MD_SPECIAL.sub(r"\\\1", s)
    s = s.replace("\r\n", "<br>").replace("\r", "<br>").replace("\n", "<br>")
    return plain_text(s)


def one_line(text: Any) -> str:
    """``text`` with every run of whitespace (newlines too) as one space; ``""`` for None and NaN."""
    if text is None or (isinstance(text, float) and math.isnan(text)):
        return ""
    return " ".join(str(text).split())


def ragchecker_text(row: dict[str, Any]) -> str:
    """For a summary row of a RAGChecker claim diagnostic: the figure a RAGChecker run reports for the
    same cases (``ragchecker_mean``, `ragbridge.run.summary`), and how many cases it counts as 0
    where ragbridge's value is undefined; "" for any other row."""
    rc = row.get("ragchecker_mean")
    if rc is None or rc != rc:
        return ""
    name, inverted = RAGCHECKER.get(row["metric"], (None, False))
    zeros = row.get("n_ragchecker_zero") or 0
    orientation = f" (its {name}, lower is better)" if inverted else ""
    return (f"RAGChecker's mean {num(rc)}{orientation}"
            + (f", {zeros} undefined case(s) counted as its 0" if zeros else ""))


def records(frame) -> list[dict[str, Any]]:
    """A DataFrame as a list of JSON-ready rows (NaN as None, numpy scalars as Python numbers)."""
    if frame is None or len(frame) == 0:
        return []
    return jsonable(frame.to_dict("records"))


def _plain(v: Any) -> bool:
    """Whether ``v`` is JSON-ready as it is: a plain value (a finite float) or a list of them."""
    t = type(v)
    if t is float:
        return math.isfinite(v)
    if t is list:
        return all(type(x) in _PLAIN or (type(x) is float and math.isfinite(x)) for x in v)
    return t in _PLAIN


_PLAIN = (str, int, bool, type(None))


def jsonable(obj: Any) -> Any:
    """``obj`` with DataFrames as row lists, NaN and infinities as None, numpy and paths as plain types."""
    if obj is None or isinstance(obj, (bool, str, int)):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if type(obj) is dict and all(type(k) is str and _plain(v) for k, v in obj.items()):
        return obj  # JSON-ready as it is (a row of a large output: no copy)
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if type(obj) is not list and isinstance(obj, list) and hasattr(obj, "mapped"):
        # rows made as they are read (`ragbridge.analysis.rows.Rows`): kept so
        return obj if getattr(obj, "plain", False) else obj.mapped(jsonable)
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, (set, frozenset)):
        return sorted(jsonable(v) for v in obj)
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "to_dict") and hasattr(obj, "columns"):  # a DataFrame
        return records(obj)
    if hasattr(obj, "item") and callable(obj.item):  # a numpy scalar
        return jsonable(obj.item())
    if hasattr(obj, "tolist"):  # a numpy array
        return jsonable(obj.tolist())
    return str(obj)
