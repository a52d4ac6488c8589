"""Forwarding to the real judge: one transport contract, and the retry policy written once.

A :class:`Transport` makes one attempt (``send``: one request, one whole reply, or
:class:`UpstreamTimeout` / :class:`UpstreamError`), within an overall deadline and a cap on the
reply's size: a judge that drips its answer a byte at a time cannot hold a call past the deadline,
and one that answers with hundreds of megabytes is cut off at ``max_reply_bytes``; a compressed
answer (``Content-Encoding: gzip`` or ``deflate``, whatever was asked for) is decompressed within that
cap (:func:`decompressed`).
:class:`StdlibPool` is the fast one, a keep-alive pool of ``http.client`` connections (cheaper per
request than ``httpx``: benchmarks/README.md); :class:`HttpxTransport`
is used when an environment proxy applies to the endpoint (:func:`proxy_for`), for URLs with
userinfo, and for the preflight check.

:class:`Upstream` is one server of the configuration (:class:`~ragbridge.judge.dialect.Endpoint`:
the dialect, key and headers) on its transport. :class:`Forwarder` is the policy, the same for every
upstream: the bound on requests in flight, the requests-per-minute limit (:class:`RateLimiter`), and
the retries of 429, 5xx, connection errors, timeouts and 2xx bodies that are not JSON, with
exponential backoff and full jitter, honouring ``Retry-After`` (:func:`parse_retry_after`).
"""

from __future__ import annotations

import contextlib
import email.utils
import heapq
import http.client
import os
import random
import select
import socket
import ssl
import threading
import time
import zlib
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Optional, Protocol
from urllib.parse import urlsplit

from .config import BACKOFF_BASE, BACKOFF_CAP, JudgeConfig, header_values
from .dialect import Endpoint
from .redact import MIN_ENCODED, as_utf8
from .strict import mend_surrogates, parse_answer
from .server import Result, error_body

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
RETRY_AFTER_CAP = 60.0
_READ_CHUNK = 1 << 16


class UpstreamTimeout(Exception):
    """The upstream did not connect, or did not send its whole answer, within the deadline."""


class ConnectTimeout(UpstreamTimeout):
    """The upstream did not accept the connection within the deadline (nothing was sent)."""


class UpstreamError(Exception):
    """The upstream could not be reached, the connection failed before a whole answer arrived, or the
    pool is closed."""


class ReplyTooLarge(UpstreamError):
    """The upstream's answer is larger than ``max_reply_bytes`` (not retried)."""


class UnreadableReply(UpstreamError):
    """The upstream's answer is compressed in a way that cannot be read (not retried: the same server
    would send it so again)."""


def decompressed(body: bytes, encoding: Optional[str], limit: int) -> bytes:
    """``body`` without the ``Content-Encoding`` (``gzip``, ``deflate``, in the order applied) a
    server put on it, at most ``limit`` bytes once decompressed (ReplyTooLarge beyond: a small bomb
    never grows past the cap); UnreadableReply for another coding or a corrupt one."""
    codings = [c.strip().lower() for c in (encoding or "").split(",")]
    for coding in reversed([c for c in codings if c and c != "identity"]):
        if coding in ("gzip", "x-gzip"):
            wbits = 16 + zlib.MAX_WBITS
        elif coding == "deflate":  # zlib-wrapped as the standard says, or raw as some servers send it
            wbits = zlib.MAX_WBITS if body[:1] == b"\x78" else -zlib.MAX_WBITS
        else:
            raise UnreadableReply(f"the answer is compressed with {coding!r}, which ragbridge cannot read "
                                  f"(it asks for gzip or deflate at most)")
        inflate = zlib.decompressobj(wbits)
        try:
            out = inflate.decompress(body, limit + 1)
        except zlib.error as exc:
            raise UnreadableReply(f"the answer's {coding} data is corrupt ({exc})") from None
        if len(out) > limit or inflate.unconsumed_tail:
            raise ReplyTooLarge(f"the answer is over the limit of {limit:,} bytes once decompressed "
                                f"(max_reply_bytes)")
        body = out
    return body


@dataclass
class Reply:
    """One attempt's answer: status, content type, ``Retry-After`` (seconds) and the whole body."""

    status: int
    content_type: Optional[str]
    retry_after: Optional[float]
    body: bytes


class Transport(Protocol):
    """One attempt at one request: the contract every way to the upstream keeps."""

    def send(self, method: str, url: str, body: Optional[bytes], headers: dict[str, str], *,
             deadline: float) -> Reply:
        """The whole reply, by ``deadline`` (a ``time.monotonic()``); raises UpstreamTimeout,
        UpstreamError or ReplyTooLarge."""
        ...

    def close(self) -> None:
        """End the requests in flight (their callers get an error at once) and free the connections."""
        ...


class _Watchdog:
    """Shuts down the socket of a request still running at its deadline (one thread for all)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int]] = []
        self._armed: dict[int, Any] = {}
        self._seq = 0
        self._thread: Optional[threading.Thread] = None

    def arm(self, deadline: float, sock: Any) -> int:
        """Watch ``sock`` (the socket itself: http.client drops its connection's reference to it
        once an answer says ``Connection: close``)."""
        with self._cond:
            self._seq += 1
            heapq.heappush(self._heap, (deadline, self._seq))
            self._armed[self._seq] = sock
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="ragbridge-judge-deadlines",
                                                daemon=True)
                self._thread.start()
            elif self._heap[0][1] == self._seq:
                self._cond.notify()
            return self._seq

    def disarm(self, token: int) -> bool:
        """Stop watching; False when the deadline had already struck."""
        with self._cond:
            return self._armed.pop(token, None) is not None

    def _run(self) -> None:
        with self._cond:
            while True:
                now = time.monotonic()
                while self._heap and self._heap[0][0] <= now:
                    _, token = heapq.heappop(self._heap)
                    sock = self._armed.pop(token, None)
                    if sock is not None:
                        with contextlib.suppress(OSError):
                            sock.shutdown(socket.SHUT_RDWR)
                self._cond.wait(self._heap[0][0] - now if self._heap else None)


_WATCHDOG = _Watchdog()


class StdlibPool:
    """Keep-alive HTTP/1.1 connections to one upstream host over the standard library's http.client.

    The gateway's hot path (its cost per request against ``httpx``: benchmarks/README.md). At most
    ``size`` idle connections are kept; an idle one that the server closed is dropped before reuse,
    and a request that fails on a reused connection before any response is sent once more on a fresh
    one (not counted as a retry). A request still running at its deadline has its socket shut down."""

    def __init__(self, base_url: str, *, timeout: float, connect_timeout: float, size: int,
                 max_reply_bytes: int) -> None:
        parts = urlsplit(base_url)
        self.https = parts.scheme == "https"
        self.host = parts.hostname or ""
        self.port = parts.port or (443 if self.https else 80)
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.size = size
        self.max_reply_bytes = max_reply_bytes
        self._idle: list[http.client.HTTPConnection] = []
        self._busy: set[http.client.HTTPConnection] = set()  # in use: shut down by close()
        self._closed = False
        self._lock = threading.Lock()
        self._ssl: Optional[ssl.SSLContext] = None
        if self.https:
            import certifi  # a dependency of httpx: the same CA bundle httpx would use

            cafile = os.environ.get("SSL_CERT_FILE") or certifi.where()
            self._ssl = ssl.create_default_context(cafile=cafile, capath=os.environ.get("SSL_CERT_DIR"))

    def _connect(self, deadline: float) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection
        wait = max(0.001, min(self.connect_timeout, deadline - time.monotonic()))
        if self.https:
            conn = http.client.HTTPSConnection(self.host, self.port, timeout=wait, context=self._ssl)
        else:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=wait)
        try:
            conn.connect()
        except TimeoutError as exc:
            conn.close()
            raise ConnectTimeout(f"connect timed out: {exc}") from None
        except OSError as exc:
            conn.close()
            raise UpstreamError(f"{type(exc).__name__}: {exc}") from None
        conn.sock.settimeout(self.timeout)
        with contextlib.suppress(OSError):
            conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn

    def _idle_conn(self) -> Optional[http.client.HTTPConnection]:
        while True:
            # Only the pop is under the lock: the liveness check is a system call, which releases the
            # GIL; holding the lock across it would queue every other caller behind this thread
            # getting the GIL back.
            with self._lock:
                if not self._idle:
                    return None
                conn = self._idle.pop()
            sock = conn.sock
            try:
                alive = sock is not None and not select.select([sock], [], [], 0)[0]
            except (OSError, ValueError):
                alive = False
            if alive:
                return conn
            conn.close()  # readable while idle = closed by the server (or junk): drop it

    def _read(self, r: http.client.HTTPResponse) -> bytes:
        if r.length is not None and r.length > self.max_reply_bytes:
            raise ReplyTooLarge(f"the answer is {r.length:,} bytes, over the limit of "
                                f"{self.max_reply_bytes:,} (max_reply_bytes)")
        chunks, size = [], 0
        while True:
            chunk = r.read(_READ_CHUNK)
            if not chunk:
                return b"".join(chunks)
            size += len(chunk)
            if size > self.max_reply_bytes:
                raise ReplyTooLarge(f"the answer is over the limit of {self.max_reply_bytes:,} bytes "
                                    f"(max_reply_bytes)")
            chunks.append(chunk)

    def send(self, method: str, url: str, body: Optional[bytes], headers: dict[str, str], *,
             deadline: float) -> Reply:
        parts = urlsplit(url)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        for fresh in (False, True):
            conn = None if fresh else self._idle_conn()
            reused = conn is not None
            if conn is None:
                conn = self._connect(deadline)
            with self._lock:
                if self._closed:
                    conn.close()
                    raise UpstreamError("the judge gateway is shut down")
                self._busy.add(conn)
            token = _WATCHDOG.arm(deadline, conn.sock)
            try:
                conn.request(method, target, body=body, headers=headers)
                r = conn.getresponse()
                data = self._read(r)
            except ReplyTooLarge:
                conn.close()
                raise
            except TimeoutError as exc:
                conn.close()
                raise UpstreamTimeout(f"read timed out after {self.timeout:g} s: {exc}") from None
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError) as exc:
                conn.close()
                if time.monotonic() >= deadline:
                    raise UpstreamTimeout("no whole answer within the call's deadline") from None
                if reused:
                    continue  # a stale keep-alive connection: once more on a fresh one
                raise UpstreamError(f"{type(exc).__name__}: {exc}") from None
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                if time.monotonic() >= deadline:
                    raise UpstreamTimeout("no whole answer within the call's deadline") from None
                raise UpstreamError(f"{type(exc).__name__}: {exc}") from None
            finally:
                struck = not _WATCHDOG.disarm(token)
                with self._lock:
                    self._busy.discard(conn)
            if struck:  # the deadline shut the socket: what was read may be cut short
                conn.close()
                raise UpstreamTimeout("no whole answer within the call's deadline")
            if r.will_close:
                conn.close()
            else:
                with self._lock:
                    if len(self._idle) < self.size and not self._closed:
                        self._idle.append(conn)
                        conn = None
                if conn is not None:
                    conn.close()
            return Reply(r.status, r.getheader("content-type"), parse_retry_after(r.getheader("retry-after")),
                         decompressed(data, r.getheader("content-encoding"), self.max_reply_bytes))
        raise UpstreamError("connection closed by the server")  # pragma: no cover - loop always returns

    def close(self) -> None:
        """Close idle connections, and end requests in flight (their threads get an error at once)."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
            busy = list(self._busy)
        for conn in idle:
            conn.close()
        for conn in busy:
            sock = conn.sock
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)


class HttpxTransport:
    """The transport over an ``httpx.Client`` (proxies, userinfo URLs): the reply is streamed, so the
    deadline and the size cap are checked between chunks (a reply's headers are bounded by the read
    timeout only)."""

    def __init__(self, client: Any, *, timeout: float, max_reply_bytes: int) -> None:
        self.client = client
        self.timeout = timeout
        self.max_reply_bytes = max_reply_bytes

    def send(self, method: str, url: str, body: Optional[bytes], headers: dict[str, str], *,
             deadline: float) -> Reply:
        import httpx

        try:
            # only what `decompressed` reads (httpx would also ask for br and zstd where installed)
            headers = {**headers, "Accept-Encoding": "gzip, deflate"}
            with self.client.stream(method, url, content=body, headers=headers) as r:
                length = r.headers.get("content-length")
                if length and length.isdigit() and int(length) > self.max_reply_bytes:
                    raise ReplyTooLarge(f"the answer is {int(length):,} bytes, over the limit of "
                                        f"{self.max_reply_bytes:,} (max_reply_bytes)")
                chunks, size = [], 0
                for chunk in r.iter_raw():  # as the network gives it: the deadline is checked often
                    size += len(chunk)
                    if size > self.max_reply_bytes:
                        raise ReplyTooLarge(f"the answer is over the limit of {self.max_reply_bytes:,} "
                                            f"bytes (max_reply_bytes)")
                    if time.monotonic() > deadline:
                        raise UpstreamTimeout("no whole answer within the call's deadline")
                    chunks.append(chunk)
                # iter_raw gives the bytes as sent, compressed or not: decompressed here, within the cap
                return Reply(r.status_code, r.headers.get("content-type"),
                             parse_retry_after(r.headers.get("retry-after")),
                             decompressed(b"".join(chunks), r.headers.get("content-encoding"),
                                          self.max_reply_bytes))
        except (httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
            raise ConnectTimeout(f"{type(exc).__name__}: {exc}") from None
        except httpx.TimeoutException as exc:
            raise UpstreamTimeout(f"{type(exc).__name__}: {exc}") from None
        except httpx.TransportError as exc:
            raise UpstreamError(f"{type(exc).__name__}: {exc}") from None

    def close(self) -> None:
        self.client.close()


def httpx_client(config: JudgeConfig, endpoint: Endpoint, size: int) -> Any:
    """The ``httpx.Client`` for ``endpoint`` (environment proxies only for a remote one)."""
    import httpx

    return httpx.Client(
        timeout=httpx.Timeout(config.timeout, connect=min(config.timeout, 10.0)),
        limits=httpx.Limits(max_connections=size, max_keepalive_connections=size),
        trust_env=not endpoint.is_local, follow_redirects=False,
        # plain http on loopback: no TLS, so no CA bundle to load (~30 ms)
        verify=not (endpoint.is_local and endpoint.base_url.startswith("http://")))


class Upstream:
    """One server of the configuration on its transport: the key read from the environment when it
    opens (``None`` for a replayed cache), the dialect's URLs and headers for each request."""

    #: "stdlib": the keep-alive http.client pool (httpx still when a proxy applies or the URL has
    #: userinfo); "httpx": always the httpx client
    def __init__(self, endpoint: Endpoint, config: JudgeConfig, *, transport: str = "stdlib",
                 with_key: bool = True) -> None:
        self.endpoint = endpoint
        self.key = (os.environ.get(endpoint.key_env) or None) if with_key and endpoint.key_env else None
        #: the configured headers, their ``${NAME}`` references read (JudgeConfigError when one is unset)
        self.extra_headers = header_values(endpoint.extra_headers) if with_key else {}
        #: what the gateway redacts from every answer: the key, the value of every header not named
        #: public (and the credential in a value such as ``Bearer <credential>``) and the password of a
        #: ``user:pass@`` URL; a value too short to be told from ordinary text is not searched for
        values = [v for name, v in self.extra_headers.items() if not config.is_public_header(name)]
        password = urlsplit(endpoint.base_url).password  # a user:pass@ URL's: a key as much as the key
        values += [password] if password else []
        self.secrets = [s for s in dict.fromkeys([self.key or "", *values, *(v.split()[-1] for v in values
                                                                             if v.split())])
                        if s and (s == self.key or len(s) >= MIN_ENCODED)]
        size = config.max_concurrency + 2
        parts = urlsplit(endpoint.base_url)
        if transport == "stdlib" and not (parts.username or parts.password) and not (
                not endpoint.is_local and proxy_for(endpoint.base_url)):
            self.transport: Any = StdlibPool(endpoint.base_url, timeout=config.timeout,
                                             connect_timeout=min(config.timeout, 10.0), size=size,
                                             max_reply_bytes=config.max_reply_bytes)
        else:
            self.transport = HttpxTransport(httpx_client(config, endpoint, size), timeout=config.timeout,
                                            max_reply_bytes=config.max_reply_bytes)

    def close(self) -> None:
        self.transport.close()


class Forwarder:
    """The one retry policy of every upstream call: at most ``max_concurrency`` attempts in flight
    and ``requests_per_minute`` started (for all upstreams together), retries with backoff.

    ``closing`` is the gateway's shutdown event: a closing gateway starts no attempt and waits no
    backoff out."""

    backoff_base: float = BACKOFF_BASE
    backoff_cap: float = BACKOFF_CAP

    def __init__(self, config: JudgeConfig, closing: threading.Event) -> None:
        self.config = config
        self.closing = closing
        self._sem = threading.BoundedSemaphore(config.max_concurrency)
        self._limiter = RateLimiter(config.requests_per_minute) if config.requests_per_minute else None

    def forward(self, upstream: Upstream, method: str, endpoint: str, body: Optional[bytes],
                model: Optional[str] = None, *, stream: bool = False,
                extra_headers: Optional[dict[str, str]] = None,
                on_send: Optional[Callable[[int], bool]] = None) -> Result:
        """One call: the attempts it takes, and the last answer as the library gets it. ``on_send``
        is called with the attempt's number before each attempt is sent (every attempt is a request
        the upstream may charge for); when it answers False that attempt is not sent, and the call
        ends with a `Result` of ``cache`` "budget" and the ``attempts`` made before it.

        The result's ``unanswered`` counts the attempts that were sent but got no readable answer
        (timed out after the request went, or a 2xx that is not JSON): the upstream may have done
        the work and charged for it, at a cost no answer tells."""
        cfg = self.config
        ep = upstream.endpoint
        try:
            url = ep.target(endpoint, model)
        except ValueError as exc:
            return Result(400, error_body(f"ragbridge judge gateway: {exc}", "invalid_request_error"))
        public = ep.target(endpoint, model, public=True)
        headers = ep.headers(upstream.key, method, upstream.extra_headers)
        if extra_headers:
            headers.update(extra_headers)
        last = Result(502, error_body(f"ragbridge judge gateway: no attempt made to {public}"))
        unanswered = 0
        for attempt in range(1, cfg.max_retries + 2):
            if self.closing.is_set():
                return Result(503, error_body("ragbridge judge gateway is shut down"), attempts=attempt - 1)
            retry_after: Optional[float] = None
            with self._sem:
                if self._limiter is not None and not self._limiter.wait(self.closing):
                    return Result(503, error_body("ragbridge judge gateway is shut down"),
                                  attempts=attempt - 1)
                if on_send is not None and not on_send(attempt):
                    last.attempts, last.cache, last.unanswered = attempt - 1, "budget", unanswered
                    return last
                try:
                    reply: Optional[Reply] = upstream.transport.send(
                        method, url, body if method == "POST" else None, headers,
                        deadline=time.monotonic() + cfg.timeout)
                    failure = None
                    # read as the charset it says it is in (UTF-16, EBCDIC ...): from here on UTF-8,
                    # without a lone surrogate (no file could hold one)
                    answer, reply.content_type = as_utf8(reply.body, reply.content_type)
                    reply.body = mend_surrogates(answer)
                except (UpstreamTimeout, UpstreamError) as exc:
                    reply, failure = None, exc
            if reply is None:
                if isinstance(failure, (ReplyTooLarge, UnreadableReply)):
                    code = "upstream_reply_too_large" if isinstance(failure, ReplyTooLarge) else \
                        "upstream_reply_unreadable"
                    return Result(502, error_body(f"ragbridge judge gateway: {public}: {failure}", code=code),
                                  attempts=attempt, unanswered=unanswered + 1)
                timed_out = isinstance(failure, UpstreamTimeout)
                unanswered += timed_out and not isinstance(failure, ConnectTimeout)
                kind = "timed out" if timed_out else f"failed ({type(failure).__name__}: {failure})"
                last = Result(504 if timed_out else 502, error_body(
                    f"ragbridge judge gateway: request to {public} {kind} after {attempt} attempt(s)",
                    code="upstream_timeout" if timed_out else "upstream_unreachable"))
            elif 200 <= reply.status < 300:
                ctype = reply.content_type or "application/json"
                if stream:
                    return Result(reply.status, reply.body, content_type=ctype, attempts=attempt,
                                  unanswered=unanswered)
                try:
                    parsed, repeated = parse_answer(reply.body)
                except (ValueError, RecursionError):
                    unanswered += 1
                    last = Result(502, error_body(
                        f"ragbridge judge gateway: {public} answered HTTP {reply.status} with a body that "
                        f"is not JSON ({attempt} attempt(s))", code="upstream_invalid_json"))
                else:
                    if repeated is not None:  # ambiguous: not asked again (the judge would say it again)
                        return Result(502, error_body(
                            f"ragbridge judge gateway: {public} answered with JSON that gives the key "
                            f"{repeated!r} twice in one object; which value it meant is ambiguous, so the "
                            f"answer is refused", code="upstream_repeated_key"), attempts=attempt,
                            parsed=parsed, unanswered=unanswered)
                    return Result(reply.status, reply.body, attempts=attempt, parsed=parsed,
                                  unanswered=unanswered)
            else:
                last = Result(reply.status, reply.body or error_body(f"upstream HTTP {reply.status}"),
                              content_type=(reply.content_type or "application/json") if reply.body
                              else "application/json")
                if reply.status not in RETRY_STATUSES:
                    last.attempts, last.unanswered = attempt, unanswered
                    return last
                retry_after = reply.retry_after
            last.attempts, last.unanswered = attempt, unanswered
            if attempt > cfg.max_retries or self.closing.is_set():
                break
            delay = random.uniform(0.0, min(self.backoff_cap, self.backoff_base * 2 ** (attempt - 1)))
            if retry_after is not None:
                delay = min(retry_after, RETRY_AFTER_CAP)
            if delay > 0 and self.closing.wait(delay):
                break
        return last


def proxy_for(url: str) -> bool:
    """True when the environment configures a proxy that applies to ``url`` (then httpx is used)."""
    import urllib.request

    parts = urlsplit(url)
    proxies = urllib.request.getproxies_environment()
    if not (proxies.get(parts.scheme) or proxies.get("all")):
        return False
    return not urllib.request.proxy_bypass_environment(parts.hostname or "")


def parse_retry_after(value: Optional[str]) -> Optional[float]:
    """Seconds to wait from a ``Retry-After`` header (seconds or an HTTP date); None if absent or bad."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max(0.0, (when - datetime.now(timezone.utc)).total_seconds())


class RateLimiter:
    """At most ``per_minute`` upstream requests started per minute, evenly spaced: each start is
    reserved ``60 / per_minute`` seconds after the previous one (no burst), so no minute ever holds
    more starts than the limit, whichever threads (and, through the gateway, workers) ask.

    Every attempt is a request to the upstream, so a retry takes a slot too; cache hits take none."""

    def __init__(self, per_minute: float) -> None:
        if not per_minute > 0:
            raise ValueError("requests per minute must be positive")
        self.interval = 60.0 / float(per_minute)
        self._next = 0.0
        self._lock = threading.Lock()

    def wait(self, closing: Optional[threading.Event] = None) -> bool:
        """Block until this caller's start time; False when ``closing`` was set meanwhile."""
        with self._lock:
            now = time.monotonic()
            start = max(now, self._next)
            self._next = start + self.interval
        delay = start - now
        if delay <= 0:
            return True
        if closing is None:
            time.sleep(delay)
            return True
        return not closing.wait(delay)
