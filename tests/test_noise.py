"""Repeats, judge noise, cost, budgets, dry runs and prediction-powered inference.

The stub judge is made noisy on purpose (``StubJudge(noise=p, noise_seed=s)``, a test device): on the
binary ``abstention`` rubric every repeat's verdict flips with probability p, independently, so the
within-case variance is p(1 - p), a case's verdict is the same in all N repeats with probability
(1 - p)^N + p^N, and the noise figures must recover those.
"""

from __future__ import annotations

import json
import re
import math
import random

import pytest

from conftest import EXAMPLE
from ragbridge import evaluate, load_cases, load_run
from ragbridge.judge import JudgeConfig
from ragbridge.analysis.noise import noise_figures
from ragbridge.analysis.stats import ppi_mean
from ragbridge.testing import StubJudge

PRICE = {"stub-judge": {"input": 0.5, "output": 2.0}}


def _config(stub, tmp_path, name="cache.sqlite", **kw):
    return JudgeConfig(model="stub-judge", base_url=stub.base_url, cache_path=tmp_path / name, **kw)


def _abstention(cases, judge, **kw):
    return evaluate(cases, backends=["rubric"], metrics=["abstention"], judge=judge, **kw)


@pytest.fixture(scope="module")
def cases():
    return load_cases(EXAMPLE)


def test_repeats_are_distinct_calls_replayed_warm_and_read_only(tmp_path, cases):
    with StubJudge(noise=0.3, noise_seed=1) as stub:
        judge = _config(stub, tmp_path)
        run = _abstention(cases, judge, out=tmp_path / "run", repeats=3)
        n_judged = sum(1 for s in run.scores if s.repeats is not None)
        assert run.manifest.counts["judge"]["calls"] == len(stub.posts()) == 3 * n_judged
        repeats_seen = {s.repeat for s in run.repeat_scores}
        assert repeats_seen == {0, 1, 2}
        # the scores keep their repeat index on disk, and a case's score is its mean over them
        lines = [json.loads(x) for x in (tmp_path / "run" / "scores.jsonl").read_text().splitlines()]
        assert {x.get("repeat", 0) for x in lines} == {0, 1, 2}
        one = next(s for s in run.scores if s.repeats and s.repeats.sd)
        assert one.value == pytest.approx(sum(one.repeats.values) / 3)
        # warm: every repeat reused from the score cache, the same values
        warm = _abstention(cases, judge, repeats=3)
        assert warm.manifest.counts["judge"]["calls"] == 0
        assert warm.manifest.counts["score_cache"]["reused"] == 3 * n_judged
        assert [s.value for s in warm.repeat_scores] == [s.value for s in run.repeat_scores]
        # and without it, every repeat's answers replayed from the judge cache
        warm = _abstention(cases, judge, repeats=3, score_cache=False)
        assert warm.manifest.counts["judge"]["calls"] == 0
        assert warm.manifest.counts["judge"]["cache_hits"] == 3 * n_judged
        assert [s.value for s in warm.repeat_scores] == [s.value for s in run.repeat_scores]
    # CI: the recorded caches replay all N with no judge and no key
    for score_cache in (True, False):
        replay = _abstention(cases, judge.model_copy(update={"cache_mode": "read-only"}), repeats=3,
                             score_cache=score_cache)
        assert replay.manifest.counts["errored"] == 0
        assert [s.value for s in replay.repeat_scores] == [s.value for s in run.repeat_scores]
    assert load_run(tmp_path / "run").scores[0].repeats is not None


def test_pass_in_at_least_m_of_n(tmp_path, cases):
    with StubJudge(noise=0.4, noise_seed=2) as stub:
        judge = _config(stub, tmp_path)
        strict = _abstention(cases, judge, repeats=4, pass_repeats=4)
        loose = _abstention(cases, judge, repeats=4, pass_repeats=1)
    for s, t in zip(strict.scores, loose.scores):
        if s.repeats is None or s.status != "scored":
            continue
        passes = sum(bool(p) for p in s.repeats.passed)
        assert s.passed == (passes == 4) and t.passed == (passes >= 1)


@pytest.mark.slow
@pytest.mark.parametrize("p", [0.1, 0.25])
def test_noise_figures_recover_the_injected_spread(tmp_path, cases, p):
    n = 8
    with StubJudge() as stub:  # the noiseless verdicts: the truth the noise is added to
        clean = _abstention(cases, _config(stub, tmp_path, "clean.sqlite"))
    with StubJudge(noise=p, noise_seed=11) as stub:
        run = _abstention(cases, _config(stub, tmp_path), repeats=n)
    [row] = noise_figures(run.repeat_scores)
    truth = [s.value for s in clean.scores if s.status == "scored"]
    assert row["n_cases"] == len(truth) and row["repeats"] == n
    assert row["within_sd"] == pytest.approx(math.sqrt(p * (1 - p)), abs=0.05)
    assert row["flip_share"] == pytest.approx(1 - (1 - p) ** n - p ** n, abs=0.12)
    # test-retest reliability: between-case variance of the true verdicts, shrunk by the flips
    var_b = sum((v - sum(truth) / len(truth)) ** 2 for v in truth) / len(truth)
    expected = (1 - 2 * p) ** 2 * var_b / ((1 - 2 * p) ** 2 * var_b + p * (1 - p))
    assert row["alpha"] == pytest.approx(expected, abs=0.12)
    assert 0 < row["mde"] < 1


def test_no_noise_no_spread(tmp_path, cases):
    with StubJudge() as stub:
        run = _abstention(cases, _config(stub, tmp_path), repeats=3)
    [row] = noise_figures(run.repeat_scores)
    assert row["within_sd"] == 0 and row["flip_share"] == 0 and row["mde"] == 0


def test_cost_from_the_price_table(tmp_path, cases):
    with StubJudge() as stub:
        run = _abstention(cases, _config(stub, tmp_path, prices=PRICE), out=tmp_path / "run")
    judge = run.manifest.counts["judge"]
    expected = (judge["prompt_tokens"] * 0.5 + judge["completion_tokens"] * 2.0) / 1e6
    cost = run.manifest.counts["cost"]
    assert cost["total"] == pytest.approx(expected) and cost["currency"] == "USD"
    assert cost["by_backend"]["rubric"] == pytest.approx(expected)
    assert sum(s.cost for s in run.scores if s.cost is not None) == pytest.approx(expected)
    assert run.costs()["cost"].sum() == pytest.approx(expected)
    manifest = json.loads((tmp_path / "run" / "run.json").read_text())
    assert manifest["counts"]["cost"]["by_metric"]["rubric:abstention"] == pytest.approx(expected)
    with StubJudge() as stub:  # no price for the model: unknown, never 0
        other = {"other": PRICE["stub-judge"]}
        unpriced = _abstention(cases, _config(stub, tmp_path, "c2.sqlite", prices=other))
    assert unpriced.manifest.counts["cost"]["total"] is None
    assert unpriced.manifest.counts["judge"]["cost"] is None  # not 0.0 beside an unknown total
    assert all(s.cost is None for s in unpriced.scores if s.judge_calls)


def test_budget_stops_at_the_limit_marks_not_run_and_resumes(tmp_path, cases):
    out = tmp_path / "run"
    with StubJudge() as stub:
        judge = _config(stub, tmp_path)
        planned = _abstention(cases, judge, out=out, repeats=2, dry_run=True)
        full = planned.manifest.counts["judge"]["calls"]
        assert not out.exists() and len(stub.posts()) == 0  # a dry run writes and calls nothing
        stopped = _abstention(cases, judge, out=out, repeats=2, max_calls=30)
        assert len(stub.posts()) == 30 == stopped.manifest.counts["judge"]["calls"]
        counts = stopped.manifest.counts
        assert counts["errored"] == 0 and counts["not_run"] > 0 and stopped.manifest.status == "incomplete"
        assert counts["budget"] == {"max_calls": 30, "max_cost": None, "spent": True}
        not_run = [s for s in stopped.repeat_scores if s.status == "not_run"]
        assert all("budget" in s.reason for s in not_run)
        # what is left, counted from the cache and the run folder: exactly the calls the resume makes
        left = _abstention(cases, judge, out=out, repeats=2, dry_run=True).manifest.counts["judge"]["calls"]
        assert left == full - 30
        resumed = _abstention(cases, judge, out=out, repeats=2, max_calls=full)
        assert len(stub.posts()) == full
        assert resumed.manifest.status == "complete" and "not_run" not in resumed.manifest.counts
        assert resumed.manifest.counts["judge"]["calls"] == full


def test_max_cost_stops_near_the_limit(tmp_path, cases):
    with StubJudge() as stub:
        judge = _config(stub, tmp_path, prices=PRICE, max_concurrency=2)
        per_call = _abstention(cases[:4], judge, dry_run=True).manifest.counts["cost"]["total"] / 4
        run = _abstention(cases, judge, max_cost=10 * per_call)
    spent = run.manifest.counts["judge"]["cost"]
    # stops once the cost spent plus the calls in flight reach the limit: at most the in-flight overshoot
    assert 8 * per_call <= spent <= 10 * per_call + 2 * 1.5 * per_call
    assert run.manifest.counts["not_run"] > 0


def test_dry_run_counts_cache_hits_and_equals_the_real_run(tmp_path, cases):
    with StubJudge() as stub:
        judge = _config(stub, tmp_path, prices=PRICE)
        half = _abstention(cases[:20], judge, score_cache=False)
        dry = _abstention(cases, judge, dry_run=True, score_cache=False).manifest.counts
        assert dry["judge"]["cache_hits"] == half.manifest.counts["judge"]["calls"]
        before = len(stub.posts())
        real = _abstention(cases, judge, score_cache=False).manifest.counts
        assert real["judge"]["calls"] == dry["judge"]["calls"] == len(stub.posts()) - before
        assert real["cost"]["total"] == pytest.approx(dry["cost"]["total"])


def _ppi_trial(rng, n_all, n_labelled, p, tpr, tnr):
    truth = [1.0 if rng.random() < p else 0.0 for _ in range(n_all)]
    judge = [float(rng.random() < tpr) if t else float(rng.random() >= tnr) for t in truth]
    labelled = set(rng.sample(range(n_all), n_labelled))
    r = ppi_mean([truth[i] for i in sorted(labelled)], [judge[i] for i in sorted(labelled)],
                 [judge[i] for i in range(n_all) if i not in labelled])
    return r, sum(truth) / n_all


def test_ppi_interval_covers_the_truth_at_about_its_nominal_rate():
    rng = random.Random(20240501)
    trials, covered, width, width_humans, bias_judge, bias_ppi = 1000, 0, 0.0, 0.0, 0.0, 0.0
    for _ in range(trials):
        r, true = _ppi_trial(rng, 500, 50, p=0.7, tpr=0.9, tnr=0.6)
        covered += r["low"] <= true <= r["high"]
        width += r["high"] - r["low"]
        width_humans += r["classical"]["high"] - r["classical"]["low"]
        bias_judge += (r["judge_only"] - true) / trials
        bias_ppi += (r["estimate"] - true) / trials
    assert 0.93 <= covered / trials <= 0.985
    assert width < width_humans  # the judge's verdicts narrow the humans-only interval
    # the judge alone is biased (it passes 40 % of the failing cases); the rectified estimate is not
    assert bias_judge == pytest.approx(0.05, abs=0.01) and abs(bias_ppi) < 0.01


@pytest.mark.parametrize("backend", ["ragas", "deepeval", "trulens", "phoenix"])
def test_library_backends_repeat_replay_and_dry_run_exactly(tmp_path, cases, backend):
    from ragbridge.plugins import get_backends

    if not get_backends()[backend].available():
        pytest.skip(f"{backend} is not installed")
    few = cases[:4]
    with StubJudge() as stub:
        judge = _config(stub, tmp_path, embedding_model="stub-embedder")
        kw = dict(backends=[backend], metrics=["faithfulness"], judge=judge, repeats=2)
        dry = evaluate(few, dry_run=True, **kw)
        run = evaluate(few, **kw)
        assert run.manifest.counts["errored"] == 0
        assert {s.repeat for s in run.repeat_scores} == {0, 1}
        # each repeat is its own calls: exactly what the dry run counted, against a judge that answers alike
        calls = run.manifest.counts["judge"]["calls"]
        assert calls == dry.manifest.counts["judge"]["calls"] == len(stub.posts())
        # the second repeat's calls are its own, and the judge is told which repeat each is
        by_repeat = [p.headers.get("x-ragbridge-repeat", "0") for p in stub.posts()]
        # (as many as the first's; a backend's one probe at open, TruLens's, is not a repeat's)
        assert by_repeat.count("1") > 0 and by_repeat.count("0") - by_repeat.count("1") in (0, 1)
        warm = evaluate(few, **kw)
        assert warm.manifest.counts["judge"]["calls"] == 0


def test_a_drop_within_judge_noise_is_reported_as_such(tmp_path, cases):
    from ragbridge.analysis.noise import within_noise
    from ragbridge.run import Run

    with StubJudge(noise=0.2, noise_seed=5) as stub:
        base = _abstention(cases, _config(stub, tmp_path, "a.sqlite"), repeats=4)
    with StubJudge(noise=0.2, noise_seed=6) as stub:  # the same system, judged again
        again = _abstention(cases, _config(stub, tmp_path, "b.sqlite"), repeats=4)
    [row] = within_noise(base, again)
    assert row["band"] > 0 and row["within_noise"] is True and row["mde"] > row["band"]
    # a real drop: every case now fails
    worse = [s.model_copy(update={"value": 0.0, "passed": False}) if s.status == "scored" else s
             for s in again.repeat_scores]
    dropped = Run(manifest=again.manifest, scores=worse, cases=again.cases)
    [row] = within_noise(base, dropped)
    assert row["delta"] < -row["band"] and row["within_noise"] is False


def test_ppi_estimates_from_a_run_and_a_few_labels():
    from ragbridge.analysis.ppi import ppi_estimates

    rng = random.Random(3)
    truth = {f"c{i}": rng.random() < 0.6 for i in range(400)}
    judge = {c: (0.9 if t else 0.2) if rng.random() < 0.85 else (0.2 if t else 0.9) for c, t in truth.items()}
    judge["unscored"] = None
    labels = {c: truth[c] for c in list(truth)[:60]}
    est = ppi_estimates(judge, labels, threshold=0.5)["pass_rate"]
    true = sum(truth.values()) / len(truth)
    assert est["n"] == 60 and est["N"] == 340
    assert est["low"] <= true <= est["high"]
    assert est["high"] - est["low"] < est["classical"]["high"] - est["classical"]["low"]


def test_without_repeats_budget_or_prices_the_files_read_as_before(tmp_path, cases):
    with StubJudge() as stub:
        run = _abstention(cases, _config(stub, tmp_path), out=tmp_path / "run")
    line = json.loads((tmp_path / "run" / "scores.jsonl").read_text().splitlines()[0])
    assert not {"repeat", "not_run", "cost", "repeats"} & set(line)
    manifest = json.loads((tmp_path / "run" / "run.json").read_text())
    assert "repeats" not in manifest["options"] and "not_run" not in manifest["counts"]
    assert "budget" not in manifest["counts"] and manifest["counts"]["cost"]["total"] is None
    assert run.repeat_scores is run.scores


def test_the_audit_log_names_the_case_and_the_repeat(tmp_path, cases):
    with StubJudge() as stub:
        _abstention(cases[:3], _config(stub, tmp_path), out=tmp_path / "run", repeats=2)
    lines = [json.loads(x) for x in (tmp_path / "run" / "judge-audit.jsonl").read_text().splitlines()]
    ids = {c.id for c in cases[:3]}
    assert {x["case_id"] for x in lines} <= ids
    assert sorted(x.get("repeat", 0) for x in lines) == [0] * (len(lines) // 2) + [1] * (len(lines) // 2)
    assert len({x["request_key"] for x in lines}) == len(lines)  # each repeat its own cache key


def test_gate_check_for_repeats_and_the_report_section(tmp_path, cases):
    from ragbridge.analysis.noise import check_repeats, noise_section

    with StubJudge(noise=0.3, noise_seed=9) as stub:
        once = _abstention(cases, _config(stub, tmp_path, "a.sqlite"))
        thrice = _abstention(cases, _config(stub, tmp_path, "b.sqlite"), repeats=3)
    assert "at least 3 repeats" in check_repeats(once, 3)
    assert check_repeats(thrice, 3) is None
    section = noise_section(thrice)
    rows = section["cases"]["rubric:abstention"]
    assert section["repeats"] == 3 and section["figures"][0]["metric"] == "abstention"
    assert rows[0]["sd"] >= rows[-1]["sd"] and len(rows[0]["values"]) == 3
    assert noise_section(once)["cases"] == {}


@pytest.mark.slow
def test_cli_diff_and_gate_use_judge_noise(tmp_path, cases):
    from conftest import ragbridge_cli

    runs = {}
    for name, seed in (("base", 5), ("new", 6)):
        with StubJudge(noise=0.2, noise_seed=seed) as stub:
            runs[name] = tmp_path / name
            _abstention(cases, _config(stub, tmp_path, f"{name}.sqlite"), out=runs[name], repeats=3)
    res = ragbridge_cli("diff", runs["base"], runs["new"], "--all", "--json", "--resamples", "200",
                        "--permutations", "200")
    assert res.returncode == 0, res.stderr
    [row] = [r for r in json.loads(res.stdout)["summary"] if r["tag"] == "(all)"]
    assert row["within_noise"] is True and row["noise_band"] > abs(row["delta"]) and row["mde"] > 0
    text = ragbridge_cli("diff", runs["base"], runs["new"], "--resamples", "200", "--permutations", "200")
    assert "within judge noise" in text.stdout
    gates = tmp_path / "gates.toml"
    gates.write_text('[[gate]]\ncheck = "abstention drop <= 0.5"\nbackend = "rubric"\nmin_repeats = 5\n')
    res = ragbridge_cli("gate", runs["new"], "--config", gates, "--baseline", runs["base"])
    assert res.returncode == 1 and "at least 5 repeats" in res.stdout and "judge noise" in res.stdout
    gates.write_text('[[gate]]\ncheck = "abstention drop <= 0.5"\nbackend = "rubric"\nmin_repeats = 3\n')
    res = ragbridge_cli("gate", runs["new"], "--config", gates, "--baseline", runs["base"])
    assert res.returncode == 0, res.stdout


@pytest.mark.slow
def test_cli_validate_estimates_the_whole_sets_pass_rate_from_a_few_labels(tmp_path, cases):
    from conftest import ragbridge_cli

    with StubJudge() as stub:
        _abstention(cases, _config(stub, tmp_path), out=tmp_path / "run")
    # 20 human labels: the truth here is the stub's own verdict, flipped on 3 cases
    labels = tmp_path / "labels.jsonl"
    run = load_run(tmp_path / "run")
    scored = [s for s in run.scores if s.status == "scored"][:20]
    rows = [{"case_id": s.case_id, "metric": "abstention", "label": "pass" if (s.value >= 0.5) != (i < 3)
             else "fail"} for i, s in enumerate(scored)]
    labels.write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = ragbridge_cli("validate", tmp_path / "run", "--labels", labels, "--json")
    assert res.returncode == 0, res.stderr
    [row] = json.loads(res.stdout)["validation"]
    assert row["n_paired"] == 20 and row["n_judged"] == sum(s.status == "scored" for s in run.scores)
    assert row["ppi_pass_rate_low"] <= row["ppi_pass_rate"] <= row["ppi_pass_rate_high"]
    assert row["human_pass_rate_low"] is not None and row["judge_pass_rate"] is not None
    text = ragbridge_cli("validate", tmp_path / "run", "--labels", labels)
    assert "prediction-powered inference" in text.stdout


@pytest.mark.slow
def test_the_report_shows_noise_spread_per_case_and_cost(tmp_path, cases):
    from conftest import ragbridge_cli

    with StubJudge(noise=0.3, noise_seed=4) as stub:
        _abstention(cases, _config(stub, tmp_path, prices=PRICE), out=tmp_path / "run", repeats=3)
    for fmt in ("md", "html", "json"):
        res = ragbridge_cli("report", tmp_path / "run", "--format", fmt, "--out", tmp_path / f"r.{fmt}")
        assert res.returncode == 0, res.stderr
    md = (tmp_path / "r.md").read_text()
    assert "## Judge noise" in md and "Spread per case, rubric:abstention" in md and "Cost by" in md
    assert 'id="noise"' in (tmp_path / "r.html").read_text()
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["noise"]["repeats"] == 3 and doc["cost"]["total"] > 0
    assert doc["judge_usage"][0]["cost"] == pytest.approx(doc["cost"]["total"])


@pytest.mark.slow
def test_cli_run_repeats_budget_dry_run_and_resume(tmp_path, cases):
    from conftest import EXAMPLE, ragbridge_cli

    with StubJudge() as stub:
        (tmp_path / "ragbridge.toml").write_text(
            f'[judge]\nmodel = "stub-judge"\nbase_url = "{stub.base_url}"\n'
            '[judge.prices."stub-judge"]\ninput = 0.15\noutput = 0.6\n')
        args = ["run", EXAMPLE, "--out", tmp_path / "run", "--backend", "rubric", "--metric", "abstention",
                "--repeats", "2", "--no-progress"]
        dry = ragbridge_cli(*args, "--dry-run", "--json", cwd=tmp_path)
        assert dry.returncode == 0, dry.stderr
        planned = json.loads(dry.stdout)
        assert planned["dry_run"] is True and planned["calls"] > 40 and planned["cost"] > 0
        assert not (tmp_path / "run").exists() and len(stub.posts()) == 0
        stopped = ragbridge_cli(*args, "--max-calls", "40", cwd=tmp_path)
        assert stopped.returncode == 4, stopped.stderr
        assert "budget spent" in stopped.stderr and len(stub.posts()) == 40
        made = re.search(r"run written to .* \((\d+) scores, (\d+) not run\)", stopped.stdout)
        manifest = json.loads((tmp_path / "run" / "run.json").read_text())["counts"]
        assert made and (int(made[1]), int(made[2])) == (
            manifest["scores"] - manifest["not_run"], manifest["not_run"]), stopped.stdout
        left = json.loads(ragbridge_cli(*args, "--dry-run", "--json", cwd=tmp_path).stdout)
        assert left["calls"] == planned["calls"] - 40 and left["kept"] > 0
        done = ragbridge_cli(*args, "--json", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        doc = json.loads(done.stdout)
        assert len(stub.posts()) == planned["calls"] == doc["counts"]["judge"]["calls"]
        assert doc["counts"]["cost"]["total"] == pytest.approx(planned["cost"])
        assert doc["summary"][0]["cost"] == pytest.approx(planned["cost"])


def _labelled_trial(rng, design, n_all=300, n_labels=40, p=0.85, tpr=0.95, tnr=0.6):
    """One golden set with a known true pass rate, judged with errors, and ``n_labels`` human labels
    drawn uniformly or as ``ragbridge label`` draws them (half from each judge verdict)."""
    truth = {f"c{i}": rng.random() < p for i in range(n_all)}
    judge = {c: (rng.random() < tpr) if t else (rng.random() >= tnr) for c, t in truth.items()}
    if design == "uniform":
        picked, strata = rng.sample(sorted(truth), n_labels), None
    else:
        sides = {v: sorted(c for c in judge if judge[c] is v) for v in (True, False)}
        fail = min(n_labels // 2, len(sides[False]))
        picked = rng.sample(sides[True], n_labels - fail) + rng.sample(sides[False], fail)
        strata = {c: "pass" if v else "fail" for c, v in judge.items()}
    return judge, {c: truth[c] for c in picked}, strata, sum(truth.values()) / n_all


@pytest.mark.parametrize("design", ["uniform", "stratified"])
def test_the_pass_rate_interval_covers_the_truth_at_its_nominal_level(design):
    """The golden set's pass rate from the judge's verdicts and 40 labels: in 400 seeded golden sets
    the 95% interval holds the true rate at least 93% of the time, the estimate is unbiased, and for
    labels drawn by stratum the unweighted share of passing labels is not (why the weights matter)."""
    from ragbridge.analysis.ppi import pass_rate

    rng = random.Random(20261201)
    trials, covered, bias, naive_bias = 400, 0, 0.0, 0.0
    for _ in range(trials):
        judge, labels, strata, true = _labelled_trial(rng, design)
        est = pass_rate(judge, labels, strata)
        assert 0.0 <= est["low"] <= est["estimate"] <= est["high"] <= 1.0
        covered += est["low"] <= true <= est["high"]
        bias += (est["estimate"] - true) / trials
        naive_bias += (sum(labels.values()) / len(labels) - true) / trials
    assert covered / trials >= 0.93, covered / trials
    assert abs(bias) < 0.01
    if design == "stratified":
        assert naive_bias < -0.1  # half the labels from the judge's fails: the plain share is far too low


def test_labels_of_consecutive_cases_are_said_to_be_no_random_sample(tmp_path):
    """The first 20 lines of the bundled labels (``head -n 20``, as the walkthrough once did) are the
    run's first 20 cases: every interval and the true pass rate assume a random draw, and validate
    says they are none, in text, the frame (and so JSON) and the report; a seeded random draw of 20
    lines, and every line, are said nothing of."""
    from conftest import ROOT, ragbridge_cli
    from ragbridge.analysis import validate
    from ragbridge.report import write_report

    lines = (ROOT / "examples" / "support-bot" / "faithfulness-labels.jsonl").read_text().splitlines(True)
    with StubJudge() as stub:
        evaluate(load_cases(EXAMPLE), backends=["rubric"], metrics=["faithfulness"],
                 judge=_config(stub, tmp_path), out=tmp_path / "run")
    drawn = {"head": lines[:20], "random": random.Random(1).sample(lines, 20), "all": lines}
    for name, chosen in drawn.items():
        (tmp_path / f"{name}.jsonl").write_text("".join(chosen))
        [row] = validate(tmp_path / "run", tmp_path / f"{name}.jsonl").to_dict("records")
        assert row["n_labels"] == len(chosen)
        if name == "head":
            assert "the 20 labelled cases are the run's cases 1 to 20 of 53" in row["not_random"]
        else:
            assert row["not_random"] is None, name
    text = ragbridge_cli("validate", tmp_path / "run", "--labels", tmp_path / "head.jsonl",
                         env={"COLUMNS": "80"}).stdout
    assert "faithfulness: the 20 labelled cases are the run's cases 1 to 20 of 53 in its" in text
    assert "not a random sample" in text and max(map(len, text.splitlines())) <= 80
    write_report(tmp_path / "run", tmp_path / "report.md", fmt="md", labels=tmp_path / "head.jsonl")
    assert "cases 1 to 20 of 53 in its order, not a random sample" in (tmp_path / "report.md").read_text()
