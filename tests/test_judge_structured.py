"""Structured output against a server that refuses some of it, as llama-cpp-python's server does.

The stub judge's ``llama-cpp-python`` dialect answers a ``json_schema`` response format with HTTP 500
and that server's own words ("Input should be 'text' or 'json_object'"), and takes JSON mode and
forced tool calls (`ragbridge.testing.dialects`); the backends' libraries are driven through it
unchanged. What is checked: every request refused for its structured output is asked again in a mode
the server takes, whenever its refusal arrives; each backend's mode can be chosen; a refusal the
server would repeat is not retried; a run's failures say their cause and the fix.
"""

from __future__ import annotations

import json

import httpx
import pytest
from conftest import EXAMPLE, needs_backend, ragbridge_cli

from ragbridge import evaluate, load_cases, load_run
from ragbridge.backend import RunOptions
from ragbridge.judge import JudgeConfig, JudgeGateway
from ragbridge.judge.structured import ask_of, as_asked, deterministic, rejects_structured_output, reshape
from ragbridge.testing import StubJudge
from ragbridge.testing.dialects import LLAMA_CPP_PYTHON_REJECTION


def llama_cpp_python(stub: StubJudge) -> str:
    return f"{stub.url}/llama-cpp-python/v1"


def cases(n: int):
    return load_cases(EXAMPLE)[:n]


def kinds(stub: StubJudge) -> list[str]:
    """How each request the stub got asked for its JSON object (``schema``, ``json_object``,
    ``tool``, or ``prompt`` for none); the run's check of the model (one token) left out."""
    return [(ask.kind if (ask := ask_of(r.body)) else "prompt") for r in stub.posts()
            if r.body.get("max_tokens") != 1]


def refused(stub: StubJudge) -> list:
    return [r for r in stub.posts() if r.fault == "rejected"]


# ------------------------------------------------------------------------------------------------
# Every request refused is asked again, whatever the timing


def test_every_request_refused_for_its_schema_is_asked_again_whatever_the_timing(tmp_path):
    """The rubric's twelve first schema requests are in flight (each answered after 0.3 s) when the
    first refusal comes back: the rubric switched to prompting on the first and recorded the other
    eleven as "the judge answered HTTP 500". Now each refused request is asked again as a tool call,
    and the requests after them go straight to a tool call."""
    with StubJudge(latency=0.3) as stub:
        cfg = JudgeConfig(model="judge-m", base_url=llama_cpp_python(stub), cache_path=tmp_path / "c.sqlite",
                          max_concurrency=8)
        run = evaluate(cases(12), backends=["rubric"], metrics=["faithfulness"], out=tmp_path / "run",
                       judge=cfg)
        sent = kinds(stub)
        rejected = refused(stub)
    scores = load_run(tmp_path / "run").scores
    assert [s.error for s in scores if s.error] == []
    assert len(scores) == 12 and all(s.value is not None for s in scores)
    assert len(rejected) >= 2, "several schema requests were in flight when the first refusal came"
    # each refused request came again as a tool call (the same conversation), none was lost
    again = [r for r in stub.posts() if r.fault != "rejected"]
    for r in rejected:
        assert any(a.body["messages"] == r.body["messages"] and ask_of(a.body).kind == "tool" for a in again)
    assert sent.count("schema") == len(rejected) and "prompt" not in sent
    assert {s.native_value["structured"] for s in scores} == {"tool"}
    assert run.manifest.counts["judge"]["errors"] == 0


# ------------------------------------------------------------------------------------------------
# Each backend's mode, chosen; Phoenix on llama-cpp-python


@needs_backend("phoenix")
@pytest.mark.parametrize("mode", ["auto", "json_object", "tool", "prompt"])
def test_phoenix_scores_on_a_server_that_answers_json_schema_with_500(mode, tmp_path):
    """Phoenix falls back to a tool call only on a 400: on llama-cpp-python's 500 it scored nothing.
    In ``auto`` the gateway asks again as a tool call; with the backend's option every request is sent
    in the mode chosen; Phoenix gets its answer as it asked for it either way."""
    options = {"phoenix": {"structured_output": mode}} if mode != "auto" else {}
    with StubJudge() as stub:
        cfg = JudgeConfig(model="judge-m", base_url=llama_cpp_python(stub), cache_path=tmp_path / "c.sqlite")
        run = evaluate(cases(6), backends=["phoenix"], metrics=["faithfulness"], out=tmp_path / "run",
                       judge=cfg, options=RunOptions(backend_options=options))
        sent = kinds(stub)
    scores = load_run(tmp_path / "run").scores
    assert [s.error for s in scores if s.error] == [] and all(s.value is not None for s in scores)
    if mode == "auto":
        # the schema requests in flight when the first refusal came, each asked again; then a tool call
        assert sent.count("schema") == len(refused(stub)) >= 1
        assert sent.count("tool") == 6 and set(sent) == {"schema", "tool"}
    else:
        assert set(sent) == {mode} and not refused(stub)
        assert run.manifest.options["backend_options"]["phoenix"] == {"structured_output": mode}


@pytest.mark.parametrize("where", ["--option", "ragbridge.toml", "--judge-structured-output", "both"])
def test_a_mode_is_chosen_from_the_command_line_and_the_config_file(where, tmp_path):
    """A backend's mode is its option structured_output, reached as every backend option is
    (``--option rubric.structured_output=...``, ``[backends.rubric]``); the judge's, for every backend
    without one, is ``--judge-structured-output``. Each request goes to the server in that mode."""
    (tmp_path / "cases.jsonl").write_text("".join(json.dumps(c.model_dump(mode="json")) + "\n"
                                                  for c in cases(2)))
    mode = {"--option": "json_object", "ragbridge.toml": "tool", "--judge-structured-output": "prompt",
            "both": "tool"}[where]
    chosen = {"--option": ["--option", f"rubric.structured_output={mode}"],
              "--judge-structured-output": ["--judge-structured-output", mode],
              # the backend's own mode wins over the judge's
              "both": ["--judge-structured-output", "prompt", "--option", f"rubric.structured_output={mode}"],
              }.get(where, [])
    if where == "ragbridge.toml":
        (tmp_path / "ragbridge.toml").write_text(f'[backends.rubric]\nstructured_output = "{mode}"\n')
    with StubJudge() as stub:
        res = ragbridge_cli("run", "cases.jsonl", "--out", "run", "--backend", "rubric", "--metric",
                            "answer_relevance", "--judge-model", "m", "--judge-base-url",
                            llama_cpp_python(stub), "--cache-mode", "off", "--json", *chosen, cwd=tmp_path)
        sent = kinds(stub)
    assert res.returncode == 0, res.stderr
    assert sent == [mode] * 2 and not refused(stub)
    assert {s.native_value["structured"] for s in load_run(tmp_path / "run").scores} == {
        "json_schema" if mode == "schema" else mode}
    bad = ragbridge_cli("run", "cases.jsonl", "--out", "bad", "--backend", "rubric", "--judge-model", "m",
                        "--judge-base-url", "http://127.0.0.1:9/v1", "--option",
                        "rubric.structured_output=xml", cwd=tmp_path)
    assert bad.returncode == 2
    assert ("rubric.structured_output must be one of auto, schema, json_object, tool, prompt, got 'xml'"
            in " ".join(bad.stderr.split()))
    assert not (tmp_path / "bad").exists()


def test_a_run_whose_mode_the_server_refuses_says_so_and_which_option_to_change(tmp_path):
    (tmp_path / "cases.jsonl").write_text("".join(json.dumps(c.model_dump(mode="json")) + "\n"
                                                  for c in cases(2)))
    with StubJudge() as stub:
        res = ragbridge_cli("run", "cases.jsonl", "--out", "run", "--backend", "rubric", "--metric",
                            "answer_relevance", "--judge-model", "m", "--judge-base-url",
                            llama_cpp_python(stub), "--cache-mode", "off", "--option",
                            "rubric.structured_output=schema", cwd=tmp_path)
        # twice each: a 500 is asked again once; the same body twice ends it (not five more times)
        assert len(refused(stub)) == 4
    assert res.returncode == 3, res.stderr
    text = " ".join(res.stderr.split())
    assert "2 of 2 score(s) errored: rubric: 2 structured output refused, e.g. answer_relevance" in text
    assert "Input should be 'text' or 'json_object'" in text
    assert ("fix: choose a structured-output mode the server takes for rubric (now 'schema'): --option "
            "rubric.structured_output=MODE ([backends.rubric] in ragbridge.toml)") in text
    assert "run the same command again" not in text


@pytest.mark.slow  # builds RAGAS 0.3.9's environment with uv (seconds from uv's cache)
def test_a_library_version_takes_its_backends_structured_output(tmp_path, monkeypatch):
    """``ragas==0.3.9`` is scored in a worker, its calls counted under that name: the mode set for
    ``ragas`` (``[backends.ragas]``) is the one its requests are sent in."""
    monkeypatch.setenv("RAGBRIDGE_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "ragbridge.toml").write_text('[backends.ragas]\nversion = "0.3.9"\n'
                                              'structured_output = "tool"\n')
    (tmp_path / "cases.jsonl").write_text("".join(json.dumps(c.model_dump(mode="json")) + "\n"
                                                  for c in cases(2)))
    with StubJudge() as stub:
        done = ragbridge_cli("run", "cases.jsonl", "--out", "run", "--backend", "ragas", "--metric",
                             "faithfulness", "--judge-model", "stub-judge", "--judge-base-url", stub.base_url,
                             "--cache-mode", "off", "--no-progress", cwd=tmp_path)
        sent = kinds(stub)
    assert done.returncode == 0, done.stderr
    manifest = json.loads((tmp_path / "run" / "run.json").read_text())
    assert manifest["backends"] == {"ragas==0.3.9": "0.3.9"}
    assert manifest["options"]["backend_options"] == {"ragas": {"structured_output": "tool"}}
    assert sent and set(sent) == {"tool"}  # every request for a JSON object, asked as a tool call
    scores = load_run(tmp_path / "run").scores
    assert len(scores) == 2 and all(s.value is not None for s in scores)


def test_a_mode_per_backend_in_the_judge_table_says_where_it_goes(tmp_path):
    (tmp_path / "ragbridge.toml").write_text('[judge]\nmodel = "m"\nbase_url = "http://127.0.0.1:9/v1"\n'
                                              'structured_output = { phoenix = "tool" }\n')
    res = ragbridge_cli("judge", "check", "--quick", cwd=tmp_path)
    assert res.returncode == 2
    assert ('ragbridge.toml: judge structured_output: the judge takes one mode for every backend; a '
            'backend\'s own is its option structured_output: [backends.phoenix] structured_output = "tool" '
            'in ragbridge.toml, or --option phoenix.structured_output=tool') in " ".join(res.stderr.split())


@needs_backend("phoenix")
def test_a_chosen_mode_is_part_of_the_cache_key(tmp_path):
    """The same requests in another mode are other requests: not answered from the first mode's
    cache entries."""
    with StubJudge() as stub:
        cfg = JudgeConfig(model="judge-m", base_url=llama_cpp_python(stub), cache_path=tmp_path / "c.sqlite")
        for i, mode in enumerate(["tool", "json_object", "tool"]):
            evaluate(cases(3), backends=["phoenix"], metrics=["faithfulness"], out=tmp_path / f"run{i}",
                     judge=cfg, options=RunOptions(backend_options={"phoenix": {"structured_output": mode}}),
                     score_cache=False)
        assert kinds(stub) == ["tool"] * 3 + ["json_object"] * 3  # the third run: from the cache


def test_a_mode_the_server_refuses_is_one_call_and_says_so(tmp_path):
    """``schema`` chosen on a server that refuses it with a 500: the same refusal twice is the
    server's verdict on the request, so it is not sent four more times with backoff; the answer names
    the mode and the server's words."""
    body = {"model": "m", "messages": [{"role": "user", "content": "Is it so?"}],
            "response_format": {"type": "json_schema", "json_schema": {
                "name": "verdict", "strict": True, "schema": {"type": "object", "properties": {
                    "ok": {"type": "boolean"}}, "required": ["ok"], "additionalProperties": False}}}}
    with StubJudge() as stub:
        cfg = JudgeConfig(model="m", base_url=llama_cpp_python(stub), cache_mode="off")
        gateway = JudgeGateway(cfg, structured_output={"b": "schema"})  # backend b's option, as a run sets it
        with gateway as gw, httpx.Client(transport=gw.transport()) as c:
            r = c.post(gw.base_url("b", "m", "c", in_process=True) + "/chat/completions", json=body)
            assert r.status_code == 500 and len(stub.posts()) == 2
            error = r.json()["error"]
            assert error["code"] == "structured_output_refused"
            assert "mode 'schema'" in error["message"]
            assert "Input should be 'text' or 'json_object'" in error["message"]
            assert gw.usage().retries == 1
            assert gw.failure("b", "m", "c")[0] == "structured_output"
            # the same request of a backend left on auto: asked again as a tool call, answered
            r = c.post(gw.base_url("other", "m", "c", in_process=True) + "/chat/completions", json=body)
            assert r.status_code == 200 and json.loads(r.json()["choices"][0]["message"]["content"])
            assert r.json()["ragbridge_structured_output"] == "tool"


def test_a_transient_500_is_still_retried_and_a_deterministic_one_is_not(tmp_path):
    with StubJudge() as stub:
        stub.inject("500")
        cfg = JudgeConfig(model="m", base_url=stub.base_url, cache_mode="off")
        with JudgeGateway(cfg) as gw, httpx.Client(transport=gw.transport()) as c:
            gw_forwarder_backoff(gw)
            r = c.post(gw.base_url("b", "m", "c", in_process=True) + "/chat/completions",
                       json={"model": "m", "messages": [{"role": "user", "content": "hi"}]})
            assert r.status_code == 200 and len(stub.posts()) == 2


def test_a_500_that_says_not_supported_is_retried_as_a_busy_server_asks():
    """llama.cpp answers a request it cannot take while it computes another with HTTP 500 "context
    shift is not supported while another request is processing, try again": a 5xx's words never end
    its retries on its first occurrence; asked again, it is answered, and no fix is printed."""
    with StubJudge() as stub:
        stub.inject("busy-500")
        cfg = JudgeConfig(model="m", base_url=stub.base_url, cache_mode="off", max_retries=5)
        with JudgeGateway(cfg) as gw, httpx.Client(transport=gw.transport()) as c:
            gw_forwarder_backoff(gw)
            r = c.post(gw.base_url("b", "m", "c", in_process=True) + "/chat/completions",
                       json={"model": "m", "messages": [{"role": "user", "content": "hi"}]})
            assert r.status_code == 200 and len(stub.posts()) == 2
            assert gw.usage().retries == 1 and gw.failure("b", "m", "c") is None
    assert not deterministic(500, b'{"error": {"message": "context shift is not supported while another '
                                  b'request is processing, try again"}}')
    assert deterministic(400, b'{"error": {"message": "unsupported parameter: logit_bias"}}')
    # the same busy answer twice ends the call; its fix names the concurrency, not only the request
    from ragbridge.judge.causes import fix

    said = fix("rejected", "b", JudgeConfig(model="m", base_url="http://127.0.0.1:8080/v1"))
    assert "lower max_concurrency (now 8" in said


def test_the_same_500_twice_is_not_asked_for_a_third_time():
    """A server that fails on a request answers it the same way each time: after a second answer
    word for word like the first, the request is not sent four more times with backoff."""
    with StubJudge() as stub:
        cfg = JudgeConfig(model="m", base_url=f"{stub.url}/hostile/same-500/v1", cache_mode="off",
                          max_retries=5)
        with JudgeGateway(cfg) as gw, httpx.Client(transport=gw.transport()) as c:
            gw_forwarder_backoff(gw)
            r = c.post(gw.base_url("b", "m", "c", in_process=True) + "/chat/completions",
                       json={"model": "m", "messages": [{"role": "user", "content": "hi"}]})
            assert r.status_code == 500 and len(stub.posts()) == 2
            assert gw.failure("b", "m", "c") == ("rejected", "ragbridge stub: this request fails")


def test_500s_that_change_are_retried_to_max_retries_and_the_same_one_twice_ends_it():
    """The repeat rule, attempt by attempt: 500s whose words differ (a server that names each request,
    as the stub's injected ones do) are retried until one is answered, or max_retries is spent; a 500
    word for word like the one before ends the call at once, whatever retries are left."""
    chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    with StubJudge() as stub:
        cfg = JudgeConfig(model="m", base_url=stub.base_url, cache_mode="off", max_retries=5)
        with JudgeGateway(cfg) as gw, httpx.Client(transport=gw.transport()) as c:
            gw_forwarder_backoff(gw)
            stub.inject("500", "500", "500")
            r = c.post(gw.base_url("b", "m", "c1", in_process=True) + "/chat/completions", json=chat)
            assert r.status_code == 200 and len(stub.posts()) == 4  # three changing 500s, then the answer
            stub.inject(*["500"] * 6)
            r = c.post(gw.base_url("b", "m", "c2", in_process=True) + "/chat/completions", json=chat)
            assert r.status_code == 500 and len(stub.posts()) == 4 + 6  # every attempt max_retries gives
            assert gw.failure("b", "m", "c2")[0] == "server_error"
    with StubJudge() as stub:  # the same words: two attempts, then the request is the server's to fix
        cfg = JudgeConfig(model="m", base_url=f"{stub.url}/hostile/same-500/v1", cache_mode="off",
                          max_retries=1)
        with JudgeGateway(cfg) as gw, httpx.Client(transport=gw.transport()) as c:
            r = c.post(gw.base_url("b", "m", "c", in_process=True) + "/chat/completions", json=chat)
            assert r.status_code == 500 and len(stub.posts()) == 2  # max_retries 1: the same two
    with StubJudge() as stub:
        cfg = JudgeConfig(model="m", base_url=f"{stub.url}/hostile/same-500/v1", cache_mode="off",
                          max_retries=0)
        with JudgeGateway(cfg) as gw, httpx.Client(transport=gw.transport()) as c:
            r = c.post(gw.base_url("b", "m", "c", in_process=True) + "/chat/completions", json=chat)
            assert r.status_code == 500 and len(stub.posts()) == 1
            assert gw.failure("b", "m", "c")[0] == "server_error"  # once is not yet "the same again"


@pytest.mark.parametrize("content, sent", [
    ([{"type": "text", "text": "Is it so?"}], "Is it so?"),
    ([{"type": "text", "text": "Context: a."}, {"type": "text", "text": "Is it so?"}],
     "Context: a.\nIs it so?"),
])
def test_a_message_of_text_parts_goes_upstream_as_one_string(content, sent):
    """DeepEval and the OpenAI client send a prompt as a list of text parts; llama-cpp-python fills its
    GGUF's chat template from the content and answers such a list with HTTP 500, every time. The
    gateway sends the same text as one string; the server answers."""
    body = {"model": "m", "messages": [{"role": "system", "content": "Judge."},
                                       {"role": "user", "content": content}]}
    with StubJudge() as stub:
        cfg = JudgeConfig(model="m", base_url=llama_cpp_python(stub), cache_mode="off")
        with JudgeGateway(cfg) as gw, httpx.Client(transport=gw.transport()) as c:
            r = c.post(gw.base_url("b", "m", "c", in_process=True) + "/chat/completions", json=body)
        assert r.status_code == 200, r.text
        [post] = stub.posts()
    assert post.body["messages"] == [{"role": "system", "content": "Judge."},
                                     {"role": "user", "content": sent}]


def test_a_message_with_other_parts_than_text_is_sent_as_it_is():
    """An image part (or any part that is not text) has no string form: the list goes as the library
    made it, and llama-cpp-python's refusal of it comes back, not retried."""
    parts = [{"type": "text", "text": "What is in it?"},
             {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}]
    body = {"model": "m", "messages": [{"role": "user", "content": parts}]}
    with StubJudge() as stub:
        cfg = JudgeConfig(model="m", base_url=llama_cpp_python(stub), cache_mode="off", max_retries=3)
        with JudgeGateway(cfg) as gw, httpx.Client(transport=gw.transport()) as c:
            gw_forwarder_backoff(gw)
            r = c.post(gw.base_url("b", "m", "c", in_process=True) + "/chat/completions", json=body)
        assert r.status_code == 500 and "can only concatenate str" in r.text
        assert [p.body["messages"][0]["content"] for p in stub.posts()] == [parts, parts]  # the same twice


@needs_backend("deepeval")
def test_deepeval_scores_on_llama_cpp_python(tmp_path):
    """DeepEval sends its prompt as a list of text parts, which a GGUF's chat template cannot join
    (HTTP 500, every time), and, for a model it knows, a json_schema response format (HTTP 500 too):
    the text is sent as one string, the schema as a tool call."""
    with StubJudge() as stub:
        cfg = JudgeConfig(model="gpt-4o-mini", base_url=llama_cpp_python(stub),
                          cache_path=tmp_path / "c.sqlite")
        evaluate(cases(2), backends=["deepeval"], metrics=["faithfulness"], out=tmp_path / "run",
                 judge=cfg)
        answered = [p for p in stub.posts() if p.fault != "rejected" and p.body.get("max_tokens") != 1]
    scores = load_run(tmp_path / "run").scores
    assert [s.error for s in scores if s.error] == [] and all(s.value is not None for s in scores)
    assert answered and all(isinstance(m["content"], str) for p in answered for m in p.body["messages"])


def gw_forwarder_backoff(gw: JudgeGateway) -> None:
    gw._pipeline.forwarder.backoff_base = 0.01


# ------------------------------------------------------------------------------------------------
# The conversions, one by one


SCHEMA = {"type": "object", "properties": {"label": {"type": "string", "enum": ["a", "b"]}},
          "required": ["label"]}
ASKS = {
    "schema": {"response_format": {"type": "json_schema", "json_schema": {"name": "pick", "schema": SCHEMA,
                                                                           "strict": True}}},
    "json_object": {"response_format": {"type": "json_object", "schema": SCHEMA}},
    "tool": {"tools": [{"type": "function", "function": {"name": "pick", "parameters": SCHEMA}}],
             "tool_choice": {"type": "function", "function": {"name": "pick"}}},
}


@pytest.mark.parametrize("asked", sorted(ASKS))
@pytest.mark.parametrize("mode", ["schema", "json_object", "tool", "prompt"])
def test_a_request_sent_in_another_mode_is_answered_as_it_asked(asked, mode):
    """Through the stub (which answers each mode as a server would), the answer to the reshaped
    request carries the same JSON object where the library looks for it."""
    body = {"model": "m", "messages": [{"role": "user", "content": "Pick a or b."}], **ASKS[asked]}
    ask = ask_of(body)
    sent = reshape(body, ask, mode)
    assert ask_of(sent) is None if mode == "prompt" else ask_of(sent).kind == mode
    if mode in ("json_object", "prompt") and mode != asked:  # the schema in words too
        assert json.dumps(SCHEMA, separators=(",", ":")) in sent["messages"][-1]["content"]
    with StubJudge() as stub:
        answer = httpx.post(stub.base_url + "/chat/completions", json=sent).json()
    back = as_asked(answer, ask, mode)
    message = back["choices"][0]["message"]
    text = message["tool_calls"][0]["function"]["arguments"] if asked == "tool" else message["content"]
    assert json.loads(text)["label"] in ("a", "b")
    if asked == "tool":
        assert message["content"] is None and message["tool_calls"][0]["function"]["name"] == "pick"
    else:
        assert "tool_calls" not in message


def test_refusals_are_told_by_their_words_whatever_the_status():
    words = LLAMA_CPP_PYTHON_REJECTION.replace("KIND", "json_schema")
    llama = json.dumps({"error": {"message": words, "type": "internal_server_error"}}).encode()
    assert rejects_structured_output(500, llama)
    assert rejects_structured_output(400, b'{"error": {"message": "response_format json_schema is not '
                                          b'supported by this model"}}')
    assert not rejects_structured_output(500, b'{"error": {"message": "CUDA out of memory"}}')
    assert not rejects_structured_output(429, llama)


# ------------------------------------------------------------------------------------------------
# What a user reads when scores fail


def test_a_timeout_is_reported_as_a_timeout_naming_the_setting(tmp_path):
    """The judge answers after 2 s, the timeout is 0.5 s: each score's failure says the judge did not
    answer in time (not "the judge answered HTTP 504"); the summary, in the terminal and in --json,
    gives per backend and cause the first reason and the setting to change."""
    (tmp_path / "ragbridge.toml").write_text('[judge]\nmax_retries = 1\ntimeout = 0.5\n')
    head = [json.dumps(c.model_dump(mode="json")) for c in cases(3)]
    (tmp_path / "cases.jsonl").write_text("\n".join(head) + "\n")
    with StubJudge(latency=2) as stub:
        args = ["run", "cases.jsonl", "--backend", "rubric", "--metric", "answer_relevance", "--judge-model",
                "m", "--judge-base-url", stub.base_url, "--cache-mode", "off"]
        shown = ragbridge_cli(*args, "--out", "run", cwd=tmp_path)
        as_json = ragbridge_cli(*args, "--out", "run2", "--json", cwd=tmp_path)
    assert shown.returncode == 3, shown.stderr
    text = " ".join(shown.stderr.split())
    assert "rubric: 3 timed out" in text and "within the judge's timeout of 0.5 s" in text
    assert ("fix: raise the judge's timeout (now 0.5 s: timeout in [judge] of ragbridge.toml, "
            "--judge-timeout") in text
    assert "HTTP 504" not in text
    failures = json.loads(as_json.stdout)["counts"]["failures"]
    assert [(f["backend"], f["cause"], f["scores"]) for f in failures] == [("rubric", "timeout", 3)]
    assert "--judge-timeout" in failures[0]["fix"]
    errors = {s.error for s in load_run(tmp_path / "run").scores}
    assert all(e.startswith("rubric answer_relevance: the judge did not answer in time")
               for e in errors), errors


# ------------------------------------------------------------------------------------------------
# judge check: the modes the server takes, one timed call, the settings for this machine


def test_judge_check_says_which_modes_the_server_takes_and_which_it_will_use(tmp_path):
    with StubJudge() as stub:
        args = ["judge", "check", "--judge-model", "m", "--judge-base-url", llama_cpp_python(stub)]
        shown = ragbridge_cli(*args, cwd=tmp_path)
        as_json = ragbridge_cli(*args, "--json", cwd=tmp_path)
        quick = ragbridge_cli(*args, "--quick", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    text = " ".join(shown.stdout.split())
    assert "schema: refused, HTTP 500 (1 validation error: {'type': 'literal_error'" in text
    assert "json_object: taken" in text and "tool: taken" in text and "prompt: taken" in text
    assert "when the server refuses that (schema), in tool" in text
    assert "one judge-sized call took" in text and "suit this judge" in text
    doc = json.loads(as_json.stdout)
    modes = doc["structured_output"]["modes"]
    assert modes["schema"]["status"] == "refused" and "Input should be 'text'" in modes["schema"]["said"]
    assert doc["structured_output"]["auto"] == "tool"
    assert doc["timed_call"]["http"] == 200 and doc["timed_call"]["prompt_tokens"] > 300
    assert (doc["proposed"]["timeout"], doc["proposed"]["max_concurrency"]) == (120.0, 8)
    assert quick.returncode == 0 and "structured output" not in quick.stdout


def test_judge_check_says_when_the_server_refuses_nothing_and_which_mode_is_set(tmp_path):
    """A server that takes every mode: no "when the server refuses that, in schema"; a mode set for
    every backend is said to be taken, and used."""
    with StubJudge() as stub:
        shown = ragbridge_cli("judge", "check", "--judge-model", "m", "--judge-base-url", stub.base_url,
                              "--judge-structured-output", "tool", cwd=tmp_path)
    text = " ".join(shown.stdout.split())
    assert "the server refuses none: auto (the default) sends each request as its library asks" in text
    assert "when the server refuses" not in text
    assert "every backend is set to tool, which the server takes: requests go as tool" in text


def test_a_mode_chosen_that_the_server_refuses_is_warned_by_judge_check(tmp_path):
    with StubJudge() as stub:
        shown = ragbridge_cli("judge", "check", "--judge-model", "m", "--judge-base-url",
                              llama_cpp_python(stub), "--judge-structured-output", "schema", cwd=tmp_path)
    assert "warning: every backend is set to schema, which the server did not take" in " ".join(
        shown.stdout.split())
    (tmp_path / "ragbridge.toml").write_text('[backends.phoenix]\nstructured_output = "schema"\n')
    with StubJudge() as stub:
        shown = ragbridge_cli("judge", "check", "--judge-model", "m", "--judge-base-url",
                              llama_cpp_python(stub), cwd=tmp_path)
    text = " ".join(shown.stdout.split())
    assert ("warning: phoenix is set to schema, which the server did not take: choose one it takes "
            "(structured_output in [backends.phoenix] of ragbridge.toml or --option "
            "phoenix.structured_output=MODE)") in text
    assert "every backend is set" not in text


@pytest.mark.parametrize("seconds, slots, local, timeout, concurrency", [
    (1.2, None, False, 120, 8),  # a hosted judge: the defaults hold
    (16.0, None, True, 120, 2),  # a judge on this CPU, 16 s a call: two at a time, one behind the other
    (90.0, None, True, 540, 2),  # 1.5 minutes a call: the largest (x2) behind another (x2), with margin
    (90.0, 1, True, 270, 1),  # a server that says it runs one request at a time: one in flight
    (90.0, 4, True, 270, 4),  # ... four at a time (llama.cpp's -np 4): four in flight, none waiting
])
def test_the_proposal_covers_the_largest_call_behind_the_others(seconds, slots, local, timeout, concurrency):
    from ragbridge.judge.probe import propose

    url = "http://127.0.0.1:8080/v1" if local else "https://api.example.com/v1"
    cfg = JudgeConfig(model="m", base_url=url)
    p = propose(cfg, {"seconds": seconds, "slots": slots})
    assert (p["timeout"], p["max_concurrency"]) == (timeout, concurrency)


def test_the_audit_log_separates_waiting_for_a_slot_from_the_call(tmp_path):
    """One call in flight at a time, three asked at once, each taking 0.4 s at the judge: each line's
    ``seconds`` is its wait for the slot plus its call, and the log says which is which."""
    import threading

    with StubJudge(latency=0.4) as stub:
        cfg = JudgeConfig(model="m", base_url=stub.base_url, cache_mode="off", max_concurrency=1)
        with JudgeGateway(cfg, audit_log=tmp_path / "audit.jsonl") as gw:
            start = threading.Barrier(3)

            def ask(i: int) -> None:
                with httpx.Client(transport=gw.transport(), timeout=60) as c:
                    start.wait()
                    c.post(gw.base_url("b", "m", f"c{i}", in_process=True) + "/chat/completions",
                           json={"model": "m", "messages": [{"role": "user", "content": f"question {i}"}]})

            threads = [threading.Thread(target=ask, args=(i,)) for i in range(3)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
    lines = [json.loads(x) for x in (tmp_path / "audit.jsonl").read_text().splitlines()]
    assert len(lines) == 3 and all(0.35 < x["call_seconds"] < 5 for x in lines)
    waits = sorted(x["wait_seconds"] for x in lines)
    assert waits[0] < 0.2 and 0.3 < waits[1] and 0.7 < waits[2]  # at once, behind one call, behind two
    assert all(x["seconds"] >= x["wait_seconds"] + x["call_seconds"] - 0.01 for x in lines)


def test_the_audit_log_gives_the_backoff_between_attempts(tmp_path):
    """A call answered after two 500s: its ``seconds`` are its wait for a slot, its attempts at the
    judge and the backoff between them, each given."""
    with StubJudge() as stub:
        stub.inject("500", "500")
        cfg = JudgeConfig(model="m", base_url=stub.base_url, cache_mode="off")
        with JudgeGateway(cfg, audit_log=tmp_path / "audit.jsonl") as gw, \
                httpx.Client(transport=gw.transport()) as c:
            gw._pipeline.forwarder.backoff_base = 0.3
            r = c.post(gw.base_url("b", "m", "c", in_process=True) + "/chat/completions",
                       json={"model": "m", "messages": [{"role": "user", "content": "hi"}]})
            assert r.status_code == 200
    (line,) = [json.loads(x) for x in (tmp_path / "audit.jsonl").read_text().splitlines()]
    assert line["attempts"] == 3 and line["backoff_seconds"] > 0
    parts = line["wait_seconds"] + line["call_seconds"] + line["backoff_seconds"]
    assert parts <= line["seconds"] < parts + 0.05, line


@pytest.mark.slow
def test_judge_check_measures_a_one_slot_server_and_proposes_one_call_at_a_time(tmp_path):
    """A server with one slot answering in a few seconds: the old rule (concurrency limited only for
    calls over 5 s, or when /props says slots) proposed 8, and every call then timed out behind the
    others. Two identical calls sent at once take twice one alone: max_concurrency 1, said how."""
    # a second apiece: long beside this process's own work on a busy machine (the stub answers in it)
    with StubJudge(late_seconds=1.0) as stub:
        shown = ragbridge_cli("judge", "check", "--judge-model", "m", "--judge-base-url",
                              f"{stub.url}/hostile/one-slot/v1", "--json", cwd=tmp_path)
        side_by_side = ragbridge_cli("judge", "check", "--judge-model", "m", "--judge-base-url",
                                     f"{stub.url}/hostile/late/v1", cwd=tmp_path)
        text = ragbridge_cli("judge", "check", "--judge-model", "m", "--judge-base-url",
                             f"{stub.url}/hostile/one-slot/v1", cwd=tmp_path).stdout
    doc = json.loads(shown.stdout)
    pair = doc["timed_call"]["pair"]
    assert pair["one_at_a_time"] is True and pair["together"] >= 1.7 * pair["alone"], pair
    assert doc["proposed"]["max_concurrency"] == 1
    text = " ".join(text.split())
    assert "max_concurrency = 1 (now 8)" in text
    assert "the server runs one request at a time (the second waited for the first)" in text
    said = " ".join(side_by_side.stdout.split())  # a server that takes both at once keeps its 8
    assert "the server runs them side by side" in said and "max_concurrency = 1" not in said


@needs_backend("ragas")
def test_ragas_json_mode_requests_take_the_chosen_mode_on_a_server_that_takes_only_tools(tmp_path):
    """RAGAS asks in JSON mode without a schema. A server that takes only a forced tool call refuses
    JSON mode in its own words ("JSON mode not available for this model"): with structured_output
    ``tool`` every request goes as a tool of any object; left on ``auto`` the refusal is asked again as
    a tool; with ``json_object`` chosen the run says to choose another mode, not to change the model."""
    (tmp_path / "cases.jsonl").write_text("".join(json.dumps(c.model_dump(mode="json")) + "\n"
                                                  for c in cases(2)))

    def run(stub, mode, out):
        return ragbridge_cli("run", "cases.jsonl", "--out", out, "-b", "ragas", "-m", "faithfulness",
                             "--judge-model", stub.models[0], "--judge-base-url",
                             f"{stub.url}/hostile/tool-only/v1", "--cache-mode", "off", "--no-progress",
                             "--option", f"ragas.structured_output={mode}", cwd=tmp_path,
                             env={"OPENAI_API_KEY": "sk-test"})

    with StubJudge() as stub:
        res = run(stub, "tool", "tool")
        assert res.returncode == 0, res.stderr
        assert set(kinds(stub)) == {"tool"}  # none sent in JSON mode, so none refused
    with StubJudge() as stub:
        res = run(stub, "auto", "auto")
        assert res.returncode == 0, res.stderr
        assert set(kinds(stub)) == {"json_object", "tool"}  # refused in JSON mode, asked as a tool
    with StubJudge() as stub:
        res = run(stub, "json_object", "json_object")
    text = " ".join(res.stderr.split())
    assert res.returncode == 3 and "structured output refused" in text, text
    assert "JSON mode not available for this model" in text
    assert "fix: choose a structured-output mode the server takes for ragas (now 'json_object')" in text
    assert "context size" not in text


def test_a_failure_summary_quotes_a_multi_line_exception_as_one_line():
    """Instructor (RAGAS's) gives up with a dump of every attempt, its exception and the completion,
    over many lines: the summary quotes its exception's name and the first attempt's reason on one
    line; a traceback is quoted by its last line."""
    instructor = pytest.importorskip("instructor.core.exceptions")
    from pydantic import BaseModel, ValidationError

    from ragbridge.judge.causes import cause_of

    class StatementGeneratorOutput(BaseModel):
        statements: list[str]

    try:
        StatementGeneratorOutput.model_validate({})
    except ValidationError as exc:
        invalid = exc
    gave_up = instructor.InstructorRetryException(
        str(invalid), n_attempts=1, total_usage=0,
        failed_attempts=[instructor.FailedAttempt(1, invalid, "ChatCompletion(content='{}')")])
    cause, reason = cause_of(f"{type(gave_up).__name__}: {gave_up}", None)
    assert (cause, reason) == ("unusable_reply", "InstructorRetryException: 1 validation error for "
                               "StatementGeneratorOutput statements Field required [type=missing, "
                               "input_value={}, input_type=dict]")
    assert cause_of('Traceback (most recent call last):\n  File "x.py", line 1\nValueError: bad', None) == (
        "other", "ValueError: bad")
