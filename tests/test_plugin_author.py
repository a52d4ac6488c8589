"""A third party's plugin written from plugins/README.md (`lexeval_plugin`: a token-F1 metric of its
own computed without a judge, a judged metric, options with a pass mark and a tokenizer), registered
in this process as an installed one would be: what its author meets is what the guide says."""

from __future__ import annotations

import json

import pytest

import lexeval_plugin
import ragbridge
from ragbridge.plugin import Case
from ragbridge.testing import plugin_registered
from conftest import stub_judge_config

REFERENCE = "Refunds are accepted within 14 days of delivery."
ANSWERS = ["Refunds are accepted within 14 days of delivery.", "You get 14 days for refunds.",
           "Refunds are accepted within 30 days.", "No idea."]


def cases() -> list[Case]:
    return [Case(id=f"c{i}", question="How long is the refund window?", answer=a, reference=REFERENCE)
            for i, a in enumerate(ANSWERS)]


@pytest.fixture
def lexeval(tmp_path):
    """The plugin, installed (with its library) in a folder of the test's and registered."""
    plugin = lexeval_plugin.install(tmp_path / "site")
    try:
        with plugin_registered(plugin):
            yield plugin
    finally:
        lexeval_plugin.forget()


def test_the_backends_pass_mark_option_is_the_runs_pass_rule(lexeval, tmp_path):
    """The plugin's ``threshold``, declared ``option(..., pass_mark=True)`` and given as 0.9, is the
    pass mark of its metrics everywhere: run.json's pass_marks, to_frame's passed (which then agrees
    with the backend's own verdict, library_passed), the thresholds every report reads."""
    from ragbridge.analysis.thresholds import pass_marks

    run = ragbridge.evaluate(cases(), backends=["lexeval"], metrics=["lexeval_token_f1"],
                             options={"lexeval": {"threshold": 0.9}}, out=tmp_path / "run")
    assert json.loads((tmp_path / "run" / "run.json").read_text())["pass_marks"] == {
        "lexeval": {"lexeval_token_f1": 0.9}}
    frame = ragbridge.load_run(tmp_path / "run").to_frame()
    assert list(frame["pass_mark"]) == [0.9] * len(ANSWERS)
    values = dict(zip(frame["case_id"], frame["value"]))
    assert 0.5 <= values["c2"] < 0.9 and values["c0"] == 1.0  # a value the default 0.5 would pass
    assert list(frame["passed"]) == list(frame["library_passed"]) == [v >= 0.9 for v in frame["value"]]
    assert pass_marks(run).get("lexeval", "lexeval_token_f1") == 0.9
    # the default threshold is the default pass mark
    run = ragbridge.evaluate(cases(), backends=["lexeval"], metrics=["lexeval_token_f1"])
    assert run.manifest.pass_marks == {"lexeval": {"lexeval_token_f1": 0.5}}


def test_a_metric_computed_without_the_judge_needs_none(lexeval, stub_judge):
    """``JudgedMetric(judge=False)`` beside a judged metric: asked for alone it is scored, with a judge
    given or not; with the judged one, both are."""
    for judge in (None, stub_judge_config(stub_judge)):
        run = ragbridge.evaluate(cases(), backends=["lexeval"], metrics=["lexeval_token_f1"], judge=judge)
        assert [s.error for s in run.scores] == [None] * len(ANSWERS)
        assert {s.case_id: s.value for s in run.scores}["c0"] == 1.0
    run = ragbridge.evaluate(cases(), backends=["lexeval"], judge=stub_judge_config(stub_judge))
    assert sorted({s.metric for s in run.scores if s.error is None and s.value is not None}) == [
        "answer_correctness", "lexeval_token_f1"]
    assert sum(s.judge_calls for s in run.scores if s.metric == "answer_correctness") == len(ANSWERS)


def test_a_new_release_of_the_plugin_scores_again(tmp_path, stub_judge):
    """The plugin's distribution and version are in run.json and in the score cache's key: after its
    author changes its code and its version, the judged scores are made again, not reused."""
    judge = stub_judge_config(stub_judge, cache=tmp_path / "cache.sqlite")

    def run(version: str, mark: str, out: str):
        plugin = lexeval_plugin.install(tmp_path / f"site-{out}", version=version, mark=mark)
        try:
            with plugin_registered(plugin):
                return ragbridge.evaluate(cases(), backends=["lexeval"], metrics=["answer_correctness"],
                                          judge=judge, out=tmp_path / out)
        finally:
            lexeval_plugin.forget()

    first = run("0.1.1", "v1", "r1")
    assert json.loads((tmp_path / "r1" / "run.json").read_text())["plugins"] == {
        "lexeval": "ragbridge-lexeval==0.1.1"}
    assert all(s.reason.startswith("v1 ") and not s.cached for s in first.scores)
    again = run("0.1.1", "v1", "r2")
    assert all(s.cached for s in again.scores)  # the same release: the cache is used
    changed = run("0.1.2", "v2", "r3")
    assert changed.manifest.plugins == {"lexeval": "ragbridge-lexeval==0.1.2"}
    assert [s.cached for s in changed.scores] == [False] * len(ANSWERS)
    assert all(s.reason.startswith("v2 ") for s in changed.scores)
