"""The judge gateway: :class:`JudgeGateway`, the one place every backend's judge calls go through.

The real key (read from the environment variable named by ``JudgeConfig.api_key_env``) never enters
a library object or file; the gateway adds it when it forwards a request to the real endpoint. The
gateway is the one place that

* caches responses (:class:`~ragbridge.judge.cache.JudgeCache`), keyed by the full request, so a
  re-run of an unchanged suite makes no calls and CI can replay a recorded cache with no key
  (``cache_mode = "read-only"``); one upstream call is made per distinct request in flight. When a
  score fails, :meth:`JudgeGateway.forget` drops every answer served for its (backend, metric,
  case_id) and no answer for it is stored afterwards (one still in flight then included), so a
  malformed answer is asked for again on the next run instead of being replayed;
* bounds concurrency across all backends together (``max_concurrency`` requests in flight) and,
  with ``requests_per_minute``, the rate of upstream requests (evenly spaced starts,
  :class:`~ragbridge.judge.upstream.RateLimiter`); both hold for every client of the gateway
  together, in-process or over its socket (the Ray executor's workers included);
* retries 429, 500, 502, 503, 504, connection errors, timeouts and 2xx bodies that are not JSON,
  with exponential backoff and full jitter (0.5 s base, 20 s cap), honouring ``Retry-After``;
* counts calls, cache hits, tokens, retries and errors per (backend, metric, case_id) (:class:`Usage`),
  attributed by a path tag (``base_url(backend, metric, case_id)``), by the ``tag_scope`` a request
  was made in (in-process transports), or by the ``X-Ragbridge-Tag`` request header (``tag_scope`` +
  ``httpx_event_hooks``, for the loopback socket);
* writes an audit log (JSONL, flushed every 0.2 s and on close; never a header or a key): one line
  per judge call with who asked (backend, metric, case_id), the endpoint, ``request_key`` (the
  SHA-256 of the upstream URL, path and exact request bytes: the key the cache files the answer
  under, table ``aliases``, column ``raw``), the status, cache outcome, attempts, seconds, the tokens
  the call spent (0 for a cache hit) and the SHA-256 and size of both bodies. The bodies themselves
  are written only for a call that did not succeed (status outside 2xx), where they are the
  evidence; a successful answer's body is in the cache under ``request_key``. That keeps the log
  to about 0.5 KB a call (the bundled 53 cases with three libraries: 1.1 MB instead of 9.9 MB);
* notices answers from ragbridge's stub judge (``stub_detected``), so runs can be labelled;
* files each repeat of a judged score (:mod:`ragbridge.judge.repeat`) under its own cache key,
  so the N repeats are N distinct calls, and tells the upstream the repeat (``X-Ragbridge-Repeat``);
* prices every upstream call by the config's price table (``JudgeConfig.prices``: ``Usage.cost``,
  ``Usage.unpriced`` for calls to a model without a price);
* keeps the run's budget (:meth:`JudgeGateway.set_budget`: at most ``max_calls`` upstream calls,
  ``max_cost`` money): once it is spent, a request that would go upstream is refused at once (HTTP
  402, code ``ragbridge_budget_spent``, no retry) and the score it was for is reported by
  :meth:`JudgeGateway.refused`, which the runner records as not run; cached answers are still served;
* with ``simulate`` set (a dry run), answers a cache miss with ``simulate(endpoint, body)`` instead of
  calling upstream, counts it as the call it would be and stores nothing (the cache is opened
  read-only).

Requests come in through its two front doors, which both call :meth:`JudgeGateway.route` and
:meth:`JudgeGateway.answer`: the in-process transports (:mod:`ragbridge.judge.transport`) and the
loopback socket (:mod:`ragbridge.judge.server`). They go upstream through
:mod:`ragbridge.judge.upstream`. After its own retries the gateway passes the last error status and
body to the library with ``x-should-retry: false``, so the OpenAI SDK does not multiply the
retries; the library raises and the backend records that score's error.

A client that must not wait forever should use a timeout of at least
``timeout * (max_retries + 1)`` plus the backoff (``JudgeConfig.client_timeout()``).
"""

from __future__ import annotations

import concurrent.futures
import concurrent.futures.thread
import contextlib
import contextvars
import hashlib
import json
import os
import re
import secrets
import socket
import threading
import time
from dataclasses import dataclass, fields as dc_fields
from pathlib import Path
from typing import Any, Iterator, Literal, Mapping, Optional
from urllib.parse import quote, unquote

import httpx

from .cache import JudgeCache
from .repeat import REPEAT_HEADER, split_repeat
from .config import (
    BACKOFF_BASE,
    BACKOFF_CAP,
    JudgeConfig,
    JudgeConfigError,
    JudgeError,
    JudgeUnavailable,
)
from .dialect import Endpoint, endpoints_of, shape_body
from .server import GatewayHandler, LoopbackServer, Result, Triple, error_body
from .transport import AsyncJudgeTransport, JudgeTransport
from .upstream import Forwarder, Upstream, httpx_client

IN_PROCESS_ORIGIN = "http://ragbridge-gateway.invalid"  # the host of in-process URLs: no socket serves it
STUB_MARKER = b'"system_fingerprint": "ragbridge-stub"'  # what ragbridge.testing's stub judge answers with
TAG_HEADER = "X-Ragbridge-Tag"
AUDIT_FLUSH_SECONDS = 0.2  # the audit log is written in the background at most this late
ENDPOINTS = ("chat/completions", "responses", "embeddings", "models", "completions")


@dataclass(frozen=True)
class Usage:
    """Judge traffic summed over some (backend, metric, case_id) triples.

    ``calls`` are requests that went upstream (one per library request, however many attempts);
    ``cache_hits`` were answered from the cache; ``retries`` are extra attempts; ``errors`` are
    requests whose final answer to the library was not 2xx (read-only cache misses included, budget
    refusals not); ``cost`` is what the calls cost by the price table, ``unpriced`` the calls to a
    model the table has no price for (their cost is unknown: see `known_cost`; with no table at all
    nothing is counted here, and the runner records every cost as unknown); ``refused`` the requests refused
    because the run's budget was spent."""

    calls: int = 0
    cache_hits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    retries: int = 0
    errors: int = 0
    cost: float = 0.0
    unpriced: int = 0
    refused: int = 0

    def __add__(self, other: "Usage") -> "Usage":
        return Usage(*(getattr(self, f.name) + getattr(other, f.name) for f in dc_fields(self)))

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def known_cost(self) -> Optional[float]:
        """``cost``, or None when a call had no price (0.0 when no call went upstream)."""
        return None if self.unpriced else self.cost


_N_USAGE = len(dc_fields(Usage))


@dataclass
class Budget:
    """A run's judge budget: at most ``max_calls`` upstream calls and ``max_cost`` money (None: no
    limit), ``calls`` and ``cost`` being what the run spent so far (earlier sessions included).

    A call is reserved before it goes upstream; with ``max_cost``, a new call is refused once the cost
    spent plus the calls in flight (each at the mean cost of a call so far) reaches the limit, so a
    run overshoots by at most the calls that were in flight when it ran out."""

    max_calls: Optional[int] = None
    max_cost: Optional[float] = None
    calls: int = 0
    cost: float = 0.0
    in_flight: int = 0
    settled: int = 0
    spent: bool = False

    def describe(self) -> str:
        parts = []
        if self.max_calls is not None:
            parts.append(f"max_calls {self.max_calls}")
        if self.max_cost is not None:
            parts.append(f"max_cost {self.max_cost:g}")
        return ", ".join(parts)


_CURRENT_TAG: contextvars.ContextVar[Optional[Triple]] = contextvars.ContextVar(
    "ragbridge_judge_tag", default=None)


def tag_header_value(triple: Triple) -> str:
    return "/".join(quote(p or "", safe="") for p in triple)


def _parse_tag_header(value: str) -> Triple:
    parts = value.split("/", 2) + ["", ""]
    return tuple(unquote(p) or None for p in parts[:3])  # type: ignore[return-value]


def _usage_of(parsed: Any) -> tuple[int, int]:
    if not isinstance(parsed, dict):
        return 0, 0
    u = parsed.get("usage")
    if not isinstance(u, dict):
        return 0, 0

    def num(*names: str) -> int:
        for n in names:
            v = u.get(n)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                return int(v)
        return 0

    return num("prompt_tokens", "input_tokens"), num("completion_tokens", "output_tokens")


class JudgeGateway:
    """The OpenAI-compatible gateway in front of the real judge (see the ``ragbridge.judge`` docstring).

    ``with JudgeGateway(config, audit_log=run_dir / "judge-audit.jsonl") as gw:`` ... give each
    library ``gw.transport()`` and ``gw.base_url(backend, metric, case_id, in_process=True)``, or
    point it at ``gw.base_url(backend, metric, case_id)`` (the loopback socket), with
    ``api_key=gw.api_key``.

    ``backoff_base`` / ``backoff_cap`` (seconds) may be lowered on an instance, e.g. in tests.

    ``host`` is the address the socket listens on: ``127.0.0.1`` (the default) for clients on this
    machine; another address of this machine (never a wildcard) when clients on other machines must
    reach it, as the Ray executor's workers on a remote cluster do. Every request must still carry
    the gateway's key, and its ``Host`` header must name the address it was sent to."""

    backoff_base: float = BACKOFF_BASE
    backoff_cap: float = BACKOFF_CAP
    #: "stdlib": forward with a keep-alive http.client pool (the fast path; httpx is still used when a
    #: proxy applies or the URL has userinfo); "httpx": forward with the shared httpx.Client.
    upstream_transport: Literal["stdlib", "httpx"] = "stdlib"

    def __init__(self, config: JudgeConfig, audit_log: Optional[Path] = None, *,
                 host: str = "127.0.0.1") -> None:
        self.config = config
        #: the socket's address (settable until the socket opens; see the class docstring)
        self.host = host
        self.audit_log = Path(audit_log) if audit_log is not None else None
        self._chat, self._embeddings = endpoints_of(config)
        self._upstream_public = self._chat.public_url
        self._lock = threading.Lock()
        self._tags: dict[str, Triple] = {}
        self._tag_of: dict[Triple, str] = {}
        self._usage: dict[Triple, list[int]] = {}
        self._served: dict[Triple, set[tuple[str, str]]] = {}
        self._failed: set[Triple] = set()  # forgotten: no answer is stored for these any more
        self._forwarder: Optional[Forwarder] = None
        self._upstreams: dict[Endpoint, Upstream] = {}
        self._inflight: dict[str, threading.Event] = {}
        self._closing = threading.Event()
        self._conns: set = set()
        self._key_bytes: tuple[bytes, ...] = ()
        self._cache: Optional[JudgeCache] = None
        self._audit_fh: Any = None
        self._audit_flusher: Optional[threading.Thread] = None
        self._audit_lock = threading.Lock()
        self._server: Optional[LoopbackServer] = None
        self._thread: Optional[threading.Thread] = None
        self._listen_lock = threading.Lock()
        #: what a request on the loopback socket must present (memory only; see ragbridge.judge.server)
        self._secret = secrets.token_urlsafe(32)
        self._secret_bytes = self._secret.encode("ascii")
        self.port: Optional[int] = None
        #: True once an answer (from upstream or the cache) came from ragbridge's stub judge:
        #: run outputs must then be labelled as stub scores.
        self.stub_detected = False
        #: requests that came over the loopback socket rather than through a transport (diagnostics)
        self.http_requests = 0
        self._executor: Optional[concurrent.futures.ThreadPoolExecutor] = None
        self.budget: Optional[Budget] = None
        self._refused: set[Triple] = set()
        #: a dry run: ``simulate(endpoint, body) -> answer`` answers what the cache does not hold
        self.simulate: Optional[Any] = None
        self._simulated: dict[str, tuple[int, bytes]] = {}  # a dry run's answers, as a run would cache them

    def set_budget(self, max_calls: Optional[int] = None, max_cost: Optional[float] = None,
                   spent_calls: int = 0, spent_cost: float = 0.0) -> Budget:
        """Limit the upstream calls from now on (see `Budget`); ``spent_*``: what the run spent before."""
        self.budget = Budget(max_calls=max_calls, max_cost=max_cost, calls=spent_calls, cost=spent_cost)
        return self.budget

    def refused(self, backend: str, metric: Optional[str] = None, case_id: Optional[str] = None) -> bool:
        """Whether a request for (backend, metric, case_id) was refused because the budget was spent."""
        with self._lock:
            return (backend, metric, case_id) in self._refused

    @property
    def budget_spent(self) -> bool:
        return self.budget is not None and self.budget.spent

    def _reserve(self, triple: Triple) -> Optional[Result]:
        """Reserve one upstream call against the budget, or the refusal when it is spent."""
        b = self.budget
        if b is None:
            return None
        with self._lock:
            over = b.max_calls is not None and b.calls >= b.max_calls
            if not over and b.max_cost is not None:
                mean = b.cost / b.settled if b.settled else 0.0
                over = b.cost + b.in_flight * mean >= b.max_cost
            if not over:
                b.calls += 1
                b.in_flight += 1
                return None
            b.spent = True
            self._refused.add(triple)
        return Result(402, error_body(
            f"ragbridge judge budget spent ({b.describe()}): this call was not made; run again with a "
            f"larger budget to resume", "insufficient_quota", "ragbridge_budget_spent"),
            cache="budget", attempts=0, json_ok=True)

    def _settle(self, res: Result) -> None:
        b = self.budget
        if b is None:
            return
        with self._lock:
            b.in_flight -= 1
            b.settled += 1
            b.cost += res.cost or 0.0

    def _price(self, res: Result, model: Optional[str]) -> None:
        """Set ``res.cost`` from the answer's usage and the price of the model the request named
        (None: the table has no price for it)."""
        if res.parsed is None:
            res.cost = 0.0
            return
        prompt, completion = _usage_of(res.parsed)
        price = self.config.price_of(model if isinstance(model, str) else None)
        res.cost = price.cost(prompt, completion) if price is not None else None

    def _call_upstream(self, endpoint: str, raw: bytes, body: Any, triple: Triple, repeat: int,
                       stream: bool = False) -> Result:
        """One upstream call (or its simulation in a dry run) within the budget, priced."""
        refusal = self._reserve(triple)
        if refusal is not None:
            return refusal
        res = Result(502, b"", cost=0.0)
        model = body.get("model") if isinstance(body, dict) else None
        try:
            if self.simulate is not None and not stream:
                payload = self.simulate(endpoint, body)
                res = Result(200, json.dumps(payload).encode(), attempts=1, parsed=payload)
            else:
                shaped = shape_body(self.config, endpoint, body)
                if shaped is not body:
                    raw = json.dumps(shaped, ensure_ascii=False).encode("utf-8")
                res = self._forward("POST", endpoint, raw, stream=stream, repeat=repeat,
                                    model=model if isinstance(model, str) else None)
            self._price(res, model)
        finally:
            self._settle(res)
        return res

    def _endpoint(self, endpoint: str) -> Endpoint:
        """The upstream server a request to ``endpoint`` goes to."""
        return self._embeddings if endpoint == "embeddings" else self._chat

    def start(self) -> "JudgeGateway":
        if self._executor is not None:
            return self
        cfg = self.config
        self._closing.clear()
        forwarder = self._forwarder = Forwarder(cfg, self._closing)
        forwarder.backoff_base, forwarder.backoff_cap = self.backoff_base, self.backoff_cap
        for ep in {self._chat, self._embeddings}:
            self._upstreams[ep] = Upstream(ep, cfg, transport=self.upstream_transport,
                                           with_key=cfg.cache_mode != "read-only")
        self._key_bytes = tuple(u.key.encode() for u in self._upstreams.values() if u.key)
        if cfg.cache_mode != "off" and cfg.cache_path is not None:
            self._cache = JudgeCache(cfg.cache_path,
                                     read_only=cfg.cache_mode == "read-only" or self.simulate is not None)
        if self.audit_log is not None:
            self.audit_log.parent.mkdir(parents=True, exist_ok=True)
            self._audit_fh = open(self.audit_log, "ab", buffering=1 << 20)
            self._audit_flusher = threading.Thread(target=self._flush_audit_periodically,
                                                   name="ragbridge-judge-audit-flush", daemon=True)
            self._audit_flusher.start()
        # Worker threads of the async transport: enough for every request the libraries may have
        # open (the upstream bound is the semaphore in _forward, not the pool size).
        self._executor = _stdlib_thread_pool()(max_workers=4 * cfg.max_concurrency + 8,
                                               thread_name_prefix="ragbridge-judge")
        return self

    def _listen(self) -> int:
        """Open the loopback socket (once, on the first request for a socket URL); returns its port."""
        with self._listen_lock:
            self.require_started()
            if self._closing.is_set():
                raise JudgeError("the judge gateway is closing: no new socket")
            if self._server is None:
                host = self.host.strip("[]")
                if host in ("", "0.0.0.0", "::"):
                    raise JudgeConfigError(
                        f"judge gateway host {self.host!r}: give the one address of this machine that "
                        f"clients reach it at (127.0.0.1 for clients on this machine), not a wildcard")
                handler = type("JudgeGatewayHandler", (GatewayHandler,), {"gateway": self, "owner": self})
                server_cls = LoopbackServer
                if ":" in host:  # an IPv6 address
                    server_cls = type("LoopbackServer6", (LoopbackServer,),
                                      {"address_family": socket.AF_INET6})
                server = server_cls((host, 0), handler)
                self.port = port = server.server_address[1]
                allowed = {f"127.0.0.1:{port}", f"localhost:{port}"} if _is_loopback(host) else set()
                allowed.add(f"{_netloc_host(host)}:{self.port}".lower())
                handler.allowed_hosts = frozenset(allowed)
                handler.required_key = self._secret_bytes
                self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02},
                                                name=f"ragbridge-judge-gateway-{self.port}", daemon=True)
                self._thread.start()
                self._server = server
            return self.port  # type: ignore[return-value]

    @property
    def listening(self) -> bool:
        """Whether the loopback socket is open (it is only once a socket URL was asked for)."""
        return self._server is not None

    def close(self) -> None:
        self._closing.set()
        with self._listen_lock:
            server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
            with self._lock:
                conns = list(self._conns)
            for c in conns:
                with contextlib.suppress(OSError):
                    c.shutdown(socket.SHUT_RDWR)
            if self._thread is not None:
                self._thread.join(timeout=5)
        # Upstream requests in flight end now (their connections are shut down), so the worker
        # threads finish at once instead of waiting for the judge's answers.
        upstreams, self._upstreams = self._upstreams, {}
        for upstream in upstreams.values():
            upstream.close()
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True, cancel_futures=True)
        if self._cache is not None:
            self._cache.close()
            self._cache = None
        with self._audit_lock:
            if self._audit_fh is not None:
                self._audit_fh.close()
                self._audit_fh = None
        self._key_bytes = ()
        self.port = None

    def __enter__(self) -> "JudgeGateway":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _track(self, conn: Any, add: bool) -> None:
        with self._lock:
            (self._conns.add if add else self._conns.discard)(conn)

    # -- what the backends use ------------------------------------------------------------------
    @property
    def api_key(self) -> str:
        """The key the libraries get: this gateway's own random key, which its loopback socket
        requires (the real key stays in the gateway). It is never written anywhere."""
        return self._secret

    @property
    def url(self) -> str:
        """The socket's root URL (``http://127.0.0.1:PORT``, or the ``host`` it listens on); opens the
        socket if needed."""
        port = self._listen()
        return f"http://{_netloc_host(self.host.strip('[]'))}:{port}"

    def require_started(self) -> None:
        """Raise JudgeError unless started: until start() (and after close()) there is no key, cache
        or pool (the transports check it before each request)."""
        if self._executor is None:
            raise JudgeError("the judge gateway is not started (or already closed): call start() or use "
                             "it as a context manager")

    @property
    def executor(self) -> Optional[concurrent.futures.ThreadPoolExecutor]:
        """The worker threads that do the async transport's blocking work (None unless started)."""
        return self._executor

    def base_url(self, backend: Optional[str] = None, metric: Optional[str] = None,
                 case_id: Optional[str] = None, *, in_process: bool = False) -> str:
        """An OpenAI base URL (``.../v1``) whose calls are counted under (backend, metric, case_id);
        without a backend, an untagged one (attribution then comes from ``tag_scope`` or the
        X-Ragbridge-Tag header). The loopback socket's, which opens the socket; ``in_process=True``:
        one for a library client on :meth:`transport` / :meth:`async_transport` (no socket)."""
        root = IN_PROCESS_ORIGIN if in_process else self.url
        if backend is None:
            return f"{root}/v1"
        triple: Triple = (backend, metric, case_id)
        with self._lock:
            tag = self._tag_of.get(triple)
            if tag is None:
                tag = secrets.token_urlsafe(9)
                self._tag_of[triple] = tag
                self._tags[tag] = triple
        return f"{root}/t/{tag}/v1"

    @property
    def plain_base_url(self) -> str:
        """The loopback socket's untagged base URL: ``base_url()``."""
        return self.base_url()

    @staticmethod
    @contextlib.contextmanager
    def tag_scope(backend: str, metric: Optional[str] = None,
                  case_id: Optional[str] = None) -> Iterator[None]:
        """Attribute requests made in this context (thread / asyncio task) to (backend, metric, case_id).

        The in-process transports read it (:meth:`current_tag`); for the loopback socket, the event hooks
        (:meth:`httpx_event_hooks`) carry it in the ``X-Ragbridge-Tag`` header."""
        token = _CURRENT_TAG.set((backend, metric, case_id))
        try:
            yield
        finally:
            _CURRENT_TAG.reset(token)

    @staticmethod
    def current_tag() -> Optional[Triple]:
        """The (backend, metric, case_id) of the innermost :meth:`tag_scope` of this context, or None."""
        return _CURRENT_TAG.get()

    @staticmethod
    def httpx_event_hooks() -> dict[str, list]:
        """``httpx.Client(event_hooks=...)``: adds the X-Ragbridge-Tag header from ``tag_scope``."""

        def add_tag(request: httpx.Request) -> None:
            triple = _CURRENT_TAG.get()
            if triple is not None:
                request.headers[TAG_HEADER] = tag_header_value(triple)

        return {"request": [add_tag]}

    @staticmethod
    def async_httpx_event_hooks() -> dict[str, list]:
        """``httpx.AsyncClient(event_hooks=...)``: as :meth:`httpx_event_hooks`, for async clients."""

        async def add_tag(request: httpx.Request) -> None:
            triple = _CURRENT_TAG.get()
            if triple is not None:
                request.headers[TAG_HEADER] = tag_header_value(triple)

        return {"request": [add_tag]}

    def usage(self, backend: Optional[str] = None, metric: Optional[str] = None,
              case_id: Optional[str] = None) -> Usage:
        """Summed over the triples matching every argument that is not None."""
        if backend is not None and metric is not None and case_id is not None:  # one score's: no scan
            with self._lock:
                v = self._usage.get((backend, metric, case_id))
                return Usage(*v) if v is not None else Usage()
        total = Usage()
        with self._lock:
            items = [(k, list(v)) for k, v in self._usage.items()]
        for (b, m, c), v in items:
            if backend is not None and b != backend:
                continue
            if metric is not None and m != metric:
                continue
            if case_id is not None and c != case_id:
                continue
            total = total + Usage(*v)
        return total

    def forget(self, backend: str, metric: Optional[str] = None, case_id: Optional[str] = None) -> int:
        """Drop from the cache every response served for this (backend, metric, case) in this run, and
        store none for it from now on. Returns the number of distinct requests served for it (their
        answers dropped, or not to be stored when they arrive).

        The runner calls it when a score fails, so a malformed answer that made a library fail is
        asked for again on the next run instead of being replayed from the cache forever, whatever
        the order of arrival: an answer to a request of that score still in flight (a library's
        concurrent calls for one case) is not stored when it arrives. The mark and the store are
        checked under one lock, so every answer is either dropped here or never stored.
        """
        triple: Triple = (backend, metric, case_id)
        with self._lock:
            self._failed.add(triple)
            entries = self._served.pop(triple, set())
        if not entries or self._cache is None:
            return 0
        return self._cache.delete({v for k, v in entries if k == "key"},
                                  {v for k, v in entries if k == "raw"})

    def _attribute(self, triple: Triple, entry: tuple[str, str]) -> None:
        """Remember that this cache entry was served for ``triple`` (what :meth:`forget` drops)."""
        with self._lock:
            if triple not in self._failed:
                self._served.setdefault(triple, set()).add(entry)

    def usage_by_triple(self) -> dict[Triple, Usage]:
        with self._lock:
            return {k: Usage(*v) for k, v in self._usage.items()}

    # -- serving: what the loopback handler (server.py) and the transports (transport.py) call -----
    def route(self, path: str, headers: Mapping[str, str],
              scope: Optional[Triple] = None) -> "tuple[str, Triple] | Result":
        """The endpoint and the (backend, metric, case_id) a request is counted under, or the error.

        Attribution, strongest first: the ``X-Ragbridge-Tag`` header (looked up case-insensitively
        in ``headers``), the ``tag_scope`` the request was made in (in-process transports only), the
        path tag of ``base_url(...)``."""
        if self._closing.is_set():
            return Result(503, error_body("ragbridge judge gateway is shut down"), cache="off", counted=False)
        tag_header = headers.get(TAG_HEADER)
        parts = [p for p in path.split("?", 1)[0].split("/") if p]
        triple: Triple = (None, None, None)
        if len(parts) >= 2 and parts[0] == "t":
            triple = self._tags.get(parts[1], triple)
            parts = parts[2:]
        if tag_header:
            triple = _parse_tag_header(tag_header)
        elif scope is not None:
            triple = scope
        if parts and parts[0] == "v1":
            parts = parts[1:]
        endpoint = "/".join(parts)
        if endpoint not in ENDPOINTS:
            return Result(404, error_body(f"ragbridge judge gateway: no such endpoint /{endpoint}",
                                          "invalid_request_error"), cache="off", counted=False)
        return endpoint, triple

    def answer(self, method: str, endpoint: str, raw: bytes, triple: Triple, *, started: float) -> Result:
        """Serve one routed request (cache, upstream, retries), count it and log it to the audit log,
        ``started`` being the ``time.perf_counter()`` of its arrival.

        Both happen before the caller replies: ``usage()`` is current once the client has its answer,
        and the log is in the order clients got their answers."""
        try:
            res = self._serve(method, endpoint, raw, triple)
        except Exception as exc:  # a gateway bug must reach the library as an error, not a hang
            res = Result(500, self._redact(error_body(
                f"ragbridge judge gateway internal error: {type(exc).__name__}: {exc}")), cache="off",
                json_ok=True)
        if not self.stub_detected and res.status == 200 and STUB_MARKER in res.body:
            self.stub_detected = True
        if res.counted:
            self._account(triple, res)
            self._audit(triple, endpoint, raw, res, time.perf_counter() - started)
        return res

    def transport(self) -> "JudgeTransport":
        """``httpx.Client(transport=gw.transport())``: requests go to this gateway in this process."""
        return JudgeTransport(self)

    def async_transport(self) -> "AsyncJudgeTransport":
        """``httpx.AsyncClient(transport=gw.async_transport())``: as :meth:`transport`, for async clients
        (the gateway's work runs on its own worker threads, never on the event loop)."""
        return AsyncJudgeTransport(self)

    # -- preflight ------------------------------------------------------------------------------
    def preflight(self) -> dict[str, Any]:
        """Check, before any case is scored, that the judge can answer. Raises JudgeUnavailable /
        JudgeConfigError with a one-line message; returns what was checked."""
        cfg = self.config
        url = self._upstream_public
        if cfg.cache_mode == "read-only":
            if cfg.cache_path is None or not Path(cfg.cache_path).is_file():
                raise JudgeUnavailable(
                    f"judge cache_mode is read-only but there is no recorded cache at {cfg.cache_path}: "
                    f"record one with cache_mode = \"read-write\" first (or set cache_path)")
            return {"mode": "read-only", "endpoint": url, "upstream_checked": False}
        checked = self._preflight(self._chat)
        if self._embeddings != self._chat:
            checked["embeddings"] = self._preflight(self._embeddings)
        return checked

    def _preflight(self, ep: Endpoint) -> dict[str, Any]:
        cfg = self.config
        url = ep.public_url
        key = (os.environ.get(ep.key_env) or None) if ep.key_env else None
        if not key and ep.key_env and not ep.is_local:
            raise JudgeConfigError(
                f"judge API key missing: environment variable {ep.key_env} is not set, and the judge at "
                f"{url} needs it; set it, or replay a recorded cache with cache_mode = \"read-only\"")
        timeout = min(cfg.timeout, 10.0)
        try:
            with httpx_client(cfg, ep, 1) as client:
                r = client.get(ep.target("models"), headers=ep.headers(key, "GET"), timeout=timeout)
        except httpx.TimeoutException:
            raise JudgeUnavailable(
                f"judge endpoint {url} did not answer within {timeout:g} s: check that the server is up "
                f"and reachable from here") from None
        except httpx.TransportError as exc:
            text = str(exc)
            if re.search(r"refused|Errno 111|Errno 61", text, re.I):
                cause = "connection refused"
                hint = "check that the server is running and that the port in base_url is right"
            elif re.search(r"CERTIFICATE_VERIFY_FAILED|certificate verify", text, re.I):
                cause = "its TLS certificate is not trusted"
                hint = "set SSL_CERT_FILE to the CA bundle that signed it, or check base_url"
            elif re.search(r"name or service|nodename|getaddrinfo|Errno -[235]|resolve", text, re.I):
                cause = "host name does not resolve"
                hint = "check the host in base_url and your DNS / network"
            else:
                cause = type(exc).__name__
                hint = "check base_url and your network"
            raise JudgeUnavailable(f"judge endpoint {url} is unreachable ({cause}): {hint}") from None
        if r.status_code in (401, 403) or (r.status_code == 400 and b"api key" in r.content.lower()):
            raise JudgeUnavailable(
                f"judge endpoint {url} rejected the API key from {ep.key_env or 'nowhere'} "
                f"(HTTP {r.status_code}): "
                f"check the key" + (" and api_version" if ep.api == "azure" else ""))
        listed = None
        stub = r.headers.get("x-ragbridge-stub") == "1"
        if stub:
            self.stub_detected = True
        if r.status_code == 200:
            with contextlib.suppress(Exception):
                listed = cfg.model in {m.get("id") for m in r.json().get("data", [])}
        return {"mode": cfg.cache_mode, "endpoint": url, "upstream_checked": True,
                "models_status": r.status_code, "model_listed": listed, "key_set": bool(key), "stub": stub}

    # -- serving --------------------------------------------------------------------------------
    def _redact(self, data: bytes) -> bytes:
        for kb in self._key_bytes:
            if kb in data:
                data = data.replace(kb, b"[REDACTED]")
        return data

    def _serve(self, method: str, endpoint: str, raw: bytes, triple: Triple) -> Result:
        cfg = self.config
        if method == "GET":
            if endpoint != "models":
                return Result(405, error_body(f"use POST for /{endpoint}", "invalid_request_error"),
                              counted=False)
            if cfg.cache_mode == "read-only":
                data = {"object": "list", "data": [{"id": m, "object": "model", "owned_by": "ragbridge-cache"}
                                                   for m in filter(None, [cfg.model, cfg.embedding_model])]}
                return Result(200, json.dumps(data).encode(), cache="readonly", counted=False)
            res = self._forward("GET", endpoint, b"")
            res.cache, res.counted = "bypass", False
            return res
        if endpoint == "models":
            return Result(405, error_body("use GET for /models", "invalid_request_error"), counted=False)
        cache = self._cache
        use_cache = cfg.cache_mode != "off" and (cache is not None or cfg.cache_mode == "read-only")
        repeat = split_repeat(triple[2])[1]
        # repeat r > 0 of a judged score is a distinct call, filed under a key of its own
        path = "/" + endpoint + (f"#repeat={repeat}" if repeat else "")
        raw_key = None
        if use_cache and cache is not None:
            # Fast path: byte-identical request bodies map to the canonical key without parsing.
            raw_key = JudgeCache.raw_key(self._endpoint(endpoint).identity, path, raw)
            self._attribute(triple, ("raw", raw_key))
            hit = cache.get_raw(raw_key)
            if hit is not None:
                return Result(hit[0], hit[1], cache="hit", json_ok=True, request_json=True)
        try:
            body = json.loads(raw)
        except ValueError:
            return Result(400, error_body("ragbridge judge gateway: request body is not valid JSON",
                                            "invalid_request_error"), cache="off")
        if isinstance(body, dict) and body.get("stream"):
            res = self._call_upstream(endpoint, raw, body, triple, repeat, stream=True)
            res.cache, res.request_json = res.cache if res.cache == "budget" else "bypass", True
            return res
        if not use_cache:
            res = self._call_upstream(endpoint, raw, body, triple, repeat)
            res.cache, res.request_json = res.cache if res.cache == "budget" else "off", True
            return res
        key = JudgeCache.key(self._endpoint(endpoint).identity, path, body)
        self._attribute(triple, ("key", key))
        hit = self._stored(key)
        if hit is not None:
            if raw_key is not None and cache is not None:
                cache.add_alias(raw_key, key)
            return Result(hit[0], hit[1], cache="hit", json_ok=True, request_json=True)
        if cfg.cache_mode == "read-only":
            model = body.get("model") if isinstance(body, dict) else None
            return Result(400, error_body(
                f"ragbridge judge cache miss in read-only mode: no recorded response for this /{endpoint} "
                f"request (model {model!r}); re-record the cache with cache_mode = \"read-write\" "
                f"and a key, or check that the judge settings match the recording",
                "invalid_request_error", "ragbridge_cache_miss"), cache="readonly-miss", request_json=True)
        # read-write: one upstream call per distinct request in flight (single flight).
        with self._lock:
            waiter = self._inflight.get(key)
            if waiter is None:
                self._inflight[key] = threading.Event()
        if waiter is not None:
            waiter.wait(self.config.client_timeout())
            hit = self._stored(key)
            if hit is not None:
                return Result(hit[0], hit[1], cache="hit", json_ok=True, request_json=True)
            return self._forward_and_store(endpoint, raw, body, key, raw_key, triple, repeat)
        try:
            # the same request may have been answered between the first look and this one's turn
            hit = self._stored(key)
            if hit is not None:
                return Result(hit[0], hit[1], cache="hit", json_ok=True, request_json=True)
            return self._forward_and_store(endpoint, raw, body, key, raw_key, triple, repeat)
        finally:
            with self._lock:
                ev = self._inflight.pop(key, None)
            if ev is not None:
                ev.set()

    def _stored(self, key: str) -> Optional[tuple[int, bytes]]:
        """The answer recorded for ``key``: in the cache, or (a dry run) among the simulated ones."""
        hit = self._cache.get(key) if self._cache is not None else None
        if hit is None and self.simulate is not None:
            hit = self._simulated.get(key)
        return hit

    def _forward_and_store(self, endpoint: str, raw: bytes, body: Any, key: str, raw_key: Optional[str],
                           triple: Triple, repeat: int = 0) -> Result:
        res = self._call_upstream(endpoint, raw, body, triple, repeat)
        res.request_json = True
        cache = self._cache
        if self.simulate is not None:
            if 200 <= res.status < 300:
                self._simulated[key] = (res.status, res.body)
            return res
        if 200 <= res.status < 300 and cache is not None:
            model = body.get("model") if isinstance(body, dict) else None
            with self._lock:  # against forget(): the score may have failed while this call was out
                if triple not in self._failed:
                    cache.put(key, "/" + endpoint, model if isinstance(model, str) else None, res.status,
                              res.body, raw_key=raw_key)
        return res

    def _forward(self, method: str, endpoint: str, raw: bytes, *, stream: bool = False,
                 repeat: int = 0, model: Optional[str] = None) -> Result:
        if self._closing.is_set() or self._forwarder is None:
            return Result(503, error_body("ragbridge judge gateway is shut down"), attempts=0)
        upstream = self._upstreams[self._endpoint(endpoint)]
        res = self._forwarder.forward(upstream, method, endpoint, raw, model, stream=stream,
                                      extra_headers={REPEAT_HEADER: str(repeat)} if repeat else None)
        res.body = self._redact(res.body)
        return res

    # -- accounting and audit -------------------------------------------------------------------
    def _account(self, triple: Triple, res: Result) -> None:
        prompt = completion = 0
        if res.parsed is not None:
            prompt, completion = _usage_of(res.parsed)
        with self._lock:
            u = self._usage.get(triple)
            if u is None:
                u = self._usage[triple] = [0] * (_N_USAGE - 3) + [0.0, 0, 0]
            if res.cache == "hit":
                u[1] += 1
                return
            if res.cache == "budget":
                u[8] += 1
                return
            if res.attempts > 0:
                u[0] += 1
                u[4] += res.attempts - 1
                if res.cost is not None:
                    u[6] += res.cost
                elif self.config.prices:  # with no table at all, nothing is priced: not counted
                    u[7] += 1
            u[2] += prompt
            u[3] += completion
            if not 200 <= res.status < 300:
                u[5] += 1

    def _audit(self, triple: Triple, endpoint: str, raw: bytes, res: Result, seconds: float) -> None:
        if self._audit_fh is None:
            return
        now = time.time()
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1000):03d}Z"
        prompt, completion = _usage_of(res.parsed) if res.cache != "hit" else (0, 0)
        case_id, repeat = split_repeat(triple[2])
        repeat_field = f'"repeat": {repeat}, ' if repeat else ""
        line = (f'{{"time": "{stamp}", "backend": {_js(triple[0])}, "metric": {_js(triple[1])}, '
                f'"case_id": {_js(case_id)}, {repeat_field}"path": {_js("/" + endpoint)}, '
                f'"status": {res.status}, '
                f'"cache_hit": {"true" if res.cache == "hit" else "false"}, "cache": "{res.cache}", '
                f'"attempts": {res.attempts}, "seconds": {seconds:.6f}, '
                f'"prompt_tokens": {prompt}, "completion_tokens": {completion}, '
                f'"request_key": "{self._request_key(triple, endpoint, raw)}", '
                f'"request_bytes": {len(raw)}, "response_sha256": "{hashlib.sha256(res.body).hexdigest()}", '
                f'"response_bytes": {len(res.body)}}}').encode("utf-8")
        if not 200 <= res.status < 300:
            # The evidence of a failed call, embedded as the JSON text it is (no re-encoding); raw
            # newlines in JSON can only be whitespace, so flattening them keeps one record per line.
            line = b"".join((line[:-1], b', "request": ', _json_or_string(raw, trusted=res.request_json),
                             b', "response": ', _json_or_string(res.body, trusted=res.json_ok), b"}"))
            line = line.replace(b"\r", b" ").replace(b"\n", b" ")
        line = self._redact(line) + b"\n"
        with self._audit_lock:
            if self._audit_fh is not None:
                self._audit_fh.write(line)  # flushed every AUDIT_FLUSH_SECONDS and on close

    def _request_key(self, triple: Triple, endpoint: str, raw: bytes) -> str:
        repeat = split_repeat(triple[2])[1]
        path = "/" + endpoint + (f"#repeat={repeat}" if repeat else "")
        return JudgeCache.raw_key(self._endpoint(endpoint).identity, path, raw)

    def _flush_audit_periodically(self) -> None:
        while not self._closing.wait(AUDIT_FLUSH_SECONDS):
            with self._audit_lock:
                if self._audit_fh is None:
                    return
                self._audit_fh.flush()


def _stdlib_thread_pool() -> type:
    """The standard library's ThreadPoolExecutor, even after a backend library's import replaced
    ``concurrent.futures.ThreadPoolExecutor`` with a subclass that records a stack on every submit."""
    cls = concurrent.futures.thread.ThreadPoolExecutor
    while cls.__module__ != "concurrent.futures.thread" and cls.__bases__:
        cls = cls.__bases__[0]
    return cls



def _is_loopback(host: str) -> bool:
    return host in ("localhost", "::1") or host.startswith("127.")


def _netloc_host(host: str) -> str:
    """``host`` as it appears in a URL's authority (an IPv6 address in brackets)."""
    return f"[{host}]" if ":" in host else host


def _js(value: Optional[str]) -> str:
    return "null" if value is None else json.dumps(value, ensure_ascii=False)


def _json_or_string(data: bytes, *, trusted: bool = False) -> bytes:
    """``data`` itself when it is a JSON document, else ``data`` as a JSON string."""
    if not data:
        return b"null"
    if not trusted:
        try:
            json.loads(data)
        except ValueError:
            return json.dumps(data.decode("utf-8", "replace"), ensure_ascii=False).encode("utf-8")
    return data
