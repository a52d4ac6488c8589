"""The RAGAS backend: RAGAS 0.4.3's own metric classes (``ragas.metrics.collections``), each case
scored with ``await metric.ascore(...)`` by ragbridge, every judge call through ragbridge's gateway.

The metric formulas, ranges and normalisation are documented in the package docstring
(:mod:`ragbridge_ragas`). This module builds RAGAS' components and runs them:

* one ``openai.AsyncOpenAI`` client for the run (shared by the metric passes) whose httpx client
  hands requests to the gateway in-process (``gateway.async_transport()``), with its key,
  ``max_retries=0`` (the gateway retries 429, 5xx and timeouts itself and tells the SDK not to) and
  the gateway's ``client_timeout()``; each case's calls are attributed to it by the gateway's
  ``tag_scope``, so the runner fills each Score's judge calls and tokens;
* the LLM from ``ragas.llms.llm_factory`` (instructor, JSON mode) with RAGAS' default sampling
  (temperature 0.01, top_p 0.1) and ``max_tokens`` = ``JudgeConfig.max_tokens`` or 4096 (RAGAS'
  1024 truncates long statement lists); instructor re-asks only on unparseable or schema-invalid
  output (3 attempts, RAGAS' default) and never re-sends a request the gateway already gave up on;
* embeddings from ``ragas.embeddings.OpenAIEmbeddings`` (RAGAS' modern provider: no LangChain, no
  tiktoken download) on the same client, model ``JudgeConfig.embedding_model`` or RAGAS' default.

Failures are per score: an exception out of ``ascore`` (judge error after the gateway's retries,
timeout, parse failure after instructor's re-asks, RAGAS' own ValueError) becomes that Score's
``error`` as ``"<ExceptionType>: <message>"``. ContextRelevance swallows judge errors and returns NaN;
the errors it swallowed are recorded per case and reported the same way.
"""

from __future__ import annotations

import asyncio
import atexit
import contextvars
import math
import os
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable, Optional, Sequence

from ragbridge.backend import Backend, MetricSpec, ScoringContext
from ragbridge.schema import Case, Score

from .translate import retrieved_texts

DEFAULT_MAX_TOKENS = 4096
PARSE_ATTEMPTS = 3  # instructor's default, the number of tries RAGAS gets for a parseable answer


@dataclass(frozen=True)
class RagasMetric:
    canonical: str
    cls: str  # class name in ragas.metrics.collections
    native: str
    requires: tuple[str, ...]
    inputs: Callable[[Case], dict[str, Any]]
    embeddings: bool = False
    kwargs: tuple[tuple[str, Any], ...] = ()
    undefined: str = "RAGAS returned NaN"
    description: str = ""


METRICS: dict[str, RagasMetric] = {
    m.canonical: m
    for m in (
        RagasMetric(
            "faithfulness", "Faithfulness", "faithfulness", ("answer", "context_text"),
            lambda c: {"user_input": c.question, "response": c.answer, "retrieved_contexts": retrieved_texts(c)},
            undefined="RAGAS found no statements in the answer (NaN)",
            description="share of the answer's statements supported by the retrieved contexts",
        ),
        RagasMetric(
            "answer_relevance", "AnswerRelevancy", "answer_relevancy", ("answer",),
            lambda c: {"user_input": c.question, "response": c.answer},
            embeddings=True,
            description="mean cosine of questions generated from the answer to the question; 0 if noncommittal",
        ),
        RagasMetric(
            "context_precision", "ContextPrecisionWithReference", "context_precision_with_reference",
            ("reference", "context_text"),
            lambda c: {"user_input": c.question, "reference": c.reference, "retrieved_contexts": retrieved_texts(c)},
            description="average precision of the contexts judged useful for the reference answer",
        ),
        RagasMetric(
            "context_recall", "ContextRecall", "context_recall", ("reference", "context_text"),
            lambda c: {"user_input": c.question, "retrieved_contexts": retrieved_texts(c), "reference": c.reference},
            undefined="RAGAS found no statements in the reference (NaN)",
            description="share of the reference's statements attributable to the retrieved contexts",
        ),
        RagasMetric(
            "context_relevance", "ContextRelevance", "context_relevance", ("context_text",),
            lambda c: {"user_input": c.question, "retrieved_contexts": retrieved_texts(c)},
            undefined="RAGAS' two relevance judges gave no valid rating (NaN)",
            description="mean of two judges' 0/1/2 relevance ratings of the contexts, / 2",
        ),
        RagasMetric(
            "answer_correctness", "FactualCorrectness", "factual_correctness(mode=f1)", ("answer", "reference"),
            lambda c: {"response": c.answer, "reference": c.reference},
            kwargs=(("mode", "f1"),),
            description="F1 of the answer's claims supported by the reference and vice versa",
        ),
    )
}

# the errors a metric swallowed while scoring the current case (ContextRelevance retries and NaNs)
_SWALLOWED: contextvars.ContextVar[Optional[list]] = contextvars.ContextVar("ragbridge_ragas_errors", default=None)


def normalise(value: float) -> Optional[float]:
    """RAGAS' raw value -> 0..1 (None for NaN): rounded to 9 decimals, which removes the 1e-10 RAGAS
    adds to denominators (0.9999999999 -> 1.0), then clipped (a mean cosine below 0 -> 0)."""
    if value is None or not math.isfinite(value):
        return None
    return min(1.0, max(0.0, round(float(value), 9)))


def error_text(exc: BaseException) -> str:
    """``Type: message`` of the exception, with the cause a retry wrapper hides."""
    msg = " ".join(str(exc).split())
    inner = exc.__cause__ or (exc.args[0] if exc.args and isinstance(exc.args[0], BaseException) else None)
    if isinstance(inner, BaseException) and type(inner).__name__ not in msg:
        msg = f"{msg} (caused by {type(inner).__name__}: {' '.join(str(inner).split())})" if msg else \
            f"{type(inner).__name__}: {' '.join(str(inner).split())}"
    if len(msg) > 2000:
        msg = msg[:1997] + "..."
    return f"{type(exc).__name__}: {msg}"


_ID_DIR: Optional[str] = None
_ID_LOCK = threading.Lock()


def keep_ragas_id_out_of_home() -> None:
    """RAGAS writes an anonymous id file (``~/.local/share/ragas/uuid.json``) the first time it builds
    an analytics event or formats a log line, even with its tracking off. With tracking off (the
    default under ragbridge), RAGAS is pointed at a private temporary folder for it instead, removed
    at exit. A user who turned RAGAS' tracking on keeps RAGAS' own behaviour."""
    global _ID_DIR
    import ragas._analytics as analytics

    with _ID_LOCK:
        if _ID_DIR is not None or not analytics.do_not_track():
            return
        _ID_DIR = tempfile.mkdtemp(prefix="ragbridge-ragas-")
        atexit.register(shutil.rmtree, _ID_DIR, True)
        folder = _ID_DIR
        analytics.user_data_dir = lambda *args, **kwargs: os.path.join(folder, "ragas")


def parse_retrying():
    """instructor's retry policy for RAGAS' calls: re-ask on unparseable or schema-invalid output
    only (transport and HTTP errors were already retried by the gateway), ``PARSE_ATTEMPTS`` tries.

    One LLM object serves every concurrent case, and tenacity keeps an iteration's state on the
    retrying object, so each ``async for`` gets a fresh copy (instructor iterates it once per call)."""
    from json import JSONDecodeError

    from instructor.core.exceptions import AsyncValidationError, ValidationError as InstructorValidationError
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


class _SharedClient:
    """One ``AsyncOpenAI`` client for every metric pass of a run, on the gateway's in-process
    transport (the gateway bounds upstream concurrency). Closed when the last pass ends."""

    KEY = "ragas_openai_client"

    def __init__(self, gateway: Any):
        import httpx
        from openai import AsyncOpenAI

        cfg = gateway.config
        self.http = httpx.AsyncClient(
            # in-process: no socket between RAGAS and the gateway; calls are counted under the
            # tag_scope each case is scored in
            transport=gateway.async_transport(),
            timeout=httpx.Timeout(cfg.client_timeout(), connect=10.0),
            trust_env=False,
        )
        self.client = AsyncOpenAI(base_url=gateway.base_url(in_process=True), api_key=gateway.api_key,
                                  max_retries=0, timeout=cfg.client_timeout(), http_client=self.http)
        self.users = 0

    @classmethod
    def acquire(cls, ctx: ScoringContext) -> "_SharedClient":
        shared = ctx.stats.get(cls.KEY)
        if shared is None:
            shared = ctx.stats[cls.KEY] = cls(ctx.judge)
        shared.users += 1
        return shared

    async def release(self, ctx: ScoringContext) -> None:
        self.users -= 1
        if self.users <= 0:
            if ctx.stats.get(self.KEY) is self:
                del ctx.stats[self.KEY]
            await self.client.close()


class _Components:
    """RAGAS' LLM, embeddings and metric object for one (backend, metric) pass."""

    def __init__(self, spec: RagasMetric, gateway: Any, client: Any):
        from ragas.embeddings import OpenAIEmbeddings
        from ragas.llms import llm_factory
        from ragas.metrics import collections as rc

        keep_ragas_id_out_of_home()
        cfg = gateway.config
        llm = llm_factory(cfg.model, client=client, max_tokens=cfg.max_tokens or DEFAULT_MAX_TOKENS,
                          max_retries=parse_retrying())
        agenerate = llm.agenerate

        async def recorded_agenerate(*args: Any, **kwargs: Any) -> Any:
            try:
                return await agenerate(*args, **kwargs)
            except Exception as exc:
                errors = _SWALLOWED.get()
                if errors is not None:
                    errors.append(exc)
                raise

        # the same hook point RAGAS itself uses for its cache (an instance attribute over the method)
        llm.agenerate = recorded_agenerate  # type: ignore[method-assign]
        self.llm = llm
        kwargs: dict[str, Any] = dict(spec.kwargs)
        if spec.embeddings:
            kwargs["embeddings"] = OpenAIEmbeddings(
                client=client, model=cfg.embedding_model or OpenAIEmbeddings.DEFAULT_MODEL)
        self.metric = getattr(rc, spec.cls)(llm=llm, **kwargs)


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

    async def score(self, metric: str, cases: Sequence[Case], ctx: ScoringContext) -> AsyncIterator[Score]:
        spec = METRICS.get(metric)
        if spec is None:
            raise ValueError(f"the ragas backend has no metric {metric!r}")
        gateway = ctx.judge
        if gateway is None:
            raise RuntimeError("the ragas backend needs a judge (ctx.judge is None)")
        shared = _SharedClient.acquire(ctx)
        try:
            comps = _Components(spec, gateway, shared.client)
        except BaseException:
            await shared.release(ctx)
            raise
        limit = asyncio.Semaphore(max(1, gateway.config.max_concurrency))
        queue: asyncio.Queue = asyncio.Queue()

        async def one(case: Case) -> None:
            async with limit:
                score = await self._score_case(spec, comps.metric, gateway, metric, case)
            await queue.put(score)

        tasks = [asyncio.create_task(one(c)) for c in cases]
        try:
            for _ in range(len(tasks)):
                yield await queue.get()
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await shared.release(ctx)

    async def _score_case(self, spec: RagasMetric, m: Any, gateway: Any, metric: str, case: Case) -> Score:
        base = dict(case_id=case.id, metric=metric, backend=self.name, native_metric=spec.native)
        errors: list = []
        token = _SWALLOWED.set(errors)
        t0 = time.perf_counter()
        try:
            with gateway.tag_scope(self.name, metric, case.id):
                result = await m.ascore(**spec.inputs(case))
        except Exception as exc:
            return Score(**base, error=error_text(exc), seconds=time.perf_counter() - t0)
        finally:
            _SWALLOWED.reset(token)
        seconds = time.perf_counter() - t0
        raw = result.value
        raw = float(raw) if raw is not None else float("nan")
        value = normalise(raw)
        if value is None:
            if errors:  # NaN because the library swallowed judge errors: that is a failure
                return Score(**base, native_value=None, error=error_text(errors[-1]), seconds=seconds,
                             reason=f"RAGAS returned NaN after {len(errors)} failed judge call(s)")
            return Score(**base, native_value=None, reason=spec.undefined, seconds=seconds)
        reason = result.reason
        if errors:  # the library retried failed judge calls itself and still produced a value
            reason = f"{len(errors)} judge call(s) failed and were retried by RAGAS; last: {error_text(errors[-1])}"
        return Score(**base, value=value, native_value=raw, reason=reason, seconds=seconds)
