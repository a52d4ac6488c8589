"""One report for a run of mixed backends: HTML (one self-contained file), Markdown or JSON.

``ragbridge report RUN [--format html|md|json] [--out FILE]`` reads a run folder and writes:

- what was run (dataset, backends and versions, judge, status, counts);
- the summary, overall and per tag: metric x backend with the mean over scored cases, how many were
  scored, undefined and errored, with the retrieval half (ranking and context metrics) and the
  generation half (answer metrics) separated;
- the agreement between backends (`ragbridge.analysis.compare`) and the cases they disagree on
  most, each backend's value and reason side by side;
- judge calls and tokens per backend and metric, each backend's wall time (from the start of scoring
  to its last score, recorded by the runner in ``run.json``'s ``timing``) and the sum of its
  per-score call times (scores run concurrently, so the sum is larger than the wall time);
- the pass mark of every metric and backend, where it came from, and how many cases fall below it;
- a drill-down per case: question, retrieved chunks with the relevant ones marked (the relevance
  rule of ``ragbridge.schema``), answer, reference, and every backend's score and reason; a case
  with a score below its pass mark carries a badge naming the metrics.

A run judged by ragbridge's stub judge (``run.json``: ``judge.stub``) says so at the top of every
format: its judged scores test the plumbing, not the answers.

Pass marks (``value >= mark`` passes), the first that sets one wins: ``--threshold`` (see
`ragbridge.analysis.Thresholds`), then ``--gates FILE`` (`gate_thresholds`), then the defaults
(each canonical metric's ``pass_mark``, `ragbridge.metrics.default_pass_mark`), chosen so that the
badge marks cases worth reading: 0.5 for the ranking metrics and the judged metrics, ``1/k`` for
``precision@k`` and ``context_relevance`` (both are a precision of the retrieved list, whose
ceiling with one relevant chunk is about ``1/k``), 1 for the answer checks (``must_contain``,
``must_not_contain``, ``abstention``). A bare ``--threshold 0.7`` replaces those defaults, not the
gates file's marks. docs/report.md has the table.

The HTML file needs nothing but a browser: no CDN, no external font, image or script; the plots
(score distributions per backend, backend A against backend B per metric) are inline SVG. Every
piece of text from the data is escaped (the template engine escapes by default and the SVG writer
escapes every string), and a Content-Security-Policy allows only the report's own inline script, by
its hash, so even markup that slipped through could not run. The report's script only filters and
expands the case list; the page reads fully without it.

`report_data` returns the same content as a dict (what ``--format json`` writes) for notebooks.
"""

from __future__ import annotations

import base64
import datetime as _dt
import hashlib
import html
import json
import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, List, Optional, Sequence, Union

import typer

from . import __version__
from .analysis import (
    DEFAULT_RESAMPLES,
    AnalysisError,
    Thresholds,
    _as_run,
    compare,
    coverage,
    disagreements,
    validate,
)
from .gate_reports import md_text as _md  # the one Markdown escaping (HTML and Markdown-safe)
from .hookspecs import hookimpl
from .formats.files import write_atomic
from .metrics import default_pass_mark, half_of
from .metrics import sort_key as _metric_key
from .run import Run
from .summary import ALL

__all__ = ["report_data", "render_html", "render_markdown", "render_json", "write_report", "FORMATS",
           "PassMarks", "pass_marks", "gate_thresholds"]

FORMATS = {"html": ".html", "md": ".md", "json": ".json"}
ASSETS = Path(__file__).with_name("report_assets")

PALETTE = ["#4269d0", "#efb118", "#3ca951", "#ff725c", "#a463f2", "#97bbf5", "#9c6b4e", "#6cc5b0"]


def _backend_key(b: str):
    return (b != "native", b)


def _num(v: Any) -> Optional[float]:
    """A JSON-safe float: NaN and infinities become None."""
    if v is None:
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _clean(obj: Any) -> Any:
    """Recursively JSON-safe: NaN -> None, numpy scalars -> Python."""
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if isinstance(obj, bool) or obj is None or isinstance(obj, str):
        return obj
    if isinstance(obj, int):
        return obj
    if hasattr(obj, "item") and not isinstance(obj, (list, dict)):
        try:
            obj = obj.item()
        except (AttributeError, ValueError):
            pass
    if isinstance(obj, bool):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, int):
        return obj
    return obj if isinstance(obj, (str, type(None))) else str(obj)


def _records(frame) -> list[dict]:
    return [_clean(r) for r in frame.to_dict("records")]


# --------------------------------------------------------------------------------------------
# Pass marks


def gate_thresholds(config: Any) -> Thresholds:
    """Per-case pass marks read from a gates file (a path or a `ragbridge.gate.GateConfig`).

    A ``share(METRIC >= CUT)`` rule gives ``CUT``; a ``METRIC >= VALUE`` (mean) rule gives
    ``VALUE``: a case below the bar the mean must clear is one pulling it down. A rule with a
    ``backend`` sets the mark for those backends only. When several rules name a metric, a rule over
    all cases beats one limited to ``tags``, a share rule beats a mean rule, then the first in the
    file wins. ``drop``, ``error_rate`` and ``undefined_rate`` rules set no mark."""
    from .gate import GateConfig, load_gates

    if not isinstance(config, GateConfig):
        config = load_gates(config)
    marks = []
    for rule in config.rules:
        if rule.kind == "share":
            marks.append(((bool(rule.tags), 0, rule.index), rule, rule.cut))
        elif rule.kind == "mean" and rule.op in (">=", ">"):
            marks.append(((bool(rule.tags), 1, rule.index), rule, rule.threshold))
    out = Thresholds()
    for _, rule, value in sorted(marks, key=lambda m: m[0]):
        for b in rule.backends or [None]:
            if b is None:
                out.by_metric.setdefault(rule.metric, value)
            else:
                out.by_pair.setdefault((b, rule.metric), value)
    return out


@dataclass
class PassMarks(Thresholds):
    """Thresholds in layers ``(source, thresholds, its default applies)``; the first layer that sets
    a mark for a (backend, metric) wins. `lookup` also says which layer it was."""

    layers: list[tuple[str, Thresholds, bool]] = field(default_factory=list)

    def lookup(self, backend: str, metric: str) -> tuple[float, str]:
        for source, t, with_default in self.layers:
            for found, value in (((backend, metric) in t.by_pair, t.by_pair.get((backend, metric))),
                                 (backend in t.by_backend, t.by_backend.get(backend)),
                                 (metric in t.by_metric, t.by_metric.get(metric))):
                if found:
                    return float(value), source
            if with_default:
                return t.default, source
        return default_pass_mark(metric), "default"

    def get(self, backend: str, metric: str) -> float:
        return self.lookup(backend, metric)[0]


def _bare(specs: Any) -> bool:
    """Whether ``--threshold`` values include a plain number (a new default for every metric)."""
    if isinstance(specs, (int, float)) and not isinstance(specs, bool):
        return True
    if isinstance(specs, str):
        specs = [specs]
    if isinstance(specs, (list, tuple)):
        return any("=" not in str(x) for x in specs)
    return False


def pass_marks(thresholds: Any = None, gates: Any = None, metrics: Sequence[str] = (),
               backends: Sequence[str] = (), k: Optional[int] = None) -> Thresholds:
    """The report's pass marks: ``thresholds`` (``--threshold`` values), then ``gates`` (a gates
    file), then `ragbridge.metrics.default_pass_mark`. A `Thresholds` object is the whole answer."""
    if isinstance(thresholds, Thresholds):
        return thresholds
    given = Thresholds.parse(thresholds, backends)
    defaults = Thresholds(by_metric={m: default_pass_mark(m, k) for m in metrics})
    layers = [("--threshold", given, False)]
    if gates is not None:
        layers.append(("gates", gate_thresholds(gates), False))
    layers.append(("--threshold", given, True) if _bare(thresholds) else ("default", defaults, True))
    return PassMarks(layers=layers)


# --------------------------------------------------------------------------------------------
# The content


def report_data(
    run: Union[Run, str, Path],
    thresholds: Any = None,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    top: int = 10,
    labels: Any = None,
    label_threshold: float = 0.5,
    gates: Any = None,
) -> dict[str, Any]:
    """Everything the report shows, as plain JSON-ready data.

    With ``labels`` (a labels file or frame, see `ragbridge.analysis.load_labels`) the report also
    holds each backend's verdicts against the human labels (`ragbridge.analysis.validate`). Pass
    marks come from ``thresholds``, then ``gates`` (a gates file), then the defaults (`pass_marks`)."""
    run = _as_run(run)
    m = run.manifest
    backends = sorted({s.backend for s in run.scores} | set(m.backends), key=_backend_key)
    metrics = sorted({s.metric for s in run.scores}, key=_metric_key)
    k = (m.options or {}).get("k")
    th = pass_marks(thresholds, gates, metrics, backends, k)

    summary = run.summary(by_tag=True)
    rows = _records(summary)
    overall = sorted((r for r in rows if r["tag"] == ALL),
                     key=lambda r: (_metric_key(r["metric"]), _backend_key(r["backend"])))
    for r in overall:
        r["half"] = half_of(r["metric"])
    tags: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        if r["tag"] != ALL:
            tags[r["tag"]].append(r)

    agreement = _records(compare(run, thresholds=th, n_resamples=n_resamples, seed=seed))
    dis_frame = disagreements(run, thresholds=th, top=top)
    dis = []
    for r in _records(dis_frame):
        per = []
        for b in backends:
            if f"{b}.status" in r and r[f"{b}.status"] is not None:
                per.append({"backend": b, "value": r[f"{b}.value"], "status": r[f"{b}.status"],
                            "passed": r[f"{b}.passed"], "reason": r[f"{b}.reason"],
                            "threshold": th.get(b, r["metric"])})
        dis.append({k2: r[k2] for k2 in ("metric", "case_id", "question", "spread", "verdicts_differ")} | {"backends": per})
    cov = _records(coverage(run))
    validation = (_records(validate(run, labels, thresholds=th, label_threshold=label_threshold,
                                    n_resamples=n_resamples, seed=seed))
                  if labels is not None else None)

    usage: dict[str, dict[str, Any]] = {}
    per_metric: list[dict[str, Any]] = []
    acc: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for s in run.scores:
        a = acc[(s.backend, s.metric)]
        a["scores"] += 1
        a["judge_calls"] += s.judge_calls
        a["prompt_tokens"] += s.prompt_tokens
        a["completion_tokens"] += s.completion_tokens
        a["call_seconds"] += s.seconds or 0.0
    wall = m.timing.get("wall_seconds") or {}
    for (b, met), a in sorted(acc.items(), key=lambda kv: (_backend_key(kv[0][0]), _metric_key(kv[0][1]))):
        per_metric.append({"backend": b, "metric": met, **{k2: _clean(v) for k2, v in a.items()}})
        u = usage.setdefault(b, {"backend": b, "scores": 0, "judge_calls": 0, "prompt_tokens": 0,
                                 "completion_tokens": 0, "wall_seconds": _num(wall.get(b)),
                                 "call_seconds": 0.0})
        for k2, v in a.items():
            u[k2] += v
    for u in usage.values():
        for k2 in ("scores", "judge_calls", "prompt_tokens", "completion_tokens"):
            u[k2] = int(u[k2])
        u["call_seconds"] = round(u["call_seconds"], 3)
    for r in per_metric:
        for k2 in ("scores", "judge_calls", "prompt_tokens", "completion_tokens"):
            r[k2] = int(r[k2])
        r["call_seconds"] = round(r["call_seconds"], 3)

    cases = _cases(run, metrics, backends, th, k, {(d["metric"], d["case_id"]) for d in dis if d["verdicts_differ"]})

    return _clean({
        "ragbridge_version": __version__,
        "generated_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "run": {
            "path": str(run.path) if run.path else None,
            "dataset": m.dataset, "backends": m.backends, "metrics": m.metrics, "options": m.options,
            "judge": m.judge, "started_at": m.started_at, "finished_at": m.finished_at,
            "status": m.status, "counts": m.counts, "ragbridge_version": m.ragbridge_version,
            "stub_judge": bool((m.judge or {}).get("stub")), "timing": m.timing,
        },
        "backends": backends,
        "metrics": metrics,
        "halves": {"retrieval": [x for x in metrics if half_of(x) == "retrieval"],
                   "generation": [x for x in metrics if half_of(x) == "generation"]},
        "thresholds": _threshold_rows(cases, th, metrics, backends),
        "summary": overall,
        "summary_by_tag": {t: tags[t] for t in sorted(tags)},
        "agreement": agreement,
        "disagreements": dis,
        "coverage": cov,
        "validation": validation,
        "judge_usage": [usage[b] for b in sorted(usage, key=_backend_key)],
        "judge_usage_by_metric": per_metric,
        "cases": cases,
        "statistics": {"n_resamples": n_resamples, "seed": seed, "confidence": 0.95},
    })


def _threshold_rows(cases: list[dict], th: Thresholds, metrics, backends) -> list[dict]:
    """Per metric and backend that scored it: the pass mark, its source and the cases below it."""
    scored: dict[tuple[str, str], int] = defaultdict(int)
    below: dict[tuple[str, str], int] = defaultdict(int)
    for c in cases:
        for s in c["scores"]:
            if s["passed"] is not None:
                scored[(s["metric"], s["backend"])] += 1
                below[(s["metric"], s["backend"])] += not s["passed"]
    rows = []
    for met in metrics:
        for b in backends:
            if (met, b) in scored:
                value, source = (th.lookup(b, met) if isinstance(th, PassMarks)
                                 else (th.get(b, met), "--threshold"))
                rows.append({"metric": met, "backend": b, "threshold": value, "source": source,
                             "n_scored": scored[(met, b)], "n_below": below[(met, b)]})
    return rows


def _cases(run: Run, metrics, backends, th: Thresholds, k, flips: set) -> list[dict]:
    by_case: dict[str, list] = defaultdict(list)
    for s in run.scores:
        by_case[s.case_id].append(s)
    out = []
    known = []
    for c in run.cases:
        known.append(c.id)
        chunks = []
        seen: set[str] = set()
        rank = 0
        for ch in c.contexts:
            dup = ch.id in seen
            seen.add(ch.id)
            if not dup:
                rank += 1
            grade = c.relevant.get(ch.id, c.relevant.get(ch.source) if ch.source else None)
            chunks.append({
                "rank": None if dup else rank, "id": ch.id, "source": ch.source, "text": ch.text,
                "score": ch.score, "grade": grade, "relevant": bool(grade), "duplicate": dup,
                "beyond_k": bool(k) and not dup and rank > int(k),
            })
        out.append(_case_entry(c.id, c.question, c.answer, c.reference, c.tags, c.answerable,
                               chunks, dict(c.relevant), by_case.get(c.id, []), th, flips))
    for cid in by_case:  # scores for cases the run folder does not describe: still shown
        if cid not in set(known):
            out.append(_case_entry(cid, "", None, None, [], True, [], {}, by_case[cid], th, flips))
    return out


def _case_entry(cid, question, answer, reference, tags, answerable, chunks, relevant, scores, th, flips):
    rows = []
    flags = {"error": False, "undefined": False, "fail": False, "disagree": False}
    below: dict[str, list[str]] = {}
    for s in sorted(scores, key=lambda s: (_metric_key(s.metric), _backend_key(s.backend))):
        t = th.get(s.backend, s.metric)
        passed = (s.value >= t) if s.status == "scored" else None
        if passed is False:
            below.setdefault(s.metric, []).append(f"{s.backend} {s.value:.3f} < {t:.3g}")
        rows.append({
            "metric": s.metric, "backend": s.backend, "value": _num(s.value), "status": s.status,
            "passed": passed, "threshold": t, "reason": s.reason, "error": s.error,
            "native_metric": s.native_metric, "judge_calls": s.judge_calls,
            "prompt_tokens": s.prompt_tokens, "completion_tokens": s.completion_tokens,
        })
        flags["error"] |= s.status == "error"
        flags["undefined"] |= s.status == "undefined"
        flags["fail"] |= passed is False
        flags["disagree"] |= (s.metric, cid) in flips
    return {"id": cid, "question": question, "answer": answer, "reference": reference, "tags": list(tags),
            "answerable": answerable, "relevant": relevant, "contexts": chunks, "scores": rows,
            "flags": flags, "below": [{"metric": met, "detail": "; ".join(d)} for met, d in below.items()]}


# --------------------------------------------------------------------------------------------
# SVG plots (inline, every string escaped)


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
    hist = {b: np.histogram(np.clip(values[b], 0, 1), bins=10, range=(0, 1))[0] if values[b] else np.zeros(10, int)
            for b in rows}
    peak = max([int(h.max()) for h in hist.values()] + [1])
    parts = [f'<svg class="plot dist" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {total_w} {height}" '
             f'width="{total_w}" height="{height}" role="img" aria-label="{_e(f"Distribution of {metric} per backend")}">',
             f'<text x="0" y="14" class="plot-title">{_e(metric)}</text>']
    for i, b in enumerate(rows):
        y0 = top + i * row_h
        parts.append(f'<text x="{left - 8}" y="{y0 + row_h / 2 + 4}" text-anchor="end" class="plot-label">{_e(b)}</text>')
        parts.append(f'<line x1="{left}" x2="{left + width}" y1="{y0 + row_h - 4}" y2="{y0 + row_h - 4}" class="axis"/>')
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
                f'<rect x="{left + j * bw + 1:.1f}" y="{y0 + row_h - 4 - h:.1f}" width="{bw - 2:.1f}" height="{h:.1f}" '
                f'fill="{color}"><title>{_e(tip)}</title></rect>')
        if values[b]:
            mean = float(np.mean(values[b]))
            x = left + width * mean
            parts.append(f'<path d="M{x:.1f},{y0 + row_h - 2} l-4,6 h8 z" class="mean-mark"><title>{_e(f"{b} mean {mean:.3f}")}</title></path>')
        c = counts.get(b, {})
        note = f"n {len(values[b])}"
        extra = [f"{c[k]} {k[:5]}." for k in ("undefined", "errored") if c.get(k)]
        if extra:
            note += " · " + ", ".join(extra)
        if values[b]:
            note = f"mean {float(np.mean(values[b])):.2f} · " + note
        parts.append(f'<text x="{left + width + 8}" y="{y0 + row_h / 2 + 4}" class="plot-note">{_e(note)}</text>')
    ya = top + row_h * len(rows) + 12
    for t in (0, 0.25, 0.5, 0.75, 1):
        parts.append(f'<text x="{left + width * t:.1f}" y="{ya}" text-anchor="middle" class="tick">{t:g}</text>')
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
        parts.append(f'<circle cx="{px(min(max(x, 0), 1)):.1f}" cy="{py(min(max(y, 0), 1)):.1f}" r="{r:.1f}" class="{cls}">'
                     f'<title>{_e(tip)}</title></circle>')
    for t in (0, 0.5, 1):
        parts.append(f'<text x="{px(t):.1f}" y="{20 + size + 13}" text-anchor="middle" class="tick">{t:g}</text>')
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


# --------------------------------------------------------------------------------------------
# Writers


def _fmt(v: Any, digits: int = 3) -> str:
    f = _num(v)
    return "—" if f is None else f"{f:.{digits}f}"


def _ci(v: Any, lo: Any, hi: Any, digits: int = 2) -> str:
    s = _fmt(v, digits)
    if s == "—" or _num(lo) is None or _num(hi) is None:
        return s
    return f"{s} [{_fmt(lo, digits)}, {_fmt(hi, digits)}]"


def _tone(v: Any) -> str:
    f = _num(v)
    if f is None:
        return "na"
    return "lo" if f < 0.5 else ("mid" if f < 0.8 else "hi")


def _script_hash(script: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii")


def render_html(run: Union[Run, str, Path], data: Optional[dict] = None, **kw) -> str:
    """The self-contained HTML report."""
    import jinja2

    run = _as_run(run)
    data = data or report_data(run, **kw)
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(ASSETS)),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["num"] = _fmt
    env.filters["tone"] = _tone
    env.globals["ci"] = _ci
    style = (ASSETS / "report.css").read_text(encoding="utf-8")
    script = (ASSETS / "report.js").read_text(encoding="utf-8")
    p = plots(run, data)
    summary_idx = {(r["metric"], r["backend"]): r for r in data["summary"]}
    tag_idx = {t: {(r["metric"], r["backend"]): r for r in rows} for t, rows in data["summary_by_tag"].items()}
    csp = ("default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
           f"script-src '{_script_hash(script)}'; base-uri 'none'; form-action 'none'")
    template = env.get_template("report.html")
    return template.render(
        d=data, plots=p, colors=p["colors"], style=jinja2.utils.markupsafe.Markup(style),
        script=jinja2.utils.markupsafe.Markup(script), csp=jinja2.utils.markupsafe.Markup(csp), summary_idx=summary_idx, tag_idx=tag_idx,
        svg=jinja2.utils.markupsafe.Markup,
    )


def render_markdown(run: Union[Run, str, Path], data: Optional[dict] = None, **kw) -> str:
    """The report as GitHub-flavoured Markdown (all data text escaped)."""
    run = _as_run(run)
    d = data or report_data(run, **kw)
    r = d["run"]
    out: list[str] = []
    w = out.append
    w(f"# ragbridge report: {_md(r['path'] or '')}")
    w("")
    if r.get("stub_judge"):
        w("> **Stub judge.** Every judged score of this run came from ragbridge's deterministic stub judge, "
          "not a language model: the scores test the evaluation plumbing, not the answers.")
        w("")
    counts = r.get("counts") or {}
    w(f"- dataset: {_md(r['dataset'].get('path'))} ({r['dataset'].get('n_cases')} cases, {_md(r['dataset'].get('fingerprint'))})")
    w("- backends: " + ", ".join(f"{_md(b)} {_md(v or '')}".strip() for b, v in (r["backends"] or {}).items()))
    if r.get("judge"):
        w(f"- judge: {_md(r['judge'].get('model'))} at {_md(r['judge'].get('base_url'))}")
        if r["judge"].get("self_judging"):
            sj = r["judge"]["self_judging"]
            w(f"- **self-judging**: the judge is the system under test's own model "
              f"({_md(sj.get('generator_model'))}) on {sj.get('cases')} case(s); its scores are likely "
              "inflated")
    w(f"- status: {_md(r['status'])}; started {_md(r['started_at'])}, finished {_md(r['finished_at'])}")
    w(f"- scores: {counts.get('scores', 0)} ({counts.get('scored', 0)} scored, {counts.get('undefined', 0)} undefined, {counts.get('errored', 0)} errored)")
    w("")
    idx = {(x["metric"], x["backend"]): x for x in d["summary"]}
    for half in ("retrieval", "generation"):
        ms = d["halves"][half]
        if not ms:
            continue
        w(f"## {half.capitalize()}")
        w("")
        bs = [b for b in d["backends"] if any((m, b) in idx for m in ms)]
        w("| metric | " + " | ".join(_md(b) for b in bs) + " |")
        w("|---|" + "---|" * len(bs))
        for m in ms:
            cells = []
            for b in bs:
                x = idx.get((m, b))
                if x is None:
                    cells.append("")
                    continue
                extra = [f"{x['n_undefined']} undef" if x["n_undefined"] else "", f"{x['n_errored']} err" if x["n_errored"] else ""]
                extra += [f"{x['unsupported_share']:.0%} with an unsupported claim" if x["n_claims"] else ""]
                cells.append(f"{_fmt(x['mean'])} (n {x['n_scored']}{''.join(', ' + e for e in extra if e)})")
            w(f"| {_md(m)} | " + " | ".join(cells) + " |")
        w("")
    if d["summary_by_tag"]:
        w("## Per tag (mean, n scored, undefined and errored when any)")
        w("")
        keys = [(x["backend"], x["metric"]) for x in d["summary"]]
        w("| tag | " + " | ".join(_md(f"{b}:{m}") for b, m in keys) + " |")
        w("|---|" + "---|" * len(keys))
        for tag, rows in d["summary_by_tag"].items():
            ti = {(x["backend"], x["metric"]): x for x in rows}
            cells = []
            for k in keys:
                x = ti.get(k)
                if x is None:
                    cells.append("")
                    continue
                extra = "".join(f", {x[c]} {lab}" for c, lab in (("n_undefined", "undef"), ("n_errored", "err")) if x[c])
                extra += f", {x['unsupported_share']:.0%} unsup." if x["n_claims"] else ""
                cells.append(f"{_fmt(x['mean'])} ({x['n_scored']}{extra})")
            w(f"| {_md(tag)} | " + " | ".join(cells) + " |")
        w("")
    w("## Agreement between backends")
    w("")
    if not d["agreement"]:
        w("No metric in this run is scored by two or more backends.")
    else:
        w("95% bootstrap intervals in brackets; kappa and agreement at the thresholds shown; "
          "PP/PF/FP/FF: both pass, only A passes, only B passes, both fail.")
        w("")
        w("| metric | A vs B | paired | Spearman | Kendall | Pearson | MAE | thresholds | kappa | agreement | PP/PF/FP/FF | not scored |")
        w("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for a in d["agreement"]:
            ns = "; ".join(
                f"{_md(a['backend_' + s])}: " + ", ".join(f"{a[s + '_' + k]} {k}" for k in ("undefined", "errored", "missing") if a[s + "_" + k])
                for s in ("a", "b") if any(a[s + "_" + k] for k in ("undefined", "errored", "missing")))
            w(f"| {_md(a['metric'])} | {_md(a['backend_a'])} vs {_md(a['backend_b'])} | {a['n_paired']}/{a['n_cases']} | "
              + " | ".join(_ci(a[f], a[f + "_low"], a[f + "_high"]) for f in ("spearman", "kendall", "pearson", "mae"))
              + f" | {a['threshold_a']:g} / {a['threshold_b']:g} | {_ci(a['kappa'], a['kappa_low'], a['kappa_high'])} | "
              f"{_ci(a['agreement'], a['agreement_low'], a['agreement_high'])} | "
              f"{a['both_pass']}/{a['a_pass_b_fail']}/{a['a_fail_b_pass']}/{a['both_fail']} | {ns or '—'} |")
        w("")
        if d["disagreements"]:
            w("### Largest disagreements")
            w("")
            w("| metric | case | spread | " + " | ".join(_md(b) for b in d["backends"]) + " |")
            w("|---|---|---|" + "---|" * len(d["backends"]))
            for x in d["disagreements"]:
                per = {p["backend"]: p for p in x["backends"]}
                cells = []
                for b in d["backends"]:
                    p = per.get(b)
                    if not p:
                        cells.append("")
                    else:
                        val = _fmt(p["value"]) if p["status"] == "scored" else p["status"]
                        cells.append(_md(val) + (f"<br>{_md(p['reason'])}" if p.get("reason") else ""))
                w(f"| {_md(x['metric'])} | {_md(x['case_id'])}<br>{_md(x['question'])} | {_fmt(x['spread'])}{' ≠' if x['verdicts_differ'] else ''} | " + " | ".join(cells) + " |")
            w("")
    if d.get("validation"):
        w("## Against human labels")
        w("")
        w("Positive = pass. TPR: share of human passes the backend passes; TNR: share of human fails it "
          "fails (Wilson 95% intervals); kappa and balanced accuracy with bootstrap 95% intervals.")
        w("")
        w("| metric | backend | threshold | labelled | scored | not scored | human pass/fail | TPR | TNR | missed fails | kappa | balanced accuracy | unsupported claims |")
        w("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for v in d["validation"]:
            claims = (f"{_ci(v['unsupported_share'], v['unsupported_share_low'], v['unsupported_share_high'])} of {v['claims_answers']}"
                      if v["claims_answers"] else "—")
            w(f"| {_md(v['metric'])} | {_md(v['backend'])} | {v['threshold']:g} | {v['n_labels']} | {v['n_paired']} | {v['unscored']} | "
              f"{v['human_pass']}/{v['human_fail']} | {_ci(v['tpr'], v['tpr_low'], v['tpr_high'])} | "
              f"{_ci(v['tnr'], v['tnr_low'], v['tnr_high'])} | {v['fp']}/{v['human_fail']} | "
              f"{_ci(v['kappa'], v['kappa_low'], v['kappa_high'])} | "
              f"{_ci(v['balanced_accuracy'], v['balanced_accuracy_low'], v['balanced_accuracy_high'])} | {claims} |")
        w("")
    w("## Judge calls, tokens and time")
    w("")
    w("Wall time: from the start of scoring to the backend's last score (backends run side by side, so "
      "these overlap). Sum of call times: each score's own time added up; a backend scores many cases "
      "at once, so the sum can be many times its wall time.")
    w("")
    w("| backend | scores | judge calls | prompt tokens | completion tokens | wall time (s) "
      "| sum of call times (s) |")
    w("|---|---|---|---|---|---|---|")
    for u in d["judge_usage"]:
        w(f"| {_md(u['backend'])} | {u['scores']} | {u['judge_calls']} | {u['prompt_tokens']} | "
          f"{u['completion_tokens']} | {_fmt(u['wall_seconds'], 1)} | {u['call_seconds']:.1f} |")
    j = counts.get("judge")
    if j:
        w("")
        w(f"Run total: {j.get('calls', 0)} call(s), {j.get('cache_hits', 0)} from cache, "
          f"{j.get('prompt_tokens', 0)} prompt + {j.get('completion_tokens', 0)} completion tokens.")
    w("")
    w("## Thresholds")
    w("")
    w("A score passes at or above its threshold. From `--threshold`, then the gates file (`--gates`), "
      "then the defaults: 0.5 for ranking and judged metrics, 1/k for precision@k and context_relevance, "
      "1 for must_contain, must_not_contain and abstention.")
    w("")
    w("| metric | backend | threshold | from | cases below |")
    w("|---|---|---|---|---|")
    for t in d["thresholds"]:
        w(f"| {_md(t['metric'])} | {_md(t['backend'])} | {t['threshold']:.3g} | {_md(t['source'])} | "
          f"{t['n_below']} of {t['n_scored']} |")
    w("")
    w("## Cases")
    w("")
    for c in d["cases"]:
        w(f"### {_md(c['id'])}")
        w("")
        if c["tags"]:
            w("tags: " + ", ".join(_md(t) for t in c["tags"]) + ("" if c["answerable"] else " (unanswerable)"))
            w("")
        if c["below"]:
            w("**Below threshold:** "
              + "; ".join(f"{_md(b['metric'])} ({_md(b['detail'])})" for b in c["below"]))
            w("")
        w(f"**Question.** {_md(c['question'])}")
        w("")
        w(f"**Answer.** {_md(c['answer']) if c['answer'] else '_(none)_'}")
        w("")
        if c["reference"]:
            w(f"**Reference.** {_md(c['reference'])}")
            w("")
        if c["contexts"]:
            w("| rank | chunk | relevant | text |")
            w("|---|---|---|---|")
            for ch in c["contexts"]:
                rel = "duplicate, dropped" if ch["duplicate"] else (f"yes (grade {ch['grade']})" if ch["relevant"] else ("judged not relevant" if ch["grade"] == 0 else ""))
                w(f"| {ch['rank'] or ''} | {_md(ch['id'])} | {rel} | {_md(ch['text'])} |")
            w("")
        if c["scores"]:
            w("| metric | backend | value | reason |")
            w("|---|---|---|---|")
            for s in c["scores"]:
                val = _fmt(s["value"]) if s["status"] == "scored" else s["status"]
                if s["passed"] is not None:
                    val += " pass" if s["passed"] else " fail"
                w(f"| {_md(s['metric'])} | {_md(s['backend'])} | {val} | {_md(s['error'] or s['reason'])} |")
            w("")
    return "\n".join(out) + "\n"


def render_json(run: Union[Run, str, Path], data: Optional[dict] = None, **kw) -> str:
    run = _as_run(run)
    d = data or report_data(run, **kw)
    return json.dumps(d, indent=2, ensure_ascii=False, allow_nan=False)


def write_report(run: Union[Run, str, Path], out: Union[str, Path], fmt: str = "html", **kw) -> Path:
    """Render and write the report; returns the path written."""
    if fmt not in FORMATS:
        raise AnalysisError(f"unknown report format {fmt!r}; choose one of: {', '.join(FORMATS)}")
    run = _as_run(run)
    data = report_data(run, **kw)
    text = {"html": render_html, "md": render_markdown, "json": render_json}[fmt](run, data)
    return write_atomic(out, text)


@hookimpl
def ragbridge_register_commands(cli):
    from .cli import err, fail, out
    from .gate import GateConfigError

    @cli.command("report")
    def report_cmd(
        run: Path = typer.Argument(..., help="Run folder (holds run.json and scores.jsonl)."),
        fmt: str = typer.Option("html", "--format", "-f", help="html (one self-contained file), md or json."),
        out_file: Optional[Path] = typer.Option(None, "--out", "-o", help="File to write (default: RUN/report.<format>; '-' for standard output)."),
        threshold: Optional[List[str]] = typer.Option(
            None, "--threshold", "-t", help="Pass threshold: 0.7, rubric=0.7, faithfulness=0.7 or "
            "rubric:faithfulness=0.7 (repeatable; beats --gates; default: per metric, see docs/report.md)."),
        top: int = typer.Option(10, "--top", help="Disagreeing cases to list per metric."),
        resamples: int = typer.Option(DEFAULT_RESAMPLES, "--resamples", help="Bootstrap resamples for the agreement intervals (0: none)."),
        seed: int = typer.Option(0, "--seed", help="Bootstrap seed."),
        labels: Optional[Path] = typer.Option(None, "--labels", "-l", help="Human labels (JSONL or CSV: case_id, metric, label) to validate each backend against."),
        label_threshold: float = typer.Option(0.5, "--label-threshold", help="A human grade at or above this is a pass."),
        gates: Optional[Path] = typer.Option(
            None, "--gates", "-g", help="Gates file (TOML): its rules set the thresholds of the metrics they name."),
    ) -> None:
        """Write one report (HTML, Markdown or JSON) of a run: summary, agreement, judge usage, every case."""
        if fmt not in FORMATS:
            fail(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
        try:
            r = _as_run(run)
            data = report_data(r, thresholds=threshold or None, n_resamples=resamples, seed=seed, top=top,
                               labels=labels, label_threshold=label_threshold, gates=gates)
            text = {"html": render_html, "md": render_markdown, "json": render_json}[fmt](r, data)
        except (AnalysisError, GateConfigError) as exc:
            fail(str(exc))
        if str(out_file) == "-":
            import sys

            sys.stdout.write(text)
            return
        target = out_file or (Path(run) / f"report{FORMATS[fmt]}")
        try:
            write_atomic(target, text)
        except OSError as exc:
            fail(f"cannot write {target}: {exc.strerror or exc}")
        out.print(f"report written to [bold]{target}[/] ({len(text.encode('utf-8')) // 1024 + 1} KiB, "
                  f"{len(data['cases'])} cases, {len(data['backends'])} backend(s))", highlight=False)
        if r.manifest.status != "complete":
            err.print(f"[yellow]the run is {r.manifest.status}: the report shows what was scored[/]")
