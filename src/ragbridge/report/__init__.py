"""One report for a run of mixed backends: HTML (one self-contained file), Markdown or JSON.

``ragbridge report RUN [--format html|md|json] [--out FILE]`` reads a run folder and writes it; from
Python, `write_report` does the same, and `report_data` returns the content as a dict for notebooks.
The parts: ``data`` (what the report shows, the JSON format; its pass marks and verdicts are those of
`ragbridge.analysis.thresholds` and `ragbridge.verdicts`, as in every other output), ``html`` (the
page and its SVG plots, ``assets/``), ``markdown``, ``ci`` (a gate's JUnit XML
and Markdown summary) and ``text`` (how numbers and text from the data are written in every output).

A run judged by ragbridge's stub judge (``run.json``: ``judge.stub``) says so at the top of every
format: its judged scores test the plumbing, not the answers.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, TextIO, Union

if TYPE_CHECKING:  # pragma: no cover
    from ..run import Run

__all__ = ["write_report", "format_for", "render", "write", "report_data", "render_html", "render_markdown",
           "render_json", "FORMATS"]

#: report format -> the suffix of its file
FORMATS = {"html": ".html", "md": ".md", "json": ".json"}

#: the names of the parts, imported when first used (``ragbridge.report.text``, which every command
#: prints with, does not import the analysis the reports need)
_PARTS = {"report_data": ".data", "render_json": ".json_file", "render_html": ".html",
          "render_markdown": ".markdown"}


def __getattr__(name: str) -> Any:
    if name not in _PARTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_PARTS[name], __name__), name)


def render(run: Run, data: dict, fmt: str, full: Optional[int] = None) -> str:
    """The report of ``run`` with content ``data`` (`report_data`; for HTML, ``case_texts=False``
    will do) in format ``fmt``, a key of `FORMATS`; the HTML shows at most ``full`` cases in full
    (default `ragbridge.report.html.FULL_CASES`; `ragbridge.report.html.cases_in_full`)."""
    import io

    buffer = io.StringIO()
    write(run, data, fmt, buffer, full)
    return buffer.getvalue()


def write(run: Run, data: dict, fmt: str, out: TextIO, full: Optional[int] = None) -> None:
    """`render`, written to ``out`` a piece at a time (a large run's cases one by one)."""
    from .html import FULL_CASES, write_html
    from .json_file import write_json
    from .markdown import write_markdown

    # the three show the same cases in full
    write = {"json": write_json, "html": write_html, "md": write_markdown}[fmt]
    write(run, out, data, full=FULL_CASES if full is None else full)


#: what a file's suffix says of a report's format
SUFFIXES = {".html": "html", ".htm": "html", ".md": "md", ".markdown": "md", ".json": "json"}


def format_for(fmt: Optional[str], out: Union[str, Path, None]) -> str:
    """The format of a report written to ``out``: ``fmt``, else the one ``out``'s suffix names (`SUFFIXES`),
    else html. `AnalysisError` for a format that is none of `FORMATS`, a suffix that contradicts ``fmt``,
    or ``.xml`` (JUnit XML is the gate's)."""
    from ..analysis.table import AnalysisError

    if fmt is not None and fmt not in FORMATS:
        raise AnalysisError(f"unknown report format {fmt!r}; choose one of: {', '.join(FORMATS)}",
                            cli=f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    suffix = Path(out).suffix.lower() if out is not None and str(out) != "-" else ""
    if suffix == ".xml":
        raise AnalysisError(f"{out}: a report is html, md or json; JUnit XML is what `ragbridge gate RUN "
                            f"--junit {out}` writes")
    said = SUFFIXES.get(suffix)
    if fmt is None:
        return said or "html"
    if said is not None and said != fmt:
        raise AnalysisError(f"{out} names a {said} file but the format is {fmt}: give it a {FORMATS[fmt]} "
                            f"name, or fmt={said!r} (or leave the format out: the suffix chooses it)",
                            cli=f"--out {out} names a {said} file but --format is {fmt}: give --out a "
                                f"{FORMATS[fmt]} name, or --format {said} (or leave --format out: the "
                                "suffix chooses it)")
    return fmt


def write_report(run: Union[Run, str, Path], out: Union[str, Path], fmt: Optional[str] = None,
                 full: Optional[int] = None, **kw) -> Path:
    """Render and write the report (whole or not at all); returns the path written. ``fmt``: html, md
    or json (default: what ``out``'s suffix says, else html; `format_for`). ``kw``: the options of
    `report_data`."""
    from ..analysis.table import open_run
    from ..formats.files import atomic_path
    from .data import report_data

    fmt = format_for(fmt, out)
    run = open_run(run)
    data = report_data(run, case_texts=False, **kw)
    with atomic_path(out) as tmp, open(tmp, "w", encoding="utf-8") as f:
        write(run, data, fmt, f, full)
    return Path(out)
