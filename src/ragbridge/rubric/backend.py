"""The ``rubric`` backend: each metric is a rubric, judged through the shared judge gateway.

Metrics: the built-in rubrics (``builtin/*.toml``: faithfulness by claims, answer_relevance,
answer_correctness, context_relevance per chunk, abstention judged by the model), plus the rubrics of
the files named in its option ``files`` (``--rubric FILE`` on the command line) and of ``rubrics``
(`Rubric` objects or mappings, from Python). A rubric named like a
built-in replaces it. Each metric's ``MetricSpec.digest`` is its rubric's content hash, recorded in
run.json (``digests``), and every score's ``native_value`` carries it too. Besides the rubrics, the
claim diagnostics (`ragbridge.rubric.diagnostics`: RAGChecker's claim recall, context precision,
context utilization, noise sensitivity, hallucination, self-knowledge and the answer's claim
precision, recall and F1), judged by the claim checks of `ragbridge.rubric.claim_checks`; a rubric
of the same name replaces one.

Values: mode ``whole``: the level normalised to 0..1 ((level - lowest) / (highest - lowest)),
``passed`` by the rubric's ``pass_at``; ``claims``: supported / claims (see `claims`); ``per_chunk``:
relevant chunks / chunks, the verdict of every chunk in ``Score.evidence.chunks``. ``passed``, in
claims and per_chunk modes, is the value at the rubric's pass mark (`Rubric.threshold`, what run.json
records in ``pass_marks``) by the run's pass rule (`ragbridge.verdicts.passes`). The judge's reason
is the score's ``reason``.

Options (`RubricOptions`, ``--option rubric.KEY=VALUE``): ``files``, ``rubrics``;
``structured_output`` (``auto``, ``schema``, ``json_object``, ``tool`` or ``prompt``, every judged
backend's: see `parse`; unset, the judge's); ``retries`` (re-asks of an unusable reply, default 2, at
most the gateway's ``max_retries``); ``concurrency`` (cases in flight, default twice the gateway's
``max_concurrency``: `ragbridge.backend.ScoringContext.cases_in_flight`).

Every request goes through ``ctx.judge``'s in-process transport (the run's one ``httpx.AsyncClient``
from `ragbridge.judge.clients`, speaking the chat-completions wire format at ``base_url(
in_process=True)``: no socket is opened); the per-case template is
`ragbridge.judged_backend.JudgedBackend`'s, so each case is judged inside ``tag_scope("rubric",
metric, case_id)`` and the gateway caches, bounds, retries, counts and audits it like any backend's.
A reply the rubric cannot use, or a transport fault, is the Score's ``error``, named for the rubric
(``rubric NAME: ...``) or for a diagnostic's claim checks (``claim checks: ...``).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Optional

from ..backend import MetricSpec, RunOptions, ScoringContext
from ..judged_backend import JudgedBackend, ScoreFields
from ..schema import Case, ChunkVerdict, Evidence
from ..verdicts import passes
from . import prompts
from .claims import claims_reason, judge_claims
from .diagnostics import GROUP as DIAGNOSTIC_GROUP
from .diagnostics import diagnostic_fields, diagnostic_native
from .diagnostics import specs as diagnostic_specs
from .options import RubricOptions
from .parse import Asker, JudgeCallError, ReplyError, check_grade
from .rubrics import Rubric, builtin_rubrics, rubric_set

__all__ = ["RubricBackend", "RubricOptions", "RubricSession", "rubrics_for", "make_asker", "http_client",
           "rubric_fields", "NAME"]

NAME = "rubric"


def _options(options: Optional[RunOptions]) -> RubricOptions:
    """The rubric backend's options in a run with ``options`` (its defaults without them)."""
    return options.of(RubricBackend()) if options is not None else RubricOptions()


def rubrics_for(options: Optional[RunOptions]) -> dict[str, Rubric]:
    """The rubrics a run with ``options`` judges by, by metric name."""
    opts = _options(options)
    return rubric_set(opts.files, opts.rubrics)


def _spec(r: Rubric) -> MetricSpec:
    what = {"whole": f"scale {r.scale}, pass at {r.pass_at}", "claims": "claims SUPPORTED / all",
            "per_chunk": "relevant chunks / all"}[r.mode]
    return MetricSpec(r.name, native_name=r.name, requires=r.requires, judge=True,
                      description=f"rubric {r.hash}: {r.question} ({what})", digest=r.hash,
                      pass_mark=r.threshold)


def _with_diagnostics(rubrics: dict[str, Rubric]) -> list[MetricSpec]:
    """The rubrics' metrics, then the claim diagnostics no rubric replaces."""
    return [_spec(r) for r in rubrics.values()] + [s for s in diagnostic_specs() if s.name not in rubrics]


def mode_of(opts: RubricOptions, judge: Any) -> str:
    """The rubric's structured-output mode: its option ``structured_output``, else the judge's."""
    return opts.structured_output or judge.config.structured_output


def make_asker(client: Any, gateway: Any, opts: RubricOptions, state: Optional[dict] = None) -> Asker:
    """An `Asker` on ``client`` for the gateway's model; ``state`` holds the structured-output mode
    (shared by the askers of one run)."""
    retries = min(opts.retries, gateway.config.max_retries)
    state = state if state is not None else {"mode": mode_of(opts, gateway)}
    return Asker(client, gateway.config.model, state=state, retries=max(0, retries),
                 max_tokens=gateway.config.max_tokens)


def http_client(judge: Any):
    """The judge's ``httpx.AsyncClient`` (`ragbridge.judge.clients`: in-process, no socket) at its
    untagged base URL, with the gateway's key: what an `Asker` posts to."""
    from ..judge.clients import async_http_client

    return async_http_client(judge, base_url=judge.base_url(in_process=True) + "/",
                             headers={"Authorization": f"Bearer {judge.api_key}"})


@dataclass
class RubricSession:
    """What the metrics of one run share: the client the askers post to, and ``state``, the
    structured-output mode of every metric (and the mode the judge gateway last asked in)."""

    client: Any
    state: dict[str, Any]


class RubricBackend(JudgedBackend):
    name = NAME
    library = None
    install_hint = ""
    Options = RubricOptions

    def metrics(self) -> list[MetricSpec]:
        return _with_diagnostics(builtin_rubrics())

    def metrics_for(self, options: RunOptions) -> list[MetricSpec]:
        return _with_diagnostics(rubrics_for(options))

    async def open(self, ctx: ScoringContext) -> Optional[RubricSession]:
        if ctx.judge is None:
            return None  # score says so, for every case
        return RubricSession(http_client(ctx.judge), {"mode": mode_of(_options(ctx.options), ctx.judge)})

    async def close(self, ctx: ScoringContext) -> None:
        if isinstance(ctx.session, RubricSession):
            await ctx.session.client.aclose()

    async def prepare(self, spec: MetricSpec, ctx: ScoringContext) -> tuple[Optional[Rubric], Asker]:
        """The metric's rubric (None for a claim diagnostic) and the asker of the pass."""
        session = ctx.session
        asker = make_asker(session.client, ctx.judge, _options(ctx.options), session.state)
        return rubrics_for(ctx.options).get(spec.name), asker

    async def judge_case(self, spec: MetricSpec, case: Case, ctx: ScoringContext,
                         prepared: tuple[Optional[Rubric], Asker]) -> ScoreFields:
        rubric, asker = prepared
        if rubric is None:
            return await diagnostic_fields(asker, spec.name, case)
        return await rubric_fields(asker, rubric, case)

    def failure(self, spec: MetricSpec, case: Case, exc: Exception, ctx: ScoringContext) -> ScoreFields:
        """A reply the rubric cannot use, or a transport fault, named for the rubric (or the claim
        checks of a diagnostic)."""
        text = str(exc) if isinstance(exc, (ReplyError, JudgeCallError)) else f"{type(exc).__name__}: {exc}"
        if spec.group == DIAGNOSTIC_GROUP:  # a claim diagnostic no rubric of the run replaces
            return {"error": f"claim checks: {text}", "native_value": diagnostic_native(spec.name)}
        return {"error": f"rubric {spec.name}: {text}",
                "native_value": {"rubric": spec.name, "hash": spec.digest}}


async def rubric_fields(asker: Asker, rubric: Rubric, case: Case) -> ScoreFields:
    """``case``'s Score fields by ``rubric``; a reply it cannot use raises `ReplyError` or
    `JudgeCallError`."""
    native: dict[str, Any] = {"rubric": rubric.name, "hash": rubric.hash}
    if rubric.mode == "claims":
        judged, evidence = await judge_claims(asker, rubric, case)
        native.update(claims=len(judged), supported=sum(c.verdict == "SUPPORTED" for c in judged))
        if not judged:
            return dict(native_value=native, evidence=evidence, reason="the answer states no claim")
        value = native["supported"] / len(judged)
        fields = dict(value=value, passed=passes(value, rubric.threshold), reason=claims_reason(judged),
                      evidence=evidence)
    elif rubric.mode == "per_chunk":
        graded = await asyncio.gather(*(_grade(asker, rubric, case, ch) for ch in case.contexts))
        chunks = [ChunkVerdict(id=ch.id, relevant=rubric.passes(lv), reason=why)
                  for ch, (lv, why) in zip(case.contexts, graded)]
        relevant = sum(c.relevant for c in chunks)
        value = relevant / len(chunks)
        native.update(levels=[lv for lv, _ in graded], relevant=relevant, chunks=len(chunks))
        fields = dict(value=value, passed=passes(value, rubric.threshold), evidence=Evidence(chunks=chunks),
                      reason=f"{relevant} of {len(chunks)} chunks relevant"
                      + "".join(f"; {c.id}: {'relevant' if c.relevant else 'not relevant'} ({c.reason})"
                                for c in chunks))
    else:
        level, why = await _grade(asker, rubric, case)
        native.update(level=level, scale=rubric.scale)
        fields = dict(value=rubric.normalise(level), passed=rubric.passes(level), reason=why)
    native["structured"] = asker.structured
    return dict(native_value=native, **fields)


async def _grade(asker: Asker, rubric: Rubric, case: Case, chunk=None) -> tuple[int, str]:
    messages = prompts.grade_messages(rubric, case, chunk)
    return await asker.ask(messages, prompts.schema_grade(rubric), "rubric_grade",
                           lambda o: check_grade(o, rubric))
