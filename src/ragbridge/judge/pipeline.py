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
from .tag import REPEAT_HEADER, CallTag
from .upstream import Forwarder, Upstream

__all__ = ["Pipeline"]


class Pipeline:
    """The steps of `serve`, over the parts a started gateway owns (``store`` None: no cache;
    ``simulate``: a dry run's answer maker)."""

    def __init__(self, config: JudgeConfig, endpoints: tuple[Endpoint, Endpoint], *,
                 store: Optional[ResponseStore], ledger: Ledger, forwarder: Forwarder,
                 upstreams: dict[Endpoint, Upstream], redactor: Redactor,
                 simulate: Optional[Callable[[str, Any], Any]], closing: threading.Event) -> None:
        self.config = config
        self.endpoints = endpoints
        self.store = store
        self.ledger = ledger
        self.forwarder = forwarder
        self.upstreams = upstreams
        self.redactor = redactor
        self.simulate = simulate
        self.closing = closing

    def request_key(self, endpoint: str, tag: CallTag, raw: bytes) -> str:
        """The key of the exact request bytes (what the audit log and the cache's aliases file)."""
        path = ResponseStore.path_of(endpoint, tag.repeat)
        return JudgeCache.raw_key(self.endpoint(endpoint).identity, path, raw)

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
        path = ResponseStore.path_of(endpoint, tag.repeat)
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
                shaped = shape_body(self.config, endpoint, body)
                if shaped is not body:
                    raw = json.dumps(shaped, ensure_ascii=False).encode("utf-8")
                res = self._forward("POST", endpoint, raw, repeat=tag.repeat, model=model,
                                    stream=isinstance(body, dict) and bool(body.get("stream")), tag=tag)
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

    def _refused(self) -> Result:
        b = self.ledger.budget
        return Result(402, error_body(
            f"ragbridge judge budget spent ({b.describe() if b else ''}): this call was not made; "
            f"run again with a larger budget to resume", "insufficient_quota", "ragbridge_budget_spent"),
            cache="budget", attempts=0, json_ok=True)

    def _forward(self, method: str, endpoint: str, raw: bytes, *, repeat: int = 0,
                 model: Optional[str] = None, stream: bool = False, tag: Optional[CallTag] = None) -> Result:
        if self.closing.is_set() or self.forwarder is None:
            return Result(503, error_body("ragbridge judge gateway is shut down"), attempts=0)
        upstream = self.upstreams[self.endpoint(endpoint)]
        res = self.forwarder.forward(upstream, method, endpoint, raw, model, stream=stream,
                                     extra_headers={REPEAT_HEADER: str(repeat)} if repeat else None,
                                     on_send=(lambda attempt: self.ledger.sending(tag) if attempt == 1
                                              else self.ledger.resending(tag)) if tag is not None else None)
        res.body, content_type, withheld = self.redactor.reply(res.body, res.content_type)
        res.content_type = content_type or res.content_type
        if withheld and 200 <= res.status < 300:
            res.status, res.parsed = 502, None  # a withheld answer is no answer
        return res
