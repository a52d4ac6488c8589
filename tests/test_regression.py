"""Regression testing: item-level diff of two runs, gates with thresholds, JUnit and Markdown, the CLI."""

from __future__ import annotations

import io
import json
import math
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from conftest import EXAMPLE, ragbridge_cli, write_run
from ragbridge import Score, load_cases, load_run
from ragbridge.analysis.diff import IncompleteRunError, RegressionError, diff_runs, run_problems
from ragbridge.analysis.gate import GateConfigError, load_gates, run_gates
from ragbridge.analysis.stats import paired_bootstrap_ci, paired_permutation_pvalue
from ragbridge.commands.output import print_json
from ragbridge.report import ci

CASES = load_cases(EXAMPLE)
IDS = [c.id for c in CASES]
TAGS = {c.id: c.tags for c in CASES}
ANSWERABLE = [c.id for c in CASES if c.answerable]
UNANSWERABLE = [c.id for c in CASES if not c.answerable]


# --------------------------------------------------------------------------------------------
# Helpers: run folders written from the example cases with chosen values


def write_values(path: Path, values: dict, cases=CASES, status: str = "complete",
                 extra_lines: str = "") -> Path:
    """A run folder (`write_run`). ``values``: {(backend, metric): {case_id: float | None | "error"}}."""
    scores = []
    for (backend, metric), per_case in values.items():
        for cid, v in per_case.items():
            if v == "error":
                s = Score(case_id=cid, metric=metric, backend=backend, error="TimeoutError: judge timed out")
            elif v is None:
                s = Score(case_id=cid, metric=metric, backend=backend, reason="skipped: case has no answer")
            else:
                s = Score(case_id=cid, metric=metric, backend=backend, value=float(v))
            scores.append(s)
    return write_run(path, cases, scores, status=status, extra_lines=extra_lines)


def base_values(seed: int = 1) -> dict:
    rng = np.random.default_rng(seed)
    recall = {cid: float(rng.choice([0.5, 1.0], p=[0.1, 0.9])) for cid in ANSWERABLE}
    recall.update({cid: None for cid in UNANSWERABLE})  # undefined: no labels
    faith = {cid: round(float(rng.uniform(0.6, 1.0)), 3) for cid in ANSWERABLE}
    faith.update({cid: None for cid in UNANSWERABLE})
    abst = {cid: None for cid in ANSWERABLE}
    abst.update({cid: 1.0 for cid in UNANSWERABLE})
    return {("native", "recall@5"): recall, ("native", "abstention"): abst, ("ragas", "faithfulness"): faith}


def moved(values: dict, key, changes: dict) -> dict:
    out = {k: dict(v) for k, v in values.items()}
    out[key].update(changes)
    return out


@pytest.fixture
def runs(tmp_path):
    """A base run and a new run where three real cases lost recall and one faithfulness score errored."""
    base = base_values()
    worse = {cid: 0.0 for cid in [c for c in ANSWERABLE if "real" in TAGS[c]][:3]}
    new = moved(base, ("native", "recall@5"), worse)
    errored = ANSWERABLE[5]
    new = moved(new, ("ragas", "faithfulness"), {errored: "error"})
    better = ANSWERABLE[6]
    new = moved(new, ("ragas", "faithfulness"), {better: 1.0})
    b = write_values(tmp_path / "base", base)
    n = write_values(tmp_path / "new", new)
    return b, n, {"worse": sorted(worse), "errored": errored, "better": better, "base": base}


# --------------------------------------------------------------------------------------------
# Statistics


def test_bootstrap_is_seeded_and_brackets_the_mean_change():
    rng = np.random.default_rng(0)
    base = rng.uniform(0, 1, 200)
    new = np.clip(base - 0.1 + rng.normal(0, 0.05, 200), 0, 1)
    a = paired_bootstrap_ci(base, new, n_resamples=9999, seed=7)
    assert a == paired_bootstrap_ci(base, new, n_resamples=9999, seed=7)
    assert a != paired_bootstrap_ci(base, new, seed=8)
    delta = float(np.mean(new - base))
    assert a[0] < delta < a[1] and a[1] < 0
    # the same as a paired bootstrap done independently with scipy (percentile method)
    from scipy.stats import bootstrap

    ref = bootstrap((base, new), lambda x, y, axis: np.mean(y - x, axis=axis), paired=True, vectorized=True,
                    n_resamples=9999, method="percentile", rng=np.random.default_rng(1)).confidence_interval
    assert abs(ref.low - a[0]) < 0.005 and abs(ref.high - a[1]) < 0.005


def test_bootstrap_degenerate_inputs():
    assert paired_bootstrap_ci([0.5, 0.5, 1.0], [0.5, 0.5, 1.0]) == (0.0, 0.0)
    lo, hi = paired_bootstrap_ci([1.0], [0.0])
    assert math.isnan(lo) and math.isnan(hi)


def test_permutation_is_exact_for_few_changes():
    base = [1.0] * 20
    new = [1.0] * 16 + [0.0, 0.0, 0.0, 0.5]
    # four changed cases: 16 sign patterns; only the observed one and its mirror are as extreme
    assert paired_permutation_pvalue(base, new) == pytest.approx(2 / 16)
    assert paired_permutation_pvalue(base, new, alternative="less") == pytest.approx(1 / 16)
    assert paired_permutation_pvalue(base, new, alternative="greater") == pytest.approx(1.0)
    assert paired_permutation_pvalue(base, base) == 1.0
    assert paired_permutation_pvalue([1.0], [0.0], alternative="less") == 0.5


def test_permutation_matches_scipy_permutation_test():
    from scipy.stats import permutation_test

    def scipy_p(base, new, alternative, shift=0.0):
        return permutation_test(
            (np.asarray(new) + shift, np.asarray(base)), lambda x, y, axis: np.mean(x - y, axis=axis),
            permutation_type="samples", vectorized=True, n_resamples=9999, alternative=alternative,
            rng=np.random.default_rng(0),
        ).pvalue

    rng = np.random.default_rng(11)
    base = rng.uniform(0, 1, 12)  # 12 pairs: both tests are exact
    new = np.clip(base + rng.normal(-0.1, 0.15, 12), 0, 1)
    for alt in ("two-sided", "less", "greater"):
        assert paired_permutation_pvalue(base, new, alt) == pytest.approx(scipy_p(base, new, alt), rel=1e-9)
    assert paired_permutation_pvalue(base, new, "less", shift=0.05) == pytest.approx(
        scipy_p(base, new, "less", 0.05))
    base = rng.uniform(0, 1, 60)  # randomized: the same up to resampling noise
    new = np.clip(base + rng.normal(-0.03, 0.15, 60), 0, 1)
    for alt in ("two-sided", "less"):
        ours, theirs = paired_permutation_pvalue(base, new, alt, seed=2), scipy_p(base, new, alt)
        assert abs(ours - theirs) < 0.02 + 0.1 * theirs


def test_randomized_permutation_counts_the_seeds_sign_patterns():
    """The randomized test counts, for the seed's random bytes (one bit a changed case, the highest
    bit first), the sign patterns as extreme as the observed one: the same count as multiplying
    the bits out, for sizes that end within a byte and ones that do not, ties included."""
    rng = np.random.default_rng(21)
    for m, n_resamples in ((14, 999), (61, 2000), (800, 9999), (4003, 300)):
        base = rng.uniform(0, 1, m)
        new = np.round(np.clip(base + rng.normal(-0.01, 0.1, m), 0, 1), 2)
        base = np.round(base, 2)
        for alt, shift in (("two-sided", 0.0), ("less", 0.01), ("greater", 0.0)):
            d = new - base + shift
            d = d[np.abs(d) > 1e-12]
            total = d.sum()
            gamma = abs(total) * 1e-12 + 1e-12
            draws = np.random.default_rng(3)
            less = greater = 0
            block = max(1, 4_000_000 // len(d))
            for start in range(0, n_resamples, block):
                k = min(n_resamples, start + block) - start
                raw = draws.integers(0, 256, size=(k, (len(d) + 7) // 8), dtype=np.uint8)
                null = 2.0 * (np.unpackbits(raw, axis=1, count=len(d)) @ d) - total
                less += int(np.count_nonzero(null <= total + gamma))
                greater += int(np.count_nonzero(null >= total - gamma))
            p = {"less": (less + 1) / (n_resamples + 1), "greater": (greater + 1) / (n_resamples + 1)}
            p["two-sided"] = min(1.0, 2 * min(p.values()))
            assert paired_permutation_pvalue(base, new, alt, shift, n_resamples, seed=3) == p[alt], (m, alt)


def test_permutation_shift_tests_a_drop_beyond_an_allowance():
    rng = np.random.default_rng(3)
    base = rng.uniform(0.5, 1, 300)
    new = base - 0.03 + rng.normal(0, 0.01, 300)
    assert paired_permutation_pvalue(base, new, "less", shift=0.0, seed=1) < 0.001
    assert paired_permutation_pvalue(base, new, "less", shift=0.02, seed=1) < 0.001
    assert paired_permutation_pvalue(base, new, "less", shift=0.05, seed=1) > 0.5
    assert paired_permutation_pvalue(base, new, seed=5) == paired_permutation_pvalue(base, new, seed=5)


# --------------------------------------------------------------------------------------------
# diff


def test_diff_pairs_cases_and_lists_what_moved(runs):
    b, n, info = runs
    d = diff_runs(b, n, seed=0)
    overall = d.summary[d.summary["tag"] == "(all)"].set_index(["backend", "metric"])
    rec = overall.loc[("native", "recall@5")]
    assert rec["n_paired"] == len(ANSWERABLE)
    assert rec["n_worse"] == 3 and rec["n_better"] == 0
    assert rec["delta"] == pytest.approx(
        -sum(info["base"][("native", "recall@5")][c] for c in info["worse"]) / len(ANSWERABLE))
    assert rec["ci_low"] <= rec["delta"] <= rec["ci_high"]
    assert rec["p_value"] == pytest.approx(2 / 8)  # three changed cases: exact test
    worse = d.worse(metric="recall@5")
    assert sorted(worse["case_id"]) == info["worse"]
    assert list(worse["delta"]) == sorted(worse["delta"])
    assert {"base_value", "new_value"} <= set(worse.columns)
    # the errored score is not averaged and not dropped: it is a status change
    faith = overall.loc[("ragas", "faithfulness")]
    assert faith["n_paired"] == len(ANSWERABLE) - 1 and faith["n_status_changed"] == 1
    changes = d.status_changes()
    assert list(changes["case_id"]) == [info["errored"]] and changes["change"].iloc[0] == "scored -> error"
    assert "TimeoutError" in changes["new_error"].iloc[0]
    assert list(d.better()["case_id"]) == [info["better"]]
    # the JSON document: the rows as the frames hold them, a value that is no number null (written
    # as made, not passed through jsonable: what json.dumps writes of them, the same characters)
    doc = ci.diff_json(d)
    out = io.StringIO()
    print_json(doc, out)
    got = json.loads(out.getvalue())
    assert out.getvalue() == json.dumps(got, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
    changed = got["status_changes"][0]
    assert changed["case_id"] == info["errored"] and changed["delta"] is None and changed["new_value"] is None
    assert [r["case_id"] for r in got["worse"]] == list(d.worse()["case_id"])
    assert [r["delta"] for r in got["worse"]] == list(d.worse()["delta"])
    # undefined in both runs (abstention on answerable cases) is "same", never a 0
    ab = overall.loc[("native", "abstention")]
    assert ab["n_paired"] == len(UNANSWERABLE) and ab["delta"] == 0
    # per tag
    real = d.summary[(d.summary["tag"] == "real") & (d.summary["metric"] == "recall@5")].iloc[0]
    assert real["n_worse"] == 3 and real["n_paired"] == sum("real" in TAGS[c] for c in ANSWERABLE)
    assert not d.fingerprint_differs and d.warnings == []


def test_a_diffs_top_rows_are_made_at_once_and_do_not_hold_the_diff(runs):
    """The report keeps the document of what moved (``diff_json`` with ``top``) while it makes the rest
    of the page: its rows are lists made at once, not rows made on reading that hold the diff (its
    paired columns and both runs: 565 MB at a million cases)."""
    import gc
    import weakref

    b, n, info = runs
    d = diff_runs(b, n, seed=0, n_resamples=100, n_permutations=100)
    doc = ci.diff_json(d, top=2)
    everything = ci.diff_json(d)
    assert [r["case_id"] for r in doc["worse"]] == [r["case_id"] for r in everything["worse"]][:2]
    assert all(type(doc[k]) is list for k in ("worse", "better", "status_changes"))
    gone = weakref.ref(d)
    del d, everything
    gc.collect()
    assert gone() is None and len(doc["worse"]) == 2


def test_diff_is_reproducible_and_seed_independent_of_filters(runs):
    b, n, _ = runs
    one = diff_runs(b, n, seed=3)
    two = diff_runs(b, n, seed=3, metrics=["recall@5"])
    a = one.summary[one.summary["metric"] == "recall@5"].reset_index(drop=True)
    assert a.equals(two.summary.reset_index(drop=True))


def test_diff_lists_unpaired_cases_and_flags_a_changed_golden_set(tmp_path):
    values = base_values()
    base = write_values(tmp_path / "base", values)
    cases = [c.model_copy(deep=True) for c in CASES[1:]]  # the first case removed
    cases[0].relevant = {"something-else.md": 1}  # a golden label changed
    extra = cases[1].model_copy(update={"id": "brand-new-case"})
    cases.append(extra)
    new_values = {k: {c: v for c, v in per.items() if c != CASES[0].id} for k, per in values.items()}
    for per in new_values.values():
        per["brand-new-case"] = 1.0
    new = write_values(tmp_path / "new", new_values, cases=cases)
    d = diff_runs(base, new)
    assert d.only_in_base == [CASES[0].id] and d.only_in_new == ["brand-new-case"]
    assert "brand-new-case" not in set(d.items["case_id"]) and CASES[0].id not in set(d.items["case_id"])
    assert d.fingerprint_differs and d.golden_changed == [cases[0].id]
    assert any("different dataset versions" in w and cases[0].id in w for w in d.warnings)


def test_diff_flags_only_outputs_changed(tmp_path):
    values = base_values()
    base = write_values(tmp_path / "base", values)
    cases = [c.model_copy(deep=True) for c in CASES]
    cases[0].answer = "A different answer."
    new = write_values(tmp_path / "new", values, cases=cases)
    d = diff_runs(base, new)
    assert d.fingerprint_differs and d.golden_changed == []
    assert any("only the system outputs" in w for w in d.warnings)
    # the printed diff says so as a note, not a warning: two systems over one golden set is a diff's use
    printed = ragbridge_cli("diff", base, new).stdout
    assert "note: the dataset fingerprints differ, but the golden items" in printed
    assert "warning:" not in printed


def test_diff_refuses_incomplete_runs_unless_asked(runs, tmp_path):
    b, _, _ = runs
    values = base_values()
    partial = {k: dict(list(v.items())[:10]) for k, v in values.items()}
    killed = write_values(tmp_path / "killed", partial, status="running")
    killed_manifest = json.loads((killed / "run.json").read_text())
    killed_manifest["metrics"] = {b_: sorted({m for bb, m in values if bb == b_}) for b_, _ in values}
    (killed / "run.json").write_text(json.dumps(killed_manifest))
    with pytest.raises(IncompleteRunError, match="status 'running'.*planned scores are missing"):
        diff_runs(b, killed)
    d = diff_runs(b, killed, allow_incomplete=True)
    assert any("incomplete" in w for w in d.warnings)
    assert len(d.status_changes()) > 0  # the missing scores are listed, not dropped
    assert set(d.status_changes()["new_status"]) == {"missing"}


def test_run_problems_catches_a_complete_status_with_missing_scores(tmp_path):
    values = base_values()
    run = write_values(tmp_path / "r", values)
    from ragbridge import load_run

    assert run_problems(load_run(run)) == []
    lines = (run / "scores.jsonl").read_text().splitlines()
    (run / "scores.jsonl").write_text("\n".join(lines[:-5]) + "\n")
    assert "5 of" in run_problems(load_run(run))[0]


def test_diff_bad_input(tmp_path, runs):
    b, n, _ = runs
    with pytest.raises(RegressionError, match="does not exist"):
        diff_runs(tmp_path / "nope", n)
    (tmp_path / "empty").mkdir()
    with pytest.raises(RegressionError, match="no run.json"):
        diff_runs(tmp_path / "empty", n)
    with pytest.raises(RegressionError, match="unknown metric 'recal@5' \\(did you mean 'recall@5'\\?\\)"):
        diff_runs(b, n, metrics=["recal@5"])
    with pytest.raises(RegressionError, match="no paired case carries tag 'rael'"):
        diff_runs(b, n, tags=["rael"])
    other = write_values(tmp_path / "other", {("native", "mrr"): {c: 1.0 for c in IDS}})
    with pytest.raises(RegressionError, match="no \\(backend, metric\\) in common"):
        diff_runs(b, other)


# --------------------------------------------------------------------------------------------
# gates: parsing


def test_gates_file_syntax(tmp_path):
    p = tmp_path / "gates.toml"
    p.write_text(
        """
[defaults]
backend = "native"
min_n = 3
seed = 11

[[gate]]
check = "recall@5 >= 0.85"

[[gate]]
check = "faithfulness drop <= 0.02"
backend = "ragas"
significant = true
tags = ["real"]

[[gate]]
check = "share(faithfulness >= 0.7) >= 0.9"
backend = ["ragas"]

[[gate]]
check = "error_rate <= 0.05"
name = "few errors"

[[gate]]
check = "undefined_rate(recall@5) < 0.2"
tag = "real"
below_min_n = "skip"
"""
    )
    cfg = load_gates(p)
    kinds = [(r.kind, r.metric, r.op, r.threshold) for r in cfg.rules]
    assert kinds == [
        ("mean", "recall@5", ">=", 0.85),
        ("drop", "faithfulness", "<=", 0.02),
        ("share", "faithfulness", ">=", 0.9),
        ("error_rate", None, "<=", 0.05),
        ("undefined_rate", "recall@5", "<", 0.2),
    ]
    assert cfg.seed == 11 and cfg.rules[0].backends == ["native"] and cfg.rules[1].backends == ["ragas"]
    assert cfg.rules[1].significant and cfg.rules[1].tags == ["real"] and cfg.rules[4].tags == ["real"]
    assert (cfg.rules[2].cut == 0.7 and cfg.rules[3].label == "few errors"
            and cfg.rules[4].below_min_n == "skip")
    assert all(r.min_n == 3 for r in cfg.rules)


@pytest.mark.parametrize(
    "body, message",
    [
        ('[[gate]]\ncheck = "recall@5 >= "', "cannot read check"),
        ('[[gate]]\ncheck = "recall@5 => 0.8"', "cannot read"),
        ('[[gate]]\ncheck = "recall@5 >= 85"', "outside 0..1"),
        ('[[gate]]\ncheck = "faithfulness drop >= 0.02"', "bounded from above"),
        ('[[gate]]\ncheck = "median(recall@5) >= 0.8"', "cannot read"),
        ('[[gate]]\nmetric = "recall@5"', "unknown key.*'metric'"),
        ('[[gate]]\ncheck = "mrr >= 0.8"\nsignificnt = true', "did you mean 'significant'"),
        ('[[gate]]\ncheck = "mrr >= 0.8"\nmin_n = -1', "min_n must be a non-negative integer"),
        ('[[gate]]\ncheck = "mrr >= 0.8"\ntags = "real, hard"\ntag = "x"', "either 'tag' or 'tags'"),
        ('[[gate]]\ncheck = "mrr >= 0.8"\nalpha = 5', "alpha must be a number between 0 and 1"),
        ('[defaults]\nbackend = "native"', "no rules"),
        ('[gates]\ncheck = "mrr >= 0.8"', "unknown top-level key"),
        ('[[gate]\ncheck = "mrr >= 0.8"', "not valid TOML"),
        ('[[gate]]\ncheck = "undefined_rate <= 0.1"',
         "needs what it counts, as in 'undefined_rate\\(METRIC\\)"),
        ('[[gate]]\ncheck = "diagnosed <= 0.1"', "needs what it counts, as in 'diagnosed\\(retrieval\\)"),
    ],
)
def test_malformed_gates_are_reported(tmp_path, body, message):
    p = tmp_path / "gates.toml"
    p.write_text(body)
    with pytest.raises(GateConfigError, match=message):
        load_gates(p)


# --------------------------------------------------------------------------------------------
# gates: evaluation


def test_absolute_share_and_error_rules(runs):
    b, n, info = runs
    report = run_gates(
        n,
        {
            "gate": [
                {"check": "recall@5 >= 0.85", "backend": "native"},
                {"check": "recall@5 >= 0.9", "tags": ["real"]},
                {"check": "abstention >= 0.9", "tags": ["unanswerable"]},
                {"check": "share(faithfulness >= 0.6) >= 0.9"},
                {"check": "error_rate <= 0.05"},
                {"check": "error_rate(faithfulness) <= 0.01"},
            ]
        },
    )
    by = {(r.rule.index, r.backend): r for r in report.results}
    rec = [v for c, v in info["base"][("native", "recall@5")].items()
           if v is not None and c not in info["worse"]]
    assert by[(1, "native")].figure == pytest.approx(sum(rec) / len(ANSWERABLE))
    assert by[(1, "native")].n == len(ANSWERABLE)  # undefined (unanswerable) cases are not counted as 0
    assert by[(2, "native")].verdict == "fail"
    assert [i["case_id"] for i in by[(2, "native")].items][:3] == sorted(info["worse"])
    assert by[(3, "native")].figure == 1.0 and by[(3, "native")].n == len(UNANSWERABLE)
    assert by[(4, "ragas")].n == len(ANSWERABLE) - 1 and by[(4, "ragas")].verdict == "pass"
    # error_rate with no backend applies to every backend of the run
    assert by[(5, "native")].figure == 0 and by[(5, "ragas")].figure == pytest.approx(1 / len(IDS))
    assert by[(6, "ragas")].verdict == "fail" and by[(6, "ragas")].items[0]["case_id"] == info["errored"]
    assert not report.passed and len(report.failed) == 2


def test_drop_rule_against_a_baseline(runs):
    b, n, info = runs
    rules = {"gate": [{"check": "recall@5 drop <= 0.01"}, {"check": "faithfulness drop <= 0.02"}]}
    report = run_gates(n, rules, baseline=b)
    rec, faith = report.results
    assert rec.verdict == "fail" and rec.n == len(ANSWERABLE)
    assert rec.figure > 0.01 and rec.ci_low <= rec.figure <= rec.ci_high
    assert [i["case_id"] for i in rec.items] == sorted(
        info["worse"], key=lambda c: (-info["base"][("native", "recall@5")][c], c))
    assert faith.verdict == "pass" and faith.figure < 0  # one case got better, the errored one is not paired
    assert "not scored now" in faith.detail
    with pytest.raises(GateConfigError, match="pass --baseline"):
        run_gates(n, rules)


def test_significance_keeps_judge_noise_from_failing(tmp_path):
    rng = np.random.default_rng(0)
    base = {("ragas", "faithfulness"): {c: round(float(rng.uniform(0.5, 1)), 3) for c in IDS}}
    # noise: small symmetric jitter, a mean drop just over the allowance
    noisy = {("ragas", "faithfulness"): {c: min(1, max(0, v + float(rng.normal(-0.025, 0.08))))
                                         for c, v in base[("ragas", "faithfulness")].items()}}
    # a real regression: every case a little lower
    real = {("ragas", "faithfulness"): {c: max(0, v - 0.08)
                                        for c, v in base[("ragas", "faithfulness")].items()}}
    b = write_values(tmp_path / "b", base)
    rule = {"check": "faithfulness drop <= 0.02"}
    plain = run_gates(write_values(tmp_path / "noisy", noisy), {"gate": [rule]}, baseline=b).results[0]
    sig = run_gates(tmp_path / "noisy", {"gate": [{**rule, "significant": True}]}, baseline=b).results[0]
    assert plain.figure > 0.02 and plain.verdict == "fail"
    assert sig.verdict == "pass" and "not significant" in sig.detail and sig.p_value >= 0.05
    hard = run_gates(write_values(tmp_path / "real", real), {"gate": [{**rule, "significant": True}]},
                     baseline=b).results[0]
    assert hard.verdict == "fail" and hard.p_value < 0.05
    assert "significant (p <0.001, below alpha 0.05)" in hard.detail  # p printed as everywhere
    again = run_gates(tmp_path / "noisy", {"gate": [{**rule, "significant": True}]}, baseline=b).results[0]
    assert (again.p_value, again.ci_low) == (sig.p_value, sig.ci_low)  # seeded


def test_significant_absolute_rule_uses_the_interval(tmp_path):
    values = {("native", "recall@5"): {c: (0.0 if i < 5 else 1.0) for i, c in enumerate(IDS)}}  # mean 0.906
    run = write_values(tmp_path / "r", values)
    near, far = run_gates(
        run,
        {"gate": [{"check": "recall@5 >= 0.92", "significant": True},
                  {"check": "recall@5 >= 0.995", "significant": True}]},
    ).results
    assert near.figure < 0.92 <= near.ci_high and near.verdict == "pass" and "not significant" in near.detail
    assert far.ci_high < 0.995 and far.verdict == "fail" and "significant (95% CI" in far.detail


def test_min_n_fails_or_skips(runs):
    _, n, _ = runs
    rules = {"gate": [{"check": "abstention >= 0.5", "min_n": 10},
                      {"check": "abstention >= 0.5", "min_n": 10, "below_min_n": "skip"}]}
    fail, skip = run_gates(n, rules).results
    assert fail.verdict == "fail" and "below min_n=10" in fail.detail
    assert skip.verdict == "skip"


@pytest.mark.parametrize(
    "rule, message",
    [
        ({"check": "recal@5 >= 0.8"}, "unknown metric 'recal@5' \\(did you mean 'recall@5'\\?\\)"),
        ({"check": "answer_correctness >= 0.8"}, "metric 'answer_correctness' was not scored in this run"),
        ({"check": "recall@5 >= 0.8", "backend": "natve"}, "unknown backend 'natve'"),
        ({"check": "recall@5 >= 0.8", "backend": "ragas"}, "backend 'ragas' did not score 'recall@5'"),
        ({"check": "recall@5 >= 0.8", "tags": ["rael"]},
         "no case in this run carries tag 'rael' \\(did you mean 'real'\\?\\)"),
    ],
)
def test_rules_naming_what_the_run_lacks_are_bad_input(runs, rule, message):
    _, n, _ = runs
    with pytest.raises(GateConfigError, match=message):
        run_gates(n, {"gate": [{"check": "recall@5 >= 0"}, rule]})


def test_a_backend_from_defaults_is_named_as_such_and_not_forced_on_a_whole_run_rule(runs):
    """A ``backend`` of ``[defaults]`` the run lacks is named as set there (the rule names none);
    a rule over the whole run (``diagnosed``) reads every backend whatever ``[defaults]`` says, and
    refuses only a ``backend`` of its own."""
    _, n, _ = runs
    for backend, message in (
            ("natve", "gate #1: unknown backend 'natve' \\(set in \\[defaults\\]\\)"),
            ("ragas", "backend 'ragas' \\(set in \\[defaults\\]\\) did not score 'recall@5'")):
        with pytest.raises(GateConfigError, match=message):
            run_gates(n, {"defaults": {"backend": backend}, "gate": [{"check": "recall@5 >= 0"}]})
    report = run_gates(n, {"defaults": {"backend": "native"},
                           "gate": [{"check": "recall@5 >= 0"}, {"check": "diagnosed(retrieval) <= 1"}]})
    assert [r.verdict for r in report.results] == ["pass", "pass"]
    assert report.results[0].backend == "native" and report.results[1].backend == "diagnosis"
    with pytest.raises(GateConfigError, match="reads every backend of the run: remove 'backend'"):
        run_gates(n, {"gate": [{"check": "diagnosed(retrieval) <= 1", "backend": "native"}]})


def test_an_incomplete_run_is_not_gated(tmp_path):
    values = base_values()
    run = write_values(tmp_path / "r", values, status="interrupted")
    with pytest.raises(IncompleteRunError, match="status 'interrupted'"):
        run_gates(run, {"gate": [{"check": "recall@5 >= 0"}]})


def test_junit_and_markdown(runs):
    b, n, info = runs
    report = run_gates(
        n,
        {"gate": [{"check": "recall@5 >= 0.5"}, {"check": "recall@5 drop <= 0.01"},
                  {"check": "abstention >= 0.5", "min_n": 99, "below_min_n": "skip"}]},
        baseline=b,
    )
    root = ET.fromstring(ci.junit_xml(report))
    suite = root.find("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("3", "1", "1")
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == ["recall@5 >= 0.5", "recall@5 drop <= 0.01", "abstention >= 0.5"]
    failure = cases[1].find("failure")
    assert failure is not None and info["worse"][0] in failure.text
    md = ci.markdown(report)
    assert md.startswith("## ragbridge gate ❌ failed")
    assert "| 2 | native | recall@5 drop <= 0.01 |" in md and "❌ fail" in md and "⏭️ skip" in md
    assert "&lt;" not in md and "&gt;" not in md  # a comparison reads as it is, in the file and rendered
    assert "| case | baseline | run | change |" in md and info["worse"][0] in md


# --------------------------------------------------------------------------------------------
# The CLI (a subprocess running the real console entry point)


GATES = """
[defaults]
min_n = 3

[[gate]]
check = "recall@5 >= 0.8"
backend = "native"

[[gate]]
check = "recall@5 drop <= 0.01"
tags = ["real"]

[[gate]]
check = "error_rate <= 0.05"
"""


def test_cli_diff(runs, tmp_path):
    b, n, info = runs
    items = tmp_path / "items.csv"
    res = ragbridge_cli("diff", b, n, "--top", "2", "--items", items)
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert "Change in mean (new - base)" in out and "Per tag" in out and "95% CI" in out
    assert "Cases that got worse (3; the 2 largest)" in out
    assert "Cases whose score changed status (1)" in out and info["errored"] in out and "TimeoutError" in out
    import pandas as pd

    frame = pd.read_csv(items)
    assert len(frame) == len(IDS) * 3 and set(frame["change"]) >= {"worse", "better", "same",
                                                                    "scored -> error"}


def test_cli_gate_pass_and_fail(runs, tmp_path):
    b, n, info = runs
    gates = tmp_path / "gates.toml"
    gates.write_text(GATES)
    junit, md = tmp_path / "gate.xml", tmp_path / "gate.md"
    ok = ragbridge_cli("gate", b, "--config", gates, "--baseline", b, "--junit", junit, "--markdown", md)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "gate passed: 4 rule(s) held" in ok.stdout
    assert ET.parse(junit).getroot().find("testsuite").get("failures") == "0"
    bad = ragbridge_cli("gate", n, "--config", gates, "--baseline", b, "--junit", junit, "--markdown", md)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "FAIL" in bad.stdout and "recall@5 drop <= 0.01 [real]" in bad.stdout
    assert "gate failed: 1 of 4 rule(s) failed" in bad.stdout
    assert info["worse"][0] in bad.stdout  # the cases behind the failure
    assert ET.parse(junit).getroot().find("testsuite").get("failures") == "1"
    assert md.read_text().startswith("## ragbridge gate ❌ failed")


def test_cli_bad_input_exits_2(runs, tmp_path):
    b, n, _ = runs
    gates = tmp_path / "gates.toml"
    gates.write_text('[[gate]]\ncheck = "faithfulness >= 0.8"\nbackend = "deepeval"\n')
    res = ragbridge_cli("gate", n, "--config", gates)
    assert res.returncode == 2
    assert (res.stderr.startswith("error:") and "backend 'deepeval'" in res.stderr
            and len(res.stderr.strip().splitlines()) == 1)
    assert res.stdout == ""
    killed = write_values(tmp_path / "killed", base_values(), status="running")
    gates.write_text(GATES)
    md = tmp_path / "gate.md"
    res = ragbridge_cli("gate", killed, "--config", gates, "--markdown", md)
    assert res.returncode == 2 and "is incomplete" in res.stderr and "status 'running'" in res.stderr
    assert "not gated" in md.read_text()
    res = ragbridge_cli("diff", b, tmp_path / "missing")
    assert res.returncode == 2 and res.stderr.startswith("error:") and "does not exist" in res.stderr


def test_cli_on_real_native_runs(tmp_path):
    """Two real native runs: the second system retrieves worse on every fourth case."""
    import ragbridge

    base = ragbridge.evaluate(CASES, backends=["native"], out=tmp_path / "base")
    changed = [c.model_copy(update={"contexts": c.contexts[::-1]}) if i % 4 == 0 else c
               for i, c in enumerate(CASES)]
    ragbridge.evaluate(changed, backends=["native"], out=tmp_path / "new")
    assert base.complete
    gates = Path(__file__).resolve().parent.parent / "examples" / "ci" / "gates-native.toml"
    res = ragbridge_cli("gate", tmp_path / "new", "--config", gates, "--baseline", tmp_path / "base")
    assert res.returncode == 1, res.stdout + res.stderr
    assert "mrr drop" in res.stdout and "FAIL" in res.stdout
    # the example passes its own gates
    assert run_gates(tmp_path / "base", gates, baseline=tmp_path / "base").passed


# (an id cannot hold a line break or a control character: the input refuses it; errors, below, can)
HOSTILE_ID = ("<img src=x onerror=alert(1)>|`tick` **b** [l](javascript:alert(2)) ]]> &amp; "
              "a\\|b forged: 1.000")
HOSTILE_TAG = "<img src=x onerror=alert(3)>|t`"
HOSTILE_ERROR = "<script>alert(4)</script> | `x` ]]>\x1b[2J\nforged error line"


def test_hostile_strings_are_escaped_in_markdown_and_junit(tmp_path):
    """Case ids, tags, questions and reasons from the data reach gate --markdown / --junit, report
    --format md and the pytest plugin's message only escaped: no HTML survives (a renderer that allows
    HTML runs nothing), no table row or line is forged, no terminal control passes, and the JUnit
    parses and carries the id as text."""
    from ragbridge.report.text import plain_text
    from ragbridge.pytest_plugin import GateFailed, assert_gates

    other_id = "<img src=y onerror=alert(5)>"
    cases = [
        {"id": HOSTILE_ID, "question": "HOSTILE <img src=q onerror=alert(6)>?", "tags": [HOSTILE_TAG]},
        {"id": other_id, "question": "Where is my parcel?", "must_contain": ["<b>14 days</b>"],
         "tags": [HOSTILE_TAG]},
        {"id": "plain", "question": "How do I reset my password?", "must_contain": ["reset"]},
    ]
    (tmp_path / "golden.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases))
    (tmp_path / "hostile_target.py").write_text(
        "def pipeline(question):\n"
        "    if question.startswith('HOSTILE'):\n"
        f"        raise RuntimeError({HOSTILE_ERROR!r})\n"
        "    return {'answer': 'Open Settings and choose reset.',\n"
        "            'contexts': ['Settings has a reset button.']}\n")
    (tmp_path / "gates.toml").write_text(
        '[[gate]]\ncheck = "error_rate <= 0"\n\n'
        f'[[gate]]\ncheck = "must_contain >= 0.99"\ntags = [{json.dumps(HOSTILE_TAG)}]\n')
    run = ragbridge_cli("run", "golden.jsonl", "--out", "run", "--target", "hostile_target:pipeline",
                        "--no-progress", cwd=tmp_path)
    assert run.returncode != 2, run.stderr
    gate = ragbridge_cli("gate", "run", "--config", "gates.toml", "--markdown", "gate.md",
                         "--junit", "gate.xml", cwd=tmp_path)
    assert gate.returncode == 1, gate.stdout + gate.stderr
    report = ragbridge_cli("report", "run", "--format", "md", "--out", "report.md", cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    for name in ("gate.md", "report.md"):
        md = (tmp_path / name).read_text()
        assert HOSTILE_ID.split("\n")[0] not in md  # the id only appears escaped
        for raw in ("<img", "<script", "<b>"):
            assert raw not in md, (name, raw)
        assert not re.search(r"(?<!\\)\]\(", md), name  # no link can form
        assert "&lt;img src=x onerror=alert(1)&gt;" in md and "&lt;img src=y onerror=alert(5)&gt;" in md
        lines = md.splitlines()
        assert not any(line.startswith("forged") for line in lines) and "\x1b" not in md, name
        tables = _tables(lines)  # every row has as many cells as its table's header: no border forged
        assert tables and all(len({_cells(r) for r in t}) == 1 for t in tables), name
    gate_md = (tmp_path / "gate.md").read_text()
    assert "&lt;img src=x onerror=alert(3)&gt;\\|t\\`" in gate_md  # the tag, in the rule's label
    reason = "&lt;script&gt;alert(4)&lt;/script&gt; \\| \\`x\\` \\]\\]&gt;\\x1b\\[2J<br>forged error line"
    assert reason in gate_md
    suite = ET.parse(tmp_path / "gate.xml").getroot().find("testsuite")
    texts = "\n".join(el.text or "" for el in suite.iter())
    assert plain_text(HOSTILE_ID) in texts and other_id in texts  # as text, exactly (a newline shown as \n)
    assert plain_text(HOSTILE_ERROR) in texts
    assert not any(line.startswith("forged") for line in texts.splitlines())
    assert any(HOSTILE_TAG in (c.get("name") or "") for c in suite.iter("testcase"))
    with pytest.raises(GateFailed) as failed:
        assert_gates(tmp_path / "run", tmp_path / "gates.toml")
    message = str(failed.value)
    assert plain_text(HOSTILE_ID) in message and "\x1b" not in message
    assert not any(line.lstrip().startswith("forged") for line in message.splitlines())


def _tables(lines: list[str]) -> list[list[str]]:
    tables: list[list[str]] = []
    for prev, line in zip([""] + lines, lines):
        if line.startswith("|"):
            if not prev.startswith("|"):
                tables.append([])
            tables[-1].append(line)
    return tables


def _cells(row: str) -> int:
    """Cells of a GFM table row: borders are pipes not escaped by a backslash (a backslash escapes
    the next character, a backslash included)."""
    n, i = 0, 0
    while i < len(row):
        if row[i] == "\\":
            i += 2
            continue
        n += row[i] == "|"
        i += 1
    return n - 1


@pytest.mark.parametrize("columns", [80, 120])
def test_gate_at_80_columns_shows_every_rules_detail(tmp_path, example_path, columns):
    """At 80 columns rich squeezed the table's detail column to nothing, without an ellipsis: the
    table is printed only when every column keeps at least its longest word, else one line a rule."""
    run = tmp_path / "run"
    assert ragbridge_cli("run", example_path, "--out", run, "--no-progress").returncode == 0
    (tmp_path / "gates.toml").write_text('[[gate]]\ncheck = "recall@5 >= 0.5"\n'
                                         '[[gate]]\ncheck = "mrr >= 0.99"\n')
    res = ragbridge_cli("gate", run, "--config", tmp_path / "gates.toml", env={"COLUMNS": str(columns)})
    assert res.returncode == 1, res.stderr
    flat = " ".join(res.stdout.replace("│", " ").split())
    for detail in ("mean 0.939 >= 0.5: holds; not counted: 4 undefined, 0 errored",
                   "mean 0.844 >= 0.99: does not hold; not counted: 4 undefined, 0 errored"):
        assert all(word in flat for word in detail.split()), (detail, res.stdout)
    assert all(len(line) <= columns for line in res.stdout.splitlines())


def test_a_mean_just_below_the_bound_is_not_shown_rounded_onto_it(tmp_path):
    """A recall mean of 0.8496 against ``>= 0.85`` fails; three decimals would print 0.850, which
    reads as a pass: the terminal, the Markdown and the JUnit XML show 0.8496 instead."""
    rows = []
    for q in range(25):  # 21 cases find all 4 relevant chunks, one 6 of 25, three none: mean 21.24/25
        found, n_rel = (4, 4) if q < 21 else (6, 25) if q == 21 else (0, 2)
        rows.append({"id": f"q{q}", "question": f"question {q}",
                     "contexts": [{"id": f"d{q}-{i}"} for i in range(found)] + [{"id": "other"}],
                     "relevant": {f"d{q}-{i}": 1 for i in range(n_rel)}})
    data = tmp_path / "cases.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    res = ragbridge_cli("run", data, "--out", tmp_path / "run", "-m", "recall@100", "--no-progress")
    assert res.returncode == 0, res.stderr
    gates = tmp_path / "gates.toml"
    gates.write_text('[[gate]]\ncheck = "recall@100 >= 0.85"\n')
    junit, md = tmp_path / "gate.xml", tmp_path / "gate.md"
    res = ragbridge_cli("gate", tmp_path / "run", "--config", gates, "--junit", junit, "--markdown", md)
    assert res.returncode == 1, res.stdout + res.stderr
    out = " ".join(res.stdout.split())
    assert "mean 0.8496 >= 0.85: does not hold" in out and "0.850" not in out
    assert "0.8496 [0.699, 0.970]" in out  # the figure column too; its interval in three decimals
    assert "0.8496 >= 0.85: does not hold" in md.read_text() and "0.850 >=" not in md.read_text()
    failure = ET.parse(junit).getroot().find("testsuite").find("testcase").find("failure")
    assert "0.8496" in failure.get("message") + (failure.text or "") and "0.850 " not in failure.text


def test_diff_tag_groups_are_each_paired_case_s_tags():
    """diff's groups by tag (masks over the paired cases, no tuple a case) are each paired case's tags:
    the new run's, or the base run's for a case the new run holds only scores of."""
    import random

    from ragbridge.analysis.diff import _tag_masks
    from ragbridge.run.columns import CaseIndex

    rng = random.Random(4)

    def index(n, described, pool):
        ids = [f"c{i}" for i in rng.sample(range(3 * n), n)]
        tags = [tuple(sorted(rng.sample(pool, rng.randint(0, 2)))) for _ in range(described)]
        return CaseIndex(ids, tags + [()] * (n - described), np.ones(n, bool), np.zeros(n, np.int64),
                         np.zeros((n, 16), np.uint8), lambda i: [], described=described)

    for _ in range(200):
        n = rng.randint(1, 40)
        bc, nc = index(n, rng.randint(0, n), ["a", "b", "c"]), index(n, rng.randint(0, n), ["a", "b", "d"])
        paired = np.array([i for i in range(n) if bc.place(nc.ids[i]) is not None], np.int64)

        def tags_of(i):
            if i < nc.described:
                return nc.tags[i]
            j = bc.place(nc.ids[i])
            return bc.tags[j] if j < bc.described else ()

        tag_sets = [tags_of(i) for i in paired.tolist()]
        masks = _tag_masks(bc, nc, paired)
        assert {t for t, m in masks.items() if m.any()} == {t for ts in tag_sets for t in ts}
        for t, m in masks.items():
            assert m.tolist() == [t in ts for ts in tag_sets]


def test_a_drop_rule_and_diff_count_the_same_cases_worse(tmp_path):
    """A score lower by rounding alone (map 0.5 against 0.49999999999999994: the same precisions summed
    at other ranks) is not a case behind a drop rule, as it is not worse in ``diff``: both count the
    cases lower by more than rounding (``EPS``). Runs made by the runner from two golden sets."""
    def golden(ranks_of):  # case id -> the ranks (1-based) of its three relevant chunks among 15
        rows = []
        for cid, ranks in ranks_of.items():
            ids = [f"{cid}-x{i}" for i in range(1, 16)]
            for k, r in enumerate(ranks):
                ids[r - 1] = f"{cid}-rel{k}"
            rows.append({"id": cid, "question": f"question {cid}", "contexts": [{"id": i} for i in ids],
                         "relevant": {f"{cid}-rel{k}": 1 for k in range(3)}})
        return rows

    for name, ranks in (("base", {"q0": (2, 4, 6), "q1": (1, 2, 3)}),
                        ("new", {"q0": (1, 7, 14), "q1": (10, 11, 12)})):
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in golden(ranks)))
        res = ragbridge_cli("run", tmp_path / f"{name}.jsonl", "--out", tmp_path / name, "-m", "map",
                            "--no-progress")
        assert res.returncode == 0, res.stderr
    values = {s.case_id: s.value for s in load_run(tmp_path / "new").scores}
    assert values["q0"] == 0.49999999999999994  # (the base's q0 is 0.5)
    rule = {"gate": [{"check": "map drop <= 0.5", "backend": "native"}]}
    behind = run_gates(tmp_path / "new", rule, baseline=tmp_path / "base").results[0]
    assert [i["case_id"] for i in behind.items] == ["q1"]
    d = diff_runs(tmp_path / "base", tmp_path / "new", n_resamples=100, n_permutations=100)
    assert d.summary.loc[d.summary["tag"] == "(all)", "n_worse"].tolist() == [1]
