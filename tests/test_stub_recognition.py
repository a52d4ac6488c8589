"""Each library's responder recognises that library's real requests, and only those.

The requests come from the installed library itself: a real run of every metric of its backend
against the stub judge (one case), in each of the request shapes the backend can send (DeepEval
with a model it knows, which gets strict ``json_schema`` requests, and with one it does not, which
gets plain prompts; TruLens over the chat and the Responses API, with the LLM sentence splitter).
Every request must be answered by the library's own responder, and no other plugin's responder may
claim it: recognition is keyed on what the library itself puts in its requests (its structured-
output schema, its templates' slots and field names), so a prompt of one library never reaches
another's parser.
"""

from __future__ import annotations

import importlib.util

import pytest

import ragbridge
from conftest import EXAMPLE, stub_judge_config
from ragbridge.backend import RunOptions
from ragbridge.plugins import load_plugins
from ragbridge.testing import StubJudge
from ragbridge.stub.responders import JudgeRequest, respond

#: (backend, judge model, backend options, the module its library needs)
SHAPES = {
    "ragas": ("ragas", "stub-judge", {}, "ragas"),
    "deepeval-json-schema": ("deepeval", "gpt-4o-mini", {}, "deepeval"),
    "deepeval-plain": ("deepeval", "stub-judge", {}, "deepeval"),
    "trulens-chat": ("trulens", "stub-judge", {"api": "chat"}, "trulens"),
    "trulens-responses": ("trulens", "stub-judge", {"api": "responses", "sentence_split": "llm"}, "trulens"),
    "phoenix": ("phoenix", "gpt-4o-mini", {}, "phoenix.evals"),
    "rubric-json-schema": ("rubric", "gpt-4o-mini", {"structured_output": "schema"}, None),
    "rubric-prompt": ("rubric", "stub-judge", {"structured_output": "prompt"}, None),
}


def _installed(module: str | None) -> bool:
    if module is None:
        return True
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def plugin_responders() -> dict[str, list]:
    """Each plugin's responders (by the name they answer under), as its hook registers them."""
    found: dict[str, list] = {}
    for plugin in load_plugins().get_plugins():
        hook = getattr(plugin, "ragbridge_register_stub_responders", None)
        if hook is None:
            continue
        mine: list = []
        hook(register=lambda *responders, first=True: mine.extend(responders))
        for responder in mine:
            found.setdefault(responder.name, []).append(responder)
    return found


def requests_of(shape: str, tmp_path, monkeypatch) -> list[JudgeRequest]:
    backend, model, options, needs = SHAPES[shape]
    if not _installed(needs):
        pytest.skip(f"{needs} is not installed (pip install -e '.[{backend}]' -c constraints.txt)")
    monkeypatch.setenv("RAGBRIDGE_TEST_KEY", "sk-recognition-test-key-0123456789")
    case = [c for c in ragbridge.load_cases(EXAMPLE) if c.id == "billing-refund-window"]
    with StubJudge() as stub:
        cfg = stub_judge_config(stub, model, tmp_path / "cache.sqlite", api_key_env="RAGBRIDGE_TEST_KEY",
                                embedding_model="stub-embedder")
        run = ragbridge.evaluate(case, backends=[backend], judge=cfg,
                                 options=RunOptions(backend_options={backend: options}) if options else None)
        posts = stub.posts()
    assert run.scores and not [s for s in run.scores if s.error], [s.error for s in run.scores if s.error]
    reqs = [JudgeRequest.from_chat(p.body) if p.path == "/chat/completions"
            else JudgeRequest.from_responses(p.body)
            for p in posts if p.path in ("/chat/completions", "/responses")]
    assert reqs, f"{backend} sent no judge request"
    return reqs


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_librarys_real_requests_are_recognised_by_its_responder_only(shape, tmp_path, monkeypatch):
    backend = SHAPES[shape][0]
    reqs = requests_of(shape, tmp_path, monkeypatch)
    everyone = plugin_responders()
    assert backend in everyone, f"no responder registered for {backend}: {sorted(everyone)}"
    for req in reqs:
        assert respond(req).responder == backend, req.prompt[:300]
        for other, responders in everyone.items():
            if other == backend:
                continue
            claimed = [r for r in responders if r(req) is not None]
            assert not claimed, f"{other}'s responder claims a {backend} request: {req.prompt[:300]}"


def test_deepevals_plain_prompts_are_answered_with_the_fields_of_deepevals_own_models():
    """`KINDS` copies the fields (and verdict choices) of DeepEval's output models: the installed
    DeepEval's models must have exactly those."""
    pytest.importorskip("deepeval")
    from deepeval.metrics.answer_relevancy import schema as answer_relevancy
    from deepeval.metrics.contextual_precision import schema as contextual_precision
    from deepeval.metrics.contextual_recall import schema as contextual_recall
    from deepeval.metrics.contextual_relevancy import schema as contextual_relevancy
    from deepeval.metrics.faithfulness import schema as faithfulness
    from deepeval.metrics.g_eval import schema as g_eval
    from ragbridge_deepeval.stub import KINDS

    models = {
        "Truths": faithfulness.Truths, "Claims": faithfulness.Claims,
        "FaithfulnessVerdict": faithfulness.FaithfulnessVerdict,
        "Statements": answer_relevancy.Statements,
        "AnswerRelevancyVerdict": answer_relevancy.AnswerRelevancyVerdict,
        "ContextualPrecisionVerdict": contextual_precision.ContextualPrecisionVerdict,
        "ContextualRecallVerdict": contextual_recall.ContextualRecallVerdict,
        "ContextualRelevancyVerdict": contextual_relevancy.ContextualRelevancyVerdict,
        "ScoreReason": faithfulness.FaithfulnessScoreReason,
        "Steps": g_eval.Steps, "ReasonScore": g_eval.ReasonScore,
    }
    assert set(models) == set(KINDS)
    for kind, model in models.items():
        fields = KINDS[kind]["properties"]
        if "verdicts" in fields:
            fields = fields["verdicts"]["items"]["properties"]
        assert set(fields) == set(model.model_fields), kind
        if "verdict" in fields:
            choices = model.model_json_schema()["properties"]["verdict"]["enum"]
            assert fields["verdict"]["enum"] == choices, kind
