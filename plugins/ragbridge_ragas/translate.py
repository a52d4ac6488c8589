"""Canonical cases to and from RAGAS samples (``SingleTurnSample`` / ``EvaluationDataset`` rows).

Field mapping (canonical -> RAGAS):

=======================  ===================================================================
canonical                RAGAS ``SingleTurnSample``
=======================  ===================================================================
``question``             ``user_input``
``answer``               ``response``
``contexts[].text``      ``retrieved_contexts`` (in rank order; a chunk without text is ``""``)
``contexts[].id``        ``retrieved_context_ids``
``relevant``             ``reference_context_ids`` (labels with grade >= 1; the grades are lost)
``reference``            ``reference``
``reference_contexts``   ``reference_contexts``
``metadata["ragas"]``    ``rubrics``, ``multi_responses``, ``persona_name``, ``query_style``,
                         ``query_length`` (RAGAS fields with no canonical twin, carried here)
=======================  ===================================================================

RAGAS cannot hold ``id`` (unless it is the id ragbridge derives from the question), chunk
``score`` and ``source``, relevance grades and grade-0 labels, ``must_contain``,
``must_not_contain``, ``answerable: false``, ``tags`` and ``metadata``: writers report each of those
that a case actually uses (:func:`lost_fields`), they are never dropped silently.

Reading accepts the current RAGAS column names and the legacy (v0.1) ones: ``question`` ->
``user_input``, ``contexts`` -> ``retrieved_contexts``, ``answer`` -> ``response``,
``ground_truth`` -> ``reference`` (and ``ground_truths``, a list, whose items are joined). Columns
RAGAS does not know are kept in ``metadata`` (RAGAS would drop them); an ``id`` column names the
case. A row without an id gets a stable one derived from its question (``q-<sha1[:10]>``, with
``-2``, ``-3``... for repeated questions). Missing cells (``None``, pandas ``NaN``) are absent.
"""

from __future__ import annotations

import hashlib
from typing import Any, Iterable, Optional, Sequence

from pydantic import ValidationError

from ragbridge.io import DatasetError
from ragbridge.io import is_missing as _missing
from ragbridge.io import plain as _plain
from ragbridge.schema import Case

__all__ = [
    "RAGAS_FIELDS",
    "LEGACY_COLUMNS",
    "case_to_sample",
    "cases_to_rows",
    "lost_fields",
    "row_to_record",
    "rows_to_cases",
    "retrieved_texts",
]

#: the fields of ``ragas.dataset_schema.SingleTurnSample`` (RAGAS 0.4.3)
RAGAS_FIELDS = (
    "user_input",
    "retrieved_contexts",
    "reference_contexts",
    "retrieved_context_ids",
    "reference_context_ids",
    "response",
    "multi_responses",
    "reference",
    "rubrics",
    "persona_name",
    "query_style",
    "query_length",
)
#: RAGAS fields with no canonical twin, kept under ``metadata["ragas"]``
RAGAS_ONLY_FIELDS = ("multi_responses", "rubrics", "persona_name", "query_style", "query_length")
#: legacy (v0.1) column -> current RAGAS column (as ``ragas.utils.REQUIRED_COLS_v1``)
LEGACY_COLUMNS = {
    "question": "user_input",
    "contexts": "retrieved_contexts",
    "answer": "response",
    "ground_truth": "reference",
}
_ID_COLUMNS = ("id", "case_id", "sample_id")


def _stable_case_id(question: str) -> str:
    # the same derivation as ragbridge.io, so a case read from any format gets the same id
    return "q-" + hashlib.sha1(question.encode("utf-8")).hexdigest()[:10]


def _chunk_id_for_text(text: str) -> str:
    return "ctx-" + hashlib.sha1(text.encode("utf-8")).hexdigest()[:12]


# --------------------------------------------------------------------------------------------
# canonical -> RAGAS


def retrieved_texts(case: Case) -> list[str]:
    """The texts RAGAS scores as ``retrieved_contexts``: every chunk that has text, in rank order."""
    return [c.text for c in case.contexts if c.text]


def case_to_sample(case: Case) -> dict[str, Any]:
    """One case as a RAGAS ``SingleTurnSample`` dict (``None`` fields left out, as RAGAS' ``to_list``)."""
    row: dict[str, Any] = {"user_input": case.question}
    if case.contexts:
        if any(c.text for c in case.contexts):
            row["retrieved_contexts"] = [c.text for c in case.contexts]
        row["retrieved_context_ids"] = [c.id for c in case.contexts]
    if case.reference_contexts:
        row["reference_contexts"] = list(case.reference_contexts)
    labels = [k for k, g in case.relevant.items() if g >= 1]
    if labels:
        row["reference_context_ids"] = labels
    if case.answer is not None:
        row["response"] = case.answer
    if case.reference is not None:
        row["reference"] = case.reference
    extra = case.metadata.get("ragas") if isinstance(case.metadata.get("ragas"), dict) else {}
    for key in RAGAS_ONLY_FIELDS:
        if extra.get(key) is not None:
            row[key] = extra[key]
    return row


def lost_fields(cases: Sequence[Case]) -> list[str]:
    """Canonical fields some case uses that a RAGAS dataset cannot hold (sorted, for the user)."""
    lost: set[str] = set()
    for case in cases:
        if case.id != _stable_case_id(case.question):
            lost.add("id")
        if any(c.score is not None for c in case.contexts):
            lost.add("contexts.score")
        if any(c.source is not None for c in case.contexts):
            lost.add("contexts.source")
        if any(g != 1 for g in case.relevant.values()):
            lost.add("relevant (grades)")
        if case.must_contain:
            lost.add("must_contain")
        if case.must_not_contain:
            lost.add("must_not_contain")
        if not case.answerable:
            lost.add("answerable")
        if case.tags:
            lost.add("tags")
        meta = {k: v for k, v in case.metadata.items() if k != "ragas"}
        ragas_meta = case.metadata.get("ragas")
        if isinstance(ragas_meta, dict):
            if set(ragas_meta) - set(RAGAS_ONLY_FIELDS):
                lost.add("metadata")
        elif ragas_meta is not None:
            lost.add("metadata")
        if meta:
            lost.add("metadata")
    return sorted(lost)


def cases_to_rows(cases: Sequence[Case]) -> tuple[list[dict[str, Any]], list[str]]:
    """RAGAS rows for ``cases`` and the canonical fields they could not hold."""
    return [case_to_sample(c) for c in cases], lost_fields(cases)


# --------------------------------------------------------------------------------------------
# RAGAS -> canonical






def _text_list(value: Any, column: str) -> list[str]:
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list):
        raise DatasetError(f"must be a list of texts, got {type(value).__name__}", field=column)
    out = []
    for i, item in enumerate(value):
        if isinstance(item, dict):  # a chunk object (canonical style) in a RAGAS column
            item = item.get("text", item.get("page_content", ""))
        if not isinstance(item, str):
            raise DatasetError(f"item {i} must be a text, got {type(item).__name__}", field=column)
        out.append(item)
    return out


def row_to_record(row: dict[str, Any]) -> dict[str, Any]:
    """One RAGAS row (current or legacy column names) as a canonical record (not yet validated).

    Raises ``DatasetError`` (without a location: the caller adds it) for a row it cannot translate.
    """
    if not isinstance(row, dict):
        raise DatasetError(f"each sample must be an object, got {type(row).__name__}")
    rec = {k: _plain(v) for k, v in row.items() if not _missing(v)}
    for legacy, current in LEGACY_COLUMNS.items():
        if legacy in rec:
            if current in rec:
                raise DatasetError(f"given twice, as '{current}' and as legacy '{legacy}'", field=legacy,
                                   hint="keep one of them")
            rec[current] = rec.pop(legacy)
    if "ground_truths" in rec:
        gts = rec.pop("ground_truths")
        if "reference" not in rec:
            rec["reference"] = "\n".join(_text_list(gts, "ground_truths"))

    out: dict[str, Any] = {}
    question = rec.pop("user_input", None)
    if question is None:
        raise DatasetError("is required but missing", field="user_input",
                           hint="a RAGAS sample needs user_input (legacy: question)")
    if isinstance(question, list):
        raise DatasetError("is a conversation (a RAGAS MultiTurnSample); only single-turn samples "
                           "translate to cases", field="user_input")
    if not isinstance(question, str):
        raise DatasetError(f"must be a text, got {type(question).__name__}", field="user_input")
    out["question"] = question
    for col in _ID_COLUMNS:
        if col in rec:
            out["id"] = str(rec.pop(col))
            break
    if "response" in rec:
        out["answer"] = rec.pop("response")
    if "reference" in rec:
        out["reference"] = rec.pop("reference")

    texts = rec.pop("retrieved_contexts", None)
    ids = rec.pop("retrieved_context_ids", None)
    if texts is not None:
        texts = _text_list(texts, "retrieved_contexts")
        if ids is not None and len(ids) != len(texts):
            raise DatasetError(f"has {len(ids)} ids for {len(texts)} retrieved_contexts",
                               field="retrieved_context_ids", hint="the two lists must align")
        out["contexts"] = [
            {"id": str(ids[i]) if ids is not None else _chunk_id_for_text(t), "text": t}
            for i, t in enumerate(texts)
        ]
    elif ids is not None:
        if not isinstance(ids, list):
            raise DatasetError(f"must be a list of ids, got {type(ids).__name__}", field="retrieved_context_ids")
        out["contexts"] = [{"id": str(i)} for i in ids]
    if "reference_contexts" in rec:
        out["reference_contexts"] = _text_list(rec.pop("reference_contexts"), "reference_contexts")
    ref_ids = rec.pop("reference_context_ids", None)
    if ref_ids is not None:
        if not isinstance(ref_ids, list):
            raise DatasetError(f"must be a list of ids, got {type(ref_ids).__name__}",
                               field="reference_context_ids")
        out["relevant"] = {str(i): 1 for i in ref_ids}

    ragas_meta = {k: rec.pop(k) for k in RAGAS_ONLY_FIELDS if k in rec}
    metadata: dict[str, Any] = {}
    if isinstance(rec.get("metadata"), dict):
        metadata.update(rec.pop("metadata"))
    for k in ("tags", "must_contain", "must_not_contain", "answerable"):
        if k in rec:  # canonical columns next to RAGAS ones (a dataset written by other tools)
            out[k] = rec.pop(k)
    metadata.update(rec)  # columns RAGAS does not know: carried through, not dropped
    if ragas_meta:
        metadata["ragas"] = ragas_meta
    if metadata:
        out["metadata"] = metadata
    return out


def rows_to_cases(rows: Iterable[dict[str, Any]], path: Optional[str] = None, unit: str = "row") -> list[Case]:
    """Validate RAGAS rows into cases; errors say where (file, row, field) and what to do."""
    cases: list[Case] = []
    seen: dict[str, int] = {}
    for n, row in enumerate(rows, start=1):
        try:
            rec = row_to_record(row)
            if "id" not in rec:
                base = _stable_case_id(rec["question"])
                cid, k = base, 1
                while cid in seen:
                    k += 1
                    cid = f"{base}-{k}"
                rec["id"] = cid
            case = Case.model_validate(rec)
        except DatasetError as exc:
            exc.path, exc.line, exc.unit = path, n, unit
            raise exc
        except ValidationError as exc:
            err = exc.errors()[0]
            loc = ".".join(str(x) for x in err["loc"])
            raise DatasetError(err["msg"], path=path, line=n, field=loc, unit=unit) from None
        if case.id in seen:
            raise DatasetError(f"duplicate case id {case.id!r} (first at {unit} {seen[case.id]})",
                               path=path, line=n, field="id", hint="case ids must be unique", unit=unit)
        seen[case.id] = n
        cases.append(case)
    if not cases:
        raise DatasetError("holds no samples", path=path, hint="a golden set needs at least one case")
    return cases
