"""The judge gateway: :class:`JudgeGateway`, the one place every backend's judge calls go through.

The real key (read from the environment variable named by ``JudgeConfig.api_key_env``) never enters
a library object or file; the gateway adds it when it forwards a request to the real endpoint.
A request comes in through one of two doors (the in-process transports of
:mod:`ragbridge.judge.transport`, or the loopback socket of :mod:`ragbridge.judge.server`), which
both call :meth:`JudgeGateway.route` (the endpoint and the :class:`~ragbridge.judge.tag.CallTag`,
read once) and :meth:`JudgeGateway.answer`. An answer then passes a small pipeline, each step in a
module of its own:

* :class:`~ragbridge.judge.store.ResponseStore`: the answer recorded for the request (the SQLite
  cache, keyed by the full request, so a re-run of an unchanged suite makes no calls and CI can
  replay a recorded cache with no key), one upstream call per distinct request in flight, a dry
  run's simulated answers, and ``forget`` (the answers of a score that failed are dropped and never
  stored, so a malformed answer is asked for again on the next run instead of being replayed);
* :class:`~ragbridge.judge.ledger.Ledger`: the budget (a call is reserved before it goes upstream;
  once it is spent a request that would go upstream is refused at once, HTTP 402, code
  ``ragbridge_budget_spent``, and :meth:`JudgeGateway.refused` tells the runner, which records the
  score as not run), prices, and usage per tag (:class:`~ragbridge.judge.ledger.Usage`);
* :class:`~ragbridge.judge.upstream.Forwarder`: the bound on requests in flight and the
  requests-per-minute limit (for every client of the gateway together, in-process or over its
  socket, the Ray executor's workers included), retries with backoff, in the upstream's dialect
  (:mod:`ragbridge.judge.dialect`), within each attempt's deadline and reply size;
* the redaction of every form of the key (:mod:`ragbridge.judge.redact`) on everything that comes
  back, and :class:`~ragbridge.judge.audit.AuditLog`, one line per call.

With ``simulate`` set (a dry run), a cache miss is answered by ``simulate(endpoint, body)`` instead of
an upstream call, counted as the call it would be, and nothing is stored. Answers from ragbridge's
stub judge are noticed (``stub_detected``), so runs can be labelled.

After its own retries the gateway passes the last error status and body to the library with
``x-should-retry: false``, so the OpenAI SDK does not multiply the retries; the library raises and
the backend records that score's error. A client that must not wait forever should use a timeout
of at least ``JudgeConfig.client_timeout()``.
"""

from __future__ import annotations

import concurrent.futures
import concurrent.futures.thread
import secrets
import threading
import time
from pathlib import Path
from typing import Any, Mapping, Optional

from .audit import AuditLog
from .client import JudgeClient
from .config import BACKOFF_BASE, BACKOFF_CAP, JudgeConfig, JudgeError
from .dialect import endpoints_of
from .pipeline import Pipeline
from .ledger import Budget, Ledger, Usage
from .redact import Redactor
from .server import LoopbackSocket, Result, error_body, netloc_host
from .store import ResponseStore
from .tag import TAG_HEADER, CallTag
from .transport import AsyncJudgeTransport, JudgeTransport
from .upstream import Forwarder, Upstream

__all__ = ["JudgeGateway", "STUB_MARKER", "ENDPOINTS"]

STUB_MARKER = b'"system_fingerprint": "ragbridge-stub"'  # what ragbridge.testing's stub judge answers with
ENDPOINTS = ("chat/completions", "responses", "embeddings", "models", "completions")


class JudgeGateway(JudgeClient):
    """The OpenAI-compatible gateway in front of the real judge (see the module docstring).

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

    def __init__(self, config: JudgeConfig, audit_log: Optional[Path] = None, *,
                 host: str = "127.0.0.1", structured_output: Optional[Mapping[str, str]] = None) -> None:
        super().__init__()
        self.config = config
        #: the backends that ask for a JSON object in a mode of their own (their option
        #: ``structured_output``), by name: the others ask as ``config.structured_output`` says
        self.structured_output = dict(structured_output or {})
        #: the socket's address (settable until the socket opens; see the class docstring)
        self.host = host
        self.audit_log = Path(audit_log) if audit_log is not None else None
        self._endpoints = endpoints_of(config)
        self._closing = threading.Event()
        self._listen_lock = threading.Lock()
        self._executor: Optional[concurrent.futures.ThreadPoolExecutor] = None
        self._pipeline: Optional[Pipeline] = None
        self._audit: Optional[AuditLog] = None
        self.redactor = Redactor()
        self.ledger = Ledger(config)
        #: what a request on the loopback socket must present (memory only; see ragbridge.judge.server)
        self._secret = secrets.token_urlsafe(32)
        self._socket = LoopbackSocket(self, self._secret.encode("ascii"))
        #: True once an answer (from upstream or the cache) came from ragbridge's stub judge:
        #: run outputs must then be labelled as stub scores.
        self.stub_detected = False
        #: requests that came over the loopback socket rather than through a transport (diagnostics)
        self.http_requests = 0
        #: a dry run: ``simulate(endpoint, body) -> answer`` answers what the cache does not hold
        self.simulate: Optional[Any] = None

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> "JudgeGateway":
        if self._executor is not None:
            return self
        cfg = self.config
        self._closing.clear()
        forwarder = Forwarder(cfg, self._closing)
        forwarder.backoff_base, forwarder.backoff_cap = self.backoff_base, self.backoff_cap
        upstreams = {ep: Upstream(ep, cfg, with_key=cfg.cache_mode != "read-only")
                     for ep in dict.fromkeys(self._endpoints)}
        self.redactor.keys([secret for u in upstreams.values() for secret in u.secrets])
        store = None
        if cfg.cache_mode != "off" and (cfg.cache_path is not None or self.simulate is not None):
            store = ResponseStore(cfg.cache_path, read_only=cfg.cache_mode == "read-only",
                                  simulated=self.simulate is not None)
        self._pipeline = Pipeline(cfg, self._endpoints, store=store, ledger=self.ledger,
                                  forwarder=forwarder, upstreams=upstreams, redactor=self.redactor,
                                  simulate=self.simulate, closing=self._closing,
                                  mode_for=self.structured_output_for)
        if self.audit_log is not None:
            self._audit = AuditLog(self.audit_log, self.redactor).open()
        # Worker threads of the async transport: enough for every request the libraries may have
        # open (the upstream bound is the Forwarder's, not the pool size).
        self._executor = _stdlib_thread_pool()(max_workers=4 * cfg.max_concurrency + 8,
                                               thread_name_prefix="ragbridge-judge")
        return self

    def close(self) -> None:
        self._closing.set()
        with self._listen_lock:
            self._socket.close()
        # Upstream requests in flight end now (their connections are shut down), so the worker
        # threads finish at once instead of waiting for the judge's answers.
        pipeline = self._pipeline
        if pipeline is not None:
            for upstream in pipeline.upstreams.values():
                upstream.close()
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True, cancel_futures=True)
        self._pipeline = None
        try:
            if pipeline is not None:
                pipeline.close()  # the cache's last answers written: CacheUnwritable if they cannot be
        finally:
            audit, self._audit = self._audit, None
            if audit is not None:
                audit.close()
            self.ledger.close()
            self.redactor.keys([])

    def __enter__(self) -> "JudgeGateway":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _listen(self) -> int:
        """Open the loopback socket (once, on the first request for a socket URL); returns its port."""
        with self._listen_lock:
            self.require_started()
            if self._closing.is_set():
                raise JudgeError("the judge gateway is closing: no new socket")
            return self._socket.open(self.host)

    @property
    def port(self) -> Optional[int]:
        """The socket's port (None until it opens)."""
        return self._socket.port

    @property
    def listening(self) -> bool:
        """Whether the loopback socket is open (it is only once a socket URL was asked for)."""
        return self._socket.listening

    # -- the client interface -------------------------------------------------------------------
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
        return f"http://{netloc_host(self.host.strip('[]'))}:{port}"

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

    def transport(self) -> JudgeTransport:
        """``httpx.Client(transport=gw.transport())``: requests go to this gateway in this process."""
        return JudgeTransport(self)

    def async_transport(self) -> AsyncJudgeTransport:
        """``httpx.AsyncClient(transport=gw.async_transport())``: as :meth:`transport`, for async clients
        (the gateway's work runs on its own worker threads, never on the event loop)."""
        return AsyncJudgeTransport(self)

    # -- what the runner reads ------------------------------------------------------------------
    def set_budget(self, max_calls: Optional[int] = None, max_cost: Optional[float] = None,
                   spent_calls: int = 0, spent_cost: float = 0.0) -> Budget:
        """Limit the upstream calls from now on (see `Ledger.set_budget`)."""
        return self.ledger.set_budget(max_calls, max_cost, spent_calls, spent_cost)

    @property
    def budget(self) -> Optional[Budget]:
        return self.ledger.budget

    @property
    def budget_spent(self) -> bool:
        return self.ledger.budget is not None and self.ledger.budget.spent

    def refused(self, backend: str, metric: Optional[str] = None, case_id: Optional[str] = None,
                repeat: int = 0) -> bool:
        """Whether a request of this score was refused because the budget was spent."""
        return self.ledger.refused(CallTag(backend, metric, case_id, repeat))

    def usage(self, backend: Optional[str] = None, metric: Optional[str] = None,
              case_id: Optional[str] = None, repeat: Optional[int] = None) -> Usage:
        """Summed over the tags matching every argument that is not None."""
        return self.ledger.usage(backend, metric, case_id, repeat)

    def usage_by_tag(self) -> dict[CallTag, Usage]:
        return self.ledger.by_tag()

    def structured_output_for(self, backend: Optional[str]) -> str:
        """How ``backend``'s requests for a JSON object are sent (`ragbridge.judge.structured.MODES`):
        its own mode, else the judge's."""
        return self.structured_output.get(backend or "") or self.config.structured_output

    def failure(self, backend: str, metric: Optional[str] = None, case_id: Optional[str] = None,
                repeat: int = 0) -> Optional[tuple[str, str]]:
        """Why the first judge call of this score that failed did: (cause, the words of the judge or
        the gateway), or None (`ragbridge.judge.causes`)."""
        return self.ledger.failure(CallTag(backend, metric, case_id, repeat))

    def forget(self, backend: str, metric: Optional[str] = None, case_id: Optional[str] = None,
               repeat: int = 0) -> int:
        """Drop from the cache every response served for this score in this run, and store none for
        it from now on. Returns the number of distinct requests served for it.

        The runner calls it when a score fails, so a malformed answer that made a library fail is
        asked for again on the next run instead of being replayed from the cache forever, whatever
        the order of arrival: an answer to a request of that score still in flight (a library's
        concurrent calls for one case) is not stored when it arrives."""
        store = self._pipeline.store if self._pipeline is not None else None
        return store.forget(CallTag(backend, metric, case_id, repeat)) if store is not None else 0

    def preflight(self, probes: Any = None) -> dict[str, Any]:
        """Check, before any case is scored, that the judge can answer (`ragbridge.judge.preflight`;
        ``probes``: the model requests it may send, a `ragbridge.judge.ledger.Probes`)."""
        from .preflight import preflight

        checked = preflight(self.config, self._endpoints, probes)
        if checked.get("stub"):
            self.stub_detected = True
        return checked

    # -- the door: what the loopback handler and the transports call ------------------------------
    def route(self, path: str, headers: Mapping[str, str],
              scope: Optional[CallTag] = None) -> "tuple[str, CallTag] | Result":
        """The endpoint and the tag a request is counted under, or the error.

        Attribution, strongest first: the ``X-Ragbridge-Tag`` header (looked up case-insensitively
        in ``headers``), the ``tag_scope`` the request was made in (in-process transports only), the
        path tag of ``base_url(...)``."""
        if self._closing.is_set():
            return Result(503, error_body("ragbridge judge gateway is shut down"), cache="off", counted=False)
        parts = [p for p in path.split("?", 1)[0].split("/") if p]
        tag = CallTag()
        if len(parts) >= 2 and parts[0] == "t":
            tag = self.tag_of(parts[1]) or tag
            parts = parts[2:]
        header = headers.get(TAG_HEADER)
        if header:
            tag = CallTag.from_header(header)
        elif scope is not None:
            tag = scope
        if parts and parts[0] == "v1":
            parts = parts[1:]
        endpoint = "/".join(parts)
        if endpoint not in ENDPOINTS:
            return Result(404, error_body(f"ragbridge judge gateway: no such endpoint /{endpoint}",
                                          "invalid_request_error"), cache="off", counted=False)
        return endpoint, tag

    def answer(self, method: str, endpoint: str, raw: bytes, tag: CallTag, *, started: float) -> Result:
        """Serve one routed request, count it and log it to the audit log, ``started`` being the
        ``time.perf_counter()`` of its arrival. Both happen before the caller replies: ``usage()`` is
        current once the client has its answer, and the log is in the order clients got their
        answers."""
        pipeline = self._pipeline
        try:
            if pipeline is None:
                raise JudgeError("the judge gateway is not started")
            res = pipeline.serve(method, endpoint, raw, tag)
        except Exception as exc:  # a gateway bug must reach the library as an error, not a hang
            res = Result(500, self.redactor(error_body(
                f"ragbridge judge gateway internal error: {type(exc).__name__}: {exc}")), cache="off",
                json_ok=True)
        if not self.stub_detected and res.status == 200 and STUB_MARKER in res.body:
            self.stub_detected = True
        if res.counted:
            tokens = res.tokens if res.cache != "hit" else (0, 0)
            ok = 200 <= res.status < 300
            failure = None
            if not ok:
                from .structured import error_text

                cause = res.cause or {"budget": "budget", "readonly-miss": "cache_miss"}.get(res.cache,
                                                                                           "rejected")
                failure = (cause, error_text(res.body)[:500])
            self.ledger.enter(tag, cache=res.cache, attempts=res.attempts, ok=ok, tokens=tokens,
                              cost=res.cost, failure=failure)
            if self._audit is not None and pipeline is not None:
                self._audit.write(tag, endpoint, raw, res, time.perf_counter() - started,
                                  pipeline.request_key(endpoint, tag, raw), tokens)
        return res

def _stdlib_thread_pool() -> type:
    """The standard library's ThreadPoolExecutor, even after a backend library's import replaced
    ``concurrent.futures.ThreadPoolExecutor`` with a subclass that records a stack on every submit."""
    cls = concurrent.futures.thread.ThreadPoolExecutor
    while cls.__module__ != "concurrent.futures.thread" and cls.__bases__:
        cls = cls.__bases__[0]
    return cls
