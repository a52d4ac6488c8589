"""The statistics of every analysis: the figures of two raters and their posterior intervals, the
bootstrap of a mean, the permutation test, prediction-powered inference, trends.

``compare``, ``validate``, ``calibrate``, ``diff`` and ``gate`` all take their figures and intervals
from here, so a figure means the same everywhere.

Size: one module on purpose (the design's one statistics module): every figure and interval any
output shows is defined here, next to the others, and nowhere else.

**Two raters on the same cases** (`rater_figures`): every figure of ``compare`` (two backends, or
one backend in two runs), ``validate`` (a backend against people) and ``calibrate``, with ONE
interval method. The figures: TPR, TNR, balanced accuracy, Cohen's kappa, agreement (from the two
raters' pass/fail verdicts), Spearman, Kendall's tau-b, Pearson, the mean absolute difference (from
their values) and a share (one rater's pass rate). Each is defined on weighted cases
(`FIGURE_FORMS`): with equal weights it is the figure scipy and scikit-learn give (checked in the
tests); labels drawn by stratum weigh each case by its stratum's share of the run over the labels
drawn from it, so the figure is that of the whole run. A figure that is undefined (kappa when both
raters are constant, a correlation of a constant, TNR with no human fail) is NaN, never 0, and has
no interval.

The interval is the central 95% of the figure over ``DEFAULT_DRAWS`` = 2000 draws from the
posterior of the population the cases were drawn from: the weights of the cases are a Dirichlet
(Rubin's Bayesian bootstrap; numpy's PCG64 generator, seeded) to which each design stratum adds
``PRIOR`` = half a case at each of its four corners (a pass and a fail of each rater; a corner's
value is the middle of the part of the scale that gives its verdict). For verdict figures this is
the Dirichlet(counts + 1/2) posterior of the 2x2 table in each stratum (Jeffreys' prior), the strata
combined by their known shares; a stratum whose labels all agree, or a rater that passes every case,
still leaves the other cells possible, so no interval collapses to a point from a few cases (the
percentile bootstrap gave kappa 0.00 [0.00, 0.00] on 12 cases where one backend passed all of them,
and a within-stratum bootstrap balanced accuracy 0.94 [0.91, 0.97] beside TNR 1.00 [0.57, 1.00]).
Where the labels' strata were made by the rater's own verdicts, the corners of its other verdict are
left out of each stratum. The interval always holds the figure itself (Brown, Cai and DasGupta's
rule for Jeffreys' interval at 0 or n successes). In seeded simulations (tests/test_analysis.py:
uniform labels on 12 and 40 cases, labels drawn by stratum from a run of 300 with strata whose labels
all agree, and two raters of which one passes 97% of cases) the 95% intervals of TPR, TNR, balanced
accuracy, kappa and agreement cover the truth 93-99% of the time; a prior of a whole case a corner
covered as rarely as 85%.

Identical cases are merged before drawing (a Gamma(k) weight is the sum of k Gamma(1) weights), so
verdict figures cost a few cells per draw whatever the run's size; the draws are evaluated a block
at a time, with at most ``BLOCK`` weights in memory. Kendall's tau on weighted cases counts the
discordant weight by merging halves level by level, m log m per draw: in C where the package was
built with its compiled module (``ragbridge.analysis._stats``), else in NumPy, with the same single-
precision additions in the same order either way, so the same draws to the last bit. A block of one
draw (the figure itself, and every draw where the distinct pairs are more than 524,288, so that a
block holds one) is merged in double precision, each level's sum of products as NumPy's ``einsum``
of one row adds them, in C and in NumPy alike (in C a large merge's levels, independent of each other,
are shared by two threads where `threads` allows, and their sums added in order). The weighted
mid-ranks, Pearson's correlation and Kendall's tied weights run a draw at a time in C there too, with
NumPy's products and pairwise sums in NumPy's order (the NumPy steps stay as the fallback); the
weights of each column's tie groups are summed once a block for the figures that read them.

**Means** (``diff``, ``gate``, the shift of ``compare RUN_A RUN_B``): `bootstrap_interval`, a paired
percentile bootstrap. Cases are resampled with replacement (PCG64, seeded), ``DEFAULT_RESAMPLES`` =
2000 times; the interval is the 2.5% and 97.5% quantiles of the mean over the resamples (fewer than
2 cases: no interval), a block of resamples at a time. Percentile, not BCa: BCa needs a jackknife,
which costs time and memory on large runs (measured in benchmarks/README.md, "Figures behind the
design").

The permutation test, `paired_permutation_pvalue`: the sign of each paired difference flipped at
random, exact when the sign patterns are at most the number of permutations (default 9999).

Both loops run in C where the package was built with ``ragbridge.analysis._stats``: NumPy's PCG64,
its bounded integers (Lemire's method on the same 16- or 32-bit draws) and its pairwise sums, step for
step, so a seed gives the same resamples, interval and p-value to the last bit with or without it
(about 4x faster; the NumPy loops stay as the fallback and as the tests' reference).

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

import contextlib
import itertools
import math
import os
import zlib
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Optional, Sequence

import numpy as np

try:  # built with the package where a C compiler was found: the resampling loops in C
    from ._stats import bootstrap_means as _bootstrap_means
    from ._stats import kendall_alone as _kendall_alone
    from ._stats import kendall_discordant as _kendall_discordant
    from ._stats import merge_places as _merge_places
    from ._stats import mid_ranks as _c_mid_ranks
    from ._stats import run_sums as _run_sums
    from ._stats import runs as _c_runs
    from ._stats import sign_flip_counts as _sign_flip_counts
    from ._stats import weighted_pearson as _weighted_pearson
except ImportError:  # pragma: no cover - the package built without it
    _kendall_discordant = _kendall_alone = _merge_places = None
    _bootstrap_means = _sign_flip_counts = None
    _c_mid_ranks = _run_sums = _c_runs = _weighted_pearson = None

_U64 = (1 << 64) - 1


def _pcg_state(rng: np.random.Generator) -> Optional[tuple]:
    """The state of ``rng``'s PCG64 as the compiled loops take it, or None (another bit generator)."""
    if type(rng.bit_generator) is not np.random.PCG64:
        return None
    st = rng.bit_generator.state
    s, inc = st["state"]["state"], st["state"]["inc"]
    return (s >> 64, s & _U64, inc >> 64, inc & _U64, st["has_uint32"], st["uinteger"])


def _set_pcg_state(rng: np.random.Generator, t: tuple) -> None:
    """Moves ``rng`` to the state the compiled loop left, as NumPy's own draws would have moved it."""
    rng.bit_generator.state = {"bit_generator": "PCG64", "state": {"state": (t[0] << 64) | t[1],
                               "inc": (t[2] << 64) | t[3]}, "has_uint32": t[4], "uinteger": t[5]}

__all__ = [
    "CONFIDENCE", "DEFAULT_RESAMPLES", "DEFAULT_DRAWS", "DEFAULT_PERMUTATIONS", "PRIOR", "group_seed",
    "FIGURE_FORMS", "rater_figures", "counted_figures", "confusion", "mean_rows",
    "bootstrap_interval", "mean_interval", "paired_bootstrap_ci", "paired_permutation_pvalue", "mean_shift",
    "normal_quantile", "ppi_mean", "classical_mean", "ols_slope", "change_points",
]

CONFIDENCE = 0.95
DEFAULT_RESAMPLES = 2000  # bootstrap resamples (interval end points)
DEFAULT_PERMUTATIONS = 9999  # permutation test resamples (p-value resolution 1e-4; two-sided at least 2e-4)
BLOCK = 4_000_000  # resampled values held in memory at once
EPS = 1e-12  # differences smaller than this are no difference


def group_seed(seed: int, *key: str) -> int:
    """A seed for one group of a result (a metric, a tag, a rule) derived from ``seed`` and the
    group's name, so filtering the other groups does not change this group's numbers."""
    return (int(seed) + zlib.crc32("\x1f".join(key).encode())) % (2**32)


# --------------------------------------------------------------------------------------------
# Two raters on the same cases: the figures on weighted cases, and their posterior intervals


def confusion(a, b) -> tuple[int, int, int, int]:
    """``(both pass, a pass b fail, a fail b pass, both fail)``: the counts of two raters' verdicts."""
    a, b = np.asarray(a, bool), np.asarray(b, bool)
    return (int(np.sum(a & b)), int(np.sum(a & ~b)), int(np.sum(~a & b)), int(np.sum(~a & ~b)))


def _ratio(num, den):
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > EPS, num / np.where(den > EPS, den, 1.0), np.nan)


def _cells(w, c: dict[str, np.ndarray]):
    """The weights of the four verdict cells: a pass b pass, a pass b fail, a fail b pass, both fail."""
    a, b = c["a"], c["b"]
    return w @ (a & b), w @ (a & ~b), w @ (~a & b), w @ (~a & ~b)


def _share(c):
    return lambda w: _ratio(w @ c["a"], w.sum(-1))


def _tpr(c):
    def f(w):
        pp, pf, _, _ = _cells(w, c)
        return _ratio(pp, pp + pf)
    return f


def _tnr(c):
    def f(w):
        _, _, fp, ff = _cells(w, c)
        return _ratio(ff, fp + ff)
    return f


def _balanced_accuracy(c):
    tpr, tnr = _tpr(c), _tnr(c)
    return lambda w: (tpr(w) + tnr(w)) / 2


def _agreement(c):
    def f(w):
        pp, pf, fp, ff = _cells(w, c)
        return _ratio(pp + ff, pp + pf + fp + ff)
    return f


def _kappa(c):
    def f(w):
        pp, pf, fp, ff = _cells(w, c)
        s = pp + pf + fp + ff
        po, pa, pb = _ratio(pp + ff, s), _ratio(pp + pf, s), _ratio(pp + fp, s)
        pe = pa * pb + (1 - pa) * (1 - pb)
        return _ratio(po - pe, 1 - pe)
    return f


def _mae(c):
    # each draw's products summed pairwise as its own row: the same bits in a block of any size and
    # on any number of threads (a matrix product's do not: BLAS splits it by threads and by shape)
    d = np.abs(c["x"] - c["y"])
    return lambda w: _ratio((w * d).sum(-1), w.sum(-1))


def _compiled(w) -> bool:
    """Whether the compiled loops take the weights ``w`` (a C-ordered float64 block of rows)."""
    return _weighted_pearson is not None and w.ndim == 2 and w.dtype == np.float64 and w.flags.c_contiguous


def _pearson_of(w, x, y):
    """Weighted Pearson correlation of ``x`` and ``y`` (each a column, or one row per row of ``w``)."""
    if _compiled(w):  # the same steps a row at a time, in C
        out = np.empty(len(w))
        _weighted_pearson(w, np.ascontiguousarray(x, np.float64), np.ascontiguousarray(y, np.float64), out,
                          EPS * EPS)
        return out
    s = w.sum(-1)
    mx, my = _ratio((w * x).sum(-1), s), _ratio((w * y).sum(-1), s)
    dx, dy = x - np.expand_dims(mx, -1), y - np.expand_dims(my, -1)
    wdx = w * dx  # (as ``w * dx * dy`` multiplies: w by dx first)
    cov, vx, vy = (wdx * dy).sum(-1), (wdx * dx).sum(-1), (w * dy * dy).sum(-1)
    den = np.sqrt(vx * vy)
    with np.errstate(invalid="ignore", divide="ignore"):
        # a side whose spread is rounding error only is constant: no correlation
        ok = (vx > EPS * EPS * s) & (vy > EPS * EPS * s)
        return np.clip(np.where(ok, cov / np.where(ok, den, 1.0), np.nan), -1.0, 1.0)


def _pearson(c):
    return lambda w: _pearson_of(w, c["x"], c["y"])


def _groups(v: np.ndarray):
    """``(order, starts, group)``: ``v``'s stable sort, where each run of equal values starts, and
    each element's run (in sorted order)."""
    order = np.argsort(v, kind="stable")
    sv = v[order]
    new = np.r_[True, sv[1:] != sv[:-1]]
    return order, np.flatnonzero(new), np.cumsum(new) - 1


def _summing(order: np.ndarray, starts: np.ndarray):
    """How `_group_sums` sums the weights of each run of ``order`` (runs from ``starts``): the runs of
    one case picked (``(cases, runs)``), the longer ones' cases picked together and summed by
    ``add.reduceat`` (``(cases, their starts among them, runs)``); None where every run is of one."""
    if len(starts) == len(order):
        return None
    sizes = np.diff(np.r_[starts, len(order)])
    one, longer = np.flatnonzero(sizes == 1), np.flatnonzero(sizes > 1)
    cases = order[np.flatnonzero(np.repeat(sizes > 1, sizes))]
    return (order[starts[one]], one), (cases, np.r_[0, np.cumsum(sizes[longer])[:-1]], longer)


def _group_sums(w, order, summing):
    """The sum of each run's weights, in the runs' order: each run's the same additions as
    ``np.add.reduceat(np.take(w, order, axis=-1), starts, axis=-1)`` (a run's cases side by side, as
    there), without its call per run, most of whose runs are one case."""
    if summing is None:  # (every group of one: the sums are the weights)
        return np.take(w, order, axis=-1)
    (one, one_at), (cases, starts, longer_at) = summing
    sums = np.empty(w.shape[:-1] + (len(one_at) + len(longer_at),))
    sums[..., one_at] = np.take(w, one, axis=-1)
    if len(longer_at):
        sums[..., longer_at] = np.add.reduceat(np.take(w, cases, axis=-1), starts, axis=-1)
    return sums


class _Runs:
    """Runs of equal values of a column, for the figures that weigh them (Spearman's mid-ranks, Kendall's
    tied weights): the column's stable sort ``order``, where each run starts (``starts``), each case's
    run in its own place (``at``), and `sums`, each run's weight in a block of draws."""

    def __init__(self, order: np.ndarray, starts: np.ndarray, at: Optional[np.ndarray] = None):
        self.order, self.starts, self.at = order, starts, at
        # every run one case, in place (a column of distinct values in order): the sums are the weights
        self.plain = len(starts) == len(order) and bool((order == np.arange(len(order))).all())
        # checked once and kept in C where the loops are compiled (not at every block of draws)
        self.kept = _c_runs(order, starts, at) if _c_runs is not None else None
        self._summing: Any = False  # (`_summing`'s, made when first needed)
        self._last: Optional[tuple] = None  # (a block of weights, its runs' sums)

    @property
    def summing(self):
        if self._summing is False:
            self._summing = _summing(self.order, self.starts)
        return self._summing

    @classmethod
    def of(cls, v: np.ndarray) -> "_Runs":
        order, starts, group = _groups(v)
        at = np.empty_like(order)
        at[order] = group
        return cls(order, starts, at)

    def sums(self, w):
        """The sum of each run's weights a row of ``w``, in the runs' order (`_group_sums`). The last
        block's are kept: the figures of a block ask for the same column's in turn (the block is not
        changed between; a new block is a new array)."""
        if self.plain:
            return w
        last = self._last
        if last is None or last[0] is not w:
            if _compiled(w) and _run_sums is not None and self.kept is not None:  # a row at a time, in C
                sums = np.empty(w.shape[:-1] + (len(self.starts),))
                _run_sums(w, self.kept, sums)
            else:
                sums = _group_sums(w, self.order, self.summing)
            last = self._last = (w, sums)
        return last[1]


class _Columns(dict):
    """The cases' columns (name -> values), with each column's `_Runs` made once for every figure built
    from them (`_runs`)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.runs: dict[str, _Runs] = {}


def _runs(c, k: str) -> _Runs:
    """The `_Runs` of column ``k`` of ``c`` (made once where ``c`` is `_Columns`)."""
    made = getattr(c, "runs", None)
    if made is None:
        return _Runs.of(c[k])
    if k not in made:
        made[k] = _Runs.of(c[k])
    return made[k]


def _mid_ranks(w, runs: _Runs):
    """Each case's weighted mid-rank: the weight of the cases below it, plus half of its tie group's
    (each case's picked from its group's, not written through the sort)."""
    sums = runs.sums(w)
    if _compiled(w) and _c_mid_ranks is not None and runs.kept is not None and sums.flags.c_contiguous:
        out = np.empty(w.shape)  # the same steps a row at a time, in C
        _c_mid_ranks(sums, runs.kept, out)
        return out
    below = np.cumsum(sums, axis=-1) - sums
    return np.take(below + sums / 2, runs.at, axis=-1)


def _spearman(c):
    rx, ry = _runs(c, "x"), _runs(c, "y")
    return lambda w: _pearson_of(w, _mid_ranks(w, rx), _mid_ranks(w, ry))


def _kendall(c):
    """Kendall's tau-b of weighted cases: sum_ij w_i w_j sign(x_i - x_j) sign(y_i - y_j), over the
    weight of the pairs untied in x times that untied in y, square-rooted. The strictly discordant
    weight is counted by merging halves level by level (a merge sort's inversion count, on every
    row of ``w`` at once), so the cost is m log m per row, not m^2.

    At each level only the left halves are summed (each block's left cases by y, highest first) and
    each right case reads the sum of the left cases strictly above it: the same additions in the same
    order as a running sum over the whole merged block (a right case adds an exact zero there), so
    the draws are the same to the last bit, at about half the passes over the weights. A block of
    draws is merged in C where the package was built with ``ragbridge.analysis._stats`` (a draw at a
    time, the same additions in the same order and precision), else by `_merge`."""
    x, y = c["x"], c["y"]
    m = len(x)
    order = np.lexsort((y, x))  # by x, then y: an earlier case with the same x is never above
    size = 1 << max(0, (m - 1).bit_length())
    ys = np.full(size, -np.inf)
    ys[:m] = y[order]
    pos = np.arange(size)
    # each level's places (one row a level): the left cases, by y highest first block after block;
    # the right cases; where each right case's running sum is (1 + block * half + k: the sum of its
    # block's first k + 1 left cases), 0 for none. Made and kept in C where it merges (by a merge
    # sort, not a sort a level), else in NumPy arrays.
    levels = size.bit_length() - 1
    compiled = None not in (_merge_places, _kendall_discordant, _kendall_alone)
    rank = np.unique(ys, return_inverse=True)[1].ravel()  # y's rank among its distinct values
    key = int(rank.max()) - rank  # how many distinct values of y are above
    places = _merge_places(order.astype(np.int32), key.astype(np.int32)) if compiled else None
    lefts, rights, at = (np.empty((0 if compiled else levels, size // 2), np.int32) for _ in range(3))
    for level in range(0 if compiled else levels):
        half = 1 << level
        left = pos % (2 * half) < half
        # within each merged block: by y, highest first; among equal y the right half first, so a
        # right case counts only the left cases strictly above it (the order of
        # ``np.lexsort((left, -ys, block))``, as one key sorted stably)
        perm = np.argsort(pos // (2 * half) * (2 * len(pos) + 2) + 2 * key + left, kind="stable")
        is_left = left[perm]
        # each right case: how many left cases of its block are before it
        before = (np.cumsum(is_left) - pos // (2 * half) * half)[~is_left]
        lefts[level], rights[level] = perm[is_left], perm[~is_left]
        at[level] = np.where(before > 0, pos[: size // 2] // half * half + before, 0)
    # the cases in order of (x, y) are in ``order`` already: the pairs' groups are runs of it
    pair = _unique_rows(np.c_[x, y])[1]
    ties = (_runs(c, "x"), _runs(c, "y"), _Runs(order, _groups(pair.astype(float))[1]))
    by_place: list = []  # `_merge`'s layout of the levels, made when first needed

    def f(w):
        rows = w.shape[0]
        total = w.sum(-1) ** 2
        in_x, in_y, in_xy = ((t.sums(w) ** 2).sum(-1) for t in ties)
        untied_x, untied_y = total - in_x, total - in_y
        same_y = in_y - in_xy
        if compiled and rows > 1:  # draws: single precision, in C
            discordant = np.array(_kendall_discordant(np.ascontiguousarray(w, float), places))
        elif compiled:  # a draw alone (the figure, or a block of one draw): double precision, in C
            discordant = np.empty(rows)  # (a large merge's levels shared by two threads)
            two = threads() if size >= 1 << 16 else 1
            _kendall_alone(np.ascontiguousarray(w, float), places, discordant, two)
        else:
            if not by_place and len(lefts):
                by_place.extend(_by_place(lefts, rights, at))
            discordant = _merge(np.take(w, order, axis=-1), size, by_place)
        return np.clip(_ratio(untied_x - same_y - 4 * discordant, np.sqrt(untied_x * untied_y)), -1, 1)
    return f


def _unique_rows(a: np.ndarray):
    """``np.unique(a, axis=0, return_inverse=True)`` of a 2-D float array (the distinct rows in order,
    and each row's place among them), by sorting its columns together: ``np.unique`` compares the
    rows as records, several times slower. A NaN or a negative zero (which ``np.unique`` tells
    apart by its own rules) sends the array to ``np.unique``."""
    if not a.size or np.isnan(a).any() or (np.signbit(a) & (a == 0)).any():
        rows, inverse = np.unique(a, axis=0, return_inverse=True)
        return rows, inverse.ravel()
    order = np.lexsort(a.T[::-1])
    ordered = a[order]
    new = np.r_[True, (ordered[1:] != ordered[:-1]).any(axis=1)]
    inverse = np.empty(len(a), np.intp)
    inverse[order] = np.cumsum(new) - 1
    return ordered[new], inverse


def _by_place(lefts, rights, at):
    """`_merge`'s levels, ``(lefts, rights, at, half)``, from `_kendall`'s: the left cases of blocks of
    at most `_BY_PLACE` cases a side laid out place by place (each block's side by side) and ``at``
    pointing into that layout."""
    size = 2 * lefts.shape[1]
    levels = []
    for level in range(len(lefts)):
        half = 1 << level
        lefts_, at_ = lefts[level], at[level]
        if half <= _BY_PLACE:
            blocks = size // 2 // half
            block = np.arange(size // 2) // half
            lefts_ = lefts_.reshape(blocks, half).T.ravel()
            at_ = np.where(at_ > 0, 1 + (at_ - 1 - block * half) * blocks + block, 0)
        levels.append((lefts_, rights[level], at_, half))
    return levels


def _merge(by_xy, size, levels):
    """The strictly discordant weight of each row of ``by_xy`` (the weights in order of (x, y)), in
    NumPy: at each level the left cases' running sums of every row (single precision where there are
    several rows, the draws), then the dot product of the right cases' sums and weights. Short blocks
    are summed place by place over every block at once (a running sum a block costs a call's overhead
    per few cases). The single-precision dot product of each level is NumPy's ``einsum``, whose order
    of additions follows its operands' memory layout: the running sums are picked column-major (each
    draw's products added one after the other, as in C), as they always were."""
    rows, m = by_xy.shape
    dtype = np.float32 if rows > 1 else float  # draws: single precision
    padded = np.empty((rows, size), dtype)
    padded[:, :m] = by_xy
    padded[:, m:] = 0
    sums = np.zeros((rows, 1 + size // 2), dtype)  # a zero, then the left cases' running sums
    discordant = np.zeros(rows)
    for lefts, rights, at, half in levels:
        np.take(padded, lefts, axis=1, out=sums[:, 1:])
        if half <= _BY_PLACE:  # one addition a place, over every block at once
            run = sums[:, 1:].reshape(rows, half, -1)
            for k in range(1, half):
                np.add(run[:, k - 1], run[:, k], out=run[:, k])
        else:
            run = sums[:, 1:].reshape(rows, -1, half)
            np.cumsum(run, axis=-1, out=run)
        # (the sums picked column-major, as indexing ``sums[:, at]`` does, but faster)
        picked = np.take(sums.T, at, axis=0).T
        discordant += np.einsum("ij,ij->i", picked, np.take(padded, rights, axis=1))
    return discordant


#: merge blocks of at most this many cases a side are summed place by place (one addition over every
#: block at once), longer ones block by block (NumPy's running sum)
_BY_PLACE = 128


#: figure -> its form on weighted cases, built from the cases' columns: ``a``, ``b`` (verdicts of
#: raters a and b; a is the truth for tpr, tnr and balanced accuracy), ``x``, ``y`` (their values)
FIGURE_FORMS: dict[str, Callable] = {
    "tpr": _tpr, "tnr": _tnr, "balanced_accuracy": _balanced_accuracy, "kappa": _kappa,
    "agreement": _agreement, "share": _share, "spearman": _spearman, "kendall": _kendall,
    "pearson": _pearson, "mae": _mae,
}
#: the columns each figure reads
_READS = {f: ("a", "b") for f in ("tpr", "tnr", "balanced_accuracy", "kappa", "agreement")} | {
    "share": ("a",)} | {f: ("x", "y") for f in ("spearman", "kendall", "pearson", "mae")}
PRIOR = 0.5  # the weight of each corner of the outcome square, in cases
DEFAULT_DRAWS = 2000  # posterior draws (interval end points)


def rater_figures(
    figures: Sequence[str], a: Sequence[bool], b: Optional[Sequence[bool]] = None,
    x: Optional[Sequence[float]] = None, y: Optional[Sequence[float]] = None, *,
    cut_x: float = 0.5, cut_y: float = 0.5, scale_x: tuple[float, float] = (0.0, 1.0),
    strata: Optional[Sequence[str]] = None, shares: Optional[dict[str, float]] = None,
    fixed_b: Optional[dict[str, bool]] = None, n_draws: int = DEFAULT_DRAWS, seed: int = 0,
    confidence: float = CONFIDENCE,
) -> dict[str, tuple[float, float, float]]:
    """Each figure of ``figures`` (names of `FIGURE_FORMS`) of two raters on the same cases, with
    its posterior interval: ``{figure: (value, low, high)}`` (see the module docstring).

    ``a``, ``b``: the raters' verdicts on each case (``b`` None: one rater, for ``share``); ``x``,
    ``y``: their values (for the value figures), passing at ``cut_x`` and ``cut_y``, ``x`` on a scale
    from ``scale_x[0]`` to ``scale_x[1]``, ``y`` on 0..1. ``strata``: each case's design stratum and
    ``shares`` each stratum's share of the population (None: the cases as drawn, one stratum).
    ``fixed_b``: stratum -> the verdict b gives every case of that stratum (b's verdicts made the
    strata): the corners of b's other verdict are left out there. A figure undefined on the cases
    is NaN with no interval; with ``n_draws`` 0 every interval is NaN."""
    cases = _Columns(a=np.asarray(a, bool))
    for k, v in (("b", b), ("x", x), ("y", y)):
        if v is not None:
            cases[k] = np.asarray(v, bool if k == "b" else float)
    n = len(cases["a"])
    groups = ["all"] * n if strata is None else [str(h) for h in strata]
    drawn = {h: groups.count(h) for h in dict.fromkeys(groups)}
    share = ({h: k / n for h, k in drawn.items()} if shares is None
             else {h: float(v) for h, v in shares.items()})
    # the figure: each case stands for its stratum's share over the cases drawn from it
    weights = np.array([[share[h] / drawn[h] for h in groups]])
    points = {f: float(FIGURE_FORMS[f](cases)(weights)[0]) if n else math.nan for f in figures}
    cases.runs.clear()  # (the cases' runs: not held through the draws)
    out = {f: (points[f], math.nan, math.nan) for f in figures}
    wanted = [f for f in figures if math.isfinite(points[f])]
    if n_draws <= 0 or not wanted:
        return out
    corners = _corners(cases, list(share), fixed_b or {}, {
        "x": {False: (scale_x[0] + cut_x) / 2, True: (cut_x + scale_x[1]) / 2},
        "y": {False: cut_y / 2, True: (cut_y + 1.0) / 2}})
    index = {h: i for i, h in enumerate(share)}
    stratum = [index[h] for h in groups + corners.pop("stratum")]
    prior = np.r_[np.ones(n), np.full(len(stratum) - n, PRIOR)]
    dist: dict[str, np.ndarray] = {}
    for reads in dict.fromkeys(_READS[f] for f in wanted):  # the verdict figures, then the value figures
        # identical rows (stratum and the columns read) merged: k Gamma(1) weights add up to a Gamma(k)
        key = np.column_stack([stratum] + [np.r_[cases[k], corners[k]].astype(float) for k in reads])
        rows, inverse = _unique_rows(key)
        shape = np.bincount(inverse.ravel(), weights=prior, minlength=len(rows))
        del key, inverse  # (not held through the draws)
        cols = _Columns({k: rows[:, i + 1].astype(cases[k].dtype) for i, k in enumerate(reads)})
        forms = {f: FIGURE_FORMS[f](cols) for f in wanted if _READS[f] == reads}
        members = [(share[h], np.flatnonzero(rows[:, 0] == i)) for h, i in index.items()]
        rng = np.random.default_rng(seed)
        dist |= {f: np.empty(n_draws) for f in forms}
        block = max(1, BLOCK // (4 << max(0, (len(shape) - 1).bit_length())))

        def draw(start: int) -> np.ndarray:  # a block's Gamma draws (the blocks' one after the other)
            return rng.standard_gamma(shape, size=(min(n_draws, start + block) - start, len(shape)))

        # many cases: the next block's draws are made in a thread while this block's figures are
        many = len(shape) >= 1 << 16
        with thread_pool(1, "draws") if many else contextlib.nullcontext() as pool:
            ahead = pool.submit(draw, 0) if pool else None
            for start in range(0, n_draws, block):
                g = ahead.result() if ahead else draw(start)
                if pool and start + block < n_draws:
                    ahead = pool.submit(draw, start + block)
                for part, idx in members:
                    if len(idx) == len(shape):  # one stratum: every column in place, summed column-major
                        g *= part / np.asfortranarray(g).sum(-1, keepdims=True)  # as ``g[:, idx]`` is
                    else:
                        g[:, idx] *= part / g[:, idx].sum(-1, keepdims=True)
                for f, form in forms.items():
                    dist[f][start:start + len(g)] = form(g)
    tail = (1.0 - confidence) / 2.0
    for f in wanted:
        ok = dist[f][np.isfinite(dist[f])]
        if ok.size and ok.size >= 0.5 * n_draws:
            lo, hi = np.quantile(ok, [tail, 1.0 - tail])
            out[f] = (points[f], min(float(lo), points[f]), max(float(hi), points[f]))
    return out


def counted_figures(figures: Sequence[str], pp: int, pf: int, fp: int, ff: int) -> dict[str, float]:
    """The verdict figures of `FIGURE_FORMS` (``kappa``, ``agreement``, ``tpr``, ...) of two raters from
    their confusion counts (``pp`` both pass, ``pf`` a passes and b fails, ``fp`` the reverse, ``ff``
    both fail): the figure on the cases, each cell weighed by its exact share (no interval)."""
    n = pp + pf + fp + ff
    cells = {"a": np.array([True, True, False, False]), "b": np.array([True, False, True, False])}
    if not n:
        return {f: math.nan for f in figures}
    weights = np.array([[pp / n, pf / n, fp / n, ff / n]])
    return {f: float(FIGURE_FORMS[f](cells)(weights)[0]) for f in figures}


def _corners(cases: dict[str, np.ndarray], strata: list[str], fixed_b: dict[str, bool],
             middle: dict[str, dict[bool, float]]) -> dict[str, list]:
    """The columns of each stratum's corners: every combination of the raters' pass and fail (but
    b's verdict where ``fixed_b`` fixes it), a value in the ``middle`` of its verdict's part of the
    scale; ``stratum`` names each corner's stratum."""
    sides = [k for k in ("a", "b") if k in cases]
    out: dict[str, list] = {k: [] for k in (*cases, "stratum")}
    for h in strata:
        for corner in itertools.product((True, False), repeat=len(sides)):
            got = dict(zip(sides, corner))
            if h in fixed_b and got["b"] != fixed_b[h]:
                continue
            got |= {k: middle[k][got[side]] for k, side in (("x", "a"), ("y", "b")) if k in cases}
            for k in cases:
                out[k].append(got[k])
            out["stratum"].append(h)
    return out


def mean_rows(x):
    return np.mean(x, axis=-1)


# --------------------------------------------------------------------------------------------
# Intervals and tests


def bootstrap_interval(
    statistic: Callable, data: Sequence[Sequence[float]], n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0, confidence: float = CONFIDENCE,
) -> tuple[float, float]:
    """Paired percentile bootstrap interval of ``statistic(*rows)`` (one value per row, as `mean_rows`).

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
    compiled = _bootstrap_means is not None and statistic is mean_rows and len(arrays) == 1
    state = _pcg_state(rng) if compiled else None
    if state is not None:  # the same draws, gathers and sums as the loop below, in C
        state = _bootstrap_means(np.ascontiguousarray(arrays[0]), state, n_resamples, block, dist)
        _set_pcg_state(rng, state)
    for start in range(0, n_resamples if state is None else 0, block):
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


def mean_shift(base: np.ndarray, new: np.ndarray, seed: int, backend: str, metric: str, tag: str,
               confidence: float = CONFIDENCE, n_resamples: int = DEFAULT_RESAMPLES,
               n_permutations: int = DEFAULT_PERMUTATIONS) -> tuple[float, float, float]:
    """The shift of a mean between two runs' paired scores of ``backend``'s ``metric`` over the cases
    of ``tag`` (``"(all)"`` for every case): ``(low, high, p)``, its paired bootstrap interval
    (`paired_bootstrap_ci`) and two-sided paired permutation p-value (`paired_permutation_pvalue`),
    both seeded by ``group_seed(seed, backend, metric, tag)``. ``diff``, ``compare A B`` and the
    report's comparison with a baseline all ask here, so one pair of runs has one interval and one
    p-value everywhere. NaN where there are too few pairs (an interval needs 2) or no resample is
    asked for (0)."""
    gseed = group_seed(seed, backend, metric, tag)
    n = len(base)
    lo, hi = (paired_bootstrap_ci(base, new, confidence, n_resamples, gseed) if n >= 2 and n_resamples > 0
              else (math.nan, math.nan))
    p = (paired_permutation_pvalue(base, new, "two-sided", 0.0, n_permutations, gseed)
         if n and n_permutations > 0 else math.nan)
    return lo, hi, p


def threads() -> int:
    """How many shifts (`mean_shift`) ``diff`` (and the report beside a baseline) and ``compare`` compute
    at once, each in a thread of its own (its resampling loops release the GIL), and whether a large
    Kendall merge shares its levels between two threads: the processors this process may run on, at
    most 4. Each shift is drawn from its own seed, so its numbers do not depend on how many run at
    once."""
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        n = os.cpu_count() or 1
    return max(1, min(4, n))


@contextlib.contextmanager
def thread_pool(workers: int, name: str):
    """A pool of ``workers`` threads named ``ragbridge-NAME``: when the block ends (Ctrl-C too) the work
    still queued is dropped and only the running calls are waited for."""
    pool = ThreadPoolExecutor(workers, thread_name_prefix=f"ragbridge-{name}")
    try:
        yield pool
    finally:
        pool.shutdown(cancel_futures=True)


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
    with random bits: the sum each half byte of them selects is looked up in a table of its 16
    sums, not multiplied out. Cases
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
        # each random byte flips eight cases, its highest bit the first: the sum of the differences
        # each half byte selects is looked up in a table of its 16 values (a row of 32 a byte)
        nbytes = (m + 7) // 8
        padded = np.zeros(nbytes * 8)
        padded[:m] = d
        block = max(1, BLOCK // m)
        state = _pcg_state(rng) if _sign_flip_counts is not None else None
        if state is not None:  # the same bytes and sums as the loop below, in C (the table's, made as read)
            n_less, n_greater, state = _sign_flip_counts(padded, state, n_resamples, block, total, observed,
                                                         gamma)
            _set_pcg_state(rng, state)
        else:
            table = _half_byte_table(padded)
            offsets = np.arange(nbytes, dtype=np.intp) * 32
        for start in range(0, n_resamples if state is None else 0, block):
            k = min(n_resamples, start + block) - start
            raw = rng.integers(0, 256, size=(k, nbytes), dtype=np.uint8).astype(np.intp)
            picked = np.take(table, (raw >> 4) + offsets).sum(-1)
            picked += np.take(table, (raw & 15) + (offsets + 16)).sum(-1)
            null = 2.0 * picked - total
            n_less += int(np.count_nonzero(null <= observed + gamma))
            n_greater += int(np.count_nonzero(null >= observed - gamma))
        p_less, p_greater = (n_less + 1) / (n_resamples + 1), (n_greater + 1) / (n_resamples + 1)
    if alternative == "less":
        return float(p_less)
    if alternative == "greater":
        return float(p_greater)
    return float(min(1.0, 2.0 * min(p_less, p_greater)))


def _half_byte_table(padded: np.ndarray) -> np.ndarray:
    """The permutation test's table: for each byte of 8 differences (``padded``, zeros after the last),
    the sums its high half byte's 16 values select from its first four differences, then those its low
    half byte's select from the last four (32 a byte, flat); a half byte's highest bit selects the
    first difference, and the selected ones are added one after the other (an unselected one adds an
    exact zero), the order of a matrix product's running sum."""
    halves = padded.reshape(-1, 2, 4)
    bits = np.unpackbits(np.arange(16, dtype=np.uint8)[:, None], axis=1)[:, 4:].astype(bool)
    table = np.zeros((len(halves), 2, 16))
    for j in range(4):
        table += np.where(bits[:, j], halves[:, :, j:j + 1], 0.0)
    return table.ravel()


# --------------------------------------------------------------------------------------------
# Prediction-powered inference


def normal_quantile(p: float) -> float:
    """The standard normal quantile at ``p`` (``normal_quantile(0.975)`` = 1.96; scipy's ``norm.ppf``
    to 1e-15)."""
    from statistics import NormalDist

    if p <= 0.0 or p >= 1.0:
        return -math.inf if p <= 0.0 else math.inf
    return float(NormalDist().inv_cdf(p))


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 1000):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)),
                   -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-16:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x)
                     + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_two_sided(t: float, df: float) -> float:
    """P(|T| >= |t|) for Student's t with ``df`` degrees of freedom (scipy's ``2 * t.sf(|t|, df)``)."""
    if math.isinf(t):
        return 0.0
    return _betainc(df / 2.0, 0.5, df / (df + t * t))


def t_quantile(q: float, df: float) -> float:
    """Student's t quantile at ``q`` with ``df`` degrees of freedom (scipy's ``t.ppf``), by bisection on
    `t_two_sided`."""
    if q == 0.5:
        return 0.0
    if q < 0.5:
        return -t_quantile(1.0 - q, df)
    target = 2.0 * (1.0 - q)  # the two-sided tail beyond the quantile
    lo, hi = 0.0, 1.0
    while t_two_sided(hi, df) > target:
        lo, hi = hi, hi * 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if t_two_sided(mid, df) > target:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-14 * max(1.0, hi):
            break
    return (lo + hi) / 2.0


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
    points), ``se``, ``p_value`` (of slope 0, two-sided) and ``n``. Fewer than two points: NaN.
    The figures of ``scipy.stats.linregress``, computed here."""
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
    xm, ym = xx - xx.mean(), yy - yy.mean()
    sxx, syy, sxy = float(xm @ xm), float(ym @ ym), float(xm @ ym)
    slope = sxy / sxx
    out.update(slope=slope, intercept=float(yy.mean()) - slope * float(xx.mean()))
    if n > 2:
        df = n - 2
        r = max(-1.0, min(1.0, sxy / math.sqrt(sxx * syy)))
        se = math.sqrt(max(0.0, (1 - r * r) * syy / sxx / df))
        t_stat = r * math.sqrt(df / ((1.0 - r + 1e-20) * (1.0 + r + 1e-20)))
        t = t_quantile(0.5 + confidence / 2, df)
        out.update(se=se, low=slope - t * se, high=slope + t * se, p_value=t_two_sided(t_stat, df))
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
