"""Real trace stores: the instrumented pipeline's spans sent to a Phoenix server on 127.0.0.1, read
back as Phoenix exports them, sampled, scored, and the scores logged back to Phoenix and read from it;
a Langfuse trace built with the Langfuse SDK's models, and the scores sent by its client.

Neither the Phoenix server (``arize-phoenix``) nor the Langfuse SDK can be installed beside the
library backends' pins (see constraints.txt), so these tests run in a venv of their own
(``.[trace-stores]``, .ci/run) and are skipped where they are not installed. The server runs with
its telemetry off and every
socket it opens and every name it looks up recorded (as in tests/test_no_egress.py): it may reach
nothing but this machine.
"""

import json
import os
import socket
import subprocess
import sys
import time

import pytest
from conftest import ragbridge_cli
from rag_pipeline import bm25, traced
from test_no_egress import LOCAL, RECORDER
from test_traces import _questions

pytestmark = pytest.mark.slow

#: the Phoenix server's key (its admin secret, which it takes as a bearer token)
KEY = "phoenix-key-0123456789abcdefghijklmnopqrstuv"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def phoenix(tmp_path, monkeypatch):
    pytest.importorskip("phoenix.server.main", reason="the trace-store venv (.[trace-stores]) runs this")
    monkeypatch.delenv("OTEL_SDK_DISABLED", raising=False)  # the application records its spans
    site = tmp_path / "site"
    site.mkdir()
    # the recorder, and a line when it starts in a process (the server opens no socket of its own
    # if all is well, so without it an empty log could mean the recorder was never there)
    (site / "sitecustomize.py").write_text(RECORDER + "\n_write('start', [os.getpid()])\n")
    log = tmp_path / "egress.jsonl"
    port = _free_port()
    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": path, "RAGBRIDGE_EGRESS_LOG": str(log),
           # authentication on: every request needs the key (the admin secret, a bearer token)
           "PHOENIX_ENABLE_AUTH": "true", "PHOENIX_SECRET": "server-secret-0123456789abcdefghijklmnop",
           "PHOENIX_ADMIN_SECRET": KEY,
           "PHOENIX_HOST": "127.0.0.1", "PHOENIX_PORT": str(port), "PHOENIX_GRPC_PORT": str(_free_port()),
           "PHOENIX_WORKING_DIR": str(tmp_path / "phoenix"),
           "PHOENIX_SQL_DATABASE_URL": f"sqlite:///{tmp_path / 'phoenix.db'}",
           "PHOENIX_TELEMETRY_ENABLED": "false", "PHOENIX_ALLOW_EXTERNAL_RESOURCES": "false",
           "HOME": str(tmp_path / "home")}
    out = open(tmp_path / "server.log", "w")
    server = subprocess.Popen([sys.executable, "-m", "phoenix.server.main", "serve"], env=env,
                              stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    import httpx

    deadline = time.monotonic() + 300
    while True:
        try:
            if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        assert server.poll() is None, (tmp_path / "server.log").read_text()[-3000:]
        assert time.monotonic() < deadline, "Phoenix did not start in 300 s"
        time.sleep(0.5)
    yield base, log, env
    server.terminate()
    server.wait(timeout=60)
    out.close()


def _until(fetch, done, what, seconds=120):
    """Poll ``fetch`` until ``done(result)``: Phoenix ingests spans and annotations asynchronously."""
    deadline = time.monotonic() + seconds
    while True:
        result = fetch()
        if done(result):
            return result
        assert time.monotonic() < deadline, f"Phoenix never showed {what}"
        time.sleep(0.5)


def test_spans_through_phoenix_and_scores_back(tmp_path, phoenix):
    import pandas as pd
    from google.protobuf.json_format import MessageToJson
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from phoenix.client import Client
    from phoenix.trace import SpanEvaluations

    from ragbridge import evaluate, load_cases

    base, egress, env = phoenix
    recorded = {k: env[k] for k in ("PYTHONPATH", "RAGBRIDGE_EGRESS_LOG")}
    # the application: spans to Phoenix over OTLP/HTTP, and the same spans kept in memory
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "support-bot"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(
        endpoint=f"{base}/v1/traces", headers={"authorization": f"Bearer {KEY}"})))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("support-bot")
    questions = _questions(6)
    made = [traced(q, tracer, user=f"u{i % 2}") for i, q in enumerate(questions)]
    provider.shutdown()
    otlp = tmp_path / "otlp.json"  # the same spans as the protobuf JSON mapping (base64 ids)
    otlp.write_text(MessageToJson(encode_spans(memory.get_finished_spans())))

    # read back from Phoenix as its users export it: the spans dataframe, saved as Parquet
    client = Client(base_url=base, api_key=KEY)
    frame = _until(lambda: client.spans.get_spans_dataframe(project_name="default"),
                   lambda df: len(df) == 3 * len(made), "every span")
    frame.to_parquet(tmp_path / "spans.parquet")
    res = ragbridge_cli("sample", tmp_path / "spans.parquet", "--n", 100, "--out", tmp_path / "cases.jsonl",
                        env=recorded)
    assert res.returncode == 0, res.stderr
    assert "read as format 'phoenix-spans'" in res.stderr
    res = ragbridge_cli("convert", otlp, tmp_path / "direct.jsonl", env=recorded)
    assert res.returncode == 0, res.stderr
    via_phoenix = {c.id: c for c in load_cases(tmp_path / "cases.jsonl")}
    direct = {c.id: c for c in load_cases(tmp_path / "direct.jsonl")}
    assert set(via_phoenix) == set(direct) == {t for t, _ in made}
    for (trace_id, span_id), question in zip(made, questions):
        a, b = via_phoenix[trace_id], direct[trace_id]
        assert a.question == b.question == question and a.answer == b.answer
        assert [(c.id, c.text, c.source) for c in a.contexts] == [
            (c.id, c.text, c.source) for c in b.contexts]
        assert [c.id for c in a.contexts] == [c["id"] for c in bm25.retrieve(question)]
        assert [c.score for c in a.contexts] == pytest.approx([c.score for c in b.contexts])
        assert a.metadata["trace"]["span_id"] == b.metadata["trace"]["span_id"] == span_id
        assert a.metadata["trace"]["retriever_span_ids"] == b.metadata["trace"]["retriever_span_ids"]

    # users' thumbs, given in Phoenix as human annotations, come into the cases
    roots = {t: s for t, s in made}
    thumbs = pd.DataFrame({"span_id": list(roots.values()),
                           "label": ["down" if i % 3 == 0 else "up" for i in range(len(made))]})
    client.spans.log_span_annotations_dataframe(dataframe=thumbs, annotation_name="thumbs",
                                                annotator_kind="HUMAN", sync=True)
    given = client.spans.get_span_annotations_dataframe(span_ids=list(roots.values()),
                                                        project_identifier="default")
    given.reset_index().rename(columns={"annotation_name": "name", "result.label": "label",
                                        "result.score": "score", "result.explanation": "note"}
                               ).to_csv(tmp_path / "feedback.csv", index=False)
    res = ragbridge_cli("sample", tmp_path / "spans.parquet", "--n", 100,
                        "--signals", tmp_path / "feedback.csv",
                        "--out", tmp_path / "cases.jsonl", env=recorded)
    assert res.returncode == 0, res.stderr
    cases = load_cases(tmp_path / "cases.jsonl")
    for i, (trace_id, span_id) in enumerate(made):
        case = next(c for c in cases if c.id == trace_id)
        assert case.metadata["signals"] == [{"name": "thumbs", "label": "down" if i % 3 == 0 else "up",
                                             "span_id": span_id, "source": "API"}]

    # scored, and the scores logged back to Phoenix as span evaluations, read from Phoenix
    checked = [c.model_copy(update={"must_contain": ["refund"]}) for c in cases]
    evaluate(checked, metrics=["must_contain", "recall@5"], out=tmp_path / "run")  # recall: no labels
    res = ragbridge_cli("validate", tmp_path / "run", "--labels", "signal:thumbs", "--json",
                        "--resamples", "0", "--metric", "must_contain", env=recorded)
    assert res.returncode == 0, res.stderr
    (row,) = json.loads(res.stdout)["validation"]
    assert row["n_labels"] == len(made)
    assert row["human_fail"] == sum(1 for i in range(len(made)) if i % 3 == 0)
    res = ragbridge_cli("export-scores", tmp_path / "run", "--to", "phoenix", "--out", tmp_path / "evals",
                        "--threshold", "1", env=recorded)
    assert res.returncode == 0, res.stderr
    assert f"{len(made)} score(s) without a value (undefined) left out" in res.stderr
    for file in (tmp_path / "evals").iterdir():  # each file as a user logs it (an undefined score was NaN)
        evals = SpanEvaluations.load(file.stem.removeprefix("evaluations-"), tmp_path / "evals")
        client.spans.log_span_annotations_dataframe(
            dataframe=evals.dataframe, annotation_name=evals.eval_name, annotator_kind="CODE", sync=True)
    assert evals.eval_name == "native.must_contain" and len(evals.dataframe) == len(made)
    back = _until(lambda: client.spans.get_span_annotations_dataframe(
        span_ids=list(roots.values()), project_identifier="default",
        include_annotation_names=[evals.eval_name]), lambda df: len(df) == len(made), "the evaluations")
    for trace_id, span_id in made:
        answer = next(c.answer for c in cases if c.id == trace_id)
        expected = 1.0 if "refund" in answer.lower() else 0.0
        got = back.loc[span_id]
        assert (got["result.score"], got["result.label"]) == (expected, "pass" if expected else "fail")

    # nothing the server did left this machine
    events = [json.loads(line) for line in egress.read_text().splitlines()]
    assert len([e for e in events if e["kind"] == "start"]) >= 2  # the server and the commands
    connects = {e["target"][0] for e in events if e["kind"] == "connect"}
    lookups = {e["target"][0] for e in events if e["kind"] == "lookup"}
    assert connects <= LOCAL, f"connected outside the machine: {connects}"
    assert lookups <= LOCAL | {None, ""}, f"looked up outside hosts: {lookups}"


def test_langfuse_trace_in_and_scores_through_the_sdk(tmp_path):
    """A trace as Langfuse's public API returns it, built and serialised with the Langfuse SDK's own
    models, read as a case; the case's scores written as Langfuse's batch score import, parsed by the
    SDK's request model and sent by its client (to a transport in memory: nothing leaves the process)."""
    pytest.importorskip("langfuse", reason="the trace-store venv (.[trace-stores]) runs this")
    import datetime as dt

    import httpx
    from langfuse.api import LangfuseAPI
    from langfuse.api.commons.types.observation_v2 import ObservationV2
    from langfuse.api.commons.types.score import Score_Categorical, Score_Numeric
    from langfuse.api.core.pydantic_utilities import parse_obj_as
    from langfuse.api.scores.types.create_scores_request import CreateScoresRequest

    from ragbridge import evaluate, load_cases

    now = dt.datetime(2026, 11, 2, 10, 0, tzinfo=dt.timezone.utc)
    trace_id, root, retriever, generation = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", \
        "53995c3f42cd8ad8", "a3ce929d0e0e4736"
    question = "How long do I have to ask for a refund on my monthly subscription?"
    chunks = bm25.retrieve(question)
    answer = bm25.answer(question, [])  # any text: the answer is carried, not judged, here

    def observation(oid, parent, kind, name, **more):
        return ObservationV2(id=oid, trace_id=trace_id, start_time=now, end_time=now, project_id="p",
                             parent_observation_id=parent, type=kind, name=name, **more)

    observations = [
        observation(root, None, "SPAN", "rag", input={"question": question}, output=answer,
                    user_id="u7", session_id="s1", tags=["support"]),
        observation(retriever, root, "RETRIEVER", "retrieve", input=question,
                    output=[{"id": c["id"], "page_content": c["text"], "score": c["score"],
                             "metadata": {"source": c["source"]}} for c in chunks]),
        observation(generation, root, "GENERATION", "generate", output=answer, model="templated"),
    ]
    scores = [Score_Numeric(id="s-1", trace_id=trace_id, observation_id=root, name="user-feedback", value=0,
                            source="API", timestamp=now, created_at=now, updated_at=now,
                            environment="default", comment="wrong window"),
              Score_Categorical(id="s-2", trace_id=trace_id, name="topic", value=0, string_value="billing",
                                source="ANNOTATION", timestamp=now, created_at=now, updated_at=now,
                                environment="default")]
    export = tmp_path / f"trace-{trace_id}.json"
    export.write_text(json.dumps({
        "id": trace_id, "timestamp": now.isoformat(), "name": "rag",
        "observations": [o.model_dump(by_alias=True, mode="json") for o in observations],
        "scores": [s.model_dump(by_alias=True, mode="json") for s in scores]}))
    res = ragbridge_cli("convert", export, tmp_path / "cases.jsonl")
    assert res.returncode == 0, res.stderr
    assert "read as format 'langfuse'" in res.stderr
    (case,) = load_cases(tmp_path / "cases.jsonl")
    assert (case.id, case.question, case.answer) == (trace_id, question, answer)
    assert [(c.id, c.text, c.source) for c in case.contexts] == [
        (c["id"], c["text"], c["source"]) for c in chunks]
    assert case.metadata["trace"]["span_id"] == root
    assert case.metadata["trace"]["retriever_span_ids"] == [retriever]
    assert case.metadata["trace"]["user_id"] == "u7"
    assert {"name": "user-feedback", "score": 0.0, "note": "wrong window", "span_id": root,
            "source": "api"} in case.metadata["signals"]
    assert {"name": "topic", "label": "billing", "source": "annotation"} in case.metadata["signals"]

    run = tmp_path / "run"
    evaluate([case.model_copy(update={"must_contain": ["14 days"]})], metrics=["must_contain"], out=run)
    res = ragbridge_cli("export-scores", run, "--to", "langfuse", "--out", tmp_path / "scores.json")
    assert res.returncode == 0, res.stderr
    requests = parse_obj_as(CreateScoresRequest, json.loads((tmp_path / "scores.json").read_text()))
    assert [(r.trace_id, r.observation_id) for r in requests] == [(trace_id, root)]
    sent = []

    def handler(request):
        sent.append((request.url.path, json.loads(request.content)))
        return httpx.Response(202, json={"message": "Accepted"})

    client = LangfuseAPI(base_url="http://langfuse.invalid", username="pk", password="sk",
                         httpx_client=httpx.Client(transport=httpx.MockTransport(handler)))
    client.scores.create(request=requests)
    ((path, body),) = sent
    assert path == "/api/public/scores" and len(body) == 1
    assert (body[0]["traceId"], body[0]["observationId"], body[0]["name"]) == (
        trace_id, root, "native.must_contain")
    assert body[0]["value"] == (1.0 if "14 days" in answer else 0.0) and body[0]["dataType"] == "NUMERIC"


def _langfuse_traces(n, old_handler=False, root_output=False, js=False, first=0):
    """``n`` traces of a RAG application traced to Langfuse, as the Langfuse SDK's own models: a root
    SPAN (the question in; no output unless ``root_output``, as when the application sets none), a
    GENERATION that rewrites the query, the retriever (``RETRIEVER``, or ``SPAN`` as Langfuse's older
    LangChain handler logged it) whose output is LangChain's own ``Document`` objects as Langfuse's
    serializer dumps them (``page_content``; ``pageContent`` as LangChain.js writes them with ``js``),
    and the GENERATION that answers from the chunks. Every observation starts and ends at the same
    instant (a fast stub), so time alone cannot tell the rewrite from the answer.
    Returns [(trace id, question, chunks, answer, ids of root, retriever, answer generation,
    observations)]."""
    import datetime as dt

    from langchain_core.documents import Document
    from langfuse.api.commons.types.observation_v2 import ObservationV2

    now = dt.datetime(2026, 11, 2, 10, 0, tzinfo=dt.timezone.utc)
    out = []
    for i, question in enumerate(_questions(first + n)[first:], start=first):
        trace_id = f"{i + 1:032x}"
        ids = [f"{i + 1:04x}{k:012x}" for k in range(4)]
        chunks = bm25.retrieve(question)
        answer = f"From the help centre: {chunks[0]['text']}"
        docs = [Document(id=c["id"], page_content=c["text"],
                         metadata={"source": c["source"], "score": c["score"]}) for c in chunks]
        dumped = [d.model_dump() for d in docs]
        if js:
            dumped = [{"pageContent": d["page_content"], "metadata": {**d["metadata"], "id": d["id"]}}
                      for d in dumped]

        def observation(k, kind, name, parent=0, **more):
            return ObservationV2(id=ids[k], trace_id=trace_id, start_time=now, end_time=now, project_id="p",
                                 parent_observation_id=None if k == 0 else ids[parent], type=kind, name=name,
                                 user_id=f"u{i % 2}", session_id=f"s{i % 3}", **more)

        prompt = "Answer from these passages:\n" + "\n".join(c["text"] for c in chunks)
        observations = [
            observation(0, "SPAN", "rag", input={"question": question},
                        **({"output": answer} if root_output else {})),
            observation(1, "GENERATION", "rewrite", input=[{"role": "user", "content": question}],
                        output=f"refund policy {question.lower()}", model="stub"),
            observation(2, "SPAN" if old_handler else "RETRIEVER", "VectorStoreRetriever", input=question,
                        output=dumped),
            observation(3, "GENERATION", "answer", output=answer, model="stub",
                        input=[{"role": "system", "content": prompt}, {"role": "user", "content": question}]),
        ]
        out.append((trace_id, question, chunks, answer, ids[0], ids[2], ids[3], observations))
    return out


def _v2_page(observations, cursor=None):
    """A page of ``GET /api/public/v2/observations`` (the SDK v5's ``api.observations.get_many``): its
    ``input`` and ``output`` come as JSON text."""
    from langfuse.api.observations.types.observations_v2response import ObservationsV2Response

    page = ObservationsV2Response(data=observations, meta={"cursor": cursor}).model_dump(by_alias=True,
                                                                                          mode="json")
    for item in page["data"]:
        for key in ("input", "output"):
            if item.get(key) is not None and not isinstance(item[key], str):
                item[key] = json.dumps(item[key])
    return page


def test_langfuse_api_pages_trace_lines_and_the_older_handler_read_as_cases(tmp_path):
    """What the Langfuse API answers and its UI downloads, as the SDK's models serialise them: pages of
    observations (one JSON line each, the v5 API's JSON-text input and output), a page of scores, several
    trace downloads as JSON lines, the older LangChain handler's retriever typed SPAN, LangChain.js's
    pageContent; the answer is the generation given the chunks, not the query rewrite before them."""
    pytest.importorskip("langfuse", reason="the trace-store venv (.[trace-stores]) runs this")
    import datetime as dt

    from langfuse.api.scores.types.get_scores_v3response import GetScoresV3Response
    from langfuse.api.scores.types.score_subject_v3 import ScoreSubjectV3_Observation, ScoreSubjectV3_Trace
    from langfuse.api.scores.types.score_v3 import ScoreV3_Categorical, ScoreV3_Numeric

    from ragbridge import load_cases
    from ragbridge.run.sample import sample_traces

    traces = _langfuse_traces(4)
    pages = tmp_path / "observations.jsonl"
    flat = [o for t in traces for o in t[-1]]
    now = dt.datetime(2026, 11, 2, 10, 5, tzinfo=dt.timezone.utc)
    scores = GetScoresV3Response(data=[
        ScoreV3_Numeric(value=0, id="s1", project_id="p", name="user-feedback", source="API", timestamp=now,
                        environment="default", created_at=now, updated_at=now, comment="wrong",
                        subject=ScoreSubjectV3_Observation(id=traces[0][4], trace_id=traces[0][0])),
        ScoreV3_Categorical(value="escalated", id="s2", project_id="p", name="outcome", source="ANNOTATION",
                            timestamp=now, environment="default", created_at=now, updated_at=now,
                            subject=ScoreSubjectV3_Trace(id=traces[1][0]))],
        meta={"limit": 50}).model_dump(by_alias=True, mode="json")
    pages.write_text("".join(json.dumps(p) + "\n" for p in (_v2_page(flat[:9], "c2"), _v2_page(flat[9:]),
                                                              scores)))
    res = ragbridge_cli("convert", pages, tmp_path / "cases.jsonl")
    assert res.returncode == 0, res.stderr
    assert "read as format 'langfuse'" in res.stderr
    assert "4 of 4 trace(s) kept: answer from the LLM span given the retrieved chunks" in res.stderr
    cases = {c.id: c for c in load_cases(tmp_path / "cases.jsonl")}
    assert set(cases) == {t[0] for t in traces}
    for trace_id, question, chunks, answer, root, retriever, generation, _ in traces:
        case = cases[trace_id]
        assert (case.question, case.answer) == (question, answer)
        assert [(c.id, c.text, c.source) for c in case.contexts] == [
            (c["id"], c["text"], c["source"]) for c in chunks]
        trace = case.metadata["trace"]
        assert (trace["span_id"], trace["retriever_span_ids"], trace["llm_span_id"]) == (
            root, [retriever], generation)
        assert trace["session_id"].startswith("s") and trace["user_id"].startswith("u")
    assert {"name": "user-feedback", "score": 0.0, "note": "wrong", "span_id": traces[0][4],
            "source": "api"} in cases[traces[0][0]].metadata["signals"]
    assert {"name": "outcome", "label": "escalated", "source": "annotation"} in cases[
        traces[1][0]].metadata["signals"]

    # several trace downloads as JSON lines; the older handler's SPAN retriever; LangChain.js
    old = _langfuse_traces(3, old_handler=True, root_output=True)
    js = _langfuse_traces(2, old_handler=True, js=True, first=3)
    lines = tmp_path / "traces.jsonl"
    lines.write_text("".join(json.dumps({
        "trace": {"id": t[0], "timestamp": "2026-11-02T10:00:00Z", "name": "rag"},
        "observations": [o.model_dump(by_alias=True, mode="json") for o in t[-1]]}) + "\n"
        for t in old + js[:1]) + json.dumps(  # the public API's trace: its fields, observations, scores
        {"id": js[1][0], "timestamp": "2026-11-02T10:00:00Z", "scores": [],
         "observations": [o.model_dump(by_alias=True, mode="json") for o in js[1][-1]]}) + "\n")
    drawn = sample_traces(lines, None)
    assert {c.id for c in drawn.cases} == {t[0] for t in old + js}
    assert drawn.report.noted[
        "a retriever logged as another type (SPAN, as Langfuse's older LangChain handler logs it): read as "
        "the retriever by the documents in its output"] == 5
    for trace_id, question, chunks, answer, root, retriever, generation, _ in old + js:
        case = next(c for c in drawn.cases if c.id == trace_id)
        assert (case.question, case.answer) == (question, answer)
        assert [(c.id, c.text) for c in case.contexts] == [(c["id"], c["text"]) for c in chunks]
        assert case.metadata["trace"]["llm_span_id"] == generation

    # documents whose text is under a key no convention names: kept with an empty text, counted
    (bare,) = _langfuse_traces(1, first=5)
    observations = [o.model_dump(by_alias=True, mode="json") for o in bare[-1]]
    observations[2]["output"] = [{"id": c["id"], "body": c["text"]} for c in bare[2]]
    (tmp_path / "bare.json").write_text(json.dumps({"trace": {"id": bare[0]}, "observations": observations}))
    drawn = sample_traces(tmp_path / "bare.json", None)
    assert [(c.id, c.text) for c in drawn.cases[0].contexts] == [(c["id"], "") for c in bare[2]]
    assert drawn.report.noted["retriever documents without a text (kept, with an empty text)"] == 1

    # the traces list names observations by id only: counted and left out, with what to do
    listed = tmp_path / "list.json"
    listed.write_text(json.dumps({"data": [{"id": t[0], "timestamp": "2026-11-02T10:00:00Z", "name": "rag",
                                            "observations": [o.id for o in t[-1]], "scores": []}
                                           for t in old],
                                  "meta": {"page": 1, "limit": 50, "totalItems": 3, "totalPages": 1}}))
    res = ragbridge_cli("sample", listed, "--from", "langfuse", "--out", tmp_path / "none.jsonl")
    assert res.returncode == 2
    assert "3 of 3 trace(s) not cases: the trace names its observations by id only" in res.stderr


def _graphql_document_annotations(base, span_node_ids):
    """Each retriever span's document annotations as Phoenix's GraphQL API gives them (its REST API
    has no read of them): node id -> [(name, position, label, score)]."""
    import httpx

    out = {}
    for node in span_node_ids:
        answer = httpx.post(f"{base}/graphql", headers={"authorization": f"Bearer {KEY}"}, timeout=30, json={
            "query": "query($id: ID!) { node(id: $id) { ... on Span { documentEvaluations { name "
                     "documentPosition label score } } } }", "variables": {"id": node}}).json()
        out[node] = sorted((d["name"], d["documentPosition"], d["label"], d["score"])
                           for d in answer["data"]["node"]["documentEvaluations"])
    return out


def test_sample_pulls_from_a_phoenix_server_and_scores_go_back_to_it(tmp_path, phoenix, stub_judge,
                                                                      monkeypatch):
    """``sample --from phoenix://...`` reads the spans from the running server (page by page, in a time
    window, the key from the environment and written nowhere), the run's scores (an undefined one
    among them, and context relevance judged chunk by chunk) are written as Phoenix's span and
    document evaluations that its own client loads and logs, and ``export-scores --to phoenix://``
    sends them as annotations the server then holds."""
    import httpx
    import pyarrow.parquet as pq
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from phoenix.client import Client
    from phoenix.trace import DocumentEvaluations, SpanEvaluations

    import ragbridge_phoenix.store
    from ragbridge import load_cases
    from ragbridge.formats import DatasetError
    from ragbridge.run.sample import sample_traces
    from ragbridge.traces import stores

    base, egress, env = phoenix
    port = base.rsplit(":", 1)[1]
    address = f"phoenix://127.0.0.1:{port}/default"
    recorded = {k: env[k] for k in ("PYTHONPATH", "RAGBRIDGE_EGRESS_LOG")}
    provider = TracerProvider(resource=Resource.create({"service.name": "support-bot"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(
        endpoint=f"{base}/v1/traces", headers={"authorization": f"Bearer {KEY}"})))
    tracer = provider.get_tracer("support-bot")
    questions = _questions(6)
    early = [traced(q, tracer, user=f"u{i % 2}") for i, q in enumerate(questions[:3])]
    time.sleep(1.5)
    between = time.time() - 0.75
    late = [traced(q, tracer, user=f"u{i % 2}") for i, q in enumerate(questions[3:])]
    provider.shutdown()
    made = early + late
    client = Client(base_url=base, api_key=KEY)
    _until(lambda: client.spans.get_spans_dataframe(project_name="default"),
           lambda df: len(df) == 3 * len(made), "every span")

    # pulled through the command line: the key from the environment, refused without it
    res = ragbridge_cli("sample", "--from", address, "--n", 100, "--out", tmp_path / "pulled.jsonl",
                        "--json", env={**recorded, "PHOENIX_API_KEY": ""})
    assert res.returncode == 2 and "the server refused the request (401)" in res.stderr
    assert "set the key in PHOENIX_API_KEY" in res.stderr and not (tmp_path / "pulled.jsonl").exists()
    res = ragbridge_cli("sample", "--from", address, "--n", 100, "--out", tmp_path / "pulled.jsonl", "--json",
                        env={**recorded, "PHOENIX_API_KEY": KEY})
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["from"] == address
    for text in (res.stdout, res.stderr, (tmp_path / "pulled.jsonl").read_text()):
        assert KEY not in text
    pulled = {c.id: c for c in load_cases(tmp_path / "pulled.jsonl")}
    assert set(pulled) == {t for t, _ in made}
    for (trace_id, span_id), question in zip(made, questions):
        case = pulled[trace_id]
        assert case.question == question and case.metadata["trace"]["span_id"] == span_id
        assert [c.id for c in case.contexts] == [c["id"] for c in bm25.retrieve(question)]
        assert case.metadata["session"]["id"] == case.metadata["trace"]["session_id"]
        # the documents' metadata (their source) and the root's, which the API answers flattened
        assert [c.source for c in case.contexts] == [c["source"] for c in bm25.retrieve(question)]
        user = case.metadata["trace"]["user_id"]
        assert case.metadata["trace"]["metadata"] == {"plan": "pro" if user.endswith("1") else "free"}

    # page by page (four spans a page here): one request before the first span, then one a page;
    # the window keeps the later traces; a filter and a draw as from a file
    monkeypatch.setenv("PHOENIX_API_KEY", KEY)
    monkeypatch.setattr(ragbridge_phoenix.store, "PAGE", 4)
    calls = []
    real = stores.request
    monkeypatch.setattr(ragbridge_phoenix.store, "request",
                        lambda *a, **k: calls.append(k.get("params")) or real(*a, **k))
    stream = ragbridge_phoenix.store.pull(stores.parse_address(address), stores.Query())
    next(stream)
    assert len(calls) == 1
    assert len(list(stream)) == 3 * len(made) - 1 and len(calls) == -(-3 * len(made) // 4)
    window = sample_traces(address, None, since=int(between * 1e9))
    assert {c.id for c in window.cases} == {t for t, _ in late}
    before = sample_traces(address, None, until=int(between * 1e9))
    assert {c.id for c in before.cases} == {t for t, _ in early}
    users = sample_traces(address, 2, where=["user.id=u1"], seed=5)
    assert {c.metadata["trace"]["user_id"] for c in users.cases} == {"u1"} and len(users.cases) == 2
    with pytest.raises(DatasetError, match="keys come from the environment only"):
        sample_traces(f"phoenix://user:{KEY}@127.0.0.1:{port}/default", None)
    with pytest.raises(DatasetError, match="answered 404"):
        sample_traces(f"phoenix://127.0.0.1:{port}/no-such-project", None)

    # scored: an answer check, an undefined recall (no labels), context relevance chunk by chunk
    cases = [c.model_copy(update={"must_contain": ["refund"]}) for c in pulled.values()]
    (tmp_path / "cases.jsonl").write_text("".join(c.model_dump_json() + "\n" for c in cases))
    run = tmp_path / "run"
    res = ragbridge_cli("run", tmp_path / "cases.jsonl", "--out", run, "--backend", "native", "--metric",
                        "must_contain", "--metric", "recall@5", "--backend", "rubric", "--metric",
                        "context_relevance", "--no-progress", "--judge-model", "stub-judge",
                        "--judge-base-url", stub_judge.base_url, "--cache-path", tmp_path / "cache.sqlite")
    assert res.returncode == 0, res.stdout + res.stderr
    res = ragbridge_cli("export-scores", run, "--to", "phoenix", "--out", tmp_path / "evals", env=recorded)
    assert res.returncode == 0, res.stderr
    assert f"{len(made)} score(s) without a value (undefined) left out" in res.stderr
    loaded = []
    for file in sorted((tmp_path / "evals").iterdir()):
        kind = json.loads(pq.read_schema(file).metadata[b"arize"])["eval_type"]
        cls = DocumentEvaluations if kind == "DocumentEvaluations" else SpanEvaluations
        loaded.append(cls.load(file.stem.removeprefix("evaluations-"), tmp_path / "evals"))
    kinds = {(type(e).__name__, e.eval_name) for e in loaded}
    assert kinds == {("SpanEvaluations", "native.must_contain"),
                     ("SpanEvaluations", "rubric.context_relevance"),
                     ("DocumentEvaluations", "rubric.context_relevance")}
    for evals in loaded:  # Phoenix's own client takes every file (a NaN score made it fail)
        log = (client.spans.log_document_annotations_dataframe if isinstance(evals, DocumentEvaluations)
               else client.spans.log_span_annotations_dataframe)
        log(dataframe=evals.dataframe, annotation_name=f"file.{evals.eval_name}", annotator_kind="LLM",
            sync=True)
    documents = next(e for e in loaded if isinstance(e, DocumentEvaluations)).dataframe
    assert len(documents) == sum(len(c.contexts) for c in cases)

    # a project that does not exist is refused before anything is sent
    res = ragbridge_cli("export-scores", run, "--to", f"phoenix://127.0.0.1:{port}/no-such-project",
                        env={**recorded, "PHOENIX_API_KEY": KEY})
    assert res.returncode == 2 and "the server has no project 'no-such-project'" in res.stderr
    # pushed to the server: span annotations on the root spans, document annotations on the retrievers
    res = ragbridge_cli("export-scores", run, "--to", address, env={**recorded, "PHOENIX_API_KEY": KEY})
    assert res.returncode == 0, res.stderr
    sent = f"sent {2 * len(made)} span evaluation(s) and {len(documents)} document evaluation(s)"
    assert sent in res.stdout
    assert f"{len(made)} score(s) without a value (undefined) left out" in res.stderr
    roots = {t: s for t, s in made}
    back = _until(lambda: client.spans.get_span_annotations_dataframe(
        span_ids=list(roots.values()), project_identifier="default",
        include_annotation_names=["native.must_contain"]), lambda df: len(df) == len(made), "the annotations")
    scores = {json.loads(x)["case_id"]: json.loads(x) for x in (run / "scores.jsonl").read_text().splitlines()
              if json.loads(x)["metric"] == "must_contain"}
    for trace_id, span_id in made:
        got = back.loc[span_id]
        assert got["result.score"] == scores[trace_id]["value"] and got["annotator_kind"] == "CODE"
    retrievers = {c.metadata["trace"]["retriever_span_ids"][0]: c for c in cases}
    nodes = {s["id"]: s["context"]["span_id"] for s in httpx.get(
        f"{base}/v1/projects/default/spans", params={"limit": 1000}, timeout=30,
        headers={"authorization": f"Bearer {KEY}"}).json()["data"] if s["context"]["span_id"] in retrievers}
    annotated = _graphql_document_annotations(base, nodes)
    for node, span_id in nodes.items():
        pushed = [d for d in annotated[node] if d[0] == "rubric.context_relevance"]
        assert [d[1] for d in pushed] == list(range(len(retrievers[span_id].contexts)))
        assert {d[2] for d in pushed} <= {"relevant", "irrelevant"}

    events = [json.loads(line) for line in egress.read_text().splitlines()]
    connects = {e["target"][0] for e in events if e["kind"] == "connect"}
    assert connects <= LOCAL, f"connected outside the machine: {connects}"


class _LangfuseStandIn:
    """A local stand-in of Langfuse's public API, on 127.0.0.1: the observations (``GET
    /api/public/v2/observations``: cursor pages of at most ``page`` items whatever the limit, the
    ``traceId``, ``isRootObservation``, ``fromStartTime`` and ``toStartTime`` filters, JSON-text
    input and output), the
    scores (``GET /api/public/v3/scores``) and the batch score import (``POST /api/public/scores``,
    each body parsed by the SDK's own request model; the scores of the trace ``refuse`` are refused
    with a 207, as the server refuses some of a batch), behind HTTP basic authentication. Every
    answer is built with the SDK's response models."""

    def __init__(self, observations, scores, public, secret, page=3, refuse=None):
        import base64
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.observations, self.scores, self.page, self.received = observations, scores, page, []
        self.refuse = refuse
        auth = "Basic " + base64.b64encode(f"{public}:{secret}".encode()).decode()
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _answer(self, status, body):
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                if self.headers.get("Authorization") != auth:
                    return self._answer(401, {"message": "Invalid credentials"})
                stand_in.gets += 1
                self._answer(200, stand_in.get(self.path))

            def do_POST(self):
                if self.headers.get("Authorization") != auth:
                    return self._answer(401, {"message": "Invalid credentials"})
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                status, answer = stand_in.post(body)
                self._answer(status, answer)

        self.gets = 0
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self):
        self.server.shutdown()
        self.server.server_close()

    def get(self, path):
        import datetime as dt
        from urllib.parse import parse_qs, urlsplit

        from langfuse.api.scores.types.get_scores_v3response import GetScoresV3Response

        parts = urlsplit(path)
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        if parts.path == "/api/public/v3/scores":
            items = [s for s in self.scores if query.get("traceId") in (
                s.subject.id, getattr(s.subject, "trace_id", None))]
            return GetScoresV3Response(data=items, meta={"limit": 100}).model_dump(by_alias=True, mode="json")
        assert parts.path == "/api/public/v2/observations", path
        items = [o for o in self.observations if "traceId" not in query or o.trace_id == query["traceId"]]
        if query.get("isRootObservation") == "true":
            items = [o for o in items if o.parent_observation_id is None]
        for key, keep in (("fromStartTime", lambda o, t: o.start_time >= t),
                          ("toStartTime", lambda o, t: o.start_time < t)):
            if key in query:
                bound = dt.datetime.fromisoformat(query[key].replace("Z", "+00:00"))
                items = [o for o in items if keep(o, bound)]
        start = int(query.get("cursor", 0))
        size = min(self.page, int(query.get("limit", 50)))
        chunk = items[start:start + size]
        more = start + size < len(items)
        return _v2_page(chunk, str(start + size) if more else None)

    def post(self, body):
        from langfuse.api.core.pydantic_utilities import parse_obj_as
        from langfuse.api.scores.types.create_scores_request import CreateScoresRequest

        requests = parse_obj_as(CreateScoresRequest, body)  # as the SDK reads a body
        self.received.extend(requests)
        refused = [r for r in requests if r.trace_id == self.refuse]
        if refused:
            return 207, {"accepted": len(requests) - len(refused), "rejected": len(refused),
                         "errors": [{"message": "score config not found"}] * len(refused)}
        return 202, {"message": "Accepted"}


def test_sample_pulls_from_the_langfuse_api_and_scores_are_sent_to_it(tmp_path, monkeypatch):
    """``sample --from langfuse://...`` against a local stand-in of the public API whose answers are
    the SDK's own models (and which the SDK's client itself reads, as a check of the stand-in): cursor
    pages, the window, the drawn traces read whole with their scores as signals, the keys from the
    environment and written nowhere; ``export-scores --to langfuse://...`` sends the batch score
    import, which the SDK's request model parses, and a refusal (207) is reported."""
    pytest.importorskip("langfuse", reason="the trace-store venv (.[trace-stores]) runs this")
    import datetime as dt

    import httpx
    from langfuse.api import LangfuseAPI
    from langfuse.api.scores.types.score_subject_v3 import ScoreSubjectV3_Trace
    from langfuse.api.scores.types.score_v3 import ScoreV3_Numeric

    from ragbridge import evaluate, load_cases
    from ragbridge.formats import DatasetError
    from ragbridge.run.sample import sample_traces

    public, secret = "pk-lf-stand-in", "sk-lf-0123456789-secret"
    traces = _langfuse_traces(6)
    later = dt.datetime(2026, 11, 2, 12, 0, tzinfo=dt.timezone.utc)
    observations = []
    for k, trace in enumerate(traces):
        for o in trace[-1]:
            observations.append(o if k < 3 else o.model_copy(update={"start_time": later, "end_time": later}))
    now = dt.datetime(2026, 11, 2, 10, 5, tzinfo=dt.timezone.utc)
    scores = [ScoreV3_Numeric(value=float(k % 2), id=f"s{k}", project_id="p", name="thumbs", source="API",
                              timestamp=now, environment="default", created_at=now, updated_at=now,
                              subject=ScoreSubjectV3_Trace(id=t[0])) for k, t in enumerate(traces)]
    api = _LangfuseStandIn(observations, scores, public, secret, refuse=traces[-1][0])
    try:
        # the stand-in speaks the API as the SDK reads it
        sdk = LangfuseAPI(base_url=api.url, username=public, password=secret, httpx_client=httpx.Client())
        first = sdk.observations.get_many(limit=1000)
        assert len(first.data) == api.page and first.meta.cursor == str(api.page)
        assert sdk.scores.get_many(trace_id=traces[0][0]).data[0].name == "thumbs"

        address = api.url.replace("http://", "langfuse://")
        keys = {"LANGFUSE_PUBLIC_KEY": public, "LANGFUSE_SECRET_KEY": secret}
        res = ragbridge_cli("sample", "--from", address, "--n", 100, "--out", tmp_path / "none.jsonl",
                            env={"LANGFUSE_PUBLIC_KEY": public, "LANGFUSE_SECRET_KEY": "wrong"})
        assert res.returncode == 2 and "the server refused the request (401)" in res.stderr
        assert "check the key in LANGFUSE_PUBLIC_KEY, LANGFUSE_SECRET_KEY" in res.stderr
        res = ragbridge_cli("sample", "--from", address, "--n", 100, "--out", tmp_path / "pulled.jsonl",
                            "--json", env=keys)
        assert res.returncode == 0, res.stderr
        for text in (res.stdout, res.stderr, (tmp_path / "pulled.jsonl").read_text()):
            assert secret not in text
        cases = {c.id: c for c in load_cases(tmp_path / "pulled.jsonl")}
        assert set(cases) == {t[0] for t in traces}
        for k, (trace_id, question, chunks, answer, root, retriever, generation, _) in enumerate(traces):
            case = cases[trace_id]
            assert (case.question, case.answer) == (question, answer)
            assert [c.id for c in case.contexts] == [c["id"] for c in chunks]
            assert case.metadata["signals"] == [{"name": "thumbs", "score": float(k % 2), "source": "api"}]
            assert case.metadata["trace"]["llm_span_id"] == generation

        # page by page, in the window; drawn traces read whole
        for name, value in keys.items():
            monkeypatch.setenv(name, value)
        api.gets = 0
        window = sample_traces(address, None, since="2026-11-02T11:00:00Z")
        assert {c.id for c in window.cases} == {t[0] for t in traces[3:]}
        # the window's 12 observations a page of 3 at a time; each drawn trace's 4 and its scores; the
        # window's 3 roots for the earlier turns of the drawn traces' sessions
        assert api.gets == 12 // 3 + 3 * (2 + 1) + 1
        with pytest.raises(DatasetError, match="a Langfuse address has no project"):
            sample_traces(address + "/project", None)

        # scores back: the batch import, parsed by the SDK's request model; a refusal is reported
        run = tmp_path / "run"
        evaluate([c.model_copy(update={"must_contain": ["refund"]}) for c in cases.values()],
                 metrics=["must_contain", "recall@5"], out=run)
        res = ragbridge_cli("export-scores", run, "--to", address, "--json", env=keys)
        assert res.returncode == 0, res.stderr
        summary = json.loads(res.stdout)
        assert summary["evaluations"] == len(traces) and summary["to"] == address
        assert f"{len(traces)} score(s) without a value (errored or undefined) not written" in res.stderr
        assert f"1 of {len(traces)} score(s) refused by Langfuse: score config not found" in res.stderr
        assert {(r.trace_id, r.observation_id, r.name) for r in api.received} == {
            (t[0], t[4], "native.must_contain") for t in traces}
        res = ragbridge_cli("export-scores", run, "--to", address, "--metric", "must_contain",
                            env={"LANGFUSE_PUBLIC_KEY": public, "LANGFUSE_SECRET_KEY": ""})
        assert res.returncode == 2 and "set LANGFUSE_PUBLIC_KEY and LANGFUSE_SECRET_KEY" in res.stderr
    finally:
        api.close()
