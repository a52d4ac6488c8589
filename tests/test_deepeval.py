"""The DeepEval backend end to end: DeepEval's real metric classes, ragbridge's real judge gateway and
the stub judge over 127.0.0.1 (no mocks inside either library). What every backend keeps
(registering without importing DeepEval, errors as scores, no egress, ...) is the backend contract's
(tests/test_backend_contract.py)."""

from __future__ import annotations

import asyncio
import json
import os

import pytest

from conftest import needs_library  # noqa: E402

pytestmark = needs_library("deepeval")

import ragbridge  # noqa: E402  (applies the privacy defaults before DeepEval is imported)
from ragbridge.backend import RunOptions  # noqa: E402
from ragbridge.formats.canonical import read_jsonl  # noqa: E402
from ragbridge.schema import Case, Score  # noqa: E402
from ragbridge.testing import StubJudge  # noqa: E402

from conftest import EXAMPLE, ragbridge_cli, stub_judge_config  # noqa: E402

from ragbridge_deepeval import metrics as deepeval_metrics  # noqa: E402
from ragbridge_deepeval import translate  # noqa: E402
from ragbridge_deepeval.backend import DeepEvalBackend, structured_outputs  # noqa: E402

METRICS = list(deepeval_metrics.METRICS)
STRUCTURED = "gpt-4o-mini"  # in DeepEval's registry: json_schema structured outputs, GEval logprobs
PLAIN = "stub-judge"  # unknown to DeepEval: plain prompts, JSON cut out of the text
GOOD = "billing-refund-window"
FLAWED = ("notifications-sms-cost", "claims-damage-deadline")
PICK = (GOOD,) + FLAWED


@pytest.fixture(scope="module")
def all_cases() -> dict[str, Case]:
    return {c.id: c for c in read_jsonl(EXAMPLE)}


@pytest.fixture(scope="module")
def picked(all_cases) -> list[Case]:
    return [all_cases[i] for i in PICK]


@pytest.fixture(scope="module")
def stub():
    with StubJudge() as s:
        yield s


def run_deepeval(cases, stub, model, tmp_path, metrics=None, **opts):
    return ragbridge.evaluate(
        cases, backends=["deepeval"], metrics=metrics,
        judge=stub_judge_config(stub, model, api_key_env="RAGBRIDGE_TEST_KEY"),
        options=RunOptions(backend_options={"deepeval": opts}) if opts else None,
    )


def by_key(run) -> dict[tuple[str, str], Score]:
    return {(s.case_id, s.metric): s for s in run.scores}


# ------------------------------------------------------------------------------------------------
# Metrics and translation
# ------------------------------------------------------------------------------------------------


def test_metric_specs_declare_inputs():
    specs = {s.name: s for s in DeepEvalBackend().metrics()}
    assert set(specs) == {"faithfulness", "answer_relevance", "context_precision", "context_recall",
                          "context_relevance", "answer_correctness"}
    assert all(s.judge for s in specs.values())
    assert specs["faithfulness"].requires == ("question", "answer", "context_text")
    assert specs["answer_correctness"].requires == ("question", "answer", "reference")
    assert specs["context_precision"].native_name == "Contextual Precision"


def test_case_to_test_case_mapping():
    case = Case(id="c1", question="q?", answer="a.", reference="r.", reference_contexts=["gold"],
                tags=["t"], contexts=[{"id": "x", "text": "one"}, {"id": "y", "text": ""},
                                      {"id": "x", "text": "one"}, {"id": "z", "text": "two"}])
    tc = translate.to_test_case(case)
    assert (tc.input, tc.actual_output, tc.expected_output, tc.name) == ("q?", "a.", "r.", "c1")
    assert tc.retrieval_context == ["one", "two"]  # empty chunk dropped, repeated id counted once
    assert tc.context == ["gold"] and tc.tags == ["t"]


def test_fresh_metric_instance_per_call():
    from deepeval.models import OpenAIModel

    model = OpenAIModel(model=PLAIN, base_url="http://127.0.0.1:9/v1", api_key="x")
    for metric in METRICS:
        a, b = deepeval_metrics.make_metric(metric, model), deepeval_metrics.make_metric(metric, model)
        assert a is not b and type(a) is type(b)
    geval = deepeval_metrics.make_metric("answer_correctness", model)
    assert geval.evaluation_steps == deepeval_metrics.CORRECTNESS_STEPS and geval.score_range == (0, 10)


def test_structured_outputs_follow_deepeval_registry():
    assert structured_outputs(STRUCTURED) and structured_outputs("gpt-4.1")
    assert not structured_outputs(PLAIN) and not structured_outputs("llama3.1:8b")
    from deepeval.models import OpenAIModel

    for name in (STRUCTURED, PLAIN, "openai/gpt-4o-mini", "gpt-4o"):  # the same decision as DeepEval's
        m = OpenAIModel(model=name, base_url="http://127.0.0.1:9/v1", api_key="x")
        assert structured_outputs(name) == bool(m.supports_structured_outputs()), name


# ------------------------------------------------------------------------------------------------
# Scoring through the judge: both wire formats
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("model", [STRUCTURED, PLAIN])
def test_scores_every_metric_through_the_gateway(stub, picked, tmp_path, model):
    stub.reset()
    run = run_deepeval(picked, stub, model, tmp_path)
    scores = by_key(run)
    assert len(scores) == len(picked) * len(METRICS)
    for (cid, metric), s in scores.items():
        assert s.error is None, (cid, metric, s.error)
        assert s.value is not None and 0.0 <= s.value <= 1.0
        assert s.native_metric == deepeval_metrics.METRICS[metric].native_name
        assert s.native_value == pytest.approx(s.value)
        assert isinstance(s.passed, bool) and s.passed == (s.native_value >= 0.5)
        assert s.reason, (cid, metric)
        assert s.judge_calls >= 1 and s.prompt_tokens > 0
    # DeepEval's multi-step metrics: 4 calls for faithfulness (truths, claims, verdicts, reason), 1 for
    # GEval with fixed steps, one per chunk + 1 for contextual relevancy.
    assert scores[(GOOD, "faithfulness")].judge_calls == 4
    assert scores[(GOOD, "answer_correctness")].judge_calls == 1
    n_chunks = len({c.id for c in picked[0].contexts})
    assert scores[(GOOD, "context_relevance")].judge_calls == n_chunks + 1

    posts = stub.posts("/chat/completions")
    assert posts and all(p.body["model"] == model for p in posts)
    formats = [(p.body.get("response_format") or {}).get("type") for p in posts]
    if model == STRUCTURED:
        # every request but GEval's score call (log-probabilities, no response_format) is strict json_schema
        logprob_calls = [p for p in posts if p.body.get("logprobs")]
        assert len(logprob_calls) == len(picked)
        assert all(f == "json_schema" for p, f in zip(posts, formats) if not p.body.get("logprobs"))
        assert all(p.body["response_format"]["json_schema"]["strict"]
                   for p in posts if not p.body.get("logprobs"))
    else:
        assert set(formats) == {None} and not any(p.body.get("logprobs") for p in posts)
    assert all(p.body.get("temperature") == 0 for p in posts)

    # the faithful answer beats the flawed ones where the metric looks at the answer
    for metric in ("faithfulness", "answer_correctness"):
        assert all(scores[(GOOD, metric)].value > scores[(f, metric)].value for f in FLAWED), metric


def test_empty_extraction_is_undefined_not_a_score(stub, tmp_path):
    # An answer with no sentence to extract: DeepEval scores faithfulness 1 "by convention".
    case = Case(id="empty", question="Refund window?", answer=" ",
                contexts=[{"id": "a", "text": "Refunds: 14 days."}])
    # the runner would skip a blank answer, so call the backend directly
    from ragbridge.judge import JudgeGateway

    from ragbridge.backend import RunOptions, ScoringContext

    with JudgeGateway(stub_judge_config(stub, PLAIN, api_key_env="RAGBRIDGE_TEST_KEY")) as gw:
        backend = DeepEvalBackend()
        ctx = ScoringContext(options=RunOptions(), judge=gw)

        async def scored():
            session = await backend.open(ctx)
            try:
                return [s async for s in backend.score("faithfulness", [case], ctx.for_session(session))]
            finally:
                await backend.close(ctx.for_session(session))

        [s] = asyncio.run(scored())
    assert s.error is None
    assert s.value is None and s.native_value == 1.0
    assert "undefined" in s.reason and "claims" in s.reason


# ------------------------------------------------------------------------------------------------
# Parity with DeepEval's own measure()
# ------------------------------------------------------------------------------------------------


def deepeval_measure(metric: str, case: Case, model_name: str, base_url: str):
    """DeepEval used directly, the way its docs show, on a hand-built LLMTestCase."""
    from deepeval.metrics import (AnswerRelevancyMetric, ContextualPrecisionMetric, ContextualRecallMetric,
                                  ContextualRelevancyMetric, FaithfulnessMetric, GEval)
    from deepeval.metrics.g_eval.utils import Rubric
    from deepeval.models import OpenAIModel
    from deepeval.test_case import LLMTestCase, SingleTurnParams

    seen, texts = set(), []
    for c in case.contexts:
        if c.id not in seen and c.text:
            seen.add(c.id)
            texts.append(c.text)
    tc = LLMTestCase(input=case.question, actual_output=case.answer, expected_output=case.reference,
                     retrieval_context=texts)
    model = OpenAIModel(model=model_name, base_url=base_url, api_key="sk-direct", temperature=0)
    if metric == "answer_correctness":
        m = GEval(name="Correctness", model=model,
                  evaluation_params=[SingleTurnParams.INPUT, SingleTurnParams.ACTUAL_OUTPUT,
                                     SingleTurnParams.EXPECTED_OUTPUT],
                  evaluation_steps=deepeval_metrics.CORRECTNESS_STEPS,
                  rubric=[Rubric(score_range=r, expected_outcome=o)
                          for r, o in deepeval_metrics.CORRECTNESS_RUBRIC])
    else:
        cls = {"faithfulness": FaithfulnessMetric, "answer_relevance": AnswerRelevancyMetric,
               "context_precision": ContextualPrecisionMetric, "context_recall": ContextualRecallMetric,
               "context_relevance": ContextualRelevancyMetric}[metric]
        m = cls(model=model)
    m.measure(tc, _show_indicator=False)
    return m


@pytest.mark.parametrize("model", [STRUCTURED, PLAIN])
def test_parity_with_deepeval_measure(stub, picked, tmp_path, model):
    cases = picked[:2]  # one faithful, one flawed (DeepEval alone builds a TLS context per call: slow)
    run = run_deepeval(cases, stub, model, tmp_path)
    ours = by_key(run)
    for case in cases:
        for metric in METRICS:
            direct = deepeval_measure(metric, case, model, stub.base_url)
            s = ours[(case.id, metric)]
            assert s.native_value == direct.score, (case.id, metric)
            assert s.value == pytest.approx(direct.score), (case.id, metric)
            assert s.passed == direct.success and s.reason == direct.reason, (case.id, metric)


def test_backend_options(stub, picked, tmp_path):
    run = run_deepeval(picked, stub, PLAIN, tmp_path, metrics=["faithfulness", "answer_relevance"],
                       threshold={"faithfulness": 1.0, "answer_relevance": 0.0}, include_reason=False)
    s = by_key(run)
    faith = [s[(c.id, "faithfulness")] for c in picked]
    assert [x.passed for x in faith] == [x.value >= 1.0 for x in faith] and not all(x.passed for x in faith)
    assert all(s[(c.id, "answer_relevance")].passed is True for c in picked)
    assert s[(GOOD, "faithfulness")].judge_calls == 3  # no reason call
    with pytest.raises(ragbridge.RunError, match="the deepeval backend has no option 'treshold'; "
                                                 "its options: concurrency, structured_output, threshold,"):
        run_deepeval(picked[:1], stub, PLAIN, tmp_path, treshold=0.7)


# ------------------------------------------------------------------------------------------------
# DeepEval's own failures
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("model,expected", [(PLAIN, "DeepEvalError"), (STRUCTURED, "ValidationError")])
def test_malformed_answer_is_that_scores_error(picked, tmp_path, model, expected):
    with StubJudge() as s:
        s.inject("malformed")  # the first request of the run gets broken JSON; DeepEval does not retry it
        run = run_deepeval(picked, s, model, tmp_path, metrics=["context_precision"], concurrency=1)
    scores = run.scores
    errored = [x for x in scores if x.error]
    assert len(scores) == len(picked) and len(errored) == 1
    assert errored[0].value is None and expected in errored[0].error
    assert all(x.value is not None for x in scores if not x.error)


# ------------------------------------------------------------------------------------------------
# The judge settings DeepEval is given
# ------------------------------------------------------------------------------------------------


def test_judge_settings_reach_deepeval_requests(picked, tmp_path):
    """Model, max_tokens and the gateway's own key (never the real key) come from the judge config."""
    with StubJudge() as s:
        cfg = stub_judge_config(s, PLAIN, api_key_env="RAGBRIDGE_TEST_KEY", max_tokens=321)
        os.environ["RAGBRIDGE_TEST_KEY"] = "sk-real-secret-key"
        try:
            run = ragbridge.evaluate(picked[:1], backends=["deepeval"], metrics=["context_recall"], judge=cfg)
        finally:
            del os.environ["RAGBRIDGE_TEST_KEY"]
        posts = s.posts("/chat/completions")
    assert run.scores[0].error is None and len(posts) == 2
    assert all(p.body["max_tokens"] == 321 and p.body["model"] == PLAIN for p in posts)
    # the gateway forwards the real key upstream; DeepEval itself only ever held the gateway's own
    assert s.last_authorization == "Bearer sk-real-secret-key"
    import httpx

    from ragbridge.judge import JudgeGateway
    from ragbridge_deepeval.backend import build_judge

    with JudgeGateway(cfg) as gw:
        http_client = httpx.AsyncClient(transport=gw.async_transport())
        sync_client = httpx.Client(transport=gw.transport())
        model = build_judge(gw, "faithfulness", GOOD, http_client=http_client, sync_http_client=sync_client)
        # the synchronous OpenAI client DeepEval builds with every judge object uses the run's client
        # (one made anew loads the CA bundle: tens of ms per case, on the event loop)
        assert model.model._client is sync_client
        assert model.api_key.get_secret_value() == gw.api_key != "sk-real-secret-key"
        assert model.base_url == gw.base_url("deepeval", "faithfulness", GOOD, in_process=True)
        assert not gw.listening  # in-process: no socket was opened
        assert model.generation_kwargs == {"max_tokens": 321} and model.temperature == 0


@pytest.mark.parametrize("model", [STRUCTURED, PLAIN])
def test_stub_reads_texts_that_start_like_an_instruction(stub, all_cases, tmp_path, model):
    """The reference "Return labels are valid ..." is judged as text, not taken for an instruction."""
    case = all_cases["returns-label-validity"]
    assert case.reference.startswith("Return ")
    s = run_deepeval([case], stub, model, tmp_path, metrics=["context_recall"]).scores[0]
    assert s.error is None and s.value == 1.0, s.reason


def test_the_threshold_option_is_the_runs_pass_mark(stub, picked, tmp_path):
    """deepeval.threshold=0.7 is DeepEval's success and the run's pass mark: run.json's pass_marks,
    to_frame, the report and compare judge at 0.7, where DeepEval does; a run without it keeps the
    metric's default pass mark."""
    from ragbridge.verdicts import pass_mark

    judge = stub_judge_config(stub, PLAIN, api_key_env="RAGBRIDGE_TEST_KEY")
    runs = []
    for name in ("a", "b"):
        runs.append(ragbridge.evaluate(
            picked, backends=["deepeval"], metrics=["context_relevance"], judge=judge, out=tmp_path / name,
            options=RunOptions(backend_options={"deepeval": {"threshold": 0.7}})))
    manifest = json.loads((tmp_path / "a" / "run.json").read_text())
    assert manifest["pass_marks"] == {"deepeval": {"context_relevance": 0.7}}
    frame = runs[0].to_frame()
    assert set(frame["pass_mark"]) == {0.7}
    assert list(frame["passed"]) == list(frame["library_passed"]) == list(frame["value"] >= 0.7)
    done = ragbridge_cli("compare", tmp_path / "a", tmp_path / "b", "--json")
    assert done.returncode == 0, done.stderr
    row = json.loads(done.stdout)["agreement"][0]
    assert row["threshold_a"] == row["threshold_b"] == 0.7
    done = ragbridge_cli("report", tmp_path / "a", "--format", "json", "-o", tmp_path / "r.json")
    assert done.returncode == 0, done.stderr
    summary = json.loads((tmp_path / "r.json").read_text())["summary"]
    assert [r["threshold"] for r in summary if r["backend"] == "deepeval"] == [0.7]
    plain = ragbridge.evaluate(picked[:1], backends=["deepeval"], metrics=["context_relevance"], judge=judge,
                               out=tmp_path / "plain")
    assert json.loads((tmp_path / "plain" / "run.json").read_text())["pass_marks"] == {}
    assert pass_mark(plain.manifest, "deepeval", "context_relevance")[0] != 0.7
