"""The Phoenix backend: Phoenix evals' own evaluator classes, each case scored with
``await evaluator.async_evaluate(record)``, every judge call through ragbridge's judge gateway.

The run's lifecycle: ``environment()`` is `env.environment` (spans off or redacted), applied before
``open``, where Phoenix is first imported. ``open`` reads the run's options
(`metrics.PhoenixSettings`) and makes one `PhoenixSession`, shared by every metric and case of the
run:

* one Phoenix ``LLM(provider="openai")``, built inside the run's event loop (an ``LLM`` used from a
  second event loop fails every other call with "Event loop is closed"). Its two OpenAI clients get
  httpx clients on the gateway's in-process transports (``gateway.transport()`` /
  ``async_transport()``), the untagged in-process base URL, the gateway's own key and
  ``client_timeout()``: Phoenix never sees the real key and no socket is opened. Phoenix forces the
  SDK's own retries to 0; the gateway retries 429, 5xx and timeouts. Phoenix's adaptive rate
  limiter (5 requests per second unless told otherwise) starts at `RATE_PER_SECOND`, so the
  gateway's ``max_concurrency`` is the bound;
* one evaluator per metric (`make_evaluators`) with ``temperature`` (0.0 unless the option says
  otherwise; Phoenix sends none by default) and the judge's ``max_tokens`` when set, its label map
  checked against the pinned one (`metrics.PhoenixMetric.labels`).

``score`` fans the cases out (`ragbridge.backend.fan_out`, at most ``concurrency`` cases at once);
each case is scored inside ``gateway.tag_scope("phoenix", metric, case_id)``, so the gateway counts
its calls and tokens for that Score (a per-chunk metric's calls run concurrently, in the same
scope). ``close`` closes the two httpx clients.

Failures are per score: an exception out of ``async_evaluate`` (the judge's error after the
gateway's retries, an answer that is not JSON, a label outside the evaluator's choices) is that
Score's ``error`` (`ragbridge.backend.error_text`); Phoenix is never asked for a default label.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any, AsyncIterator, Optional, Sequence

from ragbridge.backend import Backend, MetricSpec, ScoringContext, fan_out
from ragbridge.schema import Case, Score

from . import env, translate
from .metrics import BACKEND, METRICS, PhoenixMetric, PhoenixSettings

__all__ = ["PhoenixBackend", "PhoenixSession", "RATE_PER_SECOND", "make_llm", "make_evaluators",
           "generation_kwargs"]

#: where Phoenix's adaptive rate limiter starts (its default is 5 per second): out of the way, the
#: gateway bounds the run. After a 429 that outlasts the gateway's retries Phoenix halves it and
#: holds that LLM's new requests for 5 s (an asyncio sleep, not a blocking one), then raises.
RATE_PER_SECOND = 1_000_000.0


def generation_kwargs(gateway: Any, settings: PhoenixSettings) -> dict[str, Any]:
    """What every Phoenix request carries besides the prompt and the schema."""
    kwargs: dict[str, Any] = {"temperature": float(settings.temperature)}
    if gateway.config.max_tokens:
        kwargs["max_tokens"] = gateway.config.max_tokens
    return kwargs


def make_llm(gateway: Any) -> tuple[Any, Any, Any]:
    """Phoenix's ``LLM`` on the gateway's in-process transports: ``(llm, http_client,
    async_http_client)`` (the caller closes both clients). Call it inside the running event loop."""
    import httpx
    from phoenix.evals import LLM

    cfg = gateway.config
    timeout = httpx.Timeout(cfg.client_timeout(), connect=10.0)
    http = httpx.Client(transport=gateway.transport(), timeout=timeout, trust_env=False)
    async_http = httpx.AsyncClient(transport=gateway.async_transport(), timeout=timeout, trust_env=False)
    llm = LLM(provider="openai", model=cfg.model, api_key=gateway.api_key,
              base_url=gateway.base_url(in_process=True), timeout=cfg.client_timeout(),
              initial_per_second_request_rate=RATE_PER_SECOND,
              sync_client_kwargs={"http_client": http}, async_client_kwargs={"http_client": async_http})
    return llm, http, async_http


def make_evaluators(llm: Any, gateway: Any, settings: PhoenixSettings) -> dict[str, Any]:
    """One Phoenix evaluator per canonical metric, on ``llm``; RuntimeError when the installed
    Phoenix maps a label to another score than the pinned map (`metrics.PhoenixMetric.labels`)."""
    import phoenix.evals.metrics as pm

    out = {}
    for name, metric in METRICS.items():
        ev = getattr(pm, metric.evaluator)(llm=llm, include_explanation=settings.include_explanation,
                                           **generation_kwargs(gateway, settings))
        if ev.label_score_map != metric.label_scores or ev.name != metric.native:
            raise RuntimeError(
                f"Phoenix's {metric.evaluator} ({ev.name!r}) maps labels to {ev.label_score_map}, "
                f"ragbridge expects {metric.native!r} with {metric.label_scores}: install the version "
                "in constraints.txt")
        out[name] = ev
    return out


@dataclass
class PhoenixSession:
    """What the metrics of one run share: the gateway, the options, Phoenix's LLM with its two httpx
    clients, and one evaluator per metric."""

    gateway: Any
    settings: PhoenixSettings
    llm: Any
    http_client: Any
    async_http_client: Any
    evaluators: dict[str, Any]


class PhoenixBackend(Backend):
    name = BACKEND
    library = "arize-phoenix-evals"
    module = "phoenix.evals"
    install_hint = "pip install 'ragbridge[phoenix]'"

    def metrics(self) -> list[MetricSpec]:
        return [MetricSpec(m.canonical, native_name=m.native, requires=m.requires, judge=True,
                           description=m.description)
                for m in METRICS.values()]

    def environment(self) -> dict[str, str]:
        return env.environment()

    async def open(self, ctx: ScoringContext) -> Optional[PhoenixSession]:
        settings = PhoenixSettings.from_options(ctx.options.backend_options.get(self.name))
        gateway = ctx.judge
        if gateway is None:
            return None  # score says so, for every case
        llm, http, async_http = make_llm(gateway)
        try:
            evaluators = make_evaluators(llm, gateway, settings)
        except BaseException:
            await async_http.aclose()
            http.close()
            raise
        return PhoenixSession(gateway, settings, llm, http, async_http, evaluators)

    async def close(self, ctx: ScoringContext) -> None:
        session = ctx.session
        if isinstance(session, PhoenixSession):
            try:
                await session.async_http_client.aclose()
            finally:
                session.http_client.close()

    async def score(self, metric: str, cases: Sequence[Case], ctx: ScoringContext) -> AsyncIterator[Score]:
        spec = METRICS.get(metric)
        if spec is None:
            raise ValueError(f"the phoenix backend has no metric {metric!r}")
        session = ctx.session
        if not isinstance(session, PhoenixSession):
            raise RuntimeError("the phoenix backend needs a judge (--judge-model, --judge-base-url)")
        limit = ctx.cases_in_flight(session.settings.concurrency)

        async def one(case: Case) -> Score:
            # ctx.judge, not the session's: it files the calls under this job's repeat
            return await self.score_case(spec, case, session, ctx.judge)

        async for score in fan_out(cases, one, limit):
            yield score

    async def score_case(self, spec: PhoenixMetric, case: Case, session: PhoenixSession,
                         gateway: Any = None) -> Score:
        """One case: its record(s) through Phoenix's ``async_evaluate``, attributed to the case."""
        if spec.unanswerable_only and case.answerable:
            return translate.undefined_score(spec, case.id, "case is answerable")
        evaluator = session.evaluators[spec.canonical]
        t0 = time.perf_counter()
        try:
            with (gateway or session.gateway).tag_scope(self.name, spec.canonical, case.id):
                if spec.per_chunk:
                    pairs = translate.chunk_records(case)
                    results = await asyncio.gather(*(evaluator.async_evaluate(r) for _, r in pairs),
                                                   return_exceptions=True)
                    for r in results:  # an interrupt is not a chunk's failure
                        if isinstance(r, asyncio.CancelledError):
                            raise r
                    return translate.to_chunk_score(spec, case.id, list(zip((c for c, _ in pairs), results)),
                                                    time.perf_counter() - t0)
                result = await evaluator.async_evaluate(translate.record(spec, case))
            return translate.to_score(spec, case.id, result, time.perf_counter() - t0)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - one case's failure is that Score's error
            return translate.error_score(spec, case.id, exc, time.perf_counter() - t0)
