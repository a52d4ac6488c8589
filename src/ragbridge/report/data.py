"""Everything the report shows, as plain JSON-ready data (`report_data`; ``--format json`` writes it
with its cases bounded: `ragbridge.report.json_file`).

- what was run (dataset, backends and versions, judge, status, counts);
- the summary, overall and per tag: metric x backend with the mean over scored cases, how many were
  scored, undefined and errored, with the retrieval half (ranking and context metrics) and the
  generation half (answer metrics) separated;
- when the run holds cases tagged ``real`` and cases tagged ``synthetic`` (``ragbridge synthesize
  --combined``): every metric with the two sides' means side by side and their difference, and
  what each side's questions are like (how many are unanswerable, how many have one label, how much
  of the question's wording its quoted passage holds), the report's first view of the results;
- the agreement between backends (`ragbridge.analysis.compare`) and the cases they disagree on
  most, each backend's value and reason side by side; with labels, each backend against them
  (`ragbridge.analysis.validate`);
- judge calls and tokens per backend and metric, each backend's wall time (from the start of scoring
  to its last score, recorded by the runner in ``run.json``'s ``timing``) and the sum of its
  per-score call times (scores run concurrently, so the sum is larger than the wall time);
- the diagnosis: each failing case's layer (retrieval, generation, knowledge base, reference or
  judge, undetermined) and what decided it, counted overall and per tag;
- the pass mark of every metric and backend, where it came from
  (`ragbridge.analysis.thresholds.pass_marks`), and how many cases fail it (`ragbridge.verdicts`);
- a drill-down per case: question, retrieved chunks with the relevant ones marked (the relevance
  rule of ``ragbridge.schema``), answer, reference, and every backend's score and reason; a case
  with a score below its pass mark carries a badge naming the metrics.

Memory: every figure is computed over the run's columns (`ragbridge.run.columns`: a few bytes a
score, no `Score` or `Case` object per case); ``cases``, a row per case, is made as it is read
(`ragbridge.analysis.rows.Rows`, a batch of cases and their scores read back at a time): the reports
read only the cases they show in full (the JSON report lists every case from the columns).
With ``case_texts=False`` the rows hold no texts (chunks, answer, reference).
"""

from __future__ import annotations

import datetime as dt
import math
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional, Sequence, Union

import numpy as np

from .. import __version__
from ..analysis.compare import compare, coverage, disagreements, scored_by_one
from ..analysis.diagnose import DIAGNOSIS_LISTED, diagnose
from ..analysis.noise import noise_section, repeats_of
from ..analysis.stats import CONFIDENCE, DEFAULT_RESAMPLES
from ..analysis.table import open_run
from ..analysis.thresholds import PassMarks, Thresholds, pass_marks
from ..analysis.validate import validate
from ..analysis.rows import Rows
from ..formats.source import BATCH_SIZE
from ..lexical import term_overlap
from ..metrics import half_of
from ..metrics import sort_key as metric_key
from ..run import Run
from ..run.summary import ALL
from ..run.progress import Steps
from ..schema import Case, Score
from ..verdicts import verdict, why
from .text import jsonable, records

__all__ = ["report_data", "backend_key", "read_cases", "case_texts", "case_rows",
           "TEXT_FIELDS"]

_COUNTS = ("scores", "reused", "judge_calls", "requests", "retries", "cache_hits", "prompt_tokens",
           "completion_tokens")
#: the fields of a case that no analysis reads, only the drill-down (`case_texts`)
TEXT_FIELDS = ("contexts", "answer", "reference", "reference_contexts", "metadata")


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
    history: Any = None,
    case_texts: bool = True,
    baseline: Any = None,
    progress: Optional[str] = None,
) -> dict[str, Any]:
    """Everything the report shows, as plain JSON-ready data.

    ``case_texts=False`` leaves each case's question, answer, reference and chunks out of ``cases``
    (id, tags, scores, flags and badges stay): what the HTML report asks for, as it reads the texts
    of the cases it shows in full from the run folder (`read_cases`).

    With ``history`` (earlier run folders, or folders of them) the report also holds the trend of
    every metric over those runs and this one (`ragbridge.analysis.trend`): ``trend`` with ``runs``,
    ``summary``, ``series`` and ``changes``; runs that started after this one are left out.

    With ``labels`` (a labels file or frame, see `ragbridge.analysis.load_labels`) the report also
    holds each backend's verdicts against the human labels (`ragbridge.analysis.validate`). Pass
    marks come from ``thresholds``, then ``gates`` (a gates file), then the backends' own rules and
    the defaults (`pass_marks`); every summary row carries its ``threshold`` and how many cases
    pass and fail it (``n_pass``, ``n_fail``, by `ragbridge.verdicts.verdict`).

    ``run`` may be several runs of the same cases, scored apart: they are read side by side
    (`ragbridge.analysis.join_runs`, a column per backend and run), and ``run.columns`` says which
    run and judge each column comes from.

    With ``baseline`` (an earlier run of the same golden set) the report holds ``moved``: the diff of
    the two runs (`ragbridge.analysis.diff_runs`, as ``ragbridge diff --json`` prints it, the ``top``
    cases of each kind) and, with ``gates``, the gate's verdicts on this run against that baseline
    (``gate``, as ``ragbridge gate --json``); with ``gates`` and no baseline, ``gate`` holds the
    verdicts of the rules that need none.

    ``progress``: a label (``report``) under which the long parts show their progress on stderr
    (`ragbridge.run.progress.Steps`: the diff's shifts, the diagnosis of the failing cases)."""
    since = time.monotonic()  # the progress of every part counts the time from here
    run = open_run(run)
    m = run.manifest
    cols = run.columns
    backends = sorted(set(cols.backends()) | set(m.backends), key=backend_key)
    metrics = sorted(set(cols.metrics()), key=metric_key)
    k = (m.options or {}).get("k")
    if gates is not None:
        from ..analysis.gate import GateConfig, load_gates

        gates = gates if isinstance(gates, GateConfig) else load_gates(gates)
    th = pass_marks(run, thresholds, gates, backends)
    # what moved since the baseline, and the gates, first: the diff's paired columns are gone before
    # the report's own rows are made (a million cases: 1.06 GB at the peak the other way round)
    moved = (_moved(run, baseline, n_resamples, seed, top, _steps(progress, "shifts", since))
             if baseline is not None else None)
    # the diagnosis before the gate, which reads it (a ``diagnosed`` rule) where its pass marks are the
    # gates file's: one walk over the failing cases, not two
    diagnosis = _diagnosis(run, th, labels, label_threshold, _steps(progress, "failing cases", since))
    gate = (_gate(run, gates, baseline, history, seed, top, progress,
                  diagnosis if labels is None else None) if gates is not None else None)
    rows = jsonable(run.summary_rows(by_tag=True))
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
    cases = case_rows(run, th, k, flips, case_texts)
    _pass_counts(cols, overall, tags, th)
    sides = _real_vs_synthetic(overall, tags, run)
    counts = run.counts if isinstance(run, Run) else dict(m.counts or {})  # a killed run's as recorded
    return jsonable({
        "ragbridge_version": __version__,
        "generated_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "run": {
            "path": str(run.path) if run.path else None,
            "dataset": m.dataset, "backends": m.backends, "metrics": m.metrics, "options": m.options,
            "judge": m.judge, "started_at": m.started_at, "finished_at": m.finished_at,
            "status": m.status, "counts": counts, "ragbridge_version": m.ragbridge_version,
            "stub_judge": bool((m.judge or {}).get("stub"))
            or any((c["judge"] or {}).get("stub") for c in (getattr(m, "columns", None) or {}).values()),
            "timing": m.timing, "warnings": m.warnings, "version_changes": m.version_changes,
            # runs read side by side (`ragbridge.analysis.join_runs`): where each column comes from
            "columns": getattr(m, "columns", None), "joined": getattr(m, "joined", None),
        },
        "backends": backends,
        "metrics": metrics,
        "halves": {"retrieval": [x for x in metrics if half_of(x) == "retrieval"],
                   "generation": [x for x in metrics if half_of(x) == "generation"]},
        "thresholds": _threshold_rows(cols, th, metrics, backends),
        "summary": overall,
        "summary_by_tag": {t: tags[t] for t in sorted(tags)},
        "real_vs_synthetic": sides,
        "agreement": records(compare(run, thresholds=th, n_resamples=n_resamples, seed=seed)),
        "disagreements": dis,
        "coverage": records(coverage(run)),
        "validation": validation,
        "diagnosis": diagnosis.to_dict() if diagnosis is not None else None,
        "judge_usage": usage,
        "judge_usage_by_metric": per_metric,
        "reused_from": _reused_from(m, usage),
        "cost": (m.counts or {}).get("cost"),
        "noise": _noise(run, th, top),
        "trend": _trend(run, history, seed) if history else None,
        "moved": moved,
        "gate": gate,
        "statistics": {"n_resamples": n_resamples, "seed": seed, "confidence": CONFIDENCE},
    }) | {"cases": cases}  # JSON-ready as built (a score's value is a finite number or None)


#: the tags whose cases the report sets side by side, real first
SIDES = ("real", "synthetic")


def _real_vs_synthetic(overall: list[dict], tags: dict[str, list[dict]],
                       run: Run) -> Optional[dict[str, Any]]:
    """When the run holds cases tagged ``real`` and cases tagged ``synthetic``: per metric and backend
    (in the summary's order) each side's mean, counts and pass counts, and the difference of the
    means (synthetic minus real); and per side what its questions are like (`_questions`). None
    otherwise."""
    if not all(t in tags for t in SIDES):
        return None
    idx = {t: {(r["metric"], r["backend"]): r for r in tags[t]} for t in SIDES}
    rows = []
    for r in overall:
        key = (r["metric"], r["backend"])
        row: dict[str, Any] = {"metric": r["metric"], "backend": r["backend"], "half": r["half"],
                               "threshold": r["threshold"]}
        for side in SIDES:
            x = idx[side].get(key) or {}
            row[side] = {k: x.get(k) for k in ("mean", "n_scored", "n_undefined", "n_errored", "n_pass",
                                                 "n_fail")}
        a, b = row["real"]["mean"], row["synthetic"]["mean"]
        ok = all(isinstance(v, (int, float)) and not math.isnan(v) for v in (a, b))
        row["difference"] = b - a if ok else None
        rows.append(row)
    index = run.columns.cases
    return {"rows": rows, "questions": {
        side: _questions(c for batch in index.batches(np.flatnonzero(index.tag_mask(side)), views=True)
                         for _, c in batch) for side in SIDES}}


def _questions(cases: Iterable[Case]) -> dict[str, Any]:
    """What a side's questions are like (two of the three weaknesses of generated questions, and the
    first where the labels quote their passage): ``n``, ``unanswerable`` (the share marked
    ``answerable: false``), ``one_label`` (of the answerable cases with labels, the share with
    exactly one: one span label, or one chunk or section id) and ``term_overlap`` (of those whose span
    labels quote their text, the mean share of the question's terms found in the quotes;
    ``ragbridge synthesize`` measures it against the corpus)."""
    n = unanswerable = 0
    overlaps: list[float] = []
    one: list[float] = []
    for c in cases:
        n += 1
        unanswerable += not c.answerable
        if not (c.answerable and (c.relevant_spans or c.relevant)):
            continue
        if c.relevant_spans and all(s.quote for s in c.relevant_spans):
            v = term_overlap(c.question, " ".join(s.quote for s in c.relevant_spans if s.quote))
            if not math.isnan(v):
                overlaps.append(v)
        labels = sum(s.grade > 0 for s in c.relevant_spans) + sum(g > 0 for g in c.relevant.values())
        one.append(1.0 if labels == 1 else 0.0)
    return {"n": n, "unanswerable": unanswerable / n if n else None,
            "one_label": sum(one) / len(one) if one else None,
            "term_overlap": sum(overlaps) / len(overlaps) if overlaps else None,
            "n_labelled": len(one), "n_quoted": len(overlaps)}


def _pass_counts(cols: Any, overall: list[dict], tags: dict[str, list[dict]], th: Thresholds) -> None:
    """Give every summary row (overall, and per tag) its ``threshold``, ``n_pass`` and ``n_fail``:
    the verdicts of the cases' scores."""
    index = cols.cases
    for tag, rows in [(ALL, overall), *tags.items()]:
        mask = None if tag == ALL else index.tag_mask(tag)
        for r in rows:
            r["threshold"] = th.get(r["backend"], r["metric"])
            col = cols.column(r["backend"], r["metric"])
            scored = col.scored if mask is None else col.scored & mask
            passed = col.verdicts(r["threshold"]) & scored
            r["n_pass"], r["n_fail"] = int(passed.sum()), int(scored.sum() - passed.sum())


def _moved(run: Run, baseline: Any, n_resamples: int, seed: int, top: int, progress: Any) -> dict[str, Any]:
    """What moved since ``baseline``: the diff, as ``ragbridge diff --json`` (the ``top`` cases of each
    kind), and which cases of this run it names."""
    from ..analysis.diff import diff_runs
    from .ci import diff_json

    d = diff_runs(baseline, run, n_resamples=n_resamples, seed=seed, allow_incomplete=True, progress=progress)
    return diff_json(d, top=top)


def _gate(run: Run, gates: Any, baseline: Any, history: Any, seed: int, top: int,
          progress: Optional[str] = None, diagnosis: Any = None) -> dict[str, Any]:
    """The gate's verdicts on this run (against ``baseline``, over ``history``, when given), as
    ``ragbridge gate --json``; the rules that need what was not given are left out (and named)."""
    from ..analysis.diff import RegressionError
    from ..analysis.gate import KINDS, GateConfig, load_gates, run_gates
    from .ci import gate_json

    config = gates if isinstance(gates, GateConfig) else load_gates(gates)
    have = {None, *(["baseline"] if baseline is not None else []), *(["history"] if history else [])}
    left_out = [r.label for r in config.rules if KINDS[r.kind].needs not in have]
    config = GateConfig([r for r in config.rules if KINDS[r.kind].needs in have], config.seed,
                        config.resamples, config.permutations, config.source)
    if not config.rules:
        return {"passed": None, "results": [], "left_out": left_out}
    try:
        report = gate_json(run_gates(run, config, baseline=baseline, seed=seed, history=history or None,
                                     progress=progress, diagnosis=diagnosis))
    except RegressionError as exc:  # the file still sets the thresholds; the page says why it is not checked
        return {"passed": None, "results": [], "left_out": left_out, "error": str(exc)}
    for r in report["results"]:
        r["cases_behind"] = r["cases_behind"][:top]
    return report | {"left_out": left_out}


def _trend(run: Run, history: Any, seed: int) -> Optional[dict]:
    from ..analysis.trend import expand_runs, order_runs, started_at, trend

    here = run.path.resolve() if run.path is not None else None
    earlier = [h for h in expand_runs(list(history))
               if (h.path is None or h.path.resolve() != here) and started_at(h) <= started_at(run)]
    if not earlier:
        return None
    t = trend([*order_runs(earlier), run], seed=seed)
    return {"runs": [{"position": i, "path": str(r.path), "started_at": r.manifest.started_at,
                      "judge": (r.manifest.judge or {}).get("model")} for i, r in enumerate(t.runs)],
            "summary": records(t.summary), "series": records(t.series), "changes": records(t.changes)}


def _disagreements(run: Run, th: Thresholds, top: int, backends: list[str]) -> list[dict]:
    """The most disagreeing cases per metric, each with its backends' value, verdict and reason; then
    the cases one backend scored and another errored on (``scored_by_one``, no spread)."""
    out = []
    for r in records(disagreements(run, thresholds=th, top=top)):
        per = [{"backend": b, "value": r[f"{b}.value"], "status": r[f"{b}.status"],
                "passed": r[f"{b}.passed"], "reason": r[f"{b}.reason"], "threshold": th.get(b, r["metric"])}
               for b in backends if r.get(f"{b}.status") is not None]
        keys = ("metric", "case_id", "question", "spread", "verdicts_differ")
        out.append({k: r[k] for k in keys} | {"scored_by_one": False, "backends": per})
    # the cases one backend scored and another errored on have no spread, and matter most to a
    # team moving between library versions (one version refuses a reply the other reads)
    for r in records(scored_by_one(run, thresholds=th, top=top)):
        per = [{"backend": b, "value": r[f"{b}.value"], "status": r[f"{b}.status"],
                "passed": r[f"{b}.passed"], "reason": r[f"{b}.reason"], "threshold": th.get(b, r["metric"])}
               for b in backends if r.get(f"{b}.status") is not None]
        out.append({"metric": r["metric"], "case_id": r["case_id"], "question": r["question"],
                    "spread": None, "verdicts_differ": False, "scored_by_one": True, "backends": per})
    return out


def _noise(run: Run, th: Thresholds, top: int) -> dict[str, Any]:
    """Judge noise from the run's repeats: the figures per backend and metric, and per metric the
    ``top`` cases whose repeats spread the most (all of them in ``cases_all``)."""
    if repeats_of(run) < 2:  # nothing to measure: the empty section, without reading every score twice
        return {"repeats": 1, "figures": [], "cases": {}, "top": {}}
    section = noise_section(run, threshold=th.get)
    section["top"] = {k: rows[:top] for k, rows in section["cases"].items()}
    return section


def _reused_from(m: Any, usage: list[dict]) -> Optional[dict[str, Any]]:
    """Where the scores a run took from the score cache came from: the cache file, and per backend
    when the first and the last of them were made (UTC), from ``counts.score_cache``; None when the
    run reused none."""
    if not any(u["reused"] for u in usage):
        return None
    from ..run.score_cache import score_cache_path

    cache = (m.judge or {}).get("cache_path")
    made = ((m.counts or {}).get("score_cache") or {}).get("by_backend") or {}

    def when(seconds: Any) -> Optional[str]:
        if not isinstance(seconds, (int, float)):
            return None
        return dt.datetime.fromtimestamp(seconds, dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")

    by_backend = {}
    for u in usage:
        if u["reused"]:
            times = made.get(u["backend"]) or {}
            by_backend[u["backend"]] = {"reused": u["reused"], "scores": u["scores"],
                                        "first_made": when(times.get("first_made")),
                                        "last_made": when(times.get("last_made"))}
    return {"path": str(score_cache_path(Path(cache))) if cache else None, "by_backend": by_backend}


def reused_lines(reused: Optional[dict[str, Any]]) -> list[str]:
    """What a report says of the scores taken from the score cache, a sentence per backend."""
    if not reused:
        return []
    out = []
    for backend, r in reused["by_backend"].items():
        made = ""
        if r["first_made"]:
            made = (f", made {r['first_made']}" if r["first_made"] == r["last_made"]
                    else f", made between {r['first_made']} and {r['last_made']}")
        out.append(f"{backend}: {r['reused']} of {r['scores']} scores reused from the score cache "
                   f"{reused['path'] or ''}{made} by an earlier run with the same inputs; the judge calls, "
                   "tokens and time they took were spent then, and are not counted here.")
    return out


def _judge_usage(run: Run) -> tuple[list[dict], list[dict]]:
    """Judge calls, tokens and time per backend, and per backend and metric.

    The calls, the requests they took (retries included), the cache hits and the tokens are the
    audit log's when the run has one: every session's calls, a resumed score's failed ones too,
    counted as the run's total is (`ragbridge.judge.audit.usage_of`); else the scores' own."""
    from ..judge.audit import usage_of

    audit = usage_of(Path(run.path) / "judge-audit.jsonl") if run.path else {}
    acc: dict[tuple[str, str], dict[str, float]] = {}
    for (b, met), col in run.columns.columns.items():
        present = col.present
        a = acc[(b, met)] = {
            "scores": int(present.sum()), "reused": int(col.get("cached")[present].sum()),
            "judge_calls": int(col.get("judge_calls")[present].sum()),
            "requests": int(col.get("judge_calls")[present].sum()), "retries": 0, "cache_hits": 0,
            "prompt_tokens": int(col.get("prompt_tokens")[present].sum()),
            "completion_tokens": int(col.get("completion_tokens")[present].sum()),
            "call_seconds": math.fsum(col.get("seconds")[present].tolist())}
        if audit:
            logged = audit.get((b, met)) or dict.fromkeys(
                ("calls", "requests", "retries", "cache_hits", "prompt_tokens", "completion_tokens"), 0)
            a.update(judge_calls=logged["calls"], requests=logged["requests"], retries=logged["retries"],
                     cache_hits=logged["cache_hits"], prompt_tokens=logged["prompt_tokens"],
                     completion_tokens=logged["completion_tokens"])
        judged = present & (col.get("judge_calls") > 0)
        if judged.any():  # NaN once a score's cost is unknown (no price for its model)
            a["cost"] = math.fsum(col.get("cost")[judged].tolist())
    wall = run.manifest.timing.get("wall_seconds") or {}
    usage: dict[str, dict[str, Any]] = {}
    per_metric: list[dict[str, Any]] = []
    for (b, met), a in sorted(acc.items(), key=lambda kv: (backend_key(kv[0][0]), metric_key(kv[0][1]))):
        per_metric.append({"backend": b, "metric": met, **a})
        u = usage.setdefault(b, {"backend": b, **{c: 0 for c in _COUNTS}, "wall_seconds": wall.get(b),
                                 "call_seconds": 0.0})
        for key, v in a.items():
            u[key] = u.get(key, 0.0) + v
    for row in [*usage.values(), *per_metric]:
        for key in _COUNTS:
            row[key] = int(row[key])
        row["call_seconds"] = round(row["call_seconds"], 3)
    return [usage[b] for b in sorted(usage, key=backend_key)], per_metric


def _threshold_rows(cols: Any, th: Thresholds, metrics, backends) -> list[dict]:
    """Per metric and backend that scored it: the pass mark, its source and the cases below it."""
    rows = []
    for met in metrics:
        for b in backends:
            col = cols.column(b, met)
            if col is None or not col.scored.any():
                continue
            value, source = (th.lookup(b, met) if isinstance(th, PassMarks)
                             else (th.get(b, met), "--threshold"))
            scored = col.scored
            rows.append({"metric": met, "backend": b, "threshold": value, "source": source,
                         "n_scored": int(scored.sum()),
                         "n_below": int((scored & ~col.verdicts(th.get(b, met))).sum())})
    return rows


def listed_by_layer(diagnosis: dict[str, Any], n: int = DIAGNOSIS_LISTED) -> dict[str, tuple[list, int]]:
    """Per layer of a report's diagnosis (in its ``counts``' order, those with cases): its first ``n``
    cases and how many it has, in one pass over the cases."""
    counts = diagnosis["counts"]
    first: dict[str, list] = {x: [] for x in counts}
    wanted = sum(min(n, c) for c in counts.values())  # read no further once each layer has its first n
    for c in (diagnosis["cases"] if wanted else ()):
        listed = first[c["layer"]]
        if len(listed) < n:
            listed.append(c)
            wanted -= 1
            if not wanted:
                break
    return {x: (first[x], counts[x]) for x in counts if counts[x]}


def _diagnosis(run: Run, th: Thresholds, labels: Any, label_threshold: float, progress: Any) -> Any:
    """Each failing case's layer (`ragbridge.analysis.diagnose`), by the report's pass marks: the
    cases it lists described as ``ragbridge diagnose`` describes them."""
    if not run.columns.cases.described:
        return None
    return diagnose(run, th, labels, label_threshold, listed=DIAGNOSIS_LISTED, progress=progress)


def _steps(label: Optional[str], noun: str, since: float) -> Any:
    """The progress of one long part of the report (a `Steps` of ``noun``, its time counted from the
    report's start, ``since``), None without a label."""
    return Steps(label, noun, since=since) if label is not None else None


def read_cases(run: Run, ids: Optional[set[str]] = None) -> Iterator[Case]:
    """The run's cases with every field (only those of ``ids``, when given), a batch at a time: memory
    holds one batch."""
    index = run.columns.cases
    where = None
    if ids is not None:
        found = index.find(list(ids))
        where = found[(found >= 0) & (found < index.described)].tolist()
    for batch in index.batches(where if where is not None else range(index.described)):
        yield from (c for _, c in batch if c is not None)


def case_texts(case: Case, k: Any = None) -> dict[str, Any]:
    """What the drill-down shows of a case besides its scores: ``answer``, ``reference`` and
    ``contexts`` (each chunk with its rank, relevance grade, whether it is a repeated id, dropped
    before ranking, and whether it ranks beyond the run's ``k``)."""
    chunks = []
    seen: set[str] = set()
    rank = 0
    for ch in case.contexts:
        dup = ch.id in seen
        seen.add(ch.id)
        if not dup:
            rank += 1
        grade = case.relevant.get(ch.id, case.relevant.get(ch.source) if ch.source else None)
        chunks.append({
            "rank": None if dup else rank, "id": ch.id, "source": ch.source, "text": ch.text,
            "score": ch.score, "grade": grade, "relevant": bool(grade), "duplicate": dup,
            "beyond_k": bool(k) and not dup and rank > int(k),
        })
    return {"answer": case.answer, "reference": case.reference, "contexts": chunks}


def case_rows(run: Run, th: Thresholds, k, flips: set, texts: bool = True,
              indices: Optional[Sequence[int]] = None) -> Rows:
    """Every case of the run (or those at ``indices``, in run order), then every case only its
    scores name, as the drill-down shows it (with its `case_texts` when ``texts``), made as the rows
    are read: each batch's cases and scores read back then (`ragbridge.run.columns`)."""
    cols = run.columns
    index = cols.cases
    pairs = list(cols.columns)
    order = {p: i for i, p in enumerate(sorted(pairs, key=lambda p: (metric_key(p[1]), backend_key(p[0]))))}
    marks = {p: th.get(*p) for p in pairs}
    chosen = np.arange(len(index)) if indices is None else np.sort(np.asarray(indices, np.int64))

    def make(start: int, stop: int) -> list[dict]:
        part = chosen[start:stop].tolist()
        out = []
        for (i, c), scores in zip(zip(part, index.views(part)), cols.scores_of(part)):
            if c is not None:
                entry = {"id": c.id, "question": c.question, "tags": list(c.tags), "answerable": c.answerable,
                         "relevant": dict(c.relevant)} | (case_texts(c, k) if texts else {})
            else:  # scores for a case the run folder does not describe: still shown
                entry = {"id": index.ids[i], "question": "", "tags": [], "answerable": True, "relevant": {}}
                if texts:
                    entry |= {"answer": None, "reference": None, "contexts": []}
            out.append(entry | _case_scores(entry["id"], scores, marks, order, flips))
        return out
    return Rows(len(chosen), make, block=BATCH_SIZE)


def _case_scores(cid: str, scores: list[Score], marks: dict[tuple[str, str], float],
                 order: dict[tuple[str, str], int], flips: set) -> dict[str, Any]:
    """A case's ``scores`` (each with its pass mark, ``marks`` per (backend, metric), and verdict, in
    the ``order`` of their (backend, metric)), ``flags`` and ``below`` badge."""
    rows = []
    flags = {"error": False, "undefined": False, "fail": False, "disagree": False}
    below: dict[str, list[str]] = {}
    for s in sorted(scores, key=lambda s: order[(s.backend, s.metric)]):
        t = marks[(s.backend, s.metric)]
        passed = verdict(s, t)
        if passed is False:
            below.setdefault(s.metric, []).append(f"{s.backend} {why(s, t)}")
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
