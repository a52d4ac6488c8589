"""The judge gateway in a child process (ragbridge.judge_process.GatewayProcess), end to end.

A real ``openai`` client talks to a real child-process gateway, which forwards to a real
:class:`StubJudge` in this process; the stub's request log is the ground truth.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx
import openai
import pytest

from ragbridge.judge import CONTROL_HEADER, JudgeConfig, JudgeUnavailable, Usage, _parse_path_tag, path_tag
from ragbridge.judge_process import GatewayProcess
from ragbridge.testing import StubJudge
from ragbridge.testing.pytest_fixtures import stub_judge  # noqa: F401

HTTP = httpx.Client(trust_env=False, timeout=60)


def make_config(stub: StubJudge, tmp_path: Path, **kw) -> JudgeConfig:
    kw.setdefault("cache_path", tmp_path / "cache" / "judge.sqlite")
    kw.setdefault("api_key_env", "RAGBRIDGE_TEST_KEY")
    return JudgeConfig(model="judge-m", base_url=stub.base_url, **kw)


def client_for(gw: GatewayProcess, backend="b", metric="m", case_id="c") -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.base_url(backend, metric, case_id), api_key=gw.api_key, http_client=HTTP)


def chat(client: openai.OpenAI, content: str = "Rate the answer from 0 to 3.") -> str:
    return client.chat.completions.create(model="judge-m", messages=[{"role": "user", "content": content}]
                                          ).choices[0].message.content


def alive(pid: int) -> bool:
    """The process exists and is not a zombie waiting to be reaped."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


@pytest.mark.parametrize("triple", [("ragas", "faithfulness", "c1"), ("b", None, None), ("b", "m", "a/b ~c"),
                                    ("b", "", ".."), ("tru~lens", "m%2F", "ü é?#&=")])
def test_path_tag_round_trip(triple):
    tag = path_tag(*triple)
    assert "/" not in tag and "?" not in tag and "#" not in tag
    assert _parse_path_tag(tag) == triple


def test_usage_per_case_matches_the_stub(stub_judge, tmp_path):
    with GatewayProcess(make_config(stub_judge, tmp_path, cache_mode="off")) as gw:
        assert gw.pid != os.getpid() and alive(gw.pid)
        expected = {}
        for i, case in enumerate(["c1", "case/2", "case 3 ~ü"]):
            for metric in ("faithfulness", "relevance"):
                n = 1 + (i + len(metric)) % 3
                c = client_for(gw, "ragas", metric, case)
                for j in range(n):
                    chat(c, f"{case} {metric} {j}")
                expected[("ragas", metric, case)] = n
                # exact as soon as the library has its answer
                assert gw.usage("ragas", metric, case).calls == n
        # header attribution (tag_scope + event hooks) works through the child too
        http = httpx.Client(event_hooks=gw.httpx_event_hooks(), trust_env=False)
        shared = openai.OpenAI(base_url=gw.plain_base_url, api_key=gw.api_key, http_client=http)
        with gw.tag_scope("trulens", "groundedness", "c1"):
            chat(shared, "x")
            chat(shared, "y")
        expected[("trulens", "groundedness", "c1")] = 2
        by_triple = gw.usage_by_triple()
        assert {k: v.calls for k, v in by_triple.items()} == expected
        assert gw.usage().calls == sum(expected.values()) == stub_judge.request_count
        assert gw.usage("ragas", case_id="c1").calls == expected[("ragas", "faithfulness", "c1")] + \
            expected[("ragas", "relevance", "c1")]
        assert gw.usage("ragas", "relevance", "c1").prompt_tokens > 0
        assert gw.stub_detected
    # read after close: the last counters stay
    assert gw.usage().calls == stub_judge.request_count
    assert gw.usage_by_triple() == by_triple
    assert gw.stub_detected


def test_key_is_not_on_the_command_line_nor_in_files(tmp_path, monkeypatch):
    secret = "sk-ragbridge-TESTSECRET-" + secrets.token_hex(16)
    monkeypatch.setenv("RAGBRIDGE_TEST_KEY", secret)
    audit = tmp_path / "run" / "judge-audit.jsonl"
    with StubJudge() as stub, GatewayProcess(make_config(stub, tmp_path, max_retries=1), audit_log=audit) as gw:
        cmdline = Path(f"/proc/{gw.pid}/cmdline").read_bytes()
        assert secret.encode() not in cmdline and b"TESTSECRET" not in cmdline
        assert gw.preflight()["key_set"] is True
        c = client_for(gw)
        chat(c)
        chat(c)  # cache hit
        c.embeddings.create(model="e", input="hello world")
        assert stub.last_authorization == f"Bearer {secret}"  # the child read the key from the environment
        assert gw.usage() == Usage(calls=2, cache_hits=1, prompt_tokens=gw.usage().prompt_tokens,
                                   completion_tokens=gw.usage().completion_tokens)
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.suffix == ".sqlite" for p in written) and audit in written
    for p in written:
        assert secret.encode() not in p.read_bytes() and secret[-16:].encode() not in p.read_bytes(), p
    assert len(audit.read_text().splitlines()) == 3  # flushed by the child before close() returned


def test_child_exits_when_closed(stub_judge, tmp_path):
    gw = GatewayProcess(make_config(stub_judge, tmp_path)).start()
    pid = gw.pid
    assert alive(pid)
    chat(client_for(gw))
    gw.close()
    assert not alive(pid)
    gw.close()  # idempotent


PARENT = textwrap.dedent(
    """
    import sys, time
    from ragbridge.judge import JudgeConfig
    from ragbridge.judge_process import GatewayProcess

    cfg = JudgeConfig(model="m", base_url="http://127.0.0.1:9/v1", cache_mode="off")
    gw = GatewayProcess(cfg).start()
    print(gw.pid, flush=True)
    time.sleep(600)
    """
)


def test_child_exits_when_the_parent_is_killed(tmp_path):
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        child = int(parent.stdout.readline())
        assert alive(child)
        parent.kill()  # SIGKILL: no cleanup runs in the parent
        parent.wait(10)
        deadline = time.monotonic() + 5
        while alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(child), "the gateway process outlived its parent"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(10)


def test_forget_works_across_the_process_boundary(stub_judge, tmp_path):
    with GatewayProcess(make_config(stub_judge, tmp_path)) as gw:
        a, b = client_for(gw, "ragas", "m", "bad"), client_for(gw, "ragas", "m", "good")
        chat(a, "a")
        chat(b, "b")
        assert stub_judge.request_count == 2
        assert gw.forget("ragas", "m", "bad") == 1
        assert gw.forget("ragas", "m", "bad") == 0  # already forgotten
        chat(a, "a")
        chat(b, "b")
        assert stub_judge.request_count == 3, "the forgotten answer is asked again, the other one is not"
    with GatewayProcess(make_config(stub_judge, tmp_path)) as gw:  # and the cache file agrees
        chat(client_for(gw), "a")
        chat(client_for(gw), "b")
        assert gw.usage().cache_hits == 2
    assert stub_judge.request_count == 3


def test_read_only_cache_mode(stub_judge, tmp_path, monkeypatch):
    monkeypatch.setenv("RAGBRIDGE_TEST_KEY", "sk-test-recording")
    with GatewayProcess(make_config(stub_judge, tmp_path)) as gw:
        recorded = chat(client_for(gw))
    assert stub_judge.request_count == 1
    monkeypatch.delenv("RAGBRIDGE_TEST_KEY")
    with GatewayProcess(make_config(stub_judge, tmp_path, cache_mode="read-only")) as gw:
        assert gw.preflight()["upstream_checked"] is False
        c = client_for(gw)
        assert chat(c) == recorded
        with pytest.raises(openai.BadRequestError) as err:
            chat(c, "never recorded")
        assert "ragbridge judge cache miss in read-only mode" in str(err.value)
        assert gw.usage() == Usage(calls=0, cache_hits=1, errors=1)
    assert stub_judge.request_count == 1 and len(stub_judge.requests) == 1  # never called upstream
    # preflight errors cross the boundary with their type
    with GatewayProcess(make_config(stub_judge, tmp_path, cache_mode="read-only",
                                    cache_path=tmp_path / "none.sqlite")) as gw:
        with pytest.raises(JudgeUnavailable, match="no recorded cache"):
            gw.preflight()


def test_control_endpoint_needs_the_token(stub_judge, tmp_path):
    with GatewayProcess(make_config(stub_judge, tmp_path)) as gw:
        chat(client_for(gw))
        url = f"{gw.url}/_ragbridge/state"
        assert HTTP.get(url).status_code == 404
        assert HTTP.get(url, headers={CONTROL_HEADER: "wrong"}).status_code == 404
        assert HTTP.post(f"{gw.url}/_ragbridge/forget", json={"triple": ["b", "m", "c"]},
                         headers={CONTROL_HEADER: ""}).status_code == 404
        assert gw.usage().calls == 1  # nothing was forgotten or counted
        chat(client_for(gw))
        assert gw.usage().cache_hits == 1


def test_audit_log_and_backoff_settings_reach_the_child(tmp_path):
    audit = tmp_path / "audit.jsonl"
    with StubJudge() as stub:
        gw = GatewayProcess(make_config(stub, tmp_path, max_retries=2), audit_log=audit)
        gw.backoff_base = 0.001
        with gw:
            stub.inject("500", "429")
            t0 = time.monotonic()
            chat(client_for(gw, "x", "y", "z"))
            assert time.monotonic() - t0 < 5
            assert gw.usage("x", "y", "z") == Usage(calls=1, retries=2, prompt_tokens=gw.usage().prompt_tokens,
                                                    completion_tokens=gw.usage().completion_tokens)
    (line,) = [json.loads(x) for x in audit.read_text().splitlines()]
    assert (line["backend"], line["metric"], line["case_id"], line["attempts"]) == ("x", "y", "z", 3)
