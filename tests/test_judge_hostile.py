"""The judge gateway against a hostile judge (the stub judge's modes in its path,
``ragbridge.testing.hostile``) and hostile clients of its socket: usage that cannot be true, a key
echoed in every encoding, bad framing and oversized bodies, a judge that drips or floods its answer,
and a budget that holds across SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest
from conftest import EXAMPLE, ragbridge_cli

from ragbridge import evaluate, load_cases, load_run
from ragbridge.judge import JudgeConfig, JudgeGateway
from ragbridge.plugins import get_backends
from ragbridge.testing import StubJudge
from ragbridge.testing.hostile import ECHO_MODES, USAGE_LIES, echo_key_body, key_leaks

CANARY = "sk-canary/RB+key=0123456789abcdef_XYZ"
PRICES = {"judge-m": {"input": 1.0, "output": 2.0}}


def hostile(stub: StubJudge, mode: str) -> str:
    return f"{stub.url}/hostile/{mode}/v1"


def cases(n: int):
    return load_cases(EXAMPLE)[:n]


# ------------------------------------------------------------------------------------------------
# Usage that cannot be true


@pytest.mark.parametrize("mode", sorted(USAGE_LIES))
def test_impossible_usage_is_counted_not_believed_and_max_cost_holds(mode, tmp_path):
    with StubJudge() as stub:
        cfg = JudgeConfig(model="judge-m", base_url=hostile(stub, mode), cache_path=tmp_path / "c.sqlite",
                          prices=PRICES, max_concurrency=2)
        run = evaluate(cases(12), backends=["rubric"], metrics=["answer_relevance"], out=tmp_path / "run",
                       judge=cfg, max_cost=1000.0)
        posts = len(stub.posts())
    judge = run.manifest.counts["judge"]
    assert judge["invalid_usage"] >= 1 and judge["calls"] == posts
    assert 0 <= judge["prompt_tokens"] < 10**9  # a lie is never added in (negative, 10**12)
    assert judge["cost"] is None  # a call whose tokens could not be true has no cost to add
    assert run.manifest.counts["cost"]["total"] is None  # unknown, not a number made up
    # the money budget cannot be kept once a call's cost is unknown: the run stops, the rest not run
    assert run.manifest.counts["budget"]["spent"] is True and run.manifest.status == "incomplete"
    assert posts <= cfg.max_concurrency  # at most the calls in flight when the lie arrived
    not_run = [s for s in load_run(tmp_path / "run").scores if s.not_run]
    assert not_run and "cost could not be known" in not_run[0].reason


def test_impossible_usage_is_said_on_the_command_line(tmp_path):
    with StubJudge() as stub:
        res = ragbridge_cli("run", EXAMPLE, "--out", tmp_path / "run", "--backend", "rubric", "--metric",
                            "answer_relevance", "--judge-model", "judge-m", "--judge-base-url",
                            hostile(stub, "usage-negative"), "--cache-path", tmp_path / "c.sqlite",
                            "--no-progress", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    warning = [line for line in res.stderr.splitlines() if "usage that cannot be true" in line]
    assert len(warning) == 1 and "53 judge call(s)" in warning[0]
    assert json.loads((tmp_path / "run" / "run.json").read_text())["counts"]["judge"]["invalid_usage"] == 53


# ------------------------------------------------------------------------------------------------
# The key, echoed in every form and charset


@pytest.mark.parametrize("backend", ["rubric", "phoenix", *(pytest.param(b, marks=pytest.mark.slow)
                                                          for b in ("ragas", "deepeval", "trulens"))])
def test_a_key_echoed_in_any_encoding_or_charset_is_written_nowhere(backend, tmp_path, monkeypatch):
    """The judge echoes the key it was given in every form of `key_forms`, and the whole error body in
    UTF-16, UTF-16BE, UTF-32, cp500 and UTF-7 (declared in its Content-Type) and in UTF-16 with a
    byte-order mark and no charset, one answer each in turn: no file of the run, the cache or the
    reports holds the key in any of them."""
    if not get_backends()[backend].available():
        pytest.skip(f"{backend} is not installed")
    monkeypatch.setenv("RB_CANARY_KEY", CANARY)
    with StubJudge() as stub:
        cfg = JudgeConfig(model="judge-m", base_url=hostile(stub, "echo-key-each"),
                          api_key_env="RB_CANARY_KEY", cache_path=tmp_path / "cache.sqlite", max_retries=0)
        run = evaluate(cases(8), backends=[backend], metrics=["faithfulness"], out=tmp_path / "run",
                       judge=cfg)
        keys = {p.headers.get("authorization") for p in stub.posts()}
        assert keys == {f"Bearer {CANARY}"}  # the judge got the key, to echo it
        assert stub.echo_turn >= len(ECHO_MODES)  # every form and charset was sent
    from ragbridge.report import render_html, render_json, render_markdown

    report = load_run(tmp_path / "run")
    (tmp_path / "run" / "report.html").write_text(render_html(report))
    (tmp_path / "run" / "report.md").write_text(render_markdown(report))
    (tmp_path / "run" / "report.json").write_text(render_json(report))
    for path in [p for p in tmp_path.rglob("*") if p.is_file()]:
        assert not key_leaks(path.read_bytes(), CANARY), (path, key_leaks(path.read_bytes(), CANARY))
    audit = (tmp_path / "run" / "judge-audit.jsonl").read_bytes()
    assert b"[REDACTED]" in audit  # the echoed forms were there, and were replaced
    assert run.manifest.status in ("complete", "incomplete")
    scores = report.scores
    assert scores and all(s.error for s in scores), [s.error for s in scores]  # the judge's error came
    assert all("[REDACTED]" in s.error for s in scores)  # read in its charset: the message kept, the key not


HEADER_SECRETS = {"RB_HELICONE_KEY": "sk-helicone-0123456789abcdef", "cf": "cf-aig-secret-0123456789",
                  "x": "xauth-secret-abcdefgh"}


def test_custom_auth_headers_are_secrets_unless_named_public(tmp_path, monkeypatch):
    """Helicone-Auth (its value from the environment), cf-aig-authorization and X-Authorization are
    sent to the judge, never written to run.json, the audit log, the cache or the reports, never
    printed by --json, and redacted from what the judge echoes; X-Team, named public, is recorded."""
    monkeypatch.setenv("RB_CANARY_KEY", CANARY)
    monkeypatch.setenv("RB_HELICONE_KEY", HEADER_SECRETS["RB_HELICONE_KEY"])
    with StubJudge() as stub:
        (tmp_path / "ragbridge.toml").write_text(
            f'[judge]\nmodel = "judge-m"\nbase_url = "{hostile(stub, "echo-key")}"\n'
            f'api_key_env = "RB_CANARY_KEY"\nmax_retries = 0\ncache_path = "cache.sqlite"\n'
            f'headers = {{ "Helicone-Auth" = "Bearer ${{RB_HELICONE_KEY}}", '
            f'"cf-aig-authorization" = "Bearer {HEADER_SECRETS["cf"]}", '
            f'"X-Authorization" = "{HEADER_SECRETS["x"]}", "X-Team" = "eval-team" }}\n'
            f'public_headers = ["X-Team"]\n')
        res = ragbridge_cli("run", EXAMPLE, "--out", tmp_path / "run", "--backend", "rubric", "--metric",
                            "faithfulness", "--json", "--no-progress", cwd=tmp_path)
        sent = stub.posts()[0].headers
    assert res.returncode == 3, res.stderr  # the judge refused every call: errored scores
    assert (sent["helicone-auth"], sent["cf-aig-authorization"], sent["x-authorization"], sent["x-team"]) == (
        f"Bearer {HEADER_SECRETS['RB_HELICONE_KEY']}", f"Bearer {HEADER_SECRETS['cf']}", HEADER_SECRETS["x"],
        "eval-team")
    printed = json.loads(res.stdout)["judge"]
    assert printed["headers"] == {"Helicone-Auth": "[secret]", "cf-aig-authorization": "[secret]",
                                  "X-Authorization": "[secret]", "X-Team": "eval-team"}
    assert printed == json.loads((tmp_path / "run" / "run.json").read_text())["judge"]
    from ragbridge.report import render_html, render_markdown

    report = load_run(tmp_path / "run")
    (tmp_path / "run" / "report.html").write_text(render_html(report))
    (tmp_path / "run" / "report.md").write_text(render_markdown(report))
    outputs = [res.stdout.encode(), res.stderr.encode()] + [p.read_bytes() for p in tmp_path.rglob("*")
                                                            if p.is_file() and p.name != "ragbridge.toml"]
    for secret in (CANARY, *HEADER_SECRETS.values()):
        assert not any(key_leaks(data, secret) for data in outputs), secret
    assert all("[REDACTED]" in s.error for s in report.scores)


def test_the_password_of_a_user_pass_url_is_redacted_as_the_key_is(tmp_path):
    password = "pw-secret-0123456789"
    with StubJudge() as stub:
        url = hostile(stub, "echo-key").replace("http://", f"http://judge:{password}@")
        cfg = JudgeConfig(model="judge-m", base_url=url, cache_path=tmp_path / "c.sqlite", max_retries=0)
        evaluate(cases(2), backends=["rubric"], metrics=["faithfulness"], out=tmp_path / "run", judge=cfg)
        assert stub.posts()[0].headers["authorization"].startswith("Basic ")  # the judge got it, to echo
    scores = load_run(tmp_path / "run").scores
    assert all("[REDACTED]" in s.error for s in scores), scores[0].error
    for path in [p for p in tmp_path.rglob("*") if p.is_file()]:
        assert not key_leaks(path.read_bytes(), password), path


def test_a_header_whose_variable_is_unset_stops_the_run_before_any_call(tmp_path):
    with StubJudge() as stub:
        (tmp_path / "ragbridge.toml").write_text(
            f'[judge]\nmodel = "judge-m"\nbase_url = "{stub.base_url}"\n'
            'headers = { "Helicone-Auth" = "Bearer ${RB_UNSET_VARIABLE}" }\n')
        res = ragbridge_cli("run", EXAMPLE, "--out", tmp_path / "run", "--backend", "rubric", "--metric",
                            "faithfulness", "--no-progress", cwd=tmp_path, env={"RB_UNSET_VARIABLE": ""})
        assert not stub.requests
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert ("judge header 'Helicone-Auth' takes its value from the environment variable RB_UNSET_VARIABLE, "
            "which is not set: set it (export RB_UNSET_VARIABLE=...)") in " ".join(res.stderr.split())
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("charset", ["utf-8", "utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-be",
                                     "cp500", "cp037", "utf-7", "unicode_escape"])
@pytest.mark.parametrize("declared", [True, False])
def test_redaction_reads_an_answer_in_the_charset_it_is_in(charset, declared):
    """Every form of the key, in a body of each charset, declared or not: what the gateway keeps holds
    no form of the key in any charset, and a declared charset is read (the rest of the message kept)."""
    from ragbridge.judge.redact import Redactor

    redactor = Redactor()
    redactor.keys([CANARY])
    text = echo_key_body(CANARY).decode()
    ctype = f"application/json; charset={charset}" if declared else "application/json"
    body, content_type, withheld = redactor.reply(text.encode(charset), ctype)
    assert not key_leaks(body, CANARY), key_leaks(body, CANARY)
    if declared or charset.startswith("utf-") and charset != "utf-7":  # said, or JSON's own rule finds it
        assert withheld is None and (content_type == ctype if charset == "utf-8" and declared
                                     else content_type.endswith("charset=utf-8") or not declared)
        assert json.loads(body)["error"]["message"].startswith("invalid request for key raw: [REDACTED]")
    elif charset != "unicode_escape":  # read as UTF-8 no key shows; read as what it is, one would
        assert withheld is not None and b"ragbridge_key_in_answer" in body


def test_redaction_leaves_text_that_only_looks_like_an_encoding():
    from ragbridge.judge.redact import Redactor

    redactor = Redactor()
    redactor.keys([CANARY])
    # pieces of the key shorter than FRAGMENT (8) characters, and a one-case word of eight
    text = (b'{"a": "Q&amp;A &#x41; &sol; 736b2d63 \\x41 %2F sk-cana", "b": "0123456 canaryxx", '
            b'"c": "\\u0073k-c"}')
    assert redactor(text) == text and redactor.reply(text, "application/json")[0] == text


# ------------------------------------------------------------------------------------------------
# An answer that says two things at once


@pytest.mark.parametrize("backend", ["rubric", "ragas", pytest.param("deepeval", marks=pytest.mark.slow)])
def test_a_verdict_given_twice_is_an_error_on_every_backend(backend, tmp_path):
    """Every "verdict" of the judge's reply is followed by a second, contradicting one: RAGAS and
    DeepEval took the last (0.0) and the rubric too; now each such score is an error, the call counted,
    the answer not cached."""
    if not get_backends()[backend].available():
        pytest.skip(f"{backend} is not installed")
    with StubJudge() as stub:
        cfg = JudgeConfig(model="judge-m", base_url=hostile(stub, "repeated-key"),
                          cache_path=tmp_path / "c.sqlite", max_retries=2)
        run = evaluate(cases(3), backends=[backend], metrics=["faithfulness"], out=tmp_path / "run",
                       judge=cfg)
        posts = len(stub.posts())
    scores = load_run(tmp_path / "run").scores
    assert len(scores) == 3 and all(s.value is None for s in scores), [(s.value, s.error) for s in scores]
    assert all("gives the key 'verdict' twice in one object" in s.error for s in scores), scores[0].error
    assert run.manifest.counts["judge"]["calls"] == posts  # made and counted, not retried by the gateway
    assert run.manifest.counts["judge"]["retries"] == 0
    from ragbridge.judge.cache import JudgeCache

    cached = JudgeCache(tmp_path / "c.sqlite", read_only=True)
    try:
        assert all(b'"verdict"' not in cached.get(k)[1] for k in cached._mem)  # none kept to replay
    finally:
        cached.close()


@pytest.mark.parametrize("answer, repeated", [
    ({"choices": [{"message": {"content": '{"verdict": 1, "reason": "r", "verdict": 0}'}}]}, "verdict"),
    ({"choices": [{"message": {"content": 'Here:\n```json\n[{"a": 1}, {"b": 2, "b": 3}]\n```'}}]}, "b"),
    ({"choices": [{"message": {"content": None, "tool_calls": [
        {"function": {"name": "f", "arguments": '{"score": 2, "score": 5}'}}]}}]}, "score"),
    ({"output": [{"content": [{"type": "output_text", "text": '{"x": {"y": 1, "y": 1}}'}]}]}, "y"),
    ({"choices": [{"message": {"content": '{"verdicts": [{"verdict": 1}, {"verdict": 0}]}'}}]}, None),
    ({"choices": [{"message": {"content": "verdict: yes, verdict: no"}}]}, None),
    ({"choices": [{"message": {"content": "{not json"}}]}, None),
])
def test_parse_answer_finds_a_key_an_object_repeats(answer, repeated):
    from ragbridge.judge.strict import parse_answer

    assert parse_answer(json.dumps(answer).encode())[1] == repeated
    assert parse_answer(b'{"choices": [], "usage": {}, "usage": {"prompt_tokens": 1}}')[1] == "usage"


# ------------------------------------------------------------------------------------------------
# The loopback socket: the key first, bounded bodies, bad framing answered


def _exchange(port: int, head: str, body: bytes = b"") -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(head.encode("latin-1") + body)
        s.shutdown(socket.SHUT_WR) if body else None
        data = b""
        while b"\r\n\r\n" not in data or not data.split(b"\r\n\r\n", 1)[1]:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        return data


@pytest.mark.parametrize("headers, body, status", [
    ("Content-Length: 400000000", b"", "401"),  # no key: refused before a byte of the body is read
    ("Authorization: Bearer {key}\r\nContent-Length: abc", b"{}", "400"),
    ("Authorization: Bearer {key}\r\nContent-Length: -5", b"{}", "400"),
    ("Authorization: Bearer {key}\r\nTransfer-Encoding: chunked", b"zz\r\n{}\r\n0\r\n\r\n", "400"),
    ("Authorization: Bearer {key}\r\nContent-Length: 400000000", b"", "413"),  # over the cap: not read
])
def test_gateway_socket_refuses_before_reading_and_answers_bad_framing(headers, body, status, tmp_path,
                                                                        capfd):
    with StubJudge() as stub, JudgeGateway(JudgeConfig(model="m", base_url=stub.base_url,
                                                       cache_mode="off")) as gw:
        gw.url  # noqa: B018 - opens the socket
        head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{gw.port}\r\n"
                + headers.format(key=gw.api_key) + "\r\n\r\n")
        reply = _exchange(gw.port, head, body)
        assert reply.startswith(f"HTTP/1.1 {status} ".encode()), reply[:200]
        assert not stub.posts()
    assert "Traceback" not in capfd.readouterr().err


# ------------------------------------------------------------------------------------------------
# A judge that drips its answer, or floods it



def _post(gw: JudgeGateway) -> httpx.Response:
    with httpx.Client(transport=gw.transport(), timeout=60) as c:
        return c.post(gw.base_url("b", "m", "c", in_process=True) + "/chat/completions",
                      json={"model": "m", "messages": [{"role": "user", "content": "hi"}]})


@pytest.mark.parametrize("mode", ["drip", "drip-head"])
def test_a_dripping_judge_is_cut_at_the_calls_deadline(mode):
    """The answer (or its status line and headers too) a byte every 0.25 s: each read is quick, the
    whole would take minutes; each attempt ends at its deadline."""
    with StubJudge(drip_interval=0.25) as stub:
        cfg = JudgeConfig(model="m", base_url=hostile(stub, mode), cache_mode="off", timeout=1.0,
                          max_retries=1)
        with JudgeGateway(cfg) as gw:
            t0 = time.monotonic()
            r = _post(gw)
            assert r.status_code == 504 and "timed out after 2 attempt(s)" in r.text
            assert gw.usage().calls == 1 and gw.usage().retries == 1
            assert time.monotonic() - t0 < 10, "each attempt ends at its 1 s deadline"


def test_a_flooding_judge_is_cut_at_the_reply_cap():
    with StubJudge(huge_bytes=8 << 20) as stub:
        cfg = JudgeConfig(model="m", base_url=hostile(stub, "huge"), cache_mode="off",
                          max_reply_bytes=1 << 20)
        with JudgeGateway(cfg) as gw:
            r = _post(gw)
            assert r.status_code == 502 and "upstream_reply_too_large" in r.text
            assert len(stub.posts()) == 1  # not retried: the same judge would send it again


# ------------------------------------------------------------------------------------------------
# A lone surrogate in the judge's reason


@pytest.mark.parametrize("backend", ["rubric", "deepeval", pytest.param("ragas", marks=pytest.mark.slow)])
def test_a_lone_surrogate_in_a_reason_is_mended_and_poisons_nothing(backend, tmp_path):
    """Every "reason" of the judge's replies begins with a lone surrogate (\\ud800): the rubric and
    DeepEval stopped with a traceback and no score, and the cached answer did it again on every run.
    Three runs on one cache: each scores every case, the reason written with U+FFFD."""
    if not get_backends()[backend].available():
        pytest.skip(f"{backend} is not installed")
    with StubJudge() as stub:
        cfg = JudgeConfig(model="judge-m", base_url=hostile(stub, "lone-surrogate"),
                          cache_path=tmp_path / "c.sqlite")
        for i in range(3):
            run = evaluate(cases(2), backends=[backend], metrics=["faithfulness"], out=tmp_path / f"run{i}",
                           judge=cfg)
            scores = load_run(tmp_path / f"run{i}").scores
            assert len(scores) == 2 and all(s.value is not None for s in scores), [s.error for s in scores]
            assert run.manifest.status == "complete"
        assert len(stub.posts()) > 0 and run.manifest.counts["judge"]["calls"] == 0  # replayed, whole
    written = b"".join(p.read_bytes() for p in tmp_path.rglob("scores.jsonl")).decode("utf-8")
    if backend != "ragas":  # RAGAS keeps no reason
        assert "\ufffd" in written or "\\ufffd" in written  # the judge's reason, as a file can hold it


def test_a_score_holding_a_lone_surrogate_is_written_with_the_replacement_character(tmp_path):
    """Whatever put it there (a library, a cache written before the gateway mended answers), the run
    folder and the score cache write the score, not a traceback."""
    from ragbridge.run.folder import score_json
    from ragbridge.schema import ClaimVerdict, Evidence, Score

    score = Score(case_id="c", metric="faithfulness", backend="b", value=0.5, reason="r\ud800",
                  evidence=Evidence(claims=[ClaimVerdict(text="t\udfff", verdict="SUPPORTED", reason="x")]))
    line = json.loads(score_json(score))
    assert line["reason"] == "r\ufffd" and line["evidence"]["claims"][0]["text"] == "t\ufffd"


# ------------------------------------------------------------------------------------------------
# A judge that answers after the deadline: every request sent is counted and paid for


def test_max_calls_counts_every_request_sent_upstream_retries_included(tmp_path, monkeypatch):
    """Every answer comes after the call's deadline, so each call is tried four times: the judge gets
    at most --max-calls requests (it got every retry on top before), and the tally and run.json count
    each one."""
    from ragbridge.judge.ledger import read_tally

    monkeypatch.setattr(JudgeGateway, "backoff_base", 0.01)
    with StubJudge(late_seconds=0.5) as stub:
        cfg = JudgeConfig(model="judge-m", base_url=hostile(stub, "late"), cache_path=tmp_path / "c.sqlite",
                          timeout=0.2, max_retries=3, max_concurrency=4, prices=PRICES)
        run = evaluate(cases(12), backends=["rubric"], metrics=["answer_relevance"], out=tmp_path / "run",
                       judge=cfg, max_calls=10)
        posts = len(stub.posts())
    judge, budget = run.manifest.counts["judge"], run.manifest.counts["budget"]
    assert posts <= 10 and budget["spent"] is True and run.manifest.status == "incomplete"
    assert judge["calls"] + judge["retries"] == posts == read_tally(tmp_path / "run" / "judge-calls.log")[0]
    # an attempt that timed out after it was sent may be charged, at a cost no answer tells
    assert judge["cost"] is None and run.manifest.counts["cost"]["total"] is None
    scores = load_run(tmp_path / "run").scores
    assert any(s.not_run for s in scores) and not any(s.value is not None for s in scores)


def test_an_attempt_answered_late_is_paid_for(tmp_path, monkeypatch):
    """Each request is answered after the deadline the first time and at once when retried: the cost
    is twice what the answers report (the late attempt did the same work), not once."""
    monkeypatch.setattr(JudgeGateway, "backoff_base", 0.01)
    costs = {}
    for mode in ("late-once", None):
        with StubJudge(late_seconds=0.5) as stub:
            url = hostile(stub, mode) if mode else stub.base_url
            cfg = JudgeConfig(model="judge-m", base_url=url, cache_path=tmp_path / f"{mode}.sqlite",
                              timeout=0.2, max_retries=2, prices=PRICES)
            run = evaluate(cases(3), backends=["rubric"], metrics=["answer_relevance"],
                           out=tmp_path / f"run-{mode}", judge=cfg)
            costs[mode] = (run.manifest.counts["cost"]["total"], run.manifest.counts["judge"]["retries"],
                           len(stub.posts()))
    assert costs[None][1:] == (0, 3) and costs["late-once"][1:] == (3, 6)
    assert costs["late-once"][0] == pytest.approx(2 * costs[None][0]) and costs[None][0] > 0


def test_a_budget_spent_with_errored_scores_exits_4_naming_the_budget(tmp_path):
    """A third of the judge's answers are errors (no retry) and --max-calls runs out: the run exits 4
    naming the budget and counting both (it exited 3, "run again to retry", and the next run 4); the
    next run, with the same budget, says the same (its errored scores now not run: no budget left)."""
    (tmp_path / "ragbridge.toml").write_text('[judge]\nmodel = "judge-m"\nmax_retries = 0\n'
                                             'cache_path = "c.sqlite"\n')
    with StubJudge(fault_rate_500=0.34, seed=3) as stub:
        args = ["run", EXAMPLE, "--out", tmp_path / "run", "--backend", "rubric", "--metric",
                "answer_relevance", "--judge-base-url", stub.base_url, "--max-calls", "9", "--no-progress"]
        first = ragbridge_cli(*args, cwd=tmp_path)
        counts = json.loads((tmp_path / "run" / "run.json").read_text())["counts"]
        second = ragbridge_cli(*args, cwd=tmp_path)
    assert counts["errored"] > 0 and counts["not_run"] > 0 and counts["budget"]["spent"] is True
    for res in (first, second):
        assert res.returncode == 4, res.stdout + res.stderr
        message = " ".join(res.stderr.split())
        assert "judge budget spent (--max-calls 9):" in message, message
        assert "run the same command with a larger budget" in message
    assert f", {counts['errored']} errored;" in " ".join(first.stderr.split())


# ------------------------------------------------------------------------------------------------
# A judge that compresses its answers


@pytest.mark.parametrize("userinfo", [False, True])
def test_a_compressed_answer_is_read_on_every_transport(userinfo, tmp_path):
    """The judge gzips every answer, and for a base URL with user:pass@ too (httpx asked for gzip and
    never decompressed: every call failed)."""
    with StubJudge() as stub:
        url = hostile(stub, "gzip")
        if userinfo:
            url = url.replace("http://", "http://user:pass@")
        cfg = JudgeConfig(model="judge-m", base_url=url, cache_path=tmp_path / "c.sqlite", max_retries=0)
        run = evaluate(cases(3), backends=["rubric"], metrics=["answer_relevance"], out=tmp_path / "run",
                       judge=cfg)
        assert len(stub.posts()) == 3
    scores = load_run(tmp_path / "run").scores
    assert all(s.value is not None for s in scores), [s.error for s in scores]
    assert run.manifest.counts["judge"]["errors"] == 0


def test_a_compressed_answer_is_held_to_the_reply_cap_once_decompressed():
    import gzip
    import zlib

    from ragbridge.judge.upstream import ReplyTooLarge, UnreadableReply, decompressed

    body = b'{"a": "' + b"x" * 1000 + b'"}'
    assert decompressed(gzip.compress(body), "gzip", 1 << 20) == body
    assert decompressed(zlib.compress(body), "deflate", 1 << 20) == body
    assert decompressed(zlib.compress(gzip.compress(body)), "gzip, deflate", 1 << 20) == body
    assert decompressed(body, None, 1 << 20) == body and decompressed(body, "identity", 1 << 20) == body
    bomb = gzip.compress(b"\0" * (64 << 20))  # 64 MiB in 64 KiB
    with pytest.raises(ReplyTooLarge, match="once decompressed"):
        decompressed(bomb, "gzip", 1 << 20)
    with pytest.raises(UnreadableReply, match="'br'"):
        decompressed(body, "br", 1 << 20)
    with pytest.raises(UnreadableReply, match="corrupt"):
        decompressed(b"\x1f\x8bnot gzip", "gzip", 1 << 20)


# ------------------------------------------------------------------------------------------------
# The budget across SIGKILL


@pytest.mark.slow
def test_max_calls_holds_across_kill_9_and_run_json_counts_every_call(tmp_path):
    """Three sessions killed with SIGKILL while calls are in flight (held by the judge), then a
    resume: the judge never gets more calls than --max-calls, and run.json counts each one made."""
    out = tmp_path / "run"
    args = [sys.executable, "-c", "from ragbridge.commands import run_cli; run_cli()", "run", EXAMPLE,
            "--out", out, "--backend", "rubric", "--metric", "answer_relevance", "--judge-model", "m",
            "--cache-path", tmp_path / "c.sqlite", "--max-concurrency", "4", "--max-calls", "20",
            "--no-progress"]
    with StubJudge() as stub:
        args += ["--judge-base-url", stub.base_url]
        for _ in range(3):
            before = len(stub.posts())
            stub.hold()  # calls arrive and stay in flight until the kill
            proc = subprocess.Popen([str(a) for a in args], cwd=tmp_path, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL, env={**os.environ, "COLUMNS": "200"})
            try:
                stub.wait_for_requests(before + 3, timeout=120)  # 3 of the 4 in flight at most
            finally:
                proc.send_signal(signal.SIGKILL)
                proc.wait(30)
            stub.release()
        final = ragbridge_cli(*[str(a) for a in args[3:]], cwd=tmp_path)
        made = len(stub.posts())
    assert final.returncode == 4, final.stdout + final.stderr  # the budget, spent
    assert made <= 20
    counts = json.loads((out / "run.json").read_text())["counts"]
    assert counts["judge"]["calls"] + counts["judge"]["retries"] >= made and counts["budget"]["spent"] is True


# ------------------------------------------------------------------------------------------------
# The key in pieces, and in base32


@pytest.mark.parametrize("mode", ["key-split", "key-b32"])
def test_a_key_in_pieces_or_base32_in_an_answer_is_written_nowhere(mode, tmp_path, monkeypatch):
    """The judge ends every reason of its (otherwise good) answers with the key it was given, cut in
    two halves or in base32: the run, the caches and the reports hold no piece of it."""
    import base64

    monkeypatch.setenv("RB_CANARY_KEY", CANARY)
    with StubJudge() as stub:
        cfg = JudgeConfig(model="judge-m", base_url=hostile(stub, mode), api_key_env="RB_CANARY_KEY",
                          cache_path=tmp_path / "cache.sqlite", max_retries=0)
        evaluate(cases(4), backends=["rubric"], metrics=["faithfulness"], out=tmp_path / "run", judge=cfg)
    from ragbridge.report import render_markdown

    report = load_run(tmp_path / "run")
    (tmp_path / "run" / "report.md").write_text(render_markdown(report))
    assert [s for s in report.scores if s.status == "scored"]  # the answers were read, their reasons kept
    half = len(CANARY) // 2
    pieces = [CANARY[:half], CANARY[half:], base64.b32encode(CANARY.encode()).decode()[:24]]
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert {p.name for p in files} >= {"scores.jsonl", "cache.sqlite", "cache.scores.sqlite", "report.md"}
    for path in files:
        data = path.read_bytes()
        assert not [p for p in pieces if p.encode() in data], path
    assert "KEYECHO" in (tmp_path / "run" / "scores.jsonl").read_text()  # the echo came, redacted


def test_the_check_of_the_judges_model_is_counted_in_the_budget_and_the_log(tmp_path):
    """A judge that lists no models gets one request of the model before the run (``Say OK.``): it
    is one of --max-calls and a line of judge-calls.log, and once the budget is spent a run again
    sends none."""
    with StubJudge(lists_models=False) as stub:
        args = ["run", EXAMPLE, "--out", tmp_path / "run", "--backend", "rubric", "--metric",
                "answer_relevance", "--judge-model", "stub-judge", "--judge-base-url", stub.base_url,
                "--cache-mode", "off", "--max-calls", "3", "--max-concurrency", "1", "--no-progress"]
        first = ragbridge_cli(*args, cwd=tmp_path)
        sent = stub.posts()
        assert any(p.body.get("messages", [{}])[0].get("content") == "Say OK." for p in sent)  # the check
        assert len(sent) == 3, [p.body.get("messages") for p in sent]
        again = [ragbridge_cli(*args, cwd=tmp_path) for _ in range(2)]
        assert len(stub.posts()) == 3  # the budget is spent: nothing more, no check either
    assert first.returncode == 4 and all(res.returncode == 4 for res in again), first.stderr
    assert (tmp_path / "run" / "judge-calls.log").read_text().count("c\n") == 3
    assert json.loads((tmp_path / "run" / "run.json").read_text())["counts"]["judge"]["calls"] == 3
