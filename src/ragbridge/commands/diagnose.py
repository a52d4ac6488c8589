"""``ragbridge diagnose``: each failing case of a run to its layer (`ragbridge.analysis.diagnose`),
with the counts overall and per tag, as tables that fit the width (or plain lines), or one JSON
document."""

from __future__ import annotations

import json
import math
import sys
from json.encoder import c_make_encoder, encode_basestring
from pathlib import Path
from typing import Any, Callable, List, Optional

import typer
from rich.markup import escape
from rich.table import Table

from ..analysis.diagnose import DIAGNOSIS_LISTED, LAYERS, NOT_IN_RUN, CaseDiagnosis, Diagnosis, diagnose
from ..analysis.rows import BLOCK
from ..analysis.table import AnalysisError, open_run
from ..analysis.thresholds import pass_marks
from ..report.text import json_chunks, json_escaped, jsonable
from ..run.summary import ALL
from .output import fail, out, print_lines, print_table, warn

__all__ = ["register", "diagnose_cmd"]

_SHORT = {"retrieval": "retr", "generation": "gen", "knowledge_base": "kb", "reference_or_judge": "ref",
          "undetermined": "undet"}


def register(cli: typer.Typer) -> None:
    cli.command("diagnose")(diagnose_cmd)


def diagnose_cmd(
    run: Path = typer.Argument(..., help="Run folder."),
    labels: Optional[Path] = typer.Option(
        None, "--labels", "-l", help="Human labels (JSONL or CSV with case_id, metric, label): a label "
                                     "answers its question and overrules the metrics."),
    threshold: List[str] = typer.Option(
        None, "--threshold", "-t", help="Pass mark: 0.7 for all, faithfulness=0.7 per metric, "
                                        "rubric:faithfulness=0.7 per backend and metric (repeatable; "
                                        "default: each metric's pass mark, docs/report.md)."),
    gates: Optional[Path] = typer.Option(None, "--gates", help="Take pass marks from this gates file too."),
    label_threshold: float = typer.Option(
        0.5, "--label-threshold", help="A human grade at or above this is a pass."),
    by_tag: bool = typer.Option(False, "--by-tag", help="Also count the layers per tag."),
    top: int = typer.Option(DIAGNOSIS_LISTED, "--top", help="Cases to list per layer, as the report."),
    every: bool = typer.Option(False, "--all", help="List every failing case (--json holds them all too)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON document instead of tables."),
) -> None:
    """Each failing case to one layer: retrieval, generation, knowledge_base, reference_or_judge or
    undetermined (with the missing evidence named), and the evidence that decided it (docs/diagnose.md)."""
    try:
        r = open_run(run)
        config = None
        if gates is not None:
            from ..analysis.gate import load_gates

            config = load_gates(gates)
        th = pass_marks(r, threshold or None, config)
        d = diagnose(r, th, labels, label_threshold)
    except AnalysisError as exc:
        fail(str(exc))
    except (OSError, ValueError) as exc:  # a gates file that cannot be read
        fail(str(exc))
    if top < 0:
        fail(f"--top must be zero or more, got {top}")
    if d.unknown_labels:
        warn(f"{d.unknown_labels} label(s) name a case that is not in this run")
    if as_json:
        print_diagnosis_json(d)
        return
    _print(d, by_tag, None if every else top)


def print_diagnosis_json(d: Diagnosis, file: Optional[Any] = None) -> None:
    """``print_json(d.to_dict())``, the same characters: the counts as `print_json` writes them, then
    every case, a block at a time, each case's JSON made by `case_json` (the C encoder for every dict
    and list of plain values: a diagnosis of every failing case of a large run is most of the text)."""
    stream = file or sys.stdout
    data = d.to_dict()
    cases = data.pop("cases")
    head = "".join(json_chunks(jsonable(data), escaped=False))
    if not cases:
        stream.write(json_escaped(head[:-2] + ',\n  "cases": []\n}') + "\n")
        stream.flush()
        return
    stream.write(json_escaped(head[:-2] + ',\n  "cases": ['))
    rows = d.cases
    for start in range(0, len(rows), BLOCK):
        block = rows[start:start + BLOCK]
        stream.write(json_escaped(("," if start else "") + "\n    "
                                  + ",\n    ".join(case_json(c, 2) for c in block)))
    stream.write("\n  ]\n}\n")
    stream.flush()


def case_json(c: CaseDiagnosis, level: int = 0) -> str:
    """``c.to_dict()`` as ``json.dumps(jsonable(...), indent=2, ensure_ascii=False, allow_nan=False)``
    writes it at ``level`` (its members indented ``level + 1`` steps): each dict or list of plain values
    by one call of the C encoder; anything else (a NaN, a NumPy number) as `json_chunks` writes it."""
    row = c.to_dict()
    try:
        return _json_at(row, level)
    except (ValueError, TypeError):  # what `jsonable` changes first, or what the C encoder refuses
        return "".join(json_chunks(jsonable(row), escaped=False)).replace("\n", "\n" + "  " * level)


#: the types the C encoder writes as `jsonable` leaves them (a float only when finite: it refuses others)
_PLAIN = frozenset((str, int, float, bool, type(None)))
_FLAT: dict[int, Callable[[Any], str]] = {}


def _refused(o: Any) -> Any:
    raise TypeError(type(o).__name__)


def _flat(level: int) -> Callable[[Any], str]:
    """The C encoder of a dict or list of plain values at ``level``: its item separator the line break
    and indent of its members (made once: `json.JSONEncoder.encode` makes it again at every call)."""
    got = _FLAT.get(level)
    if got is None:
        separator = ",\n" + "  " * (level + 1)
        if c_make_encoder is None:  # pragma: no cover - a Python built without the C encoder
            got = json.JSONEncoder(ensure_ascii=False, allow_nan=False, default=_refused,
                                   separators=(separator, ": ")).encode
        else:  # JSONEncoder's own arguments for ensure_ascii=False, allow_nan=False, no indent
            encode = c_make_encoder(None, _refused, encode_basestring, None, ": ", separator, False, False,
                                    False)

            def got(o: Any) -> str:
                return "".join(encode(o, 0))
        _FLAT[level] = got
    return got


def _json_at(o: Any, level: int) -> str:
    t = type(o)
    if t is str:
        return encode_basestring(o)
    if t is dict or t is list:
        if not o:
            return "{}" if t is dict else "[]"
        inner = "\n" + "  " * (level + 1)
        if t is dict:
            if not all(type(k) is str for k in o):  # `jsonable` writes other keys as str() does
                raise TypeError("key")
            values: Any = o.values()
        else:
            values = o
        if all(type(v) in _PLAIN for v in values):
            text = _flat(level)(o)
            return text[0] + inner + text[1:-1] + "\n" + "  " * level + text[-1]
        if t is dict:
            parts = [encode_basestring(k) + ": " + _json_at(v, level + 1) for k, v in o.items()]
        else:
            parts = [_json_at(v, level + 1) for v in o]
        return ("{" if t is dict else "[") + inner + ("," + inner).join(parts) + "\n" + "  " * level \
            + ("}" if t is dict else "]")
    if o is None or o is True or o is False:
        return "null" if o is None else "true" if o else "false"
    if t is int:
        return int.__repr__(o)
    if t is float and math.isfinite(o):
        return float.__repr__(o)
    raise TypeError(t.__name__)


def _without_run_notes(c: CaseDiagnosis, notes: dict[str, None]) -> str:
    """``c``'s reason without the missing evidence of a metric the run did not score at all (the same
    for every case: collected in ``notes``, said once)."""
    reason = c.reason
    for m in c.missing:
        if NOT_IN_RUN in m:
            notes[m] = None
            reason = reason.replace(f"; {m}", "").replace(f"{m}; ", "").replace(f": {m}", ": ")
    return reason.rstrip(": ")


def _print(d: Diagnosis, by_tag: bool, top: Optional[int] = DIAGNOSIS_LISTED) -> None:
    """The counts, then per layer its first ``top`` failing cases (every one when None)."""
    n_failing = d.counts["n_failing"]
    print_lines(out, [f"Diagnosis of {d.run}: {n_failing} of {d.n_cases} case(s) fail a metric"], indent="")
    if not n_failing:
        return
    t = Table(title="Layers", title_justify="left")
    t.add_column("layer")
    t.add_column("cases", justify="right")
    t.add_column("of failing", justify="right")
    t.add_column("of all", justify="right")
    lines = []
    for layer in LAYERS:
        n = d.counts[layer]
        t.add_row(layer, str(n), f"{n / n_failing:.0%}", f"{n / d.n_cases:.0%}")
        lines.append(f"{layer}: {n} ({n / n_failing:.0%} of failing, {n / d.n_cases:.0%} of all)")
    print_table(out, t, lines)
    if by_tag:
        _print_by_tag(d)
    notes: dict[str, None] = {}
    more = 0
    for layer in LAYERS:
        group = d.in_layer(layer)
        if not group:
            continue
        shown = len(group) if top is None else min(top, len(group))
        more += len(group) - shown
        print_lines(out, [f"{layer} ({len(group)}" + (f", the first {shown}" if shown < len(group) else "")
                          + ")"])
        for start in range(0, shown, 1000):  # a block of cases at a time: a large run lists many
            print_lines(out, [f"  {c.case_id}" + (f" [{', '.join(c.tags)}]" if c.tags else "")
                              + f": {_without_run_notes(c, notes)}"
                              for c in group[start:min(start + 1000, shown)]])
    if notes:
        print_lines(out, ["Not scored in this run, so no case above could use it: "
                          + "; ".join(n.replace(NOT_IN_RUN, "") for n in notes)], indent="")
    if more:
        print_lines(out, [f"{more} more failing case(s) not listed: --all lists every one, "
                          "--json gives them all as data"], indent="")


def _print_by_tag(d: Diagnosis) -> None:
    t = Table(title="Layers per tag", title_justify="left")
    t.add_column("tag")
    for col in ("cases", "failing", *(_SHORT[x] for x in LAYERS)):
        t.add_column(col, justify="right", no_wrap=True)
    lines = []
    for tag, row in d.by_tag.items():
        if tag == ALL:
            continue
        t.add_row(escape(tag), str(row["n_cases"]), str(row["n_failing"]), *(str(row[x]) for x in LAYERS))
        lines.append(f"{tag}: {row['n_failing']} of {row['n_cases']} failing; "
                     + ", ".join(f"{x} {row[x]}" for x in LAYERS))
    print_table(out, t, lines)
    print_lines(out, ["retr: retrieval, gen: generation, kb: knowledge_base, ref: reference_or_judge, "
                      "undet: undetermined"], indent="")
