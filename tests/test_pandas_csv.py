"""Each library's frame saved the usual pandas way reads back as the frame itself does.

A RAGAS ``EvaluationDataset.to_pandas()``, a DeepEval frame of its goldens (``model_dump``), a TruLens
ground-truth frame as ``TruSession.get_ground_truth`` returns it and a canonical frame, each written
by pandas' ``to_csv`` (with its index column, as by default, and without): read from the file with
and without naming the format, through the command line, and as the DataFrame pandas' ``read_csv``
gives back, they are the cases the library's own object gives. pandas writes list and dict cells as
Python literals (``['a', 'b']``), which none of these libraries' readers take as JSON.
"""

from __future__ import annotations

import subprocess
import sys

import pandas as pd
import pytest

import ragbridge
from conftest import EXAMPLE, needs_backend, ragbridge_cli
from ragbridge.formats import DatasetError


def _read_every_way(frame, cases, tmp_path, fmt):
    """``frame`` written by pandas with and without its index, read back every way: each gives
    ``cases``."""
    for index in (True, False):
        path = tmp_path / f"{fmt}-{index}.csv"
        frame.to_csv(path, index=index)
        assert index == path.read_text(encoding="utf-8").startswith(",")  # pandas' unnamed index column
        assert ragbridge.load_cases(path) == cases, (fmt, index)
        if fmt != "canonical":
            assert ragbridge.load_cases(path, fmt) == cases, (fmt, index)
        assert ragbridge.load_cases(pd.read_csv(path)) == cases, (fmt, index)
    # the command line reads the file with the index as ragbridge.load_cases does (without a format)
    res = ragbridge_cli("convert", tmp_path / f"{fmt}-True.csv", tmp_path / "back.jsonl")
    assert res.returncode == 0, res.stderr
    assert ragbridge.load_cases(tmp_path / "back.jsonl") == cases, fmt


@needs_backend("ragas")
def test_a_ragas_frame_saved_by_pandas(tmp_path):
    dataset = ragbridge.to_library(ragbridge.load_cases(EXAMPLE), "ragas")  # a RAGAS EvaluationDataset
    frame = dataset.to_pandas()
    assert isinstance(frame["retrieved_contexts"][0], list)
    _read_every_way(frame, ragbridge.load_cases(dataset), tmp_path, "ragas")


@needs_backend("deepeval")
def test_a_deepeval_frame_of_goldens_saved_by_pandas(tmp_path):
    goldens = ragbridge.to_library(ragbridge.load_cases(EXAMPLE), "deepeval").goldens
    frame = pd.DataFrame([g.model_dump() for g in goldens])
    _read_every_way(frame, ragbridge.load_cases(goldens), tmp_path, "deepeval")


_GROUND_TRUTH = """
import sys
import pandas as pd
import ragbridge
from trulens.core import TruSession
from trulens.core.database.connector.default import DefaultDBConnector
frame = ragbridge.to_library(ragbridge.load_cases(sys.argv[1]), "trulens")
session = TruSession(connector=DefaultDBConnector(database_url="sqlite:///" + sys.argv[2]))
session.add_ground_truth_to_dataset("golden", frame.drop(columns=["response", "contexts"]))
session.get_ground_truth("golden").to_pickle(sys.argv[3])
"""


@needs_backend("trulens")
def test_a_trulens_ground_truth_frame_saved_by_pandas(tmp_path):
    # TruLens's own frame, from its own store (a TruSession is one per process: a process of its own)
    subprocess.run([sys.executable, "-c", _GROUND_TRUTH, str(EXAMPLE), str(tmp_path / "t.sqlite"),
                    str(tmp_path / "truth.pkl")], check=True, capture_output=True, timeout=300,
                   cwd=tmp_path)
    frame = pd.read_pickle(tmp_path / "truth.pkl")
    assert isinstance(frame["meta"][0], dict) and isinstance(frame["expected_chunks"][0], list)
    _read_every_way(frame, ragbridge.load_cases(frame), tmp_path, "trulens")


def test_a_canonical_frame_saved_by_pandas(tmp_path):
    cases = ragbridge.load_cases(EXAMPLE)
    _read_every_way(pd.DataFrame([c.model_dump() for c in cases]), cases, tmp_path, "canonical")


def test_a_first_column_without_a_name_that_is_not_an_index_is_an_error(tmp_path):
    path = tmp_path / "cases.csv"
    path.write_text(",question\n0,q1\nx,q2\n", encoding="utf-8")
    with pytest.raises(DatasetError, match=r"cases.csv:3: the first column has no name"):
        ragbridge.load_cases(path)


def test_a_context_column_beside_canonical_fields_is_not_taken_for_a_library(tmp_path):
    """``context`` is DeepEval's gold passages and TruLens's retrieved chunks: beside canonical
    fields it says neither, so it is an error that names both ways out, not a silent TruLens read."""
    path = tmp_path / "cases.csv"
    pd.DataFrame([{"question": "How long is the refund window?", "answer": "14 days.",
                   "context": "Refunds within 14 days."}]).to_csv(path, index=False)
    res = ragbridge_cli("run", path, "--out", tmp_path / "run", "--no-progress")
    assert res.returncode == 2 and not (tmp_path / "run").exists()
    assert "its field(s) 'context' are not canonical" in res.stderr and "(deepeval, trulens)" in res.stderr
    assert "did you mean 'contexts'?" in res.stderr and "--format NAME" in res.stderr
    with pytest.raises(DatasetError, match="did you mean 'contexts'.*format=NAME"):
        ragbridge.load_cases(pd.read_csv(path))
    # named, it reads as that library reads it
    (case,) = ragbridge.load_cases(path, "trulens")
    assert [c.text for c in case.contexts] == ["Refunds within 14 days."]
    # and a library's own words beside it still tell the library
    (case,) = ragbridge.load_cases([{"input": "q", "actual_output": "a", "context": ["gold"]}])
    assert case.reference_contexts == ["gold"]


@needs_backend("deepeval")
def test_ids_pandas_read_as_numbers_are_never_taken_silently(tmp_path):
    """Ids such as ``001`` in a file pandas' ``read_csv`` reads back: as whole numbers they are warned
    of, naming the column of that library and the fix; as floats (``1e3``) they are refused so. With
    the fix, the ids are the file's."""
    from deepeval.dataset import Golden

    canonical = tmp_path / "canonical.csv"
    pd.DataFrame([{"id": "001", "question": "How long is the refund window?"},
                  {"id": "002", "question": "Do you ship to Switzerland?"}]).to_csv(canonical, index=False)
    goldens = tmp_path / "goldens.csv"
    pd.DataFrame([Golden(input="How long is the refund window?", actual_output="14 days.", name="001")
                  .model_dump(), Golden(input="Do you ship abroad?", actual_output="Yes.", name="002")
                  .model_dump()]).to_csv(goldens)
    for path, column in ((canonical, "id"), (goldens, "name")):
        assert [c.id for c in ragbridge.load_cases(path)] == ["001", "002"]  # the file, read by path
        with pytest.warns(UserWarning, match=rf"DataFrame column '{column}' holds whole numbers \(int64\)"
                          rf".*pd\.read_csv\(path, dtype=\{{'{column}': str\}}\)") as said:
            assert [c.id for c in ragbridge.load_cases(pd.read_csv(path))] == ["1", "2"]
        assert said[0].filename == __file__  # the user's line, not ragbridge's
        fixed = pd.read_csv(path, dtype={column: str})
        assert [c.id for c in ragbridge.load_cases(fixed)] == ["001", "002"]

    floats = tmp_path / "floats.csv"
    frame = pd.DataFrame([{"id": "001", "question": "q1"}, {"id": "1e3", "question": "q2"}])
    frame.to_csv(floats, index=False)
    with pytest.raises(DatasetError) as refused:
        ragbridge.load_cases(pd.read_csv(floats))
    said = str(refused.value)
    assert said.startswith("DataFrame: field 'id': column 'id' holds numbers (float64), not texts")
    assert "pd.read_csv(path, dtype={'id': str})" in said
    assert [c.id for c in ragbridge.load_cases(pd.read_csv(floats, dtype={"id": str}))] == ["001", "1e3"]
