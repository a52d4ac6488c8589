"""The dataset commands: ``ragbridge formats`` (what each format reads, writes and cannot hold),
``ragbridge convert`` (between formats), ``ragbridge sample`` (production traces or logged
interactions as cases), ``ragbridge export-scores`` (a run's scores back to the traces, as span
evaluations) and ``ragbridge anchor`` (chunk-id and section labels as span labels of the documents).
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any, List, Optional

import typer
from rich import box
from rich.markup import escape
from rich.table import Table

from ..formats import (DatasetError, format_hinted, get_formats, load_cases, reading_format, resave_losses,
                       write_cases, writing_format)
from ..formats.canonical import records_resave_lost
from ..formats.source import open_cases
from ..formats.input_check import input_warnings
from .output import counting_progress, err, fail, out, print_json, refuse_overwriting, warn

__all__ = ["register", "formats", "convert", "sample", "export_scores", "anchor"]


def register(cli: typer.Typer) -> None:
    cli.command("formats")(formats)
    cli.command("convert")(convert)
    cli.command("sample")(sample)
    cli.command("export-scores")(export_scores)
    cli.command("anchor")(anchor)


def _format_rows() -> list[dict]:
    """``ragbridge formats --json``'s records (their keys are documented in the README)."""
    return [
        {"name": name, "suffixes": list(f.suffixes), "folder": f.is_dir, "read": f.read is not None,
         "write": f.write is not None, "recognised": bool(f.fields), "description": f.description,
         "cannot_hold": list(f.cannot_hold), "resaved_by": f.resaved_by, "resave_drops": list(f.resave_drops)}
        for name, f in sorted(get_formats().items())
    ]


def formats(
    as_json: bool = typer.Option(False, "--json", help="Print JSON: one object per format."),
) -> None:
    """List the dataset formats that ``convert`` and ``run`` read and write, and what each cannot hold."""
    rows = _format_rows()
    if as_json:
        typer.echo(json.dumps({"formats": rows}, indent=2, ensure_ascii=False))
        return
    table = Table(title="Formats (name one with --format, --from, --to)", title_justify="default",
                  box=box.SIMPLE_HEAD, show_lines=False, pad_edge=False)
    table.add_column("format", no_wrap=True)
    table.add_column("files", overflow="fold")
    table.add_column("r/w", no_wrap=True)
    table.add_column("what it is; what it cannot hold", overflow="fold", ratio=1)
    for r in rows:
        files = "folder" if r["folder"] else " ".join(r["suffixes"]) or "-"
        lost = ", ".join(r["cannot_hold"])
        text = escape(r["description"]) + "\n" + (f"[yellow]the file cannot hold: {escape(lost)}[/]" if lost
                                                   else "[green]the file holds every field[/]")
        if r["resaved_by"]:
            dropped = ", ".join(r["resave_drops"])
            text += f"\nafter {escape(r['resaved_by'])}: " + (
                f"[yellow]loses {escape(dropped)}[/]" if dropped else "[green]keeps every field[/]")
        table.add_row(r["name"], files, ("r" if r["read"] else "") + ("w" if r["write"] else ""), text)
    out.print(table)
    recognised = [r["name"] for r in rows if r["recognised"]]
    if recognised:
        out.print(f"A .jsonl, .json, .csv or .parquet file (or datasets folder) with the fields of "
                  f"{', '.join(recognised)} is read as that format.", highlight=False)
    out.print("'after ...': what is left once the library itself loads the file and saves it again.",
              highlight=False)
    out.print("Each format's field mapping and losses: docs/formats.md.", highlight=False)


#: formats read a batch at a time (`ragbridge.formats.source.open_cases`, not whole) and written a
#: case at a time: a golden set converted from one of them to another holds a batch in memory, not
#: every case
STREAMED = ("jsonl", "trec", "csv", "parquet")


def _streamed(source: Path, from_format: Optional[str], qrels: Optional[Path], target: Path,
              to_format: Optional[str]) -> bool:
    """Whether ``convert`` reads ``source`` a batch at a time (else whole: the errors are load_cases')."""
    try:
        return (source.is_file() and reading_format(source, from_format, {"qrels": qrels}).name in STREAMED
                and writing_format(target, to_format).name in STREAMED)
    except DatasetError:
        return False


def convert(
    source: Path = typer.Argument(..., help="Dataset to read."),
    target: Path = typer.Argument(..., help="Where to write."),
    from_format: Optional[str] = typer.Option(
        None, "--from", help="Format of SOURCE (default: from its suffix)."),
    to_format: Optional[str] = typer.Option(
        None, "--to", help="Format of TARGET (default: from its suffix)."),
    qrels: Optional[Path] = typer.Option(
        None, "--qrels", help="TREC qrels file of a TREC run SOURCE (--from trec; default: a .qrels beside "
                              "it)."),
) -> None:
    """Convert a dataset between formats (canonical JSONL, CSV, Parquet, datasets, TREC, and the backends'
    own)."""
    refuse_overwriting(target, source, qrels)
    with contextlib.ExitStack() as opened:
        try:
            streamed = _streamed(source, from_format, qrels, target, to_format)
            if streamed:
                reading = counting_progress(after=2.0)
                cases = opened.enter_context(open_cases(source, from_format, near=target, qrels=qrels,
                                                        progress=reading))
                reading(len(cases), done=True)
                warnings = [w.text for w in cases.warnings if w.data]
            else:
                cases = load_cases(source, from_format, qrels=qrels)
                warnings = input_warnings(cases)
            for line in warnings:
                warn(line)
            fmt = writing_format(target, to_format)
            if streamed and fmt.name == "jsonl":  # the canonical lines its reading wrote, moved there
                try:
                    cases.save(target)
                    mask = os.umask(0)
                    os.umask(mask)
                    os.chmod(target, 0o666 & ~mask)  # as a file written there is made, not the scratch's 0600
                except OSError as exc:
                    raise DatasetError(f"cannot be written: {exc.strerror or exc}", path=target) from None
                lost, dropped = [], records_resave_lost(cases.records())
            else:
                writing = _Counted(cases, counting_progress("writing", "written", after=2.0))
                lost = write_cases(writing, target, to_format)
                dropped = resave_losses(cases, target, to_format)
        except DatasetError as exc:
            fail(str(format_hinted(exc, from_format)))
    out.print(f"wrote {len(cases):,} case(s) to {target}")
    if lost:
        warn(f"the target format cannot hold {', '.join(lost)}; those values were not kept "
             "(see ragbridge formats)")
    if dropped:
        warn(f"the file holds them, but after {fmt.resaved_by} these are lost: {', '.join(dropped)} "
             "(see ragbridge formats)")


class _Counted:
    """``cases`` (a sequence, or a golden set read in batches), their count shown by ``progress(n)`` as a
    writer iterates them (a thousand at a time) and whole at the end; anything else asked of them is
    theirs."""

    def __init__(self, cases: Any, progress: Any):
        self._cases, self._progress = cases, progress

    def __len__(self) -> int:
        return len(self._cases)

    def __iter__(self):
        n = 0
        for n, case in enumerate(self._cases, 1):
            if n % 1000 == 0:
                self._progress(n)
            yield case
        self._progress(n, done=True)

    def __getitem__(self, i):
        return self._cases[i]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cases, name)


def _stores(able: str) -> str:
    """The schemes of the trace stores registered that can ``able`` (``pull``, ``push``), for help."""
    from ..traces import get_trace_stores

    return ", ".join(f"{n}://" for n, s in sorted(get_trace_stores().items()) if getattr(s, able)) or "none"


def _score_targets() -> str:
    """What ``export-scores --to`` takes, for its help: every score format and trace store registered."""
    from ..traces import get_score_formats

    return f"{', '.join(sorted(get_score_formats()))}; or a trace store's address: {_stores('push')}"


def sample(
    traces: Optional[str] = typer.Argument(
        None, help="Trace export (OTLP JSON, span objects, a span export: see ragbridge formats) or a JSONL "
                   "log of interactions; or give --from with a trace store's address."),
    n: Optional[int] = typer.Option(None, "--n", help="At most this many traces (default 200; all with "
                                                      "--rate alone)."),
    rate: Optional[float] = typer.Option(
        None, "--rate", help="Keep each trace whose draw (a hash of its id and the seed) is below RATE, in "
                             "(0, 1]: the same trace is in or out every day."),
    seed: int = typer.Option(0, "--seed", help="Seed: the same file, filters and seed give the same sample."),
    where: List[str] = typer.Option(
        None, "--where", help="Keep only traces with a span whose attribute key=value (repeatable: all on "
                              "one span; tag=billing matches a tag); for a log, field=value or a path."),
    since: Optional[str] = typer.Option(
        None, "--since", help="Only traces with a span that starts at or after this: ISO 8601 (2026-11-02, "
                              "2026-11-02T10:00Z) or back from now (24h, 7d)."),
    until: Optional[str] = typer.Option(
        None, "--until", help="Only traces with a span that starts before this (as --since)."),
    by: str = typer.Option(
        "trace", "--by", help="Draw traces, or sessions (every turn of a drawn session becomes a case)."),
    from_format: Optional[str] = typer.Option(
        None, "--from", help="Format of TRACES (default: recognised from its content), or a trace store to "
                             "pull from: " + _stores("pull") + " (SCHEME://HOST[:PORT]/PROJECT; keys from "
                             "the environment)."),
    mapping: Optional[Path] = typer.Option(
        None, "--mapping", help="TOML file mapping log fields to the schema (logs only; docs/traces.md)."),
    signals: Optional[Path] = typer.Option(
        None, "--signals", help="User feedback by trace_id or span_id (JSONL or CSV: name, score, label, "
                                "note, polarity), carried into the cases."),
    out_file: Path = typer.Option(
        ..., "--out", "-o", help="Where to write the sampled cases (.jsonl, .csv, .parquet)."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Draw a reproducible sample of production traces (or logged interactions) as canonical cases,
    ready for reference-free metrics."""
    from ..run.sample import load_mapping, sample_traces
    from ..traces.signals import load_signals
    from ..traces.stores import is_address

    source = traces
    if from_format is not None and is_address(from_format):
        if traces is not None:
            fail(f"give the traces once: a file ({traces}) or --from {from_format}, not both")
        source, from_format = from_format, None
    if source is None:
        fail("no traces: give a trace file, or --from a trace store's address (SCHEME://HOST:PORT/PROJECT; "
             f"stores: {_stores('pull')})")
    refuse_overwriting(out_file, None if is_address(source) else source, signals, mapping)
    try:
        feedback = load_signals(signals) if signals is not None else None
        drawn = sample_traces(source, n if n is not None or rate is not None else 200, seed=seed,
                              where=where or (), mapping=load_mapping(mapping), rate=rate,
                              format=from_format, signals=feedback, since=since, until=until, by=by)
        if not drawn.cases:
            lines = drawn.report.lines() if drawn.report else []
            fail(f"{source}: none of the {drawn.drawn} drawn {'session' if by == 'session' else 'trace'}(s) "
                 "gives a case" + (": " + "; ".join(lines) if lines else ""))
        write_cases(drawn.cases, out_file)
    except DatasetError as exc:
        fail(str(exc))
    for line in (drawn.report.lines() if drawn.report else []):
        warn(f"{source}: {line}")
    if signals is not None and not drawn.signals:
        given = sum(len(v) for v in (feedback or {}).values())
        warn(f"{signals}: none of its {given} signal(s) is about a sampled trace or one of its spans: the "
             "cases carry no signals (check that its trace_id or span_id are the trace file's ids, hex)")
    if as_json:
        typer.echo(json.dumps({"out": str(out_file), **drawn.record()}, indent=2))
        return
    unit = "span(s)" if drawn.kind == "traces" else "record(s)"
    what = "trace(s)" if drawn.kind == "traces" else "interaction(s)"
    drew = f"{drawn.drawn} session(s) drawn" if drawn.by == "session" else f"{drawn.drawn} drawn"
    turns = f", turns of {drawn.sessions} session(s)" if drawn.sessions else ""
    out.print(f"sampled {len(drawn.cases)} {what} into {escape(str(out_file))} ({drew}{turns}; "
              f"{drawn.matched} of {drawn.read} {unit} passed the filters)", highlight=False)


def export_scores(
    run: Path = typer.Argument(..., help="Run folder whose cases came from traces (ragbridge sample)."),
    to_format: str = typer.Option(..., "--to", help="Where the scores go: " + _score_targets() + "."),
    out_file: Optional[Path] = typer.Option(
        None, "--out", "-o", help="Where to write (a file, or a folder for some formats); not with a store's "
                                  "address."),
    metric: List[str] = typer.Option(None, "--metric", "-m", help="Only these metrics (repeatable)."),
    backend: List[str] = typer.Option(None, "--backend", "-b", help="Only these backends (repeatable)."),
    threshold: List[str] = typer.Option(
        None, "--threshold", "-t", help="Pass threshold for the labels: 0.7, rubric=0.7 or "
                                        "rubric:faithfulness=0.7 (repeatable; default: each metric's pass "
                                        "mark, as the report's, docs/report.md)."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Write a run's scores as span evaluations (trace id, span id, name, label, score, explanation) for
    the tracing tool the traces came from, or send them to its server."""
    from ..analysis.table import AnalysisError, open_run
    from ..analysis.thresholds import pass_marks
    from ..formats.files import atomic_path
    from ..traces import get_score_formats, get_trace_stores
    from ..run.folder import run_files
    from ..traces.stores import is_address, parse_address, store_for
    from ..verdicts import verdict

    fmts = get_score_formats()
    store = address = None
    if is_address(to_format):
        try:
            address = parse_address(to_format)
            store = store_for(address, get_trace_stores(), "push")
        except DatasetError as exc:
            fail(str(exc))
        if out_file is not None:
            fail(f"--out goes with a file format; --to {to_format} sends the scores to the server")
    elif to_format not in fmts:
        fail(f"unknown score format {to_format!r}; known: {_score_targets()}")
    elif out_file is None:
        fail(f"--to {to_format} writes a file: give --out")
    refuse_overwriting(out_file, *run_files(run))
    try:
        r = open_run(run)
        marks = pass_marks(r, threshold or None, backends=sorted(r.columns.backends()))
        export = _Export(r, metric, backend, lambda s: verdict(s, marks.get(s.backend, s.metric)))
        first = export.first()
    except (AnalysisError, DatasetError) as exc:
        fail(str(exc))
    if first is None:
        fail(f"{run}: no score of a case read from a trace" + (
            f" ({export.homeless:,} score(s) of cases with no trace id: sample traces with ragbridge sample)"
            if export.homeless else "")
            + f"; export-scores writes span evaluations for traced runs; every score of any run as data: "
              f"its scores.jsonl, or ragbridge report {run} --format json --out FILE")
    try:
        if store is not None:
            notes = store.push(address, export.rows(first))
        else:
            fmt = fmts[to_format]
            with atomic_path(out_file) as tmp:
                if fmt.is_dir:
                    tmp.mkdir()
                notes = fmt.write(export.rows(first), tmp)
    except DatasetError as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"{out_file}: cannot be written: {exc}")
    if export.homeless:
        notes = [*notes, f"{export.homeless} score(s) of cases that did not come from a trace were left out"]
    for line in notes:
        warn(line)
    if store is not None:
        spans, documents = export.written(True, store.documents)
    else:
        spans, documents = export.written(fmts[to_format].needs_value, fmts[to_format].documents)
    where = to_format if store is not None else str(out_file)
    if as_json:
        typer.echo(json.dumps({"out": None if store is not None else str(out_file), "to": to_format,
                               "format": None if store is not None else to_format, "evaluations": spans,
                               "document_evaluations": documents, "left_out": export.homeless,
                               "warnings": notes}, indent=2))
        return
    names = export.names
    verb = "sent" if store is not None else "wrote"
    out.print(f"{verb} {spans} span evaluation(s)" + (f" and {documents} document evaluation(s)"
                                                           if documents else "")
              + f" ({len(names)} name(s): {escape(', '.join(names[:4]))}{', ...' if len(names) > 4 else ''}) "
              f"to {escape(where)}", highlight=False)


class _Export:
    """A run's scores as span evaluations (`ragbridge.traces.evaluations`), made as they are written:
    the cases' trace ids are read once (kept as a compact block of bytes), then each (backend, metric)
    of the run in turn, its scores a block at a time, in score order. ``homeless`` counts the scores
    of cases that did not come from a trace; `written` counts what a format wrote."""

    def __init__(self, run: Any, metrics: Optional[List[str]], backends: Optional[List[str]], passed: Any):
        import numpy as np

        from ..traces.evaluations import trace_of

        self.run, self.passed = run, passed
        cols = run.columns
        index = cols.cases
        self.keys = [(b, m) for b, m in cols.columns if (not metrics or m in metrics)
                     and (not backends or b in backends)]
        info, at = bytearray(), np.full(index.described, -1, np.int64)
        ends = []
        for start in range(0, index.described, 2000):
            part = list(range(start, min(start + 2000, index.described)))
            for i, head in zip(part, index.heads(part)):
                where = trace_of(head[0].get("metadata")) if head is not None else None
                if where is not None:
                    at[i] = len(ends)
                    info += json.dumps(where, ensure_ascii=False).encode("utf-8")
                    ends.append(len(info))
        self._info, self._at = bytes(info), at
        self._ends = np.array(ends, np.int64)
        self.homeless = sum(int(cols.column(*k).present.sum()) - int(self._traced(cols.column(*k)).sum())
                            for k in self.keys)
        self.names = sorted(f"{b}.{m}" for b, m in self.keys if self._traced(cols.column(b, m)).any())
        self._counts = {"spans": 0, "spans_valued": 0, "documents": 0, "documents_valued": 0}

    def _traced(self, col: Any) -> Any:
        import numpy as np

        n = len(self._at)
        traced = np.zeros(len(col.present), bool)
        traced[:n] = self._at >= 0
        return col.present & traced

    def _where(self, i: int) -> dict[str, Any]:
        k = int(self._at[i])
        start = int(self._ends[k - 1]) if k else 0
        return json.loads(self._info[start:int(self._ends[k])])

    def first(self) -> Optional[dict[str, Any]]:
        """The first row, or None when no score is of a case from a trace."""
        return next(iter(self._rows()), None)

    def rows(self, first: Optional[dict[str, Any]] = None):
        """Every row, counted as it is made (``first``: what `first` gave, made again)."""
        for row in self._rows():
            key = "documents" if row["document_position"] is not None else "spans"
            self._counts[key] += 1
            self._counts[key + "_valued"] += row["score"] is not None
            yield row

    def _rows(self):
        import numpy as np

        from ..traces.evaluations import score_rows

        cols, index = self.run.columns, self.run.columns.cases
        for key in self.keys:
            col = cols.column(*key)
            traced = np.flatnonzero(self._traced(col))
            for start in range(0, len(traced), 2000):
                part = traced[start:start + 2000].tolist()
                for i, score in zip(part, col.scores(part)):
                    chunks = score.evidence.chunks if score.evidence is not None and not score.error else None
                    position = (dict(reversed([(cid, k) for k, cid in enumerate(index.heads([i])[0][1])])).get
                                if chunks else dict().get)
                    yield from score_rows(score, self._where(i), position, self.passed)

    def written(self, needs_value: bool, documents: bool) -> tuple[int, int]:
        """How many span and document evaluations a format or store that ``needs_value`` (and takes
        ``documents``, or not) wrote of the rows made."""
        c = self._counts
        spans = c["spans_valued"] if needs_value else c["spans"]
        docs = c["documents_valued"] if needs_value else c["documents"]
        return spans, docs if documents else 0


def anchor(
    dataset: Path = typer.Argument(..., help="Golden set labelled by chunk id or section ('relevant')."),
    corpus: Path = typer.Option(
        ..., "--corpus", help="The documents: a folder of text or markdown files, or a JSONL of {doc, "
                              "text}."),
    out_file: Path = typer.Option(..., "--out", "-o", help="Where to write the golden set with span labels."),
    chunks: Optional[Path] = typer.Option(
        None, "--chunks", help="The chunking the labels were made on (JSONL, one chunk a line: id, text, "
                               "source, doc); else the cases' own retrieved chunks are used."),
    fmt: Optional[str] = typer.Option(
        None, "--format", help="Format of DATASET, when the suffix does not tell."),
    keep_unplaced: bool = typer.Option(
        False, "--keep-unplaced", help="Write the golden set even if some labels cannot be placed (they "
                                       "stay in 'relevant' as they are)."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as one JSON document."),
) -> None:
    """Anchor chunk-id and section labels to spans of the documents, so that they survive re-chunking.

    Each label of 'relevant' becomes span labels in 'relevant_spans': a chunk id the span of that
    chunk, a section the span of its chunks, a document name the whole document. A label that cannot
    be placed is listed and nothing is written (exit 2), unless --keep-unplaced: then it stays in
    'relevant' as it is, tied to the old chunking.
    """
    from ..formats.anchor import anchor_cases, read_chunks
    from ..formats.corpus import read_corpus

    refuse_overwriting(out_file, dataset, corpus, chunks)
    try:
        documents = read_corpus(corpus)
        known = read_chunks(chunks) if chunks is not None else []
        cases = load_cases(dataset, fmt)
        anchored, unplaced, placed = anchor_cases(cases, documents, known)
        if unplaced and not keep_unplaced:
            listed = "; ".join(f"case {u.case_id!r}, label {u.label!r}: {u.reason}" for u in unplaced[:5])
            more = f"; and {len(unplaced) - 5} more" if len(unplaced) > 5 else ""
            fail(f"{len(unplaced)} label(s) cannot be placed: {listed}{more}; nothing was written (fix or "
                 "remove those labels, or pass --keep-unplaced to keep them in 'relevant' as they are)")
        lost = write_cases(anchored, out_file)
    except DatasetError as exc:
        fail(str(exc))
    if as_json:
        print_json({"out": str(out_file), "cases": len(anchored), "placed": placed,
                    "unplaced": [{"case": u.case_id, "label": u.label, "reason": u.reason}
                                 for u in unplaced]})
    else:
        out.print(f"anchored {placed} label(s) of {len(anchored)} case(s) to spans of {len(documents)} "
                  f"document(s); wrote {escape(str(out_file))}", highlight=False)
        for u in unplaced:
            out.print(f"not placed: case {escape(u.case_id)!r}, label {escape(u.label)!r}: "
                      f"{escape(u.reason)}", highlight=False)
    if unplaced:
        warn(f"{len(unplaced)} label(s) could not be placed and stay in 'relevant' as they were")
    if lost:
        err.print("[yellow]warning:[/] the output format cannot hold " + escape(", ".join(lost))
                  + "; write .jsonl to keep the span labels", highlight=False)
