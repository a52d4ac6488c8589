"""Odd but legal trace files: each is read, or refused with one error naming the file, the line and
the field (exit 2, nothing written), never a traceback.

The spans are recorded by the OpenTelemetry SDK (its OTLP JSON file exporter, as tests/test_traces.py
does) with the odd value set through the SDK's own API where it takes one (an attribute, a start
time), else the exporter's line edited where it holds the value (a list that is not one). Langfuse
observations are the SDK's models where the Langfuse SDK is installed (tests/test_trace_store.py);
here they are plain records of the same fields.
"""

import json

import pytest
from conftest import ragbridge_cli

from ragbridge.formats import DatasetError
from ragbridge.run.sample import load_mapping, sample_traces


@pytest.fixture(autouse=True)
def application_tracing(monkeypatch):
    monkeypatch.delenv("OTEL_SDK_DISABLED", raising=False)


def _deep(levels: int) -> str:
    return "[" * levels + "1" + "]" * levels


def record(path, root=None, retriever=None, start_time=None, documents=(("d0", "first"), ("d1", "second"))):
    """One RAG trace (a CHAIN root, a RETRIEVER with ``documents``) written by the SDK's OTLP JSON file
    exporter; ``root``/``retriever``: more attributes; ``start_time``: the root's, in nanoseconds."""
    from opentelemetry.exporter.otlp.json.file.trace_exporter import FileSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(FileSpanExporter(path)))
    tracer = provider.get_tracer("odd")
    with tracer.start_as_current_span("rag", start_time=start_time) as span:
        span.set_attributes({"openinference.span.kind": "CHAIN", "output.value": "14 days.",
                             "input.value": "How long is the refund window?", **(root or {})})
        with tracer.start_as_current_span("retrieve") as inner:
            inner.set_attribute("openinference.span.kind", "RETRIEVER")
            for i, (doc_id, text) in enumerate(documents):
                inner.set_attribute(f"retrieval.documents.{i}.document.id", doc_id)
                inner.set_attribute(f"retrieval.documents.{i}.document.content", text)
            inner.set_attributes(retriever or {})
    provider.shutdown()
    return path


def _edited(path, edit):
    """The exporter's lines with ``edit`` applied to each parsed line."""
    lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    for line in lines:
        edit(line)
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def _spans(line):
    return line["resourceSpans"][0]["scopeSpans"][0]["spans"]


# name: (how the file is made, the field named, words of the message); the exporter writes a span a
# line as it ends: the retriever on line 1, the root on line 2
ROOT = {"metadata 150 levels deep", "metadata 5000 levels deep", "a JSON input 5000 levels deep",
        "a float start time", "a huge start time", "tags as a number", "a kvlist tag"}
ODD = {
    "metadata 150 levels deep": (dict(root={"metadata": json.dumps({"a": json.loads(_deep(150))})}),
                                 "metadata", "nests more than 100 levels"),
    "metadata 5000 levels deep": (dict(root={"metadata": '{"a": ' + _deep(5000) + "}"}),
                                  "metadata", "nests more than 100 levels"),
    "a JSON input 5000 levels deep": (dict(root={"input.value": '{"q": ' + _deep(5000) + "}",
                                                 "input.mime_type": "application/json"}),
                                      "input.value", "too deep"),
    "ANSI in a document id": (dict(documents=[("d\x1b[31m0", "red")]), "retrieval.documents.0.document.id",
                              "holds U+001B"),
    "a superscript index": (dict(retriever={"retrieval.documents.\u00b2.document.id": "x"}),
                            "retrieval.documents.\u00b2.document.id", "not a plain number in the digits 0-9"),
    "an Arabic-Indic index": (dict(retriever={"retrieval.documents.\u0661.document.id": "evil"}),
                              "retrieval.documents.\u0661.document.id", "not a plain number in the digits"),
    "an index with a leading zero": (dict(retriever={"retrieval.documents.01.document.id": "evil"}),
                                     "retrieval.documents.01.document.id", "read as another item's index"),
    "a float start time": (dict(start_time=int(1.7e300)), "startTimeUnixNano", "after the year 9999"),
    "a huge start time": (dict(start_time=10**30), "startTimeUnixNano", "after the year 9999"),
    "tags as a number": (dict(root={"tag.tags": 5}), "tag.tags", "tags must be a list of texts"),
    "documents as a text": (dict(documents=(), retriever={"retrieval.documents": "d0, d1"}),
                            "retrieval.documents", "must be a list of documents (objects), got 'd0, d1'"),
    "documents as numbers": (dict(documents=(), retriever={"retrieval.documents": [1, 2]}),
                             "retrieval.documents", "(objects), got a list holding 1"),
    "GenAI documents as an object": (dict(documents=(), retriever={
        "gen_ai.retrieval.documents": json.dumps({"id": "d0"})}), "gen_ai.retrieval.documents",
        "must be a list of documents (objects), got an object"),
    "resourceSpans an integer": (lambda line: line.update(resourceSpans=5), "resourceSpans",
                                 "must be a list"),
    "scopeSpans an object": (lambda line: line["resourceSpans"][0].update(scopeSpans={"spans": []}),
                             "resourceSpans[0].scopeSpans", "must be a list"),
    "spans a string": (lambda line: line["resourceSpans"][0]["scopeSpans"][0].update(spans="span"),
                       "resourceSpans[0].scopeSpans[0].spans", "must be a list"),
    "resource attributes an integer": (lambda line: line["resourceSpans"][0]["resource"].update(attributes=3),
                                       "resourceSpans[0].resource.attributes", "must be a list"),
    "span attributes an object": (lambda line: _spans(line)[0].update(attributes={"k": "v"}), "attributes",
                                  "must be a list"),
    "an array value a number": (lambda line: _spans(line)[0]["attributes"].append(
        {"key": "tag.tags", "value": {"arrayValue": 7}}), "tag.tags.arrayValue", "must be a list"),
    "a kvlist tag": (lambda line: _spans(line)[-1]["attributes"].append(
        {"key": "tag.tags", "value": {"kvlistValue": {"values": []}}}), "tag.tags",
        "must be a list of texts"),
    "a span id an object": (lambda line: _spans(line)[0].update(spanId={"id": 1}), "spanId",
                            "an id must be a string"),
}


@pytest.mark.parametrize("name", sorted(ODD))
def test_an_odd_trace_file_is_an_error_naming_file_line_and_field(tmp_path, name):
    how, field, words = ODD[name]
    path = tmp_path / "spans.jsonl"
    if callable(how):
        _edited(record(path), how)
    else:
        record(path, **how)
    with pytest.raises(DatasetError) as caught:
        sample_traces(path, None)
    error = caught.value
    assert (error.path, error.line, error.field) == (str(path), 2 if name in ROOT else 1, field), str(error)
    assert words in error.message, str(error)
    assert error.hint, str(error)


def test_the_command_line_says_it_in_one_line_and_writes_nothing(tmp_path):
    path = record(tmp_path / "spans.jsonl", retriever={"retrieval.documents.\u0661.document.id": "evil"})
    res = ragbridge_cli("sample", path, "--out", tmp_path / "out.jsonl")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert f"{path}:1: field 'retrieval.documents.\u0661.document.id'" in res.stderr
    assert not (tmp_path / "out.jsonl").exists()


def test_an_index_in_other_digits_never_lands_on_another_document(tmp_path):
    """Document 1's id, given again under the index written in Arabic-Indic digits, was taken as
    document 1's: the id it had was lost without a word."""
    plain = sample_traces(record(tmp_path / "plain.jsonl"), None).cases[0]
    assert [c.id for c in plain.contexts] == ["d0", "d1"]
    odd = record(tmp_path / "odd.jsonl", retriever={"retrieval.documents.\u0661.document.id": "d-evil"})
    with pytest.raises(DatasetError, match="not a plain number in the digits 0-9"):
        sample_traces(odd, None)


def test_a_mapping_position_in_other_digits_is_refused(tmp_path):
    mapping = tmp_path / "m.toml"
    mapping.write_text('[fields]\nquestion = "turns[\u0661].text"\n', encoding="utf-8")
    with pytest.raises(DatasetError, match=r"\[fields\] question: \[\u0661\] is neither a position"):
        load_mapping(mapping)
    mapping.write_text('[fields]\nquestion = "turns.\u0661.text"\n', encoding="utf-8")
    log = tmp_path / "log.jsonl"
    turns = {"\u0661": {"text": "Q?"}, "1": {"text": "other"}}
    log.write_text(json.dumps({"id": "a", "turns": turns}) + "\n")
    (case,) = sample_traces(log, None, mapping=load_mapping(mapping)).cases
    assert case.question == "Q?"  # the key as it is written, not position 1


def test_odd_values_that_are_legal_are_read(tmp_path):
    """A single tag as a text, a time in seconds as a float, an unset (0) end time."""
    path = record(tmp_path / "spans.jsonl", root={"tag.tags": "billing"}, start_time=1_767_225_500 * 10**9)
    _edited(path, lambda line: [s.update(startTimeUnixNano=1767225600.25, endTimeUnixNano="0")
                                for s in _spans(line) if s["name"] == "rag"])
    (case,) = sample_traces(path, None).cases
    assert case.tags == ["billing"]
    assert case.metadata["trace"]["start_time"] == "2026-01-01T00:00:00.250000Z"


def _observation(oid, kind, **more):
    return {"id": oid, "traceId": "t-1", "type": kind, "startTime": "2026-11-02T10:00:00Z",
            "endTime": "2026-11-02T10:00:01Z", "name": kind.lower(), **more}


LANGFUSE = {
    "an input 150 levels deep": ([_observation("r", "SPAN", input=json.loads(_deep(150)))],
                                 "observations[0].input", "nests more than 100 levels"),
    "an input 5000 levels deep as JSON text": (
        [_observation("r", "SPAN", input='{"q": ' + _deep(5000) + "}")], "observations[0].input", "too deep"),
    "a huge start time": ([_observation("r", "SPAN", startTime=1e300)], "observations[0].startTime",
                          "after the year 9999"),
    "a start time that is no time": ([_observation("r", "SPAN", startTime="yesterday")],
                                     "observations[0].startTime", "neither a number nor an ISO 8601 text"),
    "an id that is a list": ([_observation(["r"], "SPAN")], "observations[0].id", "an id must be a string"),
    "an observation that is a number": ([_observation("r", "SPAN"), 7], "observations[1]",
                                        "an observation must be"),
    "a retriever's output a number": ([_observation("r", "SPAN"), _observation("d", "RETRIEVER", output=3)],
                                      "observations[1].output", "must hold its documents"),
    "tags an object": ([_observation("r", "SPAN", tags={"plan": "pro"})], "observations[0].tags",
                       "tags must be a list of texts"),
    "a session id an object": ([_observation("r", "SPAN", sessionId={"id": 1})], "observations[0].sessionId",
                               "sessionId must be a text"),
}


@pytest.mark.parametrize("name", sorted(LANGFUSE))
def test_an_odd_langfuse_download_is_an_error_naming_file_and_field(tmp_path, name):
    observations, field, words = LANGFUSE[name]
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"id": "t-1", "timestamp": "2026-11-02T10:00:00Z",
                                "observations": observations, "scores": []}))
    with pytest.raises(DatasetError) as caught:
        sample_traces(path, None, format="langfuse")
    assert (caught.value.path, caught.value.field) == (str(path), field), str(caught.value)
    assert words in caught.value.message, str(caught.value)


@pytest.mark.parametrize("field,value", [("observations", 5), ("observations", {"r": {}}), ("scores", 5),
                                         ("data", "page")])
def test_a_langfuse_list_that_is_not_one_is_an_error_naming_it(tmp_path, field, value):
    record = {"id": "t-1", "timestamp": "2026-11-02T10:00:00Z", "observations": [_observation("r", "SPAN")],
              "scores": []}
    record = {"data": value, "meta": {}} if field == "data" else {**record, field: value}
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(record))
    with pytest.raises(DatasetError, match=f"field '{field}': {field} must be a list"):
        sample_traces(path, None, format="langfuse")


def test_a_deep_chain_of_langfuse_observations_reads(tmp_path):
    """Observations 5,000 parents deep: nothing walks the tree by recursion."""
    chain = [_observation("o0", "SPAN", input="How long is the refund window?", output="14 days.")]
    for i in range(1, 5000):
        chain.append(_observation(f"o{i}", "SPAN", parentObservationId=f"o{i - 1}"))
    chain.append(_observation("ret", "RETRIEVER", parentObservationId="o4999",
                              output=[{"id": "d0", "content": "Refunds within 14 days."}]))
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"id": "t-1", "timestamp": "2026-11-02T10:00:00Z", "observations": chain}))
    (case,) = sample_traces(path, None).cases
    assert case.question == "How long is the refund window?" and [c.id for c in case.contexts] == ["d0"]


@pytest.mark.parametrize("record,field", [
    ({"trace_id": {"id": 1}, "score": 1}, "trace_id"), ({"trace_id": "ab", "label": {"up": True}}, "label"),
    ({"trace_id": "ab", "name": ["thumbs"], "score": 1}, "name"),
    ({"trace_id": "ab", "score": 1, "polarity": "sideways"}, "polarity")])
def test_a_signal_of_the_wrong_kind_is_an_error_naming_its_field(tmp_path, record, field):
    from ragbridge.traces.signals import load_signals

    path = tmp_path / "signals.jsonl"
    path.write_text(json.dumps(record) + "\n")
    with pytest.raises(DatasetError) as caught:
        load_signals(path)
    assert (caught.value.line, caught.value.field) == (1, field), str(caught.value)


def test_a_logged_id_that_is_a_list_is_an_error_not_its_text(tmp_path):
    log = tmp_path / "log.jsonl"
    log.write_text("".join(json.dumps({"id": i, "question": "Q?"}) + "\n" for i in ("a", ["b"])))
    with pytest.raises(DatasetError, match=r"log.jsonl:2: field 'id': the id must be a text, got a list"):
        sample_traces(log, None)
