"""The compact copy of a run's columns (``columns.npz``): written by the first reading of a finished
run, read by the next ones instead of both JSONL files, and never used for files it was not made of."""

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
    _cli("run", tmp_path / "golden.csv", "--out", run_folder, "--backend", "native", "--metric", "mrr",
         "--no-progress", "--overwrite")
    assert not (run_folder / "columns.npz").exists()
    assert list(read_columns(run_folder).columns) == [("native", "mrr")]


def test_places_and_per_score_arrays_are_read_from_the_copy_when_first_asked_for(run_folder):
    """A reading from the copy loads each column's values and statuses; its line places and per-score
    arrays (a third of a million-case copy's bytes each) are read when first asked for, the same
    arrays; a copy made again of changed files in between is not mixed in."""
    from ragbridge.run.recorded import read_columns

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
