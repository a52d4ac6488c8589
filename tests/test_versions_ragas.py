"""The RAGAS backend at every RAGAS version its plugin supports (a lock shipped for each): every
metric it offers scores as that version's own API does, by hand, in the same environment, against
the stub judge (which answers each version's prompts).

RAGAS 0.2.15 has no ``ragas.metrics.collections``: its own call is ``ragas.evaluate`` with its
``ragas.metrics`` classes and its LangChain wrappers, as a team scoring with 0.2 wrote it. RAGAS 0.3.9
and 0.4.3 are called through their collections metrics' ``ascore``. The older versions run in their
environments (``--backend ragas==0.2.15``, built from uv's cache into the session's cache folder),
the current one in process (``--backend ragas``).
"""

import json
import math
import subprocess
import sys
import textwrap

import pytest

from conftest import EXAMPLE, needs_backend, ragbridge_cli
from test_environments import cached, env_cache  # noqa: F401  (the session's environments)
from test_stub_recognition import plugin_responders

from ragbridge.stub.responders import JudgeRequest, respond
from ragbridge.testing import StubJudge

METRICS = ("faithfulness", "answer_relevance", "context_precision", "context_recall", "context_relevance",
           "answer_correctness")

#: the library's own call, run with the environment's Python: ``python - GOLDEN BASE_URL`` prints
#: ``{"version": ..., metric: [raw value per sample, null for NaN], ...}``
OWN = textwrap.dedent("""
    import asyncio, json, os, sys, warnings
    warnings.filterwarnings("ignore")
    os.environ["RAGAS_DO_NOT_TRACK"] = "true"
    from importlib.metadata import version

    path, base = sys.argv[1:3]
    rows = [json.loads(line) for line in open(path)]
    V = version("ragas")
    NAMES = %r

    if V.startswith("0.2."):
        from langchain_openai import ChatOpenAI, OpenAIEmbeddings
        from ragas import EvaluationDataset, evaluate
        from ragas.embeddings import LangchainEmbeddingsWrapper
        from ragas.llms import LangchainLLMWrapper
        from ragas.metrics import (ContextRelevance, FactualCorrectness, Faithfulness,
                                   LLMContextPrecisionWithReference, LLMContextRecall, ResponseRelevancy)

        llm = LangchainLLMWrapper(ChatOpenAI(model="stub-judge", base_url=base, api_key="x", max_tokens=4096))
        emb = LangchainEmbeddingsWrapper(OpenAIEmbeddings(model="stub-embedder", base_url=base, api_key="x",
                                                          check_embedding_ctx_length=False))
        metrics = [Faithfulness(), ResponseRelevancy(), LLMContextPrecisionWithReference(),
                   LLMContextRecall(), ContextRelevance(), FactualCorrectness(mode="f1")]
        frame = evaluate(EvaluationDataset.from_jsonl(path), metrics=metrics, llm=llm, embeddings=emb,
                         show_progress=False, raise_exceptions=True).to_pandas()
        columns = [m.name + (f"(mode={m.mode})" if hasattr(m, "mode") else "") for m in metrics]
        out = {n: frame[c].tolist() for n, c in zip(NAMES, columns)}
    else:
        from openai import AsyncOpenAI
        from ragas.embeddings import OpenAIEmbeddings
        from ragas.llms import llm_factory
        from ragas.metrics.collections import (AnswerRelevancy, ContextPrecisionWithReference, ContextRecall,
                                               ContextRelevance, FactualCorrectness, Faithfulness)

        async def main():
            client = AsyncOpenAI(base_url=base, api_key="x")
            llm = llm_factory("stub-judge", client=client, max_tokens=4096)
            emb = OpenAIEmbeddings(client=client, model="stub-embedder")
            metrics = [
                (Faithfulness(llm=llm), ("user_input", "response", "retrieved_contexts")),
                (AnswerRelevancy(llm=llm, embeddings=emb), ("user_input", "response")),
                (ContextPrecisionWithReference(llm=llm), ("user_input", "reference", "retrieved_contexts")),
                (ContextRecall(llm=llm), ("user_input", "reference", "retrieved_contexts")),
                (ContextRelevance(llm=llm), ("user_input", "retrieved_contexts")),
                (FactualCorrectness(llm=llm, mode="f1"), ("response", "reference")),
            ]
            res = {}
            for name, (m, keys) in zip(NAMES, metrics):
                res[name] = [(await m.ascore(**{k: r[k] for k in keys})).value for r in rows]
            await client.close()
            return res

        out = asyncio.run(main())
    print(json.dumps({"version": V, **{k: [None if v != v else v for v in vs] for k, vs in out.items()}}))
""") % (METRICS,)


@pytest.fixture(scope="module")
def golden(tmp_path_factory):
    """Six cases of the bundled example, written by RAGAS' own ``EvaluationDataset.to_jsonl``."""
    from ragas import EvaluationDataset, SingleTurnSample

    rows = [json.loads(line) for line in EXAMPLE.read_text().splitlines()[:6]]
    samples = [SingleTurnSample(user_input=r["question"], response=r["answer"], reference=r["reference"],
                                retrieved_contexts=[c["text"] for c in r["contexts"]]) for r in rows]
    path = tmp_path_factory.mktemp("golden") / "golden.ragas.jsonl"
    EvaluationDataset(samples=samples).to_jsonl(str(path))
    return path


@pytest.mark.slow
@needs_backend("ragas")
@pytest.mark.parametrize("version", ["0.2.15", "0.3.9", "0.4.3"])
def test_every_metric_scores_as_the_versions_own_call(version, golden, cached, tmp_path):  # noqa: F811
    from ragbridge.run.isolated import prepare

    if version == "0.4.3":  # the installed RAGAS, in process
        from importlib.metadata import version as installed

        if installed("ragas") != version:
            pytest.skip(f"RAGAS {installed('ragas')} is installed, not {version}")
        backend, python = "ragas", sys.executable
    else:
        backend = f"ragas=={version}"
        python = str(prepare([backend])[backend].python)
    out = tmp_path / "run"
    with StubJudge() as stub:
        done = ragbridge_cli("run", golden, "--out", out, "--backend", backend, "--judge-model", "stub-judge",
                             "--embedding-model", "stub-embedder", "--judge-base-url", stub.base_url,
                             "--no-progress", "--cache-mode", "off")
        own = subprocess.run([python, "-", str(golden), stub.base_url], input=OWN, capture_output=True,
                             text=True, timeout=600, cwd=tmp_path)
        asked = [JudgeRequest.from_chat(p.body) for p in stub.posts() if p.path == "/chat/completions"]
    assert done.returncode == 0, done.stderr
    assert own.returncode == 0, own.stderr[-3000:]
    theirs = json.loads(own.stdout.splitlines()[-1])
    assert theirs["version"] == version
    manifest = json.loads((out / "run.json").read_text())
    assert manifest["backends"] == {backend: version}
    order = [json.loads(line)["id"] for line in (out / "cases.jsonl").read_text().splitlines()]
    lines = (out / "scores.jsonl").read_text().splitlines()
    scores = {(s["metric"], s["case_id"]): s for s in map(json.loads, lines)}
    assert {m for m, _ in scores} == set(METRICS) and len(scores) == len(METRICS) * len(order)
    for metric in METRICS:
        ours = [scores[(metric, cid)] for cid in order]
        assert all(s["error"] is None for s in ours), (metric, [s["error"] for s in ours])
        assert all(s["judge_calls"] >= 1 for s in ours), metric  # each through the run's gateway
        raw = [s["native_value"] for s in ours]
        for cid, mine, their in zip(order, raw, theirs[metric]):
            if their is None or (isinstance(their, float) and math.isnan(their)):
                assert mine is None, (metric, cid, mine)
            else:
                assert mine == pytest.approx(their, abs=1e-6), (metric, cid, mine, their)
    # the stub spoke this version's prompts: every one answered by RAGAS' responder, claimed by no other
    others = [r for name, rs in plugin_responders().items() if name != "ragas" for r in rs]
    assert asked
    for req in asked:
        assert respond(req).responder == "ragas", req.prompt[:300]
        assert not [r for r in others if r(req) is not None], req.prompt[:300]
    defined = [v for m in METRICS for v in theirs[m] if v is not None]
    assert len(set(defined)) > 5  # the judge's answers mattered: not one constant everywhere


@pytest.mark.slow
def test_ragas_0_2_out_of_range_verdicts_are_errors(golden, cached, tmp_path):  # noqa: F811
    """RAGAS 0.2.15 takes any integer where its prompt states 0/1 (its context precision reply model,
    ``Verification``, has no name in common with 0.4's), as 0.4 does: the reply of each of its prompts
    is checked, and the score is an error saying what the judge replied."""
    from test_silent_values import _OutOfRange

    metric, field, value = "context_precision", "verdict", 2
    out = tmp_path / "run"
    with _OutOfRange(field, value) as stub:
        done = ragbridge_cli("run", golden, "--out", out, "--backend", "ragas==0.2.15", "--metric", metric,
                             "--judge-model", "stub-judge", "--embedding-model", "stub-embedder",
                             "--judge-base-url", stub.base_url, "--no-progress", "--cache-mode", "off")
    assert done.returncode == 3, done.stdout + done.stderr
    scores = [json.loads(line) for line in (out / "scores.jsonl").read_text().splitlines()]
    assert len(scores) == 6
    for s in scores:
        assert s["value"] is None and f"the judge replied {field} = {value}" in s["error"], s
