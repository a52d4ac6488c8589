"""The TruLens backend: TruLens' provider functions on each case, through ragbridge's judge gateway.

The run's lifecycle: ``environment()`` is `env.ENVIRONMENT` (no tracing threads), applied before
``open``, where TruLens is first imported. ``open`` reads the run's options (`metrics.TruLensSettings`),
settles the endpoint family (``api="auto"`` probes ``/responses`` once, through the gateway, while
TruLens is imported) and makes
one `TruLensSession`: one TruLens ``OpenAI`` provider (`make_provider`: one httpx client on the
gateway's in-process transport) and one thread pool, shared by every metric of the run; ``close``
closes both. The metric functions are synchronous (`translate`): each case runs in a worker thread,
inside the gateway's ``tag_scope`` so every HTTP call is counted for its case (TruLens's own thread
pool, used for the per-sentence groundedness calls, copies the context and so keeps the tag).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib.metadata
import threading
import time
from dataclasses import dataclass
from typing import Any, AsyncIterator, Optional, Sequence

from ragbridge.backend import Backend, MetricSpec, ScoringContext, fan_out
from ragbridge.schema import Case, Score

from .env import ENVIRONMENT, offline_sentence_splitter, quiet_import
from .metrics import METRICS, TruLensMetric, TruLensSettings
from .translate import error_score, to_score

__all__ = ["TruLensBackend", "TruLensSession", "make_provider", "provider_class", "set_api",
           "undo_openai_instrumentation", "PROBE_BODY_TEXT"]

PROBE_BODY_TEXT = "Reply with the single word OK."

# --------------------------------------------------------------------------------------------
# The provider


_provider_cls: Any = None
_provider_lock = threading.Lock()


def provider_class():
    """TruLens's OpenAI provider with the capability cache keyed by model *and* endpoint.

    TruLens 2.16 caches "has a Responses API" per model name for the whole process; two judges
    with the same model name on different servers would share the answer. This subclass only
    changes that key; every feedback function is TruLens's own."""
    global _provider_cls
    with _provider_lock:
        if _provider_cls is None:
            from trulens.providers.openai import OpenAI

            class RagbridgeOpenAI(OpenAI):
                def _capabilities_key(self) -> str:
                    try:
                        url = str(self.endpoint.client.client.base_url)
                    except Exception:  # pragma: no cover - defensive
                        url = ""
                    return f"{self.model_engine}@{url}"

            _provider_cls = RagbridgeOpenAI
    return _provider_cls


def set_api(provider: Any, api: str) -> None:
    """Pre-seed TruLens's capability cache: ``chat`` never tries ``/responses``."""
    provider.clear_capabilities_cache()
    if api == "chat":
        provider._set_capabilities({"responses_api": False, "structured_outputs": False, "cfg": False})
    elif api == "responses":
        provider._set_capabilities({"responses_api": True, "structured_outputs": True})


def make_provider(model: str, base_url: str, api_key: str, *, api: str = "chat", timeout: float = 600.0,
                  event_hooks: Optional[dict] = None, max_connections: int = 16, retries: int = 0,
                  stock: bool = False, transport: Any = None) -> Any:
    """A TruLens OpenAI provider on ``base_url`` whose HTTP goes through one httpx client.

    ``retries`` is TruLens's own retry count (``Endpoint.run_in_pace``; 3 with 2/4/8 s sleeps by
    default); ragbridge's gateway already retries 429/5xx/timeouts, so the backend passes 0.
    ``stock=True`` builds TruLens's unmodified ``OpenAI`` class (used by the parity tests).
    ``transport`` is an httpx transport, e.g. the judge gateway's in-process ``gateway.transport()``."""
    import httpx
    import openai

    http = httpx.Client(
        transport=transport,
        timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)),
        limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections),
        event_hooks=event_hooks or {},
        trust_env=False,  # never a proxy: the judge is on loopback
        # Plain http to the loopback gateway: no TLS, so no CA bundle to load (it costs ~0.2 s of CPU
        # per client). An https base_url is the gateway's business, not this client's.
        verify=not base_url.startswith("http://"),
    )
    client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=timeout,
                           http_client=http)
    if stock:
        from trulens.providers.openai import OpenAI as cls
    else:
        cls = provider_class()
    provider = cls(model_engine=model, client=client, rpm=10**9)
    provider.endpoint.retries = retries
    set_api(provider, api)
    if not stock:
        undo_openai_instrumentation()
    return provider


def undo_openai_instrumentation() -> None:
    """Put back the ``openai`` methods TruLens's endpoint wraps for cost tracking.

    Building a TruLens OpenAI provider replaces ``create`` on every ``openai`` resource class, for
    the whole process, with a synchronous wrapper: ``AsyncEmbeddings.create`` then no longer looks
    like a coroutine function, and RAGAS, running in the same process, refuses its async client
    ("Cannot use aembed_text() with a synchronous client"). ragbridge counts calls and tokens in its
    judge gateway, so TruLens's cost tracking is not needed: undo the wrapping.
    """
    from trulens.core.feedback.endpoint import Endpoint

    for holder, wrappers in list(Endpoint.instrumented_methods.items()):
        for original, wrapper, _ in reversed(wrappers):
            name = getattr(original, "__name__", None)
            if name and holder.__dict__.get(name) is wrapper:
                setattr(holder, name, original)
        del Endpoint.instrumented_methods[holder]


# --------------------------------------------------------------------------------------------
# The backend


@dataclass
class TruLensSession:
    """What the metrics of one run share: the gateway, the options, the endpoint family, the provider
    and the thread pool the cases run in."""

    gateway: Any
    settings: TruLensSettings
    api: str
    provider: Any
    executor: concurrent.futures.Executor


def probe_api(gateway: Any) -> str:
    """``"responses"`` when the judge answers ``POST /responses`` (one tiny request, through the
    gateway and its cache), else ``"chat"``: the path every server has."""
    import httpx

    url = gateway.base_url("trulens", "responses-api-probe", None, in_process=True) + "/responses"
    body = {"model": gateway.config.model, "input": PROBE_BODY_TEXT, "max_output_tokens": 16}
    try:
        with httpx.Client(transport=gateway.transport(), trust_env=False,
                          timeout=gateway.config.client_timeout()) as client:
            r = client.post(url, json=body, headers={"Authorization": f"Bearer {gateway.api_key}"})
        if 200 <= r.status_code < 300 and isinstance(r.json().get("output"), list):
            return "responses"
    except Exception:  # noqa: BLE001 - any failure: use the path every server has
        pass
    return "chat"


class TruLensBackend(Backend):
    name = "trulens"
    library = "trulens-feedback"
    module = "trulens.feedback"
    install_hint = "pip install 'ragbridge[trulens]'"

    def available(self) -> bool:
        """The three distributions installed (checked from their metadata: nothing is imported)."""
        try:
            for dist in ("trulens-feedback", "trulens-providers-openai", "trulens-core"):
                importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            return False
        return True

    def metrics(self) -> list[MetricSpec]:
        return [MetricSpec(m.canonical, m.native, requires=m.requires, judge=True, description=m.description)
                for m in METRICS.values()]

    def environment(self) -> dict[str, str]:
        return dict(ENVIRONMENT)

    async def open(self, ctx: ScoringContext) -> Optional[TruLensSession]:
        settings = TruLensSettings.from_options(ctx.options.backend_options.get(self.name))
        gateway = ctx.judge
        if gateway is None:
            return None  # score says so, for every case
        # the probe (one judge call, in a thread) is made while TruLens is imported and its provider built
        probe = (asyncio.get_running_loop().run_in_executor(None, probe_api, gateway)
                 if settings.api == "auto" else None)
        quiet_import()
        cfg = gateway.config
        provider = await asyncio.to_thread(
            make_provider, cfg.model, gateway.base_url(in_process=True), gateway.api_key,
            api="chat" if probe is not None else settings.api, timeout=cfg.client_timeout(),
            transport=gateway.transport())
        api = settings.api if probe is None else await probe
        if api != "chat":
            set_api(provider, api)
        # The standard library's pool: importing TruLens replaces concurrent.futures'
        # ThreadPoolExecutor process-wide with one that captures inspect.stack() on every submit.
        try:
            from trulens.core.utils.threading import fThreadPoolExecutor as pool_cls
        except ImportError:  # pragma: no cover - other TruLens versions
            pool_cls = concurrent.futures.ThreadPoolExecutor
        # a thread per case in flight (`ScoringContext.cases_in_flight`)
        executor = pool_cls(max_workers=ctx.cases_in_flight(), thread_name_prefix="ragbridge-trulens")
        return TruLensSession(gateway, settings, api, provider, executor)

    async def close(self, ctx: ScoringContext) -> None:
        session = ctx.session
        if isinstance(session, TruLensSession):
            try:
                session.provider.endpoint.client.client.close()
            finally:
                session.executor.shutdown(wait=False, cancel_futures=True)

    async def score(self, metric: str, cases: Sequence[Case], ctx: ScoringContext) -> AsyncIterator[Score]:
        spec = METRICS.get(metric)
        if spec is None:
            raise ValueError(f"the trulens backend has no metric {metric!r}")
        session = ctx.session
        if not isinstance(session, TruLensSession):
            raise RuntimeError("the trulens backend needs a judge (--judge-model, --judge-base-url)")
        if metric == "faithfulness" and session.settings.sentence_split == "nltk":
            await asyncio.to_thread(offline_sentence_splitter)
        loop = asyncio.get_running_loop()

        async def one(case: Case) -> Score:
            # ctx.judge, not the session's: it files the calls under this job's repeat
            return await loop.run_in_executor(session.executor, self.score_case, spec, case, session,
                                              ctx.judge)

        async for score in fan_out(cases, one):  # the thread pool bounds it
            yield score

    def score_case(self, spec: TruLensMetric, case: Case, session: TruLensSession,
                   gateway: Any = None) -> Score:
        """One case, in a worker thread: the metric function inside the gateway's ``tag_scope``."""
        t0 = time.perf_counter()
        try:
            with (gateway or session.gateway).tag_scope(self.name, spec.canonical, case.id):
                outcome = spec.scorer(session.provider, case, session.settings)
        except Exception as exc:  # noqa: BLE001 - one case's failure is that Score's error
            return error_score(spec, case.id, session.api, exc, time.perf_counter() - t0)
        return to_score(spec, case.id, session.api, outcome, time.perf_counter() - t0)
