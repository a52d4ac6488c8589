"""The judge recipes of docs/judges.md, each run as written against the stub judge speaking that
server's dialect; the stub's dialects reject what the real servers reject; the judge settings
(request fields, extra headers, a separate embeddings server, no key on loopback) reach the judge."""

from __future__ import annotations

import json
import re
import tomllib

import httpx
import pytest
from conftest import ROOT, ragbridge_cli

from ragbridge import evaluate, load_run
from ragbridge.judge import JudgeConfig, JudgeConfigError, JudgeGateway
from ragbridge.plugins import get_backends
from ragbridge.testing import StubJudge

PAGE = ROOT / "docs" / "judges.md"
KEY = "sk-dialect-test-4d1f"
#: the hosts the page names, and the stub's prefix that speaks the same dialect
HOSTS = {
    "http://localhost:11434/v1": "/ollama/v1",
    "http://localhost:8000/v1": "/vllm/v1",
    "http://localhost:8001/v1": "/vllm/v1",
    "http://localhost:8080/v1": "/llamacpp/v1",
    "http://localhost:8011/v1": "/llama-cpp-python/v1",
    "https://YOUR-RESOURCE.openai.azure.com": "/azure",
    "https://api.anthropic.com/v1": "/anthropic/v1",
    "https://generativelanguage.googleapis.com/v1beta/openai": "/gemini/v1beta/openai",
    "http://localhost:4000": "/litellm",
}
#: where each dialect wants the key (the header the stub must have seen, lowercase)
KEY_HEADER = {"azure": ("api-key", KEY), "anthropic": ("authorization", f"Bearer {KEY}"),
              "gemini": ("authorization", f"Bearer {KEY}"), "litellm": ("authorization", f"Bearer {KEY}"),
              "vllm": ("authorization", f"Bearer {KEY}"), "llamacpp": ("authorization", f"Bearer {KEY}"),
              "llama-cpp-python": ("authorization", f"Bearer {KEY}")}


def recipes() -> dict[str, str]:
    """Each ``## heading`` of the page with its ```toml block."""
    text = PAGE.read_text(encoding="utf-8")
    found = {}
    for section in re.split(r"^## ", text, flags=re.M)[1:]:
        title = section.splitlines()[0].strip()
        block = re.search(r"^```toml\n(.*?)^```", section, re.M | re.S)
        if block:
            found[title] = block.group(1)
    return found


RECIPES = recipes()


def test_the_page_has_a_recipe_for_every_judge_it_claims():
    names = " ".join(RECIPES)
    for judge in ("Ollama", "vLLM", "llama.cpp", "llama-cpp-python", "Azure OpenAI", "Anthropic", "Gemini",
                  "LiteLLM"):
        assert judge in names, judge
    for toml in RECIPES.values():
        cfg = tomllib.loads(toml)["judge"]
        assert cfg["base_url"] in HOSTS or cfg["base_url"] == "", cfg["base_url"]


def _pointed_at(toml: str, stub: StubJudge) -> str:
    for host, prefix in HOSTS.items():
        toml = toml.replace(f'"{host}"', f'"{stub.url}{prefix}"')
    return toml


def _env_names(cfg: dict) -> list[str]:
    return [cfg[k] for k in ("api_key_env", "embedding_api_key_env") if cfg.get(k)]


@pytest.mark.parametrize("title", sorted(RECIPES))
def test_recipe_runs_a_judged_backend_through_the_gateway(title, tmp_path, example_cases, monkeypatch):
    toml = RECIPES[title]
    cfg = tomllib.loads(toml)["judge"]
    models = [m for m in (cfg.get("model"), cfg.get("embedding_model")) if m]
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)  # the default variable: a recipe without a key
    for name in _env_names(cfg):
        monkeypatch.setenv(name, KEY)
    with StubJudge(api_key=KEY, models=tuple(models)) as stub:
        (tmp_path / "ragbridge.toml").write_text(_pointed_at(toml, stub), encoding="utf-8")
        judge = JudgeConfig.load({"cache_path": tmp_path / "cache.sqlite"}, cwd=tmp_path)
        backends, metrics = ["rubric"], ["faithfulness"]
        if cfg.get("embedding_model") and get_backends()["ragas"].available():
            backends, metrics = ["rubric", "ragas"], ["faithfulness", "answer_relevance"]
        run = evaluate(example_cases[:2], backends=backends, metrics=metrics, out=tmp_path / "run",
                       judge=judge)
        assert run.complete, run.manifest.status
        scores = load_run(tmp_path / "run").scores
        assert scores and all(s.error is None and s.value is not None for s in scores), \
            [s.error for s in scores]
        posts = stub.posts()
        assert posts and not [p for p in posts if p.fault == "rejected"]
        dialect = HOSTS[cfg["base_url"]].split("/")[1]
        chat = [p for p in posts if p.path == "/chat/completions"]
        assert chat and all(p.dialect == dialect for p in chat)
        if dialect in KEY_HEADER:
            name, value = KEY_HEADER[dialect]
            assert all(p.headers.get(name) == value for p in chat), chat[0].headers
        if dialect == "azure":
            assert all("authorization" not in p.headers for p in posts)
        if dialect == "ollama":  # loopback: no key needed, none invented
            assert all("authorization" not in p.headers for p in posts)
        for name in ("temperature", "seed"):
            if name in cfg:
                assert all(p.body.get(name) == cfg[name] for p in chat), name
        if "extra_body" in cfg:
            assert all(p.body.get("options") == cfg["extra_body"]["options"] for p in chat)
        embedded = [p for p in posts if p.path == "/embeddings"]
        if "ragas" in backends:
            assert embedded and all(p.body["model"] == cfg["embedding_model"] for p in embedded)
            separate = cfg.get("embedding_base_url")
            if separate:
                assert all(p.dialect == HOSTS[separate].split("/")[1] for p in embedded)
                if not cfg.get("embedding_api_key_env"):  # the judge's key never goes to another server
                    assert all(KEY not in json.dumps(p.headers) for p in embedded)
        manifest = json.loads((tmp_path / "run" / "run.json").read_text())
        assert KEY not in json.dumps(manifest)


def test_azure_recipe_through_the_cli_and_a_wrong_key_stops_it(tmp_path, example_path):
    toml = RECIPES["Azure OpenAI"]
    with StubJudge(api_key=KEY, models=("gpt-4o-mini", "text-embedding-3-small")) as stub:
        (tmp_path / "ragbridge.toml").write_text(_pointed_at(toml, stub), encoding="utf-8")
        args = ["run", example_path, "--backend", "rubric", "--metric", "faithfulness", "--no-progress",
                "--cache-path", tmp_path / "c.sqlite"]
        ok = ragbridge_cli(*args, "--out", tmp_path / "run", cwd=tmp_path,
                           env={"AZURE_OPENAI_API_KEY": KEY})
        assert ok.returncode == 0, ok.stdout + ok.stderr
        assert {p.dialect for p in stub.posts()} == {"azure"}
        bad = ragbridge_cli(*args, "--out", tmp_path / "bad", cwd=tmp_path,
                            env={"AZURE_OPENAI_API_KEY": "sk-wrong"})
        assert bad.returncode == 2 and "rejected the API key from AZURE_OPENAI_API_KEY" in bad.stderr
        assert "Traceback" not in bad.stderr and not (tmp_path / "bad").exists()


# The stub's dialects refuse what the real servers refuse.
REJECTIONS = [
    # (dialect path, headers, body model, expected status, text in the answer)
    ("/azure/openai/deployments/judge/chat/completions", {"api-key": KEY}, None, 404, "Resource not found"),
    ("/azure/openai/deployments/judge/chat/completions?api-version=2024-10-21",
     {"Authorization": f"Bearer {KEY}"}, None, 401, "Access token is missing"),
    ("/azure/openai/deployments/judge/chat/completions?api-version=2024-10-21", {"api-key": "no"}, None,
     401, "invalid subscription key"),
    ("/azure/openai/deployments/other/chat/completions?api-version=2024-10-21", {"api-key": KEY}, None,
     404, "DeploymentNotFound"),
    ("/ollama/v1/chat/completions", {}, "unknown", 404, "try pulling it first"),
    ("/vllm/v1/chat/completions", {}, "judge", 401, "Unauthorized"),
    ("/vllm/v1/chat/completions", {"Authorization": f"Bearer {KEY}"}, "unknown", 404, "does not exist"),
    ("/llamacpp/v1/chat/completions", {"Authorization": "Bearer no"}, "judge", 401, "Invalid API Key"),
    ("/llamacpp/v1/embeddings", {"Authorization": f"Bearer {KEY}"}, "judge", 501, "--embeddings"),
    ("/anthropic/v1/chat/completions", {}, "judge", 401, "x-api-key header is required"),
    ("/anthropic/v1/embeddings", {"x-api-key": KEY}, "judge", 404, "not_found_error"),
    ("/gemini/v1beta/openai/chat/completions", {"Authorization": "Bearer no"}, "judge", 400,
     "API key not valid"),
    ("/gemini/v1beta/openai/chat/completions", {}, "judge", 403, "PERMISSION_DENIED"),
    ("/litellm/chat/completions", {}, "judge", 401, "No api key passed in"),
    ("/litellm/v1/chat/completions", {"Authorization": f"Bearer {KEY}"}, "unknown", 400,
     "Invalid model name"),
    ("/openai/v1/chat/completions", {"Authorization": "Bearer no"}, "judge", 401, "invalid_api_key"),
]


@pytest.mark.parametrize("path, headers, model, status, text", REJECTIONS)
def test_stub_dialects_reject_as_the_real_servers_do(path, headers, model, status, text):
    with StubJudge(api_key=KEY, models=("judge",)) as stub:
        body = {"messages": [{"role": "user", "content": "hi"}], **({"model": model} if model else {})}
        r = httpx.post(stub.url + path, json=body, headers=headers, trust_env=False)
    assert r.status_code == status and text in r.text, (r.status_code, r.text)
    assert stub.posts()[0].fault == "rejected"


def test_request_fields_and_headers_reach_the_judge_and_key_the_cache(tmp_path):
    with StubJudge() as stub:
        def call(**settings):
            cfg = JudgeConfig(model="m", base_url=stub.base_url, cache_path=tmp_path / "c.sqlite", **settings)
            with JudgeGateway(cfg) as gw, httpx.Client(transport=gw.transport()) as c:
                r = c.post(gw.base_url("b", "m", "c", in_process=True) + "/chat/completions",
                           json={"model": "m", "temperature": 0.7, "messages": [{"role": "user",
                                                                                 "content": "hi"}]})
                assert r.status_code == 200
                return r.headers["x-ragbridge-cache"]

        assert call() == "miss"
        assert call(temperature=0.0, seed=3, extra_body={"top_k": 1}, headers={"X-Team": "eval"}) == "miss"
        body = stub.posts()[-1].body
        assert (body["temperature"], body["seed"], body["top_k"]) == (0.0, 3, 1)
        assert call(temperature=0.0, seed=3, extra_body={"top_k": 1}) == "hit"  # same settings: replayed
        assert call() == "hit"  # and the plain request still has its own answer
        assert len(stub.posts()) == 2


@pytest.mark.parametrize("title, key", [("Azure OpenAI", None), ("vLLM", KEY)])
def test_an_unset_key_is_said_to_be_unset_before_any_call(title, key, tmp_path, monkeypatch):
    """The recipe's key variable is not set: Azure OpenAI always needs one (said before any request,
    not "rejected the API key (HTTP 401)"); a server on this machine that asks for one (vLLM with
    --api-key) gets told the variable is unset, with how to set it."""
    toml = next(v for k, v in RECIPES.items() if k.startswith(title))
    env = _env_names(tomllib.loads(toml)["judge"])[0]
    monkeypatch.delenv(env, raising=False)
    with StubJudge(api_key=key) as stub:
        (tmp_path / "ragbridge.toml").write_text(_pointed_at(toml, stub), encoding="utf-8")
        res = ragbridge_cli("run", ROOT / "examples" / "support-bot" / "golden.jsonl", "--out",
                            tmp_path / "run", "--backend", "rubric", "--metric", "faithfulness",
                            "--no-progress", cwd=tmp_path)
        requests = list(stub.requests)
    message = " ".join(res.stderr.split())
    assert res.returncode == 2 and "rejected" not in message, message
    assert f"judge API key missing: the environment variable {env} is not set" in message
    assert f"set it (export {env}=... in the shell that runs ragbridge)" in message
    assert not requests if title == "Azure OpenAI" else [r.method for r in requests] == ["GET"]
    assert not (tmp_path / "run").exists()


def test_config_refuses_the_keys_header_a_public_credential_and_azure_without_version(tmp_path):
    judge = '[judge]\nmodel = "m"\nbase_url = "http://127.0.0.1:1/v1"\n'
    for headers, error in [('headers = { "Authorization" = "Bearer sk-x" }', "judge headers: header "
                            "'Authorization' is where the key goes: put the key in the environment variable"),
                           ('headers = { "x-api-key" = "sk-x" }\npublic_headers = ["X-API-Key"]',
                            "'X-API-Key' looks like it carries a credential: it cannot be public"),
                           ('headers = { "X-Team" = "eval" }\npublic_headers = ["X-Tenant"]',
                            "public_headers names 'X-Tenant', which is not in headers")]:
        (tmp_path / "ragbridge.toml").write_text(judge + headers + "\n")
        with pytest.raises(JudgeConfigError, match=re.escape(error)):
            JudgeConfig.load(cwd=tmp_path)
    (tmp_path / "ragbridge.toml").write_text(judge + 'headers = { "x-api-key" = "sk-x", "X-Team" = "eval" }\n'
                                             'public_headers = ["x-team"]\n')
    cfg = JudgeConfig.load(cwd=tmp_path)  # a credential in a header is a secret, not an error
    assert cfg.public_dict()["headers"] == {"x-api-key": "[secret]", "X-Team": "eval"}
    from ragbridge.judge.remote import worker_config

    assert worker_config(cfg)["headers"] == {}  # the gateway sends them: a worker never holds one
    (tmp_path / "ragbridge.toml").write_text('[judge]\nmodel = "m"\napi = "azure"\n'
                                             'base_url = "https://r.openai.azure.com"\n')
    with pytest.raises(JudgeConfigError, match="ragbridge.toml: judge api: .*needs api_version"):
        JudgeConfig.load(cwd=tmp_path)


def test_every_command_that_calls_the_judge_takes_the_same_judge_options():
    """One declaration: run, rescore, pairwise and judge check offer each judge option with one help."""
    from typer.main import get_command

    from ragbridge.commands import cli
    from ragbridge.plugins import register_commands

    register_commands(cli)
    group = get_command(cli)
    judge_group = group.get_command(None, "judge")
    commands = {name: group.get_command(None, name) for name in ("run", "rescore", "pairwise")}
    commands["judge check"] = judge_group.get_command(None, "check")
    wanted = {"--judge-model", "--judge-base-url", "--judge-api-key-env", "--embedding-model", "--cache-mode",
              "--cache-path", "--max-concurrency", "--requests-per-minute", "--config"}
    seen = {}
    for name, command in commands.items():
        options = {o: p.help for p in command.params for o in getattr(p, "opts", ()) if o in wanted}
        assert set(options) == wanted, (name, wanted - set(options))
        seen[name] = options
    assert len({tuple(sorted(o.items())) for o in seen.values()}) == 1


def test_rescore_takes_the_rate_limit(tmp_path, example_path):
    with StubJudge() as stub:
        base = ["--judge-model", "m", "--judge-base-url", stub.base_url, "--no-progress",
                "--cache-path", tmp_path / "c.sqlite", "--backend", "rubric", "--metric", "faithfulness"]
        first = ragbridge_cli("run", example_path, "--out", tmp_path / "run", *base, cwd=tmp_path)
        assert first.returncode == 0, first.stderr
        again = ragbridge_cli("rescore", tmp_path / "run", *base, "--cache-mode", "off",
                              "--requests-per-minute", "6000", cwd=tmp_path)
        assert again.returncode == 0, again.stderr
        manifest = json.loads((tmp_path / "run" / "run.json").read_text())
        assert manifest["judge"]["requests_per_minute"] == 6000


# A model the server does not serve is refused before anything is scored, with the models it serves
# and that server's fix; a server that lists its models differently from what it serves is not.
UNSERVED = {  # recipe -> what the refusal must say besides the model's name
    "Ollama": ["it serves: llama3.1:8b, nomic-embed-text", "ollama pull does-not-exist"],
    "vLLM": ["it serves: Qwen/Qwen2.5-7B-Instruct, BAAI/bge-small-en-v1.5", "--served-model-name"],
    "Azure OpenAI": ["no deployment named 'does-not-exist'", "name of your chat deployment",
                     "az cognitiveservices account deployment list"],
}


def _recipe_at_stub(title: str, stub: StubJudge, tmp_path, monkeypatch) -> dict:
    toml = RECIPES[title]
    cfg = tomllib.loads(toml)["judge"]
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    for name in _env_names(cfg):
        monkeypatch.setenv(name, KEY)
    (tmp_path / "ragbridge.toml").write_text(_pointed_at(toml, stub), encoding="utf-8")
    return cfg


@pytest.mark.parametrize("title", sorted(UNSERVED))
def test_judge_check_and_run_refuse_a_model_the_server_does_not_serve(title, tmp_path, monkeypatch,
                                                                      example_path):
    cfg = tomllib.loads(RECIPES[title])["judge"]
    served = tuple(m for m in (cfg.get("model"), cfg.get("embedding_model")) if m)
    with StubJudge(api_key=KEY, models=served) as stub:
        _recipe_at_stub(title, stub, tmp_path, monkeypatch)
        ok = ragbridge_cli("judge", "check", cwd=tmp_path)
        assert ok.returncode == 0, ok.stdout + ok.stderr
        assert ok.stdout.startswith(f"judge ok: {cfg['model']} ")
        assert f"embeddings ok: {cfg['embedding_model']}" in ok.stdout
        stub.reset()
        check = ragbridge_cli("judge", "check", "--judge-model", "does-not-exist", cwd=tmp_path)
        assert check.returncode == 2 and "judge ok" not in check.stdout, check.stdout + check.stderr
        said = " ".join(check.stderr.split())
        assert "judge model 'does-not-exist' is not served at" in said and "HTTP 404" in said, said
        for text in UNSERVED[title]:
            assert text in said, (text, said)
        assert "--judge-model" in said and "JudgeConfig(" not in said and "Traceback" not in said
        assert len(stub.posts()) == 1  # the one request of the model that told
        stub.reset()
        run = ragbridge_cli("run", example_path, "--out", tmp_path / "run", "--backend", "rubric",
                            "--metric", "faithfulness", "--no-progress", "--judge-model", "does-not-exist",
                            cwd=tmp_path)
        assert run.returncode == 2, run.stdout + run.stderr
        assert "judge model 'does-not-exist' is not served" in " ".join(run.stderr.split())
        assert not (tmp_path / "run").exists() and len(stub.posts()) == 1  # nothing scored


def test_an_embedding_model_the_server_does_not_serve_is_refused(tmp_path, monkeypatch):
    with StubJudge(models=("llama3.1:8b",)) as stub:  # nomic-embed-text never pulled
        _recipe_at_stub("Ollama", stub, tmp_path, monkeypatch)
        check = ragbridge_cli("judge", "check", cwd=tmp_path)
    said = " ".join(check.stderr.split())
    assert check.returncode == 2 and "embedding model 'nomic-embed-text' is not served" in said, said
    assert "ollama pull nomic-embed-text" in said and "--embedding-model" in said


def test_servers_whose_list_is_not_what_they_serve_are_not_refused(tmp_path, monkeypatch):
    """llama.cpp's server answers any name with its one model (listed by its file name); Anthropic
    serves the alias it lists with a date; a server without /models at all is asked the model."""
    served = ("qwen2.5-1.5b-instruct", "claude-sonnet-4-5", "nomic-embed-text")
    with StubJudge(api_key=KEY, models=served) as stub:
        _recipe_at_stub("llama.cpp's server", stub, tmp_path, monkeypatch)
        ok = ragbridge_cli("judge", "check", cwd=tmp_path)
        assert ok.returncode == 0, ok.stderr
        assert "not in the server's list of models, but it answered a request of it" in ok.stdout
        listed = httpx.get(f"{stub.url}/anthropic/v1/models", headers={"x-api-key": KEY}, trust_env=False)
        assert [m["id"] for m in listed.json()["data"]][:2] == ["qwen2.5-1.5b-instruct-20250929",
                                                                "claude-sonnet-4-5-20250929"]
        _recipe_at_stub("Anthropic (OpenAI-compatible endpoint)", stub, tmp_path, monkeypatch)
        ok = ragbridge_cli("judge", "check", "--judge-model", "claude-sonnet-4-5", cwd=tmp_path)
        assert ok.returncode == 0 and "it answered a request of it" in ok.stdout, ok.stdout + ok.stderr
    with StubJudge(models=("qwen2.5-1.5b-instruct",), lists_models=False) as stub:
        _recipe_at_stub("llama.cpp's server", stub, tmp_path, monkeypatch)
        ok = ragbridge_cli("judge", "check", cwd=tmp_path)
        assert ok.returncode == 0, ok.stderr
        assert "the server lists no models: GET /models answered HTTP 404" in ok.stdout
        # an Ollama that does not list (or a base_url without /v1) and a model it does not serve
        _recipe_at_stub("Ollama", stub, tmp_path, monkeypatch)
        bad = ragbridge_cli("judge", "check", "--judge-model", "nope", "--embedding-model",
                            "qwen2.5-1.5b-instruct", cwd=tmp_path)
    said = " ".join(bad.stderr.split())
    assert bad.returncode == 2 and "the server lists no models (GET /models: HTTP 404)" in said, said
    assert "check base_url too" in said and "ollama pull nope" in said


def test_a_server_that_cannot_tell_is_not_refused(tmp_path, monkeypatch):
    with StubJudge(models=("qwen2.5-1.5b-instruct",), lists_models=False) as stub:
        _recipe_at_stub("llama.cpp's server", stub, tmp_path, monkeypatch)
        stub.inject("500")  # the request of the model fails for another reason: the run goes on
        ok = ragbridge_cli("judge", "check", cwd=tmp_path)
    assert ok.returncode == 0 and "(model not checked: a request of it got HTTP 500" in ok.stdout, ok.stdout


def test_a_name_without_a_tag_is_ollamas_latest(tmp_path, monkeypatch):
    with StubJudge(models=("llama3.1:latest", "nomic-embed-text:latest")) as stub:
        _recipe_at_stub("Ollama", stub, tmp_path, monkeypatch)
        ok = ragbridge_cli("judge", "check", "--quick", "--judge-model", "llama3.1", cwd=tmp_path)
        assert ok.returncode == 0 and "llama3.1 at" in ok.stdout and "(the server lists it)" in ok.stdout
        assert not stub.posts()
        r = httpx.post(f"{stub.url}/ollama/v1/chat/completions", trust_env=False,
                       json={"model": "llama3.1", "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 200, r.text


def test_in_python_the_refusal_names_the_python_setting(tmp_path, example_cases):
    from ragbridge.run import RunError

    with StubJudge(models=("llama3.1:8b",)) as stub:
        judge = JudgeConfig(model="does-not-exist", base_url=f"{stub.url}/ollama/v1", cache_path=None)
        with pytest.raises(RunError) as err:
            evaluate(example_cases[:2], backends=["rubric"], metrics=["faithfulness"], judge=judge,
                     out=tmp_path / "run")
        assert len(stub.posts()) == 1
    said = str(err.value)
    assert "it serves: llama3.1:8b" in said and "set JudgeConfig(model=...) to one it serves" in said
    assert "--judge-model" not in said and "--judge-model" in err.value.cli
    assert not (tmp_path / "run").exists()


# What GET /models answers, as each server answers it (the shapes the model check reads).
LISTINGS = [
    ("/ollama/v1/models", {}, lambda d: d["data"][0] == {"id": "m1", "object": "model",
                                                         "created": d["data"][0]["created"],
                                                         "owned_by": "library"}),
    ("/vllm/v1/models", {"Authorization": f"Bearer {KEY}"},
     lambda d: d["data"][0]["owned_by"] == "vllm" and "max_model_len" in d["data"][0]),
    ("/llamacpp/v1/models", {}, lambda d: [m["id"] for m in d["data"]] == [d["models"][0]["name"]]
     and d["data"][0]["owned_by"] == "llamacpp" and d["data"][0]["id"].endswith(".gguf")),
    ("/azure/openai/models?api-version=2024-10-21", {"api-key": KEY},
     lambda d: "m1" not in [m["id"] for m in d["data"]] and "capabilities" in d["data"][0]),
    ("/gemini/v1beta/openai/models", {"Authorization": f"Bearer {KEY}"},
     lambda d: [m["id"] for m in d["data"]] == ["models/m1"]),
]


@pytest.mark.parametrize("path, headers, shaped", LISTINGS)
def test_stub_dialects_list_models_as_the_real_servers_do(path, headers, shaped):
    with StubJudge(api_key=KEY, models=("m1",)) as stub:
        r = httpx.get(stub.url + path, headers=headers, trust_env=False)
        plain = httpx.get(stub.base_url + "/models", trust_env=False)
    assert r.status_code == 200 and shaped(r.json()), r.text
    assert "x-ragbridge-stub-models" not in r.headers and plain.headers["x-ragbridge-stub-models"] == "any"
