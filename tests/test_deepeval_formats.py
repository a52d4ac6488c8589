"""DeepEval datasets to and from canonical cases (issue 5, point 4), checked against DeepEval's own
writer (`EvaluationDataset.save_as`) and loaders (`add_goldens_from_*_file`, `add_test_cases_from_*`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import needs_library  # noqa: E402

pytestmark = needs_library("deepeval")

import ragbridge  # noqa: E402,F401  (privacy defaults before DeepEval)
from ragbridge.formats import DatasetError  # noqa: E402
from ragbridge.formats.canonical import read_jsonl  # noqa: E402
from ragbridge.schema import Case  # noqa: E402

from conftest import EXAMPLE, ragbridge_cli  # noqa: E402

from ragbridge_deepeval import formats  # noqa: E402

KINDS = ("json", "jsonl", "csv")
READ = {"json": formats.read_json, "jsonl": formats.read_jsonl, "csv": formats.read_csv}
WRITE = {"json": formats.write_json, "jsonl": formats.write_jsonl, "csv": formats.write_csv}


@pytest.fixture(scope="module")
def example() -> list[Case]:
    return read_jsonl(EXAMPLE)


def deepeval_goldens(path: Path, kind: str):
    from deepeval.dataset import EvaluationDataset

    ds = EvaluationDataset()
    getattr(ds, f"add_goldens_from_{kind}_file")(str(path))
    return ds.goldens


def saved_by_deepeval(tmp_path: Path, kind: str, goldens) -> Path:
    from deepeval.dataset import EvaluationDataset

    return Path(EvaluationDataset(goldens=goldens).save_as(kind, str(tmp_path),
                                                           file_name=f"by-deepeval-{kind}"))


# ------------------------------------------------------------------------------------------------
# Round trip, and DeepEval reading what ragbridge writes
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_round_trip_of_the_example_is_lossless(example, tmp_path, kind):
    path = tmp_path / f"goldens.{kind}"
    lost = WRITE[kind](example, path)
    assert lost == []
    back = READ[kind](path)
    assert [c.model_dump() for c in back] == [c.model_dump() for c in example]


@pytest.mark.parametrize("kind", KINDS)
def test_deepeval_loads_what_ragbridge_writes(example, tmp_path, kind):
    path = tmp_path / f"goldens.{kind}"
    WRITE[kind](example, path)
    goldens = deepeval_goldens(path, kind)
    assert len(goldens) == len(example)
    for g, c in zip(goldens, example):
        assert (g.input, g.actual_output, g.expected_output, g.name) == (c.question, c.answer,
                                                                         c.reference, c.id)
        assert g.retrieval_context == [x.text for x in c.contexts]
        assert (g.context or []) == c.reference_contexts
        extra = g.additional_metadata["ragbridge"]  # the fields DeepEval has no place for travel here
        assert [x["id"] for x in extra["contexts"]] == [x.id for x in c.contexts]
        assert extra.get("relevant", {}) == c.relevant and extra.get("tags", []) == c.tags
        assert {k: v for k, v in g.additional_metadata.items() if k != "ragbridge"} == c.metadata


def test_json_layout_matches_save_as(example, tmp_path):
    """Key order and layout as DeepEval writes them, so a diff against DeepEval's own file is clean."""
    ours = tmp_path / "ours.json"
    formats.write_json(example[:3], ours)
    theirs = saved_by_deepeval(tmp_path, "json", deepeval_goldens(ours, "json"))
    assert json.loads(ours.read_text()) == json.loads(theirs.read_text())
    assert list(json.loads(ours.read_text())[0]) == list(formats.GOLDEN_KEYS)


def test_csv_with_pipe_in_a_chunk_reports_the_loss(tmp_path):
    case = Case(id="p", question="q", answer="a", contexts=[{"id": "c1", "text": "plans: Starter | Plus"}],
                reference_contexts=["x|y"])
    path = tmp_path / "g.csv"
    lost = formats.write_csv([case], path)
    assert lost == ["contexts (text with '|', CSV)", "reference_contexts (text with '|', CSV)"]
    assert set(lost) <= set(formats.CSV_CANNOT_HOLD)
    back = formats.read_csv(path)[0]
    assert [c.text for c in back.contexts] == ["plans: Starter ", " Plus"]  # exactly what DeepEval reads
    assert [c.text for c in back.contexts] == deepeval_goldens(path, "csv")[0].retrieval_context
    # JSON and JSONL keep lists: no loss there
    assert formats.write_jsonl([case], tmp_path / "g.jsonl") == []
    assert formats.read_jsonl(tmp_path / "g.jsonl")[0].model_dump() == case.model_dump()


# ------------------------------------------------------------------------------------------------
# Reading what DeepEval writes
# ------------------------------------------------------------------------------------------------


def native_goldens():
    from deepeval.dataset import Golden
    from deepeval.test_case import RetrievedContextData

    return [
        Golden(input="How long is the refund window?", actual_output="14 days.",
               expected_output="Within 14 days.",
               retrieval_context=["Refunds within 14 days.", "Annual plans: 30 days."],
               context=["Monthly subscriptions can be refunded within 14 days."], name="refund",
               comments="checked", source_file="refunds.md", additional_metadata={"persona": "customer"}),
        Golden(input="Where is my parcel?", expected_output="Track it in Shipments.",
               retrieval_context=[RetrievedContextData(context="Track parcels in Shipments.",
                                                       source="tracking.md")]),
        Golden(input="Where is my parcel?", actual_output="No idea."),  # no name, same input
    ]


@pytest.mark.parametrize("kind", KINDS)
def test_reads_goldens_saved_by_deepeval(tmp_path, kind):
    path = saved_by_deepeval(tmp_path, kind, native_goldens())
    cases = formats.read_any(path)
    assert len(cases) == 3
    a, b, c = cases
    assert (a.id, a.question, a.answer, a.reference) == ("refund", "How long is the refund window?",
                                                        "14 days.", "Within 14 days.")
    assert [x.text for x in a.contexts] == ["Refunds within 14 days.", "Annual plans: 30 days."]
    assert all(x.id.startswith("ctx-") for x in a.contexts)
    assert a.reference_contexts == ["Monthly subscriptions can be refunded within 14 days."]
    assert a.metadata == {"persona": "customer",
                          "deepeval": {"comments": "checked", "source_file": "refunds.md"}}
    assert [(x.text, x.source) for x in b.contexts] == [("Track parcels in Shipments.", "tracking.md")]
    assert b.answer is None and b.reference == "Track it in Shipments."
    assert b.id != c.id and b.id.startswith("q-") and c.id.startswith(b.id)  # stable ids, made unique
    # and writing them back gives DeepEval the same goldens (DeepEval-only fields restored)
    out = tmp_path / f"again.{kind}"
    formats.write_any(cases, out)
    again = deepeval_goldens(out, kind)
    assert again[0].comments == "checked" and again[0].source_file == "refunds.md"
    assert again[0].additional_metadata["persona"] == "customer"
    assert [g.input for g in again] == [g.input for g in native_goldens()]


def test_reads_test_cases_as_deepeval_dumps_them(tmp_path):
    from deepeval.test_case import LLMTestCase

    tcs = [LLMTestCase(input="q1", actual_output="a1", expected_output="r1", retrieval_context=["c1", "c2"],
                       context=["g1"], metadata={"k": 1}, tags=["billing"], name="t1"),
           LLMTestCase(input="q2", actual_output="a2")]
    path = tmp_path / "test_cases.json"
    path.write_text(json.dumps([t.model_dump(by_alias=True, exclude_none=True) for t in tcs]))
    one, two = formats.read_json(path)
    assert (one.id, one.question, one.answer, one.reference, one.tags) == ("t1", "q1", "a1", "r1",
                                                                           ["billing"])
    assert [x.text for x in one.contexts] == ["c1", "c2"] and one.reference_contexts == ["g1"]
    assert one.metadata["k"] == 1
    assert two.answer == "a2" and two.contexts == [] and two.metadata == {}


def test_reads_test_case_csv_as_deepeval_loads_it(tmp_path):
    from deepeval.dataset import EvaluationDataset

    path = tmp_path / "tc.csv"
    path.write_text("input,actual_output,expected_output,retrieval_context,context\n"
                    "q1,a1,r1,c1|c2|c3,g1|g2\n")
    ds = EvaluationDataset()
    ds.add_test_cases_from_csv_file(str(path), input_col_name="input", actual_output_col_name="actual_output")
    case = formats.read_csv(path)[0]
    assert [x.text for x in case.contexts] == ds.test_cases[0].retrieval_context == ["c1", "c2", "c3"]
    assert case.reference_contexts == ds.test_cases[0].context == ["g1", "g2"]


# ------------------------------------------------------------------------------------------------
# Bad input, and the command line
# ------------------------------------------------------------------------------------------------


def test_bad_input_is_a_dataset_error(tmp_path):
    multi = tmp_path / "multi.json"
    multi.write_text(json.dumps([{"scenario": "a chat", "turns": [{"role": "user", "content": "hi"}]}]))
    with pytest.raises(DatasetError, match="multi-turn"):
        formats.read_json(multi)
    no_input = tmp_path / "x.jsonl"
    no_input.write_text('{"input": "q"}\n{"actual_output": "a"}\n')
    with pytest.raises(DatasetError) as err:
        formats.read_jsonl(no_input)
    assert err.value.line == 2 and err.value.field == "input"
    bad_rc = tmp_path / "y.json"
    bad_rc.write_text(json.dumps([{"input": "q", "retrieval_context": "one string"}]))
    with pytest.raises(DatasetError, match="list of strings"):
        formats.read_json(bad_rc)
    with pytest.raises(DatasetError, match="suffix"):
        formats.read_any(tmp_path / "z.parquet")


@pytest.mark.slow
def test_cli_convert_to_and_from_deepeval(example, tmp_path):
    out = tmp_path / "goldens.json"
    res = ragbridge_cli("convert", EXAMPLE, out, "--to", "deepeval")
    assert res.returncode == 0, res.stderr[-2000:]
    assert len(json.loads(out.read_text())) == len(example)
    back = tmp_path / "back.jsonl"
    res = ragbridge_cli("convert", out, back, "--from", "deepeval")
    assert res.returncode == 0, res.stderr[-2000:]
    assert [c.model_dump() for c in read_jsonl(back)] == [c.model_dump() for c in example]
    csv_path = tmp_path / "lossy.csv"
    (tmp_path / "pipe.jsonl").write_text(json.dumps(
        {"id": "p", "question": "q", "contexts": [{"id": "c", "text": "a | b"}]}) + "\n")
    res = ragbridge_cli("convert", tmp_path / "pipe.jsonl", csv_path, "--to", "deepeval-csv")
    assert res.returncode == 0, res.stderr[-2000:]
    assert "contexts" in res.stderr and "cannot hold" in res.stderr


def test_registered_formats_load_through_ragbridge(example, tmp_path):
    from ragbridge.formats import get_formats

    fmts = get_formats()
    assert {"deepeval", "deepeval-json", "deepeval-jsonl", "deepeval-csv"} <= set(fmts)
    assert all(fmts[n].suffixes == () for n in fmts if n.startswith("deepeval"))  # .json etc. stay canonical
    path = tmp_path / "goldens.csv"
    assert ragbridge.write_cases(example[:5], path, format="deepeval") == []
    assert ragbridge.load_cases(path, format="deepeval") == example[:5]
    assert ragbridge.load_cases(path, format="deepeval-csv") == example[:5]
