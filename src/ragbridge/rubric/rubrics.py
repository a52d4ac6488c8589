"""Rubrics as data: the pydantic model, loading from TOML, and the content hash.

A rubric file holds one or more ``[[rubric]]`` tables::

    [[rubric]]
    name = "helpfulness"                  # the metric name its scores carry
    question = "Does the answer resolve the customer's question?"
    fields = ["question", "contexts", "answer"]   # what the judge sees (and reference)
    scale = "1-5"                         # "binary" (0, 1), "three-level" (0, 1, 2) or "1-5"
    pass_at = 4                           # the lowest passing level (default: the top level)
    reasons_first = true                  # the judge writes its reason before its level (default)
    mode = "whole"                        # "whole" (default), "claims" or "per_chunk"

    [[rubric.level]]                      # one per level of the scale, each described
    value = 5
    label = "Resolved"
    description = "Answers the question directly, with the details the customer needs."
    examples = ["Yes: go to Settings > Billing and click Request refund, within 14 days."]

Modes: ``whole`` grades the item once on the scale (value = (level - lowest) / (highest - lowest));
``claims`` splits the answer into claims and checks each against the context as SUPPORTED,
CONTRADICTED or NOT_FOUND (value = supported / claims; no scale, no levels); ``per_chunk`` grades each
retrieved chunk on the scale against the question (a chunk at or above ``pass_at`` is relevant; value =
relevant / chunks).

The same rubric can be built in Python (``Rubric(name=..., levels=[Level(...), ...])``) and has the
same :attr:`Rubric.hash`: a SHA-256 over the normalised definition and the prompt version, so a
change of wording, scale, examples or prompt gives a new hash. Bad files raise :class:`RubricError`
naming the file, line, rubric and field, and what to do.
"""

from __future__ import annotations

import hashlib
import json
import re
import tomllib
from pathlib import Path
from typing import Any, Literal, Optional, Sequence

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ..errors import UserError
from ..metrics import DEFAULT_PASS_MARK

__all__ = ["Level", "Rubric", "RubricError", "FIELDS", "SCALES", "load_rubrics", "builtin_rubrics",
           "PROMPT_VERSION"]

#: bumped whenever prompts.py changes what the judge is asked: part of every rubric's hash
PROMPT_VERSION = "1"
#: the case fields a rubric can show the judge, in the order the prompt shows them
FIELDS = ("question", "reference", "contexts", "answer")
SCALES = {"binary": (0, 1), "three-level": (0, 1, 2), "1-5": (1, 2, 3, 4, 5)}
#: the case inputs (``Case.fields_present()``) each field needs
REQUIRES = {"question": None, "reference": "reference", "contexts": "context_text", "answer": "answer"}
BUILTIN_DIR = Path(__file__).with_name("builtin")
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


class RubricError(UserError, ValueError):
    """A rubric that cannot be used (the message names the file, line, rubric and field)."""


class Level(BaseModel):
    """One level of a scale: its value, a short label, what it means, optional examples."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    value: int
    label: str = Field(min_length=1)
    description: str = Field(min_length=1)
    examples: list[str] = Field(default_factory=list)


class Rubric(BaseModel):
    """One criterion the judge applies (see the module docstring for each field)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, defer_build=True)

    name: str
    question: str = Field(min_length=1)
    fields: tuple[Literal["question", "reference", "contexts", "answer"], ...]
    mode: Literal["whole", "claims", "per_chunk"] = "whole"
    scale: Optional[Literal["binary", "three-level", "1-5"]] = None
    levels: tuple[Level, ...] = Field(default=(), alias="level")
    pass_at: Optional[int] = None
    reasons_first: bool = True

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME.match(v):
            raise ValueError(f"{v!r} is not a metric name: use lower-case letters, digits and _ "
                             "(starting with a letter), e.g. \"helpfulness\"")
        return v

    @field_validator("fields")
    @classmethod
    def _fields(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if not v:
            raise ValueError(f"name at least one of {', '.join(FIELDS)}")
        if len(set(v)) != len(v):
            raise ValueError("a field is listed twice")
        return tuple(f for f in FIELDS if f in v)  # the prompt's order, so the hash ignores the order

    @model_validator(mode="after")
    def _consistent(self) -> "Rubric":
        need = {"claims": ("contexts", "answer"), "per_chunk": ("contexts",)}.get(self.mode, ())
        missing = [f for f in need if f not in self.fields]
        if missing:
            raise ValueError(f"fields: mode {self.mode!r} needs {', '.join(need)}: add {', '.join(missing)}")
        if self.mode == "claims":
            if self.scale or self.levels or self.pass_at is not None:
                raise ValueError("mode: \"claims\" has its own verdicts (SUPPORTED, CONTRADICTED, "
                                 "NOT_FOUND): remove scale, level and pass_at")
            return self
        if self.scale is None:
            raise ValueError(f"scale: is required for mode {self.mode!r}: "
                             f"set it to one of {', '.join(SCALES)}")
        want = SCALES[self.scale]
        have = [lv.value for lv in self.levels]
        if sorted(have) != list(want):
            found = ", ".join(map(str, have)) or "none"
            raise ValueError(f"level: scale {self.scale!r} has levels {', '.join(map(str, want))}: describe "
                             f"each exactly once with a [[rubric.level]] table (found: {found})")
        if self.pass_at is not None and self.pass_at not in want:
            raise ValueError(f"pass_at: {self.pass_at} is not a level of scale {self.scale!r}: "
                             f"set it to one of {', '.join(map(str, want))}")
        # levels best first, pass_at made explicit: equal definitions have equal hashes
        object.__setattr__(self, "levels", tuple(sorted(self.levels, key=lambda lv: -lv.value)))
        if self.pass_at is None:
            object.__setattr__(self, "pass_at", want[-1])
        return self

    # -- derived ---------------------------------------------------------------------------------
    @property
    def hash(self) -> str:
        """Content hash (16 hex digits) of the normalised definition and the prompt version."""
        body = {"prompt_version": PROMPT_VERSION, "rubric": self.model_dump(mode="json", by_alias=False)}
        text = json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]

    @property
    def values(self) -> tuple[int, ...]:
        """The levels of the scale, lowest first (empty for claims mode)."""
        return SCALES[self.scale] if self.scale else ()

    def normalise(self, level: int) -> float:
        """A level as a value in 0..1 (lowest level 0, highest 1)."""
        lo, hi = self.values[0], self.values[-1]
        return (level - lo) / (hi - lo)

    def passes(self, level: int) -> bool:
        return level >= (self.pass_at if self.pass_at is not None else self.values[-1])

    @property
    def threshold(self) -> float:
        """The pass mark on the 0..1 value (recorded in run.json's ``pass_marks``): the value of the
        ``pass_at`` level; for claims, 1 (every claim supported); per chunk, the metrics' default
        pass mark (`ragbridge.metrics.DEFAULT_PASS_MARK`: half the chunks relevant)."""
        if self.mode != "whole":
            return 1.0 if self.mode == "claims" else DEFAULT_PASS_MARK
        return self.normalise(self.pass_at)

    @property
    def requires(self) -> tuple[str, ...]:
        return tuple(r for f in self.fields if (r := REQUIRES[f]))


# --------------------------------------------------------------------------------------------
# Loading


def _line_of(text: str, index: int, key: Optional[str]) -> int:
    """The line of the ``index``-th ``[[rubric]]`` table, or of ``key`` inside it (1-based; 0 if unknown)."""
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if re.match(r"^\s*\[\[\s*rubric\s*\]\]", line)]
    if index >= len(starts):
        return 0
    start = starts[index]
    end = starts[index + 1] if index + 1 < len(starts) else len(lines)
    if key:
        pat = re.compile(rf"^\s*({re.escape(key)}\s*=|\[\[\s*rubric\.{re.escape(key)}\s*\]\])")
        for i in range(start, end):
            if pat.match(lines[i]):
                return i + 1
    return start + 1


def _message(exc: ValidationError) -> tuple[Optional[str], str]:
    """The first error's top-level field and a readable ``field: problem``."""
    e = exc.errors(include_url=False)[0]
    loc = [str(p) for p in e["loc"]]
    msg = e["msg"].removeprefix("Value error, ")
    head, _, rest = msg.partition(": ")
    if not loc and head in Rubric.model_fields.keys() | {"level"}:  # a check across fields names its field
        loc, msg = [head], rest
    key = loc[0] if loc else None
    where = ".".join(loc)
    if e["type"] == "missing":
        msg = "is required"
    elif e["type"] == "extra_forbidden":
        msg = ("is not a rubric field (known: name, question, fields, mode, scale, level, pass_at, "
               "reasons_first)")
    elif e["type"] == "literal_error":
        msg = f"must be {msg.removeprefix('Input should be ')}"
    return key, (f"{where}: {msg}" if where else msg)


def rubrics_from_data(data: dict[str, Any], source: str, text: str = "") -> list[Rubric]:
    """Rubrics from parsed TOML (``source`` names the file in errors)."""
    tables = data.get("rubric")
    unknown = sorted(set(data) - {"rubric"})
    if unknown:
        raise RubricError(f"{source}: unknown top-level key {unknown[0]!r}: a rubric file holds "
                          "[[rubric]] tables")
    if not isinstance(tables, list) or not tables:
        raise RubricError(f"{source}: no [[rubric]] table: start each criterion with a [[rubric]] line")
    out: list[Rubric] = []
    for i, table in enumerate(tables):
        name = table.get("name") if isinstance(table, dict) else None
        try:
            rubric = Rubric.model_validate(table)
        except ValidationError as exc:
            key, msg = _message(exc)
            line = _line_of(text, i, key if key in table else None)
            label = f"rubric {name!r}" if isinstance(name, str) else f"rubric #{i + 1}"
            raise RubricError(f"{source}:{line}: {label}, {msg}") from None
        if any(r.name == rubric.name for r in out):
            raise RubricError(f"{source}:{_line_of(text, i, 'name')}: rubric {rubric.name!r} is defined "
                              "twice: rename one")
        out.append(rubric)
    return out


def load_rubrics(path: str | Path) -> list[Rubric]:
    """The rubrics of one TOML file. Raises :class:`RubricError` for anything wrong."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RubricError(f"{path}: no such rubric file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise RubricError(f"{path}: cannot read it ({exc})") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"at line (\d+)", str(exc))
        raise RubricError(f"{path}:{m.group(1) if m else 0}: not valid TOML: {exc}") from None
    return rubrics_from_data(data, str(path), text)


def builtin_rubrics() -> dict[str, Rubric]:
    """The built-in rubrics (``builtin/*.toml``), by name."""
    found: dict[str, Rubric] = {}
    for path in sorted(BUILTIN_DIR.glob("*.toml")):
        for r in load_rubrics(path):
            found[r.name] = r
    return found


def rubric_set(files: Sequence[str | Path] = (), rubrics: Sequence[Any] = ()) -> dict[str, Rubric]:
    """The built-in rubrics, then those of ``files`` and ``rubrics`` (a `Rubric` or a mapping) on top:
    a rubric named like a built-in replaces it."""
    found = builtin_rubrics()
    extra: list[Rubric] = []
    for f in files:
        extra += load_rubrics(f)
    for r in rubrics:
        try:
            extra.append(r if isinstance(r, Rubric) else Rubric.model_validate(r))
        except ValidationError as exc:
            name = r.get("name") if isinstance(r, dict) else None
            raise RubricError(f"rubric {name!r}: {_message(exc)[1]}") from None
    names = [r.name for r in extra]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise RubricError(f"rubric {twice[0]!r} is defined twice among the rubric files: keep one")
    found.update({r.name: r for r in extra})
    return found
