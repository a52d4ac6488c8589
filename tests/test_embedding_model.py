"""The embedding model a run uses is the one it records and checks: a metric that embeds (RAGAS's
answer relevance) declares the model its library asks for when the judge names none, and the run
makes it the judge's, so run.json names it and the preflight refuses a server that does not serve it
before anything is scored, naming the setting (here a vLLM server, the stub in its dialect)."""

from __future__ import annotations

import json

import pytest

import ragbridge
from conftest import needs_backend
from ragbridge.backend import MetricSpec
from ragbridge.judge import JudgeConfig
from ragbridge.run import RunError

KEY = "sk-stub-embedding-check"
EMBEDS = {"backends": ["ragas"], "metrics": ["answer_relevance"]}


@needs_backend("ragas")
def test_ragas_declares_the_embedding_model_it_asks_for():
    from ragas.embeddings import OpenAIEmbeddings

    from ragbridge.plugins import get_backends

    specs = {s.name: s for s in get_backends()["ragas"].metrics()}
    assert specs["answer_relevance"].embedding_model == OpenAIEmbeddings.DEFAULT_MODEL
    assert all(s.embedding_model is None for n, s in specs.items() if n != "answer_relevance")
    assert MetricSpec("faithfulness").embedding_model is None


@needs_backend("ragas")
@pytest.mark.parametrize("stub_judge", [{"api_key": KEY}], indirect=True)
def test_an_embedding_model_the_server_does_not_serve_is_refused_before_scoring(tmp_path, example_cases,
                                                                               stub_judge, monkeypatch):
    monkeypatch.setenv("STUB_KEY", KEY)
    judge = JudgeConfig(model="stub-judge", base_url=stub_judge.url + "/vllm/v1", api_key_env="STUB_KEY",
                        cache_mode="off")
    with pytest.raises(RunError) as refused:
        ragbridge.evaluate(example_cases[:3], **EMBEDS, judge=judge, out=tmp_path / "run")
    head = ("ragas:answer_relevance uses the embedding model 'text-embedding-3-small' (its library's "
            "default: the judge names none): embedding model 'text-embedding-3-small' is not served at ")
    said, cli = str(refused.value), refused.value.cli
    assert said.startswith(head) and cli.startswith(head), said
    assert "it serves: stub-judge, stub-embedder" in said and "set JudgeConfig(embedding_model=...)" in said
    assert "set embedding_model in [judge] of ragbridge.toml (or --embedding-model)" in cli
    assert not (tmp_path / "run").exists()  # nothing scored, nothing written
    assert not [p for p in stub_judge.posts() if p.path.endswith("/chat/completions")]

    named = judge.model_copy(update={"embedding_model": "stub-embedder"})
    run = ragbridge.evaluate(example_cases[:3], **EMBEDS, judge=named, out=tmp_path / "run")
    assert run.manifest.judge["embedding_model"] == "stub-embedder" and not run.manifest.counts["errored"]


@needs_backend("ragas")
def test_run_json_records_the_embedding_model_the_scores_came_from(tmp_path, example_cases, stub_judge):
    judge = JudgeConfig(model="stub-judge", base_url=stub_judge.base_url, cache_mode="off")
    ragbridge.evaluate(example_cases[:3], **EMBEDS, judge=judge, out=tmp_path / "run")
    manifest = json.loads((tmp_path / "run" / "run.json").read_text())
    assert manifest["judge"]["embedding_model"] == "text-embedding-3-small"
    asked = {p.body["model"] for p in stub_judge.posts() if p.path.endswith("/embeddings")}
    assert asked == {"text-embedding-3-small"}
    # a run that embeds nothing names no embedding model
    run = ragbridge.evaluate(example_cases[:3], backends=["ragas"], metrics=["faithfulness"], judge=judge)
    assert run.manifest.judge["embedding_model"] is None
    # a folder whose run.json named none (what it used was RAGAS's default) resumes
    manifest["judge"]["embedding_model"] = None
    (tmp_path / "run" / "run.json").write_text(json.dumps(manifest), encoding="utf-8")
    again = ragbridge.evaluate(example_cases[:3], **EMBEDS, judge=judge, out=tmp_path / "run")
    assert again.manifest.counts["resumed_from"] == 3
