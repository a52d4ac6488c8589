"""The DeepEval backend: DeepEval's own metric classes, judged through ragbridge's judge gateway.

The run's lifecycle: ``environment()`` is `env.environment` (telemetry, ``.env`` loading and the
``.deepeval/`` folder off, DeepEval's own retry off), applied before ``open``; ``open`` sets the
judge-dependent `env.runtime_environment` and makes one `DeepEvalSession` (an ``httpx.AsyncClient``
and an ``httpx.Client`` on the gateway's in-process transports, shared by every metric and case of the
run: DeepEval builds a synchronous OpenAI client with every judge object, and one made without a client
of ours would load the CA bundle each time, a blocking 0.05-0.3 s per case on the event loop); ``close``
settles DeepEval's telemetry while its opt-out holds (`env.settle_telemetry`) and undoes both.
Each case still gets its own tagged base URL (so the gateway counts calls per case) and its own
judge and metric objects (`build_judge`, `metrics.make_metric`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from typing import Any, AsyncIterator, Optional, Sequence

from ragbridge.backend import Backend, MetricSpec, ScoringContext, fan_out
from ragbridge.schema import Case, Score

from . import env, translate
from .metrics import BACKEND, DESCRIPTIONS, METRICS, make_metric, options_for

__all__ = ["DeepEvalBackend", "DeepEvalSession", "build_judge", "structured_outputs"]


def structured_outputs(model_name: str) -> bool:
    """Whether DeepEval sends strict ``json_schema`` requests for this judge model name.

    DeepEval decides by name: a name in its OpenAI model registry (``gpt-4o-mini``, ``gpt-4.1``, ...)
    gets structured outputs (and log-probabilities for GEval); any other name gets plain prompts whose
    answer DeepEval cuts the JSON out of."""
    from deepeval.models.llms.constants import OPENAI_MODELS_DATA
    from deepeval.models.utils import parse_model_name

    return bool(OPENAI_MODELS_DATA.get(parse_model_name(model_name)).supports_structured_outputs)


def build_judge(gateway: Any, metric: str, case_id: str, http_client: Any = None,
                sync_http_client: Any = None):
    """DeepEval's ``OpenAIModel`` pointed at the gateway, counted under (deepeval, metric, case_id).

    The model name is ragbridge's judge model, so DeepEval's own registry decides the wire format (see
    ``structured_outputs``). The key is the gateway's own key; temperature 0; the judge's
    ``max_tokens`` is passed on; the client timeout outlasts the gateway's retries. ``http_client`` is
    an ``httpx.AsyncClient`` on the gateway's in-process transport; without one, DeepEval's own
    client goes through the gateway's loopback socket. ``sync_http_client``: the ``httpx.Client`` for
    the synchronous OpenAI client DeepEval builds with the model (made anew without one)."""
    from deepeval.models import OpenAIModel

    cfg = gateway.config
    generation_kwargs = {"max_tokens": cfg.max_tokens} if cfg.max_tokens else {}
    kwargs: dict[str, Any] = {"timeout": cfg.client_timeout()}
    if http_client is not None:
        kwargs["async_http_client"] = http_client
    if sync_http_client is not None:
        kwargs["http_client"] = sync_http_client
    return OpenAIModel(
        model=cfg.model,
        base_url=gateway.base_url(BACKEND, metric, case_id, in_process=http_client is not None),
        api_key=gateway.api_key,
        temperature=0,
        generation_kwargs=generation_kwargs,
        **kwargs,
    )


@dataclass
class DeepEvalSession:
    """What the metrics of one run share: the gateway, one async and one sync httpx client on its
    in-process transports, and the run-time environment ``open`` applied (undone by ``close``)."""

    gateway: Any
    http_client: Any
    environment: contextlib.ExitStack
    sync_http_client: Any = None


class DeepEvalBackend(Backend):
    name = BACKEND
    library = "deepeval"
    module = "deepeval"
    install_hint = "pip install 'ragbridge[deepeval]'"

    def metrics(self) -> list[MetricSpec]:
        return [
            MetricSpec(canon, native_name=native, requires=requires, judge=True,
                       description=f"{cls}: {DESCRIPTIONS[canon]}")
            for canon, (cls, native, requires) in METRICS.items()
        ]

    def environment(self) -> dict[str, str]:
        return env.environment()

    async def open(self, ctx: ScoringContext) -> Optional[DeepEvalSession]:
        if ctx.judge is None:
            return None  # score says so, for every case
        import httpx

        from ragbridge.run.runner import applied_environment

        gateway = ctx.judge
        stack = contextlib.ExitStack()
        stack.enter_context(applied_environment(env.runtime_environment(gateway)))
        timeout = httpx.Timeout(gateway.config.client_timeout())
        http_client = httpx.AsyncClient(transport=gateway.async_transport(), timeout=timeout, trust_env=False)
        sync_http_client = httpx.Client(transport=gateway.transport(), timeout=timeout, trust_env=False)
        return DeepEvalSession(gateway, http_client, stack, sync_http_client)

    async def close(self, ctx: ScoringContext) -> None:
        session = ctx.session
        if isinstance(session, DeepEvalSession):
            try:
                env.settle_telemetry()  # while the run's opt-out holds
                await session.http_client.aclose()
                session.sync_http_client.close()
            finally:
                session.environment.close()

    async def score(self, metric: str, cases: Sequence[Case], ctx: ScoringContext) -> AsyncIterator[Score]:
        if metric not in METRICS:
            raise ValueError(f"the deepeval backend has no metric {metric!r}")
        session = ctx.session
        if not isinstance(session, DeepEvalSession):
            raise RuntimeError("the deepeval backend needs a judge (ctx.judge is None)")
        opts = options_for(ctx.options.backend_options)
        limit = ctx.cases_in_flight(opts.get("concurrency"))

        async def one(case: Case) -> Score:
            # ctx.judge, not the session's: it files the calls under this job's repeat
            return await self.score_case(metric, case, ctx.judge or session.gateway, opts,
                                         session.http_client, session.sync_http_client)

        async for score in fan_out(cases, one, limit):
            yield score

    async def score_case(self, metric: str, case: Case, gateway: Any, opts: Optional[dict] = None,
                         http_client: Any = None, sync_http_client: Any = None) -> Score:
        """Score one case: a fresh judge and metric instance, DeepEval's ``a_measure``, then the Score."""
        start = time.perf_counter()
        try:
            model = build_judge(gateway, metric, case.id, http_client, sync_http_client)
            m = make_metric(metric, model, opts)
            await m.a_measure(translate.to_test_case(case), _show_indicator=False)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # one case's failure is that Score's error
            return Score(case_id=case.id, metric=metric, backend=BACKEND, native_metric=METRICS[metric][1],
                         error=translate.error_message(exc), seconds=time.perf_counter() - start)
        return translate.to_score(metric, case.id, m, time.perf_counter() - start)
