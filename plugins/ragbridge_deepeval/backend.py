"""The DeepEval backend: DeepEval's own metric classes, judged through ragbridge's judge gateway.

The run's lifecycle: ``environment()`` is `env.environment` (telemetry, ``.env`` loading and the
``.deepeval/`` folder off, DeepEval's own retry off), applied before ``open``; ``open`` sets the
judge-dependent `env.runtime_environment` and makes one `DeepEvalSession` (an ``httpx.AsyncClient``
and an ``httpx.Client`` from `ragbridge.plugin`, shared by every metric and case of the run:
DeepEval builds a synchronous OpenAI client with every judge object, and one made without a client of
ours would load the CA bundle each time, a blocking 0.05-0.3 s per case on the event loop); ``close``
settles DeepEval's telemetry while its opt-out holds (`env.settle_telemetry`) and undoes both.
The per-case template is `ragbridge.plugin.JudgedBackend`'s (at most the ``concurrency``
option's cases at once); each case gets its own tagged base URL (so the gateway counts calls per
case) and its own judge and metric objects (`build_judge`, `metrics.make_metric`), and a failure's
text is `translate.error_message`'s.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, ClassVar, Optional

from ragbridge.plugin import Case, JudgedBackend, ScoreFields, ScoringContext

from . import env, translate
from .metrics import BACKEND, METRICS, DeepEvalMetric, by_version, make_metric
from .options import DeepEvalOptions

__all__ = ["DeepEvalBackend", "DeepEvalSession", "build_judge", "structured_outputs", "JUDGE_CLASS"]

#: DeepEval's OpenAI judge class in ``deepeval.models``, by DeepEval's major version among the
#: supported ones (4.x renamed ``GPTModel`` to ``OpenAIModel``; its arguments are the same)
JUDGE_CLASS: dict[int, str] = {3: "GPTModel", 4: "OpenAIModel"}


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
    """DeepEval's ``OpenAIModel`` (3.x: ``GPTModel``) pointed at the gateway, counted under (deepeval,
    metric, case_id).

    The model name is ragbridge's judge model, so DeepEval's own registry decides the wire format (see
    ``structured_outputs``). The key is the gateway's own key; temperature 0; the judge's
    ``max_tokens`` is passed on; the client timeout outlasts the gateway's retries. ``http_client`` is
    an ``httpx.AsyncClient`` on the gateway's in-process transport; without one, DeepEval's own
    client goes through the gateway's loopback socket. ``sync_http_client``: the ``httpx.Client`` for
    the synchronous OpenAI client DeepEval builds with the model (made anew without one)."""
    import deepeval.models

    OpenAIModel = getattr(deepeval.models, by_version(JUDGE_CLASS))
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
    """What the metrics of one run share: one async and one sync httpx client on the judge's
    in-process transports, and the run-time environment ``open`` applied (undone by ``close``)."""

    http_client: Any
    environment: contextlib.ExitStack
    sync_http_client: Any = None


class DeepEvalBackend(JudgedBackend):
    name = BACKEND
    library = "deepeval"
    module = "deepeval"
    install_hint = "pip install 'ragbridge[deepeval]'"
    registry = METRICS
    Options = DeepEvalOptions
    #: the versions of DeepEval this backend supports: the last 3.x and 4.3.1 on (a lock is shipped
    #: for 3.9.9 and 4.3.1); 4.0 to 4.3.0 are left out, untested: 4.0.0 has neither ``OpenAIModel``
    #: nor the metrics' ``eval_mode`` that the 4.x rows of the tables here assume
    supports: ClassVar[str] = ">=3.9.9,<5,!=4.0.*,!=4.1.*,!=4.2.*,!=4.3.0"
    #: per supported version (oldest first): what changes for a user from the previous one
    changes: ClassVar[dict[str, str]] = {
        "3.9.9": "faithfulness and answer_relevance take exactly yes / no / idk as a verdict ('idk' where "
                 "4.x says 'borderline', passing alike; any other reply errors the score); "
                 "context_precision, context_recall and context_relevance take any verdict text and "
                 "count it as yes only when it reads 'yes' ('Yes, it helps' counts as no). The judge is "
                 "DeepEval's GPTModel.",
        "4.3.1": "faithfulness's and answer_relevance's prompts say 'borderline' for 3.x's 'idk' (a reply "
                 "of 'idk' now errors the score); context_precision, context_recall and "
                 "context_relevance refuse a verdict other than exactly 'yes' or 'no', so a score 3.9.9 "
                 "lowered silently now errors. The formulas, context_precision's too, are 3.9.9's.",
    }

    def environment(self) -> dict[str, str]:
        return env.environment()

    async def open(self, ctx: ScoringContext) -> Optional[DeepEvalSession]:
        if ctx.judge is None:
            return None  # score says so, for every case
        from ragbridge.plugin import applied_environment, async_http_client, http_client

        stack = contextlib.ExitStack()
        stack.enter_context(applied_environment(env.runtime_environment(ctx.judge)))
        return DeepEvalSession(async_http_client(ctx.judge), stack, http_client(ctx.judge))

    async def close(self, ctx: ScoringContext) -> None:
        session = ctx.session
        if isinstance(session, DeepEvalSession):
            try:
                env.settle_telemetry()  # while the run's opt-out holds
                await session.http_client.aclose()
                session.sync_http_client.close()
            finally:
                session.environment.close()

    async def prepare(self, metric: DeepEvalMetric, ctx: ScoringContext) -> DeepEvalOptions:
        """The run's DeepEval options."""
        return ctx.options.of(self)

    async def judge_case(self, metric: DeepEvalMetric, case: Case, ctx: ScoringContext,
                         opts: DeepEvalOptions) -> ScoreFields:
        """A fresh judge and metric instance, DeepEval's ``a_measure``, then the Score's fields."""
        session = ctx.session
        model = build_judge(ctx.judge, metric.name, case.id, session.http_client, session.sync_http_client)
        m = make_metric(metric.name, model, opts)
        await m.a_measure(translate.to_test_case(case), _show_indicator=False)
        return translate.score_fields(metric.name, m)

    def failure(self, metric: DeepEvalMetric, case: Case, exc: Exception, ctx: ScoringContext) -> ScoreFields:
        return {"error": translate.error_message(exc)}
