"""Production traces in, scores back out.

The traces are recorded by the tests' RAG pipeline instrumented with the OpenTelemetry SDK and
OpenInference's semantic conventions (tests/rag_pipeline.py: `traced`), and exported by the SDK's
own exporters: the OTLP JSON file exporter (JSON lines, hex ids) and the in-memory exporter, whose
spans the SDK's OTLP JSON encoder turns into an OTLP/HTTP JSON body. The Phoenix server round trip
is tests/test_trace_store.py.
"""

import csv
import datetime as dt
import json

import pytest
from conftest import EXAMPLE, ragbridge_cli
from rag_pipeline import bm25, traced

from ragbridge import load_cases
from ragbridge.formats import DatasetError
from ragbridge.run.sample import draw, load_mapping, resolve, sample_traces
from ragbridge.traces.otlp import read_spans


@pytest.fixture(autouse=True)
def application_tracing(monkeypatch):
    """The application under test records its spans: the opt-out the test process carries for the
    backends (tests/conftest.py) does not apply to it."""
    monkeypatch.delenv("OTEL_SDK_DISABLED", raising=False)


def _questions(n):
    lines = EXAMPLE.read_text(encoding="utf-8").splitlines()
    qs = [json.loads(line)["question"] for line in lines]
    return (qs * (n // len(qs) + 1))[:n]


def _provider(exporter):
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": "support-bot"}))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider


def record(path, questions, **kwargs):
    """Run the instrumented pipeline on ``questions``, the spans written by the SDK's OTLP JSON file
    exporter to ``path`` (appended); returns [(trace_id, root span_id, question)]."""
    from opentelemetry.exporter.otlp.json.file.trace_exporter import FileSpanExporter

    provider = _provider(FileSpanExporter(path))
    tracer = provider.get_tracer("support-bot")
    out = []
    for i, q in enumerate(questions):
        trace_id, span_id = traced(q, tracer, user=f"u{i % 3}", **kwargs)
        out.append((trace_id, span_id, q))
    provider.shutdown()
    return out


@pytest.fixture
def otlp(tmp_path):
    path = tmp_path / "traces.jsonl"
    kept = record(path, _questions(12))
    bare = record(path, _questions(2), drop_retriever=True)
    return path, kept, bare


def test_otlp_file_export_reads_as_one_case_per_trace(tmp_path, otlp):
    path, kept, bare = otlp
    res = ragbridge_cli("convert", path, tmp_path / "cases.jsonl")
    assert res.returncode == 0, res.stderr
    # the traces without a retriever are reported, with their count and why, not made empty cases
    assert "2 of 14 trace(s) not cases: no retriever span" in res.stderr
    assert bare[0][0] in res.stderr
    cases = {c.id: c for c in load_cases(tmp_path / "cases.jsonl")}
    assert set(cases) == {t for t, _, _ in kept}
    for trace_id, span_id, question in kept:
        case = cases[trace_id]
        chunks = bm25.retrieve(question)
        assert case.question == question
        assert [c.id for c in case.contexts] == [c["id"] for c in chunks]
        assert [c.score for c in case.contexts] == pytest.approx([c["score"] for c in chunks])
        assert [c.source for c in case.contexts] == [c["source"] for c in chunks]
        assert case.contexts[0].text == chunks[0]["text"]
        assert case.answer.startswith("According to our help centre")
        info = case.metadata["trace"]
        assert info["trace_id"] == trace_id and info["span_id"] == span_id
        assert len(info["retriever_span_ids"]) == 1 and info["retriever_span_ids"][0] != span_id
        assert info["service"] == "support-bot" and info["session_id"].startswith("session-u")
        assert info["start_time"] <= info["end_time"] and info["start_time"].endswith("Z")
        assert "support" in case.tags


def test_genai_retrieval_documents_and_an_otlp_http_json_body(tmp_path):
    """The OTel GenAI form (gen_ai.retrieval.documents), recorded in memory and encoded by the SDK's
    OTLP JSON encoder as one pretty-printed OTLP/HTTP request body."""
    from opentelemetry.exporter.otlp.json.common.trace_encoder import encode_spans
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    memory = InMemorySpanExporter()
    provider = _provider(memory)
    tracer = provider.get_tracer("support-bot")
    made = [traced(q, tracer, convention="genai") for q in _questions(3)]
    provider.force_flush()
    body = tmp_path / "request.json"
    body.write_text(json.dumps(encode_spans(memory.get_finished_spans()).to_dict(), indent=2))
    res = ragbridge_cli("convert", body, tmp_path / "cases.jsonl")
    assert res.returncode == 0, res.stderr
    cases = {c.id: c for c in load_cases(tmp_path / "cases.jsonl")}
    assert set(cases) == {t for t, _ in made}
    for (trace_id, span_id), question in zip(made, _questions(3)):
        assert cases[trace_id].question == question
        assert [c.id for c in cases[trace_id].contexts] == [c["id"] for c in bm25.retrieve(question)]
        assert cases[trace_id].metadata["trace"]["span_id"] == span_id


def test_ids_in_the_protobuf_json_mapping_read_as_hex(tmp_path, otlp):
    """Some exporters write the protobuf JSON mapping: ids base64, not hex. Same spans, same ids."""
    import base64

    path, kept, _ = otlp
    line = json.loads(path.read_text().splitlines()[0])
    for rs in line["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for span in ss["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if span.get(key):
                        span[key] = base64.b64encode(bytes.fromhex(span[key])).decode()
    b64 = tmp_path / "b64.json"
    b64.write_text(json.dumps(line))
    in_b64 = {(s.trace_id, s.span_id) for s in read_spans(b64)}
    assert in_b64 and in_b64 == {(s.trace_id, s.span_id) for s in read_spans(path)
                                 if s.trace_id in {t for t, _ in in_b64}}


@pytest.mark.parametrize("size", [16, 8])
def test_a_base64_id_that_begins_with_0x_reads_as_its_bytes(size):
    """About one random id in 2,000 has a base64 form beginning "0x" or "0X": it is base64, not
    prefixed hex (reading it as hex once made the protobuf-mapping test above fail now and then)."""
    import base64
    import random

    from ragbridge.traces.spans import hex_id

    rng = random.Random(size)
    ids = [rng.randbytes(size) for _ in range(40000)]
    prefixed = [b for b in ids if base64.b64encode(b)[:2] in (b"0x", b"0X")]
    assert len(prefixed) >= 5
    assert [hex_id(base64.b64encode(b).decode(), size) for b in prefixed] == [b.hex() for b in prefixed]
    assert [hex_id(base64.b64encode(b).decode(), size) for b in ids] == [b.hex() for b in ids]
    assert hex_id("0x" + "ab" * size, size) == "ab" * size and hex_id("AB" * size, size) == "ab" * size


def test_sample_by_trace_id_hash_is_reproducible_and_filters_first(tmp_path, otlp):
    path, kept, bare = otlp
    ids = [t for t, _, _ in kept]
    out = tmp_path / "s.jsonl"
    res = ragbridge_cli("sample", path, "--n", 5, "--seed", 3, "--out", out, "--json")
    assert res.returncode == 0, res.stderr
    a, summary = [c.id for c in load_cases(out)], json.loads(res.stdout)
    # the n lowest draws of the trace ids: the same rule a user can recompute
    lowest = sorted(ids + [t for t, _, _ in bare], key=lambda t: draw(t, 3))[:5]
    assert set(a) == set(lowest) - {t for t, _, _ in bare}
    assert summary["drawn"] == 5 and summary["cases"] == len(a) and summary["kind"] == "traces"
    assert [c.id for c in sample_traces(path, 5, seed=3).cases] == a
    assert [c.id for c in sample_traces(path, 5, seed=4).cases] != a

    def drawn(**kwargs):
        return [c.id for c in sample_traces(path, **kwargs).cases]

    # a rate keeps a trace in or out by its id alone: more traffic later leaves yesterday's sample in
    before = drawn(n=None, rate=0.5, seed=9)
    assert set(before) == {t for t in ids if draw(t, 9) < 0.5}
    later = record(path, _questions(6))
    after = drawn(n=None, rate=0.5, seed=9)
    assert set(before) <= set(after)
    assert set(after) - set(before) == {t for t, _, _ in later if draw(t, 9) < 0.5}
    # --where on span attributes comes before the draw: the n are drawn among that user's traces
    users = {t: f"u{i % 3}" for batch in (kept, bare, later) for i, (t, _, _) in enumerate(batch)}
    candidates = sorted((t for t in users if users[t] == "u1"), key=lambda t: draw(t, 0))
    mine = sample_traces(path, 3, where=["user.id=u1"])
    assert mine.drawn == 3
    assert {c.id for c in mine.cases} == set(candidates[:3]) - {t for t, _, _ in bare}
    assert all(c.metadata["trace"]["user_id"] == "u1" for c in mine.cases)
    # a key inside OpenInference's metadata (a JSON string), a resource attribute and a list
    # attribute (a tag) filter too
    pro = sample_traces(path, None, where=["metadata.plan=pro"]).cases
    assert pro and all(c.metadata["trace"]["metadata"]["plan"] == "pro" for c in pro)
    assert {c.id for c in pro} == {t for t, u in users.items() if u.endswith("1")} - {t for t, _, _ in bare}
    billing = sample_traces(path, None, where=["service.name=support-bot", "tag=billing"]).cases
    assert billing and all("billing" in c.tags for c in billing)


def test_sample_errors_say_what_to_do(tmp_path, otlp):
    path, _, _ = otlp
    res = ragbridge_cli("sample", path, "--where", "user.id=nobody", "--out", tmp_path / "s.jsonl")
    assert res.returncode == 2 and "no trace matches" in res.stderr
    assert not (tmp_path / "s.jsonl").exists()
    with pytest.raises(DatasetError, match="--mapping is for JSON lines logs"):
        sample_traces(path, mapping={"fields": {"question": "q"}, "chunk": {}})
    with pytest.raises(DatasetError, match=r"--rate must be in \(0, 1\]"):
        sample_traces(path, rate=1.5)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(path.read_text().splitlines()[0] + "\n{not json\n")
    with pytest.raises(DatasetError, match="bad.jsonl:2: not valid JSON"):
        sample_traces(bad)


def test_log_mapping_paths_and_where_before_the_question_check(tmp_path):
    # a record holding dotted keys, and observations picked by a field's value, not a position
    record = {"id": "t1", "attributes": {"input.value": "Q?", "output.value": "A."},
              "observations": [{"type": "SPAN", "output": "x"},
                               {"type": "RETRIEVER", "output": [{"id": "d1", "content": "text"}]}]}
    assert resolve(record, "attributes.input.value") == "Q?"
    assert resolve({"attributes.input.value": "Q?"}, "attributes.input.value") == "Q?"
    assert resolve(record, "observations[type=RETRIEVER].output.0.id") == "d1"
    assert resolve(record, "observations[1].type") == "RETRIEVER"
    assert resolve(record, "observations[type=LLM].output") is None
    log = tmp_path / "log.jsonl"
    rows = [record, {"id": "t2", "kind": "healthcheck"},  # no question, filtered out by --where
            dict(record, id="t3")]
    log.write_text("".join(json.dumps(dict(r, env="prod" if r["id"] != "t2" else "dev")) + "\n"
                           for r in rows))
    mapping = tmp_path / "m.toml"
    mapping.write_text('[fields]\nquestion = "attributes.input.value"\nanswer = "attributes.output.value"\n'
                       'contexts = "observations[type=RETRIEVER].output"\n'
                       '[chunk]\nid = "id"\ntext = "content"\n')
    res = ragbridge_cli("sample", log, "--mapping", mapping, "--where", "env=prod",
                        "--out", tmp_path / "s.jsonl")
    assert res.returncode == 0, res.stderr
    cases = load_cases(tmp_path / "s.jsonl")
    assert [c.id for c in cases] == ["t1", "t3"]
    assert cases[0].question == "Q?" and cases[0].contexts[0].id == "d1"
    # without the filter, the healthcheck line is the error it always was
    with pytest.raises(DatasetError, match="log.jsonl:2: field 'attributes.input.value': no question found"):
        sample_traces(log, mapping=load_mapping(mapping))
    bad = tmp_path / "bad.toml"
    bad.write_text('[fields]\nquestion = "a[type=]x]"\n')
    with pytest.raises(DatasetError, match=r"\[fields\] question"):
        load_mapping(bad)


def _signals(path, kept):
    """A feedback file as a support tool writes one: thumbs on the root span, by span id; one note
    by trace id."""
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["span_id", "trace_id", "name", "label", "score", "note"])
        writer.writeheader()
        for i, (trace_id, span_id, _) in enumerate(kept):
            writer.writerow({"span_id": span_id, "name": "thumbs", "label": "down" if i % 3 == 0 else "up"})
        writer.writerow({"trace_id": kept[1][0], "name": "comment", "note": "wrong fee"})


def test_user_signals_come_into_the_cases(tmp_path, otlp):
    path, kept, _ = otlp
    signals = tmp_path / "feedback.csv"
    _signals(signals, kept)
    res = ragbridge_cli("sample", path, "--n", 100, "--signals", signals, "--out", tmp_path / "s.jsonl")
    assert res.returncode == 0, res.stderr
    cases = {c.id: c for c in load_cases(tmp_path / "s.jsonl")}
    for i, (trace_id, span_id, _) in enumerate(kept):
        thumbs = [s for s in cases[trace_id].metadata["signals"] if s["name"] == "thumbs"]
        assert thumbs == [{"name": "thumbs", "label": "down" if i % 3 == 0 else "up", "span_id": span_id}]
    assert {"name": "comment", "note": "wrong fee"} in cases[kept[1][0]].metadata["signals"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"name": "thumbs", "label": "up"}\n')
    res = ragbridge_cli("sample", path, "--signals", bad, "--out", tmp_path / "s2.jsonl")
    assert res.returncode == 2 and "bad.jsonl:1" in res.stderr and "no trace_id or span_id" in res.stderr
    assert not (tmp_path / "s2.jsonl").exists()


@pytest.mark.slow
def test_judged_run_validated_against_user_signals_and_scores_back_out(tmp_path, otlp, stub_judge):
    """Sample with feedback, score with the rubric judge (stub on loopback), ask whether the judge
    predicts the thumbs, and write the scores back as span evaluations keyed as the spans were."""
    path, kept, _ = otlp
    signals = tmp_path / "feedback.csv"
    _signals(signals, kept)
    sample = tmp_path / "sample.jsonl"
    res = ragbridge_cli("sample", path, "--n", 100, "--signals", signals, "--out", sample)
    assert res.returncode == 0, res.stderr
    run = tmp_path / "run"
    res = ragbridge_cli("run", sample, "--out", run, "--backend", "rubric", "--metric", "faithfulness",
                        "--backend", "native", "--metric", "must_contain", "--no-progress",
                        "--judge-model", "gpt-4o-mini", "--judge-base-url", stub_judge.base_url,
                        "--cache-path", tmp_path / "cache.sqlite")
    assert res.returncode == 0, res.stdout + res.stderr
    res = ragbridge_cli("validate", run, "--labels", "signal:thumbs", "--metric", "faithfulness", "--json",
                        "--resamples", "0")
    assert res.returncode == 0, res.stderr
    (row,) = json.loads(res.stdout)["validation"]
    downs = sum(1 for i in range(len(kept)) if i % 3 == 0)
    assert (row["n_labels"], row["human_fail"], row["human_pass"]) == (len(kept), downs, len(kept) - downs)
    # the same labels written as a labels file give the same verdicts
    labels = tmp_path / "labels.jsonl"
    labels.write_text("".join(json.dumps({"case_id": t, "metric": "faithfulness",
                                          "label": "fail" if i % 3 == 0 else "pass"}) + "\n"
                              for i, (t, _, _) in enumerate(kept)))
    res2 = ragbridge_cli("validate", run, "--labels", labels, "--json", "--resamples", "0")
    (row2,) = json.loads(res2.stdout)["validation"]
    assert {k: row[k] for k in ("tp", "fn", "fp", "tn")} == {k: row2[k] for k in ("tp", "fn", "fp", "tn")}
    res = ragbridge_cli("validate", run, "--labels", "signal:stars")
    assert res.returncode == 2 and "no case carries a signal named 'stars'" in res.stderr
    assert "thumbs" in res.stderr

    # the judge's verdicts go back on the root spans, labelled by the rubric's own pass mark, as the
    # report labels them (run.json's pass_marks: the claim rubric passes an answer whose every claim holds)
    res = ragbridge_cli("export-scores", run, "--to", "jsonl", "--out", tmp_path / "evals.jsonl",
                        "--metric", "faithfulness")
    mark = json.loads((run / "run.json").read_text())["pass_marks"]["rubric"]["faithfulness"]
    assert res.returncode == 0, res.stderr
    roots = {t: s for t, s, _ in kept}
    scores = {s["case_id"]: s for s in map(json.loads, (run / "scores.jsonl").read_text().splitlines())
              if s["metric"] == "faithfulness"}
    rows = [json.loads(x) for x in (tmp_path / "evals.jsonl").read_text().splitlines()]
    assert len(rows) == len(kept)
    for r in rows:
        assert r["span_id"] == roots[r["trace_id"]] and r["name"] == "rubric.faithfulness"
        assert r["score"] == scores[r["trace_id"]]["value"]
        assert r["label"] == ("pass" if r["score"] >= mark else "fail")
        assert r["explanation"] == scores[r["trace_id"]]["reason"]


@pytest.mark.slow
def test_scores_go_back_to_the_spans_they_came_from(tmp_path, otlp):
    """A run of cases read from traces (answer checks a team added), written back as span
    evaluations: plain rows, Phoenix's span evaluations, Langfuse's batch score import (which the
    Langfuse SDK itself sends in tests/test_trace_store.py)."""
    import pandas as pd
    import pyarrow.parquet as pq

    from ragbridge import evaluate

    path, kept, _ = otlp
    cases = [c.model_copy(update={"must_contain": ["refund"]}) for c in sample_traces(path, None).cases]
    run = tmp_path / "run"
    evaluate(cases, metrics=["must_contain", "recall@5"], out=run)
    roots = {t: s for t, s, _ in kept}
    retrievers = {c.id: c.metadata["trace"]["retriever_span_ids"][0] for c in cases}
    res = ragbridge_cli("export-scores", run, "--to", "jsonl", "--out", tmp_path / "evals.jsonl",
                        "--threshold", "must_contain=1")
    assert res.returncode == 0, res.stderr
    rows = [json.loads(x) for x in (tmp_path / "evals.jsonl").read_text().splitlines()]
    checks = {r["trace_id"]: r for r in rows if r["metric"] == "must_contain"}
    assert set(checks) == set(roots)
    for trace_id, r in checks.items():
        assert r["span_id"] == roots[trace_id] and r["name"] == "native.must_contain"
        answer = next(c.answer for c in cases if c.id == trace_id)
        assert r["score"] == (1.0 if "refund" in answer.lower() else 0.0)
        assert r["label"] == ("pass" if r["score"] == 1.0 else "fail")
    # a retrieval metric goes on the retriever span; undefined without labels, and said so
    recall = [r for r in rows if r["metric"] == "recall@5"]
    assert all(r["span_id"] == retrievers[r["trace_id"]] and r["label"] == "undefined" for r in recall)

    res = ragbridge_cli("export-scores", run, "--to", "phoenix", "--out", tmp_path / "evals",
                        "--metric", "must_contain")
    assert res.returncode == 0, res.stderr
    (file,) = sorted((tmp_path / "evals").iterdir())
    meta = json.loads(pq.read_schema(file).metadata[b"arize"])
    assert meta["eval_name"] == "native.must_contain" and meta["eval_type"] == "SpanEvaluations"
    assert file.name == f"evaluations-{meta['eval_id']}.parquet"
    frame = pd.read_parquet(file)
    assert frame.index.name == "span_id" and set(frame.index) == set(roots.values())
    assert {roots[t]: r["score"] for t, r in checks.items()} == frame["score"].to_dict()

    res = ragbridge_cli("export-scores", run, "--to", "langfuse", "--out", tmp_path / "lf.json")
    assert res.returncode == 0, res.stderr
    assert f"{len(kept)} score(s) without a value" in res.stderr  # recall@5: undefined
    bodies = json.loads((tmp_path / "lf.json").read_text())
    assert len(bodies) == len(kept)
    for body in bodies:
        assert body["observationId"] == roots[body["traceId"]] and body["dataType"] == "NUMERIC"
        assert body["value"] == checks[body["traceId"]]["score"]
    # a run whose cases did not come from traces has nowhere to send its scores
    plain = tmp_path / "plain"
    evaluate(load_cases(EXAMPLE)[:3], metrics=["mrr"], out=plain)
    res = ragbridge_cli("export-scores", plain, "--to", "jsonl", "--out", tmp_path / "x.jsonl")
    assert res.returncode == 2 and "no score of a case read from a trace" in res.stderr
    assert not (tmp_path / "x.jsonl").exists()


def test_sample_api_reports_traces_without_a_retriever(tmp_path, otlp):
    path, kept, bare = otlp
    drawn = sample_traces(path, n=None, seed=0)
    assert drawn.drawn == len(kept) + len(bare) and len(drawn.cases) == len(kept)
    assert drawn.report.skipped == {"no retriever span": len(bare)}
    assert set(drawn.report.examples["no retriever span"]) == {t for t, _, _ in bare}


def test_the_answer_is_the_generation_given_the_chunks_not_a_query_rewrite(tmp_path):
    """A pipeline that rewrites the question with the LLM before retrieving, and sets no output on its
    root span: the answer is the LLM span given the retrieved chunks, whatever the clocks say (the
    spans here start and end at the same instants), and the report says how it was picked."""
    from openinference.semconv.trace import MessageAttributes as M
    from openinference.semconv.trace import OpenInferenceSpanKindValues as K
    from openinference.semconv.trace import SpanAttributes as S
    from opentelemetry.exporter.otlp.json.file.trace_exporter import FileSpanExporter

    path = tmp_path / "spans.jsonl"
    provider = _provider(FileSpanExporter(path))
    tracer = provider.get_tracer("support-bot")
    made = []
    for i, question in enumerate(_questions(3)):
        at = 1_790_000_000_000_000_000 + i * 10**9
        chunks = bm25.retrieve(question)
        answer = f"According to our help centre: {chunks[0]['text']}"
        with tracer.start_as_current_span("rag", start_time=at, end_on_exit=False) as root:
            root.set_attribute(S.OPENINFERENCE_SPAN_KIND, K.CHAIN.value)
            root.set_attribute(S.INPUT_VALUE, question)
            spans = []
            for name, kind in (("rewrite", K.LLM), ("retrieve", K.RETRIEVER), ("answer", K.LLM)):
                span = tracer.start_span(name, start_time=at)
                span.set_attribute(S.OPENINFERENCE_SPAN_KIND, kind.value)
                spans.append(span)
            rewrite, retrieve, generate = spans
            rewrite.set_attribute(f"{S.LLM_INPUT_MESSAGES}.0.{M.MESSAGE_CONTENT}", question)
            rewrite.set_attribute(S.OUTPUT_VALUE, "refund window monthly subscription")
            for k, c in enumerate(chunks):
                retrieve.set_attribute(f"{S.RETRIEVAL_DOCUMENTS}.{k}.document.id", c["id"])
                retrieve.set_attribute(f"{S.RETRIEVAL_DOCUMENTS}.{k}.document.content", c["text"])
            generate.set_attribute(f"{S.LLM_INPUT_MESSAGES}.0.{M.MESSAGE_CONTENT}",
                                   "Answer from:\n" + "\n".join(c["text"] for c in chunks))
            generate.set_attribute(S.OUTPUT_VALUE, answer)
            for span in (rewrite, retrieve, generate, root):  # in this order, at the same instant
                span.end(end_time=at + 1000)
        made.append((format(root.get_span_context().trace_id, "032x"), answer,
                     format(generate.get_span_context().span_id, "016x")))
    provider.shutdown()
    drawn = sample_traces(path, None)
    for trace_id, answer, generation in made:
        case = next(c for c in drawn.cases if c.id == trace_id)
        assert case.answer == answer and case.metadata["trace"]["llm_span_id"] == generation
    assert drawn.report.noted == {
        "answer from the LLM span given the retrieved chunks (the root has no output)": len(made)}


def test_console_exporter_and_one_span_a_line_read_as_the_otlp_file_does(tmp_path):
    """The same traces written by the SDK's ConsoleSpanExporter (its own pretty-printed span.to_json(),
    one object after another, saved as a .log; and one compact object a line), and as one OTLP span a
    line (the spans of the SDK's OTLP JSON encoding, one per line, as a collector's output is flattened):
    the same cases as the OTLP JSON file exporter's."""
    from opentelemetry.exporter.otlp.json.common.trace_encoder import encode_spans
    from opentelemetry.exporter.otlp.json.file.trace_exporter import FileSpanExporter
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    pretty, compact, otlp = tmp_path / "console.log", tmp_path / "console.jsonl", tmp_path / "otlp.jsonl"
    memory = InMemorySpanExporter()
    with open(pretty, "w") as a, open(compact, "w") as b:
        provider = _provider(FileSpanExporter(otlp))
        for exporter in (ConsoleSpanExporter(out=a), memory,
                         ConsoleSpanExporter(out=b, formatter=lambda s: s.to_json(indent=None) + "\n")):
            provider.add_span_processor(SimpleSpanProcessor(exporter))
        tracer = provider.get_tracer("support-bot")
        made = [traced(q, tracer, user=f"u{i % 2}") for i, q in enumerate(_questions(4))]
        made.append(traced(_questions(5)[-1], tracer, drop_retriever=True))
        provider.shutdown()
    assert pretty.read_text().startswith("{\n    \"name\"")  # the exporter's own layout
    body = encode_spans(memory.get_finished_spans()).to_dict()
    per_span = tmp_path / "spans.jsonl"
    per_span.write_text("".join(json.dumps({**span, "resource": rs["resource"]}) + "\n"
                                for rs in body["resourceSpans"] for ss in rs["scopeSpans"]
                                for span in ss["spans"]))
    expected = {c.id: c for c in sample_traces(otlp, None).cases}
    assert set(expected) == {t for t, _ in made[:4]}
    res = ragbridge_cli("sample", pretty, "--n", 100, "--out", tmp_path / "cases.jsonl")
    assert res.returncode == 0, res.stderr
    assert "read as format 'otel-spans'" in res.stderr
    assert "1 of 5 trace(s) not cases: no retriever span" in res.stderr
    for cases in (load_cases(tmp_path / "cases.jsonl"), sample_traces(compact, None).cases,
                  sample_traces(per_span, None).cases, load_cases(pretty, "otel-spans")):
        assert {c.id for c in cases} == set(expected)
        for case in cases:
            want = expected[case.id]
            assert (case.question, case.answer, case.tags) == (want.question, want.answer, want.tags)
            assert [c.model_dump() for c in case.contexts] == [c.model_dump() for c in want.contexts]
            got, trace = dict(case.metadata["trace"]), dict(want.metadata["trace"])
            for key in ("start_time", "end_time"):  # the console's times are its ISO text, to the microsecond
                a, b = (dt.datetime.fromisoformat(x.pop(key).replace("Z", "+00:00")) for x in (got, trace))
                assert abs((a - b).total_seconds()) <= 1e-6
            assert got == trace


def test_sessions_give_each_turn_its_earlier_turns_and_sample_draws_by_session(tmp_path):
    """Multi-turn conversations (the pipeline names session-u0, -u1, -u2 on its root spans): each trace
    stays one case, with its session and the earlier turns (a small-talk turn without retrieval among
    them); a sample of traces carries the earlier turns of its sessions even when they are not drawn;
    --by session draws sessions, every turn of a drawn one a case."""
    path = tmp_path / "spans.jsonl"
    turns = record(path, _questions(7))  # u0, u1, u2, u0, u1, u2, u0
    small_talk = record(path, ["Thanks, that helps!"], drop_retriever=True)  # u0's fourth turn
    turns += record(path, _questions(8)[7:])  # u0 again: its fifth turn
    sessions = {}
    for i, (trace_id, _, question) in enumerate(turns[:7]):
        sessions.setdefault(f"session-u{i % 3}", []).append((trace_id, question))
    sessions["session-u0"] += [(small_talk[0][0], "Thanks, that helps!"), (turns[7][0], turns[7][2])]
    everything = {c.id: c for c in sample_traces(path, None).cases}
    assert len(everything) == len(turns)
    for session, items in sessions.items():
        for k, (trace_id, question) in enumerate(items):
            if trace_id == small_talk[0][0]:
                assert trace_id not in everything  # small talk is no case, but it is a turn
                continue
            info = everything[trace_id].metadata["session"]
            assert (info["id"], info["turn"], info["turns"]) == (session, k + 1, len(items))
            assert [(p["trace_id"], p["question"]) for p in info["previous"]] == items[:k]
    last = everything[turns[7][0]].metadata["session"]["previous"]
    assert last[3]["question"] == "Thanks, that helps!"  # from its root span: input and output
    assert last[3]["answer"].startswith("According to our help centre")
    # the same through convert (the whole file read as a dataset)
    res = ragbridge_cli("convert", path, tmp_path / "all.jsonl")
    assert res.returncode == 0, res.stderr
    assert {c.id: c.metadata["session"] for c in load_cases(tmp_path / "all.jsonl")} == {
        i: c.metadata["session"] for i, c in everything.items()}
    # a sample of two traces: their earlier turns come along, drawn or not
    two = sample_traces(path, 2, seed=1)
    assert two.drawn == 2 and two.sessions >= 1
    for case in two.cases:
        assert case.metadata["session"] == everything[case.id].metadata["session"]
    # by session: every turn of the drawn session, and only those
    res = ragbridge_cli("sample", path, "--by", "session", "--n", 1, "--seed", 3, "--json",
                        "--out", tmp_path / "session.jsonl")
    assert res.returncode == 0, res.stderr
    summary = json.loads(res.stdout)
    assert (summary["by"], summary["drawn"], summary["sessions"]) == ("session", 1, 1)
    drawn_session = min(sessions, key=lambda s: draw(s, 3))
    cases = load_cases(tmp_path / "session.jsonl")
    assert {c.id for c in cases} == {t for t, _ in sessions[drawn_session]} & set(everything)
    assert all(c.metadata["session"]["id"] == drawn_session for c in cases)


def test_a_time_window_keeps_the_traces_that_start_in_it(tmp_path):
    path = tmp_path / "spans.jsonl"
    first = record(path, _questions(2))
    import time

    time.sleep(0.05)
    middle = time.time_ns()
    second = record(path, _questions(3)[2:])
    assert {c.id for c in sample_traces(path, None, since=middle).cases} == {t for t, _, _ in second}
    assert {c.id for c in sample_traces(path, None, until=middle).cases} == {t for t, _, _ in first}
    with pytest.raises(DatasetError, match="--since must come before --until"):
        sample_traces(path, None, since=middle, until=middle - 1)
    with pytest.raises(DatasetError, match="neither a date and time"):
        sample_traces(path, None, since="last tuesday")
    with pytest.raises(DatasetError, match="no trace matches"):
        sample_traces(path, None, since="2999-01-01")


def test_export_scores_help_lists_every_format_and_store_a_plugin_registers():
    from ragbridge.traces import get_score_formats, get_trace_stores

    res = ragbridge_cli("export-scores", "--help", env={"COLUMNS": "80"})
    assert res.returncode == 0, res.stderr
    text = " ".join(res.stdout.split())
    formats, stores = sorted(get_score_formats()), sorted(get_trace_stores())
    assert {"phoenix", "langfuse", "jsonl", "csv"} <= set(formats) and {"phoenix", "langfuse"} <= set(stores)
    assert f"Where the scores go: {', '.join(formats)}; or a trace store's address: " \
           f"{', '.join(s + '://' for s in stores)}." in text
    assert max(len(line) for line in res.stdout.splitlines()) <= 80


def _feedback(path, kept, name, values, column="score", polarity=None):
    """A feedback file as a support tool writes one (csv.DictWriter): one signal per trace."""
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["trace_id", "name", column, "polarity"])
        writer.writeheader()
        for (trace_id, _, _), value in zip(kept, values):
            writer.writerow({"trace_id": trace_id, "name": name, column: value, "polarity": polarity or ""})


def _carrying(cases, name, values):
    return [c.model_copy(update={"metadata": {**c.metadata, "signals": [{"name": name, "label": v}]}})
            for c, v in zip(cases, values)]


def _outcome_table(path):
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["label", "verdict"])
        writer.writeheader()
        writer.writerows([{"label": "handed_to_agent", "verdict": "fail"},
                          {"label": "self_served", "verdict": "pass"}])
    return path


def test_a_signal_declares_its_polarity_and_labels_map_by_the_users_table(tmp_path, otlp):
    """An escalation (1 = escalated) is a human fail; escalated/resolved labels read; a follow-up or a
    thumbs-down is a fail; a file's polarity column and the option say otherwise where the name does not
    tell; labels of one's own mean what the user's table says."""
    from ragbridge.traces.signals import LabelTable, labels_from_signals, load_label_table, load_signals, \
        polarity_of

    path, kept, _ = otlp
    escalated = [1 if i % 4 == 0 else 0 for i in range(len(kept))]
    _feedback(tmp_path / "escalations.csv", kept, "escalation", escalated)
    cases = sample_traces(path, None, signals=load_signals(tmp_path / "escalations.csv")).cases
    by_trace = dict(zip((t for t, _, _ in kept), escalated))
    got = labels_from_signals(cases, "escalation", ["m"])
    assert got.polarity == "negative" and got.unread == 0
    assert dict(zip(got.frame["case_id"], got.frame["grade"])) == {t: 1.0 - e for t, e in by_trace.items()}
    words = ["escalated" if by_trace[c.id] else "resolved" for c in cases]
    read = labels_from_signals(_carrying(cases, "escalation", words), "escalation", ["m"])
    assert list(read.frame["grade"]) == [0.0 if w == "escalated" else 1.0 for w in words]
    own = ["handed_to_agent" if by_trace[c.id] else "self_served" for c in cases]
    unread = labels_from_signals(_carrying(cases, "outcome", own), "outcome", ["m"])
    assert unread.frame.empty and unread.labels == ["handed_to_agent", "self_served"]
    table = load_label_table(_outcome_table(tmp_path / "outcomes.csv"))
    mapped = labels_from_signals(_carrying(cases, "outcome", own), "outcome", ["m"], table=table)
    assert list(mapped.frame["grade"]) == [0.0 if o == "handed_to_agent" else 1.0 for o in own]
    assert [polarity_of(n) for n in ("follow_up_question", "thumbs-down", "user_escalated", "thumbs",
                                     "csat")] == ["negative", "negative", "negative", "positive", "positive"]
    follow = labels_from_signals(_carrying(cases, "follow_up", ["yes", "yes", "no"]), "follow_up", ["m"])
    assert list(follow.frame["grade"]) == [0.0, 0.0, 1.0]
    _feedback(tmp_path / "csat.csv", kept, "csat_complaints", escalated, polarity="negative")
    complaints = sample_traces(path, None, signals=load_signals(tmp_path / "csat.csv")).cases
    negative = labels_from_signals(complaints, "csat_complaints", ["m"])
    assert negative.polarity == "negative"
    assert dict(zip(negative.frame["case_id"], negative.frame["grade"])) == {
        t: 1.0 - e for t, e in by_trace.items()}
    flipped = labels_from_signals(complaints, "csat_complaints", ["m"], "positive")
    assert dict(zip(flipped.frame["case_id"], flipped.frame["grade"])) == {
        t: float(e) for t, e in by_trace.items()}
    assert LabelTable({(None, "ok"): True}).get("any", " OK ") is True
    (tmp_path / "bad.csv").write_text("label,verdict\nok,maybe\n")
    with pytest.raises(DatasetError, match="bad.csv:2: field 'verdict': verdict 'maybe' is neither pass"):
        load_label_table(tmp_path / "bad.csv")


@pytest.mark.slow
def test_validate_reads_an_escalation_as_a_fail_and_labels_through_the_users_table(tmp_path, otlp):
    """The command line: humans fail the escalated answers; labels it cannot read are named, with what to
    do; with the table they read."""
    from ragbridge import evaluate

    path, kept, _ = otlp
    escalated = [1 if i % 4 == 0 else 0 for i in range(len(kept))]
    _feedback(tmp_path / "escalations.csv", kept, "escalation", escalated)
    res = ragbridge_cli("sample", path, "--n", 100, "--signals", tmp_path / "escalations.csv",
                        "--out", tmp_path / "s.jsonl")
    assert res.returncode == 0, res.stderr
    cases = [c.model_copy(update={"must_contain": ["refund"]}) for c in load_cases(tmp_path / "s.jsonl")]
    evaluate(cases, metrics=["must_contain"], out=tmp_path / "run")
    res = ragbridge_cli("validate", tmp_path / "run", "--labels", "signal:escalation", "--json",
                        "--resamples", 0)
    assert res.returncode == 0, res.stderr
    assert "the 'escalation' signal read as negative" in res.stderr
    (row,) = json.loads(res.stdout)["validation"]
    assert (row["human_fail"], row["human_pass"]) == (sum(escalated), len(kept) - sum(escalated))
    by_trace = dict(zip((t for t, _, _ in kept), escalated))
    own = ["handed_to_agent" if by_trace[c.id] else "self_served" for c in cases]
    evaluate(_carrying(cases, "outcome", own), metrics=["must_contain"], out=tmp_path / "other")
    res = ragbridge_cli("validate", tmp_path / "other", "--labels", "signal:outcome", "--resamples", 0)
    assert res.returncode == 2
    assert "labels 'handed_to_agent', 'self_served' are neither a pass nor a fail" in res.stderr
    assert "--signal-labels" in res.stderr
    res = ragbridge_cli("validate", tmp_path / "other", "--labels", "signal:outcome", "--signal-labels",
                        _outcome_table(tmp_path / "outcomes.csv"), "--json", "--resamples", 0)
    assert res.returncode == 0, res.stderr
    (row,) = json.loads(res.stdout)["validation"]
    assert (row["human_fail"], row["human_pass"]) == (sum(escalated), len(kept) - sum(escalated))


def test_a_long_session_gives_each_turn_its_last_twenty(tmp_path):
    """A session of 25 turns: the last carries the 20 before it (and says it is turn 25), read whole or
    drawn alone (then the earlier turns' questions and answers come from their root spans)."""
    from opentelemetry.exporter.otlp.json.file.trace_exporter import FileSpanExporter

    from ragbridge.traces.sessions import PREVIOUS

    path = tmp_path / "spans.jsonl"
    provider = _provider(FileSpanExporter(path))
    tracer = provider.get_tracer("support-bot")
    questions = _questions(PREVIOUS + 5)
    made = [traced(q, tracer, user="u0") for q in questions]
    provider.shutdown()
    last = made[-1][0]
    session = {c.id: c for c in sample_traces(path, None).cases}[last].metadata["session"]
    assert (session["turn"], session["turns"]) == (PREVIOUS + 5, PREVIOUS + 5)
    assert [(p["trace_id"], p["question"]) for p in session["previous"]] == [
        (t, q) for (t, _), q in zip(made[4:-1], questions[4:-1])]
    seed = next(s for s in range(10_000) if min((t for t, _ in made), key=lambda t: draw(t, s)) == last)
    (alone,) = sample_traces(path, 1, seed=seed).cases
    assert alone.id == last and alone.metadata["session"] == session


def test_a_sample_counts_the_sessions_its_cases_are_turns_of(tmp_path):
    """A drawn trace that gives no case (no retriever span) leaves its session out of the count."""
    from opentelemetry.exporter.otlp.json.file.trace_exporter import FileSpanExporter

    path = tmp_path / "spans.jsonl"
    provider = _provider(FileSpanExporter(path))
    tracer = provider.get_tracer("support-bot")
    questions = _questions(3)
    cased = [traced(q, tracer, user="u0") for q in questions[:2]]
    traced(questions[2], tracer, user="u1", drop_retriever=True)  # session-u1: small talk only
    provider.shutdown()
    drawn = sample_traces(path, None)
    assert {c.id for c in drawn.cases} == {t for t, _ in cased} and drawn.drawn == 3
    assert drawn.sessions == 1 and drawn.record()["sessions"] == 1
    res = ragbridge_cli("sample", path, "--n", 10, "--out", tmp_path / "s.jsonl")
    assert res.returncode == 0, res.stderr
    assert "(3 drawn, turns of 1 session(s);" in " ".join(res.stdout.split())


def test_signals_that_disagree_on_a_trace_give_no_label_and_are_named(tmp_path, otlp):
    """A feedback file where two traces got a thumbs-up and a thumbs-down (in either order): those
    cases give no human label, and validate's notes count and name them; agreeing repeats are one."""
    from ragbridge.traces.signals import human_labels, load_signals

    path, kept, _ = otlp
    thumbs = [1 if i % 3 else 0 for i in range(len(kept))]
    with open(tmp_path / "feedback.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["trace_id", "name", "score"])
        writer.writeheader()
        writer.writerows({"trace_id": t, "name": "thumbs", "score": v} for (t, _, _), v in zip(kept, thumbs))
        writer.writerows([{"trace_id": kept[0][0], "name": "thumbs", "score": 1},   # 0, then 1
                          {"trace_id": kept[1][0], "name": "thumbs", "score": 0},   # 1, then 0
                          {"trace_id": kept[2][0], "name": "thumbs", "score": 1}])  # 1 again: agrees
    cases = sample_traces(path, None, signals=load_signals(tmp_path / "feedback.csv")).cases
    frame, notes = human_labels(cases, "thumbs", ["faithfulness"])
    labelled = dict(zip(frame["case_id"], frame["grade"]))
    assert kept[0][0] not in labelled and kept[1][0] not in labelled
    assert labelled == {t: float(v) for (t, _, _), v in list(zip(kept, thumbs))[2:]}
    (warning,) = [n for n in notes if n.startswith("warning:")]
    assert "2 case(s) carry 'thumbs' signals that disagree" in warning and "left out" in warning


@pytest.mark.slow
def test_no_command_writes_over_one_of_its_inputs(tmp_path, otlp):
    """An output that is one of the command's inputs (the same file, by another name or a link, or a run
    folder's own file) is refused: exit 2, the input untouched."""
    from ragbridge import evaluate

    path, kept, _ = otlp
    _feedback(tmp_path / "feedback.csv", kept, "thumbs", [1] * len(kept))
    res = ragbridge_cli("sample", path, "--n", 100, "--signals", tmp_path / "feedback.csv",
                        "--out", tmp_path / "s.jsonl")
    assert res.returncode == 0, res.stderr
    cases = [c.model_copy(update={"must_contain": ["refund"]}) for c in load_cases(tmp_path / "s.jsonl")]
    evaluate(cases, metrics=["must_contain"], out=tmp_path / "run")
    (tmp_path / "link.jsonl").symlink_to(path)
    (tmp_path / "gates.toml").write_text('[[gate]]\ncheck = "must_contain >= 0.5"\n')
    run = tmp_path / "run"
    attempts = [
        ("sample", path, "--n", 3, "--out", path),
        ("sample", path, "--n", 3, "--out", tmp_path / "link.jsonl"),
        ("sample", path, "--signals", tmp_path / "feedback.csv", "--out", tmp_path / "feedback.csv"),
        ("convert", path, tmp_path / "." / path.name),
        ("convert", tmp_path / "s.jsonl", tmp_path / "s.jsonl"),
        ("export-scores", run, "--to", "jsonl", "--out", run / "scores.jsonl"),
        ("report", run, "--format", "json", "--out", run / "run.json"),
        ("gate", run, "--config", tmp_path / "gates.toml", "--junit", tmp_path / "gates.toml"),
        ("diff", run, run, "--items", run / "scores.jsonl"),
        ("trulens-leaderboard", run, run / "run.json"),
    ]
    before = {p: p.read_bytes() for p in (path, tmp_path / "feedback.csv", tmp_path / "s.jsonl",
                                          tmp_path / "gates.toml", run / "scores.jsonl", run / "run.json")}
    for args in attempts:
        res = ragbridge_cli(*args)
        assert res.returncode == 2, (args, res.stdout, res.stderr)
        assert "the output is the input" in res.stderr and "nothing was written" in res.stderr, args
        assert {p: p.read_bytes() for p in before} == before, args
    res = ragbridge_cli("export-scores", run, "--to", "jsonl", "--out", run / "evaluations.jsonl")
    assert res.returncode == 0, res.stderr  # a new file beside the run's own is fine


def test_exported_labels_follow_the_runs_pass_rule_as_the_report_does(tmp_path, otlp):
    """A precision of the retrieved list passes at 1/k (the metric's pass mark), not at 0.5: the span
    evaluations say pass where the report does; --threshold still overrides."""
    from ragbridge import evaluate
    from ragbridge.analysis.thresholds import pass_marks
    from ragbridge.report import report_data
    from ragbridge.run.folder import load_run

    path, kept, _ = otlp
    cases = [c.model_copy(update={"relevant": {c.contexts[0].id: 1}})
             for c in sample_traces(path, None).cases]
    k = len(cases[0].contexts)
    run = tmp_path / "run"
    evaluate(cases, metrics=[f"precision@{k}"], out=run)
    mark = pass_marks(load_run(run)).get("native", f"precision@{k}")
    assert mark == pytest.approx(1 / k) and mark < 0.5
    for extra, want in (((), lambda v: v >= mark), (("--threshold", "0.5"), lambda v: v >= 0.5)):
        res = ragbridge_cli("export-scores", run, "--to", "jsonl", "--out", tmp_path / "evals.jsonl", *extra)
        assert res.returncode == 0, res.stderr
        rows = [json.loads(x) for x in (tmp_path / "evals.jsonl").read_text().splitlines()]
        assert len(rows) == len(cases) and any(mark <= r["score"] < 0.5 for r in rows)
        assert [r["label"] for r in rows] == ["pass" if want(r["score"]) else "fail" for r in rows]
    (row,) = [r for r in report_data(load_run(run), n_resamples=0)["summary"]
              if r.get("metric") == f"precision@{k}"]
    assert row["threshold"] == pytest.approx(mark)  # the report's mark


def test_a_labelled_sample_sampled_again_keeps_every_field(tmp_path, otlp):
    """A sample of traces, labelled (relevance labels, an answer check) and sampled again: each case
    drawn is the labelled case whole (its labels, trace, session and signals), drawn by its id."""
    from ragbridge.formats import write_cases
    from ragbridge.traces.signals import load_signals

    path, kept, _ = otlp
    _feedback(tmp_path / "feedback.csv", kept, "thumbs", [1] * len(kept))
    sampled = sample_traces(path, None, signals=load_signals(tmp_path / "feedback.csv")).cases
    labelled = [c.model_copy(update={"relevant": {c.contexts[0].id: 1}, "must_contain": ["refund"]})
                for c in sampled]
    write_cases(labelled, tmp_path / "labelled.jsonl")
    res = ragbridge_cli("sample", tmp_path / "labelled.jsonl", "--n", 5, "--seed", 2, "--out",
                        tmp_path / "again.jsonl")
    assert res.returncode == 0, res.stderr
    again = load_cases(tmp_path / "again.jsonl")
    assert {c.id for c in again} == set(sorted((c.id for c in labelled), key=lambda i: draw(i, 2))[:5])
    by_id = {c.id: c for c in labelled}
    for case in again:
        assert case.model_dump() == by_id[case.id].model_dump()
        assert case.metadata["trace"] and case.metadata["session"] and case.metadata["signals"]


def test_a_trace_that_records_no_question_is_counted_not_a_case_of_the_prompt(tmp_path):
    """The root and the retriever record no input; the LLM span's message is the prompt (chunks and a
    template): no case is made of the prompt, and the trace is counted as having no question."""
    from openinference.semconv.trace import MessageAttributes as M
    from openinference.semconv.trace import OpenInferenceSpanKindValues as K
    from openinference.semconv.trace import SpanAttributes as S
    from opentelemetry.exporter.otlp.json.file.trace_exporter import FileSpanExporter

    path = tmp_path / "spans.jsonl"
    provider = _provider(FileSpanExporter(path))
    tracer = provider.get_tracer("support-bot")
    asked = traced(_questions(1)[0], tracer)
    with tracer.start_as_current_span("rag") as root:
        root.set_attribute(S.OPENINFERENCE_SPAN_KIND, K.CHAIN.value)
        chunks = bm25.retrieve("refund")
        with tracer.start_as_current_span("retrieve") as span:
            span.set_attribute(S.OPENINFERENCE_SPAN_KIND, K.RETRIEVER.value)
            for i, c in enumerate(chunks):
                span.set_attribute(f"{S.RETRIEVAL_DOCUMENTS}.{i}.document.id", c["id"])
                span.set_attribute(f"{S.RETRIEVAL_DOCUMENTS}.{i}.document.content", c["text"])
        with tracer.start_as_current_span("generate") as span:
            span.set_attribute(S.OPENINFERENCE_SPAN_KIND, K.LLM.value)
            prompt = "Context:\n" + "\n".join(c["text"] for c in chunks) + "\nQuestion: "
            span.set_attribute(f"{S.LLM_INPUT_MESSAGES}.0.{M.MESSAGE_ROLE}", "user")
            span.set_attribute(f"{S.LLM_INPUT_MESSAGES}.0.{M.MESSAGE_CONTENT}", prompt)
            span.set_attribute(S.OUTPUT_VALUE, "Within 14 days.")
        silent = format(root.get_span_context().trace_id, "032x")
    provider.shutdown()
    drawn = sample_traces(path, None)
    assert [c.id for c in drawn.cases] == [asked[0]]
    (reason,) = drawn.report.skipped
    assert reason.startswith("no question") and drawn.report.examples[reason] == [silent]


def test_documents_without_text_are_counted_and_a_lone_score_is_no_chunk(tmp_path):
    """A retriever that records ids and scores but no content (content capture off): kept, with empty
    texts, and counted. A retriever that records documents 0 and 2 and a lone score at index 1: two
    chunks, the lone score counted, never a chunk of no id and no text."""
    from openinference.semconv.trace import OpenInferenceSpanKindValues as K
    from openinference.semconv.trace import SpanAttributes as S
    from opentelemetry.exporter.otlp.json.file.trace_exporter import FileSpanExporter

    from ragbridge.formats.records import chunk_id_for_text
    from ragbridge.traces.cases import NO_DOCUMENT, NO_TEXT

    path = tmp_path / "spans.jsonl"
    provider = _provider(FileSpanExporter(path))
    tracer = provider.get_tracer("support-bot")
    chunks = bm25.retrieve("refund")
    made = {}
    for name, documents in (("textless", [(i, c["id"], None, c["score"]) for i, c in enumerate(chunks)]),
                            ("gap", [(0, chunks[0]["id"], chunks[0]["text"], 0.9),
                                     (2, chunks[1]["id"], chunks[1]["text"], 0.5), (1, None, None, 0.7)])):
        with tracer.start_as_current_span("rag") as root:
            root.set_attribute(S.OPENINFERENCE_SPAN_KIND, K.CHAIN.value)
            root.set_attribute(S.INPUT_VALUE, "How long is the refund window?")
            root.set_attribute(S.OUTPUT_VALUE, "14 days.")
            with tracer.start_as_current_span("retrieve") as span:
                span.set_attribute(S.OPENINFERENCE_SPAN_KIND, K.RETRIEVER.value)
                for i, cid, text, score in documents:
                    prefix = f"{S.RETRIEVAL_DOCUMENTS}.{i}.document."
                    for key, value in (("id", cid), ("content", text), ("score", score)):
                        if value is not None:
                            span.set_attribute(prefix + key, value)
            made[name] = format(root.get_span_context().trace_id, "032x")
    provider.shutdown()
    drawn = sample_traces(path, None)
    cases = {c.id: c for c in drawn.cases}
    assert [(c.id, c.text) for c in cases[made["textless"]].contexts] == [(c["id"], "") for c in chunks]
    assert [c.id for c in cases[made["gap"]].contexts] == [chunks[0]["id"], chunks[1]["id"]]
    assert chunk_id_for_text("") not in {c.id for case in cases.values() for c in case.contexts}
    assert drawn.report.noted[NO_TEXT] == 1 and drawn.report.examples[NO_TEXT] == [made["textless"]]
    assert drawn.report.noted[NO_DOCUMENT] == 1 and drawn.report.examples[NO_DOCUMENT] == [made["gap"]]
    res = ragbridge_cli("sample", path, "--n", 10, "--out", tmp_path / "s.jsonl")
    assert res.returncode == 0, res.stderr
    warned = " ".join(res.stderr.split())
    assert f"1 of 2 trace(s) kept: {NO_TEXT}" in warned and f"1 of 2 trace(s) kept: {NO_DOCUMENT}" in warned


def test_an_export_appended_to_itself_gives_each_span_once(tmp_path, otlp):
    """The same OTLP file export written twice into one file (the exporter run again on it): the same
    cases as once, chunks not doubled, and the repeated spans counted."""
    from ragbridge.traces.cases import DUPLICATE_SPANS

    path, kept, bare = otlp
    twice = tmp_path / "twice.jsonl"
    twice.write_text(path.read_text() * 2)
    once = {c.id: c for c in sample_traces(path, None).cases}
    drawn = sample_traces(twice, None)
    assert {c.id: c.model_dump() for c in drawn.cases} == {i: c.model_dump() for i, c in once.items()}
    assert drawn.report.noted[DUPLICATE_SPANS] == len(kept)
    assert any(line.startswith(f"{len(kept)} of {len(kept) + len(bare)} trace(s) kept: {DUPLICATE_SPANS}")
               for line in drawn.report.lines())


def test_a_signals_file_that_names_no_sampled_trace_is_said(tmp_path, otlp):
    """Feedback keyed by other ids (another export's traces): the sample says none of it attached, and
    --json counts the signals the cases carry."""
    from ragbridge.traces.signals import load_signals

    path, kept, _ = otlp
    other = tmp_path / "other.jsonl"
    elsewhere = record(other, _questions(3))
    _feedback(tmp_path / "elsewhere.csv", elsewhere, "thumbs", [1, 0, 1])
    res = ragbridge_cli("sample", path, "--n", 100, "--signals", tmp_path / "elsewhere.csv", "--json",
                        "--out", tmp_path / "s.jsonl")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["signals"] == 0
    assert "none of its 3 signal(s) is about a sampled trace" in " ".join(res.stderr.split())
    _feedback(tmp_path / "feedback.csv", kept, "thumbs", [1] * 4)
    drawn = sample_traces(path, None, signals=load_signals(tmp_path / "feedback.csv"))
    assert drawn.signals == 4 and drawn.record()["signals"] == 4


def test_plain_http_to_another_machine_is_refused_unless_allowed(tmp_path, monkeypatch):
    """phoenix+http:// to a host that is not this machine would carry the key in the clear: refused
    before any request, by sample and export-scores alike; allowed when the environment says so."""
    from ragbridge.traces.stores import PLAIN_HTTP, parse_address

    monkeypatch.delenv(PLAIN_HTTP, raising=False)
    assert parse_address("phoenix+http://127.0.0.1:6006/p").base_url == "http://127.0.0.1:6006"
    assert parse_address("phoenix://traces.example.com/p").base_url == "https://traces.example.com"
    with pytest.raises(DatasetError, match="plain HTTP to traces.example.com"):
        parse_address("phoenix+http://traces.example.com:6006/p")
    res = ragbridge_cli("sample", "--from", "phoenix+http://10.0.0.7:6006/p", "--out", tmp_path / "s.jsonl",
                        env={"PHOENIX_API_KEY": "k", PLAIN_HTTP: ""})
    assert res.returncode == 2 and "would send the key and the spans unencrypted" in res.stderr
    assert f"{PLAIN_HTTP}=1" in " ".join(res.stderr.split()) and not (tmp_path / "s.jsonl").exists()
    monkeypatch.setenv(PLAIN_HTTP, "1")
    assert parse_address("phoenix+http://10.0.0.7:6006/p").base_url == "http://10.0.0.7:6006"


def test_a_last_line_cut_short_says_the_exporter_may_still_be_writing(tmp_path, otlp):
    """The file exporter's output read while it writes: the last line ends mid-string. One error naming
    the line and column (in plain words) and what to do; a bad line before others says what a line is."""
    path, _, _ = otlp
    lines = path.read_text().splitlines(keepends=True)
    cut = lines[-1][: lines[-1].rindex('"spanId"') + 4]
    (tmp_path / "writing.jsonl").write_text("".join(lines[:-1]) + cut)
    res = ragbridge_cli("sample", tmp_path / "writing.jsonl", "--n", 5, "--out", tmp_path / "s.jsonl")
    assert res.returncode == 2 and not (tmp_path / "s.jsonl").exists()
    text = " ".join(res.stderr.split())
    assert f"writing.jsonl:{len(lines)}: not valid JSON: Unterminated string starting at column" in text
    assert "at at" not in text and "the last line is cut short: is the exporter still writing?" in text
    (tmp_path / "middle.jsonl").write_text(lines[0] + cut + "\n" + "".join(lines))
    with pytest.raises(DatasetError, match=r"middle.jsonl:2: .*one \{\"resourceSpans\""):
        sample_traces(tmp_path / "middle.jsonl", None)


def test_document_scores_written_as_text_or_words_are_counted(tmp_path):
    """An instrumentation that records scores as text: "0.7" is read as 0.7, "high" is no score; both
    are counted, as a document without text is."""
    from openinference.semconv.trace import OpenInferenceSpanKindValues as K
    from openinference.semconv.trace import SpanAttributes as S
    from opentelemetry.exporter.otlp.json.file.trace_exporter import FileSpanExporter

    from ragbridge.traces.cases import SCORE_TEXT, SCORE_UNREAD

    path = tmp_path / "spans.jsonl"
    provider = _provider(FileSpanExporter(path))
    tracer = provider.get_tracer("support-bot")
    chunks = bm25.retrieve("refund")[:3]
    with tracer.start_as_current_span("rag") as root:
        root.set_attribute(S.OPENINFERENCE_SPAN_KIND, K.CHAIN.value)
        root.set_attribute(S.INPUT_VALUE, "How long is the refund window?")
        root.set_attribute(S.OUTPUT_VALUE, "14 days.")
        with tracer.start_as_current_span("retrieve") as span:
            span.set_attribute(S.OPENINFERENCE_SPAN_KIND, K.RETRIEVER.value)
            for i, (c, score) in enumerate(zip(chunks, ["0.7", "high", 0.2])):
                span.set_attribute(f"{S.RETRIEVAL_DOCUMENTS}.{i}.document.id", c["id"])
                span.set_attribute(f"{S.RETRIEVAL_DOCUMENTS}.{i}.document.content", c["text"])
                span.set_attribute(f"{S.RETRIEVAL_DOCUMENTS}.{i}.document.score", score)
    provider.shutdown()
    drawn = sample_traces(path, None)
    (case,) = drawn.cases
    assert [c.score for c in case.contexts] == [0.7, None, 0.2]
    assert drawn.report.noted[SCORE_TEXT] == 1 and drawn.report.noted[SCORE_UNREAD] == 1


def test_sample_errors_name_what_sample_reads(tmp_path, otlp):
    """A feedback CSV given as the traces, a format sample does not read, a bad option: each error
    says what sample reads, and an option's error names no file."""
    path, kept, _ = otlp
    _feedback(tmp_path / "feedback.csv", kept, "thumbs", [1] * len(kept))
    with pytest.raises(DatasetError, match="a csv file is neither a trace export nor a JSON lines") as got:
        sample_traces(tmp_path / "feedback.csv", None)
    assert "otlp" in str(got.value) and "ragbridge convert" in str(got.value)
    with pytest.raises(DatasetError, match="sample reads no format 'ragas'") as got:
        sample_traces(path, None, format="ragas")
    assert "trace formats: " in str(got.value) and "deepeval" not in str(got.value)
    with pytest.raises(DatasetError) as got:
        sample_traces(path, 0)
    assert str(got.value) == "--n must be at least 1, got 0"


def test_the_draw_is_the_formula_the_docs_give():
    """docs/traces.md gives the draw as a Python expression: evaluated, it is `draw` exactly."""
    import hashlib
    import re
    from pathlib import Path

    page = (Path(__file__).resolve().parent.parent / "docs" / "traces.md").read_text(encoding="utf-8")
    (formula,) = re.findall(r"`(int\.from_bytes\(hashlib\.blake2b\(.*?/ 2\*\*64)`", page)
    for seed, trace_id in ((0, "a648a7dd06839eb905b6e6e307d4bedc"), (7, "s1-0"), (3, "é")):
        assert eval(formula, {"hashlib": hashlib, "seed": seed, "trace_id": trace_id}) == draw(trace_id, seed)


def test_an_empty_trace_file_is_said_to_be_empty_not_a_golden_set(tmp_path):
    """The file exporter's file before its first flush: empty, said so, with no word of golden sets."""
    from opentelemetry.exporter.otlp.json.file.trace_exporter import FileSpanExporter

    path = tmp_path / "spans.jsonl"
    provider = _provider(FileSpanExporter(path))
    provider.get_tracer("support-bot")
    provider.shutdown()  # nothing was traced: the exporter leaves the file empty (or never makes it)
    path.touch()
    res = ragbridge_cli("sample", path, "--out", tmp_path / "s.jsonl")
    assert res.returncode == 2 and "file is empty: no spans or interactions to sample" in res.stderr
    assert "golden set" not in res.stderr and not (tmp_path / "s.jsonl").exists()


def test_console_exporter_output_among_log_lines_reads_and_otlp_says_what_it_is(tmp_path):
    """The SDK's ConsoleSpanExporter writing to the application's own log, between its log lines: the
    spans are read (the log lines skipped and counted); read as OTLP, the error says to read it as
    span objects."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

    log = tmp_path / "app.log"
    with open(log, "w") as f:
        provider = TracerProvider(resource=Resource.create({"service.name": "support-bot"}))
        provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=f)))
        tracer = provider.get_tracer("support-bot")
        made = []
        for i, question in enumerate(_questions(3)):
            f.write(f"INFO: request {i} received\n")
            f.flush()
            made.append(traced(question, tracer, user=f"u{i}"))
        provider.shutdown()
    assert log.read_text().startswith("INFO: request 0 received\n{")
    res = ragbridge_cli("sample", log, "--out", tmp_path / "s.jsonl")
    assert res.returncode == 0, res.stderr
    assert {c.id for c in load_cases(tmp_path / "s.jsonl")} == {t for t, _ in made}
    assert "3 line(s) outside the span objects skipped" in res.stderr
    res = ragbridge_cli("sample", log, "--from", "otlp", "--out", tmp_path / "o.jsonl")
    assert res.returncode == 2 and "--from otel-spans" in " ".join(res.stderr.split())
