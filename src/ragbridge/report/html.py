"""The report as one self-contained HTML file: the template (``assets/report.html``), its style and
script, and the plots as inline SVG.

The file needs nothing but a browser: no CDN, no external font, image or script; the plots (score
distributions per backend, backend A against backend B per metric) are inline SVG. Every piece of
text from the data is escaped (the template engine escapes by default and the SVG writer escapes
every string), and a Content-Security-Policy allows only the report's own inline script, by its
hash, so even markup that slipped through could not run. The report's script only filters and
expands the case list; the page reads fully without it.
"""

from __future__ import annotations

import base64
import hashlib
import html
import math
from collections import defaultdict
from pathlib import Path
from typing import Any, Optional, Sequence, Union

from ..analysis.table import open_run
from ..run import Run
from .data import report_data
from .text import num

__all__ = ["render_html", "plots", "svg_distribution", "svg_scatter", "backend_colors", "PALETTE", "ASSETS"]

ASSETS = Path(__file__).with_name("assets")
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
    hist = {b: np.histogram(np.clip(values[b], 0, 1), bins=10, range=(0, 1))[0] if values[b]
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
            tip = f"{b}: {n} case(s) with {metric} in [{lo:.1f}, {hi:.1f}{close}"
            color = colors.get(b, "#888")
            parts.append(
                f'<rect x="{left + j * bw + 1:.1f}" y="{y0 + row_h - 4 - h:.1f}" width="{bw - 2:.1f}" '
                f'height="{h:.1f}" fill="{color}"><title>{_e(tip)}</title></rect>')
        if values[b]:
            mean = float(np.mean(values[b]))
            x = left + width * mean
            parts.append(f'<path d="M{x:.1f},{y0 + row_h - 2} l-4,6 h8 z" class="mean-mark">'
                         f'<title>{_e(f"{b} mean {mean:.3f}")}</title></path>')
        c = counts.get(b, {})
        note = f"n {len(values[b])}"
        extra = [f"{c[k]} {k[:5]}." for k in ("undefined", "errored") if c.get(k)]
        if extra:
            note += " · " + ", ".join(extra)
        if values[b]:
            note = f"mean {float(np.mean(values[b])):.2f} · " + note
        parts.append(f'<text x="{left + width + 8}" y="{y0 + row_h / 2 + 4}" class="plot-note">'
                     f'{_e(note)}</text>')
    ya = top + row_h * len(rows) + 12
    for t in (0, 0.25, 0.5, 0.75, 1):
        parts.append(f'<text x="{left + width * t:.1f}" y="{ya}" text-anchor="middle" '
                     f'class="tick">{t:g}</text>')
    parts.append("</svg>")
    return "".join(parts)


def svg_scatter(metric: str, a: str, b: str, points: list[tuple[str, float, float]], ta: float, tb: float,
                colors: dict[str, str]) -> str:
    """Backend A (x) against backend B (y) on the cases both scored; disagreeing verdicts highlighted."""
    size, pad = 210, 34
    w = h = size + pad + 12
    parts = [f'<svg class="plot scatter" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {h + 16}" '
             f'width="{w}" height="{h + 16}" role="img" aria-label="{_e(f"{metric}: {a} against {b}")}">',
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
    groups: dict[tuple[float, float], list[str]] = {}
    for cid, x, y in points:  # identical pairs drawn once, larger, listing their cases
        groups.setdefault((round(x, 4), round(y, 4)), []).append(cid)
    for (x, y), ids in groups.items():
        differ = (x >= ta) != (y >= tb)
        cls = "pt pt-differ" if differ else "pt"
        r = 3.6 + 1.4 * math.sqrt(len(ids) - 1)
        shown = ", ".join(ids[:8]) + (f" and {len(ids) - 8} more" if len(ids) > 8 else "")
        tip = f"{shown}: {a} {x:.3f}, {b} {y:.3f}" + (" (verdicts differ)" if differ else "")
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
    parts.append("</svg>")
    return "".join(parts)


def plots(run: Run, data: dict[str, Any]) -> dict[str, Any]:
    colors = backend_colors(data["backends"])
    values: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    for s in run.scores:
        if s.status == "scored":
            values[(s.metric, s.backend)][s.case_id] = s.value
    cov = {(r["metric"], r["backend"]): r for r in data["coverage"]}
    dist = {}
    for metric in data["metrics"]:
        bs = [b for b in data["backends"] if (metric, b) in cov]
        if not any(values.get((metric, b)) for b in bs):
            continue
        dist[metric] = svg_distribution(
            metric, {b: list(values.get((metric, b), {}).values()) for b in bs}, colors,
            {b: cov[(metric, b)] for b in bs})
    scatter = []
    order = [c["id"] for c in data["cases"]]
    for row in data["agreement"]:
        m, a, b = row["metric"], row["backend_a"], row["backend_b"]
        va, vb = values.get((m, a), {}), values.get((m, b), {})
        pts = [(cid, va[cid], vb[cid]) for cid in order if cid in va and cid in vb]
        scatter.append({"metric": m, "a": a, "b": b,
                        "svg": svg_scatter(m, a, b, pts, row["threshold_a"], row["threshold_b"], colors)})
    return {"colors": colors, "distributions": dist, "scatter": scatter}


def _tone(v: Any) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "na"
    return "lo" if v < 0.5 else ("mid" if v < 0.8 else "hi")


def _script_hash(script: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii")


def render_html(run: Union[Run, str, Path], data: Optional[dict] = None, **kw) -> str:
    """The self-contained HTML report."""
    import jinja2
    from markupsafe import Markup

    run = open_run(run)
    data = data or report_data(run, **kw)
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(ASSETS)),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["num"] = num
    env.filters["tone"] = _tone
    style = (ASSETS / "report.css").read_text(encoding="utf-8")
    script = (ASSETS / "report.js").read_text(encoding="utf-8")
    p = plots(run, data)
    summary_idx = {(r["metric"], r["backend"]): r for r in data["summary"]}
    tag_idx = {t: {(r["metric"], r["backend"]): r for r in rows}
               for t, rows in data["summary_by_tag"].items()}
    csp = ("default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
           f"script-src '{_script_hash(script)}'; base-uri 'none'; form-action 'none'")
    return env.get_template("report.html").render(
        d=data, plots=p, colors=p["colors"], style=Markup(style), script=Markup(script), csp=Markup(csp),
        summary_idx=summary_idx, tag_idx=tag_idx, svg=Markup,
    )
