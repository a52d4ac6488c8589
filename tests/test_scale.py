"""The commands that read a run hold a few bytes a score, not the run's scores as objects: their peak
memory grows by little from a run of 1,000 cases to one of 6,000 (whole processes, peak RSS)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from conftest import peak_mib

METRICS = ["recall@10", "precision@10", "hit@10", "mrr", "ndcg@10", "map"]
GATES = """\
[defaults]
backend = "native"

[[gate]]
check = "ndcg@10 >= 0.2"

[[gate]]
check = "recall@10 drop <= 0.01"
"""


def _golden(path: Path, n: int, p: float, seed: int = 11) -> Path:
    rng = random.Random(seed)
    with open(path, "w") as f:
        for q in range(n):
            ids = [f"d{j}" for j in rng.sample(range(400), 40)]
            rel = {d: rng.randint(1, 3) for d in ids[:rng.randint(1, 6)]}
            ranked = sorted(ids, key=lambda d: (d not in rel or rng.random() > p, rng.random()))
            trace = {"trace_id": f"{q:032x}", "span_id": f"{q:016x}"}
            f.write(json.dumps({"id": f"q{q}", "question": f"question {q}",
                                "contexts": [{"id": d} for d in ranked], "relevant": rel,
                                "tags": [f"topic{q % 4}"], "metadata": {"trace": trace}}) + "\n")
    return path



def _runs(folder: Path, n: int) -> tuple[Path, Path]:
    out = []
    for name, p in (("A", 0.5), ("B", 0.55)):
        cmd = ["run", _golden(folder / f"{name}.jsonl", n, p), "--out", folder / name, "--backend", "native",
               "--no-progress"]
        for m in METRICS:
            cmd += ["--metric", m]
        peak_mib(*cmd)
        out.append(folder / name)
    (folder / "gates.toml").write_text(GATES)
    return out[0], out[1]


@pytest.mark.slow
def test_commands_that_read_a_run_hold_a_few_bytes_a_score(tmp_path):
    peaks = {}
    for n in (1000, 6000):
        folder = tmp_path / str(n)
        folder.mkdir()
        a, b = _runs(folder, n)
        commands = {
            "gate": ["gate", b, "--config", folder / "gates.toml", "--baseline", a, "--json"],
            "diff": ["diff", a, b, "--json"],
            "report-md": ["report", a, "--format", "md", "--out", folder / "r.md"],
            "report-html": ["report", a, "--out", folder / "r.html"],
            "export-scores": ["export-scores", a, "--to", "jsonl", "--out", folder / "e.jsonl"],
            "convert": ["convert", folder / "A.jsonl", folder / "c.jsonl"],  # a golden set, a batch at a time
            "convert-csv": ["convert", folder / "A.jsonl", folder / "c.csv"],
            "convert-parquet": ["convert", folder / "A.jsonl", folder / "c.parquet"],
            # golden sets as tables, read a batch of rows at a time (whole, they took about 100 KB a
            # case); batches smaller than either size, so that both read several
            "run-csv": ["run", folder / "A.csv", "--out", folder / "rc", "--backend", "native",
                        "--batch-size", "500", "--no-progress"],
            "run-parquet": ["run", folder / "A.parquet", "--out", folder / "rp", "--backend", "native",
                            "--batch-size", "500", "--no-progress"],
        }
        for suffix in ("csv", "parquet"):
            peak_mib("convert", folder / "A.jsonl", folder / f"A.{suffix}")
        for name, args in commands.items():
            peaks[name, n] = peak_mib(*args)
    # 30,000 more scores: as Score objects (about 4 KiB each) they would take over 100 MiB more
    grown = {name: round(peaks[name, 6000] - peaks[name, 1000]) for name, _ in peaks}
    assert all(g < 60 for g in grown.values()), grown


def test_json_outputs_are_the_indented_document_byte_for_byte():
    import math

    from ragbridge.analysis.rows import Rows
    from ragbridge.report.text import json_chunks, json_escaped

    rng = random.Random(3)
    plain = [None, True, False, 0, -7, 10**30, 1.5, -0.0, 1e-300, 3.5e20, "", "é\n\"\\\x01\x1b\u202e", "xyz",
             "a\x000\x00"]

    def value(depth):
        r = rng.random()
        if depth > 4 or r < 0.45:
            return rng.choice(plain)
        if r < 0.75:
            return [value(depth + 1) for _ in range(300 if rng.random() < 0.03 else rng.randint(0, 4))]
        if r < 0.8:
            return tuple(value(depth + 1) for _ in range(rng.randint(0, 3)))
        return {(rng.choice([1, 2.5, True, None, "\x000\x00"]) if rng.random() < 0.1 else f"k{i}"):
                value(depth + 1) for i in range(rng.randint(0, 5))}

    for t in range(500):
        made = [value(2) for _ in range(7)]
        doc = {"rows": Rows(7, lambda start, stop: made[start:stop], block=3), "x": value(0)} \
            if t % 2 else value(0)
        expected = json.dumps(doc, indent=2, ensure_ascii=False, allow_nan=False)  # Rows: a list
        assert "".join(json_chunks(doc, size=rng.choice([1, 64, 1 << 16]))) == json_escaped(expected)
    for bad in (math.nan, [1, math.inf], {"a": [{"b": -math.inf}]}):
        with pytest.raises(ValueError):
            "".join(json_chunks(bad))


@pytest.mark.parametrize("batch", [1, 2, 3, 1000])
def test_rows_written_together_are_the_indented_document_byte_for_byte(batch, monkeypatch):
    """A list's rows (dicts of plain values and lists of them: a diff's or gate's cases) are written by
    one call of the C encoder a batch, its separators' marks then replaced by line breaks and indents:
    the same characters as ``json.dumps(indent=2)``, with strings that hold brackets, braces, commas,
    colons and the marks' own characters where a row's list or the next row could seem to begin or
    end, rows of every kind side by side and batches cut anywhere."""
    from ragbridge.report import text

    monkeypatch.setattr(text, "_ROWS", batch)
    rng = random.Random(batch)
    pieces = ["a", "é", '"', "\\", "\n", "\x00", "\x01", "\x02", "\x03", "\x1b", "\u202e", "{", "}", "[", "]",
              ",", ":", "😀", " ", "]}", "}\x01{", "]\x01", "\x02["]

    def word():
        return "".join(rng.choice(pieces) for _ in range(rng.randint(0, 6)))

    def value(depth=0):
        r = rng.randint(0, 9)
        if r == 0:
            return word()
        if r == 1:
            return rng.random() * 10 ** rng.randint(-5, 20)
        if r == 2:
            return rng.randint(-10**20, 10**20)
        if r == 3:
            return rng.choice([True, False, None])
        if r in (4, 5) and depth < 2:
            items = [value(depth + 1) for _ in range(rng.randint(0, 4))]
            return items if r == 4 else tuple(items)
        if r == 6 and depth < 1:
            return {word(): value(depth + 1) for _ in range(rng.randint(0, 3))}
        return rng.choice([1.0, -0.0, "x", "]", "}", [], ["]"], ["a", "]}"]])

    for _ in range(400):
        rows = [{(word() or "k"): value() for _ in range(rng.randint(0, 8))} if rng.random() < 0.9
                else value() for _ in range(rng.randint(0, 7))]
        doc = {"cases": rows, "deep": {"rows": rows, "lists": [rows, rows]}}
        expected = json.dumps(doc, indent=2, ensure_ascii=False, allow_nan=False)
        assert "".join(text.json_chunks(doc, escaped=False)) == expected


def test_a_run_read_back_holds_under_a_hundred_bytes_a_case_besides_its_scores(tmp_path):
    """What grows with the cases once a run is read (the copy's second reading, as every command
    reads it) and its cases have been looked up by id (a diff's pairing): the case index and the
    score columns. As Python strings, a dict of the ids and a digest object per case it took about
    200 bytes a case besides the columns (about 370 MB for two runs of a million cases)."""
    import tracemalloc

    from ragbridge.analysis.diff import dataset_changes
    from ragbridge.run import load_run

    n = 4_000
    peak_mib("run", _golden(tmp_path / "cases.jsonl", n, 0.5), "--out", tmp_path / "A", "--backend",
              "native", "--metric", "ndcg@10", "--no-progress")
    load_run(tmp_path / "A").columns  # (the run wrote its copy)
    tracemalloc.start()
    try:
        a, b = load_run(tmp_path / "A"), load_run(tmp_path / "A")  # read twice, as a diff of two runs
        changes = dataset_changes(a, b)
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert changes == (False, [], 0, 0)
    assert len(a.columns.cases) == len(b.columns.cases) == n
    column = 8 + 1 + 8  # a score's value, status and line offset
    per_case = held / (2 * n) - column
    assert per_case < 100, f"{per_case:.0f} bytes a case"
