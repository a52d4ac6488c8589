"""Reproducible samples of logged production interactions, as canonical cases.

Production traffic has no reference answers or relevance labels, so a sample is scored with the
reference-free metrics (faithfulness, answer relevance, context relevance) and the answer checks.

A log is JSONL, one interaction a line. Its fields are mapped onto the schema by a small TOML file
(``--mapping``); each value is a dotted path into the log record::

    [fields]
    id = "trace_id"                 # optional: missing ids are derived from the line
    question = "request.query"
    answer = "response.text"
    contexts = "retrieval.documents"
    timestamp = "ts"
    tags = "labels"

    [chunk]                         # paths inside each element of contexts
    id = "doc_id"
    text = "content"
    score = "score"
    source = "url"

Without a mapping the log's own names are used, with the usual aliases (``query``, ``response``,
``retrieved_contexts``, ...). Log fields that are not mapped are left out of the case.

The sample is drawn with reservoir sampling from a seeded generator over the lines that pass every
``--where`` filter, so the same log, filters and seed always give the same cases, kept in log order.
"""

from __future__ import annotations

import random
import tomllib
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence

from ..formats.files import DatasetError, jsonl_lines
from ..formats.records import cases_from_records, stable_id
from ..schema import Case

__all__ = ["load_mapping", "sample_traces", "parse_where"]

FIELD_KEYS = ("id", "question", "answer", "contexts", "timestamp", "tags")
CHUNK_KEYS = ("id", "text", "score", "source")
DEFAULT_FIELDS = {
    "id": ("id", "trace_id", "case_id", "request_id"),
    "question": ("question", "query", "user_input", "input"),
    "answer": ("answer", "response", "actual_output", "output"),
    "contexts": ("contexts", "retrieved_contexts", "retrieval_context", "retrieved", "documents", "chunks"),
    "timestamp": ("timestamp", "ts", "time", "created_at"),
    "tags": ("tags", "labels"),
}


def load_mapping(path: Optional[Path]) -> dict[str, dict[str, str]]:
    """Read a mapping TOML file; raises `DatasetError` naming the file and key when it is wrong."""
    if path is None:
        return {"fields": {}, "chunk": {}}
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DatasetError("mapping file not found", path=path) from None
    except tomllib.TOMLDecodeError as exc:
        raise DatasetError(f"not valid TOML: {exc}", path=path) from None
    unknown = set(data) - {"fields", "chunk"}
    if unknown:
        raise DatasetError(f"unknown table(s) {sorted(unknown)}; expected [fields] and [chunk]", path=path)
    out = {"fields": data.get("fields", {}), "chunk": data.get("chunk", {})}
    for table, keys in (("fields", FIELD_KEYS), ("chunk", CHUNK_KEYS)):
        for key, value in out[table].items():
            if key not in keys:
                raise DatasetError(f"unknown key {key!r} in [{table}]; known: {', '.join(keys)}", path=path)
            if not isinstance(value, str) or not value:
                raise DatasetError(f"[{table}] {key} must be a dotted path string", path=path)
    return out


def _get(record: Any, path: str) -> Any:
    cur = record
    for part in path.split("."):
        if isinstance(cur, dict) and part in cur:
            cur = cur[part]
        elif isinstance(cur, list) and part.isdigit() and int(part) < len(cur):
            cur = cur[int(part)]
        else:
            return None
    return cur


def _field(record: dict, key: str, mapping: dict) -> Any:
    if key in mapping["fields"]:
        return _get(record, mapping["fields"][key])
    for name in DEFAULT_FIELDS[key]:
        if name in record:
            return record[name]
    return None


def _chunk(raw: Any, mapping: dict) -> Any:
    if not isinstance(raw, dict) or not mapping["chunk"]:
        return raw
    return {k: _get(raw, p) for k, p in mapping["chunk"].items() if _get(raw, p) is not None}


def parse_where(clauses: Sequence[str]) -> list[tuple[str, str]]:
    out = []
    for clause in clauses:
        key, sep, value = clause.partition("=")
        if not sep or not key.strip():
            raise DatasetError(f"--where {clause!r} is not of the form field=value (e.g. tag=billing)")
        out.append((key.strip(), value.strip()))
    return out


def _matches(record: dict, case_like: dict, where: list[tuple[str, str]]) -> bool:
    for key, value in where:
        if key in ("tag", "tags"):
            tags = case_like.get("tags") or []
            if value not in (tags if isinstance(tags, list) else [tags]):
                return False
        else:
            got = case_like.get(key) if key in case_like else _get(record, key)
            if got is None or str(got) != value:
                return False
    return True


def _to_case_record(record: dict, mapping: dict, line: int) -> dict:
    rec: dict[str, Any] = {}
    for key in FIELD_KEYS:
        value = _field(record, key, mapping)
        if value is not None:
            rec[key] = value
    if "contexts" in rec and isinstance(rec["contexts"], list):
        rec["contexts"] = [_chunk(c, mapping) for c in rec["contexts"]]
    ts = rec.pop("timestamp", None)
    if "id" not in rec:
        basis = f"{line}\x00{rec.get('question', '')}\x00{ts}"
        rec["id"] = stable_id("trace-", basis, 12)
    rec["id"] = str(rec["id"])
    if isinstance(rec.get("tags"), str):
        rec["tags"] = [rec["tags"]]
    rec["metadata"] = {"timestamp": ts, "log_line": line}
    return rec


def sample_traces(
    path: str | Path,
    n: int,
    seed: int = 0,
    where: Sequence[str] = (),
    mapping: Optional[dict] = None,
) -> list[Case]:
    """Draw up to ``n`` interactions from a JSONL log (see the module docstring)."""
    path = Path(path)
    if n < 1:
        raise DatasetError(f"--n must be at least 1, got {n}")
    if not path.exists():
        raise DatasetError("no such file", path=path)
    mapping = mapping or {"fields": {}, "chunk": {}}
    filters = parse_where(where)
    rng = random.Random(seed)
    reservoir: list[tuple[int, dict]] = []
    seen = 0

    def records() -> Iterator[tuple[int, dict]]:
        for line, record in jsonl_lines(path):
            if not isinstance(record, dict):
                raise DatasetError("each line must be a JSON object", path=path, line=line)
            yield line, record

    for line, record in records():
        rec = _to_case_record(record, mapping, line)
        if "question" not in rec:
            raise DatasetError(
                "no question found", path=path, line=line,
                field=mapping["fields"].get("question", "question"),
                hint="map it with [fields] question = \"path.to.question\" in --mapping",
            )
        if not _matches(record, rec, filters):
            continue
        seen += 1
        if len(reservoir) < n:
            reservoir.append((line, rec))
        else:
            j = rng.randrange(seen)
            if j < n:
                reservoir[j] = (line, rec)
    if not reservoir:
        raise DatasetError("no interaction matches", path=path, hint="check --where and --mapping")
    reservoir.sort(key=lambda item: item[0])
    return cases_from_records(reservoir, path)
