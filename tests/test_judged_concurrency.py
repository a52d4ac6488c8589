"""Every judged backend keeps the judge as busy as the run allows: ``max_concurrency`` calls in flight.

The stub judge holds every answer (``hold``) until the calls in flight reach the bound, so a backend
that scores its cases one after another, awaits one call of a case at a time where its library
makes them at once, or caps its own concurrency below the gateway's, never gets there and fails; the
gateway's bound is then reached and never exceeded. No timing: the stub counts the calls it holds.
"""

from __future__ import annotations

import threading

import pytest

import ragbridge
from ragbridge.judge import JudgeConfig
from ragbridge.plugins import get_backends
from ragbridge.testing import StubJudge

BOUND = 4
PAIRS = [("ragas", "faithfulness"), ("ragas", "answer_relevance"), ("deepeval", "faithfulness"),
         ("deepeval", "answer_relevance"), ("trulens", "faithfulness"), ("trulens", "answer_relevance"),
         ("phoenix", "faithfulness"), ("rubric", "faithfulness"), ("rubric", "answer_relevance")]


def unique_cases(example_cases, n):
    """``n`` answered cases of the bundled example, made distinct so no answer is shared."""
    picked = [c for c in example_cases if c.answer and c.contexts]
    out = []
    for i in range(n):
        c = picked[i % len(picked)]
        out.append(c.model_copy(update={
            "id": f"{c.id}-{i}", "question": f"Ticket {i}: {c.question}", "answer": f"Ticket {i}: {c.answer}",
            "contexts": [ch.model_copy(update={"text": f"Ticket {i}: {ch.text}"}) for ch in c.contexts]}))
    return out


@pytest.mark.parametrize("backend,metric", PAIRS, ids=[f"{b}-{m}" for b, m in PAIRS])
def test_backend_reaches_the_judge_bound(backend, metric, example_cases, tmp_path):
    if not get_backends()[backend].available():
        pytest.skip(f"{backend} is not installed")
    cases = unique_cases(example_cases, 3 * BOUND)
    # TruLens: the chat endpoint named, so its one probe of /responses is not a call held first
    options = ragbridge.RunOptions(backend_options={"trulens": {"api": "chat"}})
    with StubJudge() as stub:
        cfg = JudgeConfig(model="gpt-4o-mini", base_url=stub.base_url, cache_mode="off",
                          max_concurrency=BOUND)
        stub.hold()
        result: dict = {}

        def run() -> None:
            try:
                result["run"] = ragbridge.evaluate(cases, backends=[backend], metrics=[metric], judge=cfg,
                                                   options=options)
            except BaseException as exc:  # pragma: no cover - reported below
                result["error"] = exc
            finally:
                stub.release()  # a run that failed early must not leave the wait below hanging

        thread = threading.Thread(target=run)
        thread.start()
        try:
            stub.wait_for_requests(BOUND, timeout=120)
            assert stub.in_flight == BOUND, f"{stub.in_flight} call(s) in flight"
        finally:
            stub.release()
            thread.join(300)
        assert "error" not in result, result.get("error")
        assert stub.max_in_flight == BOUND  # reached, never exceeded
    scores = result["run"].scores
    assert len(scores) == len(cases) and not [s.error for s in scores if s.error]


def test_stub_log_has_each_answered_call(tmp_path):
    """The stub's call log (what bench_judged_latency reads): one line per answered POST, with the
    calls in flight when it arrived and the digest of the exact body sent."""
    import hashlib
    import json

    import httpx

    log = tmp_path / "calls.jsonl"
    bodies: list[bytes] = []
    with StubJudge(log=log) as stub:
        def ask(i: int) -> None:
            r = httpx.post(f"{stub.base_url}/chat/completions", timeout=30,
                           json={"model": "m", "messages": [{"role": "user", "content": f"question {i}"}]})
            bodies.append(r.content)

        stub.hold()
        threads = [threading.Thread(target=ask, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        stub.wait_for_requests(3)
        stub.release()
        for t in threads:
            t.join()
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert len(lines) == 3 and {x["route"] for x in lines} == {"/chat/completions"}
    assert sorted(x["in_flight"] for x in lines) == [1, 2, 3]
    assert {x["response_sha256"] for x in lines} == {hashlib.sha256(b).hexdigest() for b in bodies}
    assert all(x["status"] == 200 and x["start"] <= x["end"] for x in lines)
