import json
import os
import time

import pytest

from conftest import ragbridge_cli
from ragbridge import RunError, evaluate, load_run
from ragbridge.run.folder import read_scores

RANKING = ["recall@5", "precision@5", "hit@5", "mrr", "ndcg@5", "map"]
CHECKS = ["must_contain", "must_not_contain", "abstention"]


def test_native_run_writes_folder(tmp_path, example_cases):
    out = tmp_path / "run"
    run = evaluate(example_cases, out=out)
    n = len(example_cases)
    assert {s.metric for s in run.scores} == set(RANKING + CHECKS)
    assert len(run.scores) == n * 9
    manifest = json.loads((out / "run.json").read_text())
    assert manifest["status"] == "complete" and manifest["finished_at"]
    assert manifest["dataset"]["n_cases"] == n and manifest["dataset"]["fingerprint"].startswith("sha256:")
    assert manifest["backends"]["native"] == "0.1.0"
    assert manifest["counts"]["scores"] == n * 9
    lines = (out / "scores.jsonl").read_text().splitlines()
    assert len(lines) == n * 9
    assert len((out / "cases.jsonl").read_text().splitlines()) == n
    # the example has two lists that repeat a chunk id
    assert manifest["counts"]["duplicate_chunk_ids"] >= 2
    back = load_run(out)
    assert len(back.scores) == n * 9 and back.complete


def test_undefined_is_counted_not_zero(example_cases):
    run = evaluate(example_cases, metrics=["recall@5", "abstention"])
    summary = run.summary()
    overall = summary[summary.tag == "(all)"].set_index("metric")
    unlabelled = sum(1 for c in example_cases if not c.relevant)
    assert overall.loc["recall@5", "n_undefined"] == unlabelled >= 3
    scored = [s.value for s in run.scores if s.metric == "recall@5" and s.value is not None]
    assert overall.loc["recall@5", "mean"] == pytest.approx(sum(scored) / len(scored))
    unanswerable = [c for c in example_cases if not c.answerable]
    assert overall.loc["abstention", "n_scored"] == len(unanswerable)
    assert overall.loc["abstention", "n_undefined"] == len(example_cases) - len(unanswerable)
    abst = {s.case_id: s.value for s in run.scores if s.metric == "abstention" and s.value is not None}
    assert abst["unanswerable-carbon-neutral"] == 0.0
    assert sum(abst.values()) == len(unanswerable) - 1
    by_tag = summary[(summary.tag == "unanswerable") & (summary.metric == "abstention")]
    assert by_tag["n_scored"].iloc[0] == len(unanswerable)


def test_k_and_explicit_cutoffs(example_cases):
    run = evaluate(example_cases, metrics=["recall", "ndcg@10", "precision@k"],
                   options=__import__("ragbridge").RunOptions(k=3))
    assert {s.metric for s in run.scores} == {"recall@3", "ndcg@10", "precision@3"}


def test_resume_after_kill(tmp_path, example_cases):
    out = tmp_path / "run"
    full = evaluate(example_cases, out=out)
    lines = (out / "scores.jsonl").read_text().splitlines(keepends=True)
    keep = len(lines) // 3
    # a kill mid-run: a third of the scores on disk, the last line cut short, manifest not finished
    (out / "scores.jsonl").write_text("".join(lines[:keep]) + lines[keep][:25])
    manifest = json.loads((out / "run.json").read_text())
    manifest.update(status="running", finished_at=None, timing={"wall_seconds": {"native": 100.0}})
    (out / "run.json").write_text(json.dumps(manifest))
    computed = []
    t0 = time.monotonic()
    resumed = evaluate(example_cases, out=out, on_score=computed.append)
    elapsed = time.monotonic() - t0
    assert len(computed) == len(lines) - keep
    assert resumed.manifest.counts["resumed_from"] == keep
    assert resumed.manifest.status == "complete"
    scores, bad = read_scores(out / "scores.jsonl")
    assert bad == 0 and len(scores) == len(lines)
    assert {s.key: s.value for s in scores} == {s.key: s.value for s in full.scores}
    # the wall time of both sessions is kept: the first one's (100 s here), plus the resumed one's
    assert 0 <= full.manifest.timing["wall_seconds"]["native"] <= 100
    assert 100 <= resumed.manifest.timing["wall_seconds"]["native"] <= 100 + elapsed
    assert json.loads((out / "run.json").read_text())["timing"] == resumed.manifest.timing


def test_resume_after_a_kill_inside_a_character(tmp_path, example_cases):
    # a write cut short can end inside a multi-byte UTF-8 character (a reason in French, say)
    out = tmp_path / "run"
    evaluate(example_cases, out=out, metrics=["mrr"])
    lines = (out / "scores.jsonl").read_bytes().splitlines(keepends=True)
    keep = len(lines) // 2
    (out / "scores.jsonl").write_bytes(b"".join(lines[:keep]) + lines[keep][:30] + "é".encode()[:1])
    assert read_scores(out / "scores.jsonl") == (read_scores(out / "scores.jsonl")[0], 1)
    assert len(load_run(out).scores) == keep
    computed = []
    evaluate(example_cases, out=out, metrics=["mrr"], on_score=computed.append)
    assert len(computed) == len(lines) - keep
    scores, bad = read_scores(out / "scores.jsonl")
    assert bad == 0 and len(scores) == len(lines)


def test_resume_refuses_other_dataset_when_asked_to(tmp_path, example_cases):
    out = tmp_path / "run"
    evaluate(example_cases[:5], out=out, metrics=["mrr"])
    with pytest.raises(RunError, match="different cases.*overwrite=True") as err:
        evaluate(example_cases[:6], out=out, metrics=["mrr"], changed_cases="refuse")
    assert "--overwrite" in err.value.cli
    evaluate(example_cases[:6], out=out, metrics=["mrr"], overwrite=True)
    assert len(load_run(out).scores) == 6


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(backends=["nope"]), "unknown backend 'nope'"),
        (dict(metrics=["recal@5"]),
         r"no selected backend offers metric 'recal@5' \(did you mean 'recall@5'\?\)"),
    ],
)
def test_bad_plan(example_cases, kwargs, message):
    with pytest.raises(RunError, match=message):
        evaluate(example_cases, **kwargs)


def test_cli_run_prints_summary(tmp_path, example_path):
    out = tmp_path / "run"
    res = ragbridge_cli("run", example_path, "--out", out, "--k", "3")
    assert res.returncode == 0, res.stderr
    assert "recall@3" in res.stdout and "Mean per tag" in res.stdout and "multi-hop" in res.stdout
    assert ("warning: 2 repeated chunk id(s) in 2 case(s) ('returns-label-validity', "
            "'notifications-quiet-hours') are dropped before ranking") in res.stderr
    assert (out / "run.json").exists()


def test_cli_bad_metric_exits_2(tmp_path, example_path):
    res = ragbridge_cli("run", example_path, "--out", tmp_path / "r", "--metric", "bogus")
    assert res.returncode == 2 and "bogus" in res.stderr


def test_cli_refuses_a_misspelt_metric_before_it_reads_the_golden_set(tmp_path, example_path):
    """The metric is checked first: a golden set that would take minutes to read (here one whose third
    line is broken) is not read at all; the message names the metric meant, at the cut asked for."""
    lines = example_path.read_text().splitlines()
    (tmp_path / "golden.jsonl").write_text("\n".join([*lines[:2], "{not json", *lines[2:]]) + "\n")
    res = ragbridge_cli("run", tmp_path / "golden.jsonl", "--out", tmp_path / "r", "--metric", "recal@10")
    assert res.returncode == 2
    assert "no selected backend offers metric 'recal@10' (did you mean 'recall@10'?)" in res.stderr
    assert "reading" not in res.stderr and "golden.jsonl:3" not in res.stderr
    assert not (tmp_path / "r").exists()
    # the metric meant: the golden set is read, and its broken line named
    res = ragbridge_cli("run", tmp_path / "golden.jsonl", "--out", tmp_path / "r", "--metric", "recall@10")
    assert res.returncode == 2 and "golden.jsonl:3: not valid JSON" in res.stderr, res.stderr


def test_cli_backends_lists_native():
    res = ragbridge_cli("backends")
    assert res.returncode == 0, res.stderr
    assert "native" in res.stdout and "recall@k" in res.stdout and "abstention" in res.stdout


class _Lifecycle:
    """A backend plugin that records its lifecycle: what the runner promises every backend."""

    def __init__(self, fail_open=False):
        from ragbridge.plugin import Backend, MetricSpec, Score

        events = self.events = []

        class LifecycleBackend(Backend):
            name = "lifecycle"

            def metrics(self):
                return [MetricSpec("m1"), MetricSpec("m2")]

            def environment(self):
                return {"RAGBRIDGE_TEST_LIFECYCLE": "on", "HOME": "must-not-replace-a-set-variable"}

            async def open(self, ctx):
                events.append(("open", os.environ.get("RAGBRIDGE_TEST_LIFECYCLE"), os.environ["HOME"]))
                if fail_open:
                    raise ConnectionError("no route to the library's service")
                return {"opened": len([e for e in events if e[0] == "open"])}

            async def score(self, metric, cases, ctx):
                events.append(("score", metric, ctx.session["opened"]))
                for c in cases:
                    yield Score(case_id=c.id, metric=metric, backend=self.name, value=1.0)

            async def close(self, ctx):
                events.append(("close", ctx.session["opened"]))

        self.backend = LifecycleBackend()



@pytest.fixture
def lifecycle_plugin():
    from ragbridge.plugin import hookimpl
    from ragbridge.plugins import load_plugins, pm

    def make(**kw):
        import types

        plugin = _Lifecycle(**kw)

        @hookimpl
        def ragbridge_register_backends(register):
            register(plugin.backend)

        load_plugins()
        pm.register(types.SimpleNamespace(ragbridge_register_backends=ragbridge_register_backends),
                    name="lifecycle-test")
        return plugin

    yield make
    pm.unregister(name="lifecycle-test")


def test_each_backend_is_opened_once_per_run_with_its_environment_and_closed(lifecycle_plugin, example_cases):
    plugin = lifecycle_plugin()
    home = os.environ["HOME"]
    assert "RAGBRIDGE_TEST_LIFECYCLE" not in os.environ
    run = evaluate(example_cases[:3], backends=["lifecycle"])
    assert run.complete and len(run.scores) == 6
    events = plugin.events
    assert events[0] == ("open", "on", home)  # the default is set, the user's HOME is not replaced
    assert sorted(e for e in events if e[0] == "score") == [("score", "m1", 1), ("score", "m2", 1)]
    assert events[-1] == ("close", 1)
    assert "RAGBRIDGE_TEST_LIFECYCLE" not in os.environ  # restored after the run


def test_a_backend_that_cannot_open_errors_every_case_and_the_run_goes_on(lifecycle_plugin, example_cases):
    plugin = lifecycle_plugin(fail_open=True)
    run = evaluate(example_cases[:2], backends=["lifecycle", "native"], metrics=["m1", "mrr"])
    mine = [s for s in run.scores if s.backend == "lifecycle"]
    assert len(mine) == 2 and all(s.error == "ConnectionError: no route to the library's service"
                                  for s in mine)
    assert all(s.error is None for s in run.scores if s.backend == "native")
    assert [e[0] for e in plugin.events] == ["open"]  # never scored, and nothing to close


def test_a_run_whose_folder_was_removed_says_so_rather_than_reading_as_empty(tmp_path, example_cases):
    import shutil

    run = evaluate(example_cases[:3], out=tmp_path / "run")  # native: scores read from the folder
    shutil.rmtree(tmp_path / "run")
    with pytest.raises(RunError, match="no longer holds this run"):
        run.scores  # noqa: B018


def test_a_resumed_complete_run_on_ray_starts_no_cluster(tmp_path, example_path):
    """Nothing left to score: the Ray executor imports no Ray and starts nothing (a cluster takes
    seconds to start and hundreds of MB), and the run reads as resumed and complete."""
    import importlib.util
    import subprocess
    import sys

    if importlib.util.find_spec("ray") is None:
        pytest.skip("needs Ray: pip install 'ragbridge[ray]'")
    out = tmp_path / "run"
    first = ragbridge_cli("run", example_path, "--out", out, "--no-progress", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    show = ("import atexit, sys\n"
            "atexit.register(lambda: print('RAY', 'ray' in sys.modules, file=sys.stderr))\n"
            "from ragbridge.commands import run_cli\nrun_cli()\n")
    again = subprocess.run([sys.executable, "-c", show, "run", str(example_path), "--out", str(out),
                            "--executor", "ray", "--no-progress", "--json"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert "RAY False" in again.stderr.splitlines()
    doc = json.loads(again.stdout)
    assert doc["counts"]["resumed_from"] == len((out / "scores.jsonl").read_text().splitlines()) > 0
    assert load_run(out).complete


def test_a_summary_does_not_depend_on_the_order_scores_arrive_in():
    """Ray workers and resumed runs record cases in another order: the means must be the same bits.
    Summed one by one in float, these values give 0.888888888888889 in one order and
    0.8888888888888888 in another."""
    import random

    from ragbridge.run.summary import Totals
    from ragbridge.schema import Score, ScoreBlock

    values = [1.0, 1.0, 2 / 3, 1.0, 2 / 3, 1.0] + [random.Random(7).random() / 3 for _ in range(300)]
    means, block_means = set(), set()
    for seed in range(40):
        order = list(range(len(values)))
        random.Random(seed).shuffle(order)
        one_by_one = Totals()
        for i in order:
            metric = ("context_relevance", "answer_relevance")[i % 2]  # which comes first varies
            one_by_one.add(Score(case_id=f"c{i}", metric="faithfulness", backend="rubric", value=values[i],
                                 cost=values[i] / 1000, judge_calls=1), ("t",))
            one_by_one.add(Score(case_id=f"c{i}", metric=metric, backend="rubric", value=values[i],
                                 cost=values[i] / 7, judge_calls=1))
        rows = {(r["metric"], r["tag"]): r for r in one_by_one.rows()}
        means.add((rows["faithfulness", "(all)"]["mean"], rows["faithfulness", "(all)"]["cost"],
                   rows["faithfulness", "t"]["mean"], repr(sorted(one_by_one.costs()[1].items())),
                   repr(one_by_one.costs()[0])))
        in_blocks = Totals()
        for start in range(0, len(order), 17):
            part = order[start:start + 17]
            in_blocks.add_block(ScoreBlock(backend="native", metric="recall@5",
                                           case_ids=[f"c{i}" for i in part],
                                           values=[values[i] for i in part], reasons=[None] * len(part)))
        block_means.add(in_blocks.rows()[0]["mean"])
    assert len(means) == 1 and len(block_means) == 1
    assert block_means == {means.pop()[0]}


def test_scores_reach_the_folder_while_another_backend_is_still_at_work(tmp_path, example_cases):
    """One backend scores its cases at once, another takes seconds: the first one's scores are in
    scores.jsonl within a second or two, not held back until the other sends one."""
    import asyncio
    import types

    from ragbridge.plugin import Backend, MetricSpec, Score, hookimpl
    from ragbridge.plugins import load_plugins, pm

    out = tmp_path / "run"
    seen: list[int] = []

    class Quick(Backend):
        name = "quick"

        def metrics(self):
            return [MetricSpec("q1")]

        async def score(self, metric, cases, ctx):
            for c in cases:
                yield Score(case_id=c.id, metric=metric, backend=self.name, value=1.0)

    class Slow(Backend):
        name = "slow"

        def metrics(self):
            return [MetricSpec("s1")]

        async def score(self, metric, cases, ctx):
            await asyncio.sleep(3)
            seen.append(len((out / "scores.jsonl").read_text().splitlines()))
            for c in cases:
                yield Score(case_id=c.id, metric=metric, backend=self.name, value=0.0)

    @hookimpl
    def ragbridge_register_backends(register):
        register(Quick())
        register(Slow())

    load_plugins()
    plugin = types.SimpleNamespace(ragbridge_register_backends=ragbridge_register_backends)
    pm.register(plugin, name="flush-test")
    try:
        run = evaluate(example_cases[:3], backends=["quick", "slow"], out=out)
    finally:
        pm.unregister(name="flush-test")
    assert run.complete and seen == [3]


def test_a_resumed_run_reads_its_kept_scores_a_batch_at_a_time(tmp_path, example_cases, monkeypatch):
    """A session that resumes a run reads the earlier scores as columns and makes `Score` objects of
    one batch's kept scores at a time, never of every score (a resumed run of 300,000 cases held 1.6
    GB, one run again once complete 3 GB): the run resumed after half its scores were cut off, and
    the complete run run again, have the first run's scores and summary."""
    from ragbridge.run import folder as run_folder
    from ragbridge.run import recorded

    out = tmp_path / "run"
    first = evaluate(example_cases, out=out, metrics=RANKING, batch_size=8)
    whole = (out / "scores.jsonl").read_text().splitlines(keepends=True)

    def no_whole_reading(*args, **kwargs):
        raise AssertionError("every earlier score read as an object")
    monkeypatch.setattr(run_folder, "read_scores", no_whole_reading)
    made = []
    real = recorded.scores_from_lines
    monkeypatch.setattr(recorded, "scores_from_lines", lambda lines: made.append(len(lines)) or real(lines))
    for cut in (len(whole), len(whole) // 2):
        (out / "scores.jsonl").write_text("".join(whole[:cut]))
        (out / "columns.npz").unlink(missing_ok=True)
        made.clear()
        again = evaluate(example_cases, out=out, metrics=RANKING, batch_size=8)
        assert again.manifest.counts["resumed_from"] == cut
        assert made and max(made) <= 8 * len(RANKING), made  # a batch's kept scores at a time
        monkeypatch.undo()
        assert sorted((s.repeat_key, s.value) for s in load_run(out).scores) == sorted(
            (s.repeat_key, s.value) for s in first.scores)
        assert again.summary().equals(first.summary())
        monkeypatch.setattr(run_folder, "read_scores", no_whole_reading)
        monkeypatch.setattr(recorded, "scores_from_lines", lambda ls: made.append(len(ls)) or real(ls))
