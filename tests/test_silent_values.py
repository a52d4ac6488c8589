"""No silent value: a judge fault or an out-of-range judge reply is an error, never a number.

Each test runs the real command line against the stub judge on 127.0.0.1 (its fault injection, or a
responder that answers out of range) and checks the exit code, the message and what the run folder
holds.
"""

import json
from pathlib import Path

import pytest

from conftest import ragbridge_cli
from ragbridge import load_run
from ragbridge.testing import StubJudge


def _golden(tmp_path: Path, example_path: Path, n: int) -> Path:
    golden = tmp_path / "golden.jsonl"
    golden.write_text("".join(example_path.read_text().splitlines(keepends=True)[:n]))
    return golden


def _no_retries(tmp_path: Path) -> Path:
    config = tmp_path / "ragbridge.toml"
    config.write_text("[judge]\nmax_retries = 0\n")
    return config


def test_a_case_with_an_errored_repeat_is_errored_everywhere(tmp_path, example_path):
    """--repeats 3 with judge faults (no retries): the cases hit are errored in the summary, the
    run exits 3 saying so, and a gate `error_rate <= 0.0` fails; never a mean of the surviving
    repeats."""
    golden = _golden(tmp_path, example_path, 4)
    out = tmp_path / "run"
    with StubJudge() as stub:
        stub.inject(None, "500", None, None, None, None, None, "500")
        res = ragbridge_cli("run", golden, "--out", out, "--backend", "rubric",
                            "--metric", "answer_relevance",
                            "--repeats", "3", "--judge-model", "m", "--judge-base-url", stub.base_url,
                            "--config", _no_retries(tmp_path), "--max-concurrency", "1", "--no-progress",
                            "--cache-mode", "off", "--json")
    assert res.returncode == 3, res.stderr
    recorded = [json.loads(x) for x in (out / "scores.jsonl").read_text().splitlines()]
    assert len(recorded) == 12
    errored = [s for s in recorded if s["error"]]
    hit = {s["case_id"] for s in errored}
    assert 1 <= len(hit) <= len(errored) <= 2
    doc = json.loads(res.stdout)
    assert doc["counts"]["errored"] == len(errored)
    row = doc["summary"][0]
    assert (row["n_errored"], row["n_scored"], row["n"]) == (len(hit), 4 - len(hit), 4)
    assert f"{len(errored)} of 12 score(s) errored ({len(hit)} of 4 case score(s)" in res.stderr
    # read back: the errored case has no value and no pass, its repeats' values stay visible
    run = load_run(out)
    for s in run.scores:
        if s.case_id in hit:
            assert s.status == "error" and s.value is None and s.passed is None, s
            assert "repeat(s) errored" in s.error and s.repeats.values.count(None) >= 1
        else:
            assert s.status == "scored"
    gates = tmp_path / "gates.toml"
    gates.write_text('[[gate]]\ncheck = "error_rate <= 0.0"\n')
    gate = ragbridge_cli("gate", out, "--config", gates, "--json")
    assert gate.returncode == 1, gate.stdout + gate.stderr
    figure = json.loads(gate.stdout)
    assert json.dumps(figure).count('"fail"') >= 1


class _OutOfRange(StubJudge):
    """The stub judge, with one verdict field of every reply set to one value (an out-of-range judge)."""

    def __init__(self, field: str, value, **kw):
        super().__init__(**kw)
        self.field, self.value = field, value

    def chat_completion(self, body, **kw):
        payload = super().chat_completion(body, **kw)
        message = payload["choices"][0]["message"]
        try:
            reply = json.loads(message["content"])
        except (TypeError, ValueError):
            return payload
        stack = [reply]
        while stack:
            item = stack.pop()
            if isinstance(item, dict):
                for key in item:
                    if key == self.field:
                        item[key] = self.value
                    else:
                        stack.append(item[key])
            elif isinstance(item, list):
                stack.extend(item)
        for choice in payload["choices"]:
            choice["message"]["content"] = json.dumps(reply)
        return payload


@pytest.mark.parametrize("metric, field, value", [
    ("answer_relevance", "noncommittal", -1),
    pytest.param("answer_relevance", "noncommittal", 2, marks=pytest.mark.slow),
    ("answer_relevance", "noncommittal", 7),
    ("faithfulness", "verdict", 2),
    ("faithfulness", "verdict", -1),
    pytest.param("context_recall", "attributed", 3, marks=pytest.mark.slow),
    pytest.param("context_relevance", "rating", 5, marks=pytest.mark.slow),
])
@pytest.mark.slow
def test_ragas_out_of_range_verdicts_are_errors(tmp_path, example_path, metric, field, value):
    """RAGAS takes any integer where its reply model states 0/1 (0/1/2 for ratings): the backend
    checks each reply against that and makes the score an error with what the judge said."""
    golden = _golden(tmp_path, example_path, 2)
    out = tmp_path / "run"
    with _OutOfRange(field, value) as stub:
        res = ragbridge_cli("run", golden, "--out", out, "--backend", "ragas", "--metric", metric,
                            "--judge-model", "m", "--judge-base-url", stub.base_url, "--no-progress",
                            "--cache-path", tmp_path / "cache.sqlite")
    assert res.returncode == 3, res.stdout + res.stderr
    scores = [json.loads(x) for x in (out / "scores.jsonl").read_text().splitlines()]
    assert len(scores) == 2
    for s in scores:
        assert s["value"] is None and f"the judge replied {field} = {value}" in s["error"], s
    assert "2 of 2 score(s) errored" in res.stderr


def test_the_reply_ranges_are_ragas_own():
    """Every integer field of every reply model the RAGAS backend's metrics ask the judge for has its
    allowed values in the table, and they are the numbers RAGAS' own field description states (so a
    RAGAS release that adds or changes a verdict field fails here, not silently)."""
    import importlib
    import inspect
    import re

    from pydantic import BaseModel
    from ragbridge_ragas.metrics import METRICS, REPLY_VALUES

    seen = {}
    for spec in METRICS.values():
        cls = getattr(importlib.import_module("ragas.metrics.collections"), spec.cls)
        util = importlib.import_module(cls.__module__.rsplit(".", 1)[0] + ".util")
        for name, model in inspect.getmembers(util, inspect.isclass):
            if not issubclass(model, BaseModel) or not name.endswith(("Output", "Answer", "Classification")):
                continue
            for fname, finfo in model.model_fields.items():
                if finfo.annotation is int:
                    digits = re.findall(r"\d", finfo.description)
                    seen[(name, fname)] = tuple(sorted({int(d) for d in digits}))
    assert seen == REPLY_VALUES
