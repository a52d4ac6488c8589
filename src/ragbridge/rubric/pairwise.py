"""Pairwise comparison of two runs' answers by one rubric, with the position swapped.

For every case both runs answered (paired by id), the judge is asked twice which answer is better by
the rubric (`prompts.compare_messages`): once with the base run's answer shown as A, once with the
new run's answer as A. A preference counts only when both orders agree (new better in both, or base
better in both); any other pair of verdicts is a tie. Two identical answers (with identical
passages, when the rubric shows them) are a tie without a call.

Figures: wins (new better), ties, losses (base better) and their shares; the net preference
``mean(+1 win, 0 tie, -1 loss)`` with a 95% percentile bootstrap interval over cases (the paired
bootstrap of `ragbridge.analysis.stats`, 2000 resamples, seeded); and the position-bias rate: the
share of the cases the judge saw in both orders where its verdict flipped with the order (it chose the same
position, A both times or B both times). A judge that always prefers the first answer has a
position-bias rate of 100% and no preference at all.

Every call goes through a `ragbridge.judge.JudgeGateway` (cache, retries, counts), attributed to
``("rubric", "pairwise:<metric>", case_id)``.
"""

from __future__ import annotations

import asyncio
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

from ..analysis.stats import paired_bootstrap_ci
from ..run import Run
from ..schema import Case
from . import prompts
from .backend import http_client, make_asker
from .options import RubricOptions
from .parse import Asker, JudgeCallError, ReplyError, check_winner
from .rubrics import Rubric

__all__ = ["PairwiseResult", "compare_runs", "pair_cases"]


@dataclass
class PairwiseResult:
    """Everything ``ragbridge pairwise`` reports; ``items`` has one entry per paired case."""

    metric: str
    rubric_hash: str
    judge_model: str
    n_paired: int
    wins: int = 0
    ties: int = 0
    losses: int = 0
    identical: int = 0
    errored: int = 0
    position_flips: int = 0
    n_both_orders: int = 0
    net: float = float("nan")
    net_low: float = float("nan")
    net_high: float = float("nan")
    skipped: dict[str, int] = field(default_factory=dict)
    judge_calls: int = 0
    stub: bool = False
    structured: str = ""
    items: list[dict[str, Any]] = field(default_factory=list)

    @property
    def n_decided(self) -> int:
        return self.wins + self.ties + self.losses

    @property
    def position_bias(self) -> float:
        return self.position_flips / self.n_both_orders if self.n_both_orders else float("nan")

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "n_decided": self.n_decided, "position_bias": self.position_bias}


def pair_cases(base: Run, new: Run, rubric: Rubric) -> tuple[list[tuple[Case, Case]], dict[str, int]]:
    """The (base case, new case) pairs the rubric can compare, and why others were left out."""
    by_id = {c.id: c for c in base.cases}
    pairs, skipped = [], {"only in one run": 0, "missing an input": 0}
    need = set(rubric.requires)
    for c in new.cases:
        b = by_id.get(c.id)
        if b is None:
            skipped["only in one run"] += 1
        elif need - b.fields_present() or need - c.fields_present():
            skipped["missing an input"] += 1
        else:
            pairs.append((b, c))
    skipped["only in one run"] += sum(1 for cid in by_id if cid not in {c.id for c in new.cases})
    return pairs, {k: v for k, v in skipped.items() if v}


def _same(rubric: Rubric, a: Case, b: Case) -> bool:
    return (a.answer or "") == (b.answer or "") and (
        "contexts" not in rubric.fields or [c.text for c in a.contexts] == [c.text for c in b.contexts])


async def _judge_pair(asker: Asker, rubric: Rubric, base: Case, new: Case) -> dict[str, Any]:
    schema = prompts.schema_compare(rubric)
    first, second = await asyncio.gather(
        asker.ask(prompts.compare_messages(rubric, base, new), schema, "pairwise", check_winner),
        asker.ask(prompts.compare_messages(rubric, new, base), schema, "pairwise", check_winner))
    # order 1 shows base as A; order 2 shows new as A
    v1 = {"A": "base", "B": "new", "tie": "tie"}[first[0]]
    v2 = {"A": "new", "B": "base", "tie": "tie"}[second[0]]
    return {"base_first": v1, "new_first": v2, "outcome": v1 if v1 == v2 else "tie",
            "flipped": first[0] == second[0] != "tie", "reason_base_first": first[1],
            "reason_new_first": second[1]}


async def compare_runs(base: Run, new: Run, rubric: Rubric, gateway: Any, *,
                       options: Optional[RubricOptions] = None, seed: int = 0, n_resamples: int = 2000,
                       confidence: float = 0.95) -> PairwiseResult:
    """Compare ``new`` against ``base`` by ``rubric`` through a started ``gateway`` (``options``: the
    rubric backend's: ``structured_output``, ``retries``, ``concurrency``)."""
    opts = options or RubricOptions()
    pairs, skipped = pair_cases(base, new, rubric)
    res = PairwiseResult(metric=rubric.name, rubric_hash=rubric.hash, judge_model=gateway.config.model,
                         n_paired=len(pairs), skipped=skipped)
    client = http_client(gateway)
    asker = make_asker(client, gateway, opts)
    sem = asyncio.Semaphore(max(1, opts.concurrency or gateway.config.max_concurrency))
    tag = f"pairwise:{rubric.name}"

    async def one(b: Case, n: Case) -> dict[str, Any]:
        item: dict[str, Any] = {"case_id": n.id, "question": n.question, "tags": list(n.tags)}
        if _same(rubric, b, n):
            return {**item, "outcome": "tie", "identical": True}
        async with sem:
            with gateway.tag_scope("rubric", tag, n.id):
                try:
                    return {**item, **await _judge_pair(asker, rubric, b, n)}
                except (ReplyError, JudgeCallError) as exc:
                    return {**item, "error": str(exc)}

    try:
        res.items = list(await asyncio.gather(*(one(b, n) for b, n in pairs)))
    finally:
        await client.aclose()
    points = []
    for it in res.items:
        if it.get("error"):
            res.errored += 1
            continue
        res.identical += bool(it.get("identical"))
        if not it.get("identical"):
            res.n_both_orders += 1
            res.position_flips += it["flipped"]
        res.wins += it["outcome"] == "new"
        res.losses += it["outcome"] == "base"
        res.ties += it["outcome"] == "tie"
        points.append({"new": 1.0, "tie": 0.0, "base": -1.0}[it["outcome"]])
    if points:
        res.net = sum(points) / len(points)
        zeros = [0.0] * len(points)
        res.net_low, res.net_high = paired_bootstrap_ci(zeros, points, confidence, n_resamples, seed)
    usage = gateway.usage("rubric", tag)
    res.judge_calls = usage.calls + usage.cache_hits
    res.stub = bool(gateway.stub_detected)
    res.structured = asker.structured
    return res
