"""Scores out, in TruLens's layouts: ``get_records_and_feedback``'s one row per case (`records`) and
``get_leaderboard``'s one row per app version (`leaderboard`), written by `write_leaderboard` (what
``ragbridge trulens-leaderboard`` runs)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Optional

from ragbridge.plugin import Score, atomic_path

__all__ = ["FEEDBACK_NAMES", "UnknownCost", "leaderboard", "records", "unknown_cost", "write_leaderboard"]

#: canonical metric -> the feedback name TruLens's quickstarts and dashboard use
FEEDBACK_NAMES = {
    "faithfulness": "Groundedness",
    "context_relevance": "Context Relevance",
    "answer_relevance": "Answer Relevance",
    "answer_correctness": "Ground Truth Agreement",
}


def _scores_of(run_or_scores: Any) -> list[Score]:
    scores = getattr(run_or_scores, "scores", run_or_scores)
    return list(scores)


def _feedback_name(metric: str) -> str:
    return FEEDBACK_NAMES.get(metric, metric)


def records(run: Any, backend: Optional[str] = "trulens", app_name: str = "ragbridge"):
    """One row per case (and backend): TruLens's ``get_records_and_feedback`` columns.

    ``backend=None`` keeps every backend (``app_version`` tells them apart)."""
    import pandas as pd

    cases = {c.id: c for c in getattr(run, "cases", []) or []}
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for s in _scores_of(run):
        if backend is not None and s.backend != backend:
            continue
        key = (s.backend, s.case_id)
        row = rows.get(key)
        if row is None:
            case = cases.get(s.case_id)
            row = rows[key] = {"app_name": app_name, "app_version": s.backend, "record_id": s.case_id,
                               "input": case.question if case else None,
                               "output": case.answer if case else None,
                               "latency": 0.0, "total_tokens": 0, "total_cost": 0.0}
        row[_feedback_name(s.metric)] = s.value if s.status == "scored" else float("nan")
        row["latency"] += s.seconds
        row["total_tokens"] += s.prompt_tokens + s.completion_tokens
        if s.judge_calls:  # a judged call without a price costs an unknown amount: NaN, never 0
            row["total_cost"] += float("nan") if s.cost is None else s.cost
    df = pd.DataFrame(list(rows.values()))
    if df.empty:
        return df
    _say_unknown_cost(run, df)
    fixed = ["app_name", "app_version", "record_id", "input", "output"]
    feedback = sorted(c for c in df.columns if c not in fixed + ["latency", "total_tokens", "total_cost"])
    return df[fixed + feedback + ["latency", "total_tokens", "total_cost"]]


class UnknownCost(UserWarning):
    """``total_cost`` is unknown (NaN) in some rows: the judge model has no price."""


def unknown_cost(run: Any, frame: Any) -> Optional[str]:
    """Why ``total_cost`` is unknown (NaN) in rows of ``frame`` (`records`), or None when it is known
    everywhere: the judge model has no price in the judge's price table."""
    if "total_cost" not in frame or not frame["total_cost"].isna().any():
        return None
    unknown = frame[frame["total_cost"].isna()]
    versions = sorted(set(unknown["app_version"]))
    model = ((getattr(getattr(run, "manifest", None), "judge", None) or {}).get("model")) or "the judge model"
    return (f"total_cost is unknown (an empty CSV cell, JSON null) for {', '.join(versions)}: "
            f"{model!r} has no price in the judge's price table; runs judged with a price for it "
            f'([judge.prices."{model}"] input and output per million tokens in ragbridge.toml, or '
            f"JudgeConfig(prices=...)) know their cost")


def _say_unknown_cost(run: Any, frame: Any) -> None:
    note = unknown_cost(run, frame)
    if note:
        warnings.warn(note, UnknownCost, stacklevel=3)


def leaderboard(run: Any, backend: Optional[str] = "trulens", app_name: str = "ragbridge"):
    """``TruSession.get_leaderboard()``'s layout: index (app_name, app_version), sorted feedback
    columns (means over the scored cases; failed and undefined scores are left out, as NaN),
    then ``latency`` and ``total_cost``; rows sorted by the feedback columns, best first."""
    import pandas as pd

    df = records(run, backend=backend, app_name=app_name)
    if df.empty:
        return pd.DataFrame()
    fixed = ["app_name", "app_version", "record_id", "input", "output", "latency", "total_tokens",
             "total_cost"]
    feedback = sorted(c for c in df.columns if c not in fixed)
    groups = df.groupby(["app_name", "app_version"])
    board = groups[feedback + ["latency"]].mean()
    board["total_cost"] = groups["total_cost"].agg(lambda c: c.mean(skipna=False))  # one unknown: unknown
    return board.sort_values(by=feedback, ascending=False)


def write_leaderboard(run: Any, path: str | Path, backend: Optional[str] = "trulens",
                      per_record: bool = False) -> Path:
    """Write `leaderboard` (or `records`) to ``.csv`` or ``.json`` (records orient), whole or not at
    all (an earlier export stays as it was when the writing fails)."""
    path = Path(path)
    df = records(run, backend=backend) if per_record else leaderboard(run, backend=backend).reset_index()
    with atomic_path(path) as tmp:
        if path.suffix.lower() == ".json":
            tmp.write_text(df.to_json(orient="records", indent=1), encoding="utf-8")
        else:
            df.to_csv(tmp, index=False)
    return path
