"""`JudgedBackend`: the base of a backend whose metrics a judge scores, case by case.

A judged backend plugin says what is particular to its library, and the base does the rest:

* ``registry``: its metrics (``metrics.METRICS`` in the plugin): name -> a `JudgedMetric`, which the
  plugin subclasses with what binds the metric to its library (the library's class or function, its
  inputs, its label map ...);
* ``open`` / ``close``: what the metrics of a run share (`ragbridge.backend.Backend`), its library's
  clients made by `ragbridge.judge.clients`;
* `JudgedBackend.prepare`: what the cases of one metric share (a library metric object, the parsed
  options), once per `score` call;
* `JudgedBackend.judge_case`: one case through the library, returned as the fields of its `Result`
  that the library decides (`ScoreFields`: ``value``, ``native_value``, ``passed``, ``reason``,
  ``evidence``, or an ``error`` it reports itself), or as a `Result`; a field outside them is the
  case's error, naming the backend (a plugin error: the run's bookkeeping is the run's);
* `JudgedBackend.failure`: the fields of a case whose `judge_case` raised (default: ``error`` is
  `ragbridge.backend.error_text` of the exception).

`JudgedBackend.score` is the one template every judged backend runs: the metric looked up
(ValueError for one the backend does not offer), the judge required (RuntimeError) unless the
metric is one the library computes without it (``JudgedMetric(judge=False)``: a run asking only for
such metrics has no judge, ``ctx.judge`` is None in `open` and `judge_case`), `prepare`, then
the cases fanned out `JudgedBackend.cases_at_once` at a time (the backend's ``concurrency`` option,
else `ScoringContext.cases_in_flight`), each one timed and judged inside ``ctx.judge.tag_scope(
backend, metric, case_id)`` (so the gateway counts its calls and tokens for its score, under the
job's repeat), and each `Result` given the case, the library's metric name
(``MetricSpec.native_name``) and the seconds it took. An interrupt is never a case's failure. The
run records each result as a `Score` with its judge calls, tokens and cost (`ragbridge.run`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import functools
import time
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable, ClassVar, Mapping, Optional, Sequence, TypedDict, TypeVar

from .backend import Backend, BackendOptions, MetricSpec, RunOptions, ScoringContext, error_text, fan_out
from .judge.structured import StructuredMode
from .options import Whole, option
from .schema import Case, Evidence, Result

__all__ = ["JudgedBackend", "JudgedMetric", "JudgedOptions", "ScoreFields", "in_thread"]

class ScoreFields(TypedDict, total=False):
    """What `JudgedBackend.judge_case` returns for one case: the fields of its `Result` that the
    library decides, each optional, none other (a key outside these is the plugin's error, naming it:
    the run's bookkeeping, ``judge_calls``, ``cached``, ``cost`` ..., is the run's to fill). A
    `Result` is taken as well (its ``case_id`` and ``seconds`` are the template's)."""

    value: Optional[float]
    native_metric: Optional[str]
    native_value: Any
    passed: Optional[bool]
    reason: Optional[str]
    error: Optional[str]
    evidence: Optional[Evidence]

T = TypeVar("T")


@dataclass(frozen=True, kw_only=True)
class JudgedMetric(MetricSpec):
    """One entry of a judged backend's metric registry: a `MetricSpec` that needs the judge, or,
    with ``judge=False``, one its library computes without a judge (a token F1 beside a judged
    metric), scored by the same `JudgedBackend.score` with ``ctx.judge`` None when the run has no judge.

    A plugin subclasses it (``@dataclass(frozen=True, kw_only=True)``) with the fields that bind the
    metric to its library; its registry holds only these, by name, and imports no library."""

    judge: bool = True


class JudgedOptions(BackendOptions):
    """The options every judged backend takes; a judged backend's own options model subclasses it."""

    concurrency: Optional[Whole] = option(
        None, "Cases judged at once (default: twice the judge's max_concurrency; the judge's calls in "
              "flight stay bounded by max_concurrency).", ge=1)
    structured_output: Optional[StructuredMode] = option(
        None, "How this backend's requests for a JSON object are sent to the judge: auto, schema, "
              "json_object, tool or prompt (default: the judge's structured_output, auto unless set).")


class JudgedBackend(Backend):
    """A backend whose metrics a judge scores one case at a time (see the module docstring).

    Subclasses set ``registry`` (or override ``metrics_for`` when the metrics are data the run's
    options name), their ``Options`` (a `JudgedOptions` subclass) and implement `judge_case`;
    `score` is the template and is not overridden."""

    #: the metrics offered, by name (the plugin's ``metrics.METRICS``)
    registry: ClassVar[Mapping[str, JudgedMetric]] = {}
    Options: ClassVar[type[BackendOptions]] = JudgedOptions

    def metrics(self) -> list[MetricSpec]:
        return list(self.registry.values())

    def metric(self, name: str, options: RunOptions) -> MetricSpec:
        """The metric ``name`` of a run with ``options``; ValueError when the backend has none."""
        for spec in self.metrics_for(options):
            if spec.name == name:
                return spec
        raise ValueError(f"the {self.name} backend has no metric {name!r}")

    def cases_at_once(self, ctx: ScoringContext) -> int:
        """How many cases are judged at once: the backend's ``concurrency`` option when set, else
        `ScoringContext.cases_in_flight` (twice the judge's ``max_concurrency``)."""
        return ctx.cases_in_flight(getattr(ctx.options.of(self), "concurrency", None))

    async def prepare(self, metric: Any, ctx: ScoringContext) -> Any:
        """What every case of one `score` call shares, made once before the first case and handed to
        each `judge_case` as ``prepared`` (default: None). Raising fails every case of the call."""
        return None

    async def judge_case(self, metric: Any, case: Case, ctx: ScoringContext,
                         prepared: Any) -> ScoreFields:  # pragma: no cover - abstract
        """One case of ``metric`` (its registry entry) through the library: the fields of its
        `Result` (see `ScoreFields`), or the `Result` itself. Runs inside the case's ``tag_scope``; an
        exception is the case's failure."""
        raise NotImplementedError

    def failure(self, metric: Any, case: Case, exc: Exception, ctx: ScoringContext) -> ScoreFields:
        """The fields of a case whose `judge_case` raised ``exc``: its `error_text`."""
        return {"error": error_text(exc)}

    async def score(self, metric: str, cases: Sequence[Case], ctx: ScoringContext) -> AsyncIterator[Result]:
        spec = self.metric(metric, ctx.options)
        judge = ctx.judge
        if judge is None and spec.judge:
            raise RuntimeError(f"the {self.name} backend needs a judge (--judge-model, --judge-base-url)")
        prepared = await self.prepare(spec, ctx)

        def scope(case: Case) -> Any:  # a metric the judge does not score (judge=False) has no judge
            if judge is None:
                return contextlib.nullcontext()
            return judge.tag_scope(self.name, metric, case.id)

        async def one(case: Case) -> Result:
            start = time.perf_counter()
            try:
                with scope(case):
                    fields = await self.judge_case(spec, case, ctx, prepared)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - one case's failure is that Result's error
                fields = self.failure(spec, case, exc, ctx)
            return self._result(fields, spec, case, time.perf_counter() - start)

        async for score in fan_out(cases, one, self.cases_at_once(ctx)):
            yield score


    def _result(self, fields: Any, spec: MetricSpec, case: Case, seconds: float) -> Result:
        """The `Result` of ``fields`` (`ScoreFields`, or a `Result`) for ``case``; a field the plugin may
        not set, or a value of the wrong type, is the case's error naming the backend (a plugin error,
        which the run's summary tells to fix the plugin)."""
        if isinstance(fields, Result):
            fields = fields.model_dump(exclude={"case_id", "seconds"}, exclude_unset=True)
        if not isinstance(fields, Mapping):
            return Result(case_id=case.id, seconds=seconds, native_metric=spec.native_name,
                          error=f"PluginError: backend {self.name}'s judge_case returned a "
                                f"{type(fields).__name__}, not its ScoreFields (a dict) or a Result; "
                                "fix the plugin")
        fields = {"native_metric": spec.native_name, **fields}
        extra = sorted(set(fields) - set(ScoreFields.__annotations__))
        if extra:
            return Result(case_id=case.id, seconds=seconds, native_metric=fields["native_metric"],
                          error=f"PluginError: backend {self.name} set {', '.join(map(repr, extra))} in what "
                                f"judge_case returned for case {case.id}: a backend returns only "
                                f"{', '.join(ScoreFields.__annotations__)} (the run counts the rest); "
                                "fix the plugin")
        try:
            return Result(case_id=case.id, seconds=seconds, **fields)
        except ValueError as exc:  # pydantic's: a field of the wrong type
            why = " ".join(str(exc).split("For further information")[0].split())
            return Result(case_id=case.id, seconds=seconds, native_metric=spec.native_name,
                          error=f"PluginError: backend {self.name} returned fields a Result cannot hold for "
                                f"case {case.id}: {why}; fix the plugin")


async def in_thread(executor: Optional[concurrent.futures.Executor], fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` on one of ``executor``'s threads (None: asyncio's default pool), in a copy of
    the caller's context, so the case's ``tag_scope`` holds there: for a library whose metrics are
    synchronous."""
    call = functools.partial(contextvars.copy_context().run, fn, *args)
    return await asyncio.get_running_loop().run_in_executor(executor, call)
