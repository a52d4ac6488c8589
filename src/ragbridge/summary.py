"""Summaries of scores: per backend and metric, overall and per tag.

Undefined and failed scores are counted, never averaged as 0 and never dropped.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Sequence

from .schema import Case, Score

__all__ = ["summarize", "ALL"]

ALL = "(all)"
COLUMNS = ["backend", "metric", "tag", "mean", "n_scored", "n_undefined", "n_errored", "n", "n_claims",
           "unsupported_share"]


def summarize(scores: Sequence[Score], cases: Sequence[Case] = (), by_tag: bool = True):
    """A DataFrame with one row per (backend, metric, tag): mean over scored cases and the counts.

    ``tag`` is ``"(all)"`` for the whole set; with ``by_tag`` there is one more row per tag found on
    the cases. ``mean`` is NaN when nothing was scored. Where the backend exposes claims
    (`ragbridge.analysis.claim_counts`), ``n_claims`` counts the scored answers that have claims and
    ``unsupported_share`` is the share of them with at least one unsupported claim (else 0 and NaN).
    """
    import pandas as pd

    from .analysis import claim_counts

    tags_of = {c.id: c.tags for c in cases}
    groups: dict[tuple[str, str, str], list[Score]] = defaultdict(list)
    for s in scores:
        groups[(s.backend, s.metric, ALL)].append(s)
        if by_tag:
            for tag in tags_of.get(s.case_id, ()):
                groups[(s.backend, s.metric, tag)].append(s)
    rows = []
    for (backend, metric, tag), group in groups.items():
        values = [s.value for s in group if s.status == "scored"]
        claims = [found for s in group if s.status == "scored" and (found := claim_counts(s)) is not None]
        rows.append(
            {
                "backend": backend,
                "metric": metric,
                "tag": tag,
                "mean": sum(values) / len(values) if values else float("nan"),
                "n_scored": len(values),
                "n_undefined": sum(1 for s in group if s.status == "undefined"),
                "n_errored": sum(1 for s in group if s.status == "error"),
                "n": len(group),
                "n_claims": len(claims),
                "unsupported_share": (sum(1 for _, bad in claims if bad) / len(claims)) if claims
                else float("nan"),
            }
        )
    frame = pd.DataFrame(rows, columns=COLUMNS)
    if not frame.empty:
        frame["_all"] = frame["tag"] != ALL
        frame = frame.sort_values(["_all", "tag", "backend", "metric"]).drop(columns="_all")
    return frame.reset_index(drop=True)
