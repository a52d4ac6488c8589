"""The runner: scores cases with the planned backends, recording each score as it arrives.

`evaluate_async` goes through these steps, each a function or class of this module or a neighbour:

1. `plan_metrics` (which backend scores which metric) and `_check_judge` (a judged metric needs a
   judge, whose key and endpoint are checked before anything is called or written);
2. `RunFolder.prepare`: a new run, a resumed one or a replaced one (`ragbridge.run.folder`);
3. with a target, `fill_cases`: each case's chunks and answer from the system under test;
4. `_new_manifest`, `RunFolder.resume` (what the earlier sessions scored is kept) and
   `RunFolder.start`;
5. `_scoring`: with the local executor `_Backends`, the lifecycle, once per run for each backend
   used: its environment defaults applied (`applied_environment`), ``open``, and at the end
   ``close``; with the Ray executor (`ragbridge.run.ray_executor`) its session, one cluster for
   the run, whose actors run the same lifecycle (`open_session`, `drive_job`, `close_session`);
6. per batch of cases (`ragbridge.formats.source.CaseSource.batches`: memory holds one batch, not
   the dataset): `_jobs` (per backend, metric and repeat the cases to score, and the scores known at
   once: a case without a field the metric requires is skipped, a failed target call is each
   score's error, a judged score the score cache holds is reused, `_Reuse`), `_score` (the jobs
   driven concurrently, `drive_job`) or the executor's ``score``, and the batch's scores flushed;
7. `Recorder`: each score's (or `ScoreBlock`'s) judge usage, the folder, ``on_score``, the progress
   bar, the heartbeat, the running totals (`ragbridge.run.summary.Totals`) and the manifest's counts.

Scores are appended to ``scores.jsonl`` through a buffer that is flushed at the end of each batch
and at least every `FLUSH_SECONDS`, so a run killed outright loses at most what it scored since.

Repeats (``repeats=N``): every judged metric is scored N times, as distinct judge calls (a job per
repeat, whose backend gets the judge of that repeat, `JudgeClient.for_repeat`: the repeat is part
of each call's tag and cache key); each repeat is its own `Score` (``repeat`` 0..N-1), and the
returned `Run`'s ``scores`` are each case's mean over its repeats (`ragbridge.run.repeats`). A budget
(``max_calls``, ``max_cost``: for the whole run, earlier sessions included) stops a run cleanly:
once it is spent the gateway refuses further upstream calls, each score that needed one is recorded
as not run (``Score.not_run``, not an error), the status is ``incomplete``, and a later run with a
larger budget scores what is left. ``dry_run=True`` writes nothing and calls nothing: every call the
cache does not hold is answered by the stub judge in this process and counted (with its tokens and
cost), so the manifest's ``counts.judge`` is what the real run would spend.

The counts cover every session of a resumed run: the judge's traffic is added to the earlier
sessions' (a session that was killed counts what its last heartbeat recorded), and the score and
duplicate-chunk counts are taken from the whole run. ``timing.wall_seconds`` holds each backend's
wall-clock span, from the start of scoring to its last score, added up over the sessions the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from dataclasses import dataclass
from dataclasses import replace as dataclass_replace
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Iterator, Optional, Sequence, Union

from .. import __version__
from ..backend import Backend, RunOptions, ScoringContext, error_text
from ..formats.corpus import Corpus, read_corpus
from ..formats.batches import CaseBatch
from ..formats.plain_records import record_line
from ..formats import load_cases
from ..formats.source import BATCH_SIZE, CaseSource, open_cases
from ..plugins import get_backends
from ..schema import Case, RunManifest, Score, ScoreBlock
from .summary import Totals
from .folder import FINGERPRINT_OF, JUDGE_COUNTS, Run, RunFolder, now, this_process
from .plan import Plan, RunError, plan_metrics
from .score_cache import ScoreCache, case_key, metric_prefix, score_cache_for
from .sync import run_sync
from .target import fill_cases, load_target, target_error, target_error_of

#: the backends' lifecycle and the recorder are public for an executor that scores elsewhere
#: (`ragbridge.run.ray_executor`): the same steps `_score` takes, so a backend behaves alike wherever
#: it is scored
__all__ = ["evaluate", "evaluate_async", "applied_environment", "open_session", "drive_job", "close_session",
           "Recorder"]

#: (backend, metric, cases, repeat): one backend's metric on cases, for one repeat of a judged metric
Job = tuple[Backend, str, CaseBatch, int]

#: the longest a recorded score waits in the write buffer before it is flushed to disk
FLUSH_SECONDS = 1.0
#: how often a run whose stderr is not a terminal prints a progress line (`progress_seconds`)
PROGRESS_SECONDS = 30.0


def evaluate(
    cases: Any,
    backends: Sequence[str] | None = None,
    metrics: Sequence[str] | None = None,
    out: str | Path | None = None,
    options: RunOptions | None = None,
    judge: Any = None,
    dataset_path: str | None = None,
    progress: bool = False,
    overwrite: bool = False,
    on_score: Optional[Callable[[Score], None]] = None,
    target: Any = None,
    target_concurrency: int = 4,
    batch_size: int = BATCH_SIZE,
    repeats: int = 1,
    pass_repeats: Optional[int] = None,
    max_calls: Optional[int] = None,
    max_cost: Optional[float] = None,
    dry_run: bool = False,
    executor: Any = None,
    score_cache: bool = True,
    corpus: Any = None,
) -> Run:
    """Score ``cases`` with ``backends`` (default: native) and return the `Run`.

    The synchronous form of `evaluate_async`, with the same arguments (see it for each one). It
    works where an event loop is already running, as in a Jupyter cell or an async application: the
    run then goes on in a worker thread with a loop of its own while this call waits
    (`ragbridge.run.sync`); an async application that wants its loop free meanwhile awaits
    `evaluate_async` instead. Raises `RunError` for a run that cannot start and
    `ragbridge.formats.DatasetError` for bad cases, before anything is called or written.
    """
    return run_sync(evaluate_async(
        cases, backends=backends, metrics=metrics, out=out, options=options, judge=judge,
        dataset_path=dataset_path, progress=progress, overwrite=overwrite, on_score=on_score, target=target,
        target_concurrency=target_concurrency, batch_size=batch_size, repeats=repeats,
        pass_repeats=pass_repeats, max_calls=max_calls, max_cost=max_cost, dry_run=dry_run, executor=executor,
        score_cache=score_cache, corpus=corpus))


async def evaluate_async(
    cases: Any,
    backends: Sequence[str] | None = None,
    metrics: Sequence[str] | None = None,
    out: str | Path | None = None,
    options: RunOptions | None = None,
    judge: Any = None,
    dataset_path: str | None = None,
    progress: bool = False,
    overwrite: bool = False,
    on_score: Optional[Callable[[Score], None]] = None,
    target: Any = None,
    target_concurrency: int = 4,
    batch_size: int = BATCH_SIZE,
    repeats: int = 1,
    pass_repeats: Optional[int] = None,
    max_calls: Optional[int] = None,
    max_cost: Optional[float] = None,
    dry_run: bool = False,
    executor: Any = None,
    score_cache: bool = True,
    corpus: Any = None,
) -> Run:
    """Score ``cases`` with ``backends`` (default: native) and return the `Run`.

    ``cases``: a path to a golden set (checked whole first, then read batch by batch:
    `ragbridge.formats.source.open_cases`), `Case` objects, any data `ragbridge.load_cases` reads (a
    list of dicts, a pandas DataFrame, a ``datasets.Dataset``, a library's own dataset or test-case
    objects), or a `CaseSource`. ``metrics`` are canonical names (``recall@5``,
    ``faithfulness``; default: every metric of each backend). ``judge`` is a
    ``ragbridge.judge.JudgeConfig``, needed only when a planned metric uses a judge. With ``out`` the
    run folder is written, and resumed if it already holds a run of the same cases (``overwrite``
    replaces it instead); the returned `Run` then reads its scores from the folder when asked for
    them. With ``target`` (a spec for `ragbridge.run.target.load_target`, or a loaded `Target`) each
    case's chunks and answer come from calling the system under test first. ``on_score`` is called
    with each score as it is recorded. Cases are scored ``batch_size`` at a time. ``executor`` is
    where the scoring step runs: ``"local"`` (the default: this process) or ``"ray"`` (a
    `ragbridge.run.ray_executor.RayExecutor`, or one given), with the same scores and run folder.

    ``repeats``: each judged metric is scored this many times (distinct judge calls); a case passes
    when at least ``pass_repeats`` of them pass (default: a majority). ``max_calls`` / ``max_cost``:
    the run's judge budget (upstream calls; money by the judge's price table), over all its sessions.
    ``dry_run``: call and write nothing; the returned run's ``manifest.counts["judge"]`` is what the
    run would spend (cache hits counted as such), with status ``dry-run``. ``score_cache``: a judged
    score the score cache holds for the same inputs is taken from it without calling the backend
    (`ragbridge.run.score_cache`; needs the judge cache on), and each score made is stored there.
    ``corpus``: the documents (a path for `ragbridge.formats.corpus.read_corpus`, or a ``Corpus``)
    that the chunks and quotes of span-labelled cases are placed against
    (`ragbridge.formats.corpus.SpanPlacer`; a `ragbridge.formats.DatasetError` for what cannot be).
    """
    options = options or RunOptions()
    if corpus is not None and not isinstance(corpus, Corpus):
        corpus = read_corpus(corpus)
    if isinstance(cases, (str, os.PathLike)):
        dataset_path = dataset_path or str(cases)
    source = _case_source(cases, batch_size, out, corpus)
    if not source.n_cases:
        raise RunError("no cases to evaluate")
    if source.span_cases and not options.span_labels:
        options = dataclass_replace(options, span_labels=True)
    _check_repeats_and_budget(repeats, pass_repeats, max_calls, max_cost)
    problem = options.problem()
    if problem:
        raise RunError(problem)
    plan = plan_metrics(backends, metrics, options.k, options)
    needs_judge = _check_judge(plan, judge, preflight=not dry_run)
    scorer = _executor(executor)
    if isinstance(target, str):
        target = load_target(target)
    if dry_run and target is not None:
        raise RunError("a dry run cannot call the system under test: run without --target (or rescore "
                       "the target run's folder) to count its judge calls")
    golden_fp = source.fingerprint
    folder = RunFolder(Path(out)) if out is not None else None
    earlier = None
    if folder and not (dry_run and overwrite):
        earlier = folder.prepare(overwrite and not dry_run, golden_fp, target=target is not None)
    dataset = {"path": dataset_path, "fingerprint": golden_fp, "fingerprint_of": FINGERPRINT_OF,
               "n_cases": source.n_cases}
    n_target_errors = 0
    if target is not None:
        filled = await fill_cases(source.cases, target, record_path=folder.target_path if folder else None,
                                  concurrency=target_concurrency, progress=progress)
        n_target_errors = sum(1 for c in filled if target_error(c))
        source = CaseSource.of_cases(filled, batch_size, corpus)
        dataset.update(fingerprint=source.fingerprint, golden_fingerprint=golden_fp, target=target.spec)
    manifest = _new_manifest(plan, dataset, options, judge if needs_judge else None)
    if repeats > 1 or pass_repeats is not None:
        manifest.options.update(repeats=repeats, pass_repeats=pass_repeats)
    done = folder.resume(earlier, manifest) if earlier is not None else {}
    if dry_run:
        folder = None  # nothing is written
    if folder:
        try:
            folder.start(source, manifest)
        except BaseException:
            source.close()  # its scratch copy too
            raise
    gateway = None
    if needs_judge:
        from ..judge import JudgeGateway

        gateway = JudgeGateway(judge, audit_log=folder.audit_path if folder else None)
        spent = dict(manifest.counts.get("judge", {}))
        if folder:  # every call counted before it is made: what a killed session spent is known
            calls, cost = gateway.ledger.open_tally(folder.tally_path)
            spent.update(calls=max(int(spent.get("calls") or 0), calls),
                         cost=max(float(spent.get("cost") or 0.0), cost))
            manifest.counts["judge"] = spent
        if dry_run:
            gateway.simulate = _stub_simulator()
        elif max_calls is not None or max_cost is not None:
            gateway.set_budget(max_calls, max_cost, int(spent.get("calls") or 0),
                               float(spent.get("cost") or 0.0))
            manifest.counts["budget"] = {"max_calls": max_calls, "max_cost": max_cost}
    specs = [spec for chosen in plan.values() for _, spec in chosen]
    repeated = (repeats > 1 and any(spec.judge for spec in specs)) or any(key[3] for key in done)
    planned = source.n_cases * sum(repeats if spec.judge else 1 for spec in specs)
    cache = score_cache_for(judge, dry_run) if needs_judge and score_cache else None
    reuse = _Reuse(cache, plan, options, judge, manifest) if cache is not None else None
    recorder = Recorder(manifest, done, folder, gateway, on_score, _progress(progress, planned, gateway),
                        keep=folder is None, duplicates=source.duplicate_chunk_ids,
                        target_errors=n_target_errors, judge_model=judge.model if needs_judge else None,
                        options=options, reuse=reuse)
    if dry_run:
        recorder.earlier_judge = {}  # what this run would spend: the earlier sessions' is spent already
    interrupted = complete = False
    try:
        if gateway is not None:
            gateway.start()
        async with _scoring(scorer, plan, ScoringContext(options=options, judge=gateway)) as score_batch:
            for batch in source.batches():
                jobs, immediate = _jobs(plan, batch, done, repeats, reuse)
                recorder.start_batch(batch)
                for score in immediate:
                    recorder.record(score)
                await score_batch(jobs, recorder)
                recorder.end_batch()
        complete = True
    except (KeyboardInterrupt, asyncio.CancelledError, OSError):
        interrupted = True  # an OSError here is the folder's (a full disk): resumable as a Ctrl-C is
        raise
    finally:
        recorder.finish(interrupted, complete=complete, dry_run=dry_run)
        source.close()
    # a run with repeats summarises each case's mean over them: from its scores, not the running totals
    return Run(manifest=manifest, scores=recorder.ordered(source) if folder is None else None,
               cases=source.cases if folder is None else None, path=folder.path if folder else None,
               totals=None if repeated else recorder.totals)


def _case_source(cases: Any, batch_size: int, out: str | Path | None, corpus: Optional[Corpus]) -> CaseSource:
    """The cases to run, from whatever `evaluate_async` was given."""
    if isinstance(cases, CaseSource):
        return cases
    if isinstance(cases, (str, os.PathLike)):
        return open_cases(cases, near=Path(out) if out is not None else None, batch_size=batch_size,
                          corpus=corpus)
    if not (isinstance(cases, (list, tuple)) and all(isinstance(c, Case) for c in cases)):
        cases = load_cases(cases)
    return CaseSource.of_cases(cases, batch_size, corpus)


def _check_repeats_and_budget(repeats: Any, pass_repeats: Any, max_calls: Any, max_cost: Any) -> None:
    def whole(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool)

    if not whole(repeats) or repeats < 1:
        raise RunError(f"--repeats must be a positive integer, got {repeats!r}")
    if pass_repeats is not None and (not whole(pass_repeats) or not 1 <= pass_repeats <= repeats):
        raise RunError(f"--pass-repeats must be an integer from 1 to --repeats ({repeats}), "
                       f"got {pass_repeats!r}")
    if max_calls is not None and (not whole(max_calls) or max_calls < 0):
        raise RunError(f"--max-calls must be a non-negative integer, got {max_calls!r}")
    if max_cost is not None and (isinstance(max_cost, bool) or not isinstance(max_cost, (int, float))
                                 or not max_cost >= 0):
        raise RunError(f"--max-cost must be a non-negative number, got {max_cost!r}")


def _stub_simulator() -> Callable[[str, Any], dict]:
    """What a dry run answers a cache miss with: the stub judge's answer, made in this process."""
    from ..testing.stub_judge import StubJudge

    stub = StubJudge()  # not started: only its answer makers are used

    def simulate(endpoint: str, body: Any) -> dict:
        body = body if isinstance(body, dict) else {}
        if endpoint == "responses":
            return stub.response(body)
        if endpoint == "embeddings":
            return stub.embeddings(body)
        if endpoint == "completions":
            return stub.completion(body)
        return stub.chat_completion(body)

    return simulate


# --------------------------------------------------------------------------------------------
# Before scoring


def _check_judge(plan: Plan, judge: Any, preflight: bool = True) -> bool:
    """Whether a planned metric needs the judge; raises `RunError` when it has none, or (with
    ``preflight``) when its key or endpoint does not work (checked before anything is called or
    written)."""
    if not any(spec.judge for chosen in plan.values() for _, spec in chosen):
        return False
    if judge is None:
        judged = sorted({f"{b}:{m}" for b, chosen in plan.items() for m, s in chosen if s.judge})
        raise RunError(
            "these metrics need a judge: " + ", ".join(judged)
            + "; pass --judge-model and --judge-base-url (or set them in ragbridge.toml)"
        )
    if not preflight:
        return True
    from ..judge import JudgeGateway

    probe = JudgeGateway(judge)  # preflight needs no started gateway: nothing is served yet
    try:
        probe.preflight()
    except Exception as exc:
        raise RunError(str(exc)) from None
    finally:
        probe.close()
    return True


def _executor(executor: Any) -> Any:
    """The executor ``executor`` names: None for this process, else a distributed one."""
    from .ray_executor import executor_for

    return executor_for(executor)


def _new_manifest(plan: Plan, dataset: dict[str, Any], options: RunOptions, judge: Any) -> RunManifest:
    """This session's manifest (``judge``: the config when a planned metric uses it, else None)."""
    registry = get_backends()
    manifest = RunManifest(
        ragbridge_version=__version__,
        dataset=dataset,
        backends={b: registry[b].version() for b in plan},
        metrics={b: [m for m, _ in chosen] for b, chosen in plan.items()},
        options=options.public(),
        judge=judge.public_dict() if judge is not None else None,
        digests={b: d for b, chosen in plan.items() if (d := {m: s.digest for m, s in chosen if s.digest})},
        pass_marks={b: d for b, chosen in plan.items()
                    if (d := {m: s.pass_mark for m, s in chosen if s.pass_mark is not None})},
        started_at=now(),
        process=this_process(),
    )
    return manifest


def _same_model(a: Any, b: Any) -> bool:
    """Whether two model names name the same model (case-insensitively, without a ``provider/``)."""
    def norm(model: Any) -> str:
        return str(model).strip().casefold().rsplit("/", 1)[-1]

    return norm(a) == norm(b)


def _jobs(plan: Plan, batch: CaseBatch, done: dict, repeats: int = 1,
          reuse: Optional["_Reuse"] = None) -> tuple[list[Job], list[Score]]:
    """Per backend, metric and repeat, the cases of ``batch`` still to score; and the scores known
    without scoring: a failed target call (the error), a case that lacks a field the metric
    requires (skipped) and, with ``reuse``, a judged score the score cache holds. A judged metric is
    planned ``repeats`` times, a job per repeat (the backend's judge files its calls under it)."""
    registry = get_backends()
    jobs: list[Job] = []
    immediate: list[Score] = []
    ids = batch.ids
    requires = any(spec.requires for chosen in plan.values() for _, spec in chosen)
    present = [batch.fields_present(i) for i in range(len(batch))] if requires else [()] * len(batch)
    failed = [target_error_of(batch.metadata(i)) for i in range(len(batch))]
    for bname, chosen in plan.items():
        for metric, spec in chosen:
            for repeat in range(repeats if spec.judge else 1):
                eligible = []
                for i, cid in enumerate(ids):
                    if done and (cid, metric, bname, repeat) in done:
                        continue
                    missing = [r for r in spec.requires if r not in present[i]]
                    if failed[i] or missing:
                        reason = None if failed[i] else "skipped: case has no " + ", ".join(missing)
                        immediate.append(Score(case_id=cid, metric=metric, backend=bname, repeat=repeat,
                                               native_metric=spec.native_name, error=failed[i],
                                               reason=reason))
                    else:
                        eligible.append(i)
                if reuse is not None and spec.judge and eligible:
                    eligible = reuse.lookup(bname, metric, repeat, batch, eligible, immediate)
                if not eligible:
                    continue
                # the batch itself when nothing was filtered, so backends can reuse work per batch
                cases = batch if len(eligible) == len(batch) else batch.subset(eligible)
                jobs.append((registry[bname], metric, cases, repeat))
    return jobs, immediate


class _Reuse:
    """The score cache as a run uses it: `lookup` takes out of a job the cases whose score it holds
    (recorded as they are, `Score.cached`) and files the keys of the others; `store` keeps a score
    made this run under its key. ``reused`` and ``stored`` count this run's, all sessions included."""

    def __init__(self, cache: ScoreCache, plan: Plan, options: RunOptions, judge: Any,
                 manifest: RunManifest):
        registry = get_backends()
        self.cache = cache
        self.prefixes = {(b, m): metric_prefix(b, registry[b].version(), m, spec, options, judge)
                         for b, chosen in plan.items() for m, spec in chosen if spec.judge}
        self.priced = bool(judge.prices)
        self.keys: dict[tuple[str, str, str, int], str] = {}  # the scores being made: repeat key -> key
        self._lines: tuple[Optional[CaseBatch], list[Optional[bytes]]] = (None, [])
        earlier = manifest.counts.get("score_cache") or {}
        self.reused, self.stored = int(earlier.get("reused", 0)), int(earlier.get("stored", 0))
        self.stub = False  # a reused score was made by the stub judge

    def _line(self, batch: CaseBatch, i: int) -> bytes:
        if self._lines[0] is not batch:
            self._lines = (batch, [None] * len(batch))
        lines = self._lines[1]
        if lines[i] is None:
            lines[i] = record_line(batch.record(i))
        return lines[i]

    def lookup(self, backend: str, metric: str, repeat: int, batch: CaseBatch, eligible: list[int],
               immediate: list[Score]) -> list[int]:
        """The cases of ``eligible`` the cache does not hold; the scores of those it holds are added to
        ``immediate``."""
        prefix = self.prefixes[(backend, metric)]
        ids = batch.ids
        keys = {i: case_key(prefix, repeat, self._line(batch, i)) for i in eligible}
        found = self.cache.get_many(keys.values())
        left = []
        for i in eligible:
            hit = found.get(keys[i])
            if hit is None:
                self.keys[(ids[i], metric, backend, repeat)] = keys[i]
                left.append(i)
                continue
            score, stub = hit
            self.stub = self.stub or stub
            # the key holds the case (its id), metric, backend and repeat: only this run's usage differs
            immediate.append(score.model_copy(update={
                "cached": True, "judge_calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "seconds": 0.0,
                "cost": 0.0 if self.priced else None}))
        return left

    def record(self, score: Score, stub: bool) -> None:
        """Count a recorded score, and store it when it was made this run (not an error, not unrun)."""
        if score.cached:
            self.reused += 1
            return
        key = self.keys.pop(score.repeat_key, None)
        if key is not None and not score.error and not score.not_run and self.cache.put(key, score, stub):
            self.stored += 1

    def counts(self) -> dict[str, int]:
        return {"reused": self.reused, "stored": self.stored}


# --------------------------------------------------------------------------------------------
# Scoring: the backends' lifecycle


class _Backends:
    """The lifecycle of the backends a run uses, around all its batches: on entry each one's
    environment defaults are applied and it is opened (its context, by name, is what ``async with``
    gives); on exit every opened backend is closed and the environment restored."""

    def __init__(self, plan: Plan, ctx: ScoringContext):
        registry = get_backends()
        self.backends = [registry[b] for b in plan]
        self.ctx = ctx
        self.contexts: dict[str, ScoringContext] = {}
        self.environment = contextlib.ExitStack()
        self.opened: list[Backend] = []

    async def __aenter__(self) -> dict[str, ScoringContext]:
        try:
            for b in self.backends:
                self.environment.enter_context(applied_environment(b.environment()))
                self.contexts[b.name] = await open_session(b, self.ctx)
                self.opened.append(b)
        except BaseException:
            await self.__aexit__()
            raise
        return self.contexts

    async def __aexit__(self, *exc: Any) -> None:
        for b in reversed(self.opened):
            await close_session(b, self.contexts[b.name])
        self.opened = []
        self.environment.close()


@contextlib.asynccontextmanager
async def _scoring(executor: Any, plan: Plan, ctx: ScoringContext) -> AsyncIterator[Callable]:
    """The scoring step of each batch, ``await step(jobs, recorder)``, for as long as the run lasts:
    in this process (``executor`` None) every backend is opened once (`_Backends`) and the jobs run
    by `_score`; else the executor's ``score`` runs them, inside its ``session`` (a Ray cluster
    started once for the run)."""
    if executor is None:
        async with _Backends(plan, ctx) as contexts:
            async def local(jobs: list[Job], recorder: Recorder) -> None:
                await _score(jobs, contexts, recorder)

            yield local
    else:
        with executor.session(ctx):
            async def distributed(jobs: list[Job], recorder: Recorder) -> None:
                await executor.score(jobs, ctx, recorder)

            yield distributed


async def _score(jobs: list[Job], contexts: dict[str, ScoringContext], recorder: Recorder) -> None:
    """Run ``jobs`` (one batch) concurrently, recording each score as it arrives."""
    queue: asyncio.Queue = asyncio.Queue()
    tasks = [asyncio.create_task(drive_job(b, m, c, contexts[b.name], queue, repeat=r))
             for b, m, c, r in jobs]
    try:
        remaining = sum(len(c) for _, _, c, _ in jobs)
        while remaining:
            item = await queue.get()
            remaining -= recorder.record(item)
        await asyncio.gather(*tasks)
    finally:
        for t in tasks:
            if not t.done():
                t.cancel()


@contextlib.contextmanager
def applied_environment(defaults: dict[str, str]) -> Iterator[None]:
    """Set each of ``defaults`` that is not set in ``os.environ``; unset them again on exit (a
    variable the user set, or one set meanwhile, is left alone)."""
    added = {k: str(v) for k, v in defaults.items() if k not in os.environ}
    os.environ.update(added)
    try:
        yield
    finally:
        for k, v in added.items():
            if os.environ.get(k) == v:
                del os.environ[k]


@dataclass(frozen=True)
class _OpenFailed:
    error: str


class _BackendFault(Exception):
    """A backend that cannot score at all (its ``open`` failed): the error of every case it was given."""


async def open_session(backend: Backend, ctx: ScoringContext) -> ScoringContext:
    """The backend's context for this run: ``session`` is what its ``open`` returned. A failing
    ``open`` is kept as the session's error, and every case the backend is given gets it."""
    try:
        return ctx.for_session(await backend.open(ctx.for_session(None)))
    except Exception as exc:
        return ctx.for_session(_OpenFailed(error_text(exc)))


async def close_session(backend: Backend, ctx: ScoringContext) -> None:
    if isinstance(ctx.session, _OpenFailed):
        return
    try:
        await backend.close(ctx)
    except Exception as exc:  # scores are recorded already: a failing close must not lose the run
        import warnings

        warnings.warn(f"backend {backend.name!r} failed to close: {error_text(exc)}", RuntimeWarning)


async def drive_job(
    backend: Backend, metric: str, cases: CaseBatch | Sequence[Case], ctx: ScoringContext,
    queue: asyncio.Queue, repeat: int = 0,
) -> None:
    """Put every score of one job on ``queue`` (a `Score` or a `ScoreBlock` of them): one per case,
    whatever the backend does (a fault is the error of each case it did not score; a case it forgot
    is an error too). For repeat r > 0 the backend's judge is the one of that repeat, and each
    score is marked with it."""
    ids = CaseBatch.of_cases(cases).ids
    pending = set(ids)
    error = "backend returned no score for this case"
    if repeat and ctx.judge is not None:
        ctx = dataclass_replace(ctx, judge=ctx.judge.for_repeat(repeat))
    try:
        if isinstance(ctx.session, _OpenFailed):
            raise _BackendFault(ctx.session.error)
        async for item in backend.score(metric, cases, ctx):
            if isinstance(item, ScoreBlock):
                if not pending.issuperset(item.case_ids):
                    raise RuntimeError("backend returned a score block for cases it was not given, or twice")
                pending.difference_update(item.case_ids)
            else:
                pending.discard(item.case_id)
                item.repeat = repeat
            await queue.put(item)
    except Exception as exc:  # a backend fault: every case it did not score gets the error
        error = str(exc) if isinstance(exc, _BackendFault) else error_text(exc)
    for cid in ids:
        if cid in pending:
            await queue.put(Score(case_id=cid, metric=metric, backend=backend.name, repeat=repeat,
                                  error=error))


# --------------------------------------------------------------------------------------------
# Recording


class Recorder:
    """Where each score goes as it arrives: its judge usage is filled in, it is added to the running
    totals, appended to the folder's buffer, passed to ``on_score`` and counted by the progress bar
    (and, for a run without a folder, kept: the last per key wins); the buffer is flushed at the end
    of each batch and every `FLUSH_SECONDS`, and every `HEARTBEAT_SECONDS` the manifest is rewritten
    with the counts so far. The scores an earlier session kept (``done``) join the totals batch by
    batch, with their case's tags."""

    def __init__(self, manifest: RunManifest, done: dict, folder: Optional[RunFolder], gateway: Any,
                 on_score: Optional[Callable[[Score], None]], bar: Optional["_Bar"], *, keep: bool,
                 duplicates: int, target_errors: int, judge_model: Optional[str], options: RunOptions,
                 reuse: Optional[_Reuse] = None):
        self.manifest, self.folder, self.gateway, self.reuse = manifest, folder, gateway, reuse
        self.on_score, self.bar = on_score, bar
        self.totals = Totals()
        self.kept: Optional[dict[tuple[str, str, str, int], Score]] = {} if keep else None
        self.done_by_case: dict[str, list[Score]] = {}
        for s in done.values():
            self.done_by_case.setdefault(s.case_id, []).append(s)
        # what the run's earlier sessions counted (a resumed run), to add this session's to
        self.earlier_judge = dict(manifest.counts.get("judge", {}))
        self.earlier_wall = dict(manifest.timing.get("wall_seconds", {}))
        self.started = time.monotonic()
        self.last_score_at: dict[str, float] = {}  # per backend, seconds from the start of scoring
        self.n_duplicates, self.n_target_errors = duplicates, target_errors
        self.judge_model, self.generator_model = judge_model, options.generator_model
        self.self_judged: list[str] = []  # the generator models of the cases judged by their own model
        self.tags_of: dict[str, list[str]] = {}
        self._flushed_at = time.monotonic()

    def start_batch(self, batch: CaseBatch) -> None:
        """A batch begins: its cases' tags, its kept scores into the totals, its self-judged cases."""
        ids = batch.ids
        self.tags_of = {cid: tags for i, cid in enumerate(ids) if (tags := batch.tags(i))}
        if self.done_by_case:
            for cid in ids:
                for s in self.done_by_case.pop(cid, ()):
                    self.totals.add(s, self.tags_of.get(cid, ()))
        if self.judge_model is not None:
            for i in range(len(batch)):
                model = self.generator_model or batch.metadata(i).get("generator_model")
                if model and _same_model(model, self.judge_model):
                    self.self_judged.append(model)

    def record(self, item: Score | ScoreBlock) -> int:
        """Record one score or block; returns how many scores that was."""
        now_s = time.monotonic()
        if isinstance(item, ScoreBlock):
            self.last_score_at[item.backend] = now_s - self.started
            self.totals.add_block(item, self.tags_of)
            if self.folder:
                self.folder.append_lines(item.json_lines())
            if self.on_score or self.kept is not None:
                for score in item.scores():
                    self._hand_on(score)
            n = len(item)
        else:
            item = self._usage(item)
            if self.reuse is not None:
                self.reuse.record(item, self.gateway is not None and self.gateway.stub_detected)
            self.last_score_at[item.backend] = now_s - self.started
            self.totals.add(item, self.tags_of.get(item.case_id, ()))
            if self.folder:
                self.folder.append(item)
            self._hand_on(item)
            n = 1
        if self.bar:
            self.bar.advance(n, int(not isinstance(item, ScoreBlock) and item.status == "error"))
        if self.folder and now_s - self._flushed_at >= FLUSH_SECONDS:
            self._flush(now_s)
        return n

    def _usage(self, score: Score) -> Score:
        """``score`` with its repeat index and judge usage; a score the spent budget refused becomes
        not run."""
        gateway = self.gateway
        tag = (score.backend, score.metric, score.case_id, score.repeat)
        if gateway is not None and score.judge_calls == 0:
            usage = gateway.usage(*tag)
            score.judge_calls = usage.calls + usage.cache_hits
            score.prompt_tokens = usage.prompt_tokens
            score.completion_tokens = usage.completion_tokens
            if score.judge_calls and gateway.config.prices:
                score.cost = usage.known_cost
        if gateway is not None and gateway.refused(*tag):
            # the budget was spent before this score's calls could all be made: not run, not failed
            # (the answers it did get stay cached, for the run that resumes with a larger budget)
            score = Score(case_id=score.case_id, metric=score.metric, backend=score.backend,
                          repeat=score.repeat, native_metric=score.native_metric, not_run=True,
                          reason=f"not run: the run's judge budget ({gateway.budget.describe()}) was spent",
                          judge_calls=score.judge_calls, prompt_tokens=score.prompt_tokens,
                          completion_tokens=score.completion_tokens, cost=score.cost, seconds=score.seconds)
        elif gateway is not None and score.error:
            gateway.forget(*tag)
        return score

    def _hand_on(self, score: Score) -> None:
        if self.kept is not None:
            self.kept[score.repeat_key] = score
        if self.on_score:
            self.on_score(score)

    def end_batch(self) -> None:
        if self.folder:
            self._flush(time.monotonic())
        elif self.reuse is not None:
            self.reuse.cache.commit()

    def _flush(self, now_s: float) -> None:
        self.folder.flush()
        if self.reuse is not None:
            self.reuse.cache.commit()  # after the scores: a stored score is one the folder holds
        self._flushed_at = now_s
        if self.folder.heartbeat_due:
            self.update_counts()
            self.folder.heartbeat(self.manifest)

    def ordered(self, source: CaseSource) -> list[Score]:
        """The kept scores by backend, metric, case order and repeat (a run without a folder)."""
        order = {cid: i for i, cid in enumerate(cid for b in source.batches() for cid in b.ids)}
        return sorted(self.kept.values(),
                      key=lambda s: (s.backend, s.metric, order.get(s.case_id, 0), s.repeat))

    def update_counts(self) -> None:
        manifest = self.manifest
        manifest.counts.update(self.totals.counts(), duplicate_chunk_ids=self.n_duplicates)
        if self.n_target_errors:
            manifest.counts["target_errors"] = self.n_target_errors
        if self.gateway is not None:
            u = self.gateway.usage()
            judge = {k: (self.earlier_judge.get(k) or 0) + getattr(u, k) for k in JUDGE_COUNTS}
            invalid = self.earlier_judge.get("invalid_usage", 0) + u.invalid_usage
            if invalid:  # calls whose reported tokens could not be true: their tokens and cost unknown
                judge["invalid_usage"] = invalid
            judge["cost"] = round(judge["cost"], 10)
            manifest.counts["cost"] = _cost_counts(self.totals, self.gateway.config, judge)
            if manifest.counts["cost"]["total"] is None:  # no price for some call: the cost is unknown
                judge["cost"] = None
            manifest.counts["judge"] = judge
        if self.reuse is not None:
            manifest.counts["score_cache"] = self.reuse.counts()
        if self.self_judged and manifest.judge is not None:
            manifest.judge["self_judging"] = {"generator_model": self.self_judged[0],
                                              "cases": len(self.self_judged)}
        spans = {b: round(self.earlier_wall.get(b, 0.0) + self.last_score_at.get(b, 0.0), 3)
                 for b in {**self.earlier_wall, **self.last_score_at}}
        manifest.timing = {**manifest.timing, "wall_seconds": spans}

    def finish(self, interrupted: bool, complete: bool, dry_run: bool = False) -> None:
        """The session's end: stop the bar and the gateway, record the status and the counts."""
        if self.bar:
            self.bar.stop()
        if self.gateway is not None:
            self.gateway.close()
        if self.reuse is not None:
            self.reuse.cache.close()
        for scores in self.done_by_case.values():  # kept scores of cases this session did not reach
            for s in scores:
                self.totals.add(s)
        self.done_by_case = {}
        manifest = self.manifest
        manifest.finished_at = now()
        manifest.status = "interrupted" if interrupted else ("complete" if complete else "incomplete")
        self.update_counts()
        if manifest.counts.get("not_run"):
            manifest.status = "incomplete"
        if self.gateway is not None and self.gateway.budget is not None:
            budget = manifest.counts.get("budget", {})
            manifest.counts["budget"] = {**budget, "spent": self.gateway.budget_spent}
        if dry_run:
            manifest.status = "dry-run"
            if self.gateway is not None:
                manifest.counts["planned"] = _planned(self.gateway)
        if (self.gateway is not None and self.gateway.stub_detected) or (self.reuse and self.reuse.stub):
            # every judged score of this run came from ragbridge's stub judge, not a model
            manifest.judge = {**(manifest.judge or {}), "stub": True}
        if self.folder:
            self.folder.finish(manifest)


def _planned(gateway: Any) -> dict[str, dict[str, Any]]:
    """A dry run's ``counts.planned``: per ``backend:metric``, the calls it would make, the cache hits
    and their cost (None: unknown)."""
    priced = bool(gateway.config.prices)
    out: dict[str, dict[str, Any]] = {}
    for tag, u in sorted(gateway.usage_by_tag().items(), key=lambda kv: str(kv[0])):
        if tag.backend is None:
            continue
        row = out.setdefault(f"{tag.backend}:{tag.metric}",
                             {"calls": 0, "cache_hits": 0, "cost": 0.0 if priced else None})
        row["calls"] += u.calls
        row["cache_hits"] += u.cache_hits
        if row["cost"] is not None:
            row["cost"] = None if u.unpriced else round(row["cost"] + u.cost, 10)
    return out


def _cost_counts(totals: Totals, config: Any, judge: dict[str, Any]) -> dict[str, Any]:
    """``counts.cost``: the run's judge cost (``total``: every upstream call of every session, None
    when a call's model has no price) and, per backend and per ``backend:metric``, the cost of the
    scores kept (a failed score's calls are in the total only)."""
    by_backend, by_metric = totals.costs()
    return {"currency": config.currency, "priced": bool(config.prices),
            "total": None if judge.get("unpriced") or not config.prices else judge.get("cost", 0.0),
            "by_backend": by_backend, "by_metric": by_metric}


class _Bar:
    """The progress bar on stderr, redrawn at most every 0.1 s."""

    def __init__(self, total: int):
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
        from rich.progress import TimeRemainingColumn

        self.progress = Progress(
            TextColumn("scoring"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=Console(stderr=True),
            transient=False,
        )
        self.task = self.progress.add_task("scoring", total=total)
        self.progress.start()
        self._last = 0.0
        self._pending = 0

    def advance(self, n: int = 1, errors: int = 0) -> None:
        self._pending += n
        now = time.monotonic()
        if now - self._last > 0.1:
            self.progress.advance(self.task, self._pending)
            self._pending = 0
            self._last = now

    def stop(self) -> None:
        self.progress.advance(self.task, self._pending)
        self.progress.stop()


class _Lines:
    """Progress in a log (stderr is not a terminal: a CI job, a pipe): one line every
    `progress_seconds`, however long the wait for the judge, then one at the end: the scores done of
    those planned, how many errored, the judge calls (and answers from its cache) and their cost."""

    def __init__(self, total: int, gateway: Any, every: float):
        import threading

        self.total, self.done, self.errors, self.gateway = total, 0, 0, gateway
        self.started = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, args=(every,), name="ragbridge-progress",
                                        daemon=True)
        self._thread.start()

    def advance(self, n: int = 1, errors: int = 0) -> None:
        self.done += n
        self.errors += errors

    def line(self) -> str:
        elapsed = int(time.monotonic() - self.started)
        text = (f"progress: {self.done:,} of {self.total:,} scores ({self.done / self.total:.0%}), "
                + (f"{self.errors:,} error(s)" if self.errors else "no error"))
        if self.gateway is not None:
            u = self.gateway.usage()
            cost = u.known_cost
            if u.calls or u.cache_hits:
                text += f", {u.calls:,} judge calls ({u.cache_hits:,} cached)"
                text += f", cost {cost:.4f}" if cost else ""
            else:
                text += ", no judge call yet"
        return text + f", {elapsed // 60}m{elapsed % 60:02d}s"

    def _beat(self, every: float) -> None:
        while not self._stop.wait(every):
            print(self.line(), file=sys.stderr, flush=True)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        print(self.line(), file=sys.stderr, flush=True)


def progress_seconds() -> float:
    """How often a run in a log prints its progress line: ``RAGBRIDGE_PROGRESS_SECONDS``, else 30 s
    (CI services stop a job that prints nothing for 10 minutes)."""
    try:
        return max(0.05, float(os.environ.get("RAGBRIDGE_PROGRESS_SECONDS", PROGRESS_SECONDS)))
    except ValueError:
        return PROGRESS_SECONDS


def _progress(enabled: bool, total: int, gateway: Any = None) -> Optional[Union[_Bar, _Lines]]:
    """A progress bar on a terminal, progress lines in a log, or nothing."""
    if not enabled or not total:
        return None
    return _Bar(total) if sys.stderr.isatty() else _Lines(total, gateway, progress_seconds())
