"""The TruLens backend: TruLens' provider functions on each case, through ragbridge's judge gateway.

The run's lifecycle: ``environment()`` is `env.ENVIRONMENT` (no tracing threads), applied before
``open``, where TruLens is first imported. ``open`` reads the run's options (`options.TruLensOptions`),
settles the endpoint family (``api="auto"`` probes ``/responses`` once, through the gateway, while
TruLens is imported) and makes one `TruLensSession`: one TruLens ``OpenAI`` provider (`make_provider`,
on `ragbridge.plugin.openai_client`, in-process to the gateway) and one thread pool of a
thread per case in flight (`ragbridge.plugin.JudgedBackend.cases_at_once`: the
``concurrency`` option, default twice the judge's ``max_concurrency``), shared by every metric of
the run; ``close`` closes both. The per-case template is ``JudgedBackend``'s; the metric functions
are synchronous (`translate`), so each case runs on a pool thread (`ragbridge.plugin.in_thread`)
in a copy of the case's context, inside its ``tag_scope``, so every HTTP call is counted for its case
(TruLens's own thread pool, used for the per-sentence groundedness calls, copies the context and so
keeps the tag).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib.metadata
import threading
from dataclasses import dataclass
from typing import Any, ClassVar, Optional

from ragbridge.plugin import Case, JudgedBackend, ScoreFields, ScoringContext, in_thread

from .env import ENVIRONMENT, offline_sentence_splitter, quiet_import
from .metrics import METRICS, TruLensMetric
from .options import TruLensOptions
from .translate import error_fields, score_fields

__all__ = ["TruLensBackend", "TruLensSession", "make_provider", "provider_class", "set_api",
           "undo_openai_instrumentation", "probe_api", "PROBE_BODY_TEXT"]

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
            import pydantic
            from trulens.providers.openai import OpenAI

            class RagbridgeOpenAI(OpenAI):
                #: TruLens 1.x: the endpoint family ragbridge chose (`set_api`); None leaves TruLens's rule
                _ragbridge_api: Optional[str] = pydantic.PrivateAttr(default=None)

                def _capabilities_key(self) -> str:
                    try:
                        url = str(self.endpoint.client.client.base_url)
                    except Exception:  # pragma: no cover - defensive
                        url = ""
                    return f"{self.model_engine}@{url}"

                if not has_capability_cache():
                    def _structured_output_supported(self) -> bool:
                        if self._ragbridge_api is None:
                            return super()._structured_output_supported()
                        return self._ragbridge_api == "responses"

            _provider_cls = RagbridgeOpenAI
    return _provider_cls


def has_capability_cache() -> bool:
    """Whether the installed TruLens probes and caches the judge's endpoint family (2.16); TruLens 1.5
    decides by the model's name alone (``_structured_output_supported``: every name but gpt-3.5 and
    the gpt-4 models before gpt-4o goes to ``/responses``, with no fallback to chat completions)."""
    from trulens.feedback.llm_provider import LLMProvider

    return hasattr(LLMProvider, "clear_capabilities_cache")


def set_api(provider: Any, api: str, *, probed: bool = False) -> None:
    """Pre-seed TruLens's capability cache: ``chat`` never tries ``/responses``.

    TruLens 1.x has no such cache: ``chat`` and ``responses`` replace its model-name rule, and a
    ``/responses`` found by the probe (``probed``) leaves the rule to TruLens, as its own call does."""
    if not has_capability_cache():
        provider._ragbridge_api = None if probed and api == "responses" else api
        return
    provider.clear_capabilities_cache()
    if api == "chat":
        provider._set_capabilities({"responses_api": False, "structured_outputs": False, "cfg": False})
    elif api == "responses":
        provider._set_capabilities({"responses_api": True, "structured_outputs": True})


def make_provider(client: Any, model: str, *, api: str = "chat", retries: int = 0) -> Any:
    """A TruLens OpenAI provider for judge ``model`` on ``client``, an ``openai.OpenAI`` client (the
    backend's: `ragbridge.plugin.openai_client`, in-process to the judge gateway).

    ``retries`` is TruLens's own retry count (``Endpoint.run_in_pace``; 3 with 2/4/8 s sleeps by
    default); ragbridge's gateway already retries 429/5xx/timeouts, so the backend passes 0."""
    provider = provider_class()(model_engine=model, client=client, rpm=10**9)
    provider.endpoint.retries = retries
    set_api(provider, api)
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
    """What the metrics of one run share: the options, the endpoint family, the provider and the
    thread pool the cases run in."""

    settings: TruLensOptions
    api: str
    provider: Any
    executor: concurrent.futures.Executor


def probe_api(judge: Any) -> str:
    """``"responses"`` when the judge answers ``POST /responses`` (one tiny request, through the
    gateway and its cache), else ``"chat"``: the path every server has."""
    from ragbridge.plugin import http_client

    url = judge.base_url("trulens", "responses-api-probe", None, in_process=True) + "/responses"
    body = {"model": judge.config.model, "input": PROBE_BODY_TEXT, "max_output_tokens": 16}
    try:
        with http_client(judge) as client:
            r = client.post(url, json=body, headers={"Authorization": f"Bearer {judge.api_key}"})
        if 200 <= r.status_code < 300 and isinstance(r.json().get("output"), list):
            return "responses"
    except Exception:  # noqa: BLE001 - any failure: use the path every server has
        pass
    return "chat"


class TruLensBackend(JudgedBackend):
    name = "trulens"
    library = "trulens-feedback"
    module = "trulens.feedback"
    install_hint = "pip install 'ragbridge[trulens]'"
    registry = METRICS
    Options = TruLensOptions
    #: the versions of TruLens (trulens-feedback, with trulens-core and trulens-providers-openai of
    #: the same version) the backend supports; a lock ships for 1.5.3 and 2.16.0
    supports: ClassVar[str] = ">=1.5.3,<3"
    #: what changes for a user from one shipped version to the next (from TruLens's own source:
    #: feedback/v2/feedback.py, feedback/prompts.py and feedback/llm_provider.py at 1.5.3,
    #: feedback/templates/rag.py, templates/quality.py and feedback/llm_provider.py at 2.16.0)
    changes: ClassVar[dict[str, str]] = {
        "1.5.3": (
            "faithfulness keeps no per-sentence grade (its reasons are one text) and grades a bare "
            "list marker such as '1.' as a sentence; context_relevance runs only with max_score 3 "
            "(TruLens 1.5 asks the judge on 0-3 whatever the scale)."),
        "2.16.0": (
            "faithfulness and answer_relevance ask for a one-line JSON object instead of the "
            "Criteria / Supporting Evidence / Score text, and answer_correctness's prompt labels the "
            "response it grades. faithfulness keeps each sentence's grade, leaves unparsable ones out "
            "of the mean and skips bare list markers; context_relevance asks on the max_score scale."),
    }

    def available(self) -> bool:
        """The three distributions installed (checked from their metadata: nothing is imported)."""
        try:
            for dist in ("trulens-feedback", "trulens-providers-openai", "trulens-core"):
                importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            return False
        return True

    def environment(self) -> dict[str, str]:
        return dict(ENVIRONMENT)

    async def open(self, ctx: ScoringContext) -> Optional[TruLensSession]:
        settings: TruLensOptions = ctx.options.of(self)
        judge = ctx.judge
        if judge is None:
            return None  # score says so, for every case
        from ragbridge.plugin import openai_client

        cases_at_once = self.cases_at_once(ctx)
        # the probe (one judge call, in a thread) is made while TruLens is imported and its provider built
        probe = (asyncio.get_running_loop().run_in_executor(None, probe_api, judge)
                 if settings.api == "auto" else None)
        quiet_import()
        provider = await asyncio.to_thread(
            lambda: make_provider(openai_client(judge), judge.config.model,
                                  api="chat" if probe is not None else settings.api))
        api = settings.api if probe is None else await probe
        if api != "chat":
            set_api(provider, api, probed=probe is not None)
        # The standard library's pool: importing TruLens replaces concurrent.futures'
        # ThreadPoolExecutor process-wide with one that captures inspect.stack() on every submit.
        try:
            from trulens.core.utils.threading import fThreadPoolExecutor as pool_cls
        except ImportError:  # pragma: no cover - other TruLens versions
            pool_cls = concurrent.futures.ThreadPoolExecutor
        # a thread per case in flight
        executor = pool_cls(max_workers=cases_at_once, thread_name_prefix="ragbridge-trulens")
        return TruLensSession(settings, api, provider, executor)

    async def close(self, ctx: ScoringContext) -> None:
        session = ctx.session
        if isinstance(session, TruLensSession):
            try:
                session.provider.endpoint.client.client.close()
            finally:
                session.executor.shutdown(wait=False, cancel_futures=True)

    async def prepare(self, metric: TruLensMetric, ctx: ScoringContext) -> None:
        """The sentence splitter's parameters, loaded once, for faithfulness split by NLTK."""
        if metric.name == "faithfulness" and ctx.session.settings.sentence_split == "nltk":
            await asyncio.to_thread(offline_sentence_splitter)

    async def judge_case(self, metric: TruLensMetric, case: Case, ctx: ScoringContext,
                         prepared: None) -> ScoreFields:
        """The metric function on one of the session's threads (inside the case's ``tag_scope``)."""
        session = ctx.session
        outcome = await in_thread(session.executor, metric.scorer, session.provider, case, session.settings)
        return score_fields(session.api, outcome)

    def failure(self, metric: TruLensMetric, case: Case, exc: Exception, ctx: ScoringContext) -> ScoreFields:
        return error_fields(ctx.session.api, exc)
