"""One request's way through the gateway: :class:`Pipeline`.

A request that came through the door (already routed: its endpoint and
:class:`~ragbridge.judge.tag.CallTag`) is answered from the
:class:`~ragbridge.judge.store.ResponseStore` when it can be (by its exact bytes, then by its parsed
body); else, one caller per distinct request at a time, it reserves its place in the
:class:`~ragbridge.judge.ledger.Ledger`'s budget, gets its request fields set
(:func:`~ragbridge.judge.dialect.shape_body`), goes upstream through the
:class:`~ragbridge.judge.upstream.Forwarder` (or, in a dry run, is simulated), has every form of the
key removed from the answer (:class:`~ragbridge.judge.redact.Redactor`), is priced from the usage it
reports (when that usage can be true), and a 2xx answer is stored.
"""

from __future__ import annotations

import json
import threading
from typing import Any, Callable, Optional

from .cache import JudgeCache
from .config import JudgeConfig
from .dialect import Endpoint, shape_body
from .ledger import Ledger, reported_usage
from .redact import Redactor
from .server import Result, error_body
from .store import ResponseStore
from .structured import FALLBACK, Ask, as_asked, ask_of, reshape, rejects_structured_output
from .tag import REPEAT_HEADER, CallTag
from .upstream import Forwarder, Upstream

__all__ = ["Pipeline"]


class Pipeline:
    """The steps of `serve`, over the parts a started gateway owns (``store`` None: no cache;
    ``simulate``: a dry run's answer maker)."""

    def __init__(self, config: JudgeConfig, endpoints: tuple[Endpoint, Endpoint], *,
                 store: Optional[ResponseStore], ledger: Ledger, forwarder: Forwarder,
                 upstreams: dict[Endpoint, Upstream], redactor: Redactor,
                 simulate: Optional[Callable[[str, Any], Any]], closing: threading.Event,
                 mode_for: Optional[Callable[[Optional[str]], str]] = None) -> None:
        self.config = config
        #: a backend's structured-output mode (`ragbridge.judge.JudgeGateway.structured_output_for`)
        self.mode_for = mode_for or (lambda backend: config.structured_output)
        self.endpoints = endpoints
        self.store = store
        self.ledger = ledger
        self.forwarder = forwarder
        self.upstreams = upstreams
        self.redactor = redactor
        self.simulate = simulate
        self.closing = closing
        #: per server (its identity), the structured-output modes it refused (``auto`` skips them)
        self.refused: dict[str, set[str]] = {}
        self._lock = threading.Lock()

    def request_key(self, endpoint: str, tag: CallTag, raw: bytes) -> str:
        """The key of the exact request bytes (what the audit log and the cache's aliases file)."""
        return JudgeCache.raw_key(self.endpoint(endpoint).identity, self._path(endpoint, tag, raw), raw)

    def _path(self, endpoint: str, tag: CallTag, raw: bytes) -> str:
        """The path a request is filed under: with its backend's structured-output mode when that is
        not ``auto`` and the request may ask for a JSON object."""
        path = ResponseStore.path_of(endpoint, tag.repeat)
        mode = self.mode_for(tag.backend)
        if mode != "auto" and endpoint == "chat/completions" and (b'"response_format"' in raw
                                                                  or b'"tool_choice"' in raw):
            path += f"#structured={mode}"
        return path

    def close(self) -> None:
        upstreams, self.upstreams = self.upstreams, {}
        for upstream in upstreams.values():
            upstream.close()
        store, self.store = self.store, None
        if store is not None:
            store.close()

    def endpoint(self, endpoint: str) -> Endpoint:
        """The upstream server a request to ``endpoint`` goes to."""
        return self.endpoints[1] if endpoint == "embeddings" else self.endpoints[0]

    def serve(self, method: str, endpoint: str, raw: bytes, tag: CallTag) -> Result:
        """The answer to one routed request: recorded, called for, or refused."""
        cfg = self.config
        if method == "GET" or endpoint == "models":
            return self._models(method, endpoint)
        store = self.store
        identity = self.endpoint(endpoint).identity
        path = self._path(endpoint, tag, raw)
        raw_key, hit = store.by_bytes(identity, path, raw, tag) if store is not None else (None, None)
        if hit is not None:
            return Result(hit[0], hit[1], cache="hit", json_ok=True, request_json=True)
        try:
            body = json.loads(raw)
        except ValueError:
            return Result(400, error_body("ragbridge judge gateway: request body is not valid JSON",
                                          "invalid_request_error"), cache="off")
        streamed = isinstance(body, dict) and bool(body.get("stream"))
        if store is None or streamed:
            res = self._call(endpoint, raw, body, tag)
            res.cache = res.cache if res.cache == "budget" else ("bypass" if streamed else "off")
            return res
        key, hit = store.by_body(identity, path, body, tag, raw_key)
        if hit is not None:
            return Result(hit[0], hit[1], cache="hit", json_ok=True, request_json=True)
        if cfg.cache_mode == "read-only":
            model = body.get("model") if isinstance(body, dict) else None
            return Result(400, error_body(
                f"ragbridge judge cache miss in read-only mode: no recorded response for this /{endpoint} "
                f"request (model {model!r}); re-record the cache with cache_mode = \"read-write\" "
                f"and a key, or check that the judge settings match the recording",
                "invalid_request_error", "ragbridge_cache_miss"), cache="readonly-miss", request_json=True)
        with store.single_flight(key, cfg.client_timeout()):
            # the same request may have been answered while this one waited for its turn
            hit = store.get(key)
            if hit is not None:
                return Result(hit[0], hit[1], cache="hit", json_ok=True, request_json=True)
            res = self._call(endpoint, raw, body, tag)
            if 200 <= res.status < 300:
                model = body.get("model") if isinstance(body, dict) else None
                store.put(key, endpoint, model if isinstance(model, str) else None, (res.status, res.body),
                          raw_key, tag)
            return res

    def _models(self, method: str, endpoint: str) -> Result:
        cfg = self.config
        if method != "GET" or endpoint != "models":
            verb = "GET" if endpoint == "models" else "POST"
            return Result(405, error_body(f"use {verb} for /{endpoint}", "invalid_request_error"),
                          counted=False)
        if cfg.cache_mode == "read-only":
            data = {"object": "list", "data": [{"id": m, "object": "model", "owned_by": "ragbridge-cache"}
                                               for m in filter(None, [cfg.model, cfg.embedding_model])]}
            return Result(200, json.dumps(data).encode(), cache="readonly", counted=False)
        res = self._forward("GET", endpoint, b"")
        res.cache, res.counted = "bypass", False
        return res

    def _call(self, endpoint: str, raw: bytes, body: Any, tag: CallTag) -> Result:
        """One upstream call (or its simulation in a dry run) within the budget: its tokens (None when
        the usage it reports cannot be true) and cost."""
        if not self.ledger.reserve(tag):
            return self._refused()
        res = Result(502, b"", cost=0.0)
        sent = True
        model = body.get("model") if isinstance(body, dict) else None
        model = model if isinstance(model, str) else None
        try:
            if self.simulate is not None and not (isinstance(body, dict) and body.get("stream")):
                payload = self.simulate(endpoint, body)
                res = Result(200, json.dumps(payload).encode(), attempts=1, parsed=payload)
            else:
                res = self._structured_call(endpoint, raw, body, tag, model)
                if res.cache == "budget":
                    if res.attempts == 0:  # its reservation given back while it waited for a slot
                        sent = False
                        return self._refused()
                    # stopped before a retry: the attempts made count, their cost unknown if unanswered
                    made, res = res, self._refused()
                    res.attempts, res.cost = made.attempts, None if made.unanswered else 0.0
                    return res
            res.request_json = True
            res.tokens = reported_usage(res.parsed, len(raw)) if res.parsed is not None else (0, 0)
            res.cost = self.ledger.price(model, res.tokens) if res.parsed is not None else 0.0
            if res.unanswered:  # attempts the upstream may have charged for: as much as the answered
                # one (the same request), unknown when none was answered
                res.cost = (res.cost * (1 + res.unanswered) if res.parsed is not None and res.cost is not None
                            else None)
        finally:
            if sent:
                self.ledger.settle(res.cost)
        return res

    def _structured_call(self, endpoint: str, raw: bytes, body: Any, tag: CallTag,
                         model: Optional[str]) -> Result:
        """The request upstream in its backend's structured-output mode (see the module docstring):
        one or more forwards, the attempts, waits and unanswered attempts of all of them summed."""
        streamed = isinstance(body, dict) and bool(body.get("stream"))
        ask = ask_of(body) if endpoint == "chat/completions" and not streamed else None  # a stream: as sent
        mode = self.mode_for(tag.backend) if ask is not None else "auto"
        identity = self.endpoint(endpoint).identity
        used = mode if mode != "auto" else self._working(identity, ask)
        made: list[Result] = []
        final = rejects_structured_output if ask is not None and mode == "auto" else None
        while True:
            sending = reshape(body, ask, used) if ask is not None and used is not None else body
            shaped = shape_body(self.config, endpoint, sending)
            data = raw if shaped is body else json.dumps(shaped, ensure_ascii=False).encode("utf-8")
            res = self._forward("POST", endpoint, data, repeat=tag.repeat, model=model, stream=streamed,
                                tag=tag, again=bool(made),
                                final=final)
            made.append(res)
            if (ask is None or mode != "auto" or 200 <= res.status < 300 or res.cache == "budget"
                    or not rejects_structured_output(res.status, res.body)):
                break
            with self._lock:  # this server refuses that mode: the next one it has not refused
                self.refused.setdefault(identity, set()).add(used or ask.kind)
            used = self._working(identity, ask)
            if used is None:
                break
        res.attempts = sum(r.attempts for r in made)
        res.unanswered = sum(r.unanswered for r in made)
        res.wait_seconds = sum(r.wait_seconds for r in made)
        res.call_seconds = sum(r.call_seconds for r in made)
        res.backoff_seconds = sum(r.backoff_seconds for r in made)
        if ask is not None and used is not None and used != ask.kind and 200 <= res.status < 300 \
                and res.parsed is not None:
            res.parsed = as_asked(res.parsed, ask, used)
            res.body = json.dumps(res.parsed, ensure_ascii=False).encode("utf-8")
        elif ask is not None and res.cause == "structured_output":
            res.body = error_body(self._refusal(res, used or ask.kind, tag), code="structured_output_refused")
        return res

    def _working(self, identity: str, ask: Optional[Ask]) -> Optional[str]:
        """The mode ``auto`` sends ``ask`` in to the server ``identity``: as asked unless the server
        refused that, else the first of `FALLBACK` it has not refused (None: it refused them all)."""
        if ask is None:
            return None
        with self._lock:
            refused = set(self.refused.get(identity, ()))
        if ask.kind not in refused:
            return ask.kind
        usable = [m for m in FALLBACK  # JSON mode without a schema: a tool of any object, not a schema
                  if m not in refused and (ask.schema is not None or m != "schema")]
        return usable[0] if usable else None

    def _refusal(self, res: Result, used: str, tag: CallTag) -> str:
        """What a request refused for its structured output says: the mode, the server's words, the fix."""
        from .structured import error_text

        mode = self.mode_for(tag.backend)
        said = error_text(res.body)[:300]
        how = ("in every mode ragbridge can ask in" if mode == "auto"
               else f"in mode {used!r} (the structured_output of backend {tag.backend or '?'})")
        return (f"ragbridge judge gateway: the judge refuses a JSON object asked for {how}: "
                f"HTTP {res.status}: {said}")

    def _refused(self) -> Result:
        b = self.ledger.budget
        return Result(402, error_body(
            f"ragbridge judge budget spent ({b.describe() if b else ''}): this call was not made; "
            f"run again with a larger budget to resume", "insufficient_quota", "ragbridge_budget_spent"),
            cache="budget", attempts=0, json_ok=True)

    def _forward(self, method: str, endpoint: str, raw: bytes, *, repeat: int = 0,
                 model: Optional[str] = None, stream: bool = False, tag: Optional[CallTag] = None,
                 again: bool = False, final: Optional[Callable[[int, bytes], bool]] = None) -> Result:
        if self.closing.is_set() or self.forwarder is None:
            return Result(503, error_body("ragbridge judge gateway is shut down"), attempts=0)
        upstream = self.upstreams[self.endpoint(endpoint)]
        res = self.forwarder.forward(upstream, method, endpoint, raw, model, stream=stream,
                                     extra_headers={REPEAT_HEADER: str(repeat)} if repeat else None,
                                     on_send=(lambda attempt: self.ledger.sending(tag)
                                              if attempt == 1 and not again else self.ledger.resending(tag))
                                     if tag is not None else None, final=final)
        res.body, content_type, withheld = self.redactor.reply(res.body, res.content_type)
        res.content_type = content_type or res.content_type
        if withheld and 200 <= res.status < 300:
            res.status, res.parsed = 502, None  # a withheld answer is no answer
        return res
