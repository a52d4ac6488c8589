"""The runner: plans which backend scores which metric, runs them, and keeps the run folder.

A run folder holds ``run.json`` (the manifest), ``scores.jsonl`` (append-only, one `Score` a line,
written as each score arrives), ``cases.jsonl`` (the cases scored, so reports and diffs need nothing
else) and, for judged runs, ``judge-audit.jsonl``. Running again into the same folder resumes: scores
already there are kept, failed ones are retried, and only what is missing is computed.

``run.json`` and ``cases.jsonl`` are replaced whole (`ragbridge.io.atomic_path`). While a run is going,
``run.json`` says ``running`` with the process (pid, host, start time) and is rewritten with the counts
so far every `HEARTBEAT_SECONDS`; a run whose process is gone without recording its end (``kill -9``,
a lost machine) reads as ``interrupted`` (`load_run`, so reports and gates can tell). The counts cover
every session of a resumed run: the judge's traffic is added to the earlier sessions' (a session that
was killed counts what its last heartbeat recorded), and the score and duplicate-chunk counts are
taken from the whole run. ``timing.wall_seconds`` holds each backend's wall-clock span, from the start
of scoring to its last score, added up over the sessions the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as _dt
import json
import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Optional, Sequence

from . import __version__
from .backend import Backend, MetricSpec, RunOptions, ScoringContext, error_text, resolve_metric
from .io import atomic_path, fingerprint, write_atomic, write_jsonl
from .plugins import get_backends
from .schema import Case, RunManifest, Score
from .target import target_error

__all__ = ["RunError", "Run", "evaluate", "load_run", "plan_metrics", "read_scores"]

DEFAULT_BACKENDS = ("native",)
HEARTBEAT_SECONDS = 2.0
JUDGE_COUNTS = ("calls", "cache_hits", "prompt_tokens", "completion_tokens", "retries", "errors")


class RunError(ValueError):
    """A run that cannot start as asked (unknown backend or metric, unavailable library, bad folder)."""


class _BackendFault(Exception):
    """A backend that cannot score at all (its ``open`` failed): the error of every case it was given."""


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


# --------------------------------------------------------------------------------------------
# Planning


def plan_metrics(
    backends: Sequence[str] | None, metrics: Sequence[str] | None, k: int,
    options: Optional[RunOptions] = None,
) -> dict[str, list[tuple[str, MetricSpec]]]:
    """Which concrete metrics each backend will score. Raises `RunError` for anything unknown.

    With no ``metrics``, every metric of each backend is planned; a requested metric that a backend
    does not offer is skipped for that backend, but must be offered by at least one of them.
    """
    if k < 1:
        raise RunError(f"--k must be a positive integer, got {k}")
    registry = get_backends()
    names = list(backends or DEFAULT_BACKENDS)
    plan: dict[str, list[tuple[str, MetricSpec]]] = {}
    offers: dict[str, list[MetricSpec]] = {}
    for name in names:
        if name not in registry:
            raise RunError(
                f"unknown backend {name!r}; registered backends: {', '.join(sorted(registry))}"
            )
        backend = registry[name]
        if not backend.available():
            raise RunError(
                f"backend {name!r} is not available: its library is not installed "
                f"(install it with: {backend.install_hint or 'see its documentation'})"
            )
        try:
            specs = offers[name] = backend.metrics_for(options or RunOptions(k=k))
        except ValueError as exc:  # options the backend cannot use (e.g. a bad rubric file)
            raise RunError(str(exc)) from None
        chosen: list[tuple[str, MetricSpec]] = []
        for spec in specs:
            if metrics:
                for req in metrics:
                    concrete = resolve_metric(spec.name, req, k)
                    if concrete and concrete not in [c for c, _ in chosen]:
                        chosen.append((concrete, spec))
            else:
                chosen.append((resolve_metric(spec.name, spec.name, k) or spec.name, spec))
        plan[name] = chosen
    if metrics:
        offered = {c for chosen in plan.values() for c, _ in chosen}
        for req in metrics:
            if not any(
                resolve_metric(spec.name, req, k) for chosen in plan.values() for _, spec in chosen
            ) and req not in offered:
                all_names = sorted({s.name for n in names for s in offers[n]})
                raise RunError(
                    f"no selected backend offers metric {req!r}; "
                    f"metrics of {', '.join(names)}: {', '.join(all_names)}"
                )
    return plan


# --------------------------------------------------------------------------------------------
# The run folder


def read_scores(path: Path) -> tuple[list[Score], int]:
    """Scores in ``scores.jsonl``, the last line per (case, metric, backend) winning.

    Returns the scores and the number of unreadable lines (a line cut short by a killed run).
    """
    latest: dict[tuple[str, str, str], Score] = {}
    bad = 0
    if not path.exists():
        return [], 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            try:
                s = Score.model_validate_json(line)
            except ValueError:
                bad += 1
                continue
            latest[s.key] = s
    return list(latest.values()), bad


def _truncate_partial_line(path: Path) -> None:
    if not path.exists() or path.stat().st_size == 0:
        return
    with open(path, "rb+") as f:
        f.seek(-1, os.SEEK_END)
        if f.read(1) == b"\n":
            return
        f.seek(0)
        cut = f.read().rfind(b"\n") + 1
        f.truncate(cut)


@dataclass
class Run:
    """A run folder in memory: manifest, scores and cases, with summaries as DataFrames."""

    manifest: RunManifest
    scores: list[Score]
    cases: list[Case] = field(default_factory=list)
    path: Optional[Path] = None

    def __repr__(self) -> str:  # one line: a run holds thousands of scores
        where = repr(str(self.path)) if self.path is not None else "in memory"
        return f"Run({where}, {len(self.cases)} cases, {len(self.scores)} scores, {self.manifest.status})"

    @property
    def complete(self) -> bool:
        return self.manifest.status == "complete"

    def to_frame(self):
        """One row per score."""
        import pandas as pd

        rows = [s.model_dump() for s in self.scores]
        for r, s in zip(rows, self.scores):
            r["status"] = s.status
        return pd.DataFrame(rows)

    def summary(self, by_tag: bool = True):
        from .analysis.summary import summarize

        return summarize(self.scores, self.cases, by_tag=by_tag)


def load_run(path: str | Path) -> Run:
    """Read a run folder. Raises `RunError` when it is not one."""
    from .io import load_cases

    path = Path(path)
    manifest_path = path / "run.json"
    if not manifest_path.exists():
        raise RunError(f"{path} is not a run folder: it has no run.json")
    try:
        manifest = RunManifest.model_validate_json(manifest_path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise RunError(f"{manifest_path}: not a valid run manifest: {exc}") from None
    if manifest.status == "running" and not _alive(manifest.process):
        manifest.status = "interrupted"  # its process is gone: it will never record its end
    scores, _ = read_scores(path / "scores.jsonl")
    cases = load_cases(path / "cases.jsonl") if (path / "cases.jsonl").exists() else []
    return Run(manifest=manifest, scores=scores, cases=cases, path=path)


def _this_process() -> dict[str, Any]:
    return {"pid": os.getpid(), "host": socket.gethostname(), "start": _process_start(os.getpid())}


def _process_start(pid: int) -> Optional[str]:
    """When process ``pid`` started, in the kernel's clock ticks (Linux; None elsewhere or if gone).

    With the pid it names one process: a later process given the same pid has another start time.
    A zombie (killed, not yet reaped) counts as gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    return None if fields[0] == "Z" else fields[19]


def _alive(process: Optional[dict[str, Any]]) -> bool:
    """Whether the process a manifest names may still be running (True when this host cannot tell)."""
    if not process or process.get("host") != socket.gethostname() or not isinstance(process.get("pid"), int):
        return True
    try:
        os.kill(process["pid"], 0)
    except ProcessLookupError:
        return False
    except OSError:  # e.g. another user's process: it exists
        pass
    if process.get("start") is None:
        return True
    return _process_start(process["pid"]) == process["start"]


class _RunFolder:
    def __init__(self, path: Path):
        self.path = path
        self.scores_path = path / "scores.jsonl"
        self.manifest_path = path / "run.json"
        self._fh = None

    def write_manifest(self, manifest: RunManifest) -> None:
        write_atomic(self.manifest_path, manifest.model_dump_json(indent=2))

    def open(self) -> None:
        _truncate_partial_line(self.scores_path)
        self._fh = open(self.scores_path, "a", encoding="utf-8")

    def append(self, score: Score) -> None:
        self._fh.write(score.model_dump_json() + "\n")
        self._fh.flush()

    def close(self) -> None:
        if self._fh:
            self._fh.close()
            self._fh = None


# --------------------------------------------------------------------------------------------
# Running


@contextlib.contextmanager
def applied_environment(defaults: dict[str, str]) -> Iterator[None]:
    """Set each of ``defaults`` that is not set in ``os.environ``; unset them again on exit (a variable
    the user set, or one set meanwhile, is left alone)."""
    added = {k: str(v) for k, v in defaults.items() if k not in os.environ}
    os.environ.update(added)
    try:
        yield
    finally:
        for k, v in added.items():
            if os.environ.get(k) == v:
                del os.environ[k]


async def _open(backend: Backend, ctx: ScoringContext) -> ScoringContext:
    """The backend's context for this run: ``session`` is what its ``open`` returned. A failing
    ``open`` is kept as the session's error, and every case the backend is given gets it."""
    try:
        return ctx.for_session(await backend.open(ctx.for_session(None)))
    except Exception as exc:
        return ctx.for_session(_OpenFailed(error_text(exc)))


async def _close(backend: Backend, ctx: ScoringContext) -> None:
    if isinstance(ctx.session, _OpenFailed):
        return
    try:
        await backend.close(ctx)
    except Exception as exc:  # scores are recorded already: a failing close must not lose the run
        import warnings

        warnings.warn(f"backend {backend.name!r} failed to close: {error_text(exc)}", RuntimeWarning)


@dataclass(frozen=True)
class _OpenFailed:
    error: str


async def _drive(
    backend: Backend, metric: str, cases: Sequence[Case], ctx: ScoringContext, queue: asyncio.Queue
) -> None:
    pending = {c.id for c in cases}
    try:
        if isinstance(ctx.session, _OpenFailed):
            raise _BackendFault(ctx.session.error)
        async for score in backend.score(metric, cases, ctx):
            pending.discard(score.case_id)
            await queue.put(score)
    except Exception as exc:  # a backend fault: every case it did not score gets the error
        msg = str(exc) if isinstance(exc, _BackendFault) else error_text(exc)
        for case in cases:
            if case.id in pending:
                await queue.put(
                    Score(case_id=case.id, metric=metric, backend=backend.name, error=msg)
                )
        return
    for case in cases:  # a backend that forgot a case must not make it vanish
        if case.id in pending:
            await queue.put(
                Score(
                    case_id=case.id,
                    metric=metric,
                    backend=backend.name,
                    error="backend returned no score for this case",
                )
            )


def evaluate(cases: Sequence[Case], *args: Any, **kwargs: Any) -> Run:
    """Score ``cases`` and return the `Run`: the synchronous form of `evaluate_async` (same arguments)."""
    return asyncio.run(evaluate_async(cases, *args, **kwargs))


async def evaluate_async(
    cases: Sequence[Case],
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
) -> Run:
    """Score ``cases`` with ``backends`` (default: native) and return the `Run`.

    ``metrics`` are canonical names (``recall@5``, ``faithfulness``; default: every metric of each
    backend). ``judge`` is a ``ragbridge.judge.JudgeConfig``, needed only when a planned metric uses a
    judge. With ``out`` the run folder is written, and resumed if it already holds a run of the same
    cases (``overwrite`` replaces it instead). With ``target`` (a spec for
    `ragbridge.target.load_target`, or a loaded `Target`) each case's chunks and answer come from
    calling the system under test first. ``on_score`` is called with each score as it is recorded.
    """
    options = options or RunOptions()
    cases = list(cases)
    if not cases:
        raise RunError("no cases to evaluate")
    plan = plan_metrics(backends, metrics, options.k, options)
    registry = get_backends()
    needs_judge = any(spec.judge for chosen in plan.values() for _, spec in chosen)
    if needs_judge and judge is None:
        judged = sorted({f"{b}:{m}" for b, chosen in plan.items() for m, s in chosen if s.judge})
        raise RunError(
            "these metrics need a judge: " + ", ".join(judged)
            + "; pass --judge-model and --judge-base-url (or set them in ragbridge.toml)"
        )

    if needs_judge:
        # Check the key and the endpoint before anything is called or written.
        from .judge import JudgeGateway

        probe = JudgeGateway(judge)  # preflight needs no started gateway: nothing is served yet
        try:
            probe.preflight()
        except Exception as exc:
            raise RunError(str(exc)) from None
        finally:
            probe.close()

    if out is not None:
        _refuse_if_busy(Path(out))
    golden_fp = None
    if target is not None:
        from .target import fill_cases, load_target

        golden_fp = fingerprint(cases)
        if isinstance(target, str):
            target = load_target(target)
        if out is not None:
            Path(out).mkdir(parents=True, exist_ok=True)
            old_manifest = Path(out) / "run.json"
            if overwrite:
                for name in ("run.json", "scores.jsonl", "cases.jsonl", "judge-audit.jsonl", "target.jsonl"):
                    (Path(out) / name).unlink(missing_ok=True)
            elif old_manifest.exists():
                old = json.loads(old_manifest.read_text(encoding="utf-8"))
                if old.get("dataset", {}).get("golden_fingerprint") != golden_fp:
                    raise RunError(
                        f"{out} holds a run over different cases (dataset fingerprint differs); "
                        "choose another --out, or pass --overwrite to replace it"
                    )
        cases = await fill_cases(
            cases, target, record_path=(Path(out) / "target.jsonl") if out is not None else None,
            concurrency=target_concurrency, progress=progress,
        )
    fp = fingerprint(cases)
    manifest = RunManifest(
        ragbridge_version=__version__,
        dataset={"path": dataset_path, "fingerprint": fp, "n_cases": len(cases),
                 **({"golden_fingerprint": golden_fp, "target": target.spec} if target is not None else {})},
        backends={b: registry[b].version() for b in plan},
        metrics={b: [m for m, _ in chosen] for b, chosen in plan.items()},
        options=options.public(),
        judge=judge.public_dict() if (judge is not None and needs_judge) else None,
        digests={b: d for b, chosen in plan.items() if (d := {m: s.digest for m, s in chosen if s.digest})},
        started_at=_now(),
        process=_this_process(),
    )
    if manifest.judge is not None and (same := _self_judging(judge.model, options, cases)):
        manifest.judge["self_judging"] = same
    earlier_judge: dict[str, int] = {}  # the judge traffic of the run's earlier sessions
    earlier_wall: dict[str, float] = {}  # each backend's wall time in the run's earlier sessions

    done: dict[tuple[str, str, str], Score] = {}
    folder: Optional[_RunFolder] = None
    if out is not None:
        out = Path(out)
        folder = _RunFolder(out)
        if folder.manifest_path.exists() and not overwrite:
            try:
                old = RunManifest.model_validate_json(folder.manifest_path.read_text(encoding="utf-8"))
            except ValueError as exc:
                raise RunError(f"{folder.manifest_path} is not a valid run manifest ({exc}); use --overwrite") from None
            if old.dataset.get("fingerprint") != fp:
                raise RunError(
                    f"{out} holds a run over different cases (dataset fingerprint differs); "
                    "choose another --out, or pass --overwrite to replace it"
                )
            previous, _ = read_scores(folder.scores_path)
            # a metric whose definition (rubric) changed since it was scored is scored again
            redefined = sorted(f"{b}:{m}" for b, ds in manifest.digests.items() for m, d in ds.items()
                               if old.digests.get(b, {}).get(m, d) != d)
            done = {s.key: s for s in previous
                    if s.status != "error" and f"{s.backend}:{s.metric}" not in redefined}
            manifest.digests = {b: {**old.digests.get(b, {}), **manifest.digests.get(b, {})}
                                for b in {**old.digests, **manifest.digests}}
            if redefined:
                manifest.counts["redefined"] = redefined
            manifest.started_at = old.started_at
            merged = dict(old.metrics)
            for b, ms in manifest.metrics.items():
                merged[b] = list(dict.fromkeys(list(merged.get(b, [])) + ms))
            manifest.metrics = merged
            manifest.backends = {**old.backends, **manifest.backends}
            manifest.judge = manifest.judge or old.judge
            if (old.judge or {}).get("stub") and manifest.judge is not None and all(
                manifest.judge.get(k) == old.judge.get(k) for k in ("model", "base_url")
            ):
                # the earlier sessions' judged scores came from the stub: a resume that makes no call
                # must not lose that label
                manifest.judge = {**manifest.judge, "stub": True}
            manifest.counts["resumed_from"] = len(done)
            if isinstance(old.counts.get("judge"), dict):
                earlier_judge = {k: int(old.counts["judge"].get(k, 0)) for k in JUDGE_COUNTS}
                manifest.counts["judge"] = dict(earlier_judge)
            earlier_wall = dict(old.timing.get("wall_seconds", {}))
        elif overwrite and out.exists():
            for name in ("run.json", "scores.jsonl", "cases.jsonl", "judge-audit.jsonl"):
                (out / name).unlink(missing_ok=True)
        out.mkdir(parents=True, exist_ok=True)
        with atomic_path(out / "cases.jsonl") as tmp:
            write_jsonl(cases, tmp)
        folder.write_manifest(manifest)
        folder.open()

    gateway = None
    if needs_judge:
        from .judge import JudgeGateway

        gateway = JudgeGateway(judge, audit_log=(out / "judge-audit.jsonl") if out else None)
    ctx = ScoringContext(options=options, judge=gateway)

    scores: dict[tuple[str, str, str], Score] = dict(done)
    queue: asyncio.Queue = asyncio.Queue()
    jobs: list[tuple[Backend, str, list[Case]]] = []
    immediate: list[Score] = []
    for bname, chosen in plan.items():
        backend = registry[bname]
        for metric, spec in chosen:
            todo = [c for c in cases if (c.id, metric, bname) not in done]
            eligible = []
            for case in todo:
                missing = [r for r in spec.requires if r not in case.fields_present()]
                failed = target_error(case)
                if failed:
                    immediate.append(
                        Score(case_id=case.id, metric=metric, backend=bname,
                              native_metric=spec.native_name, error=failed)
                    )
                elif missing:
                    immediate.append(
                        Score(
                            case_id=case.id,
                            metric=metric,
                            backend=bname,
                            native_metric=spec.native_name,
                            reason="skipped: case has no " + ", ".join(missing),
                        )
                    )
                else:
                    eligible.append(case)
            if eligible:
                # the full list object when nothing was filtered, so backends can reuse work per list
                jobs.append((backend, metric, cases if len(eligible) == len(cases) else eligible))

    total = len(immediate) + sum(len(c) for _, _, c in jobs)
    bar = _progress(progress, total)
    interrupted = False
    n_duplicates = sum(len(c.contexts) - len({ch.id for ch in c.contexts}) for c in cases)
    n_target_errors = sum(1 for c in cases if target_error(c))

    def update_counts() -> None:
        manifest.counts.update(_counts(scores.values()), duplicate_chunk_ids=n_duplicates)
        if n_target_errors:
            manifest.counts["target_errors"] = n_target_errors
        if gateway is not None:
            u = gateway.usage()
            manifest.counts["judge"] = {k: earlier_judge.get(k, 0) + getattr(u, k) for k in JUDGE_COUNTS}
        spans = {b: round(earlier_wall.get(b, 0.0) + last_score_at.get(b, 0.0), 3)
                 for b in {**earlier_wall, **last_score_at}}
        manifest.timing = {**manifest.timing, "wall_seconds": spans}

    last_beat = time.monotonic()
    last_score_at: dict[str, float] = {}  # per backend, seconds from the start of scoring to its last score
    environment = contextlib.ExitStack()  # the backends' environment defaults, while the run lasts
    opened: list[Backend] = []
    try:
        if gateway is not None:
            gateway.start()

        def record(score: Score) -> None:
            nonlocal last_beat
            if gateway is not None and score.judge_calls == 0:
                usage = gateway.usage(score.backend, score.metric, score.case_id)
                score.judge_calls = usage.calls + usage.cache_hits
                score.prompt_tokens = usage.prompt_tokens
                score.completion_tokens = usage.completion_tokens
            if gateway is not None and score.error:
                gateway.forget(score.backend, score.metric, score.case_id)
            scores[score.key] = score
            if folder:
                folder.append(score)
            if on_score:
                on_score(score)
            if bar:
                bar.advance()
            if folder and time.monotonic() - last_beat >= HEARTBEAT_SECONDS:
                update_counts()
                manifest.heartbeat_at = _now()
                folder.write_manifest(manifest)
                last_beat = time.monotonic()

        for s in immediate:
            record(s)
        contexts: dict[str, ScoringContext] = {}
        for b in dict.fromkeys(b for b, _, _ in jobs):
            environment.enter_context(applied_environment(b.environment()))
            contexts[b.name] = await _open(b, ctx)
            opened.append(b)
        tasks = [asyncio.create_task(_drive(b, m, c, contexts[b.name], queue)) for b, m, c in jobs]
        remaining = sum(len(c) for _, _, c in jobs)
        started = time.monotonic()
        while remaining:
            score = await queue.get()
            last_score_at[score.backend] = time.monotonic() - started
            record(score)
            remaining -= 1
        await asyncio.gather(*tasks)
    except (KeyboardInterrupt, asyncio.CancelledError):
        interrupted = True
        raise
    finally:
        for b in reversed(opened):
            await _close(b, contexts[b.name])
        environment.close()
        if bar:
            bar.stop()
        if gateway is not None:
            gateway.close()
        manifest.finished_at = _now()
        manifest.status = "interrupted" if interrupted else (
            "complete" if len(scores) >= total + len(done) else "incomplete"
        )
        update_counts()
        if gateway is not None and gateway.stub_detected:
            # every judged score of this run came from ragbridge's stub judge, not a model
            manifest.judge = {**(manifest.judge or {}), "stub": True}
        if folder:
            folder.close()
            folder.write_manifest(manifest)

    order = {c.id: i for i, c in enumerate(cases)}
    ordered = sorted(scores.values(), key=lambda s: (s.backend, s.metric, order.get(s.case_id, 0)))
    return Run(manifest=manifest, scores=ordered, cases=cases, path=Path(out) if out else None)


def _self_judging(judge_model: str, options: RunOptions, cases: Sequence[Case]) -> Optional[dict[str, Any]]:
    """Whether the judge is the system under test's own model, by ``options.generator_model`` or each
    case's ``metadata["generator_model"]`` (compared case-insensitively, without a ``provider/`` prefix)."""
    def norm(model: Any) -> str:
        return str(model).strip().casefold().rsplit("/", 1)[-1]

    models = [options.generator_model or c.metadata.get("generator_model") for c in cases]
    same = [m for m in models if m and norm(m) == norm(judge_model)]
    return {"generator_model": same[0], "cases": len(same)} if same else None


def _refuse_if_busy(out: Path) -> None:
    """Raise `RunError` when another live process is writing the run folder ``out``."""
    try:
        old = json.loads((out / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    process = old.get("process") if isinstance(old, dict) else None
    if (old.get("status") == "running" and isinstance(process, dict)
            and process.get("pid") != os.getpid() and _alive(process)):
        raise RunError(
            f"{out} is being written by another run (pid {process.get('pid')} on {process.get('host')}, "
            f"last heartbeat {old.get('heartbeat_at') or old.get('started_at')}); wait for it to end or "
            "stop it, then run again"
        )


def _counts(scores: Iterable[Score]) -> dict[str, int]:
    counts = {"scores": 0, "scored": 0, "undefined": 0, "errored": 0}
    for s in scores:
        counts["scores"] += 1
        counts[{"scored": "scored", "undefined": "undefined", "error": "errored"}[s.status]] += 1
    return counts


class _Bar:
    def __init__(self, total: int):
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

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

    def advance(self) -> None:
        self._pending += 1
        now = time.monotonic()
        if now - self._last > 0.1:
            self.progress.advance(self.task, self._pending)
            self._pending = 0
            self._last = now

    def stop(self) -> None:
        self.progress.advance(self.task, self._pending)
        self.progress.stop()


def _progress(enabled: bool, total: int) -> Optional[_Bar]:
    return _Bar(total) if enabled and total else None
