"""trend: a metric's mean over dated runs, its least-squares slope with a t interval, and its change
points by binary segmentation with permutation p-values; the gate rule on the slope of the last runs."""

from __future__ import annotations

import datetime as dt
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from conftest import EXAMPLE, ragbridge_cli
from ragbridge import load_cases
from ragbridge.analysis import run_gates, trend
from ragbridge.analysis import stats as st
from ragbridge.analysis.gate import GateConfigError
from ragbridge.run.summary import ALL

START = dt.datetime(2026, 3, 1, 6, 0, tzinfo=dt.timezone.utc)


@pytest.fixture(scope="module")
def native_run(tmp_path_factory):
    """One real native run of the support-bot set."""
    import ragbridge

    out = tmp_path_factory.mktemp("native") / "run"
    ragbridge.evaluate(load_cases(EXAMPLE), backends=["native"], metrics=["mrr", "recall@5"], out=out)
    return out


def dated_runs(native_run: Path, folder: Path, levels, noise: float = 0.03, seed: int = 1,
               names=None) -> list[Path]:
    """A copy of ``native_run`` per level, one day apart, every scored value replaced by
    ``level + N(0, noise)`` (clipped to 0..1) and, on cases tagged ``billing``, by ``level - 0.2``.
    Folder names are not in date order (``names``), so ordering must come from run.json."""
    rng = np.random.default_rng(seed)
    tagged = {c.id for c in load_cases(EXAMPLE) if "billing" in c.tags}
    paths = []
    for i, level in enumerate(levels):
        name = names[i] if names else f"run-{len(levels) - i:02d}"
        path = Path(shutil.copytree(native_run, folder / name))
        lines = []
        for line in (path / "scores.jsonl").read_text(encoding="utf-8").splitlines():
            s = json.loads(line)
            if s.get("value") is not None:
                base = level - (0.2 if s["case_id"] in tagged else 0.0)
                s["value"] = float(min(1.0, max(0.0, base + rng.normal(0, noise))))
            lines.append(json.dumps(s))
        (path / "scores.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
        manifest = json.loads((path / "run.json").read_text(encoding="utf-8"))
        when = START + dt.timedelta(days=i)
        manifest["started_at"] = when.isoformat()
        manifest["finished_at"] = (when + dt.timedelta(minutes=5)).isoformat()
        (path / "run.json").write_text(json.dumps(manifest, indent=2), encoding="utf-8")
        paths.append(path)
    return paths


# --------------------------------------------------------------------------------------------
# The statistics


def test_ols_slope_recovers_a_known_slope_within_its_interval():
    rng = np.random.default_rng(7)
    covered = 0
    for trial in range(200):
        y = 0.8 - 0.01 * np.arange(12) + rng.normal(0, 0.01, 12)
        fit = st.ols_slope(y)
        covered += fit["low"] <= -0.01 <= fit["high"]
    assert 0.91 <= covered / 200 <= 0.99  # a 95% interval
    fit = st.ols_slope([0.5, 0.5, 0.5])
    assert fit["slope"] == 0 and (fit["low"], fit["high"]) == (0.0, 0.0)
    fit = st.ols_slope([0.5, 0.7])
    assert fit["slope"] == pytest.approx(0.2) and np.isnan(fit["low"])
    assert np.isnan(st.ols_slope([0.5])["slope"])


def test_change_points_find_a_step_where_it_is():
    rng = np.random.default_rng(3)
    y = np.r_[np.full(7, 0.82), np.full(5, 0.64)] + rng.normal(0, 0.02, 12)
    found = st.change_points(y, seed=0)
    assert [c["index"] for c in found] == [7]
    assert found[0]["shift"] == pytest.approx(-0.18, abs=0.03) and found[0]["p_value"] < 0.01
    assert st.change_points(y, seed=0) == found  # seeded
    # two steps: binary segmentation finds both
    y2 = np.r_[np.full(6, 0.8), np.full(6, 0.6), np.full(6, 0.75)] + rng.normal(0, 0.015, 18)
    assert [c["index"] for c in st.change_points(y2, seed=0)] == [6, 12]
    # noise alone: no change point (on most seeds of the series; this one is fixed)
    assert st.change_points(rng.normal(0.7, 0.02, 12), seed=0) == []
    # a short series is tested exactly, over every ordering
    exact = st.change_points([0.9, 0.9, 0.9, 0.5, 0.5, 0.5], alpha=0.2)
    assert [c["index"] for c in exact] == [3] and exact[0]["p_value"] == pytest.approx(2 / 20)


# --------------------------------------------------------------------------------------------
# trend over real run folders


def test_trend_orders_by_start_time_and_recovers_the_slope(native_run, tmp_path):
    levels = 0.85 - 0.015 * np.arange(10)
    paths = dated_runs(native_run, tmp_path / "runs", levels)
    t = trend([tmp_path / "runs"], metrics=["mrr"], n_permutations=999)
    assert [str(r.path) for r in t.runs] == [str(p) for p in paths]  # run.json order, not names
    row = t.summary.iloc[0]
    assert (row["backend"], row["metric"], row["tag"], row["n_runs"]) == ("native", "mrr", ALL, 10)
    assert row["slope_low"] <= -0.015 <= row["slope_high"] < 0
    series = t.series[t.series["metric"] == "mrr"]
    assert list(series["position"]) == list(range(10))
    # the billing slice sits 0.2 lower with the same slope
    bt = trend(paths, metrics=["mrr"], by_tag=True, tags=["billing"], n_permutations=999)
    billing = bt.summary[bt.summary["tag"] == "billing"].iloc[0]
    assert billing["first"] == pytest.approx(levels[0] - 0.2, abs=0.03)
    assert billing["slope_low"] <= -0.015 <= billing["slope_high"]


@pytest.mark.slow
def test_trend_cli_finds_the_step(native_run, tmp_path):
    levels = [0.8] * 6 + [0.6] * 5
    paths = dated_runs(native_run, tmp_path / "runs", levels, noise=0.02)
    r = ragbridge_cli("trend", *paths[::-1], "--metric", "mrr", "--permutations", "999", "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert [x["path"] for x in data["runs"]] == [str(p) for p in paths]
    assert set(data) >= {"runs", "summary", "series", "changes"}
    changes = data["changes"]
    assert [c["position"] for c in changes] == [6] and changes[0]["run"] == str(paths[6])
    assert changes[0]["shift"] == pytest.approx(-0.2, abs=0.03)
    text = ragbridge_cli("trend", tmp_path / "runs", "--by-tag", "--permutations", "999",
                         env={"COLUMNS": "80"})
    assert text.returncode == 0, text.stderr
    assert "Change points" in text.stdout and f"from run #6 ({paths[6].name})" in text.stdout
    assert all(len(line) <= 80 for line in text.stdout.splitlines() if " " in line.strip())
    assert "billing" in text.stdout
    assert "t 95% interval" in text.stdout and "no interval" not in text.stdout


def test_two_runs_have_a_slope_and_say_they_have_no_interval(native_run, tmp_path):
    paths = dated_runs(native_run, tmp_path / "runs", [0.8, 0.6])
    text = ragbridge_cli("trend", *paths, "--metric", "mrr", "--permutations", "99", env={"COLUMNS": "200"})
    assert text.returncode == 0, text.stderr
    said = " ".join(text.stdout.split())
    assert "least-squares slope per run, no interval under 3 runs" in said, text.stdout
    assert "t 95% interval" not in text.stdout and "CI" not in text.stdout


@pytest.mark.slow
def test_trend_refuses_bad_input(native_run, tmp_path):
    one = dated_runs(native_run, tmp_path / "one", [0.7])
    for args, message in ((one, "two or more runs"), ([tmp_path / "nothere"], "does not exist"),
                          ([*one, *one], "two or more runs"), ([tmp_path / "one", "--metric", "nope"], None)):
        r = ragbridge_cli("trend", *args)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert r.stderr.startswith("error:") and (message is None or message in r.stderr), r.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    r = ragbridge_cli("trend", empty)
    assert r.returncode == 2 and "neither a run folder nor a folder of run folders" in r.stderr


@pytest.mark.slow
def test_the_report_plots_the_series(native_run, tmp_path):
    from ragbridge.report import render_html, render_markdown, report_data

    paths = dated_runs(native_run, tmp_path / "runs", [0.8] * 5 + [0.6] * 4, noise=0.01)
    assert report_data(paths[-1])["trend"] is None
    data = report_data(paths[4], history=[tmp_path / "runs"], n_resamples=0)
    assert [r["path"] for r in data["trend"]["runs"]] == [str(p) for p in paths[:5]]  # none after it
    data = report_data(paths[-1], history=[tmp_path / "runs"], n_resamples=0)
    assert len(data["trend"]["runs"]) == 9 and data["trend"]["changes"]
    html = render_html(paths[-1], data)
    assert html.count('<svg class="plot series"') == 2 and 'id="trend"' in html  # mrr and recall@5
    md = render_markdown(paths[-1], data)
    assert "## Trend over runs" in md and "before #5" in md
    r = ragbridge_cli("report", paths[-1], "--history", tmp_path / "runs", "--format", "json", "--out", "-",
                      "--resamples", "0")
    assert r.returncode == 0 and json.loads(r.stdout)["trend"]["summary"], r.stderr


# --------------------------------------------------------------------------------------------
# The gate rule on the slope


def test_gate_bounds_the_slope_of_the_last_runs(native_run, tmp_path):
    # steady for six runs, then falling 0.03 a run for the last five
    levels = [0.8] * 6 + [0.8 - 0.03 * k for k in range(1, 6)]
    paths = dated_runs(native_run, tmp_path / "runs", levels, noise=0.01)
    gates = tmp_path / "gates.toml"
    gates.write_text('[[gate]]\ncheck = "mrr slope >= -0.01"\nlast = 5\nbackend = "native"\n\n'
                     '[[gate]]\ncheck = "mrr slope >= -0.01"\nlast = 6\nbackend = "native"\n'
                     'significant = true\n\n'
                     '[[gate]]\ncheck = "mrr slope >= -0.01"\nname = "all runs"\n', encoding="utf-8")
    report = run_gates(paths[-1], gates, history=paths[:-1])
    by_rule = {r.rule.index: r for r in report.results}
    assert by_rule[1].verdict == "fail" and by_rule[1].figure == pytest.approx(-0.03, abs=0.005)
    assert by_rule[1].n == 5 and by_rule[1].ci_low <= -0.03 <= by_rule[1].ci_high
    assert by_rule[2].verdict == "fail" and "significant" in by_rule[2].detail
    assert by_rule[3].n == 11
    # earlier runs only: steady, passes
    assert run_gates(paths[5], gates, history=paths[:5]).passed
    r = ragbridge_cli("gate", paths[-1], "--config", gates, "--history", tmp_path / "runs")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "slope per run" in r.stdout and "FAIL" in r.stdout
    # history folders that hold the gated run and later runs: only the runs up to it count
    early = run_gates(paths[5], gates, history=[tmp_path / "runs"])
    assert early.passed and {r.n for r in early.results} == {5, 6}
    with pytest.raises(GateConfigError, match="--history"):
        run_gates(paths[-1], gates)
    bad = tmp_path / "bad.toml"
    bad.write_text('[[gate]]\ncheck = "mrr slope >= -0.01"\nlast = 1\n', encoding="utf-8")
    with pytest.raises(GateConfigError, match="last"):
        run_gates(paths[-1], bad, history=paths[:-1])
