"""The data as the user holds it: `load_cases` and `evaluate` take lists of dicts, DataFrames,
``datasets.Dataset`` and each library's own objects, and `to_library` gives a library's object back.

Every library's objects are built with that library's own API, and the cases ragbridge reads from
them are compared with the cases it reads from the file the library itself writes of the same data
(RAGAS's ``to_jsonl`` / ``to_csv``... , DeepEval's ``save_as``, TruLens's own database through
``TruSession``): the two ways in must agree.
"""

from __future__ import annotations

import json
import subprocess
import sys
import warnings

import pandas as pd
import pytest

import ragbridge
from ragbridge import DatasetError

from conftest import EXAMPLE, ROOT, needs_backend

RAGAS_FILE = ROOT / "examples" / "support-bot" / "ragas-dataset.jsonl"


def _rows(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


# --------------------------------------------------------------------------------------------
# Plain Python data


def test_a_list_of_dicts_a_dataframe_and_a_dataset_read_as_the_file(tmp_path):
    rows = _rows(EXAMPLE)
    from_file = ragbridge.load_cases(EXAMPLE)
    assert ragbridge.load_cases(rows) == from_file
    assert ragbridge.load_cases(pd.DataFrame(rows)) == from_file
    import datasets

    folder = tmp_path / "hf"
    ragbridge.write_cases(from_file, folder, format="hf")
    assert ragbridge.load_cases(datasets.load_from_disk(str(folder))) == from_file


def test_bad_rows_name_the_index_and_the_field():
    rows = _rows(EXAMPLE)[:5]
    rows[3] = {**rows[3], "relevant": {"refunds.md#window": "high"}}
    with pytest.raises(DatasetError) as exc:
        ragbridge.load_cases(rows)
    assert "(index 3)" in str(exc.value) and "relevant" in str(exc.value)
    frame = pd.DataFrame([{"question": "q1", "answer": "a"}, {"question": 3, "answer": "a number"}])
    with pytest.raises(DatasetError, match=r"DataFrame \(index 1\): field 'question': must be a text"):
        ragbridge.load_cases(frame)
    with pytest.raises(DatasetError, match="duplicate case id 'a' .first at index 0"):
        ragbridge.load_cases([{"id": "a", "question": "q"}, {"id": "a", "question": "q2"}])
    with pytest.raises(DatasetError, match="holds no cases"):
        ragbridge.load_cases([])
    with pytest.raises(DatasetError, match="cannot read a builtins.set"):
        ragbridge.load_cases({1, 2})


def test_evaluate_takes_a_dataframe_and_a_path(tmp_path):
    frame = pd.DataFrame(_rows(EXAMPLE))
    run = ragbridge.evaluate(frame, metrics=["recall@5"], out=tmp_path / "r")
    by_path = ragbridge.evaluate(str(EXAMPLE), metrics=["recall@5"])
    assert [s.value for s in run.scores] == [s.value for s in by_path.scores]
    assert run.manifest.dataset["fingerprint"] == by_path.manifest.dataset["fingerprint"]
    assert by_path.manifest.dataset["path"] == str(EXAMPLE)


# --------------------------------------------------------------------------------------------
# RAGAS


def _ragas_dataset(rows):
    from ragas.dataset_schema import EvaluationDataset, SingleTurnSample

    return EvaluationDataset(samples=[SingleTurnSample(**r) for r in rows])


@needs_backend("ragas")
def test_ragas_objects_read_as_the_files_ragas_writes(tmp_path):
    dataset = _ragas_dataset(_rows(RAGAS_FILE))
    dataset.to_jsonl(str(tmp_path / "ds.jsonl"))
    from_file = ragbridge.load_cases(tmp_path / "ds.jsonl")
    assert len(from_file) == 20 and from_file[0].relevant  # the ids and labels came through
    assert ragbridge.load_cases(dataset) == from_file
    assert ragbridge.load_cases(dataset.samples) == from_file
    assert ragbridge.load_cases(dataset.to_list()) == from_file
    assert ragbridge.load_cases(dataset.to_pandas()) == from_file
    assert ragbridge.load_cases(dataset.to_hf_dataset()) == from_file
    dataset.to_hf_dataset().save_to_disk(str(tmp_path / "hf"))
    assert ragbridge.load_cases(tmp_path / "hf", format="ragas") == from_file


@needs_backend("ragas")
def test_legacy_ragas_columns_and_unlabelled_samples(tmp_path):
    legacy = [{"question": r["user_input"], "contexts": r["retrieved_contexts"], "answer": r["response"],
               "ground_truth": r["reference"]} for r in _rows(RAGAS_FILE)]
    (tmp_path / "legacy.jsonl").write_text("".join(json.dumps(r) + "\n" for r in legacy))
    assert ragbridge.load_cases(pd.DataFrame(legacy)) == ragbridge.load_cases(tmp_path / "legacy.jsonl")
    plain = _ragas_dataset([{k: r[k] for k in ("user_input", "retrieved_contexts", "response")}
                            for r in _rows(RAGAS_FILE)])
    plain.to_jsonl(str(tmp_path / "plain.jsonl"))
    assert ragbridge.load_cases(plain) == ragbridge.load_cases(tmp_path / "plain.jsonl")


@needs_backend("ragas")
def test_to_library_ragas_gives_an_evaluation_dataset_and_names_what_it_drops():
    from ragas.dataset_schema import EvaluationDataset

    cases = ragbridge.load_cases(EXAMPLE)
    with pytest.warns(UserWarning, match="ragas dataset cannot hold: .*must_contain.*tags"):
        dataset = ragbridge.to_library(cases, "ragas")
    assert isinstance(dataset, EvaluationDataset) and len(dataset.samples) == len(cases)
    back = ragbridge.load_cases(dataset)
    assert [c.question for c in back] == [c.question for c in cases]
    assert [c.answer for c in back] == [c.answer for c in cases]
    assert [[ch.text for ch in c.contexts] for c in back] == [[ch.text for ch in c.contexts] for c in cases]
    # RAGAS's own ID-based recall on the object reads what native recall reads
    sample = dataset.samples[0]
    assert set(sample.reference_context_ids) == {k for k, g in cases[0].relevant.items() if g >= 1}


@needs_backend("ragas")
def test_multi_turn_ragas_samples_are_refused_by_index():
    from ragas.dataset_schema import MultiTurnSample, SingleTurnSample
    from ragas.messages import HumanMessage

    samples = [SingleTurnSample(user_input="q"), MultiTurnSample(user_input=[HumanMessage(content="hi")])]
    with pytest.raises(DatasetError, match=r"index 1.*MultiTurnSample"):
        ragbridge.load_cases(samples)


# --------------------------------------------------------------------------------------------
# DeepEval


def _goldens(cases):
    from deepeval.dataset import Golden

    return [Golden(input=c.question, actual_output=c.answer, expected_output=c.reference,
                   retrieval_context=[ch.text for ch in c.contexts] or None,
                   context=list(c.reference_contexts) or None, name=c.id,
                   additional_metadata={"tags": c.tags}) for c in cases]


@needs_backend("deepeval")
@pytest.mark.parametrize("file_type", ["json", "jsonl"])
def test_deepeval_goldens_read_as_the_files_deepeval_saves(tmp_path, file_type):
    from deepeval.dataset import EvaluationDataset

    dataset = EvaluationDataset(goldens=_goldens(ragbridge.load_cases(EXAMPLE)))
    path = dataset.save_as(file_type, str(tmp_path), file_name="goldens")
    from_file = ragbridge.load_cases(path)
    assert len(from_file) == 53 and from_file[0].id == "billing-refund-window"
    assert ragbridge.load_cases(dataset) == from_file
    assert ragbridge.load_cases(dataset.goldens) == from_file


@needs_backend("deepeval")
def test_deepeval_test_cases_read_as_the_file_deepeval_saves(tmp_path):
    from deepeval.dataset import EvaluationDataset
    from deepeval.test_case import LLMTestCase

    cases = ragbridge.load_cases(EXAMPLE)[:10]
    dataset = EvaluationDataset()
    for c in cases:
        dataset.add_test_case(LLMTestCase(input=c.question, actual_output=c.answer or "",
                                          retrieval_context=[ch.text for ch in c.contexts],
                                          metadata={"topic": c.tags[0]}))
    path = dataset.save_as("json", str(tmp_path), file_name="tests", include_test_cases=True)
    from_file = ragbridge.load_cases(path)
    assert ragbridge.load_cases(dataset) == from_file
    assert ragbridge.load_cases(list(dataset.test_cases)) == from_file
    # what save_as drops (a test case's name and tags), the objects keep
    named = [LLMTestCase(input=c.question, actual_output=c.answer or "", name=c.id, tags=c.tags)
             for c in cases]
    read = ragbridge.load_cases(named)
    assert [c.id for c in read] == [c.id for c in cases] and read[0].tags == cases[0].tags


@needs_backend("deepeval")
@pytest.mark.parametrize("kind", ["dataset", "test_cases"])
def test_to_library_deepeval_is_lossless(kind):
    from deepeval.dataset import EvaluationDataset
    from deepeval.test_case import LLMTestCase

    cases = ragbridge.load_cases(EXAMPLE)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        made = ragbridge.to_library(cases, "deepeval", kind=kind)
    if kind == "dataset":
        assert isinstance(made, EvaluationDataset) and made.goldens[0].input == cases[0].question
    else:
        assert isinstance(made[0], LLMTestCase) and made[0].retrieval_context == [
            ch.text for ch in cases[0].contexts]
    assert ragbridge.load_cases(made) == cases


@needs_backend("deepeval")
def test_bad_deepeval_objects_name_the_index():
    from deepeval.dataset import ConversationalGolden, Golden

    with pytest.raises(DatasetError, match=r"index 1.*ConversationalGolden"):
        ragbridge.load_cases([Golden(input="q"), ConversationalGolden(scenario="s", expected_outcome="o")])


def test_unknown_library_or_kind():
    cases = ragbridge.load_cases(EXAMPLE)
    with pytest.raises(DatasetError, match="no library 'nope'"):
        ragbridge.to_library(cases, "nope")
    with pytest.raises(DatasetError, match="has no kind 'x'.*kinds: dataset, test_cases"):
        ragbridge.to_library(cases, "deepeval", kind="x")


# --------------------------------------------------------------------------------------------
# TruLens

_TRULENS_STORE = """
import sys
import pandas as pd
from trulens.core import TruSession
from trulens.core.database.connector.default import DefaultDBConnector
frame = pd.read_pickle(sys.argv[1])
session = TruSession(connector=DefaultDBConnector(database_url="sqlite:///" + sys.argv[2]))
session.add_ground_truth_to_dataset("golden", frame, dataset_metadata={"domain": "support"})
session.get_ground_truth("golden").to_pickle(sys.argv[3])
"""


@needs_backend("trulens")
def test_trulens_ground_truth_reads_as_trulens_stores_it(tmp_path):
    from trulens.core.schema.groundtruth import GroundTruth

    cases = ragbridge.load_cases(EXAMPLE)
    truths = [GroundTruth(dataset_id="golden", query=c.question, query_id=c.id, expected_response=c.reference,
                          expected_chunks=[{"text": t, "expect_score": 1} for t in c.reference_contexts],
                          meta={"tags": c.tags}) for c in cases]
    frame = pd.DataFrame([t.model_dump() for t in truths]).drop(columns=["ground_truth_id", "dataset_id"])
    frame.to_pickle(tmp_path / "in.pkl")
    # TruLens writes the ground truth to its own database and reads it back (in a process of its own:
    # a TruSession is one per process)
    subprocess.run([sys.executable, "-c", _TRULENS_STORE, str(tmp_path / "in.pkl"),
                    str(tmp_path / "t.sqlite"), str(tmp_path / "out.pkl")], check=True, capture_output=True,
                   timeout=300)
    stored = pd.read_pickle(tmp_path / "out.pkl")
    from_store = ragbridge.load_cases(stored)

    def without_ids(read):  # the ids TruLens gives each row and the dataset are its own
        for c in read:
            c.metadata.get("trulens", {}).pop("ground_truth_id", None)
            c.metadata.get("trulens", {}).pop("dataset_id", None)
            if c.metadata.get("trulens") == {}:
                del c.metadata["trulens"]
        return read

    assert without_ids(ragbridge.load_cases(truths)) == without_ids(from_store)
    assert without_ids(ragbridge.load_cases(frame)) == without_ids(from_store)
    assert [c.id for c in from_store] == [c.id for c in cases]
    assert [c.reference_contexts for c in from_store] == [c.reference_contexts for c in cases]


def test_to_library_trulens_is_the_ground_truth_frame():
    cases = ragbridge.load_cases(EXAMPLE)
    frame = ragbridge.to_library(cases, "trulens")
    assert {"query", "query_id", "expected_response", "expected_chunks", "meta"} <= set(frame.columns)
    assert ragbridge.load_cases(frame) == cases


@needs_backend("deepeval")
@needs_backend("ragas")
def test_every_export_carries_the_case_id_where_the_library_has_a_field(tmp_path):
    """Cases of RAGAS samples have ids made from their questions. DeepEval's test cases and goldens
    carry them as ``name`` (what DeepEval's results are named by, to join them back; its own
    ``save_as`` and loader keep it), TruLens's ground truth as ``query_id``. RAGAS's samples have no
    field for an id."""
    from deepeval.dataset import EvaluationDataset as Goldens
    from ragas.dataset_schema import EvaluationDataset, SingleTurnSample

    cases = ragbridge.load_cases(EvaluationDataset.from_jsonl(str(RAGAS_FILE)))
    ids = [c.id for c in cases]
    assert all(i.startswith("q-") for i in ids)
    assert [t.name for t in ragbridge.to_library(cases, "deepeval", kind="test_cases")] == ids
    goldens = ragbridge.to_library(cases, "deepeval").goldens
    assert [g.name for g in goldens] == ids
    saved = Goldens(goldens=goldens).save_as("json", str(tmp_path), "goldens")
    again = Goldens()
    again.add_goldens_from_json_file(saved)
    assert [g.name for g in again.goldens] == ids and [c.id for c in ragbridge.load_cases(again)] == ids
    assert ragbridge.to_library(cases, "trulens")["query_id"].tolist() == ids
    assert not {"id", "name", "sample_id"} & set(SingleTurnSample.model_fields)
