"""Forwarding to the real judge: one transport contract, and the retry policy written once.

A :class:`Transport` makes one attempt (``send``: one request, one whole reply, or
:class:`UpstreamTimeout` / :class:`UpstreamError`), within an overall deadline and a cap on the
reply's size: a judge that drips its answer a byte at a time cannot hold a call past the deadline,
and one that answers with hundreds of megabytes is cut off at ``max_reply_bytes``; a compressed
answer (``Content-Encoding: gzip`` or ``deflate``, whatever was asked for) is decompressed within that
cap (:func:`decompressed`).
:class:`HttpxTransport` is the one transport: an ``httpx.Client`` (keep-alive, TLS, environment
proxies for a remote judge, ``user:pass@`` URLs) whose every read and write ends by the call's
deadline, and whose ``close`` ends the requests in flight at once. Its cost per request (a fraction
of a millisecond) is nothing beside a judge's hundreds: benchmarks/README.md.

:class:`Upstream` is one server of the configuration (:class:`~ragbridge.judge.dialect.Endpoint`:
the dialect, key and headers) on its transport. :class:`Forwarder` is the policy, the same for every
upstream: the bound on requests in flight, the requests-per-minute limit (:class:`RateLimiter`), and
the retries of 429, 5xx, connection errors, timeouts and 2xx bodies that are not JSON, with
exponential backoff and full jitter, honouring ``Retry-After`` (:func:`parse_retry_after`); not of
what the judge would answer the same request again: a 4xx refusal by its request validation
(`ragbridge.judge.structured.deterministic`), or a 500 whose body is the one the attempt before got
(a 5xx's words alone never end its retries: "not supported ... try again" may be a busy server).
"""

from __future__ import annotations

import contextlib
import email.utils
import os
import random
import socket
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
from .structured import deterministic, rejects_structured_output
from .server import Result, error_body

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
RETRY_AFTER_CAP = 60.0


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


#: the deadline of the request this thread is sending (`HttpxTransport.send` sets it)
_CALL = threading.local()


class _DeadlineStream:
    """A connection whose every read and write ends by the deadline of the request this thread is
    sending (httpx's own timeouts bound one read, so a judge that drips its answer, headers
    included, a byte at a time would hold a call for as long as it likes)."""

    def __init__(self, stream: Any, backend: "_DeadlineBackend") -> None:
        self._stream = stream
        self._backend = backend

    def _left(self, timeout: Optional[float], error: type) -> Optional[float]:
        deadline = getattr(_CALL, "deadline", None)
        if self._backend.closed:
            raise self._backend.ReadError("the judge gateway is shut down")
        if deadline is None:
            return timeout
        left = deadline - time.monotonic()
        if left <= 0:
            raise error("no whole answer within the call's deadline")
        return left if timeout is None else min(timeout, left)

    def read(self, max_bytes: int, timeout: Optional[float] = None) -> bytes:
        return self._stream.read(max_bytes, self._left(timeout, self._backend.ReadTimeout))

    def write(self, buffer: bytes, timeout: Optional[float] = None) -> None:
        self._stream.write(buffer, self._left(timeout, self._backend.WriteTimeout))

    def close(self) -> None:
        self._backend.forget(self)
        self._stream.close()

    def start_tls(self, ssl_context: Any, server_hostname: Optional[str] = None,
                  timeout: Optional[float] = None) -> Any:
        stream = self._stream.start_tls(ssl_context, server_hostname,
                                        self._left(timeout, self._backend.ConnectTimeout))
        self._backend.forget(self)
        return self._backend.track(stream)

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)

    def shut(self) -> None:
        sock = self._stream.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


class _DeadlineBackend:
    """httpcore's network backend with `_DeadlineStream` connections, which `close` ends at once
    (shutting a socket down wakes the thread blocked reading it; closing it would not)."""

    def __init__(self, backend: Any) -> None:
        import httpcore

        self._backend = backend
        self.ReadTimeout, self.WriteTimeout = httpcore.ReadTimeout, httpcore.WriteTimeout
        self.ConnectTimeout, self.ReadError = httpcore.ConnectTimeout, httpcore.ReadError
        self._streams: set[_DeadlineStream] = set()
        self._lock = threading.Lock()
        self.closed = False

    def track(self, stream: Any) -> _DeadlineStream:
        wrapped = _DeadlineStream(stream, self)
        with self._lock:
            self._streams.add(wrapped)
            closed = self.closed
        if closed:
            wrapped.shut()
        return wrapped

    def forget(self, stream: _DeadlineStream) -> None:
        with self._lock:
            self._streams.discard(stream)

    def connect_tcp(self, host: str, port: int, timeout: Optional[float] = None,
                    local_address: Optional[str] = None, socket_options: Any = None) -> _DeadlineStream:
        deadline = getattr(_CALL, "deadline", None)
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise self.ConnectTimeout("no connection within the call's deadline")
            timeout = left if timeout is None else min(timeout, left)
        return self.track(self._backend.connect_tcp(host, port, timeout, local_address, socket_options))

    def connect_unix_socket(self, path: str, timeout: Optional[float] = None,
                            socket_options: Any = None) -> _DeadlineStream:  # pragma: no cover - no uds
        return self.track(self._backend.connect_unix_socket(path, timeout, socket_options))

    def sleep(self, seconds: float) -> None:  # pragma: no cover - httpcore's connect retries are off
        self._backend.sleep(seconds)

    def close(self) -> None:
        with self._lock:
            self.closed = True
            streams = list(self._streams)
        for stream in streams:
            stream.shut()


def _with_deadlines(client: Any) -> _DeadlineBackend:
    """Give every transport of ``client`` (its own, and a proxy's) one `_DeadlineBackend`.

    httpx takes no network backend, so it is set on each transport's connection pool (httpcore's
    ``_network_backend``, the attribute its pools and proxies have had since httpcore 0.17)."""
    transports = [client._transport, *(t for t in client._mounts.values() if t is not None)]
    backend: Optional[_DeadlineBackend] = None
    for transport in transports:
        pool = getattr(transport, "_pool", None)
        if pool is None or not hasattr(pool, "_network_backend"):
            raise RuntimeError("this httpx / httpcore version keeps no network backend on its pool: "
                               "install the versions in constraints.txt")
        backend = backend or _DeadlineBackend(pool._network_backend)
        pool._network_backend = backend
    assert backend is not None
    return backend


class HttpxTransport:
    """The transport over an ``httpx.Client``: every read and write of a request ends by its deadline
    (`_DeadlineStream`), the reply is streamed so the size cap is checked as it comes, and `close`
    ends the requests in flight at once."""

    def __init__(self, client: Any, *, timeout: float, max_reply_bytes: int) -> None:
        self.client = client
        self.timeout = timeout
        self.max_reply_bytes = max_reply_bytes
        self._network = _with_deadlines(client)

    def send(self, method: str, url: str, body: Optional[bytes], headers: dict[str, str], *,
             deadline: float) -> Reply:
        import httpx

        _CALL.deadline = deadline
        try:
            # only what `decompressed` reads (httpx would also ask for br and zstd where installed)
            headers = {**headers, "Accept-Encoding": "gzip, deflate"}
            with self.client.stream(method, url, content=body, headers=headers) as r:
                length = r.headers.get("content-length")
                if length and length.isdigit() and int(length) > self.max_reply_bytes:
                    raise ReplyTooLarge(f"the answer is {int(length):,} bytes, over the limit of "
                                        f"{self.max_reply_bytes:,} (max_reply_bytes)")
                chunks, size = [], 0
                for chunk in r.iter_raw():  # as the network gives it, compressed or not
                    size += len(chunk)
                    if size > self.max_reply_bytes:
                        raise ReplyTooLarge(f"the answer is over the limit of {self.max_reply_bytes:,} "
                                            f"bytes (max_reply_bytes)")
                    chunks.append(chunk)
                return Reply(r.status_code, r.headers.get("content-type"),
                             parse_retry_after(r.headers.get("retry-after")),
                             decompressed(b"".join(chunks), r.headers.get("content-encoding"),
                                          self.max_reply_bytes))
        except (httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
            raise ConnectTimeout(f"{type(exc).__name__}: {exc}") from None
        except httpx.TimeoutException as exc:
            raise UpstreamTimeout(f"{type(exc).__name__}: {exc}") from None
        except httpx.TransportError as exc:
            if self._network.closed:
                raise UpstreamError("the judge gateway is shut down") from None
            raise UpstreamError(f"{type(exc).__name__}: {exc}") from None
        finally:
            _CALL.deadline = None

    def close(self) -> None:
        """End the requests in flight (their sockets shut down) and close the connections."""
        self._network.close()
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

    def __init__(self, endpoint: Endpoint, config: JudgeConfig, *, with_key: bool = True) -> None:
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
        self.transport: Transport = HttpxTransport(
            httpx_client(config, endpoint, config.max_concurrency + 2), timeout=config.timeout,
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
                on_send: Optional[Callable[[int], bool]] = None,
                final: Optional[Callable[[int, bytes], bool]] = None) -> Result:
        """One call (`_attempts`), with the seconds it spent in backoff between its attempts."""
        slept = [0.0]
        res = self._attempts(upstream, method, endpoint, body, model, stream=stream,
                             extra_headers=extra_headers, on_send=on_send, final=final, slept=slept)
        res.backoff_seconds = slept[0]
        return res

    def _attempts(self, upstream: Upstream, method: str, endpoint: str, body: Optional[bytes],
                  model: Optional[str] = None, *, stream: bool = False,
                  extra_headers: Optional[dict[str, str]] = None,
                  on_send: Optional[Callable[[int], bool]] = None,
                  final: Optional[Callable[[int, bytes], bool]] = None, slept: list[float]) -> Result:
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
        waited = called = 0.0
        previous: Optional[bytes] = None  # the body of the attempt before, when it was a 500
        for attempt in range(1, cfg.max_retries + 2):
            if self.closing.is_set():
                return Result(503, error_body("ragbridge judge gateway is shut down"), attempts=attempt - 1,
                              wait_seconds=waited, call_seconds=called)
            retry_after: Optional[float] = None
            queued = time.monotonic()
            with self._sem:
                if self._limiter is not None and not self._limiter.wait(self.closing):
                    return Result(503, error_body("ragbridge judge gateway is shut down"),
                                  attempts=attempt - 1, wait_seconds=waited, call_seconds=called)
                if on_send is not None and not on_send(attempt):
                    last.attempts, last.cache, last.unanswered = attempt - 1, "budget", unanswered
                    last.wait_seconds, last.call_seconds = waited, called
                    return last
                sent = time.monotonic()
                waited += sent - queued
                try:
                    reply: Optional[Reply] = upstream.transport.send(
                        method, url, body if method == "POST" else None, headers,
                        deadline=sent + cfg.timeout)
                    failure = None
                    # read as the charset it says it is in (UTF-16, EBCDIC ...): from here on UTF-8,
                    # without a lone surrogate (no file could hold one)
                    answer, reply.content_type = as_utf8(reply.body, reply.content_type)
                    reply.body = mend_surrogates(answer)
                except (UpstreamTimeout, UpstreamError) as exc:
                    reply, failure = None, exc
                called += time.monotonic() - sent
            if reply is None:
                if isinstance(failure, (ReplyTooLarge, UnreadableReply)):
                    code = "upstream_reply_too_large" if isinstance(failure, ReplyTooLarge) else \
                        "upstream_reply_unreadable"
                    return Result(502, error_body(f"ragbridge judge gateway: {public}: {failure}", code=code),
                                  attempts=attempt, unanswered=unanswered + 1, wait_seconds=waited,
                                  call_seconds=called, cause="reply_too_large" if isinstance(
                                      failure, ReplyTooLarge) else "unreadable")
                timed_out = isinstance(failure, UpstreamTimeout)
                unanswered += timed_out and not isinstance(failure, ConnectTimeout)
                if timed_out:
                    what = ("did not accept a connection" if isinstance(failure, ConnectTimeout)
                            else "sent no whole answer")
                    message = (f"ragbridge judge gateway: the judge at {public} {what} within the judge's "
                               f"timeout of {cfg.timeout:g} s (timed out after {attempt} attempt(s))")
                else:
                    message = (f"ragbridge judge gateway: request to {public} failed "
                               f"({type(failure).__name__}: {failure}) after {attempt} attempt(s)")
                last = Result(504 if timed_out else 502, error_body(
                    message, code="upstream_timeout" if timed_out else "upstream_unreachable"),
                    cause="timeout" if timed_out else "unreachable")
            elif 200 <= reply.status < 300:
                ctype = reply.content_type or "application/json"
                if stream:
                    return Result(reply.status, reply.body, content_type=ctype, attempts=attempt,
                                  unanswered=unanswered, wait_seconds=waited, call_seconds=called)
                try:
                    parsed, repeated = parse_answer(reply.body)
                except (ValueError, RecursionError):
                    unanswered += 1
                    last = Result(502, error_body(
                        f"ragbridge judge gateway: {public} answered HTTP {reply.status} with a body that "
                        f"is not JSON ({attempt} attempt(s))", code="upstream_invalid_json"),
                        cause="invalid_json")
                else:
                    if repeated is not None:  # ambiguous: not asked again (the judge would say it again)
                        return Result(502, error_body(
                            f"ragbridge judge gateway: {public} answered with JSON that gives the key "
                            f"{repeated!r} twice in one object; which value it meant is ambiguous, so the "
                            f"answer is refused", code="upstream_repeated_key"), attempts=attempt,
                            parsed=parsed, unanswered=unanswered, wait_seconds=waited, call_seconds=called,
                            cause="unusable_reply")
                    return Result(reply.status, reply.body, attempts=attempt, parsed=parsed,
                                  unanswered=unanswered, wait_seconds=waited, call_seconds=called)
            else:
                last = Result(reply.status, reply.body or error_body(f"upstream HTTP {reply.status}"),
                              content_type=(reply.content_type or "application/json") if reply.body
                              else "application/json", cause=_cause_of(reply.status, reply.body))
                # what the judge would answer the same request again (its request validation, or the
                # same 500 twice in a row) is not asked again: only what can change is retried
                same = reply.status == 500 and previous == reply.body
                previous = reply.body if reply.status == 500 else None
                if same and last.cause == "server_error":
                    last.cause = "rejected"
                if (reply.status not in RETRY_STATUSES or same or deterministic(reply.status, reply.body)
                        or (final is not None and final(reply.status, reply.body))):
                    last.attempts, last.unanswered = attempt, unanswered
                    last.wait_seconds, last.call_seconds = waited, called
                    return last
                retry_after = reply.retry_after
            last.attempts, last.unanswered = attempt, unanswered
            last.wait_seconds, last.call_seconds = waited, called
            if attempt > cfg.max_retries or self.closing.is_set():
                break
            delay = random.uniform(0.0, min(self.backoff_cap, self.backoff_base * 2 ** (attempt - 1)))
            if retry_after is not None:
                delay = min(retry_after, RETRY_AFTER_CAP)
            backoff = time.monotonic()
            closed = delay > 0 and self.closing.wait(delay)
            slept[0] += time.monotonic() - backoff
            if closed:
                break
        return last


def _cause_of(status: int, body: bytes) -> str:
    """Why the judge's error answer failed its request (`ragbridge.judge.causes`)."""
    if rejects_structured_output(status, body):
        return "structured_output"
    if status == 429:
        return "rate_limited"
    if status in (401, 403):
        return "key_rejected"
    if status == 404:
        return "not_found"
    if deterministic(status, body) or 400 <= status < 500:
        return "rejected"
    return "server_error"


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
