"""The compiled chunk columns (`ragbridge.formats._columns`) give what their Python versions give."""

import random

import pytest

from ragbridge.formats import plain_records, record_lines
from ragbridge.formats.plain_records import ColumnRecord, _joined_pairs, _ranked_ids, with_chunks
from ragbridge.formats.record_lines import _SPELLINGS, _id_column, _id_text_columns, _joined_ids
from ragbridge.schema import MAX_GRADE

_columns = pytest.importorskip("ragbridge.formats._columns", reason="the package was built without it")

# pieces of a body: harmless ones, and each thing that makes a piece or the body refused
_PIECES = ["d1", "a", "b c", "x", "d 9", " ", " lead", "trail ", "", "\x7f", "a\x7fb", "\x00", "\t", "\x1f",
           "q\"t", "b\\s", "\\", '"', "}", "{", ":", ",", "[", "]", "~", "id", "text"]


def _bodies(n: int, seed: int) -> list[tuple[str, str, str]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        _, between, middle = rng.choice(_SPELLINGS)
        seps = [between, middle] + [s for _, b, m in _SPELLINGS for s in (b, m)]
        seps += [between[:-1], middle[1:], middle + middle, '"', '", "', '"}']
        clean = rng.random() < 0.5
        parts = []
        for i in range(rng.randint(1, 6)):
            pool = _PIECES[:5] if clean else _PIECES
            parts.append(rng.choice(pool) + (rng.choice(pool) if rng.random() < 0.3 else ""))
            if clean and rng.random() < 0.97:
                parts.append(middle if i % 2 == 0 else between)
            else:
                parts.append(rng.choice(seps))
        body = "".join(parts[:-1]) if rng.random() < 0.9 else "".join(parts)
        out.append((body, between, middle))
    return out


def test_split_pairs_gives_the_python_columns_of_every_ascii_body():
    """Bodies of chunks, right and wrong in every way the Python version looks for (a separator
    missing, twice, of the other spelling or cut short; a piece empty, with a quote, a backslash, a
    control character, DEL or a space at an end): the same columns, or the same refusal."""
    taken = refused = 0
    for body, between, middle in _bodies(30000, 3):
        got = _columns.split_pairs(body, between, middle)
        assert got == _id_text_columns(body, between, middle), repr(body)
        taken, refused = taken + (got is not None), refused + (got is None)
    assert taken > 3000 and refused > 3000


def test_join_ids_gives_the_python_ids_of_every_ascii_body():
    """Bodies of chunks given as ids alone, right and wrong in every way `_id_column` looks for (a
    separator of the other spelling, cut short or twice; an id empty, with a quote, a backslash, a
    control character, DEL or a space at an end): the same ids joined by line breaks, or the same
    refusal."""
    taken = refused = 0
    for body, between, middle in _bodies(30000, 5):
        body = body.replace(middle, between) if random.Random(len(body)).random() < 0.8 else body
        got = _columns.join_ids(body, between)
        ids = _id_column(body, between)
        assert got == _joined_ids(body, between) == (None if ids is None else "\n".join(ids)), repr(body)
        taken, refused = taken + (got is not None), refused + (got is None)
    assert taken > 3000 and refused > 3000
    with pytest.raises(ValueError, match="ASCII"):
        _columns.join_ids('é"}, {"id": "b', _SPELLINGS[0][1])
    with pytest.raises(ValueError, match="begins with a quote"):
        _columns.join_ids("a", "x")


def test_cut_ids_cuts_a_line_as_the_python_steps_cut_it(monkeypatch):
    """Lines whose chunks are the bodies above (ids alone, ids and texts, refused in every way), in
    either spelling, around them heads and tails with escapes, a second ``contexts``, non-ASCII text
    and a chunks' closing cut off: where the C cut answers, the Python steps give the same cut; where
    it leaves the line to them (None), they decide."""
    rng = random.Random(8)
    heads = ['{"id": "q", "question": "w", ', '{"id":"q","question":"w",', '{"question": "é\\"", ',
             '{"a": "\\"", ', '{"metadata": {', '{"x": "\u2028", ', '{"q": "\\\\", ', '[', '']
    tails = ['}', ', "relevant": {"d1": 1}}', ', "contexts": []}', ', "tags": ["é"]}', '']
    lines = []
    for body, between, middle in _bodies(30000, 9):
        opening = _SPELLINGS[0][0] if between == _SPELLINGS[0][1] else _SPELLINGS[1][0]
        if rng.random() < 0.8:
            body = body.replace(middle, between)
        close = '"}]' if rng.random() < 0.95 else '"}'
        lines.append(rng.choice(heads) + opening + body + close + rng.choice(tails))
    got = [_columns.cut_ids(line) for line in lines]
    monkeypatch.setattr(record_lines, "_cut_ids", None)
    taken = left = 0
    for line, cut in zip(lines, got):
        python = record_lines._cut_chunks(line)
        if cut is not None:
            taken += python is not None
            assert record_lines._around(line, *cut, None) == python, line
        else:
            left += python is not None  # ids and texts: the Python steps' (their C split's)
    assert taken > 3000 and left > 1000
    with pytest.raises(TypeError):
        _columns.cut_ids(b"{}")


def test_plain_labels_takes_only_what_the_python_checks_take():
    """Labels and grades right and wrong in every way the Python checks of a record look for (a
    label empty, with a space at an end, a control character, DEL, not ASCII, not a str; a grade
    negative, past the largest, a bool, a float, past 64 bits): where the C check takes them, the
    Python checks take them; it leaves to them only labels that are not ASCII."""
    from ragbridge.formats.plain_records import good_ids
    from ragbridge.schema import MAX_GRADE

    class Label(str):
        pass

    keys = ["d1", "a b", "x/y#2", " d", "d ", "", "\t", "a\x7fb", "é", "\u2028", Label("d9"), "~", "q" * 40]
    grades = [0, 1, 3, MAX_GRADE, MAX_GRADE + 1, -1, True, 1.0, 2**70, -(2**70)]
    rng = random.Random(12)
    taken = left = 0
    for _ in range(20000):
        pool = keys[:3] if rng.random() < 0.5 else keys
        relevant = {rng.choice(pool): rng.choice(grades[:4] if rng.random() < 0.5 else grades)
                    for _ in range(rng.randint(1, 5))}
        values = relevant.values()
        python = (set(map(type, values)) == {int} and min(values) >= 0 and max(values) <= MAX_GRADE
                  and good_ids(list(relevant)))
        got = _columns.plain_labels(relevant, MAX_GRADE)
        assert got in (True, None)
        if got:
            taken += 1
            assert python, relevant
        elif python:
            left += 1
            assert not all(map(str.isascii, relevant)), relevant
    assert taken > 5000
    assert _columns.plain_labels([], MAX_GRADE) is None
    with pytest.raises(TypeError):
        _columns.plain_labels({}, "3")


def test_rank_ids_ranks_as_the_python_version_ranks():
    """Chunk ids joined by line breaks, with repeats (next to each other or not), and labels among
    them, beside them (a prefix, a longer id, another case's id), not ASCII or empty: the same count,
    repeats and ranks (with repeats dropped) as the Python version; a str not ASCII is left to it."""
    rng = random.Random(6)
    pool = ["d1", "d2", "d10", "d", "x y", "a#1", "a#10", "~", "d01", "é"]
    seen_repeats = seen_ranked = 0
    for _ in range(20000):
        ids = [rng.choice(pool[:9]) + (str(rng.randint(0, 300)) if rng.random() < 0.6 else "")
               for _ in range(rng.randint(1, 60))]
        joined = "\n".join(ids)
        labels = rng.sample(ids, rng.randint(0, min(3, len(ids)))) + rng.sample(pool, rng.randint(0, 4))
        got = _columns.rank_ids(joined, labels)
        assert got == _ranked_ids(joined, labels), (joined, labels)
        seen_repeats += got[1] > 0
        seen_ranked += any(got[2])
    assert seen_repeats > 1000 and seen_ranked > 1000
    assert _columns.rank_ids("", ["d1"]) == _ranked_ids("", ["d1"]) == (0, 0, [0])
    for joined in ("\n", "\n\n\n", "a\n\nb\n", "\n" * 1000):  # empty ids: not a column's, still right
        assert _columns.rank_ids(joined, ["", "a"]) == _ranked_ids(joined, ["", "a"])
    assert _columns.rank_ids("é\nd1", ["d1"]) is None
    with pytest.raises(TypeError):
        _columns.rank_ids("d1", ["d1", 2])


def test_split_pairs_takes_ascii_text_alone():
    with pytest.raises(ValueError, match="ASCII"):
        _columns.split_pairs('é", "text": "b', *_SPELLINGS[0][1:])
    with pytest.raises(ValueError, match="begin with a quote"):
        _columns.split_pairs("a", "x", "y")


def test_interleave_joins_as_the_python_expression_joins():
    rng = random.Random(4)
    alphabet = ["a", "b", " ", "é", "\u2028", "\U0001F600", "\ud800", '"', "\\", ""]
    for _ in range(3000):
        k = rng.randint(0, 5)
        ids = ["".join(rng.choices(alphabet, k=rng.randint(0, 4))) for _ in range(k)]
        texts = ["".join(rng.choices(alphabet, k=rng.randint(0, 4))) for _ in range(k)]
        middle, between = rng.choice([('","text":"', '"},{"id":"'), ("é", "\U0001F600"), ("", "")])
        assert _columns.interleave(ids, texts, middle, between) == _joined_pairs(ids, texts, middle, between)
    with pytest.raises(ValueError):
        _columns.interleave(["a"], [], "m", "b")
    with pytest.raises(TypeError):
        _columns.interleave(["a"], [1], "m", "b")


def _ranking_lines(n: int, seed: int) -> list[str]:
    """Lines of the ranking fields, in either spelling (or both mixed), with heads, chunk bodies (those
    above) and labels right and wrong in every way `plain_line` looks for."""
    rng = random.Random(seed)
    ids = ["q1", "q 2", " q", "q ", "", 'q\\"', "é", "q\x7f", "\\u0041"]
    questions = ["w", "", "a b, c: d", 'say \\"x\\"', "tab\\t", "é", "}", '"contexts": [']
    labels = ["d1", "a", "b c", " a", "a ", "", "é", 'q\\"t', "contexts", "d1"]
    grades = ["0", "1", "3", "01", "-1", "1.0", "99", "true", "2 ", "1e0"]
    lines = []
    for body, between, middle in _bodies(n, seed):
        if rng.random() < 0.9:
            body = body.replace(middle, between)
        spelling = 0 if between == _SPELLINGS[0][1] else 1
        colon, comma = (": ", ", ") if spelling == 0 else (":", ",")
        if rng.random() < 0.05:  # the other spelling's colons or commas here and there
            colon = rng.choice([": ", ":"])
        clean = rng.random() < 0.6
        cid = "q" + str(rng.randrange(100)) if clean else rng.choice(ids)
        question = "question" if clean else rng.choice(questions)
        pairs = [f'"{rng.choice(labels[:2] if clean else labels)}"{colon}'
                 f'{rng.choice(grades[:3] if clean else grades)}' for _ in range(rng.randint(0, 4))]
        relevant = "{" + comma.join(pairs) + "}"
        labelled = f'{comma}"relevant"{colon}{relevant}'
        tail = rng.choice([labelled + "}", "}", labelled, labelled + "} ", f'{comma}"tags"{colon}[]}}'])
        if clean and rng.random() < 0.7:
            tail = labelled + "}" if pairs else "}"
        head = f'{{"id"{colon}"{cid}"{comma}"question"{colon}"{question}"{comma}'
        lines.append(head + _SPELLINGS[spelling][0].replace('"contexts": ', f'"contexts"{colon}')
                     .replace('"contexts":', f'"contexts"{colon}') + body + '"}]' + tail)
    return lines


def _python_reading(line: str):
    try:
        return record_lines.parse_record_line(line)
    except ValueError as error:  # a `DatasetError` among them
        return type(error)


def test_plain_line_reads_a_line_as_the_python_steps_read_it(monkeypatch):
    """Lines of the ranking fields (ids, questions, chunks and labels right and wrong in every way: a
    space at an end, empty, escapes, non-ASCII, DEL, a label twice, grades out of range or not written
    as a JSON integer, a tail cut off or with a key after it, spellings mixed): where the C reading
    answers, the Python steps give the same record, keys in the same order, and the same chunk ids;
    where it leaves the line to them (None), they decide (and take the plain ones all the same)."""
    lines = _ranking_lines(30000, 11) + ['{"id": "q", "question": "w", "contexts": [{"id": "a"}], '
                                         '"relevant": {"contexts": 1}}']
    got = [_columns.plain_line(line, MAX_GRADE) for line in lines]
    monkeypatch.setattr(record_lines, "_plain_line", None)
    taken = left = 0
    for line, answer in zip(lines, got):
        python = _python_reading(line)
        if answer is None:
            left += 1
            continue
        taken += 1
        record, joined = answer
        if type(python) is ColumnRecord:
            assert (list(record.items()), joined, None) == (list(python.record.items()), python.chunk_ids,
                                                            python.texts), line
        else:  # a label named "contexts": parsed whole, the same record
            assert list(with_chunks(record, joined.split("\n")).items()) == list(python.items()), line
    assert taken > 1000 and left > 10000
    with pytest.raises(TypeError):
        _columns.plain_line(b"{}", MAX_GRADE)


def test_ids_line_writes_the_canonical_line_record_line_writes(monkeypatch):
    """The records read above, and records it leaves to the Python writer (an answer, a quote or a
    backslash or a non-ASCII character in a string, labels empty, a grade that is a bool, keys in
    another order): where `ids_line` answers, the line is `record_line`'s byte for byte."""
    taken = []
    for line in _ranking_lines(20000, 12):
        answer = _columns.plain_line(line, MAX_GRADE)
        if answer is not None:
            taken.append(answer)
    others = [({"id": "q", "question": "w", "answer": "a"}, "d1"), ({"id": "q", "question": 'a "b"'}, "d1"),
              ({"id": "q", "question": "a\\b"}, "d1"), ({"id": "é", "question": "w"}, "d1"),
              ({"id": "q", "question": "w"}, "é\nd1"), ({"id": "q", "question": "w", "relevant": {}}, "d1"),
              ({"id": "q", "question": "w", "relevant": {"d1": True}}, "d1"),
              ({"question": "w", "id": "q"}, "d1"),
              ({"id": "q", "question": "w", "relevant": {"d\x00": 1}}, "d1"),
              ({"id": "q", "question": "w", "relevant": {"d1": 2 ** 70}}, "d1"),
              ({"id": "q", "question": "w",
                "relevant": {"d1": -3, "d2": 10 ** 15, "d3": -2 ** 63, "d4": 2 ** 63 - 1, "d5": 0}},
               "d1\nd2")]
    written = [_columns.ids_line(record, joined) for record, joined in taken + others]
    monkeypatch.setattr(plain_records, "_ids_line", None)
    for (record, joined), line in zip(taken + others, written):
        if line is not None:
            assert line == plain_records.record_line(record, joined), (record, joined)
    assert None not in written[:len(taken)] and len(taken) > 1000
    assert written[len(taken):] == [None] * 10 + [written[-1]] and written[-1] is not None


def test_a_line_as_pandas_writes_it_slashes_escaped_is_read_as_its_value_on_the_fast_path(tmp_path):
    """pandas' to_json writes every "/" as "\\/" (ids are paths): such a line is read on the C path as
    the same record as the line json.dumps writes; a backslash that escapes anything else leaves
    the line to the whole parse, with the same value as json.loads."""
    import json

    import pandas as pd

    rows = [{"id": f"q/{i}", "question": f"How do I fix issue {i}?",
             "contexts": [{"id": f"kb/billing/doc{j}.md#c{j % 7}"} for j in range(i, i + 30)],
             "relevant": {f"kb/billing/doc{i + 3}.md#c{(i + 3) % 7}": 1 + i % 3}} for i in range(200)]
    pd.DataFrame(rows).to_json(tmp_path / "p.jsonl", orient="records", lines=True)
    written = (tmp_path / "p.jsonl").read_text(encoding="utf-8").splitlines()
    assert all("\\/" in line for line in written)
    for line, row in zip(written, rows):
        got = record_lines.parse_record_line(line)
        plain = record_lines.parse_record_line(json.dumps(row))
        assert type(got) is ColumnRecord and got == plain
    for line in ['{"id": "a\\\\/b", "question": "q", "contexts": [{"id": "x\\/y"}]}',
                 '{"id": "a\\/b", "question": "q\\n", "contexts": [{"id": "x\\/y"}]}']:
        got = record_lines.parse_record_line(line)
        assert type(got) is not ColumnRecord and got == json.loads(line)
