"""Running the same evaluation again, as a notebook's cell is run again: the stub judge started anew
(another port) is the same judge, and cases edited since are scored again while the others are kept
(in Python; the command line refuses, exit 2, saying what to do)."""

from __future__ import annotations

import json

import pytest
from conftest import ragbridge_cli

from ragbridge import evaluate, load_cases, load_run
from ragbridge.judge import JudgeConfig
from ragbridge.run import RunError
from ragbridge.testing import StubJudge

METRIC = {"backends": ["rubric"], "metrics": ["faithfulness"]}


def _judge(stub: StubJudge, tmp_path) -> JudgeConfig:
    return JudgeConfig(model="stub-judge", base_url=stub.base_url, cache_path=tmp_path / "cache.sqlite")


def test_a_stub_started_again_is_the_same_judge(tmp_path, example_cases):
    cases, out = example_cases[:4], tmp_path / "run"
    with StubJudge() as first:
        evaluate(cases, **METRIC, judge=_judge(first, tmp_path), out=out)
        calls = len(first.posts())
    assert calls > 0
    with StubJudge() as again:  # another port: the cell run again
        assert again.port != first.port
        run = evaluate(cases, **METRIC, judge=_judge(again, tmp_path), out=out)
        assert run.manifest.counts["resumed_from"] == 4 and not again.posts()
        # the scores are the stub's, whatever its port: taken from the score cache into a new folder
        fresh = evaluate(cases, **METRIC, judge=_judge(again, tmp_path), out=tmp_path / "fresh")
        assert not again.posts() and fresh.manifest.counts["score_cache"]["reused"] == 4
    manifest = json.loads((out / "run.json").read_text())
    assert manifest["judge"]["stub"] is True and manifest["judge"]["stub_settings"] == "noise=0"
    assert manifest["judge"]["base_url"] == again.base_url  # what was asked, as it was asked
    # a stub that answers otherwise (noisy) is another judge: refused, by what differs
    with StubJudge(noise=0.3, noise_seed=2) as noisy:
        with pytest.raises(RunError) as err:
            evaluate(cases, **METRIC, judge=_judge(noisy, tmp_path), out=out)
    assert "noise=0.3,noise_seed=2" in str(err.value) and "overwrite=True" in str(err.value)
    assert "--overwrite" not in str(err.value) and "--overwrite" in err.value.cli


def test_only_the_stub_loses_its_port():
    from ragbridge.judge import identity_url

    assert identity_url("http://127.0.0.1:4100/v1", "noise=0") == identity_url("http://127.0.0.1:4200/v1",
                                                                               "noise=0")
    assert identity_url("http://127.0.0.1:4100/v1", "noise=0") != identity_url("http://127.0.0.1:4100/v1",
                                                                               "noise=0.2,noise_seed=1")
    # two servers on two ports of one machine are two judges; a remote host is never the stub
    assert identity_url("http://127.0.0.1:11434/v1") != identity_url("http://127.0.0.1:8000/v1")
    assert identity_url("https://api.example.com/v1", "noise=0") == "https://api.example.com/v1"
    assert identity_url("http://user:secret@127.0.0.1:9/v1?api_key=k") == "http://127.0.0.1:9/v1"


def test_a_run_that_was_not_judged_by_the_stub_refuses_the_stub(tmp_path, example_cases):
    """A folder judged by a server on this machine that is not the stub (recorded without stub
    settings) is not resumed with the stub judge on another port: two judges."""
    cases, out = example_cases[:2], tmp_path / "run"
    with StubJudge() as stub:
        evaluate(cases, **METRIC, judge=_judge(stub, tmp_path), out=out)
    manifest = json.loads((out / "run.json").read_text())
    for key in ("stub", "stub_settings"):
        del manifest["judge"][key]
    (out / "run.json").write_text(json.dumps(manifest))
    with StubJudge() as stub:
        with pytest.raises(RunError, match="was judged with base_url"):
            evaluate(cases, **METRIC, judge=_judge(stub, tmp_path), out=out)


def _edited(cases):
    """The cases with the first one's answer edited, the third one removed and a new one added."""
    edited = [cases[0].model_copy(update={"answer": "Refunds are possible within 5 days."})]
    return edited + [cases[1]] + list(cases[3:]) + [cases[2].model_copy(update={"id": "a-new-case"})]


def test_in_python_edited_cases_are_scored_again_and_the_others_kept(tmp_path, example_cases):
    cases, out = example_cases[:6], tmp_path / "run"
    with StubJudge() as stub:
        judge = JudgeConfig(model="stub-judge", base_url=stub.base_url, cache_mode="off")
        evaluate(cases, **METRIC, judge=judge, out=out)
        stub.reset()
        made = []
        run = evaluate(_edited(cases), **METRIC, judge=judge, out=out, on_score=made.append)
        asked = {p.body["messages"][-1]["content"] for p in stub.posts()}
    assert sorted(s.case_id for s in made) == sorted([cases[0].id, "a-new-case"])
    assert run.manifest.counts["cases_changed"] == {"kept": 4, "changed": 1, "added": 1, "removed": 1}
    assert run.manifest.counts["resumed_from"] == 4
    assert any("within 5 days" in text for text in asked)  # the edited answer was judged
    back = load_run(out)
    assert [c.id for c in back.cases] == [c.id for c in _edited(cases)]
    assert {s.case_id for s in back.scores} == {c.id for c in _edited(cases)}  # the removed one is gone
    assert back.cases[0].answer == "Refunds are possible within 5 days."
    assert back.manifest.dataset["n_cases"] == 6
    # the folder now holds what a fresh run of the edited cases gives
    with StubJudge() as stub:
        fresh = evaluate(_edited(cases), **METRIC, out=tmp_path / "fresh",
                         judge=JudgeConfig(model="stub-judge", base_url=stub.base_url, cache_mode="off"))
    assert back.to_frame(wide=True).equals(fresh.to_frame(wide=True))
    html = back._repr_html_()
    assert "1 changed and 1 new case(s) scored, 1 removed; the scores of the 4 unchanged kept" in html


def test_a_metric_dropped_while_the_cases_changed_is_not_kept_half(tmp_path, example_cases):
    out = tmp_path / "run"
    evaluate(example_cases[:5], metrics=["mrr", "recall@5"], out=out)
    run = evaluate(_edited(example_cases[:5]), metrics=["mrr"], out=out)
    assert run.manifest.metrics == {"native": ["mrr"]}
    assert {s.metric for s in load_run(out).scores} == {"mrr"} and len(load_run(out).scores) == 5


def test_the_command_line_refuses_changed_cases_saying_what_to_do(tmp_path, example_cases):
    from ragbridge import write_cases

    golden = tmp_path / "golden.jsonl"
    write_cases(example_cases[:5], golden)
    first = ragbridge_cli("run", golden, "--out", tmp_path / "run", "--metric", "mrr", "--no-progress")
    assert first.returncode == 0, first.stderr
    write_cases(_edited(example_cases[:5]), golden)
    again = ragbridge_cli("run", golden, "--out", tmp_path / "run", "--metric", "mrr", "--no-progress")
    said = " ".join(again.stderr.split())
    assert again.returncode == 2 and "holds a run over different cases" in said
    assert ("choose another --out, pass --overwrite to replace it, or --update to score only the cases "
            "that changed") in said and "overwrite=True" not in said
    assert len(load_cases(tmp_path / "run" / "cases.jsonl")) == 5  # nothing written
    # --update does what the Python API does by default: the changed and new cases scored, the rest kept
    updated = ragbridge_cli("run", golden, "--out", tmp_path / "run", "--metric", "mrr", "--no-progress",
                           "--update")
    assert updated.returncode == 0, updated.stderr
    assert ("updated: 1 changed and 1 new case(s) scored, 1 removed; the scores of the 3 unchanged kept"
            in " ".join(updated.stdout.split()))
    back = load_run(tmp_path / "run")
    assert back.manifest.counts["cases_changed"] == {"kept": 3, "changed": 1, "added": 1, "removed": 1}
    fresh = ragbridge_cli("run", golden, "--out", tmp_path / "fresh", "--metric", "mrr", "--no-progress")
    assert fresh.returncode == 0, fresh.stderr
    assert back.to_frame(wide=True).equals(load_run(tmp_path / "fresh").to_frame(wide=True))


def test_python_errors_name_python_parameters(tmp_path, example_cases):
    with pytest.raises(RunError) as err:
        evaluate(example_cases[:2], **METRIC)
    said = str(err.value)
    assert "judge=JudgeConfig(model=" in said and "--judge-model" not in said
    assert "--judge-model" in err.value.cli
    with pytest.raises(RunError, match="^repeats must be a whole number from 1 to") as err:
        evaluate(example_cases[:2], repeats=0)
    assert err.value.cli.startswith("--repeats must be")
    with pytest.raises(RunError, match="changed_cases must be one of rescore, refuse"):
        evaluate(example_cases[:2], changed_cases="yes")


@pytest.mark.parametrize("text", ["[1, 2]", '"a run"'])
def test_a_run_json_that_is_not_an_object_is_refused_naming_it(tmp_path, example_path, text):
    """Resuming into a folder whose run.json is JSON but not an object: one error naming the file and
    what to do (exit 2), no traceback, nothing written."""
    out = tmp_path / "run"
    assert ragbridge_cli("run", example_path, "--out", out, "--metric", "mrr").returncode == 0
    (out / "run.json").write_text(text)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    res = ragbridge_cli("run", example_path, "--out", out, "--metric", "mrr")
    said = " ".join(res.stderr.split())
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert f"{out / 'run.json'}" in said and "use --overwrite to replace the run" in said, said
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_a_run_again_into_its_folder_warns_of_the_cases_as_they_are_now(tmp_path):
    """The labels of the bundled RAGAS file name sections (14 of 19 cases warned of); the chunks given
    their sections, the same run into the same folder warns as a fresh run of the fixed cases does;
    a question edited (its id derived from it: a case removed, one added) too."""
    from ragas.dataset_schema import EvaluationDataset

    from conftest import ROOT

    dataset = EvaluationDataset.from_jsonl(str(ROOT / "examples" / "support-bot" / "ragas-dataset.jsonl"))

    def with_sections(cases):
        for case in cases:
            for chunk in case.contexts:
                chunk.source = chunk.id.rsplit("-", 1)[0]
        return cases

    out, ranking = tmp_path / "run", {"metrics": ["recall@5", "mrr"]}
    first = evaluate(dataset, **ranking, out=out)
    assert any(w.startswith("14 of 19 case(s)") for w in first.manifest.warnings)
    cases = with_sections(load_cases(dataset))
    again = evaluate(cases, **ranking, out=out)
    fresh = evaluate(cases, **ranking, out=tmp_path / "fresh")
    assert again.manifest.warnings == fresh.manifest.warnings and len(fresh.manifest.warnings) == 1
    assert json.loads((out / "run.json").read_text())["warnings"] == fresh.manifest.warnings
    edited = next(i for i, c in enumerate(cases) if repr(c.id) in fresh.manifest.warnings[0])
    removed = cases[edited].id
    dataset.samples[edited].user_input += " Thanks!"
    cases = with_sections(load_cases(dataset))
    again = evaluate(cases, **ranking, out=out)
    assert again.manifest.counts["cases_changed"] == {"kept": 19, "changed": 0, "added": 1, "removed": 1}
    fresh = evaluate(cases, **ranking, out=tmp_path / "fresh2")
    assert again.manifest.warnings == fresh.manifest.warnings
    assert not any(repr(removed) in w for w in again.manifest.warnings)


def test_a_resumed_session_stopped_early_still_counts_every_kept_score(tmp_path):
    """A complete native run, then a session that adds a judged metric, stopped (SIGTERM, as Ctrl-C)
    after its first batches: run.json counts every score the folder holds, the kept native scores of
    the cases the session never reached among them."""
    import os
    import signal
    import subprocess
    import sys
    import time

    rows = [{"id": f"q{i}", "question": f"question {i}", "answer": "an answer", "tags": [f"t{i % 3}"],
             "contexts": [{"id": f"d{i}", "text": "a passage"}], "relevant": {f"d{i}": 1}}
            for i in range(100)]
    (tmp_path / "golden.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "ragbridge.toml").write_text('[judge]\nmodel = "judge-m"\ncache_mode = "off"\n')
    base = [sys.executable, "-c", "from ragbridge.commands import run_cli; run_cli()", "run",
            tmp_path / "golden.jsonl", "--out", tmp_path / "run", "--no-progress", "--batch-size", "5"]
    subprocess.run([*base, "--backend", "native", "-m", "mrr"], cwd=tmp_path, check=True, capture_output=True)
    scores = tmp_path / "run" / "scores.jsonl"
    with StubJudge(latency=0.3) as stub:
        proc = subprocess.Popen([*base, "--backend", "native", "--backend", "rubric", "-m", "mrr", "-m",
                                 "faithfulness", "--judge-base-url", stub.base_url], cwd=tmp_path,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ})
        deadline = time.monotonic() + 60
        while len(scores.read_bytes().splitlines()) < 105 and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 130
    manifest = json.loads((tmp_path / "run" / "run.json").read_text())
    lines = scores.read_bytes().splitlines()
    assert manifest["status"] == "interrupted" and 105 <= len(lines) < 200
    assert manifest["counts"]["scores"] == len(lines) == manifest["counts"]["scored"]
    assert manifest["counts"]["resumed_from"] == 100
