"""A Phoenix server as a trace store: spans pulled from a project, evaluations pushed as annotations.

``phoenix://HOST[:PORT]/PROJECT`` (the project's name or id; ``default`` when left out) is a Phoenix
server's REST API (``/v1``), reached over plain HTTP on the loopback interface and HTTPS elsewhere
(`ragbridge.traces.stores`). The key, when the server asks for one, is read from ``PHOENIX_API_KEY``
and sent as ``Authorization: Bearer``.

Pull (``ragbridge sample --from phoenix://...``): ``GET /v1/projects/{project}/spans`` page by page
(1,000 spans a page, by start time, ``start_time``/``end_time`` for the window, ``trace_id`` for the
drawn traces, 50 a request, ``parent_id=null`` for the root spans alone), each span read as
`ragbridge.traces.span_json` reads a span object (``context.trace_id``, ``context.span_id``,
``parent_id``, ``span_kind``, flat ``attributes``).

Push (``ragbridge export-scores RUN --to phoenix://...``): the span evaluations as span annotations
(``POST /v1/span_annotations``) and the document evaluations as document annotations (``POST
/v1/document_annotations``), 100 a request, synchronously: ``name`` (``<backend>.<metric>``),
``annotator_kind`` (``CODE`` for the native backend's scores, ``LLM`` for a judge's), ``result``
(``label``, ``score``, ``explanation``) and ``metadata`` (``case_id``, ``metric``, ``backend``).
Phoenix keeps one annotation per name and span (and document), so pushing again updates them. A
score without a value is left out and counted, as in the file (`ragbridge_phoenix.formats`). The
project is looked up first (``GET /v1/projects/{project}``): Phoenix files an annotation by its
span id alone, so a push to a project that does not exist would otherwise report success.
"""

from __future__ import annotations

from typing import Any, Iterator
from urllib.parse import quote

from ragbridge.plugin import (
    DatasetError,
    Query,
    StoreAddress,
    TraceSpan as Span,
    TraceStore,
    iso_time,
    key_from,
    span_from_object,
    store_client as http_client,
    store_request as request,
)

__all__ = ["STORE", "pull", "push"]

KEYS = ("PHOENIX_API_KEY",)
PAGE = 1000
TRACES_A_REQUEST = 50
ANNOTATIONS_A_REQUEST = 100


def _client(address: StoreAddress):
    key = key_from(KEYS)
    return http_client(address, headers={"Authorization": f"Bearer {key}"} if key else None), key


def pull(address: StoreAddress, query: Query) -> Iterator[Span]:
    """The project's spans that ``query`` asks for, page by page (see the module docstring)."""
    path = f"/v1/projects/{quote(address.project or 'default', safe='')}/spans"
    base: dict[str, Any] = {"limit": PAGE, "sort": "start_time", "order": "asc"}
    if query.since is not None:
        base["start_time"] = iso_time(query.since)
    if query.until is not None:
        base["end_time"] = iso_time(query.until)
    if query.roots:
        base["parent_id"] = "null"
    ids = sorted(query.trace_ids) if query.trace_ids is not None else None
    batches = ([None] if ids is None else
               [ids[i:i + TRACES_A_REQUEST] for i in range(0, len(ids), TRACES_A_REQUEST)])
    client, key = _client(address)
    page = 0
    with client:
        for batch in batches:
            params = dict(base)
            if batch is not None:
                params.pop("start_time", None)
                params.pop("end_time", None)
                params["trace_id"] = batch
            while True:
                page += 1
                answer = request(client, address, "GET", path, KEYS, key, params=params) or {}
                for item in answer.get("data") or []:
                    yield span_from_object(item, (address.text, page, "page"))
                cursor = answer.get("next_cursor")
                if not cursor:
                    break
                params = {**params, "cursor": cursor}


def _annotation(row: dict[str, Any]) -> dict[str, Any]:
    result = {k: row[k] for k in ("label", "score", "explanation") if row.get(k) not in (None, "")}
    out = {"span_id": row["span_id"], "name": row["name"],
           "annotator_kind": "CODE" if row.get("backend") == "native" else "LLM", "result": result,
           "metadata": {k: row[k] for k in ("case_id", "metric", "backend") if row.get(k)}}
    if row.get("document_position") is not None:
        out["document_position"] = row["document_position"]
    return out


def push(address: StoreAddress, rows: list[dict[str, Any]]) -> list[str]:
    """The evaluations as Phoenix annotations (see the module docstring); the warnings for what was
    left out."""
    from .formats import left_out

    sendable, notes = left_out(rows)
    spans = [_annotation(r) for r in sendable if r.get("document_position") is None]
    documents = [_annotation(r) for r in sendable if r.get("document_position") is not None]
    client, key = _client(address)
    sent = 0
    project = address.project or "default"
    with client:
        try:
            request(client, address, "GET", f"/v1/projects/{quote(project, safe='')}", KEYS, key)
        except DatasetError as exc:
            if " answered 404" in exc.message:
                raise DatasetError(f"{address.text}: the server has no project {project!r}; nothing was sent",
                                   hint="name the project the traces were sampled from") from None
            raise
        for path, items in (("/v1/span_annotations", spans), ("/v1/document_annotations", documents)):
            for i in range(0, len(items), ANNOTATIONS_A_REQUEST):
                chunk = items[i:i + ANNOTATIONS_A_REQUEST]
                try:
                    request(client, address, "POST", path, KEYS, key, params={"sync": "true"},
                            json={"data": chunk})
                except DatasetError as exc:
                    if sent:
                        exc.message += f" ({sent} of {len(spans) + len(documents)} were sent before it)"
                    raise
                sent += len(chunk)
    return notes


STORE = TraceStore(
    "phoenix",
    "a Phoenix server's project (phoenix://HOST:PORT/PROJECT): spans pulled, evaluations pushed as span and "
    "document annotations; key from PHOENIX_API_KEY",
    pull=pull, push=push, keys=KEYS,
)
