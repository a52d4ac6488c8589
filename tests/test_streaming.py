"""Runs in batches: the same scores as one batch, a kill loses at most the unflushed scores, the
light record path agrees with the normalising one, and TREC files read as trec_eval ranks them."""

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ragbridge import load_cases
from ragbridge.formats import write_cases
import pydantic_core

from ragbridge.formats.files import DatasetError, parse_json
from ragbridge.formats.batches import SeenCaseIds, fingerprint
from ragbridge.formats.plain_records import ColumnRecord, case_record, plain_record, record_line, with_chunks
from ragbridge.formats.record_lines import parse_record_line
from ragbridge.formats.source import open_cases
from ragbridge.native import ranking
from ragbridge.run import evaluate
from ragbridge.run.folder import read_scores
from ragbridge.schema import Case

METRICS = ["recall@10", "precision@10", "hit@10", "mrr", "ndcg@10", "map"]


def _generated(path: Path, n: int, docs: int = 30, seed: int = 7) -> Path:
    rng = random.Random(seed)
    with open(path, "w") as f:
        for q in range(n):
            ids = [f"d{j}" for j in rng.sample(range(5 * docs), docs)]
            rel = {d: rng.randint(0, 3) for d in rng.sample(ids + ["missing"], rng.randint(0, 6))}
            chunks = [{"id": d} for d in ids]
            if q % 7 == 0:  # some records take the normalising path
                chunks[0] = {"id": chunks[0]["id"], "text": "t", "score": 1, "source": "doc"}
            if q % 11 == 0:
                chunks.append({"id": ids[0]})  # a repeated chunk id
            rec = {"id": f"q{q}", "question": f"question {q}", "contexts": chunks, "relevant": rel}
            if q % 5 == 0:
                rec["tags"] = ["five"]
            f.write(json.dumps(rec) + "\n")
    return path


def _values(run_dir: Path) -> dict:
    scores, bad = read_scores(run_dir / "scores.jsonl")
    assert bad == 0
    return {s.key: (s.value, s.reason) for s in scores}


def test_batches_score_exactly_what_one_batch_scores(tmp_path):
    data = _generated(tmp_path / "cases.jsonl", 1500)
    with open_cases(data, batch_size=100_000) as whole:
        one = evaluate(whole, metrics=METRICS, out=tmp_path / "one")
    with open_cases(data, batch_size=128, near=tmp_path) as source:
        assert source.n_cases == 1500 and source.fingerprint == whole.fingerprint
        many = evaluate(source, metrics=METRICS, out=tmp_path / "many")
    assert _values(tmp_path / "many") == _values(tmp_path / "one")
    assert len(_values(tmp_path / "one")) == 1500 * len(METRICS)
    assert many.manifest.counts == one.manifest.counts
    assert many.summary().round(12).equals(one.summary().round(12))
    # the in-memory path over Case objects gives the same values as the record path
    cases = load_cases(data)
    direct = ranking.evaluate(cases, METRICS)
    got = _values(tmp_path / "many")
    for m in METRICS:
        for case, v in zip(cases, direct[m]):
            value = got[(case.id, m, "native")][0]
            assert (value is None and v != v) or value == pytest.approx(v, abs=0)
    # the folder's cases.jsonl is the canonical copy: it reads back as the same cases
    assert fingerprint(load_cases(tmp_path / "many" / "cases.jsonl")) == source.fingerprint


def test_the_light_record_is_the_canonical_record_of_the_case(tmp_path):
    data = _generated(tmp_path / "cases.jsonl", 300)
    light = 0
    for line in data.read_text().splitlines():
        raw = json.loads(line)
        rec = plain_record(raw)
        if rec is not None:
            light += 1
            assert rec == case_record(Case.model_validate(raw))
    assert light > 200
    assert fingerprint(load_cases(data)) == open_cases(data).fingerprint


def _lines_to_read() -> list[str]:
    """JSONL lines whose chunks are ids alone, or look it: each spelling of the list, ids that need
    escaping or are blank, a second or nested ``contexts``, escapes before and after the chunks,
    keys in any order, fields of the wrong type, broken JSON."""
    rng = random.Random(11)
    ids_pool = ["d1", "d2", "é", "a b", "x/y", "\u2028", "", " ", "\t", 'q"t', "b\\s", "d1", "\u0064"]
    middles = ['"contexts": {c}', '"contexts":{c}', '"contexts" : {c}', '"context\\u0073": {c}',
               '"contexts": {c}, "contexts": []', '"contexts": [], "contexts": {c}',
               '"contexts": {c}, "metadata": {{"contexts": [{{"id": "m"}}]}}',
               '"metadata": {{"contexts": {c}}}', '"contexts": {c}, "context\\u0073": []',
               '"contexts": [], "metadata": {{"contexts": {c}}}', '"x \\"contexts": {c}',
               '"context\\u0073": [], "metadata": {{"contexts": {c}}}']
    others = ['"relevant": {"d1": 2}', '"relevant": {"d1": "2"}', '"relevant": {"\\u00e9": 1}',
              '"tags": ["t"]', '"answer": "a\\"b"', '"answer": 3', '"metadata": {"k": [1, {"a": null}]}',
              '"reference": "r"', '"answerable": false', '"extra": 1', '"relevant": {}']
    heads = ['"id": "q{n}", "question": "what"', '"question": "w\\nx", "id": "q{n}"', '"id": "q{n}"',
             '"id": "", "question": "w"', '"id": "q{n}", "question": "say \\"contexts\\": [{{"']
    lines = [
        "{" + sep.join([heads[0].format(n=0).replace(": ", colon), middle.replace(": ", colon).format(
            c="[" + sep.join("{" + f'"id"{colon}"d{i}"' + "}" for i in range(3)) + "]")]) + "}"
        for middle in middles for sep, colon in [(", ", ": "), (",", ":")]]
    for n in range(800):
        clean = n % 2 == 0  # half the lines as JSON writers write them, with harmless ids
        ids = [rng.choice(ids_pool[:5] if clean or rng.random() < 0.8 else ids_pool) for _ in range(4)]
        sep, colon = rng.choice([(", ", ": "), (",", ":")]) if clean else (rng.choice([", ", ","]),
                                                                            rng.choice([": ", ":"]))
        chunks = "[" + sep.join("{" + f'"id"{colon}"{i}"' + "}" for i in ids) + "]"
        head = heads[0] if clean else rng.choice(heads)
        middle = f'"contexts"{colon}{{c}}' if clean else rng.choice(middles)
        parts = [head.format(n=n).replace(": ", colon), middle.format(c=chunks)]
        parts += rng.sample(others[:1] + others[3:] if clean else others, rng.randint(0, 3))
        if not clean and rng.random() < 0.3:
            rng.shuffle(parts)
        line = "{" + sep.join(parts) + "}"
        lines.append(line[:-rng.randint(1, 5)] if not clean and rng.random() < 0.05 else line)
    return lines


def _lines_with_texts() -> list[str]:
    """JSONL lines whose chunks are ids and texts, or look it: texts with escapes (quotes,
    backslashes, line breaks, surrogate pairs, a lone surrogate), the separators and the closing
    brackets inside a text, texts written with and without ``ensure_ascii``, raw control characters
    and unescaped quotes (not JSON), empty texts, chunks without text or with a text twice, keys in
    another order, an extra key, a text that is not a string, broken JSON."""
    rng = random.Random(12)
    texts = ["a", "b c", "é", "\u2028", 'q"t', "b\\s", "x\\", "\\", "line\nbreak", "\t", '"}]', '"}]}',
             '", "text": "', '"},{"id":"', '"}, {"id": "d9', "\U0001F600", "\ud800", "\x00", "\x7f",
             " lead", "trail ", "", "e\u0301", "\\\"", "\\u0041", "long " * 150 + "\n\"end"]
    ids_pool = ["d1", "d2", "d3", "é", "a b", "", " x", "x ", " ", 'q"t', "b\\s", "e\u0301", "\x7f"]
    broken = ['"a\tb"', '"a"b"', '"a\\"', '"\\q"', "3", "null", '"a\\u12"']
    lines = []
    for n in range(1500):
        clean = n % 2 == 0  # half the lines as JSON writers write them, with harmless ids
        sep, colon = rng.choice([(", ", ": "), (",", ":")])
        chunks = []
        for _ in range(rng.randint(1, 5)):
            cid = rng.choice(ids_pool[:3] if clean else ids_pool)
            text = rng.choice(texts[:3] if clean and rng.random() < 0.7 else texts)
            enc = json.dumps(text, ensure_ascii=rng.random() < 0.5 or text == "\ud800")
            if not clean and rng.random() < 0.08:
                enc = rng.choice(broken)
            fields = [f'"id"{colon}{json.dumps(cid)}', f'"text"{colon}{enc}']
            roll = 1.0 if clean else rng.random()
            if roll < 0.05:
                fields = fields[:1]  # no text
            elif roll < 0.1:
                fields.reverse()
            elif roll < 0.14:
                fields.append(f'"text"{colon}"again"')
            elif roll < 0.18:
                fields.append(f'"source"{colon}"doc"')
            chunks.append("{" + sep.join(fields) + "}")
        question = json.dumps(rng.choice(["what", 'say "contexts": [{"id": "x"}]', "café\n", "a\\"]),
                              ensure_ascii=rng.random() < 0.5)
        parts = [f'"id"{colon}"q{n}"', f'"question"{colon}{question}',
                 f'"contexts"{colon}[' + sep.join(chunks) + "]"]
        if rng.random() < 0.5:
            parts.append(f'"relevant"{colon}{{"d1"{colon}1}}')
        if not clean and rng.random() < 0.2:
            parts.append(rng.choice([f'"metadata"{colon}{{"contexts"{colon}[]}}', f'"tags"{colon}["\\t"]',
                                     f'"answer"{colon}"a\\\\"', f'"context\\u0073"{colon}[]']))
        if not clean and rng.random() < 0.3:
            rng.shuffle(parts)
        line = "{" + sep.join(parts) + "}"
        lines.append(line[:-rng.randint(1, 5)] if not clean and rng.random() < 0.05 else line)
    return lines


def _no_key_twice(pairs):
    keys = [k for k, _ in pairs]
    if len(set(keys)) < len(keys):
        raise DatasetError("a key given twice")
    return dict(pairs)


def _full_parse(text: str):
    """The line as a JSON parser reads it (or the type of its error, a syntax error first), but a key
    given twice in one object is an error."""
    try:
        value = pydantic_core.from_json(text)
    except ValueError:
        try:
            return parse_json(text)
        except (ValueError, DatasetError) as exc:
            return type(exc)
    try:
        json.loads(text, object_pairs_hook=_no_key_twice)
    except DatasetError as exc:
        return type(exc)
    return value


@pytest.fixture(params=["compiled", "python"])
def column_steps(request, monkeypatch):
    """The chunk columns cut and joined by the compiled module the package builds, or by the same
    steps written in Python (what a package built without a C compiler uses)."""
    from ragbridge.formats import plain_records as plain, record_lines

    if request.param == "python":
        monkeypatch.setattr(record_lines, "_split_pairs", None)
        monkeypatch.setattr(record_lines, "_join_ids", None)
        monkeypatch.setattr(record_lines, "_cut_ids", None)
        monkeypatch.setattr(plain, "_interleave", plain._joined_pairs)
        monkeypatch.setattr(plain, "_rank_ids", None)
        monkeypatch.setattr(plain, "_plain_labels", None)
    else:
        assert record_lines._split_pairs is not None and plain._interleave is not plain._joined_pairs
        assert record_lines._join_ids is not None and plain._rank_ids is not None
        assert record_lines._cut_ids is not None and plain._plain_labels is not None
    return request.param


@pytest.mark.parametrize("lines", [_lines_to_read, _lines_with_texts])
def test_a_line_of_chunks_reads_as_the_parsed_line_reads(lines, column_steps):
    """A line cut into chunk columns gives the record and the canonical line that parsing it whole
    gives; a line it does not cut reads as parsing it whole reads (or fails as that fails)."""
    fast = 0
    for text in lines():
        expected = _full_parse(text)
        try:
            got = parse_record_line(text)
        except (ValueError, DatasetError) as exc:
            assert expected is type(exc), text
            continue
        if type(got) is ColumnRecord:
            fast += 1
            record = plain_record(expected)
            assert record is not None and with_chunks(*got) == record, text
            assert record_line(*got) == record_line(record) == pydantic_core.to_json(record), text
            again = parse_record_line(record_line(record).decode())  # the run folder's cases.jsonl
            again = with_chunks(*again) if type(again) is ColumnRecord else plain_record(again)
            assert again == record, text
        else:
            assert got == expected, text
    assert fast > 200


def _chunk_shapes(n: int) -> list[dict]:
    """Records whose chunks all have one shape (id with any of text, score, source, in canonical
    order or not), with values the light path must take or leave: empty texts, integer scores,
    empty and untidy sources, ids that are not as the id rule leaves them."""
    rng = random.Random(5)
    values = {"id": ["d1", "d2", "é", " x", "", "e\u0301"], "text": ["a", "", "b c", "\n"],
              "score": [0.5, 1, 2.0, -3.25], "source": ["doc", "", " doc", "doc#1", "e\u0301"]}
    out = []
    for q in range(n):
        keys = ["id"] + [k for k in ("text", "score", "source") if rng.random() < 0.5]
        if rng.random() < 0.2:
            rng.shuffle(keys)
        pick = (lambda k: rng.choice(values[k][:1])) if q % 2 == 0 else (lambda k: rng.choice(values[k]))
        chunks = [{k: pick(k) if k != "id" else f"d{i}" if q % 2 == 0 else pick(k) for k in keys}
                  for i in range(rng.randint(1, 6))]
        out.append({"id": f"q{q}", "question": "what", "contexts": chunks})
    return out


def test_a_plain_record_is_the_canonical_record_of_its_case_byte_for_byte():
    """`plain_record` (chunks of one shape checked a column at a time, others one by one) gives what
    the normalising path gives, in the same key order, or leaves the record to it."""
    light = 0
    raws = _chunk_shapes(600) + [v for v in map(_full_parse, _lines_with_texts()) if type(v) is dict]
    for raw in raws:
        record = plain_record(raw)
        if record is None:
            continue
        light += 1
        case = Case.model_validate(raw)
        assert pydantic_core.to_json(record) == pydantic_core.to_json(case_record(case)), raw
    assert light > 400


@pytest.mark.parametrize("repeats", [[(249, 9)], [(40, 3), (41, 41)], [(120, 119)], [(5, 4), (299, 0)]])
def test_a_repeated_case_id_is_reported_as_the_whole_file_reader_reports_it(tmp_path, repeats):
    """Read in batches, the ids of earlier batches are kept as digests: the error is the same."""
    data = _generated(tmp_path / "cases.jsonl", 300)
    lines = data.read_text().splitlines()
    for at, of in repeats:  # line index ``at`` takes the id of line index ``of``
        rec = json.loads(lines[at])
        rec["id"] = json.loads(lines[of])["id"]
        lines[at] = json.dumps(rec)
    data.write_text("\n".join(lines) + "\n")
    with pytest.raises(DatasetError) as whole:
        load_cases(data)
    with pytest.raises(DatasetError) as batched:
        open_cases(data, batch_size=7, near=tmp_path)
    assert "duplicate case id" in str(whole.value) and str(batched.value) == str(whole.value)


@pytest.mark.slow
def test_a_run_killed_mid_way_loses_at_most_unflushed_scores_and_resumes_each_score_once(tmp_path):
    data = _generated(tmp_path / "cases.jsonl", 30_000, docs=20)
    out = tmp_path / "run"
    args = [sys.executable, "-c", "from ragbridge.commands import run_cli; run_cli()", "run", str(data),
            "--out", str(out), "--no-progress", "--batch-size", "500", *sum((["-m", m] for m in METRICS), [])]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    scores = out / "scores.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if scores.exists() and scores.stat().st_size > 0:
            break
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    kept = len(read_scores(scores)[0]) if scores.exists() else 0
    res = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    lines = [json.loads(line) for line in scores.read_text().splitlines() if line.strip().endswith("}")]
    keys = [(s["case_id"], s["metric"]) for s in lines]
    assert len(keys) == len(set(keys)) == 30_000 * len(METRICS)
    manifest = json.loads((out / "run.json").read_text())
    assert manifest["status"] == "complete" and manifest["counts"]["scores"] == 30_000 * len(METRICS)
    assert manifest["counts"].get("resumed_from", 0) == kept


# --------------------------------------------------------------------------------------------
# TREC run and qrels files


def _trec_files(tmp_path: Path, n: int = 200, seed: int = 3) -> tuple[Path, Path]:
    rng = random.Random(seed)
    run, qrels = tmp_path / "run.trec", tmp_path / "qrels.txt"
    with open(run, "w") as fr, open(qrels, "w") as fq:
        for q in range(n):
            docs = [f"d{j:03d}" for j in rng.sample(range(200), 40)]
            for rank, d in enumerate(docs, start=1):
                score = float(rng.randint(0, 6))  # many ties: trec_eval's order decides
                fr.write(f"{q} Q0 {d} {rank} {score} tag\n")
            for d in rng.sample(docs, 5) + [f"x{q}"]:
                fq.write(f"{q} 0 {d} {rng.randint(0, 3)}\n")
    return run, qrels


def test_a_trec_run_with_ties_scores_exactly_as_pytrec_eval(tmp_path):
    pytrec_eval = pytest.importorskip("pytrec_eval")
    run, qrels = _trec_files(tmp_path)
    with open(qrels) as f:
        q = pytrec_eval.parse_qrel(f)
    with open(run) as f:
        r = pytrec_eval.parse_run(f)
    names = {"recall@10": "recall_10", "precision@10": "P_10", "mrr": "recip_rank",
             "ndcg@10": "ndcg_cut_10", "map": "map"}
    theirs = pytrec_eval.RelevanceEvaluator(q, set(names.values())).evaluate(r)
    cases = load_cases(run, "trec", qrels=qrels)
    ours = ranking.evaluate(cases, list(names))
    worst = max(abs(ours[m][i] - theirs[c.id][t]) for m, t in names.items() for i, c in enumerate(cases)
                if c.id in theirs)
    assert worst < 1e-12
    # and through the command line, the path users run
    cli = [sys.executable, "-c", "from ragbridge.commands import run_cli; run_cli()"]
    res = subprocess.run([*cli, "run", str(run), "--qrels", str(qrels), "--out", str(tmp_path / "out"),
                          "--no-progress", *sum((["-m", m] for m in names), [])],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    for (cid, metric, _), (value, _) in _values(tmp_path / "out").items():
        assert value == pytest.approx(theirs[cid][names[metric]], abs=1e-12)


def test_trec_ranks_ties_by_docno_descending(tmp_path):
    run = tmp_path / "r.trec"
    run.write_text("1 Q0 a 1 0.5 t\n1 Q0 c 2 0.5 t\n1 Q0 b 3 0.5 t\n1 Q0 z 4 0.9 t\n")
    (tmp_path / "r.qrels").write_text("1 0 a 1\n")
    case, = load_cases(run)  # the suffix says trec; the qrels beside it are read
    assert [c.id for c in case.contexts] == ["z", "c", "b", "a"]
    assert case.relevant == {"a": 1}


def test_trec_round_trip(tmp_path):
    cases = [Case(id="q1", question="", contexts=[{"id": "a", "score": 3.0}, {"id": "b", "score": 1.0}],
                  relevant={"b": 2, "zz": 1}),
             Case(id="q2", question="", contexts=[{"id": "c"}, {"id": "d"}], relevant={"c": 1})]
    lost = write_cases(cases, tmp_path / "out.trec")
    assert "contexts.score" in lost  # q2's chunks have no scores: the written ones are n - position
    back = load_cases(tmp_path / "out.trec")
    assert [c.id for c in back] == ["q1", "q2"]
    assert [[ch.id for ch in c.contexts] for c in back] == [["a", "b"], ["c", "d"]]
    assert [c.relevant for c in back] == [{"b": 2, "zz": 1}, {"c": 1}]
    assert back[0].contexts[0].score == 3.0
    ours, before = ranking.evaluate(back, METRICS), ranking.evaluate(cases, METRICS)
    assert all(ours[m].tolist() == before[m].tolist() or m == "precision@10" for m in METRICS)


def test_a_read_option_the_format_does_not_take_is_an_error(tmp_path):
    data = _generated(tmp_path / "cases.jsonl", 3)
    with pytest.raises(ValueError, match="takes no --qrels"):
        load_cases(data, qrels=tmp_path / "x")
    assert os.path.exists(data)


def test_a_run_folder_from_before_the_canonical_line_fingerprint_is_refused_by_name(tmp_path):
    data = _generated(tmp_path / "cases.jsonl", 20)
    evaluate(load_cases(data), metrics=["mrr"], out=tmp_path / "run")
    manifest = json.loads((tmp_path / "run" / "run.json").read_text())
    del manifest["dataset"]["fingerprint_of"]  # as an earlier version wrote it, with its own digest
    manifest["dataset"]["fingerprint"] = "sha256:" + "0" * 64
    (tmp_path / "run" / "run.json").write_text(json.dumps(manifest))
    from ragbridge.run import RunError

    with pytest.raises(RunError, match="earlier ragbridge.*overwrite=True") as err:
        evaluate(load_cases(data), metrics=["mrr"], out=tmp_path / "run", changed_cases="refuse")
    assert "--overwrite" in err.value.cli
    # in Python the folder is updated: its cases compared one by one, each unchanged, each kept
    again = evaluate(load_cases(data), metrics=["mrr"], out=tmp_path / "run")
    assert again.manifest.dataset["fingerprint_of"] == "canonical-lines"
    assert again.manifest.counts["cases_changed"] == {"kept": 20, "changed": 0, "added": 0, "removed": 0}
    assert again.manifest.counts["resumed_from"] == 20


def test_a_native_run_prints_its_summary_without_importing_pandas(tmp_path):
    data = _generated(tmp_path / "cases.jsonl", 50)
    code = ("import atexit, sys; "
            "atexit.register(lambda: print('pandas imported:', 'pandas' in sys.modules)); "
            "from ragbridge.commands import run_cli; run_cli()")
    res = subprocess.run([sys.executable, "-c", code, "run", str(data), "--out", str(tmp_path / "run"),
                          "--metric", "mrr", "--metric", "ndcg@10", "--no-progress", "--json"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    body, flag = res.stdout.rsplit("pandas imported:", 1)
    assert flag.strip() == "False"
    summary = json.loads(body)["summary"]
    assert [(r["metric"], r["n"]) for r in summary] == [("mrr", 50), ("ndcg@10", 50)]
    from ragbridge.run.folder import load_run

    frame = load_run(tmp_path / "run").summary()  # read back: the same numbers through pandas
    overall = frame[frame["tag"] == "(all)"]["mean"]
    assert [round(r["mean"], 12) for r in summary] == [round(m, 12) for m in overall]


@pytest.mark.parametrize("spaced", [True, False])
@pytest.mark.parametrize("bad", [" x", "x ", " ", "", "\x7f", "e\u0301"])
@pytest.mark.parametrize("at", [0, 1, 2])
def test_a_chunk_id_the_id_rule_changes_is_not_cut_into_columns(bad, at, spaced):
    """An id with a space at an end, empty, not printing or not in NFC, first, inside or last among
    chunks with texts: the line goes the normalising way, which says what is wrong, never a column."""
    ids = ["d1", "d2", "d3"]
    ids[at] = bad
    record = {"id": "q", "question": "w", "contexts": [{"id": i, "text": t} for i, t in zip(ids, "abc")]}
    text = json.dumps(record, ensure_ascii=False, separators=(", ", ": ") if spaced else (",", ":"))
    assert type(parse_record_line(text)) is not ColumnRecord


def test_a_batch_read_back_from_its_bytes_is_the_batch_it_was():
    """A large golden set is checked whole, then scored from the batches it wrote (`to_bytes`): each
    case's records, canonical line, `Case`, chunk ids and texts are what they were as first read."""
    from ragbridge.formats.batches import CaseBatch, batch_from_records

    kept = []  # the lines read as plain records or columns (each has its own case id)
    for n, line in enumerate(_lines_with_texts()):
        if type(_full_parse(line)) is not dict:
            continue
        got = parse_record_line(line)
        if type(got) is ColumnRecord or plain_record(got) is not None:
            kept.append((n, got))
    batch = batch_from_records(kept)
    assert sum(type(r) is ColumnRecord and r.texts is not None for _, r in kept) > 20
    again = CaseBatch.from_bytes(batch.to_bytes())
    assert len(again) == len(batch)
    assert [again.line(i) for i in range(len(again))] == [batch.line(i) for i in range(len(batch))]
    assert list(again.chunk_texts()) == list(batch.chunk_texts())
    assert [ids for ids, _, _ in again.chunk_lists()] == [ids for ids, _, _ in batch.chunk_lists()]
    assert list(again) == list(batch)
    assert again.subset([0, 2]).records == batch.subset([0, 2]).records


def test_seen_case_ids_find_every_earlier_id_and_its_line_across_merged_runs():
    """Batches of uneven sizes fold into sorted runs that merge as they grow: every id of an earlier
    batch is found with its line, in whichever run it ended up, and no new id is taken for one seen
    (the hash bits set everywhere, so every lookup goes through the runs)."""
    rng = random.Random(7)
    seen, given, line = SeenCaseIds(), {}, 0
    seen._seen_bits = bytearray(b"\xff" * len(seen._seen_bits))
    for _ in range(60):
        for _ in range(rng.choice([1, 2, 5, 17, 40])):
            line += 1
            cid = f"case-{rng.getrandbits(40):x}-{line}"
            assert cid not in seen
            seen[cid] = line
            given[cid] = line
        seen.end_batch()
        assert sum(digests.size for digests, _ in seen._runs) == len(given)
        assert len(seen._runs) <= len(given).bit_length()
    assert all(seen[cid] == at for cid, at in given.items())
    assert "case-never-0" not in seen


def test_a_case_id_repeated_batches_later_is_reported_with_both_lines(tmp_path):
    """Read in batches of 3, the 9th line repeats the 2nd's id: the error names both lines; the same
    set without the repeat reads whole."""
    rows = [{"id": f"c{i}", "question": "q", "contexts": [{"id": "d1", "text": "t"}]} for i in range(12)]
    good = tmp_path / "good.jsonl"
    good.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert open_cases(good, near=tmp_path, batch_size=3).n_cases == 12
    rows[8]["id"] = "c1"
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(DatasetError) as err:
        open_cases(bad, near=tmp_path, batch_size=3)
    assert err.value.line == 9 and "duplicate case id 'c1' (first at line 2)" in str(err.value)


@pytest.mark.parametrize("space", ["", " ", "  ", "   ", "\t", "\n", "\r\n", " \t "])
def test_a_key_given_twice_is_found_whatever_the_space_before_its_colon(space):
    text = f'{{"id"{space}: "q", "question": "w", "id"{space}:"r"}}'
    with pytest.raises(DatasetError, match="given twice"):
        parse_json(text)
    with pytest.raises(DatasetError, match="given twice"):
        parse_record_line(text)


def test_reading_a_golden_set_gives_the_garbage_collector_back(tmp_path):
    """The collector is held off while a set is read, and on again after, also when the set is bad."""
    import gc

    good = tmp_path / "good.jsonl"
    good.write_text('{"id": "a", "question": "q"}\n')
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "question": "q"}\n{"id": "a", "question": "q"}\n')
    assert gc.isenabled()
    seen = []
    open_cases(good, near=tmp_path, progress=lambda n: seen.append(gc.isenabled())).close()
    assert seen == [False] and gc.isenabled()
    with pytest.raises(DatasetError):
        open_cases(bad, near=tmp_path)
    assert gc.isenabled()


def test_a_run_of_cases_opened_before_it_starts_when_their_reading_began(tmp_path):
    """The command line reads the golden set before the run is called: run.json's started_at is when
    that reading began, so a run's start and end span its reading too."""
    from datetime import datetime, timezone

    from conftest import EXAMPLE
    from ragbridge import evaluate, load_run
    from ragbridge.formats.source import open_cases

    before = datetime.now(timezone.utc).replace(microsecond=0)  # run.json's times are to the second
    with open_cases(EXAMPLE, near=tmp_path) as source:
        time.sleep(1.2)  # as a large set takes to read
        evaluate(source, metrics=["recall@5"], out=tmp_path / "r")
    manifest = load_run(tmp_path / "r").manifest
    started = datetime.fromisoformat(manifest.started_at)
    assert before <= started and (datetime.fromisoformat(manifest.finished_at) - started).total_seconds() >= 1
