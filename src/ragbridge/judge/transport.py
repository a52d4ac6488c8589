"""The judge gateway's in-process transports: :class:`JudgeTransport`, :class:`AsyncJudgeTransport`.

What ragbridge's own backends use: the library's ``httpx`` client gets ``transport=gw.transport()``
(or ``gw.async_transport()``) and the base URL ``gw.base_url(backend, metric, case_id,
in_process=True)`` (a ``.invalid`` host that no socket serves), so a request goes from the library
to the gateway's code without crossing a socket (the fast path; its cost against a loopback hop is in
benchmarks/README.md). A request is answered exactly as the loopback socket would answer it (same routing,
cache, bounds, retries, counts, audit and headers), but needs no key: it never left this process.
"""

from __future__ import annotations

import asyncio
import time
from typing import Optional

import httpx

from .server import Result, Serving
from .tag import CallTag


class JudgeTransport(httpx.BaseTransport):
    """An httpx transport that hands each request to a ``JudgeGateway`` in this process.

    The request never crosses a socket: the gateway routes it by URL path (``/v1/chat/completions``,
    ``/t/<tag>/v1/...`` from ``JudgeGateway.base_url``) and attributes it to the
    ``JudgeGateway.tag_scope`` it was made in (no event hook needed), then caches, bounds,
    retries, counts and audits it exactly as it does requests to its loopback socket. The host part
    of the URL is not used."""

    def __init__(self, gateway: Serving) -> None:
        self.gateway = gateway

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.gateway.require_started()
        return _respond(self.gateway, request, request.read(), self.gateway.current_tag())


class AsyncJudgeTransport(httpx.AsyncBaseTransport):
    """:class:`JudgeTransport` for ``httpx.AsyncClient``: the gateway's blocking work (cache, upstream
    call, retries with their sleeps) runs on the gateway's worker threads; the event loop only waits."""

    def __init__(self, gateway: Serving) -> None:
        self.gateway = gateway

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        gw = self.gateway
        gw.require_started()
        raw = await request.aread()
        # the tag_scope is read here, in the caller's context (the worker thread does not inherit it)
        return await asyncio.get_running_loop().run_in_executor(gw.executor, _respond, gw, request, raw,
                                                                gw.current_tag())


def _respond(gw: Serving, request: httpx.Request, raw: bytes,
             scope: Optional[CallTag]) -> httpx.Response:
    """One request from an in-process transport, answered as the loopback socket would."""
    t0 = time.perf_counter()
    routed = gw.route(request.url.raw_path.decode("ascii", "replace"), request.headers, scope)
    if isinstance(routed, Result):
        res = routed
    else:
        endpoint, tag = routed
        res = gw.answer(request.method, endpoint, raw, tag, started=t0)
    headers = [("content-type", res.content_type), ("x-ragbridge-cache", res.cache)]
    if not 200 <= res.status < 300:
        headers.append(("x-should-retry", "false"))  # the gateway already retried
    return httpx.Response(res.status, headers=headers, content=res.body, request=request)
