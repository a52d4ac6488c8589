"""``Run.to_frame`` (long and wide) and ``Run.costs`` of a run read from its folder are built from the
run's columns and its score lines a block at a time: the same frames, to the bit, as the `Score`
objects give, and a memory that grows by the frame, not by a `Score` and `Case` object per case."""

from __future__ import annotations

import json
import random
import tracemalloc

import pandas as pd
import pytest

import ragbridge
from conftest import EXAMPLE, needs_backend, ragbridge_cli, stub_judge_config
from ragbridge import evaluate, load_cases, load_run
from ragbridge.judge import JudgeConfig
from ragbridge.testing import StubJudge
from ragbridge.verdicts import pass_mark, verdict

NATIVE = ["recall@5", "mrr", "ndcg@5", "precision@3"]


def frame_of_scores(run, wide: bool = False) -> pd.DataFrame:
    """The frame as it is made from the run's `Score` and `Case` objects (``run.scores``,
    ``run.cases``): the reference."""
    scores, cases = run.scores, run.cases
    if wide:
        columns = list(dict.fromkeys(f"{s.backend}:{s.metric}" for s in scores))
        values: dict = {}
        for s in scores:
            values.setdefault(s.case_id, {})[f"{s.backend}:{s.metric}"] = s.value
        rows = [{"case_id": c.id, "question": c.question, **values.get(c.id, {})} for c in cases]
        frame = pd.DataFrame(rows, columns=["case_id", "question", *columns])
        return frame.astype({c: float for c in columns})
    questions = {c.id: c.question for c in cases}
    rows = []
    for s in scores:
        mark = pass_mark(run.manifest, s.backend, s.metric)[0]
        row = s.model_dump()
        library = row["passed"]
        row["passed"] = verdict(s, mark)
        rows.append({"case_id": row.pop("case_id"), "question": questions.get(s.case_id), **row,
                     "pass_mark": mark, "library_passed": library, "status": s.status})
    return pd.DataFrame(rows)


def costs_of_scores(run) -> pd.DataFrame:
    rows: dict = {}
    for s in run.scores:
        if not s.judge_calls:
            continue
        row = rows.setdefault((s.backend, s.metric), {
            "backend": s.backend, "metric": s.metric, "judge_calls": 0, "prompt_tokens": 0,
            "completion_tokens": 0, "cost": 0.0})
        row["judge_calls"] += s.judge_calls
        row["prompt_tokens"] += s.prompt_tokens
        row["completion_tokens"] += s.completion_tokens
        row["cost"] = float("nan") if s.cost is None else row["cost"] + s.cost
    names = ["backend", "metric", "judge_calls", "prompt_tokens", "completion_tokens", "cost"]
    return pd.DataFrame(list(rows.values()), columns=names)


def same_frames(folder) -> None:
    """Each frame of the run at ``folder``, read afresh, equals the one its `Score` objects give."""
    for wide in (False, True):
        got = load_run(folder).to_frame(wide=wide)
        pd.testing.assert_frame_equal(got, frame_of_scores(load_run(folder), wide), check_exact=True)
    pd.testing.assert_frame_equal(load_run(folder).costs(), costs_of_scores(load_run(folder)),
                                  check_exact=True)


def test_a_native_run_reads_back_the_frames_its_scores_give(tmp_path):
    cases = load_cases(EXAMPLE)
    run = evaluate(cases, metrics=NATIVE, out=tmp_path / "run", progress=False)
    same_frames(tmp_path / "run")
    back = load_run(tmp_path / "run")
    from ragbridge.run.frames import frames_apply

    assert frames_apply(back.columns, tmp_path / "run" / "scores.jsonl")  # built from the columns
    long = back.to_frame()
    assert (long["status"] == "undefined").sum() > 0 and long["passed"].isna().sum() > 0  # unanswerable
    assert long["question"].notna().all() and len(long) == len(run.scores)
    # the run in memory keeps its own way, to the same frames (but for the time each score took)
    plain = evaluate(cases, metrics=NATIVE, progress=False)
    pd.testing.assert_frame_equal(plain.to_frame().drop(columns="seconds"), long.drop(columns="seconds"),
                                  check_exact=True)
    pd.testing.assert_frame_equal(plain.to_frame(wide=True), back.to_frame(wide=True), check_exact=True)


def test_a_judged_run_with_repeats_errors_and_a_spent_budget_then_resumed(tmp_path):
    """Reasons, evidence, library verdicts, failed scores, scores left unrun by the budget, cases
    collapsed from repeats; then the same run resumed to its end."""
    cases = load_cases(EXAMPLE)[:12]
    out = tmp_path / "run"
    with StubJudge(noise=0.3, noise_seed=2, fault_rate_500=0.15, seed=4) as stub:
        judge = JudgeConfig(model="stub-judge", base_url=stub.base_url, cache_path=tmp_path / "c.sqlite",
                            max_retries=0)
        first = evaluate(cases, backends=["native", "rubric"], metrics=["mrr", "faithfulness", "abstention"],
                         judge=judge, out=out, repeats=3, max_calls=60, progress=False)
        statuses = set(first.to_frame()["status"])
        assert {"scored", "error", "not_run"} <= statuses, statuses
        same_frames(out)
        long = load_run(out).to_frame()
        assert long["repeats"].notna().any() and long["reason"].notna().any()
        assert load_run(out).costs()["judge_calls"].sum() > 0
        resumed = evaluate(cases, backends=["native", "rubric"],
                           metrics=["mrr", "faithfulness", "abstention"], judge=judge, out=out, repeats=3,
                           progress=False)
    assert resumed.manifest.counts.get("resumed_from")
    same_frames(out)


@pytest.mark.slow
@needs_backend("deepeval")
@needs_backend("ragas")
def test_a_run_of_the_libraries_backends_reads_back_the_frames_its_scores_give(tmp_path, example_cases,
                                                                               stub_judge):
    """RAGAS's and DeepEval's scores (their own verdicts, reasons, native values) beside native ones."""
    judge = stub_judge_config(stub_judge, embedding_model="stub-embedder")
    evaluate(example_cases[:6], backends=["native", "ragas", "deepeval"],
             metrics=["recall@5", "precision@5", "faithfulness", "must_contain"], judge=judge,
             out=tmp_path / "run", progress=False)
    long = load_run(tmp_path / "run").to_frame()
    assert long["library_passed"].notna().any() and set(long["backend"]) == {"native", "ragas", "deepeval"}
    same_frames(tmp_path / "run")


@pytest.mark.parametrize("stub_judge", [{"latency": 0.3}], indirect=True)
@pytest.mark.slow
@needs_backend("trulens")
def test_a_run_killed_mid_way_reads_back_what_it_recorded(tmp_path, example_path, stub_judge):
    """A run killed while judging (run.json still says running, the last score line maybe cut short):
    its frames hold what it recorded, as its scores read; then resumed to its end."""
    import subprocess
    import sys

    from test_run_lifecycle import _wait_for, judge_args

    out = tmp_path / "run"
    args = ["run", example_path, "--out", out, *judge_args(stub_judge, tmp_path), "--max-concurrency", "1"]
    proc = subprocess.Popen([sys.executable, "-c", "from ragbridge.commands import run_cli; run_cli()",
                             *map(str, args)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for(lambda: '"trulens"' in (out / "scores.jsonl").read_text()
                  if (out / "scores.jsonl").exists() else False, proc, "a judged score")
    finally:
        proc.kill()
        proc.wait()
    killed = load_run(out)
    assert killed.manifest.status == "interrupted"
    # what it recorded is counted where a killed run says how many scores it holds
    recorded = len(killed.to_frame())
    assert killed.counts["scores"] == recorded > 0 and f"{recorded} scores, interrupted" in repr(killed)
    same_frames(out)
    stub_judge.latency = 0.0
    assert ragbridge_cli("run", example_path, "--out", out, *judge_args(stub_judge, tmp_path)).returncode == 0
    assert load_run(out).manifest.counts["resumed_from"] > 0
    same_frames(out)


def _golden(path, n: int, seed: int = 3):
    rng = random.Random(seed)
    with open(path, "w") as f:
        for q in range(n):
            ids = [f"d{j}" for j in rng.sample(range(400), 40)]
            rel = {d: rng.randint(1, 3) for d in ids[:rng.randint(0, 5)]}
            f.write(json.dumps({"id": f"q{q}", "question": f"question {q}",
                                "contexts": [{"id": d} for d in ids], "relevant": rel,
                                "tags": [f"topic{q % 4}"]}) + "\n")
    return path


def _growth(folder, wide: bool) -> int:
    run = load_run(folder)
    tracemalloc.start()
    try:
        frame = run.to_frame(wide=wide)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(frame)
    return peak


@pytest.mark.slow
def test_the_frames_of_a_run_read_from_its_folder_grow_by_the_frame_not_by_the_cases(tmp_path, monkeypatch):
    from ragbridge.run import frames, recorded

    # blocks smaller than the runs, so that what grows with the run is the frame, not a block
    monkeypatch.setattr(frames, "BLOCK", 500)
    monkeypatch.setattr(recorded, "READ_BLOCK", 500)
    peaks = {}
    for n in (1000, 5000):
        folder = tmp_path / str(n)
        evaluate(ragbridge.load_cases(_golden(tmp_path / f"{n}.jsonl", n)), metrics=NATIVE, out=folder,
                 progress=False)
        peaks[n] = {wide: _growth(folder, wide) for wide in (True, False)}
    per_case = {wide: (peaks[5000][wide] - peaks[1000][wide]) / 4000 for wide in (True, False)}
    # the wide frame holds an id, a question and 4 floats a case (about 160 bytes measured), the long
    # one 4 rows of 23 fields (about 1.3 KB); a `Score` and a `Case` (40 chunks) a case, some 33 KB
    assert per_case[True] < 1000, per_case
    assert per_case[False] < 3000, per_case
