"""``ragbridge diagnose``: each failing case of a run to its layer (`ragbridge.analysis.diagnose`),
with the counts overall and per tag, as tables that fit the width (or plain lines), or one JSON
document."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, List, Optional

import typer
from rich.markup import escape
from rich.table import Table

from ..analysis.diagnose import DIAGNOSIS_LISTED, LAYERS, NOT_IN_RUN, CaseDiagnosis, Diagnosis, diagnose
from ..analysis.rows import BLOCK
from ..analysis.table import AnalysisError, open_run
from ..analysis.thresholds import pass_marks
from ..report.text import json_chunks, json_escaped, jsonable
from ..run.summary import ALL
from ..run.progress import Steps
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
        if top < 0:
            fail(f"--top must be zero or more, got {top}")
        listed = None if every or as_json else top  # the cases it lists, described; the others counted
        d = diagnose(r, th, labels, label_threshold, as_text=as_json, listed=listed,
                     progress=Steps("diagnose", "failing cases"))
    except AnalysisError as exc:
        fail(str(exc))
    except (OSError, ValueError) as exc:  # a gates file that cannot be read
        fail(str(exc))
    if d.unknown_labels:
        warn(f"{d.unknown_labels} label(s) name a case that is not in this run")
    if as_json:
        print_diagnosis_json(d)
        return
    _print(d, by_tag, None if every else top)


def print_diagnosis_json(d: Diagnosis, file: Optional[Any] = None) -> None:
    """``print_json(d.to_dict())``, the same characters: the counts as `print_json` writes them, then
    the cases a block at a time, each as the JSON text the diagnosis kept it as (`Diagnosis.case_texts`;
    a case that is not plain JSON values as `json_chunks` writes it), indented in its place."""
    stream = file or sys.stdout
    data = d.to_dict()
    del data["cases"]  # the last member: written below
    head = "".join(json_chunks(jsonable(data), escaped=False))[:-2] + ',\n  "cases": ['
    texts = d.case_texts()
    if not texts:
        stream.write(json_escaped(head + "]\n}") + "\n")
        stream.flush()
        return
    stream.write(json_escaped(head))
    for start in range(0, len(texts), BLOCK):
        block = ",\n".join(t if type(t) is str else "".join(json_chunks(jsonable(t.to_dict()), escaped=False))
                           for t in texts[start:start + BLOCK])
        stream.write(json_escaped(("," if start else "") + "\n    " + block.replace("\n", "\n    ")))
    stream.write("\n  ]\n}\n")
    stream.flush()


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
    print_lines(out, [f"Diagnosis of {d.run}: {n_failing:,} of {d.n_cases:,} case(s) fail a metric"],
                indent="")
    if not n_failing:
        return
    t = Table(title="Layers", title_justify="default")
    t.add_column("layer")
    t.add_column("cases", justify="right")
    t.add_column("of failing", justify="right")
    t.add_column("of all", justify="right")
    lines = []
    for layer in LAYERS:
        n = d.counts[layer]
        t.add_row(layer, f"{n:,}", f"{n / n_failing:.0%}", f"{n / d.n_cases:.0%}")
        lines.append(f"{layer}: {n:,} ({n / n_failing:.0%} of failing, {n / d.n_cases:.0%} of all)")
    print_table(out, t, lines)
    if by_tag:
        _print_by_tag(d)
    notes: dict[str, None] = {}
    more = 0
    for layer in LAYERS:
        n = d.counts[layer]  # every case of the layer; ``group`` the first ``top`` where they are listed
        if not n:
            continue
        shown = n if top is None else min(top, n)
        more += n - shown
        if not shown:  # --top 0: the counts above, no heading of a listing
            continue
        group = d.in_layer(layer)
        print_lines(out, [f"{layer} ({n:,}" + (f", the first {shown:,}" if shown < n else "") + ")"])
        for start in range(0, shown, 1000):  # a block of cases at a time: a large run lists many
            print_lines(out, [f"  {c.case_id}" + (f" [{', '.join(c.tags)}]" if c.tags else "")
                              + f": {_without_run_notes(c, notes)}"
                              for c in group[start:min(start + 1000, shown)]])
    if notes:
        print_lines(out, ["Not scored in this run, so no case above could use it: "
                          + "; ".join(n.replace(NOT_IN_RUN, "") for n in notes)], indent="")
    if more:
        print_lines(out, [f"{more:,} more failing case(s) not listed: --all lists every one, "
                          "--json gives them all as data"], indent="")


def _print_by_tag(d: Diagnosis) -> None:
    t = Table(title="Layers per tag", title_justify="default")
    t.add_column("tag")
    for col in ("cases", "failing", *(_SHORT[x] for x in LAYERS)):
        t.add_column(col, justify="right", no_wrap=True)
    lines = []
    for tag, row in d.by_tag.items():
        if tag == ALL:
            continue
        t.add_row(escape(tag), f"{row['n_cases']:,}", f"{row['n_failing']:,}",
                  *(f"{row[x]:,}" for x in LAYERS))
        lines.append(f"{tag}: {row['n_failing']:,} of {row['n_cases']:,} failing; "
                     + ", ".join(f"{x} {row[x]:,}" for x in LAYERS))
    print_table(out, t, lines)
    print_lines(out, ["retr: retrieval, gen: generation, kb: knowledge_base, ref: reference_or_judge, "
                      "undet: undetermined"], indent="")
