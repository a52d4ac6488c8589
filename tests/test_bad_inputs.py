"""The bad-input corpus (tests/bad_inputs/, one small file per case) through the real command line.

Wrong input: exit 2, one error naming the file, the line, the field and what to do, and nothing
written. Legal but suspicious input: the run goes ahead, with one warning line counting the cases.
"""

import json
from pathlib import Path

import pytest

from conftest import ragbridge_cli, warnings_in
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
    # empty strings that every answer contains, or that no chunk is named by
    "must_contain_empty.jsonl": (2, "must_contain", "phrase 2 is '': every answer contains an empty phrase"),
    "must_not_contain_blank.jsonl": (2, "must_not_contain", "phrase 1 is '  ': every answer contains"),
    "label_empty.jsonl": (2, "relevant", "label must not be empty"),
    # given twice: a JSON reader, or a CSV one, would keep one value silently
    "key_twice.jsonl": (2, None, "key 'answer' is given twice in one object"),
    "label_twice.jsonl": (2, None, "key 'a' is given twice in one object"),
    "column_twice.csv": (1, None, "the header names column 'answer' twice (columns 3 and 4)"),
    # ids: one rule (no white space at the ends, Unicode NFC, every character printing)
    "case_id_nfd_twice.jsonl": (2, "id", "duplicate case id 'café' (first at line 1)"),
    "case_id_space_twice.jsonl": (2, "id", "duplicate case id 'c1' (first at line 1)"),
    "case_id_zero_width.jsonl": (2, "id", "holds U+200B (ZERO WIDTH SPACE) at position 2"),
    # a lone surrogate escape: not a character, cannot be written as UTF-8
    "lone_surrogate_question.jsonl": (2, "question", "holds the escape \\udce9, half of a UTF-16 surrogate"),
    "lone_surrogate_metadata.jsonl": (2, "metadata.note[1]", "holds the escape \\ud800"),
    # the field that is missing, not the id made from it; a list given as one text
    "question_missing.jsonl": (2, "question", "is required but missing"),
    "tags_as_string.jsonl": (2, "tags", "must be a list of texts, got the text 'billing, cancel'"),
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
    "must_contain_empty.jsonl": "remove it",
    "must_not_contain_blank.jsonl": "remove it",
    "label_empty.jsonl": "give it the id it stands for",
    "key_twice.jsonl": "give each key once",
    "label_twice.jsonl": "give each key once",
    "column_twice.csv": "rename or remove one of them",
    "case_id_nfd_twice.jsonl": "compared without white space at their ends and in Unicode NFC",
    "case_id_space_twice.jsonl": "compared without white space at their ends and in Unicode NFC",
    "case_id_zero_width.jsonl": "remove it",
    "lone_surrogate_question.jsonl": "remove the escape",
    "lone_surrogate_metadata.jsonl": "remove the escape",
    "question_missing.jsonl": "every case needs its question",
    "tags_as_string.jsonl": '["billing", "cancel"]',
}
SUSPICIOUS = {"plain_text_contexts.jsonl", "ids_never_match.jsonl", "labels_other_case.jsonl",
              "labels_nfd_chunks_nfc.jsonl"}
#: human labels for `validate` against a run of the support-bot example: (line, words)
WRONG_LABELS = {
    "human_grade_1_5.jsonl": (2, "label 1.5 is outside 0..1, the scale of --label-threshold 0.5: it would "
                                 "count as a pass"),
    "human_conflicting.jsonl": (4, "case 'billing-refund-window', metric 'must_contain' is labelled 'fail' "
                                   "here and 'pass' at line 1"),
    "human_no_case_of_the_run.jsonl": (None, "no label names a case of this run (2 label(s); the first "
                                             "names 'Billing-Refund-Window'"),
}

#: human labels that are right to give but disagree with the run: (case, which way) each names
DISAGREEING_LABELS = {
    "human_disagrees_with_the_run.jsonl": [
        ("billing-refund-window", "failure(s) missed (human fail, backend pass)"),
        ("claims-damage-deadline", "pass(es) missed (human pass, backend fail)")],  # scored 0.0
}


def test_the_corpus_holds_every_case():
    names = {p.name for p in CORPUS.iterdir()}
    assert set(WRONG) | SUSPICIOUS | set(WRONG_LABELS) | set(DISAGREEING_LABELS) == names


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


@pytest.mark.parametrize("name", ["lone_surrogate_question.jsonl", "lone_surrogate_metadata.jsonl",
                                  "key_twice.jsonl", "column_twice.csv", "case_id_nfd_twice.jsonl"])
def test_convert_refuses_wrong_input_as_run_does(tmp_path, name):
    line, _, words = WRONG[name]
    dest = tmp_path / "out.csv"
    res = ragbridge_cli("convert", CORPUS / name, dest)
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stderr.startswith(f"error: {CORPUS / name}:{line}: ") and words in res.stderr, res.stderr
    assert "Traceback" not in res.stderr and list(tmp_path.iterdir()) == []


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
        ("plain_text_contexts.jsonl", "2 of 3 case(s) with relevance labels have no retrieved chunk that "
                                      "matches a label, so their ranking metrics are 0 ('plain-1', "
                                      "'plain-2'): their chunks are given as plain text"),
        ("ids_never_match.jsonl", "in none of the cases does a chunk's id or source match a label"),
    ],
)
def test_labels_no_chunk_can_match_are_one_warning(tmp_path, name, words):
    out = tmp_path / "run"
    res = ragbridge_cli("run", CORPUS / name, "--out", out, "--no-progress")
    assert res.returncode == 0, res.stderr
    warnings = warnings_in(res.stderr)
    assert len(warnings) == 1 and words in warnings[0], res.stderr
    # the warning is right: those cases score 0 on every ranking metric, the others as usual
    scores = [json.loads(x) for x in (out / "scores.jsonl").read_text().splitlines()]
    unmatched = {c.id for c in load_cases(CORPUS / name) if not c.id.startswith("refund")}
    assert {s["value"] for s in scores if s["case_id"] in unmatched and s["metric"] == "recall@5"} == {0.0}
    labelled = [s["value"] for s in scores if s["case_id"] == "refund-window" and s["metric"] == "recall@5"]
    assert labelled in ([], [1.0])


def test_labels_in_another_letter_case_are_one_warning_counting_the_cases(tmp_path):
    """Two of three cases name their chunk in another letter case or Unicode compatibility form (full
    width): a warning counts them, whatever the third case matches."""
    out = tmp_path / "run"
    res = ragbridge_cli("run", CORPUS / "labels_other_case.jsonl", "--out", out, "--no-progress", "--json")
    assert res.returncode == 0, res.stderr
    warnings = warnings_in(res.stderr)
    assert len(warnings) == 1, res.stderr
    assert "2 of 3 case(s) with relevance labels have no retrieved chunk that matches a label" in warnings[0]
    assert "label 'refunds.md#window', chunk 'Refunds.md#Window'" in warnings[0]


def test_labels_and_chunk_ids_in_two_unicode_forms_match(tmp_path):
    """Labels in NFD, chunk ids in NFC: one id each, so every label matches (recall 1, no warning)."""
    out = tmp_path / "run"
    res = ragbridge_cli("run", CORPUS / "labels_nfd_chunks_nfc.jsonl", "--out", out, "--no-progress",
                        "--metric", "recall@5", "--json")
    assert res.returncode == 0 and "warning" not in res.stderr, res.stderr
    assert json.loads(res.stdout)["summary"][0]["mean"] == 1.0
    cases = load_cases(CORPUS / "labels_nfd_chunks_nfc.jsonl")
    assert all(set(c.relevant) == {c.contexts[0].id} for c in cases)


@pytest.mark.slow
def test_wrong_human_labels_are_errors_with_the_line(tmp_path, example_path):
    """validate: a grade of 1.5 at the default 0..1 scale, a case labelled pass and fail, and labels
    that name no case of the run are each exit 2 with the file and line, and nothing on stdout."""
    out = tmp_path / "run"
    assert ragbridge_cli("run", example_path, "--out", out, "--no-progress").returncode == 0
    for name, (line, words) in WRONG_LABELS.items():
        res = ragbridge_cli("validate", out, "--labels", CORPUS / name)
        assert res.returncode == 2, (name, res.stdout, res.stderr)
        where = f"{CORPUS / name}:{line}: " if line else f"{CORPUS / name}: "
        assert res.stderr.startswith(f"error: {where}") and words in " ".join(res.stderr.split()), res.stderr
        assert res.stdout == ""
    # labels that disagree with the run (ids with white space around them, as run ids may have) are
    # taken, and each case they disagree on is named, whichever way
    for name, named in DISAGREEING_LABELS.items():
        res = ragbridge_cli("validate", out, "--labels", CORPUS / name)
        assert res.returncode == 0 and "not in this run" not in res.stderr, (name, res.stderr)
        text = " ".join(res.stdout.split())
        for case, way in named:
            assert f"1 {way}: {case}" in text, (name, text)
    # the same grade on a scale the threshold names (1-5) is a grade, not an error
    res = ragbridge_cli("validate", out, "--labels", CORPUS / "human_grade_1_5.jsonl",
                        "--label-threshold", "3",
                        "--json")
    assert res.returncode == 0, res.stderr


def test_an_empty_decline_phrase_is_refused(tmp_path, example_path):
    out = tmp_path / "run"
    res = ragbridge_cli("run", example_path, "--out", out, "--decline-phrase", "", "--no-progress")
    assert res.returncode == 2 and not out.exists()
    assert res.stderr.startswith("error: --decline-phrase '' is empty: every answer contains it"), res.stderr


def test_a_grade_is_any_integer_up_to_1000(tmp_path):
    from ragbridge import evaluate

    p = tmp_path / "graded.jsonl"
    rec = {"id": "a", "question": "q", "contexts": [{"id": "x"}, {"id": "y"}], "relevant": {"x": 1, "y": 5}}
    other = {**rec, "id": "b", "relevant": {"x": 1000, "y": 0}}
    p.write_text(json.dumps(rec) + "\n" + json.dumps(other) + "\n")
    cases = load_cases(p)
    assert cases[0].relevant == {"x": 1, "y": 5} and cases[1].relevant == {"x": 1000, "y": 0}
    run = evaluate(cases, metrics=["ndcg@5"], options={"native": {"gain": "exponential"}})
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
    warnings = warnings_in(res.stderr)
    assert len(warnings) == 1 and "their chunks are given as plain text" in warnings[0], res.stderr
