"""The judge gateway's loopback HTTP side, and the answers it serves.

:class:`FastRequestHandler` is a lean ``BaseHTTPRequestHandler`` (keep-alive, one write per
response, a request parser without the email package), the base of both :class:`GatewayHandler`
and ragbridge's stub judge (``ragbridge.testing``). :class:`GatewayHandler` serves the gateway's
OpenAI-compatible socket on 127.0.0.1 (a background thread of this process), for libraries whose
HTTP client cannot be given a transport. The gateway opens the socket the first time a socket URL is
asked for (a run whose backends all use the transports listens on nothing), and every request on it
must carry the gateway's key (``Authorization: Bearer <gw.api_key>`` or ``api-key: <gw.api_key>``;
any other request gets 401 and is neither forwarded nor counted). That key is random per gateway,
lives in memory only and dies with the gateway: another local process cannot use the socket to spend
the real key.

Before a connection has presented the key it costs the gateway little, whatever another local
process sends or holds open (:class:`Gate`): one thread reads every new connection's request head,
at most `MAX_HEAD_BYTES` of it, within `HEAD_SECONDS`, for at most `MAX_WAITING` connections at once
(the oldest is closed for a new one); a connection gets a thread of its own only once its head is
complete, and keeps it only while it presents the key (else 401 and closed), idle at most
`IDLE_SECONDS` between requests.

What the gateway's two front doors (:class:`GatewayHandler` here, the in-process transports of
``ragbridge.judge.transport``) call is :class:`Serving` (``JudgeGateway`` is it), and what they get
back is a :class:`Result`, whichever way the request came in; an error's body is OpenAI's error
shape (:func:`error_body`). A non-2xx answer carries ``x-should-retry: false``: the gateway has
retried already, so the OpenAI SDK does not multiply the retries.
"""

from __future__ import annotations

import contextlib
import hmac
import io
import json
import socket
import threading
import time
from concurrent.futures import Executor
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, Mapping, Optional, Protocol

if TYPE_CHECKING:  # pragma: no cover
    from .tag import CallTag


#: the largest request body the gateway's socket reads (a judge request is kilobytes to a few megabytes)
MAX_REQUEST_BYTES = 64 << 20
#: the largest request head (request line and headers) read, and the most header lines (a client's
#: head is a kilobyte or two)
MAX_HEAD_BYTES = 32 << 10
MAX_HEADER_LINES = 100
#: a new connection's request head must be complete within this time
HEAD_SECONDS = 10.0
#: the most connections whose head is being read at once (memory: at most this many heads)
MAX_WAITING = 512
#: how long a connection that presented the key may stay idle between requests
IDLE_SECONDS = 120.0


class BadRequest(Exception):
    """A request the socket cannot read (bad framing, too large): answered with ``status``, then the
    connection is closed."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class _JsonBytes(bytes):
    """Bytes known to hold a JSON document."""


def error_body(message: str, etype: str = "ragbridge_gateway_error", code: Optional[str] = None) -> bytes:
    """An OpenAI-style error body (``{"error": {"message", "type", "param", "code"}}``)."""
    error = {"message": message, "type": etype, "param": None, "code": code}
    return _JsonBytes(json.dumps({"error": error}).encode())


@dataclass
class Result:
    """The gateway's answer to one request, and how it was served (for its usage counts and audit
    log). :class:`GatewayHandler` writes it to the socket; the in-process transports turn it into
    an ``httpx.Response``."""

    status: int
    body: bytes
    content_type: str = "application/json"
    cache: str = "miss"  # hit | miss | off | bypass | readonly-miss
    attempts: int = 0
    parsed: Any = None
    counted: bool = True  # a judge call (POST), counted in usage
    json_ok: bool = False  # body known to be a JSON document (parsed, cached or made here)
    request_json: bool = False  # the request body was parsed as JSON
    cost: Optional[float] = 0.0  # what the upstream call cost by the price table (None: unknown)
    #: (prompt, completion) tokens the answer reports; None when what it reports cannot be true
    tokens: Optional[tuple[int, int]] = (0, 0)
    #: attempts sent upstream that got no readable answer (their cost unknown to the answer)
    unanswered: int = 0
    #: why a request failed, for the run's summary (`ragbridge.judge.causes`); None: it did not
    cause: Optional[str] = None
    #: seconds the request waited for a slot (the bound on calls in flight, the rate limit), spent in
    #: its attempts at the judge, and in backoff between them
    wait_seconds: float = 0.0
    call_seconds: float = 0.0
    backoff_seconds: float = 0.0

    def __post_init__(self) -> None:
        if self.parsed is not None or isinstance(self.body, _JsonBytes):
            self.json_ok = True


class Serving(Protocol):
    """What the gateway's front doors call (``JudgeGateway`` is the one implementation)."""

    #: requests that came over the loopback socket (diagnostics)
    http_requests: int

    def route(self, path: str, headers: Mapping[str, str],
              scope: "Optional[CallTag]" = None) -> "tuple[str, CallTag] | Result":
        """The endpoint and the tag a request is counted under, or the error."""
        ...

    def answer(self, method: str, endpoint: str, raw: bytes, tag: "CallTag", *, started: float) -> Result:
        """Serve one routed request, count it and log it (``started``: its ``time.perf_counter()``)."""
        ...

    def require_started(self) -> None:
        """Raise ``JudgeError`` unless the gateway is started."""
        ...

    @property
    def executor(self) -> Optional[Executor]:
        """The worker threads of the async transport (None unless started)."""
        ...

    def current_tag(self) -> "Optional[CallTag]":
        """The tag of the innermost ``tag_scope`` of this context, or None."""
        ...


class LoopbackServer(ThreadingHTTPServer):
    """The gateway's loopback server: a thread per connection, a deep listen queue; a client that
    goes away mid-request is not an error worth a traceback. With ``gated`` (the gateway's socket),
    a connection gets its thread only once its request head is complete (:class:`Gate`)."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256
    gated = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: heads the gate read, for the handler of their connection (`FastRequestHandler.setup`)
        self.heads: dict[Any, bytes] = {}
        self.gate: Optional[Gate] = Gate(self) if self.gated else None

    def process_request(self, request: Any, client_address: Any) -> None:
        if self.gate is not None:
            self.gate.admit(request, client_address)
        else:
            super().process_request(request, client_address)

    def hand_over(self, request: Any, client_address: Any, head: bytes) -> None:
        """Serve a connection whose request head (``head``, with what followed it) the gate read."""
        request.settimeout(HEAD_SECONDS)  # its handler reads the key from the head, then sets its own
        self.heads[request] = head
        super().process_request(request, client_address)

    def server_close(self) -> None:
        super().server_close()
        if self.gate is not None:
            self.gate.close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        import sys

        if isinstance(sys.exc_info()[1], OSError):
            return
        super().handle_error(request, client_address)


_TOO_LARGE = (b"HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Length: 0\r\n"
              b"Connection: close\r\n\r\n")
_TIMED_OUT = b"HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


class Gate:
    """The connections of a `LoopbackServer` whose request head is not yet complete, all read by one
    thread (so that a connection that sends nothing, or its head a byte at a time, holds no thread):
    at most `MAX_HEAD_BYTES` of a head (431 past it), within `HEAD_SECONDS` of the connection (408),
    for at most `MAX_WAITING` connections (the oldest closed for a new one). A complete head is
    handed to the server with its connection (`LoopbackServer.hand_over`)."""

    def __init__(self, server: LoopbackServer) -> None:
        import collections
        import selectors

        self.server = server
        self._selector = selectors.DefaultSelector()
        self._waiting: dict[Any, tuple[float, bytearray, Any]] = {}  # oldest first
        self._new: collections.deque = collections.deque()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector.register(self._wake_r, 1)
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="ragbridge-gateway-gate", daemon=True)
        self._thread.start()

    def admit(self, conn: Any, address: Any) -> None:
        """Take a new connection (from the server's accepting thread)."""
        self._new.append((conn, address))
        with contextlib.suppress(OSError):
            self._wake_w.send(b"\0")

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._wake_w.send(b"\0")
        self._thread.join(timeout=5)
        for conn in [*self._waiting, *(c for c, _ in self._new)]:
            with contextlib.suppress(OSError):
                conn.close()
        self._waiting.clear()
        self._new.clear()
        for s in (self._wake_r, self._wake_w):
            s.close()
        self._selector.close()

    def _run(self) -> None:
        while not self._closed:
            try:
                self._step()
            except Exception:  # noqa: BLE001 - a connection's fault must not stop the gate for the others
                pass

    def _step(self) -> None:
        """Read what came, take the new connections, close those past their time."""
        for key, _ in self._selector.select(timeout=0.1):
            if key.fileobj is self._wake_r:
                with contextlib.suppress(OSError):
                    while self._wake_r.recv(4096):
                        pass
            elif key.fileobj in self._waiting:
                self._read(key.fileobj)
        while self._new:
            conn, address = self._new.popleft()
            while len(self._waiting) >= MAX_WAITING:
                self._drop(next(iter(self._waiting)))
            try:
                conn.setblocking(False)
                self._selector.register(conn, 1)
            except (OSError, ValueError):
                with contextlib.suppress(OSError):
                    conn.close()
                continue
            self._waiting[conn] = (time.monotonic() + HEAD_SECONDS, bytearray(), address)
        now = time.monotonic()
        for conn in [c for c, (deadline, _, _) in self._waiting.items() if deadline < now]:
            self._drop(conn, _TIMED_OUT)

    def _read(self, conn: Any) -> None:
        _, head, address = self._waiting[conn]
        try:
            data = conn.recv(MAX_HEAD_BYTES + 1 - len(head))
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._drop(conn)
            return
        head += data
        if b"\r\n\r\n" in head or b"\n\n" in head:
            self._selector.unregister(conn)
            del self._waiting[conn]
            conn.setblocking(True)
            self.server.hand_over(conn, address, bytes(head))
        elif len(head) > MAX_HEAD_BYTES:
            self._drop(conn, _TOO_LARGE)

    def _drop(self, conn: Any, answer: bytes = b"") -> None:
        del self._waiting[conn]
        with contextlib.suppress(OSError, KeyError, ValueError):
            self._selector.unregister(conn)
        with contextlib.suppress(OSError):
            if answer:
                conn.send(answer)
            conn.close()


class _Prefixed(io.RawIOBase):
    """A connection read as a stream: first the bytes the gate read of it, then the socket."""

    def __init__(self, head: bytes, conn: Any) -> None:
        self._head = memoryview(head)
        self._conn = conn

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self._head:
            n = min(len(buffer), len(self._head))
            buffer[:n] = self._head[:n]
            self._head = self._head[n:]
            return n
        return self._conn.recv_into(buffer)


class _Headers(dict):
    """Request headers, keys lowercased (``get`` is case-insensitive)."""

    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        return dict.get(self, key.lower(), default)


class FastRequestHandler(BaseHTTPRequestHandler):
    """BaseHTTPRequestHandler with a lean request parser (the stdlib one runs the email package's
    header parser on every request, a large part of the per-call cost on loopback), keep-alive
    (HTTP/1.1) and one write per response."""

    protocol_version = "HTTP/1.1"
    sys_version = ""
    max_headers = MAX_HEADER_LINES
    max_head_bytes = MAX_HEAD_BYTES
    #: the object whose ``_track(conn, add)`` keeps the open connections, so that its ``close()`` can
    #: end them (the gateway, or the stub judge; set on a subclass)
    owner: Any = None

    def setup(self) -> None:
        super().setup()
        try:
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass
        head = self.server.heads.pop(self.connection, None) if hasattr(self.server, "heads") else None
        if head is not None:  # read by the gate: served from there first
            self.rfile = io.BufferedReader(_Prefixed(head, self.connection), io.DEFAULT_BUFFER_SIZE)
        if self.owner is not None:
            self.owner._track(self.connection, True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            if self.owner is not None:
                self.owner._track(self.connection, False)

    def parse_request(self) -> bool:
        self.command = None
        self.request_version = self.default_request_version
        self.close_connection = True
        requestline = str(self.raw_requestline, "iso-8859-1").rstrip("\r\n")
        self.requestline = requestline
        words = requestline.split()
        if len(words) != 3 or not words[2].startswith("HTTP/1."):
            self.send_error(400, "Bad request line")
            return False
        self.command, self.path, self.request_version = words
        headers = _Headers()
        left = self.max_head_bytes - len(self.raw_requestline)
        for _ in range(self.max_headers + 1):  # every line counts, a repeated name too
            line = self.rfile.readline(max(left, 0) + 1)
            left -= len(line)
            if left < 0:
                self.send_error(431, "Request header fields too large")
                return False
            if line in (b"\r\n", b"\n", b""):
                break
            name, sep, value = line.decode("iso-8859-1").partition(":")
            if not sep:
                self.send_error(400, "Bad header line")
                return False
            headers[name.strip().lower()] = value.strip()
        else:
            self.send_error(431, "Too many header lines")
            return False
        self.headers = headers  # type: ignore[assignment]
        conn = headers.get("connection", "").lower()
        if conn == "close":
            self.close_connection = True
        elif conn == "keep-alive" or self.request_version == "HTTP/1.1":
            self.close_connection = False
        if headers.get("expect", "").lower() == "100-continue" and self.request_version == "HTTP/1.1":
            self.wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        return True

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def read_body(self, limit: int = MAX_REQUEST_BYTES) -> bytes:
        """The request's body (``Content-Length`` or chunked), at most ``limit`` bytes; raises
        `BadRequest` for framing that cannot be read (a length that is not a number, a bad chunk
        size, a body cut short) or a body over the limit, which is then not read."""
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            chunks, total = [], 0
            while True:
                line = self.rfile.readline(1026)
                size_text = line.split(b";")[0].strip()
                try:
                    size = int(size_text, 16)
                except ValueError:
                    raise BadRequest(400, f"bad chunk size {size_text[:20]!r}") from None
                if size < 0:
                    raise BadRequest(400, "bad chunk size")
                if size == 0:
                    self.rfile.readline(1026)
                    return b"".join(chunks)
                total += size
                if total > limit:
                    raise BadRequest(413, f"request body over {limit:,} bytes")
                data = self.rfile.read(size)
                if len(data) < size:
                    raise BadRequest(400, "request body cut short")
                chunks.append(data)
                self.rfile.readline(1026)
        length = (self.headers.get("Content-Length") or "").strip()
        if not length:
            return b""
        if not length.isdigit():
            raise BadRequest(400, f"bad Content-Length {length[:20]!r}")
        n = int(length)
        if n > limit:
            raise BadRequest(413, f"request body of {n:,} bytes, over {limit:,}")
        data = self.rfile.read(n)
        if len(data) < n:
            raise BadRequest(400, "request body cut short")
        return data

    def refuse(self, status: int, body: bytes) -> None:
        """Answer ``status`` and close the connection (whatever is left of the request is not read)."""
        self.close_connection = True
        self.write_response(status, body, ["Content-Type: application/json"])

    def write_response(self, status: int, body: bytes, headers: list[str]) -> None:
        head = [f"HTTP/1.1 {status} {self.responses.get(status, ('',))[0]}",
                f"Content-Length: {len(body)}", *headers]
        if self.close_connection:
            head.append("Connection: close")
        self.wfile.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body)


class GatewayHandler(FastRequestHandler):
    """The gateway's loopback socket: each request must come from this machine, not from a web page,
    and carry the gateway's key; it is then routed and answered by the gateway. ``gateway``,
    ``allowed_hosts`` and ``required_key`` are set on the subclass that ``JudgeGateway`` makes when it
    opens the socket."""

    server_version = "ragbridge-judge-gateway"
    gateway: Serving
    #: the Host headers a request may carry (``127.0.0.1:PORT``, ``localhost:PORT``)
    allowed_hosts: frozenset[str]
    #: what a request must present as ``Authorization: Bearer <key>`` or ``api-key: <key>``
    required_key: bytes

    def do_GET(self) -> None:  # noqa: N802
        self._handle("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._handle("POST")

    def _reply(self, res: Result) -> None:
        extra = [f"Content-Type: {res.content_type}", f"X-Ragbridge-Cache: {res.cache}"]
        if not 200 <= res.status < 300:
            extra.append("x-should-retry: false")  # the gateway already retried
        self.write_response(res.status, res.body, extra)

    def _authorized(self) -> bool:
        """The request presents the gateway's key (``Bearer`` or ``api-key``); constant time."""
        authorization = self.headers.get("Authorization")
        if authorization and authorization[:7].lower() == "bearer ":
            given = authorization[7:].strip()
        else:
            given = (self.headers.get("api-key") or "").strip()
        return hmac.compare_digest(given.encode("utf-8", "replace"), self.required_key)

    def _handle(self, method: str) -> None:
        gw = self.gateway
        gw.http_requests += 1
        t0 = time.perf_counter()
        # Loopback only, not from a web page (DNS rebinding / cross-site requests), and with the key:
        # all checked from the headers, before a byte of the body is read.
        host = (self.headers.get("Host") or "").lower()
        if self.headers.get("Origin") or host not in self.allowed_hosts:
            self.refuse(403, error_body("ragbridge judge gateway: forbidden host or origin"))
            return
        if not self._authorized():
            self.refuse(401, error_body("ragbridge judge gateway: missing or wrong API key: use the "
                                        "gateway's api_key", "invalid_request_error", "invalid_api_key"))
            return
        self.connection.settimeout(IDLE_SECONDS)  # a client of the run's: may keep it for its next call
        try:
            raw = self.read_body() if method == "POST" else b""
        except BadRequest as exc:
            self.refuse(exc.status, error_body(f"ragbridge judge gateway: {exc}", "invalid_request_error"))
            return
        routed = gw.route(self.path, self.headers)
        if isinstance(routed, Result):
            if routed.status == 503:
                self.close_connection = True
            self._reply(routed)
            return
        endpoint, tag = routed
        self._reply(gw.answer(method, endpoint, raw, tag, started=t0))


class LoopbackSocket:
    """The gateway's socket: opened on the first request for a socket URL (:meth:`open`), on one
    address of this machine (never a wildcard), answering only requests that carry ``key`` and name
    the address in their ``Host``; :meth:`close` ends it and the connections it holds."""

    def __init__(self, gateway: Serving, key: bytes) -> None:
        self.gateway = gateway
        self.key = key
        self.port: Optional[int] = None
        self._server: Optional[LoopbackServer] = None
        self._thread: Optional[threading.Thread] = None
        self._conns: set = set()
        self._lock = threading.Lock()

    @property
    def listening(self) -> bool:
        return self._server is not None

    def open(self, host: str) -> int:
        """The port, the socket opened on ``host`` if it is not yet (not thread-safe: the caller locks)."""
        if self._server is not None:
            return self.port  # type: ignore[return-value]
        host = host.strip("[]")
        from .hosts import is_wildcard

        if is_wildcard(host):
            from .config import JudgeConfigError

            raise JudgeConfigError(
                f"judge gateway host {host!r}: give the one address of this machine that clients reach "
                f"it at (127.0.0.1 for clients on this machine), not a wildcard")
        handler = type("JudgeGatewayHandler", (GatewayHandler,), {"gateway": self.gateway, "owner": self})
        server_cls = type("GatewayServer", (LoopbackServer,), {"gated": True})
        if ":" in host:  # an IPv6 address
            server_cls = type("GatewayServer6", (server_cls,), {"address_family": socket.AF_INET6})
        server = server_cls((host, 0), handler)
        self.port = port = server.server_address[1]
        loopback = host in ("localhost", "::1") or host.startswith("127.")
        allowed = {f"127.0.0.1:{port}", f"localhost:{port}"} if loopback else set()
        allowed.add(f"{netloc_host(host)}:{port}".lower())
        handler.allowed_hosts = frozenset(allowed)
        handler.required_key = self.key
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02},
                                        name=f"ragbridge-judge-gateway-{port}", daemon=True)
        self._thread.start()
        self._server = server
        return port

    def _track(self, conn: Any, add: bool) -> None:
        with self._lock:
            (self._conns.add if add else self._conns.discard)(conn)

    def close(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            stop_server(server, self._thread, self._lock, self._conns)
            self.port = None


def stop_server(server: Any, thread: Optional[threading.Thread], lock: Any, conns: set) -> None:
    """Stop a threaded socket server started on ``thread``: no new connection, every open one
    (``conns``, guarded by ``lock``) shut so a handler blocked on it returns, then the thread joined."""
    server.shutdown()
    server.server_close()
    with lock:
        open_conns = list(conns)
    for c in open_conns:
        with contextlib.suppress(OSError):
            c.shutdown(socket.SHUT_RDWR)
    if thread is not None:
        thread.join(timeout=5)


def netloc_host(host: str) -> str:
    """``host`` as it appears in a URL's authority (an IPv6 address in brackets)."""
    return f"[{host}]" if ":" in host else host
