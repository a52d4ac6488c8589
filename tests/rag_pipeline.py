"""A small real RAG pipeline over the support-bot example's chunks, for the target tests.

Retrieval is BM25 (rank_bm25) over every chunk of the example; the answer is templated from the
top chunk's first sentence. `weak` ranks with BM25 over each chunk's first three words only, a
deliberately worse retriever.
"""

import json
import re
from pathlib import Path

from rank_bm25 import BM25Okapi

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "support-bot" / "golden.jsonl"
CALLS = {"n": 0}


def _chunks():
    seen = {}
    for line in EXAMPLE.read_text(encoding="utf-8").splitlines():
        for c in json.loads(line).get("contexts", []):
            seen.setdefault(c["id"], c)
    return list(seen.values())


CHUNKS = _chunks()


def _tokens(text):
    return re.findall(r"[a-z0-9]+", text.lower())


class Pipeline:
    def __init__(self, first_words=None, k=5):
        docs = [_tokens(c["text"])[:first_words] if first_words else _tokens(c["text"]) for c in CHUNKS]
        self.bm25 = BM25Okapi(docs)
        self.k = k

    def retrieve(self, question):
        CALLS["n"] += 1
        scores = self.bm25.get_scores(_tokens(question))
        order = sorted(range(len(CHUNKS)), key=lambda i: (-scores[i], CHUNKS[i]["id"]))[: self.k]
        return [dict(CHUNKS[i], score=float(scores[i])) for i in order]

    def answer(self, question, chunks):
        if not chunks:
            return "I couldn't find anything about that in our help centre."
        first = re.split(r"(?<=[.!?])\s", chunks[0].text)[0]
        return f"According to our help centre: {first}"


bm25 = Pipeline()
weak = Pipeline(first_words=3)


def pipeline(question):
    """The one-callable form: question -> {contexts, answer}."""
    from ragbridge.run.target import parse_chunks

    chunks = bm25.retrieve(question)
    return {"contexts": chunks, "answer": bm25.answer(question, parse_chunks(chunks))}


async def async_pipeline(question):
    return pipeline(question)


def flaky(question):
    """Fails on one question, returns the wrong shape on another."""
    if "refund" in question.lower():
        raise RuntimeError("retriever timed out")
    if "invoice" in question.lower():
        return ["not", "a", "mapping"]
    return pipeline(question)


def traced(question, tracer, convention="openinference", user="u1", drop_retriever=False, pipe=None):
    """Answer ``question`` as `pipeline` does, recording the OpenTelemetry spans an instrumented RAG
    application records: a root CHAIN span (question in, answer out), a RETRIEVER span with the
    ranked documents and an LLM span, by the OpenInference conventions, or with
    ``convention="genai"`` by the OpenTelemetry GenAI ones (``gen_ai.retrieval.documents``).
    ``drop_retriever``: the retrieval is not instrumented (a trace with no retriever span).
    Returns the root span's trace id and span id as hex."""
    from openinference.semconv.trace import (DocumentAttributes as D, MessageAttributes as M,
                                             OpenInferenceSpanKindValues as K, SpanAttributes as S)
    from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as G
    from ragbridge.run.target import parse_chunks

    pipe = pipe or bm25
    with tracer.start_as_current_span("rag") as root:
        root.set_attribute(S.OPENINFERENCE_SPAN_KIND, K.CHAIN.value)
        root.set_attribute(S.INPUT_VALUE, question)
        root.set_attribute(S.SESSION_ID, f"session-{user}")
        root.set_attribute(S.USER_ID, user)
        root.set_attribute(S.TAG_TAGS, ["support", "billing" if "refund" in question.lower() else "general"])
        root.set_attribute(S.METADATA, json.dumps({"plan": "pro" if user.endswith("1") else "free"}))
        if drop_retriever:
            chunks = pipe.retrieve(question)
        else:
            with tracer.start_as_current_span("retrieve") as span:
                chunks = pipe.retrieve(question)
                if convention == "genai":
                    span.set_attribute(G.GEN_AI_OPERATION_NAME, "retrieval")
                    span.set_attribute(G.GEN_AI_RETRIEVAL_QUERY_TEXT, question)
                    span.set_attribute(G.GEN_AI_RETRIEVAL_DOCUMENTS, json.dumps(
                        [{"id": c["id"], "score": c["score"], "content": c["text"]} for c in chunks]))
                else:
                    span.set_attribute(S.OPENINFERENCE_SPAN_KIND, K.RETRIEVER.value)
                    span.set_attribute(S.INPUT_VALUE, question)
                    for i, c in enumerate(chunks):
                        prefix = f"{S.RETRIEVAL_DOCUMENTS}.{i}."
                        span.set_attribute(prefix + D.DOCUMENT_ID, c["id"])
                        span.set_attribute(prefix + D.DOCUMENT_CONTENT, c["text"])
                        span.set_attribute(prefix + D.DOCUMENT_SCORE, c["score"])
                        span.set_attribute(prefix + D.DOCUMENT_METADATA,
                                           json.dumps({"source": c.get("source")}))
        with tracer.start_as_current_span("generate") as span:
            answer = pipe.answer(question, parse_chunks(chunks))
            if convention == "genai":
                span.set_attribute(G.GEN_AI_OPERATION_NAME, "chat")
            else:
                span.set_attribute(S.OPENINFERENCE_SPAN_KIND, K.LLM.value)
                span.set_attribute(S.LLM_MODEL_NAME, "templated")
                span.set_attribute(f"{S.LLM_INPUT_MESSAGES}.0.{M.MESSAGE_ROLE}", "user")
                span.set_attribute(f"{S.LLM_INPUT_MESSAGES}.0.{M.MESSAGE_CONTENT}", question)
                span.set_attribute(S.OUTPUT_VALUE, answer)
        root.set_attribute(S.OUTPUT_VALUE, answer)
        ctx = root.get_span_context()
    return format(ctx.trace_id, "032x"), format(ctx.span_id, "016x")


def slow(question):
    """`pipeline` a tenth of a second a call, as a real system's answers take time."""
    import time

    time.sleep(0.1)
    return pipeline(question)
