"""The pytest plugin, exercised the way a user runs it: pytest in a subprocess on a small test suite."""

from __future__ import annotations

import importlib.metadata
import json

import pytest

from conftest import EXAMPLE

pytest_plugins = ["pytester"]

# Keep the subprocesses lean: other installed pytest plugins that import heavy libraries stay off.
QUIET = ("-p", "no:deepeval", "-p", "no:langsmith_plugin", "-p", "no:cacheprovider")

SUITE = '''
import pytest

def test_retrieval(ragbridge_golden, ragbridge_evaluate, ragbridge_gate):
    run = ragbridge_evaluate(ragbridge_golden, backends=["native"], metrics=["recall@5", "ndcg@5"])
    report = ragbridge_gate(run, ["recall@5 >= 0.85", "ndcg@5 >= 0.8"])
    assert report.passed and len(report.results) == 2

def test_too_strict(ragbridge_golden, ragbridge_evaluate, ragbridge_gate):
    run = ragbridge_evaluate(ragbridge_golden, backends=["native"], metrics=["recall@5", "abstention"])
    ragbridge_gate(run, ["recall@5 >= 0.99", {"check": "abstention >= 0.9", "tags": ["unanswerable"]}])

@pytest.mark.judge
def test_marked_judge():
    pass

def test_uses_the_judge(ragbridge_judge):
    pass
'''


@pytest.mark.slow
def test_dash_p_ragbridge_fixtures_gates_and_judge_marker(pytester):
    pytester.makepyfile(test_rag=SUITE)
    res = pytester.runpytest_subprocess(
        "-p", "ragbridge", *QUIET, "--strict-markers", "-rs", f"--ragbridge-golden={EXAMPLE}"
    )
    res.assert_outcomes(passed=2, failed=1, skipped=1)
    out = res.stdout.str()
    # the failing gate shows every rule with its figure, and the cases behind each failure
    assert "GateFailed: gate failed: 2 of 2 rule(s) failed" in out
    assert "FAIL  native: recall@5 >= 0.99" in out and "FAIL  native: abstention >= 0.9 [unanswerable]" in out
    assert "unanswerable-carbon-neutral: 0.000" in out
    assert "no judge configured" in out
    # pull requests: the judge tests (marked, or using the judge fixture) are deselected
    res = pytester.runpytest_subprocess(
        "-p", "ragbridge.pytest_plugin", *QUIET, "--strict-markers", "-m", "not judge",
        f"--ragbridge-golden={EXAMPLE}",
    )
    res.assert_outcomes(passed=1, failed=1, deselected=2)


@pytest.mark.slow
def test_conftest_form_ini_options_kept_runs_and_baseline(pytester):
    pytester.makeconftest('pytest_plugins = ["ragbridge.pytest_plugin"]\n')
    pytester.makeini(
        f"""
[pytest]
ragbridge_golden = {EXAMPLE}
ragbridge_gates = gates.toml
"""
    )
    pytester.path.joinpath("gates.toml").write_text(
        '[defaults]\nbackend = "native"\n\n[[gate]]\ncheck = "mrr >= 0.8"\n\n'
        '[[gate]]\ncheck = "mrr drop <= 0.02"\n'
    )
    pytester.makepyfile(
        test_kept="""
import json
from pathlib import Path

def test_baseline(ragbridge_golden, ragbridge_evaluate):
    ragbridge_evaluate(ragbridge_golden, backends=["native"], metrics=["mrr"], name="main")

def test_against_baseline(ragbridge_golden, ragbridge_evaluate, ragbridge_gate, ragbridge_baseline):
    assert ragbridge_baseline is not None
    worse = [c.model_copy(update={"contexts": c.contexts[::-1]}) for c in ragbridge_golden]
    run = ragbridge_evaluate(worse, backends=["native"], metrics=["mrr"], name="reversed")
    ragbridge_gate(run)   # the gates file from the ini options, the baseline from --ragbridge-baseline

def test_judge_config(ragbridge_judge):
    assert ragbridge_judge.model == "judge-m" and ragbridge_judge.cache_mode == "off"
"""
    )
    # first: record the baseline run into the kept runs folder
    res = pytester.runpytest_subprocess(*QUIET, "--ragbridge-runs=runs", "-k",
                                        "test_baseline and not against")
    res.assert_outcomes(passed=1, deselected=2)
    baseline = next(pytester.path.joinpath("runs").glob("*test_baseline*/main"))
    assert json.loads((baseline / "run.json").read_text())["status"] == "complete"
    res = pytester.runpytest_subprocess(
        *QUIET, "--ragbridge-runs=runs", f"--ragbridge-baseline={baseline}", "-k", "not test_baseline",
        "--ragbridge-judge-model=judge-m", "--ragbridge-judge-base-url=http://127.0.0.1:9/v1",
        "--ragbridge-cache-mode=off",
    )
    res.assert_outcomes(passed=1, failed=1, deselected=1)
    out = res.stdout.str()
    assert "FAIL  native: mrr drop <= 0.02" in out and "cases behind" in out
    # the failing test's run folder is kept, with its per-item scores
    kept = next(pytester.path.joinpath("runs").glob("*test_against_baseline*/reversed"))
    assert (kept / "scores.jsonl").stat().st_size > 0


def test_never_loads_by_itself(pytester):
    names = {ep.name for ep in importlib.metadata.entry_points(group="pytest11")}
    values = {ep.value for ep in importlib.metadata.entry_points(group="pytest11")}
    assert "ragbridge" not in names and not any(v.startswith("ragbridge") for v in values)
    pytester.makepyfile(test_plain="def test_x(ragbridge_golden):\n    pass\n")
    res = pytester.runpytest_subprocess(*QUIET)
    res.assert_outcomes(errors=1)
    assert "fixture 'ragbridge_golden' not found" in res.stdout.str()
