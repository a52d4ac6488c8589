"""The Phoenix backend: Phoenix evals' own evaluator classes, each case scored with
``await evaluator.async_evaluate(record)``, every judge call through ragbridge's judge gateway.

The run's lifecycle: ``environment()`` is `env.environment` (spans off or redacted), applied before
``open``, where Phoenix is first imported. ``open`` reads the run's options
(`options.PhoenixOptions`) and makes one `PhoenixSession`, shared by every metric and case of the
run:

* one Phoenix ``LLM(provider="openai")``, built inside the run's event loop (an ``LLM`` used from a
  second event loop fails every other call with "Event loop is closed"). Its two OpenAI clients get
  the judge's httpx clients (`ragbridge.plugin`: in-process to the gateway, the one timeout),
  the untagged in-process base URL, the gateway's own key and ``client_timeout()``: Phoenix never
  sees the real key and no socket is opened. Phoenix forces the
  SDK's own retries to 0; the gateway retries 429, 5xx and timeouts. Phoenix's adaptive rate
  limiter (5 requests per second unless told otherwise) starts at `RATE_PER_SECOND`, so the
  gateway's ``max_concurrency`` is the bound;
* one evaluator per metric (`make_evaluators`) with ``temperature`` (0.0 unless the option says
  otherwise; Phoenix sends none by default) and the judge's ``max_tokens`` when set, its label map
  checked against the pinned one (`metrics.PhoenixMetric.labels`).

The per-case template is `ragbridge.plugin.JudgedBackend`'s: at most ``concurrency`` cases
at once, each judged (``judge_case``) inside ``tag_scope("phoenix", metric, case_id)``, so the
gateway counts its calls and tokens for that Score (a per-chunk metric's calls run concurrently, in
the same scope). ``close`` closes the two httpx clients.

Failures are per score: an exception out of ``async_evaluate`` (the judge's error after the
gateway's retries, an answer that is not JSON, a label outside the evaluator's choices) is that
Score's ``error`` (`translate.error_message`); Phoenix is never asked for a default label.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Mapping, Optional

from ragbridge.plugin import Case, JudgedBackend, ScoreFields, ScoringContext

from . import env, translate
from .metrics import BACKEND, METRICS, PhoenixMetric, metrics_at
from .options import PhoenixOptions

__all__ = ["PhoenixBackend", "PhoenixSession", "RATE_PER_SECOND", "make_llm", "make_legacy_model",
           "make_evaluators", "generation_kwargs"]

#: where Phoenix's adaptive rate limiter starts (its default is 5 per second): out of the way, the
#: gateway bounds the run. After a 429 that outlasts the gateway's retries Phoenix halves it and
#: holds that LLM's new requests for 5 s (an asyncio sleep, not a blocking one), then raises.
RATE_PER_SECOND = 1_000_000.0


def generation_kwargs(gateway: Any, settings: PhoenixOptions) -> dict[str, Any]:
    """What every Phoenix request carries besides the prompt and the schema."""
    kwargs: dict[str, Any] = {"temperature": float(settings.temperature)}
    if gateway.config.max_tokens:
        kwargs["max_tokens"] = gateway.config.max_tokens
    return kwargs


def make_llm(judge: Any, http: Any, async_http: Any) -> Any:
    """Phoenix's ``LLM`` on ``http`` and ``async_http`` (the judge's httpx clients,
    `ragbridge.plugin`). Call it inside the running event loop."""
    from phoenix.evals import LLM

    cfg = judge.config
    return LLM(provider="openai", model=cfg.model, api_key=judge.api_key,
               base_url=judge.base_url(in_process=True), timeout=cfg.client_timeout(),
               initial_per_second_request_rate=RATE_PER_SECOND,
               sync_client_kwargs={"http_client": http}, async_client_kwargs={"http_client": async_http})


def make_legacy_model(judge: Any, http: Any, async_http: Any, settings: PhoenixOptions) -> Any:
    """Phoenix evals 2.x's legacy ``OpenAIModel`` (what ``llm_classify`` and the legacy evaluators
    call), its two OpenAI clients on ``http`` and ``async_http``. ``OpenAIModel`` takes no HTTP
    client, so the clients it made are replaced (its ``_client`` and ``_async_client``: 2.x is
    frozen, 3.0 removed the class); ``reload_client``, which ``llm_classify`` calls and the legacy
    evaluators do not, would undo that. Generation as the other metrics': ``temperature`` and the
    judge's ``max_tokens``; the request timeout the judge clients'."""
    from openai import AsyncOpenAI, OpenAI
    from phoenix.evals.legacy import OpenAIModel

    cfg = judge.config
    base_url = judge.base_url(in_process=True)
    model = OpenAIModel(model=cfg.model, api_key=judge.api_key, base_url=base_url,
                        temperature=float(settings.temperature), max_tokens=cfg.max_tokens or None,
                        request_timeout=cfg.client_timeout(), initial_rate_limit=int(RATE_PER_SECOND))
    model._client = OpenAI(api_key=judge.api_key, base_url=base_url, max_retries=0, http_client=http)
    model._async_client = AsyncOpenAI(api_key=judge.api_key, base_url=base_url, max_retries=0,
                                      http_client=async_http)
    return model


def make_evaluators(llm: Any, gateway: Any, settings: PhoenixOptions,
                    metrics: Optional[Mapping[str, PhoenixMetric]] = None,
                    legacy_model: Optional[Callable[[], Any]] = None) -> dict[str, Any]:
    """One Phoenix evaluator per canonical metric (``metrics``, default `METRICS`), on ``llm``
    (a legacy one on ``legacy_model()``); RuntimeError when the installed Phoenix maps a label to
    another score than the pinned map (`metrics.PhoenixMetric.labels`)."""
    import phoenix.evals.metrics as pm

    out = {}
    model = None
    for name, metric in (METRICS if metrics is None else metrics).items():
        if metric.legacy:
            import phoenix.evals.legacy as legacy

            if model is None and legacy_model is not None:
                model = legacy_model()
            ev = getattr(legacy, metric.evaluator)(model)
            template = ev._template
            scores = {rail: float(template.score(rail)) for rail in template.rails}
            if scores != metric.label_scores:
                raise RuntimeError(f"Phoenix's {metric.evaluator} maps labels to {scores}, ragbridge expects "
                                   f"{metric.label_scores}")
            out[name] = ev
            continue
        ev = getattr(pm, metric.evaluator)(llm=llm, include_explanation=settings.include_explanation,
                                           **generation_kwargs(gateway, settings))
        if ev.label_score_map != metric.label_scores or ev.name != metric.native_name:
            raise RuntimeError(
                f"Phoenix's {metric.evaluator} ({ev.name!r}) maps labels to {ev.label_score_map}, "
                f"ragbridge expects {metric.native_name!r} with {metric.label_scores}: install the version "
                "in constraints.txt, or run phoenix==VERSION (ragbridge environments list)")
        out[name] = ev
    return out


@dataclass
class PhoenixSession:
    """What the metrics of one run share: the options, Phoenix's LLM with its two httpx clients, and
    one evaluator per metric."""

    settings: PhoenixOptions
    llm: Any
    http_client: Any
    async_http_client: Any
    evaluators: dict[str, Any]


class PhoenixBackend(JudgedBackend):
    name = BACKEND
    library = "arize-phoenix-evals"
    module = "phoenix.evals"
    install_hint = "pip install 'ragbridge[phoenix]'"
    registry = METRICS
    Options = PhoenixOptions
    #: the versions of the library this backend supports (a PEP 440 specifier)
    supports: ClassVar[str] = ">=2.13,<4"
    #: per supported version (each one a lock is shipped for, oldest first): what changes for a user
    #: from the previous supported version
    changes: ClassVar[dict[str, str]] = {
        "2.13.0": "answer_correctness is offered: Phoenix's QA_PROMPT_TEMPLATE (llm_classify's, through its "
                  "legacy QAEvaluator), correct/incorrect against the reference. context_relevance is "
                  "DocumentRelevanceEvaluator per chunk (relevant when the chunk contains an answer to the "
                  "question), a stricter question than 3.9's.",
        "3.9.4": "answer_correctness is gone (3.0 removed llm_classify and its templates). "
                 "context_relevance is RetrievalRelevanceEvaluator per chunk (3.5: relevant when any "
                 "meaningful part bears on the request), so more chunks pass; faithfulness and abstention "
                 "send the same prompts as 2.13.",
    }

    def environment(self) -> dict[str, str]:
        return env.environment()

    def metrics(self) -> list:
        """The metrics at the installed Phoenix evals (`metrics_at`)."""
        return self.metrics_at(self.version())

    def metrics_at(self, version: Optional[str]) -> list:
        """The metrics at Phoenix evals ``version`` (`metrics.metrics_at`)."""
        return list(metrics_at(version).values())

    async def open(self, ctx: ScoringContext) -> Optional[PhoenixSession]:
        settings: PhoenixOptions = ctx.options.of(self)
        judge = ctx.judge
        if judge is None:
            return None  # score says so, for every case
        from ragbridge.plugin import async_http_client, http_client

        http, async_http = http_client(judge), async_http_client(judge)
        try:
            llm = make_llm(judge, http, async_http)
            evaluators = make_evaluators(llm, judge, settings, metrics_at(self.version()),
                                         lambda: make_legacy_model(judge, http, async_http, settings))
        except BaseException:
            await async_http.aclose()
            http.close()
            raise
        return PhoenixSession(settings, llm, http, async_http, evaluators)

    async def close(self, ctx: ScoringContext) -> None:
        session = ctx.session
        if isinstance(session, PhoenixSession):
            try:
                await session.async_http_client.aclose()
            finally:
                session.http_client.close()

    async def judge_case(self, metric: PhoenixMetric, case: Case, ctx: ScoringContext,
                         prepared: None) -> ScoreFields:
        """The case's record(s) through Phoenix's ``async_evaluate``."""
        if metric.unanswerable_only and case.answerable:
            return {"reason": "case is answerable"}
        evaluator = ctx.session.evaluators[metric.name]
        if metric.per_chunk:
            pairs = translate.chunk_records(case, metric.chunk_field)
            results = await asyncio.gather(*(evaluator.async_evaluate(r) for _, r in pairs),
                                           return_exceptions=True)
            for r in results:  # an interrupt is not a chunk's failure
                if isinstance(r, asyncio.CancelledError):
                    raise r
            return translate.chunk_score_fields(metric, list(zip((c for c, _ in pairs), results)))
        record = translate.record(metric, case)
        if metric.legacy:
            label, score, explanation = await evaluator.aevaluate(
                record, provide_explanation=ctx.session.settings.include_explanation)
            return translate.score_fields(metric, [translate.LegacyScore(label, score, explanation)])
        return translate.score_fields(metric, await evaluator.async_evaluate(record))

    def failure(self, metric: PhoenixMetric, case: Case, exc: Exception, ctx: ScoringContext) -> ScoreFields:
        return {"error": translate.error_message(exc)}
