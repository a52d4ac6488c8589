"""``ragbridge report``: write one report of a run (HTML, Markdown or JSON; `ragbridge.report`)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer

from ..analysis.stats import DEFAULT_RESAMPLES
from ..analysis.table import AnalysisError, open_run
from ..formats.files import atomic_path
from ..errors import cli_text
from ..report import FORMATS, format_for, report_data, write
from ..report.html import FULL_CASES
from ..report.text import json_escaped, terminal_text
from ..run.folder import run_files
from .output import err, fail, out, refuse_overwriting

__all__ = ["register", "report_cmd"]


class _Escaped:
    """A text stream that writes through ``escape`` (a report on a terminal: nothing it acts on)."""

    def __init__(self, stream, escape) -> None:
        self._stream, self._escape = stream, escape

    def write(self, text: str) -> int:
        return self._stream.write(self._escape(text))


def _format(fmt: Optional[str], out_file: Optional[Path]) -> str:
    """The report's format (`ragbridge.report.format_for`); exit 2 for one it refuses."""
    try:
        return format_for(fmt, out_file)
    except AnalysisError as exc:
        fail(cli_text(exc))


def register(cli: typer.Typer) -> None:
    cli.command("report")(report_cmd)


def report_cmd(
    run: Path = typer.Argument(..., help="Run folder (holds run.json and scores.jsonl)."),
    with_runs: List[Path] = typer.Option(
        None, "--with", metavar="RUN",
        help="Another run folder of the same cases, scored apart (another judge server, day or judge): its "
             "backends join this run's as columns, BACKEND@FOLDER where two runs scored the same backend "
             "(repeatable)."),
    fmt: Optional[str] = typer.Option(
        None, "--format", "-f", help="html (one self-contained file), md or json (default: what the --out "
                                     "file's suffix says, .html, .md or .json; else html)."),
    out_file: Optional[Path] = typer.Option(
        None, "--out", "-o", help="File to write (default: RUN/report.<format>; '-' for standard output)."),
    threshold: Optional[List[str]] = typer.Option(
        None, "--threshold", "-t", help="Pass threshold: 0.7, rubric=0.7, faithfulness=0.7 or "
        "rubric:faithfulness=0.7 (repeatable; beats --gates; default: per metric, see docs/report.md)."),
    top: int = typer.Option(10, "--top", help="Disagreeing cases to list per metric."),
    resamples: int = typer.Option(
        DEFAULT_RESAMPLES, "--resamples", help="Draws for the 95% intervals (0: none)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the intervals' draws."),
    labels: Optional[Path] = typer.Option(
        None, "--labels", "-l", help="Human labels (JSONL or CSV: case_id, metric, label) to validate each "
                                     "backend against."),
    label_threshold: float = typer.Option(
        0.5, "--label-threshold", help="A human grade at or above this is a pass."),
    gates: Optional[Path] = typer.Option(
        None, "--gates", "-g",
        help="Gates file (TOML): its rules set the thresholds of the metrics they name, and the report "
             "shows the gate's verdicts."),
    baseline: Optional[Path] = typer.Option(
        None, "--baseline", "-b", help="An earlier run of the same golden set: the report shows what moved "
                                       "since (diff's cases; with --gates, drop rules too)."),
    history: List[Path] = typer.Option(
        None, "--history", help="Earlier run folders, or a folder of them: the report plots each metric's "
                                "trend over them and this run (repeatable)."),
    full: int = typer.Option(
        FULL_CASES, "--full", min=0, help="HTML and Markdown: cases shown in full at most (the ones that "
                                          "matter first); in the HTML the others one line of scores each."),
) -> None:
    """Write one report (HTML, Markdown or JSON) of a run: summary, agreement, judge usage, every case."""
    fmt = _format(fmt, out_file)
    refuse_overwriting(out_file, *(f for r in (run, *(with_runs or ()), baseline, *(history or ())) if r
                                   for f in run_files(r)), labels, gates)
    try:
        r = open_run([run, *with_runs] if with_runs else run)
        data = report_data(r, thresholds=threshold or None, n_resamples=resamples, seed=seed, top=top,
                           labels=labels, label_threshold=label_threshold, gates=gates,
                           history=history or None, case_texts=False, baseline=baseline,
                           progress="report")
        if str(out_file) == "-":  # the document on stdout, nothing in it a terminal acts on (JSON: exactly)
            write(r, data, fmt, _Escaped(sys.stdout, json_escaped if fmt == "json" else terminal_text), full)
            return
        target = out_file or (Path(run) / f"report{FORMATS[fmt]}")
        try:
            with atomic_path(target) as tmp:
                with open(tmp, "w", encoding="utf-8") as f:
                    write(r, data, fmt, f, full)
                size = tmp.stat().st_size
        except OSError as exc:
            fail(f"cannot write {target}: {exc.strerror or exc}")
    except AnalysisError as exc:  # a gates file's errors are analysis errors too
        fail(str(exc))
    out.print(f"report written to [bold]{target}[/] ({size // 1024 + 1:,} KiB, "
              f"{len(data['cases']):,} cases, {len(data['backends'])} backend(s))", highlight=False)
    if r.manifest.status != "complete":
        err.print(f"[yellow]the run is {r.manifest.status}: the report shows what was scored[/]")
