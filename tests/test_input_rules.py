"""One rule for each odd input, whatever wrote it: an empty question, a tag holding a comma, pandas'
``nan`` inside a list cell, a ``context`` field beside labels. Inputs are made by the libraries and
pandas themselves (RAGAS's and DeepEval's objects, ``to_csv``, ``read_csv``, ``to_json``)."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

import ragbridge
from conftest import needs_backend, ragbridge_cli, warnings_in
from ragbridge.formats import DatasetError

ANSWER = "Refunds are possible within 14 days."
CHUNK = "Refunds can be requested within 14 days of the charge."


@needs_backend("ragas")
@needs_backend("deepeval")
def test_an_empty_question_is_read_alike_from_every_input(tmp_path, stub_judge):
    """The rule: an empty (or blank) question is legal input, read the same from every source (a
    blank table cell is an empty question, as "" is in JSON); the judged metrics skip such a case,
    the others score it, and every run warns of it."""
    from deepeval.dataset import Golden
    from ragas.dataset_schema import SingleTurnSample

    frame = pd.DataFrame([{"id": "a", "question": "", "answer": ANSWER}])
    frame.to_csv(tmp_path / "blank.csv", index=False)
    (tmp_path / "blank.jsonl").write_text(json.dumps({"id": "a", "question": "   ", "answer": ANSWER}) + "\n")
    inputs = {"RAGAS sample": [SingleTurnSample(user_input="", response=ANSWER)],
              "DeepEval golden": [Golden(input="", actual_output=ANSWER, name="a")],
              "dicts": [{"id": "a", "question": "", "answer": ANSWER}],
              "DataFrame": frame, "read_csv": pd.read_csv(tmp_path / "blank.csv"),
              "CSV": tmp_path / "blank.csv", "JSONL": tmp_path / "blank.jsonl"}
    for what, data in inputs.items():
        (case,) = ragbridge.load_cases(data)
        assert not case.question.strip() and case.answer == ANSWER, what

    res = ragbridge_cli("run", tmp_path / "blank.csv", "--out", tmp_path / "native", "-m", "must_contain",
                        "--no-progress")  # a run that reads no question: still told
    warned = warnings_in(res.stderr)
    assert any(w.startswith("warning: 1 case(s) have an empty question ('a')") for w in warned), res.stderr
    # a judged run of such cases computes nothing, and says the question is what is missing
    (tmp_path / "two.jsonl").write_text("".join(json.dumps(
        {"id": i, "question": q, "answer": ANSWER, "contexts": [CHUNK]}) + "\n" for i, q in (("a", ""),
                                                                                           ("b", "  "))))
    res = ragbridge_cli("run", tmp_path / "two.jsonl", "--out", tmp_path / "judged", "-b", "rubric",
                        "-m", "faithfulness", "--judge-model", "stub-judge", "--judge-base-url",
                        stub_judge.base_url, "--no-progress")
    said = " ".join(res.stderr.split())
    assert res.returncode == 5, res.stderr
    assert "rubric faithfulness: skipped: case has no question (2 case(s))" in said
    assert "give the cases their question (the least a judged metric needs)" in said
    assert "give the cases an answer" not in said


def test_tags_a_table_gives_as_text(tmp_path):
    """In a table a tag cell is text: a Python list's repr (what pandas writes) is the list, '|'
    separates tags, and a comma in a tag is warned of (the case is in no slice of either part). In
    JSON a tag text is an error whose advice shows the list."""
    cases = [{"id": "a", "question": "q1", "tags": "billing, real", "contexts": [{"id": "c1", "text": "t"}],
              "relevant": ["c1"]},
             {"id": "b", "question": "q2", "tags": "['billing', 'real']"},
             {"id": "c", "question": "q3", "tags": "billing|real"}]
    pd.DataFrame(cases).to_csv(tmp_path / "tags.csv", index=False)
    for data in (pd.DataFrame(cases), pd.read_csv(tmp_path / "tags.csv"), tmp_path / "tags.csv"):
        assert [c.tags for c in ragbridge.load_cases(data)] == [["billing, real"], ["billing", "real"],
                                                                 ["billing", "real"]]
    run = ragbridge.evaluate(pd.read_csv(tmp_path / "tags.csv"), metrics=["recall@5"])
    assert run.manifest.warnings == [
        "1 case(s) have a tag holding a comma ('billing, real' in 'a'): a tag is one name, so such a case is "
        "in no slice of 'billing' or 'real'; give tags as a list ([\"billing\", \"real\"]), or in a table "
        "cell separated by '|' (billing|real)"]
    for text in ("['billing', 'real']", "billing, real"):
        with pytest.raises(DatasetError) as bad:
            ragbridge.load_cases([{"id": "a", "question": "q", "tags": text}])
        assert f'got the text {text!r}: write it as a list, ["billing", "real"]' in str(bad.value)


def test_nan_in_a_list_cell_pandas_wrote_is_missing(tmp_path):
    """pandas writes a float NaN inside a list or dict cell as ``nan``: an optional value missing.
    An object pandas wrote by its repr (a ``Timestamp``) is named as the cause."""
    chunk = {"id": "c1", "text": "t", "score": math.nan}
    frame = pd.DataFrame([{"id": "a", "question": "q", "contexts": [chunk], "relevant": {"c1": 1},
                           "metadata": {"k": math.nan}}])
    frame.to_csv(tmp_path / "nan.csv")
    assert "'score': nan" in (tmp_path / "nan.csv").read_text()
    for data in (tmp_path / "nan.csv", pd.read_csv(tmp_path / "nan.csv")):
        (case,) = ragbridge.load_cases(data)
        assert case.contexts[0].score is None and case.metadata == {"k": None}
    frame["metadata"] = [{"when": pd.Timestamp("2024-01-01")}]
    frame.to_csv(tmp_path / "stamp.csv")
    for data in (tmp_path / "stamp.csv", pd.read_csv(tmp_path / "stamp.csv")):
        with pytest.raises(DatasetError, match=r"field 'metadata': cell holds Timestamp\('2024-01-01 "
                                               r"00:00:00'\), which is neither JSON nor a Python literal"):
            ragbridge.load_cases(data)


def test_a_context_field_beside_labels_is_asked_about(tmp_path):
    path = tmp_path / "golden.jsonl"
    pd.DataFrame([{"id": "a", "question": "q", "answer": "x", "context": ["refunds are 14 days"],
                   "relevant": ["refunds"]}]).to_json(path, orient="records", lines=True)
    res = ragbridge_cli("run", path, "--out", tmp_path / "run", "--no-progress")
    assert res.returncode == 2 and "unknown field(s): context (did you mean 'contexts'?)" in res.stderr
