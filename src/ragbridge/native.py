"""The native backend: deterministic ranking metrics and answer checks, no judge, no network.

Ranking metrics (``recall@k``, ``precision@k``, ``hit@k``, ``mrr``, ``ndcg@k``, ``map``) follow
trec_eval's conventions with ragbridge's relevance rule; see `ragbridge.ranking` and docs/metrics.md.

Answer checks:

* ``must_contain``: share of the case's ``must_contain`` strings found in the answer (1.0 = all);
  the missing ones are in ``reason``. Undefined when the case lists none.
* ``must_not_contain``: share of the case's ``must_not_contain`` strings absent from the answer
  (1.0 = none present). Undefined when the case lists none.
* ``abstention``: on a case with ``answerable: false``, 1.0 when the answer declines, else 0.0;
  undefined on answerable cases. An answer declines when, after lower-casing and straightening
  apostrophes, it contains one of the decline phrases (``DEFAULT_DECLINE_PHRASES``, replaced by
  ``RunOptions.decline_phrases`` / ``--decline-phrase``), or when it is empty.

Matching is case-insensitive by default (``--case-sensitive`` for exact matching); white space is
collapsed either way.
"""

from __future__ import annotations

import math
import re
import time
from typing import AsyncIterator, Sequence

from . import ranking
from .backend import Backend, MetricSpec, ScoringContext
from .hookspecs import hookimpl
from .schema import Case, Score

DEFAULT_DECLINE_PHRASES = (
    "i don't know",
    "i do not know",
    "i'm not sure",
    "i am not sure",
    "i don't have",
    "i do not have",
    "i couldn't find",
    "i could not find",
    "i can't find",
    "i cannot find",
    "i was unable to find",
    "i wasn't able to find",
    "i'm unable to",
    "i am unable to",
    "i can't answer",
    "i cannot answer",
    "i can't help with",
    "no information",
    "not covered",
    "isn't covered",
    "not mentioned in",
    "not in the provided",
    "not able to answer",
    "unable to answer",
    "cannot be answered",
    "can't be answered",
)

RANKING = {
    "recall@k": "recall",
    "precision@k": "precision",
    "hit@k": "hit",
    "mrr": "mrr",
    "ndcg@k": "ndcg",
    "map": "map",
}

_WS = re.compile(r"\s+")


def _norm(text: str, case_sensitive: bool) -> str:
    text = _WS.sub(" ", text.replace("\u2019", "'").replace("\u2018", "'")).strip()
    return text if case_sensitive else text.casefold()


def declines(answer: str, phrases: Sequence[str] | None = None, case_sensitive: bool = False) -> bool:
    """Whether ``answer`` declines to answer (see the module docstring)."""
    text = _norm(answer, case_sensitive)
    if not text:
        return True
    return any(_norm(p, case_sensitive) in text for p in (phrases or DEFAULT_DECLINE_PHRASES))


def _ranking_values(ranked, metric: str, gain: str):
    base, _, k_text = metric.partition("@")
    k = int(k_text) if k_text else None
    if base == "recall":
        return ranking.recall(ranked, k)
    if base == "precision":
        return ranking.precision(ranked, k)
    if base == "hit":
        return ranking.hit(ranked, k)
    if base == "mrr":
        return ranking.mrr(ranked, k)
    if base == "ndcg":
        return ranking.ndcg(ranked, k, gain=gain)
    if base == "map":
        return ranking.average_precision(ranked, k)
    raise ValueError(f"unknown ranking metric {metric!r}")


class NativeBackend(Backend):
    name = "native"
    install_hint = ""

    def metrics(self) -> list[MetricSpec]:
        specs = [
            MetricSpec(n, n, requires=(), judge=False, description=f"ranking: {n} (trec_eval conventions)")
            for n in RANKING
        ]
        specs += [
            MetricSpec("must_contain", "must_contain", requires=("answer",), description="share of required strings in the answer"),
            MetricSpec("must_not_contain", "must_not_contain", requires=("answer",), description="share of forbidden strings absent"),
            MetricSpec("abstention", "abstention", requires=("answer",), description="declines on unanswerable cases"),
        ]
        return specs

    async def open(self, ctx: ScoringContext) -> dict:
        """The run's session: the ranked cases, prepared once for every ranking metric."""
        return {}

    async def score(self, metric: str, cases: Sequence[Case], ctx: ScoringContext) -> AsyncIterator[Score]:
        opts = ctx.options
        start = time.perf_counter()
        if metric in ("must_contain", "must_not_contain", "abstention"):
            for case in cases:
                yield self._check(metric, case, opts)
            return
        cache = ctx.session if isinstance(ctx.session, dict) else {}
        cached = cache.get("ranked")
        if cached is None or cached[0] is not cases:
            ranked = ranking.prepare(cases)
            cache["ranked"] = (cases, ranked)
        else:
            ranked = cached[1]
        values = _ranking_values(ranked, metric, opts.gain)
        per_case = (time.perf_counter() - start) / max(len(cases), 1)
        for i, case in enumerate(cases):
            v = float(values[i])
            reason = None
            if math.isnan(v):
                reason = "no relevance labels" if not case.relevant else "no label with grade >= 1"
            yield Score(
                case_id=case.id,
                metric=metric,
                backend=self.name,
                value=None if math.isnan(v) else v,
                native_metric=metric,
                native_value=None if math.isnan(v) else v,
                reason=reason,
                seconds=per_case,
            )

    def _check(self, metric: str, case: Case, opts) -> Score:
        cs = opts.case_sensitive
        answer = _norm(case.answer or "", cs)
        base = dict(case_id=case.id, metric=metric, backend=self.name, native_metric=metric)
        if metric == "abstention":
            if case.answerable:
                return Score(**base, reason="case is answerable")
            ok = declines(case.answer or "", opts.decline_phrases, cs)
            return Score(**base, value=1.0 if ok else 0.0, native_value=ok, passed=ok,
                         reason="answer declines" if ok else "answer does not decline")
        wanted = case.must_contain if metric == "must_contain" else case.must_not_contain
        if not wanted:
            return Score(**base, reason=f"case lists no {metric} strings")
        present = [w for w in wanted if _norm(w, cs) in answer]
        if metric == "must_contain":
            missing = [w for w in wanted if w not in present]
            value = 1 - len(missing) / len(wanted)
            reason = "all present" if not missing else "missing: " + "; ".join(missing)
        else:
            value = 1 - len(present) / len(wanted)
            reason = "none present" if not present else "present: " + "; ".join(present)
        return Score(**base, value=value, native_value=value, passed=value == 1.0, reason=reason)


@hookimpl
def ragbridge_register_backends(register):
    register(NativeBackend())
