"""A deterministic OpenAI-compatible stub judge on 127.0.0.1, with fault injection.

    with StubJudge(latency=0.05, fault_rate_429=0.1) as stub:
        client = openai.OpenAI(base_url=stub.base_url, api_key="anything")

Endpoints: ``POST /v1/chat/completions`` (plain prompts, ``response_format`` ``json_object`` and
``json_schema``, ``tools``/``tool_choice``, ``logprobs``), ``POST /v1/responses`` (``output_text`` and
``text.format`` json_schema), ``POST /v1/embeddings`` (hashed bag-of-words vectors, L2-normalised;
``encoding_format`` float or base64) and ``GET /v1/models``; the same paths without ``/v1`` work too. Any
key and any model name are accepted (``GET /models`` lists ``models`` and says so with the header
``X-Ragbridge-Stub-Models: any``). Under a path prefix the stub speaks one real server's request dialect
instead (``stub.url + "/azure"``, ``/llama-cpp-python/v1``, ``/vllm/v1``...): its paths, where its key
goes, what a wrong request gets, as :mod:`ragbridge.testing.dialects` says. Under ``/hostile/<mode>/v1``
it is a judge that misbehaves on purpose: drips, floods or delays its answer, lies about its usage, echoes
the key in every encoding and charset, repeats a key of its JSON, sends a lone surrogate, compresses
(:mod:`ragbridge.testing.hostile`). What the answers say is decided by :mod:`ragbridge.stub.responders`
(:mod:`ragbridge.stub.answers` shapes them).

Every answer is labelled: ``model`` is ``ragbridge-stub/<requested model>``, ``system_fingerprint`` is
``ragbridge-stub`` and the header ``X-Ragbridge-Stub: 1`` is set, so run outputs can say their scores came
from a stub. ``GET /models`` also says what of its settings changes its answers
(``X-Ragbridge-Stub-Settings``, `StubJudge.settings`): a judge's identity is that and not the port, which a
stub started again does not keep (`ragbridge.judge.config.identity_url`).

Faults, drawn per request from a RNG seeded with ``seed`` (so a given arrival order always gets the same
faults), queued explicitly with :meth:`StubJudge.inject`, or given to every request that holds a text with
:meth:`StubJudge.fail_when` (one case's requests):

* ``429``: HTTP 429 with ``Retry-After: <retry_after>`` (default 0);
* ``500``: HTTP 500 with an OpenAI-style error body;
* ``timeout``: holds the connection for ``timeout_seconds`` (default 30) or until the stub closes,
  then answers normally (the client has usually given up by then);
* ``malformed``: HTTP 200 whose message content (or ``output_text``) is broken JSON;
* ``garbage``: HTTP 200 whose body is not JSON at all (a transport-level fault).

``noise`` (with ``noise_seed``) makes the judge noisy on purpose, a test device for what ragbridge
measures about judge noise: each verdict flips, and each level on a scale moves to a neighbour, with
probability ``noise``, drawn per request and per repeat (the ``X-Ragbridge-Repeat`` header the
gateway sends), so repeats of one request differ while a replay of one repeat does not (see
:mod:`ragbridge.stub.responders`).

``latency`` is the response time of every POST (a refusal's too): the stub computes its answer, then
sleeps for whatever is left of ``latency``.

``log`` (a file path; ``--log`` on the command line) appends one JSON line per answered POST:
``route``, ``start`` and ``end`` (Unix time), ``in_flight`` (POSTs in flight when it arrived, itself
included), ``status`` and ``response_sha256`` (of the body sent), so a benchmark can tell how many
calls were in flight at once and which call was answered when.

For tests that need a defined order of events rather than a race, :meth:`StubJudge.hold` keeps every
POST that arrives in flight (received, recorded, counted in ``in_flight``) until :meth:`StubJudge.release`,
and :meth:`StubJudge.wait_for_requests` waits until a number of POSTs have arrived.

Run it in the foreground with ``python -m ragbridge.testing.stub_judge --port 8808 --latency 0.1``.

Size: one request handler answers as every dialect and hostile mode of a real server does (a busy
slot, a refused mode, an echoed key), so that a test names the behaviour it needs by a mode and
never starts a server of its own.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import itertools
import json
import random
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from ragbridge.judge import FastRequestHandler
from ragbridge.judge.server import BadRequest, LoopbackServer, stop_server
from ragbridge.stub import answers
from ragbridge.stub.answers import CREATED, EMBED_DIM, STUB_FINGERPRINT, embed  # noqa: F401 (re-exported)
from ragbridge.stub.responders import perturbed
from ragbridge.testing import hostile
from ragbridge.testing.dialects import DIALECTS, NO_LISTING, Rejected, listing
from ragbridge.testing.dialects import route as route_dialect

__all__ = ["StubJudge", "StubJudgeProcess", "StubRequest", "serve", "FAULT_KINDS", "embed", "main"]

from ragbridge.testing.process import StubJudgeProcess  # noqa: E402  (kept importable from here)

FAULT_KINDS = ("429", "500", "timeout", "malformed", "garbage", "busy-500")
#: what llama.cpp's server answers a request it cannot take while it computes another (HTTP 500)
BUSY_500 = "context shift is not supported while another request is processing, try again"
#: the request headers a StubRequest keeps (where each dialect's key travels, the repeat)
_KEPT_HEADERS = frozenset({"authorization", "api-key", "x-api-key", "x-litellm-api-key", "x-goog-api-key",
                           "x-ragbridge-repeat", "helicone-auth", "cf-aig-authorization", "x-authorization",
                           "x-team", "accept-encoding"})


@dataclass
class StubRequest:
    """One request the stub received (for tests)."""

    method: str
    path: str
    body: Any
    fault: Optional[str] = None  # an injected fault, or "rejected" (a dialect refused the request)
    time: float = field(default_factory=time.time)
    headers: dict[str, str] = field(default_factory=dict)  # the key's and the repeat's (lowercase)
    dialect: Optional[str] = None  # the path prefix it came in under, if any


class _Server(LoopbackServer):
    pass


class _Handler(FastRequestHandler):
    server_version = "ragbridge-stub"
    stub: "StubJudge"  # set on the subclass

    def _send(self, status: int, payload: Any, headers: Optional[dict] = None,
              content_type: str = "application/json") -> None:
        if isinstance(payload, bytes):
            body = payload
        else:
            body = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        extra = [f"Content-Type: {content_type}", "X-Ragbridge-Stub: 1"]
        extra += [f"{k}: {v}" for k, v in (headers or {}).items()]
        self.write_response(status, body, extra)

    def _error(self, status: int, message: str, etype: str = "invalid_request_error",
               headers: Optional[dict] = None) -> None:
        error = {"message": message, "type": etype, "param": None, "code": None}
        self._send(status, {"error": error}, headers)

    def do_GET(self) -> None:  # noqa: N802
        self._dispatch("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._dispatch("POST")

    def _dispatch(self, method: str) -> None:
        """Route by the path's prefix: a dialect's (``/azure/...``, see :mod:`.dialects`) or none."""
        stub = self.stub
        try:
            raw = self.read_body() if method == "POST" else b""
        except BadRequest as exc:
            self.refuse(exc.status, json.dumps(_err(f"ragbridge stub: {exc}")).encode())
            return
        path, _, query = self.path.partition("?")
        headers = {k: v for k, v in self.headers.items() if k in _KEPT_HEADERS}
        if self.headers.get("Authorization"):
            stub.last_authorization = self.headers.get("Authorization")
        body: Any = None
        if method == "POST":
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                stub._record(StubRequest("POST", path, raw.decode("utf-8", "replace"), headers=headers))
                self._error(400, "ragbridge stub: request body is not valid JSON")
                return
        first, _, rest = path.lstrip("/").partition("/")
        mode = None
        if first == "hostile":
            mode, _, rest = rest.partition("/")
            if mode not in hostile.MODES:
                self._error(404, f"ragbridge stub: no hostile mode {mode!r}; "
                                 f"modes: {', '.join(hostile.MODES)}")
                return
            first, path = None, "/" + rest
        route = None
        if first in DIALECTS:
            outcome = route_dialect(first, method, "/" + rest, query, self.headers, body, stub.api_key,
                                    stub.models)
            if isinstance(outcome, Rejected):
                stub._record(StubRequest(method, path, body, fault="rejected", headers=headers,
                                         dialect=first))
                stub._sleep(stub.latency if method == "POST" else 0)
                self._send(outcome.status, outcome.payload)
                return
            route = outcome.route
            if outcome.model and isinstance(body, dict) and not body.get("model"):
                body["model"] = outcome.model
        else:
            first = None
            route = path.rstrip("/")
            if route.startswith("/v1/"):
                route = route[3:]
        if method == "GET":
            stub._record(StubRequest("GET", route, None, headers=headers, dialect=first))
            if route == "/models":
                self._models(first)
            elif route in ("", "/health"):
                self._send(200, {"status": "ok", "stub": STUB_FINGERPRINT})
            else:
                self._error(404, f"ragbridge stub: no route GET {route}")
            return
        self._post(route, body, raw, headers, first, mode)

    def _models(self, dialect: Optional[str]) -> None:
        """``GET /models``: as the server of ``dialect`` lists (`ragbridge.testing.dialects.listing`);
        without one, the stub's models, and the header saying that any other name is answered too."""
        stub = self.stub
        settings = {"X-Ragbridge-Stub-Settings": stub.settings}
        if not stub.lists_models:
            self._send(*NO_LISTING[dialect], settings)
        elif dialect is not None:
            self._send(200, listing(dialect, stub.models), settings)
        else:
            self._send(200, {"object": "list", "data": [
                {"id": m, "object": "model", "created": CREATED, "owned_by": STUB_FINGERPRINT}
                for m in stub.models]}, {**settings, "X-Ragbridge-Stub-Models": "any"})

    def _send_drip(self, body: bytes, interval: float, head: bool = False) -> None:
        def drip(data: bytes) -> Any:
            return (self.stub._sleep(interval) or data[i:i + 1] for i in range(len(data)))

        _hostile_send(self, drip(body), len(body), drip if head else None)

    def _send_huge(self, size: int) -> None:
        head = b'{"id": "huge", "object": "chat.completion", "choices": [{"index": 0, "message": ' \
               b'{"role": "assistant", "content": "'
        tail = b'"}, "finish_reason": "stop"}]}'
        fill = size - len(head) - len(tail)

        def parts() -> Any:
            yield head
            for at in range(0, fill, 1 << 16):
                yield b"a" * min(1 << 16, fill - at)
            yield tail

        _hostile_send(self, parts(), size)

    def _post(self, route: str, body: Any, raw: bytes, headers: dict, dialect: Optional[str],
              mode: Optional[str] = None) -> None:
        stub = self.stub
        fault = mode or stub._draw_fault(raw)
        in_flight = stub._enter()
        stub._record(StubRequest("POST", route, body, fault, headers=headers, dialect=dialect))
        t0 = time.monotonic()
        started = time.time()
        try:
            stub._released.wait()
            if fault == "one-slot":  # one request at a time, as a server started with one slot
                with stub.slot:
                    stub._sleep(stub.late_seconds)
                fault = None
            status, payload, reply_headers, content_type = 200, None, None, "application/json"
            if fault == "429":
                status, payload = 429, _err("ragbridge stub: rate limited (injected)", "rate_limit_error")
                reply_headers = {"Retry-After": _fmt_num(stub.retry_after)}
            elif fault in ("500", "same-500"):  # "500": named by a request id, as a real server's
                words = "this request fails" if fault == "same-500" else f"internal error (injected) {t0}"
                status, payload = 500, _err(f"ragbridge stub: {words}", "server_error")
            elif fault == "tool-only" and (refusal := hostile.tool_only_refusal(body)) is not None:
                status, payload = 400, _err(refusal)
            elif fault == "busy-500":
                status, payload = 500, _err(BUSY_500, "server_error")
            elif fault == "garbage":
                payload = b"<html>ragbridge stub: this is not JSON</html>"
            elif fault is not None and fault.startswith("echo-key"):
                if fault == "echo-key-each":
                    with stub._lock:
                        fault = hostile.ECHO_MODES[stub.echo_turn % len(hostile.ECHO_MODES)]
                        stub.echo_turn += 1
                status, payload, content_type = hostile.echo_key_answer(
                    fault, hostile.given_secrets(self.headers))
            elif fault == "huge":
                self._send_huge(stub.huge_bytes)
                return
            else:
                malformed = fault == "malformed"
                repeat = self.headers.get("x-ragbridge-repeat") or "0"
                with perturbed(stub.noise, stub.noise_seed, int(repeat) if repeat.isdigit() else 0, raw):
                    if route == "/chat/completions":
                        payload = stub.chat_completion(body, malformed=malformed)
                    elif route == "/responses":
                        payload = stub.response(body, malformed=malformed)
                    elif route == "/embeddings":
                        payload = stub.embeddings(body)
                    elif route == "/completions":
                        payload = stub.completion(body)
                    else:
                        status, payload = 404, _err(f"ragbridge stub: no route POST {route}")
            # `latency` is the response time: the time spent computing the answer is part of it.
            remaining = stub.latency - (time.monotonic() - t0)
            if remaining > 0:
                stub._sleep(remaining)
            if fault == "late-once":
                with stub._lock:
                    fault = None if raw in stub.answered else "late"
                    stub.answered.add(raw)
            if fault in ("timeout", "late"):
                stub._sleep(stub.timeout_seconds if fault == "timeout" else stub.late_seconds)
                if stub.closed:
                    self.close_connection = True
                    return
            if fault in hostile.USAGE_LIES:
                payload = hostile.lie_about_usage(payload, fault)
            if fault in hostile.CONTENT_MODES and status == 200:
                key = hostile.given_key(self.headers) or ""  # json.dumps escapes a lone surrogate (\ud800)
                payload = json.dumps(hostile.change_content(payload, fault, key)).encode("ascii")
            if fault == "gzip":
                if not isinstance(payload, bytes):
                    payload = json.dumps(payload, ensure_ascii=False).encode("utf-8")
                payload = gzip.compress(payload)
                reply_headers = {**(reply_headers or {}), "Content-Encoding": "gzip"}
            if fault in ("drip", "drip-head"):
                self._send_drip(json.dumps(payload).encode(), stub.drip_interval, head=fault == "drip-head")
                return
            if stub.log is not None and not isinstance(payload, bytes):
                payload = json.dumps(payload, ensure_ascii=False).encode("utf-8")
            self._send(status, payload, reply_headers, content_type)
            if stub.log is not None:
                stub._log_call(route, started, in_flight, status, payload)
        except Exception as exc:  # a stub bug must not hang the client
            self._error(500, f"ragbridge stub: {type(exc).__name__}: {exc}", "server_error")
        finally:
            stub._leave()


def _hostile_send(handler: "_Handler", chunks: Any, size: int, head_chunks: Any = None) -> None:
    """Send a 200 answer of ``size`` bytes as ``chunks`` come (its head as ``head_chunks(head)`` gives
    it, else at once), until the client goes away."""
    handler.close_connection = True
    head = (f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Ragbridge-Stub: 1\r\n"
            f"Content-Length: {size}\r\nConnection: close\r\n\r\n".encode())
    try:
        for chunk in itertools.chain(head_chunks(head) if head_chunks else (head,), chunks):
            if handler.stub.closed:
                return
            handler.wfile.write(chunk)
            handler.wfile.flush()
    except OSError:  # the client gave up: what a hostile judge is tested for
        return


def _err(message: str, etype: str = "invalid_request_error") -> dict:
    return {"error": {"message": message, "type": etype, "param": None, "code": None}}


def _fmt_num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else str(v)


class StubJudge:
    """An OpenAI-compatible deterministic judge on 127.0.0.1 (a ThreadingHTTPServer in a thread)."""

    def __init__(self, port: int = 0, latency: float = 0.0, fault_rate_429: float = 0,
                 fault_rate_500: float = 0, fault_rate_timeout: float = 0, fault_rate_malformed: float = 0,
                 seed: int = 0, *, fault_rate_garbage: float = 0, timeout_seconds: float = 30.0,
                 retry_after: float = 0, models: tuple[str, ...] = ("stub-judge", "stub-embedder"),
                 host: str = "127.0.0.1", max_recorded: int = 100_000, noise: float = 0.0,
                 noise_seed: int = 0, api_key: Optional[str] = None, drip_interval: float = 0.5,
                 huge_bytes: int = 64 << 20, late_seconds: float = 2.0,
                 log: Optional[str | Path] = None, lists_models: bool = True) -> None:
        rates = [fault_rate_429, fault_rate_500, fault_rate_timeout, fault_rate_malformed, fault_rate_garbage]
        if any(r < 0 or r > 1 for r in rates) or sum(rates) > 1:
            raise ValueError("fault rates must each be in 0..1 and sum to at most 1")
        if not 0 <= noise <= 1:
            raise ValueError("noise must be in 0..1")
        self.noise = float(noise)
        self.noise_seed = int(noise_seed)
        self.log = Path(log) if log is not None else None
        self._log_fh: Any = None
        self.port = port
        self.host = host
        self.latency = float(latency)
        self.rates = dict(zip(FAULT_KINDS, rates))
        self.seed = seed
        self.timeout_seconds = float(timeout_seconds)
        self.retry_after = retry_after
        self.models = list(models)
        #: False: ``GET /models`` is not implemented (404, as the dialect's server answers an unknown path)
        self.lists_models = lists_models
        #: the key the dialects that check one expect (None: any non-empty key)
        self.api_key = api_key
        #: the hostile modes' settings (see ragbridge.testing.hostile)
        self.drip_interval, self.huge_bytes = float(drip_interval), int(huge_bytes)
        self.late_seconds = float(late_seconds)
        self.echo_turn = 0  # answers given in echo-key-each mode
        self.answered: set[bytes] = set()  # the request bodies late-once mode has seen
        self.slot = threading.Lock()  # the one slot of one-slot mode
        self.requests: list[StubRequest] = []
        self.max_recorded = max_recorded
        self.last_authorization: Optional[str] = None
        self.in_flight = 0
        self.max_in_flight = 0
        self._posts_seen = 0  # POSTs received since the last reset (not bounded by max_recorded)
        self._rng = random.Random(seed)
        self._queued: deque[Optional[str]] = deque()
        self._marked: dict[str, str] = {}  # text in a request's body -> its fault (`fail_when`)
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)
        self._released = threading.Event()
        self._released.set()
        self._closed = threading.Event()
        self._conns: set = set()
        self._server: Optional[_Server] = None
        self.handler = type("StubHandler", (_Handler,), {"stub": self, "owner": self})  # its answers
        self._thread: Optional[threading.Thread] = None

    def start(self) -> "StubJudge":
        if self._server is not None:
            return self
        self._closed.clear()
        if self.log is not None:
            self._log_fh = open(self.log, "a", encoding="utf-8", buffering=1)
        self._server = _Server((self.host, self.port), self.handler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=f"ragbridge-stub-{self.port}", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self._closed.set()
        self._released.set()
        server, self._server = self._server, None
        if server is None:
            return
        stop_server(server, self._thread, self._lock, self._conns)
        with self._lock:
            fh, self._log_fh = self._log_fh, None
        if fh is not None:
            fh.close()

    def __enter__(self) -> "StubJudge":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    @property
    def settings(self) -> str:
        """What of the stub's settings changes its answers (its noise), as ``GET /models`` says it in
        the header ``X-Ragbridge-Stub-Settings``: a run's judge identity, in place of the port."""
        return f"noise={self.noise:g},noise_seed={self.noise_seed}" if self.noise else "noise=0"

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    # -- test helpers ---------------------------------------------------------------------------
    @property
    def request_count(self) -> int:
        """POST requests received (faulted ones included)."""
        with self._lock:
            return sum(1 for r in self.requests if r.method == "POST")

    def posts(self, route: Optional[str] = None) -> list[StubRequest]:
        with self._lock:
            return [r for r in self.requests if r.method == "POST" and (route is None or r.path == route)]

    def inject(self, *kinds: Optional[str]) -> None:
        """Queue faults for the next requests, in order (``None`` = answer normally)."""
        for k in kinds:
            if k is not None and k not in FAULT_KINDS:
                raise ValueError(f"unknown fault {k!r}; choose from {FAULT_KINDS}")
        with self._lock:
            self._queued.extend(kinds)

    def fail_when(self, text: str, kind: Optional[str] = "500") -> None:
        """Give every POST whose body holds ``text`` the fault ``kind`` from now on (None: stop): the
        requests of one case fail, by a word only that case has, whatever order they come in."""
        if kind is not None and kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault {kind!r}; choose from {FAULT_KINDS}")
        with self._lock:
            if kind is None:
                self._marked.pop(text, None)
            else:
                self._marked[text] = kind

    def hold(self) -> None:
        """Keep every POST from now on in flight, unanswered, until :meth:`release` (or close)."""
        self._released.clear()

    def release(self) -> None:
        """Answer the held POSTs (and stop holding)."""
        self._released.set()

    def wait_for_requests(self, n: int, timeout: float = 60.0) -> None:
        """Block until at least ``n`` POSTs have arrived (held ones included); TimeoutError after
        ``timeout`` seconds."""
        with self._arrived:
            if not self._arrived.wait_for(lambda: self._posts_seen >= n, timeout):
                raise TimeoutError(f"the stub judge received {self._posts_seen} POST(s), not {n}, "
                                   f"within {timeout:g} s")

    def reset(self) -> None:
        with self._lock:
            self.requests.clear()
            self._posts_seen = 0
            self.max_in_flight = self.in_flight
            self._queued.clear()
            self._rng = random.Random(self.seed)

    # -- internals ------------------------------------------------------------------------------
    def _track(self, conn: Any, add: bool) -> None:
        with self._lock:
            (self._conns.add if add else self._conns.discard)(conn)

    def _record(self, req: StubRequest) -> None:
        with self._lock:
            if req.method == "POST":
                self._posts_seen += 1
                self._arrived.notify_all()
            self.requests.append(req)
            if len(self.requests) > self.max_recorded:
                del self.requests[: len(self.requests) - self.max_recorded]

    def _draw_fault(self, raw: bytes = b"") -> Optional[str]:
        with self._lock:
            for text, kind in self._marked.items():
                if text.encode("utf-8") in raw:
                    return kind
            if self._queued:
                return self._queued.popleft()
            if not any(self.rates.values()):
                return None
            r = self._rng.random()
        acc = 0.0
        for kind in FAULT_KINDS:
            acc += self.rates.get(kind, 0.0)
            if r < acc:
                return kind
        return None

    def _enter(self) -> int:
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            return self.in_flight

    def _log_call(self, route: str, started: float, in_flight: int, status: int, body: bytes) -> None:
        line = json.dumps({"route": route, "start": round(started, 6), "end": round(time.time(), 6),
                           "in_flight": in_flight, "status": status,
                           "response_sha256": hashlib.sha256(body).hexdigest()})
        with self._lock:
            if self._log_fh is not None:
                self._log_fh.write(line + "\n")

    def _leave(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def _sleep(self, seconds: float) -> None:
        self._closed.wait(seconds)

    # -- answers (see ragbridge.stub.answers) ----------------------------------------------------
    @staticmethod
    def chat_completion(body: dict, *, malformed: bool = False) -> dict:
        return answers.chat_completion(body, malformed=malformed)

    @staticmethod
    def completion(body: dict) -> dict:
        return answers.completion(body)

    @staticmethod
    def response(body: dict, *, malformed: bool = False) -> dict:
        return answers.response(body, malformed=malformed)

    @staticmethod
    def embeddings(body: dict) -> dict:
        return answers.embeddings(body)


def serve(port: int = 8808, *, host: str = "127.0.0.1", latency: float = 0.0, **faults: Any) -> None:
    """Run a stub judge in the foreground until interrupted (Ctrl-C)."""
    stub = StubJudge(port=port, latency=latency, host=host, **faults).start()
    print(f"ragbridge stub judge listening on {stub.base_url} (any API key works; Ctrl-C to stop)",
          file=sys.stderr, flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        stub.close()


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ragbridge.testing.stub_judge",
                                description="Deterministic OpenAI-compatible stub judge on 127.0.0.1.")
    p.add_argument("--port", type=int, default=8808)
    p.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1)")
    p.add_argument("--latency", type=float, default=0.0, help="seconds of delay per request")
    for kind in ("429", "500", "timeout", "malformed", "garbage"):
        p.add_argument(f"--fault-rate-{kind}", type=float, default=0.0, dest=f"fault_rate_{kind}")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout-seconds", type=float, default=30.0, help="how long a 'timeout' fault holds")
    p.add_argument("--retry-after", type=float, default=0, help="Retry-After seconds on a 429 fault")
    p.add_argument("--noise", type=float, default=0.0,
                   help="test device: each verdict flips (a level moves) with this probability, per repeat")
    p.add_argument("--noise-seed", type=int, default=0)
    p.add_argument("--log", default=None,
                   help="append one JSON line per answered POST to this file (route, start, end, in_flight)")
    a = p.parse_args(argv)
    serve(a.port, host=a.host, latency=a.latency, fault_rate_429=a.fault_rate_429,
          fault_rate_500=a.fault_rate_500, fault_rate_timeout=a.fault_rate_timeout,
          fault_rate_malformed=a.fault_rate_malformed, fault_rate_garbage=a.fault_rate_garbage,
          seed=a.seed, timeout_seconds=a.timeout_seconds, retry_after=a.retry_after, noise=a.noise,
          noise_seed=a.noise_seed, log=a.log)
    return 0


if __name__ == "__main__":
    sys.exit(main())
