"""Everything the report shows, as plain JSON-ready data (`report_data`; ``--format json`` writes it).

- what was run (dataset, backends and versions, judge, status, counts);
- the summary, overall and per tag: metric x backend with the mean over scored cases, how many were
  scored, undefined and errored, with the retrieval half (ranking and context metrics) and the
  generation half (answer metrics) separated;
- the agreement between backends (`ragbridge.analysis.compare`) and the cases they disagree on
  most, each backend's value and reason side by side; with labels, each backend against them
  (`ragbridge.analysis.validate`);
- judge calls and tokens per backend and metric, each backend's wall time (from the start of scoring
  to its last score, recorded by the runner in ``run.json``'s ``timing``) and the sum of its
  per-score call times (scores run concurrently, so the sum is larger than the wall time);
- the pass mark of every metric and backend, where it came from (`ragbridge.report.marks`), and how
  many cases fall below it;
- a drill-down per case: question, retrieved chunks with the relevant ones marked (the relevance
  rule of ``ragbridge.schema``), answer, reference, and every backend's score and reason; a case
  with a score below its pass mark carries a badge naming the metrics.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any, Optional, Union

from .. import __version__
from ..analysis.compare import compare, coverage, disagreements
from ..analysis.noise import noise_section
from ..analysis.stats import CONFIDENCE, DEFAULT_RESAMPLES
from ..analysis.table import open_run
from ..analysis.thresholds import Thresholds
from ..analysis.validate import validate
from ..metrics import half_of
from ..metrics import sort_key as metric_key
from ..run import Run
from ..run.summary import ALL
from ..schema import Score
from .marks import PassMarks, pass_marks
from .text import jsonable, records

__all__ = ["report_data", "render_json", "backend_key"]

_COUNTS = ("scores", "judge_calls", "prompt_tokens", "completion_tokens")


def backend_key(b: str):
    """Sort key of a backend name: native first, then by name."""
    return (b != "native", b)


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
    run = open_run(run)
    m = run.manifest
    backends = sorted({s.backend for s in run.scores} | set(m.backends), key=backend_key)
    metrics = sorted({s.metric for s in run.scores}, key=metric_key)
    k = (m.options or {}).get("k")
    th = pass_marks(thresholds, gates, metrics, backends, k)
    rows = records(run.summary(by_tag=True))
    overall = sorted((r for r in rows if r["tag"] == ALL),
                     key=lambda r: (metric_key(r["metric"]), backend_key(r["backend"])))
    for r in overall:
        r["half"] = half_of(r["metric"])
    tags: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        if r["tag"] != ALL:
            tags[r["tag"]].append(r)
    dis = _disagreements(run, th, top, backends)
    validation = (records(validate(run, labels, thresholds=th, label_threshold=label_threshold,
                                   n_resamples=n_resamples, seed=seed))
                  if labels is not None else None)
    usage, per_metric = _judge_usage(run)
    flips = {(d["metric"], d["case_id"]) for d in dis if d["verdicts_differ"]}
    cases = _cases(run, th, k, flips)
    return jsonable({
        "ragbridge_version": __version__,
        "generated_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
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
        "agreement": records(compare(run, thresholds=th, n_resamples=n_resamples, seed=seed)),
        "disagreements": dis,
        "coverage": records(coverage(run)),
        "validation": validation,
        "judge_usage": usage,
        "judge_usage_by_metric": per_metric,
        "cost": (m.counts or {}).get("cost"),
        "noise": _noise(run, th, top),
        "cases": cases,
        "statistics": {"n_resamples": n_resamples, "seed": seed, "confidence": CONFIDENCE},
    })


def render_json(run: Union[Run, str, Path], data: Optional[dict] = None, **kw) -> str:
    """The report as one JSON document (`report_data`)."""
    d = data or report_data(open_run(run), **kw)
    return json.dumps(d, indent=2, ensure_ascii=False, allow_nan=False)


def _disagreements(run: Run, th: Thresholds, top: int, backends: list[str]) -> list[dict]:
    """The most disagreeing cases per metric, each with its backends' value, verdict and reason."""
    out = []
    for r in records(disagreements(run, thresholds=th, top=top)):
        per = [{"backend": b, "value": r[f"{b}.value"], "status": r[f"{b}.status"],
                "passed": r[f"{b}.passed"], "reason": r[f"{b}.reason"], "threshold": th.get(b, r["metric"])}
               for b in backends if r.get(f"{b}.status") is not None]
        keys = ("metric", "case_id", "question", "spread", "verdicts_differ")
        out.append({k: r[k] for k in keys} | {"backends": per})
    return out


def _noise(run: Run, th: Thresholds, top: int) -> dict[str, Any]:
    """Judge noise from the run's repeats: the figures per backend and metric, and per metric the
    ``top`` cases whose repeats spread the most (all of them in ``cases_all``)."""
    section = noise_section(run, threshold=th.get)
    section["top"] = {k: rows[:top] for k, rows in section["cases"].items()}
    return section


def _judge_usage(run: Run) -> tuple[list[dict], list[dict]]:
    """Judge calls, tokens and time per backend, and per backend and metric."""
    acc: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for s in run.scores:
        a = acc[(s.backend, s.metric)]
        a["scores"] += 1
        a["judge_calls"] += s.judge_calls
        a["prompt_tokens"] += s.prompt_tokens
        a["completion_tokens"] += s.completion_tokens
        a["call_seconds"] += s.seconds or 0.0
        if s.judge_calls:  # NaN once a score's cost is unknown (no price for its model)
            a["cost"] = a.get("cost", 0.0) + (math.nan if s.cost is None else s.cost)
    wall = run.manifest.timing.get("wall_seconds") or {}
    usage: dict[str, dict[str, Any]] = {}
    per_metric: list[dict[str, Any]] = []
    for (b, met), a in sorted(acc.items(), key=lambda kv: (backend_key(kv[0][0]), metric_key(kv[0][1]))):
        per_metric.append({"backend": b, "metric": met, **a})
        u = usage.setdefault(b, {"backend": b, **{c: 0 for c in _COUNTS}, "wall_seconds": wall.get(b),
                                 "call_seconds": 0.0})
        for k, v in a.items():
            u[k] = u.get(k, 0.0) + v
    for row in [*usage.values(), *per_metric]:
        for k in _COUNTS:
            row[k] = int(row[k])
        row["call_seconds"] = round(row["call_seconds"], 3)
    return [usage[b] for b in sorted(usage, key=backend_key)], per_metric


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


def _cases(run: Run, th: Thresholds, k, flips: set) -> list[dict]:
    """Every case of the run, then every case only its scores name, as the drill-down shows them."""
    by_case: dict[str, list] = defaultdict(list)
    for s in run.scores:
        by_case[s.case_id].append(s)
    out = []
    for c in run.cases:
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
        entry = {"id": c.id, "question": c.question, "answer": c.answer, "reference": c.reference,
                 "tags": list(c.tags), "answerable": c.answerable, "relevant": dict(c.relevant),
                 "contexts": chunks}
        out.append(entry | _case_scores(c.id, by_case.get(c.id, []), th, flips))
    known = {c.id for c in run.cases}
    for cid in by_case:  # scores for cases the run folder does not describe: still shown
        if cid not in known:
            entry = {"id": cid, "question": "", "answer": None, "reference": None, "tags": [],
                     "answerable": True, "relevant": {}, "contexts": []}
            out.append(entry | _case_scores(cid, by_case[cid], th, flips))
    return out


def _case_scores(cid: str, scores: list[Score], th: Thresholds, flips: set) -> dict[str, Any]:
    """A case's ``scores`` (each with its pass mark and verdict), ``flags`` and ``below`` badge."""
    rows = []
    flags = {"error": False, "undefined": False, "fail": False, "disagree": False}
    below: dict[str, list[str]] = {}
    for s in sorted(scores, key=lambda s: (metric_key(s.metric), backend_key(s.backend))):
        t = th.get(s.backend, s.metric)
        passed = (s.value >= t) if s.status == "scored" else None
        if passed is False:
            below.setdefault(s.metric, []).append(f"{s.backend} {s.value:.3f} < {t:.3g}")
        rows.append({
            "metric": s.metric, "backend": s.backend, "value": s.value, "status": s.status,
            "passed": passed, "threshold": t, "reason": s.reason, "error": s.error,
            "native_metric": s.native_metric, "judge_calls": s.judge_calls,
            "prompt_tokens": s.prompt_tokens, "completion_tokens": s.completion_tokens,
        })
        flags["error"] |= s.status == "error"
        flags["undefined"] |= s.status == "undefined"
        flags["fail"] |= passed is False
        flags["disagree"] |= (s.metric, cid) in flips
    return {"scores": rows, "flags": flags,
            "below": [{"metric": met, "detail": "; ".join(d)} for met, d in below.items()]}
