"""The RAGAS backend: RAGAS 0.4.3's own metric classes (``ragas.metrics.collections``), each case
scored with ``await metric.ascore(...)`` by ragbridge, every judge call through ragbridge's gateway.

The metric formulas, ranges and normalisation are documented in the package docstring
(:mod:`ragbridge_ragas`), the metrics in `metrics.METRICS`. This module builds RAGAS' components and
runs them, over the run's lifecycle:

* ``environment()``: `env.ENVIRONMENT` (RAGAS' tracking off, no hub downloads), applied before
  ``open``, which is where RAGAS is first imported;
* ``open``: one `RagasSession` for the run, an ``openai.AsyncOpenAI`` client (shared by the metric
  passes) from `ragbridge.plugin`: in-process to the gateway, with its key, ``max_retries=0``
  (the gateway retries 429, 5xx and timeouts itself) and the judge clients' one timeout; ``close``
  closes it;
* the per-case template is `ragbridge.plugin.JudgedBackend`'s: ``prepare`` builds RAGAS'
  metric object once per metric pass, ``judge_case`` runs ``ascore`` on one case (inside the case's
  ``tag_scope``, so the runner fills each Score's judge calls and tokens), at most the ``concurrency``
  option's cases at once (`options.RagasOptions`; default: twice the judge's ``max_concurrency``);
* per metric: the LLM from ``ragas.llms.llm_factory`` (instructor, JSON mode) with RAGAS' default
  sampling (temperature 0.01, top_p 0.1) and ``max_tokens`` = ``JudgeConfig.max_tokens`` or 4096
  (RAGAS' 1024 truncates long statement lists); instructor re-asks only on unparseable or
  schema-invalid output (3 attempts, RAGAS' default) and never re-sends a request the gateway already
  gave up on; embeddings from ``ragas.embeddings.OpenAIEmbeddings`` (RAGAS' modern provider: no
  LangChain, no tiktoken download) on the same client, model ``JudgeConfig.embedding_model``, which a
  run sets to RAGAS' default (`metrics.EMBEDDING_MODEL`) when none is named. Their synchronous
  methods go through a synchronous ``openai.OpenAI`` client of the same judge (`RagasSession.sync_client`):
  RAGAS 0.3's AnswerRelevancy calls ``embed_text`` from inside ``ascore``, which on an async client runs
  the request on a new event loop in a thread the caller joins (the shared client's connections belong
  to the caller's loop: an error, or a hang with the loop blocked); a synchronous client makes the
  request itself, bounded by the judge clients' timeout.

At a RAGAS without ``ragas.metrics.collections`` (0.2.15, in its environment) the session builds and
scores the metrics with `ragas02` instead, on the same clients, with the same checks and records.

Failures are per score: an exception out of ``ascore`` (judge error after the gateway's retries,
timeout, parse failure after instructor's re-asks, RAGAS' own ValueError) becomes that Score's
``error`` (`ragbridge.plugin.error_text`); so is a reply whose verdict is outside what RAGAS' reply
model allows (`metrics.check_reply`: RAGAS itself takes any integer). ContextRelevance swallows judge
errors and returns NaN; the errors it swallowed are recorded per case and reported the same way
(`translate.score_fields`).
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass
from typing import Any, ClassVar, Optional

from ragbridge.plugin import Case, JudgedBackend, ScoreFields, ScoringContext

from . import ragas02
from .env import ENVIRONMENT, keep_ragas_id_out_of_home
from .metrics import METRICS, RagasMetric, check_reply
from .options import RagasOptions
from .translate import score_fields

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


def _record_swallowed(exc: BaseException) -> None:
    errors = _SWALLOWED.get()
    if errors is not None:
        errors.append(exc)


@dataclass
class RagasSession:
    """What the metric passes of one run share: the judge and one ``AsyncOpenAI`` client on its
    in-process transport (`ragbridge.plugin`; the gateway bounds upstream concurrency)."""

    judge: Any
    client: Any
    sync_client: Any
    #: the installed RAGAS has no ragas.metrics.collections (0.2.15): its metrics are `ragas02`'s
    legacy: bool = False

    def metric(self, spec: RagasMetric) -> Any:
        """RAGAS' metric object for ``spec``, with its LLM (and embeddings) on the session's client."""
        cfg = self.judge.config
        if self.legacy:
            return ragas02.metric(spec.name, cfg.model, self.client, self.sync_client,
                                  cfg.max_tokens or DEFAULT_MAX_TOKENS,
                                  spec.embedding_model and (cfg.embedding_model or spec.embedding_model),
                                  _record_swallowed, check_reply)
        from ragas.embeddings import OpenAIEmbeddings
        from ragas.llms import llm_factory
        from ragas.metrics import collections as rc

        llm = llm_factory(cfg.model, client=self.client, max_tokens=cfg.max_tokens or DEFAULT_MAX_TOKENS,
                          max_retries=parse_retrying())
        agenerate = llm.agenerate

        async def recorded_agenerate(*args: Any, **kwargs: Any) -> Any:
            try:
                reply = await agenerate(*args, **kwargs)
                check_reply(reply)  # RAGAS would take any integer as a verdict
                return reply
            except Exception as exc:
                _record_swallowed(exc)
                raise

        # the same hook point RAGAS itself uses for its cache (an instance attribute over the method)
        llm.agenerate = recorded_agenerate  # type: ignore[method-assign]
        kwargs: dict[str, Any] = dict(spec.kwargs)
        if spec.embedding_model:  # the run made it the judge's when none was named
            kwargs["embeddings"] = embeddings_of(OpenAIEmbeddings, self.client, self.sync_client,
                                                 cfg.embedding_model or spec.embedding_model)
        return getattr(rc, spec.cls)(llm=llm, **kwargs)


def embeddings_of(cls: Any, client: Any, sync_client: Any, model: str) -> Any:
    """RAGAS' ``OpenAIEmbeddings`` (``cls``) on the async ``client``, whose synchronous ``embed_text``
    and ``embed_texts`` are RAGAS' own on ``sync_client`` (see the module docstring)."""
    sync = cls(client=sync_client, model=model)

    class Embeddings(cls):
        def embed_text(self, text: str, **kwargs: Any) -> Any:
            return sync.embed_text(text, **kwargs)

        def embed_texts(self, texts: Any, **kwargs: Any) -> Any:
            return sync.embed_texts(texts, **kwargs)

    Embeddings.__name__ = Embeddings.__qualname__ = cls.__name__
    return Embeddings(client=client, model=model)


class RagasBackend(JudgedBackend):
    name = "ragas"
    library = "ragas"
    module = "ragas"
    install_hint = "pip install 'ragbridge[ragas]'"
    registry = METRICS
    Options = RagasOptions
    #: the RAGAS versions the backend supports; each one a lock is shipped for is tested for parity
    #: with that version's own call (0.2.15, 0.3.9, 0.4.3). A RAGAS without ``ragas.metrics.collections``
    #: is scored through its ``ragas.metrics`` classes (`ragas02`)
    supports: ClassVar[str] = ">=0.2.15,<0.5"
    #: what a user meets at each version, from the libraries' own source (the metric modules named)
    changes: ClassVar[dict[str, str]] = {
        "0.2.15": (
            "RAGAS' ragas.metrics classes (no collections), each prompt one user message without JSON "
            "mode. answer_relevance is 0 when any of its 3 generated questions is judged noncommittal "
            "(not only when all are); context_relevance sends the first of its two judge prompts twice, "
            "reads a bare digit from the reply, and loses both ratings when one call fails; context_recall "
            "classifies each sentence of the reference."
        ),
        "0.3.9": (
            "Metrics from ragas.metrics.collections, replies in JSON mode parsed into RAGAS' reply models: "
            "answer_relevance is 0 only when all 3 questions are judged noncommittal; context_relevance "
            "sends both judge prompts, each asking for {\"rating\": 0, 1 or 2}, and keeps one rating "
            "when the other failed."
        ),
        "0.4.3": (
            "Prompts rewritten as prompt classes, formulas unchanged: context_recall's prompt classifies "
            "each statement of the reference (0.3.9: each sentence), with three examples (0.3.9: one)."
        ),
    }

    def environment(self) -> dict[str, str]:
        return dict(ENVIRONMENT)

    async def open(self, ctx: ScoringContext) -> Optional[RagasSession]:
        if ctx.judge is None:
            return None  # score says so, for every case
        from ragbridge.plugin import async_openai_client, openai_client

        keep_ragas_id_out_of_home()
        return RagasSession(ctx.judge, async_openai_client(ctx.judge), openai_client(ctx.judge),
                            legacy=ragas02.is_legacy())

    async def close(self, ctx: ScoringContext) -> None:
        if isinstance(ctx.session, RagasSession):
            await ctx.session.client.close()
            ctx.session.sync_client.close()

    async def prepare(self, spec: RagasMetric, ctx: ScoringContext) -> Any:
        """RAGAS' metric object, shared by the cases of the pass."""
        return ctx.session.metric(spec)

    async def judge_case(self, spec: RagasMetric, case: Case, ctx: ScoringContext, m: Any) -> ScoreFields:
        """RAGAS' ``ascore``, with the judge calls it swallowed (`translate.score_fields`)."""
        errors: list = []
        token = _SWALLOWED.set(errors)
        try:
            if ctx.session.legacy:
                result = await ragas02.ascore(m, spec.inputs(case))
            else:
                result = await m.ascore(**spec.inputs(case))
        finally:
            _SWALLOWED.reset(token)
        return score_fields(spec, result, errors)
