"""Record lines: one line of a canonical JSONL golden set, read without a mapping per chunk.

The common line of a large golden set gives its chunks as ids alone, ``{"id": "d1"}``, or as ids with
texts, ``{"id": "d1", "text": "..."}``, in the two spellings JSON writers use (Python's
``json.dumps`` and compact JSON). `parse_record_line` cuts such chunks out of the line's text as
columns (a `~ragbridge.formats.plain_records.ColumnRecord`: a C split, no object per chunk but its
strings; ids alone one string, joined by line breaks) and parses the small rest; it reads any other
line as its JSON value, for the normalising path. Both readings accept and refuse exactly what
parsing the whole line does, with the checks of
`ragbridge.formats.files.check_parsed` (a key given twice, a lone surrogate escape) and of
`ragbridge.formats.plain_records.plain_record` (ids as the one id rule leaves them) alike.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any, Optional

import pydantic_core

from ..schema import MAX_GRADE
from .files import check_parsed, parse_json
from .plain_records import RANKING_FIELDS, ColumnRecord, good_ids, plain_record

try:  # built with the package where a C compiler was found: `_id_text_columns` of an ASCII body, in C
    from ._columns import split_pairs as _split_pairs
except ImportError:  # pragma: no cover - the package built without it
    _split_pairs = None
try:  # `_joined_ids` of an ASCII body, in C; and the whole cut of a line of ids alone
    from ._columns import cut_ids as _cut_ids, join_ids as _join_ids
except ImportError:  # pragma: no cover - the package built without it
    _cut_ids = _join_ids = None
try:  # the whole of a line of the ranking fields alone in a plain spelling, in C
    from ._columns import plain_line as _plain_line
except ImportError:  # pragma: no cover - the package built without it
    _plain_line = None

__all__ = ["parse_record_line"]

_column_record = tuple.__new__  # a `ColumnRecord` of its three fields, without a Python call

# Each spelling: the opening of the chunks, the text between two chunks, and between an id and a text.
_SPELLINGS = (('"contexts": [{"id": "', '"}, {"id": "', '", "text": "'),
              ('"contexts":[{"id":"', '"},{"id":"', '","text":"'))
_OUTSIDE_BRACES = re.compile(r'"[^"]*"|[^"{}\[\]]+')
_CONTROL = re.compile(r"[\x00-\x1f]")
_ESCAPE = re.compile(r"\\.")


def parse_record_line(text: str) -> Any:
    """One line of a JSONL golden set: a `ColumnRecord` when it is a canonical record whose chunks
    are ids alone or ids and texts (`plain_record`'s checks, the chunks' too, without a mapping per
    chunk), else the parsed JSON value (the fast parser's; for anything it refuses,
    `ragbridge.formats.files.parse_json` and its errors). A line of the ranking fields alone in a
    plain spelling (``plain_line``, C) is read in one call; the steps below give it the same record.
    A line whose every backslash escapes a slash (``\\/``, as pandas' ``to_json`` writes every ``/``)
    is read so with each ``\\/`` as the ``/`` it stands for."""
    whole = text
    if "\\/" in text and text.count("\\") == text.count("\\/"):
        text = text.replace("\\/", "/")  # the same JSON value (a \/ stands in strings)
    if _plain_line is not None:
        got = _plain_line(text, MAX_GRADE)
        if got is not None:
            return _column_record(ColumnRecord, (*got, None))
    cut = _cut_chunks(text)
    if cut is not None:
        reduced, ids, texts = cut
        try:
            raw = pydantic_core.from_json(reduced)
        except ValueError:
            raw = None
        if type(raw) is dict and raw.get("contexts") == []:
            record = plain_record(raw)
            if record is not None:
                # a record of the ranking fields alone: its keys and its labels' (grades, no nesting)
                keys = len(raw) + len(raw.get("relevant") or ()) if raw.keys() <= RANKING_FIELDS else None
                check_parsed(reduced, raw, surrogates=False, keys=keys)
                del record["contexts"]  # the columns' place
                return ColumnRecord(record, ids, texts)
    text = whole  # parsed as it is written: an error's column is the line's
    try:
        value = pydantic_core.from_json(text)
    except ValueError:  # a lone surrogate escape among what it refuses: `parse_json` reports it
        return parse_json(text)
    check_parsed(text, value, surrogates=False)
    return value


def _cut_chunks(text: str) -> Optional[tuple[str, list[str], Optional[list[str]]]]:
    """``text`` with its chunks written as ``[]``, the chunks' ids (ids alone: one string, joined by
    line breaks) and their texts (None: ids alone), when the line's top-level ``contexts`` is a list
    of chunks as `_SPELLINGS` spell them and nothing can make that reading wrong: the chunks are the
    top-level object's (before them, escapes aside, one ``{`` outside strings), no ``contexts`` key
    besides (a key spelled with escapes makes the rest's parse differ or fail `check_parsed`), ids
    without quote, backslash or character that does not print (so each id is its JSON text), texts
    not empty. Else None: the line is parsed as it is."""
    if _cut_ids is not None:  # chunks of ASCII ids alone, found, checked and joined in one C call
        got = _cut_ids(text)
        if got is not None:
            return _around(text, *got, None)
    for opening, between, middle in _SPELLINGS:
        start = text.find(opening)
        if start >= 0:
            break
    else:
        return None
    first = start + len(opening)
    end = _closing(text, first)
    if end < 0:
        return None
    body = text[first:end]
    if "\\" in body:  # an escape: neither column reader takes it (a text with one parses whole)
        return None
    if middle in body:
        if _split_pairs is not None and body.isascii():
            columns = _split_pairs(body, between, middle)
        else:
            columns = _id_text_columns(body, between, middle)
        if columns is None:
            return None
        ids, texts = columns
    else:
        if _join_ids is not None and body.isascii():
            ids = _join_ids(body, between)
        else:
            ids = _joined_ids(body, between)
        texts = None
        if ids is None:
            return None
    return _around(text, start, end, ids, texts)


def _around(text: str, start: int, end: int, ids: Any, texts: Optional[list[str]]) -> Optional[tuple]:
    """`_cut_chunks`' answer for chunks found from ``start`` (their opening) to ``end`` (their closing
    ``"}]``): the checks of what is around them."""
    prefix, suffix = text[:start], text[end + 3:]
    unescaped = _unescaped(prefix)
    if unescaped is None or '"contexts"' in unescaped or not _top_level(unescaped) or '"contexts"' in suffix:
        return None
    return prefix + '"contexts":[]' + suffix, ids, texts


def _unescaped(prefix: str) -> Optional[str]:
    """``prefix`` without its escapes (so every quote left opens or closes a string), or None when the
    quote after it is escaped (the chunks would be inside a string)."""
    if "\\" not in prefix:
        return prefix
    if (len(prefix) - len(prefix.rstrip("\\"))) % 2:
        return None
    return _ESCAPE.sub("", prefix)


def _closing(text: str, at: str) -> int:
    """Where the chunks' closing ``"}]`` is, from ``at``: the first whose quote is not escaped."""
    end = text.find('"}]', at)
    while end > 0 and text[end - 1] == "\\":
        i = end - 1
        while text[i] == "\\":
            i -= 1
        if (end - 1 - i) % 2 == 0:  # an even run of backslashes: escaped backslashes, a real quote
            break
        end = text.find('"}]', end + 1)
    return end


def _joined_ids(body: str, between: str) -> Optional[str]:
    """`_id_column`'s ids joined by line breaks, or None. The compiled ``join_ids`` gives the same for
    an ASCII ``body``, walking it twice and making no string an id."""
    ids = _id_column(body, between)
    return None if ids is None else "\n".join(ids)


def _id_column(body: str, between: str) -> Optional[list[str]]:
    """The ids of chunks given as ids alone (``body``: the text between the first chunk's opening
    quote and the last one's closing quote), or None."""
    ids = body.split(between)
    # 4 quotes in `between` and none in an id; no escape or control character (nor any other
    # character that does not print: a stricter test than JSON's, and a C loop); no id blank (empty:
    # two quotes side by side, or at an end; white space that prints is " " alone, after a quote)
    if body.count('"') != 4 * (len(ids) - 1) or "\\" in body or not body.isprintable():
        return None
    # an id empty (two quotes side by side, or a quote at an end) or with a space at its start or end
    # (a space beside `between`), or not in NFC: the line takes the normalising path, which says what
    # is wrong
    if not body or '""' in body or body[0] in '" ' or body[-1] in '" ' or between + " " in body \
            or " " + between in body:
        return None
    if not body.isascii() and not unicodedata.is_normalized("NFC", body):
        return None
    return ids


def _id_text_columns(body: str, between: str, middle: str) -> Optional[tuple[list[str], list[str]]]:
    """The ids and texts of chunks given as ids and texts, none with an escape, or None. Neither
    separator can occur inside a JSON string (each holds a quote after a character other than a
    backslash), so cutting at both gives ids and texts in turn, exactly when each chunk holds one of
    each (the pieces put back together give the text again) and no piece holds a quote; a text
    without escape or control character is its own JSON text. (A text with escapes is read faster
    by parsing its line whole.) The compiled ``split_pairs`` gives the same for an ASCII ``body``,
    walking it once."""
    parts = body.replace(middle, between).split(between)
    ids, texts = parts[0::2], parts[1::2]
    if len(ids) != len(texts) or "" in texts or between.join(map(middle.join, zip(ids, texts))) != body:
        return None
    joined = "".join(parts)
    if '"' in joined or "\\" in joined:
        return None
    if joined.isprintable() and body.isascii():
        # the ids print and are in NFC (ASCII): left to see is a space at an end of one
        lined = "\n".join(ids)
        if "" in ids or lined[0] == " " or lined[-1] == " " or "\n " in lined or " \n" in lined:
            return None
        return ids, texts
    return (ids, texts) if _CONTROL.search(joined) is None and good_ids(ids) else None


def _top_level(prefix: str) -> bool:
    """Whether what follows ``prefix`` (a line's text, without escapes) is in its top-level object."""
    if prefix.count("{") == 1 and prefix.lstrip(" \t\r\n").startswith("{") and prefix.count('"') % 2 == 0 \
            and "}" not in prefix and "[" not in prefix and "]" not in prefix:
        return True  # no bracket but the first, in strings or not
    return _OUTSIDE_BRACES.sub("", prefix) == "{"
