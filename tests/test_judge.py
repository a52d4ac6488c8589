"""The judge gateway and the stub judge, end to end over 127.0.0.1 (no mocks).

A real ``openai`` client talks to a real :class:`JudgeGateway`, which forwards to a real
:class:`StubJudge`; the stub's request log is the ground truth for "how many upstream calls".
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import secrets
import socket
import sqlite3
import threading
import time
from pathlib import Path
from typing import Literal, Optional

import httpx
import pytest
from pydantic import BaseModel

from ragbridge.judge import (
    JudgeCache,
    JudgeConfig,
    JudgeConfigError,
    JudgeGateway,
    JudgeUnavailable,
    Usage,
    redact_url,
)
from ragbridge.judge.upstream import parse_retry_after
from ragbridge.testing import StubJudge
from ragbridge.testing.pytest_fixtures import stub_judge  # noqa: F401  (the fixture under test)
from ragbridge.stub.responders import JudgeRequest, respond, validate_schema
from conftest import library

openai = library(
    "openai", reason="the judge is tested with the openai SDK as its client; every library extra installs it")

# One plain-HTTP client for every SDK client here: building an httpx client (its TLS context) costs
# tens of milliseconds, and the openai SDK would build one per client.
HTTP = httpx.Client(trust_env=False, timeout=60)

MSG = [{"role": "user", "content": "Rate the answer from 0 to 3. Answer: refunds take 30 days."}]


def make_config(stub: StubJudge, tmp_path: Path, **kw) -> JudgeConfig:
    kw.setdefault("cache_path", tmp_path / "cache" / "judge.sqlite")
    kw.setdefault("api_key_env", "RAGBRIDGE_TEST_KEY")
    return JudgeConfig(model="judge-m", base_url=stub.base_url, **kw)


class FastGateway(JudgeGateway):
    """Same gateway, 10 ms backoff base so retry tests stay fast (Retry-After is still honoured)."""

    backoff_base = 0.01



def client_for(gw: JudgeGateway, backend="b", metric="m", case_id="c", **kw) -> openai.OpenAI:
    kw.setdefault("max_retries", 2)  # the SDK's default: the gateway must stop it from multiplying retries
    kw.setdefault("http_client", HTTP)
    return openai.OpenAI(base_url=gw.base_url(backend, metric, case_id), api_key=gw.api_key, **kw)


def chat(client: openai.OpenAI, model="judge-m", messages=MSG, **kw) -> str:
    return client.chat.completions.create(model=model, messages=messages, **kw).choices[0].message.content


# ------------------------------------------------------------------------------------------------
# Cache
# ------------------------------------------------------------------------------------------------


def test_identical_request_is_served_from_cache(stub_judge, tmp_path, monkeypatch):
    with JudgeGateway(make_config(stub_judge, tmp_path)) as gw:
        c = client_for(gw)
        first = chat(c, temperature=0)
        assert stub_judge.request_count == 1
        second = chat(c, temperature=0)
        assert second == first
        assert stub_judge.request_count == 1, "the second identical call must not reach upstream"
        u = gw.usage()
        assert (u.calls, u.cache_hits) == (1, 1)
        assert u.prompt_tokens > 0 and u.completion_tokens > 0  # counted once, for the real call
        assert gw.stub_detected  # answers from the stub are recognised, so runs can be labelled
    # A new gateway on the same file still hits (the cache is persistent), whether the file is small
    # enough to be loaded into memory or is read from SQLite on each lookup.
    for memory_bytes in (JudgeCache.memory_bytes, 0):
        monkeypatch.setattr(JudgeCache, "memory_bytes", memory_bytes)
        stub_judge.reset()
        new = [{"role": "user", "content": f"new {memory_bytes}"}]
        with JudgeGateway(make_config(stub_judge, tmp_path)) as gw:
            assert chat(client_for(gw), temperature=0) == first
            chat(client_for(gw), messages=new)
            assert stub_judge.request_count == 1
        with JudgeGateway(make_config(stub_judge, tmp_path)) as gw:
            chat(client_for(gw), messages=new)
            assert gw.usage().cache_hits == 1
        assert stub_judge.request_count == 1


def test_cache_writes_land_in_sqlite_soon_and_a_forgotten_answer_never_does(tmp_path, monkeypatch):
    import sqlite3

    monkeypatch.setattr(JudgeCache, "memory_bytes", 0)  # lookups must then find pending answers too
    path = tmp_path / "c.sqlite"
    cache = JudgeCache(path)
    try:
        cache.put("k1", "/chat/completions", "m", 200, b'{"a": 1}', raw_key="r1")
        assert cache.get("k1") == (200, b'{"a": 1}') and cache.get_raw("r1") == (200, b'{"a": 1}')
        cache.put("k2", "/chat/completions", "m", 200, b'{"a": 2}', raw_key="r2")
        assert cache.delete(set(), {"r2"}) == 1  # forgotten before the writer ran
        assert cache.get("k2") is None and cache.get_raw("r2") is None
        deadline = time.monotonic() + 60  # "soon" is write_delay (0.1 s); the margin is for a busy machine
        rows: list = []
        while time.monotonic() < deadline:  # written by the background writer, without close()
            with sqlite3.connect(path) as other:
                rows = other.execute("SELECT key FROM responses").fetchall()
            if rows:
                break
            time.sleep(0.02)
        assert rows == [("k1",)]
        cache.put("k3", "/chat/completions", "m", 200, b'{"a": 3}')
    finally:
        cache.close()  # writes what is pending
    with sqlite3.connect(path) as other:
        assert sorted(other.execute("SELECT key FROM responses").fetchall()) == [("k1",), ("k3",)]
        assert other.execute("SELECT raw, key FROM aliases").fetchall() == [("r1", "k1")]


def test_changed_model_or_parameter_misses(stub_judge, tmp_path):
    with JudgeGateway(make_config(stub_judge, tmp_path)) as gw:
        c = client_for(gw)
        chat(c, temperature=0)
        chat(c, model="other-model", temperature=0)
        chat(c, temperature=0.7)
        chat(c, temperature=0, max_tokens=50)
        assert stub_judge.request_count == 4
        assert gw.usage().cache_hits == 0
        chat(c, temperature=0.7)
        assert stub_judge.request_count == 4


def test_read_only_serves_recording_and_never_calls_upstream(stub_judge, tmp_path, monkeypatch):
    with JudgeGateway(make_config(stub_judge, tmp_path)) as gw:
        recorded = chat(client_for(gw))
    assert stub_judge.request_count == 1
    monkeypatch.delenv("RAGBRIDGE_TEST_KEY", raising=False)
    with JudgeGateway(make_config(stub_judge, tmp_path, cache_mode="read-only")) as gw:
        info = gw.preflight()
        assert info["upstream_checked"] is False
        c = client_for(gw)
        assert chat(c) == recorded
        with pytest.raises(openai.BadRequestError) as err:
            chat(c, messages=[{"role": "user", "content": "never recorded"}])
        assert "ragbridge judge cache miss in read-only mode" in str(err.value)
        assert gw.usage() == Usage(calls=0, cache_hits=1, errors=1)
    assert stub_judge.request_count == 1, "read-only mode must never call upstream"
    assert len(stub_judge.requests) == 1  # not even GET /models


def test_off_mode_always_calls(stub_judge, tmp_path):
    with JudgeGateway(make_config(stub_judge, tmp_path, cache_mode="off")) as gw:
        c = client_for(gw)
        chat(c)
        chat(c)
        assert stub_judge.request_count == 2
        assert gw.usage().calls == 2
    assert not (tmp_path / "cache").exists()


def test_concurrent_identical_requests_make_one_call(tmp_path):
    with StubJudge(latency=0.2) as stub, JudgeGateway(make_config(stub, tmp_path)) as gw:
        c = client_for(gw)
        outs: list[str] = []
        threads = [threading.Thread(target=lambda: outs.append(chat(c))) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(set(outs)) == 1 and len(outs) == 4
        assert stub.request_count == 1
        assert gw.usage().cache_hits == 3


# ------------------------------------------------------------------------------------------------
# Retries
# ------------------------------------------------------------------------------------------------


def test_429_and_500_are_retried(stub_judge, tmp_path):
    stub_judge.inject("429", "500", "500")
    with FastGateway(make_config(stub_judge, tmp_path, max_retries=5)) as gw:
        out = chat(client_for(gw))
        assert out.startswith("Score:")
        assert stub_judge.request_count == 4
        u = gw.usage()
        assert (u.calls, u.retries, u.errors) == (1, 3, 0)


def test_persistent_500_reaches_the_library_after_max_retries(stub_judge, tmp_path):
    stub_judge.inject(*["500"] * 10)
    with FastGateway(make_config(stub_judge, tmp_path, max_retries=2)) as gw:
        with pytest.raises(openai.InternalServerError) as err:
            chat(client_for(gw))
        assert "internal error (injected)" in str(err.value)
        assert stub_judge.request_count == 3, "1 try + 2 retries, and the SDK must not retry again"
        u = gw.usage()
        assert (u.calls, u.retries, u.errors) == (1, 2, 1)
        # Nothing was cached: the next call goes upstream again.
        stub_judge.reset()
        chat(client_for(gw))
        assert stub_judge.request_count == 1


def test_timeout_is_retried(tmp_path):
    with StubJudge(timeout_seconds=60) as stub:
        stub.inject("timeout")
        # 2 s: the second attempt's answer (no fault) must never be taken for a timeout on a busy machine
        with FastGateway(make_config(stub, tmp_path, timeout=2)) as gw:
            t0 = time.monotonic()
            out = chat(client_for(gw))
            assert out.startswith("Score:")
            assert time.monotonic() - t0 < 30  # not the 60 s the first attempt was held
            assert stub.request_count == 2
            assert gw.usage().retries == 1


def test_retry_after_is_honoured(tmp_path):
    with StubJudge(retry_after=1) as stub:
        stub.inject("429")
        with JudgeGateway(make_config(stub, tmp_path)) as gw:
            t0 = time.monotonic()
            chat(client_for(gw))
            assert time.monotonic() - t0 >= 1.0
            assert stub.request_count == 2


def test_retry_after_forms():
    assert parse_retry_after("2") == 2.0
    assert parse_retry_after("0.5") == 0.5
    assert parse_retry_after(None) is None
    assert parse_retry_after("garbage") is None
    from email.utils import format_datetime
    from datetime import datetime, timedelta, timezone

    d = parse_retry_after(format_datetime(datetime.now(timezone.utc) + timedelta(seconds=30), usegmt=True))
    assert 25 <= d <= 31


def test_non_json_2xx_is_retried_but_malformed_content_is_forwarded(stub_judge, tmp_path):
    stub_judge.inject("garbage")
    with FastGateway(make_config(stub_judge, tmp_path)) as gw:
        c = client_for(gw)
        assert chat(c).startswith("Score:")
        assert stub_judge.request_count == 2 and gw.usage().retries == 1
        stub_judge.inject("malformed")
        schema_msg = [{"role": "user", "content": "Return JSON {\"score\": 1}"}]
        content = chat(c, messages=schema_msg, response_format={"type": "json_object"})
        with pytest.raises(ValueError):
            json.loads(content)
        assert stub_judge.request_count == 3, "malformed content is the library's problem: no retry"


def test_concurrency_is_bounded_across_clients(tmp_path):
    with StubJudge() as stub:
        with JudgeGateway(make_config(stub, tmp_path, max_concurrency=4, cache_mode="off")) as gw:
            by_backend = [client_for(gw, backend=f"b{i}") for i in range(3)]
            clients = [by_backend[i % 3] for i in range(16)]
            errors: list[BaseException] = []

            def one(i: int) -> None:
                try:
                    chat(clients[i], messages=[{"role": "user", "content": f"question {i}"}])
                except BaseException as e:  # pragma: no cover - reported below
                    errors.append(e)

            stub.hold()  # answers wait: the gateway admits requests up to its bound, and no further
            threads = [threading.Thread(target=one, args=(i,)) for i in range(16)]
            for t in threads:
                t.start()
            stub.wait_for_requests(4)
            time.sleep(0.2)  # room for a fifth to arrive if the bound leaked (never fails a correct gateway)
            assert stub.in_flight == 4 and stub.request_count == 4
            stub.release()
            for t in threads:
                t.join()
        assert not errors
        assert stub.max_in_flight == 4
        assert stub.request_count == 16


# ------------------------------------------------------------------------------------------------
# Accounting
# ------------------------------------------------------------------------------------------------


def test_accounting_by_path_tag(stub_judge, tmp_path):
    with JudgeGateway(make_config(stub_judge, tmp_path)) as gw:
        chat(client_for(gw, "ragas", "faithfulness", "c1"), messages=[{"role": "user", "content": "a"}])
        chat(client_for(gw, "ragas", "faithfulness", "c2"), messages=[{"role": "user", "content": "b"}])
        chat(client_for(gw, "deepeval", "faithfulness", "c1"), messages=[{"role": "user", "content": "c"}])
        chat(client_for(gw, "deepeval", "faithfulness", "c1"), messages=[{"role": "user", "content": "c"}])
        emb = openai.OpenAI(base_url=gw.base_url("ragas", "answer_relevance", "c1"), api_key=gw.api_key,
                            http_client=HTTP)
        emb.embeddings.create(model="e", input=["one two", "three"])
        assert gw.usage("ragas").calls == 3
        assert gw.usage("ragas", "faithfulness").calls == 2
        assert gw.usage("ragas", case_id="c1").calls == 2
        assert gw.usage("ragas", "answer_relevance", "c1").prompt_tokens > 0
        assert gw.usage("ragas", "answer_relevance", "c1").completion_tokens == 0
        d = gw.usage("deepeval", "faithfulness", "c1")
        assert (d.calls, d.cache_hits) == (1, 1)
        assert gw.usage().calls == 4
        # a URL is stable per triple and opaque
        assert gw.base_url("ragas", "faithfulness", "c1") == gw.base_url("ragas", "faithfulness", "c1")
        assert "faithfulness" not in gw.base_url("ragas", "faithfulness", "c1")


def test_accounting_by_header_with_one_shared_client(stub_judge, tmp_path):
    with JudgeGateway(make_config(stub_judge, tmp_path)) as gw:
        http = httpx.Client(event_hooks=gw.httpx_event_hooks(), trust_env=False)
        shared = openai.OpenAI(base_url=gw.base_url(), api_key=gw.api_key, http_client=http)
        with gw.tag_scope("trulens", "groundedness", "case/1"):
            chat(shared, messages=[{"role": "user", "content": "x"}])
            chat(shared, messages=[{"role": "user", "content": "y"}])
        with gw.tag_scope("trulens", "context_relevance", "case 2"):
            chat(shared, messages=[{"role": "user", "content": "z"}])
        chat(shared, messages=[{"role": "user", "content": "untagged"}])
        # the header overrides a path tag
        tagged = openai.OpenAI(base_url=gw.base_url("ragas", "x", "y"), api_key=gw.api_key,
                               http_client=http)
        with gw.tag_scope("deepeval", "faithfulness", "c9"):
            chat(tagged, messages=[{"role": "user", "content": "w"}])
        assert gw.usage("trulens", "groundedness", "case/1").calls == 2
        assert gw.usage("trulens", "context_relevance", "case 2").calls == 1
        assert gw.usage("trulens").calls == 3
        assert gw.usage("deepeval", "faithfulness", "c9").calls == 1
        assert gw.usage("ragas").calls == 0
        assert gw.usage().calls == 5

        async def run_async() -> None:
            ahttp = httpx.AsyncClient(event_hooks=gw.async_httpx_event_hooks(), trust_env=False)
            ac = openai.AsyncOpenAI(base_url=gw.base_url(), api_key=gw.api_key, http_client=ahttp)

            async def one(case: str) -> None:
                with gw.tag_scope("ragas", "faithfulness", case):
                    await ac.chat.completions.create(model="judge-m",
                                                     messages=[{"role": "user", "content": case}])

            await asyncio.gather(*(one(f"a{i}") for i in range(5)))
            await ahttp.aclose()

        asyncio.run(run_async())
        for i in range(5):
            assert gw.usage("ragas", "faithfulness", f"a{i}").calls == 1


# ------------------------------------------------------------------------------------------------
# Secrets
# ------------------------------------------------------------------------------------------------


def test_key_never_written_anywhere(tmp_path, monkeypatch):
    secret = "sk-ragbridge-TESTSECRET-" + secrets.token_hex(16)
    monkeypatch.setenv("RAGBRIDGE_TEST_KEY", secret)
    audit = tmp_path / "run" / "judge-audit.jsonl"
    with StubJudge() as stub, FastGateway(make_config(stub, tmp_path, max_retries=1), audit_log=audit) as gw:
        gw.preflight()
        c = client_for(gw)
        chat(c)
        chat(c)  # cache hit
        c.embeddings.create(model="e", input="hello world")
        c.responses.create(model="judge-m", input="PROMPT: a\n\nRESPONSE: b\n\nRELEVANCE:")
        stub.inject("500", "500")
        with pytest.raises(openai.InternalServerError):
            chat(c, messages=[{"role": "user", "content": "fails"}])
        # the real key did reach the real endpoint, and only there
        assert stub.last_authorization == f"Bearer {secret}"
        assert all(r.body is None or secret not in json.dumps(r.body) for r in stub.requests)
        public = json.dumps(make_config(stub, tmp_path).public_dict())
        gateway_key = gw.api_key
    assert secret not in public
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.suffix == ".sqlite" for p in written) and audit in written
    for p in written:
        data = p.read_bytes()
        assert secret.encode() not in data, f"key found in {p}"
        assert secret[-16:].encode() not in data, f"part of the key found in {p}"
    lines = [json.loads(line) for line in audit.read_text().splitlines()]
    assert len(lines) == 5
    for line in lines:
        assert set(line) >= {"time", "backend", "metric", "case_id", "path", "status", "cache_hit",
                             "attempts", "seconds", "request_key", "response_sha256", "prompt_tokens",
                             "completion_tokens"}
        assert "authorization" not in json.dumps(line).lower()
        assert gateway_key not in json.dumps(line)
    assert [x["cache_hit"] for x in lines] == [False, True, False, False, False]
    assert lines[-1]["status"] == 500 and lines[-1]["attempts"] == 2
    # bodies only for the call that failed: its request and the judge's error are the evidence
    assert [("request" in x, "response" in x) for x in lines] == [(False, False)] * 4 + [(True, True)]
    assert lines[-1]["request"]["messages"] == [{"role": "user", "content": "fails"}]


def test_audit_log_keeps_what_audits_a_verdict_and_the_cache_holds_the_bodies(tmp_path):
    """One line per call: who asked, the cache key, status, tokens, timing; a successful body is
    found in the cache under the line's request_key, byte for byte (its SHA-256 is on the line)."""
    audit = tmp_path / "judge-audit.jsonl"
    with StubJudge() as stub, JudgeGateway(make_config(stub, tmp_path), audit_log=audit) as gw:
        c = client_for(gw, "ragas", "faithfulness", "case-1")
        question = [{"role": "user", "content": "Is the sky blue? " + "long context " * 400}]
        chat(c, messages=question)
        chat(c, messages=question)
        used = gw.usage("ragas", "faithfulness", "case-1")
        cache_path = gw.config.cache_path
    raw = audit.read_bytes()
    lines = [json.loads(x) for x in raw.splitlines()]
    assert [(x["backend"], x["metric"], x["case_id"], x["status"], x["cache"]) for x in lines] == [
        ("ragas", "faithfulness", "case-1", 200, "miss"), ("ragas", "faithfulness", "case-1", 200, "hit")]
    assert lines[0]["request_key"] == lines[1]["request_key"]
    assert lines[0]["response_sha256"] == lines[1]["response_sha256"]
    spent = (lines[0]["prompt_tokens"], lines[0]["completion_tokens"])
    assert spent == (used.prompt_tokens, used.completion_tokens)
    assert used.prompt_tokens > 0 and lines[1]["prompt_tokens"] == 0   # a cache hit spends nothing
    assert lines[0]["request_bytes"] > 5000 and len(raw) < 1500     # the 5 KB prompt is not copied
    with sqlite3.connect(cache_path) as con:
        body = con.execute("SELECT r.body FROM aliases a JOIN responses r ON r.key = a.key WHERE a.raw = ?",
                           (lines[0]["request_key"],)).fetchone()[0]
    assert hashlib.sha256(body).hexdigest() == lines[0]["response_sha256"]
    assert len(body) == lines[0]["response_bytes"]


def test_key_echoed_by_upstream_is_redacted(tmp_path, monkeypatch):
    secret = "sk-echo-" + secrets.token_hex(12)
    monkeypatch.setenv("RAGBRIDGE_TEST_KEY", secret)
    # A prompt containing the key (e.g. pasted by mistake) is echoed in the stub's reply.
    with StubJudge() as stub, JudgeGateway(make_config(stub, tmp_path), audit_log=tmp_path / "a.jsonl") as gw:
        out = chat(client_for(gw), messages=[{"role": "user", "content": f"Text: {secret}"}])
        assert secret not in (out or "")
    for p in tmp_path.rglob("*"):
        if p.is_file():
            assert secret.encode() not in p.read_bytes(), p


def test_gateway_rejects_browser_origins(stub_judge, tmp_path):
    with JudgeGateway(make_config(stub_judge, tmp_path)) as gw:
        key = {"Authorization": f"Bearer {gw.api_key}"}
        r = HTTP.post(gw.base_url() + "/chat/completions", json={"model": "m", "messages": []},
                      headers={"Origin": "https://evil.example", **key})
        assert r.status_code == 403
        r = HTTP.post(gw.base_url() + "/chat/completions", json={"model": "m", "messages": []},
                      headers={"Host": "evil.example", **key})
        assert r.status_code == 403
        assert HTTP.get(gw.base_url() + "/nope", headers=key).status_code == 404
    assert stub_judge.request_count == 0


def test_socket_refuses_requests_without_the_gateways_key(stub_judge, tmp_path, monkeypatch):
    """Another local process cannot spend the real key through the loopback socket, nor charge a
    case with a forged tag header: without this gateway's key a request is refused (401) before it
    is routed, forwarded, cached, counted or logged."""
    secret = "sk-real-" + secrets.token_hex(16)
    monkeypatch.setenv("RAGBRIDGE_TEST_KEY", secret)
    audit = tmp_path / "run" / "judge-audit.jsonl"
    body = {"model": "judge-m", "messages": MSG}
    with JudgeGateway(make_config(stub_judge, tmp_path), audit_log=audit) as gw:
        chat_url = gw.base_url("ragas", "faithfulness", "c1") + "/chat/completions"
        forged = {"X-Ragbridge-Tag": "ragas/faithfulness/c1"}
        refused = [
            HTTP.post(chat_url, json=body),  # no key
            HTTP.post(chat_url, json=body, headers=forged),  # a forged tag header, no key
            HTTP.post(chat_url, json=body, headers={"Authorization": "Bearer ragbridge-gateway", **forged}),
            HTTP.post(chat_url, json=body, headers={"Authorization": f"Bearer {secret}"}),  # the real key
            HTTP.post(chat_url, json=body, headers={"Authorization": f"Bearer {gw.api_key[:-1]}"}),
            HTTP.post(chat_url, json=body, headers={"api-key": gw.api_key + "x"}),
            HTTP.get(gw.base_url() + "/models"),
        ]
        assert [r.status_code for r in refused] == [401] * len(refused)
        assert all(r.json()["error"]["code"] == "invalid_api_key" for r in refused)
        assert all(gw.api_key not in r.text and secret not in r.text for r in refused)
        assert stub_judge.request_count == 0 and len(stub_judge.requests) == 0  # nothing reached the judge
        assert gw.usage() == Usage()  # and nothing was charged to any case
        # with the key (as the openai SDK sends it, or as an api-key header) the same requests pass
        assert chat(client_for(gw, "ragas", "faithfulness", "c1")).startswith("Score:")
        ok = HTTP.post(chat_url, json={**body, "temperature": 0.5}, headers={"api-key": gw.api_key})
        assert ok.status_code == 200
        assert stub_judge.request_count == 2 and gw.usage("ragas", "faithfulness", "c1").calls == 2
        gateway_key = gw.api_key
    assert len(audit.read_text().splitlines()) == 2  # the refused requests were not logged
    for p in (p for p in tmp_path.rglob("*") if p.is_file()):
        data = p.read_bytes()
        assert gateway_key.encode() not in data and secret.encode() not in data, p


def test_gateway_listens_only_once_a_socket_url_is_asked_for(stub_judge, tmp_path):
    with JudgeGateway(make_config(stub_judge, tmp_path)) as gw:
        in_process = openai.OpenAI(base_url=gw.base_url("ragas", "m", "c", in_process=True),
                                   api_key=gw.api_key,
                                   http_client=httpx.Client(transport=gw.transport(), trust_env=False))
        assert chat(in_process).startswith("Score:")
        assert not gw.listening and gw.port is None  # a run of in-process backends opens no socket
        assert chat(client_for(gw)).startswith("Score:")  # asking for a socket URL opens it
        assert gw.listening and gw.http_requests == 1
    assert not gw.listening and gw.port is None  # closed with the gateway


# ------------------------------------------------------------------------------------------------
# Preflight
# ------------------------------------------------------------------------------------------------


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_preflight_missing_key_for_remote_endpoint(tmp_path, monkeypatch):
    monkeypatch.delenv("RAGBRIDGE_TEST_KEY", raising=False)
    cfg = JudgeConfig(model="gpt-4o-mini", base_url="https://judge.invalid/v1",
                      api_key_env="RAGBRIDGE_TEST_KEY", cache_path=tmp_path / "c.sqlite")
    with pytest.raises(JudgeConfigError) as err:
        JudgeGateway(cfg).preflight()
    msg = str(err.value)
    assert "RAGBRIDGE_TEST_KEY" in msg and "https://judge.invalid/v1" in msg and "\n" not in msg


def test_preflight_unreachable_port(tmp_path, monkeypatch):
    monkeypatch.delenv("RAGBRIDGE_TEST_KEY", raising=False)  # local: a key is not required
    port = _free_port()
    cfg = JudgeConfig(model="m", base_url=f"http://127.0.0.1:{port}/v1", api_key_env="RAGBRIDGE_TEST_KEY",
                      cache_path=tmp_path / "c.sqlite")
    with pytest.raises(JudgeUnavailable) as err:
        JudgeGateway(cfg).preflight()
    msg = str(err.value)
    assert f"http://127.0.0.1:{port}/v1" in msg and "connection refused" in msg and "\n" not in msg


def test_preflight_ok_against_local_stub_without_key(stub_judge, tmp_path, monkeypatch):
    monkeypatch.delenv("RAGBRIDGE_TEST_KEY", raising=False)
    gw = JudgeGateway(make_config(stub_judge, tmp_path))
    info = gw.preflight()
    assert info["models_status"] == 200 and info["key_set"] is False and info["stub"] is True
    assert gw.stub_detected


def test_preflight_read_only_without_recording(tmp_path):
    cfg = JudgeConfig(model="m", base_url="https://judge.invalid/v1", cache_mode="read-only",
                      cache_path=tmp_path / "missing.sqlite")
    with pytest.raises(JudgeUnavailable, match="read-only"):
        JudgeGateway(cfg).preflight()


# ------------------------------------------------------------------------------------------------
# Configuration
# ------------------------------------------------------------------------------------------------


def test_config_merge_order(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "x"\n\n[tool.ragbridge.judge]\nmodel = "from-pyproject"\n'
        'base_url = "https://py.example/v1"\nmax_concurrency = 3\ntimeout = 30\n')
    cfg = JudgeConfig.load({}, cwd=tmp_path)
    assert (cfg.model, cfg.base_url, cfg.max_concurrency) == ("from-pyproject", "https://py.example/v1", 3)
    assert cfg.cache_path == tmp_path / ".ragbridge" / "judge-cache.sqlite"
    (tmp_path / "ragbridge.toml").write_text(
        '[judge]\nmodel = "from-ragbridge"\ncache_mode = "read-only"\ncache_path = "rec/cache.sqlite"\n')
    cfg = JudgeConfig.load({"model": None, "max_concurrency": 12}, cwd=tmp_path)
    assert cfg.model == "from-ragbridge"
    assert cfg.base_url == "https://py.example/v1"
    assert cfg.cache_mode == "read-only" and cfg.timeout == 30
    assert cfg.max_concurrency == 12
    assert cfg.cache_path == tmp_path / "rec" / "cache.sqlite"
    other = tmp_path / "conf" / "judge.toml"
    other.parent.mkdir()
    other.write_text('[judge]\nmodel = "explicit"\n')
    cfg = JudgeConfig.load({}, config_file=other, cwd=tmp_path)
    assert cfg.model == "explicit" and cfg.cache_mode == "read-write"


def test_config_errors_name_file_and_key(tmp_path):
    bad = tmp_path / "ragbridge.toml"
    bad.write_text("[judge\nmodel = ")
    with pytest.raises(JudgeConfigError, match="ragbridge.toml: invalid TOML"):
        JudgeConfig.load({}, cwd=tmp_path)
    bad.write_text('[judge]\nmodel = "m"\nbase_url = "https://x/v1"\nmax_concurency = 4\n')
    with pytest.raises(JudgeConfigError) as err:
        JudgeConfig.load({}, cwd=tmp_path)
    assert "ragbridge.toml" in str(err.value) and "max_concurency" in str(err.value)
    bad.write_text('[judge]\nmodel = "m"\nbase_url = "https://x/v1"\nmax_concurrency = 0\n')
    with pytest.raises(JudgeConfigError) as err:
        JudgeConfig.load({}, cwd=tmp_path)
    assert "ragbridge.toml" in str(err.value) and "max_concurrency" in str(err.value)
    bad.write_text('[judge]\nmodel = "m"\nbase_url = "ftp://user:hunter2@x/v1"\n')
    with pytest.raises(JudgeConfigError) as err:
        JudgeConfig.load({}, cwd=tmp_path)
    assert "base_url" in str(err.value) and "http://" in str(err.value) and "hunter2" not in str(err.value)
    bad.write_text('[judge]\nbase_url = "https://x/v1"\n')
    with pytest.raises(JudgeConfigError, match="model is not set"):
        JudgeConfig.load({}, cwd=tmp_path)
    with pytest.raises(JudgeConfigError, match="command line.*unknown key 'colour'"):
        JudgeConfig.load({"model": "m", "colour": "red"}, cwd=tmp_path)
    (tmp_path / "pyproject.toml").write_text("[tool.ragbridge.judge]\nmodel = [1\n")
    with pytest.raises(JudgeConfigError, match="pyproject.toml: invalid TOML"):
        JudgeConfig.load({}, cwd=tmp_path)
    with pytest.raises(JudgeConfigError, match="not found"):
        JudgeConfig.load({}, config_file=tmp_path / "nope.toml", cwd=tmp_path / "empty")


def test_bad_base_url_is_a_value_error():
    for url in ("ftp://host/v1", "localhost:8000/v1", "", "http://"):
        with pytest.raises(ValueError, match="http:// or https://"):
            JudgeConfig(model="m", base_url=url)


def test_public_dict_has_no_secrets():
    cfg = JudgeConfig(model="m", base_url="https://bob:pa55word@proxy.example:8443/v1?api-key=SECRET1&x=1&token=T2")
    pub = cfg.public_dict()
    text = json.dumps(pub)
    assert "pa55word" not in text and "bob" not in text and "SECRET1" not in text and "T2" not in text
    assert pub["base_url"] == "https://proxy.example:8443/v1?x=1"
    assert pub["api_key_env"] == "OPENAI_API_KEY"
    assert redact_url("http://127.0.0.1:8000/v1") == "http://127.0.0.1:8000/v1"


# ------------------------------------------------------------------------------------------------
# The stub judge
# ------------------------------------------------------------------------------------------------

CONTEXT = ("Refunds are available within 30 days of purchase. To request a refund, open the Orders page "
           "and choose Request refund. Refunds are paid to the original payment method within 5 business "
           "days.")
FAITHFUL = ("Refunds are available within 30 days of purchase. Open the Orders page and choose Request "
            "refund. The money goes back to the original payment method within 5 business days.")
UNFAITHFUL = ("Refunds are available for 90 days. You must call our support hotline in Berlin. "
              "Store credit is issued instead of cash.")


class Verdict(BaseModel):
    statement: str
    reason: Optional[str]
    verdict: Literal["yes", "no", "borderline"]


class Verdicts(BaseModel):
    verdicts: list[Verdict]


def _verdict_rate(client: openai.OpenAI, answer: str) -> float:
    sentences = [s for s in answer.split(". ") if s]
    prompt = ("Judge each statement against the context.\n\nContext:\n" + CONTEXT +
              "\n\nStatements:\n" + json.dumps(sentences) + "\n\nJSON:")
    r = client.beta.chat.completions.parse(model="judge-m", messages=[{"role": "user", "content": prompt}],
                                           response_format=Verdicts)
    parsed = r.choices[0].message.parsed
    assert len(parsed.verdicts) == len(sentences)
    return sum(v.verdict == "yes" for v in parsed.verdicts) / len(parsed.verdicts)


def test_stub_faithful_answer_scores_higher(stub_judge):
    c = openai.OpenAI(base_url=stub_judge.base_url, api_key="any", http_client=HTTP)
    good, bad = _verdict_rate(c, FAITHFUL), _verdict_rate(c, UNFAITHFUL)
    assert good > bad
    assert good >= 0.66 and bad <= 0.34
    # Plain "score" prompts answer on the asked scale, grounded the same way.
    tl = "SOURCE: {}\n\nSTATEMENT: {}\n\nRespond ONLY with a single-line JSON object"
    sys_msg = {"role": "system", "content": "You are an INFORMATION OVERLAP classifier. Respond only as a "
                                            "number from 0 to 3, where 0 is the lowest score."}
    scores = []
    for ans in (FAITHFUL.split(". ")[0], UNFAITHFUL.split(". ")[0]):
        out = chat(c, messages=[sys_msg, {"role": "user", "content": tl.format(CONTEXT, ans)}])
        scores.append(json.loads(out)["score"])
    assert scores[0] > scores[1]
    # Deterministic: same request, same bytes.
    with httpx.Client(trust_env=False) as http:
        a = http.post(stub_judge.base_url + "/chat/completions", json={"model": "m", "messages": MSG}).content
        b = http.post(stub_judge.base_url + "/chat/completions", json={"model": "m", "messages": MSG}).content
    assert a == b
    body = json.loads(a)
    assert body["model"] == "ragbridge-stub/m" and body["system_fingerprint"] == "ragbridge-stub"


def test_stub_embeddings_are_lexical(stub_judge):
    c = openai.OpenAI(base_url=stub_judge.base_url, api_key="any", http_client=HTTP)
    texts = ["How long do refunds take?", "Refunds take up to 30 days.", "The office is in Berlin."]
    for kw in ({}, {"encoding_format": "float"}):
        vecs = [d.embedding for d in c.embeddings.create(model="e", input=texts, **kw).data]
        assert all(len(v) == 256 and math.isclose(sum(x * x for x in v), 1.0, rel_tol=1e-4) for v in vecs)
        cos = lambda a, b: sum(x * y for x, y in zip(a, b))  # noqa: E731
        assert cos(vecs[0], vecs[1]) > cos(vecs[0], vecs[2])
        assert cos(vecs[0], vecs[1]) > 0.3


class Statement(BaseModel):
    statement: str
    reason: str
    verdict: int


class NLIOutput(BaseModel):
    statements: list[Statement]


class Question(BaseModel):
    question: str
    noncommittal: int


class Rating(BaseModel):
    rating: int


@pytest.mark.parametrize("stub_judge", [{"seed": 3}], indirect=True)
def test_stub_json_schema_responses_validate(stub_judge):
    c = openai.OpenAI(base_url=stub_judge.base_url, api_key="any", http_client=HTTP)
    cases = [
        (Verdicts, "Context:\n" + CONTEXT + "\n\nClaims:\n" + json.dumps(FAITHFUL.split(". ")) + "\n\nJSON:"),
        (NLIOutput, 'Judge faithfulness.\ninput: {"context": %s, "statements": %s}\nOutput: '
         % (json.dumps(CONTEXT), json.dumps(UNFAITHFUL.split(". ")))),
        (Question,
         'Generate a question.\ninput: {"response": "I don\'t know, I couldn\'t find it."}\nOutput: '),
        (Rating, "Rate relevance (0, 1, or 2).\nUser query: refunds\nContext: " + CONTEXT),
    ]
    for model, prompt in cases:
        schema = model.model_json_schema()
        r = c.chat.completions.create(
            model="judge-m", messages=[{"role": "user", "content": prompt}],
            response_format={"type": "json_schema",
                             "json_schema": {"name": model.__name__, "strict": True, "schema": schema}})
        data = json.loads(r.choices[0].message.content)
        validate_schema(data, schema)
        model.model_validate(data)
    # tools / function calling: the arguments validate too
    schema = NLIOutput.model_json_schema()
    r = c.chat.completions.create(
        model="judge-m", messages=[{"role": "user", "content": cases[1][1]}],
        tools=[{"type": "function", "function": {"name": "NLIOutput", "parameters": schema}}],
        tool_choice={"type": "function", "function": {"name": "NLIOutput"}})
    call = r.choices[0].message.tool_calls[0]
    assert call.function.name == "NLIOutput"
    out = NLIOutput.model_validate_json(call.function.arguments)
    assert [s.verdict for s in out.statements] == [0, 0, 0]
    # Responses API with structured text.format
    r = c.responses.parse(model="judge-m", input=cases[2][1], text_format=Question)
    assert r.output_parsed.noncommittal == 1


def test_stub_faults_are_seeded_and_deterministic():
    def run(seed: int) -> list:
        with StubJudge(fault_rate_500=0.3, fault_rate_429=0.2, seed=seed) as stub:
            http = HTTP
            return [http.post(stub.base_url + "/chat/completions",
                              json={"model": "m", "messages": MSG}).status_code for _ in range(20)]

    a, b = run(7), run(7)
    assert a == b and 500 in a and 429 in a and 200 in a


def test_generic_responder_answers_score_prompts_in_text():
    reply = respond(JudgeRequest.from_chat({"model": "m", "messages": [
        {"role": "user", "content": "On a scale of 0 to 10, score how well the answer matches.\n"
                                    "Question: refunds?\nAnswer: refunds take 30 days"}]}))
    assert reply.content.startswith("Score: ")
    assert 0 <= int(reply.content.split()[-1]) <= 10


def test_base_url_with_query_string(stub_judge, tmp_path):
    cfg = JudgeConfig(model="judge-m", base_url=stub_judge.base_url + "?api-version=2024-06-01",
                      cache_path=tmp_path / "c.sqlite", api_key_env="RAGBRIDGE_TEST_KEY")
    with JudgeGateway(cfg) as gw:
        assert chat(client_for(gw)).startswith("Score:")
    assert [r.path for r in stub_judge.posts()] == ["/chat/completions"]


def test_upstream_restart_between_calls(tmp_path):
    """A pooled keep-alive connection that the upstream closed is replaced, not reported as an error."""
    with StubJudge() as first:
        port = first.port
        with JudgeGateway(make_config(first, tmp_path, cache_mode="off")) as gw:
            c = client_for(gw)
            chat(c)
            first.close()
            with StubJudge(port=port) as second:
                assert chat(c).startswith("Score:")
                assert second.request_count == 1
                assert gw.usage().retries == 0 and gw.usage().errors == 0
