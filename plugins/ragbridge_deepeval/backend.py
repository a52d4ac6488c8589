"""The DeepEval backend: DeepEval's own metric classes, judged through ragbridge's judge gateway."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any, AsyncIterator, Optional, Sequence

from ragbridge.backend import Backend, MetricSpec, ScoringContext
from ragbridge.schema import Case, Score

from . import translate
from .translate import BACKEND, METRICS

_DESCRIPTIONS = {
    "faithfulness": "claims of the answer not contradicted by truths extracted from the retrieved context",
    "answer_relevance": "statements of the answer relevant to the question",
    "context_precision": "rank-weighted precision of retrieved chunks useful for the reference answer",
    "context_recall": "reference sentences attributable to the retrieved context",
    "context_relevance": "statements of the retrieved context relevant to the question",
    "answer_correctness": "GEval with ragbridge's fixed correctness rubric, answer against the reference",
}


def structured_outputs(model_name: str) -> bool:
    """Whether DeepEval sends strict ``json_schema`` requests for this judge model name.

    DeepEval decides by name: a name in its OpenAI model registry (``gpt-4o-mini``, ``gpt-4.1``, ...)
    gets structured outputs (and log-probabilities for GEval); any other name gets plain prompts whose
    answer DeepEval cuts the JSON out of."""
    from deepeval.models.llms.constants import OPENAI_MODELS_DATA
    from deepeval.models.utils import parse_model_name

    return bool(OPENAI_MODELS_DATA.get(parse_model_name(model_name)).supports_structured_outputs)


def build_judge(gateway: Any, metric: str, case_id: str, http_client: Any = None):
    """DeepEval's ``OpenAIModel`` pointed at the gateway, counted under (deepeval, metric, case_id).

    The model name is ragbridge's judge model, so DeepEval's own registry decides the wire format (see
    ``structured_outputs``). The key is the gateway's own key; temperature 0; the judge's
    ``max_tokens`` is passed on; the client timeout outlasts the gateway's retries. ``http_client`` is
    an ``httpx.AsyncClient`` on the gateway's in-process transport; without one, DeepEval's own
    client goes through the gateway's loopback socket."""
    from deepeval.models import OpenAIModel

    cfg = gateway.config
    generation_kwargs = {"max_tokens": cfg.max_tokens} if cfg.max_tokens else {}
    kwargs: dict[str, Any] = {"timeout": cfg.client_timeout()}
    if http_client is not None:
        kwargs["async_http_client"] = http_client
    return OpenAIModel(
        model=cfg.model,
        base_url=gateway.base_url(BACKEND, metric, case_id, in_process=http_client is not None),
        api_key=gateway.api_key,
        temperature=0,
        generation_kwargs=generation_kwargs,
        **kwargs,
    )


def _deepeval_runtime_defaults(gateway: Any) -> None:
    """Settings DeepEval reads at call time; a value the user set is left alone.

    The gateway already retries 429/5xx/timeouts, so DeepEval's own retry (a second full round through
    the gateway) is off, and its per-attempt timeout is raised to the gateway's worst case."""
    os.environ.setdefault("DEEPEVAL_RETRY_MAX_ATTEMPTS", "1")
    os.environ.setdefault(
        "DEEPEVAL_PER_ATTEMPT_TIMEOUT_SECONDS_OVERRIDE", f"{gateway.config.client_timeout():g}"
    )


class DeepEvalBackend(Backend):
    name = BACKEND
    library = "deepeval"
    module = "deepeval"
    install_hint = "pip install 'ragbridge[deepeval]'"

    def metrics(self) -> list[MetricSpec]:
        return [
            MetricSpec(canon, native_name=native, requires=requires, judge=True,
                       description=f"{cls}: {_DESCRIPTIONS[canon]}")
            for canon, (cls, native, requires) in METRICS.items()
        ]

    async def score(self, metric: str, cases: Sequence[Case], ctx: ScoringContext) -> AsyncIterator[Score]:
        if metric not in METRICS:
            raise ValueError(f"the deepeval backend has no metric {metric!r}")
        if ctx.judge is None:
            raise RuntimeError("the deepeval backend needs a judge (ctx.judge is None)")
        opts = translate.options_for(ctx.options.backend_options)
        gateway = ctx.judge
        _deepeval_runtime_defaults(gateway)

        import httpx

        limit = int(opts.get("concurrency") or gateway.config.max_concurrency)
        sem = asyncio.Semaphore(max(1, limit))
        # One httpx client on the gateway's in-process transport for every case of this metric; each
        # case still gets its own tagged base URL (so the gateway counts calls per case) and its own
        # judge and metric objects.
        http_client = httpx.AsyncClient(
            transport=gateway.async_transport(),
            timeout=httpx.Timeout(gateway.config.client_timeout()),
            trust_env=False,
        )

        async def one(case: Case) -> Score:
            async with sem:
                return await self.score_case(metric, case, gateway, opts, http_client)

        tasks = [asyncio.ensure_future(one(c)) for c in cases]
        try:
            for fut in asyncio.as_completed(tasks):
                yield await fut
        finally:
            for t in tasks:
                if not t.done():
                    t.cancel()
            if any(not t.done() for t in tasks):
                await asyncio.gather(*tasks, return_exceptions=True)
            await http_client.aclose()

    async def score_case(self, metric: str, case: Case, gateway: Any, opts: Optional[dict] = None,
                         http_client: Any = None) -> Score:
        """Score one case: a fresh judge and metric instance, DeepEval's ``a_measure``, then the Score."""
        start = time.perf_counter()
        try:
            model = build_judge(gateway, metric, case.id, http_client)
            m = translate.make_metric(metric, model, opts)
            await m.a_measure(translate.to_test_case(case), _show_indicator=False)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # one case's failure is that Score's error
            return Score(case_id=case.id, metric=metric, backend=BACKEND, native_metric=METRICS[metric][1],
                         error=translate.error_message(exc), seconds=time.perf_counter() - start)
        return translate.to_score(metric, case.id, m, time.perf_counter() - start)
