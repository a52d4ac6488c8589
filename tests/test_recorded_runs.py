"""A run folder read back is input: a value a run never writes in ``scores.jsonl`` or ``run.json``
(a score of 50.0, "0.9", true, -1, NaN, a negative token count, a pass mark of 2...) is an error naming
the file, the line and the field, through every reader, never a number an analysis takes.

The runs are real: the support-bot golden set scored by ``ragbridge.evaluate`` (native metrics, and
the rubric judge on the stub judge with two repeats, for the judge's fields), then edited one field
at a time.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from conftest import EXAMPLE, ROOT, ragbridge_cli
import ragbridge
from ragbridge import load_run
from ragbridge.formats import DatasetError
from ragbridge.run import RunError
from ragbridge.testing import StubJudge

#: stands for the tampered value in a record, replaced by the raw JSON text of the bad value
MARK = "@@tampered@@"


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """A native run and a judged one (rubric on the stub judge, two repeats) of the support-bot set."""
    from ragbridge.judge import JudgeConfig

    tmp = tmp_path_factory.mktemp("recorded")
    ragbridge.evaluate(EXAMPLE, backends=["native"], out=tmp / "native")
    with StubJudge() as stub:
        judge = JudgeConfig(model="stub-judge", base_url=stub.base_url, cache_mode="off")
        ragbridge.evaluate(EXAMPLE, backends=["native", "rubric"], metrics=["recall@5", "faithfulness"],
                           out=tmp / "judged", judge=judge, repeats=2)
    return {"native": tmp / "native", "judged": tmp / "judged", "tmp": tmp}


def _lines(run: Path) -> list[str]:
    return (run / "scores.jsonl").read_text(encoding="utf-8").splitlines()


def _line_of(run: Path, backend: str, repeat: int = 0) -> int:
    """The number (from 1) of the first line of ``backend`` (and repeat) in the run's scores."""
    for n, line in enumerate(_lines(run), start=1):
        record = json.loads(line)
        if record["backend"] == backend and record.get("repeat", 0) == repeat:
            return n
    raise AssertionError(f"no {backend} score")


def tampered(src: Path, dst: Path, line: int, field: str, raw: str) -> Path:
    """A copy of run folder ``src`` at ``dst`` whose score at ``line`` has ``field`` set to the JSON
    text ``raw`` (added when the line has no such field)."""
    shutil.copytree(src, dst)
    lines = _lines(dst)
    record = json.loads(lines[line - 1])
    record[field] = MARK
    lines[line - 1] = json.dumps(record, ensure_ascii=False).replace(json.dumps(MARK), raw)
    (dst / "scores.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return dst


def tampered_manifest(src: Path, dst: Path, field: str, raw: str) -> int:
    """A copy of run folder ``src`` whose run.json has ``field`` (dotted) set to the JSON text ``raw``;
    returns the line of run.json that holds it."""
    shutil.copytree(src, dst)
    manifest = json.loads((dst / "run.json").read_text(encoding="utf-8"))
    at = manifest
    *parents, last = field.split(".")
    for key in parents:
        at = at[key]
    at[last] = MARK
    text = json.dumps(manifest, indent=2)
    line = text[:text.index(json.dumps(MARK))].count("\n") + 1
    (dst / "run.json").write_text(text.replace(json.dumps(MARK), raw), encoding="utf-8")
    return line


# (backend of the line, field, the bad value as JSON text)
BAD_SCORES = [
    ("native", "value", "50.0"), ("native", "value", '"0.9"'), ("native", "value", "true"),
    ("native", "value", "-1"), ("native", "value", "NaN"), ("native", "value", "Infinity"),
    ("native", "value", "-Infinity"), ("native", "value", "1e999"), ("native", "value", "1.0000001"),
    ("native", "value", "[0.5]"), ("native", "value", '{"v": 1}'),
    ("rubric", "value", "2"), ("rubric", "value", "false"),
    ("rubric", "judge_calls", "-1"), ("rubric", "judge_calls", "1.5"), ("rubric", "judge_calls", '"2"'),
    ("rubric", "judge_calls", "true"), ("rubric", "prompt_tokens", "-1000000"),
    ("rubric", "completion_tokens", "12.5"), ("rubric", "completion_tokens", '"many"'),
    ("rubric", "repeat", "-1"), ("rubric", "repeat", '"1"'), ("rubric", "repeat", "true"),
    ("rubric", "repeat", "1.0"), ("rubric", "repeat", "1000000000"),
    ("rubric", "cost", "-0.01"), ("rubric", "cost", "NaN"), ("rubric", "cost", '"0.1"'),
    ("native", "seconds", "-1"), ("native", "seconds", "NaN"), ("native", "seconds", '"fast"'),
    ("native", "case_id", '""'), ("native", "case_id", '" billing-refund-window"'),
    ("native", "case_id", '"billing\\u001b[31m"'), ("native", "case_id", '"cafe\\u0301"'),
    ("native", "case_id", "5"),
    ("native", "metric", '""'), ("native", "metric", '"recall@5\\u202e"'), ("native", "backend", "null"),
    ("rubric", "passed", '"yes"'), ("rubric", "passed", "1"), ("rubric", "not_run", "1"),
    ("rubric", "cached", '"no"'), ("rubric", "reason", "5"), ("rubric", "error", "[]"),
    ("native", "values", "[1]"),
    ("rubric", "repeats", '{"n": 2, "values": [50.0, 0.5], "passed": [true, false], "sd": 0.1}'),
    ("rubric", "repeats", '{"n": 2, "values": [0.5], "passed": [true], "sd": null}'),
    ("rubric", "evidence", '{"claims": [{"text": "x", "verdict": "TRUE"}]}'),
]


@pytest.mark.parametrize("backend,field,raw", BAD_SCORES, ids=[f"{f}={r}" for _, f, r in BAD_SCORES])
def test_a_score_a_run_never_writes_is_an_error_naming_file_line_and_field(runs, tmp_path, backend, field,
                                                                          raw):
    """Each bad value, through the Python API's readers (``Run.scores``, ``to_frame``, the repeats):
    a DatasetError naming scores.jsonl, the line and the field; before, most were used as they stood
    (50.0, "0.9" and true as numbers) and NaN became an undefined score."""
    src = runs["judged"]
    line = _line_of(src, backend)
    run_dir = tampered(src, tmp_path / "run", line, field, raw)
    for read in (lambda r: r.scores, lambda r: r.to_frame(), lambda r: r.repeat_scores):
        with pytest.raises(DatasetError) as caught:
            read(load_run(run_dir))
        error = caught.value
        assert error.path == str(run_dir / "scores.jsonl") and error.line == line, str(error)
        assert error.field == field or (error.field or "").startswith(field + "."), str(error)


def test_a_key_given_twice_in_a_score_is_an_error(runs, tmp_path):
    src = runs["native"]
    run_dir = tmp_path / "run"
    shutil.copytree(src, run_dir)
    lines = _lines(run_dir)
    lines[2] = lines[2][:-1] + ',"value":0.0}'
    (run_dir / "scores.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(DatasetError, match="key 'value' is given twice") as caught:
        load_run(run_dir).scores
    assert caught.value.line == 3


def test_a_last_line_cut_short_by_a_kill_is_dropped_but_a_bad_line_before_others_is_an_error(runs, tmp_path):
    src = runs["native"]
    lines = _lines(src)
    cut = tmp_path / "cut"
    shutil.copytree(src, cut)
    (cut / "scores.jsonl").write_text("\n".join(lines) + "\n" + lines[5][:37], encoding="utf-8")
    assert len(load_run(cut).scores) == len(lines)
    middle = tmp_path / "middle"
    shutil.copytree(src, middle)
    (middle / "scores.jsonl").write_text("\n".join(lines[:5] + [lines[5][:37]] + lines[6:]) + "\n",
                                         encoding="utf-8")
    with pytest.raises(DatasetError, match="not valid JSON") as caught:
        load_run(middle).scores
    assert caught.value.line == 6  # before, the line was skipped: a score lost without a word


# (field of run.json, the bad value as JSON text)
BAD_MANIFESTS = [
    ("pass_marks.rubric.faithfulness", "50.0"), ("pass_marks.rubric.faithfulness", '"0.5"'),
    ("pass_marks.rubric.faithfulness", "true"), ("pass_marks.rubric.faithfulness", "NaN"),
    ("pass_marks.rubric.faithfulness", "-0.1"),
    ("counts.scores", "-1"), ("counts.scores", '"106"'), ("counts.errored", "true"), ("counts.scored", "1.5"),
    ("counts.judge.calls", "-3"), ("counts.judge.prompt_tokens", "1e999"), ("counts.judge.cost", "-1.0"),
    ("counts.cost.total", '"x"'), ("counts.cost.by_backend.rubric", "NaN"),
    ("options.k", '"5"'), ("options.k", "0"), ("options.repeats", "0"), ("options.repeats", '"2"'),
    ("options.repeats", "1000000000"), ("options.pass_repeats", "3"),
    ("status", '"done"'), ("status", "null"), ("started_at", '"yesterday"'), ("finished_at", "5"),
    ("dataset.n_cases", "-1"), ("dataset.n_cases", '"53"'), ("dataset.fingerprint", "7"),
    ("timing.wall_seconds.rubric", "-1"), ("metrics.native", '"recall@5"'), ("backends", "[1]"),
]


@pytest.mark.parametrize("field,raw", BAD_MANIFESTS, ids=[f"{f}={r}" for f, r in BAD_MANIFESTS])
def test_a_manifest_a_run_never_writes_is_an_error_naming_file_line_and_field(runs, tmp_path, field, raw):
    """Each bad field of run.json: `load_run` refuses it, naming run.json, the line of the field and
    the field; before, pass marks and counts were taken as they stood (a pass mark of 50 failed every
    case, "0.5" was a number)."""
    run_dir = tmp_path / "run"
    line = tampered_manifest(runs["judged"], run_dir, field, raw)
    with pytest.raises(RunError) as caught:
        load_run(run_dir)
    assert f"{run_dir / 'run.json'}:{line}: field '{field}'" in str(caught.value)


def test_the_runs_as_written_are_read_back_whole(runs):
    for name in ("native", "judged"):
        run = load_run(runs[name])
        assert run.complete and len(run.repeat_scores) == len(_lines(runs[name]))


def test_a_tampered_score_cache_entry_is_a_miss(runs, tmp_path):
    """The score cache reads its entries as the run folder's scores are read: one a run never makes
    (a value of 50.0) is not reused."""
    from ragbridge.run.score_cache import ScoreCache

    score = next(s for s in load_run(runs["judged"]).repeat_scores if s.backend == "rubric")
    cache = ScoreCache(tmp_path / "c.scores.sqlite")
    cache.put("good", score, stub=True)
    cache.put("bad", score, stub=True)
    cache.commit()
    with sqlite3.connect(tmp_path / "c.scores.sqlite") as db:
        line = json.loads(score.model_dump_json())
        line["value"] = 50.0
        db.execute("UPDATE scores SET score = ? WHERE key = 'bad'", (json.dumps(line),))
    assert set(ScoreCache(tmp_path / "c.scores.sqlite").get_many(["good", "bad"])) == {"good"}


# Every command that reads a run, with a folder tampered one way (each kind of bad value through at
# least one command): exit 2, the file, line and field named, no traceback, nothing written.
GATES = ('[[gate]]\ncheck = "recall@5 >= 0.95"\n\n'
         '[[gate]]\ncheck = "faithfulness >= 0.5"\nbackend = "rubric"\n')
LABELS = ROOT / "examples" / "support-bot" / "faithfulness-labels.jsonl"

COMMANDS = [
    # (id, bad field and value, command line: RUN is the tampered run, GOOD the run as written,
    #  OUT a path nothing must be written to)
    ("gate", ("native", "value", "50.0"), ["gate", "RUN", "--config", "GATES", "--junit", "OUT"]),
    ("gate-baseline", ("rubric", "value", '"0.9"'),
     ["gate", "GOOD", "--config", "GATES", "--baseline", "RUN"]),
    ("diff", ("native", "value", "true"), ["diff", "GOOD", "RUN", "--items", "OUT"]),
    ("diff-json", ("native", "value", "-1"), ["diff", "RUN", "GOOD", "--json"]),
    ("compare", ("rubric", "value", "NaN"), ["compare", "RUN"]),
    ("compare-runs", ("rubric", "value", "Infinity"), ["compare", "GOOD", "RUN"]),
    ("validate", ("rubric", "judge_calls", "-1"), ["validate", "RUN", "--labels", "LABELS"]),
    ("calibrate", ("rubric", "prompt_tokens", '"3"'),
     ["calibrate", "RUN", "--from", "rubric", "--to", "native", "--metric", "faithfulness"]),
    ("diagnose", ("rubric", "repeat", "-1"), ["diagnose", "RUN"]),
    ("trend", ("rubric", "cost", "-0.01"), ["trend", "GOOD", "RUN"]),
    ("report", ("native", "seconds", "NaN"), ["report", "RUN", "--out", "OUT"]),
    ("report-md", ("rubric", "completion_tokens", "true"),
     ["report", "RUN", "--format", "md", "--out", "OUT"]),
    ("export-scores", ("native", "case_id", '"billing\\u202eevil"'), ["export-scores", "RUN", "--to", "jsonl",
                                                                     "--out", "OUT"]),
    ("trulens-leaderboard", ("native", "value", "1e999"), ["trulens-leaderboard", "RUN", "OUT"]),
    ("label", ("rubric", "passed", '"yes"'), ["label", "RUN", "--metric", "faithfulness", "--out", "OUT"]),
    ("rescore", ("native", "metric", '""'), ["rescore", "RUN", "--backend", "native", "--metric", "mrr",
                                            "--no-progress"]),
    ("run-resume", ("native", "value", '"0.9"'), ["run", "EXAMPLE", "--out", "RUN", "--backend", "native",
                                                 "--metric", "recall@5", "--no-progress"]),
]


@pytest.mark.parametrize("bad,args", [c[1:] for c in COMMANDS], ids=[c[0] for c in COMMANDS])
def test_every_command_that_reads_a_run_refuses_a_tampered_score(runs, tmp_path, bad, args):
    backend, field, raw = bad
    src = runs["judged"]
    line = _line_of(src, backend)
    run_dir = tampered(src, tmp_path / "run", line, field, raw)
    before = {p.name: p.read_bytes() for p in run_dir.iterdir()}
    gates = tmp_path / "gates.toml"
    gates.write_text(GATES)
    out = tmp_path / ("out.csv" if args[0] in ("trulens-leaderboard", "diff") else
                      "out.md" if "md" in args else "out.html")
    names = {"RUN": run_dir, "GOOD": src, "GATES": gates, "OUT": out, "LABELS": LABELS, "EXAMPLE": EXAMPLE}
    res = ragbridge_cli(*[names.get(a, a) for a in args], cwd=tmp_path)
    assert res.returncode == 2, res.stdout + res.stderr
    assert f"{run_dir / 'scores.jsonl'}:{line}: field '{field}'" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr and not out.exists()
    assert {p.name: p.read_bytes() for p in run_dir.iterdir()} == before  # the folder as it was


MANIFEST_COMMANDS = [
    ("gate", ("pass_marks.rubric.faithfulness", "50.0"), ["gate", "RUN", "--config", "GATES"]),
    ("diff", ("counts.scores", "-1"), ["diff", "GOOD", "RUN"]),
    ("report", ("options.k", '"5"'), ["report", "RUN", "--out", "OUT"]),
    ("trend", ("started_at", '"yesterday"'), ["trend", "GOOD", "RUN"]),
    ("diagnose", ("pass_marks.rubric.faithfulness", '"0.5"'), ["diagnose", "RUN"]),
    ("run-resume", ("status", '"done"'), ["run", "EXAMPLE", "--out", "RUN", "--backend", "native",
                                         "--metric", "recall@5", "--no-progress"]),
]


@pytest.mark.parametrize("bad,args", [c[1:] for c in MANIFEST_COMMANDS],
                         ids=[c[0] for c in MANIFEST_COMMANDS])
def test_commands_refuse_a_tampered_manifest(runs, tmp_path, bad, args):
    field, raw = bad
    run_dir = tmp_path / "run"
    line = tampered_manifest(runs["judged"], run_dir, field, raw)
    before = {p.name: p.read_bytes() for p in run_dir.iterdir()}
    gates = tmp_path / "gates.toml"
    gates.write_text(GATES)
    out = tmp_path / "out.html"
    names = {"RUN": run_dir, "GOOD": runs["judged"], "GATES": gates, "OUT": out, "EXAMPLE": EXAMPLE}
    res = ragbridge_cli(*[names.get(a, a) for a in args], cwd=tmp_path)
    assert res.returncode == 2, res.stdout + res.stderr
    assert f"{run_dir / 'run.json'}:{line}: field '{field}'" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr and not out.exists()
    assert {p.name: p.read_bytes() for p in run_dir.iterdir()} == before


def test_a_gate_no_longer_passes_on_scores_set_to_50(runs, tmp_path):
    """The finding: every recall@5 set to 50.0 made `gate` pass (exit 0). Now exit 2, naming the
    first line."""
    run_dir = tmp_path / "run"
    shutil.copytree(runs["native"], run_dir)
    lines = []
    for line in _lines(run_dir):
        record = json.loads(line)
        if record["metric"] == "recall@5":
            record["value"] = 50.0
        lines.append(json.dumps(record))
    (run_dir / "scores.jsonl").write_text("\n".join(lines) + "\n")
    gates = tmp_path / "gates.toml"
    gates.write_text('[[gate]]\ncheck = "recall@5 >= 0.95"\n')
    res = ragbridge_cli("gate", run_dir, "--config", gates)
    assert res.returncode == 2, res.stdout + res.stderr
    assert f"{run_dir / 'scores.jsonl'}:1: field 'value': must be null or a number from 0 to 1, got 50.0" \
        in res.stderr


def test_report_refuses_a_run_whose_scores_file_is_gone(tmp_path, example_path):
    """run.json counts scores but scores.jsonl was deleted: not a run of no scores (exit 0, "scores: 3
    (3 scored)") but one error naming the file (exit 2)."""
    from conftest import ragbridge_cli

    out = tmp_path / "run"
    assert ragbridge_cli("run", example_path, "--out", out, "--metric", "mrr").returncode == 0
    (out / "scores.jsonl").unlink()
    for args in (["report", out, "--format", "md", "--out", "-"], ["diagnose", out]):
        res = ragbridge_cli(*args)
        said = " ".join(res.stderr.split())
        assert res.returncode == 2, (args, res.stdout[-500:], res.stderr)
        assert f"{out / 'scores.jsonl'}: is missing, but run.json counts 53 score(s) in it" in said


def test_a_score_of_a_case_the_run_does_not_hold_is_refused(tmp_path, example_path):
    from conftest import ragbridge_cli

    out = tmp_path / "run"
    assert ragbridge_cli("run", example_path, "--out", out, "--metric", "mrr").returncode == 0
    line = (out / "scores.jsonl").read_text().splitlines()[0]
    stray = json.loads(line)
    stray["case_id"] = "no-such-case"
    with open(out / "scores.jsonl", "a") as f:
        f.write(json.dumps(stray) + "\n")
    res = ragbridge_cli("report", out, "--format", "md", "--out", "-")
    said = " ".join(res.stderr.split())
    assert res.returncode == 2 and "holds scores of 1 case id(s) that are not cases of this run" in said, said
    assert "'no-such-case'" in said


# ------------------------------------------------------------------------------------------------
# The C reader of score lines (`scores_from_lines`, the first reading's columns): the same scores and
# the same errors as `score_from_line`, line for line

#: JSON texts put in place of a field's value: what a run writes and what it never does
VARIANTS = ["null", "true", "false", "0", "1", "2", "-1", "0.5", "1.0", "-0.0", "0.0", "1e-7", "1E-2",
            "5e-324", "1.0000000000000002", "0.99999999999999999999", "0.1000000000000000055511151231257827",
            "01", "1.", ".5", "1e999", "NaN", "12345678901234567890", "99", "100", '""', '"x"', '" x"',
            '"x "', '"q1"',
            '"caf\u00e9"', '"cafe\u0301"', '"a\\"b"', '"\\u0041"', '"tab\there"', '"\u2028"', "[]", "{}",
            '{"claims": []}', '[0.5]']


def _outcome(read):
    """What reading a line gives: its Score's fields exactly (types, -0.0, the order) and fields set, or
    the error's type, text and field."""
    try:
        s = read()
    except (ValueError, UnicodeDecodeError) as exc:
        return ("error", type(exc).__name__, str(exc), getattr(exc, "field", None))
    return ("score", repr(list(s.__dict__.items())), sorted(s.model_fields_set), type(s).__name__)


def _variant_lines(runs) -> list[bytes]:
    """Lines of the two runs (native, and judged with repeats, judge calls and claims), each field of a
    line of each shape set to each of `VARIANTS`, keys left out, given twice, reordered or spaced,
    the optional fields added, and texts with escapes, control characters and bytes that are not
    UTF-8."""
    seen, bases = set(), []
    for name in ("native", "judged"):
        for line in _lines(runs[name]):
            d = json.loads(line)
            shape = (tuple(d), d["backend"], d.get("error") is not None)
            if shape not in seen:
                seen.add(shape)
                bases.append(line)
    out = []
    for line in bases:
        d = json.loads(line)
        out.append(line.encode())
        for key in [*d, "repeat", "not_run", "cost", "cached", "repeats", "unknown"]:
            for raw in VARIANTS:
                e = {**d, key: MARK}
                out.append(json.dumps(e, separators=(",", ":"), ensure_ascii=False)
                           .replace(json.dumps(MARK), raw).encode())
            out.append(json.dumps({k: v for k, v in d.items() if k != key}, separators=(",", ":")).encode())
        keys = list(d)
        out += [line.replace('":', '": ').encode(), line.replace(",", ", ").encode(), (line + " ").encode(),
                (line + "\r").encode(), (" " + line).encode(), line[:-1].encode() + b',"value":0.5}',
                json.dumps({keys[1]: d[keys[1]], keys[0]: d[keys[0]], **d}, separators=(",", ":")).encode(),
                line.replace('"reason":null', '"reason":"a\\nb"')
                .replace('"reason":"', '"reason":"\\u00e9').encode(),
                line.replace('"error":null', '"error":"\x01"').encode(),
                line.replace('"error":null', '"error":"\xe9"').encode("latin-1", "replace"),
                line.replace('"error":null', '"error":"\U0001f600 \u00e9"').encode(),
                line.encode()[:-1], line.encode() + b"x"]
    return out


def test_a_score_line_read_by_the_c_reader_is_what_score_from_line_reads(runs):
    """Every variant line (`_variant_lines`: a few thousand), through `scores_from_lines` alone and in
    one batch: the same `Score` as `score_from_line` gives (every field's value and type, the fields
    set) or the same error. The C reader takes the lines as a run writes them and refuses the others
    (both sides are exercised)."""
    from ragbridge.formats._columns import score_lines
    from ragbridge.limits import MAX_REPEATS
    from ragbridge.run.recorded import score_from_line, scores_from_lines

    lines = _variant_lines(runs)
    taken = score_lines(lines, MAX_REPEATS)[0]
    assert sum(t is not None for t in taken) > 100 and taken.count(None) > 1000, len(lines)
    native = [line.encode() for line in _lines(runs["native"])]
    assert None not in score_lines(native, MAX_REPEATS)[0]  # a run's own lines: every one taken
    good = []
    for line in lines:
        want = _outcome(lambda: score_from_line(line.decode("utf-8")))
        assert _outcome(lambda: scores_from_lines([line])[0]) == want, line
        if want[0] == "score":
            good.append((line, want))
    got = scores_from_lines([line for line, _ in good])
    assert [_outcome(lambda: s) for s in got] == [want for _, want in good]


def _columns_of(folder: Path):
    """The run folder read in columns from its files (its copy removed first): every array, or the error."""
    import numpy as np

    from ragbridge.run.recorded import read_columns

    (folder / "columns.npz").unlink(missing_ok=True)
    try:
        cols = read_columns(folder)
    except DatasetError as exc:
        return ("error", str(exc), exc.line, exc.field)
    arrays = []
    for key, col in cols.columns.items():
        for name in ("value", "status", "places", "judge_calls", "prompt_tokens", "completion_tokens",
                     "seconds", "cost", "cached", "claims", "unsupported", "ragchecker"):
            arr = getattr(col, name)
            arrays.append((key, name, None if arr is None else (arr.dtype.str, np.asarray(arr).tobytes())))
        if col.repeats is not None:
            arrays.append((key, "repeats", col.repeats.values.tobytes(), col.repeats.status.tobytes(),
                           col.repeats.places.tobytes()))
    return ("columns", list(cols.cases.ids), cols.dropped, arrays)


def test_a_run_read_in_columns_by_the_c_reader_is_what_the_python_steps_read(runs, tmp_path, monkeypatch):
    """Run folders whose scores hold a variant line (a field of a native and of a judged score set to
    what a run writes and what it never does, or the line spaced, cut or given again) read in columns
    with the C reader and without it: the same columns, to the byte, or the same error (text, line,
    field)."""
    from ragbridge.run import recorded

    cases = []
    for name, raws in (("native", ["0.25", "1", "-0.0", "1.5", '"0.5"', "null", "true"]),
                       ("judged", ["2", "0", "1.0", "-1", "null", '"x"', "99", "100"])):
        src = runs[name]
        lines = _lines(src)
        for field in ("value", "seconds", "repeat", "judge_calls", "cost", "cached", "case_id", "metric"):
            for raw in raws:
                cases.append((src, lambda ls, k=3, f=field, r=raw: ls[:k] + [
                    json.dumps({**json.loads(ls[k]), f: MARK}, separators=(",", ":"))
                    .replace(json.dumps(MARK), r)] + ls[k + 1:]))
        cases += [(src, lambda ls: ls + [ls[2]]),
                  (src, lambda ls: ls[:4] + [ls[4].replace(",", ", ")] + ls[5:]),
                  (src, lambda ls: ls[:-1] + [ls[-1][:40]]),
                  (src, lambda ls: ls[:3] + [ls[3][:40]] + ls[4:])]
        assert len(lines) > 10
    for k, (src, edit) in enumerate(cases):
        folder = tmp_path / str(k)
        shutil.copytree(src, folder)
        lines = edit(_lines(folder))
        (folder / "scores.jsonl").write_text("\n".join(lines) + ("\n" if lines[-1].endswith("}") else ""),
                                             encoding="utf-8")
        with_c = _columns_of(folder)
        with monkeypatch.context() as m:
            m.setattr(recorded, "_score_lines", None)
            assert _columns_of(folder) == with_c, k


def test_the_reports_and_the_diagnosis_are_the_same_bytes_without_the_c_readers(runs, tmp_path, monkeypatch):
    """``diagnose --json``, the Markdown and the HTML reports of a native and a judged run (read from
    their files each time, the copy removed): the same bytes with the C readers of score lines and of
    indented JSON as with the Python steps beside them (but for the time stamps of the report's
    making)."""
    import re

    from ragbridge import json_text
    from ragbridge.run import recorded

    def outputs() -> list[str]:
        got = []
        for name in ("native", "judged"):
            folder = tmp_path / name  # the same place on both sides: the outputs name it
            shutil.rmtree(folder, ignore_errors=True)
            shutil.copytree(runs[name], folder)
            html = tmp_path / f"{name}.html"
            for args in (["diagnose", folder, "--json"], ["report", folder, "--format", "md", "--out", "-"],
                         ["report", folder, "--out", html]):
                (folder / "columns.npz").unlink(missing_ok=True)
                res = ragbridge_cli(*args)
                assert res.returncode == 0, res.stderr
                text = html.read_text(encoding="utf-8") if args[-1] == html else res.stdout
                got.append(re.sub(r"generated \S+ by", "", text))
        return got

    fast = outputs()
    with monkeypatch.context() as m:
        m.setattr(recorded, "_score_lines", None)
        m.setattr(json_text, "_indented", None)
        assert outputs() == fast
    assert '"layer": "retrieval"' in fast[0] and "retrieval" in fast[1] and "<html" in fast[2]


def test_a_report_of_a_run_killed_mid_line_drops_it_and_a_line_cut_before_others_is_an_error(runs, tmp_path):
    """The commands read a run in columns as `load_run(...).scores` reads it: a last line cut short by a
    killed run is dropped (the report is the one of the lines before it), a line cut short with others
    after it is an error naming the file and the line (exit 2); before, both were a traceback."""
    src = runs["native"]
    lines = _lines(src)
    whole = ragbridge_cli("report", src, "--format", "md", "--out", "-")
    cut, middle = tmp_path / "cut", tmp_path / "middle"
    for folder, text in ((cut, "\n".join(lines[:-1]) + "\n" + lines[-1][:37]),
                         (middle, "\n".join(lines[:5] + [lines[5][:37]] + lines[6:]) + "\n")):
        shutil.copytree(src, folder)
        (folder / "columns.npz").unlink(missing_ok=True)
        (folder / "scores.jsonl").write_text(text, encoding="utf-8")
    res = ragbridge_cli("report", cut, "--format", "md", "--out", "-")
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.replace(str(cut), "R") != whole.stdout.replace(str(src), "R")  # one score fewer
    assert len(load_run(cut).scores) == len(lines) - 1
    res = ragbridge_cli("report", middle, "--format", "md", "--out", "-")
    said = " ".join(res.stderr.split())
    assert res.returncode == 2 and f"{middle / 'scores.jsonl'}:6: not valid JSON" in said, res.stderr[-2000:]
