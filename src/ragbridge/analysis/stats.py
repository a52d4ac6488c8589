"""The statistics of every analysis: point estimates, the bootstrap, the permutation test, Wilson intervals.

``compare``, ``validate``, ``calibrate``, ``diff`` and ``gate`` all take their figures and intervals
from here, so a figure means the same everywhere.

Point estimates come from scipy (``spearmanr``, ``kendalltau``, ``pearsonr``, ``binomtest``) and
scikit-learn (``mean_absolute_error``, ``cohen_kappa_score``, ``accuracy_score``, ``confusion_matrix``,
``recall_score``, ``balanced_accuracy_score``). A figure that is undefined (kappa when one side is
constant, a correlation of a constant) is NaN, never 0.

The bootstrap: ONE engine, `bootstrap_interval`, a paired percentile bootstrap. Cases are resampled
with replacement (numpy's PCG64 generator, seeded), ``DEFAULT_RESAMPLES`` = 2000 times; the interval
is the 2.5% and 97.5% quantiles of the statistic over the resamples where it is defined (fewer than
half defined, or fewer than 2 cases: no interval). The statistic is evaluated on a block of
resamples at once (the ``*_rows`` functions: one figure per row), with at most ``BLOCK`` resampled
values in memory, so memory stays flat however large the run.

Percentile, not BCa: BCa needs a jackknife (the statistic on every leave-one-out sample), which
costs time and memory on large runs and is undefined as soon as one resample or leave-one-out sample
leaves a figure undefined (the rule for kappa when failures are rare). The measurements behind this
choice and behind 2000 resamples are in benchmarks/README.md ("Figures behind the design").

The permutation test, `paired_permutation_pvalue`: the sign of each paired difference flipped at
random, exact when the sign patterns are at most the number of permutations (default 9999).

Rates (TPR, TNR, a share of answers) get Wilson score intervals (`wilson_interval`), which stay
meaningful for the few failures a golden set usually holds.

Prediction-powered inference (`ppi_mean`, with `classical_mean`, the humans alone): the mean of a
quantity people label on a few cases, from a judge's value on every case and its errors on the
labelled ones (Angelopoulos et al., "Prediction-Powered Inference", Science 2023, as ARES uses it;
the power tuning of PPI++). With human labels ``y`` and the judge's ``f`` on the n labelled cases,
and the judge's ``f~`` on the N others::

    estimate = lam * mean(f~) + mean(y - lam * f)
    variance = lam^2 * var(f~) / N + var(y - lam * f) / n

The rectifier ``mean(y - lam * f)`` corrects the judge's bias; ``lam`` (0..1) is chosen to minimise
the variance (``cov(y, f) / ((1 + n / N) var(f))``, clipped): 1 is plain PPI, 0 the humans alone,
so the interval is never much wider than the classical one. The interval is the normal one. In a
seeded simulation (500 cases, 50 labelled, a judge with TPR 0.9 and TNR 0.6, 1000 trials) the 95%
interval covered the set's true pass rate 95.0% of the time, 0.217 wide against 0.254 for the 50
labels alone, while the judge's own pass rate was 0.05 too high.

`normal_quantile` is the standard normal quantile (scipy), for the minimum detectable difference
and the judge-noise band of ``ragbridge.analysis.noise``.

Trends over runs (``ragbridge.analysis.trend``): `ols_slope` fits a least-squares line to a series
(one mean per run, x the run's position 0, 1, 2, ...) and gives the slope per run with its t
interval, ``slope ± t(n-2) * se`` (``scipy.stats.linregress``'s standard error): the spread of the
run means around the line, whatever its cause (the cases' sampling, judge noise, drift), is what
makes the interval wide. Two runs give a slope with no interval; a constant series a slope of 0
with the interval [0, 0].

`change_points` finds steps in a series by binary segmentation: the split of a segment that
maximises ``|mean(left) - mean(right)| * sqrt(k (n - k) / n)`` (the standardised CUSUM statistic,
k and n - k the points on each side) is tested by permutation: the segment's points are shuffled
``n_permutations`` times (seeded) and the p-value is ``(hits + 1) / (n_permutations + 1)``, hits
the shuffles whose largest statistic is at least the observed one (exact, over every ordering,
when there are at most ``n_permutations`` of them). A split with p < ``alpha`` is kept and both
sides are searched again; a segment shorter than ``2 * min_size`` is not split. Shuffling asks
whether the order of the runs matters at all, so a steady slope, too, can come out as a change
point near its middle: read change points with the slope.
"""

from __future__ import annotations

import math
import warnings
import zlib
from typing import Any, Callable, Optional, Sequence

import numpy as np

__all__ = [
    "CONFIDENCE", "DEFAULT_RESAMPLES", "DEFAULT_PERMUTATIONS", "group_seed",
    "spearman", "kendall", "pearson", "mae", "kappa", "agreement", "confusion", "class_recall",
    "balanced_accuracy", "rate",
    "spearman_rows", "kendall_rows", "pearson_rows", "mae_rows", "kappa_rows", "agreement_rows",
    "balanced_accuracy_rows", "mean_rows",
    "bootstrap_interval", "mean_interval", "paired_bootstrap_ci", "paired_permutation_pvalue",
    "wilson_interval", "normal_quantile", "ppi_mean", "classical_mean", "ols_slope", "change_points",
]

CONFIDENCE = 0.95
DEFAULT_RESAMPLES = 2000  # bootstrap resamples (interval end points)
DEFAULT_PERMUTATIONS = 9999  # permutation test resamples (p-value resolution 1e-4)
BLOCK = 4_000_000  # resampled values held in memory at once
EPS = 1e-12  # differences smaller than this are no difference


def group_seed(seed: int, *key: str) -> int:
    """A seed for one group of a result (a metric, a tag, a rule) derived from ``seed`` and the
    group's name, so filtering the other groups does not change this group's numbers."""
    return (int(seed) + zlib.crc32("\x1f".join(key).encode())) % (2**32)


# --------------------------------------------------------------------------------------------
# Point estimates (the libraries')


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
    """Kendall's tau-b."""
    from scipy import stats

    return _point(lambda: stats.kendalltau(x, y).statistic) if len(x) >= 2 else float("nan")


def pearson(x, y) -> float:
    from scipy import stats

    return _point(lambda: stats.pearsonr(x, y).statistic) if len(x) >= 2 else float("nan")


def mae(x, y) -> float:
    from sklearn.metrics import mean_absolute_error

    return _point(lambda: mean_absolute_error(x, y)) if len(x) else float("nan")


def kappa(a, b) -> float:
    """Cohen's kappa of two pass/fail raters."""
    from sklearn.metrics import cohen_kappa_score

    if not len(a):
        return float("nan")
    return _point(lambda: cohen_kappa_score(list(a), list(b), labels=[False, True]))


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


def class_recall(truth, pred, label: bool) -> float:
    """The share of cases whose truth is ``label`` that ``pred`` gets right (TPR for True, TNR for
    False); NaN when no case has that truth."""
    from sklearn.metrics import recall_score

    if not np.any(truth == label):
        return float("nan")
    return _point(lambda: recall_score(truth, pred, pos_label=label, labels=[False, True],
                                       zero_division=np.nan))


def balanced_accuracy(truth, pred) -> float:
    from sklearn.metrics import balanced_accuracy_score

    if not (np.any(truth) and np.any(~truth)):
        return float("nan")
    return _point(lambda: balanced_accuracy_score(truth, pred))


def rate(k: int, n: int) -> float:
    return k / n if n else float("nan")


# --------------------------------------------------------------------------------------------
# The same figures on every row of 2-D arrays (one row per resample), checked against the libraries
# in the tests: Pearson with scipy along an axis, Spearman as Pearson of ranks, and Kendall's tau-b,
# kappa, agreement and balanced accuracy from their definitions (no library offers them vectorised).


def pearson_rows(x, y):
    from scipy import stats

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return stats.pearsonr(x, y, axis=-1).statistic


def spearman_rows(x, y):
    from scipy import stats

    return pearson_rows(stats.rankdata(x, axis=-1), stats.rankdata(y, axis=-1))


def kendall_rows(x, y):
    """Kendall's tau-b on each row: sum(sign dx * sign dy) / sqrt(pairs untied in x * untied in y)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    n = x.shape[-1]
    flat_x, flat_y = x.reshape(-1, n), y.reshape(-1, n)
    if n > 100:  # the pairwise form costs n^2 per row: beyond ~100 cases scipy row by row is faster
        out = np.array([kendall(a, b) for a, b in zip(flat_x, flat_y)])
        return out.reshape(x.shape[:-1])
    step = max(1, BLOCK // (n * n))  # rows at a time, so the n x n differences stay within BLOCK
    out = np.empty(len(flat_x))
    for start in range(0, len(flat_x), step):
        a, b = flat_x[start:start + step], flat_y[start:start + step]
        dx = np.sign(a[:, :, None] - a[:, None, :])
        dy = np.sign(b[:, :, None] - b[:, None, :])
        num = (dx * dy).sum(axis=(-1, -2))
        den = np.sqrt((dx * dx).sum(axis=(-1, -2)) * (dy * dy).sum(axis=(-1, -2)))
        with np.errstate(invalid="ignore", divide="ignore"):
            out[start:start + step] = np.where(den > 0, num / np.where(den > 0, den, 1), np.nan)
    return out.reshape(x.shape[:-1])


def mae_rows(x, y):
    return np.mean(np.abs(np.asarray(x) - np.asarray(y)), axis=-1)


def kappa_rows(a, b):
    """Cohen's kappa of two binary raters on each row: (po - pe) / (1 - pe)."""
    a = np.asarray(a, float)
    b = np.asarray(b, float)
    po = np.mean(a == b, axis=-1)
    pa, pb = np.mean(a, axis=-1), np.mean(b, axis=-1)
    pe = pa * pb + (1 - pa) * (1 - pb)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(pe < 1, (po - pe) / np.where(pe < 1, 1 - pe, 1), np.nan)


def agreement_rows(a, b):
    return np.mean(np.asarray(a, float) == np.asarray(b, float), axis=-1)


def balanced_accuracy_rows(truth, pred):
    """Mean of the recall of each class (truth 1 and truth 0) on each row."""
    t = np.asarray(truth, float)
    p = np.asarray(pred, float)
    pos, neg = np.sum(t, axis=-1), np.sum(1 - t, axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpr = np.sum(t * p, axis=-1) / pos
        tnr = np.sum((1 - t) * (1 - p), axis=-1) / neg
    return np.where((pos > 0) & (neg > 0), (tpr + tnr) / 2, np.nan)


def mean_rows(x):
    return np.mean(x, axis=-1)


# --------------------------------------------------------------------------------------------
# Intervals and tests


def bootstrap_interval(
    statistic: Callable, data: Sequence[Sequence[float]], n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0, confidence: float = CONFIDENCE,
) -> tuple[float, float]:
    """Paired percentile bootstrap interval of ``statistic(*rows)`` (a ``*_rows`` function).

    The arrays of ``data`` are resampled together (the same cases in each), in blocks of at most
    ``BLOCK`` values. ``(nan, nan)`` with no resamples, fewer than 2 cases, or when the statistic is
    defined on fewer than half of the resamples."""
    arrays = [np.asarray(d, float) for d in data]
    n = len(arrays[0])
    if n_resamples <= 0 or n < 2:
        return (math.nan, math.nan)
    rng = np.random.default_rng(seed)
    dist = np.empty(n_resamples)
    block = max(1, BLOCK // n)
    itype = np.int16 if n < 2**15 else np.int32
    for start in range(0, n_resamples, block):
        stop = min(n_resamples, start + block)
        idx = rng.integers(0, n, size=(stop - start, n), dtype=itype)
        dist[start:stop] = statistic(*(a[idx] for a in arrays))
    ok = dist[np.isfinite(dist)]
    if ok.size == 0 or ok.size < 0.5 * n_resamples:
        return (math.nan, math.nan)
    tail = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(ok, [tail, 1.0 - tail])
    return (float(lo), float(hi))


def mean_interval(values: Sequence[float], confidence: float = CONFIDENCE,
                  n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0) -> tuple[float, float]:
    """Bootstrap interval of ``mean(values)``; a constant sample's interval is that constant."""
    d = np.asarray(values, dtype=float)
    if d.size >= 2 and np.all(np.abs(d - d[0]) <= EPS):
        return (float(d[0]), float(d[0]))
    return bootstrap_interval(mean_rows, (d,), n_resamples, seed, confidence)


def paired_bootstrap_ci(
    base: Sequence[float], new: Sequence[float], confidence: float = CONFIDENCE,
    n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0,
) -> tuple[float, float]:
    """Bootstrap interval of ``mean(new - base)``, resampling cases (pairs) with replacement.

    ``(nan, nan)`` with fewer than two pairs."""
    return mean_interval(np.asarray(new, dtype=float) - np.asarray(base, dtype=float), confidence,
                         n_resamples, seed)


def paired_permutation_pvalue(
    base: Sequence[float],
    new: Sequence[float],
    alternative: str = "two-sided",
    shift: float = 0.0,
    n_resamples: int = DEFAULT_PERMUTATIONS,
    seed: int = 0,
) -> float:
    """Paired permutation test of ``mean(new - base) == -shift``: the two values of a case are swapped
    at random, i.e. the sign of each paired difference is flipped.

    The same test as ``scipy.stats.permutation_test(..., permutation_type="samples")`` (exact when the
    sign patterns are at most ``n_resamples``; otherwise ``(hits + 1) / (n_resamples + 1)``), computed
    with random bits and a matrix product. Cases
    with no difference cannot change the statistic and are left out.

    ``alternative``: ``"two-sided"``, ``"less"`` (new is lower) or ``"greater"``. ``shift`` moves the
    null: with ``shift=0.02`` and ``"less"`` the test asks whether new is lower than base by more than
    0.02. Returns 1.0 when no case differs (and NaN with no pairs).
    """
    if alternative not in ("two-sided", "less", "greater"):
        raise ValueError(f"alternative must be 'two-sided', 'less' or 'greater', got {alternative!r}")
    b = np.asarray(base, dtype=float)
    x = np.asarray(new, dtype=float)
    if b.size == 0:
        return math.nan
    d = x - b + shift
    d = d[np.abs(d) > EPS]  # a zero difference is the same under either sign
    m = d.size
    if m == 0:
        return 1.0
    total = float(d.sum())
    observed = total
    gamma = abs(observed) * 1e-12 + 1e-12
    if 2**m <= n_resamples:  # exact: every sign pattern
        bits = (np.arange(2**m)[:, None] >> np.arange(m)) & 1
        null = 2.0 * (bits @ d) - total
        n_less = int(np.count_nonzero(null <= observed + gamma))
        n_greater = int(np.count_nonzero(null >= observed - gamma))
        p_less, p_greater = n_less / 2**m, n_greater / 2**m
    else:
        rng = np.random.default_rng(seed)
        n_less = n_greater = 0
        block = max(1, BLOCK // m)
        for start in range(0, n_resamples, block):
            k = min(n_resamples, start + block) - start
            raw = rng.integers(0, 256, size=(k, (m + 7) // 8), dtype=np.uint8)
            bits = np.unpackbits(raw, axis=1, count=m)
            null = 2.0 * (bits @ d) - total
            n_less += int(np.count_nonzero(null <= observed + gamma))
            n_greater += int(np.count_nonzero(null >= observed - gamma))
        p_less, p_greater = (n_less + 1) / (n_resamples + 1), (n_greater + 1) / (n_resamples + 1)
    if alternative == "less":
        return float(p_less)
    if alternative == "greater":
        return float(p_greater)
    return float(min(1.0, 2.0 * min(p_less, p_greater)))


def wilson_interval(k: int, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Wilson score interval of a proportion k/n (``scipy.stats.binomtest``)."""
    from scipy import stats

    if n <= 0:
        return (float("nan"), float("nan"))
    ci = stats.binomtest(int(k), int(n)).proportion_ci(confidence_level=confidence, method="wilson")
    return (float(ci.low), float(ci.high))


def wilson_weighted(hits, weights, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Wilson score interval of a weighted proportion (``hits`` booleans, ``weights`` each case's
    weight), at Kish's effective sample size ``(sum w)^2 / sum w^2``: with equal weights, the Wilson
    interval of k/n."""
    h = np.asarray(hits, bool)
    w = np.asarray(weights, float)
    if not len(w) or w.sum() <= 0:
        return (float("nan"), float("nan"))
    p = float(w[h].sum() / w.sum())
    n = float(w.sum() ** 2 / np.sum(w ** 2))
    z = _z(confidence)
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


# --------------------------------------------------------------------------------------------
# Prediction-powered inference


def normal_quantile(p: float) -> float:
    """The standard normal quantile at ``p`` (``normal_quantile(0.975)`` = 1.96)."""
    from scipy.stats import norm

    return float(norm.ppf(p))


def _z(confidence: float) -> float:
    return normal_quantile(0.5 + confidence / 2)


def _mean(x: Sequence[float]) -> float:
    return math.fsum(x) / len(x)


def _var(x: Sequence[float]) -> float:
    if len(x) < 2:
        return 0.0
    m = _mean(x)
    return math.fsum((v - m) ** 2 for v in x) / (len(x) - 1)


def classical_mean(y: Sequence[float], confidence: float = CONFIDENCE) -> dict[str, Any]:
    """The humans alone: the mean of ``y`` with its normal interval."""
    n = len(y)
    if n == 0:
        return {"estimate": None, "low": None, "high": None, "se": None, "n": 0}
    est = _mean(y)
    se = math.sqrt(_var(y) / n)
    z = _z(confidence)
    return {"estimate": est, "low": est - z * se, "high": est + z * se, "se": se, "n": n}


def ppi_mean(y: Sequence[float], f: Sequence[float], f_unlabelled: Sequence[float], *,
             confidence: float = CONFIDENCE, lam: Optional[float] = None) -> dict[str, Any]:
    """The prediction-powered estimate of the mean of ``y`` over the whole set (see the module
    docstring: prediction-powered inference). ``y`` and ``f``: the human label and the judge's
    value on each labelled case, in the same order; ``f_unlabelled``: the judge's value on every
    other case. ``lam``: fixed weight (default: power-tuned). Returns ``estimate``, ``low``,
    ``high``, ``se``, ``lam``, ``n``, ``N``, ``judge_only`` (the judge's mean over every case, no
    correction) and ``classical`` (the humans alone, `classical_mean`)."""
    y, f, fu = list(map(float, y)), list(map(float, f)), list(map(float, f_unlabelled))
    if len(y) != len(f):
        raise ValueError("y and f must have one value per labelled case")
    n, big_n = len(y), len(fu)
    everything = f + fu
    out: dict[str, Any] = {"n": n, "N": big_n, "confidence": confidence,
                           "judge_only": _mean(everything) if everything else None,
                           "classical": classical_mean(y, confidence)}
    if n < 2 or big_n < 1:
        out.update(estimate=out["classical"]["estimate"], low=out["classical"]["low"],
                   high=out["classical"]["high"], se=out["classical"]["se"], lam=0.0)
        return out
    if lam is None:
        var_f = _var(fu + f)
        my, mf = _mean(y), _mean(f)
        cov = sum((a - my) * (b - mf) for a, b in zip(y, f)) / (n - 1)
        lam = 0.0 if var_f == 0 else min(1.0, max(0.0, cov / ((1 + n / big_n) * var_f)))
    rect = [a - lam * b for a, b in zip(y, f)]
    est = lam * _mean(fu) + _mean(rect)
    se = math.sqrt(lam ** 2 * _var(fu) / big_n + _var(rect) / n)
    z = _z(confidence)
    out.update(estimate=est, low=est - z * se, high=est + z * se, se=se, lam=lam)
    return out


# --------------------------------------------------------------------------------------------
# Trends: a slope over runs and the steps in a series


def ols_slope(y: Sequence[float], x: Optional[Sequence[float]] = None,
              confidence: float = CONFIDENCE) -> dict[str, Any]:
    """The least-squares line through ``(x, y)`` (``x`` default 0, 1, 2, ...): ``slope`` (per unit of
    x), ``intercept``, ``low`` and ``high`` (the t interval of the slope, NaN with fewer than three
    points), ``se``, ``p_value`` (of slope 0, two-sided) and ``n``. Fewer than two points: NaN."""
    from scipy import stats as sps

    yy = np.asarray(y, float)
    xx = np.arange(len(yy), dtype=float) if x is None else np.asarray(x, float)
    n = len(yy)
    out: dict[str, Any] = {"slope": math.nan, "intercept": math.nan, "low": math.nan, "high": math.nan,
                           "se": math.nan, "p_value": math.nan, "n": n}
    if n < 2 or np.ptp(xx) == 0:
        return out
    if np.ptp(yy) <= EPS:  # a constant series: linregress leaves its p-value undefined
        out.update(slope=0.0, intercept=float(yy[0]), se=0.0)
        if n > 2:
            out.update(low=0.0, high=0.0, p_value=1.0)
        return out
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = sps.linregress(xx, yy)
    out.update(slope=float(fit.slope), intercept=float(fit.intercept))
    if n > 2:
        t = float(sps.t.ppf(0.5 + confidence / 2, n - 2))
        se = float(fit.stderr)
        out.update(se=se, low=float(fit.slope) - t * se, high=float(fit.slope) + t * se,
                   p_value=float(fit.pvalue))
    return out


def _split_statistic(y: np.ndarray) -> np.ndarray:
    """The standardised mean shift at every split k = 1..n-1 of each row of ``y`` (rows: orderings)."""
    n = y.shape[-1]
    k = np.arange(1, n, dtype=float)
    csum = np.cumsum(y, axis=-1)[..., :-1]
    total = y.sum(axis=-1, keepdims=True)
    left = csum / k
    right = (total - csum) / (n - k)
    return np.abs(left - right) * np.sqrt(k * (n - k) / n)


def _best_split(y: np.ndarray, min_size: int, n_permutations: int, rng) -> Optional[tuple[int, float, float]]:
    """``(k, statistic, p_value)`` of the best split of ``y`` into ``y[:k]`` and ``y[k:]``."""
    import itertools

    n = len(y)
    if n < 2 * min_size:
        return None
    allowed = slice(min_size - 1, n - min_size)  # k = min_size .. n - min_size
    stat = _split_statistic(y)[allowed]
    if not stat.size or np.max(stat) <= EPS:
        return None
    k = int(np.argmax(stat)) + min_size
    observed = float(np.max(stat))
    if math.factorial(n) <= n_permutations:  # exact: every ordering
        orders = np.array(list(itertools.permutations(range(n))))
        null = _split_statistic(y[orders])[:, allowed].max(axis=-1)
        p = float(np.mean(null >= observed - EPS))
    else:
        hits = 0
        block = max(1, BLOCK // n)
        for start in range(0, n_permutations, block):
            m = min(n_permutations, start + block) - start
            orders = rng.permuted(np.tile(np.arange(n), (m, 1)), axis=1)
            null = _split_statistic(y[orders])[:, allowed].max(axis=-1)
            hits += int(np.count_nonzero(null >= observed - EPS))
        p = (hits + 1) / (n_permutations + 1)
    return k, observed, p


def change_points(y: Sequence[float], alpha: float = 0.05, min_size: int = 2,
                  n_permutations: int = DEFAULT_PERMUTATIONS, seed: int = 0) -> list[dict[str, Any]]:
    """The steps in a series by binary segmentation with permutation p-values (see the module
    docstring). One dict per change point, in order: ``index`` (the first point after the step),
    ``before`` and ``after`` (the means of the segments on either side, within the segment that was
    split), ``shift`` (after - before), ``statistic`` and ``p_value``."""
    yy = np.asarray(y, float)
    rng = np.random.default_rng(seed)
    found: list[dict[str, Any]] = []
    todo = [(0, len(yy))]
    while todo:
        lo, hi = todo.pop()
        seg = yy[lo:hi]
        best = _best_split(seg, max(1, min_size), n_permutations, rng)
        if best is None or not best[2] < alpha:
            continue
        k, statistic, p = best
        found.append({"index": lo + k, "before": float(seg[:k].mean()), "after": float(seg[k:].mean()),
                      "shift": float(seg[k:].mean() - seg[:k].mean()), "statistic": statistic,
                      "p_value": p})
        todo += [(lo, lo + k), (lo + k, hi)]
    return sorted(found, key=lambda c: c["index"])
