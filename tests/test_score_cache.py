"""The score cache: a warm re-run into a new folder reuses each judged score without calling the library.

The observable that the library was not called: the judge gateway saw no request at all (no upstream
call and no judge-cache hit), where the same re-run without the score cache has the library send
every request again (all of them judge-cache hits).
"""

from __future__ import annotations

import json
import sqlite3

import pytest

from conftest import EXAMPLE, ragbridge_cli
from ragbridge import evaluate, load_cases
from ragbridge.backend import MetricSpec, RunOptions
from ragbridge.judge import JudgeConfig
from ragbridge.plugins import get_backends
from ragbridge.run.score_cache import case_key, metric_prefix
from ragbridge.testing.process import cli_showing_imports, imported_libraries
from ragbridge.testing import StubJudge

needs_deepeval = pytest.mark.skipif(not get_backends()["deepeval"].available(),
                                    reason="needs the deepeval backend")

#: what a reused score carries over unchanged
SAME = ("case_id", "metric", "backend", "value", "native_metric", "native_value", "passed", "reason",
        "error", "evidence")


def _scores(folder):
    return {s["case_id"]: s for s in map(json.loads, (folder / "scores.jsonl").read_text().splitlines())}


def _counts(folder):
    return json.loads((folder / "run.json").read_text())["counts"]


def _reuse(counts):
    """``counts.score_cache`` without the reused scores' origins (``by_backend``)."""
    return {k: v for k, v in counts["score_cache"].items() if k != "by_backend"}


def _golden(tmp_path, n):
    golden = tmp_path / "golden.jsonl"
    golden.write_text("".join(EXAMPLE.read_text().splitlines(keepends=True)[:n]))
    return golden


@needs_deepeval
@pytest.mark.slow
def test_warm_rerun_into_a_new_folder_reuses_every_score_without_the_library(tmp_path):
    golden = _golden(tmp_path, 8)
    with StubJudge() as stub:
        def run(out, *extra):
            return ragbridge_cli("run", golden, "--out", tmp_path / out, "--backend", "deepeval",
                                 "--metric", "faithfulness", "--judge-model", "gpt-4o-mini",
                                 "--judge-base-url", stub.base_url, "--no-progress", *extra, cwd=tmp_path)

        cold = run("cold")
        assert cold.returncode == 0, cold.stdout + cold.stderr
        calls = len(stub.posts())
        assert calls > 0 and _reuse(_counts(tmp_path / "cold")) == {"reused": 0, "stored": 8}
        assert (tmp_path / ".ragbridge" / "judge-cache.scores.sqlite").is_file()

        warm = run("warm")
        assert warm.returncode == 0, warm.stdout + warm.stderr
        assert "score cache: 8 score(s) reused" in warm.stdout
        assert "stub judge" in warm.stdout  # still labelled: the reused scores came from the stub
        counts = _counts(tmp_path / "warm")
        assert counts["judge"]["calls"] == 0 and counts["judge"]["cache_hits"] == 0  # no request at all
        assert _reuse(counts) == {"reused": 8, "stored": 0}
        assert len(stub.posts()) == calls
        a, b = _scores(tmp_path / "cold"), _scores(tmp_path / "warm")
        assert a.keys() == b.keys() and len(a) == 8
        for cid in a:
            assert {k: a[cid].get(k) for k in SAME} == {k: b[cid].get(k) for k in SAME}
            assert b[cid]["cached"] is True and "cached" not in a[cid]
            assert b[cid]["judge_calls"] == 0 and a[cid]["judge_calls"] > 0

        # without the score cache the library runs again, every request a judge-cache hit
        again = run("again", "--no-score-cache")
        assert again.returncode == 0, again.stdout + again.stderr
        counts = _counts(tmp_path / "again")
        assert counts["judge"]["calls"] == 0 and counts["judge"]["cache_hits"] >= 8
        assert "score_cache" not in counts and len(stub.posts()) == calls
        assert {c: s["value"] for c, s in _scores(tmp_path / "again").items()} == \
            {c: s["value"] for c, s in a.items()}


def _config(stub, tmp_path, **kw):
    return JudgeConfig(model="stub-judge", base_url=stub.base_url, cache_path=tmp_path / "judge.sqlite", **kw)


def _abstention(cases, judge, **kw):
    return evaluate(cases, backends=["rubric"], metrics=["abstention"], judge=judge, **kw)


def test_an_edited_case_or_another_judge_is_scored_again_and_only_that(tmp_path):
    cases = load_cases(EXAMPLE)[:12]
    with StubJudge(models=("stub-judge", "other-judge")) as stub:
        judge = _config(stub, tmp_path)
        cold = _abstention(cases, judge)
        assert cold.manifest.counts["score_cache"]["stored"] == 12
        edited = list(cases)
        edited[3] = edited[3].model_copy(update={"answer": "I can't help with that."})
        before = len(stub.posts())
        warm = _abstention(edited, judge)
        assert _reuse(warm.manifest.counts) == {"reused": 11, "stored": 1}
        assert len(stub.posts()) == before + 1  # the edited case's one call
        changed = {s.case_id for s in warm.scores if not s.cached}
        assert changed == {edited[3].id}
        # a tag or metadata edit is an edit too: the key holds the whole canonical case
        retagged = [c.model_copy(update={"tags": [*c.tags, "new"]}) for c in cases[:2]]
        assert _abstention(retagged, judge).manifest.counts["score_cache"]["reused"] == 0
        # another judge model: nothing reused
        other = _abstention(cases, judge.model_copy(update={"model": "other-judge"}))
        assert other.manifest.counts["score_cache"]["reused"] == 0


def test_errors_and_unrun_scores_are_not_stored(tmp_path):
    cases = load_cases(EXAMPLE)[:6]
    with StubJudge() as stub:
        judge = _config(stub, tmp_path, max_retries=0)
        stub.inject(*["500"] * 6)
        failed = _abstention(cases, judge)
        errored = {s.case_id for s in failed.scores if s.error}
        assert errored and failed.manifest.counts["score_cache"]["stored"] == 6 - len(errored)
        stub.reset()
        budgeted = _abstention(cases, judge, max_calls=0)  # the budget leaves the rest unrun
        assert budgeted.manifest.counts["not_run"] == len(errored)
        healthy = _abstention(cases, judge)
        assert _reuse(healthy.manifest.counts) == {"reused": 6 - len(errored), "stored": len(errored)}
        assert all(s.error is None for s in healthy.scores)


def test_cache_modes_and_dry_run(tmp_path):
    cases = load_cases(EXAMPLE)[:5]
    with StubJudge() as stub:
        judge = _config(stub, tmp_path)
        off = _abstention(cases, judge.model_copy(update={"cache_mode": "off"}))
        assert "score_cache" not in off.manifest.counts
        assert not (tmp_path / "judge.scores.sqlite").exists()
        dry = _abstention(cases, judge, dry_run=True)
        assert _reuse(dry.manifest.counts) == {"reused": 0, "stored": 0}  # a dry run writes nothing
        _abstention(cases[:3], judge)
        dry = _abstention(cases, judge, dry_run=True)
        assert dry.manifest.counts["score_cache"]["reused"] == 3
        assert dry.manifest.counts["judge"]["calls"] == 2  # only the two cases the cache lacks
        read_only = judge.model_copy(update={"cache_mode": "read-only"})
        ro = _abstention(cases, read_only)
        assert _reuse(ro.manifest.counts) == {"reused": 3, "stored": 0}
        db = sqlite3.connect(tmp_path / "judge.scores.sqlite")
        assert db.execute("SELECT count(*) FROM scores").fetchone() == (3,)


def test_the_key_names_what_a_score_depends_on():
    judge = JudgeConfig(model="m", base_url="http://127.0.0.1:1/v1", cache_path=None)
    spec = MetricSpec("faithfulness", native_name="Faithfulness", judge=True)
    base = dict(backend="deepeval", version="4.3.1", metric="faithfulness", spec=spec, options=RunOptions(),
                judge=judge)
    prefix = metric_prefix(**base)
    line = b'{"id":"a","question":"q"}'
    assert case_key(prefix, 0, line) == case_key(metric_prefix(**base), 0, line)
    changed = [
        dict(version="4.3.2"),
        dict(metric="answer_relevancy"),
        dict(spec=MetricSpec("faithfulness", native_name="Faithfulness", judge=True, digest="sha256:x")),
        dict(options=RunOptions(backend_options={"deepeval": {"threshold": 0.7}})),
        dict(options=RunOptions(k=3)),
        dict(judge=judge.model_copy(update={"model": "n"})),
        dict(judge=judge.model_copy(update={"base_url": "http://127.0.0.1:2/v1"})),
        dict(judge=judge.model_copy(update={"max_tokens": 99})),
    ]
    for change in changed:
        assert metric_prefix(**{**base, **change}) != prefix, change
    # what does not change a score does not change the key: another backend's options (the native
    # backend's too), its options given at their defaults, the judge's concurrency
    from ragbridge.plugins import get_backends

    for other in ({"ragas": {"concurrency": 2}}, {"native": {"decline_phrases": ["no idea"]}},
                  {"deepeval": {"strict_mode": False}}):
        options = RunOptions(backend_options=other).resolved(get_backends(), ["deepeval"])
        assert metric_prefix(**{**base, "options": options}) == prefix, other
    assert metric_prefix(**{**base, "judge": judge.model_copy(update={"max_concurrency": 3})}) == prefix
    # a library version's backend (deepeval==4.3.1, in an environment of its own) reads deepeval's options
    versioned = {**base, "backend": "deepeval==4.3.1"}
    threshold = RunOptions(backend_options={"deepeval": {"threshold": 0.7}})
    assert metric_prefix(**{**versioned, "options": threshold}) != metric_prefix(**versioned)
    assert case_key(prefix, 1, line) != case_key(prefix, 0, line)
    assert case_key(prefix, 0, line.replace(b'"q"', b'"q2"')) != case_key(prefix, 0, line)



@pytest.mark.slow
def test_a_killed_run_leaves_a_cache_that_holds_only_what_its_folder_holds(tmp_path):
    """kill -9 in the middle of a judged run: the score cache stays readable, holds no score the run
    folder lacks (it commits after the folder's flush), and a re-run into a new folder reuses those
    and scores the rest, with the values an unbroken run gives."""
    import signal
    import subprocess
    import sys
    import time

    golden = _golden(tmp_path, 40)
    with StubJudge(latency=0.05) as stub:
        def args(out):
            return [sys.executable, "-c", "from ragbridge.commands import run_cli; run_cli()", "run",
                    str(golden), "--out", str(tmp_path / out), "--backend", "rubric",
                    "--metric", "abstention", "--judge-model", "stub-judge",
                    "--judge-base-url", stub.base_url,
                    "--max-concurrency", "2", "--batch-size", "4", "--no-progress"]

        proc = subprocess.Popen(args("killed"), cwd=tmp_path, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        scores = tmp_path / "killed" / "scores.jsonl"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            if scores.exists() and len(scores.read_text().splitlines()) >= 12:
                break
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        on_disk = {json.loads(x)["case_id"] for x in scores.read_text().splitlines() if x.endswith("}")}
        assert 12 <= len(on_disk) < 40
        db = sqlite3.connect(tmp_path / ".ragbridge" / "judge-cache.scores.sqlite")
        stored = [json.loads(x) for (x,) in db.execute("SELECT score FROM scores")]
        db.close()
        assert stored and {s["case_id"] for s in stored} <= on_disk
        again = subprocess.run(args("again"), cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert again.returncode == 0, again.stdout + again.stderr
        assert _counts(tmp_path / "again")["score_cache"]["reused"] == len(stored)
        fresh = ragbridge_cli("run", golden, "--out", tmp_path / "fresh", "--backend", "rubric", "--metric",
                              "abstention", "--judge-model", "stub-judge", "--judge-base-url", stub.base_url,
                              "--no-score-cache", "--no-progress", cwd=tmp_path)
        assert fresh.returncode == 0, fresh.stderr
    assert {c: s["value"] for c, s in _scores(tmp_path / "again").items()} == \
        {c: s["value"] for c, s in _scores(tmp_path / "fresh").items()}


#: the libraries' own packages (phoenix's namespace package ``phoenix`` holds no code)
LIBRARY_MODULES = {"ragas": "ragas", "deepeval": "deepeval", "trulens": "trulens", "phoenix": "phoenix.evals"}
CLI_SHOWING_IMPORTS = cli_showing_imports(LIBRARY_MODULES)


@pytest.mark.slow  # three libraries imported in three processes: 20-45 s
def test_warm_rerun_opens_only_the_backends_with_work(tmp_path):
    """A re-run whose every score is in the score cache imports none of the libraries (no backend is
    opened); one where a single backend has work opens that backend alone."""
    import subprocess
    import sys

    libraries = [b for b in LIBRARY_MODULES if get_backends()[b].available()]
    if len(libraries) < 2:
        pytest.skip("needs two of the library backends")
    golden = _golden(tmp_path, 3)
    with StubJudge() as stub:
        judge = JudgeConfig(model="gpt-4o-mini", base_url=stub.base_url,
                            cache_path=tmp_path / ".ragbridge" / "judge-cache.sqlite")
        # the cold run, in this process: every library but the last scores into the caches
        cold = evaluate(load_cases(golden), backends=libraries[:-1], metrics=["faithfulness"], judge=judge,
                        out=tmp_path / "cold")
        assert cold.complete and cold.manifest.counts["score_cache"]["stored"] == 3 * (len(libraries) - 1)

        def rerun(out, backends):
            args = ["run", golden, "--out", tmp_path / out, "--metric", "faithfulness",
                    "--judge-model", "gpt-4o-mini", "--judge-base-url", stub.base_url, "--no-progress"]
            for b in backends:
                args += ["--backend", b]
            p = subprocess.run([sys.executable, "-c", CLI_SHOWING_IMPORTS, *map(str, args)], cwd=tmp_path,
                               capture_output=True, text=True, timeout=300)
            assert p.returncode == 0, p.stdout + p.stderr
            return p

        stub.reset()
        warm = rerun("warm", libraries[:-1])
        assert imported_libraries(warm.stderr) == []
        n_cached = 3 * (len(libraries) - 1)
        assert stub.posts() == [] and _counts(tmp_path / "warm")["score_cache"]["reused"] == n_cached

        partly = rerun("partly", libraries)  # the last library has work: it alone is opened
        assert imported_libraries(partly.stderr) == [libraries[-1]]
        assert _reuse(_counts(tmp_path / "partly")) == {"reused": n_cached, "stored": 3}
    values = {(s["backend"], s["case_id"]): s["value"]
              for s in map(json.loads, (tmp_path / "partly" / "scores.jsonl").read_text().splitlines())}
    assert {k: v for k, v in values.items() if k[0] != libraries[-1]} == {
        (s.backend, s.case_id): s.value for s in cold.scores}


def test_the_report_shows_reused_scores_and_where_they_came_from(tmp_path):
    """A re-run whose scores all come from the score cache: the judge-usage table said 0 calls, 0
    tokens, 0.0 s for each backend without saying why; it now counts the reused scores and names the
    score cache and when they were made, in the Markdown, HTML and JSON reports."""
    from ragbridge.report import write_report

    with StubJudge() as stub:
        cfg = JudgeConfig(model="judge-m", base_url=stub.base_url, cache_path=tmp_path / "c.sqlite")
        evaluate(load_cases(EXAMPLE)[:4], backends=["rubric"], metrics=["answer_relevance"],
                 out=tmp_path / "cold", judge=cfg)
        evaluate(load_cases(EXAMPLE)[:6], backends=["rubric"], metrics=["answer_relevance"],
                 out=tmp_path / "warm", judge=cfg)
    md = write_report(tmp_path / "warm", tmp_path / "r.md", fmt="md").read_text()
    assert "| backend | scores | reused | judge calls |" in md and "| rubric | 6 | 4 | 2 |" in md
    line = next(x for x in md.splitlines() if x.startswith("Reused:"))
    assert "rubric: 4 of 6 scores reused from the score cache " in line and "c.scores.sqlite, made " in line
    html = write_report(tmp_path / "warm", tmp_path / "r.html", fmt="html").read_text()
    assert "<th>reused</th>" in html and "4 of 6 scores reused from the score cache" in html
    doc = json.loads(write_report(tmp_path / "warm", tmp_path / "r.json", fmt="json").read_text())
    assert doc["judge_usage"][0]["reused"] == 4
    assert doc["reused_from"]["by_backend"]["rubric"]["first_made"].endswith("UTC")


def test_the_report_says_which_scores_were_reused_and_where_they_came_from(tmp_path):
    """A warm re-run's judge-usage table counted 0 calls, 0 tokens, 0.0 s for scores the score cache
    gave, without a word: the report shows them as reused, with the cache file and when they were made,
    in Markdown, HTML and JSON alike."""
    cases = load_cases(EXAMPLE)[:4]
    with StubJudge() as stub:
        judge = _config(stub, tmp_path)
        _abstention(cases, judge, out=tmp_path / "cold")
        _abstention(cases[:3], judge, out=tmp_path / "warm")  # three reused; a new folder
    args = ("report", tmp_path / "warm", "--out", "-", "--format")
    md = ragbridge_cli(*args, "md", cwd=tmp_path)
    assert md.returncode == 0, md.stderr
    assert "| backend | scores | reused | judge calls |" in md.stdout
    assert "| rubric | 3 | 3 | 0 | 0 | 0 |" in md.stdout
    said = " ".join(md.stdout.split())
    assert "rubric: 3 of 3 scores reused from the score cache " in said
    assert "judge.scores.sqlite, made " in said and "are not counted here" in said
    doc = json.loads(ragbridge_cli(*args, "json", cwd=tmp_path).stdout)
    assert [(u["backend"], u["scores"], u["reused"]) for u in doc["judge_usage"]] == [("rubric", 3, 3)]
    assert doc["reused_from"]["path"] == str(tmp_path / "judge.scores.sqlite")
    reused = doc["reused_from"]["by_backend"]["rubric"]
    assert reused["reused"] == 3 and reused["first_made"].endswith(" UTC")
    page = tmp_path / "warm.html"
    assert ragbridge_cli("report", tmp_path / "warm", "--out", page, cwd=tmp_path).returncode == 0
    assert "<strong>Reused</strong>: rubric: 3 of 3 scores reused" in page.read_text()
    cold = ragbridge_cli("report", tmp_path / "cold", "--out", "-", "--format", "md", cwd=tmp_path).stdout
    assert "| rubric | 4 | 0 |" in cold and "reused from the score cache" not in cold
