"""The RAGAS backend: RAGAS 0.4.3's own metric classes (``ragas.metrics.collections``), each case
scored with ``await metric.ascore(...)`` by ragbridge, every judge call through ragbridge's gateway.

The metric formulas, ranges and normalisation are documented in the package docstring
(:mod:`ragbridge_ragas`), the metrics in `metrics.METRICS`. This module builds RAGAS' components and
runs them, over the run's lifecycle:

* ``environment()``: `env.ENVIRONMENT` (RAGAS' tracking off, no hub downloads), applied before
  ``open``, which is where RAGAS is first imported;
* ``open``: one `RagasSession` for the run, an ``openai.AsyncOpenAI`` client (shared by the metric
  passes) whose httpx client hands requests to the gateway in-process (``gateway.async_transport()``),
  with its key, ``max_retries=0`` (the gateway retries 429, 5xx and timeouts itself and tells the SDK
  not to) and the gateway's ``client_timeout()``; ``close`` closes it. Each case's calls are
  attributed to it by the gateway's ``tag_scope``, so the runner fills each Score's judge calls and
  tokens;
* per metric: the LLM from ``ragas.llms.llm_factory`` (instructor, JSON mode) with RAGAS' default
  sampling (temperature 0.01, top_p 0.1) and ``max_tokens`` = ``JudgeConfig.max_tokens`` or 4096
  (RAGAS' 1024 truncates long statement lists); instructor re-asks only on unparseable or
  schema-invalid output (3 attempts, RAGAS' default) and never re-sends a request the gateway already
  gave up on; embeddings from ``ragas.embeddings.OpenAIEmbeddings`` (RAGAS' modern provider: no
  LangChain, no tiktoken download) on the same client, model ``JudgeConfig.embedding_model`` or RAGAS'
  default.

Failures are per score: an exception out of ``ascore`` (judge error after the gateway's retries,
timeout, parse failure after instructor's re-asks, RAGAS' own ValueError) becomes that Score's
``error`` (`ragbridge.backend.error_text`); so is a reply whose verdict is outside what RAGAS' reply
model allows (`metrics.check_reply`: RAGAS itself takes any integer). ContextRelevance swallows judge
errors and returns NaN;
the errors it swallowed are recorded per case and reported the same way (`translate.to_score`).
"""

from __future__ import annotations

import contextvars
import time
from dataclasses import dataclass
from typing import Any, AsyncIterator, Optional, Sequence

from ragbridge.backend import Backend, MetricSpec, ScoringContext, error_text, fan_out
from ragbridge.schema import Case, Score

from .env import ENVIRONMENT, keep_ragas_id_out_of_home
from .metrics import METRICS, RagasMetric, check_reply
from .translate import to_score

__all__ = ["RagasBackend", "RagasSession", "DEFAULT_MAX_TOKENS", "PARSE_ATTEMPTS", "parse_retrying"]

DEFAULT_MAX_TOKENS = 4096
PARSE_ATTEMPTS = 3  # instructor's default, the number of tries RAGAS gets for a parseable answer

# the errors a metric swallowed while scoring the current case (ContextRelevance retries and NaNs)
_SWALLOWED: contextvars.ContextVar[Optional[list]] = contextvars.ContextVar("ragbridge_ragas_errors",
                                                                            default=None)


def parse_retrying():
    """instructor's retry policy for RAGAS' calls: re-ask on unparseable or schema-invalid output
    only (transport and HTTP errors were already retried by the gateway), ``PARSE_ATTEMPTS`` tries.

    One LLM object serves every concurrent case, and tenacity keeps an iteration's state on the
    retrying object, so each ``async for`` gets a fresh copy (instructor iterates it once per call)."""
    from json import JSONDecodeError

    from instructor.core.exceptions import AsyncValidationError
    from instructor.core.exceptions import ValidationError as InstructorValidationError
    from pydantic import ValidationError
    from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt

    class PerCallRetrying(AsyncRetrying):
        def __aiter__(self):
            return AsyncRetrying.__aiter__(self.copy())

    return PerCallRetrying(
        stop=stop_after_attempt(PARSE_ATTEMPTS),
        retry=retry_if_exception_type((ValidationError, JSONDecodeError, AsyncValidationError,
                                       InstructorValidationError)),
    )


@dataclass
class RagasSession:
    """What the metric passes of one run share: the gateway and one ``AsyncOpenAI`` client on its
    in-process transport (the gateway bounds upstream concurrency)."""

    gateway: Any
    client: Any

    @classmethod
    def open(cls, gateway: Any) -> "RagasSession":
        import httpx
        from openai import AsyncOpenAI

        cfg = gateway.config
        http = httpx.AsyncClient(
            # in-process: no socket between RAGAS and the gateway; calls are counted under the
            # tag_scope each case is scored in
            transport=gateway.async_transport(),
            timeout=httpx.Timeout(cfg.client_timeout(), connect=10.0),
            trust_env=False,
        )
        client = AsyncOpenAI(base_url=gateway.base_url(in_process=True), api_key=gateway.api_key,
                             max_retries=0, timeout=cfg.client_timeout(), http_client=http)
        return cls(gateway, client)

    def metric(self, spec: RagasMetric) -> Any:
        """RAGAS' metric object for ``spec``, with its LLM (and embeddings) on the session's client."""
        from ragas.embeddings import OpenAIEmbeddings
        from ragas.llms import llm_factory
        from ragas.metrics import collections as rc

        cfg = self.gateway.config
        llm = llm_factory(cfg.model, client=self.client, max_tokens=cfg.max_tokens or DEFAULT_MAX_TOKENS,
                          max_retries=parse_retrying())
        agenerate = llm.agenerate

        async def recorded_agenerate(*args: Any, **kwargs: Any) -> Any:
            try:
                reply = await agenerate(*args, **kwargs)
                check_reply(reply)  # RAGAS would take any integer as a verdict
                return reply
            except Exception as exc:
                errors = _SWALLOWED.get()
                if errors is not None:
                    errors.append(exc)
                raise

        # the same hook point RAGAS itself uses for its cache (an instance attribute over the method)
        llm.agenerate = recorded_agenerate  # type: ignore[method-assign]
        kwargs: dict[str, Any] = dict(spec.kwargs)
        if spec.embeddings:
            kwargs["embeddings"] = OpenAIEmbeddings(
                client=self.client, model=cfg.embedding_model or OpenAIEmbeddings.DEFAULT_MODEL)
        return getattr(rc, spec.cls)(llm=llm, **kwargs)


class RagasBackend(Backend):
    name = "ragas"
    library = "ragas"
    module = "ragas"
    install_hint = "pip install 'ragbridge[ragas]'"

    def metrics(self) -> list[MetricSpec]:
        return [
            MetricSpec(m.canonical, native_name=m.native, requires=m.requires, judge=True,
                       description=m.description)
            for m in METRICS.values()
        ]

    def environment(self) -> dict[str, str]:
        return dict(ENVIRONMENT)

    async def open(self, ctx: ScoringContext) -> Optional[RagasSession]:
        if ctx.judge is None:
            return None  # score says so, for every case
        keep_ragas_id_out_of_home()
        return RagasSession.open(ctx.judge)

    async def close(self, ctx: ScoringContext) -> None:
        if isinstance(ctx.session, RagasSession):
            await ctx.session.client.close()

    async def score(self, metric: str, cases: Sequence[Case], ctx: ScoringContext) -> AsyncIterator[Score]:
        spec = METRICS.get(metric)
        if spec is None:
            raise ValueError(f"the ragas backend has no metric {metric!r}")
        session = ctx.session
        if not isinstance(session, RagasSession):
            raise RuntimeError("the ragas backend needs a judge (ctx.judge is None)")
        m = session.metric(spec)

        async def one(case: Case) -> Score:
            # ctx.judge, not the session's: it files the calls under this job's repeat
            return await self.score_case(spec, m, ctx.judge or session.gateway, metric, case)

        async for score in fan_out(cases, one, ctx.cases_in_flight()):
            yield score

    async def score_case(self, spec: RagasMetric, m: Any, gateway: Any, metric: str, case: Case) -> Score:
        """One case: RAGAS' ``ascore`` inside the gateway's ``tag_scope``, then its Score."""
        errors: list = []
        token = _SWALLOWED.set(errors)
        t0 = time.perf_counter()
        try:
            with gateway.tag_scope(self.name, metric, case.id):
                result = await m.ascore(**spec.inputs(case))
        except Exception as exc:
            return Score(case_id=case.id, metric=metric, backend=self.name, native_metric=spec.native,
                         error=error_text(exc), seconds=time.perf_counter() - t0)
        finally:
            _SWALLOWED.reset(token)
        return to_score(spec, metric, case.id, result, errors, time.perf_counter() - t0)
