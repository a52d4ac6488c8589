"""A run folder read back, checked as input is: what every command that reads a run trusts.

A run folder is input to every reader of a run (``gate``, ``diff``, ``report``, ``compare``, a resumed
run...), and it may have been edited, damaged or written by hand. What a run never writes is an error
naming the file, the line and the field (a `ragbridge.formats.DatasetError`: exit 2 on the command
line), never a value an analysis takes as it stands:

- ``scores.jsonl`` (`score_from_line`, `read_scores`): ``case_id``, ``metric`` and ``backend`` are
  names as the id rule leaves them (`ragbridge.schema.clean_id`); ``value`` is null or a JSON number
  from 0 to 1 (not ``50.0``, ``"0.9"``, ``true``, ``-1``, ``NaN`` or ``Infinity``); ``repeat``, the
  judge calls and token counts are whole numbers from 0 (a repeat index below `MAX_REPEATS`);
  ``seconds`` and ``cost`` finite and not negative; every other field of the type `Score` gives it,
  without conversion, and no field given twice. A last line cut short by a killed run (no line
  break, not JSON) is dropped and counted; a line that cannot be read anywhere else is an error.
- ``run.json`` (`read_manifest`): the fields analyses trust: the pass marks (numbers from 0 to 1),
  the counts (whole numbers from 0; money finite and not negative), the status, the start and end
  times, the options a reader applies (``k``, ``repeats``, ``pass_repeats``), the number of cases
  and each backend's wall time, each of the type the run writes.
- ``cases.jsonl`` is a golden set in canonical form, read by `ragbridge.formats.load_cases` with its
  own checks.

The score cache's entries are read by `score_from_line` too (one that fails is a miss).

In columns (`read_columns`: what every analysis and report reads, `ragbridge.run.columns`): the
same files a block of lines at a time, nothing held but the columns; a score line as a run writes it
is checked by the C reader (`ragbridge.formats._columns.score_lines`, where the package was built
with it) or by `plain_fields` (the checks of `score_from_line`'s quick path, on the parsed line),
any other line by `score_from_line` itself, so the readings accept and refuse exactly the same
lines; the scores an output names are read back the same way (`scores_from_lines`).

Size: the two readings of a run folder (a line at a time into objects, a block at a time into
columns) are kept in one module with the checks they share, so that neither can accept what the
other refuses.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import re
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence

import numpy as np
import pydantic_core
from pydantic import ValidationError

from ..formats.files import (DatasetError, check_parsed, jsonl_lines, no_cycle_collection, parse_json,
                             parse_line)
from ..formats.plain_records import good_id
from ..schema import Case, RunManifest, Score, clean_id
from ..limits import MAX_REPEATS  # a recorded repeat index is below it
from .column_copy import file_keys, load_copy, save_copy
from .case_ids import CaseIds
from .columns import (ERROR, NOT_RUN, SCORED, UNDEFINED, CaseIndex, ColumnsBuilder, RunColumns, ScoreStore,
                      digests, index_part)

try:  # built with the package where a C compiler was found: score lines as a run writes them, in C
    from ..formats._columns import score_lines as _score_lines
except ImportError:  # pragma: no cover - the package built without it
    _score_lines = None

__all__ = ["STATUSES", "score_from_line", "scores_from_lines", "read_scores", "read_manifest", "read_columns",
           "read_case_index", "plain_fields", "FileStore"]

#: what ``run.json``'s ``status`` may say
STATUSES = ("running", "complete", "interrupted", "incomplete", "dry-run")

_LINE_HINT = "each line must be one JSON object"  # `jsonl_lines`' (what `read_scores` reads with)
_SCORES_HINT = ("a run writes every score so: restore the file, or score the cases again into a "
                "fresh run folder")
_MANIFEST_HINT = ("a run writes its run.json so: restore the file, or score the cases again into a "
                  "fresh run folder")


def _got(value: Any) -> str:
    """``value`` as JSON spells it (``true``, ``"0.9"``, ``NaN``), cut to 60 characters."""
    text = json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def _number(value: Any) -> bool:
    """Whether ``value`` is a JSON number (an int or a float, not a boolean)."""
    return type(value) is int or type(value) is float


def _count(value: Any) -> Optional[str]:
    """What is wrong with ``value`` as a count (a whole number from 0), or None."""
    if type(value) is not int or value < 0:
        return f"must be a whole number from 0, got {_got(value)}"
    return None


def _amount(value: Any, nullable: bool = False) -> Optional[str]:
    """What is wrong with ``value`` as an amount (a finite number from 0; null when ``nullable``)."""
    if value is None and nullable:
        return None
    if not _number(value) or not math.isfinite(value) or value < 0:
        return f"must be {'null or ' if nullable else ''}a finite number from 0, got {_got(value)}"
    return None


def _unit(value: Any, nullable: bool = True) -> Optional[str]:
    """What is wrong with ``value`` as a score (null or a JSON number from 0 to 1), or None."""
    if value is None and nullable:
        return None
    if not _number(value) or not math.isfinite(value) or not 0 <= value <= 1:
        return f"must be {'null or ' if nullable else ''}a number from 0 to 1, got {_got(value)}"
    return None


def _name(value: Any, what: str) -> Optional[str]:
    """What is wrong with ``value`` as a name (a case id, a metric or a backend), or None."""
    if type(value) is not str:
        return f"must be a string, got {_got(value)}"
    try:
        clean = clean_id(value, what)
    except ValueError as exc:
        return str(exc)
    if clean != value:
        return f"{what} {value!r} is not as ragbridge writes it (without white space at its ends, in NFC)"
    return None


def _score_problem(raw: dict[str, Any]) -> Optional[tuple[str, str]]:
    """The first field of a recorded score that a run never writes, and what is wrong with it."""
    for key, what in (("case_id", "case id"), ("metric", "metric"), ("backend", "backend")):
        if key in raw:
            problem = _name(raw[key], what)
            if problem:
                return key, problem
    problem = _unit(raw.get("value"))
    if problem:
        return "value", problem
    for key in ("judge_calls", "prompt_tokens", "completion_tokens", "repeat"):
        if key in raw:
            problem = _count(raw[key])
            if problem:
                return key, problem
    if raw.get("repeat", 0) >= MAX_REPEATS:
        return "repeat", f"must be below {MAX_REPEATS} (a run makes at most {MAX_REPEATS} repeats), got " \
                         f"{raw['repeat']}"
    if "seconds" in raw:
        problem = _amount(raw["seconds"])
        if problem:
            return "seconds", problem
    problem = _amount(raw.get("cost"), nullable=True)
    if problem:
        return "cost", problem
    repeats = raw.get("repeats")
    if isinstance(repeats, dict):
        return _repeats_problem(repeats)
    return None


def _repeats_problem(rep: dict[str, Any]) -> Optional[tuple[str, str]]:
    n = rep.get("n")
    if type(n) is not int or not 1 <= n <= MAX_REPEATS:
        return "repeats.n", f"must be a whole number from 1 to {MAX_REPEATS}, got {_got(n)}"
    for key in ("values", "passed"):
        items = rep.get(key)
        if not isinstance(items, list) or len(items) != n:
            return f"repeats.{key}", f"must be a list of {n} (repeats.n) items, got {_got(items)}"
    for i, v in enumerate(rep["values"]):
        problem = _unit(v)
        if problem:
            return f"repeats.values[{i}]", problem
    problem = _amount(rep.get("sd"), nullable=True)
    if problem:
        return "repeats.sd", problem
    m = rep.get("pass_at_least")
    if m is not None and (type(m) is not int or not 1 <= m <= n):
        return "repeats.pass_at_least", f"must be null or a whole number from 1 to {n}, got {_got(m)}"
    return None


def score_from_line(text: str) -> Score:
    """One line of ``scores.jsonl`` as a `Score`, checked (see the module docstring); a
    `DatasetError` naming the field (the caller adds the file and line) for anything a run does not
    write.

    The line a run writes is read at once (pydantic's strict JSON reading, a look at the score);
    any other (one whose keys may nest or repeat, a NaN or infinity, a value out of range, a type
    converted) is read field by field, which says what is wrong (`_score_checked`)."""
    try:
        score = Score.model_validate_json(text, strict=True)
    except ValueError:
        return _score_checked(text)
    if (not _plain_score(score) or text.count('":') != len(score.model_fields_set)
            or (score.value is None and '"value":null' not in text)):  # NaN, 1e999 read as None
        return _score_checked(text)
    return score


def _plain_score(s: Score) -> bool:
    """Whether ``s`` (read strictly) is a score as a run writes it, with no repeats summary."""
    return ((s.value is None or 0.0 <= s.value <= 1.0) and s.judge_calls >= 0 and s.prompt_tokens >= 0
            and s.completion_tokens >= 0 and s.repeat < MAX_REPEATS and 0.0 <= s.seconds < math.inf
            and (s.cost is None or 0.0 <= s.cost < math.inf) and s.repeats is None
            and good_id(s.case_id) and _good_name(s.metric) and _good_name(s.backend))


_NAMES: set[str] = set()  # metric and backend names found good: a run holds few of them


def _good_name(name: str) -> bool:
    if name in _NAMES:
        return True
    if good_id(name):
        if len(_NAMES) < 10_000:
            _NAMES.add(name)
        return True
    return False


def scores_from_lines(lines: list[bytes]) -> list[Score]:
    """`score_from_line` of each of ``lines`` (UTF-8 bytes without their line break): the same scores
    and the same errors. A line as a run writes it is read by the C reader (`_columns.score_lines`,
    whose checks are the quick path's) and its `Score` made of the fields it checked, without
    pydantic's reading of them (``model_construct``'s steps, the fields set those the line gives); any
    other line is read by `score_from_line`."""
    if _score_lines is None:  # pragma: no cover - the package built without the C reader
        return [score_from_line(raw.decode("utf-8")) for raw in lines]
    made, _ = _score_lines(lines, MAX_REPEATS, Score, _FIELDS_SET)
    if None in made:
        made = [s if s is not None else score_from_line(raw.decode("utf-8")) for s, raw in zip(made, lines)]
    return made


#: the fields a line as a run writes it gives (`Score.model_fields_set`), by which of the optional
#: ones it gives (bits 0 to 3: repeat, not_run, cost, cached; `_columns.score_lines`)
_FIELDS_SET = tuple(frozenset(("case_id", "metric", "backend", "value", "native_metric", "native_value",
                               "passed", "reason", "error", "judge_calls", "prompt_tokens",
                               "completion_tokens", "seconds", "evidence"))
                    | {k for bit, k in enumerate(("repeat", "not_run", "cost", "cached")) if mask >> bit & 1}
                    for mask in range(16))


def _score_checked(text: str) -> Score:
    """`score_from_line`, field by field."""
    try:
        raw = pydantic_core.from_json(text)
    except ValueError:  # what the fast parser refuses (a lone surrogate escape...): parse_json says why
        raw = parse_json(text)
    check_parsed(text, raw, surrogates=False)
    if type(raw) is not dict:
        raise DatasetError(f"must be a JSON object (one score), got {_got(raw)}", hint=_SCORES_HINT)
    problem = _score_problem(raw)
    if problem is not None:
        raise DatasetError(problem[1], field=problem[0], hint=_SCORES_HINT)
    try:
        return Score.model_validate(raw, strict=True)
    except ValidationError as exc:
        raise _field_error(exc, _SCORES_HINT) from None


def _field_error(exc: ValidationError, hint: str) -> DatasetError:
    """pydantic's first error as a `DatasetError` naming the field (``evidence.claims[0].verdict``)."""
    first = exc.errors()[0]
    field = ""
    for part in first.get("loc") or ():
        field += f"[{part}]" if isinstance(part, int) else (f".{part}" if field else str(part))
    if first["type"] == "extra_forbidden":
        message = "is not a field a run writes"
    elif first["type"] == "missing":
        message = "is required but missing"
    else:
        message = f"{first['msg']}, got {_got(first.get('input'))}"
    return DatasetError(message, field=field or None, hint=hint)


def read_scores(path: Path) -> tuple[list[Score], int]:
    """The scores in ``scores.jsonl`` (checked by `score_from_line`), the last line per (case, metric,
    backend, repeat) winning, and how many lines were dropped: 1 for a last line cut short by a
    killed run (no line break, not JSON), else 0. Any other line that is not a score a run writes is
    a `DatasetError` naming the file, the line and the field."""
    if not path.exists():
        return [], 0
    bad: list[DatasetError] = []
    latest: dict[tuple[str, str, str, int], Score] = {}
    for _, score in jsonl_lines(path, allow_empty=True, on_bad=bad.append, parse=score_from_line):
        if bad:
            raise bad[0]  # a line that cannot be read, with scores after it: not a cut last line
        latest[score.repeat_key] = score
    if bad:
        if len(bad) > 1 or not _cut_short(path, bad[0]):
            raise bad[0]
    return list(latest.values()), len(bad)


def _cut_short(path: Path, error: DatasetError) -> bool:
    """Whether ``error`` is that of a last line a killed run cut short: not JSON, and the file does not
    end with a line break."""
    if error.field is not None or not error.message.startswith(("not valid JSON", "invalid UTF-8")):
        return False
    with open(path, "rb") as f:
        f.seek(-1, 2)
        return f.read(1) != b"\n"


# --------------------------------------------------------------------------------------------
# run.json


def read_manifest(path: Path) -> RunManifest:
    """``run.json`` at ``path`` as a `RunManifest`, checked (see the module docstring); a
    `DatasetError` naming the file, the line and the field otherwise."""
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DatasetError(f"invalid UTF-8 (byte 0x{data[exc.start]:02x})", path=path,
                           line=data.count(b"\n", 0, exc.start) + 1, hint=_MANIFEST_HINT) from None
    try:
        raw = parse_json(text)
    except json.JSONDecodeError as exc:
        raise DatasetError(f"not valid JSON: {exc.msg} at column {exc.colno}", path=path, line=exc.lineno,
                           hint=_MANIFEST_HINT) from None
    except DatasetError as exc:
        exc.path = str(path)
        raise
    if type(raw) is not dict:
        raise DatasetError(f"must be a JSON object (a run's manifest), got {_got(raw)}", path=path,
                           hint=_MANIFEST_HINT)
    try:
        manifest = RunManifest.model_validate(raw, strict=True)
    except ValidationError as exc:
        error = _field_error(exc, _MANIFEST_HINT)
        error.path, error.line = str(path), _line_of(text, error.field)
        raise error from None
    problem = _manifest_problem(manifest)
    if problem is not None:
        field, message = problem
        raise DatasetError(message, path=path, line=_line_of(text, field), field=field, hint=_MANIFEST_HINT)
    return manifest


def _manifest_problem(m: RunManifest) -> Optional[tuple[str, str]]:
    """The first field of ``run.json`` that a run never writes, and what is wrong with it."""
    if m.status not in STATUSES:
        return "status", f"must be one of {', '.join(STATUSES)}, got {_got(m.status)}"
    for key in ("started_at", "finished_at", "heartbeat_at"):
        value = getattr(m, key)
        if value is not None and not _time(value):
            return key, f"must be a date and time (ISO 8601), got {_got(value)}"
    for backend, marks in m.pass_marks.items():
        for metric, mark in marks.items():
            problem = _unit(mark, nullable=False)
            if problem:
                return f"pass_marks.{backend}.{metric}", problem
    return (_dataset_problem(m.dataset) or _options_problem(m.options) or _counts_problem(m.counts)
            or _timing_problem(m.timing))


def _time(value: str) -> bool:
    try:
        dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return False
    return True


def _dataset_problem(dataset: dict[str, Any]) -> Optional[tuple[str, str]]:
    if "n_cases" in dataset:
        problem = _count(dataset["n_cases"])
        if problem:
            return "dataset.n_cases", problem
    for key in ("fingerprint", "path"):
        if dataset.get(key) is not None and type(dataset[key]) is not str:
            return f"dataset.{key}", f"must be a string, got {_got(dataset[key])}"
    return None


def _options_problem(options: dict[str, Any]) -> Optional[tuple[str, str]]:
    k = options.get("k")
    if k is not None and (type(k) is not int or k < 1):
        return "options.k", f"must be null or a whole number from 1, got {_got(k)}"
    repeats = options.get("repeats")
    if repeats is not None and (type(repeats) is not int or not 1 <= repeats <= MAX_REPEATS):
        return ("options.repeats",
                f"must be null or a whole number from 1 to {MAX_REPEATS}, got {_got(repeats)}")
    m = options.get("pass_repeats")
    if m is not None and (type(m) is not int or not 1 <= m <= (repeats or MAX_REPEATS)):
        return ("options.pass_repeats",
                f"must be null or a whole number from 1 to {repeats or MAX_REPEATS} (options.repeats), "
                f"got {_got(m)}")
    return None


#: the counts of ``run.json`` that are money, and so need not be whole
_MONEY = re.compile(r"(^|\.)(cost|max_cost|total|by_backend|by_metric)(\.|$)")
#: the counts that are text: the currency, the metrics redefined since an earlier session, what the
#: errored scores of each backend and cause say (``failures``)
_TEXT = re.compile(r"(\.currency|^counts\.redefined\[\d+\]"
                   r"|^counts\.failures\[\d+\]\.(backend|cause|what|reason|fix|case_id|metric))$")
#: the counts that are flags: whether the judge has prices, whether the budget was spent
_FLAGS = re.compile(r"\.(priced|spent)$")


def _counts_problem(counts: dict[str, Any]) -> Optional[tuple[str, str]]:
    """Every number in ``counts`` (at any depth) is not negative and finite, and whole but for money
    (a cost, a budget's cost); text and flags only where a run writes them (`_TEXT`, `_FLAGS`)."""
    stack: list[tuple[str, Any]] = [(f"counts.{k}", v) for k, v in reversed(counts.items())]
    while stack:
        where, value = stack.pop()
        if isinstance(value, dict):
            stack.extend((f"{where}.{k}", v) for k, v in reversed(value.items()))
        elif isinstance(value, list):
            stack.extend((f"{where}[{i}]", v) for i, v in reversed(list(enumerate(value))))
        elif _number(value):
            problem = _amount(value) if _MONEY.search(where) else _count(value)
            if problem:
                return where, problem
        elif isinstance(value, str) and not _TEXT.search(where):
            return where, f"must be a number, got {_got(value)}"
        elif isinstance(value, bool) and not _FLAGS.search(where):
            return where, f"must be a number, got {_got(value)}"
    return None


def _timing_problem(timing: dict[str, Any]) -> Optional[tuple[str, str]]:
    wall = timing.get("wall_seconds")
    if wall is None:
        return None
    if not isinstance(wall, dict):
        return "timing.wall_seconds", f"must be an object of seconds by backend, got {_got(wall)}"
    for backend, seconds in wall.items():
        problem = _amount(seconds)
        if problem:
            return f"timing.wall_seconds.{backend}", problem
    return None


def _line_of(text: str, field: Optional[str]) -> Optional[int]:
    """The line of ``text`` (a JSON document) where ``field`` (``pass_marks.rubric.faithfulness``) is
    given: each key looked for after the one before it; None when it cannot be found."""
    if not field:
        return None
    at = 0
    for key in re.findall(r"[^.\[\]]+", field):
        if key.isdigit():
            continue
        found = re.compile(re.escape(json.dumps(key)) + r"\s*:").search(text, at)
        if found is None:
            return None
        at = found.start()
    return text.count("\n", 0, at) + 1


# --------------------------------------------------------------------------------------------
# A run folder in columns: what the analyses read (`ragbridge.run.columns`)

#: lines of ``scores.jsonl`` (and of ``cases.jsonl``) read and checked at once
READ_BLOCK = 8192
_SCORE_FIELDS = ("case_id", "metric", "backend", "value", "native_metric", "native_value", "passed",
                 "reason", "error", "judge_calls", "prompt_tokens", "completion_tokens", "seconds",
                 "evidence")
_OPTIONAL_FIELDS = ("repeat", "not_run", "cost", "repeats", "cached")
#: the keys of a score line as a run writes it (`ragbridge.run.folder.score_json`: the optional
#: fields only where they are not at their default), in order
_PLAIN_KEYS = frozenset(
    _SCORE_FIELDS + tuple(k for bit, k in enumerate(_OPTIONAL_FIELDS) if mask >> bit & 1)
    for mask in range(1 << len(_OPTIONAL_FIELDS)))
_INF = math.inf


def _file_lines(path: Path) -> Iterator[list[tuple[int, int, bytes]]]:
    """The non-blank lines of a file as ``(number from 1, byte offset, bytes without the line
    break)``, `READ_BLOCK` at a time (a leading BOM left out of the first)."""
    block: list[tuple[int, int, bytes]] = []
    at = 0
    with open(path, "rb") as f:
        for n, raw in enumerate(f, start=1):
            start, at = at, at + len(raw)
            if n == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw, start = raw[3:], start + 3
            if raw.endswith(b"\n"):
                raw = raw[:-1]
            if not raw or raw.isspace():
                continue
            block.append((n, start, raw))
            if len(block) == READ_BLOCK:
                yield block
                block = []
    if block:
        yield block


def _text(path: Path, n: int, raw: bytes) -> str:
    """A line's text (`ragbridge.formats.files.text_lines`' decoding and its error)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DatasetError(f"invalid UTF-8 (byte 0x{raw[exc.start]:02x} at column {exc.start + 1})",
                           path=path, line=n, hint="save the file as UTF-8") from None


class FileStore(ScoreStore):
    """The scores of a run folder: a place is a line's byte offset in ``scores.jsonl``, read back and
    checked (`score_from_line`) when asked for."""

    def __init__(self, path: Path):
        self.path = path

    def scores(self, places: Sequence[int]) -> list[Score]:
        with open(self.path, "rb") as f:
            lines = lines_at(f, places)
        got = dict(zip(lines, scores_from_lines(list(lines.values()))))
        return [got[p] for p in places]


#: how far apart two lines may be to be read in one read (`lines_at`)
WINDOW = 1 << 20


def lines_at(f: Any, places: Sequence[int]) -> dict[int, bytes]:
    """The lines of binary file ``f`` that start at byte offsets ``places`` (without their line
    break), read in as few reads as lines near each other allow."""
    wanted = sorted(set(int(p) for p in places))
    out: dict[int, bytes] = {}
    i = 0
    while i < len(wanted):
        start, j = wanted[i], i
        while j + 1 < len(wanted) and wanted[j + 1] - start < WINDOW:
            j += 1
        f.seek(start)
        data = f.read(wanted[j] - start) + f.readline()  # through the end of the last line
        for k in range(i, j + 1):
            a = wanted[k] - start
            e = data.find(b"\n", a)
            out[wanted[k]] = data[a:e if e >= 0 else len(data)]
        i = j + 1
    return out


def read_case_index(path: Path) -> CaseIndex:
    """The cases of a run folder's ``cases.jsonl`` as a `CaseIndex` (ids, tags, ``answerable``, the
    golden fields' digest and each line's offset), read and checked as `ragbridge.formats.load_cases`
    reads a golden set, a block at a time (an empty index for a folder without it)."""
    from ..formats.batches import SeenCaseIds, batch_from_records
    from ..formats.record_lines import parse_record_line
    from ..formats.files import parse_line

    ids: list[CaseIds] = []
    tags: list[tuple[str, ...]] = []
    answerable: list[np.ndarray] = []  # a block's at a time, as arrays: no Python object a case is kept
    places: list[np.ndarray] = []
    golden: list[np.ndarray] = []
    if path.exists():
        seen = SeenCaseIds()
        shared: dict[tuple[str, ...], tuple[str, ...]] = {}
        blank = True
        for block in _file_lines(path):
            blank = False
            pairs = [(n, parse_line(path, n, _text(path, n, raw), "each line must be one JSON object",
                                     parse_record_line)) for n, _, raw in block]
            batch = batch_from_records(pairs, path, first_seen=seen)
            seen.end_batch()
            part = index_part(batch)
            ids.append(part[0])
            tags += [shared.setdefault(t, t) for t in part[1]]
            answerable.append(part[2])
            golden.append(part[3])
            places.append(np.fromiter((at for _, at, _ in block), np.int64, len(block)))
        if blank:
            raise DatasetError("file is empty", path=path, hint="a golden set needs at least one case")
    return index_over(path, CaseIds.joined(ids), tags, np.concatenate(answerable or [np.zeros(0, bool)]),
                       np.concatenate(places or [np.zeros(0, np.int64)]),
                       np.concatenate(golden or [np.zeros((0, 16), np.uint8)]))


def index_over(path: Path, ids: CaseIds, tags: list[tuple[str, ...]], answerable: np.ndarray,
                places: np.ndarray, golden: np.ndarray, described: Optional[int] = None) -> CaseIndex:
    """A `CaseIndex` of these cases whose lines are in ``path`` (a run folder's ``cases.jsonl``)."""
    return CaseIndex(ids, tags, answerable, places, golden, lambda at: _cases_at(path, at),
                     described=described, contents=lambda: _contents(path),
                     heads=lambda at: _heads_at(path, at), views=lambda at: _views_at(path, at),
                     questions=lambda at: _questions_at(path, at))


_QUESTION = ',"question":'
_decode = json.JSONDecoder().raw_decode


def _questions_at(path: Path, places: Sequence[int]) -> list[str]:
    """The questions of the cases at ``places``: where a line starts as the run writes it (its id,
    then its question) only those two strings are decoded, not its chunks; any other line is read as
    a case (`_views_at`)."""
    with open(path, "rb") as f:
        lines = lines_at(f, places)
    got: dict[int, str] = {}
    for at, raw in lines.items():
        if raw.startswith(b'{"id":"'):
            text = raw.decode("utf-8")
            try:
                _, end = _decode(text, 6)
                if text.startswith(_QUESTION, end):
                    q, _ = _decode(text, end + len(_QUESTION))
                    if type(q) is str:
                        got[at] = q
            except ValueError:
                pass
    rest = [p for p in lines if p not in got]
    if rest:
        got.update((p, v.question) for p, v in zip(rest, _views_at(path, rest)))
    return [got[p] for p in places]


def _batch_at(path: Path, places: Sequence[int]):
    """The lines of ``path`` that start at byte offsets ``places`` (sorted, once each), read as a golden
    set's lines are read: ``(the sorted offsets, their CaseBatch)``."""
    from ..formats.batches import batch_from_records
    from ..formats.record_lines import parse_record_line

    with open(path, "rb") as f:
        lines = lines_at(f, places)
    wanted = sorted(lines)
    pairs = [(at, parse_record_line(lines[at].decode("utf-8"))) for at in wanted]
    return wanted, batch_from_records(pairs, path)


def _heads_at(path: Path, places: Sequence[int]) -> list[tuple[dict[str, Any], list[str]]]:
    """The canonical records (without their chunks) and chunk ids of the cases at ``places``."""
    wanted, batch = _batch_at(path, places)
    got = {at: (batch.head(k), ids) for k, (at, (ids, _, _)) in enumerate(zip(wanted, batch.chunk_lists()))}
    return [got[p] for p in places]


def _views_at(path: Path, places: Sequence[int]) -> list[Any]:
    """The cases at ``places``, to read (`ragbridge.formats.batches.CaseView`)."""
    wanted, batch = _batch_at(path, places)
    got = {at: batch.view(k) for k, at in enumerate(wanted)}
    return [got[p] for p in places]


def _contents(path: Path) -> np.ndarray:
    """A digest of each case's canonical line in ``cases.jsonl`` (`CaseIndex.contents`), read again."""
    from ..formats.batches import batch_from_records
    from ..formats.record_lines import parse_record_line

    out: list[bytes] = []
    if path.exists():
        for block in _file_lines(path):
            batch = batch_from_records([(n, parse_record_line(raw.decode("utf-8"))) for n, _, raw in block],
                                       path)
            out += [hashlib.blake2b(batch.line(k), digest_size=16).digest() for k in range(len(batch))]
    return digests(out)


def _cases_at(path: Path, places: Sequence[int]) -> list[Case]:
    """The cases whose lines start at byte offsets ``places`` of ``path``, read back as a golden set's
    lines are read."""
    wanted, batch = _batch_at(path, places)
    got = {at: batch[k] for k, at in enumerate(wanted)}
    return [got[p] for p in places]


def read_columns(folder: Path, pass_at_least: Optional[int] = None, copy: bool = True) -> RunColumns:
    """A run folder's cases and scores in columns (`ragbridge.run.columns`), read a block at a time:
    ``cases.jsonl`` checked as a golden set is, every line of ``scores.jsonl`` checked as
    `score_from_line` checks it (the line as a run writes it at once, any other field by field), the
    last per (case, metric, backend, repeat) winning and a last line cut short by a killed run dropped
    (``dropped``), as `read_scores` reads them. ``pass_at_least``: the run's ``--pass-repeats``.
    ``copy=False``: no column copy is written (a run about to be resumed: its files change at once)."""
    path = folder / "scores.jsonl"
    keys = file_keys(folder)
    copied = load_copy(folder, pass_at_least, FileStore(path),
                       lambda *index: index_over(folder / "cases.jsonl", *index))
    if copied is not None:
        return copied
    with no_cycle_collection():  # millions of small objects, no cycle: the collector's passes find nothing
        cases = read_case_index(folder / "cases.jsonl")
        builder = ColumnsBuilder(cases, FileStore(path))
        dropped = 0
        if path.exists():
            bad: list[DatasetError] = []
            for block in _file_lines(path):
                if bad:
                    raise bad[0]  # a line that cannot be read, with scores after it: not a cut last line
                _read_block(block, path, builder, bad)
                builder.flush()
            if bad:
                if len(bad) > 1 or not _cut_short(path, bad[0]):
                    raise bad[0]
                dropped = 1
        got = builder.finish(pass_at_least)
    got.dropped = dropped
    if copy:
        save_copy(folder, got, keys, pass_at_least)
    return got


def _read_block(block: list[tuple[int, int, bytes]], path: Path, builder: ColumnsBuilder,
                bad: list[DatasetError]) -> None:
    """Put a block of score lines in columns: each line as a run writes it read by the C reader
    (`_columns.score_lines`: the checks of `score_from_line`'s quick path), the others parsed at once
    and checked as a run writes them (`plain_fields`), any other line (or lines that do not parse)
    field by field (`score_from_line`)."""
    raws = [raw for _, _, raw in block]
    written = _score_lines(raws, MAX_REPEATS)[0] if _score_lines is not None else [None] * len(block)
    parsed: list = [None] * len(block)
    rest = [k for k, w in enumerate(written) if w is None]
    if rest:
        try:
            got = pydantic_core.from_json(b"[" + b",".join(raws[k] for k in rest) + b"]")
        except ValueError:
            got = None
        if type(got) is list and len(got) == len(rest):
            for k, d in zip(rest, got):
                parsed[k] = d
    named = [w["case_id"] if w is not None else d.get("case_id") if type(d) is dict else None
             for w, d in zip(written, parsed)]
    found = builder.cases.find([c if type(c) is str else "" for c in named]).tolist()
    add = builder.add_fast
    for (n, at, raw), w, d, i in zip(block, written, parsed, found):
        if bad:
            raise bad[0]
        if w is not None:
            fields = _column_fields(w["case_id"], w["metric"], w["backend"], w["value"], w["error"],
                                    w["not_run"], w["repeat"], w["judge_calls"], w["prompt_tokens"],
                                    w["completion_tokens"], w["seconds"], w["cost"], w["cached"])
        else:
            fields = plain_fields(d, raw, i >= 0) if type(d) is dict else None
        if fields is None:
            try:  # the errors `read_scores` gives (a line that is not JSON one too: a cut last line)
                score = parse_line(path, n, _text(path, n, raw), _LINE_HINT, score_from_line)
            except DatasetError as exc:
                bad.append(exc)
                continue
            builder.add_score(score, at, n)
            continue
        cid, metric, backend, value, status, repeat, extra = fields
        key = (backend, metric)
        if i < 0:
            i = builder.index(cid, key, n, i)
        add(key, i, value, status, at, repeat, extra)


def plain_fields(d: dict, raw: bytes, known: bool) -> Optional[tuple]:
    """A parsed score line's fields when it is a line as a run writes it (the checks of
    `score_from_line`'s quick path: `_plain_score`, each key once, every value of its type, no
    evidence, repeats summary or mapping as native value to read); else None."""
    if tuple(d) not in _PLAIN_KEYS or raw.count(b'":') != len(d):
        return None
    cid, metric, backend = d["case_id"], d["metric"], d["backend"]
    if type(cid) is not str or type(metric) is not str or type(backend) is not str:
        return None
    value = d["value"]
    tv = type(value)
    if tv is float:
        if not 0.0 <= value <= 1.0:
            return None
    elif tv is int:
        if not 0 <= value <= 1:
            return None
        value = float(value)
    elif value is not None:
        return None
    nm, passed, reason, error = d["native_metric"], d["passed"], d["reason"], d["error"]
    if (nm is not None and type(nm) is not str) or (passed is not None and type(passed) is not bool) \
            or (reason is not None and type(reason) is not str) \
            or (error is not None and type(error) is not str) \
            or d["evidence"] is not None or type(d["native_value"]) is dict:
        return None
    jc, pt, ct, sec = d["judge_calls"], d["prompt_tokens"], d["completion_tokens"], d["seconds"]
    if type(jc) is not int or type(pt) is not int or type(ct) is not int or jc < 0 or pt < 0 or ct < 0:
        return None
    ts = type(sec)
    if not ((ts is float and 0.0 <= sec < _INF) or (ts is int and sec >= 0)):
        return None
    repeat, not_run, cost, cached = 0, False, None, False
    if len(d) > 14:
        repeat = d.get("repeat", 0)
        not_run = d.get("not_run", False)
        cost = d.get("cost")
        cached = d.get("cached", False)
        if type(repeat) is not int or not 0 <= repeat < MAX_REPEATS or type(not_run) is not bool \
                or d.get("repeats") is not None or type(cached) is not bool:
            return None
        if cost is not None and not ((type(cost) is float and 0.0 <= cost < _INF)
                                     or (type(cost) is int and cost >= 0)):
            return None
    if not known and not good_id(cid):
        return None
    if not _good_name(metric) or not _good_name(backend):
        return None
    return _column_fields(cid, metric, backend, value, error, not_run, repeat, jc, pt, ct, sec, cost, cached)


def _column_fields(cid: str, metric: str, backend: str, value: Optional[float], error: Optional[str],
                   not_run: bool, repeat: int, jc: int, pt: int, ct: int, sec: Any, cost: Any,
                   cached: bool) -> tuple:
    """What a checked score line puts in its column: ``(case id, metric, backend, value, status,
    repeat, the per-score arrays' values that are not defaults)``."""
    extra = None
    if jc or pt or ct or sec:
        extra = {}
        if jc:
            extra["judge_calls"] = jc
            extra["cost"] = math.nan if cost is None else float(cost)
        if pt:
            extra["prompt_tokens"] = pt
        if ct:
            extra["completion_tokens"] = ct
        if sec:
            extra["seconds"] = float(sec)
    if cached:
        extra = {**(extra or {}), "cached": True}
    status = ERROR if error else NOT_RUN if not_run else UNDEFINED if value is None else SCORED
    return cid, metric, backend, value, status, repeat, extra
