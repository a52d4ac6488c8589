"""The native backend: deterministic ranking metrics and answer checks, no judge, no network.

It offers every canonical metric of kind ``ranking`` and ``answer check`` (`ragbridge.metrics`):

* ranking (``recall@k``, ``precision@k``, ``hit@k``, ``mrr``, ``ndcg@k``, ``map``): trec_eval's
  conventions with ragbridge's relevance rule, computed by `ranking.evaluate` (the one dispatcher
  over the vectorised kernels; the oracle tests and ``benchmarks/bench_ranking.py`` run it too). The
  conventions are in `ragbridge.native.ranking` and docs/metrics.md. ``gain`` picks nDCG's gain.
* span (``span_recall@k``, ``span_precision@k``, ``span_iou@k``, ``precision_omega``): the
  character-level metrics on span labels (`ragbridge.native.spans`), through the same dispatcher,
  with ``span_arithmetic`` (merged or chroma) and, for ``precision_omega``, ``--chunks`` (the
  chunking). They are planned by default when the cases hold span labels. ``span_min_overlap``
  sets the span rule the ranking metrics match span labels by.
* answer checks (``must_contain``, ``must_not_contain``, ``abstention``): `ragbridge.native.answers`,
  with ``case_sensitive`` and ``decline_phrases``.

Its options are `NativeOptions` (`ragbridge.native.options`: ``--option native.KEY=VALUE``, and the
flags ``--gain``, ``--no-relevant``, ``--case-sensitive``, ``--decline-phrase``,
``--span-min-overlap``, ``--span-arithmetic``); ``k`` is every backend's (`RunOptions`).

A ranking or span score is undefined (``value`` null, with the reason) where the metric is: a case
with no relevance labels (for the span metrics: no span labels), or with no label of grade >= 1
(precision and hit excepted), a case that does not give its retrieved chunks (no ``contexts`` field:
a ground-truth set holds the labels but not the retrieval, so there is no ranking to measure; an
empty list, a retriever that returned nothing, scores 0), and ``precision_omega`` without a chunking;
the reason of a case without labels says so when it retrieved no chunk either
(`ragbridge.metrics.NOTHING_RETRIEVED`). A ranking score below 1 says why (`ranking.reasons`: the
labels the top k miss, the first relevant rank, the noise above relevant chunks), as does a
span-labelled case's ``span_recall@k`` below 1 (the spans not wholly covered).

Lifecycle: `NativeBackend.open` returns a `RankedCache`, the run's session. The runner hands every
metric of a backend the same list of cases when none was filtered out, so the cases are walked into
NumPy arrays (`ranking.Prepared`) once per run, not once per metric.
"""

from __future__ import annotations

import time
from dataclasses import replace
from itertools import compress, count
from operator import not_
from typing import AsyncIterator, Optional, Sequence

import numpy as np

from .. import metrics as canonical
from ..backend import Backend, MetricSpec, ScoringContext, case_ids, case_record
from ..hookspecs import hookimpl
from ..schema import Case, Result, ResultBlock
from . import answers, ranking, spans
from .options import NativeOptions

__all__ = ["NativeBackend", "NativeOptions", "RankedCache", "NO_CONTEXTS"]

_KINDS = {canonical.RANKING: (), canonical.SPAN: (), canonical.ANSWER_CHECK: ("answer",)}  # kind -> required


class RankedCache:
    """The session of one run: the prepared arrays of the last list of cases scored (by identity)."""

    def __init__(self) -> None:
        self._cases: Optional[Sequence[Case]] = None
        self._prepared: Optional[ranking.Prepared] = None
        self._without: Optional[tuple[Sequence[Case], list[int]]] = None

    def without_contexts(self, cases: Sequence[Case]) -> list[int]:
        """`_without_contexts` of ``cases``, reused while the same list object is asked for."""
        if self._without is None or self._without[0] is not cases:
            self._without = (cases, _without_contexts(cases))
        return self._without[1]

    def prepared(self, cases: Sequence[Case], min_overlap: float) -> ranking.Prepared:
        """``ranking.Prepared(cases)``, reused while the same list object is asked for."""
        if self._prepared is None or self._cases is not cases or self._prepared.min_overlap != min_overlap:
            self._prepared, self._cases = ranking.Prepared(cases, min_overlap), cases
        return self._prepared


#: the reason of a ranking or span score of a case that gives no retrieved chunks
NO_CONTEXTS = "no retrieved chunks given (the case has no 'contexts')"


def _without_contexts(cases: Sequence[Case]) -> list[int]:
    """The positions of the cases that do not give their retrieved chunks (`Case.contexts_given`)."""
    given = cases.contexts_given() if hasattr(cases, "contexts_given") else (c.contexts_given for c in cases)
    return list(compress(count(), map(not_, given)))


def _undefined_reason(metric: str, record: dict, chunking) -> str:
    """Why ``metric`` is undefined for the case of canonical ``record``."""
    if metric.startswith("span_") or metric == "precision_omega":
        if not record.get("relevant_spans"):
            return "no span labels" + ("" if record.get("contexts") else f"; {canonical.NOTHING_RETRIEVED}")
        if metric == "precision_omega" and chunking is None:
            return "precision_omega needs the chunking (--chunks)"
        return "no span label with grade >= 1"
    if record.get("relevant") or record.get("relevant_spans"):
        return ranking.NOTHING_TO_FIND
    return "no relevance labels" + ("" if record.get("contexts") else f"; {canonical.NOTHING_RETRIEVED}")


def _span_reasons(metric: str, cases: Sequence[Case], values: np.ndarray, reasons: list,
                  min_overlap: float) -> None:
    """The reason of each span-labelled case's ``span_recall@k`` below 1: the span labels the top k
    do not wholly cover (`spans.missed_reason`)."""
    base, k = ranking.parse_metric(metric)
    for i in np.flatnonzero(values < 1).tolist():
        record = case_record(cases, i)
        if record.get("relevant_spans"):
            reasons[i] = spans.missed_reason(base, record["relevant_spans"], record.get("contexts") or [], k,
                                             min_overlap)[1]


class NativeBackend(Backend):
    name = "native"
    install_hint = ""
    Options = NativeOptions

    def metrics(self) -> list[MetricSpec]:
        return [MetricSpec(m.name, m.name, requires=_KINDS[m.kind], judge=False, description=m.meaning,
                           default=m.kind != canonical.SPAN)
                for m in canonical.METRICS if m.kind in _KINDS]

    def metrics_for(self, options) -> list[MetricSpec]:
        """Every metric; the span metrics planned by default when the cases hold span labels
        (``precision_omega`` when a chunking is given too)."""
        out = []
        for spec in self.metrics():
            if not spec.default and options.span_labels and (
                    spec.name != "precision_omega" or options.chunking is not None):
                spec = replace(spec, default=True)
            out.append(spec)
        return out

    async def open(self, ctx: ScoringContext) -> RankedCache:
        return RankedCache()

    async def score(self, metric: str, cases: Sequence[Case], ctx: ScoringContext) -> AsyncIterator[Result]:
        opts: NativeOptions = ctx.options.of(self)
        check = answers.CHECKS.get(metric)
        if check is not None:
            for case in cases:
                v = check(case, opts)
                yield Result(case_id=case.id, native_metric=metric, value=v.value,
                             native_value=v.native_value, passed=v.passed, reason=v.reason)
            return
        start = time.perf_counter()
        session = ctx.session if isinstance(ctx.session, RankedCache) else RankedCache()
        prepared = session.prepared(cases, opts.span_min_overlap)
        values = ranking.evaluate(prepared, [metric], gain=opts.gain, arithmetic=opts.span_arithmetic,
                                  chunking=ctx.options.chunking, no_relevant=opts.no_relevant)[metric]
        undefined = np.flatnonzero(np.isnan(values)).tolist()
        reasons: list[Optional[str]] = [None] * len(values)
        if undefined:
            for i in undefined:
                reasons[i] = _undefined_reason(metric, case_record(cases, i), ctx.options.chunking)
        for i in session.without_contexts(cases):  # nothing retrieved to rank: undefined, not 0
            if reasons[i] is None:
                values[i], reasons[i] = np.nan, NO_CONTEXTS
        base = ranking.parse_metric(metric)[0]
        if base in ranking.METRICS:  # why a value is below 1: labels missed, the first relevant rank, noise
            why = ranking.reasons(prepared.cases, prepared.ranked, metric, values, opts.span_min_overlap,
                                   opts.gain)
            if reasons.count(None) == len(reasons):  # no value undefined: the reasons below 1 alone
                reasons = why
            else:
                reasons = [w if w is not None else u for w, u in zip(why, reasons)]
        elif ctx.options.span_labels and base == "span_recall":
            _span_reasons(metric, cases, values, reasons, opts.span_min_overlap)
        per_case = (time.perf_counter() - start) / max(len(cases), 1)
        yield ResultBlock(case_ids=case_ids(cases), values=values, reasons=reasons, native_metric=metric,
                          seconds=per_case)


@hookimpl
def ragbridge_register_backends(register):
    register(NativeBackend())
