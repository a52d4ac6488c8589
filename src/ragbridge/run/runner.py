"""The runner: scores cases with the planned backends, recording each score as it arrives.

`evaluate` and `evaluate_async` build a `RunRequest` (`ragbridge.run.request`) of their arguments
and `run` it, in these steps, each a function of this module or a neighbour:

1. the cases (`_case_source`), `plan_metrics` (which backend scores which metric) and `_check_judge`
   (a judged metric needs a judge, whose key and endpoint are checked before anything is called or
   written);
2. `RunFolder.prepare`: a new run, a resumed one or a replaced one (`ragbridge.run.folder`);
3. with a target, `fill_cases`: each case's chunks and answer from the system under test;
4. `_new_manifest`, `RunFolder.resume` (what the earlier sessions scored is kept) and
   `RunFolder.start`; the judge gateway (`_gateway`) and the score cache;
5. the executor's session for the run (`ragbridge.run.executor`: this process,
   `ragbridge.run.local_executor`, or a Ray cluster, `ragbridge.run.ray_executor`), which opens
   each backend when its first job arrives and closes what it opened when the run ends;
6. per batch of cases (`ragbridge.formats.source.CaseSource.batches`: memory holds one batch, not
   the dataset): `_jobs` (per backend, metric and repeat the cases to score, and the scores known at
   once: a case without a field the metric requires is skipped, a failed target call is each
   score's error, a judged score the score cache holds is reused, `ScoreReuse`), the session's
   ``score``, and the batch's scores flushed;
7. the `Recorder` (`ragbridge.run.recorder`): each score's judge usage, the folder, ``on_score``,
   the progress display, the heartbeat, the running totals and the manifest's counts.

Whoever opens a thing closes it: `run` closes the case source it opened (not one it was given), the
gateway, the score cache and the progress display, then records the session's end in the folder;
the executor closes the backends and the cluster it opened.

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
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional, Sequence

from .. import __version__
from ..backend import RunOptions, ScoringContext
from ..errors import cli_text
from ..formats import load_cases
from ..formats.batches import CaseBatch
from ..formats.source import BATCH_SIZE, CaseSource, open_cases
from ..limits import as_text
from ..plugins import get_backends, plugin_version
from ..schema import Case, RunManifest, Score
from .executor import Executor
from .folder import FINGERPRINT_OF, Run, RunFolder, now, this_process, utc
from .isolated import backend_named, prepare, split_name, version_changes
from .kept import Kept
from .lifecycle import Job
from .local_executor import LocalExecutor
from .plan import DEFAULT_BACKENDS, Plan, RunError, plan_metrics
from .progress import progress_display
from .recorder import Recorder
from .request import RunRequest
from .sync import run_sync
from .target import fill_cases, load_target, target_error, target_error_of

if TYPE_CHECKING:  # imported where used: a run without a corpus, a judge or Ray needs none of them
    from ..formats.corpus import Corpus
    from .score_cache import ScoreReuse

__all__ = ["evaluate", "evaluate_async", "run", "executor_for"]


def evaluate(
    cases: Any,
    backends: Sequence[str] | None = None,
    metrics: Sequence[str] | None = None,
    out: str | Path | None = None,
    options: RunOptions | Mapping[str, Any] | None = None,
    judge: Any = None,
    dataset_path: str | None = None,
    progress: Optional[bool] = None,
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
    changed_cases: str = "rescore",
) -> Run:
    """Score ``cases`` with ``backends`` (default: native) and return the `Run`.

    The synchronous form of `evaluate_async`, with the same arguments (see it for each one). It
    works where an event loop is already running, as in a Jupyter cell or an async application: the
    run then goes on in a worker thread with a loop of its own while this call waits
    (`ragbridge.run.sync`); an async application that wants its loop free meanwhile awaits
    `evaluate_async` instead. Raises `RunError` for a run that cannot start and
    `ragbridge.formats.DatasetError` for bad cases, before anything is called or written."""
    return run_sync(run(RunRequest.of(**locals())))


async def evaluate_async(
    cases: Any,
    backends: Sequence[str] | None = None,
    metrics: Sequence[str] | None = None,
    out: str | Path | None = None,
    options: RunOptions | Mapping[str, Any] | None = None,
    judge: Any = None,
    dataset_path: str | None = None,
    progress: Optional[bool] = None,
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
    changed_cases: str = "rescore",
) -> Run:
    """Score ``cases`` with ``backends`` (default: native) and return the `Run`.

    ``cases``: a path to a golden set (checked whole first, then read batch by batch:
    `ragbridge.formats.source.open_cases`), `Case` objects, any data `ragbridge.load_cases` reads (a
    list of dicts, a pandas DataFrame, a ``datasets.Dataset``, a library's own dataset or test-case
    objects), or a `CaseSource`. ``metrics`` are canonical names (``recall@5``,
    ``faithfulness``; default: every metric of each backend). ``options``: a `RunOptions` (``k``,
    ``generator_model``, each backend's options), or only the backends' options by backend name,
    ``{"native": {"gain": "exponential"}}`` (a backend's options model
    in place of a mapping, too; ``ragbridge backends NAME`` lists them); each is checked against its
    backend's options model before anything is read (`RunError` naming the backend and the option).
    ``judge`` is a ``ragbridge.judge.JudgeConfig``, needed only when a planned metric uses a judge.
    ``dataset_path``: the golden set's path that run.json records, when ``cases`` are not read from
    it here. With ``out`` the
    run folder is written, and resumed if it already holds a run of the same cases (``overwrite``
    replaces it instead); when it holds a run of other cases (a case edited, added or removed since),
    ``changed_cases="rescore"`` keeps the scores of the unchanged cases and scores the changed and
    new ones (``manifest.counts["cases_changed"]`` says how many of each), ``"refuse"`` raises
    `RunError` (the command line's behaviour); the returned `Run` then reads its scores from the
    folder when asked for them. With ``target`` (a spec for `ragbridge.run.target.load_target`, or a
    loaded `Target`) each case's chunks and answer come from calling the system under test first,
    ``target_concurrency`` calls at once.
    ``progress``: a progress bar (`ragbridge.run.progress`); None, the default, shows one in a Jupyter
    notebook and nothing elsewhere.
    ``on_score`` is called with each score as it is recorded. Cases are scored ``batch_size`` at a
    time. ``executor`` is where the scoring step runs: ``"local"`` (the default: this process) or
    ``"ray"`` (a `ragbridge.run.ray_executor.RayExecutor`, or one given), with the same scores and
    run folder.

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
    return await run(RunRequest.of(**locals()))


async def run(request: RunRequest) -> Run:
    """Carry out ``request`` (the steps of the module docstring) and return the `Run`."""
    from ..options import OptionError

    started = now()  # the session's start: reading and checking the cases is part of the run's time
    try:  # each backend's options as its model, checked before anything is read
        options = request.run_options.resolved(get_backends(), request.backends or DEFAULT_BACKENDS)
    except OptionError as exc:
        raise RunError(str(exc), cli=exc.cli) from None
    with contextlib.ExitStack() as opened:
        corpus = request.corpus
        if corpus is not None:
            from ..formats.corpus import Corpus, read_corpus

            if not isinstance(corpus, Corpus):
                corpus = read_corpus(corpus)
        source = _case_source(request, corpus, opened)
        started = min(started, utc(source.opened_at)) if source.opened_at else started  # opened before
        if not source.n_cases:
            raise RunError("no cases to evaluate")
        if source.span_cases and not options.span_labels:
            options = options.model_copy(update={"span_labels": True})
        plan = plan_metrics(request.backends, request.metrics, options.k, options)
        request_judge, embeds = _with_embedding_model(request.judge, plan)
        _refuse_unsafe_caches(plan, request_judge)
        probes = _probes(request)
        judged, stub = _check_judge(plan, request_judge, preflight=not request.dry_run, defaulted=embeds,
                                    probes=probes)
        judge = request_judge if judged else None
        executor = executor_for(request.executor)
        if isinstance(executor, LocalExecutor):  # NAME==VERSION environments (Ray makes its own)
            prepare(list(plan), _note)  # a build takes seconds: said even without a progress display
        target = load_target(request.target) if isinstance(request.target, str) else request.target
        golden_fp = source.fingerprint
        folder = RunFolder(Path(request.out)) if request.out is not None else None
        earlier = None
        if folder and not (request.dry_run and request.overwrite):
            earlier = folder.prepare(request.overwrite and not request.dry_run, golden_fp,
                                     target=target is not None, changed_cases=request.changed_cases)
        dataset_path = request.dataset_path
        if isinstance(request.cases, (str, os.PathLike)):
            dataset_path = dataset_path or str(request.cases)
        dataset = {"path": as_text(dataset_path) if dataset_path is not None else None,  # any bytes
                   "fingerprint": golden_fp, "fingerprint_of": FINGERPRINT_OF,
                   "n_cases": source.n_cases}
        n_target_errors = 0
        if target is not None:
            filled = await fill_cases(source.cases, target,
                                      record_path=folder.target_path if folder else None,
                                      concurrency=request.target_concurrency, progress=request.progress)
            n_target_errors = sum(1 for c in filled if target_error(c))
            source = opened.enter_context(CaseSource.of_cases(filled, request.batch_size, corpus))
            dataset.update(fingerprint=source.fingerprint, golden_fingerprint=golden_fp, target=target.spec)
        manifest = _new_manifest(plan, dataset, options, judge, stub, started)
        if request.repeats > 1 or request.pass_repeats is not None:
            manifest.options.update(repeats=request.repeats, pass_repeats=request.pass_repeats)
        done = folder.resume(earlier, manifest, source) if earlier is not None else None
        # the cases as they are now, for every metric the run holds (an earlier session's too)
        manifest.warnings = _warnings(manifest.metrics, plan, options, source)
        if request.dry_run:
            folder = None  # nothing is written
        if folder:
            folder.start(source, manifest)
        recorder = await _score(request, plan, options, judge, executor, source, folder, manifest, done,
                                n_target_errors, probes.sent)
        specs = [spec for chosen in plan.values() for _, spec in chosen]
        repeated = (request.repeats > 1 and any(spec.judge for spec in specs)) or bool(done and done.repeated)
        # a run with repeats summarises each case's mean over them: from its scores, not the running totals
        return Run(manifest=manifest, scores=recorder.ordered(source) if folder is None else None,
                   cases=source.cases if folder is None else None, path=folder.path if folder else None,
                   totals=None if repeated else recorder.totals)


def _refuse_unsafe_caches(plan: Plan, judge: Any) -> None:
    """`ragbridge.judge.cache.CacheRefused` for a judge cache (or its score cache) that another user
    could change, before any call is made or anything written."""
    if judge is None or judge.cache_path is None or judge.cache_mode == "off" \
            or not any(spec.judge for chosen in plan.values() for _, spec in chosen):
        return
    from ..judge.cache import refuse_unsafe
    from .score_cache import score_cache_path

    refuse_unsafe(judge.cache_path)
    refuse_unsafe(score_cache_path(judge.cache_path))


async def _score(request: RunRequest, plan: Plan, options: RunOptions, judge: Any, executor: Executor,
                 source: CaseSource, folder: Optional[RunFolder], manifest: RunManifest, done: Optional[Kept],
                 n_target_errors: int, probed: int = 0) -> Recorder:
    """Score every batch of ``source`` with ``executor``, recording into ``folder`` (step 5 to 7);
    the session's end is recorded in the manifest (and the folder) whatever happens."""
    status, recorder, scored = "incomplete", None, False
    try:
        with contextlib.ExitStack() as closing:  # closed before the session's counts are final
            gateway = _gateway(request, judge, folder, manifest, closing, _structured_modes(plan, options),
                               probed)
            cache, reuse = None, None
            if judge is not None and request.score_cache:
                from .score_cache import ScoreReuse, score_cache_for

                cache = score_cache_for(judge, request.dry_run)
                if cache is not None:
                    closing.callback(cache.close)
                    reuse = ScoreReuse(cache, plan, options, judge, manifest)
            planned = source.n_cases * sum(request.repeats if spec.judge else 1
                                           for chosen in plan.values() for _, spec in chosen)
            pairs = {(b, m) for b, chosen in plan.items() for m, _ in chosen}
            kept = done.count(pairs) if done is not None else 0  # an earlier session's: not to do
            bar = progress_display(request.progress, planned - kept, gateway)
            if bar is not None:
                closing.callback(bar.stop)
            recorder = Recorder(manifest, folder, gateway, request.on_score, bar, keep=folder is None,
                                duplicates=source.duplicate_chunk_ids, target_errors=n_target_errors,
                                judge_model=judge.model if judge is not None else None, options=options,
                                reuse=reuse)
            if request.dry_run:
                recorder.earlier_judge = {}  # what this run would spend (the earlier sessions' is spent)
            if gateway is not None:
                gateway.start()
            async with executor.session(plan, ScoringContext(options=options, judge=gateway)) as session:
                for batch in source.batches():
                    earlier = done.batch(batch.ids) if done is not None else {}
                    jobs, immediate = _jobs(plan, batch, earlier, request.repeats, reuse)
                    recorder.start_batch(batch, earlier)
                    for score in immediate:
                        recorder.record(score)
                    if jobs:
                        flusher = asyncio.create_task(recorder.flushing())
                        try:
                            await session.score(jobs, recorder.record)
                        finally:
                            flusher.cancel()
                    recorder.end_batch()
            scored = True
        status = "complete"
    except (KeyboardInterrupt, asyncio.CancelledError, OSError) as exc:
        # an OSError here is the folder's or the judge cache's (a full disk): resumable as a Ctrl-C is;
        # a judge cache that could not take its last answers once every score was recorded leaves the
        # run complete (the error still says so)
        from ..judge.cache import CacheUnwritable

        status = "complete" if scored and isinstance(exc, CacheUnwritable) else "interrupted"
        raise
    finally:
        if recorder is not None:
            manifest = recorder.finish("dry-run" if request.dry_run else status)
            if folder:
                folder.finish(manifest)
    return recorder


def _case_source(request: RunRequest, corpus: Optional[Corpus], opened: contextlib.ExitStack) -> CaseSource:
    """The cases to run, from whatever `evaluate_async` was given: a `CaseSource` as it is (its
    caller closes it), else one opened here and closed with ``opened``."""
    cases = request.cases
    if isinstance(cases, CaseSource):
        return cases
    if isinstance(cases, (str, os.PathLike)):
        near = Path(request.out) if request.out is not None else None
        return opened.enter_context(open_cases(cases, near=near, batch_size=request.batch_size,
                                               corpus=corpus))
    if not (isinstance(cases, (list, tuple)) and all(isinstance(c, Case) for c in cases)):
        cases = load_cases(cases)
    return opened.enter_context(CaseSource.of_cases(cases, request.batch_size, corpus))


def _probes(request: RunRequest) -> Any:
    """The requests the check of the judge's model may send (`ragbridge.judge.ledger.Probes`):
    what ``max_calls`` leaves after the earlier sessions' calls (their ``judge-calls.log``)."""
    from ..judge.ledger import Probes, read_tally

    if request.max_calls is None:
        return Probes()
    spent = 0
    if request.out is not None and not request.overwrite:
        spent = read_tally(Path(request.out) / "judge-calls.log")[0]
    return Probes(max(0, request.max_calls - spent))


def _gateway(request: RunRequest, judge: Any, folder: Optional[RunFolder], manifest: RunManifest,
             closing: contextlib.ExitStack, modes: dict[str, str], probed: int = 0) -> Any:
    """The run's judge gateway (None when no planned metric needs a judge), closed with ``closing``:
    the backends' own structured-output ``modes``, its audit log in the folder, what earlier sessions
    spent counted (and ``probed``: the requests the check of the judge's model sent), the budget or (a
    dry run) the stub's answers set."""
    if judge is None:
        return None
    from ..judge import JudgeGateway

    gateway = JudgeGateway(judge, audit_log=folder.audit_path if folder else None,
                           structured_output=modes)
    closing.callback(gateway.close)
    spent = dict(manifest.counts.get("judge", {}))
    retries = int(spent.get("retries") or 0)
    if folder:  # every request counted before it is sent: what a killed session spent is known
        attempts, cost = gateway.ledger.open_tally(folder.tally_path, probed)
        # the requests a killed session sent that no report of it counted: counted as calls
        spent.update(calls=max(int(spent.get("calls") or 0), attempts - retries),
                     cost=max(float(spent.get("cost") or 0.0), cost))
        manifest.counts["judge"] = spent
    elif probed:
        spent["calls"] = int(spent.get("calls") or 0) + probed
    if request.dry_run:
        gateway.simulate = _stub_simulator()
    elif request.budget:  # the budget counts every request sent upstream, retries included
        gateway.set_budget(request.max_calls, request.max_cost, int(spent.get("calls") or 0) + retries,
                           float(spent.get("cost") or 0.0))
        manifest.counts["budget"] = {"max_calls": request.max_calls, "max_cost": request.max_cost}
    return gateway


def _structured_modes(plan: Plan, options: RunOptions) -> dict[str, str]:
    """The planned backends that set their own ``structured_output`` (a judged backend's option,
    `ragbridge.judged_backend.JudgedOptions`), with the mode each set: the gateway asks their requests
    for a JSON object so, the others' as the judge's ``structured_output`` says."""
    registry = get_backends()  # a library version's backend (NAME==VERSION) reads NAME's options
    chosen = {name: getattr(options.of(registry[split_name(name)[0]]), "structured_output", None)
              for name in plan}
    return {name: mode for name, mode in chosen.items() if mode is not None}


def executor_for(spec: Any) -> Executor:
    """The executor ``evaluate(..., executor=spec)`` asks for: this process for ``None`` or
    ``"local"``, a `RayExecutor` for ``"ray"``, or the `Executor` given."""
    if spec is None or spec == "local":
        return LocalExecutor()
    if isinstance(spec, Executor):
        return spec
    if spec == "ray":
        import importlib.util

        if importlib.util.find_spec("ray") is None:
            raise RunError("the Ray executor needs Ray: pip install 'ragbridge[ray]'")
        from .ray_executor import RayExecutor

        return RayExecutor()
    raise RunError(f"unknown executor {spec!r}: use 'local' or 'ray'")


def _note(text: str) -> None:
    """A line about the run's preparation that takes time (an environment being built), on stderr."""
    import sys

    print(f"ragbridge: {text}", file=sys.stderr, flush=True)


def _stub_simulator() -> Callable[[str, Any], dict]:
    """What a dry run answers a cache miss with: the stub judge's answer, made in this process
    (`ragbridge.stub.answers`: no server, nothing sent)."""
    from ..stub.answers import simulate

    return simulate


def _with_embedding_model(judge: Any, plan: Plan) -> tuple[Any, Optional[str]]:
    """``judge`` with the embedding model a planned metric asks for when the judge names none
    (`MetricSpec.embedding_model`, its library's default), so the preflight checks it and run.json
    records it; and which metrics ask for it (None when nothing was filled in). Two defaults that
    differ are an error: the judge must name one."""
    if judge is None or getattr(judge, "embedding_model", None):
        return judge, None
    wanted: dict[str, list[str]] = {}
    for b, chosen in plan.items():
        for m, spec in chosen:
            if spec.embedding_model:
                wanted.setdefault(spec.embedding_model, []).append(f"{b}:{m}")
    if not wanted:
        return judge, None
    if len(wanted) > 1:
        said = "; ".join(f"{', '.join(ms)} {model!r}" for model, ms in wanted.items())
        raise RunError(f"the planned metrics embed with different default models ({said}): name one with "
                       "JudgeConfig(embedding_model=...)",
                       cli=f"the planned metrics embed with different default models ({said}): name one "
                           "with --embedding-model (or embedding_model in [judge] of ragbridge.toml)")
    (model, metrics), = wanted.items()
    return judge.model_copy(update={"embedding_model": model}), (
        f"{', '.join(metrics)} uses the embedding model {model!r} (its library's default: the judge "
        "names none)")


def _check_judge(plan: Plan, judge: Any, preflight: bool = True, defaulted: Optional[str] = None,
                 probes: Any = None) -> tuple[bool, Optional[str]]:
    """Whether a planned metric needs the judge, and the settings of ragbridge's stub judge when it is
    the judge (`ragbridge.judge.preflight`); raises `RunError` when there is no judge, or (with
    ``preflight``) when its key, endpoint or model does not work (checked before anything is called
    or written). Without ``preflight`` (a dry run), and for a replayed cache, only whether a judge on
    this machine is the stub is asked (`ragbridge.judge.preflight.detect_stub`: no key, no judge call).
    ``defaulted``: why the judge's embedding model is a library's default (`_with_embedding_model`),
    said with a refusal of it."""
    if not any(spec.judge for chosen in plan.values() for _, spec in chosen):
        return False, None
    if judge is None:
        judged = sorted({f"{b}:{m}" for b, chosen in plan.items() for m, s in chosen if s.judge})
        need = "these metrics need a judge: " + ", ".join(judged)
        raise RunError(
            need + "; pass judge=JudgeConfig(model=\"MODEL\", base_url=\"URL\") (from ragbridge.judge "
            "import JudgeConfig; ragbridge.testing.StubJudge() is a judge to try the plumbing with)",
            cli=need + "; pass --judge-model and --judge-base-url (or set them in ragbridge.toml)")
    if preflight:
        from ..judge import JudgeGateway

        probe = JudgeGateway(judge)  # preflight needs no started gateway: nothing is served yet
        try:
            checked = probe.preflight(probes)
        except Exception as exc:
            said, cli = str(exc), cli_text(exc)
            if defaulted and said.startswith(f"embedding model {judge.embedding_model!r}"):
                said, cli = f"{defaulted}: {said}", f"{defaulted}: {cli}"
            raise RunError(said, cli=cli) from None
        finally:
            probe.close()
        if checked.get("upstream_checked"):
            return True, checked.get("stub_settings")
    # a dry run, a recorded cache replayed: nothing is checked, but whether a judge on this machine
    # is the stub judge (its answers are recorded under its settings, not its port)
    from ..judge.dialect import endpoints_of
    from ..judge.preflight import detect_stub

    return True, detect_stub(judge, endpoints_of(judge)[0])


def _new_manifest(plan: Plan, dataset: dict[str, Any], options: RunOptions, judge: Any,
                  stub: Optional[str], started_at: str) -> RunManifest:
    """This session's manifest (``judge``: the config when a planned metric uses it, else None;
    ``stub``: the judge is ragbridge's stub judge with these settings, so its scores are labelled and
    its identity is not its port: `ragbridge.judge.config.identity_url`; ``started_at``: when the
    session began, before its cases were read)."""
    registry = get_backends()
    manifest = RunManifest(
        ragbridge_version=__version__,
        dataset=dataset,
        backends={b: backend_named(b, registry).version() for b in plan},
        plugins={b: v for b in plan if (v := plugin_version(backend_named(b, registry)))},
        version_changes=version_changes(list(plan), registry),
        metrics={b: [m for m, _ in chosen] for b, chosen in plan.items()},
        options=options.public(),
        judge=({**judge.public_dict(), **({"stub": True, "stub_settings": stub} if stub else {})}
               if judge is not None else None),
        digests={b: d for b, chosen in plan.items() if (d := {m: s.digest for m, s in chosen if s.digest})},
        pass_marks={b: d for b, chosen in plan.items()
                    if (d := {m: s.pass_mark for m, s in chosen if s.pass_mark is not None})},
        started_at=started_at,
        process=this_process(),
    )
    return manifest


def _warnings(metrics: dict[str, list[str]], plan: Plan, options: RunOptions,
              source: CaseSource) -> list[str]:
    """The input warnings of ``source`` (the cases as they are now) that bear on ``metrics``, the
    metrics the run holds by backend: ``plan``'s and those an earlier session of the run scored."""
    from ..formats.input_check import warnings_for
    from ..metrics import RANKING, SPAN, find

    kinds = {getattr(find(m), "kind", None) for ms in metrics.values() for m in ms}
    judged = any(spec.judge for chosen in plan.values() for _, spec in chosen) or any(
        _judged(b, m, options) for b, ms in metrics.items() for m in ms if b not in plan or m not in
        {name for name, _ in plan[b]})
    return warnings_for(source.warnings, RANKING in kinds, SPAN in kinds, judged)


def _judged(backend: str, metric: str, options: RunOptions) -> bool:
    """Whether ``backend`` scores ``metric`` with a judge (a metric it no longer offers: taken as one)."""
    from ..metrics import resolve_metric

    found = get_backends().get(backend)
    try:
        specs = found.metrics_for(options) if found is not None else []
    except Exception:  # noqa: BLE001 - a backend that cannot list its metrics here: as if unknown
        specs = []
    spec = next((s for s in specs if resolve_metric(s.name, metric, options.k)), None)
    return spec is None or spec.judge


def _jobs(plan: Plan, batch: CaseBatch, done: dict, repeats: int = 1,
          reuse: Optional[ScoreReuse] = None) -> tuple[list[Job], list[Score]]:
    """Per backend, metric and repeat, the cases of ``batch`` still to score; and the scores known
    without scoring: a failed target call (the error), a case that lacks a field the metric
    requires (skipped) and, with ``reuse``, a judged score the score cache holds. A judged metric is
    planned ``repeats`` times, a job per repeat (the backend's judge files its calls under it)."""
    registry = get_backends()
    backends = {b: backend_named(b, registry) for b in plan}
    jobs: list[Job] = []
    immediate: list[Score] = []
    ids = batch.ids
    requires = any(spec.requires for chosen in plan.values() for _, spec in chosen)
    present = [batch.fields_present(i) for i in range(len(batch))] if requires else [()] * len(batch)
    failed: list[Optional[str]] = [None] * len(batch)
    for i in batch.having("metadata"):  # a target's error is in a case's metadata
        failed[i] = target_error_of(batch.metadata(i))
    every = list(range(len(ids))) if not done and not any(failed) else None
    for bname, chosen in plan.items():
        for metric, spec in chosen:
            for repeat in range(repeats if spec.judge else 1):
                if every is not None and not spec.requires:
                    eligible = every.copy()  # nothing to filter out
                else:
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
                jobs.append((backends[bname], metric, cases, repeat))
    return jobs, immediate
