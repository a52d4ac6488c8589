"""Langfuse's public API as a trace store: observations and scores pulled, scores pushed.

``langfuse://HOST[:PORT]`` (``cloud.langfuse.com``, ``us.cloud.langfuse.com``, a server of one's own)
is the server's public API (``/api/public``), over HTTPS, or plain HTTP on the loopback interface
(`ragbridge.traces.stores`). A Langfuse key pair belongs to one project, so the address has no
project: the keys are read from ``LANGFUSE_PUBLIC_KEY`` and ``LANGFUSE_SECRET_KEY`` and sent as HTTP
basic authentication, as the SDK does.

Pull (``ragbridge sample --from langfuse://...``): the observations, ``GET /api/public/v2/
observations`` (the SDK v5's ``api.observations.get_many``) by cursor, 1,000 a page, in the window
(``fromStartTime``, ``toStartTime``). Drawing reads the fields that filters use (the core, basic,
metadata and trace-context field groups); the drawn traces are then read whole, one trace at a time
(``traceId``, every field group that `ragbridge_langfuse.formats` reads), with their scores (``GET
/api/public/v3/scores``), which become the cases' signals; the earlier turns of sessions are the
window's root observations (``isRootObservation``). Each page is read as the file reader reads
an API page.

Push (``ragbridge export-scores RUN --to langfuse://...``): the span evaluations as the batch score
import, ``POST /api/public/scores`` with a list of scores (the SDK v5's ``api.scores.create(request=
[...])``), 100 a request; scores without a value and per-document evaluations are left out and
counted (`ragbridge_langfuse.formats.score_bodies`). Langfuse answers 202 when it took every score
and 207 with the counts and messages of those it refused: those are reported.
"""

from __future__ import annotations

from typing import Any, Iterator

from ragbridge.plugin import (
    DatasetError,
    Query,
    StoreAddress,
    TraceSpan as Span,
    TraceStore,
    iso_time,
    key_from,
    store_client as http_client,
    store_request as request,
)

__all__ = ["STORE", "pull", "push"]

KEYS = ("LANGFUSE_PUBLIC_KEY", "LANGFUSE_SECRET_KEY")
PAGE = 1000
SCORES_A_REQUEST = 100
#: the observation field groups a draw reads, and those a case needs
DRAW_FIELDS = "core,basic,metadata,trace_context"
CASE_FIELDS = "core,basic,time,io,metadata,model,trace_context"


def _client(address: StoreAddress):
    if address.project is not None:
        raise DatasetError(f"{address.text}: a Langfuse address has no project (the keys name it)",
                           hint=f"write langfuse://{address.base_url.split('://', 1)[1]}")
    public, secret = key_from(KEYS[:1]), key_from(KEYS[1:])
    if not public or not secret:
        raise DatasetError(f"{address.text}: no Langfuse key", hint=f"set {KEYS[0]} and {KEYS[1]}")
    return http_client(address, headers={"Accept": "application/json"}, auth=(public, secret)), secret


def _pages(client, address: StoreAddress, secret: str, path: str, params: dict[str, Any], start: int
           ) -> Iterator[tuple[int, list]]:
    page = start
    while True:
        page += 1
        answer = request(client, address, "GET", path, KEYS, secret, params=params) or {}
        data = answer.get("data") if isinstance(answer, dict) else None
        if not isinstance(data, list):
            raise DatasetError(f"{address.text}: GET {path} answered no 'data' list",
                               hint="is this a Langfuse server's address?")
        yield page, data
        cursor = (answer.get("meta") or {}).get("cursor")
        if not cursor:
            return
        params = {**params, "cursor": cursor}


def pull(address: StoreAddress, query: Query) -> Iterator[Span]:
    """The project's observations (and, for the drawn traces, their scores) as spans (see the module
    docstring)."""
    from .formats import records_spans

    client, secret = _client(address)
    observations = "/api/public/v2/observations"
    page = 0
    with client:
        if query.trace_ids is None:
            params: dict[str, Any] = {"limit": PAGE,
                                      "fields": CASE_FIELDS if query.full or query.roots else DRAW_FIELDS}
            if query.roots:
                params["isRootObservation"] = "true"
            if query.since is not None:
                params["fromStartTime"] = iso_time(query.since)
            if query.until is not None:
                params["toStartTime"] = iso_time(query.until)
            for page, data in _pages(client, address, secret, observations, params, page):
                yield from records_spans(data, (address.text, page, "page"))
            return
        for trace_id in sorted(query.trace_ids):
            params = {"limit": PAGE, "fields": CASE_FIELDS, "traceId": trace_id}
            for page, data in _pages(client, address, secret, observations, params, page):
                yield from records_spans(data, (address.text, page, "page"))
            params = {"limit": 100, "traceId": trace_id}
            for page, data in _pages(client, address, secret, "/api/public/v3/scores", params, page):
                yield from records_spans(data, (address.text, page, "page"))


def push(address: StoreAddress, rows: list[dict[str, Any]]) -> list[str]:
    """The scores as Langfuse's batch score import (see the module docstring); the warnings."""
    from .formats import score_bodies

    bodies, notes = score_bodies(rows)
    client, secret = _client(address)
    rejected, messages = 0, []
    with client:
        for i in range(0, len(bodies), SCORES_A_REQUEST):
            answer = request(client, address, "POST", "/api/public/scores", KEYS, secret,
                             json=bodies[i:i + SCORES_A_REQUEST])
            if isinstance(answer, dict) and answer.get("rejected"):
                rejected += int(answer["rejected"])
                messages += [str(e.get("message")) for e in answer.get("errors") or [] if isinstance(e, dict)]
    if rejected:
        shown = "; ".join(dict.fromkeys(messages))[:300]
        notes.append(f"{rejected} of {len(bodies)} score(s) refused by Langfuse"
                     + (f": {shown}" if shown else ""))
    return notes


STORE = TraceStore(
    "langfuse",
    "Langfuse's public API (langfuse://HOST): observations and scores pulled, scores pushed; keys from "
    "LANGFUSE_PUBLIC_KEY and LANGFUSE_SECRET_KEY",
    pull=pull, push=push, keys=KEYS, documents=False,
)
