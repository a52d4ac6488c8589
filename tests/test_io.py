import json

import pytest

from conftest import ragbridge_cli
from ragbridge import DatasetError, load_cases, write_cases
from ragbridge.formats.batches import fingerprint


def write(tmp_path, name, text, mode="w"):
    p = tmp_path / name
    if isinstance(text, bytes):
        p.write_bytes(text)
    else:
        p.write_text(text, encoding="utf-8")
    return p


def jsonl(*records):
    return "".join(json.dumps(r) + "\n" for r in records)


def test_example_loads(example_cases):
    assert len(example_cases) >= 30
    ids = [c.id for c in example_cases]
    assert len(ids) == len(set(ids))
    assert sum(not c.answerable for c in example_cases) >= 3
    assert any("multi-hop" in c.tags for c in example_cases)
    assert all(c.contexts for c in example_cases)


def test_common_vocabulary(tmp_path):
    p = write(tmp_path, "g.jsonl", jsonl(
        {"case_id": "a", "query": "q?", "response": "r", "retrieved": ["d1", "d2"],
         "relevant_ids": ["d2"], "ground_truth": "ref", "tags": ["x"]},
        {"question": "other?", "retrieved_contexts": ["some text", "more text"],
         "retrieved_context_ids": ["c1", "c2"], "relevant": ["c2"]},
    ))
    a, b = load_cases(p)
    assert a.id == "a" and a.question == "q?" and a.answer == "r" and a.reference == "ref"
    assert [c.id for c in a.contexts] == ["d1", "d2"] and a.relevant == {"d2": 1}
    assert [c.id for c in b.contexts] == ["c1", "c2"] and b.contexts[0].text == "some text"
    assert b.id.startswith("q-") and b.relevant == {"c2": 1}


def test_text_only_contexts_get_stable_ids(tmp_path):
    p = write(tmp_path, "g.jsonl", jsonl(
        {"id": "1", "question": "q", "contexts": ["same text"]},
        {"id": "2", "question": "q2", "contexts": ["same text", "other"]},
    ))
    a, b = load_cases(p)
    assert a.contexts[0].id == b.contexts[0].id != b.contexts[1].id


@pytest.mark.parametrize(
    "records, line, field, words",
    [
        ([{"id": "a", "question": "q"}, {"id": "a", "question": "q2"}], 2, "id",
         "duplicate case id 'a' (first at line 1)"),
        ([{"id": "a", "question": "q", "contexts": "chunk text"}], 1, "contexts", "contexts must be a list"),
        ([{"id": "a", "question": "q", "relevant": {"d": -1}}], 1, "relevant", "an integer from 0"),
        ([{"id": "a", "question": "q", "relevant": {"d": 1.5}}], 1, "relevant", "an integer from 0"),
        ([{"id": "a", "question": "q", "relevant": {"d": "high"}}], 1, "relevant", "an integer from 0"),
        ([{"id": "a"}], 1, "question", "required"),
        ([{"id": "a", "question": "q", "refrence": "typo"}], 1, "refrence", "unknown field"),
        ([{"id": "a", "question": "q", "contexts": [{"text": 3}]}], 1, "contexts[0]", ""),
    ],
)
def test_bad_records_are_located(tmp_path, records, line, field, words):
    p = write(tmp_path, "g.jsonl", jsonl(*records))
    with pytest.raises(DatasetError) as info:
        load_cases(p)
    err = info.value
    assert err.line == line and err.path == str(p)
    assert err.field.startswith(field)
    assert words in str(err)
    assert str(err).startswith(f"{p}:{line}: field '{err.field}'")


def test_invalid_utf8_names_the_line(tmp_path):
    p = write(tmp_path, "g.jsonl", b'{"id": "a", "question": "ok"}\n{"id": "b", "question": "caf\xe9"}\n')
    with pytest.raises(DatasetError, match=r"g.jsonl:2: invalid UTF-8 \(byte 0xe9"):
        load_cases(p)


@pytest.mark.parametrize("content", ["", "\n\n  \n"])
def test_empty_file(tmp_path, content):
    p = write(tmp_path, "g.jsonl", content)
    with pytest.raises(DatasetError, match="file is empty"):
        load_cases(p)


def test_bad_json_line(tmp_path):
    p = write(tmp_path, "g.jsonl", '{"id": "a", "question": "q"}\n{"id": "b", question}\n')
    with pytest.raises(DatasetError, match=r":2: not valid JSON"):
        load_cases(p)


@pytest.mark.parametrize("suffix, fmt", [(".jsonl", None), (".csv", None), (".parquet", None), ("", "hf")])
def test_round_trip_every_format(tmp_path, example_cases, suffix, fmt):
    target = tmp_path / f"cases{suffix or '_hf'}"
    assert write_cases(example_cases, target, fmt) == []
    back = load_cases(target, fmt)
    assert [c.model_dump() for c in back] == [c.model_dump() for c in example_cases]
    assert fingerprint(back) == fingerprint(example_cases)


def test_csv_cells_accept_pipes_and_json(tmp_path):
    p = write(tmp_path, "g.csv",
              'id,question,retrieved,relevant_ids,tags,relevant,answerable\n'
              'a,"q, with comma",d1|d2,d2,billing|real,,false\n'
              'b,q2,"[""x""]",,,"{""x"": 3}",true\n')
    a, b = load_cases(p)
    assert [c.id for c in a.contexts] == ["d1", "d2"] and a.relevant == {"d2": 1}
    assert a.tags == ["billing", "real"] and a.answerable is False
    assert b.relevant == {"x": 3} and b.answerable is True


def test_csv_error_has_line(tmp_path):
    p = write(tmp_path, "g.csv", 'id,question,relevant\na,q,"{""d"": 1}"\nb,q2,"{""d"": -2}"\n')
    with pytest.raises(DatasetError) as info:
        load_cases(p)
    assert info.value.line == 3 and info.value.field.startswith("relevant")


def test_cli_bad_input_exits_2_and_writes_nothing(tmp_path):
    p = write(tmp_path, "g.jsonl", jsonl({"id": "a", "question": "q"}, {"id": "a", "question": "q"}))
    out = tmp_path / "run"
    res = ragbridge_cli("run", p, "--out", out, "--no-progress")
    assert res.returncode == 2, res.stderr
    assert "duplicate case id 'a'" in res.stderr and "g.jsonl:2" in res.stderr.replace("\n", "")
    assert not out.exists()


def test_cli_convert(tmp_path, example_path):
    target = tmp_path / "golden.csv"
    res = ragbridge_cli("convert", example_path, target)
    assert res.returncode == 0, res.stderr
    assert len(load_cases(target)) == len(load_cases(example_path))
