"""Canonical cases to and from RAGAS samples (``SingleTurnSample`` / ``EvaluationDataset`` rows), and
RAGAS' results as Scores (`normalise`, `score_fields`).

Field mapping (canonical -> RAGAS):

=======================  ===================================================================
canonical                RAGAS ``SingleTurnSample``
=======================  ===================================================================
``question``             ``user_input``
``answer``               ``response``
``contexts[].text``      ``retrieved_contexts`` (in rank order; a chunk without text is ``""``)
``contexts[]``           ``retrieved_context_ids``, in the id space of the labels (below)
``relevant``             ``reference_context_ids``: the labels with grade >= 1
``reference``            ``reference``
``reference_contexts``   ``reference_contexts``
``metadata["ragas"]``    ``rubrics``, ``multi_responses``, ``persona_name``, ``query_style``,
                         ``query_length`` (RAGAS fields with no canonical twin, carried here)
everything else          the ``ragbridge`` column (below)
=======================  ===================================================================

One id space. RAGAS's ``IDBasedContextRecall`` and ``IDBasedContextPrecision`` compare
``retrieved_context_ids`` with ``reference_context_ids`` as sets of strings; they know nothing of
ragbridge's relevance rule (a chunk matches a label by its id, or else by its ``source``). So each
retrieved chunk is exported under the label it is relevant to: its ``source`` when its id is not a
label and its source is a label with grade >= 1, else its own id; a repeated chunk id, which native
ranking drops, gets what its first occurrence got (`export_ids`). Then, on the exported dataset:

* RAGAS's ID-based recall equals native ``recall@k`` at the full retrieved depth (any k >= the
  number of chunks), case by case; both are undefined (NaN) when no label has grade >= 1
  (``reference_context_ids`` is ``[]`` then).
* RAGAS's ID-based precision counts *distinct* ids: it is (relevant labels retrieved) / (relevant
  labels retrieved + distinct non-relevant chunks), so two chunks of one labelled section count
  once. Native ``precision@k`` counts every relevant chunk. The two are equal exactly when no two
  retrieved chunks are relevant to the same label (chunk-level labels, no repeats). RAGAS's is
  undefined when nothing was retrieved; native precision is 0 then.

A labelled case always gets both id lists (``retrieved_context_ids: []`` when nothing was
retrieved, so RAGAS's recall is 0 as native recall is); an unlabelled case gets none unless its
chunk ids are not the ones derived from their texts.

The way back: the ``ragbridge`` column (a JSON object; a JSON text in CSV and ``datasets``
folders) keeps what RAGAS has no field for: the case ``id`` (unless it is the one derived from the
question), the chunks' own ``id``, ``score`` and ``source`` (aligned with ``retrieved_contexts``), the
labels with their grades (and grade-0 labels), ``must_contain``, ``must_not_contain``,
``answerable: false``, ``tags`` and ``metadata``. RAGAS ignores the column when it loads the file
(and drops it if RAGAS itself re-saves the dataset); ragbridge reads it back, so canonical -> RAGAS
-> canonical is the identity. Without the column (a dataset RAGAS wrote) the chunk ids are the
exported ones: recall means the same, but chunks of one section share an id (native metrics
count such a repeat once).

Reading accepts the current RAGAS column names and the legacy (v0.1) ones: ``question`` ->
``user_input``, ``contexts`` -> ``retrieved_contexts``, ``answer`` -> ``response``,
``ground_truth`` -> ``reference`` (and ``ground_truths``, a list, whose items are joined). Columns
RAGAS does not know are kept in ``metadata`` (RAGAS would drop them); an ``id`` column names the
case. A row without an id gets a stable one derived from its question (``q-<sha1[:10]>``, with
``-2``, ``-3``... for repeated questions); a chunk without an id gets one derived from its text
(``ctx-<sha1[:12]>``, with ``-2``, ``-3``... for a text repeated in the same sample). Missing cells
(``None``, pandas ``NaN``) are absent. A list column given as an empty list where ragbridge would
write none (e.g. ``retrieved_contexts: []`` on an unlabelled sample) is kept as
``metadata["ragas"][column] = []`` and written back as ``[]``: RAGAS tells "retrieved nothing" from
"not given", the canonical schema does not.
"""

from __future__ import annotations

import json
import math
from typing import Any, Iterable, Optional, Sequence

from pydantic import ValidationError

from ragbridge.plugin import (
    Case,
    DatasetError,
    case_id_for_question,
    derived_chunk_ids,
    error_text,
    is_missing,
    plain,
)

__all__ = [
    "RAGAS_FIELDS",
    "LEGACY_COLUMNS",
    "READ_FIELDS",
    "SIDECAR",
    "case_to_sample",
    "cases_to_rows",
    "export_ids",
    "lost_fields",
    "row_to_record",
    "rows_to_cases",
    "retrieved_texts",
    "is_ragas_object",
    "object_rows",
    "read_object_rows",
    "to_ragas",
    "library",
    "normalise",
    "score_fields",
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
#: RAGAS fields with no canonical twin, kept under ``metadata["ragas"]``, and the type RAGAS wants
RAGAS_ONLY_FIELDS = {"multi_responses": list, "rubrics": dict, "persona_name": str, "query_style": str,
                     "query_length": str}
#: list columns whose explicit ``[]`` is kept (see the module docstring)
_LIST_COLUMNS = ("retrieved_contexts", "reference_contexts", "retrieved_context_ids", "reference_context_ids")
#: legacy (v0.1) column -> current RAGAS column (as ``ragas.utils.REQUIRED_COLS_v1``)
LEGACY_COLUMNS = {
    "question": "user_input",
    "contexts": "retrieved_contexts",
    "answer": "response",
    "ground_truth": "reference",
}
_ID_COLUMNS = ("id", "case_id", "sample_id")
#: the column that carries what RAGAS has no field for
SIDECAR = "ragbridge"
#: the columns that hold lists or mappings (in a CSV cell or a DataFrame read back from one: the
#: Python literal pandas and RAGAS's to_csv write, or JSON)
LIST_COLUMNS = frozenset({"retrieved_contexts", "reference_contexts", "retrieved_context_ids",
                          "reference_context_ids", "multi_responses", "rubrics", "contexts", "ground_truths",
                          "metadata", "tags", "must_contain", "must_not_contain", SIDECAR})
#: every column the reader knows (the ``ragas`` format recognises a file by these)
READ_FIELDS = frozenset(RAGAS_FIELDS) | set(LEGACY_COLUMNS) | set(_ID_COLUMNS) | {
    "ground_truths", SIDECAR, "metadata", "tags", "must_contain", "must_not_contain", "answerable"}


# --------------------------------------------------------------------------------------------
# canonical -> RAGAS


def retrieved_texts(case: Case) -> list[str]:
    """The texts RAGAS scores as ``retrieved_contexts``: every chunk that has text, in rank order."""
    return [c.text for c in case.contexts if c.text]


def export_ids(case: Case) -> list[str]:
    """Each chunk's id in the labels' id space: its ``source`` when its own id is not a label and its
    source is a label with grade >= 1, else its own id. A repeated chunk id gets what its first
    occurrence got (native ranking drops the repeat, whatever its source)."""
    rel, first = case.relevant, {}
    for c in case.contexts:
        if c.id not in first:
            first[c.id] = c.source if (c.id not in rel and c.source is not None
                                       and rel.get(c.source, 0) >= 1) else c.id
    return [first[c.id] for c in case.contexts]


def _ragas_extra(case: Case) -> dict[str, Any]:
    extra = case.metadata.get("ragas")
    return extra if isinstance(extra, dict) else {}


def _rubric_ok(key: str, value: Any) -> bool:
    kind = RAGAS_ONLY_FIELDS[key]
    if not isinstance(value, kind):
        return False
    items = value.values() if kind is dict else value if kind is list else ()
    return all(isinstance(v, str) for v in items)


def _needs_ids(case: Case) -> bool:
    return bool(case.relevant) or [c.id for c in case.contexts] != derived_chunk_ids(
        [c.text for c in case.contexts]) or any(not c.text for c in case.contexts)


def _sample(case: Case) -> tuple[dict[str, Any], set[str]]:
    """The RAGAS row, and the keys of ``metadata["ragas"]`` it holds as RAGAS fields."""
    row: dict[str, Any] = {"user_input": case.question}
    if any(c.text for c in case.contexts):
        row["retrieved_contexts"] = [c.text for c in case.contexts]
    if _needs_ids(case) and case.contexts_given:
        row["retrieved_context_ids"] = export_ids(case)
    if case.reference_contexts:
        row["reference_contexts"] = list(case.reference_contexts)
    if case.relevant:
        row["reference_context_ids"] = [k for k, g in case.relevant.items() if g >= 1]
    if case.answer is not None:
        row["response"] = case.answer
    if case.reference is not None:
        row["reference"] = case.reference
    used = set()
    for key, value in _ragas_extra(case).items():
        if key in RAGAS_ONLY_FIELDS and _rubric_ok(key, value):
            row[key] = value
        elif key in _LIST_COLUMNS and value == [] and key not in row:
            row[key] = []  # an empty list RAGAS was given, kept
        else:
            continue
        used.add(key)
    if case.contexts_given and "retrieved_contexts" not in row and "retrieved_context_ids" not in row:
        row["retrieved_context_ids"] = []  # the retriever returned nothing (no list: not given)
    return row, used


def case_to_sample(case: Case) -> dict[str, Any]:
    """One case as a RAGAS ``SingleTurnSample`` dict (``None`` fields left out, as RAGAS' ``to_list``),
    without the ``ragbridge`` column."""
    return _sample(case)[0]


def sidecar(case: Case) -> dict[str, Any]:
    """What RAGAS has no field for, as the ``ragbridge`` column holds it (empty: nothing)."""
    side: dict[str, Any] = {}
    if case.id != case_id_for_question(case.question):
        side["id"] = case.id
    if export_ids(case) != [c.id for c in case.contexts] or any(
            c.score is not None or c.source is not None or c.doc is not None for c in case.contexts):
        side["contexts"] = [c.model_dump(exclude={"text"}, exclude_none=True) for c in case.contexts]
    if any(g != 1 for g in case.relevant.values()):
        side["relevant"] = dict(case.relevant)
    if case.relevant_spans:
        side["relevant_spans"] = [s.model_dump(exclude_none=True) for s in case.relevant_spans]
    for key in ("must_contain", "must_not_contain", "tags"):
        if getattr(case, key):
            side[key] = list(getattr(case, key))
    if not case.answerable:
        side["answerable"] = False
    used = _sample(case)[1]
    meta = dict(case.metadata)
    if used:
        rest = {k: v for k, v in _ragas_extra(case).items() if k not in used}
        if rest:
            meta["ragas"] = rest
        else:
            meta.pop("ragas")
    if meta:
        side["metadata"] = meta
    return side


#: what `sidecar` keys hold, named as `lost_fields` names them
_SIDECAR_NAMES = {"id": "id", "contexts": "contexts.id", "relevant": "relevant (grades)",
                  "relevant_spans": "relevant_spans",
                  "must_contain": "must_contain", "must_not_contain": "must_not_contain",
                  "answerable": "answerable", "tags": "tags", "metadata": "metadata"}


def lost_fields(cases: Sequence[Case]) -> list[str]:
    """Canonical fields some case uses that RAGAS' own ``EvaluationDataset`` cannot hold (they travel
    in the ``ragbridge`` column of the file formats), sorted."""
    lost: set[str] = set()
    for case in cases:
        names = {_SIDECAR_NAMES[k] for k in sidecar(case)}
        if export_ids(case) == [c.id for c in case.contexts]:
            names.discard("contexts.id")  # the chunks are in the column for their score or source only
        if any(c.score is not None for c in case.contexts):
            names.add("contexts.score")
        if any(c.source is not None for c in case.contexts):
            names.add("contexts.source")
        if any(c.doc is not None for c in case.contexts):
            names.add("contexts.doc")
        lost |= names
    return sorted(lost)


def cases_to_rows(cases: Sequence[Case], with_sidecar: bool = True) -> list[dict[str, Any]]:
    """RAGAS rows for ``cases``; with ``with_sidecar``, each row that needs it has the ``ragbridge``
    column (a dict)."""
    rows = []
    for case in cases:
        row = case_to_sample(case)
        if with_sidecar:
            side = sidecar(case)
            if side:
                row[SIDECAR] = side
        rows.append(row)
    return rows


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


def _id_list(value: Any, column: str) -> list[str]:
    if not isinstance(value, list):
        raise DatasetError(f"must be a list of ids, got {type(value).__name__}", field=column)
    return [str(i) for i in value]


def _read_sidecar(value: Any) -> dict[str, Any]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"is not valid JSON: {exc.msg}", field=SIDECAR) from None
    if not isinstance(value, dict):
        raise DatasetError(f"must be an object, got {type(value).__name__}", field=SIDECAR,
                           hint="it holds what ragbridge wrote for the way back; remove the column to read "
                                "the RAGAS fields alone")
    return value


def row_to_record(row: dict[str, Any]) -> dict[str, Any]:
    """One RAGAS row (current or legacy column names) as a canonical record (not yet validated).

    Raises ``DatasetError`` (without a location: the caller adds it) for a row it cannot translate.
    """
    if not isinstance(row, dict):
        raise DatasetError(f"each sample must be an object, got {type(row).__name__}")
    rec = {k: plain(v, keep_missing=k == SIDECAR) for k, v in row.items() if not is_missing(v)}
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
    side = _read_sidecar(rec.pop(SIDECAR)) if SIDECAR in rec else {}

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
    if "id" in side:
        out["id"] = side["id"]
    if "response" in rec:
        out["answer"] = rec.pop("response")
    if "reference" in rec:
        out["reference"] = rec.pop("reference")

    empty = [k for k in _LIST_COLUMNS if rec.get(k) == []]
    texts = rec.pop("retrieved_contexts", None)
    ids = rec.pop("retrieved_context_ids", None)
    given = texts is not None or ids is not None
    texts = _text_list(texts, "retrieved_contexts") if texts is not None else None
    ids = _id_list(ids, "retrieved_context_ids") if ids is not None else None
    if texts is not None and ids is not None and len(ids) != len(texts):
        raise DatasetError(f"has {len(ids)} ids for {len(texts)} retrieved_contexts",
                           field="retrieved_context_ids", hint="the two lists must align")
    n = len(texts) if texts is not None else len(ids) if ids is not None else 0
    if texts is None:
        texts = [""] * n
    if ids is None:
        ids = derived_chunk_ids(texts)
    chunks: list[dict[str, Any]] = [{"id": i, "text": t} for i, t in zip(ids, texts)]
    if "contexts" in side:
        kept = side["contexts"]
        if not isinstance(kept, list) or len(kept) != n:
            raise DatasetError(f"holds {len(kept) if isinstance(kept, list) else 'no list of'} chunk(s) for "
                               f"{n} retrieved context(s)", field=f"{SIDECAR}.contexts",
                               hint="the file was edited after ragbridge wrote it; remove the ragbridge "
                                    "column to read the RAGAS fields alone")
        chunks = [{**k, "text": c["text"]} if isinstance(k, dict) else k for k, c in zip(kept, chunks)]
    if chunks or given:  # an empty list given: the retriever returned nothing (None: not given)
        out["contexts"] = chunks
    if "reference_contexts" in rec:
        out["reference_contexts"] = _text_list(rec.pop("reference_contexts"), "reference_contexts")
    ref_ids = rec.pop("reference_context_ids", None)
    if "relevant" in side:
        out["relevant"] = side["relevant"]
    elif ref_ids is not None:
        out["relevant"] = {i: 1 for i in _id_list(ref_ids, "reference_context_ids")}
    for key in ("relevant_spans", "must_contain", "must_not_contain", "tags", "answerable"):
        if key in side:
            out[key] = side[key]

    ragas_meta = {k: rec.pop(k) for k in RAGAS_ONLY_FIELDS if k in rec}
    metadata: dict[str, Any] = dict(side["metadata"]) if isinstance(side.get("metadata"), dict) else {}
    if isinstance(rec.get("metadata"), dict):
        metadata.update(rec.pop("metadata"))
    for k in ("tags", "must_contain", "must_not_contain", "answerable"):
        if k in rec:  # canonical columns next to RAGAS ones (a dataset written by other tools)
            out[k] = rec.pop(k)
    metadata.update(rec)  # columns RAGAS does not know: carried through, not dropped
    # an empty list where ragbridge would write none: kept, to be written back as []
    for key in empty:
        if key == "retrieved_context_ids":
            continue  # the case's empty contexts say it (`Case.contexts_given`), and are written back so
        if not (key.endswith("_ids") and out.get("relevant")):  # with labels, the id lists are always written
            ragas_meta[key] = []
    if ragas_meta:
        prev = metadata.get("ragas")
        metadata["ragas"] = {**(prev if isinstance(prev, dict) else {}), **ragas_meta}
    if metadata:
        out["metadata"] = metadata
    return out


def rows_to_cases(rows: Iterable[dict[str, Any]], path: Optional[str] = None,
                  unit: str = "row", start: int = 1) -> list[Case]:
    """Validate RAGAS rows into cases; errors say where (file, row, field) and what to do. Rows
    are numbered from ``start`` (``unit="index"``, ``start=0``: in-memory items by their index)."""
    cases: list[Case] = []
    seen: dict[str, int] = {}
    for n, row in enumerate(rows, start=start):
        try:
            rec = row_to_record(row)
            if "id" not in rec:
                base = case_id_for_question(rec["question"])
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


# --------------------------------------------------------------------------------------------
# In memory: RAGAS's own objects (`LIBRARY`, registered through ``ragbridge_register_libraries``)


def is_ragas_object(data: Any) -> bool:
    """Whether ``data`` is a RAGAS object (an ``EvaluationDataset``, a sample) or a list of them;
    by the type's module, without importing RAGAS."""
    def ragas(x: Any) -> bool:
        return type(x).__module__.split(".")[0] == "ragas"

    if isinstance(data, (list, tuple)):
        return bool(data) and all(ragas(x) for x in data)
    return ragas(data)


def object_rows(data: Any) -> list[dict[str, Any]]:
    """The samples of an ``EvaluationDataset`` (or a list of ``SingleTurnSample``) as rows, as
    ``EvaluationDataset.to_jsonl`` writes them (``None`` fields left out)."""
    samples = data.samples if hasattr(data, "samples") else data
    if not isinstance(samples, (list, tuple)):
        raise DatasetError(f"cannot read a {type(data).__name__} as cases",
                           hint="pass an EvaluationDataset or a list of SingleTurnSample")
    rows = []
    for i, sample in enumerate(samples):
        if type(sample).__name__ != "SingleTurnSample":
            raise DatasetError(f"is a {type(sample).__name__}; only single-turn samples translate to cases",
                               line=i, unit="index")
        rows.append(sample.model_dump(exclude_none=True))
    return rows


def read_object_rows(rows: list[dict[str, Any]]) -> list[Case]:
    """Rows in RAGAS's columns (current or legacy) as cases; an error names the row's index."""
    return rows_to_cases(rows, unit="index", start=0)


def to_ragas(cases: Sequence[Case]) -> tuple[Any, list[str]]:
    """``(EvaluationDataset, lost)``: the cases as a RAGAS ``EvaluationDataset`` of
    ``SingleTurnSample``, and the canonical fields it cannot hold (`lost_fields`: the file formats
    keep them in the ``ragbridge`` column). RAGAS is first imported under the plugin's privacy
    defaults (`env.ENVIRONMENT`)."""
    import sys

    if "ragas" not in sys.modules:  # first imported under the plugin's defaults (tracking off)
        from ragbridge.plugin import applied_environment

        from .env import ENVIRONMENT, keep_ragas_id_out_of_home

        with applied_environment(ENVIRONMENT):
            import ragas.dataset_schema  # noqa: F401

            keep_ragas_id_out_of_home()
    from ragas.dataset_schema import EvaluationDataset, SingleTurnSample

    rows = cases_to_rows(cases, with_sidecar=False)
    return EvaluationDataset(samples=[SingleTurnSample(**r) for r in rows]), lost_fields(cases)


def library():
    """The ``ragas`` `ragbridge.plugin.Library`."""
    from ragbridge.plugin import Library

    return Library("ragas", fields=READ_FIELDS, read_rows=read_object_rows, recognises=is_ragas_object,
                   rows=object_rows, kinds={"dataset": to_ragas}, table_cells=LIST_COLUMNS,
                   description="RAGAS EvaluationDataset, SingleTurnSample, and rows in its columns")


# --------------------------------------------------------------------------------------------
# RAGAS results -> Scores


def normalise(value: float) -> Optional[float]:
    """RAGAS' raw value -> 0..1 (None for NaN): rounded to 9 decimals, which removes the 1e-10 RAGAS
    adds to denominators (0.9999999999 -> 1.0), then clipped (a mean cosine below 0 -> 0)."""
    if value is None or not math.isfinite(value):
        return None
    return min(1.0, max(0.0, round(float(value), 9)))


def score_fields(spec: Any, result: Any, errors: Sequence[BaseException]) -> dict[str, Any]:
    """The Score fields of one ``ascore`` result (``spec``: the metric's `metrics.RagasMetric`).
    ``errors`` are the judge calls that failed while RAGAS scored the case (ContextRelevance retries
    them, and returns NaN when every rating failed: then the Score has the last one as its error)."""
    raw = float(result.value) if result.value is not None else float("nan")
    value = normalise(raw)
    if value is None:
        if errors:  # NaN because the library swallowed judge errors: that is a failure
            return dict(error=error_text(errors[-1]),
                        reason=f"RAGAS returned NaN after {len(errors)} failed judge call(s)")
        return dict(reason=spec.undefined)
    reason = result.reason
    if errors:  # the library retried failed judge calls itself and still produced a value
        reason = (f"{len(errors)} judge call(s) failed and were retried by RAGAS; "
                  f"last: {error_text(errors[-1])}")
    return dict(value=value, native_value=raw, reason=reason)
