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
