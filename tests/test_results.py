"""A backend returns results; the run records each as a score with its own bookkeeping."""

import json
import types

import pytest
from pydantic import ValidationError

import ragbridge
from ragbridge.plugin import (Backend, JudgedBackend, JudgedMetric, MetricSpec, Result, ResultBlock, Score,
                              hookimpl)
from ragbridge.run.folder import score_json
from ragbridge.testing import plugin_registered

CASES = [{"id": "a", "question": "q", "answer": "x" * 50},
         {"id": "b", "question": "q", "answer": "boom"},
         {"id": "c", "question": "q", "answer": "yy"}]


def _plugin(backend: Backend) -> types.ModuleType:
    plugin = types.ModuleType(f"ragbridge_{backend.name}_results")

    @hookimpl
    def ragbridge_register_backends(register):
        register(backend)

    plugin.ragbridge_register_backends = ragbridge_register_backends
    return plugin


class Length(Backend):
    """A backend as the plugin guide writes one: a `Result` per case, a `ResultBlock` for many."""

    name = "length"

    def metrics(self):
        return [MetricSpec("answer_length", native_name="chars", requires=("answer",)),
                MetricSpec("answer_words", native_name="words", requires=("answer",))]

    async def score(self, metric, cases, ctx):
        if metric == "answer_words":
            yield ResultBlock(case_ids=[c.id for c in cases], native_metric="words",
                              values=[float(len(c.answer.split())) / 10 for c in cases],
                              reasons=[None] * len(cases), seconds=0.5)
            return
        for case in cases:
            if "boom" in case.answer:
                yield Result(case_id=case.id, error="ValueError: boom")
                continue
            yield Result(case_id=case.id, native_metric="chars", value=min(len(case.answer) / 100, 1.0),
                         native_value=len(case.answer), seconds=0.25)


def test_a_backend_returns_results_and_the_run_records_them_as_scores(tmp_path):
    with plugin_registered(_plugin(Length())):
        run = ragbridge.evaluate(CASES, backends=["length"], metrics=["answer_length", "answer_words"],
                                 out=tmp_path / "run", progress=False)
    scores = {(s.metric, s.case_id): s for s in run.scores}
    a = scores["answer_length", "a"]
    assert (a.backend, a.value, a.native_metric, a.native_value, a.seconds) == ("length", 0.5, "chars", 50,
                                                                                0.25)
    assert scores["answer_length", "b"].status == "error" and scores["answer_length", "b"].backend == "length"
    words = scores["answer_words", "c"]
    assert (words.backend, words.value, words.native_metric, words.seconds) == ("length", 0.1, "words", 0.5)
    # the scores file is as it was: one flat score a line, the run's fields beside the result's
    lines = [json.loads(line) for line in (tmp_path / "run" / "scores.jsonl").read_text().splitlines()]
    assert len(lines) == 6
    for line in lines:
        assert list(line) == ["case_id", "metric", "backend", "value", "native_metric", "native_value",
                              "passed", "reason", "error", "judge_calls", "prompt_tokens",
                              "completion_tokens", "seconds", "evidence"]
    reread = ragbridge.load_run(tmp_path / "run")
    assert sorted(map(score_json, reread.scores)) == sorted(map(score_json, run.scores))


def test_a_result_holds_only_what_a_backend_decides():
    for bookkeeping in ({"metric": "m"}, {"backend": "b"}, {"judge_calls": 3}, {"prompt_tokens": 1},
                        {"cost": 0.1}, {"cached": True}, {"not_run": True}, {"repeat": 1}):
        with pytest.raises(ValidationError):
            Result(case_id="c", value=0.5, **bookkeeping)
    assert Result(case_id="c", value=float("nan")).value is None  # NaN: could not be computed
    # every field of a result is a field of the score that records it, alike
    assert set(Result.model_fields) < set(Score.model_fields)
    for name, field in Result.model_fields.items():
        assert (field.annotation, field.default) == (Score.model_fields[name].annotation,
                                                     Score.model_fields[name].default), name


class Claims(Backend):
    """An older backend that yields whole Scores, filling in what is the run's to say."""

    name = "claims"

    def metrics(self):
        return [MetricSpec("answer_length")]

    async def score(self, metric, cases, ctx):
        for case in cases:
            yield Score(case_id=case.id, metric="other_metric", backend="another", value=0.5, repeat=3,
                        judge_calls=7, prompt_tokens=9, cost=1.0, cached=True, not_run=False)


def test_the_run_not_the_backend_says_what_a_score_answered_and_what_it_took(tmp_path):
    with plugin_registered(_plugin(Claims())):
        run = ragbridge.evaluate(CASES, backends=["claims"], metrics=["answer_length"],
                                 out=tmp_path / "run", progress=False)
    assert len(run.scores) == 3
    for s in run.scores:
        assert (s.backend, s.metric, s.value, s.repeat) == ("claims", "answer_length", 0.5, 0)
        assert (s.judge_calls, s.prompt_tokens, s.cost, s.cached) == (0, 0, None, False)
    assert run.manifest.counts["scores"] == 3 and "another" not in run.manifest.backends


def test_a_block_is_written_as_its_scores_would_be(tmp_path):
    with plugin_registered(_plugin(Length())):
        run = ragbridge.evaluate(CASES, backends=["length", "native"],
                                 metrics=["answer_words", "must_contain", "mrr"],
                                 out=tmp_path / "run", progress=False)
    lines = (tmp_path / "run" / "scores.jsonl").read_text().splitlines()
    # the same keys in the same order and the same values; a float's digits may be written either way
    # (a block writes 9.87e-05 as Python does, a Score 0.0000987 as pydantic does: one number)
    written = sorted((json.loads(line, object_pairs_hook=list) for line in lines), key=str)
    assert written == sorted((json.loads(score_json(s), object_pairs_hook=list) for s in run.scores), key=str)
    assert {s.backend for s in run.scores} == {"length", "native"}


def test_a_block_of_repeated_values_writes_each_one_as_given():
    """A block writes a value that many cases share once (recall, hit, precision): each line still
    holds its own case's value as Python writes it, a zero with its sign, an undefined one null."""
    import numpy as np

    from ragbridge.schema import ScoreBlock

    values = [0.0, -0.0, 0.5, 0.5, float("nan"), 1.0, 1.0, 1 / 3, 1 / 3, 1 / 3, 0.5, -0.0, 2.5e-7, 0.0]
    defined = [v for v in values if v == v]  # every value defined: with and without a negative zero
    for given in (np.array(values), values, values[::-1], defined, [v for v in defined if repr(v) != "-0.0"]):
        block = ScoreBlock(case_ids=[f"q{i}" for i in range(len(given))], values=given,
                           reasons=[None] * len(given), native_metric="recall@5", seconds=1e-05,
                           backend="native", metric="recall@5")
        lines = [json.loads(line) for line in block.json_lines().splitlines()]
        assert [repr(line["value"]) for line in lines] == [
            repr(None if v != v else float(v)) for v in list(given)]
        assert [line["native_value"] for line in lines] == [line["value"] for line in lines]


def test_a_blocks_reasons_are_written_as_a_score_writes_them():
    """A block's reasons, shared by many cases or not, are each `Score`'s reason, written as
    ``json.dumps`` writes it: quotes, backslashes, line breaks and other control characters, DEL,
    non-ASCII letters and emoji, an empty reason and none."""
    import random

    from ragbridge.schema import ScoreBlock

    rng = random.Random(7)
    pieces = ["a", "not in the top 5: ", "d1 (rank 6)", '"', "\\", "\n", "\t", "\x00", "\x1f", "\x7f", " ",
              "é", "中", "\U0001f600", "~", "/"]
    shared = "2 of the top 5 hold no relevant chunk"
    reasons = [None, "", shared, shared]
    reasons += ["".join(rng.choices(pieces, k=rng.randint(1, 6))) for _ in range(400)]
    reasons += [shared] * 50
    block = ScoreBlock(case_ids=[f"q{i}" for i in range(len(reasons))], values=[0.5] * len(reasons),
                       reasons=reasons, native_metric="recall@5", seconds=0.25, backend="native",
                       metric="recall@5")
    lines = block.json_lines().splitlines()
    scores = list(block.scores())
    assert len(lines) == len(scores) == len(reasons)
    for line, score, reason in zip(lines, scores, reasons):
        as_score = json.loads(score_json(score), object_pairs_hook=list)
        assert json.loads(line, object_pairs_hook=list) == as_score
        assert json.loads(line)["reason"] == reason
        assert (',"reason":' + json.dumps(reason) + ",") in line  # escapes as json.dumps writes them


class Careless(Backend):
    """A backend that gets the plugin API wrong as ``mistake`` says."""

    name = "careless"

    def __init__(self, mistake):
        self.mistake = mistake

    def metrics(self):
        return [MetricSpec("answer_length", requires=("answer",))]

    async def score(self, metric, cases, ctx):
        if self.mistake == "block":
            yield ResultBlock(case_ids=[c.id for c in cases], values=[0.5, 2.0, float("nan")],
                              reasons=[None] * len(cases))
            return
        for case in cases:
            if self.mistake == "range":
                yield Result(case_id=case.id, value=len(case.answer) / 25, native_value=len(case.answer))
            elif self.mistake == "twice":
                if case.id == "a":
                    yield Result(case_id="a", value=0.5)
                    yield Result(case_id="a", value=0.75)
                    yield Result(case_id="elsewhere", value=0.75)
            elif self.mistake == "nan":
                yield Result(case_id=case.id, value=float("nan"))


def test_a_value_outside_0_1_is_the_plugins_error_and_the_run_stays_readable(tmp_path):
    with plugin_registered(_plugin(Careless("range"))):
        run = ragbridge.evaluate(CASES, backends=["careless"], out=tmp_path / "run", progress=False)
    scores = {s.case_id: s for s in run.scores}
    assert scores["c"].value == 0.08 and scores["c"].error is None  # in range: recorded as it is
    s = scores["a"]
    assert s.value is None and s.status == "error" and s.native_value == 50
    assert s.error == ("PluginError: backend careless returned answer_length 2.0 for case a: a value must "
                       "be in 0..1 (or null); fix the plugin")
    assert scores["b"].value == 0.16
    reread = ragbridge.load_run(tmp_path / "run")  # the folder reads back: nothing out of range was written
    assert {s.case_id: s.error for s in reread.scores} == {s.case_id: s.error for s in run.scores}
    assert run.manifest.counts["errored"] == 1
    (row,) = run.manifest.counts["failures"]
    assert (row["backend"], row["cause"], row["what"]) == ("careless", "plugin", "plugin error")
    assert "fix the plugin" in row["fix"] and "judge" not in row["fix"].split(";")[0]


def test_a_block_with_a_value_outside_0_1_or_nan_without_reason(tmp_path):
    with plugin_registered(_plugin(Careless("block"))):
        run = ragbridge.evaluate(CASES, backends=["careless"], out=tmp_path / "run", progress=False)
    scores = {s.case_id: s for s in run.scores}
    assert scores["a"].value == 0.5
    assert scores["b"].status == "error" and "returned answer_length 2.0 for case b" in scores["b"].error
    assert scores["c"].status == "undefined"
    assert scores["c"].reason == "backend careless returned no value (null or NaN) and gave no reason"
    assert len(ragbridge.load_run(tmp_path / "run").scores) == 3


def test_a_result_twice_is_refused_and_a_case_not_yielded_is_an_error(tmp_path):
    with plugin_registered(_plugin(Careless("twice"))):
        with pytest.warns(RuntimeWarning) as warned:
            run = ragbridge.evaluate(CASES, backends=["careless"], out=tmp_path / "run", progress=False)
    assert [str(w.message) for w in warned] == [
        "backend careless yielded a second result for case 'a' of answer_length: refused (a backend yields "
        "one result per case); fix the plugin",
        "backend careless yielded a result for case 'elsewhere' of answer_length, which it was not given: "
        "refused (a backend yields one result per case); fix the plugin"]
    lines = (tmp_path / "run" / "scores.jsonl").read_text().splitlines()
    assert len(lines) == 3 and len(run.scores) == 3
    scores = {s.case_id: s for s in run.scores}
    assert scores["a"].value == 0.5  # the first result stands
    for cid in "bc":
        assert scores[cid].error == ("PluginError: backend careless yielded no result for this case; "
                                     "fix the plugin")
    counts = run.manifest.counts
    assert (counts["scores"], counts["scored"], counts["errored"]) == (3, 1, 2)


def test_nan_without_reason_names_the_backend_not_the_cases(tmp_path):
    from ragbridge.run.unscored import nothing_computed, unscored_lines

    with plugin_registered(_plugin(Careless("nan"))):
        run = ragbridge.evaluate(CASES, backends=["careless"], out=tmp_path / "run", progress=False)
        info = nothing_computed(run)
    why = "backend careless returned no value (null or NaN) and gave no reason"
    assert {s.reason for s in run.scores} == {why}
    text = "\n".join(unscored_lines(info))
    assert "lack what the metrics need" not in text and "give the cases" not in text
    assert "their backends gave no reason" in text and "careless answer_length: 3 case(s)" in text


class Fields(JudgedBackend):
    """A judged backend whose judge_case returns ``mistake``'s fields (no judge: judge=False)."""

    name = "fields"
    registry = {"answer_length": JudgedMetric(name="answer_length", native_name="chars", requires=("answer",),
                                              judge=False)}

    def __init__(self, mistake):
        self.mistake = mistake

    async def judge_case(self, metric, case, ctx, prepared):
        value = len(case.answer) / 100
        if self.mistake == "result":
            return Result(case_id="ignored", value=value, reason="counted")
        return {"value": value, self.mistake: 0}


def test_a_field_a_backend_may_not_set_is_the_plugins_error_naming_it(tmp_path):
    for field in ("judge_calls", "cached"):
        with plugin_registered(_plugin(Fields(field))):
            run = ragbridge.evaluate(CASES, backends=["fields"], out=tmp_path / field, progress=False)
        for s in run.scores:
            assert s.status == "error" and s.native_metric == "chars"
            assert s.error.startswith(f"PluginError: backend fields set '{field}' in what judge_case "
                                      f"returned for case {s.case_id}: a backend returns only value")
        (row,) = run.manifest.counts["failures"]
        assert (row["cause"], row["scores"]) == ("plugin", 3)
        assert row["fix"].startswith("fix the plugin of the fields backend")


def test_judge_case_may_return_a_result(tmp_path):
    with plugin_registered(_plugin(Fields("result"))):
        run = ragbridge.evaluate(CASES, backends=["fields"], out=tmp_path / "run", progress=False)
    scores = {s.case_id: s for s in run.scores}
    assert (scores["a"].value, scores["a"].reason, scores["a"].native_metric) == (0.5, "counted", "chars")
    assert {s.status for s in run.scores} == {"scored"}
