"""Labelled cases that give no retrieved chunks: a ground-truth set (TruLens's ``get_ground_truth``,
RAGAS samples with ``reference_context_ids`` and no retrieval) holds the labels but not what a
retriever returned. There is no ranking to measure, so their ranking metrics are undefined (not 0),
and the run says so with the count wherever its numbers are read. A retriever that returned nothing
(``contexts: []``, RAGAS's ``retrieved_context_ids=[]``) is a real 0, as RAGAS's own ID-based recall
scores it."""

from __future__ import annotations

import json

import pytest

import ragbridge
from conftest import EXAMPLE, needs_backend, ragbridge_cli, warnings_in

HEAD = "case(s) with relevance labels give no retrieved chunks (no 'contexts' field: "
UNDEFINED = "their ranking metrics are undefined, not 0"


@needs_backend("trulens")
def test_a_trulens_ground_truth_frame_is_undefined_on_ranking_metrics_and_warned(tmp_path):
    import pandas as pd
    from trulens.core.session import TruSession

    golden = ragbridge.load_cases(EXAMPLE)
    labelled = [c for c in golden if c.relevant and c.contexts][:6]
    rows = [{"query": c.question, "query_id": c.id, "expected_response": c.reference,
             "expected_chunks": [{"text": x.text, "expect_score": 1} for x in c.contexts[:1]], "meta": {}}
            for c in labelled]
    session = TruSession(database_url=f"sqlite:///{tmp_path / 'tl.sqlite'}")
    session.add_ground_truth_to_dataset("golden", pd.DataFrame(rows), {})
    truth = session.get_ground_truth("golden")  # query, query_id, expected_chunks, meta: no contexts
    assert "contexts" not in truth.columns

    run = ragbridge.evaluate(truth, metrics=["recall@5", "mrr", "ndcg@5"], out=tmp_path / "run")
    frame = run.to_frame()
    assert frame["value"].isna().all() and len(frame) == 18, frame
    assert set(frame["reason"]) == {"no retrieved chunks given (the case has no 'contexts')"}
    (warning,) = run.manifest.warnings
    assert warning.startswith(f"6 of 6 {HEAD}") and UNDEFINED in warning
    assert json.loads((tmp_path / "run" / "run.json").read_text())["warnings"] == [warning]
    assert "warning: 6 of 6 " + HEAD in run._repr_html_().replace("&#x27;", "'")

    # the retriever's output added (the frame a TruLens team keeps beside it): scored; a case whose
    # retriever returned nothing scores 0, and is no longer warned of
    truth["contexts"] = [[x.text for x in c.contexts] for c in labelled]
    truth.at[0, "contexts"] = []
    run = ragbridge.evaluate(truth, metrics=["recall@5"])
    values = run.to_frame().set_index("case_id")["value"]
    assert values[labelled[0].id] == 0.0 and values.notna().all() and values.iloc[1:].gt(0).all(), values
    assert not any(HEAD in w for w in run.manifest.warnings), run.manifest.warnings


@needs_backend("ragas")
def test_ragas_samples_without_retrieval_are_warned_in_the_terminal_json_and_report(tmp_path):
    """RAGAS samples as a team keeps its references: ``reference_context_ids`` on every sample, the
    retrieved ids on one of them, an empty retrieval on another (written by RAGAS's ``to_jsonl``).
    RAGAS's own IDBasedContextRecall refuses a sample without retrieved ids and scores an empty list
    0.0; ragbridge leaves the first undefined and scores the second 0."""
    import warnings

    from ragas.dataset_schema import EvaluationDataset, SingleTurnSample
    from ragas.metrics import IDBasedContextRecall

    samples = [SingleTurnSample(user_input="How long is the refund window?", reference_context_ids=["r1"]),
               SingleTurnSample(user_input="Do you ship to Switzerland?", reference_context_ids=["s1"]),
               SingleTurnSample(user_input="Can I pay by invoice?", retrieved_context_ids=[],
                                reference_context_ids=["i1"]),
               SingleTurnSample(user_input="Is there 2FA?", retrieved_context_ids=["a1", "a2"],
                                reference_context_ids=["a2"])]
    path = tmp_path / "ragas.jsonl"
    EvaluationDataset(samples=samples).to_jsonl(str(path))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = IDBasedContextRecall()
        assert theirs.single_turn_score(samples[2]) == 0.0 and theirs.single_turn_score(samples[3]) == 1.0
        with pytest.raises(AssertionError, match="retrieved_context_ids is empty"):
            theirs.single_turn_score(samples[0])

    out = tmp_path / "run"
    res = ragbridge_cli("run", path, "--out", out, "-m", "recall@5", "-m", "mrr", "--no-progress", "--json")
    assert res.returncode == 0, res.stderr
    (warned,) = warnings_in(res.stderr)
    assert warned.startswith(f"warning: 2 of 4 {HEAD}'q-") and UNDEFINED in warned, res.stderr
    doc = json.loads(res.stdout)
    assert doc["warnings"] == [warned.removeprefix("warning: ")]
    recall = {r["metric"]: r for r in doc["summary"]}["recall@5"]
    assert (recall["mean"], recall["n_scored"], recall["n_undefined"]) == (0.5, 2, 2), recall
    assert json.loads((out / "run.json").read_text())["warnings"] == doc["warnings"]
    res = ragbridge_cli("report", out, "--format", "md", "--out", tmp_path / "report.md")
    assert res.returncode == 0, res.stderr
    assert f"warning: 2 of 4 {HEAD}" in (tmp_path / "report.md").read_text(encoding="utf-8")


def test_no_contexts_and_empty_contexts_survive_the_run_folder_and_the_canonical_files(tmp_path):
    """The two are told apart in every canonical file (an empty list; no field or an empty cell) and in
    the run folder's cases.jsonl, so a rescore of the folder scores them as the run did."""
    cases = ragbridge.load_cases([{"id": "none", "question": "q1", "relevant": ["a"]},
                                  {"id": "empty", "question": "q2", "contexts": [], "relevant": ["a"]},
                                  {"id": "null", "question": "q3", "contexts": None, "relevant": ["a"]}])
    assert [c.contexts_given for c in cases] == [False, True, False]
    for name in ("cases.jsonl", "cases.csv", "cases.parquet"):
        ragbridge.write_cases(cases, tmp_path / name)
        assert [c.contexts_given for c in ragbridge.load_cases(tmp_path / name)] == [False, True, False], name
    res = ragbridge_cli("run", tmp_path / "cases.csv", "--out", tmp_path / "run", "-m", "recall@5",
                        "--no-progress")
    assert res.returncode == 0, res.stderr
    res = ragbridge_cli("rescore", tmp_path / "run", "-m", "mrr", "--no-progress")
    assert res.returncode == 0, res.stderr
    run = ragbridge.load_run(tmp_path / "run")
    values = {(s.case_id, s.metric): s.value for s in run.scores}
    assert values == {("none", "recall@5"): None, ("empty", "recall@5"): 0.0, ("null", "recall@5"): None,
                      ("none", "mrr"): None, ("empty", "mrr"): 0.0, ("null", "mrr"): None}
