"""The dataset commands: ``ragbridge formats`` (what each format reads, writes and cannot hold),
``ragbridge convert`` (between formats), ``ragbridge sample`` (logged interactions as cases) and
``ragbridge anchor`` (chunk-id and section labels as span labels of the documents).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer
from rich import box
from rich.markup import escape
from rich.table import Table

from ..formats import DatasetError, get_formats, load_cases, write_cases
from ..formats.records import input_warnings
from .output import err, fail, out, print_json, warn

__all__ = ["register", "formats", "convert", "sample", "anchor"]


def register(cli: typer.Typer) -> None:
    cli.command("formats")(formats)
    cli.command("convert")(convert)
    cli.command("sample")(sample)
    cli.command("anchor")(anchor)


def _format_rows() -> list[dict]:
    """``ragbridge formats --json``'s records (their keys are documented in the README)."""
    return [
        {"name": name, "suffixes": list(f.suffixes), "folder": f.is_dir, "read": f.read is not None,
         "write": f.write is not None, "recognised": bool(f.fields), "description": f.description,
         "cannot_hold": list(f.cannot_hold)}
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
    table = Table(title="Formats (name one with --format, --from, --to)", title_justify="left",
                  box=box.SIMPLE_HEAD, show_lines=False, pad_edge=False)
    table.add_column("format", no_wrap=True)
    table.add_column("files", overflow="fold")
    table.add_column("r/w", no_wrap=True)
    table.add_column("what it is; what it cannot hold", overflow="fold", ratio=1)
    for r in rows:
        files = "folder" if r["folder"] else " ".join(r["suffixes"]) or "-"
        lost = ", ".join(r["cannot_hold"])
        text = escape(r["description"]) + "\n" + (
            f"[yellow]cannot hold: {escape(lost)}[/]" if lost else "[green]holds every field[/]")
        table.add_row(r["name"], files, ("r" if r["read"] else "") + ("w" if r["write"] else ""), text)
    out.print(table)
    recognised = [r["name"] for r in rows if r["recognised"]]
    if recognised:
        out.print(f"A .jsonl, .json, .csv or .parquet file (or datasets folder) with the fields of "
                  f"{', '.join(recognised)} is read as that format.", highlight=False)
    out.print("Each format's field mapping and losses: docs/formats.md.", highlight=False)


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
    try:
        cases = load_cases(source, from_format, qrels=qrels)
        for line in input_warnings(cases):
            warn(line)
        lost = write_cases(cases, target, to_format)
    except DatasetError as exc:
        fail(str(exc))
    out.print(f"wrote {len(cases)} case(s) to {target}")
    if lost:
        err.print("[yellow]warning:[/] the target format cannot hold " + escape(", ".join(lost))
                  + "; those values were not kept (see ragbridge formats)", highlight=False)


def sample(
    traces: Path = typer.Argument(..., help="JSONL log of production interactions."),
    n: int = typer.Option(200, "--n", help="How many interactions to draw."),
    seed: int = typer.Option(0, "--seed", help="Seed: the same log, filters and seed give the same sample."),
    where: List[str] = typer.Option(
        None, "--where", help="Keep only interactions with field=value (repeatable; tag=billing matches a "
                              "tag)."),
    mapping: Optional[Path] = typer.Option(
        None, "--mapping", help="TOML file mapping log fields to the schema (see ragbridge.run.sample)."),
    out_file: Path = typer.Option(
        ..., "--out", "-o", help="Where to write the sampled cases (.jsonl, .csv, .parquet)."),
) -> None:
    """Draw a reproducible sample of logged interactions as canonical cases, ready for reference-free
    metrics."""
    from ..run.sample import load_mapping, sample_traces

    try:
        cases = sample_traces(traces, n, seed=seed, where=where or (), mapping=load_mapping(mapping))
        write_cases(cases, out_file)
    except DatasetError as exc:
        fail(str(exc))
    out.print(f"sampled {len(cases)} interaction(s) into {escape(str(out_file))}", highlight=False)


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
    as_json: bool = typer.Option(False, "--json", help="Print the result as one JSON document."),
) -> None:
    """Anchor chunk-id and section labels to spans of the documents, so that they survive re-chunking.

    Each label of 'relevant' becomes span labels in 'relevant_spans': a chunk id the span of that
    chunk, a section the span of its chunks, a document name the whole document. A label that cannot
    be placed stays in 'relevant' and is listed; the exit code is 0 either way.
    """
    from ..formats.anchor import anchor_cases, read_chunks
    from ..formats.corpus import read_corpus

    try:
        documents = read_corpus(corpus)
        known = read_chunks(chunks) if chunks is not None else []
        cases = load_cases(dataset, fmt)
        anchored, unplaced, placed = anchor_cases(cases, documents, known)
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
