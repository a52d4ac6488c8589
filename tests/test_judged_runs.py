"""Judged runs through the runner, the gateway and a real backend library, against the stub judge."""

import json
import time

import pytest

from conftest import needs_backend, stub_judge_config
from ragbridge import evaluate, load_run
from ragbridge.plugins import get_backends

MODEL = "gpt-4o-mini"
needs_trulens = needs_backend("trulens")


@needs_trulens
def test_failed_score_is_not_replayed_from_the_cache(tmp_path, example_cases, stub_judge):
    case = [c for c in example_cases if c.id == "billing-refund-window"]
    out = tmp_path / "run"
    stub_judge.inject(*(["malformed"] * 40))  # every call of the first run gets garbage content
    first = evaluate(case, backends=["trulens"], metrics=["faithfulness"], out=out,
                     judge=stub_judge_config(stub_judge, MODEL, tmp_path / "c.sqlite"))
    assert first.scores[0].error, first.scores[0]
    stub_judge.reset()
    second = evaluate(case, backends=["trulens"], metrics=["faithfulness"], out=out,
                      judge=stub_judge_config(stub_judge, MODEL, tmp_path / "c.sqlite"))
    assert second.scores[0].error is None and second.scores[0].value is not None
    assert len(stub_judge.requests) > 0  # asked upstream again instead of replaying the bad answer
    # and a clean re-run of the same suite is served from the cache entirely
    stub_judge.reset()
    evaluate(case, backends=["trulens"], metrics=["faithfulness"],
             judge=stub_judge_config(stub_judge, MODEL, tmp_path / "c.sqlite"))
    assert len([r for r in stub_judge.requests if r.path.endswith(("chat/completions", "responses"))]) == 0


@needs_backend("deepeval")
@pytest.mark.slow
def test_resume_after_injected_faults_replays_no_failed_answer(tmp_path, example_path):
    """Through the CLI: DeepEval's faithfulness asks for truths and claims of a case at once. The
    first answer is malformed, so the score fails; the other call got a 429 and its (malformed)
    answer arrives a Retry-After later, after the failure was recorded. Every later call is malformed
    too, so every score fails. The resume, with a healthy judge, must then score every case: no
    malformed answer of a failed score may be replayed from the cache."""
    from conftest import ragbridge_cli

    from ragbridge.testing import StubJudge

    golden = tmp_path / "golden.jsonl"
    golden.write_text("".join(example_path.read_text().splitlines(keepends=True)[:6]))
    out = tmp_path / "run"
    with StubJudge(latency=0.1, retry_after=0.5) as stub:
        args = ["run", golden, "--out", out, "--backend", "deepeval", "--metric", "faithfulness",
                "--judge-model", "gpt-4o-mini", "--judge-base-url", stub.base_url, "--no-progress"]
        stub.inject("malformed", "429", *["malformed"] * 100)
        first = ragbridge_cli(*args, "--max-concurrency", "1", cwd=tmp_path)  # one case at a time
        assert first.returncode != 2, first.stderr
        assert stub.posts()[1].fault == "429"
        scores = [json.loads(x) for x in (out / "scores.jsonl").read_text().splitlines()]
        assert len(scores) == 6 and all(s["error"] for s in scores)
        stub.reset()
        stub.latency = 0
        resumed = ragbridge_cli(*args, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    run = load_run(out)
    assert run.complete and len(run.scores) == 6
    assert [s.case_id for s in run.scores if s.error] == []


@needs_trulens
def test_run_folder_holds_no_secret_and_is_labelled_stub(tmp_path, example_cases, stub_judge, monkeypatch):
    secret = "sk-ragbridge-test-5f1c0a7e9b2d4c3f8a6e"
    monkeypatch.setenv("RB_TEST_KEY", secret)
    import ragbridge.judge

    gateway_keys = []  # the key each gateway gave the libraries (what its socket would require)

    class RecordingGateway(ragbridge.judge.JudgeGateway):
        def start(self):
            gateway_keys.append(self.api_key)
            return super().start()

    monkeypatch.setattr(ragbridge.judge, "JudgeGateway", RecordingGateway)
    out = tmp_path / "run"
    t0 = time.monotonic()
    run = evaluate(example_cases[:3], backends=["native", "trulens"], out=out,
                   judge=stub_judge_config(stub_judge, MODEL, tmp_path / "c.sqlite",
                                           api_key_env="RB_TEST_KEY"))
    elapsed = time.monotonic() - t0
    assert run.complete
    assert stub_judge.last_authorization == f"Bearer {secret}"  # the key did reach the judge
    manifest = json.loads((out / "run.json").read_text())
    assert manifest["judge"]["stub"] is True and manifest["judge"]["api_key_env"] == "RB_TEST_KEY"
    assert manifest["counts"]["judge"]["calls"] > 0
    judged = [s for s in load_run(out).scores if s.backend == "trulens" and s.value is not None]
    assert judged and all(s.judge_calls > 0 and s.prompt_tokens > 0 for s in judged)
    from ragbridge.report import render_html, render_json, render_markdown

    (out / "report.html").write_text(render_html(load_run(out)))
    (out / "report.md").write_text(render_markdown(load_run(out)))
    (out / "report.json").write_text(render_json(load_run(out)))
    # each format says the judge was the stub, at the top
    assert 'class="stub-banner"' in (out / "report.html").read_text()
    assert (out / "report.md").read_text().splitlines()[2].startswith("> **Stub judge.**")
    assert json.loads((out / "report.json").read_text())["run"]["stub_judge"] is True
    # the runner recorded each backend's wall-clock span, within the run's own
    wall = manifest["timing"]["wall_seconds"]
    assert set(wall) == {"native", "trulens"} and all(0 <= v <= elapsed for v in wall.values())
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.name == "judge-audit.jsonl" for p in files) and any(p.suffix == ".sqlite" for p in files)
    assert len(gateway_keys) == 1
    for p in files:
        data = p.read_bytes()
        assert secret.encode() not in data and gateway_keys[0].encode() not in data, p


@needs_trulens
@pytest.mark.parametrize(
    "url, env, message",
    [
        ("http://127.0.0.1:9/v1", {}, "is unreachable"),
        ("https://judge.example.invalid/v1", {"OPENAI_API_KEY": ""}, "OPENAI_API_KEY"),
    ],
)
def test_judge_problems_stop_the_run_before_anything_is_written(tmp_path, example_path, url, env, message):
    from conftest import ragbridge_cli

    out = tmp_path / "run"
    res = ragbridge_cli("run", example_path, "--out", out, "--backend", "trulens", "--judge-model", "m",
                        "--judge-base-url", url, "--no-progress", env=env)
    assert res.returncode == 2, res.stdout + res.stderr
    assert message in res.stderr and "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) <= 3
    assert not out.exists()



@needs_trulens
def test_trulens_leaves_openai_unwrapped(tmp_path, example_cases, stub_judge):
    """TruLens wraps openai's `create` methods process-wide for cost tracking, with a sync wrapper that
    makes RAGAS (in the same process) reject its async client; the backend undoes the wrapping."""
    import inspect

    import openai
    import openai.resources
    from ragbridge_trulens.backend import make_provider
    from trulens.core.feedback.endpoint import INSTRUMENT

    make_provider(openai.OpenAI(base_url=stub_judge.base_url, api_key="x"), "gpt-4o-mini")
    wrapped = [name for name, cls in vars(openai.resources).items()
               if isinstance(cls, type) and hasattr(getattr(cls, "create", None), INSTRUMENT)]
    assert not wrapped
    assert inspect.iscoroutinefunction(openai.resources.AsyncEmbeddings.create)
    if get_backends()["ragas"].available():
        cfg = stub_judge_config(stub_judge, MODEL, tmp_path / "c.sqlite",
                                embedding_model="text-embedding-3-small")
        evaluate(example_cases[:1], backends=["trulens"], metrics=["faithfulness"], judge=cfg)
        run = evaluate(example_cases[:2], backends=["ragas"], metrics=["answer_relevance"], judge=cfg)
        assert all(s.error is None and s.value is not None for s in run.scores), [s.error for s in run.scores]


@needs_trulens
def test_resumed_stub_run_keeps_its_stub_label(tmp_path, example_cases, stub_judge):
    out = tmp_path / "run"
    cases = example_cases[:2]
    evaluate(cases, backends=["trulens"], metrics=["faithfulness"], out=out,
             judge=stub_judge_config(stub_judge, MODEL, tmp_path / "c.sqlite"))
    assert json.loads((out / "run.json").read_text())["judge"]["stub"] is True
    stub_judge.reset()
    # the same command again: every score is kept, no judge call is made, and the label stays
    again = evaluate(cases, backends=["trulens"], metrics=["faithfulness"], out=out,
                     judge=stub_judge_config(stub_judge, MODEL, tmp_path / "c.sqlite"))
    assert again.manifest.counts["resumed_from"] == 2
    assert not [r for r in stub_judge.requests if r.method == "POST"]  # only the preflight GET
    assert json.loads((out / "run.json").read_text())["judge"]["stub"] is True


@needs_backend("deepeval")
@needs_backend("ragas")
def test_a_case_with_an_empty_question_is_skipped_by_judged_metrics_and_warned_of(tmp_path, example_cases,
                                                                                 stub_judge):
    """DeepEval scored an answer to an empty question 0.0 and RAGAS failed on it: every judged metric
    now skips such a case (undefined, with the reason), the others score it, and the run says so."""
    from conftest import ragbridge_cli

    cases = [c for c in example_cases if c.answer and c.contexts][:3]
    cases[1] = cases[1].model_copy(update={"question": "  "})
    golden = tmp_path / "golden.jsonl"
    golden.write_text("".join(c.model_dump_json(exclude_defaults=True) + "\n" for c in cases))
    res = ragbridge_cli("run", golden, "--out", tmp_path / "run", "-b", "deepeval", "-b", "ragas",
                        "-b", "native", "-m", "answer_relevance", "-m", "must_contain",
                        "--judge-model", MODEL, "--judge-base-url", stub_judge.base_url,
                        "--embedding-model", "stub-embed", "--no-progress", "--json",
                        env={"OPENAI_API_KEY": "sk-test"})
    assert res.returncode == 0, res.stderr
    assert (f"warning: 1 case(s) have an empty question ('{cases[1].id}'): the judged metrics skip them "
            "(undefined)") in res.stderr
    scores = [json.loads(line) for line in (tmp_path / "run" / "scores.jsonl").read_text().splitlines()]
    blank = {(s["backend"], s["metric"]): s for s in scores if s["case_id"] == cases[1].id}
    for backend in ("deepeval", "ragas"):
        s = blank[(backend, "answer_relevance")]
        assert s["value"] is None and s["error"] is None and s["reason"] == "skipped: case has no question"
    assert blank[("native", "must_contain")]["value"] is not None  # not a judged metric: scored
    assert all(s["value"] is not None for s in scores if s["case_id"] != cases[1].id)


@pytest.mark.slow  # two runs through the CLI, one of them with 500s retried (some 14 s on 2 cores)
def test_judge_calls_said_are_what_the_judge_received_over_every_session(tmp_path, example_cases,
                                                                           monkeypatch):
    """Retries are requests the judge received: the terminal and the report say them beside the calls
    ("N calls, M requests with R retries"), and the report's per-backend table counts what the run
    total counts, over every session: a score that errored and was resumed keeps its failed calls."""
    from conftest import ragbridge_cli
    from ragbridge.judge.upstream import Forwarder
    from ragbridge.report import render_json, render_markdown
    from ragbridge.testing import StubJudge

    monkeypatch.setattr(Forwarder, "backoff_base", 0.01)
    cases = example_cases[:3]
    (tmp_path / "cases.jsonl").write_text("".join(json.dumps(c.model_dump(mode="json")) + "\n"
                                                  for c in cases))
    others = " ".join(c.question for c in cases[1:]).lower()
    word = next(w for w in cases[0].question.split() if len(w) > 4 and w.lower() not in others)
    args = ("run", "cases.jsonl", "--out", "run", "--backend", "rubric", "--metric", "answer_relevance",
            "--cache-mode", "off")
    with StubJudge() as stub:
        args += ("--judge-model", stub.models[0], "--judge-base-url", stub.base_url)
        stub.fail_when(word, "500")  # the first case's calls fail, each 500 in other words: retried
        first = ragbridge_cli(*args, cwd=tmp_path)
        assert first.returncode == 3, first.stderr
        stub.fail_when(word, None)
        stub.inject("500")  # the resumed score's call: one transient 500, then answered
        second = ragbridge_cli(*args, cwd=tmp_path)
        assert second.returncode == 0, second.stderr
        received = len(stub.posts())
    j = json.loads((tmp_path / "run" / "run.json").read_text())["counts"]["judge"]
    assert j["retries"] >= 6 and j["calls"] + j["retries"] == received
    said = f"{j['calls']} calls, {received} requests with {j['retries']} retries, 0 from cache"
    assert said in " ".join(second.stdout.split() + second.stderr.split())
    run = load_run(tmp_path / "run")
    assert f"Run total: {said}" in render_markdown(run)
    (rubric,) = json.loads(render_json(run))["judge_usage"]
    assert (rubric["judge_calls"], rubric["requests"], rubric["retries"]) == (j["calls"], received,
                                                                             j["retries"])
