"""DeepEval datasets to and from canonical cases: goldens and test cases in JSON, JSONL and CSV.

Reading accepts what DeepEval 4.3.1 writes (``EvaluationDataset.save_as``) and what its loaders read
(``add_goldens_from_json_file`` / ``_jsonl_file`` / ``_csv_file``, ``add_test_cases_from_json_file`` /
``_csv_file``): snake_case or camelCase keys (``actualOutput``, ``retrievalContext``...), list-valued
fields as lists or, in JSONL and CSV, joined with ``|`` (split back exactly as DeepEval does), and
``RetrievedContextData`` markers (``deepeval_source=S,deepeval_context=T`` -> a chunk with source S).
No DeepEval import is needed; the tests check both directions against DeepEval's own loaders and writer.

Field mapping (canonical <- DeepEval)::

    id                 <-> name (reading: else a stable hash of the input; writing: always the id)
    question           <- input
    answer             <- actual_output
    reference          <- expected_output
    contexts           <- retrieval_context (chunk ids: ctx-<hash of text>, with -2, -3... for a text
                          repeated in the same golden, unless ragbridge wrote them)
    reference_contexts <- context
    tags               <- tags (test cases)
    metadata           <- additional_metadata / metadata; DeepEval fields with no canonical home
                          (comments, source_file, tools_called, expected_tools, token counts, cost,
                          custom_column_key_values, expectations, ...) go to metadata["deepeval"]

An explicit empty ``retrieval_context`` or ``context`` (``[]`` in JSON, ``""`` in JSONL: what
DeepEval writes for "retrieved nothing") is kept as ``metadata["deepeval"][field] = []`` and written
back as an empty list: DeepEval's contextual metrics score ``[]`` and refuse a missing context, and
the canonical schema cannot tell the two apart. (DeepEval's own CSV loader reads every empty cell of
that column as ``[]``.)

Writing produces DeepEval goldens with ``save_as``'s keys and column order; ``metadata["deepeval"]``
entries of the right type become the golden's own keys again. The canonical fields DeepEval has no
place for (chunk ids, scores and sources, ``relevant``, ``must_contain``, ``must_not_contain``,
``answerable``, ``tags``, and a ``metadata["ragbridge"]`` of the case's own) are kept in
``additional_metadata["ragbridge"]``, which DeepEval carries along untouched and this reader
restores, so a round trip loses nothing. The losses, all in CSV (`CSV_CANNOT_HOLD`, reported by
``write``): a chunk or gold passage containing ``|`` is split into pieces when read back, and a list
of one empty text comes back empty (DeepEval's own format cannot escape them); an empty answer or
reference reads back as missing. JSONL is written with lists, which DeepEval's JSONL loader also
reads, so JSONL has no such loss. ``docs/formats.md`` has the user's view.

Size: DeepEval keeps the same goldens in three files (JSON, JSON lines, a CSV with joined lists),
each read by its own loader; what each holds and what each loader loses are said side by side.
"""

from __future__ import annotations

import ast
import csv
import io
import json
import re
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence

from ragbridge.plugin import (
    Case,
    DatasetError,
    Format,
    case_id_for_question,
    cases_from_records,
    derived_chunk_ids,
    is_missing as _missing,
    jsonl_lines,
    literal_cell,
    pandas_index,
)

DELIMITER = "|"  # deepeval.dataset.utils.DELIMITER
RAGBRIDGE_KEY = "ragbridge"
DEEPEVAL_KEY = "deepeval"

#: save_as's keys, in its order (single-turn goldens)
GOLDEN_KEYS = (
    "input", "actual_output", "expected_output", "retrieval_context", "context", "name", "comments",
    "source_file", "tools_called", "expected_tools", "token_cost", "input_token_count",
    "output_token_count", "additional_metadata", "custom_column_key_values", "expectations",
)

_ALIASES = {
    "actualOutput": "actual_output",
    "expectedOutput": "expected_output",
    "retrievalContext": "retrieval_context",
    "additionalMetadata": "additional_metadata",
    "sourceFile": "source_file",
    "toolsCalled": "tools_called",
    "expectedTools": "expected_tools",
    "tokenCost": "token_cost",
    "inputTokenCount": "input_token_count",
    "outputTokenCount": "output_token_count",
    "customColumnKeyValues": "custom_column_key_values",
    "completionTime": "completion_time",
    "expectedLabels": "expected_labels",
}
_MARKER = re.compile(r"^deepeval_source=(?P<source>.*?),deepeval_context=(?P<context>.*)$", re.S)
_MULTI_TURN = ("scenario", "turns")


#: DeepEval fields with no canonical home that a golden holds as its own keys, with their types
_GOLDEN_ONLY = {"comments": (str,), "source_file": (str,), "tools_called": (list,), "expected_tools": (list,),
                "token_cost": (int, float), "input_token_count": (int,), "output_token_count": (int,),
                "custom_column_key_values": (dict,), "expectations": (dict,)}
#: every key the reader knows (the ``deepeval`` format recognises a file by these)
READ_FIELDS = frozenset(GOLDEN_KEYS) | set(_ALIASES) | {
    "metadata", "tags", "flaky", "multimodal", "completion_time", "expected_labels", "images_mapping",
    "imagesMapping", "mcp_servers", "mcp_tools_called", "mcp_resources_called", "mcp_prompts_called", "id",
    "scenario", "turns", "expected_outcome", "user_description", "persona"}
#: the fields that hold lists or mappings (a DataFrame's text cell of one: JSON or a Python literal)
TABLE_CELLS = frozenset({"retrieval_context", "retrievalContext", "context", "tags", "additional_metadata",
                         "additionalMetadata", "metadata", "tools_called", "toolsCalled", "expected_tools",
                         "expectedTools", "custom_column_key_values", "customColumnKeyValues",
                         "expectations"})
#: list fields whose explicit empty list is kept (DeepEval's metrics tell [] from missing)
_EMPTY_KEPT = ("retrieval_context", "context")
#: ``metadata["deepeval"]`` key: the positions of the chunks DeepEval gave as ``RetrievedContextData``
_TAGGED = "retrieved_context_data"
#: the cells pandas' ``read_csv`` (DeepEval's CSV loader) reads as missing (``pandas.read_csv``'s
#: default ``na_values``)
PANDAS_MISSING = frozenset({"", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND",
                            "1.#QNAN", "<NA>", "N/A", "NA", "NULL", "NaN", "None", "n/a", "nan", "null"})




# --------------------------------------------------------------------------------------------
# Reading


def _split(value: Any, field: str, joined: bool) -> Optional[list]:
    if _missing(value):
        return None
    if isinstance(value, (list, tuple)):
        return list(value)
    if isinstance(value, str):
        if not joined:
            raise DatasetError("must be a list of strings, got a string", field=field,
                               hint="'|'-joined text is DeepEval's CSV (save_as('csv')): read the file "
                                    "itself, ragbridge.load_cases(PATH, 'deepeval-csv') or --format "
                                    "deepeval-csv")
        return value.split(DELIMITER) if value else []
    raise DatasetError(f"must be a list of strings, got {type(value).__name__}", field=field)


def _chunk(item: Any, field: str) -> dict[str, Any]:
    if isinstance(item, dict) and "context" in item:  # RetrievedContextData dumped as a dict
        out = {"text": str(item["context"])}
        if item.get("source") is not None:
            out["source"] = str(item["source"])
        return out
    if not isinstance(item, str):
        raise DatasetError(f"items must be strings, got {type(item).__name__}", field=field)
    m = _MARKER.match(item)
    if m:
        return {"text": m.group("context"), "source": m.group("source")}
    return {"text": item}


def _mapping(value: Any, field: str) -> Optional[dict]:
    if _missing(value):
        return None
    if isinstance(value, dict):
        return value
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return None
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError:
            try:
                parsed = ast.literal_eval(text)
            except (ValueError, SyntaxError):
                raise DatasetError("is neither a JSON object nor a Python dict literal",
                                   field=field) from None
        if isinstance(parsed, dict):
            return parsed
    raise DatasetError(f"must be an object, got {type(value).__name__}", field=field)


def record_to_canonical(raw: Any, joined: bool) -> dict[str, Any]:
    """One DeepEval golden / test case (a dict as in a file) as a canonical record (not validated)."""
    if not isinstance(raw, dict):
        raise DatasetError(f"each golden must be an object, got {type(raw).__name__}")
    rec = {_ALIASES.get(k, k): v for k, v in raw.items()}
    if any(not _missing(rec.get(k)) and rec.get(k) != [] for k in _MULTI_TURN):
        raise DatasetError("is a multi-turn (conversational) golden", field="scenario",
                           hint="ragbridge reads single-turn goldens and test cases only")
    for k in _MULTI_TURN + ("expected_outcome", "user_description", "persona"):
        rec.pop(k, None)
    rec = {k: v for k, v in rec.items() if not _missing(v)}
    if not isinstance(rec.get("input"), str):
        raise DatasetError("is required but missing" if "input" not in rec else "must be a string",
                           field="input")

    meta: dict[str, Any] = {}
    for key in ("additional_metadata", "metadata"):
        if key in rec:
            m = _mapping(rec.pop(key), key)
            if m:
                meta.update(m)
    extra = meta.pop(RAGBRIDGE_KEY, None)
    extra = extra if isinstance(extra, dict) else {}

    out: dict[str, Any] = {"question": rec.pop("input")}
    name = rec.pop("name", None)
    if name not in (None, ""):
        out["id"] = str(name)
    elif extra.get("id"):
        out["id"] = str(extra["id"])
    for src, dst in (("actual_output", "answer"), ("expected_output", "reference")):
        if src in rec:
            v = rec.pop(src)
            if not isinstance(v, str):
                raise DatasetError(f"must be a string, got {type(v).__name__}", field=src)
            out[dst] = v

    empty = [k for k in _EMPTY_KEPT if _split(rec.get(k), k, joined) == []]
    rc = _split(rec.pop("retrieval_context", None), "retrieval_context", joined)
    if rc is not None:  # an empty list (or DeepEval's joined ""): the retriever returned nothing
        chunks = [_chunk(x, "retrieval_context") for x in rc]
        tagged = [i for i, c in enumerate(chunks) if "source" in c]
        if tagged:  # RetrievedContextData: written back as DeepEval's source-tagged chunks
            rec[_TAGGED] = tagged
        kept = extra.get("contexts")
        if isinstance(kept, list) and len(kept) == len(chunks) and all(isinstance(k, dict) for k in kept):
            for c, k in zip(chunks, kept):
                for f in ("id", "score", "source", "doc", "start", "end"):
                    if k.get(f) is not None:
                        c[f] = k[f]
        for c, cid in zip(chunks, derived_chunk_ids([c["text"] for c in chunks])):
            c.setdefault("id", cid)
        out["contexts"] = chunks
    gold = _split(rec.pop("context", None), "context", joined)
    if gold:
        out["reference_contexts"] = [str(x) for x in gold]
    if "metadata.ragbridge" in extra:  # the case's own metadata["ragbridge"]
        meta[RAGBRIDGE_KEY] = extra["metadata.ragbridge"]
    for k in empty:  # DeepEval was given an empty list (not a missing one): kept, written back as []
        if k == "retrieval_context":
            continue  # the case's empty contexts say it (`Case.contexts_given`), and are written back so
        rec[k] = []
    tags = rec.pop("tags", None)
    if tags:
        out["tags"] = list(tags) if isinstance(tags, (list, tuple)) else [str(tags)]
    for f in ("relevant", "relevant_spans", "must_contain", "must_not_contain", "answerable", "tags"):
        if f in extra and f not in out:
            out[f] = extra[f]

    for flag in ("flaky", "multimodal"):  # LLMTestCase defaults in a model_dump; derived, not data
        if rec.get(flag) is False:
            rec.pop(flag)
    deepeval_only = {k: v for k, v in rec.items() if v not in (None, [], {}, "") or k in empty}
    if deepeval_only:
        prev = meta.get(DEEPEVAL_KEY)
        meta[DEEPEVAL_KEY] = {**(prev if isinstance(prev, dict) else {}), **deepeval_only}
    if meta:
        out["metadata"] = meta
    return out


def _records_with_ids(records: Iterator[tuple[int, Any]], joined: bool,
                      path: Path) -> Iterator[tuple[int, dict]]:
    seen: dict[str, int] = {}
    for n, raw in records:
        try:
            rec = record_to_canonical(raw, joined)
        except DatasetError as exc:
            exc.path, exc.line = str(path), n
            raise
        if "id" not in rec:
            base = case_id_for_question(rec["question"])
            k = seen.get(base, 0) + 1
            seen[base] = k
            rec["id"] = base if k == 1 else f"{base}-{k}"
        yield n, rec


def _text(path: Path) -> str:
    data = path.read_bytes()
    if not data.strip():
        raise DatasetError("file is empty", path=path, hint="a dataset needs at least one golden")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DatasetError(f"invalid UTF-8 at byte {exc.start}", path=path,
                           hint="save the file as UTF-8") from None


def read_json(path: Path) -> list[Case]:
    path = Path(path)
    try:
        data = json.loads(_text(path))
    except json.JSONDecodeError as exc:
        raise DatasetError(f"not valid JSON: {exc.msg}", path=path, line=exc.lineno) from None
    if isinstance(data, dict):
        for key in ("goldens", "test_cases", "testCases", "cases"):
            if isinstance(data.get(key), list):
                data = data[key]
                break
    if not isinstance(data, list):
        raise DatasetError("must hold a JSON list of goldens or test cases", path=path)
    return cases_from_records(_records_with_ids(enumerate(data, start=1), False, path), path, unit="item")


def read_jsonl(path: Path) -> list[Case]:
    path = Path(path)
    return cases_from_records(_records_with_ids(jsonl_lines(path), True, path), path)


def _listed(text: str) -> Optional[list]:
    """A CSV cell that holds a list written whole, as pandas' ``to_csv`` writes a list cell (its
    Python literal, ``['a', 'b']``) or as JSON; None for any other text (DeepEval's own CSV joins a
    list with ``|``)."""
    text = text.strip()
    if not (text.startswith("[") and text.endswith("]")):
        return None
    try:
        value = literal_cell(text)
    except DatasetError:
        return None
    return value if isinstance(value, list) else None


def read_csv(path: Path) -> list[Case]:
    path = Path(path)
    reader = csv.DictReader(io.StringIO(_text(path), newline=""))
    if not reader.fieldnames or "input" not in [_ALIASES.get(f, f) for f in reader.fieldnames]:
        raise DatasetError("has no 'input' column", path=path,
                           hint="DeepEval CSV datasets have a header row with at least 'input'")
    rows = []
    for row in reader:
        if None in row:
            raise DatasetError("has more cells than the header has columns", path=path, line=reader.line_num)
        rows.append((reader.line_num, row))
    index = pandas_index(reader.fieldnames, [row for _, row in rows])  # pandas' to_csv writes it first

    def records() -> Iterator[tuple[int, Any]]:
        for line, row in rows:
            rec: dict[str, Any] = {}
            for k, v in row.items():
                k = _ALIASES.get(k, k)
                if v is None or v == "" or k == index:
                    continue
                if k in ("retrieval_context", "context", "tags") and _listed(v) is not None:
                    v = _listed(v)  # a DeepEval frame written by pandas: its list cells whole
                elif k in ("tools_called", "expected_tools", "custom_column_key_values", "expectations"):
                    try:
                        v = literal_cell(v) if v.strip()[:1] in "[{" else v
                    except DatasetError:
                        pass
                elif k in ("token_cost",):
                    v = _number(v, float)
                elif k in ("input_token_count", "output_token_count"):
                    v = _number(v, int)
                elif k == "tags":
                    v = v.split(DELIMITER)
                elif k in ("flaky", "multimodal") and v in ("True", "False"):
                    v = v == "True"  # pandas' to_csv of a test case's flags
                rec[k] = v
            yield line, rec

    return cases_from_records(_records_with_ids(records(), True, path), path)


def _number(v: str, kind: type) -> Any:
    try:
        f = float(v)
        return int(f) if kind is int and f.is_integer() else f
    except ValueError:
        return v


# --------------------------------------------------------------------------------------------
# Writing


def golden_record(case: Case, lists: bool = True, resave_joins: bool = False
                  ) -> tuple[dict[str, Any], list[str]]:
    """A golden (``save_as``'s keys and order) for a case, and the canonical fields it would lose
    (in the file, `CSV_CANNOT_HOLD`, or in DeepEval's hands, `JSONL_RESAVE_DROPS` and
    `CSV_RESAVE_DROPS`).

    ``lists=False`` joins the list fields with ``|`` as DeepEval's CSV does; ``resave_joins``: the
    file holds lists, but DeepEval's own re-save of it joins them (JSONL)."""
    lost: list[str] = []
    extra: dict[str, Any] = {}
    deepeval_fields = case.metadata.get(DEEPEVAL_KEY)
    deepeval_fields = dict(deepeval_fields) if isinstance(deepeval_fields, dict) else {}
    tagged = deepeval_fields.get(_TAGGED)
    tagged = {i for i in tagged if isinstance(i, int) and 0 <= i < len(case.contexts)
              and case.contexts[i].source is not None} if isinstance(tagged, list) else set()
    texts = [f"deepeval_source={c.source},deepeval_context={c.text}" if i in tagged else c.text
             for i, c in enumerate(case.contexts)]
    if case.contexts and ([c.id for c in case.contexts] != derived_chunk_ids([c.text for c in case.contexts])
                          or any(c.score is not None or (c.source is not None and i not in tagged)
                                 or c.doc is not None or c.start is not None or c.end is not None
                                 for i, c in enumerate(case.contexts))):
        kept = []
        for c in case.contexts:
            k = {"id": c.id}
            if c.score is not None:
                k["score"] = c.score
            if c.source is not None:
                k["source"] = c.source
            k.update(c.model_dump(include={"doc", "start", "end"}, exclude_none=True))
            kept.append(k)
        extra["contexts"] = kept
    if case.relevant:
        extra["relevant"] = dict(case.relevant)
    if case.relevant_spans:
        extra["relevant_spans"] = [s.model_dump(exclude_none=True) for s in case.relevant_spans]
    for f in ("must_contain", "must_not_contain", "tags"):
        if getattr(case, f):
            extra[f] = list(getattr(case, f))
    if not case.answerable:
        extra["answerable"] = False

    meta = dict(case.metadata)
    if RAGBRIDGE_KEY in meta:  # the key this writer owns: the case's own value travels inside it
        extra["metadata.ragbridge"] = meta.pop(RAGBRIDGE_KEY)
    if _TAGGED in deepeval_fields and tagged == set(deepeval_fields[_TAGGED]):
        deepeval_fields.pop(_TAGGED)  # said by the chunks themselves
        meta[DEEPEVAL_KEY] = deepeval_fields
        if not deepeval_fields:
            meta.pop(DEEPEVAL_KEY)
    promoted = {k: v for k, v in deepeval_fields.items()
                if k in _GOLDEN_ONLY and isinstance(v, _GOLDEN_ONLY[k]) and not isinstance(v, bool)}
    if lists:  # an empty list DeepEval was given (JSON and JSONL tell it from a missing one)
        promoted.update({k: [] for k in _EMPTY_KEPT if deepeval_fields.get(k) == []
                         and not (case.contexts if k == "retrieval_context" else case.reference_contexts)})
    if lists and case.contexts_given and not case.contexts:
        promoted["retrieval_context"] = []  # the retriever returned nothing (None: not given)
    if promoted:
        rest = {k: v for k, v in deepeval_fields.items() if k not in promoted}
        if rest:
            meta[DEEPEVAL_KEY] = rest
        else:
            meta.pop(DEEPEVAL_KEY, None)
    if extra:
        meta[RAGBRIDGE_KEY] = extra

    gold = list(case.reference_contexts)
    if not lists:  # "|"-joined: a text holding "|" splits, a lone empty text vanishes
        if any(DELIMITER in t for t in texts) or texts == [""]:
            lost.append("contexts (text with '|', CSV)")
        if any(DELIMITER in t for t in gold) or gold == [""]:
            lost.append("reference_contexts (text with '|', CSV)")
        if case.contexts_given and not case.contexts:  # an empty cell is no list: not given
            lost.append("contexts (an empty list: read back as none given, CSV)")
        lost.extend(f"{name} (empty, CSV)" for name in ("answer", "reference") if getattr(case, name) == "")
        cells = {"id": [case.id], "question": [case.question], "answer": [case.answer],
                 "reference": [case.reference], "contexts": [DELIMITER.join(texts)] if texts else [],
                 "reference_contexts": [DELIMITER.join(gold)] if gold else []}
        lost.extend(f"{name} (a cell pandas reads as missing, CSV)" for name, values in cells.items()
                    if any(v is not None and v != "" and v in PANDAS_MISSING for v in values))
    elif resave_joins:  # DeepEval's own JSONL re-save joins lists with "|" and splits them back
        if any(DELIMITER in t for t in texts) or texts == [""]:
            lost.append("contexts (text with '|', DeepEval's re-save)")
        if any(DELIMITER in t for t in gold) or gold == [""]:
            lost.append("reference_contexts (text with '|', DeepEval's re-save)")
        if texts == [""] or gold == [""]:  # DeepEval writes "" and reads it back as "given empty"
            lost.append("metadata (a lone empty text, DeepEval's re-save)")

    rec: dict[str, Any] = {k: None for k in GOLDEN_KEYS}
    rec["input"] = case.question
    rec["actual_output"] = case.answer
    rec["expected_output"] = case.reference
    if texts:
        rec["retrieval_context"] = texts if lists else DELIMITER.join(texts)
    if gold:
        rec["context"] = gold if lists else DELIMITER.join(gold)
    rec["name"] = case.id  # always: DeepEval's results name their test case by it
    for k, v in promoted.items():
        if k in _EMPTY_KEPT:
            rec[k] = v if lists else ""
        else:
            rec[k] = v
    rec["additional_metadata"] = meta or None  # DeepEval test-case fields a golden has no key for stay here
    return rec, lost


def _write_all(cases: Sequence[Case], lists: bool, resave_joins: bool = False
               ) -> tuple[list[dict], list[str]]:
    records, lost = [], []
    for case in cases:
        rec, lost_here = golden_record(case, lists, resave_joins)
        records.append(rec)
        lost.extend(x for x in lost_here if x not in lost)
    return records, lost


def write_json(cases: Sequence[Case], path: Path) -> list[str]:
    records, lost = _write_all(cases, True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(records, f, indent=4, ensure_ascii=False)
    return []


def write_jsonl(cases: Sequence[Case], path: Path) -> list[str]:
    records, lost = _write_all(cases, True, resave_joins=True)
    with open(path, "w", encoding="utf-8") as f:
        for rec in records:
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")
    return []


def resave_lost_json(cases: Sequence[Case], path: Path) -> list[str]:
    return []


def resave_lost_jsonl(cases: Sequence[Case], path: Path) -> list[str]:
    """What DeepEval's own JSONL loader and ``save_as("jsonl")`` lose of ``cases`` (`JSONL_RESAVE_DROPS`)."""
    return _write_all(cases, True, resave_joins=True)[1]


def resave_lost_csv(cases: Sequence[Case], path: Path) -> list[str]:
    """What DeepEval's own CSV loader loses of ``cases`` that the file holds (`CSV_RESAVE_DROPS`), and
    the text columns it cannot load at all (`CSV_NUMBERS`)."""
    lost = [name for name in _write_all(cases, False)[1] if name in CSV_RESAVE_DROPS]
    return lost + [note for note, field in zip(CSV_NUMBERS, _TEXT_COLUMNS) if _numbers_to_pandas(
        [getattr(c, field) for c in cases])]


def _numbers_to_pandas(cells: Sequence[Optional[str]]) -> bool:
    """Whether pandas' ``read_csv`` types a column of these cells as numbers (DeepEval's loader)."""
    import pandas as pd

    buf = io.StringIO()
    csv.writer(buf).writerows([["c"], *([cell if cell is not None else ""] for cell in cells)])
    column = pd.read_csv(io.StringIO(buf.getvalue()))["c"]
    return len(column) > 0 and column.dtype.kind in "biuf" and bool(column.notna().any())


def write_csv(cases: Sequence[Case], path: Path) -> list[str]:
    records, lost = _write_all(cases, False)
    lost = [name for name in lost if name in CSV_CANNOT_HOLD]
    with open(path, "w", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow(GOLDEN_KEYS)
        for rec in records:
            row = []
            for k in GOLDEN_KEYS:
                v = rec[k]
                if isinstance(v, (dict, list)):
                    v = json.dumps(v, ensure_ascii=False)
                row.append("" if v is None else v)
            w.writerow(row)
    return lost


_BY_SUFFIX = {".json": (read_json, write_json, resave_lost_json),
              ".jsonl": (read_jsonl, write_jsonl, resave_lost_jsonl),
              ".ndjson": (read_jsonl, write_jsonl, resave_lost_jsonl),
              ".csv": (read_csv, write_csv, resave_lost_csv)}


def _dispatch(path: Path, which: int):
    suffix = Path(path).suffix.lower()
    if suffix not in _BY_SUFFIX:
        raise DatasetError(f"cannot tell the DeepEval file type from the suffix {suffix!r}", path=path,
                           hint="use .json, .jsonl or .csv, or the format deepeval-json/-jsonl/-csv")
    return _BY_SUFFIX[suffix][which]


def read_any(path: Path) -> list[Case]:
    return _dispatch(path, 0)(path)


def write_any(cases: Sequence[Case], path: Path) -> list[str]:
    return _dispatch(path, 1)(cases, path)


def resave_lost_any(cases: Sequence[Case], path: Path) -> list[str]:
    return _dispatch(path, 2)(cases, path)


#: what a "|"-joined CSV cannot hold (JSON and JSONL hold everything)
CSV_CANNOT_HOLD = ("contexts (text with '|', CSV)", "reference_contexts (text with '|', CSV)",
                   "answer (empty, CSV)", "reference (empty, CSV)",
                   "contexts (an empty list: read back as none given, CSV)")
#: what DeepEval's own JSONL loader and ``save_as("jsonl")`` lose of a file that holds it
JSONL_RESAVE_DROPS = ("contexts (text with '|', DeepEval's re-save)",
                      "reference_contexts (text with '|', DeepEval's re-save)",
                      "metadata (a lone empty text, DeepEval's re-save)")
#: what DeepEval's own CSV loader (pandas' ``read_csv``, whose default missing values include
#: ``NA``, ``null``, ``NaN`` and ``None``) loses of a file that holds it
CSV_RESAVE_DROPS = tuple(f"{name} (a cell pandas reads as missing, CSV)" for name in (
    "id", "question", "answer", "reference", "contexts", "reference_contexts"))
#: the text columns that pandas' ``read_csv`` types as numbers when every cell of one reads as a number
#: (DeepEval's CSV loader then refuses the file: a Golden's texts must be strings)
_TEXT_COLUMNS = {"id": "name", "question": "input", "answer": "actual_output", "reference": "expected_output"}
CSV_NUMBERS = tuple(f"{name} (every cell a number to pandas: DeepEval's CSV loader refuses the file)"
                    for name in _TEXT_COLUMNS)
_RESAVED_BY = "DeepEval's add_goldens_from_{0}_file and save_as('{0}')"

# No suffixes are claimed: .json/.jsonl/.csv stay ragbridge's own formats unless --from/--to names these
# (or the fields of a file's first record are DeepEval's: see ragbridge.formats.Format.fields).
FORMATS = [
    Format("deepeval", (), read_any, write_any,
           "DeepEval goldens / test cases; .json, .jsonl or .csv by suffix (as EvaluationDataset.save_as "
           "writes them)", cannot_hold=CSV_CANNOT_HOLD, fields=READ_FIELDS,
           resaved_by="DeepEval's add_goldens_from_*_file and save_as, by suffix",
           resave_drops=JSONL_RESAVE_DROPS + CSV_RESAVE_DROPS + CSV_NUMBERS, resave_lost=resave_lost_any),
    Format("deepeval-json", (), read_json, write_json, "DeepEval goldens / test cases, a JSON list",
           resaved_by=_RESAVED_BY.format("json"), resave_lost=resave_lost_json),
    Format("deepeval-jsonl", (), read_jsonl, write_jsonl, "DeepEval goldens, one JSON object a line",
           resaved_by=_RESAVED_BY.format("jsonl"), resave_drops=JSONL_RESAVE_DROPS,
           resave_lost=resave_lost_jsonl),
    Format("deepeval-csv", (), read_csv, write_csv,
           "DeepEval goldens / test cases, CSV with '|'-joined lists",
           cannot_hold=CSV_CANNOT_HOLD, resaved_by=_RESAVED_BY.format("csv"),
           resave_drops=CSV_RESAVE_DROPS + CSV_NUMBERS,
           resave_lost=resave_lost_csv),
]
