"""What the commands print: the consoles, errors and warnings, tables that fit the width, plain lines
when they do not, and JSON.

Conventions every command keeps:

- Exit codes, the same for every command: 0 success; 1 a gate or check failed (`EXIT_CHECK_FAILED`);
  2 bad input or configuration, nothing written (`EXIT_BAD_INPUT`, what `fail` exits with), and an
  output that cannot be written (a read-only folder, a full disk: `storage_error`; an output is whole
  or absent, and a run keeps what it scored, to resume); 3
  ``run``/``rescore`` finished but some scores errored (`EXIT_SCORE_ERRORS`); 4 ``run``/``rescore``
  stopped because the judge budget was spent, errored scores or not (`EXIT_BUDGET_SPENT`); 5
  ``run``/``rescore`` finished but computed nothing, every score undefined (`EXIT_NOTHING_COMPUTED`);
  130 interrupted (`EXIT_INTERRUPTED`).
- Results go to `out` (stdout); errors, warnings, notes and progress to `err` (stderr); a warning or
  a note (`say`, ragbridge's log records too) is wrapped at the width with its continuation lines
  indented, an error is one line.
- Width is rich's: the terminal's, else ``$COLUMNS``, else 80 (so a CI log gets 80). A table is
  printed only when it fits that width with no cell cut (`print_table`: names and numbers are never
  wrapped, prose columns may wrap at spaces); otherwise each of its rows is printed as one plain line
  of text, wrapped at spaces with an indent, never between a name and its number. Nothing a user
  needs is ever cut with an ellipsis.
- Text from users or libraries (case ids, questions, reasons) is printed whole, never shortened, and
  never reaches the terminal raw: every string `out` and `err` print (plain text, markup, table cells
  and titles) is shown by `ragbridge.report.text.terminal_text`, control characters (ESC, a bell,
  C1 controls) and bidirectional controls (U+202E) as escapes (``\\x1b``, ``\\u202e``), so a case id,
  tag, reason or name can neither drive the terminal nor display other than it reads. Files keep the
  data exactly.
- With ``--json`` stdout holds exactly one JSON document (`print_json`): NaN and infinities are
  ``null``, numbers are plain JSON numbers, the characters a terminal acts on ``\\u``-escaped (the
  values are exact); notes and warnings go to stderr, as progress always does.
  The top-level keys of each command's document are listed in the README's "JSON output".
"""

from __future__ import annotations

import errno
import io
import re
import sys
import textwrap
from typing import Any, Iterable, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from ..report.text import json_chunks, jsonable, terminal_text

__all__ = ["TerminalConsole", "out", "err", "fail", "warn", "say", "storage_error", "fits",
           "table_width", "print_table", "print_lines", "print_json",
           "EXIT_CHECK_FAILED", "EXIT_BAD_INPUT", "EXIT_SCORE_ERRORS", "EXIT_BUDGET_SPENT",
           "EXIT_NOTHING_COMPUTED", "EXIT_INTERRUPTED"]

EXIT_CHECK_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_SCORE_ERRORS = 3
EXIT_BUDGET_SPENT = 4
EXIT_NOTHING_COMPUTED = 5
EXIT_INTERRUPTED = 130


class TerminalConsole(Console):
    """A rich console that shows every string it renders by `terminal_text` (see the module
    docstring). Strings become rich text in one method, ``render_str`` (printed strings, markup,
    table cells and titles, and the measuring of them), so widths are measured on the text shown."""

    def render_str(self, text: str, **kwargs: Any) -> Text:
        return super().render_str(terminal_text(text), **kwargs)


out = TerminalConsole()
err = TerminalConsole(stderr=True)

_WIDE = 100_000
# wrapping never separates a name from its number, a figure from its interval or a comparison
# ("agreement 0.85", "kappa 0.91 [0.78, 0.97]", "(native) 0.00 < 0.5"); a group starts a word, so groups
# one after another ("a [judge], b [judge], ...") stay apart
_TOGETHER = re.compile(
    r"(?<!\S)(?:(?:\S+ )?\S+ \[[^\[\]\s]*(?: [^\[\]\s]+){0,3}\]|\S+ [-+]?\d\S*(?: [<>]=? [-+]?\d\S*)?)")
_GLUE = "\x00"


def fail(message: str, code: int = EXIT_BAD_INPUT) -> None:
    """Print ``error: message`` on stderr, one line (`say`), and exit with ``code`` (2: bad input)."""
    say("error", message)
    raise typer.Exit(code)


def refuse_overwriting(out: Any, *inputs: Any) -> None:
    """Fail (exit 2, nothing written) when the output ``out`` would replace one of ``inputs``: the
    one check of every command that reads files and writes one (`ragbridge.formats.files.distinct_output`;
    a run folder's inputs are its files, `ragbridge.run.folder.run_files`)."""
    from ..formats.files import DatasetError, distinct_output

    try:
        distinct_output(None if str(out) == "-" else out, inputs)
    except DatasetError as exc:
        fail(str(exc))


_LABELS = {"error": "[bold red]error:[/]", "warning": "[yellow]warning:[/]", "note": "note:"}


def say(label: str, message: str) -> None:
    """Print ``label: message`` on stderr (``error``, ``warning`` or ``note``). A warning or a note is
    wrapped at the console's width as `print_lines` wraps: continuation lines indented, never inside
    a word, a path or between a name and its number (80 columns in a CI log or a pipe). An error is
    one line, whatever its length: the one line a failed command leaves, whole for a log's search."""
    if label == "error":
        err.print(f"{_LABELS[label]} {escape(message)}", highlight=False, soft_wrap=True)
        return
    first, *rest = _wrapped(terminal_text(f"{label}: {message}"), max(err.width, 20), "    ")
    err.print(_LABELS[label] + escape(first[len(label) + 1:]), highlight=False, soft_wrap=True)
    for part in rest:
        err.print(part, markup=False, highlight=False, soft_wrap=True)


#: the errors of a file system that will not take a write (or a read)
_STORAGE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO,
                   errno.ENOENT, errno.ENOTDIR, errno.EISDIR, errno.EEXIST}


def say_record(message: str) -> None:
    """A log record of ragbridge's on stderr: ``note: ...``/``warning: ...`` as `say` prints them, any
    other as a wrapped line."""
    label, sep, rest = message.partition(": ")
    if sep and label in _LABELS:
        say(label, rest)
    else:
        print_lines(err, [message])


def storage_error(exc: BaseException) -> Optional[str]:
    """The text of an error of the file system (``No space left on device: /runs/x/scores.jsonl``), or
    None for any other exception."""
    if not isinstance(exc, OSError) or isinstance(exc, (BrokenPipeError, ConnectionError)):
        return None
    if exc.errno not in _STORAGE_ERRNOS and not exc.filename:
        return None
    text = exc.strerror or str(exc)
    if not exc.filename:
        return text
    # a temporary beside an output (`ragbridge.formats.files.atomic_path`): the output's name
    from ..formats.files import output_name

    path = str(exc.filename)
    head, sep, name = path.rpartition("/")
    return f"{text}: {head}{sep}{output_name(name)}"


def warn(message: str) -> None:
    """Print ``warning: message`` on stderr (`say`)."""
    say("warning", message)


def _render(table: Table, width: int) -> str:
    capture = TerminalConsole(width=width, file=io.StringIO(), color_system=None, force_terminal=False,
                              legacy_windows=False)
    capture.print(table)
    return capture.file.getvalue()


def _unwrapped(table: Table) -> bool:
    """True when no column of ``table`` wraps or stretches (and the table has no set width)."""
    return table.width is None and table.min_width is None and not table.expand and all(
        c.no_wrap and c.overflow == "ellipsis" and c.width is None and c.min_width is None
        for c in table.columns)


def table_width(console: Console, table: Table) -> int:
    """The natural width of ``table``, none of whose columns wraps or stretches: rich's own measure
    of it (the sum of its columns' widths and its rules). Such a table is cut exactly when this is
    over the width (`fits`); adding a column adds that column's width and one rule."""
    if not _unwrapped(table):
        raise ValueError("table_width measures tables whose columns neither wrap nor stretch")
    return Measurement.get(console, console.options.update_width(_WIDE), table).maximum


def fits(console: Console, table: Table) -> bool:
    """True when ``table`` renders within ``console.width`` with nothing cut.

    Rich squeezes a table that is too wide: it wraps text columns at spaces (fine) and cuts what
    cannot wrap with an ellipsis (not fine). A table fits when rendering it at the console's width
    adds no ellipsis to what it renders at any width. A table none of whose columns wraps (nor
    stretches) is cut exactly when its natural width, rich's own measure of it, is over the width:
    that is measured, not rendered.
    """
    width = max(console.width, 1)
    if _unwrapped(table):
        return table_width(console, table) <= width
    return _render(table, width).count("…") == _render(table, _WIDE).count("…") and _no_column_squeezed(
        table, width)


def _no_column_squeezed(table: Table, width: int) -> bool:
    """True when rich gives every column at least its longest word, within ``width``: a wrapping
    column it squeezes further (to nothing, at 80 columns, for ``gate``'s detail) loses its text
    without an ellipsis, and a table that a column's ``min_width`` holds wider is cropped."""
    capture = Console(width=width, file=io.StringIO(), color_system=None, force_terminal=False,
                      legacy_windows=False)
    try:
        # as rich lays the table out: the width less its borders' (Table.__rich_console__)
        options = capture.options.update_width(width - table._extra_width)
        widths = table._calculate_column_widths(capture, options)
        wide = capture.options.update_width(_WIDE)
        needed = [table._measure_column(capture, wide, column).minimum for column in table.columns]
    except AttributeError:  # pragma: no cover - another rich: the ellipsis check alone
        return True
    # and the columns within the width (a column's min_width can hold the table wider: then cropped)
    return all(got >= need for got, need in zip(widths, needed)) and sum(widths) + table._extra_width <= width


def counting_progress(doing: str = "reading", done_: str = "read", after: float = 0.0):
    """A ``progress(n)`` callback (`open_cases`' while it reads, convert's while it writes): the cases so
    far on stderr, ``reading: 2,000 cases``; on a terminal twice a second at most, in a log (a CI
    job's) as often as the scoring's progress lines (`ragbridge.run.progress.progress_seconds`), the
    first at once, or once ``after`` seconds have passed (a short reading says nothing); called with
    ``done=True`` and the whole count, ``read: N cases`` where the last line gave less."""
    import time

    from ..run.progress import progress_seconds

    every = 0.5 if err.is_terminal else progress_seconds()
    state = {"last": None, "n": 0, "from": time.monotonic()}

    def show(n: int, done: bool = False) -> None:
        at = time.monotonic()
        if not done and at - state["from"] < after:
            return
        if done:  # the count in the end, where the last line said fewer
            if state["last"] is not None and state["n"] != n:
                err.print(f"{done_}: {n:,} cases", highlight=False)
        elif state["last"] is None or at - state["last"] >= every:
            err.print(f"{doing}: {n:,} cases", highlight=False)
            state["last"], state["n"] = at, n

    return show


def print_lines(console: Console, lines: Iterable[str], indent: str = "    ") -> None:
    """Plain text lines, each wrapped at spaces to the console's width.

    A line keeps its own leading spaces; its continuation lines are indented by ``indent`` more.
    Words are never broken, so only a single word wider than the console can exceed it.
    """
    width = max(console.width, 20)
    parts = [part for line in map(terminal_text, lines) for part in _wrapped(line, width, indent)]
    if parts:  # one print: a listing of thousands of lines is written at once, not a line at a time
        console.print("\n".join(parts), markup=False, highlight=False, soft_wrap=True)


def _wrapped(line: str, width: int, indent: str) -> list[str]:
    """``line`` wrapped at spaces to ``width`` (see `print_lines`)."""
    lead = line[: len(line) - len(line.lstrip(" "))]
    kept = _TOGETHER.sub(lambda m: m.group().replace(" ", _GLUE), line)
    wrapped = textwrap.wrap(
        kept, width=width, subsequent_indent=lead + indent, break_long_words=False,
        break_on_hyphens=False,
    ) or [""]
    return [part.replace(_GLUE, " ") for part in wrapped]


def print_table(console: Console, table: Table, lines: Iterable[str]) -> bool:
    """``table`` when it fits the width, else its title and ``lines`` (one per row) as plain text;
    True when the table was printed (a legend of its columns is then worth printing)."""
    if fits(console, table):
        console.print(table)
        return True
    title = table.title
    if title:
        print_lines(console, [title.plain if isinstance(title, Text) else Text.from_markup(str(title)).plain])
    print_lines(console, lines)
    return False


def print_json(data: Any, file: Optional[Any] = None) -> None:
    """One JSON document on stdout (or ``file``), indented, nothing else; written a piece at a time
    (rows made as they are read, every case of a large run, one by one: `json_chunks`)."""
    stream = file or sys.stdout
    for piece in json_chunks(jsonable(data)):
        stream.write(piece)
    stream.write("\n")
    stream.flush()
