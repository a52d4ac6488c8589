"""Runs as the analyses read them: a run folder opened with an error that says what is wrong, and its
scores as a table of (metric, backend) -> case -> score, paired by case id.

Every analysis counts, per backend, the cases that were ``undefined`` (value null, no error),
``errored`` and ``missing`` (no score line at all), so none is dropped silently; only cases both
sides scored enter a figure.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence, Union

from ..errors import UserError
from ..run import Run, RunError, load_run
from ..schema import Score
from ..verdicts import verdict

__all__ = ["AnalysisError", "ScoreTable", "open_run"]


class AnalysisError(UserError, ValueError):
    """An analysis that cannot run as asked (unknown backend or metric, bad labels, nothing to compare)."""


def open_run(run: Union[Run, str, Path], what: str = "", error: type = AnalysisError) -> Run:
    """``run`` itself, or the run folder at that path read; raises ``error`` (its message starting
    with ``what``, e.g. ``"base run"``) when the path is not a run folder."""
    if isinstance(run, Run):
        return run
    path = Path(run)
    prefix = f"{what}: " if what else ""
    if not path.exists():
        raise error(f"{prefix}{path} is not a run folder: it does not exist")
    if not path.is_dir():
        raise error(f"{prefix}{path} is not a run folder (a folder written by `ragbridge run`)")
    try:
        return load_run(path)
    except RunError as exc:
        raise error(f"{prefix}{exc}") from None
    except ValueError as exc:  # a damaged cases.jsonl
        raise error(f"{prefix}{path}: {exc}") from None


@dataclass
class ScoreTable:
    """Scores indexed by (metric, backend) -> case_id -> Score, with the run's case order."""

    run: Run
    by_mb: dict[tuple[str, str], dict[str, Score]]
    case_ids: list[str]
    questions: dict[str, str]

    @classmethod
    def of(cls, run: Run) -> "ScoreTable":
        by_mb: dict[tuple[str, str], dict[str, Score]] = defaultdict(dict)
        for s in run.scores:
            by_mb[(s.metric, s.backend)][s.case_id] = s
        case_ids = [c.id for c in run.cases]
        seen = set(case_ids)
        for s in run.scores:
            if s.case_id not in seen:
                seen.add(s.case_id)
                case_ids.append(s.case_id)
        return cls(run, dict(by_mb), case_ids, {c.id: c.question for c in run.cases})

    def metrics(self) -> list[str]:
        return list(dict.fromkeys(m for m, _ in self.by_mb))

    def backends(self) -> set[str]:
        return {b for _, b in self.by_mb}

    def backends_of(self, metric: str) -> list[str]:
        names = [b for m, b in self.by_mb if m == metric]
        return sorted(names, key=lambda b: (b != "native", b))

    def status_counts(self, metric: str, backend: str) -> dict[str, int]:
        got = self.by_mb.get((metric, backend), {})
        counts = {"scored": 0, "undefined": 0, "errored": 0, "missing": 0}
        for cid in self.case_ids:
            s = got.get(cid)
            if s is None:
                counts["missing"] += 1
            else:
                counts[{"scored": "scored", "undefined": "undefined", "error": "errored"}[s.status]] += 1
        return counts

    def values(self, metric: str, backend: str) -> dict[str, float]:
        return {cid: s.value for cid, s in self.by_mb.get((metric, backend), {}).items()
                if s.status == "scored"}

    def verdicts(self, metric: str, backend: str, threshold: float) -> dict[str, bool]:
        """Each scored case's pass/fail at ``threshold`` (`ragbridge.verdicts.verdict`)."""
        return {cid: bool(verdict(s, threshold)) for cid, s in self.by_mb.get((metric, backend), {}).items()
                if s.status == "scored"}

    def select_metrics(self, metrics: Optional[Sequence[str]]) -> list[str]:
        """The metrics asked for (``recall`` names every ``recall@k``); all when none are."""
        have = self.metrics()
        if not metrics:
            return have
        out = []
        for m in metrics:
            hits = [h for h in have if h == m or h.split("@", 1)[0] == m]
            if not hits:
                raise AnalysisError(
                    f"metric {m!r} is not in this run; metrics scored: {', '.join(have) or 'none'}"
                )
            out.extend(h for h in hits if h not in out)
        return out

    def check_backends(self, backends: Optional[Sequence[str]]) -> Optional[set[str]]:
        """The backends asked for, each checked to have scores; None when none are asked for."""
        if not backends:
            return None
        have = self.backends()
        for b in backends:
            if b not in have:
                raise AnalysisError(
                    f"backend {b!r} has no scores in this run; backends: {', '.join(sorted(have)) or 'none'}"
                )
        return set(backends)
