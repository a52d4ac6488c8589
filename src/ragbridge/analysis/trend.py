"""Trends over runs: the series of a metric's mean over dated runs, its slope and its steps.

``trend`` reads several run folders (or folders of run folders: every sub-folder holding a
``run.json``), orders them by the start time in their ``run.json`` (then by path), and for every
(backend, metric), and per tag with ``by_tag``, gives:

* the series: the mean over each run's scored cases (undefined and errored scores are counted, never
  averaged), with the run's start time, judge model and the number of cases in the mean;
* the slope per run of a least-squares line through the series (x is the run's position in the
  order, 0, 1, 2, ..., so a run that did not score the metric leaves a gap), with its t interval
  and the p-value of slope 0 (`ragbridge.analysis.stats.ols_slope`);
* the change points: binary segmentation of the series with permutation p-values
  (`ragbridge.analysis.stats.change_points`).

Each run's mean is over the cases that run scored: production samples differ from day to day, and
the slope is over what each run measured. ``n`` in the series says how many cases each point holds.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence, Union

import numpy as np

from ..run import Run
from ..run.columns import ERROR, UNDEFINED
from ..run.summary import ALL
from ..schema import clean_tags
from . import stats
from .versions import version_steps
from .table import AnalysisError, ScoreTable, open_run

__all__ = ["Trend", "trend", "order_runs", "expand_runs", "series_means", "started_at", "slope_of",
           "SERIES_COLUMNS", "SUMMARY_COLUMNS", "CHANGE_COLUMNS"]

SERIES_COLUMNS = ["backend", "metric", "tag", "position", "run", "started_at", "judge", "mean", "n",
                  "n_undefined", "n_errored"]
SUMMARY_COLUMNS = ["backend", "metric", "tag", "n_runs", "first", "last", "slope", "slope_low",
                   "slope_high", "slope_p", "n_change_points"]
CHANGE_COLUMNS = ["backend", "metric", "tag", "position", "run", "before", "after", "shift", "p_value"]


def expand_runs(paths: Sequence[Union[Run, str, Path]], error: type = AnalysisError) -> list[Run]:
    """Every run of ``paths``: a run folder itself, or each sub-folder holding a ``run.json`` of a
    folder that holds none itself. A path named twice is read once."""
    runs: list[Run] = []
    seen: set[Path] = set()
    for p in paths:
        if isinstance(p, Run):
            runs.append(p)
            continue
        path = Path(p)
        if path.is_dir() and not (path / "run.json").exists():
            subs = sorted(d for d in path.iterdir() if d.is_dir() and (d / "run.json").exists())
            if not subs:
                raise error(f"{path} is neither a run folder nor a folder of run folders (no run.json "
                            "in it or in any folder directly under it)")
        else:
            subs = [path]
        for sub in subs:
            key = sub.resolve()
            if key not in seen:
                seen.add(key)
                runs.append(open_run(sub, error=error))
    return runs


def started_at(run: Run) -> dt.datetime:
    """When ``run`` started (``run.json``'s ``started_at``; UTC when it names no zone)."""
    try:
        t = dt.datetime.fromisoformat(str(run.manifest.started_at).replace("Z", "+00:00"))
    except ValueError:
        return dt.datetime.min.replace(tzinfo=dt.timezone.utc)
    return t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc)


def order_runs(runs: Sequence[Run]) -> list[Run]:
    """The runs by start time (``run.json``'s ``started_at``), then by path."""
    return sorted(runs, key=lambda r: (started_at(r), str(r.path)))


def series_means(runs: Sequence[Run], backend: str, metric: str, tags: Sequence[str] = (),
                 min_n: int = 1) -> list[tuple[int, Run, float, int]]:
    """``(position, run, mean, n)`` of (backend, metric) in each run, in the order given, over the
    scored cases carrying every tag of ``tags``; a run with fewer than ``min_n`` such cases is left
    out (its position stays)."""
    out = []
    need = set(tags)
    for i, run in enumerate(runs):
        vals = _values(run, backend, metric, need)
        if len(vals) >= max(1, min_n):
            out.append((i, run, float(np.mean(vals)), len(vals)))
    return out


def _values(run: Run, backend: str, metric: str, need: set[str]) -> np.ndarray:
    """The values of the cases ``backend`` scored on ``metric`` in ``run`` (those carrying every tag of
    ``need``), in the run's case order."""
    cols = run.columns
    col = cols.column(backend, metric)
    if col is None:
        return np.empty(0)
    mask = col.scored
    if need:
        mask = mask & cols.cases.slice_mask(need) & (np.arange(len(mask)) < cols.cases.described)
    return col.value[mask]


@dataclass
class Trend:
    """The runs in order, and per (backend, metric, tag): ``series`` (a row per run), ``summary``
    (a row per series: slope and interval, the number of change points) and ``changes`` (a row per
    change point) as DataFrames."""

    runs: list[Run]
    series: Any
    summary: Any
    changes: Any
    confidence: float = stats.CONFIDENCE
    alpha: float = 0.05
    warnings: list[str] = field(default_factory=list)

    def __repr__(self) -> str:
        return f"Trend({len(self.runs)} runs, {len(self.summary)} series, {len(self.changes)} change points)"


def trend(
    runs: Sequence[Union[Run, str, Path]],
    metrics: Optional[Sequence[str]] = None,
    backends: Optional[Sequence[str]] = None,
    by_tag: bool = False,
    tags: Optional[Sequence[str]] = None,
    confidence: float = stats.CONFIDENCE,
    alpha: float = 0.05,
    min_size: int = 2,
    n_permutations: int = stats.DEFAULT_PERMUTATIONS,
    seed: int = 0,
) -> Trend:
    """The trend of every (backend, metric) over ``runs`` (run folders, or folders of them), and per
    tag with ``by_tag`` (``tags``: only these). Raises `AnalysisError` with fewer than two runs, or
    when a metric or backend asked for is in none of them."""
    import pandas as pd

    ordered = order_runs(expand_runs(runs))
    if len(ordered) < 2:
        raise AnalysisError(f"a trend needs two or more runs, got {len(ordered)}")
    tables = [ScoreTable.of(r) for r in ordered]
    keys: list[tuple[str, str]] = []
    for t in tables:
        keys += [(b, m) for m, b in t.keys() if (b, m) not in keys]
    have_m = list(dict.fromkeys(m for _, m in keys))
    if metrics:
        wanted = []
        for m in metrics:
            hits = [h for h in have_m if h == m or h.split("@", 1)[0] == m]
            if not hits:
                raise AnalysisError(f"metric {m!r} is in none of the runs; metrics scored: "
                                    f"{', '.join(have_m) or 'none'}")
            wanted += [h for h in hits if h not in wanted]
        keys = [k for k in keys if k[1] in wanted]
    if backends:
        have_b = sorted({b for b, _ in keys})
        for b in backends:
            if b not in have_b:
                raise AnalysisError(f"backend {b!r} has no scores in these runs; backends: "
                                    f"{', '.join(have_b) or 'none'}")
        keys = [k for k in keys if k[0] in backends]
    keys.sort(key=lambda k: (k[0] != "native", k[0], have_m.index(k[1])))
    all_tags = list(dict.fromkeys(t for r in ordered for ts in dict.fromkeys(r.columns.cases.tags)
                                  for t in ts))
    if tags:
        try:
            tags = clean_tags(tags)
        except ValueError as exc:
            raise AnalysisError(str(exc)) from None
        for t in tags:
            if t not in all_tags:
                raise AnalysisError(f"no case in these runs carries tag {t!r}; tags: "
                                    f"{', '.join(all_tags) or 'none'}")
    groups = [ALL] + ([t for t in all_tags if not tags or t in tags] if by_tag else [])
    warnings = [f"{r.path} did not finish (status {r.manifest.status}): its means are of what it scored"
                for r in ordered if r.manifest.status != "complete"]
    warnings += version_steps(ordered, {b for b, _ in keys})

    series_rows, summary_rows, change_rows = [], [], []
    for backend, metric in keys:
        for tag in groups:
            need = set() if tag == ALL else {tag}
            points = []
            for i, (run, table) in enumerate(zip(ordered, tables)):
                col = table.column(metric, backend)
                if col is None:
                    continue
                here = col.status
                if need:
                    cases = table.cases
                    here = here[cases.tag_mask(tag) & (np.arange(len(here)) < cases.described)]
                vals = col.value[col.scored] if not need else _values(run, backend, metric, need)
                if not len(vals):
                    continue
                points.append((i, float(np.mean(vals))))
                series_rows.append({
                    "backend": backend, "metric": metric, "tag": tag, "position": i, "run": str(run.path),
                    "started_at": run.manifest.started_at, "judge": (run.manifest.judge or {}).get("model"),
                    "mean": float(np.mean(vals)), "n": len(vals),
                    "n_undefined": int((here == UNDEFINED).sum()),
                    "n_errored": int((here == ERROR).sum()),
                })
            if not points:
                continue
            x = np.array([p[0] for p in points], float)
            y = np.array([p[1] for p in points], float)
            fit = stats.ols_slope(y, x, confidence)
            gseed = stats.group_seed(seed, backend, metric, tag)
            cps = stats.change_points(y, alpha, min_size, n_permutations, gseed) if n_permutations > 0 else []
            for cp in cps:
                pos = points[cp["index"]][0]
                change_rows.append({"backend": backend, "metric": metric, "tag": tag, "position": pos,
                                    "run": str(ordered[pos].path), "before": cp["before"],
                                    "after": cp["after"], "shift": cp["shift"], "p_value": cp["p_value"]})
            summary_rows.append({
                "backend": backend, "metric": metric, "tag": tag, "n_runs": len(points),
                "first": float(y[0]), "last": float(y[-1]), "slope": fit["slope"], "slope_low": fit["low"],
                "slope_high": fit["high"], "slope_p": fit["p_value"], "n_change_points": len(cps),
            })
    summary = pd.DataFrame(summary_rows, columns=SUMMARY_COLUMNS)
    if summary.empty:
        raise AnalysisError("nothing to trend: no metric has a scored value in these runs (every score is "
                            "undefined or errored, or there are none)")
    return Trend(ordered, pd.DataFrame(series_rows, columns=SERIES_COLUMNS), summary,
                 pd.DataFrame(change_rows, columns=CHANGE_COLUMNS), confidence, alpha, warnings)


def slope_of(runs: Sequence[Run], backend: str, metric: str, tags: Sequence[str] = (), last: int = 0,
             min_n: int = 1, confidence: float = stats.CONFIDENCE) -> dict[str, Any]:
    """The slope per run of (backend, metric) over the ``last`` runs of ``runs`` (already ordered;
    0: all), as `stats.ols_slope` gives it, with ``n_runs`` (points in the fit) and ``means``."""
    chosen = list(runs)[-last:] if last else list(runs)
    points = series_means(chosen, backend, metric, tags, min_n)
    x = [p[0] for p in points]
    y = [p[2] for p in points]
    fit = stats.ols_slope(y, x, confidence) if points else {"slope": math.nan, "low": math.nan,
                                                             "high": math.nan, "p_value": math.nan}
    return {**fit, "n_runs": len(points), "runs_in_window": len(chosen),
            "means": [{"run": str(p[1].path), "mean": p[2], "n": p[3]} for p in points]}
