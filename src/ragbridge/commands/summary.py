"""The summary a run prints: per backend and metric, then the mean per tag for each backend.

`print_summary` is what ``ragbridge run`` and ``rescore`` print after the run (a table that fits
the width, else the same as lines: `ragbridge.commands.output.print_table`).
"""

from __future__ import annotations

from typing import Optional

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ..report.text import MISSING, num
from ..run.summary import ALL
from .output import out, print_lines, print_table, table_width

__all__ = ["print_summary"]


def _share(row: dict) -> str:
    return f"{row['unsupported_share']:.0%}" if row["n_claims"] else MISSING


def print_summary(summary, console: Console = out) -> None:
    """Overall table (per backend and metric), then the mean per tag for each backend. ``summary``:
    a summary DataFrame, or its rows as dicts (`ragbridge.run.Run.summary_rows`).

    The per-tag table has a row per tag and a column per metric; when its columns do not fit the
    width they go into as many tables as it takes, each repeating the tag column.
    """
    rows = summary if isinstance(summary, list) else summary.to_dict("records")
    overall = [r for r in rows if r["tag"] == ALL]
    claims = any(r["n_claims"] > 0 for r in rows)  # a backend exposes claims: show their shares
    table = Table(title="Summary", title_justify="default")
    columns = ("backend", "metric", "mean", "scored", "undefined", "errored", "unsup.")
    for col in columns[:7 if claims else 6]:
        table.add_column(col, justify="left" if col in ("backend", "metric") else "right", no_wrap=True)
    lines = []
    for row in overall:
        table.add_row(
            row["backend"], row["metric"], num(row["mean"]), f"{row['n_scored']:,}",
            f"{row['n_undefined']:,}",
            f"[red]{row['n_errored']:,}[/]" if row["n_errored"] else "0",
            *((_share(row),) if claims else ()),
        )
        lines.append(f"{row['backend']} {row['metric']}: mean {num(row['mean'])}, "
                     f"{row['n_scored']:,} scored, {row['n_undefined']:,} undefined, "
                     f"{row['n_errored']:,} errored"
                     + (f", {_share(row)} with an unsupported claim" if row["n_claims"] else ""))
    print_table(console, table, lines)
    if claims:
        console.print("[dim]unsup.: share of answers with at least one unsupported claim (of those "
                      "with claims); per tag in brackets[/]")
    tagged = [r for r in rows if r["tag"] != ALL]
    if not tagged:
        return
    backends = list(dict.fromkeys(r["backend"] for r in overall))
    for b in backends:
        metrics = list(dict.fromkeys(r["metric"] for r in overall if r["backend"] == b))
        groups: dict[str, list[dict]] = {}
        for r in tagged:
            if r["backend"] == b:
                groups.setdefault(r["tag"], []).append(r)
        by_tag = [
            (tag, int(max(r["n"] for r in group)), {r["metric"]: r["mean"] for r in group},
             {r["metric"]: _share(r) for r in group if r["n_claims"]})
            for tag, group in sorted(groups.items())
        ]
        title = "Mean per tag" + (f" ({b})" if len(backends) > 1 else "")
        _print_by_tag(console, title, by_tag, metrics)


def _cell(means: dict, shares: dict, metric: str) -> str:
    """The mean, and the unsupported-claim share in brackets where the metric has claims."""
    return num(means.get(metric), 2) + (f" ({shares[metric]})" if metric in shares else "")


def _tag_table(title: Optional[str], rows, metrics: list[str], tags: bool = True) -> Table:
    """The per-tag table of ``metrics`` (``tags=False``: without its tag column, to measure)."""
    t = Table(title=title, title_justify="default")
    if tags:
        t.add_column("tag", no_wrap=True)
    t.add_column("n", justify="right", no_wrap=True)
    for m in metrics:
        t.add_column(escape(m), justify="right", no_wrap=True)
    for tag, n, means, shares in rows:
        t.add_row(*((escape(tag),) if tags else ()), f"{n:,}", *(_cell(means, shares, m) for m in metrics))
    return t


def _print_by_tag(console: Console, title: str, rows, metrics: list[str]) -> None:
    """The per-tag tables, split by columns where they do not fit the width, else lines.

    Every column of these tables is a name or a number (never wrapped), so a table's width is the
    width of its tag and ``n`` columns (`table_width`) plus, for each metric column, its widest cell
    and what every column adds (padding and rule, measured once on the first metric's column): the
    widths are added up, not measured again for every split tried."""
    width = max(console.width, 1)
    base = table_width(console, _tag_table(None, rows, []))

    def widest(m: str) -> int:
        return max([Text.from_markup(escape(m)).cell_len] + [
            Text.from_markup(_cell(means, shares, m)).cell_len for _, _, means, shares in rows])

    extra: dict[str, int] = {}
    if metrics:
        n_only = table_width(console, _tag_table(None, rows, [], tags=False))
        first = table_width(console, _tag_table(None, rows, metrics[:1], tags=False)) - n_only
        edges = first - widest(metrics[0])
        extra = {m: widest(m) + edges for m in metrics}
    parts: list[list[str]] = [[]]
    used = base
    for m in metrics:
        if parts[-1] and used + extra[m] > width:
            parts.append([])
            used = base
        parts[-1].append(m)
        used += extra[m]
    if all(base + sum(extra[m] for m in part) <= width for part in parts):
        for i, part in enumerate(parts, 1):
            numbered = title + (f", {i} of {len(parts)}" if len(parts) > 1 else "")
            console.print(_tag_table(numbered, rows, part))
        return
    print_lines(console, [title] + [
        f"{tag} ({n:,} cases): " + ", ".join(f"{m} {_cell(means, shares, m)}" for m in metrics)
        for tag, n, means, shares in rows
    ])
