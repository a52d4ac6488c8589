"""Canonical cases to Phoenix eval records, and Phoenix's ``Score`` objects back to ragbridge Scores.

A Phoenix record is a plain dict of strings named after the evaluator's prompt fields:

======================  ==========================================================================
metric                  record
======================  ==========================================================================
``faithfulness``        ``{"input": question, "context": chunk texts joined by SEPARATOR,
                        "output": answer}``
``context_relevance``   one record per chunk: ``{"input": question, "context": that chunk's text}``
                        (before Phoenix evals 3.5 ``"document_text"``, not ``"context"``)
``abstention``          ``{"input": question, "output": answer}``
``answer_correctness``  ``{"input": question, "reference": the case's reference, "output":
                        answer}``
                        (Phoenix evals before 3.0 only: QA_PROMPT_TEMPLATE's variables)
======================  ==========================================================================

The chunks are the case's retrieved chunks that have text, in rank order, a repeated chunk id
counted once at its first rank (ragbridge's ranking convention). Phoenix's ``context`` must be one
string (a list fails Phoenix's input validation before any request), so the texts are joined with
the fixed `SEPARATOR`, a blank line.

Phoenix's result for one call is a list holding one ``Score(name, score, label, explanation)``;
`verdict` checks it against the pinned label map (`metrics.PhoenixMetric.labels`) and `score_fields`
and `chunk_score_fields` make the ragbridge Score's fields: ``value`` Phoenix's score,
``native_value`` ``{label, score}`` (per chunk for context relevance), ``passed`` the passing label,
``reason`` Phoenix's explanation. Nothing here imports Phoenix.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

from ragbridge.plugin import Case, ChunkVerdict, Evidence, error_text

from .metrics import PhoenixMetric

__all__ = ["SEPARATOR", "ChunkError", "LegacyScore", "chunks", "record", "chunk_records", "verdict",
           "score_fields", "chunk_score_fields", "error_message"]

SEPARATOR = "\n\n"


class ChunkError(Exception):
    """A per-chunk metric whose call failed for one of the case's chunks (the first is named)."""


def chunks(case: Case) -> list[tuple[str, str]]:
    """``(chunk id, text)`` of the chunks Phoenix judges (see the module docstring)."""
    seen: set[str] = set()
    out = []
    for c in case.contexts:
        if c.id in seen:
            continue
        seen.add(c.id)
        if c.text:
            out.append((c.id, c.text))
    return out


def record(metric: PhoenixMetric, case: Case) -> dict[str, str]:
    """The Phoenix record of a one-call metric."""
    if metric.name == "faithfulness":
        return {"input": case.question, "context": SEPARATOR.join(t for _, t in chunks(case)),
                "output": case.answer or ""}
    if metric.name == "abstention":
        return {"input": case.question, "output": case.answer or ""}
    if metric.name == "answer_correctness":
        return {"input": case.question, "reference": case.reference or "", "output": case.answer or ""}
    raise ValueError(f"{metric.name} is judged per chunk: use chunk_records")


def chunk_records(case: Case, field: str = "context") -> list[tuple[str, dict[str, str]]]:
    """``(chunk id, record)`` for each chunk of a per-chunk metric, in rank order, the chunk's text
    under ``field`` (the metric's ``chunk_field``)."""
    return [(cid, {"input": case.question, field: text}) for cid, text in chunks(case)]


@dataclass(frozen=True)
class LegacyScore:
    """A ``phoenix.evals.legacy`` evaluator's ``(label, score, explanation)``, as a 2.x+ ``Score``."""

    label: str
    score: Optional[float]
    explanation: Optional[str]


def verdict(metric: PhoenixMetric, result: Sequence[Any]) -> tuple[str, float, Optional[str]]:
    """``(label, score, explanation)`` of Phoenix's result for one call.

    Phoenix itself raises for a label outside its choices; a result whose label and score are not
    one of the pinned pairs is an error here too, never a default label."""
    if len(result) != 1:
        raise ValueError(f"Phoenix's {metric.evaluator} returned {len(result)} scores, expected 1")
    s = result[0]
    expected = metric.label_scores
    if s.label not in expected or s.score is None or float(s.score) != expected[s.label]:
        raise ValueError(f"Phoenix's {metric.evaluator} returned label {s.label!r} with score {s.score!r}; "
                         f"expected one of {expected}")
    explanation = s.explanation.strip() if isinstance(s.explanation, str) and s.explanation.strip() else None
    return s.label, float(s.score), explanation


def score_fields(metric: PhoenixMetric, result: Sequence[Any]) -> dict[str, Any]:
    """The Score fields of a one-call metric: Phoenix's score as the value, its explanation as the
    reason."""
    label, value, explanation = verdict(metric, result)
    return dict(value=value, native_value={"label": label, "score": value}, passed=label == metric.passing,
                reason=explanation)


def chunk_score_fields(metric: PhoenixMetric, per_chunk: Sequence[tuple[str, Any]]) -> dict[str, Any]:
    """The Score fields of a per-chunk metric from ``(chunk id, Phoenix's result or the exception)``
    pairs.

    The value is the share of chunks with the passing label; ``evidence.chunks`` has each chunk's
    verdict and explanation, ``native_value`` ``{per_chunk: [{id, rank, label, score}], <passing
    label>: n, chunks: n}``. When a chunk's call failed the Score is that failure (the first, with
    its chunk), and the chunks that were judged stay in ``native_value``."""
    good = metric.passing
    rows: list[dict[str, Any]] = []
    verdicts: list[ChunkVerdict] = []
    failed: Optional[str] = None
    for rank, (cid, result) in enumerate(per_chunk, 1):
        try:
            if isinstance(result, BaseException):
                raise result
            label, value, explanation = verdict(metric, result)
        except Exception as exc:  # noqa: BLE001 - kept per chunk, then the Score's error
            rows.append({"id": cid, "rank": rank, "error": error_message(exc)})
            failed = failed or f"chunk {rank} ({cid}): {error_message(exc)}"
            continue
        rows.append({"id": cid, "rank": rank, "label": label, "score": value})
        verdicts.append(ChunkVerdict(id=cid, relevant=label == good, reason=explanation))
    n_good = sum(1 for r in rows if r.get("label") == good)
    native = {"per_chunk": rows, good: n_good, "chunks": len(rows)}
    if failed:
        return dict(native_value=native, error=error_text(ChunkError(failed)))
    if not rows:
        return dict(native_value=native, reason="undefined: the case has no retrieved chunk with text")
    lines = [f"[{r['rank']}] {r['id']}: {r['label']}" + (f" - {v.reason}" if v.reason else "")
             for r, v in zip(rows, verdicts)]
    reason = f"{n_good} of {len(rows)} chunks {good}\n" + "\n".join(lines)
    return dict(native_value=native, value=n_good / len(rows), reason=reason,
                evidence=Evidence(chunks=verdicts))


def error_message(exc: BaseException) -> str:
    """`ragbridge.plugin.error_text` of a failure. Phoenix's own ``RateLimitError`` (raised after
    the SDK's 429, whose message it drops) alone says only "throttling requests to N RPS", so its
    text says what happened."""
    text = error_text(exc)
    if type(exc).__name__ == "RateLimitError" and type(exc).__module__.startswith("phoenix."):
        text = error_text(type(exc)(f"{' '.join(str(exc).split())}: the judge answered 429 (rate limited) "
                                    "after the gateway's retries"))
    return text
