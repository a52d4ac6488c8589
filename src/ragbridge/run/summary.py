"""Summaries of scores: per backend and metric, overall and per tag; and the claims behind a score.

Undefined and failed scores are counted, never averaged as 0 and never dropped. `Totals` adds
scores up as they come (a run in batches keeps its totals, not its scores); `summarize` is the same
over scores in memory. Where a backend exposes the claims of an answer, `claim_counts` reads how
many there are and how many the context does not support: from the typed ``Score.evidence`` when
the backend reports it, else from the shapes backends put in ``native_value``
(`unsupported_claims`).
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping, Optional, Sequence

from ..metrics import ragchecker_figure
from ..schema import Case, Score, ScoreBlock

__all__ = ["summarize", "Totals", "ALL", "COLUMNS", "claim_counts", "unsupported_claims"]

ALL = "(all)"
COLUMNS = ["backend", "metric", "tag", "mean", "n_scored", "n_undefined", "n_errored", "n", "n_claims",
           "unsupported_share", "n_not_run", "cost", "ragchecker_mean", "n_ragchecker_zero"]


# the running sums of one (backend, metric, tag): n, scored, sum of values, undefined, errored,
# answers with claims, answers with an unsupported claim, not run, judged scores, their cost, judged
# scores of unknown cost, RAGChecker's figures (sum, cases, cases at its 0 for nothing to average).
# The sums of values and costs are exact (`exact_sum`).
(_N, _SCORED, _SUM, _UNDEFINED, _ERRORED, _CLAIMS, _BAD, _NOT_RUN, _JUDGED, _COST, _UNPRICED, _RC_SUM, _RC_N,
 _RC_ZERO) = range(14)




def exact_sum(terms: list, values: Iterable[float]) -> list:
    """The exact sum of ``terms`` (a previous result, or ``[]``) and ``values``, as a short list of
    floats whose exact total it is; ``math.fsum`` of the list is that total correctly rounded.

    A running sum kept this way does not depend on the order the values arrive in, so a run whose
    cases finish in another order (on Ray workers, or resumed) summarises to the same bits.
    Each term is ``fsum`` of what the earlier terms leave out, so there are about as many terms as
    the sum has 53-bit pieces: one or two for scores in [0, 1]."""
    rest = [*terms, *values]
    out: list = []
    while True:
        try:
            s = math.fsum(rest)
        except (OverflowError, ValueError):  # an infinite or overflowing total: no exact form
            return [sum(rest)]
        if s == 0.0:
            return out
        if not math.isfinite(s):
            return [s]
        out.append(s)
        rest.append(-s)


class Totals:
    """Counts and sums per (backend, metric, tag), added one `Score` or `ScoreBlock` at a time;
    ``frame()`` is `summarize`'s table, ``counts()`` the manifest's score counts."""

    def __init__(self) -> None:
        self._groups: dict[tuple[str, str, str], list] = {}

    def _group(self, backend: str, metric: str, tag: str) -> list:
        key = (backend, metric, tag)
        group = self._groups.get(key)
        if group is None:
            group = self._groups[key] = [0, 0, [], 0, 0, 0, 0, 0, 0, [], 0, [], 0, 0]
        return group

    def add(self, score: Score, tags: Iterable[str] = ()) -> None:
        status = score.status
        claims = None
        if status == "scored":
            claims = claim_counts(score)
        rc = ragchecker_figure(score)
        for tag in (ALL, *tags):
            g = self._group(score.backend, score.metric, tag)
            g[_N] += 1
            if rc is not None:
                g[_RC_SUM] = exact_sum(g[_RC_SUM], (rc,))
                g[_RC_N] += 1
                g[_RC_ZERO] += status != "scored"
            if status == "scored":
                g[_SCORED] += 1
                g[_SUM] = exact_sum(g[_SUM], (score.value,))
                if claims is not None:
                    g[_CLAIMS] += 1
                    g[_BAD] += 1 if claims[1] else 0
            elif status == "undefined":
                g[_UNDEFINED] += 1
            elif status == "not_run":
                g[_NOT_RUN] += 1
            else:
                g[_ERRORED] += 1
            if score.judge_calls:
                g[_JUDGED] += 1
                if score.cost is None:
                    g[_UNPRICED] += 1
                else:
                    g[_COST] = exact_sum(g[_COST], (score.cost,))

    def add_kept(self, scores: Iterable[Score], tags_of: Mapping[str, Sequence[str]]) -> None:
        """Scores an earlier session kept, each as `add` adds it (``tags_of``: a case id's tags); those
        that carry a value alone (or none: undefined), as a native metric's do, summed a (backend,
        metric, tag) at a time, as a block's are (the sums are exact: the same in any order)."""
        plain: dict[tuple[str, str, str], list] = {}
        for s in scores:
            status = s.status
            if status not in ("scored", "undefined") or s.judge_calls or ragchecker_figure(s) is not None \
                    or (status == "scored" and claim_counts(s) is not None):
                self.add(s, tags_of.get(s.case_id, ()))
                continue
            value = s.value if status == "scored" else None
            for tag in (ALL, *tags_of.get(s.case_id, ())):
                got = plain.get((s.backend, s.metric, tag))
                if got is None:
                    got = plain[(s.backend, s.metric, tag)] = []
                got.append(value)
        for (backend, metric, tag), values in plain.items():
            self._add_values(backend, metric, tag, values)

    def add_block(self, block: ScoreBlock, tags_of: Optional[dict[str, Sequence[str]]] = None) -> None:
        """A block's scores; ``tags_of`` maps a case id to its tags (cases without tags left out)."""
        values = block._values()
        self._add_values(block.backend, block.metric, ALL, values)
        if tags_of:
            by_tag: dict[str, list] = {}
            for cid, v in zip(block.case_ids, values):
                for tag in tags_of.get(cid, ()):
                    by_tag.setdefault(tag, []).append(v)
            for tag, vs in by_tag.items():
                self._add_values(block.backend, block.metric, tag, vs)

    def _add_values(self, backend: str, metric: str, tag: str, values: list) -> None:
        g = self._group(backend, metric, tag)
        scored = [v for v in values if v is not None] if None in values else values
        g[_N] += len(values)
        g[_SCORED] += len(scored)
        g[_SUM] = exact_sum(g[_SUM], scored)
        g[_UNDEFINED] += len(values) - len(scored)

    def counts(self) -> dict[str, int]:
        """``scores``, ``scored``, ``undefined``, ``errored`` and (when there are any) ``not_run``
        over every backend and metric."""
        out = {"scores": 0, "scored": 0, "undefined": 0, "errored": 0, "not_run": 0}
        for (_, _, tag), g in self._groups.items():
            if tag == ALL:
                out["scores"] += g[_N]
                out["scored"] += g[_SCORED]
                out["undefined"] += g[_UNDEFINED]
                out["errored"] += g[_ERRORED]
                out["not_run"] += g[_NOT_RUN]
        if not out["not_run"]:
            del out["not_run"]  # a run without a budget reads as it always did
        return out

    def costs(self) -> tuple[dict[str, Optional[float]], dict[str, Optional[float]]]:
        """The judged scores' cost per backend and per ``backend:metric`` (None: a score's cost is
        unknown); backends and metrics without judged scores are left out."""
        sums: dict[str, Optional[list]] = {}  # per backend: its metrics' exact sums, None if unknown
        by_metric: dict[str, Optional[float]] = {}
        for (backend, metric, tag), g in self._groups.items():
            if tag != ALL or not g[_JUDGED]:
                continue
            by_metric[f"{backend}:{metric}"] = None if g[_UNPRICED] else round(math.fsum(g[_COST]), 10)
            known = sums.get(backend, [])
            sums[backend] = None if g[_UNPRICED] or known is None else exact_sum(known, g[_COST])
        by_backend = {b: None if s is None else round(math.fsum(s), 10) for b, s in sums.items()}
        return by_backend, by_metric

    def rows(self, by_tag: bool = True) -> list[dict[str, Any]]:
        """`frame`'s rows as plain dicts (``COLUMNS`` in order), without pandas: the overall rows
        first, then by tag, backend and metric."""
        rows = [
            {
                "backend": backend, "metric": metric, "tag": tag,
                "mean": math.fsum(g[_SUM]) / g[_SCORED] if g[_SCORED] else float("nan"),
                "n_scored": g[_SCORED], "n_undefined": g[_UNDEFINED], "n_errored": g[_ERRORED], "n": g[_N],
                "n_claims": g[_CLAIMS],
                "unsupported_share": g[_BAD] / g[_CLAIMS] if g[_CLAIMS] else float("nan"),
                "n_not_run": g[_NOT_RUN],
                "cost": math.fsum(g[_COST]) if g[_JUDGED] and not g[_UNPRICED] else float("nan"),
                "ragchecker_mean": math.fsum(g[_RC_SUM]) / g[_RC_N] if g[_RC_N] else float("nan"),
                "n_ragchecker_zero": g[_RC_ZERO],
            }
            for (backend, metric, tag), g in self._groups.items() if by_tag or tag == ALL
        ]
        rows.sort(key=lambda r: (r["tag"] != ALL, r["tag"], r["backend"], r["metric"]))
        return rows

    def frame(self, by_tag: bool = True):
        """A DataFrame with one row per (backend, metric, tag), as `summarize` describes."""
        import pandas as pd

        return pd.DataFrame(self.rows(by_tag), columns=COLUMNS)


def summarize(scores: Sequence[Score], cases: Sequence[Case] = (), by_tag: bool = True):
    """A DataFrame with one row per (backend, metric, tag): mean over scored cases and the counts.

    ``tag`` is ``"(all)"`` for the whole set; with ``by_tag`` there is one more row per tag found on
    the cases. ``mean`` is NaN when nothing was scored. Where the backend exposes claims
    (`claim_counts`), ``n_claims`` counts the scored answers that have claims and
    ``unsupported_share`` is the share of them with at least one unsupported claim (else 0 and NaN).
    ``n_not_run`` counts the scores a spent budget left unrun; ``cost`` is what the judge calls of the
    group's scores cost by the judge's price table (NaN when unknown: no price, or no judged score).
    A score of a run with repeats is its case's mean over them. For RAGChecker's claim diagnostics
    (`ragbridge.metrics.RAGCHECKER`), ``ragchecker_mean`` is the figure a RAGChecker run reports
    for the same cases (divided by 100): the mean of its per-case figure in its own orientation,
    with its 0 for each case where ragbridge's value is undefined (nothing to average), whose number
    is ``n_ragchecker_zero`` (NaN and 0 for every other metric).
    """
    tags_of = {c.id: c.tags for c in cases} if by_tag else {}
    totals = Totals()
    for s in scores:
        totals.add(s, tags_of.get(s.case_id, ()))
    return totals.frame(by_tag)


# --------------------------------------------------------------------------------------------
# Claims

#: verdict words that mean "the claim is supported by the context"
_SUPPORTED = {"yes", "supported", "true", "1", "entailed", "entailment", "faithful"}
_CLAIM_LISTS = ("claims", "statements", "verdicts", "sentences", "statement_verdicts")
_VERDICT_KEYS = ("verdict", "supported", "label", "score", "attributed", "faithful")


def claim_counts(score: Score) -> Optional[tuple[int, int]]:
    """``(claims, unsupported claims)`` of a score: its typed ``evidence.claims`` when the backend
    reports them, else what `unsupported_claims` finds in ``native_value``; None without claims."""
    if score.evidence is not None and score.evidence.claims is not None:
        claims = score.evidence.claims
        return (len(claims), len(score.evidence.unsupported())) if claims else None
    return unsupported_claims(score.native_value)


def unsupported_claims(native_value: Any, threshold: float = 0.5) -> Optional[tuple[int, int]]:
    """``(claims, unsupported claims)`` found in a score's ``native_value``, or None when the
    backend exposes no claims.

    Understood shapes: a mapping with a list under ``claims``, ``statements``, ``verdicts`` or
    ``sentences`` whose items carry a verdict under ``verdict``, ``supported``, ``label``, ``score``
    or ``attributed`` (or are bare verdicts), e.g. a per-sentence grade
    ``{score, scale, statements: [{criteria, score}]}``. A verdict counts as
    supported when it is ``yes``, ``supported``, true or 1, or a number at or above ``threshold``
    (when grades above 1 occur, all grades are divided by the top of the mapping's ``scale``); ``no``,
    ``idk`` / ``borderline`` (not backed by the context) and lower numbers count as unsupported; a
    negative number (an unparsable grade) is left out.
    """
    if not isinstance(native_value, Mapping):
        return None
    items = None
    for key in _CLAIM_LISTS:
        v = native_value.get(key)
        if isinstance(v, list) and v:
            items = v
            # a list of claim texts with the verdicts beside it
            if all(isinstance(i, str) for i in v) and isinstance(native_value.get("verdicts"), list):
                items = native_value["verdicts"]
            break
    if items is None:
        return None
    top = 1.0
    scale = native_value.get("scale")
    if isinstance(scale, (list, tuple)) and scale and isinstance(scale[-1], (int, float)) and scale[-1] > 1:
        top = float(scale[-1])
    verdicts = [next((item[k] for k in _VERDICT_KEYS if k in item), None) if isinstance(item, Mapping)
                else item for item in items]
    raw = any(_is_grade(v) and v > 1 for v in verdicts)
    total = unsupported = 0
    for verdict in verdicts:
        if raw and _is_grade(verdict) and verdict > 0:
            verdict = verdict / top  # grades on the backend's own scale
        ok = _supported(verdict, threshold)
        if ok is None:
            continue
        total += 1
        unsupported += 0 if ok else 1
    return (total, unsupported) if total else None


def _is_grade(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _supported(verdict: Any, threshold: float) -> Optional[bool]:
    if isinstance(verdict, bool):
        return verdict
    if isinstance(verdict, (int, float)):
        if not math.isfinite(verdict) or verdict < 0:
            return None
        return float(verdict) >= threshold
    if isinstance(verdict, str):
        t = verdict.strip().lower()
        if not t:
            return None
        if t in _SUPPORTED:
            return True
        try:
            f = float(t)
        except ValueError:
            return False
        return None if f < 0 else f >= threshold
    return None
