"""What the commands print: tables that fit the width, plain lines when they do not, and JSON.

Conventions every command keeps:

- Width is rich's: the terminal's, else ``$COLUMNS``, else 80 (so a CI log gets 80). A table is
  printed only when it fits that width with no cell cut (`print_table`: names and numbers are never
  wrapped, prose columns may wrap at spaces); otherwise each of its rows is printed as one plain line
  of text, wrapped at spaces with an indent, never between a name and its number. Nothing a user
  needs is ever cut with an ellipsis.
- Text from users or libraries (case ids, questions, reasons) is printed whole, never shortened.
- With ``--json`` stdout holds exactly one JSON document (`print_json`): NaN and infinities are
  ``null``, numbers are plain JSON numbers; notes and warnings go to stderr, as progress always does.
  The top-level keys of each command's document are listed in the README's "JSON output".
"""

from __future__ import annotations

import io
import json
import math
import re
import sys
import textwrap
from pathlib import Path
from typing import Any, Iterable, Optional

from rich.console import Console
from rich.table import Table
from rich.text import Text

__all__ = ["fits", "print_table", "print_lines", "print_json", "jsonable", "records", "num", "one_line"]

_WIDE = 100_000
# wrapping never separates a name from its number or a figure from its interval
# ("agreement 0.85", "kappa 0.91 [0.78, 0.97]")
_TOGETHER = re.compile(r"(?:\S+ )?\S+ \[[^\[\]\s]*(?: [^\[\]\s]+){0,3}\]|\S+ [-+]?\d\S*")
_GLUE = "\x00"


def _render(table: Table, width: int) -> str:
    capture = Console(width=width, file=io.StringIO(), color_system=None, force_terminal=False,
                      legacy_windows=False)
    capture.print(table)
    return capture.file.getvalue()


def fits(console: Console, table: Table) -> bool:
    """True when ``table`` renders within ``console.width`` with nothing cut.

    Rich squeezes a table that is too wide: it wraps text columns at spaces (fine) and cuts what
    cannot wrap with an ellipsis (not fine). A table fits when rendering it at the console's width
    adds no ellipsis to what it renders at any width.
    """
    return _render(table, max(console.width, 1)).count("…") == _render(table, _WIDE).count("…")


def print_lines(console: Console, lines: Iterable[str], indent: str = "    ") -> None:
    """Plain text lines, each wrapped at spaces to the console's width.

    A line keeps its own leading spaces; its continuation lines are indented by ``indent`` more.
    Words are never broken, so only a single word wider than the console can exceed it.
    """
    width = max(console.width, 20)
    for line in lines:
        lead = line[: len(line) - len(line.lstrip(" "))]
        kept = _TOGETHER.sub(lambda m: m.group().replace(" ", _GLUE), line)
        wrapped = textwrap.wrap(
            kept, width=width, subsequent_indent=lead + indent, break_long_words=False,
            break_on_hyphens=False,
        ) or [""]
        for part in wrapped:
            console.print(part.replace(_GLUE, " "), markup=False, highlight=False, soft_wrap=True)


def one_line(text: Any) -> str:
    """``text`` with every run of whitespace (newlines too) as one space; ``""`` for None and NaN."""
    if text is None or (isinstance(text, float) and math.isnan(text)):
        return ""
    return " ".join(str(text).split())


def print_table(console: Console, table: Table, lines: Iterable[str]) -> None:
    """``table`` when it fits the width, else its title and ``lines`` (one per row) as plain text."""
    if fits(console, table):
        console.print(table)
        return
    title = table.title
    if title:
        print_lines(console, [title.plain if isinstance(title, Text) else Text.from_markup(str(title)).plain])
    print_lines(console, lines)


def num(value: Any, digits: int = 3, signed: bool = False) -> str:
    """A number with ``digits`` decimals (a sign when ``signed``); ``—`` for None and NaN."""
    if value is None:
        return "—"
    try:
        f = float(value)
    except (TypeError, ValueError):
        return str(value)
    if math.isnan(f):
        return "—"
    return f"{f:+.{digits}f}" if signed else f"{f:.{digits}f}"


def records(frame) -> list[dict[str, Any]]:
    """A DataFrame as a list of JSON-ready rows (NaN as None, numpy scalars as Python numbers)."""
    if frame is None or len(frame) == 0:
        return []
    text = frame.to_json(orient="records", force_ascii=False, double_precision=15, default_handler=str)
    return json.loads(text)


def jsonable(obj: Any) -> Any:
    """``obj`` with DataFrames as row lists, NaN and infinities as None, numpy and paths as plain types."""
    if obj is None or isinstance(obj, (bool, str, int)):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, (set, frozenset)):
        return sorted(jsonable(v) for v in obj)
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "to_json") and hasattr(obj, "columns"):  # a DataFrame
        return records(obj)
    if hasattr(obj, "item") and callable(obj.item):  # a numpy scalar
        return jsonable(obj.item())
    if hasattr(obj, "tolist"):  # a numpy array
        return jsonable(obj.tolist())
    return str(obj)


def print_json(data: Any, file: Optional[Any] = None) -> None:
    """One JSON document on stdout (or ``file``), indented, nothing else."""
    stream = file or sys.stdout
    stream.write(json.dumps(jsonable(data), indent=2, ensure_ascii=False, allow_nan=False) + "\n")
    stream.flush()
