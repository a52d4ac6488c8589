"""The bad-input corpus (tests/bad_inputs/, one small file per case) through the real command line.

Wrong input: exit 2, one error naming the file, the line, the field and what to do, and nothing
written. Legal but suspicious input: the run goes ahead, with one warning line counting the cases.
"""

import json
from pathlib import Path

import pytest

from conftest import ragbridge_cli
from ragbridge import load_cases

CORPUS = Path(__file__).parent / "bad_inputs"

# file: (line, field or None, words the message must hold)
WRONG = {
    "relevant_as_string.jsonl": (2, "relevant", "or a list of ids"),
    "grade_above_range.jsonl": (2, "relevant", "an integer from 0 (judged not relevant) to 1000, got 1001"),
    "grade_1e308.jsonl": (2, "relevant", "to 1000, got 1e+308"),
    "answerable_as_string.jsonl": (2, "answerable", "must be true or false, got 'no'"),
    "metadata_300_deep.jsonl": (2, "metadata", "nests more than 100 levels"),
    "metadata_990_deep.jsonl": (2, "metadata", "nests more than 100 levels"),
    "semicolon_delimited.csv": (1, None, "separated by semicolons, not commas"),
    "unquoted_comma.csv": (3, None, "has 4 cells but the header has 3 columns"),
}
WHAT_TO_DO = {
    "relevant_as_string.jsonl": '{"doc#section": 1}',
    "grade_above_range.jsonl": "integer from 0",
    "grade_1e308.jsonl": "integer from 0",
    "answerable_as_string.jsonl": "true or false",
    "metadata_300_deep.jsonl": "store the deep part as a JSON string",
    "metadata_990_deep.jsonl": "store the deep part as a JSON string",
    "semicolon_delimited.csv": "save it as comma-separated CSV",
    "unquoted_comma.csv": "must be in double quotes",
}


def test_the_corpus_holds_every_case():
    names = {p.name for p in CORPUS.iterdir()}
    assert set(WRONG) | {"plain_text_contexts.jsonl", "ids_never_match.jsonl"} == names


@pytest.mark.parametrize("name", sorted(WRONG))
def test_wrong_input_is_an_error_and_nothing_is_written(tmp_path, name):
    line, field, words = WRONG[name]
    out = tmp_path / "run"
    res = ragbridge_cli("run", CORPUS / name, "--out", out, "--no-progress")
    assert res.returncode == 2, res.stdout + res.stderr
    message = res.stderr.strip()
    assert "Traceback" not in message and len(message.splitlines()) == 1, message
    assert message.startswith(f"error: {CORPUS / name}:{line}: "), message
    if field:
        assert f"field '{field}'" in message
    assert words in message and WHAT_TO_DO[name] in message
    assert not out.exists()
    assert res.stdout == ""


def test_wrong_input_leaves_an_earlier_run_untouched(tmp_path, example_path):
    out = tmp_path / "run"
    assert ragbridge_cli("run", example_path, "--out", out, "--no-progress").returncode == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    for name in ("grade_1e308.jsonl", "metadata_990_deep.jsonl"):
        res = ragbridge_cli("run", CORPUS / name, "--out", out, "--no-progress")
        assert res.returncode == 2, res.stderr
        assert {p.name: p.read_bytes() for p in out.iterdir()} == before


@pytest.mark.parametrize(
    "name, words",
    [
        ("plain_text_contexts.jsonl", "2 of 3 case(s) with relevance labels give their chunks as plain text"),
        ("ids_never_match.jsonl", "in none of the 2 case(s) with relevance labels does a chunk's id"),
    ],
)
def test_labels_no_chunk_can_match_are_one_warning(tmp_path, name, words):
    out = tmp_path / "run"
    res = ragbridge_cli("run", CORPUS / name, "--out", out, "--no-progress")
    assert res.returncode == 0, res.stderr
    warnings = [x for x in res.stderr.splitlines() if x.startswith("warning:")]
    assert len(warnings) == 1 and words in warnings[0], res.stderr
    # the warning is right: those cases score 0 on every ranking metric, the others as usual
    scores = [json.loads(x) for x in (out / "scores.jsonl").read_text().splitlines()]
    unmatched = {c.id for c in load_cases(CORPUS / name) if not c.id.startswith("refund")}
    assert {s["value"] for s in scores if s["case_id"] in unmatched and s["metric"] == "recall@5"} == {0.0}
    labelled = [s["value"] for s in scores if s["case_id"] == "refund-window" and s["metric"] == "recall@5"]
    assert labelled in ([], [1.0])


def test_a_grade_is_any_integer_up_to_1000(tmp_path):
    from ragbridge import RunOptions, evaluate

    p = tmp_path / "graded.jsonl"
    rec = {"id": "a", "question": "q", "contexts": [{"id": "x"}, {"id": "y"}], "relevant": {"x": 1, "y": 5}}
    other = {**rec, "id": "b", "relevant": {"x": 1000, "y": 0}}
    p.write_text(json.dumps(rec) + "\n" + json.dumps(other) + "\n")
    cases = load_cases(p)
    assert cases[0].relevant == {"x": 1, "y": 5} and cases[1].relevant == {"x": 1000, "y": 0}
    run = evaluate(cases, metrics=["ndcg@5"], options=RunOptions(gain="exponential"))
    assert all(s.error is None and s.value is not None for s in run.scores)


def test_relevant_as_text_is_still_read_from_table_cells(tmp_path):
    """In CSV and Parquet a cell of '|'-separated ids is the documented spelling of a list."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    labels = {"refunds.md#window": 1, "refunds.md#exceptions": 1}
    p = tmp_path / "g.csv"
    p.write_text("id,question,relevant,answerable\na,q,refunds.md#window|refunds.md#exceptions,no\n")
    case = load_cases(p)[0]
    assert case.relevant == labels and case.answerable is False
    pq.write_table(pa.Table.from_pylist([{"id": "a", "question": "q", "relevant": "|".join(labels)}]),
                   tmp_path / "g.parquet")
    assert load_cases(tmp_path / "g.parquet")[0].relevant == labels


def test_convert_warns_as_run_does(tmp_path):
    res = ragbridge_cli("convert", CORPUS / "plain_text_contexts.jsonl", tmp_path / "out.csv")
    assert res.returncode == 0, res.stderr
    warnings = [x for x in res.stderr.splitlines() if x.startswith("warning:")]
    assert len(warnings) == 1 and "give their chunks as plain text" in warnings[0], res.stderr
