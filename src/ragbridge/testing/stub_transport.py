"""The stub judge answering in the caller's process, without a socket: an ``httpx`` transport
(`StubTransport`) for the clients of a test that is about the stub's answers and not about the
network::

    with httpx.Client(transport=StubTransport(stub), base_url=stub.base_url) as client:
        client.post("/chat/completions", json={...})

    http = httpx.Client(transport=StubTransport(stub))
    openai.OpenAI(base_url=stub.base_url, api_key="k", http_client=http)

Each request is written as the bytes a client sends on a connection and read by the stub's own request
handler, whose answer is read back as a client reads it (status, headers, a body framed by its length,
decompressed as ``httpx`` decompresses): the same routes, dialects, faults, recorded requests and
counts as through ``stub.base_url``, the stub need not be started. What only a connection shows stays
on the socket: the hostile modes (``/hostile/...``), and a ``timeout`` or ``late`` fault holds the
calling thread for as long as the stub holds the connection (the client's own timeout cannot fire).
"""

from __future__ import annotations

import asyncio
import http.client
import io
from typing import Any

import httpx

__all__ = ["StubTransport"]


class _Connection:
    """One request's bytes to read and the answer's bytes written: what the handler uses of a socket."""

    def __init__(self, raw: bytes) -> None:
        self._raw = raw
        self.written = bytearray()

    def makefile(self, mode: str = "rb", *args: Any, **kw: Any) -> io.BytesIO:
        return io.BytesIO(self._raw if "r" in mode else b"")

    def sendall(self, data: bytes) -> None:
        self.written += data

    def settimeout(self, *args: Any) -> None:
        pass

    def setsockopt(self, *args: Any) -> None:
        pass

    def shutdown(self, *args: Any) -> None:
        pass

    def close(self) -> None:
        pass


class _Server:
    """What a request handler asks of its server."""

    server_address = ("127.0.0.1", 0)


class _Answer:
    """The answer's bytes as ``http.client`` reads them from a socket."""

    def __init__(self, data: bytes) -> None:
        self._data = data

    def makefile(self, *args: Any, **kw: Any) -> io.BytesIO:
        return io.BytesIO(self._data)


class StubTransport(httpx.BaseTransport, httpx.AsyncBaseTransport):
    """An ``httpx`` transport (for ``httpx.Client`` and ``httpx.AsyncClient``) whose requests the stub
    judge ``stub`` answers in this process (see the module's docstring)."""

    def __init__(self, stub: Any) -> None:
        self.stub = stub

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        request.read()
        return self._answer(request)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        await request.aread()
        return await asyncio.to_thread(self._answer, request)  # a held or slow answer holds no loop

    def _answer(self, request: httpx.Request) -> httpx.Response:
        target = request.url.raw_path.decode("ascii")
        if target.split("?")[0].lstrip("/").startswith("hostile/"):
            raise httpx.UnsupportedProtocol("the stub's hostile modes are about the connection: "
                                            "send them to stub.base_url, over its socket")
        head = [f"{request.method} {target} HTTP/1.1"]
        head += [f"{k.decode('latin-1')}: {v.decode('latin-1')}" for k, v in request.headers.raw]
        if request.content and "content-length" not in request.headers:
            head.append(f"Content-Length: {len(request.content)}")
        raw = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + request.content
        conn = _Connection(raw)
        self.stub.handler(conn, ("127.0.0.1", 0), _Server())
        reply = http.client.HTTPResponse(_Answer(bytes(conn.written)))  # type: ignore[arg-type]
        reply.begin()
        body = reply.read()
        return httpx.Response(reply.status, headers=reply.getheaders(), content=body, request=request)
