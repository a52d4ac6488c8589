"""Cross-checking backends: agreement, validation against human labels, threshold calibration.

Three analyses read a run folder and return pandas DataFrames (the ``ragbridge compare``,
``ragbridge validate`` and ``ragbridge calibrate`` commands print the same frames):

`compare`
    For every canonical metric scored by two or more backends, the agreement of each pair of
    backends on the cases both scored: Spearman and Kendall (tau-b) rank correlation, Pearson
    correlation, mean absolute difference, and at a threshold per backend (``value >= threshold``
    passes; default 0.5) Cohen's kappa, percent agreement and the 2x2 confusion table.
    `disagreements` lists the cases where the backends differ most, with every backend's value and
    reason.
`validate`
    Human labels (pass/fail, or graded) per case and metric against each backend's verdict at its
    threshold. "Positive" is *pass*: ``tpr`` is the share of human-passed answers the backend passes,
    ``tnr`` the share of human-failed answers the backend fails (how many real failures it catches),
    so a judge that agrees 90% overall but misses half of the rare failures shows ``tnr`` 0.5.
    Also Cohen's kappa, balanced accuracy, and, where a backend exposes its claims (``Score.evidence``,
    else its ``native_value``), the share of answers with at least one unsupported claim.
`calibrate`
    For a migration, the threshold in a target backend that best reproduces the source backend's
    pass/fail at its threshold (maximum kappa), the agreement it reaches and the cases that still flip.

From Python (a run folder path or a `ragbridge.Run`)::

    from ragbridge.analysis import compare, disagreements, validate, calibrate, calibration_flips
    compare("runs/x", metrics=["faithfulness"], thresholds={"rubric": 0.7})  # one row per pair
    disagreements("runs/x", top=10)                  # each backend's value and reason per case
    validate("runs/x", "labels.jsonl")               # one row per metric and backend
    curve = calibrate("runs/x", "old-backend", "new-backend", "faithfulness", threshold=0.7)
    best = curve[curve.best].iloc[0]                 # threshold, kappa, agreement, flips

Cases a backend could not score are never dropped silently: every frame counts, per backend,
the cases that were ``undefined`` (value null, no error), ``errored`` and ``missing`` (no score line
at all); only cases both sides scored enter a figure.

Statistics. Point estimates come from scipy (``spearmanr``, ``kendalltau``, ``pearsonr``,
``binomtest``) and scikit-learn (``mean_absolute_error``, ``cohen_kappa_score``, ``accuracy_score``,
``confusion_matrix``, ``recall_score``, ``balanced_accuracy_score``). Intervals are 95% bootstrap
intervals from ``scipy.stats.bootstrap`` (paired resampling of cases, BCa, a fixed seed, 1000
resamples by default; resamples where a figure is undefined, e.g. kappa when one side is constant,
are left out, and when BCa cannot be computed the percentile interval is used). Rates (``tpr``,
``tnr``, the unsupported-claim share) get Wilson score intervals from ``scipy.stats.binomtest``,
which stay meaningful for the few failures a golden set usually holds. To keep 1000 resamples fast,
the bootstrap evaluates each figure on all resamples at once: Pearson with ``scipy.stats.pearsonr``
along an axis, Spearman as Pearson of ``scipy.stats.rankdata`` ranks, and Kendall's tau-b, kappa,
agreement and balanced accuracy from their definitions (no library offers them vectorised); each
vectorised form is checked against the library's point estimate on the observed sample.
"""

from __future__ import annotations

import json
import math
import warnings
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, List, Mapping, Optional, Sequence, Union

import numpy as np
import typer

from .hookspecs import hookimpl
from .metrics import DEFAULT_PASS_MARK, GENERATION, RETRIEVAL, half_of
from .output import num, one_line, print_json, print_lines, print_table, records
from .run import Run, RunError, load_run
from .schema import Score

__all__ = [
    "AnalysisError",
    "Thresholds",
    "compare",
    "disagreements",
    "coverage",
    "validate",
    "load_labels",
    "calibrate",
    "calibration_flips",
    "unsupported_claims",
    "claim_counts",
    "bootstrap_interval",
    "wilson_interval",
    "FIGURES",
]

DEFAULT_THRESHOLD = DEFAULT_PASS_MARK
DEFAULT_RESAMPLES = 1000
CONFIDENCE = 0.95

FIGURES = ("spearman", "kendall", "pearson", "mae", "kappa", "agreement")
FIGURE_NAMES = {"spearman": "Spearman", "kendall": "Kendall", "pearson": "Pearson", "mae": "MAE",
                "kappa": "kappa", "agreement": "agreement"}


class AnalysisError(ValueError):
    """An analysis that cannot run as asked (unknown backend or metric, bad labels, nothing to compare)."""


# --------------------------------------------------------------------------------------------
# Thresholds


@dataclass
class Thresholds:
    """Pass/fail thresholds: ``value >= threshold`` passes.

    The most specific setting wins: ``(backend, metric)``, then ``backend``, then ``metric``, then
    ``default``. Built from the command line's ``--threshold`` values with `Thresholds.parse`.
    """

    default: float = DEFAULT_THRESHOLD
    by_backend: dict[str, float] = field(default_factory=dict)
    by_metric: dict[str, float] = field(default_factory=dict)
    by_pair: dict[tuple[str, str], float] = field(default_factory=dict)

    def get(self, backend: str, metric: str) -> float:
        if (backend, metric) in self.by_pair:
            return self.by_pair[(backend, metric)]
        if backend in self.by_backend:
            return self.by_backend[backend]
        if metric in self.by_metric:
            return self.by_metric[metric]
        return self.default

    @classmethod
    def parse(
        cls, specs: Union[None, float, str, "Thresholds", Mapping[str, float], Iterable[Any]],
        backends: Iterable[str] = (),
    ) -> "Thresholds":
        """From ``0.7``, ``{"rubric": 0.7}`` or strings ``"0.7"``, ``"rubric=0.7"``,
        ``"rubric:faithfulness=0.7"``, ``"faithfulness=0.6"``. A name on the left of ``=`` is a backend
        when it is one of ``backends`` (or contains no metric-like characters and is not a known
        metric), else a metric."""
        if isinstance(specs, Thresholds):
            return specs
        out = cls()
        if specs is None:
            return out
        if isinstance(specs, (int, float)) and not isinstance(specs, bool):
            out.default = _check_threshold(float(specs), str(specs))
            return out
        if isinstance(specs, str):
            specs = [specs]
        if isinstance(specs, Mapping):
            specs = [f"{k}={v}" for k, v in specs.items()]
        known_backends = set(backends)
        for spec in specs:
            text = str(spec).strip()
            if "=" not in text:
                out.default = _check_threshold(_to_float(text, text), text)
                continue
            name, _, raw = text.partition("=")
            name = name.strip()
            value = _check_threshold(_to_float(raw.strip(), text), text)
            if ":" in name:
                b, _, m = name.partition(":")
                out.by_pair[(b.strip(), m.strip())] = value
            elif name in known_backends or (
                not known_backends and "@" not in name and name.split("@")[0] not in RETRIEVAL
                and name not in GENERATION
            ):
                out.by_backend[name] = value
            else:
                out.by_metric[name] = value
        return out


def _to_float(raw: str, spec: str) -> float:
    try:
        return float(raw)
    except ValueError:
        raise AnalysisError(
            f"bad threshold {spec!r}: expected a number, BACKEND=NUMBER, METRIC=NUMBER or "
            "BACKEND:METRIC=NUMBER"
        ) from None


def _check_threshold(value: float, spec: str) -> float:
    if not math.isfinite(value):
        raise AnalysisError(f"bad threshold {spec!r}: must be a finite number")
    return value


# --------------------------------------------------------------------------------------------
# Reading scores


def _as_run(run: Union[Run, str, Path]) -> Run:
    if isinstance(run, Run):
        return run
    try:
        return load_run(run)
    except RunError as exc:
        raise AnalysisError(str(exc)) from None


@dataclass
class _Table:
    """Scores indexed by (metric, backend) -> case_id -> Score, with the run's case order."""

    run: Run
    by_mb: dict[tuple[str, str], dict[str, Score]]
    case_ids: list[str]
    questions: dict[str, str]

    @classmethod
    def of(cls, run: Run) -> "_Table":
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

    def backends_of(self, metric: str) -> list[str]:
        names = [b for m, b in self.by_mb if m == metric]
        return sorted(names, key=lambda b: (b != "native", b))

    def planned(self, metric: str, backend: str) -> bool:
        return (metric, backend) in self.by_mb or metric in self.run.manifest.metrics.get(backend, [])

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


def _select_metrics(table: _Table, metrics: Optional[Sequence[str]]) -> list[str]:
    have = table.metrics()
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


def _check_backends(table: _Table, backends: Optional[Sequence[str]]) -> Optional[set[str]]:
    if not backends:
        return None
    have = {b for _, b in table.by_mb}
    for b in backends:
        if b not in have:
            raise AnalysisError(
                f"backend {b!r} has no scores in this run; backends: {', '.join(sorted(have)) or 'none'}"
            )
    return set(backends)


# --------------------------------------------------------------------------------------------
# Statistics: library point estimates, vectorised replicates for the bootstrap


def _point(fn: Callable[[], float]) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            v = float(fn())
        except (ValueError, ZeroDivisionError, FloatingPointError):
            return float("nan")
    return v if math.isfinite(v) else float("nan")


def spearman(x, y) -> float:
    from scipy import stats

    return _point(lambda: stats.spearmanr(x, y).statistic) if len(x) >= 2 else float("nan")


def kendall(x, y) -> float:
    from scipy import stats

    return _point(lambda: stats.kendalltau(x, y).statistic) if len(x) >= 2 else float("nan")


def pearson(x, y) -> float:
    from scipy import stats

    return _point(lambda: stats.pearsonr(x, y).statistic) if len(x) >= 2 else float("nan")


def mae(x, y) -> float:
    from sklearn.metrics import mean_absolute_error

    return _point(lambda: mean_absolute_error(x, y)) if len(x) else float("nan")


def kappa(a, b) -> float:
    from sklearn.metrics import cohen_kappa_score

    return _point(lambda: cohen_kappa_score(list(a), list(b), labels=[False, True])) if len(a) else float("nan")


def agreement(a, b) -> float:
    from sklearn.metrics import accuracy_score

    return _point(lambda: accuracy_score(list(a), list(b))) if len(a) else float("nan")


def confusion(a, b) -> tuple[int, int, int, int]:
    """``(both pass, a pass b fail, a fail b pass, both fail)`` from sklearn's confusion matrix."""
    from sklearn.metrics import confusion_matrix

    if not len(a):
        return (0, 0, 0, 0)
    m = confusion_matrix(list(a), list(b), labels=[True, False])
    return int(m[0, 0]), int(m[0, 1]), int(m[1, 0]), int(m[1, 1])


def _pearson_v(x, y, axis=-1):
    from scipy import stats

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return stats.pearsonr(x, y, axis=axis).statistic


def _spearman_v(x, y, axis=-1):
    from scipy import stats

    return _pearson_v(stats.rankdata(x, axis=axis), stats.rankdata(y, axis=axis), axis=axis)


def _kendall_v(x, y, axis=-1):
    """Kendall's tau-b on each row: sum(sign dx * sign dy) / sqrt(pairs untied in x * untied in y)."""
    x = np.moveaxis(np.asarray(x, float), axis, -1)
    y = np.moveaxis(np.asarray(y, float), axis, -1)
    n = x.shape[-1]
    if n > 100:  # the pairwise form costs n^2 per row: beyond ~100 cases scipy row by row is faster
        from scipy import stats

        flat_x, flat_y = x.reshape(-1, n), y.reshape(-1, n)
        out = np.array([_point(lambda a=a, b=b: stats.kendalltau(a, b).statistic)
                        for a, b in zip(flat_x, flat_y)])
        return out.reshape(x.shape[:-1])
    dx = np.sign(x[..., :, None] - x[..., None, :])
    dy = np.sign(y[..., :, None] - y[..., None, :])
    num = (dx * dy).sum(axis=(-1, -2))
    den = np.sqrt((dx * dx).sum(axis=(-1, -2)) * (dy * dy).sum(axis=(-1, -2)))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1), np.nan)


def _mae_v(x, y, axis=-1):
    return np.mean(np.abs(np.asarray(x) - np.asarray(y)), axis=axis)


def _kappa_v(a, b, axis=-1):
    """Cohen's kappa of two binary raters on each row: (po - pe) / (1 - pe)."""
    a = np.asarray(a, float)
    b = np.asarray(b, float)
    po = np.mean(a == b, axis=axis)
    pa, pb = np.mean(a, axis=axis), np.mean(b, axis=axis)
    pe = pa * pb + (1 - pa) * (1 - pb)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(pe < 1, (po - pe) / np.where(pe < 1, 1 - pe, 1), np.nan)


def _agreement_v(a, b, axis=-1):
    return np.mean(np.asarray(a, float) == np.asarray(b, float), axis=axis)


def _balanced_accuracy_v(truth, pred, axis=-1):
    """Mean of the recall of each class (truth 1 and truth 0) on each row."""
    t = np.asarray(truth, float)
    p = np.asarray(pred, float)
    pos, neg = np.sum(t, axis=axis), np.sum(1 - t, axis=axis)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpr = np.sum(t * p, axis=axis) / pos
        tnr = np.sum((1 - t) * (1 - p), axis=axis) / neg
    return np.where((pos > 0) & (neg > 0), (tpr + tnr) / 2, np.nan)


def bootstrap_interval(
    statistic: Callable, data: Sequence[Sequence[float]], n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0, confidence: float = CONFIDENCE,
) -> tuple[float, float]:
    """Paired bootstrap interval of a vectorised ``statistic(*data, axis=-1)`` with
    ``scipy.stats.bootstrap`` (BCa; percentile over the defined resamples when BCa is undefined).
    ``(nan, nan)`` when fewer than 3 cases or fewer than half the resamples are defined."""
    from scipy import stats

    arrays = [np.asarray(d, float) for d in data]
    n = len(arrays[0])
    if n_resamples <= 0 or n < 3:
        return (float("nan"), float("nan"))
    batch = max(1, int(4_000_000 // (n * n))) if n <= 100 else None
    res = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for method in ("BCa", "percentile"):
            try:
                res = stats.bootstrap(
                    arrays, statistic, paired=True, vectorized=True, n_resamples=n_resamples,
                    confidence_level=confidence, method=method, batch=batch,
                    rng=np.random.default_rng(seed),
                )
            except (ValueError, FloatingPointError, ZeroDivisionError):
                continue
            lo, hi = res.confidence_interval
            if math.isfinite(lo) and math.isfinite(hi):
                return (float(lo), float(hi))
            break
    if res is None:
        return (float("nan"), float("nan"))
    dist = np.asarray(res.bootstrap_distribution, float).ravel()
    ok = dist[np.isfinite(dist)]
    if ok.size < 0.5 * dist.size or ok.size == 0:
        return (float("nan"), float("nan"))
    alpha = (1 - confidence) / 2
    lo, hi = np.quantile(ok, [alpha, 1 - alpha])
    return (float(lo), float(hi))


def wilson_interval(k: int, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Wilson score interval of a proportion k/n (``scipy.stats.binomtest``)."""
    from scipy import stats

    if n <= 0:
        return (float("nan"), float("nan"))
    ci = stats.binomtest(int(k), int(n)).proportion_ci(confidence_level=confidence, method="wilson")
    return (float(ci.low), float(ci.high))


def _rate(k: int, n: int) -> float:
    return k / n if n else float("nan")


# --------------------------------------------------------------------------------------------
# compare


def _pairs(names: Sequence[str]) -> list[tuple[str, str]]:
    return [(a, b) for i, a in enumerate(names) for b in names[i + 1:]]


def compare(
    run: Union[Run, str, Path],
    metrics: Optional[Sequence[str]] = None,
    backends: Optional[Sequence[str]] = None,
    thresholds: Any = None,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    confidence: float = CONFIDENCE,
):
    """Agreement of every pair of backends on every canonical metric two or more of them scored.

    One row per (metric, backend_a, backend_b): the case counts (``n_paired`` cases both scored;
    per side ``*_undefined``, ``*_errored``, ``*_missing``), each figure of `FIGURES` with its
    bootstrap interval (``<figure>_low``, ``<figure>_high``), the thresholds used and the confusion
    table ``both_pass``, ``a_pass_b_fail``, ``a_fail_b_pass``, ``both_fail``, and the means of each
    side over the paired cases. ``thresholds``: see `Thresholds.parse`.
    """
    import pandas as pd

    run = _as_run(run)
    table = _Table.of(run)
    wanted = _select_metrics(table, metrics)
    only = _check_backends(table, backends)
    th = Thresholds.parse(thresholds, {b for _, b in table.by_mb})
    rows = []
    for metric in wanted:
        names = [b for b in table.backends_of(metric) if only is None or b in only]
        for a, b in _pairs(names):
            rows.append(_compare_pair(table, metric, a, b, th, n_resamples, seed, confidence))
    columns = _COMPARE_COLUMNS
    frame = pd.DataFrame(rows, columns=columns)
    if metrics and frame.empty:
        raise AnalysisError(
            "no metric asked for is scored by two or more backends: "
            + "; ".join(f"{m}: {', '.join(table.backends_of(m)) or 'none'}" for m in wanted)
        )
    return frame


_COMPARE_COLUMNS = (
    ["metric", "half", "backend_a", "backend_b", "n_cases", "n_paired"]
    + [f"{side}_{k}" for side in ("a", "b") for k in ("scored", "undefined", "errored", "missing")]
    + ["threshold_a", "threshold_b"]
    + [c for f in FIGURES for c in (f, f"{f}_low", f"{f}_high")]
    + ["both_pass", "a_pass_b_fail", "a_fail_b_pass", "both_fail", "mean_a", "mean_b"]
)


def _compare_pair(table: _Table, metric: str, a: str, b: str, th: Thresholds, n_resamples: int,
                  seed: int, confidence: float) -> dict[str, Any]:
    va, vb = table.values(metric, a), table.values(metric, b)
    ids = [cid for cid in table.case_ids if cid in va and cid in vb]
    x = np.array([va[c] for c in ids], float)
    y = np.array([vb[c] for c in ids], float)
    ta, tb = th.get(a, metric), th.get(b, metric)
    pa, pb = x >= ta, y >= tb
    row: dict[str, Any] = {
        "metric": metric, "half": half_of(metric), "backend_a": a, "backend_b": b,
        "n_cases": len(table.case_ids), "n_paired": len(ids),
    }
    for side, name in (("a", a), ("b", b)):
        for k, v in table.status_counts(metric, name).items():
            row[f"{side}_{k}"] = v
    row["threshold_a"], row["threshold_b"] = ta, tb
    points = {
        "spearman": (spearman(x, y), _spearman_v, (x, y)),
        "kendall": (kendall(x, y), _kendall_v, (x, y)),
        "pearson": (pearson(x, y), _pearson_v, (x, y)),
        "mae": (mae(x, y), _mae_v, (x, y)),
        "kappa": (kappa(pa, pb), _kappa_v, (pa, pb)),
        "agreement": (agreement(pa, pb), _agreement_v, (pa, pb)),
    }
    for i, (name, (value, vec, data)) in enumerate(points.items()):
        row[name] = value
        if math.isnan(value):
            row[f"{name}_low"] = row[f"{name}_high"] = float("nan")
            continue
        lo, hi = bootstrap_interval(vec, data, n_resamples, seed + i, confidence)
        row[f"{name}_low"], row[f"{name}_high"] = lo, hi
    row["both_pass"], row["a_pass_b_fail"], row["a_fail_b_pass"], row["both_fail"] = confusion(pa, pb)
    row["mean_a"] = float(x.mean()) if len(x) else float("nan")
    row["mean_b"] = float(y.mean()) if len(y) else float("nan")
    return row


def coverage(run: Union[Run, str, Path], metrics: Optional[Sequence[str]] = None):
    """Per (metric, backend): how many cases were scored, undefined, errored or missing."""
    import pandas as pd

    run = _as_run(run)
    table = _Table.of(run)
    rows = []
    for metric in _select_metrics(table, metrics):
        for b in table.backends_of(metric):
            rows.append({"metric": metric, "backend": b, **table.status_counts(metric, b)})
    return pd.DataFrame(rows, columns=["metric", "backend", "scored", "undefined", "errored", "missing"])


def disagreements(
    run: Union[Run, str, Path],
    metrics: Optional[Sequence[str]] = None,
    backends: Optional[Sequence[str]] = None,
    thresholds: Any = None,
    top: Optional[int] = 10,
):
    """The cases where backends disagree most, per metric scored by two or more backends.

    One row per (metric, case): ``spread`` (largest minus smallest value among the backends that
    scored the case), ``verdicts_differ`` (pass/fail at the thresholds differ), and for every
    backend ``<backend>.value``, ``<backend>.status``, ``<backend>.reason`` (the error message when
    it failed). Sorted by spread, then verdict flips; ``top`` cases per metric (None: all with a
    spread or a flip).
    """
    import pandas as pd

    run = _as_run(run)
    table = _Table.of(run)
    wanted = _select_metrics(table, metrics)
    only = _check_backends(table, backends)
    th = Thresholds.parse(thresholds, {b for _, b in table.by_mb})
    rows = []
    all_backends: list[str] = []
    for metric in wanted:
        names = [b for b in table.backends_of(metric) if only is None or b in only]
        if len(names) < 2:
            continue
        all_backends.extend(n for n in names if n not in all_backends)
        found = []
        for cid in table.case_ids:
            got = {n: table.by_mb.get((metric, n), {}).get(cid) for n in names}
            values = {n: s.value for n, s in got.items() if s is not None and s.status == "scored"}
            if len(values) < 2:
                continue
            spread = max(values.values()) - min(values.values())
            verdicts = {v >= th.get(n, metric) for n, v in values.items()}
            differ = len(verdicts) > 1
            if spread <= 0 and not differ:
                continue
            row: dict[str, Any] = {
                "metric": metric, "case_id": cid, "question": table.questions.get(cid, ""),
                "spread": spread, "verdicts_differ": differ, "n_backends": len(values),
            }
            for n, s in got.items():
                row[f"{n}.value"] = s.value if s is not None else None
                row[f"{n}.status"] = s.status if s is not None else "missing"
                row[f"{n}.passed"] = (s.value >= th.get(n, metric)) if s is not None and s.status == "scored" else None
                row[f"{n}.reason"] = (s.error or s.reason) if s is not None else None
            found.append(row)
        found.sort(key=lambda r: (-r["spread"], not r["verdicts_differ"]))
        rows.extend(found[:top] if top is not None else found)
    base = ["metric", "case_id", "question", "spread", "verdicts_differ", "n_backends"]
    per = [f"{n}.{k}" for n in all_backends for k in ("value", "status", "passed", "reason")]
    return pd.DataFrame(rows, columns=base + per)


# --------------------------------------------------------------------------------------------
# validate


_PASS_WORDS = {"pass", "passed", "yes", "y", "true", "t", "ok", "good", "correct", "faithful", "supported"}
_FAIL_WORDS = {"fail", "failed", "no", "n", "false", "f", "bad", "incorrect", "unfaithful", "unsupported"}
_LABEL_KEYS = ("label", "human", "passed", "pass", "verdict", "grade", "score", "value")


def load_labels(path: Union[str, Path], metric: Optional[str] = None):
    """Human labels from JSONL (one object a line) or CSV.

    Each record has ``case_id`` (or ``id``), ``metric`` (may be left out when ``metric`` is given)
    and the label under one of ``label``, ``human``, ``passed``, ``verdict``, ``grade``, ``score``:
    pass/fail words (``pass``, ``fail``, ``yes``, ``no``...), a boolean, or a number (a grade).
    Returns a DataFrame ``case_id, metric, grade, graded``: pass/fail labels are grades 1.0 / 0.0
    with ``graded`` False; numbers are grades with ``graded`` True (binarised by ``validate``'s
    ``label_threshold``).
    Raises `AnalysisError` naming the file and line for bad input.
    """
    import pandas as pd

    path = Path(path)
    if not path.exists():
        raise AnalysisError(f"{path}: no such labels file")
    records: list[tuple[int, dict]] = []
    if path.suffix.lower() == ".csv":
        try:
            df = pd.read_csv(path, dtype=str, keep_default_na=False)
        except Exception as exc:  # pandas raises many kinds
            raise AnalysisError(f"{path}: cannot read CSV: {exc}") from None
        records = [(i + 2, {k: v for k, v in r.items() if v != ""}) for i, r in enumerate(df.to_dict("records"))]
    else:
        with open(path, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise AnalysisError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from None
                if not isinstance(rec, dict):
                    raise AnalysisError(f"{path}:{lineno}: expected an object with case_id, metric, label")
                records.append((lineno, rec))
    rows = []
    seen: dict[tuple[str, str], int] = {}
    for lineno, rec in records:
        cid = rec.get("case_id", rec.get("id"))
        if cid is None or str(cid).strip() == "":
            raise AnalysisError(f"{path}:{lineno}: no case_id")
        m = rec.get("metric") or metric
        if not m:
            raise AnalysisError(f"{path}:{lineno}: no metric (add a metric field, or pass --metric)")
        key = next((k for k in _LABEL_KEYS if k in rec and rec[k] is not None), None)
        if key is None:
            raise AnalysisError(f"{path}:{lineno}: no label (one of: {', '.join(_LABEL_KEYS)})")
        grade = _grade(rec[key])
        if grade is None:
            raise AnalysisError(
                f"{path}:{lineno}: label {rec[key]!r} is neither pass/fail nor a number"
            )
        k2 = (str(cid), str(m))
        row = {"case_id": k2[0], "metric": k2[1], "grade": grade, "graded": _is_number(rec[key])}
        if k2 in seen:
            rows[seen[k2]] = row
        else:
            seen[k2] = len(rows)
            rows.append(row)
    if not rows:
        raise AnalysisError(f"{path}: no labels")
    return pd.DataFrame(rows, columns=["case_id", "metric", "grade", "graded"])


def _is_number(v: Any) -> bool:
    if isinstance(v, bool):
        return False
    if isinstance(v, (int, float)):
        return True
    if isinstance(v, str):
        try:
            float(v)
        except ValueError:
            return False
        return True
    return False


def _grade(v: Any) -> Optional[float]:
    if isinstance(v, bool):
        return 1.0 if v else 0.0
    if isinstance(v, (int, float)):
        return float(v) if math.isfinite(v) else None
    if isinstance(v, str):
        t = v.strip().lower()
        if t in _PASS_WORDS:
            return 1.0
        if t in _FAIL_WORDS:
            return 0.0
        try:
            f = float(t)
        except ValueError:
            return None
        return f if math.isfinite(f) else None
    return None


#: verdict words that mean "the claim is supported by the context"
_SUPPORTED = {"yes", "supported", "true", "1", "entailed", "entailment", "faithful"}
_CLAIM_LISTS = ("claims", "statements", "verdicts", "sentences", "statement_verdicts")
_VERDICT_KEYS = ("verdict", "supported", "label", "score", "attributed", "faithful")


def unsupported_claims(native_value: Any, threshold: float = 0.5) -> Optional[tuple[int, int]]:
    """``(claims, unsupported claims)`` found in a score's ``native_value``, or None when the
    backend exposes no claims.

    Understood shapes: a mapping with a list under ``claims``, ``statements``, ``verdicts`` or
    ``sentences`` whose items carry a verdict under ``verdict``, ``supported``, ``label``, ``score``
    or ``attributed`` (or are bare verdicts), e.g. a per-sentence grade
    ``{score, scale, statements: [{criteria, score}]}``. A verdict counts as
    supported when it is ``yes``, ``supported``, true or 1, or a number at or above ``threshold``
    (when grades above 1 occur, all grades are divided by the top of the mapping's ``scale``); ``no``, ``idk`` /
    ``borderline`` (not backed by the context) and lower numbers count as unsupported; a negative
    number (an unparsable grade) is left out.
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
    verdicts = [next((item[k] for k in _VERDICT_KEYS if k in item), None) if isinstance(item, Mapping) else item
                for item in items]
    raw = any(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 1 for v in verdicts)
    total = unsupported = 0
    for verdict in verdicts:
        if raw and isinstance(verdict, (int, float)) and not isinstance(verdict, bool) and verdict > 0:
            verdict = verdict / top  # grades on the backend's own scale
        ok = _supported(verdict, threshold)
        if ok is None:
            continue
        total += 1
        unsupported += 0 if ok else 1
    return (total, unsupported) if total else None


def claim_counts(score: Score) -> Optional[tuple[int, int]]:
    """``(claims, unsupported claims)`` of a score: its typed ``evidence.claims`` when the backend
    reports them, else what `unsupported_claims` finds in ``native_value``; None without claims."""
    if score.evidence is not None and score.evidence.claims is not None:
        claims = score.evidence.claims
        return (len(claims), len(score.evidence.unsupported())) if claims else None
    return unsupported_claims(score.native_value)


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


def validate(
    run: Union[Run, str, Path],
    labels: Any,
    metrics: Optional[Sequence[str]] = None,
    backends: Optional[Sequence[str]] = None,
    thresholds: Any = None,
    label_threshold: float = 0.5,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    confidence: float = CONFIDENCE,
):
    """Each backend's verdicts against human labels, per metric and backend.

    ``labels``: a path (see `load_labels`) or a DataFrame ``case_id, metric, grade[, graded]``;
    pass/fail labels are used as they are, a numeric grade at or above ``label_threshold`` is a
    human pass. Columns: ``n_labels`` (labels for this metric),
    ``n_paired`` (labelled cases the backend scored), ``unscored`` (labelled but undefined,
    errored or missing), ``human_pass``, ``human_fail``, the confusion ``tp`` (both pass), ``fn``
    (human pass, backend fail), ``fp`` (human fail, backend pass: a missed failure), ``tn``;
    ``tpr``, ``tnr`` (Wilson intervals), ``kappa``, ``balanced_accuracy`` (bootstrap intervals),
    ``agreement``; for graded labels ``spearman`` with the backend's value; and where the backend
    exposes claims, ``claims_answers`` and ``unsupported_share`` (answers with at least one
    unsupported claim, Wilson interval).
    """
    import pandas as pd

    run = _as_run(run)
    table = _Table.of(run)
    if not isinstance(labels, pd.DataFrame):
        labels = load_labels(labels, metric=metrics[0] if metrics and len(metrics) == 1 else None)
    only = _check_backends(table, backends)
    th = Thresholds.parse(thresholds, {b for _, b in table.by_mb})
    have = table.metrics()
    label_metrics = list(dict.fromkeys(labels["metric"]))
    if metrics:
        wanted = _select_metrics(table, metrics)
        label_metrics = [m for m in label_metrics if m in wanted or m.split("@")[0] in metrics]
    matched = [m for m in label_metrics if m in have]
    if not matched:
        raise AnalysisError(
            "no labelled metric is in this run: labels name "
            + (", ".join(dict.fromkeys(labels["metric"])) or "nothing")
            + f"; the run scored {', '.join(have) or 'nothing'}"
        )
    known = set(table.case_ids)
    rows = []
    for metric in matched:
        lab = labels[labels["metric"] == metric]
        grades = dict(zip(lab["case_id"], lab["grade"].astype(float)))
        is_graded = (dict(zip(lab["case_id"], lab["graded"].astype(bool))) if "graded" in lab
                     else {c: True for c in grades})
        human = {c: (g >= label_threshold) if is_graded[c] else (g >= 0.5) for c, g in grades.items()}
        unknown = sum(1 for c in grades if c not in known)
        graded = any(is_graded.values()) and len(set(grades.values())) > 2
        for b in table.backends_of(metric):
            if only is not None and b not in only:
                continue
            got = table.by_mb.get((metric, b), {})
            t = th.get(b, metric)
            ids = [c for c in grades if c in got and got[c].status == "scored"]
            truth = np.array([human[c] for c in ids], bool)
            value = np.array([got[c].value for c in ids], float)
            pred = value >= t
            st = {"undefined": 0, "errored": 0, "missing": 0}
            for c in grades:
                if c not in known:
                    continue
                s = got.get(c)
                if s is None:
                    st["missing"] += 1
                elif s.status == "undefined":
                    st["undefined"] += 1
                elif s.status == "error":
                    st["errored"] += 1
            tp, fn, fp, tn = confusion(truth, pred)
            row: dict[str, Any] = {
                "metric": metric, "backend": b, "threshold": t, "n_labels": len(grades),
                "labels_unknown_case": unknown, "n_paired": len(ids),
                "unscored": st["undefined"] + st["errored"] + st["missing"],
                "undefined": st["undefined"], "errored": st["errored"], "missing": st["missing"],
                "human_pass": int(truth.sum()), "human_fail": int((~truth).sum()),
                "tp": tp, "fn": fn, "fp": fp, "tn": tn,
            }
            row["tpr"] = _recall(truth, pred, True)
            row["tpr_low"], row["tpr_high"] = wilson_interval(tp, tp + fn, confidence)
            row["tnr"] = _recall(truth, pred, False)
            row["tnr_low"], row["tnr_high"] = wilson_interval(tn, tn + fp, confidence)
            row["kappa"] = kappa(truth, pred)
            row["kappa_low"], row["kappa_high"] = (
                bootstrap_interval(_kappa_v, (truth, pred), n_resamples, seed, confidence)
                if not math.isnan(row["kappa"]) else (float("nan"), float("nan")))
            row["balanced_accuracy"] = _balanced(truth, pred)
            row["balanced_accuracy_low"], row["balanced_accuracy_high"] = (
                bootstrap_interval(_balanced_accuracy_v, (truth, pred), n_resamples, seed + 1, confidence)
                if not math.isnan(row["balanced_accuracy"]) else (float("nan"), float("nan")))
            row["agreement"] = agreement(truth, pred)
            if graded:
                g = np.array([grades[c] for c in ids], float)
                row["spearman"] = spearman(g, value)
                row["spearman_low"], row["spearman_high"] = (
                    bootstrap_interval(_spearman_v, (g, value), n_resamples, seed + 2, confidence)
                    if not math.isnan(row["spearman"]) else (float("nan"), float("nan")))
            else:
                row["spearman"] = row["spearman_low"] = row["spearman_high"] = float("nan")
            n_claims = n_unsup = 0
            for c in grades:
                s = got.get(c)
                found = claim_counts(s) if s is not None else None
                if found is not None:
                    n_claims += 1
                    n_unsup += 1 if found[1] > 0 else 0
            row["claims_answers"] = n_claims
            row["unsupported_answers"] = n_unsup
            row["unsupported_share"] = _rate(n_unsup, n_claims)
            row["unsupported_share_low"], row["unsupported_share_high"] = wilson_interval(n_unsup, n_claims, confidence)
            rows.append(row)
    return pd.DataFrame(rows, columns=_VALIDATE_COLUMNS)


_VALIDATE_COLUMNS = [
    "metric", "backend", "threshold", "n_labels", "labels_unknown_case", "n_paired", "unscored",
    "undefined", "errored", "missing", "human_pass", "human_fail", "tp", "fn", "fp", "tn",
    "tpr", "tpr_low", "tpr_high", "tnr", "tnr_low", "tnr_high", "kappa", "kappa_low", "kappa_high",
    "balanced_accuracy", "balanced_accuracy_low", "balanced_accuracy_high", "agreement",
    "spearman", "spearman_low", "spearman_high", "claims_answers", "unsupported_answers",
    "unsupported_share", "unsupported_share_low", "unsupported_share_high",
]


def _recall(truth, pred, label: bool) -> float:
    from sklearn.metrics import recall_score

    if not np.any(truth == label):
        return float("nan")
    return _point(lambda: recall_score(truth, pred, pos_label=label, labels=[False, True], zero_division=np.nan))


def _balanced(truth, pred) -> float:
    from sklearn.metrics import balanced_accuracy_score

    if not (np.any(truth) and np.any(~truth)):
        return float("nan")
    return _point(lambda: balanced_accuracy_score(truth, pred))


# --------------------------------------------------------------------------------------------
# calibrate


def _paired_values(table: _Table, metric: str, source: str, target: str):
    for name in (source, target):
        if (metric, name) not in table.by_mb:
            have = table.backends_of(metric)
            raise AnalysisError(
                f"backend {name!r} did not score {metric!r} in this run; "
                f"backends that did: {', '.join(have) or 'none'}"
            )
    vs, vt = table.values(metric, source), table.values(metric, target)
    ids = [c for c in table.case_ids if c in vs and c in vt]
    return ids, np.array([vs[c] for c in ids], float), np.array([vt[c] for c in ids], float)


def calibrate(
    run: Union[Run, str, Path],
    source: str,
    target: str,
    metric: str,
    threshold: float = DEFAULT_THRESHOLD,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    confidence: float = CONFIDENCE,
):
    """The target threshold that best reproduces the source's pass/fail at ``threshold``.

    Returns one row per distinct target cut: ``threshold`` (a representative value: the midpoint of
    the interval of thresholds that give the same verdicts, ``threshold_low`` exclusive to
    ``threshold_high`` inclusive), ``kappa``, ``agreement``, ``flips`` (cases whose verdict still
    differs: ``source_pass_target_fail`` + ``source_fail_target_pass``) and ``target_pass_rate``;
    ``best`` marks the maximum kappa (ties: higher agreement, then the threshold closest to the
    source's). The best row also carries the bootstrap interval of its kappa and agreement
    (``kappa_low`` ...; computed on the same cases the threshold was chosen on, so optimistic).
    ``frame.attrs`` holds ``source``, ``target``, ``metric``, ``source_threshold``, ``n_paired``
    and the per-side counts of cases not scored.
    """
    import pandas as pd

    run = _as_run(run)
    table = _Table.of(run)
    metric = _select_metrics(table, [metric])[0]
    if source == target:
        raise AnalysisError("--from and --to name the same backend")
    ids, xs, xt = _paired_values(table, metric, source, target)
    threshold = _check_threshold(float(threshold), str(threshold))
    src_pass = xs >= threshold
    uniq = np.unique(xt)
    rows = []
    cuts: list[tuple[float, float, float]] = []  # (representative, low exclusive, high inclusive)
    if len(uniq):
        first = float(uniq[0])
        cuts.append((min(first, 0.0) if first > 0 else first, -math.inf, first))
        for lo, hi in zip(uniq[:-1], uniq[1:]):
            cuts.append(((float(lo) + float(hi)) / 2, float(lo), float(hi)))
        last = float(uniq[-1])
        above = (last + 1.0) / 2 if last < 1.0 else float(np.nextafter(last, math.inf))
        cuts.append((above, last, math.inf))
    for rep, lo, hi in cuts:
        tgt_pass = xt >= rep
        spass_tfail = int(np.sum(src_pass & ~tgt_pass))
        sfail_tpass = int(np.sum(~src_pass & tgt_pass))
        rows.append({
            "threshold": rep, "threshold_low": lo, "threshold_high": hi,
            "kappa": kappa(src_pass, tgt_pass), "agreement": agreement(src_pass, tgt_pass),
            "flips": spass_tfail + sfail_tpass, "source_pass_target_fail": spass_tfail,
            "source_fail_target_pass": sfail_tpass,
            "target_pass_rate": float(np.mean(tgt_pass)) if len(tgt_pass) else float("nan"),
        })
    frame = pd.DataFrame(rows, columns=["threshold", "threshold_low", "threshold_high", "kappa",
                                        "agreement", "flips", "source_pass_target_fail",
                                        "source_fail_target_pass", "target_pass_rate"])
    frame["best"] = False
    for c in ("kappa_low", "kappa_high", "agreement_low", "agreement_high"):
        frame[c] = float("nan")
    if not frame.empty:
        key = frame.assign(
            _k=frame["kappa"].fillna(-math.inf),
            _d=-(frame["threshold"] - threshold).abs(),
        ).sort_values(["_k", "agreement", "_d"], ascending=False)
        best = key.index[0]
        frame.loc[best, "best"] = True
        tgt_pass = xt >= frame.loc[best, "threshold"]
        if not math.isnan(frame.loc[best, "kappa"]):
            lo, hi = bootstrap_interval(_kappa_v, (src_pass, tgt_pass), n_resamples, seed, confidence)
            frame.loc[best, ["kappa_low", "kappa_high"]] = [lo, hi]
        lo, hi = bootstrap_interval(_agreement_v, (src_pass, tgt_pass), n_resamples, seed + 1, confidence)
        frame.loc[best, ["agreement_low", "agreement_high"]] = [lo, hi]
    frame.attrs.update({
        "source": source, "target": target, "metric": metric, "source_threshold": threshold,
        "n_paired": len(ids), "source_pass": int(src_pass.sum()),
        "source_unscored": {k: v for k, v in table.status_counts(metric, source).items() if k != "scored"},
        "target_unscored": {k: v for k, v in table.status_counts(metric, target).items() if k != "scored"},
    })
    return frame


def calibration_flips(
    run: Union[Run, str, Path], source: str, target: str, metric: str,
    source_threshold: float, target_threshold: float,
):
    """Cases whose pass/fail differs between the source at ``source_threshold`` and the target at
    ``target_threshold``: ``case_id, question, source_value, target_value, source_passed,
    target_passed, source_reason, target_reason``, sorted by how far the target value is from its
    threshold (the clearest flips first)."""
    import pandas as pd

    run = _as_run(run)
    table = _Table.of(run)
    metric = _select_metrics(table, [metric])[0]
    ids, xs, xt = _paired_values(table, metric, source, target)
    gs = table.by_mb[(metric, source)]
    gt = table.by_mb[(metric, target)]
    rows = []
    for cid, a, b in zip(ids, xs, xt):
        sp, tp = bool(a >= source_threshold), bool(b >= target_threshold)
        if sp == tp:
            continue
        rows.append({
            "case_id": cid, "question": table.questions.get(cid, ""),
            "source_value": float(a), "target_value": float(b),
            "source_passed": sp, "target_passed": tp,
            "source_reason": gs[cid].reason, "target_reason": gt[cid].reason,
            "_d": abs(b - target_threshold),
        })
    rows.sort(key=lambda r: -r["_d"])
    frame = pd.DataFrame(rows, columns=["case_id", "question", "source_value", "target_value",
                                        "source_passed", "target_passed", "source_reason",
                                        "target_reason", "_d"])
    return frame.drop(columns="_d")


# --------------------------------------------------------------------------------------------
# Command line


def fmt_ci(value: Any, low: Any, high: Any, digits: int = 2) -> str:
    """``0.81 [0.70, 0.89]``; ``—`` when undefined; no brackets when the interval is undefined."""
    text = num(value, digits)
    if text == "—":
        return text
    lo, hi = num(low, digits), num(high, digits)
    if lo == "—" or hi == "—":
        return text
    return f"{text} [{lo}, {hi}]"


def _unscored_note(row, side: str, name: str) -> str:
    parts = [f"{row[f'{side}_{k}']} {k}" for k in ("undefined", "errored", "missing") if row[f"{side}_{k}"]]
    return f"{name}: " + ", ".join(parts) if parts else ""


def _case_lines(case_id: str, heading: str, question: Any, sides: Sequence[tuple[str, str, Any]]) -> list:
    """A case as a block of plain lines: id, heading, question, then each backend's verdict and reason."""
    lines = [f"{case_id} ({heading})" if heading else case_id]
    if one_line(question):
        lines.append(f"  question: {one_line(question)}")
    for name, verdict, reason in sides:
        reason = one_line(reason)
        lines.append(f"  {name} {verdict}" + (f": {reason}" if reason else ""))
    return lines


@hookimpl
def ragbridge_register_commands(cli):
    from rich.markup import escape
    from rich.table import Table

    from .cli import err, fail, out

    def _run_or_fail(path: Path) -> Run:
        try:
            return _as_run(path)
        except AnalysisError as exc:
            fail(str(exc))

    @cli.command("compare")
    def compare_cmd(
        run: Path = typer.Argument(..., help="Run folder (holds run.json and scores.jsonl)."),
        metric: List[str] = typer.Option(None, "--metric", "-m", help="Metric to compare (repeatable). Default: every metric two or more backends scored."),
        backend: List[str] = typer.Option(None, "--backend", "-b", help="Only these backends (repeatable)."),
        threshold: List[str] = typer.Option(None, "--threshold", "-t", help="Pass threshold: 0.7 for all, rubric=0.7 per backend, rubric:faithfulness=0.7 per backend and metric (repeatable; default 0.5)."),
        top: int = typer.Option(5, "--top", help="Disagreeing cases to show per metric."),
        resamples: int = typer.Option(DEFAULT_RESAMPLES, "--resamples", help="Bootstrap resamples for the 95% intervals (0: none)."),
        seed: int = typer.Option(0, "--seed", help="Bootstrap seed."),
        as_json: bool = typer.Option(False, "--json", help="Print one JSON document instead of tables."),
    ) -> None:
        """Agreement between backends on each metric they share, and the cases they disagree on most."""
        r = _run_or_fail(run)
        try:
            frame = compare(r, metric or None, backend or None, threshold or None, resamples, seed)
            dis = disagreements(r, metric or None, backend or None, threshold or None, top)
        except AnalysisError as exc:
            fail(str(exc))
        if frame.empty:
            table = _Table.of(r)
            if not table.metrics():
                fail(f"nothing to compare: {run} holds no scores")
            fail("nothing to compare: no metric in this run is scored by two or more backends ("
                 + "; ".join(f"{m}: {', '.join(table.backends_of(m))}" for m in table.metrics()) + ")")
        if as_json:
            print_json({"run": str(r.path), "agreement": records(frame), "disagreements": records(dis)})
            return
        _print_agreement(out, r, frame)
        if not dis.empty:
            _print_disagreements(out, dis)

    def _print_agreement(console, r: Run, frame) -> None:
        t = Table(title=f"Agreement between backends ({escape(str(r.path))})", title_justify="left", show_lines=True)
        for col in ("metric", "pair", "paired", *FIGURE_NAMES.values(), "PP PF FP FF", "not scored"):
            t.add_column(col, justify="left" if col in ("metric", "pair", "not scored") else "right",
                         no_wrap=True)
        same_thresholds = len(set(frame["threshold_a"]) | set(frame["threshold_b"])) == 1
        lines = []
        for row in frame.to_dict("records"):
            a, b = row["backend_a"], row["backend_b"]
            notes = [n for n in (_unscored_note(row, "a", a), _unscored_note(row, "b", b)) if n]
            pair = f"{a} vs {b}"
            if not same_thresholds:
                pair += f"\nat {row['threshold_a']:g} / {row['threshold_b']:g}"
            t.add_row(
                escape(row["metric"]), escape(pair), f"{row['n_paired']}/{row['n_cases']}",
                *(fmt_ci(row[f], row[f"{f}_low"], row[f"{f}_high"]).replace(" [", "\n[") for f in FIGURES),
                f"{row['both_pass']} {row['a_pass_b_fail']} {row['a_fail_b_pass']} {row['both_fail']}",
                escape("\n".join(notes)) or "—",
            )
            lines += [
                f"{row['metric']}: {a} vs {b}, {row['n_paired']} of {row['n_cases']} cases scored by both",
                "  " + ", ".join(f"{name} {fmt_ci(row[f], row[f'{f}_low'], row[f'{f}_high'])}"
                                 for f, name in FIGURE_NAMES.items()),
                f"  verdicts at {row['threshold_a']:g}"
                + ("" if row["threshold_a"] == row["threshold_b"] else f" / {row['threshold_b']:g}")
                + f": both pass {row['both_pass']}, "
                f"only {a} passes {row['a_pass_b_fail']}, only {b} passes {row['a_fail_b_pass']}, "
                f"both fail {row['both_fail']}",
            ]
            lines += [f"  not scored: {'; '.join(notes)}"] if notes else []
        print_table(console, t, lines)
        print_lines(console, [
            "95% bootstrap intervals in brackets. PP PF FP FF: cases both pass, only A passes, "
            "only B passes, both fail"
            + (f" (threshold {frame['threshold_a'].iloc[0]:g})" if same_thresholds else "")
            + ". Only cases both backends scored enter a figure."
            + (" —: undefined (kappa when a backend passes or fails every case; a correlation when one side "
               "is constant)." if frame[list(FIGURES)].isna().any().any() else "")
        ], indent="")

    def _print_disagreements(console, dis) -> None:
        backends_in = [c[:-6] for c in dis.columns if c.endswith(".value")]
        for m, group in dis.groupby("metric", sort=False):
            names = [b for b in backends_in if group[f"{b}.status"].notna().any()]
            lines = [f"Largest disagreements: {m}"]
            for row in group.to_dict("records"):
                sides = []
                for b in names:
                    status = row[f"{b}.status"]
                    sides.append((b, num(row[f"{b}.value"]) if status == "scored" else (status or "missing"),
                                  row[f"{b}.reason"]))
                heading = f"spread {num(row['spread'])}"
                heading += ", verdicts differ" if row["verdicts_differ"] else ""
                lines += _case_lines(row["case_id"], heading, row["question"], sides)
            print_lines(console, lines)

    @cli.command("validate")
    def validate_cmd(
        run: Path = typer.Argument(..., help="Run folder."),
        labels: Path = typer.Option(..., "--labels", "-l", help="Human labels: JSONL or CSV with case_id, metric, label (pass/fail or a grade)."),
        metric: List[str] = typer.Option(None, "--metric", "-m", help="Only these metrics (repeatable); with one metric, label lines may omit it."),
        backend: List[str] = typer.Option(None, "--backend", "-b", help="Only these backends (repeatable)."),
        threshold: List[str] = typer.Option(None, "--threshold", "-t", help="Backend pass threshold: 0.7, rubric=0.7 or rubric:faithfulness=0.7 (repeatable; default 0.5)."),
        label_threshold: float = typer.Option(0.5, "--label-threshold", help="A human grade at or above this is a pass (e.g. 3 for a 1-5 scale)."),
        resamples: int = typer.Option(DEFAULT_RESAMPLES, "--resamples", help="Bootstrap resamples (0: none)."),
        seed: int = typer.Option(0, "--seed", help="Bootstrap seed."),
        as_json: bool = typer.Option(False, "--json", help="Print one JSON document instead of a table."),
    ) -> None:
        """Each backend's verdicts against human labels: TPR, TNR, kappa, balanced accuracy."""
        r = _run_or_fail(run)
        try:
            frame = validate(r, labels, metric or None, backend or None, threshold or None,
                             label_threshold, resamples, seed)
        except AnalysisError as exc:
            fail(str(exc))
        unknown = int(frame["labels_unknown_case"].max()) if not frame.empty else 0
        if as_json:
            print_json({"run": str(r.path), "labels": str(labels), "validation": records(frame)})
        else:
            _print_validation(out, frame)
        if unknown:
            err.print(f"[yellow]{unknown} label(s) name a case that is not in this run[/]")

    def _print_validation(console, frame) -> None:
        t = Table(title="Backends against human labels (positive = pass)", title_justify="left", show_lines=True)
        show_sp = bool(frame["spearman"].notna().any())
        show_claims = bool((frame["claims_answers"] > 0).any())
        cols = ["metric", "backend", "thr", "labels", "scored", "unscored", "human P/F",
                "TPR", "TNR", "missed", "kappa", "bal. acc.", "agree"]
        cols += ["Spearman"] if show_sp else []
        cols += ["unsupported"] if show_claims else []
        for col in cols:
            t.add_column(col, justify="left" if col in ("metric", "backend", "unscored") else "right", no_wrap=True)
        lines = []
        for row in frame.to_dict("records"):
            unscored = [f"{row[k]} {k}" for k in ("undefined", "errored", "missing") if row[k]]
            ci = {f: fmt_ci(row[f], row[f"{f}_low"], row[f"{f}_high"])
                  for f in ("tpr", "tnr", "kappa", "balanced_accuracy", "spearman", "unsupported_share")}
            cells = [
                escape(row["metric"]), escape(row["backend"]), f"{row['threshold']:g}",
                str(row["n_labels"]), str(row["n_paired"]),
                "[yellow]" + escape("\n".join(unscored)) + "[/]" if unscored else "0",
                f"{row['human_pass']}/{row['human_fail']}",
                *(ci[f].replace(" [", "\n[") for f in ("tpr", "tnr")),
                f"{row['fp']}/{row['human_fail']}",
                *(ci[f].replace(" [", "\n[") for f in ("kappa", "balanced_accuracy")),
                num(row["agreement"], 2),
            ]
            claims = f"{ci['unsupported_share']} of {row['claims_answers']}" if row["claims_answers"] else "—"
            if show_sp:
                cells.append(ci["spearman"].replace(" [", "\n["))
            if show_claims:
                cells.append(claims.replace(" [", "\n[").replace(" of ", "\nof "))
            t.add_row(*cells)
            lines += [
                f"{row['metric']}, {row['backend']} at {row['threshold']:g}: {row['n_labels']} labels, "
                f"{row['n_paired']} scored" + (f" ({', '.join(unscored)})" if unscored else "")
                + f"; humans pass {row['human_pass']}, fail {row['human_fail']}",
                f"  TPR {ci['tpr']}, TNR {ci['tnr']}, missed {row['fp']}/{row['human_fail']}, "
                f"kappa {ci['kappa']}, "
                f"balanced accuracy {ci['balanced_accuracy']}, agreement {num(row['agreement'], 2)}"
                + (f", Spearman {ci['spearman']}" if show_sp else "")
                + (f", unsupported {claims}" if show_claims else ""),
            ]
        print_table(console, t, lines)
        print_lines(console, [
            "TPR: share of human passes the backend passes; TNR: share of human fails it fails, "
            "the failures it catches (Wilson 95% intervals); missed: human fails the backend passed; "
            "kappa and balanced accuracy: bootstrap 95% intervals"
            + ("; Spearman: backend value against graded labels" if show_sp else "")
            + ("; unsupported: share of answers with at least one unsupported claim, of those whose claims "
               "the backend exposes" if show_claims else "")
            + "."
        ], indent="")

    @cli.command("calibrate")
    def calibrate_cmd(
        run: Path = typer.Argument(..., help="Run folder."),
        source: str = typer.Option(..., "--from", help="Backend whose pass/fail to reproduce."),
        target: str = typer.Option(..., "--to", help="Backend whose threshold to choose."),
        metric: str = typer.Option(..., "--metric", "-m", help="Canonical metric both backends scored."),
        threshold: float = typer.Option(DEFAULT_THRESHOLD, "--threshold", "-t", help="The source backend's threshold."),
        top: int = typer.Option(10, "--top", help="Flipping cases to show."),
        resamples: int = typer.Option(DEFAULT_RESAMPLES, "--resamples", help="Bootstrap resamples (0: none)."),
        seed: int = typer.Option(0, "--seed", help="Bootstrap seed."),
        as_json: bool = typer.Option(False, "--json", help="Print one JSON document instead of tables."),
    ) -> None:
        """The threshold in one backend that best reproduces another's pass/fail (maximum kappa)."""
        r = _run_or_fail(run)
        try:
            curve = calibrate(r, source, target, metric, threshold, resamples, seed)
        except AnalysisError as exc:
            fail(str(exc))
        a = curve.attrs
        if curve.empty:
            fail(f"no case was scored by both {source} and {target} on {a['metric']}")
        best = curve[curve["best"]].iloc[0]
        flips = calibration_flips(r, source, target, a["metric"], threshold, float(best["threshold"]))
        if as_json:
            print_json({"run": str(r.path), **a, "best": best.to_dict(), "curve": records(curve),
                        "flips": records(flips)})
            return
        hi = "+∞" if math.isinf(best["threshold_high"]) else f"{best['threshold_high']:.3g}"
        lo = "-∞" if math.isinf(best["threshold_low"]) else f"{best['threshold_low']:.3g}"
        lines = [
            f"{a['metric']}: {source} at {a['source_threshold']:g} ≈ {target} at {best['threshold']:.3g} "
            f"(any threshold in ({lo}, {hi}] gives the same verdicts)",
            f"kappa {fmt_ci(best['kappa'], best['kappa_low'], best['kappa_high'])}, agreement "
            f"{fmt_ci(best['agreement'], best['agreement_low'], best['agreement_high'])} on "
            f"{a['n_paired']} case(s) both scored; {int(best['flips'])} still flip "
            f"({int(best['source_pass_target_fail'])} pass→fail, "
            f"{int(best['source_fail_target_pass'])} fail→pass)",
        ]
        for side, name in (("source_unscored", source), ("target_unscored", target)):
            miss = {k: v for k, v in a[side].items() if v}
            if miss:
                lines.append(f"{name} did not score: " + ", ".join(f"{v} {k}" for k, v in miss.items()))
        print_lines(out, lines)
        t = Table(title="Kappa by target threshold", title_justify="left")
        for col in ("threshold", "kappa", "agreement", "flips", "target pass rate", ""):
            t.add_column(col, justify="right", no_wrap=True)
        rows = []
        for row in curve.to_dict("records"):
            t.add_row(f"{row['threshold']:.3g}", num(row["kappa"]), num(row["agreement"]),
                      str(row["flips"]), num(row["target_pass_rate"], 2), "◀ best" if row["best"] else "")
            rows.append(f"{row['threshold']:.3g}: kappa {num(row['kappa'])}, agreement "
                        f"{num(row['agreement'])}, {row['flips']} flips, target pass rate "
                        f"{num(row['target_pass_rate'], 2)}" + (" (best)" if row["best"] else ""))
        print_table(out, t, rows)
        if not flips.empty:
            lines = [f"Cases that still flip ({len(flips)}"
                     + (f"; the first {top})" if len(flips) > top else ")")]
            for row in flips.head(top).to_dict("records"):
                lines += _case_lines(row["case_id"], "", row["question"], [
                    (name, f"{row[f'{side}_value']:.3f} {'pass' if row[f'{side}_passed'] else 'fail'}",
                     row[f"{side}_reason"])
                    for side, name in (("source", source), ("target", target))
                ])
            print_lines(out, lines)
