"""The native backend: deterministic ranking metrics and answer checks, no judge, no network.

It offers every canonical metric of kind ``ranking`` and ``answer check`` (`ragbridge.metrics`):

* ranking (``recall@k``, ``precision@k``, ``hit@k``, ``mrr``, ``ndcg@k``, ``map``): trec_eval's
  conventions with ragbridge's relevance rule, computed by `ranking.evaluate` (the one dispatcher
  over the vectorised kernels; the oracle tests and ``benchmarks/bench_ranking.py`` run it too). The
  conventions are in `ragbridge.native.ranking` and docs/metrics.md. ``--gain`` picks nDCG's gain.
* answer checks (``must_contain``, ``must_not_contain``, ``abstention``): `ragbridge.native.answers`,
  with ``--case-sensitive`` and ``--decline-phrase``.

A ranking score is undefined (``value`` null, with the reason) where the metric is: a case with no
relevance labels, or (recall, mrr, ndcg, map) with no label of grade >= 1.

Lifecycle: `NativeBackend.open` returns a `RankedCache`, the run's session. The runner hands every
metric of a backend the same list of cases when none was filtered out, so the cases are walked into
NumPy arrays (`ranking.prepare`) once per run, not once per ranking metric.
"""

from __future__ import annotations

import math
import time
from typing import AsyncIterator, Optional, Sequence

from .. import metrics as canonical
from ..backend import Backend, MetricSpec, ScoringContext
from ..hookspecs import hookimpl
import numpy as np

from ..formats.records import CaseBatch
from ..schema import Case, Score, ScoreBlock
from . import answers, ranking

__all__ = ["NativeBackend", "RankedCache", "ranking_score"]

_KINDS = {canonical.RANKING: (), canonical.ANSWER_CHECK: ("answer",)}  # kind -> required case fields


class RankedCache:
    """The session of one run: the prepared arrays of the last list of cases scored (by identity)."""

    def __init__(self) -> None:
        self._cases: Optional[Sequence[Case]] = None
        self._ranked: Optional[ranking.Ranked] = None

    def ranked(self, cases: Sequence[Case]) -> ranking.Ranked:
        """``ranking.prepare(cases)``, reused while the same list object is asked for."""
        if self._ranked is None or self._cases is not cases:
            self._ranked, self._cases = ranking.prepare(cases), cases
        return self._ranked


class NativeBackend(Backend):
    name = "native"
    install_hint = ""

    def metrics(self) -> list[MetricSpec]:
        return [MetricSpec(m.name, m.name, requires=_KINDS[m.kind], judge=False, description=m.meaning)
                for m in canonical.METRICS if m.kind in _KINDS]

    async def open(self, ctx: ScoringContext) -> RankedCache:
        return RankedCache()

    async def score(self, metric: str, cases: Sequence[Case], ctx: ScoringContext) -> AsyncIterator[Score]:
        opts = ctx.options
        check = answers.CHECKS.get(metric)
        if check is not None:
            for case in cases:
                v = check(case, opts)
                yield Score(case_id=case.id, metric=metric, backend=self.name, native_metric=metric,
                            value=v.value, native_value=v.native_value, passed=v.passed, reason=v.reason)
            return
        start = time.perf_counter()
        session = ctx.session if isinstance(ctx.session, RankedCache) else RankedCache()
        values = ranking.evaluate(session.ranked(cases), [metric], gain=opts.gain,
                                  no_relevant=opts.no_relevant)[metric]
        undefined = np.flatnonzero(np.isnan(values)).tolist()
        reasons: list[Optional[str]] = [None] * len(values)
        if undefined:
            records = CaseBatch.of_cases(cases)
            for i in undefined:
                reasons[i] = "no label with grade >= 1" if records.record(i).get("relevant") else \
                    "no relevance labels"
        per_case = (time.perf_counter() - start) / max(len(cases), 1)
        yield ScoreBlock(backend=self.name, metric=metric, native_metric=metric,
                         case_ids=CaseBatch.of_cases(cases).ids, values=values, reasons=reasons,
                         seconds=per_case)


def ranking_score(metric: str, case_id: str, value: float, labelled: bool, seconds: float) -> Score:
    """The Score of one case's ranking ``value`` (NaN: undefined, with the reason; ``labelled``: the
    case has relevance labels). Every executor builds ranking scores with it."""
    undefined = math.isnan(value)
    reason = None
    if undefined:
        reason = "no relevance labels" if not labelled else "no label with grade >= 1"
    return Score(case_id=case_id, metric=metric, backend=NativeBackend.name,
                 value=None if undefined else value, native_metric=metric,
                 native_value=None if undefined else value, reason=reason, seconds=seconds)


@hookimpl
def ragbridge_register_backends(register):
    register(NativeBackend())
