"""Summaries of scores: per backend and metric, overall and per tag.

Undefined and failed scores are counted, never averaged as 0 and never dropped. `Totals` adds
scores up as they come (a run in batches keeps its totals, not its scores); `summarize` is the same
over scores in memory.
"""

from __future__ import annotations

from typing import Iterable, Optional, Sequence

from .schema import Case, Score, ScoreBlock

__all__ = ["summarize", "Totals", "ALL"]

ALL = "(all)"
COLUMNS = ["backend", "metric", "tag", "mean", "n_scored", "n_undefined", "n_errored", "n", "n_claims",
           "unsupported_share"]

# the running sums of one (backend, metric, tag): n, scored, sum of values, undefined, errored,
# answers with claims, answers with an unsupported claim
_N, _SCORED, _SUM, _UNDEFINED, _ERRORED, _CLAIMS, _BAD = range(7)


class Totals:
    """Counts and sums per (backend, metric, tag), added one `Score` or `ScoreBlock` at a time;
    ``frame()`` is `summarize`'s table, ``counts()`` the manifest's score counts."""

    def __init__(self) -> None:
        self._groups: dict[tuple[str, str, str], list] = {}

    def _group(self, backend: str, metric: str, tag: str) -> list:
        key = (backend, metric, tag)
        group = self._groups.get(key)
        if group is None:
            group = self._groups[key] = [0, 0, 0.0, 0, 0, 0, 0]
        return group

    def add(self, score: Score, tags: Iterable[str] = ()) -> None:
        status = score.status
        claims = None
        if status == "scored":
            from .analysis import claim_counts

            claims = claim_counts(score)
        for tag in (ALL, *tags):
            g = self._group(score.backend, score.metric, tag)
            g[_N] += 1
            if status == "scored":
                g[_SCORED] += 1
                g[_SUM] += score.value
                if claims is not None:
                    g[_CLAIMS] += 1
                    g[_BAD] += 1 if claims[1] else 0
            elif status == "undefined":
                g[_UNDEFINED] += 1
            else:
                g[_ERRORED] += 1

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
        scored = [v for v in values if v is not None]
        g[_N] += len(values)
        g[_SCORED] += len(scored)
        g[_SUM] += sum(scored)
        g[_UNDEFINED] += len(values) - len(scored)

    def counts(self) -> dict[str, int]:
        """``scores``, ``scored``, ``undefined`` and ``errored`` over every backend and metric."""
        out = {"scores": 0, "scored": 0, "undefined": 0, "errored": 0}
        for (_, _, tag), g in self._groups.items():
            if tag == ALL:
                out["scores"] += g[_N]
                out["scored"] += g[_SCORED]
                out["undefined"] += g[_UNDEFINED]
                out["errored"] += g[_ERRORED]
        return out

    def frame(self, by_tag: bool = True):
        """A DataFrame with one row per (backend, metric, tag), as `summarize` describes."""
        import pandas as pd

        rows = [
            {
                "backend": backend, "metric": metric, "tag": tag,
                "mean": g[_SUM] / g[_SCORED] if g[_SCORED] else float("nan"),
                "n_scored": g[_SCORED], "n_undefined": g[_UNDEFINED], "n_errored": g[_ERRORED], "n": g[_N],
                "n_claims": g[_CLAIMS],
                "unsupported_share": g[_BAD] / g[_CLAIMS] if g[_CLAIMS] else float("nan"),
            }
            for (backend, metric, tag), g in self._groups.items() if by_tag or tag == ALL
        ]
        frame = pd.DataFrame(rows, columns=COLUMNS)
        if not frame.empty:
            frame["_all"] = frame["tag"] != ALL
            frame = frame.sort_values(["_all", "tag", "backend", "metric"]).drop(columns="_all")
        return frame.reset_index(drop=True)


def summarize(scores: Sequence[Score], cases: Sequence[Case] = (), by_tag: bool = True):
    """A DataFrame with one row per (backend, metric, tag): mean over scored cases and the counts.

    ``tag`` is ``"(all)"`` for the whole set; with ``by_tag`` there is one more row per tag found on
    the cases. ``mean`` is NaN when nothing was scored. Where the backend exposes claims
    (`ragbridge.analysis.claim_counts`), ``n_claims`` counts the scored answers that have claims and
    ``unsupported_share`` is the share of them with at least one unsupported claim (else 0 and NaN).
    """
    tags_of = {c.id: c.tags for c in cases} if by_tag else {}
    totals = Totals()
    for s in scores:
        totals.add(s, tags_of.get(s.case_id, ()))
    return totals.frame(by_tag)
