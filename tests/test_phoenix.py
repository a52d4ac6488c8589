"""The Phoenix backend end to end: Phoenix evals' real evaluator classes, ragbridge's real judge gateway
and the stub judge over 127.0.0.1 (no mocks inside either): the metrics and label maps, the stub's
answers to Phoenix's prompts, parity with Phoenix's own evaluators, a run beside other backends with
compare and report, Phoenix's own failures, and Phoenix's spans. What every backend keeps (registering
without importing Phoenix, errors as scores, no egress, ...) is the backend contract's
(tests/test_backend_contract.py)."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import os
import subprocess
import sys
import textwrap
from collections import Counter

import pytest

from conftest import needs_library  # noqa: E402

pytestmark = needs_library("phoenix.evals")

import ragbridge  # noqa: E402
from ragbridge.backend import RunOptions, ScoringContext  # noqa: E402
from ragbridge.formats.canonical import read_jsonl  # noqa: E402
from ragbridge.judge import JudgeGateway  # noqa: E402
from ragbridge.plugins import get_backends  # noqa: E402
from ragbridge.schema import Case, Score  # noqa: E402
from ragbridge.testing import StubJudge  # noqa: E402
from ragbridge.stub.responders import JudgeReply, JudgeRequest, register, unregister  # noqa: E402

from conftest import EXAMPLE, ragbridge_cli, stub_judge_config  # noqa: E402

from ragbridge_phoenix import env, translate  # noqa: E402
from ragbridge_phoenix import metrics as phx_metrics  # noqa: E402
from ragbridge_phoenix.backend import PhoenixBackend, PhoenixSession  # noqa: E402
from ragbridge_phoenix.stub import PhoenixResponder  # noqa: E402

METRICS = phx_metrics.METRICS
MODEL = "gpt-4o-mini"
GOOD = "billing-refund-window"
#: the example's deliberately unfaithful answers
UNFAITHFUL = ("notifications-sms-cost", "claims-damage-deadline", "account-password-reset-link",
              "unanswerable-carbon-neutral")
PICK = (GOOD, "notifications-sms-cost", "claims-damage-deadline", "unanswerable-shopify-app",
        "unanswerable-carbon-neutral")


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


def run_phoenix(cases, stub, metrics=None, out=None, options=None, **judge_kw):
    opts = RunOptions(backend_options={"phoenix": options}) if options else None
    judge = stub_judge_config(stub, MODEL, api_key_env="RAGBRIDGE_TEST_KEY", **judge_kw)
    return ragbridge.evaluate(cases, backends=["phoenix"], metrics=metrics, judge=judge, out=out,
                              options=opts)


def by_key(run) -> dict[tuple[str, str], Score]:
    return {(s.case_id, s.metric): s for s in run.scores}


def bodies(stub: StubJudge) -> Counter:
    return Counter(json.dumps(p.body, sort_keys=True) for p in stub.posts("/chat/completions"))


def without_backend_defaults() -> dict[str, str]:
    """The test process's environment without the defaults conftest applied for every backend: a
    subprocess then relies on the run applying them, as in a user's shell."""
    names = {n for b in get_backends().values() for n in b.environment()}
    return {k: v for k, v in os.environ.items() if k not in names}


# ------------------------------------------------------------------------------------------------
# Metrics, records and options
# ------------------------------------------------------------------------------------------------


def test_registering_imports_neither_pandas_nor_openai():
    """Beside the backend contract's check of Phoenix itself: finding ``phoenix.evals`` loads only the
    namespace package ``phoenix``, and nothing Phoenix depends on is imported by registering."""
    code = textwrap.dedent("""
        import sys
        from ragbridge.plugins import get_backends
        b = get_backends()["phoenix"]
        print(b.available(), len(b.metrics()), "pandas" in sys.modules or "openai" in sys.modules)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "3", "False"]


def test_metric_specs_and_phoenix_label_maps():
    from phoenix.evals import metrics as pm

    specs = {s.name: s for s in get_backends()["phoenix"].metrics()}
    assert {n: (s.native_name, s.requires, s.judge) for n, s in specs.items()} == {
        "faithfulness": ("faithfulness", ("question", "answer", "context_text"), True),
        "context_relevance": ("retrieval_relevance", ("question", "context_text"), True),
        "abstention": ("refusal", ("question", "answer"), True),
    }
    for m in METRICS.values():
        cls = getattr(pm, m.evaluator)
        assert (cls.NAME, cls.CHOICES, cls.DIRECTION) == (m.native_name, m.label_scores, m.direction), m.name
        assert m.label_scores[m.passing] == 1.0 and set(m.label_scores.values()) == {0.0, 1.0}
    # Phoenix's prompts, pinned: an upgrade that rewrites them shows up here first
    prompts = {m.name: hashlib.sha256(json.dumps(getattr(pm, m.evaluator).PROMPT.template,
                                                 sort_keys=True).encode()).hexdigest()[:16]
               for m in METRICS.values()}
    assert prompts == {"faithfulness": "84dd032eba8ca4ce", "context_relevance": "c97a60969cfe8f5e",
                       "abstention": "0ce8d04e8dfaa1ba"}
    assert PhoenixBackend().environment() == env.ENVIRONMENT


def test_records_join_chunks_with_one_separator(all_cases):
    case = all_cases["returns-label-validity"]  # lists one chunk id twice
    ids = [c.id for c in case.contexts]
    assert len(ids) > len(set(ids))
    texts = [t for _, t in translate.chunks(case)]
    assert len(texts) == len(set(ids))
    assert translate.record(METRICS["faithfulness"], case) == {
        "input": case.question, "context": "\n\n".join(texts), "output": case.answer}
    assert translate.record(METRICS["abstention"], case) == {"input": case.question, "output": case.answer}
    per_chunk = translate.chunk_records(case)
    assert [cid for cid, _ in per_chunk] == list(dict.fromkeys(ids))
    assert all(r == {"input": case.question, "context": t} for (_, r), t in zip(per_chunk, texts))
    bare = case.model_copy(update={"contexts": [case.contexts[0].model_copy(update={"text": ""}),
                                                *case.contexts[1:]]})
    assert translate.chunks(bare) == translate.chunks(case)[1:]


def test_options_are_typed_and_a_bad_one_stops_the_run_before_it_starts(stub, picked, tmp_path):
    from ragbridge_phoenix.options import PhoenixOptions

    assert PhoenixOptions(concurrency=2).concurrency == 2
    for bad, words in (({"concurency": 2}, "phoenix.concurency: the phoenix backend has no option "
                                           "'concurency'; its options: concurrency, structured_output, "
                                           "temperature"),
                       ({"concurrency": 0},
                        "phoenix.concurrency must be a whole number of at least 1, got 0"),
                       ({"temperature": "hot"},
                        "phoenix.temperature must be a number from 0 to 2, got 'hot'"),
                       ({"include_explanation": "yes"},
                        "phoenix.include_explanation must be true or false, got 'yes'")):
        with pytest.raises(ragbridge.RunError) as raised:
            run_phoenix(picked[:2], stub, metrics=["faithfulness"], out=tmp_path / "r", options=bad)
        assert words in str(raised.value)
    assert not (tmp_path / "r").exists()


def test_abstention_on_an_answerable_case_is_undefined_without_a_call(stub):
    cases = [Case(id="answerable", question="How long is the refund window?", answer="14 days.",
                  contexts=[{"id": "a", "text": "Refunds within 14 days."}])]
    stub.reset()
    [s] = run_phoenix(cases, stub, metrics=["abstention"]).scores
    assert s.status == "undefined" and s.reason == "case is answerable" and s.judge_calls == 0
    assert stub.request_count == 0


# ------------------------------------------------------------------------------------------------
# The stub judge reads Phoenix's prompts
# ------------------------------------------------------------------------------------------------


def test_stub_answers_phoenix_prompts_lexically(all_cases):
    """Through Phoenix's own prompt templates and JSON schema, json_schema and forced-tool form."""
    from phoenix.evals.llm.wrapper import generate_classification_schema
    from phoenix.evals.metrics import FaithfulnessEvaluator, RefusalEvaluator, RetrievalRelevanceEvaluator

    def ask(cls, record, tool=False):
        [message] = cls.PROMPT.render(variables=record)  # Phoenix sends one user message
        schema = generate_classification_schema(list(cls.CHOICES), True)
        body = {"model": MODEL, "messages": [{"role": "user", "content": message["content"]}]}
        if tool:
            fn = {"name": "extract_structured_data", "parameters": schema}
            body.update(tools=[{"type": "function", "function": fn}],
                        tool_choice={"type": "function", "function": {"name": fn["name"]}})
        else:
            body["response_format"] = {"type": "json_schema", "json_schema": {
                "name": "extract_structured_data", "schema": schema, "strict": True}}
        reply = PhoenixResponder()(JudgeRequest.from_chat(body))
        assert reply is not None and (reply.tool_name == "extract_structured_data") == tool
        answer = json.loads(reply.content)
        assert list(answer) == ["explanation", "label"] and answer["explanation"]
        return answer["label"]

    def faith(cid, tool=False):
        c = all_cases[cid]
        return ask(FaithfulnessEvaluator, translate.record(METRICS["faithfulness"], c), tool)

    assert faith(GOOD) == faith(GOOD, tool=True) == "faithful"
    assert [faith(cid) for cid in UNFAITHFUL] == ["unfaithful"] * len(UNFAITHFUL)
    good = all_cases[GOOD]
    on_topic, other_topic = good.contexts[0].text, all_cases["account-2fa-sms"].contexts[0].text
    assert ask(RetrievalRelevanceEvaluator, {"input": good.question, "context": on_topic}) == "relevant"
    assert ask(RetrievalRelevanceEvaluator, {"input": good.question, "context": other_topic}) == "irrelevant"
    refusals = {cid: ask(RefusalEvaluator, {"input": c.question, "output": c.answer})
                for cid, c in all_cases.items() if not c.answerable}
    assert refusals == {"unanswerable-shopify-app": "refused", "unanswerable-charity-discount": "refused",
                        "unanswerable-dry-ice": "refused", "unanswerable-carbon-neutral": "answered"}
    other = JudgeRequest.from_chat({"model": MODEL, "messages": [{"role": "user", "content": "hello"}]})
    assert PhoenixResponder()(other) is None


# ------------------------------------------------------------------------------------------------
# Parity with Phoenix's own evaluators called directly on the same cases and judge
# ------------------------------------------------------------------------------------------------


def phoenix_direct(base_url: str) -> dict:
    """Phoenix used directly, the way its docs show: one LLM, the evaluators with temperature 0."""
    from phoenix.evals import LLM
    from phoenix.evals.metrics import FaithfulnessEvaluator, RefusalEvaluator, RetrievalRelevanceEvaluator

    llm = LLM(provider="openai", model=MODEL, api_key="sk-direct", base_url=base_url,
              initial_per_second_request_rate=100.0)
    return {"faithfulness": FaithfulnessEvaluator(llm=llm, temperature=0.0),
            "context_relevance": RetrievalRelevanceEvaluator(llm=llm, temperature=0.0),
            "abstention": RefusalEvaluator(llm=llm, temperature=0.0)}


def check_parity(stub: StubJudge, cases: list[Case], asked=bodies) -> int:
    """Our run, then Phoenix's evaluators directly: the same value, label, explanation per score (per
    chunk for context relevance) and the same requests (``asked(stub)``: the very same request
    bodies). Returns the scores compared."""
    for case in cases:  # the records below are built by hand: no repeated or empty chunk here
        assert len({c.id for c in case.contexts}) == len(case.contexts) and all(c.text for c in case.contexts)
    stub.reset()
    ours = by_key(run_phoenix(cases, stub))
    assert len(ours) == 3 * len(cases) and not any(s.error for s in ours.values())
    through_ragbridge = asked(stub)
    stub.reset()
    ev = phoenix_direct(stub.base_url)
    compared = 0
    for case in cases:
        [f] = ev["faithfulness"].evaluate({"input": case.question, "output": case.answer,
                                           "context": "\n\n".join(c.text for c in case.contexts)})
        s = ours[(case.id, "faithfulness")]
        assert (s.value, s.native_value, s.reason) == (f.score, {"label": f.label, "score": f.score},
                                                       f.explanation), case.id
        assert s.passed == (f.label == "faithful") and s.native_metric == f.name == "faithfulness"

        direct = [ev["context_relevance"].evaluate({"input": case.question, "context": c.text})[0]
                  for c in case.contexts]
        s = ours[(case.id, "context_relevance")]
        assert [(r["id"], r["label"], r["score"]) for r in s.native_value["per_chunk"]] == [
            (c.id, d.label, d.score) for c, d in zip(case.contexts, direct)], case.id
        assert [(v.id, v.relevant, v.reason) for v in s.evidence.chunks] == [
            (c.id, d.label == "relevant", d.explanation) for c, d in zip(case.contexts, direct)]
        assert s.value == sum(d.score for d in direct) / len(direct)
        assert all(d.explanation in s.reason for d in direct)

        s = ours[(case.id, "abstention")]
        if case.answerable:
            assert s.value is None and s.reason == "case is answerable" and s.judge_calls == 0
        else:
            [r] = ev["abstention"].evaluate({"input": case.question, "output": case.answer})
            assert (s.value, s.native_value["label"], s.reason) == (r.score, r.label, r.explanation), case.id
        compared += 3
    # the judge saw the same requests from both (by default byte for byte, once parsed)
    assert asked(stub) == through_ragbridge
    assert all(p.body["temperature"] == 0.0 for p in stub.posts("/chat/completions"))
    return compared


def test_parity_with_phoenix_evaluators(stub, picked):
    assert check_parity(stub, picked) == 3 * len(picked)


def refuse_json_schema(stub: StubJudge) -> None:
    """Make a started stub answer 400 to a ``json_schema`` response format, as a server without
    structured outputs does: Phoenix then falls back to a forced tool call."""
    base = stub._server.RequestHandlerClass

    def do_POST(self):  # noqa: N802
        raw = base.read_body(self)
        if b'"json_schema"' in raw:
            self._error(400, "ragbridge test: response_format json_schema is not supported")
            return
        self.read_body = lambda: raw  # this request's body, read once (the handler serves a connection)
        try:
            base.do_POST(self)
        finally:
            del self.read_body

    stub._server.RequestHandlerClass = type("NoJsonSchema", (base,), {"do_POST": do_POST})


def tool_calls(stub: StubJudge) -> Counter:
    """The conversations the judge answered as a forced tool call, with the tool's schema (less the
    ``additionalProperties: false`` Phoenix adds to it for a json_schema request only)."""
    def schema(p) -> dict:
        params = p.body["tools"][0]["function"]["parameters"]
        return {k: v for k, v in params.items() if k != "additionalProperties"}

    return Counter(json.dumps([p.body["messages"], schema(p), p.body["tool_choice"]["function"]["name"]],
                              sort_keys=True) for p in stub.posts("/chat/completions") if "tools" in p.body)


def test_parity_on_a_server_without_structured_outputs(picked):
    """The server answers 400 to a json_schema response format: Phoenix alone asks again with a
    forced tool call; through ragbridge the gateway does (Phoenix never sees the 400), so the judge
    answers the same conversations, with the same schema, as tool calls either way."""
    with StubJudge() as s:
        refuse_json_schema(s)
        assert check_parity(s, picked[:3], asked=tool_calls) == 9
        answered = [p for p in s.posts("/chat/completions") if "response_format" not in p.body]
    assert answered and all("tools" in p.body for p in answered)


def test_judge_settings_reach_the_requests(stub, picked, monkeypatch):
    monkeypatch.setenv("RAGBRIDGE_TEST_KEY", "sk-real-secret-key")
    stub.reset()
    run = run_phoenix(picked[:1], stub, metrics=["faithfulness"], max_tokens=123,
                      options={"temperature": 0.25, "include_explanation": False})
    [score] = run.scores
    assert score.error is None and score.reason is None and score.value == 1.0
    [post] = stub.posts("/chat/completions")
    assert post.body["model"] == MODEL and post.body["max_tokens"] == 123 and post.body["temperature"] == 0.25
    schema = post.body["response_format"]["json_schema"]["schema"]
    assert schema["properties"]["label"]["enum"] == ["faithful", "unfaithful"]
    assert "explanation" not in schema["properties"]
    # the gateway put the real key on the upstream request; Phoenix only ever held the gateway's own
    assert stub.last_authorization == "Bearer sk-real-secret-key"
    with JudgeGateway(stub_judge_config(stub, MODEL, api_key_env="RAGBRIDGE_TEST_KEY")) as gw:
        backend = PhoenixBackend()
        ctx = ScoringContext(options=RunOptions(), judge=gw)

        async def scored() -> tuple[PhoenixSession, list[Score]]:
            session = await backend.open(ctx)
            try:
                return session, [s async for s in backend.score("faithfulness", picked[:1],
                                                                ctx.for_session(session))]
            finally:
                await backend.close(ctx.for_session(session))

        session, [again] = asyncio.run(scored())
        client = session.llm._async_adapter.client.client
        assert client.api_key == gw.api_key != "sk-real-secret-key"
        assert str(client.base_url) == gw.base_url(in_process=True) + "/"
        assert not gw.listening  # in-process: no socket was opened
        assert gw.usage("phoenix", "faithfulness", picked[0].id).calls == 1  # counted for its case
        assert session.async_http_client.is_closed and session.http_client.is_closed
    assert again.value == 1.0 and again.reason


# ------------------------------------------------------------------------------------------------
# A run beside other backends, then compare and report
# ------------------------------------------------------------------------------------------------


def test_a_run_beside_native_attributes_each_call_and_agrees_on_abstention(tmp_path, stub, all_cases):
    stub.reset()
    run = ragbridge.evaluate(list(all_cases.values()), backends=["native", "phoenix"], out=tmp_path / "run",
                             judge=stub_judge_config(stub, MODEL, api_key_env="RAGBRIDGE_TEST_KEY"))
    manifest = json.loads((tmp_path / "run" / "run.json").read_text())
    assert manifest["backends"]["phoenix"] == "3.9.4" and manifest["judge"]["stub"] is True
    ph = {(s.case_id, s.metric): s for s in run.scores if s.backend == "phoenix"}
    native = {(s.case_id, s.metric): s for s in run.scores if s.backend == "native"}
    assert len(ph) == 3 * len(all_cases) and not any(s.error for s in ph.values())

    # attribution: each score carries its own judge calls, and they add up to the run's
    for (cid, metric), s in ph.items():
        case = all_cases[cid]
        expected = {"faithfulness": 1, "context_relevance": len(translate.chunks(case)),
                    "abstention": 0 if case.answerable else 1}[metric]
        assert s.judge_calls == expected, (cid, metric)
        assert s.prompt_tokens > 0 if expected else s.prompt_tokens == 0
    assert sum(s.judge_calls for s in ph.values()) == manifest["counts"]["judge"]["calls"]

    # sane numbers: the example's faithful answer passes, its unfaithful ones fail
    assert ph[(GOOD, "faithfulness")].value == 1.0
    assert all(ph[(cid, "faithfulness")].value == 0.0 for cid in UNFAITHFUL)
    faith = [s.value for (_, m), s in ph.items() if m == "faithfulness"]
    assert 0.5 < sum(faith) / len(faith) < 1.0
    for (cid, metric), s in ph.items():
        if metric == "context_relevance":
            chunks = s.evidence.chunks
            assert [c.id for c in chunks] == [i for i, _ in translate.chunks(all_cases[cid])]
            assert all(c.reason for c in chunks)
            assert s.value == sum(c.relevant for c in chunks) / len(chunks)
    # abstention means what native's means: they agree on every unanswerable case
    for cid, case in all_cases.items():
        if not case.answerable:
            assert ph[(cid, "abstention")].value == native[(cid, "abstention")].value, cid


def test_backends_command_lists_phoenix():
    res = ragbridge_cli("backends", "--json")
    assert res.returncode == 0, res.stderr
    text = res.stdout
    assert "phoenix" in text and "3.9.4" in text and "retrieval_relevance" in text


@pytest.mark.slow
def test_compare_and_report_with_native_phoenix_and_deepeval(tmp_path, stub, all_cases):
    pytest.importorskip("deepeval")
    ids = [GOOD, "notifications-sms-cost", "claims-damage-deadline", "billing-refund-timing",
           *[cid for cid, c in all_cases.items() if not c.answerable]]
    data = tmp_path / "golden.jsonl"
    data.write_text("".join(all_cases[i].model_dump_json() + "\n" for i in ids))
    run = tmp_path / "run"
    res = ragbridge_cli("run", data, "--out", run, "--backend", "native", "--backend", "phoenix",
                        "--backend", "deepeval", "--metric", "faithfulness", "--metric", "abstention",
                        "--metric", "context_relevance", "--judge-model", "stub-judge", "--judge-base-url",
                        stub.base_url, "--judge-api-key-env", "RAGBRIDGE_TEST_KEY", "--cache-path",
                        tmp_path / "c.sqlite", "--no-progress", cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    res = ragbridge_cli("compare", run, "--json", "--resamples", "0", cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    rows = {(r["metric"], r["backend_a"], r["backend_b"]): r for r in json.loads(res.stdout)["agreement"]}
    assert set(rows) == {("faithfulness", "deepeval", "phoenix"), ("abstention", "native", "phoenix"),
                         ("context_relevance", "deepeval", "phoenix")}
    assert rows[("faithfulness", "deepeval", "phoenix")]["n_paired"] == len(ids)
    assert rows[("context_relevance", "deepeval", "phoenix")]["n_paired"] == len(ids)
    abst = rows[("abstention", "native", "phoenix")]
    assert abst["n_paired"] == 4 and abst["agreement"] == 1.0 and abst["mae"] == 0.0
    res = ragbridge_cli("report", run, "--format", "md", "--out", tmp_path / "report.md", "--resamples", "0",
                        cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    md = (tmp_path / "report.md").read_text()
    assert "phoenix 3.9.4" in md  # the backends line
    assert f"| faithfulness | deepeval vs phoenix | {len(ids)}/{len(ids)} |" in md
    assert f"| context\\_relevance | deepeval vs phoenix | {len(ids)}/{len(ids)} |" in md
    assert f"| abstention | native vs phoenix | 4/{len(ids)} |" in md
    # Phoenix's per-chunk explanations reach the report
    assert "chunks relevant<br>\\[1\\]" in md


# ------------------------------------------------------------------------------------------------
# A failing judge gives explicit errors, never a default label
# ------------------------------------------------------------------------------------------------


def test_judge_500_is_that_scores_error_in_one_request(picked):
    with StubJudge() as s:
        s.inject("500")
        run = run_phoenix(picked[:1], s, metrics=["faithfulness"], max_retries=0)
        assert s.request_count == 1  # neither Phoenix nor its SDK retried
    [score] = run.scores
    assert score.value is None and score.native_value is None and score.passed is None
    assert score.error.startswith("InternalServerError: ") and "injected" in score.error


@pytest.mark.slow
def test_rate_limit_outlasting_the_gateway_names_the_judges_429(picked):
    with StubJudge() as s:
        s.inject("429")
        run = run_phoenix(picked[:1], s, metrics=["faithfulness"], max_retries=0)
        assert s.request_count == 1  # Phoenix held its requests 5 s, then gave up: no retry of its own
    [score] = run.scores
    assert score.value is None and score.error.startswith("RateLimitError: Rate limited")
    assert score.error.endswith("RPS: the judge answered 429 (rate limited) after the gateway's retries")


def test_malformed_answer_is_an_error_and_not_cached(picked, tmp_path):
    with StubJudge() as s:
        s.inject("malformed")
        first = run_phoenix(picked[:1], s, metrics=["faithfulness"], out=tmp_path / "run",
                            cache_mode="read-write", cache_path=tmp_path / "c.sqlite")
        [bad] = first.scores
        assert bad.value is None and bad.error.startswith("JSONDecodeError: ")
        again = run_phoenix(picked[:1], s, metrics=["faithfulness"], out=tmp_path / "run",
                            cache_mode="read-write", cache_path=tmp_path / "c.sqlite")
        assert s.request_count == 2  # the broken answer was not replayed from the cache
        third = run_phoenix(picked[:1], s, metrics=["faithfulness"], cache_mode="read-write",
                            cache_path=tmp_path / "c.sqlite")
        assert s.request_count == 2  # the good one was
    [good] = again.scores
    assert good.error is None and good.value == 1.0
    assert third.scores[0].value == 1.0 and third.scores[0].reason == good.reason


class _OffRailsLabel:
    """Answers Phoenix's schema with a label outside its choices, for one marked question only."""

    name = "test-off-rails"
    MARK = "ragbridge-test-off-rails"

    def __call__(self, req: JudgeRequest):
        if self.MARK not in req.user:
            return None
        return JudgeReply(json.dumps({"explanation": "not sure", "label": "maybe"}), tool_name=req.tool_name)


def test_unknown_label_is_a_clear_error(stub, picked):
    case = picked[0].model_copy(update={"question": picked[0].question + " " + _OffRailsLabel.MARK})
    r = register(_OffRailsLabel())  # ahead of every other responder
    try:
        run = run_phoenix([case, picked[1]], stub, metrics=["faithfulness", "context_relevance"])
    finally:
        unregister(r)
    s = by_key(run)
    faith = s[(case.id, "faithfulness")]
    assert faith.value is None and faith.native_value is None
    assert faith.error == ("ValueError: ClassificationEvaluator 'faithfulness' received invalid label "
                           "'maybe'. Valid labels are: ['faithful', 'unfaithful'].")
    cr = s[(case.id, "context_relevance")]
    assert cr.value is None and cr.evidence is None
    assert cr.error.startswith("ChunkError: chunk 1 (") and "invalid label 'maybe'" in cr.error
    assert "['relevant', 'irrelevant']" in cr.error
    other = [s[(picked[1].id, m)].status for m in ("faithfulness", "context_relevance")]
    assert other == ["scored", "scored"]


def test_one_failing_chunk_fails_the_case_and_keeps_the_others(picked):
    with StubJudge() as s:
        s.inject("500")
        run = run_phoenix(picked[:1], s, metrics=["context_relevance"], max_retries=0)
    [score] = run.scores
    rows = score.native_value["per_chunk"]
    assert score.value is None and score.evidence is None
    assert score.error.startswith("ChunkError: chunk ") and "InternalServerError" in score.error
    assert len(rows) == len(picked[0].contexts)
    assert sum("error" in r for r in rows) == 1 and sum("label" in r for r in rows) == len(rows) - 1


def test_a_changed_label_map_fails_every_case_loudly(stub, picked, monkeypatch):
    m = METRICS["faithfulness"]
    monkeypatch.setitem(METRICS, "faithfulness", dataclasses.replace(m, labels=(("faithful", 1.0),
                                                                               ("unfaithful", 0.5))))
    stub.reset()
    run = run_phoenix(picked[:2], stub, metrics=["faithfulness"])
    assert all(s.value is None and "maps labels to" in s.error and "constraints.txt" in s.error
               for s in run.scores)
    assert stub.request_count == 0


# ------------------------------------------------------------------------------------------------
# Telemetry: Phoenix's spans carry no case text, and the settings do not outlive the run
# ------------------------------------------------------------------------------------------------

SPANS = textwrap.dedent("""
    import json, os, sys
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)  # the application's own tracing, installed before the run

    import ragbridge
    from ragbridge.judge import JudgeConfig

    cases = ragbridge.load_cases(sys.argv[1])[:2]
    names = sys.argv[3].split(",")
    before = {k: os.environ.get(k) for k in names}
    run = ragbridge.evaluate(cases, backends=["phoenix"], metrics=["faithfulness"], judge=JudgeConfig(
        model="gpt-4o-mini", base_url=sys.argv[2], cache_mode="off", cache_path=None))
    print(json.dumps({
        "errors": [s.error for s in run.scores],
        "spans": [dict(s.attributes) for s in exporter.get_finished_spans()],
        "before": before, "after": {k: os.environ.get(k) for k in names},
        "texts": [t for c in cases for t in (c.question, c.answer, *(ch.text for ch in c.contexts))],
    }, default=list))
""")


@pytest.mark.parametrize("user_opt_in", [False, True])
def test_spans_hold_no_case_text(stub, tmp_path, user_opt_in):
    pytest.importorskip("opentelemetry.sdk")
    environ = without_backend_defaults()
    if user_opt_in:  # a user who wants Phoenix's prompts in their traces says so explicitly
        environ["OPENINFERENCE_HIDE_INPUTS"] = "false"
    args = [sys.executable, "-c", SPANS, str(EXAMPLE), stub.base_url, ",".join(env.ENVIRONMENT)]
    res = subprocess.run(args, capture_output=True, text=True, env=environ, cwd=tmp_path, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["errors"] == [None, None]
    spans = json.dumps(out["spans"])
    assert len(out["spans"]) >= 4  # Phoenix traced (an evaluator and an LLM span per case) ...
    leaked = [t for t in out["texts"] if t and t in spans]
    assert bool(leaked) == user_opt_in  # ... but no case text is in them unless the user opts in
    redacted = "__REDACTED__"
    inputs = [sp["input.value"] for sp in out["spans"] if "input.value" in sp]
    outputs = [sp["output.value"] for sp in out["spans"] if "output.value" in sp]
    assert inputs and all((v == redacted) != user_opt_in for v in inputs)
    assert outputs and all(v == redacted for v in outputs)  # explanations may quote the case: hidden
    # the defaults held only while the run used the backend; the user's own value is untouched
    assert out["after"] == out["before"]
    assert out["before"]["OPENINFERENCE_HIDE_INPUTS"] == ("false" if user_opt_in else None)
    assert not list(tmp_path.iterdir())  # no file written in the working directory
