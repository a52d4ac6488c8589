"""A deterministic OpenAI-compatible stub judge on 127.0.0.1, with fault injection.

    with StubJudge(latency=0.05, fault_rate_429=0.1) as stub:
        client = openai.OpenAI(base_url=stub.base_url, api_key="anything")

Endpoints: ``POST /v1/chat/completions`` (plain prompts, ``response_format`` ``json_object`` and
``json_schema``, ``tools``/``tool_choice``, ``logprobs``), ``POST /v1/responses`` (``output_text`` and
``text.format`` json_schema), ``POST /v1/embeddings`` (hashed bag-of-words vectors, L2-normalised;
``encoding_format`` float or base64) and ``GET /v1/models``; the same paths without ``/v1`` work too.
Any key is accepted. What the answers say is decided by :mod:`ragbridge.testing.responders`.

Every answer is labelled: ``model`` is ``ragbridge-stub/<requested model>``, ``system_fingerprint``
is ``ragbridge-stub`` and the header ``X-Ragbridge-Stub: 1`` is set, so run outputs can say their
scores came from a stub.

Faults, drawn per request from a RNG seeded with ``seed`` (so a given arrival order always gets
the same faults), or queued explicitly with :meth:`StubJudge.inject`:

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
:mod:`ragbridge.testing.responders`).

``latency`` is the response time of every POST: the stub computes its answer, then sleeps for
whatever is left of ``latency``.

``log`` (a file path; ``--log`` on the command line) appends one JSON line per answered POST:
``route``, ``start`` and ``end`` (Unix time), ``in_flight`` (POSTs in flight when it arrived, itself
included), ``status`` and ``response_sha256`` (of the body sent), so a benchmark can tell how many
calls were in flight at once and which call was answered when.

For tests that need a defined order of events rather than a race, :meth:`StubJudge.hold` keeps
every POST that arrives in flight (received, recorded, counted in ``in_flight``) until
:meth:`StubJudge.release`, and :meth:`StubJudge.wait_for_requests` waits until a number of POSTs
have arrived.

Run it in the foreground with ``python -m ragbridge.testing.stub_judge --port 8808 --latency 0.1``.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import math
import os
import random
import re
import socket
import struct
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any, Optional

from ragbridge.judge import FastRequestHandler
from ragbridge.testing.responders import JudgeReply, JudgeRequest, content_words, perturbed, respond

__all__ = ["StubJudge", "StubJudgeProcess", "StubRequest", "serve", "FAULT_KINDS", "embed", "main"]

FAULT_KINDS = ("429", "500", "timeout", "malformed", "garbage")
STUB_FINGERPRINT = "ragbridge-stub"
EMBED_DIM = 256
_CREATED = 1735689600  # fixed, so identical requests get byte-identical answers


def _tokens(text: str) -> int:
    """Realistic-looking token count: words * 1.3, at least 1."""
    return max(1, int(math.ceil(len(re.findall(r"\S+", text or "")) * 1.3)))


def embed(text: str, dim: int = EMBED_DIM) -> list[float]:
    """Deterministic hashed bag-of-words vector (content words, signed buckets), L2-normalised."""
    vec = [0.0] * dim
    for w in content_words(text):
        h = hashlib.blake2b(w.encode("utf-8"), digest_size=8).digest()
        idx = int.from_bytes(h[:4], "little") % dim
        vec[idx] += 1.0 if h[4] & 1 else -1.0
    norm = math.sqrt(sum(v * v for v in vec))
    if norm == 0.0:
        vec[0] = 1.0
        return vec
    return [v / norm for v in vec]


@dataclass
class StubRequest:
    """One request the stub received (for tests)."""

    method: str
    path: str
    body: Any
    fault: Optional[str] = None
    time: float = field(default_factory=time.time)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256


class _Handler(FastRequestHandler):
    server_version = "ragbridge-stub"
    stub: "StubJudge"  # set on the subclass

    def _send(self, status: int, payload: Any, headers: Optional[dict] = None) -> None:
        if isinstance(payload, bytes):
            body = payload
        else:
            body = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        extra = ["Content-Type: application/json", "X-Ragbridge-Stub: 1"]
        extra += [f"{k}: {v}" for k, v in (headers or {}).items()]
        self.write_response(status, body, extra)

    def _error(self, status: int, message: str, etype: str = "invalid_request_error",
               headers: Optional[dict] = None) -> None:
        error = {"message": message, "type": etype, "param": None, "code": None}
        self._send(status, {"error": error}, headers)

    def _route(self) -> str:
        path = self.path.split("?", 1)[0].rstrip("/")
        if path.startswith("/v1/"):
            path = path[3:]
        return path

    def do_GET(self) -> None:  # noqa: N802
        route = self._route()
        self.stub._record(StubRequest("GET", route, None))
        if route == "/models":
            self._send(200, {"object": "list", "data": [
                {"id": m, "object": "model", "created": _CREATED, "owned_by": STUB_FINGERPRINT}
                for m in self.stub.models]})
        elif route in ("", "/health"):
            self._send(200, {"status": "ok", "stub": STUB_FINGERPRINT})
        else:
            self._error(404, f"ragbridge stub: no route GET {route}")

    def do_POST(self) -> None:  # noqa: N802
        raw = self.read_body()
        route = self._route()
        stub = self.stub
        if self.headers.get("Authorization"):
            stub.last_authorization = self.headers.get("Authorization")
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            stub._record(StubRequest("POST", route, raw.decode("utf-8", "replace")))
            self._error(400, "ragbridge stub: request body is not valid JSON")
            return
        fault = stub._draw_fault()
        in_flight = stub._enter()
        stub._record(StubRequest("POST", route, body, fault))
        t0 = time.monotonic()
        started = time.time()
        try:
            stub._released.wait()
            status, payload, headers = 200, None, None
            if fault == "429":
                status, payload = 429, _err("ragbridge stub: rate limited (injected)", "rate_limit_error")
                headers = {"Retry-After": _fmt_num(stub.retry_after)}
            elif fault == "500":
                status, payload = 500, _err("ragbridge stub: internal error (injected)", "server_error")
            elif fault == "garbage":
                payload = b"<html>ragbridge stub: this is not JSON</html>"
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
            if fault == "timeout":
                stub._sleep(stub.timeout_seconds)
                if stub.closed:
                    self.close_connection = True
                    return
            if stub.log is not None and not isinstance(payload, bytes):
                payload = json.dumps(payload, ensure_ascii=False).encode("utf-8")
            self._send(status, payload, headers)
            if stub.log is not None:
                stub._log_call(route, started, in_flight, status, payload)
        except Exception as exc:  # a stub bug must not hang the client
            self._error(500, f"ragbridge stub: {type(exc).__name__}: {exc}", "server_error")
        finally:
            stub._leave()


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
                 noise_seed: int = 0, log: Optional[str | Path] = None) -> None:
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
        self.requests: list[StubRequest] = []
        self.max_recorded = max_recorded
        self.last_authorization: Optional[str] = None
        self.in_flight = 0
        self.max_in_flight = 0
        self._posts_seen = 0  # POSTs received since the last reset (not bounded by max_recorded)
        self._rng = random.Random(seed)
        self._queued: deque[Optional[str]] = deque()
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)
        self._released = threading.Event()
        self._released.set()
        self._closed = threading.Event()
        self._conns: set = set()
        self._server: Optional[_Server] = None
        self._thread: Optional[threading.Thread] = None

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> "StubJudge":
        if self._server is not None:
            return self
        handler = type("StubHandler", (_Handler,), {"stub": self, "owner": self})
        self._closed.clear()
        if self.log is not None:
            self._log_fh = open(self.log, "a", encoding="utf-8", buffering=1)
        self._server = _Server((self.host, self.port), handler)
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
        server.shutdown()
        server.server_close()
        with self._lock:
            conns = list(self._conns)
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._thread is not None:
            self._thread.join(timeout=5)
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

    def _draw_fault(self) -> Optional[str]:
        with self._lock:
            if self._queued:
                return self._queued.popleft()
            if not any(self.rates.values()):
                return None
            r = self._rng.random()
        acc = 0.0
        for kind in FAULT_KINDS:
            acc += self.rates[kind]
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

    # -- answers --------------------------------------------------------------------------------
    @staticmethod
    def _id(prefix: str, body: Any) -> str:
        digest = hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()[:24]
        return f"{prefix}-{digest}"

    @staticmethod
    def _model(body: dict) -> str:
        return f"{STUB_FINGERPRINT}/{body.get('model') or 'default'}"

    def chat_completion(self, body: dict, *, malformed: bool = False) -> dict:
        req = JudgeRequest.from_chat(body)
        reply = respond(req)
        content = reply.content
        if malformed:
            content = _break_json(content)
        message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": None}
        finish = "stop"
        if reply.tool_name and not malformed:
            message["content"] = None
            message["tool_calls"] = [{"id": self._id("call", body)[:32], "type": "function",
                                      "function": {"name": reply.tool_name, "arguments": content}}]
            finish = "tool_calls"
        n = int(body.get("n") or 1)
        logprobs = None
        if body.get("logprobs"):
            logprobs = _logprobs(content, reply, int(body.get("top_logprobs") or 1))
        choices = [{"index": i, "message": message, "logprobs": logprobs, "finish_reason": finish}
                   for i in range(max(1, n))]
        prompt_tokens = _tokens(req.prompt)
        completion_tokens = _tokens(content or "") * max(1, n)
        return {"id": self._id("chatcmpl", body), "object": "chat.completion", "created": _CREATED,
                "model": self._model(body), "system_fingerprint": STUB_FINGERPRINT, "choices": choices,
                "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                          "total_tokens": prompt_tokens + completion_tokens}}

    def completion(self, body: dict) -> dict:
        prompt = body.get("prompt")
        text = prompt if isinstance(prompt, str) else "\n".join(map(str, prompt or []))
        reply = respond(JudgeRequest(endpoint="chat", model=str(body.get("model", "")),
                                     messages=[("user", text)], body=body))
        pt, ct = _tokens(text), _tokens(reply.content)
        return {"id": self._id("cmpl", body), "object": "text_completion", "created": _CREATED,
                "model": self._model(body), "system_fingerprint": STUB_FINGERPRINT,
                "choices": [{"index": 0, "text": reply.content, "logprobs": None, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": pt, "completion_tokens": ct, "total_tokens": pt + ct}}

    def response(self, body: dict, *, malformed: bool = False) -> dict:
        req = JudgeRequest.from_responses(body)
        reply = respond(req)
        text = _break_json(reply.content) if malformed else reply.content
        it, ot = _tokens(req.prompt), _tokens(text)
        rid = self._id("resp", body)
        return {
            "id": rid, "object": "response", "created_at": _CREATED, "status": "completed",
            "model": self._model(body), "error": None, "incomplete_details": None,
            "instructions": body.get("instructions"), "metadata": body.get("metadata") or {},
            "output": [{"type": "message", "id": "msg-" + rid[5:], "status": "completed", "role": "assistant",
                        "content": [{"type": "output_text", "text": text, "annotations": []}]}],
            "parallel_tool_calls": True, "temperature": body.get("temperature"), "top_p": body.get("top_p"),
            "tool_choice": body.get("tool_choice") or "auto", "tools": body.get("tools") or [],
            "text": body.get("text") or {"format": {"type": "text"}},
            "usage": {"input_tokens": it, "output_tokens": ot, "total_tokens": it + ot,
                      "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens_details": {"reasoning_tokens": 0}},
            "system_fingerprint": STUB_FINGERPRINT,
        }

    def embeddings(self, body: dict) -> dict:
        inp = body.get("input")
        if isinstance(inp, str):
            texts = [inp]
        elif isinstance(inp, list) and inp and all(isinstance(x, int) for x in inp):
            texts = [" ".join(f"t{x}" for x in inp)]
        elif isinstance(inp, list):
            texts = [x if isinstance(x, str) else " ".join(f"t{t}" for t in x) for x in inp]
        else:
            texts = [""]
        dim = int(body.get("dimensions") or EMBED_DIM)
        as_b64 = body.get("encoding_format") == "base64"
        data = []
        for i, t in enumerate(texts):
            vec = embed(t, dim)
            emb: Any = base64.b64encode(struct.pack(f"<{dim}f", *vec)).decode("ascii") if as_b64 else vec
            data.append({"object": "embedding", "index": i, "embedding": emb})
        pt = sum(_tokens(t) for t in texts)
        return {"object": "list", "data": data, "model": self._model(body),
                "system_fingerprint": STUB_FINGERPRINT, "usage": {"prompt_tokens": pt, "total_tokens": pt}}


def _break_json(content: Optional[str]) -> str:
    content = content or ""
    cut = max(1, len(content) * 2 // 3)
    return content[:cut].rstrip("}] ") + ', "unterminated'


def _logprobs(content: Optional[str], reply: JudgeReply, top: int) -> dict:
    """Every token certain (logprob 0): a caller that weights the score token by its probabilities
    then gets the plain score."""
    out = []
    for tok in re.findall(r"\d+|[A-Za-z_]+|\s+|[^\w\s]", content or ""):
        entry = {"token": tok, "logprob": 0.0, "bytes": list(tok.encode())}
        out.append({**entry, "top_logprobs": [entry]})
    return {"content": out, "refusal": None}


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


class StubJudgeProcess:
    """The stub judge in a child process (``python -m ragbridge.testing.stub_judge``), so its CPU time
    is not the measuring process's: ``with StubJudgeProcess(latency=0.1) as stub: ... stub.base_url``.
    Used by the benchmarks."""

    def __init__(self, latency: float = 0.0, start_timeout: float = 60.0,
                 log: Optional[str | Path] = None) -> None:
        self.latency = latency
        self.log = log
        self.start_timeout = start_timeout
        self.proc: Optional[subprocess.Popen] = None
        self.base_url = ""

    def start(self) -> "StubJudgeProcess":
        import http.client

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        src = str(Path(__file__).resolve().parents[2])  # works from a source checkout without install
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")])))
        log = ["--log", str(self.log)] if self.log is not None else []
        self.proc = subprocess.Popen([sys.executable, "-m", "ragbridge.testing.stub_judge",
                                      "--port", str(port), "--latency", str(self.latency), *log], env=env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
                conn.request("GET", "/v1/models")
                ok = conn.getresponse().status == 200
                conn.close()
                if ok:
                    self.base_url = f"http://127.0.0.1:{port}/v1"
                    return self
            except OSError:
                time.sleep(0.05)
        self.close()
        raise RuntimeError(f"the stub judge process did not answer on port {port}"
                           f" within {self.start_timeout:g} s")

    def close(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
            self.proc = None

    def __enter__(self) -> "StubJudgeProcess":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()


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
