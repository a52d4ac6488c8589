"""A small support bot instrumented with OpenTelemetry and OpenInference, for docs/traces.md.

    python examples/traces/app.py runs/traces/spans.jsonl runs/traces/feedback.csv

It answers the support-bot example's questions (retrieval: the chunks sharing the most words with
the question; the answer: the best chunk's first sentence) and records each request as a trace, by
OpenInference's conventions: a CHAIN root span (the question in, the answer out), a RETRIEVER span
with the ranked documents (``retrieval.documents.N.document.*``) and an LLM span. The OpenTelemetry
SDK's OTLP JSON file exporter writes the spans, as a collector's file exporter would. Each of the
four users talks in one session (``session.id``), a turn a request. Every tenth request skips
retrieval (a small-talk answer), so its trace has no retriever span. Users' thumbs on the answers,
and whether the conversation was escalated to a human agent after the answer (1: escalated), go to
a feedback file, by root span id, as a support tool would record them.

Needs ``opentelemetry-sdk``, ``openinference-semantic-conventions`` and
``opentelemetry-exporter-otlp-json-file``.
"""

import csv
import json
import re
import sys
from pathlib import Path

from openinference.semconv.trace import (DocumentAttributes as D, OpenInferenceSpanKindValues as K,
                                         SpanAttributes as S)
from opentelemetry.exporter.otlp.json.file.trace_exporter import FileSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

GOLDEN = Path(__file__).resolve().parent.parent / "support-bot" / "golden.jsonl"
CASES = [json.loads(line) for line in GOLDEN.read_text(encoding="utf-8").splitlines()]
CHUNKS = list({c["id"]: c for case in CASES for c in case.get("contexts", [])}.values())


def words(text):
    return set(re.findall(r"[a-z0-9]+", text.lower()))


def retrieve(question, k=4):
    q = words(question)
    ranked = sorted(CHUNKS, key=lambda c: (-len(q & words(c["text"])), c["id"]))[:k]
    return [dict(c, score=float(len(q & words(c["text"])))) for c in ranked]


def main(spans_path, feedback_path):
    Path(spans_path).parent.mkdir(parents=True, exist_ok=True)
    provider = TracerProvider(resource=Resource.create({"service.name": "support-bot"}))
    provider.add_span_processor(BatchSpanProcessor(FileSpanExporter(spans_path)))
    tracer = provider.get_tracer("support-bot")
    feedback = []
    for i, case in enumerate(CASES):
        question = case["question"]
        with tracer.start_as_current_span("chat") as root:
            root.set_attribute(S.OPENINFERENCE_SPAN_KIND, K.CHAIN.value)
            root.set_attribute(S.INPUT_VALUE, question)
            root.set_attribute(S.USER_ID, f"user-{i % 4}")
            root.set_attribute(S.SESSION_ID, f"session-{i % 4}")
            chunks = []
            if i % 10 != 9:
                with tracer.start_as_current_span("retrieve") as span:
                    chunks = retrieve(question)
                    span.set_attribute(S.OPENINFERENCE_SPAN_KIND, K.RETRIEVER.value)
                    span.set_attribute(S.INPUT_VALUE, question)
                    for n, c in enumerate(chunks):
                        key = f"{S.RETRIEVAL_DOCUMENTS}.{n}."
                        span.set_attribute(key + D.DOCUMENT_ID, c["id"])
                        span.set_attribute(key + D.DOCUMENT_CONTENT, c["text"])
                        span.set_attribute(key + D.DOCUMENT_SCORE, c["score"])
                        span.set_attribute(key + D.DOCUMENT_METADATA, json.dumps({"source": c.get("source")}))
            with tracer.start_as_current_span("generate") as span:
                answer = (re.split(r"(?<=[.!?])\s", chunks[0]["text"])[0] if chunks
                          else "Happy to help! Could you tell me more?")
                span.set_attribute(S.OPENINFERENCE_SPAN_KIND, K.LLM.value)
                span.set_attribute(S.OUTPUT_VALUE, answer)
            root.set_attribute(S.OUTPUT_VALUE, answer)
            span_id = format(root.get_span_context().span_id, "016x")
        expected = (case.get("answer") or "").lower()
        liked = bool(chunks) and any(w in expected for w in words(answer) if len(w) > 6)
        feedback.append({"span_id": span_id, "name": "thumbs", "label": "up" if liked else "down"})
        feedback.append({"span_id": span_id, "name": "escalation", "score": int(not liked and i % 2 == 0)})
    provider.shutdown()
    with open(feedback_path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=["span_id", "name", "label", "score"])
        writer.writeheader()
        writer.writerows(feedback)
    print(f"{len(CASES)} requests traced into {spans_path}; thumbs in {feedback_path}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
