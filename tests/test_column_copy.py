"""The compact copy of a run's columns (``columns.npz``): written by a run that completes in one session
(or else by the first reading of the finished run), read by every reading after instead of both JSONL
files, and never used for files it was not made of."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest


def _cli(*args: object, ok=(0,)) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-c", "from ragbridge.commands import run_cli; run_cli()",
                           *map(str, args)], capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "100", "NO_COLOR": "1"})
    assert proc.returncode in ok, proc.stderr
    return proc


@pytest.fixture(scope="module")
def made_run(tmp_path_factory) -> Path:
    import pandas as pd

    folder = tmp_path_factory.mktemp("copy")
    rows = [{"id": f"q{i}", "question": f"question {i}",
             "contexts": json.dumps([{"id": f"d{i}"}, {"id": "x"}]),
             "relevant": json.dumps({f"d{i}": 1} if i % 3 else {"y": 1}), "tags": json.dumps([f"t{i % 2}"])}
            for i in range(40)]
    pd.DataFrame(rows).to_csv(folder / "golden.csv", index=False)
    _cli("run", folder / "golden.csv", "--out", folder / "run", "--backend", "native", "--metric",
         "hit@10", "--metric", "mrr", "--no-progress")
    return folder


@pytest.fixture()
def run_folder(made_run: Path, tmp_path: Path) -> Path:
    shutil.copytree(made_run / "run", tmp_path / "run")
    shutil.copy(made_run / "golden.csv", tmp_path / "golden.csv")
    return tmp_path / "run"


def _same(a, b) -> None:
    assert a.cases.ids == b.cases.ids and a.cases.tags == b.cases.tags
    assert np.array_equal(a.cases.golden, b.cases.golden) and a.cases.described == b.cases.described
    assert np.array_equal(a.cases.places, b.cases.places)
    assert np.array_equal(a.cases.answerable, b.cases.answerable)
    assert list(a.columns) == list(b.columns)
    for key, col in a.columns.items():
        other = b.columns[key]
        assert np.array_equal(col.value, other.value, equal_nan=True)
        assert np.array_equal(col.status, other.status) and np.array_equal(col.places, other.places)


def test_the_second_reading_reads_the_copy_and_gets_the_same_columns(run_folder, monkeypatch):
    from ragbridge.run import recorded
    from ragbridge.run.recorded import read_columns

    (run_folder / "columns.npz").unlink()  # the run's
    first = read_columns(run_folder)
    assert (run_folder / "columns.npz").is_file()

    def no_parsing(path):
        raise AssertionError(f"{path} parsed again")
    monkeypatch.setattr(recorded, "read_case_index", no_parsing)
    second = read_columns(run_folder)
    _same(first, second)
    # what outputs read back through the index and the columns still comes from the files
    assert second.cases.cases([3])[0].question == "question 3"
    col = second.column("native", "hit@10")
    assert col.scores([3])[0].case_id == "q3"


def test_a_changed_scores_file_is_read_again_not_the_copy(run_folder):
    from ragbridge.run.recorded import read_columns

    read_columns(run_folder)
    lines = (run_folder / "scores.jsonl").read_text().splitlines()
    changed = json.loads(lines[0])
    assert changed["metric"] in ("hit@10", "mrr")
    changed["value"] = 0.25 if changed["value"] != 0.25 else 0.5
    with open(run_folder / "scores.jsonl", "a") as f:
        f.write(json.dumps(changed) + "\n")
    got = read_columns(run_folder)
    i = got.cases.place(changed["case_id"])
    assert got.column(changed["backend"], changed["metric"]).value[i] == changed["value"]


def test_diff_of_copied_runs_says_the_same_as_of_the_files(run_folder, tmp_path):
    first = json.loads(_cli("diff", run_folder, run_folder, "--json").stdout)
    assert (run_folder / "columns.npz").is_file()
    again = json.loads(_cli("diff", run_folder, run_folder, "--json").stdout)
    assert first == again and first["summary"]


def test_a_copy_that_cannot_be_written_leaves_the_reading_as_it_was(run_folder):
    from ragbridge.run.recorded import read_columns

    (run_folder / "columns.npz").unlink()  # the run's
    (run_folder / "columns.npz").mkdir()  # not a file: neither read nor replaced
    got = read_columns(run_folder)
    assert len(got.cases) == 40 and (run_folder / "columns.npz").is_dir()
    assert read_columns(run_folder).cases.ids == got.cases.ids


def test_overwrite_removes_the_copy_and_a_damaged_copy_is_not_used(run_folder, tmp_path):
    from ragbridge.run.recorded import read_columns

    first = read_columns(run_folder)
    (run_folder / "columns.npz").write_bytes(b"not a zip")
    _same(first, read_columns(run_folder))  # read from the files (and the copy written again)
    assert (run_folder / "columns.npz").stat().st_size > 100
    (run_folder / "columns.npz").chmod(0o400)
    _cli("run", tmp_path / "golden.csv", "--out", run_folder, "--backend", "native", "--metric", "mrr",
         "--no-progress", "--overwrite")
    # the old copy removed, the new run's own written
    assert list(read_columns(run_folder).columns) == [("native", "mrr")]
    meta = json.loads(bytes(np.load(run_folder / "columns.npz")["meta"]))
    assert [c[:2] for c in meta["columns"]] == [["native", "mrr"]]


def test_places_and_per_score_arrays_are_read_from_the_copy_when_first_asked_for(run_folder):
    """A reading from the copy loads each column's values and statuses; its line places and per-score
    arrays (a third of a million-case copy's bytes each) are read when first asked for, the same
    arrays; a copy made again of changed files in between is not mixed in."""
    from ragbridge.run.recorded import read_columns

    (run_folder / "columns.npz").unlink()  # the run's
    first = read_columns(run_folder)  # the files parsed; the copy written
    second = read_columns(run_folder)
    col, was = second.column("native", "hit@10"), first.column("native", "hit@10")
    assert {"places", "seconds"}.isdisjoint(vars(col)) and "value" in vars(col)
    assert np.array_equal(col.places, was.places) and np.array_equal(col.seconds, was.seconds)
    assert col.seconds.dtype == np.float64 and {"places", "seconds"} <= set(vars(col))
    third = read_columns(run_folder)
    with open(run_folder / "scores.jsonl", "a") as f:
        f.write((run_folder / "scores.jsonl").read_text().splitlines()[0] + "\n")
    read_columns(run_folder)  # the files read again: a new copy
    with pytest.raises(RuntimeError, match="changed while the run was read"):
        third.column("native", "mrr").places


# ------------------------------------------------------------------------------------------------
# The copy a run writes


def _made_again(folder: Path) -> tuple[dict, dict]:
    """The arrays of the run's own copy, and of the copy its first reading makes of its files."""
    from ragbridge import load_run
    from ragbridge.run.folder import pass_at_least
    from ragbridge.run.recorded import read_columns

    path = folder / "columns.npz"
    with np.load(path) as got:
        by_run = dict(got)
    path.unlink()
    read_columns(folder, pass_at_least(load_run(folder).manifest))
    with np.load(path) as got:
        return by_run, dict(got)


def _assert_same_arrays(by_run: dict, by_reading: dict) -> None:
    assert sorted(by_run) == sorted(by_reading)
    for name, arr in by_reading.items():
        assert by_run[name].dtype == arr.dtype and by_run[name].shape == arr.shape, name
        assert np.array_equal(by_run[name], arr, equal_nan=arr.dtype.kind == "f"), name


def test_a_run_writes_the_copy_its_first_reading_would_make(tmp_path):
    """Native and judged scores in batches of 7 cases (the judge's answers a fifth of them errors, its
    budget spent before the end: scored, undefined, errored and not-run scores, judge usage and costs
    from some batch on), cases with tags, non-ASCII text and unanswerable ones: the copy the run
    writes as it goes is, array by array, the copy a first reading of its files makes."""
    from ragbridge.testing import StubJudge

    golden = Path(__file__).resolve().parent.parent / "examples" / "support-bot" / "golden.jsonl"
    rows = [json.loads(line) for line in golden.read_text().splitlines() if line.strip()]
    rows[1]["id"] = "réponse-été-2"
    rows[2]["answerable"] = False
    rows[3]["tags"] = ["ünïcode", "billing"]
    (tmp_path / "golden.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
                                           encoding="utf-8")
    (tmp_path / "ragbridge.toml").write_text('[judge]\nmodel = "judge-m"\nmax_retries = 0\n'
                                             'cache_mode = "off"\n[judge.prices."judge-m"]\n'
                                             'input = 1.0\noutput = 2.0\n')
    with StubJudge(fault_rate_500=0.2, seed=5) as stub:
        proc = subprocess.run(
            [sys.executable, "-c", "from ragbridge.commands import run_cli; run_cli()", "run",
             tmp_path / "golden.jsonl", "--out", tmp_path / "run", "--backend", "native",
             "--backend", "rubric", "--metric", "mrr", "--metric", "ndcg@10", "--metric", "faithfulness",
             "--metric", "answer_relevance", "--judge-base-url", stub.base_url, "--max-calls",
             str(len(rows) + 4), "--no-progress", "--batch-size", "7"], capture_output=True, text=True,
            cwd=tmp_path,
            env={**os.environ, "COLUMNS": "100"})
    assert proc.returncode == 4, proc.stderr  # the budget spent
    by_run, by_reading = _made_again(tmp_path / "run")
    meta = json.loads(bytes(by_reading["meta"]))
    kinds = set()
    for k in range(len(meta["columns"])):
        kinds |= set(np.unique(by_reading[f"c{k}_status"]).tolist())
    assert kinds >= {1, 3, 4}, kinds  # scored, errored and not run among them
    assert any("judge_calls" in c[2] and "cost" in c[2] for c in meta["columns"])
    _assert_same_arrays(by_run, by_reading)
    assert json.loads(bytes(by_run["meta"])) == meta


def test_a_run_with_repeats_or_killed_or_resumed_writes_no_copy_of_its_own(tmp_path):
    """A run with repeats writes no copy (its first reading collapses them); a run killed before its
    end leaves none; the session that resumes it writes none (the first reading of the whole run
    does, the same as of a run made in one session)."""
    import signal
    import time

    from ragbridge.testing import StubJudge

    rows = [{"id": f"q{i}", "question": f"question {i}", "answer": "an answer",
             "contexts": [{"id": f"d{i}", "text": "a passage"}], "relevant": {f"d{i}": 1}} for i in range(40)]
    (tmp_path / "golden.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "ragbridge.toml").write_text('[judge]\nmodel = "judge-m"\ncache_mode = "off"\n')
    with StubJudge(latency=0.15) as stub:
        base = [sys.executable, "-c", "from ragbridge.commands import run_cli; run_cli()", "run",
                tmp_path / "golden.jsonl", "--backend", "native", "--backend", "rubric", "--metric", "mrr",
                "--metric", "faithfulness", "--judge-base-url", stub.base_url, "--no-progress",
                "--batch-size", "5"]
        _ = subprocess.run([*base, "--out", tmp_path / "repeats", "--repeats", "2"], capture_output=True,
                           cwd=tmp_path, check=True)
        assert not (tmp_path / "repeats" / "columns.npz").exists()
        proc = subprocess.Popen([*base, "--out", tmp_path / "killed"], cwd=tmp_path,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        scores = tmp_path / "killed" / "scores.jsonl"
        deadline = time.monotonic() + 60
        while not (scores.exists() and scores.stat().st_size > 2000) and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert not (tmp_path / "killed" / "columns.npz").exists()
        subprocess.run([*base, "--out", tmp_path / "killed"], capture_output=True, cwd=tmp_path, check=True)
        assert not (tmp_path / "killed" / "columns.npz").exists()
        subprocess.run([*base, "--out", tmp_path / "whole"], capture_output=True, cwd=tmp_path, check=True)
    from ragbridge.run.recorded import read_columns

    resumed = read_columns(tmp_path / "killed")
    assert (tmp_path / "killed" / "columns.npz").exists()
    whole = read_columns(tmp_path / "whole")
    for key, col in whole.columns.items():
        assert np.array_equal(col.value, resumed.columns[key].value, equal_nan=True), key
        assert np.array_equal(col.status, resumed.columns[key].status), key


def test_a_run_of_cases_in_memory_writes_the_copy_its_first_reading_would_make(tmp_path):
    """The Python API, cases in memory (a batch of 6 at a time) and a target filling their outputs:
    the copy the run writes is the copy a first reading of its files makes."""
    from conftest import EXAMPLE

    from ragbridge import evaluate, load_cases
    from ragbridge.run.target import load_target

    cases = [c.model_copy(update={"contexts": [], "answer": None}) for c in load_cases(EXAMPLE)[:20]]
    evaluate(cases, backends=["native"], metrics=["mrr", "recall@3", "abstention"], out=tmp_path / "run",
             target=load_target("rag_pipeline:bm25"), batch_size=6, progress=False)
    by_run, by_reading = _made_again(tmp_path / "run")
    _assert_same_arrays(by_run, by_reading)
    assert json.loads(bytes(by_run["meta"])) == json.loads(bytes(by_reading["meta"]))


def test_a_complete_run_run_again_leaves_its_copy_good(run_folder, tmp_path):
    """Running the same command again over a complete run (a CI job, a notebook cell run twice) keeps
    every score and writes nothing new: ``cases.jsonl`` is left as it is, so the copy stays the copy of
    the files and the next reading reads it, not the files, and ``run.json`` keeps the time the run
    finished. The same through the Python API."""
    import time

    from ragbridge import evaluate, load_cases
    from ragbridge.run.column_copy import file_keys, load_copy
    from ragbridge.run.recorded import read_columns

    command = ("run", tmp_path / "golden.csv", "--out", tmp_path / "cli", "--backend", "native", "--metric",
               "hit@10", "--metric", "mrr", "--no-progress")
    _cli(*command)
    copy = tmp_path / "cli" / "columns.npz"
    before, made = file_keys(tmp_path / "cli"), copy.stat().st_mtime_ns
    assert json.loads(bytes(np.load(copy)["meta"]))["files"] == before
    again = _cli(*command)
    assert "resumed: 80 score(s) kept" in again.stdout
    assert file_keys(tmp_path / "cli") == before and copy.stat().st_mtime_ns == made

    cases = load_cases(run_folder / "cases.jsonl")
    api = tmp_path / "api"
    evaluate(cases, metrics=["mrr"], out=api, progress=False)
    keys = file_keys(api)
    ended = json.loads((api / "run.json").read_text())["finished_at"]
    time.sleep(1.1)  # (the times are written to the second)
    evaluate(cases, metrics=["mrr"], out=api, progress=False)
    assert file_keys(api) == keys
    # nothing scored again: the run still ends when it ended (a report's "started -> finished")
    assert json.loads((api / "run.json").read_text())["finished_at"] == ended
    assert load_copy(api, None, None, lambda *index: None) is not None
    # a run that adds scores changes the files: the copy is not used for them
    evaluate(cases, metrics=["mrr", "hit@10"], out=api, progress=False)
    assert file_keys(api) != keys and load_copy(api, None, None, lambda *index: None) is None
    assert json.loads((api / "run.json").read_text())["finished_at"] > ended
    assert sorted(read_columns(api).columns) == [("native", "hit@10"), ("native", "mrr")]
