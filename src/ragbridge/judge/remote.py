"""A judge gateway seen from another process: :class:`GatewayClient`.

The Ray executor's workers score judged metrics in processes (and machines) other than the one that
holds the run's :class:`~ragbridge.judge.JudgeGateway`. Each worker gets a :class:`GatewayClient`
in its place: the judge interface the backends use (:class:`~ragbridge.judge.client.JudgeClient`,
which the gateway implements too), with every request forwarded to the gateway's socket. So there is
still one gateway per run, and with it one concurrency bound, one requests-per-minute limit, one
cache and one set of usage counts for every worker together.

What travels to a worker is :meth:`GatewayClient.spec`: the socket's URL, the gateway's own key (the
random per-run key its socket requires, never the judge's real key, which stays in the gateway) and
the judge configuration without secrets (``base_url`` redacted, no cache path). The client's
transports add the key to each request, strip the ``/t/<tag>`` attribution path that in-process URLs
carry and send the call's tag (backend, metric, case_id, repeat) in the ``X-Ragbridge-Tag`` header
instead, so the
gateway counts each call under the score it belongs to, exactly as for an in-process call. A worker
that scores a backend under another name (``mylib==1.2`` for the registered ``mylib``: a library
version in an environment of its own) gives the client ``aliases``, and its calls are counted under
that name.

``base_url(..., in_process=True)`` (what every bundled backend uses) is a URL for these transports;
without ``in_process`` it is the gateway's socket itself. The tag map, ``tag_scope`` and the repeat
views are `JudgeClient`'s, the same as the gateway's.
"""

from __future__ import annotations

from typing import Any, Optional

import httpx

from .client import JudgeClient
from .config import JudgeConfig
from .tag import TAG_HEADER, CallTag

__all__ = ["GatewayClient", "worker_config"]


def worker_config(config: JudgeConfig) -> dict[str, Any]:
    """What a worker needs of the judge configuration: every setting the backends read, with the
    endpoints' credentials and the headers stripped and no cache path (the cache is the gateway's)."""
    data = config.model_dump(mode="json")
    # the headers are the gateway's to send (their values are secrets)
    data.update(base_url=config.public_base_url, cache_path=None, headers={}, public_headers=[])
    if config.embedding_base_url:
        from .config import redact_url

        data["embedding_base_url"] = redact_url(config.embedding_base_url)
    return data


class GatewayClient(JudgeClient):
    """The judge interface (`JudgeClient`) of a worker, forwarding to a `JudgeGateway`'s socket at
    ``url`` with its key ``key`` (see the module docstring). Picklable through :meth:`spec` only."""

    #: a worker never sees the answers' marker: the gateway labels the run
    stub_detected = False

    def __init__(self, url: str, key: str, config: dict[str, Any] | JudgeConfig,
                 aliases: Optional[dict[str, str]] = None) -> None:
        super().__init__()
        self._url = url.rstrip("/")
        self._key = key
        self.config = config if isinstance(config, JudgeConfig) else JudgeConfig(**config)
        #: backend name -> the name its calls are counted under
        self.aliases = dict(aliases or {})

    @classmethod
    def spec(cls, gateway: Any) -> tuple[str, str, dict[str, Any]]:
        """The arguments of a client of ``gateway`` (its socket is opened if it is not yet)."""
        return gateway.url, gateway.api_key, worker_config(gateway.config)

    def __repr__(self) -> str:  # never the key
        return f"GatewayClient({self._url!r})"

    @property
    def api_key(self) -> str:
        return self._key

    @property
    def url(self) -> str:
        return self._url

    def base_url(self, backend: Optional[str] = None, metric: Optional[str] = None,
                 case_id: Optional[str] = None, *, in_process: bool = False,
                 repeat: Optional[int] = None) -> str:
        """As `JudgeClient.base_url`; without ``in_process``, the gateway's socket itself (untagged:
        a library's own client gets its calls counted only through ``httpx_event_hooks``)."""
        if not in_process:
            return f"{self._url}/v1"
        return super().base_url(backend, metric, case_id, in_process=True, repeat=repeat)

    def transport(self) -> "ForwardingTransport":
        return ForwardingTransport(self)

    def async_transport(self) -> "AsyncForwardingTransport":
        return AsyncForwardingTransport(self)

    def forwarded(self, request: httpx.Request, content: bytes) -> httpx.Request:
        """``request`` as sent to the gateway's socket: its path without the tag, the gateway's key,
        the tag in the tag header (strongest first, as the gateway ranks them: a header the request
        carries, the ``tag_scope`` it was made in, the path's tag)."""
        path = request.url.raw_path.decode("ascii", "replace")
        tag: Optional[CallTag] = None
        if path.startswith("/t/"):
            _, _, token, rest = path.split("/", 3)
            tag = self.tag_of(token)
            path = "/" + rest
        scope = self.current_tag()
        if scope is not None:
            tag = scope
        tag_header = TAG_HEADER.lower().encode()
        headers = [(k, v) for k, v in request.headers.raw
                   if k.lower() not in (b"host", b"authorization", b"api-key", b"content-length")]
        headers.append((b"Authorization", f"Bearer {self._key}".encode("ascii")))
        if self.aliases:
            headers = [(k, self._aliased(CallTag.from_header(v.decode("ascii", "replace"))).header()
                         .encode("ascii")) if k.lower() == tag_header else (k, v) for k, v in headers]
            tag = self._aliased(tag) if tag is not None else None
        if tag is not None and tag_header not in {k.lower() for k, _ in headers}:
            headers.append((TAG_HEADER.encode(), tag.header().encode("ascii")))
        return httpx.Request(request.method, self._url + path, headers=headers, content=content)


    def _aliased(self, tag: CallTag) -> CallTag:
        name = self.aliases.get(tag.backend or "")
        return tag if name is None else CallTag(name, tag.metric, tag.case_id, tag.repeat)


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
