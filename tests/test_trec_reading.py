"""A TREC run is read a query at a time: `ragbridge run` and `ragbridge convert` of one hold a batch, the
qrels and a few numbers a query, not the run; the cases, their order, trec_eval's ranking, the warnings
and the scores are those of the format's whole reader (`ragbridge.load_cases`) and of pytrec_eval."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from conftest import peak_mib, ragbridge_cli
from ragbridge.formats import load_cases, write_cases

METRICS = ["map", "ndcg@10", "recall@10", "mrr"]


def _cli(*args: object):
    return ragbridge_cli(*map(str, args))


def _run_and_qrels(folder: Path, n: int, docs: int, *, grouped: bool, repeats: bool, seed: int = 5
                   ) -> tuple[Path, Path]:
    """A run as pytrec_eval's users write theirs (a dict of query -> {docno: score}, a line each, the
    queries in the dict's order), with score ties at single precision (0.3, 0.30000001); ``repeats``
    adds docnos named twice in a query, ``grouped=False`` shuffles the lines (queries named again after
    others). The qrels: every fifth query unjudged, grades -1..3, and a judged query the run lacks."""
    rng = random.Random(seed)
    run: dict[str, dict[str, float]] = {}
    extra: list[str] = []
    with open(folder / "run.qrels", "w") as q:
        for i in range(n):
            names = rng.sample(range(5 * docs), docs)
            run[f"q{i}"] = {f"d{d}": rng.choice([0.3, 0.30000001, 1.0, -2.5, round(rng.random(), 3)])
                            for d in names}
            if repeats and i % 3 == 0:
                extra += [f"q{i} Q0 d{d} 0 {rng.random()} run\n" for d in names[:3]]
            if i % 5:
                for d in rng.sample(names, 4) + [f"x{i}"]:
                    q.write(f"q{i} 0 {d if isinstance(d, str) else f'd{d}'} {rng.choice([-1, 0, 1, 2, 3])}\n")
        q.write("missing 0 d1 1\n")
    lines = [f"{qid} Q0 {doc} {rank} {score} run\n"
             for qid, ranking in run.items()
             for rank, (doc, score) in enumerate(sorted(ranking.items(), key=lambda x: -x[1]), start=1)]
    lines += extra
    if not grouped:
        rng.shuffle(lines)
    (folder / "run.trec").write_text("".join(lines))
    return folder / "run.trec", folder / "run.qrels"


def _scores(folder: Path) -> dict[tuple[str, str], object]:
    with open(folder / "scores.jsonl") as f:
        return {(r["case_id"], r["metric"]): r["value"] for r in map(json.loads, f)}


@pytest.mark.parametrize("grouped", [True, False])
def test_a_run_read_a_query_at_a_time_gives_the_whole_readers_cases_and_warnings(tmp_path, grouped):
    run, qrels = _run_and_qrels(tmp_path, 60, 30, grouped=grouped, repeats=True)
    done = _cli("run", run, "--qrels", qrels, "--out", tmp_path / "out", "--backend", "native",
                "--no-progress", "--batch-size", "7", *(a for m in METRICS for a in ("--metric", m)))
    assert done.returncode == 0, done.stderr
    # the cases scored are exactly those the Python API reads whole, in the run's order of first naming
    write_cases(load_cases(run, qrels=qrels), tmp_path / "whole.jsonl")
    assert (tmp_path / "out" / "cases.jsonl").read_bytes() == (tmp_path / "whole.jsonl").read_bytes()
    order = list(dict.fromkeys(line.split()[0] for line in run.read_text().splitlines()))
    assert [json.loads(line)["id"] for line in open(tmp_path / "out" / "cases.jsonl")] == order
    said = " ".join(done.stderr.split())
    assert f"{qrels}: 61 negative grade(s) read as 0" in said
    assert f"{qrels}: 1 judged quer(ies) have no ranking in {run}" in said
    assert "60 repeated chunk id(s) in 20 case(s)" in said, said

    for target in ("back.jsonl", "back.trec"):
        converted = _cli("convert", run, tmp_path / target, "--qrels", qrels)
        assert converted.returncode == 0, converted.stderr
        assert "wrote 60 case(s)" in converted.stdout
        assert "61 negative grade(s)" in " ".join(converted.stderr.split())
    assert (tmp_path / "back.jsonl").read_bytes() == (tmp_path / "whole.jsonl").read_bytes()
    write_cases(load_cases(run, qrels=qrels), tmp_path / "whole.trec")
    for name in ("back.trec", "back.qrels"):
        assert (tmp_path / name).read_bytes() == (tmp_path / name.replace("back", "whole")).read_bytes()


def test_a_run_not_grouped_by_query_is_ranked_as_pytrec_eval_ranks_it(tmp_path):
    pytrec_eval = pytest.importorskip("pytrec_eval")
    run, qrels = _run_and_qrels(tmp_path, 80, 40, grouped=False, repeats=False)
    done = _cli("run", run, "--qrels", qrels, "--out", tmp_path / "out", "--backend", "native",
                "--no-progress", "--batch-size", "9", "--no-relevant", "zero",
                *(a for m in METRICS for a in ("--metric", m)))
    assert done.returncode == 0, done.stderr
    ours = _scores(tmp_path / "out")
    with open(run) as f:
        parsed_run = pytrec_eval.parse_run(f)
    with open(qrels) as f:
        parsed_qrels = {q: {d: max(g, 0) for d, g in docs.items()}
                        for q, docs in pytrec_eval.parse_qrel(f).items()}
    theirs = pytrec_eval.RelevanceEvaluator(parsed_qrels, {"map", "ndcg_cut.10", "recall.10", "recip_rank"}
                                            ).evaluate(parsed_run)
    names = {"map": "map", "ndcg@10": "ndcg_cut_10", "recall@10": "recall_10", "mrr": "recip_rank"}
    judged = [q for q in theirs if any(g > 0 for g in parsed_qrels[q].values())]
    assert len(judged) > 40
    for q in judged:
        for ours_name, their_name in names.items():
            assert ours[(q, ours_name)] == pytest.approx(theirs[q][their_name], abs=1e-9), (q, ours_name)


def test_a_bad_line_of_a_run_not_grouped_is_named_and_nothing_is_written(tmp_path):
    run, qrels = _run_and_qrels(tmp_path, 20, 10, grouped=False, repeats=False)
    lines = run.read_text().splitlines(keepends=True)
    lines[150] = lines[150].replace(" run\n", " 0.5 run\n")
    run.write_text("".join(lines))
    done = _cli("run", run, "--qrels", qrels, "--out", tmp_path / "out", "--backend", "native",
                "--no-progress")
    assert done.returncode == 2
    assert f"{run}:151: has 7 columns, a run line has 6" in done.stderr
    assert not (tmp_path / "out").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["run.qrels",
                                                                                              "run.trec"]


@pytest.mark.slow
@pytest.mark.parametrize("command", ["run", "convert"])
def test_reading_a_trec_run_holds_a_batch_not_the_run(tmp_path, command):
    """2,000 and 12,000 queries x 100 documents: the whole reader grew by about 750 MiB between them."""
    peaks = []
    for n in (2000, 12000):
        folder = tmp_path / str(n)
        folder.mkdir()
        run, qrels = _run_and_qrels(folder, n, 100, grouped=True, repeats=False)
        if command == "run":
            peaks.append(peak_mib("run", run, "--qrels", qrels, "--out", folder / "out", "--backend",
                                   "native", "--no-progress", "--metric", "ndcg@10", "--metric", "map"))
            assert len((folder / "out" / "cases.jsonl").read_text().splitlines()) == n
        else:
            peaks.append(peak_mib("convert", run, folder / "cases.jsonl", "--qrels", qrels))
            assert len((folder / "cases.jsonl").read_text().splitlines()) == n
    assert peaks[1] - peaks[0] < 120, peaks
