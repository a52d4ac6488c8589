"""The judge gateway's in-process transports (``gw.transport()``, ``gw.async_transport()``), end to end.

Real ``openai`` clients whose httpx client has the gateway's transport talk to a real
:class:`JudgeGateway`, which forwards to a real :class:`StubJudge` on 127.0.0.1; the stub's request
log is the ground truth. These are the paths ragbridge's RAGAS, DeepEval and TruLens backends use.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import threading

import httpx
import pytest

from ragbridge.judge import JudgeError, JudgeGateway, Usage
from ragbridge.testing import StubJudge
from ragbridge.testing.pytest_fixtures import stub_judge  # noqa: F401
from test_judge import FastGateway, make_config
from conftest import library

openai = library(
    "openai", reason="the judge is tested with the openai SDK as its client; every library extra installs it")

MSG = [{"role": "user", "content": "Rate the answer from 0 to 3. Answer: refunds take 30 days."}]


def sync_client(gw: JudgeGateway, base_url: str | None = None, **kw) -> openai.OpenAI:
    kw.setdefault("max_retries", 2)  # the SDK's default: the gateway must stop it from multiplying retries
    return openai.OpenAI(base_url=base_url or gw.base_url(), api_key=gw.api_key,
                         http_client=httpx.Client(transport=gw.transport(), trust_env=False), **kw)


def async_client(gw: JudgeGateway, **kw) -> openai.AsyncOpenAI:
    kw.setdefault("max_retries", 2)
    http_client = httpx.AsyncClient(transport=gw.async_transport(), trust_env=False)
    return openai.AsyncOpenAI(base_url=gw.base_url(), api_key=gw.api_key, http_client=http_client, **kw)


def chat(client: openai.OpenAI, content: str = MSG[0]["content"]) -> str:
    return client.chat.completions.create(model="judge-m", messages=[{"role": "user", "content": content}]
                                          ).choices[0].message.content


def test_transport_serves_as_the_socket_does_without_a_socket(stub_judge, tmp_path):
    audit = tmp_path / "audit.jsonl"
    with JudgeGateway(make_config(stub_judge, tmp_path), audit_log=audit) as gw:
        over_socket = openai.OpenAI(base_url=gw.base_url("ragas", "m", "c0"), api_key=gw.api_key,
                                    http_client=httpx.Client(trust_env=False))
        in_process = sync_client(gw)
        first = chat(over_socket)
        assert gw.http_requests == 1
        with gw.tag_scope("trulens", "groundedness", "c1"):  # no event hook: the transport reads the scope
            assert chat(in_process) == first  # same request: answered from the cache
            chat(in_process, "another question")
            in_process.embeddings.create(model="e", input=["one two", "three"])
        # a path tag is honoured by the transport as well
        chat(sync_client(gw, gw.base_url("deepeval", "faithfulness", "c2")), "third question")
        assert gw.http_requests == 1, "the transport must not go through the loopback socket"
        assert stub_judge.request_count == 4
        assert gw.usage("ragas", "m", "c0") == Usage(calls=1, prompt_tokens=gw.usage("ragas").prompt_tokens,
                                                     completion_tokens=gw.usage("ragas").completion_tokens)
        t = gw.usage("trulens", "groundedness", "c1")
        assert (t.calls, t.cache_hits) == (2, 1) and t.prompt_tokens > 0
        assert gw.usage("deepeval", "faithfulness", "c2").calls == 1
        assert gw.stub_detected
    lines = [json.loads(x) for x in audit.read_text().splitlines()]
    assert [(x["backend"], x["path"], x["cache"]) for x in lines] == [
        ("ragas", "/chat/completions", "miss"), ("trulens", "/chat/completions", "hit"),
        ("trulens", "/chat/completions", "miss"), ("trulens", "/embeddings", "miss"),
        ("deepeval", "/chat/completions", "miss")]
    assert lines[1]["response_sha256"] == lines[0]["response_sha256"]
    assert lines[1]["request_key"] == lines[0]["request_key"] != lines[2]["request_key"]


def test_async_transport_bounds_concurrency_with_sync_callers_and_keeps_each_scope(tmp_path):
    with StubJudge() as stub, JudgeGateway(make_config(stub, tmp_path, max_concurrency=3,
                                                       cache_mode="off")) as gw:
        sync = sync_client(gw)
        stub.hold()  # answers wait: the gateway admits requests up to its bound, and no further

        def sync_caller(i: int) -> None:
            with gw.tag_scope("trulens", "m", f"s{i}"):
                chat(sync, f"sync question {i}")

        async def main() -> None:
            client = async_client(gw)

            async def one(i: int) -> None:
                with gw.tag_scope("ragas", "m", f"a{i}"):
                    await client.chat.completions.create(
                        model="judge-m", messages=[{"role": "user", "content": f"async question {i}"}])

            calls = asyncio.gather(*(one(i) for i in range(12)))
            await asyncio.to_thread(stub.wait_for_requests, 3)
            await asyncio.sleep(0.2)  # room for a fourth to arrive if the bound leaked
            assert stub.in_flight == 3 and stub.request_count == 3
            stub.release()
            await calls
            await client.close()

        threads = [threading.Thread(target=sync_caller, args=(i,)) for i in range(4)]
        for th in threads:
            th.start()
        asyncio.run(main())
        for th in threads:
            th.join()
        assert stub.request_count == 16
        assert stub.max_in_flight == 3  # one bound over async and sync callers together
        for i in range(12):
            assert gw.usage("ragas", "m", f"a{i}").calls == 1
        for i in range(4):
            assert gw.usage("trulens", "m", f"s{i}").calls == 1
        assert gw.http_requests == 0


def test_retries_happen_once_in_the_gateway(tmp_path):
    with StubJudge() as stub, FastGateway(make_config(stub, tmp_path, max_retries=2)) as gw:
        stub.inject("500", "429")
        with gw.tag_scope("x", "y", "z"):
            assert chat(sync_client(gw))
        assert gw.usage("x", "y", "z").retries == 2 and stub.request_count == 3

        stub.inject("500", "500", "500", "500", "500", "500", "500", "500", "500")

        async def failing() -> None:
            client = async_client(gw)  # SDK max_retries=2: it must not retry what the gateway gave up on
            try:
                with pytest.raises(openai.InternalServerError):
                    await client.chat.completions.create(model="judge-m",
                                                         messages=[{"role": "user", "content": "q"}])
            finally:
                await client.close()

        asyncio.run(failing())
        assert stub.request_count == 3 + 3  # the gateway's 1 + 2 retries, nothing from the SDK
        assert gw.usage().errors == 1


def test_forget_drops_only_that_scores_answers(stub_judge, tmp_path):
    with JudgeGateway(make_config(stub_judge, tmp_path)) as gw:
        client = sync_client(gw)
        with gw.tag_scope("ragas", "m", "bad"):
            chat(client, "a")
        with gw.tag_scope("ragas", "m", "good"):
            chat(client, "b")
        assert gw.forget("ragas", "m", "bad") == 1
        assert gw.forget("ragas", "m", "bad") == 0  # already forgotten
        chat(client, "a")
        chat(client, "b")
        assert stub_judge.request_count == 3, "the forgotten answer is asked again, the other one is not"


def _in_scope(gw: JudgeGateway, client: openai.OpenAI, question: str,
              triple=("deepeval", "faithfulness", "c1")) -> str:
    with gw.tag_scope(*triple):
        return chat(client, question)


def test_an_answer_arriving_after_its_score_failed_is_not_stored(tmp_path):
    """One score, two concurrent judge calls (DeepEval's truths and claims): the first answer is
    malformed, the score fails and is forgotten while the second call is still out. The second answer
    arrives after forget() and must not be stored, nor any answer to a call the failed score makes
    later; the next run (a resume) asks for all of them again. The order is driven by holding the
    stub's answers, not by timing."""
    with StubJudge() as stub:
        with JudgeGateway(make_config(stub, tmp_path)) as gw:
            client = sync_client(gw)
            stub.inject("malformed", "malformed")
            _in_scope(gw, client, "truths")  # answered (malformed) and cached at once
            stub.hold()
            late = threading.Thread(target=_in_scope, args=(gw, client, "claims"))
            late.start()
            stub.wait_for_requests(2)  # the claims call is at the judge, unanswered
            # the score failed: truths' answer is dropped, and claims' is marked, though still out
            assert gw.forget("deepeval", "faithfulness", "c1") == 2
            stub.release()
            late.join()  # the claims answer arrives after forget
            _in_scope(gw, client, "verdicts")  # a call the failed score's task makes even later
            _in_scope(gw, client, "other", ("deepeval", "faithfulness", "c2"))  # another score's: kept
            assert stub.request_count == 4
        stub.reset()
        with JudgeGateway(make_config(stub, tmp_path)) as gw:  # the resume
            client = sync_client(gw)
            for question in ("truths", "claims", "verdicts"):
                _in_scope(gw, client, question)
            _in_scope(gw, client, "other", ("deepeval", "faithfulness", "c2"))
            assert gw.usage("deepeval", "faithfulness", "c1") == Usage(
                calls=3, prompt_tokens=gw.usage("deepeval", "faithfulness", "c1").prompt_tokens,
                completion_tokens=gw.usage("deepeval", "faithfulness", "c1").completion_tokens)
            assert gw.usage("deepeval", "faithfulness", "c2").cache_hits == 1
        assert stub.request_count == 3, "no answer of the failed score was replayed"
        assert all(r.fault is None for r in stub.posts())


def test_read_only_replays_and_never_calls_upstream(stub_judge, tmp_path, monkeypatch):
    monkeypatch.setenv("RAGBRIDGE_TEST_KEY", "sk-test-recording")
    with JudgeGateway(make_config(stub_judge, tmp_path)) as gw:
        recorded = chat(sync_client(gw))
    monkeypatch.delenv("RAGBRIDGE_TEST_KEY")
    with JudgeGateway(make_config(stub_judge, tmp_path, cache_mode="read-only")) as gw:
        async def replay() -> str:
            client = async_client(gw)
            try:
                out = await client.chat.completions.create(model="judge-m", messages=MSG)
                with pytest.raises(openai.BadRequestError, match="cache miss in read-only mode"):
                    never = [{"role": "user", "content": "never recorded"}]
                    await client.chat.completions.create(model="judge-m", messages=never)
                return out.choices[0].message.content
            finally:
                await client.close()

        assert asyncio.run(replay()) == recorded
        assert gw.usage() == Usage(calls=0, cache_hits=1, errors=1)
    assert stub_judge.request_count == 1


def test_key_reaches_only_the_judge(tmp_path, monkeypatch):
    secret = "sk-ragbridge-TESTSECRET-" + secrets.token_hex(16)
    monkeypatch.setenv("RAGBRIDGE_TEST_KEY", secret)
    audit = tmp_path / "run" / "judge-audit.jsonl"
    with StubJudge() as stub, JudgeGateway(make_config(stub, tmp_path), audit_log=audit) as gw:
        client = sync_client(gw)
        chat(client)
        assert stub.last_authorization == f"Bearer {secret}"
        assert secret not in repr(client.api_key) and client.api_key == gw.api_key
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert audit in written and any(p.suffix == ".sqlite" for p in written)
    for p in written:
        assert secret.encode() not in p.read_bytes(), p


def test_transports_need_a_started_gateway(stub_judge, tmp_path):
    gw = JudgeGateway(make_config(stub_judge, tmp_path, cache_mode="off"))

    async def call() -> None:
        async with httpx.AsyncClient(transport=gw.async_transport()) as client:
            await client.post("http://judge/v1/chat/completions", json={"model": "judge-m", "messages": MSG})

    with pytest.raises(JudgeError, match="not started"):
        asyncio.run(call())
    with pytest.raises(JudgeError, match="not started"):  # the sync transport too: no key, no cache yet
        httpx.Client(transport=gw.transport()).post("http://judge/v1/chat/completions",
                                                     json={"model": "judge-m", "messages": MSG})
    assert stub_judge.request_count == 0


def test_close_ends_requests_in_flight_at_once(tmp_path):
    """Ctrl-C during a run closes the gateway: waiting judge calls must end now, not when the judge
    answers (the stub holds each answer 60 s here)."""
    import time

    with StubJudge(latency=60) as stub:
        gw = JudgeGateway(make_config(stub, tmp_path, cache_mode="off", max_retries=0)).start()

        async def main() -> tuple[list, float]:
            client = async_client(gw, max_retries=0)
            calls = [asyncio.ensure_future(client.chat.completions.create(
                model="judge-m", messages=[{"role": "user", "content": f"q{i}"}])) for i in range(3)]
            sync_result: list = []
            sync = threading.Thread(target=lambda: sync_result.append(_sync_call(gw)))
            sync.start()
            deadline = time.monotonic() + 60
            while stub.in_flight < 4:  # every call held by the judge before the gateway closes
                assert time.monotonic() < deadline, f"{stub.in_flight} of 4 calls reached the judge in 60 s"
                await asyncio.sleep(0.02)
            t0 = time.monotonic()
            await asyncio.to_thread(gw.close)
            results = await asyncio.gather(*calls, return_exceptions=True)
            sync.join(5)
            elapsed = time.monotonic() - t0
            await client.close()
            return [*results, *sync_result], elapsed

        results, elapsed = asyncio.run(main())
    assert elapsed < 20, f"close() waited {elapsed:.1f} s for the judge"  # not the 60 s it holds them
    assert len(results) == 4 and all(isinstance(r, openai.APIStatusError) for r in results), results


def _sync_call(gw: JudgeGateway):
    try:
        return chat(sync_client(gw, max_retries=0), "sync question")
    except Exception as exc:  # noqa: BLE001 - the test inspects it
        return exc
