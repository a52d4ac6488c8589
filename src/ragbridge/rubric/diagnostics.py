"""RAGChecker's claim diagnostics, from the rubric backend's claim checks (`claim_checks`).

The formulas are RAGChecker's (amazon-science/RAGChecker, ``ragchecker/computation.py``), on the
four verdict matrices of `ragbridge.schema.ClaimChecks`, where a claim is entailed by a text when its
verdict is SUPPORTED. With ``a`` the answer's claims (index i), ``r`` the reference's (index j) and
the retrieved chunks (index k):

========================== ============================ ==============================================
metric                     RAGChecker's name            figure
========================== ============================ ==============================================
answer_claim_precision     precision                    mean_i answer_in_reference[i]
answer_claim_recall        recall                       mean_j reference_in_answer[j]
answer_claim_f1            f1                           2PR / (P + R) (0 when P + R = 0)
claim_recall               claim_recall                 mean_j max_k reference_in_chunks[j][k]
claim_context_precision    context_precision            mean_k max_j reference_in_chunks[j][k]
context_utilization        context_utilization          sum_j (recalled_j and reference_in_answer[j])
                                                        / sum_j recalled_j, recalled_j = max_k
                                                        reference_in_chunks[j][k]
noise_sensitivity_relevant noise_sensitivity_in_relevant mean_i (wrong_i and max_k (relevant_k and
                                                        answer_in_chunks[i][k]))
noise_sensitivity_         noise_sensitivity_in_        mean_i (wrong_i and max_k (not relevant_k and
irrelevant                 irrelevant                   answer_in_chunks[i][k]) and not the above)
hallucination              hallucination                mean_i (wrong_i and not max_k answer_in_chunks[i][k])
self_knowledge             self_knowledge               mean_i (right_i and not max_k answer_in_chunks[i][k])
========================== ============================ ==============================================

with relevant_k = max_j reference_in_chunks[j][k] (the chunk holds a claim of the reference),
right_i = answer_in_reference[i] and wrong_i = not right_i.

Two differences from RAGChecker, both in what a score says rather than in a formula:

* RAGChecker gives 0 where a figure has nothing to average (no claim in the answer, none in the
  reference, no reference claim in any chunk) and, when no chunk was retrieved (``contexts: []``,
  an empty claim x chunk matrix), for context precision, context utilization, both noise
  sensitivities, hallucination and self-knowledge; here the score is undefined (null) with the
  reason, as every ragbridge metric is, so it is never averaged as 0. Claim recall with no chunk is
  0 here (no reference claim in a retrieved chunk), where RAGChecker's ``computation.py`` takes
  NumPy's mean of an empty row (NaN, which makes its whole mean NaN);
* noise sensitivity, hallucination and self-knowledge are shares where lower is better; a score's
  ``value`` is one minus RAGChecker's figure (higher is better, as every value), and its
  ``native_value`` holds RAGChecker's figure under ``ragchecker_value``.

So a run's mean of a claim diagnostic (over the cases where it is defined) differs from the figure
RAGChecker reports for the same cases (its mean over every case, 0 where there is nothing to
average, in its own orientation; printed x 100). Summaries state that figure too, as
``ragchecker_mean`` beside ``mean`` (`ragbridge.metrics.ragchecker_figure` per case,
`ragbridge.run.summary`).

A run plans them only when asked: ``--metric claim_diagnostics`` (all ten) or by name, as their
judge calls grow with the chunks (`claim_checks`: 4 + k calls a case, shared by the ten).

Each score's ``evidence.claim_checks`` holds the claims and the verdict matrices its formula reads,
so every value can be computed again from the run folder.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

from ..backend import MetricSpec
from ..metrics import CLAIM_DIAGNOSTICS, NOTHING_RETRIEVED, RAGCHECKER
from ..schema import Case, ClaimChecks, Evidence
from .claim_checks import CRITERION, judge_claim_checks
from .parse import Asker

__all__ = ["Diagnostic", "DIAGNOSTICS", "GROUP", "specs", "figure", "diagnostic_native", "diagnostic_fields"]

_ALL = ("answer", "reference")
#: ``--metric claim_diagnostics`` asks for all ten (none is planned unless asked for: 4 + k calls a case)
GROUP = CLAIM_DIAGNOSTICS


@dataclass(frozen=True)
class Diagnostic:
    """One claim diagnostic: its canonical name, RAGChecker's, the `ClaimChecks` parts its formula
    reads, the case inputs it needs, and whether its value is one minus RAGChecker's figure."""

    name: str
    ragchecker: str
    parts: tuple[str, ...]
    requires: tuple[str, ...]
    inverted: bool = False


_NOISE = ("answer_in_chunks", "reference_in_chunks", "answer_in_reference")
#: what each claim diagnostic's formula reads, and the case inputs it needs (RAGChecker's names and the
#: orientation: `ragbridge.metrics.RAGCHECKER`). No metric needs a chunk: a case that retrieved none
#: (``contexts: []``) is checked against none, as RAGChecker checks it (`diagnostic_fields` skips a case
#: whose chunks are ids without text)
_READS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "claim_recall": (("reference_in_chunks",), ("reference",)),
    "claim_context_precision": (("reference_in_chunks",), ("reference",)),
    "answer_claim_precision": (("answer_in_reference",), ("answer", "reference")),
    "answer_claim_recall": (("reference_in_answer",), ("answer", "reference")),
    "answer_claim_f1": (("answer_in_reference", "reference_in_answer"), ("answer", "reference")),
    "context_utilization": (("reference_in_chunks", "reference_in_answer"), _ALL),
    "noise_sensitivity_relevant": (_NOISE, _ALL),
    "noise_sensitivity_irrelevant": (_NOISE, _ALL),
    "hallucination": (("answer_in_chunks", "answer_in_reference"), _ALL),
    "self_knowledge": (("answer_in_chunks", "answer_in_reference"), _ALL),
}
DIAGNOSTICS: dict[str, Diagnostic] = {
    name: Diagnostic(name, RAGCHECKER[name][0], parts, requires, RAGCHECKER[name][1])
    for name, (parts, requires) in _READS.items()}


def specs() -> list[MetricSpec]:
    """The metrics the rubric backend offers for the claim diagnostics."""
    return [MetricSpec(d.name, native_name=d.ragchecker, requires=d.requires, judge=True,
                       digest=CRITERION.hash, default=False, group=GROUP,
                       description=f"claim checks {CRITERION.hash}: RAGChecker's {d.ragchecker}"
                                   + (" (value: 1 - it)" if d.inverted else ""))
            for d in DIAGNOSTICS.values()]


# --------------------------------------------------------------------------------------------
# The formulas


def _yes(verdict: str) -> bool:
    return verdict == "SUPPORTED"


def _quoted(claims: Sequence[str], picked: Sequence[bool]) -> str:
    return "; ".join(f'"{c}"' for c, p in zip(claims, picked) if p)


def figure(name: str, checks: ClaimChecks) -> tuple[Optional[float], str]:
    """RAGChecker's figure ``name`` (a RAGChecker name, e.g. ``hallucination``) from ``checks``,
    with a reason; None when it is undefined (nothing to average), the reason saying why."""
    a, r = checks.answer_claims or [], checks.reference_claims or []
    if name in ("precision", "recall", "f1"):
        p = _mean([_yes(v) for v in checks.answer_in_reference or []]) if name != "recall" else None
        rc = _mean([_yes(v) for v in checks.reference_in_answer or []]) if name != "precision" else None
        if name == "precision":
            if p is None:
                return None, "the answer states no claim"
            bad = [not _yes(v) for v in checks.answer_in_reference]
            return p, _count(len(a) - sum(bad), len(a), "answer claims the reference states", bad, a, "not")
        if name == "recall":
            if rc is None:
                return None, "the reference states no claim"
            bad = [not _yes(v) for v in checks.reference_in_answer]
            return rc, _count(len(r) - sum(bad), len(r), "reference claims the answer states", bad, r,
                              "missing")
        if p is None or rc is None:
            return None, "the answer states no claim" if p is None else "the reference states no claim"
        return (0.0 if p + rc == 0 else 2 * p * rc / (p + rc)), f"claim precision {p:.2f}, recall {rc:.2f}"
    no_chunk = checks.chunk_ids is not None and not checks.chunk_ids  # retrieval returned nothing
    if name in ("claim_recall", "context_precision", "context_utilization"):
        grid = checks.reference_in_chunks or []
        if not r:
            return None, "the reference states no claim"
        if no_chunk and name != "claim_recall":
            return None, NOTHING_RETRIEVED
        recalled = [any(_yes(v) for v in row) for row in grid]
        if name == "claim_recall":
            return _mean(recalled), _count(sum(recalled), len(r), "reference claims in a retrieved chunk",
                                           [not x for x in recalled], r, "in none")
        if name == "context_precision":
            ids = checks.chunk_ids or []
            useful = [any(_yes(row[k]) for row in grid) for k in range(len(ids))]
            if not ids:
                return None, NOTHING_RETRIEVED
            idle = [i for i, u in zip(ids, useful) if not u]
            return _mean(useful), (f"{sum(useful)} of {len(ids)} chunks hold a reference claim"
                                   + (f"; none in {', '.join(idle)}" if idle else ""))
        if not any(recalled):
            return None, "no reference claim is in a retrieved chunk"
        used = [x and _yes(v) for x, v in zip(recalled, checks.reference_in_answer or [])]
        return sum(used) / sum(recalled), (f"the answer states {sum(used)} of the {sum(recalled)} reference "
                                           "claims the chunks hold")
    # noise sensitivity, hallucination, self-knowledge: shares of the answer's claims
    if not a:
        return None, "the answer states no claim"
    if no_chunk:
        return None, NOTHING_RETRIEVED
    right = [_yes(v) for v in checks.answer_in_reference or []]
    grid = checks.answer_in_chunks or []
    if name in ("hallucination", "self_knowledge"):
        inside = [any(_yes(v) for v in row) for row in grid]
        hit = [not x and (y if name == "self_knowledge" else not y) for x, y in zip(inside, right)]
        what = ("answer claims right but in no chunk" if name == "self_knowledge"
                else "answer claims wrong (not in the reference) and in no chunk")
        return _mean(hit), _count(sum(hit), len(a), what, hit, a, "")
    if not r:
        return None, "the reference states no claim, so no chunk is known to be relevant"
    ref_grid = checks.reference_in_chunks or []
    n_chunks = len(checks.chunk_ids or [])
    relevant = [any(_yes(row[k]) for row in ref_grid) for k in range(n_chunks)]
    rel = [any(relevant[k] and _yes(row[k]) for k in range(n_chunks)) for row in grid]
    irr = [any(not relevant[k] and _yes(row[k]) for k in range(n_chunks)) and not x
           for row, x in zip(grid, rel)]
    pick = rel if name == "noise_sensitivity_in_relevant" else irr
    hit = [x and not y for x, y in zip(pick, right)]
    what = ("answer claims wrong and taken from a chunk that holds a reference claim"
            if name == "noise_sensitivity_in_relevant"
            else "answer claims wrong and taken only from chunks that hold no reference claim")
    return _mean(hit), _count(sum(hit), len(a), what, hit, a, "")


def _mean(flags: Sequence[bool]) -> Optional[float]:
    return sum(flags) / len(flags) if flags else None


def _count(k: int, n: int, what: str, picked: Sequence[bool], claims: Sequence[str], label: str) -> str:
    head = f"{k} of {n} {what}"
    listed = _quoted(claims, picked)
    if not listed:
        return head
    return f"{head}; {label + ': ' if label else ''}{listed}"


# --------------------------------------------------------------------------------------------
# Scoring


def diagnostic_native(metric: str) -> dict:
    """What every Score of the claim diagnostic ``metric`` holds in ``native_value``, failed or not."""
    return {"digest": CRITERION.hash, "ragchecker_metric": DIAGNOSTICS[metric].ragchecker}


async def diagnostic_fields(asker: Asker, metric: str, case: Case) -> dict[str, Any]:
    """``case``'s Score fields for the claim diagnostic ``metric``; a reply the checks cannot use
    raises `ReplyError` or `JudgeCallError`."""
    d = DIAGNOSTICS[metric]
    if case.contexts and not any(c.text for c in case.contexts) and \
            {"answer_in_chunks", "reference_in_chunks"} & set(d.parts):
        return dict(value=None, native_value=diagnostic_native(metric),
                    reason="skipped: case has no context_text")
    checks = await judge_claim_checks(asker, case, d.parts)
    raw, reason = figure(d.ragchecker, checks)
    native = {**diagnostic_native(metric), "ragchecker_value": raw, "structured": asker.structured}
    value = None if raw is None else (1.0 - raw if d.inverted else raw)
    return dict(value=value, native_value=native, reason=reason, evidence=Evidence(claim_checks=checks))

