"""The report as one self-contained HTML file: the template (``assets/report.html``), its style and
script, and the plots as inline SVG.

The file needs nothing but a browser: no CDN, no external font, image or script; the plots (score
distributions per backend, backend A against backend B per metric) are inline SVG. Every piece of
text from the data is escaped (the template engine escapes by default and the SVG writer escapes
every string, the score lines too), and a Content-Security-Policy allows only the report's own inline
script, by its hash, so even markup that slipped through could not run. The report's script only
filters and expands the case list; the page reads fully without it.

A large run stays a page a browser opens (about `SIZE_BUDGET` at most, whatever the number of cases
or of chunks a case): the summary, grid columns, thresholds, distributions, agreement and
disagreements are computed over every case (the run's columns, `ragbridge.run.columns`); at most
`FULL_CASES` cases are shown in full (`cases_in_full`: the ones that matter), each with its first
`CHUNKS_SHOWN` chunks and the relevant ones after them, within `FULL_BUDGET`; the other cases one line
of plain text each in closed pages of `PAGE_ROWS` (`compact_pages`), at most `COMPACT_ROWS` of them:
past that, a uniform sample (one case in so many, in run order), and the page says so; scatter plots
binned past `SCATTER_POINTS` cases.

Size: the page's parts (its plots, the cases it shows and how, the template's values) are one
layout, read together when the page changes.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import math
from pathlib import Path
from typing import Any, NamedTuple, Optional, Sequence, TextIO, Union

import numpy as np

from ..analysis.table import open_run
from ..analysis.thresholds import Thresholds
from ..run import Run
from ..run.columns import ERROR, MISSING, SCORED, STATUS_NAMES, UNDEFINED
from ..run.summary import ALL
from .data import DIAGNOSIS_LISTED, case_rows, listed_by_layer, report_data, reused_lines
from .text import MISSED, count, num, one_line, p_text, ragchecker_text

__all__ = ["render_html", "write_html", "plots", "grid", "svg_distribution", "svg_scatter", "svg_series",
           "backend_colors", "cases_in_full", "compact_pages", "PALETTE", "ASSETS", "FULL_CASES", "PAGE_ROWS",
           "SCATTER_POINTS", "SCATTER_BINS", "BELOW", "CHUNKS_SHOWN", "FULL_BUDGET", "COMPACT_ROWS",
           "SIZE_BUDGET"]

ASSETS = Path(__file__).with_name("assets")
#: a scatter plot draws every case up to this many, then bins them (`svg_scatter`)
SCATTER_POINTS = 1000
SCATTER_BINS = 20
#: a run of more cases than this shows this many in full (`cases_in_full`), the rest as score rows
FULL_CASES = 250
#: the chunks a case shown in full lists (then the relevant ones after them, as many again at most)
CHUNKS_SHOWN = 50
#: the text the cases shown in full may take (their chunks, answers, references, reasons), in bytes
FULL_BUDGET = 8 << 20
#: the one-line cases a page holds at most; past that, a uniform sample of them
COMPACT_ROWS = 20_000
#: the size the page is kept to, about (the cases in full, the lines and the rest of the page)
SIZE_BUDGET = 20 << 20
#: score lines per page, the characters of a question a score line shows, the below-threshold mark
PAGE_ROWS = 1000
QUESTION_CHARS = 120
BELOW = "✗"
PALETTE = ["#4269d0", "#efb118", "#3ca951", "#ff725c", "#a463f2", "#97bbf5", "#9c6b4e", "#6cc5b0"]


def _e(text: Any) -> str:
    return html.escape("" if text is None else str(text), quote=True)


def backend_colors(backends: Sequence[str]) -> dict[str, str]:
    return {b: PALETTE[i % len(PALETTE)] for i, b in enumerate(backends)}


def svg_distribution(metric: str, values: dict[str, list[float]], colors: dict[str, str],
                     counts: dict[str, dict[str, int]]) -> str:
    """One histogram row per backend (10 bins over 0..1) with the mean marked."""
    import numpy as np

    rows = [b for b in values]
    left, width, row_h, top = 92, 300, 34, 22
    height = top + row_h * len(rows) + 24
    total_w = left + width + 170
    hist = {b: np.histogram(np.clip(values[b], 0, 1), bins=10, range=(0, 1))[0] if len(values[b])
            else np.zeros(10, int) for b in rows}
    peak = max([int(h.max()) for h in hist.values()] + [1])
    parts = [f'<svg class="plot dist" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {total_w} {height}" '
             f'width="{total_w}" height="{height}" role="img" '
             f'aria-label="{_e(f"Distribution of {metric} per backend")}">',

             f'<text x="0" y="14" class="plot-title">{_e(metric)}</text>']
    for i, b in enumerate(rows):
        y0 = top + i * row_h
        parts.append(f'<text x="{left - 8}" y="{y0 + row_h / 2 + 4}" text-anchor="end" '
                     f'class="plot-label">{_e(b)}</text>')
        parts.append(f'<line x1="{left}" x2="{left + width}" y1="{y0 + row_h - 4}" y2="{y0 + row_h - 4}" '
                     'class="axis"/>')
        bw = width / 10
        for j, n in enumerate(hist[b]):
            if not n:
                continue
            h = (row_h - 8) * n / peak
            lo, hi = j / 10, (j + 1) / 10
            close = "]" if j == 9 else ")"
            tip = f"{b}: {n:,} case(s) with {metric} in [{lo:.1f}, {hi:.1f}{close}"
            color = colors.get(b, "#888")
            parts.append(
                f'<rect x="{left + j * bw + 1:.1f}" y="{y0 + row_h - 4 - h:.1f}" width="{bw - 2:.1f}" '
                f'height="{h:.1f}" fill="{color}"><title>{_e(tip)}</title></rect>')
        if len(values[b]):
            mean = float(np.mean(values[b]))
            x = left + width * mean
            parts.append(f'<path d="M{x:.1f},{y0 + row_h - 2} l-4,6 h8 z" class="mean-mark">'
                         f'<title>{_e(f"{b} mean {mean:.3f}")}</title></path>')
        c = counts.get(b, {})
        note = f"n {len(values[b]):,}"
        extra = [f"{c[k]:,} {k[:5]}." for k in ("undefined", "errored") if c.get(k)]
        if extra:
            note += " · " + ", ".join(extra)
        if len(values[b]):
            note = f"mean {float(np.mean(values[b])):.2f} · " + note
        parts.append(f'<text x="{left + width + 8}" y="{y0 + row_h / 2 + 4}" class="plot-note">'
                     f'{_e(note)}</text>')
    ya = top + row_h * len(rows) + 12
    for t in (0, 0.25, 0.5, 0.75, 1):
        parts.append(f'<text x="{left + width * t:.1f}" y="{ya}" text-anchor="middle" '
                     f'class="tick">{t:g}</text>')
    parts.append("</svg>")
    return "".join(parts)


def svg_scatter(metric: str, a: str, b: str, points: Any, ta: float, tb: float,
                colors: dict[str, str]) -> str:
    """Backend A (x) against backend B (y) on the cases both scored; disagreeing verdicts highlighted.

    Up to `SCATTER_POINTS` cases, a dot per distinct pair of values; more, a dot per cell of a
    `SCATTER_BINS` x `SCATTER_BINS` grid (and per verdict: agreeing and differing cases apart), at
    the mean of its cases, its area growing with their number; the plot says so."""
    size, pad = 210, 34
    binned = len(points) > SCATTER_POINTS
    w = h = size + pad + 12
    full_h = h + (30 if binned else 16)
    parts = [f'<svg class="plot scatter" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {full_h}" '
             f'width="{w}" height="{full_h}" role="img" aria-label="{_e(f"{metric}: {a} against {b}")}">',
             f'<text x="{pad}" y="12" class="plot-title">{_e(metric)}</text>']

    def px(v):
        return pad + v * size

    def py(v):
        return 20 + (1 - v) * size

    parts.append(f'<rect x="{pad}" y="20" width="{size}" height="{size}" class="frame"/>')
    for t in (0.25, 0.5, 0.75):
        parts.append(f'<line x1="{px(t):.1f}" x2="{px(t):.1f}" y1="20" y2="{20 + size}" class="grid"/>')
        parts.append(f'<line x1="{pad}" x2="{pad + size}" y1="{py(t):.1f}" y2="{py(t):.1f}" class="grid"/>')
    parts.append(f'<line x1="{px(0)}" y1="{py(0)}" x2="{px(1)}" y2="{py(1)}" class="diag"/>')
    if 0 <= ta <= 1:
        parts.append(f'<line x1="{px(ta):.1f}" x2="{px(ta):.1f}" y1="20" y2="{20 + size}" class="thr"/>')
    if 0 <= tb <= 1:
        parts.append(f'<line x1="{pad}" x2="{pad + size}" y1="{py(tb):.1f}" y2="{py(tb):.1f}" class="thr"/>')

    def cell(v: float) -> int:
        return min(max(int(v * SCATTER_BINS), 0), SCATTER_BINS - 1)

    for (gx, gy, differ), n, x, y, ids in _groups(points, binned, ta, tb, cell):
        few = 3 if binned else 8
        shown = ", ".join(ids[:few]) + (f" and {n - few} more" if n > few else "")
        if binned:
            r = 1.4 + 5.6 * math.sqrt(n / most[0])
            lo_a, lo_b = gx / SCATTER_BINS, gy / SCATTER_BINS
            tip = (f"{n:,} case(s) with {a} in [{lo_a:.2f}, {lo_a + 1 / SCATTER_BINS:.2f}] and {b} in "
                   f"[{lo_b:.2f}, {lo_b + 1 / SCATTER_BINS:.2f}]: {shown}")
        else:
            r = 3.6 + 1.4 * math.sqrt(n - 1)
            tip = f"{shown}: {a} {x:.3f}, {b} {y:.3f}"
        tip += " (verdicts differ)" if differ else ""
        cls = "pt pt-differ" if differ else "pt"
        parts.append(f'<circle cx="{px(min(max(x, 0), 1)):.1f}" cy="{py(min(max(y, 0), 1)):.1f}" '
                     f'r="{r:.1f}" class="{cls}"><title>{_e(tip)}</title></circle>')
    for t in (0, 0.5, 1):
        parts.append(f'<text x="{px(t):.1f}" y="{20 + size + 13}" text-anchor="middle" '
                     f'class="tick">{t:g}</text>')
        parts.append(f'<text x="{pad - 5}" y="{py(t) + 4:.1f}" text-anchor="end" class="tick">{t:g}</text>')
    parts.append(f'<text x="{pad + size / 2}" y="{20 + size + 28}" text-anchor="middle" class="plot-label" '
                 f'fill="{colors.get(a, "#333")}">{_e(a)} →</text>')
    parts.append(f'<text transform="translate(10 {20 + size / 2}) rotate(-90)" text-anchor="middle" '
                 f'class="plot-label" fill="{colors.get(b, "#333")}">{_e(b)} →</text>')
    if binned:
        parts.append(f'<text x="{pad + size / 2}" y="{20 + size + 42}" text-anchor="middle" '
                     f'class="plot-note">{len(points):,} cases in {SCATTER_BINS} × {SCATTER_BINS} cells; '
                     'area ∝ cases</text>')
    parts.append("</svg>")
    return "".join(parts)


class _Points(NamedTuple):
    """The cases of a scatter plot as columns: their ids (a function from a place), and values."""

    ids: Any
    x: Any
    y: Any

    def __len__(self) -> int:
        return len(self.x)


most = [1]  # the largest group of the plot being drawn (set by `_groups`)


def _groups(points: Any, binned: bool, ta: float, tb: float, cell: Any):
    """The dots of a scatter plot: ``((x cell or value, y cell or value, verdicts differ), cases,
    mean x, mean y, the first ids)``, in the order their first case comes. Identical pairs (binned:
    pairs in one cell) are drawn once, larger."""
    if not binned:
        groups: dict[tuple, list[tuple[str, float, float]]] = {}
        items = points if not isinstance(points, _Points) else [
            (points.ids(i), float(points.x[i]), float(points.y[i])) for i in range(len(points))]
        for cid, x, y in items:
            differ = (x >= ta) != (y >= tb)
            key = (round(x, 4), round(y, 4), differ)
            groups.setdefault(key, []).append((cid, x, y))
        most[0] = max((len(g) for g in groups.values()), default=1)
        for key, members in groups.items():
            n = len(members)
            yield (key, n, sum(m[1] for m in members) / n, sum(m[2] for m in members) / n,
                   [m[0] for m in members[:8]])
        return
    import numpy as np

    if not isinstance(points, _Points):
        ids = [p[0] for p in points]
        points = _Points(ids.__getitem__, np.array([p[1] for p in points], float),
                         np.array([p[2] for p in points], float))
    x, y = points.x, points.y
    gx = np.minimum(np.maximum((x * SCATTER_BINS).astype(np.int64), 0), SCATTER_BINS - 1)
    gy = np.minimum(np.maximum((y * SCATTER_BINS).astype(np.int64), 0), SCATTER_BINS - 1)
    differ = (x >= ta) != (y >= tb)
    key = (gx * SCATTER_BINS + gy) * 2 + differ
    uniq, first, inverse, counts = np.unique(key, return_index=True, return_inverse=True, return_counts=True)
    inverse = inverse.ravel()
    sx = np.bincount(inverse, weights=x, minlength=len(uniq))  # in the cases' order, as a sum of them
    sy = np.bincount(inverse, weights=y, minlength=len(uniq))
    order = np.argsort(inverse, kind="stable")
    starts = np.r_[0, np.cumsum(counts)[:-1]]
    most[0] = int(counts.max()) if len(counts) else 1
    for g in np.argsort(first, kind="stable").tolist():
        members = order[starts[g]:starts[g] + 3].tolist()
        k = int(uniq[g])
        yield ((k // 2) // SCATTER_BINS, (k // 2) % SCATTER_BINS, bool(k % 2)), int(counts[g]), \
            float(sx[g]) / int(counts[g]), float(sy[g]) / int(counts[g]), [points.ids(i) for i in members]


def svg_series(title: str, points: list[tuple[int, float, str]], n_runs: int, fit: dict[str, Any],
               changes: list[int]) -> str:
    """A metric's mean over runs (x: the run's position), its least-squares line and its change points."""
    w, h, pad, top = 420, 150, 34, 20
    full = top + h + 34
    parts = [f'<svg class="plot series" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {full}" '
             f'width="{w}" height="{full}" role="img" aria-label="{_e(title)} over runs">',
             f'<text x="{pad}" y="12" class="plot-title">{_e(title)}</text>']
    ys = [p[1] for p in points]
    lo, hi = max(0.0, min(ys) - 0.05), min(1.0, max(ys) + 0.05)
    if hi - lo < 0.1:
        lo, hi = max(0.0, lo - 0.05), min(1.0, hi + 0.05)
    span = max(n_runs - 1, 1)

    def px(x):
        return pad + (x / span) * (w - pad - 12)

    def py(v):
        return top + (1 - (v - lo) / max(hi - lo, 1e-9)) * h

    parts.append(f'<rect x="{pad}" y="{top}" width="{w - pad - 12}" height="{h}" class="frame"/>')
    for c in changes:
        x = (px(c - 1) + px(c)) / 2
        parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{top + h}" class="thr">'
                     f'<title>change point before run #{c}</title></line>')
    if not math.isnan(fit.get("slope") or math.nan):
        x0, x1 = points[0][0], points[-1][0]
        y0, y1 = fit["intercept"] + fit["slope"] * x0, fit["intercept"] + fit["slope"] * x1
        parts.append(f'<line x1="{px(x0):.1f}" y1="{py(y0):.1f}" x2="{px(x1):.1f}" y2="{py(y1):.1f}" '
                     'class="diag"/>')
    path = " ".join(f"{'M' if i == 0 else 'L'}{px(x):.1f},{py(v):.1f}" for i, (x, v, _) in enumerate(points))
    parts.append(f'<path d="{path}" class="series-line" fill="none" stroke="#4466aa" stroke-width="1.5"/>')
    for x, v, run in points:
        parts.append(f'<circle cx="{px(x):.1f}" cy="{py(v):.1f}" r="3.2" class="pt">'
                     f'<title>{_e(f"#{x} {run}: {v:.3f}")}</title></circle>')
    for v in (lo, hi):
        parts.append(f'<text x="{pad - 5}" y="{py(v) + 4:.1f}" text-anchor="end" class="tick">{v:.2f}</text>')
    for x in sorted({0, n_runs - 1}):
        parts.append(f'<text x="{px(x):.1f}" y="{top + h + 13}" text-anchor="middle" '
                     f'class="tick">#{x}</text>')
    parts.append(f'<text x="{pad + (w - pad) / 2}" y="{top + h + 28}" text-anchor="middle" '
                 'class="plot-label">run, by start time →</text>')
    parts.append("</svg>")
    return "".join(parts)


def _series_plots(trend: Optional[dict[str, Any]]) -> list[dict[str, Any]]:
    if not trend:
        return []
    out = []
    n_runs = len(trend["runs"])
    for row in trend["summary"]:
        if row["tag"] != ALL:
            continue
        key = (row["backend"], row["metric"], row["tag"])
        pts = [(s["position"], s["mean"], s["run"]) for s in trend["series"]
               if (s["backend"], s["metric"], s["tag"]) == key]
        cps = [c["position"] for c in trend["changes"] if (c["backend"], c["metric"], c["tag"]) == key]
        fit = {"slope": row["slope"] if row["slope"] is not None else math.nan, "intercept": math.nan}
        if len(pts) >= 2 and not math.isnan(fit["slope"]):
            mean_x = sum(p[0] for p in pts) / len(pts)
            mean_y = sum(p[1] for p in pts) / len(pts)
            fit["intercept"] = mean_y - fit["slope"] * mean_x
        else:
            fit["slope"] = math.nan
        title = f"{row['backend']} {row['metric']}"
        out.append({**row, "svg": svg_series(title, pts, n_runs, fit, cps)})
    return out


def plots(data: dict[str, Any], cols: Any) -> dict[str, Any]:
    """The SVG plots of `report_data`'s content, over the run's columns ``cols`` (every case):
    ``distributions`` per metric, ``scatter`` per pair of backends of the agreement table, ``trend``
    per metric and backend."""
    colors = backend_colors(data["backends"])
    cov = {(r["metric"], r["backend"]): r for r in data["coverage"]}
    dist = {}
    for metric in data["metrics"]:
        bs = [b for b in data["backends"] if (metric, b) in cov]
        values = {b: (col.value[col.scored] if (col := cols.column(b, metric)) is not None else [])
                  for b in bs}
        if not any(len(v) for v in values.values()):
            continue
        dist[metric] = svg_distribution(metric, values, colors, {b: cov[(metric, b)] for b in bs})
    scatter = []
    ids = cols.cases.ids
    for row in data["agreement"]:
        m, a, b = row["metric"], row["backend_a"], row["backend_b"]
        ca, cb = cols.column(a, m), cols.column(b, m)
        both = ca.scored & cb.scored
        pts = _Points(ids.__getitem__, ca.value[both], cb.value[both])
        if len(pts) <= SCATTER_POINTS:
            at = np.flatnonzero(both)
            pts = [(ids[i], float(x), float(y)) for i, x, y in zip(at.tolist(), pts.x, pts.y)]
        else:
            pts = _Points((lambda at: lambda k: ids[at[k]])(np.flatnonzero(both)), pts.x, pts.y)
        scatter.append({"metric": m, "a": a, "b": b,
                        "svg": svg_scatter(m, a, b, pts, row["threshold_a"], row["threshold_b"], colors)})
    return {"colors": colors, "distributions": dist, "scatter": scatter,
            "trend": _series_plots(data.get("trend"))}


def _marks(data: dict[str, Any]) -> dict[tuple[str, str], float]:
    """The pass mark of every (backend, metric) of the report (its summary's)."""
    return {(r["backend"], r["metric"]): r["threshold"] for r in data["summary"]}


def case_flags(data: dict[str, Any], cols: Any) -> dict[str, Any]:
    """Per case of the run, as arrays: errored, undefined, below a threshold (and on how many
    metrics), verdicts differing (listed under disagreements), listed under disagreements."""
    n = len(cols.cases)
    error, undefined, fail = np.zeros(n, bool), np.zeros(n, bool), np.zeros(n, bool)
    below: dict[str, np.ndarray] = {}
    for (b, m), t in _marks(data).items():
        col = cols.column(b, m)
        error |= col.status == ERROR
        undefined |= col.status == UNDEFINED
        low = col.scored & ~col.verdicts(t)
        fail |= low
        below[m] = below[m] | low if m in below else low
    disagree, listed = np.zeros(n, bool), np.zeros(n, bool)
    found = cols.cases.find([d["case_id"] for d in data["disagreements"]])
    for d, i in zip(data["disagreements"], found.tolist()):
        if i >= 0:
            listed[i] = True
            disagree[i] |= bool(d["verdicts_differ"])
    n_below = sum((v.astype(np.int64) for v in below.values()), np.zeros(n, np.int64))
    return {"error": error, "undefined": undefined, "fail": fail, "disagree": disagree, "listed": listed,
            "n_below": n_below}


def cases_in_full(data: dict[str, Any], cols: Any, limit: int = FULL_CASES) -> np.ndarray:
    """The places (in run order) of the cases the report shows in full: every case of a run of at most
    ``limit``; else the ``limit`` cases that matter most: errored first, then those in the
    disagreement list, then those whose verdicts differ between backends, then those below a
    threshold (most badges first), in run order within each."""
    n = len(cols.cases)
    if n <= limit:
        return np.arange(n)
    f = case_flags(data, cols)
    matter = np.flatnonzero(f["error"] | f["fail"] | f["disagree"] | f["listed"])
    rank = np.lexsort((-f["n_below"][matter], ~f["fail"][matter], ~f["disagree"][matter],
                       ~f["listed"][matter], ~f["error"][matter]))
    return np.sort(matter[rank[:limit]])


def shown_cases(run: Run, data: dict[str, Any], full: np.ndarray, budget: int = FULL_BUDGET
           ) -> tuple[list[dict[str, Any]], int]:
    """The cases ``full`` with their texts, each with at most `CHUNKS_SHOWN` chunks (and the relevant
    ones after them), as many as fit ``budget`` bytes; and how many of ``full`` did not fit."""
    k = (data["run"].get("options") or {}).get("k")
    flips = {(d["metric"], d["case_id"]) for d in data["disagreements"] if d["verdicts_differ"]}
    th = Thresholds(by_pair=dict(_marks(data)))
    out, spent = [], 0
    for c in case_rows(run, th, k, flips, texts=True, indices=full):
        c = _capped(c)
        size = sum(len(str(ch.get("text") or "")) + len(ch["id"]) + 60 for ch in c["contexts"]) \
            + sum(len(str(c.get(x) or "")) for x in ("question", "answer", "reference")) \
            + sum(len(str(s.get("reason") or s.get("error") or "")) + 80 for s in c["scores"])
        if out and spent + size > budget:
            break
        spent += size
        out.append(c)
    return out, len(full) - len(out)


def _capped(case: dict[str, Any]) -> dict[str, Any]:
    """A case's drill-down with its first `CHUNKS_SHOWN` chunks and, after them, the relevant ones (as
    many again at most); ``chunks_hidden``: how many are left out."""
    chunks = case["contexts"]
    if len(chunks) <= CHUNKS_SHOWN:
        return case
    kept = chunks[:CHUNKS_SHOWN] + [ch for ch in chunks[CHUNKS_SHOWN:] if ch["relevant"]][:CHUNKS_SHOWN]
    return case | {"contexts": kept, "chunks_hidden": len(chunks) - len(kept)}


def _compact(run: Run, data: dict[str, Any], rest: np.ndarray) -> list[dict[str, Any]]:
    """The one-line view of the cases ``rest``: flags, each score's value, status and verdict, id,
    tags and question (read back a batch at a time; no score is read back: the columns hold these)."""
    cols = run.columns
    marks = _marks(data)
    f = case_flags(data, cols)
    keys = [(r["backend"], r["metric"]) for r in data["summary"]]
    passed = {(b, m): cols.column(b, m).verdicts(marks[(b, m)]) for b, m in keys}  # once a column
    out = []
    index = cols.cases
    order = np.sort(np.asarray(rest, np.int64)).tolist()
    for start in range(0, len(order), 2000):
        part = order[start:start + 2000]
        for i, question in zip(part, index.questions(part)):
            scores = []
            for b, m in keys:
                col = cols.column(b, m)
                code = int(col.status[i])
                if code == MISSING:
                    continue
                scored = code == SCORED
                scores.append({"metric": m, "backend": b, "status": STATUS_NAMES[code],
                               "value": float(col.value[i]) if scored else None,
                               "passed": bool(passed[(b, m)][i]) if scored else None})
            out.append({"id": index.ids[i], "question": question,
                        "tags": list(index.tags[i]) if index.places[i] >= 0 else [], "scores": scores,
                        "flags": {"error": bool(f["error"][i]), "undefined": bool(f["undefined"][i]),
                                  "fail": bool(f["fail"][i]), "disagree": bool(f["disagree"][i])}})
    return out


def _cell(s: Optional[dict[str, Any]], width: int) -> str:
    if s is None:
        text = ""
    elif s["status"] == "scored":
        text = num(s["value"]) + (BELOW if s["passed"] is False else "")
    else:
        text = {"error": "error", "missing": "miss"}.get(s["status"], "undef")
    return text.ljust(width)


def compact_pages(cases: list[dict[str, Any]], columns: list[tuple[str, str]]) -> str:
    """The cases not shown in full, one line of plain text each, in pages of `PAGE_ROWS` lines (each
    a closed ``<details>`` holding one ``<pre>``: a page is a single text node, so the browser has
    next to nothing to lay out). A line: the case's flags (``e`` errored, ``u`` undefined, ``≠``
    verdicts differ, `BELOW` below a threshold), one value per metric and backend of ``columns``
    (`BELOW` after a value below its threshold), then its id, tags and question (cut to
    `QUESTION_CHARS`). Every line has the same columns at the same offsets, which the ``<pre>``
    lists (``data-cols``, ``data-flags-at``) for the page's filter."""
    if not cases:
        return ""
    widths = [max(len(m), len(b), 6) + 1 for m, b in columns]
    offsets, at = [], 5
    for (m, _), w in zip(columns, widths):
        offsets.append([m, at, at + w])
        at += w
    head = ("     " + "".join(m.ljust(w) for (m, _), w in zip(columns, widths)) + "\n     "
            + "".join(b.ljust(w) for (_, b), w in zip(columns, widths)) + "case · tags · question\n")
    cols = _e(json.dumps(offsets, separators=(",", ":")))
    out = []
    for start in range(0, len(cases), PAGE_ROWS):
        page = cases[start:start + PAGE_ROWS]
        lines = []
        for c in page:
            by = {(s["metric"], s["backend"]): s for s in c["scores"]}
            f = c["flags"]
            flags = (("e" if f["error"] else " ") + ("u" if f["undefined"] else " ")
                     + ("≠" if f["disagree"] else " ") + (BELOW if f["fail"] else " ") + " ")
            q = one_line(c["question"])
            q = q if len(q) <= QUESTION_CHARS else q[:QUESTION_CHARS - 1] + "…"
            tags = ", ".join(one_line(t) for t in c["tags"])
            lines.append(flags + "".join(_cell(by.get(col), w) for col, w in zip(columns, widths))
                         + f"{one_line(c['id'])} · {tags} · {q}")
        span = f"{start + 1:,}–{start + len(page):,} of {len(cases):,}: {page[0]['id']} … {page[-1]['id']}"
        out.append(f'<details class="page"><summary>{_e(span)}</summary><pre class="crows" data-head="2" '
                   f'data-flags-at="0:5" data-cols="{cols}">{_e(head)}'
                   f'{_e(chr(10).join(lines))}</pre></details>')
    return "".join(out)


def _tone(row: dict[str, Any]) -> str:
    """The colour of a summary cell, from its cases' verdicts: ``hi`` every case passes, ``mid`` at
    least half do, ``lo`` fewer, ``na`` none has a verdict."""
    n_pass, n_fail = row.get("n_pass", 0), row.get("n_fail", 0)
    if not n_pass + n_fail:
        return "na"
    return "hi" if not n_fail else ("mid" if n_pass >= n_fail else "lo")


def grid(data: dict[str, Any], shown: list[dict[str, Any]], tags: Sequence[str] = ()) -> dict[str, Any]:
    """The cases at a glance: a row per case of ``shown`` (the cases in full), a column per
    backend:metric of the summary, each cell the case's verdict at that column's pass mark (``pass``,
    ``fail``, ``undef``, ``error``, or empty); rows worst first: the most failed cells, then the
    furthest below a mark. ``tags``: every tag of the run."""
    columns = [{"metric": r["metric"], "backend": r["backend"], "threshold": r["threshold"],
                "key": f"{r['backend']}:{r['metric']}"} for r in data["summary"]]
    rows = []
    for c in shown:
        by = {(s["metric"], s["backend"]): s for s in c["scores"]}
        cells, fails, margin = [], 0, math.inf
        for col in columns:
            s = by.get((col["metric"], col["backend"]))
            if s is None:
                cells.append({"cls": "none", "text": "", "sort": "", "title": "not scored"})
                continue
            if s["status"] != "scored":
                text = {"error": "error", "missing": "miss"}.get(s["status"], "undef")
                cls = "error" if s["status"] == "error" else "undef"
                cells.append({"cls": cls, "text": text, "sort": "", "title": s.get("error") or s["status"]})
                continue
            fails += s["passed"] is False
            margin = min(margin, s["value"] - col["threshold"])
            verdict = "passes" if s["passed"] else "fails"
            cells.append({"cls": "pass" if s["passed"] else "fail", "text": num(s["value"]),
                          "sort": f"{s['value']:.6f}",
                          "title": f"{col['key']} {num(s['value'])} {verdict} its threshold "
                                   f"{col['threshold']:.3g}"})
        rows.append({"id": c["id"], "tags": c["tags"], "cells": cells, "fails": fails,
                     "margin": margin if math.isfinite(margin) else 0.0})
    rows.sort(key=lambda r: (-r["fails"], r["margin"]))
    return {"columns": columns, "rows": rows, "tags": list(tags), "n_cases": len(data["cases"])}


def _script_hash(script: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii")


def render_html(run: Union[Run, str, Path], data: Optional[dict] = None, full: int = FULL_CASES,
                budget: int = SIZE_BUDGET, **kw) -> str:
    """The self-contained HTML report: ``full`` cases at most in full (`cases_in_full`), the others
    one score row each (`compact_pages`), the page within ``budget`` bytes (UTF-8). ``kw``: the
    options of `report_data`."""
    import io

    buffer = io.StringIO()
    write_html(run, buffer, data, full, budget, **kw)
    return buffer.getvalue()


def write_html(run: Union[Run, str, Path], out: TextIO, data: Optional[dict] = None, full: int = FULL_CASES,
               budget: int = SIZE_BUDGET, **kw) -> None:
    """Write the self-contained HTML report (`render_html`) to ``out``: the cases in full within
    `FULL_BUDGET` (or two fifths of ``budget``, the less), the one-line cases sampled more sparsely
    until the page fits ``budget`` bytes."""
    import jinja2
    from markupsafe import Markup

    run = open_run(run)
    data = data or report_data(run, case_texts=False, **kw)
    cols = run.columns
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(ASSETS)),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["num"] = num
    env.filters["count"] = count  # 199,428: a count as the terminal writes it
    env.filters["p"] = p_text
    env.filters["tone"] = _tone
    env.filters["ragchecker"] = ragchecker_text
    style = (ASSETS / "report.css").read_text(encoding="utf-8")
    script = (ASSETS / "report.js").read_text(encoding="utf-8")
    p = plots(data, cols)
    summary_idx = {(r["metric"], r["backend"]): r for r in data["summary"]}
    tag_idx = {t: {(r["metric"], r["backend"]): r for r in rows}
               for t, rows in data["summary_by_tag"].items()}
    chosen = cases_in_full(data, cols, full)
    shown, left = shown_cases(run, data, chosen, min(FULL_BUDGET, budget * 2 // 5))
    if left:  # past the budget: the cases that did not fit are one line each, like the rest
        chosen = chosen[:len(shown)]
    rest = np.setdiff1d(np.arange(len(cols.cases)), chosen, assume_unique=True)
    step = max(1, math.ceil(len(rest) / COMPACT_ROWS))
    columns = [(r["metric"], r["backend"]) for r in data["summary"]]
    csp = ("default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
           f"script-src '{_script_hash(script)}'; base-uri 'none'; form-action 'none'")
    diagnosis = data.get("diagnosis")
    listed = listed_by_layer(diagnosis, DIAGNOSIS_LISTED) if diagnosis and diagnosis["n_failing"] else {}
    template = env.get_template("report.html")
    the_grid = grid(data, shown, cols.cases.all_tags())
    while True:
        lines = rest[::step] if step <= len(rest) else rest[:0]
        compact = compact_pages(_compact(run, data, lines), columns)
        pieces = list(template.generate(
            d=data, plots=p, colors=p["colors"], style=Markup(style), script=Markup(script), csp=Markup(csp),
            summary_idx=summary_idx, tag_idx=tag_idx, svg=Markup, cases=shown, n_compact=len(rest),
            n_lines=len(lines), sample_step=step, n_over_budget=left, compact=Markup(compact),
            grid=the_grid, listed=DIAGNOSIS_LISTED, diagnosis_listed=listed, missed=MISSED,
            chunks_shown=CHUNKS_SHOWN, reused_lines=reused_lines(data.get("reused_from")),
        ))
        size = sum(len(piece.encode("utf-8")) for piece in pieces)
        if size <= budget or not len(lines):
            break
        # over: the lines sampled more sparsely, so that they take what is left of the budget
        lines_size = len(compact.encode("utf-8"))
        room = lines_size - (size - budget) - 4096
        step = step * math.ceil(lines_size / room) if room > 0 else len(rest) + 1
    for piece in pieces:
        out.write(piece)
