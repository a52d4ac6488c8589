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
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from pathlib import Path
from typing import Any, Optional

import pydantic_core
from pydantic import ValidationError

from ..formats.files import DatasetError, check_parsed, jsonl_lines, parse_json
from ..formats.plain_records import good_id
from ..schema import RunManifest, Score, clean_id
from ..limits import MAX_REPEATS  # a recorded repeat index is below it

__all__ = ["STATUSES", "score_from_line", "read_scores", "read_manifest"]

#: what ``run.json``'s ``status`` may say
STATUSES = ("running", "complete", "interrupted", "incomplete", "dry-run")

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
