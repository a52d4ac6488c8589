"""compare, validate and calibrate: each figure against a hand-computed example, the counts of cases
a backend could not score, the vectorised bootstrap forms against the libraries, and the CLI."""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
import warnings

import numpy as np
import pytest
from scipy import stats

from conftest import EXAMPLE, ragbridge_cli, write_run
from ragbridge import Case, Score, load_cases
from ragbridge import analysis as an
from ragbridge.analysis import stats as st

# --------------------------------------------------------------------------------------------
# Run folders written by hand (judged backends are plugins; these tests need none of them)


def tiny_cases(n: int) -> list[Case]:
    return [Case(id=f"c{i}", question=f"question {i}?", answer=f"answer {i}") for i in range(1, n + 1)]


def sc(case: str, metric: str, backend: str, value=None, **kw) -> Score:
    return Score(case_id=case, metric=metric, backend=backend, value=value, **kw)


# The hand-computed example: five cases both backends scored, one more each could not score.
X = [0.1, 0.4, 0.35, 0.8, 0.9]
Y = [0.2, 0.3, 0.5, 0.7, 1.0]


@pytest.fixture
def hand_run(tmp_path):
    cases = tiny_cases(8)
    scores = [sc(f"c{i + 1}", "faithfulness", "alpha", x) for i, x in enumerate(X)]
    scores += [sc(f"c{i + 1}", "faithfulness", "beta", y) for i, y in enumerate(Y)]
    scores += [
        sc("c6", "faithfulness", "alpha", 0.5),
        sc("c6", "faithfulness", "beta", None, reason="no statements"),   # undefined
        sc("c7", "faithfulness", "alpha", None, error="TimeoutError: judge"),  # errored
        sc("c7", "faithfulness", "beta", 0.9),
        # c8: neither scored it (missing for both)
    ]
    return write_run(tmp_path / "hand", cases, scores)


def synthetic_scores(cases: list[Case], seed: int = 7) -> list[Score]:
    """Three judged backends on the support-bot set: values that follow the known flaws, with
    backend-specific leniency and noise, plus an undefined, an errored and a missing score."""
    rng = random.Random(seed)
    out: list[Score] = []
    for i, c in enumerate(cases):
        flawed = bool(c.metadata.get("flaw"))
        base = 0.3 if flawed else 0.75
        for backend, shift, noise in (("ragas", 0.0, 0.15), ("deepeval", 0.12, 0.1), ("trulens", -0.1, 0.2)):
            for metric in ("faithfulness", "answer_relevance"):
                v = min(1.0, max(0.0, base + shift + rng.gauss(0, noise)))
                v = round(v, 3)
                kw = dict(judge_calls=2, prompt_tokens=300 + i, completion_tokens=40,
                          native_metric=f"{backend}-{metric}", native_value=v)
                if metric == "faithfulness" and backend in ("ragas", "deepeval"):
                    verdicts = [{"claim": "claim one", "verdict": "yes"},
                                {"claim": "claim two", "verdict": "no" if flawed else "yes"}]
                    kw["native_value"] = {"score": v, "claims": verdicts}
                reason = f"{backend} says {'unsupported claim' if flawed else 'all claims supported'}"
                if backend == "ragas" and metric == "faithfulness" and i == 5:
                    out.append(sc(c.id, metric, backend, None, reason="no statements", **kw))
                elif backend == "deepeval" and metric == "faithfulness" and i == 6:
                    out.append(sc(c.id, metric, backend, None, error="RateLimitError: 429", **kw))
                elif backend == "trulens" and i == 7:
                    continue  # missing
                else:
                    out.append(sc(c.id, metric, backend, v, reason=reason, **kw))
    return out


@pytest.fixture(scope="module")
def mixed_run(tmp_path_factory):
    cases = load_cases(EXAMPLE)
    import ragbridge

    native = ragbridge.evaluate(cases, backends=["native"], metrics=["recall@5", "mrr", "must_contain"])
    scores = list(native.scores) + synthetic_scores(cases)
    return write_run(tmp_path_factory.mktemp("mixed") / "run", cases, scores,
                     judge={"model": "stub-model", "base_url": "http://127.0.0.1:9/v1"})


# --------------------------------------------------------------------------------------------
# compare: every figure against the hand computation


def test_compare_figures_match_hand_computation(hand_run):
    frame = an.compare(hand_run, n_resamples=400)
    assert len(frame) == 1
    row = frame.iloc[0]
    assert (row.metric, row.backend_a, row.backend_b) == ("faithfulness", "alpha", "beta")
    assert row.n_paired == 5 and row.n_cases == 8
    # ranks of X: 1 3 2 4 5, of Y: 1 2 3 4 5; sum d^2 = 2 -> 1 - 6*2 / (5*(25-1))
    assert row.spearman == pytest.approx(1 - 6 * 2 / (5 * 24))
    # 10 pairs, one discordant (cases 2 and 3) -> (9 - 1) / 10
    assert row.kendall == pytest.approx(0.8)
    # deviations from the means 0.51 and 0.54: sum dx*dy = 0.398, sum dx^2 = 0.442, sum dy^2 = 0.412
    assert row.pearson == pytest.approx(0.398 / math.sqrt(0.442 * 0.412))
    # |differences| 0.1 0.1 0.15 0.1 0.1
    assert row.mae == pytest.approx(0.55 / 5)
    # at 0.5: alpha passes c4 c5, beta passes c3 c4 c5 -> agreement 4/5, pe = .4*.6 + .6*.4
    assert (row.both_pass, row.a_pass_b_fail, row.a_fail_b_pass, row.both_fail) == (2, 0, 1, 2)
    assert row.agreement == pytest.approx(0.8)
    assert row.kappa == pytest.approx((0.8 - 0.48) / (1 - 0.48))
    assert row.threshold_a == row.threshold_b == 0.5
    # the cases a backend could not score are counted, not dropped
    assert (row.a_scored, row.a_undefined, row.a_errored, row.a_missing) == (6, 0, 1, 1)
    assert (row.b_scored, row.b_undefined, row.b_errored, row.b_missing) == (6, 1, 0, 1)
    assert row.mean_a == pytest.approx(np.mean(X)) and row.mean_b == pytest.approx(np.mean(Y))
    for f in an.FIGURES:
        lo, hi = row[f"{f}_low"], row[f"{f}_high"]
        assert math.isnan(lo) or lo <= row[f] + 1e-9 <= hi + 2e-9, f


def test_compare_thresholds_per_backend(hand_run):
    row = an.compare(hand_run, thresholds=["0.5", "beta=0.75"], n_resamples=0).iloc[0]
    assert (row.threshold_a, row.threshold_b) == (0.5, 0.75)
    # beta passes only c5 now: alpha T T on c4 c5 -> c4 differs
    assert (row.both_pass, row.a_pass_b_fail, row.a_fail_b_pass, row.both_fail) == (1, 1, 0, 3)
    row2 = an.compare(hand_run, thresholds="alpha:faithfulness=0.05", n_resamples=0).iloc[0]
    assert row2.threshold_a == 0.05 and row2.threshold_b == 0.5
    with pytest.raises(an.AnalysisError, match="bad threshold"):
        an.compare(hand_run, thresholds=["beta=high"])


def test_bootstrap_is_seeded_and_brackets_the_estimate(mixed_run):
    a = an.compare(mixed_run, metrics=["faithfulness"], n_resamples=300, seed=3)
    b = an.compare(mixed_run, metrics=["faithfulness"], n_resamples=300, seed=3)
    c = an.compare(mixed_run, metrics=["faithfulness"], n_resamples=300, seed=4)
    cols = [f"{f}_{e}" for f in an.FIGURES for e in ("low", "high")]
    assert a[cols].equals(b[cols])
    assert not a[cols].equals(c[cols])
    for row in a.to_dict("records"):
        for f in an.FIGURES:
            assert row[f"{f}_low"] <= row[f] + 1e-9 <= row[f"{f}_high"] + 2e-9, (f, row)
            assert row[f"{f}_high"] - row[f"{f}_low"] < 1.0


def test_figures_on_weighted_cases_equal_the_libraries():
    """Each figure on equally weighted cases is scipy's and scikit-learn's; on cases weighted 1, 2 or
    3 it is the libraries' figure of the cases repeated that often (what a stratum's weight means)."""
    from sklearn.metrics import balanced_accuracy_score, cohen_kappa_score

    rng = np.random.default_rng(1)
    names = list(st.FIGURE_FORMS)
    for n in [2, 3, 5, 25, 60, 300]:  # 300: Kendall's merge runs through nine levels
        x = np.round(rng.random(n), 1)  # rounding makes ties
        y = np.round(0.5 * x + 0.5 * rng.random(n), 1)
        a, b = x > 0.5, y > 0.45
        for reps in (np.ones(n, int), rng.integers(1, 4, n)):
            xs, ys, as_, bs = (np.repeat(v, reps) for v in (x, y, a, b))
            got = {k: v[0] for k, v in st.rater_figures(
                names, a, b, x, y, strata=[f"s{i}" for i in range(n)],
                shares={f"s{i}": r / reps.sum() for i, r in enumerate(reps)}, n_draws=0).items()}
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                want = {"spearman": stats.spearmanr(xs, ys).statistic,
                        "kendall": stats.kendalltau(xs, ys).statistic,
                        "pearson": stats.pearsonr(xs, ys).statistic if n > 2 else math.nan,
                        "mae": np.mean(np.abs(xs - ys)), "agreement": np.mean(as_ == bs),
                        "kappa": cohen_kappa_score(as_, bs), "share": np.mean(as_),
                        "tpr": np.mean(bs[as_]) if as_.any() else math.nan,
                        "tnr": np.mean(~bs[~as_]) if (~as_).any() else math.nan,
                        "balanced_accuracy": (balanced_accuracy_score(as_, bs)
                                              if as_.any() and (~as_).any() else math.nan)}
            for k in names:
                if n == 2 and k == "pearson":
                    continue
                w = want[k] if np.isfinite(want[k]) else math.nan
                assert (math.isnan(got[k]) and math.isnan(w)) or got[k] == pytest.approx(w, abs=1e-9), (n, k)
    # undefined stays undefined, never 0, and has no interval
    for figure, args in (("kappa", ([True] * 5, [True] * 5)), ("spearman", ([True] * 3, [True] * 3,
                                                                             [0.5] * 3, [0.1, 0.2, 0.3])),
                         ("tnr", ([True] * 4, [False] * 4))):
        v, lo, hi = st.rater_figures([figure], *args)[figure]
        assert math.isnan(v) and math.isnan(lo) and math.isnan(hi), figure


def test_kendall_of_many_draws_at_once_equals_scipy_on_the_cases_repeated():
    """Kendall's tau of a block of draws (the single-precision merge over every draw at once) is, for
    each draw of whole-number weights, scipy's tau-b of the cases repeated that often: ties in x, in
    y and in both, cases weighing 0, and sizes that run the merge's short and long blocks."""
    rng = np.random.default_rng(7)
    for m in [2, 5, 33, 130, 1000]:  # 1000: blocks of up to 512 cases (the running-sum branch)
        x = np.round(rng.random(m), 1)
        y = np.round(0.6 * x + 0.4 * rng.random(m), 1)
        kendall = st.FIGURE_FORMS["kendall"]({"x": x, "y": y})
        w = rng.integers(0, 4, size=(6, m)).astype(float)
        w[:, :2] += 1  # never all zero
        got = kendall(w)
        for row, value in zip(w, got):
            reps = row.astype(int)
            want = stats.kendalltau(np.repeat(x, reps), np.repeat(y, reps)).statistic
            assert value == pytest.approx(want, abs=2e-6), (m, value, want)
        # one draw alone (the figure itself) is summed in double precision
        assert kendall(w[:1])[0] == pytest.approx(got[0], abs=2e-6)
        reps = w[0].astype(int)
        assert kendall(w[:1])[0] == pytest.approx(
            stats.kendalltau(np.repeat(x, reps), np.repeat(y, reps)).statistic, abs=1e-12)


def _kendall_columns(rng, m, ties):
    """x and y of ``m`` cases: distinct values, or a handful of values in x, in y or in both."""
    x, y = rng.random(m), rng.random(m)
    if ties in ("x", "both"):
        x = np.round(x * 4) / 4
    if ties in ("y", "both"):
        y = np.round(0.5 * y + 0.5 * x, 1)
    return {"x": x, "y": y}


@pytest.mark.parametrize("ties", ["none", "x", "y", "both"])
def test_kendall_merged_in_c_is_the_numpy_merge_to_the_last_bit(ties, monkeypatch):
    """The compiled merge of a block of draws (single precision, a draw at a time) gives each draw's
    tau with the same bits as the NumPy steps (every draw at once): the same additions in the same
    order, so a change of its order of additions, or a fused multiply-add, fails here. Sizes from 1
    to 40,000 (the short blocks summed place by place and the long ones by running sums), blocks of
    1, 3 and 7 draws of posterior weights (Gamma draws of each merged case's count, scaled to 1)."""
    if st._kendall_discordant is None:
        pytest.skip("the package was built without its compiled modules")
    rng = np.random.default_rng(11)
    for m in [1, 2, 3, 7, 64, 129, 300, 1025, 5000, 40000]:
        c = _kendall_columns(rng, m, ties)
        shape = rng.integers(1, 4, m) + np.where(rng.random(m) < 0.1, -0.5, 0.0)
        for rows in (1, 3, 7):
            w = rng.standard_gamma(shape, size=(rows, m))
            w /= w.sum(-1, keepdims=True)
            in_c = st._kendall(c)(w)
            with monkeypatch.context() as p:
                p.setattr(st, "_kendall_discordant", None)
                p.setattr(st, "_kendall_alone", None)
                in_numpy = st._kendall(c)(w)
            assert in_c.tobytes() == in_numpy.tobytes(), (m, rows, in_c - in_numpy)
            # each draw of a block is merged alone: the same bits as a block of one
            places = _kendall_places(st._kendall(c))
            block = st._kendall_discordant(w, places)
            assert block == [st._kendall_discordant(w[i:i + 1], places)[0] for i in range(rows)]


@pytest.mark.parametrize("ties", ["none", "x", "y", "both"])
def test_correlations_in_c_are_the_numpy_steps_to_the_last_bit(ties, monkeypatch):
    """Weighted mid-ranks (runs summed as ``add.reduceat`` sums them, a running sum, half a run), the
    tied weight of Kendall's tau (runs' sums squared, summed pairwise) and the weighted Pearson
    correlation (each product rounded, each sum pairwise) made a row at a time in C have the bits of
    the NumPy steps on blocks of Gamma weights, from 1 case to 20,000, runs of one to thousands."""
    if st._weighted_pearson is None:
        pytest.skip("the package was built without its compiled modules")
    rng = np.random.default_rng(17)
    for m in [1, 2, 3, 9, 130, 1025, 20000]:
        c = _kendall_columns(rng, m, ties)
        w = rng.standard_gamma(rng.integers(1, 4, m).astype(float), size=(5, m))
        w /= w.sum(-1, keepdims=True)
        def figures():  # (new runs each time: a block's run sums are kept by its runs)
            rx, ry = st._Runs.of(c["x"]), st._Runs.of(c["y"])
            return [st._mid_ranks(w, rx), st._mid_ranks(w, ry), st._pearson_of(w, c["x"], c["y"]),
                    st._spearman(c)(w), st._kendall(c)(w)]
        got = figures()
        with monkeypatch.context() as p:
            for name in ("_weighted_pearson", "_c_mid_ranks", "_run_sums"):
                p.setattr(st, name, None)
            want = figures()
        for name, a, b in zip(["mid-ranks x", "mid-ranks y", "pearson", "spearman", "kendall"], got, want):
            assert a.shape == b.shape and a.tobytes() == b.tobytes(), (m, name, np.nanmax(np.abs(a - b)))


def _closure(kendall) -> dict:
    return dict(zip(kendall.__code__.co_freevars, (cell.cell_contents for cell in kendall.__closure__)))


def _kendall_places(kendall):
    """The places (checked and kept in C) `_kendall`'s figure hands the compiled merge."""
    return _closure(kendall)["places"]


def _kendall_tables(c):
    """`_kendall`'s order and levels as NumPy arrays (its figure made without the compiled merge)."""
    saved, st._merge_places = st._merge_places, None
    try:
        env = _closure(st._kendall(c))
    finally:
        st._merge_places = saved
    return env["order"].astype(np.int32), env["lefts"], env["rights"], env["at"]


def test_rater_figures_are_the_same_with_and_without_the_compiled_merge(monkeypatch):
    """Every figure and interval of two raters is the same, to the last bit, whether the package was
    built with its compiled merge or not (and the module imports without it)."""
    rng = np.random.default_rng(3)
    x = np.round(rng.random(3000), 2)
    y = np.clip(x + rng.normal(0, 0.2, 3000), 0, 1)
    args = (["kendall", "spearman"], x >= 0.5, y >= 0.5, x, y)
    with_c = st.rater_figures(*args, n_draws=200, seed=4)
    strata = np.arange(3000) % 3
    with_c_strata = st.rater_figures(*args, strata=strata, n_draws=100, seed=4)
    for name in ("_kendall_discordant", "_kendall_alone", "_weighted_pearson", "_c_mid_ranks",
                 "_run_sums"):
        monkeypatch.setattr(st, name, None)
    assert st.rater_figures(*args, n_draws=200, seed=4) == with_c
    assert st.rater_figures(*args, strata=strata, n_draws=100, seed=4) == with_c_strata
    probe = ("import sys\n"
             "class Refuse:\n"
             "    def find_spec(self, name, path=None, target=None):\n"
             "        if name == 'ragbridge.analysis._stats': raise ImportError(name)\n"
             "sys.meta_path.insert(0, Refuse())\n"
             "from ragbridge.analysis import stats\n"
             "assert stats._kendall_discordant is stats._kendall_alone is stats._bootstrap_means is None\n"
             "print(repr(stats.mean_shift(*[[i * i % 7 / 7 for i in range(k, k + 40)] for k in (0, 3)],"
             " 0, 'native', 'mrr', '(all)')))\n"
             "print(stats.rater_figures(['kendall'], [1, 0, 1, 0], [1, 1, 0, 0], [.9, .2, .6, .1],"
             " [.8, .7, .3, .2], n_draws=20)['kendall'][0])\n")
    p = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    shift, kendall = p.stdout.splitlines()
    pair = [[i * i % 7 / 7 for i in range(k, k + 40)] for k in (0, 3)]
    assert shift == repr(st.mean_shift(*pair, 0, "native", "mrr", "(all)"))
    assert float(kendall) == pytest.approx(stats.kendalltau([.9, .2, .6, .1], [.8, .7, .3, .2]).statistic)


def test_tie_groups_are_summed_as_reduceat_sums_them():
    """The sums of the tie groups (of Spearman's mid-ranks and Kendall's ties), made from the groups of
    one case picked and the others summed together, are NumPy's ``add.reduceat`` over every group to
    the last bit: groups of one, of several (up to thousands, over its pairwise sum's blocks), all of
    one, all in one, and mixes."""
    rng = np.random.default_rng(2)
    for m, distinct in [(1, 1), (9, 9), (9, 1), (500, 450), (20000, 15000), (20000, 40), (6000, 3)]:
        v = rng.integers(0, distinct, m).astype(float) if distinct < m else rng.permutation(m) / m
        if distinct == 3:  # one group of thousands beside two small ones
            v = np.where(rng.random(m) < 0.999, 1.0, v)
        order, starts, _ = st._groups(v)
        w = rng.standard_gamma(0.5, size=(3, m))
        w /= w.sum(-1, keepdims=True)
        want = np.add.reduceat(np.take(w, order, axis=-1), starts, axis=-1)
        got = st._group_sums(w, order, st._summing(order, starts))
        assert got.shape == want.shape and got.tobytes() == want.tobytes(), (m, distinct)


def _numpy_resample_means(values, rng, n_resamples, block):
    """`bootstrap_interval`'s NumPy loop for the mean, written out: a block of draws at a time."""
    n, out = len(values), []
    for start in range(0, n_resamples, block):
        k = min(n_resamples, start + block) - start
        idx = rng.integers(0, n, size=(k, n), dtype=np.int16 if n < 2**15 else np.int32)
        out.append(np.mean(values[idx], axis=-1))
    return np.concatenate(out)


def test_bootstrap_means_in_c_are_numpys_draws_and_sums_to_the_last_bit():
    """Each resample's mean made in C (PCG64's draws, Lemire's bounded integers on 16-bit halves
    below 2**15 cases and on 32-bit draws above, the gathered values' pairwise sum) has the bits of
    NumPy's ``rng.integers`` + gather + ``mean``, block after block, and leaves the generator where
    NumPy's calls leave it (its next draws are the same). Sizes over the pairwise sum's steps (8,
    128, their splits) and the draws' (2**15), blocks that split the resamples unevenly."""
    if st._bootstrap_means is None:
        pytest.skip("the package was built without its compiled modules")
    data = np.random.default_rng(5)
    for n in [2, 3, 7, 8, 9, 17, 127, 128, 129, 1000, 4097, 32767, 32768, 32769, 70001]:
        values = data.random(n) if n % 2 else data.normal(size=n) * 1e3 + np.round(data.random(n), 1)
        for block in (1, 7, 64):
            r = 25 if n > 30000 else 130
            want_rng, got_rng = np.random.default_rng(n), np.random.default_rng(n)
            want = _numpy_resample_means(values, want_rng, r, block)
            got = np.empty(r)
            st._set_pcg_state(got_rng, st._bootstrap_means(values, st._pcg_state(got_rng), r, block, got))
            assert got.tobytes() == want.tobytes(), (n, block, np.max(np.abs(got - want)))
            assert got_rng.integers(0, 2**63, 4).tolist() == want_rng.integers(0, 2**63, 4).tolist()


@pytest.mark.parametrize("kind", ["noise", "some equal", "a shift", "thirds"])
def test_intervals_and_p_values_are_the_same_with_and_without_the_compiled_loops(kind, monkeypatch):
    """`mean_interval`, `paired_permutation_pvalue` (each alternative, exact and sampled) and
    `mean_shift` give the same numbers to the last bit in C and in NumPy, from 1 case to 3,000 (the
    permutation's bytes cut 8 cases at a time, its table of half bytes, the pairwise sums of a row)."""
    if st._bootstrap_means is None or st._sign_flip_counts is None:
        pytest.skip("the package was built without its compiled modules")
    rng = np.random.default_rng(len(kind))
    for n in [1, 2, 5, 13, 14, 15, 17, 129, 3000]:
        b = rng.random(n)
        x = {"noise": b + rng.normal(0, 0.1, n),
             "some equal": np.where(rng.random(n) < 0.7, b, rng.integers(0, 2, n).astype(float)),
             "a shift": b + 0.01, "thirds": np.round(rng.random(n) * 3) / 3}[kind]
        if kind == "thirds":
            b = np.round(b * 3) / 3
        calls = [(st.mean_interval, (x - b, 0.95, 500, n)),
                 (st.mean_shift, (b, x, n, "native", "mrr", "(all)"))]
        calls += [(st.paired_permutation_pvalue, (b, x, alt, 0.0, k, n))
                  for alt in ("two-sided", "less", "greater") for k in (9999 if n < 20 else 999, 333)]
        in_c = [f(*a) for f, a in calls]
        with monkeypatch.context() as p:
            p.setattr(st, "_bootstrap_means", None)
            p.setattr(st, "_sign_flip_counts", None)
            in_numpy = [f(*a) for f, a in calls]
        assert repr(in_c) == repr(in_numpy), n  # floats' repr is exact


def test_each_sign_flip_resample_sums_to_the_numpy_steps_last_bit():
    """The compiled permutation loop adds each resample's half-byte sums (the table's entries, made
    as read) with the NumPy steps' bits (each sum's pairwise splits): asked where each resample's own
    statistic (from the NumPy steps) stands, with no tolerance, it counts what NumPy's statistics
    count, for every resample, for rows of 2 to 1,125 bytes (leaves of the pairwise sum and splits)
    and blocks of resamples cut short and not (the p-values alone can stay the same where a sum is off
    by its last bit)."""
    if st._sign_flip_counts is None:
        pytest.skip("the package was built without its compiled modules")
    rng = np.random.default_rng(40)
    for m in [9, 1030, 3000, 9000]:
        nbytes = (m + 7) // 8
        padded = np.zeros(nbytes * 8)
        padded[:m] = rng.normal(0, 0.1, m)
        table = st._half_byte_table(padded)
        offsets = np.arange(nbytes, dtype=np.intp) * 32
        total = float(padded.sum())
        for resamples, block in [(37, 37), (37, 20), (5, 2)]:
            draws, nulls = np.random.default_rng(m), []
            for start in range(0, resamples, block):
                k = min(resamples, start + block) - start
                raw = draws.integers(0, 256, size=(k, nbytes), dtype=np.uint8).astype(np.intp)
                picked = np.take(table, (raw >> 4) + offsets).sum(-1)
                picked += np.take(table, (raw & 15) + (offsets + 16)).sum(-1)
                nulls += (2.0 * picked - total).tolist()
            nulls = np.array(nulls)
            for r in range(resamples):
                state = st._pcg_state(np.random.default_rng(m))
                less, greater, _ = st._sign_flip_counts(padded, state, resamples, block, total, nulls[r], 0.0)
                assert (less, greater) == ((nulls <= nulls[r]).sum(), (nulls >= nulls[r]).sum()), (m, r)


@pytest.mark.parametrize("ties", ["none", "x", "y", "both"])
def test_a_draw_merged_alone_in_c_is_the_numpy_merge_to_the_last_bit(ties, monkeypatch):
    """A draw merged alone (the figure itself, and every draw of a run of more than 524,288 distinct
    pairs, whose blocks hold one draw) is summed in double precision, each level's dot product as
    NumPy's einsum of one row sums it (two lanes, eight products a step, calls of 8,192 products):
    the compiled merge gives the NumPy merge's bits, on sizes from 1 to 70,001 (levels of more than
    8,192 products: several calls of einsum's loop), and the same bits for a row whichever rows are
    merged with it, or with its levels shared by two threads. A change of that order (one lane,
    another call length) fails here."""
    if st._kendall_alone is None:
        pytest.skip("the package was built without its compiled modules")
    rng = np.random.default_rng(23)
    for m in [1, 2, 3, 9, 17, 130, 1025, 8193, 16385, 20000, 70001]:
        c = _kendall_columns(rng, m, ties)
        w = rng.standard_gamma(rng.integers(1, 3, m).astype(float), size=(4, m))
        w /= w.sum(-1, keepdims=True)
        in_c = np.concatenate([st._kendall(c)(w[i:i + 1]) for i in range(4)])
        together, shared = np.empty(4), np.empty(4)
        st._kendall_alone(w, _kendall_places(st._kendall(c)), together)
        st._kendall_alone(w, _kendall_places(st._kendall(c)), shared, 2)  # the levels shared by two threads
        assert shared.tobytes() == together.tobytes(), m
        with monkeypatch.context() as p:
            p.setattr(st, "_kendall_alone", None)
            in_numpy = np.concatenate([st._kendall(c)(w[i:i + 1]) for i in range(4)])
            env = _closure(st._kendall(c))
            alone = [st._merge(np.take(w[i:i + 1], env["order"], axis=-1), env["size"],
                               st._by_place(env["lefts"], env["rights"], env["at"]))[0] for i in range(4)]
        assert together.tobytes() == np.array(alone).tobytes(), (m, together - alone)
        assert in_c.tobytes() == in_numpy.tobytes(), (m, in_c - in_numpy)


def test_rater_figures_of_blocks_of_one_draw_are_the_same_in_c_and_numpy(monkeypatch):
    """Where a block holds one draw (at more than 524,288 distinct pairs; here ``BLOCK`` made small so
    that 3,000 cases do), every figure and interval is the same with the compiled merge and without."""
    rng = np.random.default_rng(8)
    x = rng.random(3000)
    y = np.clip(x + rng.normal(0, 0.2, 3000), 0, 1)
    args = (["kendall", "spearman", "pearson", "mae"], x >= 0.5, y >= 0.5, x, y)
    monkeypatch.setattr(st, "BLOCK", 64)
    with_c = st.rater_figures(*args, n_draws=60, seed=9)
    for name in ("_kendall_discordant", "_kendall_alone", "_weighted_pearson", "_c_mid_ranks",
                 "_run_sums"):
        monkeypatch.setattr(st, name, None)
    assert st.rater_figures(*args, n_draws=60, seed=9) == with_c
    assert all(np.isfinite(v).all() for v in with_c.values())


@pytest.mark.parametrize("block", [64, st.BLOCK])
def test_figures_asked_together_are_the_figures_asked_alone(block, monkeypatch):
    """Spearman's mid-ranks and Kendall's tied weights read the same runs' weights of each block of
    draws, summed once for both: each figure is the same, to the last bit, asked with the others or
    alone (a run's sums kept from another block, or another column's, would change them), in blocks of
    one draw and of several."""
    rng = np.random.default_rng(12)
    x = np.round(rng.random(2000), 2)
    y = np.clip(np.round(x + rng.normal(0, 0.2, 2000), 1), 0, 1)
    monkeypatch.setattr(st, "BLOCK", block)
    figures = ["spearman", "kendall", "pearson", "mae"]
    together = st.rater_figures(figures, x >= 0.5, y >= 0.5, x, y, n_draws=40, seed=5)
    for f in figures:
        assert st.rater_figures([f], x >= 0.5, y >= 0.5, x, y, n_draws=40, seed=5) == {f: together[f]}
    assert together["spearman"] != together["kendall"]
    # block after block, figures sharing their columns' runs give each block's own figures
    c = st._Columns(_kendall_columns(rng, 500, "both"))
    shared = [(st._spearman(c), st._spearman), (st._kendall(c), st._kendall)]
    blocks = [rng.standard_gamma(1.0, size=(k, 500)) for k in (1, 3, 1)]
    for w in blocks + [blocks[0].copy()]:
        for form, make in shared:
            assert form(w).tobytes() == make(dict(c))(w).tobytes()


def test_the_mean_absolute_difference_is_the_same_on_any_number_of_blas_threads():
    """A figure is the same on every machine: the mean absolute difference of each posterior draw is
    not a matrix product, whose sums BLAS splits by its threads (2 and 1 thread gave different last
    bits on 100,000 cases)."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    rng = np.random.default_rng(4)
    x = rng.random(100_000)
    y = np.clip(x + rng.normal(0, 0.3, x.size), 0, 1)
    args = (["mae"], x >= 0.5, y >= 0.5, x, y)
    with threadpoolctl.threadpool_limits(2):
        two = st.rater_figures(*args, n_draws=100, seed=3)
    with threadpoolctl.threadpool_limits(1):
        one = st.rater_figures(*args, n_draws=100, seed=3)
    assert one == two


def _lexsorted_levels(x, y):
    """`_kendall`'s levels as first written: each level's blocks sorted by ``np.lexsort``."""
    order = np.lexsort((y, x))
    size = 1 << max(0, (len(x) - 1).bit_length())
    ys = np.full(size, -np.inf)
    ys[:len(x)] = y[order]
    pos = np.arange(size)
    lefts, rights, at = (np.empty((size.bit_length() - 1, size // 2), np.int32) for _ in range(3))
    for level in range(len(lefts)):
        half = 1 << level
        left = pos % (2 * half) < half
        perm = np.lexsort((left, -ys, pos // (2 * half)))
        is_left = left[perm]
        before = (np.cumsum(is_left) - pos // (2 * half) * half)[~is_left]
        lefts[level], rights[level] = perm[is_left], perm[~is_left]
        at[level] = np.where(before > 0, pos[: size // 2] // half * half + before, 0)
    return order.astype(np.int32), lefts, rights, at


@pytest.mark.parametrize("ties", ["none", "x", "y", "both"])
def test_kendall_levels_and_distinct_rows_are_those_of_the_record_sorts(ties):
    """The merge's levels (each level's blocks sorted by one stable key) are those of ``np.lexsort``
    over the block, y and the side; the distinct rows of the posterior's merged cases and their
    places are ``np.unique(axis=0)``'s (also with a NaN or a negative zero, left to it)."""
    rng = np.random.default_rng(29)
    for m in [1, 2, 3, 5, 64, 129, 1000, 5001]:
        c = _kendall_columns(rng, m, ties)
        got = _kendall_tables(c)
        want = _lexsorted_levels(c["x"], c["y"])
        for a, b in zip(got, want):
            assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes(), m
        key = np.column_stack([rng.integers(0, 3, m), c["x"], c["y"], rng.random(m) < 0.5]).astype(float)
        for k in (key, key[:, 1:3], np.where(key == 0, -0.0, key), np.where(key > 0.9, np.nan, key)):
            rows, inverse = st._unique_rows(k)
            want_rows, want_inverse = np.unique(k, axis=0, return_inverse=True)
            assert rows.tobytes() == want_rows.tobytes() and inverse.tolist() == want_inverse.ravel().tolist()


def test_the_compiled_merge_refuses_places_outside_its_arrays():
    """The merge's places are made and checked once, when kept: an order naming a negative column, or
    keys that are not a power of 2 of places at least as many as the order's, are refused, and so is a
    merge of weights with fewer columns than its order names."""
    if st._kendall_discordant is None:
        pytest.skip("the package was built without its compiled modules")
    order, key = np.arange(5, dtype=np.int32), np.r_[4:-1:-1, 5, 5, 5].astype(np.int32)
    w = np.ones((2, 5))
    places = st._merge_places(order, key)
    assert st._kendall_discordant(w, places) == [0.0, 0.0]  # y rises with x: no pair discordant
    falling = st._merge_places(order, np.r_[0:5, 5, 5, 5].astype(np.int32))
    assert st._kendall_discordant(w, falling) == [10.0, 10.0]  # every pair of the five
    for bad in ((order - 1, key), (order, key[:7]), (order, key[:4]), (order, key.astype(np.int64))):
        with pytest.raises(ValueError, match="do not fit|format 'i'"):
            st._merge_places(*bad)
    out = np.empty(2)
    for call in (lambda: st._kendall_discordant(w[:, :4].copy(), places),
                 lambda: st._kendall_alone(w[:, :4].copy(), places, out)):
        with pytest.raises(ValueError, match="do not fit"):
            call()
    with pytest.raises(ValueError, match="format 'd'"):
        st._kendall_discordant(w.astype(np.float32), places)
    with pytest.raises(ValueError, match="a value a row"):
        st._kendall_alone(w, places, np.empty(3))
    runs, sums = st._Runs.of(np.arange(5.0)), np.empty((2, 5))
    st._run_sums(w, runs.kept, sums)
    st._c_mid_ranks(sums, runs.kept, np.empty((2, 5)))
    for bad in (runs.order - 1, runs.order + 1):  # a place of -1, a place of 5
        with pytest.raises(ValueError, match="a place outside"):
            st._c_runs(bad, runs.starts, runs.at)
        with pytest.raises(ValueError, match="a place outside"):
            st._c_runs(runs.order, runs.starts, bad)
    with pytest.raises(ValueError, match="do not fit"):
        st._c_runs(runs.order, runs.starts[::-1].copy(), runs.at)  # runs out of order
    with pytest.raises(ValueError, match="do not fit"):  # the runs of other weights, sums or no case's run
        st._run_sums(w[:, :4].copy(), runs.kept, sums)
    with pytest.raises(ValueError, match="do not fit"):
        st._c_mid_ranks(sums[:, :4].copy(), runs.kept, np.empty((2, 5)))
    with pytest.raises(ValueError, match="do not fit"):
        st._c_mid_ranks(sums, st._Runs(runs.order, runs.starts).kept, np.empty((2, 5)))


def test_disagreements_show_every_backend_value_and_reason(mixed_run):
    dis = an.disagreements(mixed_run, metrics=["faithfulness"], top=5)
    assert len(dis) == 5
    assert list(dis["spread"]) == sorted(dis["spread"], reverse=True)
    for b in ("ragas", "deepeval", "trulens"):
        assert {f"{b}.value", f"{b}.reason", f"{b}.status"} <= set(dis.columns)
    top = dis.iloc[0]
    assert top.question and "says" in str(top["ragas.reason"] or top["trulens.reason"])
    # an errored score keeps its error message in the reason column
    allrows = an.disagreements(mixed_run, metrics=["faithfulness"], top=None)
    errored = allrows[allrows["deepeval.status"] == "error"]
    assert len(errored) == 1 and "429" in errored.iloc[0]["deepeval.reason"]


def test_compare_mixed_run_counts_unscored_cases(mixed_run):
    frame = an.compare(mixed_run, n_resamples=0)
    # native metrics have one backend: not compared; two judged metrics x three pairs
    assert set(frame["metric"]) == {"faithfulness", "answer_relevance"}
    assert len(frame) == 6
    f = frame[(frame.metric == "faithfulness") & (frame.backend_a == "deepeval")
              & (frame.backend_b == "ragas")].iloc[0]
    assert f.a_errored == 1 and f.b_undefined == 1 and f.n_paired == 51
    t = frame[(frame.metric == "faithfulness") & (frame.backend_b == "trulens")]
    assert set(t["b_missing"]) == {1}
    cov = an.coverage(mixed_run, metrics=["faithfulness"])
    assert cov.set_index("backend").loc["trulens", "missing"] == 1
    with pytest.raises(an.AnalysisError, match="not in this run"):
        an.compare(mixed_run, metrics=["nonexistent"])
    with pytest.raises(an.AnalysisError, match="two or more backends"):
        an.compare(mixed_run, metrics=["mrr"])


# --------------------------------------------------------------------------------------------
# validate


@pytest.fixture
def labelled_run(tmp_path):
    """Ten answers: humans pass eight and fail two; the judge passes all eight and one of the two
    failures, so it agrees 90% overall and still misses half of the failures."""
    cases = tiny_cases(11)
    human = [1] * 8 + [0, 0]
    judge = [0.9, 0.8, 0.7, 0.95, 0.6, 0.85, 0.75, 0.65, 0.8, 0.2]
    scores = []
    for i, v in enumerate(judge):
        nv = {"claims": ["a", "b"], "verdicts": [{"verdict": "yes"}, {"verdict": "no" if i >= 8 else "yes"}]}
        scores.append(sc(f"c{i + 1}", "faithfulness", "judge", v, native_value=nv, reason=f"r{i}"))
    scores.append(sc("c11", "faithfulness", "judge", None, error="boom"))
    run = write_run(tmp_path / "lab", cases, scores)
    labels = tmp_path / "labels.jsonl"
    with open(labels, "w") as f:
        for i, h in enumerate(human):
            f.write(json.dumps({"case_id": f"c{i + 1}", "metric": "faithfulness",
                                "label": "pass" if h else "fail"}) + "\n")
        f.write(json.dumps({"case_id": "c11", "metric": "faithfulness", "label": False}) + "\n")
        f.write(json.dumps({"case_id": "nope", "metric": "faithfulness", "label": True}) + "\n")
    return run, labels


def test_validate_matches_hand_computation(labelled_run):
    run, labels = labelled_run
    row = an.validate(run, labels, n_resamples=300).iloc[0]
    assert (row.tp, row.fn, row.fp, row.tn) == (8, 0, 1, 1)
    assert row.n_labels == 12 and row.n_paired == 10
    assert row.labels_unknown_case == 1 and row.errored == 1 and row.unscored == 1
    assert row.agreement == pytest.approx(0.9)
    assert row.tpr == pytest.approx(1.0)
    assert row.tnr == pytest.approx(0.5)          # the rare failures: half missed
    assert row.balanced_accuracy == pytest.approx(0.75)
    # po = .9, human pass rate .8, judge pass rate .9 -> pe = .72 + .02
    assert row.kappa == pytest.approx((0.9 - 0.74) / (1 - 0.74))
    # TNR's posterior is Beta(tn + 1/2, fp + 1/2), Jeffreys' (the cells' Dirichlet(counts + 1/2))
    fine = an.validate(run, labels, n_resamples=40000).iloc[0]
    for f, (k, m) in (("tnr", (1, 1)), ("tpr", (8, 0))):
        lo, hi = stats.beta.ppf([0.025, 0.975], k + 0.5, m + 0.5)
        assert fine[f"{f}_low"] == pytest.approx(lo, abs=0.005)
        assert fine[f"{f}_high"] == pytest.approx(min(hi, 1.0) if m else 1.0, abs=0.005)  # holds the 1.0
    for f in ("kappa", "balanced_accuracy", "agreement"):
        assert row[f"{f}_low"] <= row[f] <= row[f"{f}_high"]
    # claims: two of the ten scored answers (and the errored one has none) have an unsupported claim
    assert row.claims_answers == 10 and row.unsupported_answers == 2
    assert row.unsupported_share == pytest.approx(0.2)
    assert math.isnan(row.spearman)  # pass/fail labels: no grade correlation


def test_validate_graded_labels_and_label_threshold(labelled_run, tmp_path):
    run, passfail = labelled_run
    # the grade threshold applies to numeric grades only: pass/fail words stay what they say
    same = an.validate(run, passfail, label_threshold=3, n_resamples=0).iloc[0]
    assert (same.human_pass, same.human_fail) == (8, 2)
    grades = [5, 4, 4, 5, 3, 5, 4, 3, 2, 1]
    path = tmp_path / "graded.csv"
    path.write_text("case_id,grade\n" + "".join(f"c{i + 1},{g}\n" for i, g in enumerate(grades)))
    row = an.validate(run, path, metrics=["faithfulness"], label_threshold=3, n_resamples=200).iloc[0]
    assert (row.human_pass, row.human_fail) == (8, 2)
    values = [0.9, 0.8, 0.7, 0.95, 0.6, 0.85, 0.75, 0.65, 0.8, 0.2]
    assert row.spearman == pytest.approx(stats.spearmanr(grades, values).statistic)


@pytest.mark.parametrize("line,message", [
    ('{"metric": "faithfulness", "label": "pass"}', "no case_id"),
    ('{"case_id": "c1", "label": "pass"}', "no metric"),
    ('{"case_id": "c1", "metric": "faithfulness", "label": "maybe"}', "neither pass/fail"),
    ('{"case_id": "c1", "metric": "faithfulness"}', "no label"),
    ("not json", "not valid JSON"),
])
def test_bad_labels_name_file_and_line(tmp_path, line, message):
    path = tmp_path / "l.jsonl"
    path.write_text('{"case_id": "c0", "metric": "faithfulness", "label": "pass"}\n' + line + "\n")
    with pytest.raises(an.AnalysisError, match=message) as exc:
        an.load_labels(path)
    assert f"{path}:2" in str(exc.value)


def test_unsupported_claims_shapes():
    f = an.unsupported_claims
    assert f({"claims": [{"claim": "a", "verdict": "yes"}, {"claim": "b", "verdict": "idk"}]}) == (2, 1)
    assert f({"statements": ["s1", "s2"], "verdicts": [{"verdict": 1}, {"verdict": 0}]}) == (2, 1)
    assert f({"sentences": [{"text": "x", "score": 0.9}, {"text": "y", "score": 0.7}]}) == (2, 0)
    assert f({"verdicts": ["supported", "not_supported", "no"]}) == (3, 2)
    # TruLens groundedness: per-sentence grades, -1 = unparsable (left out), raw grades on a 0..3 scale
    tl = {"score": 0.5, "scale": [0, 3], "statements": [
        {"criteria": "s1", "supporting_evidence": "e", "score": 1.0},
        {"criteria": "s2", "supporting_evidence": "e", "score": 0.0},
        {"criteria": "s3", "supporting_evidence": "e", "score": -1}]}
    assert f(tl) == (2, 1)
    assert f({"scale": [0, 3], "statements": [{"score": 3}, {"score": 2}, {"score": 1}]}) == (3, 1)
    assert f(0.8) is None and f({"score": 0.8}) is None and f(None) is None


# --------------------------------------------------------------------------------------------
# calibrate


@pytest.fixture
def migration_run(tmp_path):
    cases = tiny_cases(8)
    src = [0.9, 0.8, 0.75, 0.6, 0.3, 0.95, 0.72, 0.4]     # pass at 0.7: T T T F F T T F
    tgt = [0.7, 0.55, 0.5, 0.45, 0.1, 0.8, 0.3, 0.52]       # c7 and c8 cannot both be reproduced
    scores = [sc(f"c{i + 1}", "faithfulness", "deepeval", v, reason=f"d{i}") for i, v in enumerate(src)]
    scores += [sc(f"c{i + 1}", "faithfulness", "ragas", v, reason=f"r{i}") for i, v in enumerate(tgt)]
    return write_run(tmp_path / "mig", cases, scores)


def test_calibrate_picks_the_threshold_with_maximum_kappa(migration_run):
    curve = an.calibrate(migration_run, "deepeval", "ragas", "faithfulness", threshold=0.7, n_resamples=200)
    # one row per distinct cut of the 8 target values, plus "all fail"
    assert len(curve) == 9
    best = curve[curve.best].iloc[0]
    # source verdicts at 0.7: T T T F F T T F (5 pass).
    # cut in (0.45, 0.5]:  T T T F F T F T -> c7, c8 flip; pass rates 5/8, 5/8 -> kappa (48-34)/(64-34)
    # cut in (0.52, 0.55]: T T F F F T F F -> c3, c7 flip; pass rates 5/8, 3/8 -> kappa (48-30)/(64-30)
    src = np.array([0.9, 0.8, 0.75, 0.6, 0.3, 0.95, 0.72, 0.4]) >= 0.7
    tgt = np.array([0.7, 0.55, 0.5, 0.45, 0.1, 0.8, 0.3, 0.52])
    from sklearn.metrics import cohen_kappa_score

    by_hand = {t: cohen_kappa_score(src, tgt >= t)
               for t in (0.0, 0.2, 0.375, 0.475, 0.51, 0.535, 0.625, 0.75, 0.9)}
    t_best = max(by_hand, key=by_hand.get)
    assert best.threshold == pytest.approx(t_best)
    assert best.kappa == pytest.approx(by_hand[t_best])
    assert (best.threshold_low, best.threshold_high) == (0.52, 0.55)
    assert best.threshold == pytest.approx(0.535)
    assert best.kappa == pytest.approx(18 / 34)
    assert curve.set_index("threshold").loc[0.475, "kappa"] == pytest.approx(14 / 30)
    assert best.flips == 2 and best.source_pass_target_fail == 2 and best.source_fail_target_pass == 0
    assert curve.attrs["n_paired"] == 8 and curve.attrs["source_threshold"] == 0.7
    flips = an.calibration_flips(migration_run, "deepeval", "ragas", "faithfulness", 0.7, best.threshold)
    assert set(flips.case_id) == {"c3", "c7"}
    assert {"source_reason", "target_reason"} <= set(flips.columns)
    with pytest.raises(an.AnalysisError, match="did not score"):
        an.calibrate(migration_run, "deepeval", "trulens", "faithfulness")


def test_calibrate_perfect_reproduction(tmp_path):
    cases = tiny_cases(6)
    src = [0.9, 0.8, 0.75, 0.6, 0.3, 0.95]
    tgt = [0.7, 0.55, 0.5, 0.45, 0.1, 0.8]
    scores = [sc(f"c{i + 1}", "faithfulness", "a", v) for i, v in enumerate(src)]
    scores += [sc(f"c{i + 1}", "faithfulness", "b", v) for i, v in enumerate(tgt)]
    run = write_run(tmp_path / "p", cases, scores)
    best = an.calibrate(run, "a", "b", "faithfulness", 0.7, n_resamples=0).query("best").iloc[0]
    assert best.kappa == 1.0 and best.flips == 0 and best.threshold == pytest.approx(0.475)


# --------------------------------------------------------------------------------------------
# The commands


def test_cli_compare(mixed_run):
    r = ragbridge_cli("compare", mixed_run, "--metric", "faithfulness", "--resamples", "200", "--top", "3")
    assert r.returncode == 0, r.stderr
    assert "ragas vs trulens" in r.stdout and "Where the backends disagree most: faithfulness" in r.stdout
    assert r.stdout.startswith("faithfulness: 3 backends, ")  # the answer first
    assert "1 errored" in r.stdout and "1 undefined" in r.stdout and "1 missing" in r.stdout
    j = ragbridge_cli("compare", mixed_run, "--resamples", "0", "--json")
    data = json.loads(j.stdout)
    assert len(data["agreement"]) == 6 and data["disagreements"]


def test_cli_compare_bad_input(tmp_path, hand_run):
    native_only = write_run(tmp_path / "n", tiny_cases(2), [sc("c1", "mrr", "native", 1.0)])
    for args, message in (
        (("compare", native_only), "nothing to compare"),
        (("compare", tmp_path / "nothere"), "not a run folder"),
    ):
        r = ragbridge_cli(*args)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0], r.stderr


@pytest.mark.slow
def test_cli_validate_and_calibrate(labelled_run, migration_run, tmp_path):
    run, labels = labelled_run
    r = ragbridge_cli("validate", run, "--labels", labels, "--resamples", "100")
    assert r.returncode == 0, r.stderr
    [row] = json.loads(ragbridge_cli("validate", run, "--labels", labels, "--resamples", "100",
                                     "--json").stdout)["validation"]
    assert "TNR" in r.stdout and f"[{row['tnr_low']:.2f}, {row['tnr_high']:.2f}]" in r.stdout
    assert "1/2" in r.stdout
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{oops\n")
    r = ragbridge_cli("validate", run, "--labels", bad)
    assert r.returncode == 2 and "bad.jsonl:1" in r.stderr
    c = ragbridge_cli("calibrate", migration_run, "--from", "deepeval", "--to", "ragas",
                      "--metric", "faithfulness", "--threshold", "0.7", "--resamples", "100")
    assert c.returncode == 0, c.stderr
    assert "ragas at 0.535" in c.stdout and "2 still flip" in c.stdout and "c7" in c.stdout
    header = next(line for line in c.stdout.splitlines() if "threshold" in line and "kappa" in line)
    assert header.split("┃")[1:-1][-1].strip() == "best"  # every column named: none blank


# --------------------------------------------------------------------------------------------
# The intervals keep their coverage: seeded simulations from a known truth

COVERED = ("tpr", "tnr", "balanced_accuracy", "kappa", "agreement")


def _truth(h, j) -> dict[str, float]:
    """The figures of a whole population: human verdicts ``h``, the judge's ``j``."""
    return {f: v[0] for f, v in st.rater_figures(COVERED, h, j, n_draws=0).items()}


def _uniform_labels(rng, n=12, p_pass=0.85, tpr=0.9, tnr=0.6):
    """``n`` cases labelled at random from a golden set whose cases humans pass with ``p_pass``; the
    judge passes a human pass with ``tpr`` and fails a human fail with ``tnr``."""
    h = rng.random(n) < p_pass
    j = np.where(h, rng.random(n) < tpr, rng.random(n) >= tnr)
    return {"a": h, "b": j}, None


def _stratified_labels(rng, n_run=300, per=10, p_pass=0.85, tpr=0.99, tnr=0.7):
    """``ragbridge label``'s draw: ``per`` labels from the cases the judge passed and ``per`` from those
    it failed, in a run of ``n_run``; the truth is the whole run's figures. With a judge whose passes
    humans nearly always pass too, the labels of the pass stratum mostly all agree."""
    h = rng.random(n_run) < p_pass
    j = np.where(h, rng.random(n_run) < tpr, rng.random(n_run) >= tnr)
    idx, strata = [], []
    for v, name in ((True, "pass"), (False, "fail")):
        members = np.flatnonzero(j == v)
        idx += list(rng.choice(members, min(per, len(members)), replace=False))
        strata += [name] * min(per, len(members))
    shares = {"pass": float(np.mean(j)), "fail": float(np.mean(~j))}
    return ({"a": h[idx], "b": j[idx], "strata": strata, "shares": shares,
             "fixed_b": {"pass": True, "fail": False}}, _truth(h, j))


def _lenient_rater(rng, n=12):
    """Two backends on 12 cases: b passes 97% of cases, a 75%, a fifth of b's verdicts copy a's."""
    a = rng.random(n) < 0.75
    b = np.where(rng.random(n) < 0.2, a, rng.random(n) < 0.97)
    return {"a": a, "b": b}, None


@pytest.mark.parametrize("draw,population", [
    (_uniform_labels, lambda rng: _uniform_labels(rng, 500_000)[0]),
    (lambda rng: _uniform_labels(rng, n=40, p_pass=0.9, tpr=0.97, tnr=0.5),
     lambda rng: _uniform_labels(rng, 500_000, p_pass=0.9, tpr=0.97, tnr=0.5)[0]),
    (_stratified_labels, None),
    (_lenient_rater, lambda rng: _lenient_rater(rng, 500_000)[0]),
], ids=["uniform-12", "uniform-40", "stratified-all-agree", "one-rater-passes-nearly-all"])
def test_the_intervals_cover_the_truth_at_their_nominal_level(draw, population):
    """In 800 label sets drawn from a known truth, the 95% intervals of TPR, TNR, balanced accuracy,
    kappa and agreement hold the truth at least 93% of the time (where the figure is defined: TNR
    with no human fail among the labels is undefined and has no interval), and never collapse to a
    point."""
    rng = np.random.default_rng(20261201)
    truth = _truth(*population(rng).values()) if population else None
    covered = {f: [] for f in COVERED}
    agreeing = 0
    for trial in range(800):
        kw, run_truth = draw(rng)
        got = st.rater_figures(COVERED, **kw, n_draws=1000, seed=trial)
        if kw.get("strata"):
            agreeing += any(len(set(kw["a"][np.array(kw["strata"]) == h])) == 1 for h in ("pass", "fail"))
        for f, (v, lo, hi) in got.items():
            if not math.isnan(v):
                assert lo < hi, (f, kw)
                want = (run_truth or truth)[f]
                covered[f].append(lo - 1e-12 <= want <= hi + 1e-12)
    rates = {f: np.mean(c) for f, c in covered.items()}
    assert all(r >= 0.93 for r in rates.values()), rates
    assert all(len(c) >= 600 for c in covered.values())
    if population is None:
        assert agreeing >= 400  # most label sets hold a stratum whose labels all agree


# --------------------------------------------------------------------------------------------
# What the user reads: intervals that do not collapse, every disagreeing case, one number everywhere


def _labels_file(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture
def lenient_run(tmp_path):
    """Twelve labelled cases; one backend passes every one of them, the other fails four. People
    fail three: c1 and c2 (the strict backend fails them too) and c3 (which it passes)."""
    cases = tiny_cases(12)
    strict = [0.2, 0.3, 0.9, 0.1, 0.0, 0.8, 0.9, 0.7, 0.95, 0.6, 0.85, 0.75]
    scores = [sc(c.id, "faithfulness", "trulens", 0.9, reason="grounded") for c in cases]
    scores += [sc(c.id, "faithfulness", "rubric", v, reason=f"r{i}")
               for i, (c, v) in enumerate(zip(cases, strict))]
    run = write_run(tmp_path / "lenient", cases, scores)
    human = {"c1": "fail", "c2": "fail", "c3": "fail"}
    labels = _labels_file(tmp_path / "labels.jsonl", [
        {"case_id": c.id, "metric": "faithfulness", "label": human.get(c.id, "pass")} for c in cases])
    return run, labels


def test_no_interval_collapses_to_a_point_from_twelve_cases(lenient_run):
    """A backend that passes all 12 cases: balanced accuracy 0.5 and kappa 0 against people, and kappa
    0 against the other backend. Each is a figure of 12 cases, so each has an interval around it that
    is not a point (the percentile bootstrap gave [0.50, 0.50] and [0.00, 0.00])."""
    run, labels = lenient_run
    row = an.validate(run, labels, backends=["trulens"]).iloc[0]
    assert (row.tp, row.fn, row.fp, row.tn) == (9, 0, 3, 0)
    assert row.balanced_accuracy == 0.5 and row.tnr == 0.0 and row.kappa == 0.0
    for f in ("balanced_accuracy", "kappa", "tnr", "tpr", "agreement"):
        assert row[f"{f}_low"] <= row[f] <= row[f"{f}_high"], f
        assert row[f"{f}_high"] - row[f"{f}_low"] > 0.1, (f, row[f"{f}_low"], row[f"{f}_high"])
    # TNR 0 of 3: from 0, as far up as three failures allow
    assert row.tnr_low == 0.0 and 0.3 < row.tnr_high < 0.7
    pair = an.compare(run, metrics=["faithfulness"]).iloc[0]
    assert {pair.backend_a, pair.backend_b} == {"rubric", "trulens"} and pair.kappa == 0.0
    assert pair.kappa_low < 0.0 < pair.kappa_high and pair.kappa_high - pair.kappa_low > 0.2
    # every case labelled: the set's pass rate is the labels' own, said so rather than as [0.75, 0.75]
    text = " ".join(ragbridge_cli("validate", run, "--labels", labels, "--backend", "trulens").stdout.split())
    assert "trulens: 0.75, exact: every one of the 12 scored cases is labelled (trulens alone: " in text, text
    assert "[0.75, 0.75]" not in text and "[0.00, 0.00]" not in text and "[0.50, 0.50]" not in text


def test_stratified_labels_that_all_agree_give_a_balanced_accuracy_as_wide_as_the_data_allow(tmp_path):
    """Labels drawn by stratum (``ragbridge label``): 20 from the 80 cases the judge passed, all of
    which people pass too, and 5 from the 20 it failed, all of which people fail. Balanced accuracy is
    the mean of TPR and TNR, so its interval is at least about half as wide as TNR's (a bootstrap
    within strata gave 0.94 [0.91, 0.97] beside TNR 1.00 [0.57, 1.00])."""
    cases = tiny_cases(100)
    values = [0.9] * 80 + [0.1] * 20
    run = write_run(tmp_path / "strat", cases,
                    [sc(c.id, "faithfulness", "rubric", v) for c, v in zip(cases, values)])
    rows = [{"case_id": c.id, "metric": "faithfulness", "label": "pass" if v > 0.5 else "fail",
             "stratum": "pass" if v > 0.5 else "fail", "stratum_size": 80 if v > 0.5 else 20,
             "stratum_backend": "rubric", "stratum_threshold": 0.5}
            for c, v in list(zip(cases, values))[:20] + list(zip(cases, values))[80:85]]
    row = an.validate(run, _labels_file(tmp_path / "l.jsonl", rows)).iloc[0]
    assert row.design == "stratified" and row.tpr == row.tnr == row.balanced_accuracy == 1.0
    width = {f: row[f"{f}_high"] - row[f"{f}_low"] for f in ("tpr", "tnr", "balanced_accuracy", "kappa")}
    assert width["tnr"] > 0.2 and width["tpr"] > 0.05, width
    assert width["balanced_accuracy"] >= 0.4 * width["tnr"], width
    assert row.kappa_high == 1.0 and width["kappa"] > 0.1, width


def test_every_disagreeing_case_is_listed_both_ways(lenient_run):
    """validate's rows name the cases a backend gets wrong each way, and the Markdown report lists
    them (the command line, HTML and the numbers in each: the test below)."""
    from ragbridge.report import render_markdown

    run, labels = lenient_run
    rows = an.validate(run, labels, n_resamples=0).set_index("backend")
    missed = {b: (r["missed_fails"], r["missed_passes"]) for b, r in rows.iterrows()}
    assert missed == {"rubric": (["c3"], ["c4", "c5"]), "trulens": (["c1", "c2", "c3"], [])}
    md = " ".join(render_markdown(run, labels=labels, n_resamples=0).split())
    assert "trulens: 3 failure(s) missed (human fail, backend pass): c1, c2, c3" in md
    assert "rubric: 2 pass(es) missed (human pass, backend fail): c4, c5" in md


@pytest.mark.slow
def test_every_disagreeing_case_is_listed_both_ways_in_every_output(lenient_run, tmp_path):
    """A label file whose case ids carry white space (as run ids may, and are stripped), a pass for a
    case the backend scored 0.0 and fails it passed: text, --json, Markdown and HTML name each
    disagreeing case, both ways, and print the same figures."""
    run, _ = lenient_run
    labels = _labels_file(tmp_path / "spaced.jsonl", [
        {"case_id": f" {c} " if i % 2 else f"{c}\t", "metric": "faithfulness", "label": lab}
        for i, (c, lab) in enumerate([("c1", "fail"), ("c2", "fail"), ("c3", "fail"), ("c4", "pass"),
                                      ("c5", "pass"), ("c6", "pass"), ("c7", "pass"), ("c8", "pass")])])
    res = ragbridge_cli("validate", run, "--labels", labels, "--backend", "rubric", env={"COLUMNS": "80"})
    assert res.returncode == 0, res.stderr
    assert "not in this run" not in res.stderr  # the ids, stripped, name the run's cases
    text = " ".join(res.stdout.split())
    [row] = json.loads(ragbridge_cli("validate", run, "--labels", labels, "--backend", "rubric",
                                     "--json").stdout)["validation"]
    assert row["n_labels"] == row["n_paired"] == 8 and row["labels_unknown_case"] == 0
    # c5 is scored 0.0 and labelled pass; c4 (0.1) too; c3 (0.9) is labelled fail
    assert row["missed_passes"] == ["c4", "c5"] and row["missed_fails"] == ["c3"]
    md = ragbridge_cli("report", run, "--labels", labels, "--format", "md", "--out", "-").stdout
    page = tmp_path / "report.html"
    assert ragbridge_cli("report", run, "--labels", labels, "--out", page).returncode == 0
    html_text = page.read_text(encoding="utf-8")
    md_text_ = " ".join(md.split())
    for words in ("rubric: 1 failure(s) missed (human fail, backend pass): c3",
                  "rubric: 2 pass(es) missed (human pass, backend fail): c4, c5"):
        assert words in text, text
        assert words.replace("(", "\\(").replace(")", "\\)") in md_text_ or words in md_text_, md
    assert '<a href="#case-c3">c3</a>' in html_text and '<a href="#case-c5">c5</a>' in html_text
    assert "pass(es) missed (human pass, backend fail)" in html_text
    from ragbridge.report.text import ci_text, num

    for f in ("tpr", "tnr", "kappa", "balanced_accuracy", "agreement"):
        shown = ci_text(row[f], row[f"{f}_low"], row[f"{f}_high"])
        assert shown in text, (f, shown, text)
        assert shown in md, (f, shown)
        assert (f"{num(row[f], 2)}<span class=\"ci\">[{num(row[f + '_low'], 2)}, "
                f"{num(row[f + '_high'], 2)}]</span>") in html_text, f


def test_label_case_ids_follow_the_runs_id_rule(tmp_path):
    """Label case ids are read as run ids are: white space at the ends dropped (so ' c1 ' labels c1),
    Unicode NFC; an id with a character that does not print is an error with its line."""
    import pandas as pd

    path = _labels_file(tmp_path / "l.jsonl", [{"case_id": " c1 ", "metric": "m", "label": "pass"},
                                               {"case_id": "c\u0301", "metric": "m", "label": "fail"}])
    assert list(an.load_labels(path)["case_id"]) == ["c1", "\u0107"]
    _labels_file(path, [{"case_id": "c1", "metric": "m", "label": "pass"},
                        {"case_id": "c\u200b2", "metric": "m", "label": "fail"}])
    with pytest.raises(an.AnalysisError, match=r"l\.jsonl:2: case_id .* holds U\+200B \(ZERO WIDTH SPACE\)"):
        an.load_labels(path)
    run = write_run(tmp_path / "r", tiny_cases(2), [sc("c1", "m", "b", 0.9), sc("c2", "m", "b", 0.0)])
    frame = pd.DataFrame({"case_id": ["c1\t", " c2"], "metric": ["m", "m"], "grade": [1.0, 1.0]})
    row = an.validate(run, frame, n_resamples=0).iloc[0]
    assert row.n_paired == 2 and row.missed_passes == ["c2"]
