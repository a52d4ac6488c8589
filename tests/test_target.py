"""Evaluate a real pipeline directly: callable, retrieve/answer object and HTTP targets; sampling."""

import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

import rag_pipeline
from conftest import ragbridge_cli
from ragbridge import RunError, evaluate, load_cases, load_run
from ragbridge.run.target import TargetError, load_target

TESTS = str(Path(__file__).resolve().parent)
#: the tests folder (the target module) ahead of the PYTHONPATH the suite runs with
ENV = {"PYTHONPATH": os.pathsep.join(p for p in (TESTS, os.environ.get("PYTHONPATH")) if p)}


def mean(run, metric):
    s = run.summary()
    return s[(s.tag == "(all)") & (s.metric == metric)]["mean"].iloc[0]


@pytest.fixture
def golden(example_cases):
    # the golden set without the recorded outputs: the target provides them
    return [c.model_copy(update={"contexts": [], "answer": None}) for c in example_cases]


@pytest.fixture
def http_target():
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if body["question"].startswith("BREAK"):
                self.send_response(500)
                self.end_headers()
                return
            data = json.dumps(rag_pipeline.pipeline(body["question"])).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/ask"
    server.shutdown()
    server.server_close()


def test_callable_target_fills_and_scores(tmp_path, golden):
    run = evaluate(golden, metrics=["recall@5", "mrr", "must_contain"], out=tmp_path / "r",
                   target=load_target("rag_pipeline:pipeline"))
    assert run.complete
    filled = load_run(tmp_path / "r").cases
    assert all(c.contexts and c.answer.startswith("According to") for c in filled)
    assert all(c.metadata["target"]["seconds"] >= 0 and c.metadata["target"]["error"] is None for c in filled)
    assert len((tmp_path / "r" / "target.jsonl").read_text().splitlines()) == len(golden)
    assert run.manifest.dataset["target"] == "rag_pipeline:pipeline"
    assert 0.3 < mean(run, "recall@5") <= 1.0


def test_retrieval_metrics_follow_the_retriever(golden):
    good = evaluate(golden, metrics=["recall@5", "ndcg@5"], target=load_target("rag_pipeline:bm25"))
    weak = evaluate(golden, metrics=["recall@5", "ndcg@5"], target=load_target("rag_pipeline:weak"))
    assert mean(good, "recall@5") > mean(weak, "recall@5") + 0.1
    assert mean(good, "ndcg@5") > mean(weak, "ndcg@5") + 0.1


def test_async_and_retrieve_answer_forms_agree(golden):
    a = evaluate(golden[:10], metrics=["mrr"], target=load_target("rag_pipeline:async_pipeline"))
    b = evaluate(golden[:10], metrics=["mrr"], target=load_target("rag_pipeline:bm25"))
    assert [s.value for s in a.scores] == [s.value for s in b.scores]


def test_http_target(golden, http_target):
    run = evaluate(golden[:12], metrics=["recall@5"], target=load_target(http_target), target_concurrency=3)
    direct = evaluate(golden[:12], metrics=["recall@5"], target=load_target("rag_pipeline:pipeline"))
    assert [s.value for s in run.scores] == [s.value for s in direct.scores]


def test_target_errors_are_per_case(tmp_path, golden):
    run = evaluate(golden, metrics=["mrr", "must_contain"], out=tmp_path / "r",
                   target=load_target("rag_pipeline:flaky"))
    errors = {s.case_id: s.error for s in run.scores if s.error}
    refund = [c.id for c in golden if "refund" in c.question.lower()]
    invoice = [c.id for c in golden if "invoice" in c.question.lower() and "refund" not in c.question.lower()]
    assert refund and invoice
    for cid in refund:
        assert f"case {cid!r}: target failed: RuntimeError: retriever timed out" == errors[cid]
    for cid in invoice:
        assert "expected a JSON object" in errors[cid] and cid in errors[cid]
    ok = [s for s in run.scores if s.metric == "mrr" and s.case_id not in errors]
    assert len(ok) == len(golden) - len(refund) - len(invoice)
    assert run.manifest.counts["target_errors"] == len(refund) + len(invoice)


def test_resume_does_not_call_target_again(tmp_path, golden):
    out = tmp_path / "r"
    evaluate(golden, metrics=["mrr"], out=out, target=load_target("rag_pipeline:bm25"))
    lines = (out / "target.jsonl").read_text().splitlines(keepends=True)
    # killed during the target calls: half recorded, no run.json yet
    (out / "target.jsonl").write_text("".join(lines[:20]))
    for name in ("run.json", "scores.jsonl", "cases.jsonl"):
        (out / name).unlink()
    before = rag_pipeline.CALLS["n"]
    run = evaluate(golden, metrics=["mrr"], out=out, target=load_target("rag_pipeline:bm25"))
    assert rag_pipeline.CALLS["n"] - before == len(golden) - 20
    assert run.complete and len(run.scores) == len(golden)


def test_one_decision_for_the_folder_target_or_not(tmp_path, golden, example_cases):
    out = tmp_path / "r"
    evaluate(golden[:6], metrics=["mrr"], out=out, target=load_target("rag_pipeline:bm25"))
    # a plain run replacing a target run leaves none of the earlier run's files behind
    evaluate(example_cases[:6], metrics=["mrr"], out=out, overwrite=True)
    assert sorted(p.name for p in out.iterdir()) == ["cases.jsonl", "columns.npz", "run.json", "scores.jsonl"]
    # an unreadable manifest is refused the same way with a target as without, before any call
    (out / "run.json").write_text("{not json")
    before = rag_pipeline.CALLS["n"]
    for target in (None, load_target("rag_pipeline:bm25")):
        with pytest.raises(RunError, match="not a valid run manifest: .*run.json:1: not valid JSON.*"
                                           "overwrite=True"):
            evaluate(golden[:6], metrics=["mrr"], out=out, target=target)
    assert rag_pipeline.CALLS["n"] == before


def test_bad_targets_are_clear():
    with pytest.raises(TargetError,
                       match="cannot import target module 'no_such_pkg.rag': ModuleNotFoundError"):
        load_target("no_such_pkg.rag:pipeline")
    with pytest.raises(TargetError, match="has no attribute 'nope'"):
        load_target("rag_pipeline:nope")
    with pytest.raises(TargetError, match="cannot be reached"):
        load_target("http://127.0.0.1:9/ask")


def test_cli_target_and_rescore(tmp_path, example_path, http_target):
    out = tmp_path / "r"
    res = ragbridge_cli("run", example_path, "--out", out, "--target", http_target, "--metric", "recall@5",
                        "--no-progress", env=ENV)
    assert res.returncode == 0, res.stderr
    assert "target latency: p50" in res.stdout
    # rescore: nothing is called, only the recorded cases are scored again (no PYTHONPATH, no server needed)
    res = ragbridge_cli("rescore", out, "--metric", "mrr", "--no-progress")
    assert res.returncode == 0, res.stderr
    run = load_run(out)
    assert {s.metric for s in run.scores} == {"recall@5", "mrr"}
    assert run.manifest.metrics["native"] == ["recall@5", "mrr"]


def test_cli_bad_target_exits_2(tmp_path, example_path):
    res = ragbridge_cli("run", example_path, "--out", tmp_path / "r", "--target", "nowhere.mod:fn", env=ENV)
    assert res.returncode == 2 and "cannot import target module 'nowhere.mod'" in res.stderr
    res = ragbridge_cli("run", example_path, "--out", tmp_path / "r", "--target", "http://127.0.0.1:9/ask")
    assert res.returncode == 2 and "cannot be reached" in res.stderr


# ---------------------------------------------------------------------------------------------
# production samples


@pytest.fixture
def traces(tmp_path, example_cases):
    path = tmp_path / "traces.jsonl"
    with open(path, "w") as f:
        for i, c in enumerate(example_cases * 4):
            f.write(json.dumps({
                "trace_id": f"t{i}",
                "ts": f"2026-11-{1 + i % 28:02d}T10:00:00Z",
                "request": {"query": c.question},
                "response": {"text": c.answer},
                "retrieval": {"documents": [{"doc_id": x.id, "content": x.text, "url": x.source}
                                            for x in c.contexts]},
                "labels": c.tags,
                "user": {"plan": "pro" if i % 2 else "free"},
            }) + "\n")
    mapping = tmp_path / "mapping.toml"
    mapping.write_text(
        '[fields]\nid = "trace_id"\nquestion = "request.query"\nanswer = "response.text"\n'
        'contexts = "retrieval.documents"\ntimestamp = "ts"\ntags = "labels"\n'
        '[chunk]\nid = "doc_id"\ntext = "content"\nsource = "url"\n'
    )
    return path, mapping


def test_sample_is_reproducible_and_filtered(tmp_path, traces, example_cases):
    path, mapping = traces
    outs = []
    for name, seed in (("a", 7), ("b", 7), ("c", 8)):
        res = ragbridge_cli("sample", path, "--n", 20, "--seed", seed, "--where", "tag=billing",
                            "--mapping", mapping, "--out", tmp_path / f"{name}.jsonl")
        assert res.returncode == 0, res.stderr
        outs.append(load_cases(tmp_path / f"{name}.jsonl"))
    a, b, c = outs
    assert [x.id for x in a] == [x.id for x in b] != [x.id for x in c]
    assert len(a) == 20 and all("billing" in x.tags for x in a)
    assert all(x.contexts and x.contexts[0].source and x.answer for x in a)
    assert a[0].metadata["timestamp"].startswith("2026-11-")
    # dotted paths into the raw log work in --where too
    res = ragbridge_cli("sample", path, "--n", 500, "--where", "user.plan=pro", "--mapping", mapping,
                        "--out", tmp_path / "pro.jsonl")
    assert res.returncode == 0, res.stderr
    assert len(load_cases(tmp_path / "pro.jsonl")) == len(example_cases) * 4 // 2
    # the sample scores with the reference-free native checks
    run = evaluate(a, metrics=["must_contain", "recall@5"])
    assert all(s.value is None for s in run.scores)  # no labels, no checks in production data


def test_sample_bad_input(tmp_path, traces):
    path, mapping = traces
    bad = tmp_path / "bad.toml"
    bad.write_text('[fields]\nquery = "request.query"\n')
    res = ragbridge_cli("sample", path, "--mapping", bad, "--out", tmp_path / "s.jsonl")
    assert res.returncode == 2 and "unknown key 'query' in [fields]" in res.stderr
    res = ragbridge_cli("sample", path, "--out", tmp_path / "s.jsonl")
    assert res.returncode == 2 and "traces.jsonl:1" in res.stderr and "no question found" in res.stderr
    res = ragbridge_cli("sample", path, "--mapping", mapping, "--where", "nonsense",
                        "--out", tmp_path / "s.jsonl")
    assert res.returncode == 2 and "field=value" in res.stderr


def test_the_run_starts_when_its_session_does_the_target_calls_and_reading_included(tmp_path, golden):
    from datetime import datetime, timezone

    before = datetime.now(timezone.utc).replace(microsecond=0)  # run.json's times are to the second
    run = evaluate(golden[:10], metrics=["recall@5"], out=tmp_path / "r",
                   target=load_target("rag_pipeline:slow"), target_concurrency=1)
    after = datetime.now(timezone.utc)
    started = datetime.fromisoformat(load_run(tmp_path / "r").manifest.started_at)
    finished = datetime.fromisoformat(run.manifest.finished_at)
    # the ten calls (at least a second) happen between the start the run records and its end
    assert before <= started <= after and (finished - started).total_seconds() >= 1.0
