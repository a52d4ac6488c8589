"""Reproducible samples of production traffic, as canonical cases: traces, or a log of interactions.

Production traffic has no reference answers or relevance labels, so a sample is scored with the
reference-free metrics (faithfulness, answer relevance, context relevance) and the answer checks.

**Which traces.** Each trace (or log record) is drawn by its id alone: its *draw* is a hash of the
seed and the id, a number in [0, 1) (`draw`). ``rate`` keeps the ids whose draw is below it, so a
trace is in or out the same way every day, whatever else the file holds; ``n`` keeps the ``n``
lowest draws among those (a uniform random sample of ``n``, the same for the same ids and seed).
``where`` filters come before anything else: only what passes them is drawn.

**Trace files** (a format with a span stream: OTLP JSON and the span exports plugins register; the
format is recognised from the content, ``format`` forces one) are sampled in two streaming passes:
the first draws the trace ids of the spans that pass every ``where`` clause, the second collects the
spans of the drawn traces, which `ragbridge.traces.cases` turns into cases. Memory holds the sample,
not the file. A ``where`` clause ``key=value`` holds for a span whose attribute ``key`` (or its
resource's: ``service.name``) equals ``value`` (or, for a list attribute, contains it); a key
inside an attribute that holds a JSON object is reached by its path (``metadata.plan=pro``);
``tag=v`` looks in ``tag.tags``; ``name=v`` is the span's name. A trace passes when one of its spans passes
every clause. A drawn trace that gives no case (no retriever span, no question) is counted in the
report with its reason, never turned into an empty case. ``since``/``until`` keep the traces with a
span that starts in that window (a filter like ``where``).

**Sessions.** A trace that is a turn of a session (``session.id``) stays one case, with the session
id and the earlier turns in ``metadata["session"]`` (`ragbridge.traces.sessions`); a third pass
reads the sessions' root spans: their starts, and their texts while they are few (50 a case); past
that, a fourth reads the question and answer of just the earlier turns the cases carry (memory holds
the starts, not the texts, of long sessions). ``by="session"``
draws sessions instead of traces, by the session id (a trace outside every session is a session of
its own, drawn by its trace id), and every turn of a drawn session becomes a case; filters are
checked on the spans that name the session (OpenInference's ``using_session`` names it on every
span; some exports on every record) and on the roots of traces outside sessions.

**Trace stores.** ``path`` may be a trace store's address (``SCHEME://HOST:PORT/PROJECT``, a store
a plugin registers: `ragbridge.traces.stores`): the same passes pull the spans page by page, the
first the window's (its end fixed at the start: now, when not given), the next the drawn traces'.

**Canonical cases** (a golden set, or an earlier sample, as JSON lines: records holding only the
schema's fields, one of them beyond a log's: ``relevant``, ``must_contain``, ``metadata``, ...) are
drawn the same way, by id, and keep every field.

**Logs** (JSON lines, one interaction a line) are mapped onto the schema by a small TOML file
(``--mapping``); each value is a path into the log record::

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

A path is keys joined by dots; a key that itself holds dots is found as it is
(``attributes.input.value`` reaches ``{"attributes": {"input.value": ...}}`` and
``{"attributes.input.value": ...}``); ``[N]`` or ``.N`` picks a list item by position and
``[field=value]`` the first item whose ``field`` equals ``value``
(``observations[type=RETRIEVER].output``). Without a mapping the log's own names are used, with the
usual aliases (``query``, ``response``, ``retrieved_contexts``, ...). A ``where`` clause on a log
names a schema field, a tag (``tag=billing``) or a path into the record (``user.plan=pro``).
"""

from __future__ import annotations

import hashlib
import heapq
import logging
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Sequence

from ..formats import reading_format
from .log_mapping import FIELD_KEYS, load_mapping, resolve, walk
from ..formats.files import DatasetError, jsonl_lines
from ..formats.records import cases_from_records, stable_id
from ..schema import Case
from ..traces.cases import TraceReport, group_traces, trace_case, trace_turn
from ..traces.sessions import SessionOrder, add_sessions, session_of
from ..traces.spans import Signal, Span, json_value, shown
from ..traces.stores import is_address

__all__ = ["load_mapping", "sample_traces", "parse_where", "resolve", "draw", "time_bound", "Sample"]

logger = logging.getLogger("ragbridge")

DEFAULT_FIELDS = {
    "id": ("id", "trace_id", "case_id", "request_id"),
    "question": ("question", "query", "user_input", "input"),
    "answer": ("answer", "response", "actual_output", "output"),
    "contexts": ("contexts", "retrieved_contexts", "retrieval_context", "retrieved", "documents", "chunks"),
    "timestamp": ("timestamp", "ts", "time", "created_at"),
    "tags": ("tags", "labels"),
}


@dataclass
class Sample:
    """A drawn sample: the ``cases`` (in file order); how many spans (of a trace file) or records (of
    a log) were ``read`` and passed the filters (``matched``); how many traces, sessions or records
    were ``drawn`` (``by``: ``trace`` or ``session``); for traces the `TraceReport` of the drawn
    traces (``report``: those that gave no case, and why) and how many ``sessions`` the cases are
    turns of; ``source``: the store's address, when the spans were pulled from one; ``signals``: how
    many of the signals given apart (``--signals``) the cases carry (None when none were given)."""

    cases: list[Case]
    read: int
    matched: int
    drawn: int
    report: Optional[TraceReport] = None
    kind: str = "log"
    by: str = "trace"
    sessions: int = 0
    source: Optional[str] = None
    signals: Optional[int] = None

    def record(self) -> dict[str, Any]:
        """The sample's summary, as ``ragbridge sample --json`` prints it."""
        out = {"kind": self.kind, "read": self.read, "matched": self.matched, "drawn": self.drawn,
               "cases": len(self.cases)}
        if self.report is not None:
            out.update(by=self.by, sessions=self.sessions, traces=self.report.record())
        if self.source is not None:
            out["from"] = self.source
        if self.signals is not None:
            out["signals"] = self.signals
        return out


def draw(key: str, seed: int) -> float:
    """The draw of an id, a number in [0, 1): BLAKE2b with an 8-byte digest (``digest_size=8``, which
    is not the first 8 bytes of the 64-byte digest) of ``"<seed>:<id>"`` in UTF-8, read as a
    big-endian integer and divided by 2**64."""
    digest = hashlib.blake2b(f"{seed}:{key}".encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0 ** 64


class _Drawn:
    """The ids drawn so far: every id below ``rate``, at most the ``n`` lowest."""

    def __init__(self, n: Optional[int], rate: float):
        self.n, self.rate = n, rate
        self.heap: list[tuple[float, str]] = []  # (-draw, id): the highest draw on top
        self.ids: dict[str, Any] = {}

    def offer(self, key: str, value: float, item: Any = None) -> None:
        if value >= self.rate or key in self.ids:
            return
        if self.n is None or len(self.heap) < self.n:
            heapq.heappush(self.heap, (-value, key))
            self.ids[key] = item
        elif -self.heap[0][0] > value:
            _, out = heapq.heapreplace(self.heap, (-value, key))
            del self.ids[out]
            self.ids[key] = item


def parse_where(clauses: Sequence[str]) -> list[tuple[str, str]]:
    out = []
    for clause in clauses:
        key, sep, value = clause.partition("=")
        if not sep or not key.strip():
            raise DatasetError(f"--where {clause!r} is not of the form field=value (e.g. tag=billing)")
        out.append((key.strip(), value.strip()))
    return out


# --------------------------------------------------------------------------------------------
# Traces


def _span_value(span: Span, key: str) -> Any:
    """The attribute ``key`` of a span (or its resource), or a key inside an attribute that holds a
    JSON object (``metadata.plan`` in OpenInference's ``metadata``)."""
    got = span.get(key)
    if got is not None or "." not in key:
        return got
    parts = key.split(".")
    for i in range(len(parts) - 1, 0, -1):
        name = ".".join(parts[:i])
        with span.reading(name):
            inner = json_value(span.get(name), name)
        if isinstance(inner, dict):
            return walk(inner, parts[i:])
    return None


def _span_matches(span: Span, where: list[tuple[str, str]]) -> bool:
    for key, value in where:
        if key in ("tag", "tags"):
            got = span.get("tag.tags")
        elif key == "name" and span.get("name") is None:
            got = span.name
        else:
            got = _span_value(span, key)
        if isinstance(got, list):
            if value not in [str(v) for v in got]:
                return False
        elif got is None or _text(got) != value:
            return False
    return True


def _text(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def _in_window(span: Span, since: Optional[int], until: Optional[int]) -> bool:
    if since is None and until is None:
        return True
    start = span.start
    return start is not None and (since is None or start >= since) and (until is None or start < until)


#: the key a trace outside every session is drawn by, in a draw of sessions
_ALONE = "\x00trace:"
#: how many other turns of the sample's sessions a sample keeps the texts of while reading their
#: starts (beyond that, it reads the few it needs again)
_TURNS_KEPT, _TURNS_KEPT_A_CASE = 1000, 50


def _sample_spans(stream: Callable[..., Iterable[Span]], n: Optional[int], rate: float,
                  seed: int, where: list[tuple[str, str]], signals: Optional[dict[str, list[Signal]]],
                  since: Optional[int] = None, until: Optional[int] = None, by: str = "trace") -> Sample:
    """Draw traces (or sessions) from the span stream: ``stream(None)`` gives every span,
    ``stream(ids)`` at least those of the traces ``ids``, ``stream(None, roots=True)`` at least the
    root spans, with their inputs and outputs (a store fetches only those asked for)."""
    drawn = _Drawn(n, rate)
    read = matched = 0
    for span in stream(None):
        read += 1
        if not _in_window(span, since, until) or not _span_matches(span, where):
            continue
        key = span.trace_id
        if by == "session":
            session = session_of(span)
            if session is None and span.parent_id is not None:
                continue  # a child span without the session id: its root names the session
            key = session if session is not None else _ALONE + span.trace_id
        matched += 1
        drawn.offer(key, draw(key.removeprefix(_ALONE), seed))
    if by == "session":
        sessions = {k for k in drawn.ids if not k.startswith(_ALONE)}
        chosen = {k.removeprefix(_ALONE) for k in drawn.ids if k.startswith(_ALONE)}
        if sessions:
            chosen |= {s.trace_id for s in stream(None) if s.span_id and session_of(s) in sessions}
    else:
        chosen = set(drawn.ids)
    kept = [s for s in stream(chosen) if s.trace_id in chosen] if chosen else []
    by_span = {s.span_id: s.trace_id for s in kept if s.span_id}
    extra: dict[str, list[Signal]] = {}
    for key, items in (signals or {}).items():
        trace = key if key in chosen else by_span.get(key)
        if trace is not None:
            extra.setdefault(trace, []).extend(items)
    report = TraceReport()
    cases, turns = [], []
    for trace_id, members in group_traces(kept).items():
        case = trace_case(members, report, extra.get(trace_id, ()))
        if case is not None:
            cases.append(case)
        turn = trace_turn(members)
        if turn is not None:
            turns.append(turn)
    wanted = {t.session for t in turns}
    order = SessionOrder()
    for turn in turns:
        order.add(turn.session, turn.start, turn.trace_id)
    if wanted and by == "trace":  # the other turns of the drawn traces' sessions, from their roots
        # their texts are kept too while they are few (the usual short sessions); past that, only
        # their starts, and the texts of the turns the cases carry are read again
        texts: Optional[dict[str, Any]] = {}
        budget = _TURNS_KEPT + _TURNS_KEPT_A_CASE * len(cases)
        for span in stream(None, roots=True):
            if span.span_id and span.parent_id is None and span.trace_id not in chosen:
                session = session_of(span)
                if session in wanted:
                    order.add(session, span.start or 0, span.trace_id)
                    if texts is not None:
                        texts[span.trace_id] = trace_turn([span])
                        texts = texts if len(texts) <= budget else None
        order.sort()
        needed = order.needed(turns) - chosen  # the earlier turns the cases carry
        if texts is not None:
            turns.extend(texts[t] for t in needed if texts.get(t) is not None)
        elif needed:
            for span in stream(None, roots=True):
                if span.span_id and span.parent_id is None and span.trace_id in needed:
                    turn = trace_turn([span])
                    if turn is not None:
                        turns.append(turn)
    add_sessions(cases, turns, order)
    sessions = {c.metadata["session"]["id"] for c in cases if "session" in c.metadata}
    attached = sum(len(extra.get(c.id, ())) for c in cases) if signals is not None else None
    return Sample(cases, read=read, matched=matched, drawn=len(drawn.ids), report=report, kind="traces",
                  by=by, sessions=len(sessions), signals=attached)


# --------------------------------------------------------------------------------------------
# Logs


def _field(record: dict, key: str, mapping: dict) -> Any:
    if key in mapping["fields"]:
        return resolve(record, mapping["fields"][key])
    for name in DEFAULT_FIELDS[key]:
        if name in record:
            return record[name]
    return None


def _chunk(raw: Any, mapping: dict) -> Any:
    if not isinstance(raw, dict) or not mapping["chunk"]:
        return raw
    found = {k: resolve(raw, p) for k, p in mapping["chunk"].items()}
    return {k: v for k, v in found.items() if v is not None}


def _matches(record: dict, case_like: dict, where: list[tuple[str, str]]) -> bool:
    for key, value in where:
        if key in ("tag", "tags"):
            tags = case_like.get("tags") or []
            if value not in (tags if isinstance(tags, list) else [tags]):
                return False
        else:
            got = case_like.get(key) if key in case_like else resolve(record, key)
            if got is None or _text(got) != value:
                return False
    return True


#: the fields of a canonical case: a record holding only these, and one beyond a log's (`FIELD_KEYS`: a
#: label, a check, metadata), is a golden set's case, sampled whole
_CASE_FIELDS = frozenset(Case.model_fields)


def _to_case_record(record: dict, mapping: dict, line: int) -> dict:
    if (not mapping["fields"] and not mapping["chunk"] and "question" in record
            and set(record) <= _CASE_FIELDS and set(record) - set(FIELD_KEYS)):
        rec = dict(record)  # a canonical case (a golden set, a sample sampled again): every field kept
        if rec.get("id") is None:
            rec["id"] = stable_id("trace-", f"{line}\x00{rec.get('question', '')}", 12)
        return rec
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
    if isinstance(rec["id"], (dict, list, bool, float)):
        raise DatasetError(f"the id must be a text, got {shown(rec['id'])}", line=line,
                           field=mapping["fields"].get("id", "id"),
                           hint='map the id with [fields] id = "path"')
    rec["id"] = str(rec["id"])
    if isinstance(rec.get("tags"), str):
        rec["tags"] = [rec["tags"]]
    rec["metadata"] = {"timestamp": ts, "log_line": line}
    return rec


def _sample_log(path: Path, n: Optional[int], rate: float, seed: int, where: list[tuple[str, str]],
                mapping: dict) -> Sample:
    drawn = _Drawn(n, rate)
    read = matched = 0
    for line, record in jsonl_lines(path):
        read += 1
        if not isinstance(record, dict):
            raise DatasetError("each line must be a JSON object", path=path, line=line)
        try:
            rec = _to_case_record(record, mapping, line)
        except DatasetError as exc:
            exc.path = str(path)
            raise
        if not _matches(record, rec, where):
            continue
        if "question" not in rec:
            raise DatasetError(
                "no question found", path=path, line=line,
                field=mapping["fields"].get("question", "question"),
                hint="map it with [fields] question = \"path.to.question\" in --mapping",
            )
        matched += 1
        drawn.offer(f"{rec['id']}\x00{line}", draw(rec["id"], seed), (line, rec))
    picked = sorted(drawn.ids.values(), key=lambda item: item[0])
    cases = cases_from_records(picked, path) if picked else []
    return Sample(cases, read=read, matched=matched, drawn=len(picked))


# --------------------------------------------------------------------------------------------
# The entry point


def _sniffed(path: Path):
    """The trace format that recognises the first JSON value of a file whose suffix names no format
    (a console exporter's output saved as ``.log``), or None."""
    from ..formats import get_formats
    from ..traces.span_json import values

    try:
        first = next(values(path), (0, None))[1]
    except (DatasetError, OSError):
        return None
    first = first[0] if isinstance(first, list) and first else first
    if not isinstance(first, dict):
        return None
    found = [f for f in get_formats().values() if f.spans is not None and f.recognise is not None
             and f.recognise(first)]
    if len(found) != 1:
        return None
    logger.warning("note: %s: read as format %r; name a format with --from to override", path, found[0].name)
    return found[0]


def time_bound(value: Any, now: Optional[datetime] = None) -> Optional[int]:
    """A bound of the time window as Unix nanoseconds: ``None``; nanoseconds; a date or time in ISO
    8601 (UTC unless it says otherwise); or a span back from ``now``: ``30m``, ``24h``, ``7d``,
    ``2w``. Raises `DatasetError` for anything else."""
    if value is None or isinstance(value, int) and not isinstance(value, bool):
        return value
    text = str(value).strip()
    match = re.fullmatch(r"(\d+)\s*([mhdw])", text)
    if match:
        minutes = int(match.group(1)) * {"m": 1, "h": 60, "d": 1440, "w": 10080}[match.group(2)]
        moment = (now or datetime.now(timezone.utc)) - timedelta(minutes=minutes)
        return int(moment.timestamp() * 1_000_000) * 1000
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise DatasetError(f"--since/--until {text!r} is neither a date and time (ISO 8601) nor a span back "
                           "from now", hint="e.g. 2026-11-02, 2026-11-02T10:00Z or 24h, 7d") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return int(moment.timestamp() * 1_000_000) * 1000


def sample_traces(
    path: str | Path,
    n: Optional[int] = 200,
    seed: int = 0,
    where: Sequence[str] = (),
    mapping: Optional[dict] = None,
    rate: Optional[float] = None,
    format: Optional[str] = None,
    signals: Optional[dict[str, list[Signal]]] = None,
    since: Any = None,
    until: Any = None,
    by: str = "trace",
) -> Sample:
    """Draw up to ``n`` traces (all, when ``n`` is None) at ``rate`` from a trace file, a trace
    store's address (``SCHEME://HOST:PORT/PROJECT``: `ragbridge.traces.stores`) or a JSONL log (see
    the module docstring). ``signals``: user signals by trace id or span id, attached to the cases of
    traces. ``since``/``until``: the traces with a span that starts in that window (`time_bound`).
    ``by="session"`` draws sessions, each with all its turns. Raises `DatasetError` for bad input or
    when nothing is drawn."""
    if n is not None and n < 1:
        raise DatasetError(f"--n must be at least 1, got {n}")
    if rate is not None and not 0 < rate <= 1:
        raise DatasetError(f"--rate must be in (0, 1], got {rate}")
    if by not in ("trace", "session"):
        raise DatasetError(f"--by must be trace or session, got {by!r}")
    filters = parse_where(where)
    now = datetime.now(timezone.utc)
    since, until = time_bound(since, now), time_bound(until, now)
    if since is not None and until is not None and since >= until:
        raise DatasetError("--since must come before --until")
    rate = 1.0 if rate is None else rate
    if is_address(str(path)):
        return _sample_store(str(path), n, rate, seed, filters, signals, since, until, by, format, mapping)
    path = Path(path)
    if not path.exists():
        raise DatasetError("no such file", path=path)
    if path.is_file() and path.stat().st_size < 4096 and not path.read_bytes().strip():
        raise DatasetError("file is empty: no spans or interactions to sample", path=path,
                           hint="has the exporter written (or flushed) to this file yet?")
    from ..formats import get_formats

    known = get_formats()
    traces = sorted(name for name, f in known.items() if f.spans is not None)
    if format is not None and (format not in known or known[format].spans is None and format != "jsonl"):
        raise DatasetError(f"sample reads no format {format!r}", path=path,
                           hint=f"trace formats: {', '.join(traces)}; jsonl for a log of interactions; "
                                "or a trace store's address (SCHEME://HOST:PORT/PROJECT)")
    try:
        fmt = reading_format(path, format, {})
    except DatasetError:
        if format is not None:
            raise
        fmt = _sniffed(path)  # a trace format under a suffix of its own (.log, .txt), else a JSONL log
    if fmt is not None and fmt.spans is None and path.suffix.lower() != ".jsonl" and format is None:
        raise DatasetError(f"a {fmt.name} file is neither a trace export nor a JSON lines log", path=path,
                           hint=f"sample reads {', '.join(traces)} and JSONL logs or cases; a golden set "
                                "in another format: ragbridge convert it to .jsonl first")
    if fmt is not None and fmt.spans is not None:
        if mapping and (mapping["fields"] or mapping["chunk"]):
            raise DatasetError(f"--mapping is for JSON lines logs; {fmt.name!r} spans are read by their "
                               "conventions", path=path, hint="leave out --mapping")
        result = _sample_spans(lambda chosen, roots=False: fmt.spans(path), n, rate, seed, filters, signals,
                               since, until, by)
        if not result.drawn:
            raise DatasetError("no trace matches", path=path, hint="check --where, --rate and the window")
        return result
    if format is not None and format != "jsonl":
        raise DatasetError(f"format {format!r} is not a trace format or a JSON lines log", path=path,
                           hint="sample reads trace exports (see ragbridge formats) and JSONL logs")
    if since is not None or until is not None or by != "trace":
        raise DatasetError("--since, --until and --by are for traces", path=path,
                           hint="filter a log's records with --where")
    result = _sample_log(path, n, rate, seed, filters, mapping or {"fields": {}, "chunk": {}})
    if not result.cases:
        raise DatasetError("no interaction matches", path=path, hint="check --where, --rate and --mapping")
    return result


def _sample_store(text: str, n, rate, seed, filters, signals, since, until, by, format, mapping) -> Sample:
    """A sample pulled from a trace store (`ragbridge.traces.stores`): the window's spans to draw
    from, then the drawn traces' spans whole. Both bounds are fixed first (``until`` now, when not
    given), so every pass reads the same traces."""
    from ..traces import get_trace_stores
    from ..traces.stores import Query, parse_address, store_for

    if format is not None:
        raise DatasetError(f"{text}: a store's address takes no --from format", hint="leave out the format")
    if mapping and (mapping["fields"] or mapping["chunk"]):
        raise DatasetError(f"{text}: --mapping is for JSON lines logs", hint="leave out --mapping")
    address = parse_address(text)
    store = store_for(address, get_trace_stores(), "pull")
    if until is None:
        until = int(datetime.now(timezone.utc).timestamp() * 1_000_000) * 1000
    window = Query(since=since, until=until, full=False)

    def stream(chosen: Optional[set[str]], roots: bool = False) -> Iterable[Span]:
        if roots:
            return store.pull(address, Query(since=since, until=until, roots=True))
        if chosen is None:
            return store.pull(address, window)
        return store.pull(address, Query(trace_ids=frozenset(chosen)))

    result = _sample_spans(stream, n, rate, seed, filters, signals, since, until, by)
    result.source = text
    if not result.drawn:
        raise DatasetError(f"{text}: no trace matches", hint="check the project, the window (--since, "
                           "--until), --where and --rate")
    return result
