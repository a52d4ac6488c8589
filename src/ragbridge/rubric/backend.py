"""The ``rubric`` backend: each metric is a rubric, judged through the shared judge gateway.

Metrics: the built-in rubrics (``builtin/*.toml``: faithfulness by claims, answer_relevance,
answer_correctness, context_relevance per chunk, abstention judged by the model), plus the rubrics of
the files named in ``RunOptions.backend_options["rubric"]["files"]`` (``--rubric FILE`` on the command
line) and of ``["rubrics"]`` (`Rubric` objects or mappings, from Python). A rubric named like a
built-in replaces it. Each metric's ``MetricSpec.digest`` is its rubric's content hash, recorded in
run.json (``digests``), and every score's ``native_value`` carries it too. Besides the rubrics, the
claim diagnostics (`ragbridge.rubric.diagnostics`: RAGChecker's claim recall, context precision,
context utilization, noise sensitivity, hallucination, self-knowledge and the answer's claim
precision, recall and F1), judged by the claim checks of `ragbridge.rubric.claim_checks`; a rubric
of the same name replaces one.

Values: mode ``whole``: the level normalised to 0..1 ((level - lowest) / (highest - lowest)),
``passed`` by the rubric's ``pass_at``; ``claims``: supported / claims (see `claims`); ``per_chunk``:
relevant chunks / chunks, ``passed`` when at least half are relevant, the verdict of every chunk in
``Score.evidence.chunks``. The judge's reason is the score's ``reason``.

Options (``backend_options["rubric"]``): ``files``, ``rubrics``; ``structured`` (``auto``,
``json_schema`` or ``prompt``, see `parse`); ``retries`` (re-asks of an unusable reply, default 2,
at most the gateway's ``max_retries``); ``concurrency`` (cases in flight, default twice the
gateway's ``max_concurrency``: `ragbridge.backend.ScoringContext.cases_in_flight`).

Every request goes through ``ctx.judge``'s in-process transport (an ``httpx.AsyncClient`` speaking
the chat-completions wire format, at ``base_url(in_process=True)``: no socket is opened), inside
``tag_scope("rubric", metric, case_id)``, so the gateway caches, bounds, retries, counts and audits
it like any backend's.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, AsyncIterator, Optional, Sequence

from ..backend import Backend, MetricSpec, RunOptions, ScoringContext, fan_out
from ..schema import Case, ChunkVerdict, Evidence, Score
from . import prompts
from .claims import claims_reason, judge_claims
from .diagnostics import DIAGNOSTICS, score_diagnostic
from .diagnostics import specs as diagnostic_specs
from .parse import DEFAULT_RETRIES, STRUCTURED, Asker, JudgeCallError, ReplyError, check_grade
from .rubrics import Rubric, RubricError, builtin_rubrics, rubric_set

__all__ = ["RubricBackend", "rubrics_for", "make_asker", "NAME"]

NAME = "rubric"
_OPTION_KEYS = {"files", "rubrics", "structured", "retries", "concurrency"}


def _options(options: Optional[RunOptions]) -> dict[str, Any]:
    opts = dict(((options.backend_options if options else None) or {}).get(NAME) or {})
    unknown = sorted(set(opts) - _OPTION_KEYS)
    if unknown:
        raise RubricError(f"unknown rubric backend option {unknown[0]!r}; "
                          f"known: {', '.join(sorted(_OPTION_KEYS))}")
    if opts.get("structured", "auto") not in STRUCTURED:
        raise RubricError(f"rubric backend option structured must be one of {', '.join(STRUCTURED)}, "
                          f"got {opts['structured']!r}")
    for key, least in (("retries", 0), ("concurrency", 1)):
        value = opts.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < least):
            raise RubricError(f"rubric backend option {key} must be an integer of at least {least}, "
                              f"got {value!r}")
    return opts


def rubrics_for(options: Optional[RunOptions]) -> dict[str, Rubric]:
    """The rubrics a run with ``options`` judges by, by metric name."""
    opts = _options(options)
    files = opts.get("files") or []
    return rubric_set([files] if isinstance(files, str) else files, opts.get("rubrics") or [])


def _spec(r: Rubric) -> MetricSpec:
    what = {"whole": f"scale {r.scale}, pass at {r.pass_at}", "claims": "claims SUPPORTED / all",
            "per_chunk": "relevant chunks / all"}[r.mode]
    return MetricSpec(r.name, native_name=r.name, requires=r.requires, judge=True,
                      description=f"rubric {r.hash}: {r.question} ({what})", digest=r.hash,
                      pass_mark=r.threshold)


def _with_diagnostics(rubrics: dict[str, Rubric]) -> list[MetricSpec]:
    """The rubrics' metrics, then the claim diagnostics no rubric replaces."""
    return [_spec(r) for r in rubrics.values()] + [s for s in diagnostic_specs() if s.name not in rubrics]


def make_asker(client: Any, gateway: Any, opts: dict[str, Any], state: Optional[dict] = None) -> Asker:
    """An `Asker` on ``client`` for the gateway's model; ``state`` holds the structured-output mode
    (shared by the askers of one run)."""
    retries = min(int(opts.get("retries", DEFAULT_RETRIES)), gateway.config.max_retries)
    state = state if state is not None else {"mode": opts.get("structured", "auto")}
    return Asker(client, gateway.config.model, state=state, retries=max(0, retries),
                 max_tokens=gateway.config.max_tokens)


def http_client(gateway: Any):
    """An httpx client on the gateway's in-process transport (no socket), with the gateway's key."""
    import httpx

    return httpx.AsyncClient(transport=gateway.async_transport(),
                             base_url=gateway.base_url(in_process=True) + "/",
                             headers={"Authorization": f"Bearer {gateway.api_key}"},
                             timeout=httpx.Timeout(gateway.config.client_timeout()), trust_env=False)


class RubricBackend(Backend):
    name = NAME
    library = None
    install_hint = ""

    def metrics(self) -> list[MetricSpec]:
        return _with_diagnostics(builtin_rubrics())

    def metrics_for(self, options: RunOptions) -> list[MetricSpec]:
        return _with_diagnostics(rubrics_for(options))

    async def open(self, ctx: ScoringContext) -> dict[str, Any]:
        """The run's session: one structured-output mode for every metric of the run (once
        json_schema is rejected, every metric prompts)."""
        return {"mode": _options(ctx.options).get("structured", "auto")}

    async def score(self, metric: str, cases: Sequence[Case], ctx: ScoringContext) -> AsyncIterator[Score]:
        rubric = rubrics_for(ctx.options).get(metric)
        if rubric is None and metric not in DIAGNOSTICS:
            raise ValueError(f"the rubric backend has no rubric named {metric!r}")
        if ctx.judge is None:
            raise RuntimeError("the rubric backend needs a judge (ctx.judge is None)")
        gateway = ctx.judge
        opts = _options(ctx.options)
        client = http_client(gateway)
        asker = make_asker(client, gateway, opts, ctx.session)

        async def one(case: Case) -> Score:
            with gateway.tag_scope(NAME, metric, case.id):
                if rubric is None:
                    return await score_diagnostic(asker, metric, case, NAME)
                return await score_case(asker, rubric, case)

        limit = ctx.cases_in_flight(opts.get("concurrency"))
        try:
            async for score in fan_out(cases, one, limit):
                yield score
        finally:
            await client.aclose()


async def score_case(asker: Asker, rubric: Rubric, case: Case) -> Score:
    """One case's score by ``rubric`` (a failure is the Score's error)."""
    start = time.perf_counter()
    native: dict[str, Any] = {"rubric": rubric.name, "hash": rubric.hash}
    base = dict(case_id=case.id, metric=rubric.name, backend=NAME, native_metric=rubric.name)
    try:
        if rubric.mode == "claims":
            judged, evidence = await judge_claims(asker, rubric, case)
            native.update(claims=len(judged), supported=sum(c.verdict == "SUPPORTED" for c in judged))
            if not judged:
                return Score(**base, native_value=native, evidence=evidence,
                             reason="the answer states no claim", seconds=time.perf_counter() - start)
            value = native["supported"] / len(judged)
            fields = dict(value=value, passed=value == 1.0, reason=claims_reason(judged), evidence=evidence)
        elif rubric.mode == "per_chunk":
            graded = await asyncio.gather(*(_grade(asker, rubric, case, ch) for ch in case.contexts))
            chunks = [ChunkVerdict(id=ch.id, relevant=rubric.passes(lv), reason=why)
                      for ch, (lv, why) in zip(case.contexts, graded)]
            relevant = sum(c.relevant for c in chunks)
            value = relevant / len(chunks)
            native.update(levels=[lv for lv, _ in graded], relevant=relevant, chunks=len(chunks))
            fields = dict(value=value, passed=value >= 0.5, evidence=Evidence(chunks=chunks),
                          reason=f"{relevant} of {len(chunks)} chunks relevant"
                          + "".join(f"; {c.id}: {'relevant' if c.relevant else 'not relevant'} ({c.reason})"
                                    for c in chunks))
        else:
            level, why = await _grade(asker, rubric, case)
            native.update(level=level, scale=rubric.scale)
            fields = dict(value=rubric.normalise(level), passed=rubric.passes(level), reason=why)
    except asyncio.CancelledError:
        raise
    except (ReplyError, JudgeCallError) as exc:
        return Score(**base, native_value=native, error=f"rubric {rubric.name}: {exc}",
                     seconds=time.perf_counter() - start)
    except Exception as exc:  # a transport fault on one case is that case's error
        return Score(**base, native_value=native, error=f"rubric {rubric.name}: {type(exc).__name__}: {exc}",
                     seconds=time.perf_counter() - start)
    native["structured"] = asker.structured
    return Score(**base, native_value=native, seconds=time.perf_counter() - start, **fields)


async def _grade(asker: Asker, rubric: Rubric, case: Case, chunk=None) -> tuple[int, str]:
    messages = prompts.grade_messages(rubric, case, chunk)
    return await asker.ask(messages, prompts.schema_grade(rubric), "rubric_grade",
                           lambda o: check_grade(o, rubric))
