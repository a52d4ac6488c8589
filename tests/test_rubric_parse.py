"""Structured output that is checked: malformed, out-of-range and truncated replies are re-asked within
the budget and then become an explicit error (never a default); json_schema where the endpoint takes
it, plain prompting where it does not. Canned replies come from a tiny OpenAI-compatible server here;
the stub judge's own fault injection is used for a whole run."""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

import pytest

from ragbridge import RunOptions, evaluate, load_cases
from ragbridge.judge import JudgeConfig
from ragbridge.rubric.parse import ReplyError, check_grade, check_verdicts, parse_object
from ragbridge.rubric.rubrics import builtin_rubrics

from conftest import EXAMPLE


class CannedJudge:
    """An OpenAI-compatible server on 127.0.0.1 whose chat answers come from ``reply(body, n)``:
    ``(status, content, finish_reason)``; every request body is kept in ``bodies``."""

    def __init__(self, reply: Callable[[dict, int], tuple[int, str, str]]):
        self.reply = reply
        self.bodies: list[dict] = []
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a: Any) -> None:
                pass

            def _send(self, status: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802 - the gateway's preflight
                self._send(200, {"object": "list", "data": [{"id": "canned", "object": "model"}]})

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with outer.lock:
                    outer.bodies.append(body)
                    n = len(outer.bodies)
                status, content, finish = outer.reply(body, n)
                if status != 200:
                    self._send(status, {"error": {"message": content, "type": "invalid_request_error"}})
                    return
                message = {"role": "assistant", "content": content}
                self._send(200, {"id": f"c{n}", "object": "chat.completion", "created": 0,
                                 "model": body["model"],
                                 "choices": [{"index": 0, "finish_reason": finish, "message": message}],
                                 "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> "CannedJudge":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()


def one_case():
    return [c for c in load_cases(EXAMPLE) if c.id == "billing-refund-window"]


def score(canned: CannedJudge, metric: str = "answer_relevance", max_retries: int = 5, **opts):
    judge = JudgeConfig(model="canned", base_url=canned.base_url, cache_mode="off", max_retries=max_retries)
    run = evaluate(one_case(), backends=["rubric"], metrics=[metric], judge=judge,
                   options=RunOptions(backend_options={"rubric": opts} if opts else {}))
    assert run.complete
    return run.scores[0]


def queue(*replies: tuple[int, str, str]):
    """Replies in order; the last one repeats."""
    return lambda body, n: replies[min(n, len(replies)) - 1]


GOOD = (200, '{"reason": "It answers the refund question directly.", "score": 5}', "stop")


# --------------------------------------------------------------------------------------------
# The strict parser


@pytest.mark.parametrize("text, ok", [
    ('{"a": 1}', True),
    ('  \n{"a": 1}\n', True),
    ('```json\n{"a": 1}\n```', True),
    ('Sure! {"a": 1}', False),
    ('{"a": 1} Hope this helps.', False),
    ('[{"a": 1}]', False),
    ('{"a": 1', False),
    ("", False),
])
def test_parse_object_takes_exactly_one_json_object(text, ok):
    if ok:
        assert parse_object(text) == {"a": 1}
    else:
        with pytest.raises(ReplyError):
            parse_object(text)


def test_ranges_are_checked_in_code():
    r = builtin_rubrics()["answer_relevance"]  # 1..5
    assert check_grade({"reason": "fine", "score": 4}, r) == (4, "fine")
    assert check_grade({"reason": "fine", "score": "4"}, r)[0] == 4
    for bad in (0, 6, 4.5, True, None, "four"):
        with pytest.raises(ReplyError, match="must be one of 1, 2, 3, 4, 5"):
            check_grade({"reason": "x", "score": bad}, r)
    with pytest.raises(ReplyError, match='"reason" must be a non-empty string'):
        check_grade({"reason": " ", "score": 3}, r)
    ok = {"verdicts": [{"claim": 2, "reason": "b", "verdict": "not found"},
                       {"claim": 1, "reason": "a", "verdict": "SUPPORTED"}]}
    assert check_verdicts(ok, 2) == [("SUPPORTED", "a"), ("NOT_FOUND", "b")]
    with pytest.raises(ReplyError, match=r"no verdict for claim\(s\) 2 of 2"):
        check_verdicts({"verdicts": ok["verdicts"][1:]}, 2)
    with pytest.raises(ReplyError, match="claim 1 has two verdicts"):
        check_verdicts({"verdicts": [ok["verdicts"][1]] * 2}, 2)
    with pytest.raises(ReplyError, match='"verdict" must be one of SUPPORTED'):
        check_verdicts({"verdicts": [{"claim": 1, "reason": "a", "verdict": "MAYBE"}]}, 1)


# --------------------------------------------------------------------------------------------
# Re-asking, then an explicit error


@pytest.mark.parametrize("bad, problem", [
    ((200, '{"reason": "ok", "score": 7', "stop"), "not one JSON object"),
    ((200, "The answer is relevant. Score: 5", "stop"), "not one JSON object"),
    ((200, '{"reason": "very relevant", "score": 7}', "stop"), '"score" must be one of 1, 2, 3, 4, 5, got 7'),
    ((200, '{"reason": "It answers the refund ques', "length"), "cut off at max_tokens"),
])
def test_a_bad_reply_is_asked_again_and_the_good_one_scores(bad, problem):
    with CannedJudge(queue(bad, GOOD)) as canned:
        s = score(canned)
    assert s.error is None and s.value == 1.0 and s.passed is True
    assert len(canned.bodies) == 2
    first, second = canned.bodies
    # the re-ask: the same conversation, the bad reply, the problem named (so no cache can repeat it)
    assert second["messages"][:2] == first["messages"]
    assert second["messages"][2] == {"role": "assistant", "content": bad[1]}
    assert problem in second["messages"][3]["content"]


@pytest.mark.parametrize("bad, problem", [
    ((200, '{"reason": "very relevant", "score": 7}', "stop"), '"score" must be one of 1, 2, 3, 4, 5, got 7'),
    ((200, '{"reason": "It answers the', "length"), 'cut off at max_tokens (finish_reason "length")'),
    ((200, "not json at all", "stop"), "not one JSON object"),
])
def test_a_reply_that_stays_bad_is_an_error_never_a_default(bad, problem):
    with CannedJudge(queue(bad)) as canned:
        s = score(canned)
    assert s.value is None and s.passed is None and s.status == "error"
    assert s.error.startswith("rubric answer_relevance: unusable reply after 3 attempt(s): ")
    assert problem in s.error and repr(" ".join(bad[1].split()))[:40] in s.error
    assert len(canned.bodies) == 3  # the default budget: 2 re-asks


def test_the_budget_is_the_option_and_never_more_than_the_gateways():
    bad = (200, '{"reason": "x", "score": 9}', "stop")
    with CannedJudge(queue(bad)) as canned:
        assert score(canned, retries=4).status == "error"
    assert len(canned.bodies) == 5
    with CannedJudge(queue(bad)) as canned:
        assert score(canned, retries=4, max_retries=1).status == "error"
    assert len(canned.bodies) == 2
    with CannedJudge(queue(bad)) as canned:
        assert score(canned, retries=0).status == "error"
    assert len(canned.bodies) == 1


def test_claim_verdicts_must_cover_every_claim():
    split = (200, json.dumps({"claims": ["Refunds within 14 days.", "Request it in Settings."]}), "stop")
    first = {"claim": 1, "reason": "stated", "verdict": "SUPPORTED"}
    short = (200, json.dumps({"verdicts": [first]}), "stop")
    second = {"claim": 2, "reason": "not there", "verdict": "NOT_FOUND"}
    full = (200, json.dumps({"verdicts": [first, second]}), "stop")
    with CannedJudge(queue(split, short, full)) as canned:
        s = score(canned, metric="faithfulness")
    assert s.error is None and s.value == 0.5
    assert [(c.text, c.verdict) for c in s.evidence.claims] == [
        ("Refunds within 14 days.", "SUPPORTED"), ("Request it in Settings.", "NOT_FOUND")]
    assert 'NOT_FOUND: "Request it in Settings." (not there)' in s.reason
    assert "no verdict for claim(s) 2 of 2" in canned.bodies[2]["messages"][-1]["content"]
    # no claim at all: undefined with the reason, not 0 and not 1
    with CannedJudge(queue((200, '{"claims": []}', "stop"))) as canned:
        s = score(canned, metric="faithfulness")
    assert s.status == "undefined" and s.reason == "the answer states no claim" and s.evidence.claims == []


# --------------------------------------------------------------------------------------------
# json_schema where the endpoint takes it, plain prompting otherwise


def rejects_json_schema(body, n):
    if "response_format" in body:
        return (400, "response_format json_schema is not supported", "stop")
    return GOOD


def test_an_endpoint_without_json_schema_gets_asked_in_a_mode_it_takes():
    """An endpoint that refuses every response_format (400): the gateway asks the same request again
    as a forced tool call, which it takes; the rubric gets its JSON object as it asked for it and
    records the mode it was asked in."""
    with CannedJudge(rejects_json_schema) as canned:
        s = score(canned)
    assert s.error is None and s.value == 1.0 and s.native_value["structured"] == "tool"
    assert [b.get("response_format", {}).get("type") for b in canned.bodies] == ["json_schema", None]
    assert canned.bodies[1]["tool_choice"]["function"]["name"] == canned.bodies[0]["response_format"][
        "json_schema"]["name"]
    schema = canned.bodies[0]["response_format"]["json_schema"]["schema"]
    assert schema["properties"]["score"]["enum"] == [1, 2, 3, 4, 5]
    assert canned.bodies[1]["tools"][0]["function"]["parameters"] == schema
    with CannedJudge(rejects_json_schema) as canned:  # asked for plain prompts: no schema is ever sent
        assert score(canned, structured_output="prompt").native_value["structured"] == "prompt"
    assert ["response_format" in b or "tools" in b for b in canned.bodies] == [False]
    # and the system prompt alone asks for the JSON object, with the reason before the score
    system = canned.bodies[0]["messages"][0]["content"]
    assert "Reply with only a JSON object" in system
    assert system.index('"reason":') < system.index('"score":')
    with CannedJudge(rejects_json_schema) as canned:  # insisting on a schema: the endpoint's error, said
        s = score(canned, structured_output="schema")
    assert len(canned.bodies) == 1
    assert s.error == ("rubric answer_relevance: the judge answered HTTP 400: ragbridge judge gateway: the "
                       "judge refuses a JSON object asked for in mode 'schema' (the structured_output of "
                       "backend rubric): HTTP 400: response_format json_schema is not supported")


@pytest.mark.parametrize("opts, message", [
    ({"structure": "prompt"}, "the rubric backend has no option 'structure'"),
    ({"structured_output": "xml"},
     "rubric.structured_output must be one of auto, schema, json_object, tool, prompt, got 'xml'"),
    ({"retries": -1}, "rubric.retries must be a whole number of at least 0, got -1"),
    ({"concurrency": "4"}, "rubric.concurrency must be a whole number of at least 1, got '4'"),
])
def test_a_bad_option_stops_the_run_before_it_starts(tmp_path, opts, message):
    from ragbridge import RunError

    with CannedJudge(queue(GOOD)) as canned:
        judge = JudgeConfig(model="canned", base_url=canned.base_url, cache_mode="off")
        with pytest.raises(RunError, match=re.escape(message)):
            evaluate(one_case(), backends=["rubric"], metrics=["answer_relevance"], judge=judge,
                     out=tmp_path / "r", options=RunOptions(backend_options={"rubric": opts}))
    assert canned.bodies == [] and not (tmp_path / "r").exists()


def test_stub_faults_are_retried_within_the_budget(stub_judge):
    """The stub judge breaks the JSON of the answers it is told to: each is asked again; three in a row
    make that case's error. One case at a time, so the faults land where they are queued."""
    cases = load_cases(EXAMPLE)[:6]
    judge = JudgeConfig(model="stub-judge", base_url=stub_judge.base_url, cache_mode="off")
    opts = RunOptions(backend_options={"rubric": {"concurrency": 1}})
    stub_judge.inject(*(["malformed", None] * 12))  # every first answer broken, every re-ask fine
    run = evaluate(cases, backends=["rubric"], metrics=["faithfulness"], judge=judge, options=opts)
    posts = stub_judge.posts("/chat/completions")
    assert [r.fault for r in posts] == ["malformed", None] * 12
    assert all(len(r.body["messages"]) == 4 for r in posts[1::2])  # the re-ask names the problem
    assert all("not one JSON object" in r.body["messages"][3]["content"] for r in posts[1::2])
    assert [s.status for s in run.scores] == ["scored"] * 6
    assert sum(s.judge_calls for s in run.scores) == 24  # counted per case by the gateway, re-asks included
    stub_judge.reset()
    stub_judge.inject("malformed", "malformed", "malformed")
    run = evaluate(cases[:2], backends=["rubric"], metrics=["answer_relevance"], judge=judge, options=opts)
    by_id = {s.case_id: s for s in run.scores}
    first = next(r for r in stub_judge.posts("/chat/completions")).body["messages"][1]["content"]
    failed = next(c.id for c in cases[:2] if c.question in first)
    assert by_id[failed].status == "error" and "unusable reply after 3 attempt(s)" in by_id[failed].error
    assert [s.status for cid, s in by_id.items() if cid != failed] == ["scored"]
