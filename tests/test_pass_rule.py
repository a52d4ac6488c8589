"""One pass rule: every output of a run gives each case the same verdict, at the same pass mark.

A run whose scores sit exactly at their marks, a hair below and above, undefined (NaN, None) and
errored, under each kind of mark (a backend's own, recorded in run.json; a metric's default; the
``1/k`` of a precision; an answer check's 1), read back by ``Run.to_frame``, ``export-scores``,
``report --format json`` and ``gate``: one verdict per case everywhere."""

from __future__ import annotations

import json
import math
import types

import pytest

import ragbridge
from conftest import ragbridge_cli
from ragbridge.plugin import Backend, MetricSpec, Result, hookimpl
from ragbridge.testing import plugin_registered

#: (faithfulness: the backend's own mark 0.3, answer_relevance: the default mark 0.5) per case
VALUES = [(0.3, 0.5), (0.1 + 0.2, 0.49999999999999994), (0.29999999999999993, math.nan),
          (math.nan, None), ("error", 0.5000000000000001), (1.0, 0.0)]


class Marked(Backend):
    name = "marked"

    def metrics(self):
        return [MetricSpec("faithfulness", judge=False, pass_mark=0.3),
                MetricSpec("answer_relevance", judge=False)]

    async def score(self, metric, cases, ctx):
        for case in cases:
            v = VALUES[int(case.id[1:])][metric == "answer_relevance"]
            yield Result(case_id=case.id, error="ValueError: boom") if v == "error" else Result(
                case_id=case.id, value=v, reason=f"{v!r}")


def _plugin() -> types.ModuleType:
    plugin = types.ModuleType("ragbridge_marked")

    @hookimpl
    def ragbridge_register_backends(register):
        register(Marked())

    plugin.ragbridge_register_backends = ragbridge_register_backends
    return plugin


def _cases() -> list[dict]:
    """Six traced cases: the first relevant chunk at rank 1 or 2 (mrr 1 or 0.5 at the mark 0.5), one
    relevant chunk of three (precision@3 exactly 1/3, its mark), none labelled (undefined)."""
    out = []
    for i in range(6):
        chunks = [{"id": f"d{i}-{j}", "text": f"passage {j} about refunds"} for j in range(3)]
        relevant = {} if i == 5 else {chunks[i % 2]["id"]: 1}
        out.append({"id": f"c{i}", "question": "How long is the refund window?",
                    "answer": "14 days" if i % 3 else "30 days", "must_contain": ["14 days"],
                    "contexts": chunks, "relevant": relevant,
                    "metadata": {"trace": {"trace_id": f"{i:032x}", "span_id": f"{i:016x}"}}})
    return out


def test_every_output_gives_a_case_one_verdict_at_one_mark(tmp_path):
    run_dir = tmp_path / "run"
    with plugin_registered(_plugin()):
        ragbridge.evaluate(_cases(), backends=["marked", "native"],
                           metrics=["faithfulness", "answer_relevance", "mrr", "precision@3", "must_contain"],
                           out=run_dir, progress=False)
    run = ragbridge.load_run(run_dir)
    frame = run.to_frame()
    verdicts = {(r.backend, r.metric, r.case_id): (None if r.passed is None else bool(r.passed))
                for r in frame.itertuples()}
    marks = {(r.backend, r.metric): r.pass_mark for r in frame.itertuples()}

    # the marks: the backend's own, recorded; the defaults; 1/k; an answer check's 1
    assert run.manifest.pass_marks == {"marked": {"faithfulness": 0.3}}
    assert marks == {("marked", "faithfulness"): 0.3, ("marked", "answer_relevance"): 0.5,
                     ("native", "mrr"): 0.5, ("native", "precision@3"): 1 / 3,
                     ("native", "must_contain"): 1.0}
    # at the mark passes, a hair below fails, undefined (NaN, None) and errored have no verdict
    assert [verdicts["marked", "faithfulness", f"c{i}"] for i in range(6)] == [True, True, False, None, None,
                                                                                True]
    assert [verdicts["marked", "answer_relevance", f"c{i}"] for i in range(6)] == [True, False, None, None,
                                                                                    True, False]
    assert [verdicts["native", "mrr", f"c{i}"] for i in range(6)] == [True, True] * 2 + [True, None]
    assert [verdicts["native", "precision@3", f"c{i}"] for i in range(6)] == [True] * 5 + [None]
    assert [verdicts["native", "must_contain", f"c{i}"] for i in range(6)] == [False, True, True] * 2

    # export-scores: each span evaluation's label
    out = tmp_path / "evals.jsonl"
    res = ragbridge_cli("export-scores", run_dir, "--to", "jsonl", "--out", out)
    assert res.returncode == 0, res.stderr
    labels = {}
    for line in out.read_text().splitlines():
        row = json.loads(line)
        if row.get("document_position") is None:
            backend, _, metric = row["name"].partition(".")
            labels[backend, metric, row["case_id"]] = row["label"]
    assert labels == {k: {True: "pass", False: "fail"}.get(v, labels.get(k)) for k, v in verdicts.items()}
    assert {v for k, v in labels.items() if verdicts[k] is None} == {"undefined", "error"}

    # the report: each metric's pass mark, and how many cases pass and fail it
    report = tmp_path / "report.json"
    res = ragbridge_cli("report", run_dir, "--format", "json", "--out", report, "--resamples", "0")
    assert res.returncode == 0, res.stderr
    doc = json.loads(report.read_text())
    rows = {(r["backend"], r["metric"]): r for r in doc["summary"] if r.get("tag", "(all)") == "(all)"}
    for key, mark in marks.items():
        cases = [v for k, v in verdicts.items() if k[:2] == key]
        assert (rows[key]["threshold"], rows[key]["n_pass"], rows[key]["n_fail"]) == (
            mark, cases.count(True), cases.count(False)), key

    # gate: a share rule at each pass mark names the cases below it, no more and no fewer
    checks = {(b, m): f"share({m} >= {mark!r}) >= 1" for (b, m), mark in marks.items()}
    gates = tmp_path / "gates.toml"
    gates.write_text("".join(f'[[gate]]\ncheck = "{check}"\nbackend = "{b}"\nmin_n = 1\n\n'
                             for (b, _), check in checks.items()))
    res = ragbridge_cli("gate", run_dir, "--config", gates, "--json")
    assert res.returncode == 1, res.stderr
    results = {(r["backend"], r["check"]): r for r in json.loads(res.stdout)["results"]}
    for key, check in checks.items():
        failing = sorted(k[2] for k, v in verdicts.items() if k[:2] == key and v is False)
        assert sorted(c["case_id"] for c in results[key[0], check]["cases_behind"]) == failing, key
        assert results[key[0], check]["verdict"] == ("fail" if failing else "pass")


@pytest.mark.parametrize("value, threshold, op, shown", [
    (0.84962, 0.85, ">=", "0.8496"), (0.8504, 0.85, ">=", "0.8504"), (0.85, 0.85, ">=", "0.850"),
    (0.851, 0.85, ">=", "0.851"), (0.85004, 0.85, ">", "0.85004"), (0.0100004, 0.01, "<=", "0.0100004"),
    (0.5, 0.85, ">=", "0.500"), (-0.00004, 0.0, ">=", "-0.00004")])
def test_a_value_beside_its_cut_reads_as_it_compares(value, threshold, op, shown):
    from ragbridge.verdicts import COMPARE, against

    assert against(value, threshold, op) == shown
    assert COMPARE[op](float(shown), threshold) == COMPARE[op](value, threshold)


def test_a_case_just_below_its_pass_mark_reads_below_it(tmp_path):
    """A case's recall of 0.4996 fails a pass mark of 0.5: the report's reason and diagnose's both show
    it below the mark, not rounded onto it."""
    rows = [{"id": "q1", "question": "q", "contexts": [{"id": f"r{i}"} for i in range(2498)],
             "relevant": {f"r{i}": 1 for i in range(5000)}}]
    path = tmp_path / "cases.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    res = ragbridge_cli("run", path, "--out", tmp_path / "run", "-m", "recall@2500", "--no-progress")
    assert res.returncode == 0, res.stderr
    out = " ".join(ragbridge_cli("diagnose", tmp_path / "run").stdout.split())
    assert "recall@2500 (native) 0.4996 < 0.5" in out
    doc = json.loads(ragbridge_cli("report", tmp_path / "run", "--format", "json", "--out", "-",
                                   "--resamples", "0").stdout)
    assert "0.4996 < 0.5" in json.dumps(doc["cases_in_full"])
