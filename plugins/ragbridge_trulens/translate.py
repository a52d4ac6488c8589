"""TruLens' provider functions as plain functions over one ragbridge `Case`, and their results as
Scores.

Each metric function (``faithfulness``, ``context_relevance``, ``answer_relevance``,
``answer_correctness``; listed in `metrics.METRICS`) builds TruLens' inputs from the case, calls the
provider's feedback function and returns ``(value, native_value, reason)``, or raises: TruLens'
``-1`` ("unparsable") is `UnparsableScore`, a failed chunk of context relevance `ChunkScoreError`
(with the per-chunk results). `score_fields` and `error_fields` turn either into the Score's
fields. Everything imports TruLens lazily (the package ``__init__`` must not). The functions are
synchronous: the backend runs them in worker threads, one case per thread.

See the package docstring for the formulas, scales and normalisation.

In memory (`library`, registered through ``ragbridge_register_libraries``): ``ragbridge.load_cases``
and ``ragbridge.evaluate`` read a ground-truth DataFrame (``TruSession.get_ground_truth``'s columns,
with the app's ``response`` and ``contexts`` beside them) and a list of ``GroundTruth`` objects, with
the mapping of the ``trulens`` format (`ragbridge_trulens.formats.row_to_record`);
``to_library(cases, "trulens")`` gives that DataFrame back (`ragbridge_trulens.formats.cases_to_frame`),
which ``TruSession.add_ground_truth_to_dataset`` takes.
"""

from __future__ import annotations

import functools
import importlib.metadata
import math
from typing import TYPE_CHECKING, Any, Optional

from ragbridge.plugin import Case, error_text

from .env import offline_sentence_splitter

if TYPE_CHECKING:  # pragma: no cover
    from .options import TruLensOptions

__all__ = ["trulens_major", "UnparsableScore", "ChunkScoreError", "groundedness_configs", "faithfulness",
           "context_relevance", "answer_relevance", "answer_correctness", "score_fields", "error_fields",
           "is_trulens_object", "object_rows", "read_object_rows", "to_frame", "library"]


@functools.cache
def trulens_major() -> int:
    """The major version of the TruLens installed in this process (its trulens-feedback): 1 or 2."""
    return int(importlib.metadata.version("trulens-feedback").split(".")[0])


class UnparsableScore(Exception):
    """TruLens returned its ``-1.0`` sentinel: the judge's reply held no usable score."""


class ChunkScoreError(Exception):
    """One or more chunks failed; carries the per-chunk results (``native``) for the Score."""

    def __init__(self, message: str, native: Any) -> None:
        super().__init__(message)
        self.native = native


def groundedness_configs(settings: TruLensOptions) -> Any:
    """``use_sent_tokenize`` per ``sentence_split``; the eval()-based trivial filter always off."""
    from trulens.core.feedback.feedback import GroundednessConfigs

    if settings.sentence_split == "nltk":
        offline_sentence_splitter()
    return GroundednessConfigs(use_sent_tokenize=settings.sentence_split == "nltk",
                               filter_trivial_statements=False)


# --------------------------------------------------------------------------------------------
# One metric on one case. Each returns (value, native_value, reason) or raises.


def _unparsable(score: float) -> bool:
    try:
        from trulens.core.utils.constants import is_unparsable_score
    except ImportError:  # TruLens 1.x has no sentinel: a text reply without a score is -1 normalised
        return score < 0
    return is_unparsable_score(score)


def _check(score: float, what: str) -> float:
    if _unparsable(score):
        raise UnparsableScore(f"{what}: TruLens could not parse a score from the judge's reply (-1)")
    return float(score)


def _statements_1x(text: str) -> list[dict[str, Any]]:
    """TruLens 1.x's groundedness reasons, one text of ``STATEMENT i:`` blocks, as 2.x's list of
    ``{criteria, supporting_evidence}`` (the evidence the whole block, as 2.x keeps it; 1.x gives no
    per-sentence score)."""
    import re

    out = []
    for block in re.split(r"^STATEMENT \d+:\n", text, flags=re.M)[1:]:
        block = block.strip()
        m = re.match(r"Criteria:\s*(.*?)\nSupporting Evidence:", block, re.S)
        out.append({"criteria": m.group(1).strip() if m else "", "supporting_evidence": block})
    return out


def _reason_text(meta: Any) -> Optional[str]:
    if isinstance(meta, dict):
        r = meta.get("reason")
        if isinstance(r, str) and r.strip():
            return r.strip()
    return None


def faithfulness(provider: Any, case: Case, settings: TruLensOptions):
    source = "\n\n".join(c.text for c in case.contexts if c.text)
    score, meta = provider.groundedness_measure_with_cot_reasons(
        source=source, statement=case.answer, groundedness_configs=groundedness_configs(settings),
        min_score_val=0, max_score_val=settings.max_score, temperature=settings.temperature)
    statements = (meta or {}).get("reasons") if isinstance(meta, dict) else None
    if isinstance(statements, str):  # TruLens 1.x
        statements = _statements_1x(statements)
    if isinstance(score, float) and math.isnan(score):  # TruLens 1.x's mean of no sentence
        score = None
    native = {"score": score, "scale": [0, settings.max_score], "statements": statements or []}
    if not statements:
        return None, native, (_reason_text(meta) or "no statements to evaluate in the answer")
    score = _check(score, "groundedness")
    lines = []
    failed = 0
    for st in statements:
        s = st.get("score")
        if isinstance(s, (int, float)) and s < 0:
            failed += 1
        evidence = str(st.get("supporting_evidence") or "")
        if not evidence.startswith("Criteria:"):
            evidence = f"Criteria: {st.get('criteria', '')}\n{evidence}"
        if not isinstance(s, (int, float)):  # TruLens 1.x: no per-sentence score
            lines.append(evidence)
            continue
        grade = "unparsable" if s < 0 else format(s, ".2f")
        lines.append(f"[{grade}] {evidence}")
    head = f"groundedness {score:.3f}: mean over {len(statements) - failed} sentence(s)"
    if failed:
        head += f" ({failed} unparsable sentence(s) left out of the mean, as TruLens does)"
    return score, native, head + "\n" + "\n".join(lines)


def context_relevance(provider: Any, case: Case, settings: TruLensOptions):
    if settings.max_score != 3 and trulens_major() < 2:
        raise ValueError(f"TruLens {importlib.metadata.version('trulens-feedback')} asks the judge for "
                         f"context relevance on 0-3 whatever the scale, then divides by max_score "
                         f"{settings.max_score}: use max_score=3 with it (TruLens 2.16 asks on the scale)")
    per_chunk = []
    errors = []
    for chunk in case.contexts:
        if not chunk.text:
            per_chunk.append({"id": chunk.id, "score": None, "reason": "chunk has no text"})
            continue
        try:
            s, meta = provider.context_relevance_with_cot_reasons(
                question=case.question, context=chunk.text, min_score_val=0,
                max_score_val=settings.max_score, temperature=settings.temperature)
            s = _check(s, f"context relevance of chunk {chunk.id}")
            per_chunk.append({"id": chunk.id, "score": s, "reason": _reason_text(meta)})
        except Exception as exc:  # noqa: BLE001 - kept per chunk, then the Score's error
            errors.append(f"chunk {chunk.id}: {type(exc).__name__}: {exc}")
            per_chunk.append({"id": chunk.id, "score": None, "error": f"{type(exc).__name__}: {exc}"})
    scores = [c["score"] for c in per_chunk if c.get("score") is not None]
    native = {"per_chunk": per_chunk, "mean": (sum(scores) / len(scores)) if scores else None,
              "max": max(scores) if scores else None, "agg": settings.context_relevance_agg,
              "scale": [0, settings.max_score]}
    if errors:
        raise ChunkScoreError("; ".join(errors), native)
    if not scores:
        return None, native, "no retrieved chunk has text"
    value = native[settings.context_relevance_agg]
    lines = [f"[{c['score']:.2f}] {c['id']}: {c.get('reason') or ''}"
             for c in per_chunk if c.get("score") is not None]
    return value, native, (f"context relevance {value:.3f}: {settings.context_relevance_agg} over "
                           f"{len(scores)} chunk(s)\n" + "\n".join(lines))


def answer_relevance(provider: Any, case: Case, settings: TruLensOptions):
    s, meta = provider.relevance_with_cot_reasons(
        prompt=case.question, response=case.answer, min_score_val=0, max_score_val=settings.max_score,
        temperature=settings.temperature)
    s = _check(s, "answer relevance")
    return s, {"score": s, "scale": [0, settings.max_score], "reason": _reason_text(meta)}, _reason_text(meta)


def answer_correctness(provider: Any, case: Case, settings: TruLensOptions):
    from trulens.feedback import GroundTruthAgreement

    gta = GroundTruthAgreement([{"query": case.question, "expected_response": case.reference}],
                               provider=provider)
    out = gta.agreement_measure(case.question, case.answer)
    if not isinstance(out, tuple):
        if isinstance(out, float) and math.isnan(out):
            return None, None, "TruLens found no ground truth for this query"
        raise TypeError(f"unexpected agreement_measure result {out!r}")
    s, meta = out
    s = _check(s, "ground-truth agreement")
    return s, {"score": s, "scale": [0, 10], **(meta or {})}, (
        f"agreement with the reference: {round(s * 10)}/10 (TruLens GroundTruthAgreement, 0-10 scale / 10)")


# --------------------------------------------------------------------------------------------
# Results -> Scores


def score_fields(api: str, outcome: tuple) -> dict[str, Any]:
    """The Score fields of a metric function's ``(value, native_value, reason)``; the endpoint family
    used is recorded in ``native_value["api"]``."""
    value, native, reason = outcome
    if isinstance(native, dict):
        native = {**native, "api": api}
    return dict(value=value, native_value=native, reason=reason)


def error_fields(api: str, exc: Exception) -> dict[str, Any]:
    """The Score fields of a metric function that raised: its error, and the per-chunk results of a
    `ChunkScoreError`."""
    native = {**exc.native, "api": api} if isinstance(exc, ChunkScoreError) else None
    return dict(native_value=native, error=error_text(exc))


# --------------------------------------------------------------------------------------------
# In memory: ground-truth rows and TruLens's GroundTruth objects


def is_trulens_object(data: Any) -> bool:
    """Whether ``data`` is a list of TruLens ``GroundTruth`` objects (by the type's module, without
    importing TruLens)."""
    return isinstance(data, (list, tuple)) and bool(data) and all(
        type(x).__module__.split(".")[0] == "trulens" and type(x).__name__ == "GroundTruth" for x in data)


def object_rows(data: Any) -> list[dict[str, Any]]:
    """``GroundTruth`` objects as the rows of the DataFrame ``TruSession.get_ground_truth`` gives."""
    return [gt.model_dump() for gt in data]


def read_object_rows(rows: list[dict[str, Any]]) -> list[Case]:
    """Rows in TruLens's columns as cases (`formats.row_to_record`); an error names the row's index."""
    from ragbridge.plugin import DatasetError, cases_from_records

    from .formats import row_to_record

    def records():
        for i, row in enumerate(rows):
            if not isinstance(row, dict):
                raise DatasetError(f"each row must be an object, got {type(row).__name__}", line=i,
                                   unit="index")
            try:
                yield i, row_to_record(row)
            except DatasetError as exc:
                exc.line, exc.unit = i, "index"
                raise

    return cases_from_records(records(), unit="index")


def to_frame(cases: Any) -> tuple[Any, list[str]]:
    """The cases as a ground-truth DataFrame in TruLens's columns, and nothing lost (what TruLens has
    no column for is in ``meta["ragbridge"]``)."""
    from .formats import cases_to_frame

    return cases_to_frame(cases), []


def library():
    """The ``trulens`` `ragbridge.plugin.Library`."""
    from ragbridge.plugin import Library

    from .formats import READ_FIELDS, TABLE_CELLS

    return Library("trulens", fields=READ_FIELDS, read_rows=read_object_rows, recognises=is_trulens_object,
                   rows=object_rows, kinds={"ground_truth": to_frame}, table_cells=TABLE_CELLS,
                   description="TruLens ground-truth DataFrames and GroundTruth objects")
