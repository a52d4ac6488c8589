"""A judge gateway seen from another process: :class:`GatewayClient`.

The Ray executor's workers score judged metrics in processes (and machines) other than the one that
holds the run's :class:`~ragbridge.judge.JudgeGateway`. Each worker gets a :class:`GatewayClient`
in its place: the part of the gateway's interface the backends use (``config``, ``api_key``,
``base_url``, ``transport()``, ``async_transport()``, ``tag_scope``), with every request forwarded
to the gateway's socket. So there is still one gateway per run, and with it one concurrency bound,
one requests-per-minute limit, one cache and one set of usage counts for every worker together.

What travels to a worker is :meth:`GatewayClient.spec`: the socket's URL, the gateway's own key (the
random per-run key its socket requires, never the judge's real key, which stays in the gateway) and
the judge configuration without secrets (``base_url`` redacted, no cache path). The client's
transports add the key to each request, strip the ``/t/<tag>`` attribution path that in-process URLs
carry and send the (backend, metric, case_id) in the ``X-Ragbridge-Tag`` header instead, so the
gateway counts each call under the score it belongs to, exactly as for an in-process call.

``base_url(..., in_process=True)`` (what every bundled backend uses) is a URL for these transports;
without ``in_process`` it is the gateway's socket itself (untagged: a library's own client gets its
calls counted only through ``httpx_event_hooks``).
"""

from __future__ import annotations

import secrets
import threading
from typing import Any, Optional

import httpx

from .config import JudgeConfig
from .gateway import IN_PROCESS_ORIGIN, TAG_HEADER, JudgeGateway, tag_header_value
from .server import Triple

__all__ = ["GatewayClient", "worker_config"]


def worker_config(config: JudgeConfig) -> dict[str, Any]:
    """What a worker needs of the judge configuration: every setting the backends read, with the
    endpoint's credentials stripped and no cache path (the cache is the gateway's)."""
    data = config.model_dump(mode="json")
    data.update(base_url=config.public_base_url, cache_path=None)
    return data


class GatewayClient:
    """The gateway interface the backends use, forwarding to a `JudgeGateway`'s socket at ``url``
    with its key ``key`` (see the module docstring). Picklable through :meth:`spec` only."""

    #: a worker never sees the answers' marker: the gateway labels the run
    stub_detected = False
    tag_scope = staticmethod(JudgeGateway.tag_scope)
    current_tag = staticmethod(JudgeGateway.current_tag)
    httpx_event_hooks = staticmethod(JudgeGateway.httpx_event_hooks)
    async_httpx_event_hooks = staticmethod(JudgeGateway.async_httpx_event_hooks)

    def __init__(self, url: str, key: str, config: dict[str, Any] | JudgeConfig) -> None:
        self.url = url.rstrip("/")
        self._key = key
        self.config = config if isinstance(config, JudgeConfig) else JudgeConfig(**config)
        self._lock = threading.Lock()
        self._tags: dict[str, Triple] = {}
        self._tag_of: dict[Triple, str] = {}

    @classmethod
    def spec(cls, gateway: JudgeGateway) -> tuple[str, str, dict[str, Any]]:
        """The arguments of a client of ``gateway`` (its socket is opened if it is not yet)."""
        return gateway.url, gateway.api_key, worker_config(gateway.config)

    def __repr__(self) -> str:  # never the key
        return f"GatewayClient({self.url!r})"

    # -- what the backends use ------------------------------------------------------------------
    @property
    def api_key(self) -> str:
        return self._key

    def require_started(self) -> None:
        """A client is usable as long as the gateway it forwards to serves."""

    def base_url(self, backend: Optional[str] = None, metric: Optional[str] = None,
                 case_id: Optional[str] = None, *, in_process: bool = False) -> str:
        if not in_process:
            return f"{self.url}/v1"
        if backend is None:
            return f"{IN_PROCESS_ORIGIN}/v1"
        triple: Triple = (backend, metric, case_id)
        with self._lock:
            tag = self._tag_of.get(triple)
            if tag is None:
                tag = secrets.token_urlsafe(9)
                self._tag_of[triple] = tag
                self._tags[tag] = triple
        return f"{IN_PROCESS_ORIGIN}/t/{tag}/v1"

    def transport(self) -> "ForwardingTransport":
        return ForwardingTransport(self)

    def async_transport(self) -> "AsyncForwardingTransport":
        return AsyncForwardingTransport(self)

    # -- forwarding -----------------------------------------------------------------------------
    def forwarded(self, request: httpx.Request, content: bytes) -> httpx.Request:
        """``request`` as sent to the gateway's socket: its path without the tag, the gateway's key,
        the (backend, metric, case_id) in the tag header (strongest first, as the gateway ranks
        them: a header the request carries, the ``tag_scope`` it was made in, the path's tag)."""
        path = request.url.raw_path.decode("ascii", "replace")
        triple: Optional[Triple] = None
        if path.startswith("/t/"):
            _, _, tag, rest = path.split("/", 3)
            triple = self._tags.get(tag)
            path = "/" + rest
        scope = JudgeGateway.current_tag()
        if scope is not None:
            triple = scope
        headers = [(k, v) for k, v in request.headers.raw
                   if k.lower() not in (b"host", b"authorization", b"api-key", b"content-length")]
        headers.append((b"Authorization", f"Bearer {self._key}".encode("ascii")))
        if triple is not None and TAG_HEADER.lower().encode() not in {k.lower() for k, _ in headers}:
            headers.append((TAG_HEADER.encode(), tag_header_value(triple).encode("ascii")))
        return httpx.Request(request.method, self.url + path, headers=headers, content=content)


class ForwardingTransport(httpx.BaseTransport):
    """An httpx transport that sends each request to the gateway's socket (see `GatewayClient`)."""

    def __init__(self, client: GatewayClient) -> None:
        self.client = client
        self._inner = httpx.HTTPTransport(limits=httpx.Limits(max_connections=None,
                                                              max_keepalive_connections=64))

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        return self._inner.handle_request(self.client.forwarded(request, request.read()))

    def close(self) -> None:
        self._inner.close()


class AsyncForwardingTransport(httpx.AsyncBaseTransport):
    """`ForwardingTransport` for ``httpx.AsyncClient``."""

    def __init__(self, client: GatewayClient) -> None:
        self.client = client
        self._inner = httpx.AsyncHTTPTransport(limits=httpx.Limits(max_connections=None,
                                                                   max_keepalive_connections=64))

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return await self._inner.handle_async_request(self.client.forwarded(request, await request.aread()))

    async def aclose(self) -> None:
        await self._inner.aclose()
