"""``ragbridge trend``: the mean of each metric over dated runs (`ragbridge.analysis.trend`), printed as
a table that fits the width (or plain lines), or as one JSON document."""

from __future__ import annotations

import math
from pathlib import Path
from typing import List

import typer
from rich.markup import escape
from rich.table import Table

from ..analysis.stats import DEFAULT_PERMUTATIONS
from ..analysis.table import AnalysisError
from ..analysis.trend import Trend, trend
from ..report.text import interval, num, p_text, records
from ..run.summary import ALL
from .output import fail, out, print_json, print_lines, print_table, warn

__all__ = ["register", "trend_cmd", "trend_json", "print_trend"]


def register(cli: typer.Typer) -> None:
    cli.command("trend")(trend_cmd)


def trend_json(t: Trend) -> dict:
    """The trend as one JSON-ready document: the runs in order, every series, slope and change point."""
    return {
        "runs": [{"position": i, "path": str(r.path), "started_at": r.manifest.started_at,
                  "judge": (r.manifest.judge or {}).get("model"), "status": r.manifest.status}
                 for i, r in enumerate(t.runs)],
        "confidence": t.confidence, "alpha": t.alpha, "warnings": list(t.warnings),
        "summary": records(t.summary), "series": records(t.series), "changes": records(t.changes),
    }


def trend_cmd(
    runs: List[Path] = typer.Argument(
        ..., metavar="RUN",
        help="Run folders, or folders of run folders; ordered by the start time in their run.json."),
    metric: List[str] = typer.Option(None, "--metric", "-m", help="Only this metric (repeatable)."),
    backend: List[str] = typer.Option(None, "--backend", "-b", help="Only this backend (repeatable)."),
    by_tag: bool = typer.Option(False, "--by-tag", help="A series per tag too."),
    tag: List[str] = typer.Option(None, "--tag", help="With --by-tag, only these tags (repeatable)."),
    alpha: float = typer.Option(
        0.05, "--alpha", help="A change point is kept when its p-value is below this."),
    min_size: int = typer.Option(2, "--min-size", help="Fewest runs on either side of a change point."),
    permutations: int = typer.Option(
        DEFAULT_PERMUTATIONS, "--permutations", help="Permutations of the change-point test (0: no test)."),
    seed: int = typer.Option(0, "--seed", help="Random seed of the permutation test."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON document instead of tables."),
) -> None:
    """The mean of each metric over dated runs: the series, its slope per run with a 95% interval,
    and the change points."""
    if not 0 < alpha < 1:
        fail(f"--alpha must be between 0 and 1, got {alpha}")
    if min_size < 1:
        fail(f"--min-size must be at least 1, got {min_size}")
    if tag and not by_tag:
        fail("--tag chooses the tags of --by-tag: add --by-tag")
    try:
        t = trend(runs, metric or None, backend or None, by_tag, tag or None, alpha=alpha, min_size=min_size,
                  n_permutations=permutations, seed=seed)
    except AnalysisError as exc:
        fail(str(exc))
    for w in t.warnings:
        warn(w)
    if as_json:
        print_json(trend_json(t))
        return
    print_trend(out, t)


def print_trend(console, t: Trend) -> None:
    """The runs in order, a row per series (slope, change points), then each series' means."""
    first, last = t.runs[0].manifest.started_at, t.runs[-1].manifest.started_at
    lines = [f"{len(t.runs)} runs, by start time: {first} to {last}"]
    lines += [f"  #{i} {r.path}" + (f" (judge {r.manifest.judge['model']})"
                                    if (r.manifest.judge or {}).get("model") else "")
              for i, r in enumerate(t.runs)]
    print_lines(console, lines)
    summary_rows = t.summary.to_dict("records")
    with_ci = any(not math.isnan(r["slope_low"]) for r in summary_rows)
    tab = Table(title="Trend: least-squares slope per run, " + (
                    "t 95% interval" if with_ci else "no interval under 3 runs"),
                title_justify="default", show_lines=True)
    for c in ("series", "runs", "first", "last", "slope/run", "changes"):
        tab.add_column(c, justify="left" if c == "series" else "right", no_wrap=True)
    rows = []
    for r in summary_rows:
        slope = num(r["slope"], 4, signed=True)
        ci = interval(r["slope_low"], r["slope_high"], 4, signed=True)
        sig = not math.isnan(r["slope_low"]) and (r["slope_low"] > 0 or r["slope_high"] < 0)
        colour = ("green" if r["slope"] > 0 else "red") if sig else None
        where = f"{r['backend']} {r['metric']}" + (f", {r['tag']}" if r["tag"] != ALL else "")
        tab.add_row(escape(where.replace(", ", "\n")), str(r["n_runs"]), num(r["first"]), num(r["last"]),
                    (f"[{colour}]{slope}[/]" if colour else slope) + (f"\n{ci}" if ci else ""),
                    str(r["n_change_points"]))
        rows.append(f"{where}: {r['n_runs']} runs, {num(r['first'])} -> {num(r['last'])}, slope per run "
                    f"{slope}" + (f" (95% CI {ci})" if ci else "")
                    + f", {r['n_change_points']} change point(s)")
    print_table(console, tab, rows)
    lines = []
    for (b, m, tg), group in t.series.groupby(["backend", "metric", "tag"], sort=False):
        where = f"{b} {m}" + (f", {tg}" if tg != ALL else "")
        points = zip(group["position"], group["mean"])
        lines.append(f"{where}: " + ", ".join(f"#{p} {num(v)}" for p, v in points))
    print_lines(console, ["Means by run:"] + ["  " + ln for ln in lines], indent="  ")
    if not t.changes.empty:
        lines = [f"Change points (binary segmentation, permutation p < {t.alpha:g}):"]
        for c in t.changes.to_dict("records"):
            where = f"{c['backend']} {c['metric']}" + (f", {c['tag']}" if c["tag"] != ALL else "")
            lines.append(f"  {where}: from run #{c['position']} ({Path(c['run']).name}) "
                         f"{num(c['before'])} -> "
                         f"{num(c['after'])}, shift {num(c['shift'], signed=True)}, p {p_text(c['p_value'])}")
        print_lines(console, lines, indent="  ")
    else:
        print_lines(console, [f"No change point (binary segmentation, permutation p < {t.alpha:g})."],
                    indent="")
