"""TruLens-shaped data in and out: the RAG-triad table users keep, and the leaderboard layout.

TruLens has no file format for RAG-triad inputs. Users keep a DataFrame (or JSONL) whose columns
follow TruLens's ground-truth dataset schema (``GroundTruth``: ``query``, ``query_id``,
``expected_response``, ``expected_chunks``, ``meta``; what ``TruSession.add_ground_truth_to_dataset``
takes) plus the app's outputs (``response`` and the retrieved ``contexts``, what the triad's
selectors read from a record). The ``trulens`` format reads and writes exactly that:

==================  ==========================================================================
TruLens column      canonical field
==================  ==========================================================================
``query_id``        ``id`` (also read: ``record_id``, ``id``; missing: derived from the query)
``query``           ``question`` (also read: ``input``, ``prompt``, ``question``)
``response``        ``answer`` (also read: ``output``, ``answer``)
``contexts``        ``contexts``: a list of texts (also read: ``context``, ``source``,
                    ``retrieved_contexts``; items may be ``{"text": ...}`` dicts)
``expected_response`` ``reference`` (also read: ``ground_truth``, ``reference``)
``expected_chunks`` ``relevant``: one ``{"text", "expect_score"}`` per label with grade >= 1
                    (`expected_chunks_of`; read back by `labels_of`), and ``reference_contexts``
                    (their texts, else kept in ``meta["ragbridge"]``)
``ground_truth_id`` ``metadata["trulens"]`` (also ``dataset_id``)
``meta``            ``metadata``; ragbridge-only fields go under ``meta["ragbridge"]``
==================  ==========================================================================

Files: ``.jsonl`` (one row a line), ``.json`` (a list), ``.csv`` (list and dict cells as JSON) or
``.parquet`` (lists as Parquet lists, ``meta`` as a struct, as TruLens's own tables hold it, so that
TruLens's ``add_ground_truth_to_dataset`` takes the rows: `ragbridge_trulens.parquet`, which says how
a key whose values cannot share one type is held, and ``meta["ragbridge"]``). ``--from trulens`` /
``--to trulens`` names the format (the suffix alone means the canonical format). From Python,
`cases_from_frame` and `cases_to_frame` work on DataFrames.

The expected chunks are the labels, so that TruLens's ground-truth IR metrics
(``GroundTruthAgreement``) on the export mean what native ranking metrics mean: recall, nDCG, MRR
and hit rate equal native ones case by case; precision differs where one label matches two
retrieved chunks (docs/formats.md). Every row has ``expected_chunks`` (``[]`` without labels) and
``meta`` (an object), which TruLens's IR metrics and pandas' row reader need.

Writing keeps every canonical field: what TruLens has no column for (chunk ids, sources and scores
unless derived from the texts, labels unless the expected chunks say them, grade-0 labels, answer
checks, ``answerable``, ``tags``, and a ``metadata["ragbridge"]`` of the case's own) is stored under
``meta["ragbridge"]`` (TruLens carries ``meta`` through untouched) and restored on reading. The one
loss in the file: in ``.csv`` an empty answer or reference reads back as missing. TruLens's own
ground-truth store keeps no ``response`` or ``contexts`` (`RESAVE_DROPS`). A plain TruLens table
reads fine: chunk ids are derived from the texts, expected chunks are labels. A ``datasets`` folder
is read too.

`leaderboard` turns a run into the layout of ``TruSession.get_leaderboard()``: one row per
(``app_name``, ``app_version``) -- here ``app_version`` is the backend -- with one column per
feedback name (sorted, TruLens's display names: ``Answer Relevance``, ``Context Relevance``,
``Ground Truth Agreement``, ``Groundedness``) holding the mean over the scored cases, then
``latency`` (mean seconds per case) and ``total_cost`` (the mean cost per case of the judge calls
this run made, by the judge's price table: NaN, an empty CSV cell and JSON null, where a call's model
has no price, with an `UnknownCost` warning naming the model; 0 for a case no judge was called for).
`records` gives the per-record frame (``record_id``, ``input``, ``output``, one column per feedback
name, ``latency``, ``total_tokens``, ``total_cost``). `write_leaderboard` writes either as CSV/JSON.
"""

from __future__ import annotations

import csv
import json
import logging
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional, Sequence

from ragbridge.plugin import (
    Case,
    DatasetError,
    Format,
    cases_from_records,
    chunk_id_for_text,
    derived_chunk_ids,
    is_missing as _missing,
    jsonl_lines,
    literal_cell,
    pandas_index,
    plain as _plain,
    read_hf_rows,
)

from .parquet import PARQUET_CANNOT_HOLD, read_rows, struct_nulls, struct_texts, write_rows

__all__ = [
    "FORMATS",
    "cases_from_frame",
    "cases_to_frame",
    "case_to_row",
    "row_to_record",
    "read_trulens",
    "write_trulens",
]

_ALIASES = {
    "id": ("query_id", "record_id", "id"),
    "question": ("query", "input", "prompt", "question"),
    "answer": ("response", "output", "answer"),
    "contexts": ("contexts", "context", "source", "retrieved_contexts"),
    "reference": ("expected_response", "ground_truth", "reference"),
    "reference_contexts": ("expected_chunks",),
    "metadata": ("meta", "metadata"),
}
#: GroundTruth fields with no canonical twin, kept under ``metadata["trulens"]``
_TRULENS_ONLY = ("ground_truth_id", "dataset_id")
#: every column the reader knows (the ``trulens`` format recognises a file by these)
READ_FIELDS = frozenset({a for names in _ALIASES.values() for a in names} | set(_TRULENS_ONLY))
_KNOWN = READ_FIELDS
_EXTRA_KEY = "ragbridge"
_TRULENS_KEY = "trulens"

logger = logging.getLogger("ragbridge")






def _expected_chunks(value: Any) -> list[dict[str, Any]]:
    """``expected_chunks`` as TruLens holds them: a list of objects with a ``text`` (a plain text is
    ``{"text": ...}``, as TruLens's own curation makes it)."""
    if isinstance(value, str) and value.strip().startswith("["):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"is not a valid JSON list: {exc.msg}", field="expected_chunks") from None
    texts = _texts(value, "expected_chunks")
    items = value if isinstance(value, (list, tuple)) else [value]
    return [{"text": t, **{k: v for k, v in item.items() if k not in ("text", "page_content", "content")}}
            if isinstance(item, dict) else {"text": t} for t, item in zip(texts, items)]


def _grade(score: Any) -> Optional[int]:
    """An ``expect_score`` as a canonical grade: an integer from 1 to 1000 (missing: 1, TruLens's
    default); None for any other score."""
    if score is None:
        return 1
    if isinstance(score, (int, float)) and not isinstance(score, bool) and float(score).is_integer() \
            and 1 <= score <= 1000:
        return int(score)
    return None


def labels_of(chunks: Sequence[dict[str, Any]]) -> tuple[dict[str, int], list[str], int, bool]:
    """TruLens's expected chunks as ragbridge labels: ``(relevant, texts, odd, plain)``.

    Each chunk is the label ``ctx-<sha1 of its text>[:12]`` (the id a retrieved chunk with that text
    gets) with its ``expect_score`` as the grade; a score that is not an integer from 1 to 1000 is
    grade 1 (TruLens's recall, precision, MRR and hit count every expected chunk as relevant) and
    counted in ``odd``. A text given twice keeps its first score, as TruLens's nDCG does. ``plain``:
    the chunks are exactly what `expected_chunks_of` writes back for these labels (only ``text`` and
    an integer ``expect_score`` each, no text twice)."""
    relevant: dict[str, int] = {}
    texts, odd, plain = [], 0, True
    for chunk in chunks:
        text = chunk["text"]
        texts.append(text)
        grade = _grade(chunk.get("expect_score"))
        if grade is None:
            odd += 1
        key = chunk_id_for_text(text)
        if grade is None or key in relevant or set(chunk) != {"text", "expect_score"}:
            plain = False
        relevant.setdefault(key, grade or 1)
    return relevant, texts, odd, plain


def expected_chunks_of(case: Case) -> list[dict[str, Any]]:
    """The ``expected_chunks`` that make TruLens's ground-truth IR metrics mean what native ranking
    metrics mean (docs/formats.md): one chunk per label with grade >= 1, in label order, with the
    grade as ``expect_score``; its text is the text of the first retrieved chunk matching the label
    (the relevance rule), else the gold passage of ``reference_contexts`` whose derived id the label
    is, else the label itself (a label nothing retrieved: it still counts in recall's denominator).
    Expected chunks read from TruLens (kept in ``metadata["trulens"]["expected_chunks"]``) are
    written back as they were while the case's labels and gold passages are still theirs."""
    kept = _kept_chunks(case)
    if kept is not None:
        relevant, texts, _, _ = labels_of(kept)
        if relevant == case.relevant and texts == case.reference_contexts:
            return kept
    first: dict[str, str] = {}
    for chunk, label in zip(case.contexts, case.chunk_labels()):
        if label is not None:
            first.setdefault(label, chunk.text)
    gold = {chunk_id_for_text(t): t for t in case.reference_contexts}
    return [{"text": first.get(label, gold.get(label, label)), "expect_score": grade}
            for label, grade in case.relevant.items() if grade >= 1]


def _kept_chunks(case: Case) -> Optional[list[dict[str, Any]]]:
    trulens = case.metadata.get(_TRULENS_KEY)
    kept = trulens.get("expected_chunks") if isinstance(trulens, dict) else None
    if isinstance(kept, list) and all(isinstance(k, dict) and isinstance(k.get("text"), str) for k in kept):
        return kept
    return None


def _texts(value: Any, field: str) -> list[str]:
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                value = json.loads(text)
            except json.JSONDecodeError as exc:
                raise DatasetError(f"is not a valid JSON list: {exc.msg}", field=field) from None
        else:
            return [value] if text else []
    if not isinstance(value, (list, tuple)):
        raise DatasetError(f"must be a list of texts, got {type(value).__name__}", field=field)
    out = []
    for item in value:
        if isinstance(item, dict):
            text = item.get("text", item.get("page_content", item.get("content")))
            if not isinstance(text, str):
                raise DatasetError("each item must be a text or a {\"text\": ...} object", field=field)
            out.append(text)
        elif isinstance(item, str):
            out.append(item)
        else:
            raise DatasetError(f"each item must be a text, got {type(item).__name__}", field=field)
    return out


def row_to_record(row: dict[str, Any]) -> dict[str, Any]:
    """One TruLens row -> a canonical record (validated later by `cases_from_records`)."""
    return _row_to_record(row)[0]


def _row_to_record(row: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """The record, and how many expected chunks had a score that is not a grade (`labels_of`)."""
    row = {k: _plain(v, keep_missing=k in ("meta", "metadata")) for k, v in row.items() if not _missing(v)}
    unknown = sorted(set(row) - _KNOWN)
    if unknown:
        raise DatasetError(
            f"unknown column(s) for the trulens format: {', '.join(unknown)}", field=unknown[0],
            hint="columns: query, query_id, response, contexts, expected_response, expected_chunks, meta")
    rec: dict[str, Any] = {}
    for canon, names in _ALIASES.items():
        found = [n for n in names if n in row]
        if len(found) > 1:
            raise DatasetError(f"given twice, as {found[0]!r} and {found[1]!r}", field=found[1],
                               hint="keep one of them")
        if found:
            rec[canon] = row[found[0]]
    meta = rec.pop("metadata", None)
    if isinstance(meta, str) and meta.strip().startswith("{"):
        try:
            meta = json.loads(meta)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"is not a valid JSON object: {exc.msg}", field="meta") from None
    if meta is not None and not isinstance(meta, dict):
        raise DatasetError(f"must be an object, got {type(meta).__name__}", field="meta")
    meta = dict(meta or {})
    extra = meta.pop(_EXTRA_KEY, None) or {}
    if isinstance(extra, str) and extra.startswith("{"):  # JSON text, as a Parquet file's struct holds it
        try:
            extra = json.loads(extra)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"meta.ragbridge is not a valid JSON object: {exc.msg}",
                               field="meta") from None
    if not isinstance(extra, dict):
        raise DatasetError("meta.ragbridge must be an object", field="meta")
    if "metadata.ragbridge" in extra:  # the case's own metadata["ragbridge"]
        meta[_EXTRA_KEY] = extra["metadata.ragbridge"]
    trulens = {k: row[k] for k in _TRULENS_ONLY if k in row}
    odd = 0
    expected = _expected_chunks(rec.pop("reference_contexts", []))
    relevant, texts, odd, plain = labels_of(expected)
    if relevant and "relevant" not in extra:
        rec["relevant"] = relevant
        prev = meta.get(_TRULENS_KEY)
        if not plain and not (isinstance(prev, dict) and "expected_chunks" in prev):
            trulens["expected_chunks"] = expected  # written back as they are (`expected_chunks_of`)
    rec["reference_contexts"] = extra.get("reference_contexts", texts)
    if trulens:
        prev = meta.get(_TRULENS_KEY)
        meta[_TRULENS_KEY] = {**(prev if isinstance(prev, dict) else {}), **trulens}
    if meta:
        rec["metadata"] = meta
    if "contexts" in rec:
        texts = _texts(rec["contexts"], "contexts")
        chunks = extra.get("contexts")
        if isinstance(chunks, list) and len(chunks) == len(texts):
            rec["contexts"] = [{**c, "text": t} for c, t in zip(chunks, texts)]
        else:  # a text repeated in one row stays a chunk of its own, as in the other library formats
            rec["contexts"] = [{"id": i, "text": t} for i, t in zip(derived_chunk_ids(texts), texts)]
    for key in ("relevant", "relevant_spans", "must_contain", "must_not_contain", "answerable", "tags"):
        if key in extra:
            rec[key] = extra[key]
    if "id" in rec and not isinstance(rec["id"], str):
        rec["id"] = str(rec["id"])
    return rec, odd


def case_to_row(case: Case) -> dict[str, Any]:
    """One case -> one TruLens row: ``expected_chunks`` from the labels (`expected_chunks_of`;
    ``[]`` when there are none, as TruLens's IR metrics need a list in every row), ``meta`` always an
    object, what TruLens has no column for under ``meta["ragbridge"]``."""
    row: dict[str, Any] = {"query_id": case.id, "query": case.question}
    if case.answer is not None:
        row["response"] = case.answer
    if case.contexts_given:  # an empty list: the retriever returned nothing (no column: not given)
        row["contexts"] = [c.text for c in case.contexts]
    if case.reference is not None:
        row["expected_response"] = case.reference
    expected = expected_chunks_of(case)
    row["expected_chunks"] = expected
    meta = dict(case.metadata)
    trulens = dict(meta[_TRULENS_KEY]) if isinstance(meta.get(_TRULENS_KEY), dict) else None
    if trulens is not None:
        if expected is trulens.get("expected_chunks"):
            trulens.pop("expected_chunks")
        for key in _TRULENS_ONLY:
            if isinstance(trulens.get(key), str):
                row[key] = trulens.pop(key)
        if trulens:
            meta[_TRULENS_KEY] = trulens
        else:
            meta.pop(_TRULENS_KEY)
    relevant, texts, _, _ = labels_of(expected)
    extra: dict[str, Any] = {}
    if case.contexts and ([c.id for c in case.contexts] != derived_chunk_ids([c.text for c in case.contexts])
                          or any(c.model_dump(exclude={"id", "text"}, exclude_none=True)
                                 for c in case.contexts)):
        extra["contexts"] = [c.model_dump(exclude={"text"}, exclude_none=True) for c in case.contexts]
    if case.relevant != relevant:
        extra["relevant"] = dict(case.relevant)
    if case.reference_contexts != texts:
        extra["reference_contexts"] = list(case.reference_contexts)
    if case.relevant_spans:
        extra["relevant_spans"] = [s.model_dump(exclude_none=True) for s in case.relevant_spans]
    for key in ("must_contain", "must_not_contain", "tags"):
        if getattr(case, key):
            extra[key] = list(getattr(case, key))
    if not case.answerable:
        extra["answerable"] = False
    if _EXTRA_KEY in meta:  # the key this writer owns: the case's own value travels inside it
        extra["metadata.ragbridge"] = meta.pop(_EXTRA_KEY)
    if extra:
        meta[_EXTRA_KEY] = extra
    row["meta"] = meta  # always an object: see docs/formats.md (pandas and TruLens's row reader)
    return row


def cases_from_frame(df: Any, source: Optional[str] = None) -> list[Case]:
    """A pandas DataFrame in TruLens's columns -> cases (raises `DatasetError` with the row)."""
    rows = df.to_dict(orient="records")

    def gen() -> Iterator[tuple[int, Any]]:
        for i, row in enumerate(rows, start=1):
            yield i, row

    return _cases(gen(), source or "<DataFrame>", "row")


def cases_to_frame(cases: Sequence[Case]):
    """Cases -> a pandas DataFrame in TruLens's columns."""
    import pandas as pd

    return pd.DataFrame([case_to_row(c) for c in cases])


def _cases(records: Iterable[tuple[int, Any]], path: Any, unit: str) -> list[Case]:
    odd = [0, 0]  # expected chunks whose expect_score is not a grade, and their rows

    def converted() -> Iterator[tuple[int, Any]]:
        for n, raw in records:
            if not isinstance(raw, dict):
                raise DatasetError(f"each row must be an object, got {type(raw).__name__}", path=path,
                                   line=n, unit=unit)
            try:
                rec, n_odd = _row_to_record(raw)
            except DatasetError as exc:
                exc.path, exc.line, exc.unit = str(path), n, unit
                raise
            odd[0] += n_odd
            odd[1] += bool(n_odd)
            yield n, rec

    cases = cases_from_records(converted(), path, unit=unit)
    if odd[0]:
        logger.warning("warning: %s: %d expected chunk(s) in %d row(s) have an expect_score that is not "
                       "an integer from 1 to 1000: read as grade 1 (TruLens's recall, precision, MRR "
                       "and hit count them as relevant; its nDCG weighs them by the score); written "
                       "back as they were", path, odd[0], odd[1])
    return cases


#: the columns that hold lists or mappings: in a CSV cell, JSON or the Python literal pandas writes
TABLE_CELLS = frozenset({"contexts", "context", "source", "retrieved_contexts", "expected_chunks", "meta",
                         "metadata"})


def _table_cells(row: dict[str, Any]) -> dict[str, Any]:
    """A CSV row with the text of its list and mapping cells read (`literal_cell`)."""
    out = dict(row)
    for k in TABLE_CELLS & row.keys():
        v = row[k]
        if isinstance(v, str) and v.strip()[:1] in "[{":
            try:
                out[k] = literal_cell(v.strip())
            except DatasetError as exc:
                exc.field = k
                raise
    return out


def read_trulens(path: Path) -> list[Case]:
    path = Path(path)
    if path.is_dir():  # a datasets folder (Dataset.from_pandas(df).save_to_disk)
        return _cases(enumerate(read_hf_rows(path), start=1), path, "row")
    suffix = path.suffix.lower()
    if suffix in (".parquet", ".pq"):
        rows = read_rows(path)
        if not rows:
            raise DatasetError("file is empty", path=path, hint="a golden set needs at least one case")
        return _cases(enumerate(rows, start=1), path, "row")
    if suffix == ".csv":
        import pandas as pd

        try:
            df = pd.read_csv(path, dtype=str, keep_default_na=False)
        except Exception as exc:  # noqa: BLE001
            raise DatasetError(f"cannot be read as csv: {exc}", path=path) from None
        if df.empty:
            raise DatasetError("file is empty", path=path, hint="a golden set needs at least one case")
        df = df.replace({"": None})
        rows = df.to_dict(orient="records")
        index = pandas_index([str(c) for c in df.columns], rows)  # pandas' to_csv writes its index first
        read = []
        for line, row in enumerate(rows, start=2):
            try:
                read.append((line, _table_cells({k: v for k, v in row.items() if k != index})))
            except DatasetError as exc:
                exc.path, exc.line = str(path), line
                raise
        return _cases(read, path, "line")
    if suffix != ".json":
        return _cases(jsonl_lines(path), path, "line")
    data = path.read_bytes()
    if not data.strip():
        raise DatasetError("file is empty", path=path, hint="a golden set needs at least one case")
    text = data.decode("utf-8-sig", errors="strict")
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DatasetError(f"not valid JSON: {exc.msg}", path=path, line=exc.lineno) from None
    if not isinstance(obj, list):
        raise DatasetError("must hold a JSON list of rows", path=path)
    return _cases(enumerate(obj, start=1), path, "item")


#: what TruLens's own ground-truth store keeps not (``GroundTruth`` has no field for the app's outputs);
#: and, from a ``.parquet`` file, the nulls its ``meta`` struct gives a row for the keys other rows have
#: (TruLens keeps them as they come)
PARQUET_NULLS = "metadata (another row's keys, as null: Parquet)"
PARQUET_TEXTS = "metadata (an object a Parquet struct cannot hold, {} or mixed types: JSON text to TruLens)"
RESAVE_DROPS = ("answer", "contexts", PARQUET_NULLS, PARQUET_TEXTS)


def write_trulens(cases: Sequence[Case], path: Path) -> list[str]:
    path = Path(path)
    rows = [case_to_row(c) for c in cases]
    suffix = path.suffix.lower()
    if suffix in (".parquet", ".pq"):
        return write_rows(rows, path, as_text=(_EXTRA_KEY,))
    if suffix == ".csv":
        import pandas as pd

        flat = [{k: (json.dumps(v, ensure_ascii=False) if isinstance(v, (list, dict)) else v)
                 for k, v in r.items()} for r in rows]
        # every cell quoted: a bare "\r" in a text would otherwise end the row for pandas' reader
        pd.DataFrame(flat).to_csv(path, index=False, quoting=csv.QUOTE_ALL)
        # an empty cell reads back as missing
        return [f"{name} (empty, CSV)" for name in ("answer", "reference")
                if any(getattr(c, name) == "" for c in cases)]
    if suffix == ".json":
        path.write_text(json.dumps(rows, ensure_ascii=False, indent=1), encoding="utf-8")
        return []
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    return []


def resave_lost(cases: Sequence[Case], path: Path) -> list[str]:
    """What TruLens's ground-truth store (`RESAVE_DROPS`) does not keep of ``cases`` (written to
    ``path``)."""
    # contexts given (an empty list too: the retriever returned nothing) come back as not given
    lost = [name for name in ("answer", "contexts")
            if any(c.answer is not None if name == "answer" else c.contexts_given for c in cases)]
    parquet = Path(path).suffix.lower() in (".parquet", ".pq")
    metas = [case_to_row(c)["meta"] for c in cases] if parquet else []
    if parquet and struct_nulls(metas, as_text=(_EXTRA_KEY,)):
        lost.append(PARQUET_NULLS)
    if parquet and set(struct_texts(metas, as_text=(_EXTRA_KEY,))) - {_EXTRA_KEY}:
        lost.append(PARQUET_TEXTS)
    return lost


FORMATS = [
    Format("trulens", (), read_trulens, write_trulens,
           "TruLens RAG-triad rows (GroundTruth columns plus response and contexts); .jsonl, .json, .csv "
           "or .parquet by suffix",
           cannot_hold=("answer (empty, CSV)", "reference (empty, CSV)", *PARQUET_CANNOT_HOLD),
           fields=READ_FIELDS, resaved_by="TruLens's add_ground_truth_to_dataset and get_ground_truth",
           resave_drops=RESAVE_DROPS, resave_lost=resave_lost),
]
