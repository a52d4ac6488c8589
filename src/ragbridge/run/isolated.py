"""A backend at a version of its library (``mylib==1.2``): scored by a worker process in the
environment of that version (`ragbridge.run.environments`), as one more backend of the run.

`backend_named` is how the runner finds a backend by the name a run gives: a registered name
(``mylib``) is the backend in this process, with the library installed here; ``NAME==VERSION`` is an
`IsolatedBackend`, whose scores carry that name, so two versions of one library are two backends
of one run (``mylib==1.2`` beside ``mylib==1.3`` or beside ``mylib``), side by side in every
analysis.

An `IsolatedBackend` offers the metrics of the registered backend (the same plugin code runs in the
worker), at its version when the backend says what they are at a version of its library
(``metrics_at(version)``: a metric the library added or removed). Its ``open`` starts the worker
(``python -m ragbridge.run.worker`` with the environment's Python; the environment is made before
the run scores anything: `prepare`), its ``score`` sends the cases of one job down the pipe and
yields the `Result` of each score the worker sends back, its ``close`` ends the worker. The pipe's
protocol is `ragbridge.run.worker`'s.

The worker's judge is the run's gateway, over its loopback socket, with the gateway's own per-run
key (sent down the pipe, never in the worker's arguments or environment), as Ray's workers reach it:
the cache, the budget, the concurrency bound, the audit log and redaction hold for the worker's calls
as for any other, and the judge's real key never enters the worker (the variables that hold it are
left out of its environment). Each call is counted under the versioned name, like the scores.

Deadlines: the worker says it is alive every second from its event loop; a worker silent for
`stalled_after` (twice the judge clients' timeout, which already outlasts the gateway's retries) has
its loop held by a library's blocking call: it is killed and the cases its jobs had not scored error
as timed out. A job that gets no score for as long (a call that never returns) is cancelled, its
cases not scored erroring the same way. Scores the worker sent before are kept.

Faults: a worker that dies (a crash, ``kill``) fails the cases of the jobs it had not finished, each
with the reason and the last lines it wrote to stderr; every score recorded before stays, and the
next job starts a new worker (at most `RESTARTS` times a run). A run ends the worker when it closes
the backend; a worker whose run died sees its pipe close and exits.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import importlib.util
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Optional, Sequence

from ..backend import EXACT_VERSION, Backend, MetricSpec, RunOptions, ScoringContext, case_record
from ..plugins import get_backends
from ..schema import Case, Result
from .environments import Environment, code_path, ensure, environment_for, locks_of, version_key
from .errors import RunError
from .worker import LINE_LIMIT, PROTOCOL, options_record

__all__ = ["IsolatedBackend", "backend_named", "split_name", "prepare", "shipped_versions",
           "version_changes", "changes_of_versions", "with_versions", "ray_runtime_env", "RESTARTS"]

#: how many times a run starts a worker again after one died
RESTARTS = 3
#: the most lines of a worker's stderr kept to explain its death
STDERR_LINES = 40
#: how long a worker may take to start (its library's import included) and to close
START_SECONDS = 300.0
CLOSE_SECONDS = 60.0
#: how long a worker may stay silent when the run has no judge (`stalled_after`)
STALL_SECONDS = 600.0
#: how long an interrupted run waits for a worker to close before it kills it
INTERRUPT_SECONDS = 2.0

_NAME = re.compile(r"^(?P<base>[A-Za-z0-9_.-]+?)\s*==\s*(?P<version>" + EXACT_VERSION.pattern + ")$")


def split_name(name: str) -> tuple[str, Optional[str]]:
    """``("mylib", "1.2")`` for ``mylib==1.2``, ``("mylib", None)`` for ``mylib``; a `RunError` for a
    name that asks for a version any other way (``mylib>=1.2``, ``mylib==``)."""
    if "=" not in name and not any(c in name for c in "<>~!"):
        return name, None
    m = _NAME.match(name.strip())
    if m is None:
        raise RunError(f"backend {name!r}: give one exact version, as NAME==VERSION, or the name alone for "
                       "the version installed here" + _versions_of(name))
    return m["base"], m["version"]


def _versions_of(name: str) -> str:
    """What a name that asks for a version another way (``mylib>=1.2``) is told: the versions its
    backend runs at, or an example where it names no backend that ships any."""
    base = re.match(r"[A-Za-z0-9_.-]*[A-Za-z0-9]", name.strip())
    registry = get_backends()
    versions = shipped_versions(registry[base[0]]) if base and base[0] in registry else []
    if not versions:
        return " (e.g. mylib==1.2; ragbridge environments list shows the versions there are)"
    return f"; {base[0]} runs at {', '.join(versions)} (e.g. --backend {base[0]}=={versions[-1]})"


def backend_named(name: str, registry: Optional[dict[str, Any]] = None) -> Any:
    """The backend a run names ``name`` (see the module docstring); a `RunError` for an unknown one."""
    registry = get_backends() if registry is None else registry
    if name in registry:
        return registry[name]
    base, version = split_name(name)
    if base not in registry:
        raise RunError(f"unknown backend {name!r}; registered backends: {', '.join(sorted(registry))}")
    if version is None:  # pragma: no cover - a name without a version is registered or unknown
        raise RunError(f"unknown backend {name!r}")
    return IsolatedBackend(registry[base], version)


def _loaded(backend: Any) -> Backend:
    load = getattr(backend, "load", None)  # a LazyBackend stands for the backend it makes
    return load() if callable(load) else backend


def _package_of(backend: Backend) -> tuple[str, Path]:
    """The top-level package of ``backend``'s plugin and its folder."""
    top = type(backend).__module__.split(".")[0]
    spec = importlib.util.find_spec(top)
    if spec is None or not spec.submodule_search_locations:
        raise RunError(f"backend {backend.name!r} is not part of a package: it cannot run in an environment "
                       "of its own")
    return top, Path(list(spec.submodule_search_locations)[0])


def version_changes(names: Sequence[str], registry: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """Per library a run holds at two or more versions (``mylib`` installed beside ``mylib==1.2``,
    or two ``NAME==VERSION``): ``{"versions": {backend name: version}, "changes": {version: text}}``,
    the changes its plugin declares between the oldest and the newest of them (`Backend.changes`),
    recorded in run.json so compare and the report name them without the plugin."""
    registry = get_backends() if registry is None else registry
    versions: dict[str, str] = {}
    for name in names:
        version = backend_named(name, registry).version()
        if version:
            versions[name] = version
    return changes_of_versions(versions, registry)


def changes_of_versions(versions: dict[str, str], registry: Optional[dict[str, Any]] = None,
                        library_of: Optional[dict[str, str]] = None,
                        recorded: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    """`version_changes` of columns whose versions are known (``{column: version}``; runs read side
    by side): the library of a column is ``library_of[column]`` (default: its name before ``==``);
    the changes its plugin declares, or when its plugin is not here, those the runs recorded
    (``recorded``: their run.json ``version_changes``) between the oldest and the newest."""
    registry = get_backends() if registry is None else registry
    found: dict[str, dict[str, str]] = {}
    for name, version in versions.items():
        if version:
            base = (library_of or {}).get(name) or name.split("==")[0]
            found.setdefault(split_name(base)[0], {})[name] = version
    out: dict[str, Any] = {}
    for base, held in found.items():
        if len(set(held.values())) < 2:
            continue
        ordered = sorted(held.items(), key=lambda kv: version_key(kv[1]))
        low, high = version_key(ordered[0][1]), version_key(ordered[-1][1])
        if base in registry:
            changes = dict(_loaded(registry[base]).changes_between(ordered[0][1], ordered[-1][1]))
        else:
            said = {v: t for r in recorded for v, t in ((r or {}).get(base) or {}).get("changes", {}).items()}
            changes = {v: said[v] for v in sorted(said, key=version_key) if low < version_key(v) <= high}
        out[base] = {"versions": dict(ordered), "changes": changes}
    return out


def shipped_versions(backend: Any) -> list[str]:
    """The versions of ``backend``'s library whose locks its plugin ships (none for a backend without a
    library), oldest first."""
    backend = _loaded(backend)
    if backend.library is None:
        return []
    try:
        folder = _package_of(backend)[1]
    except RunError:
        return []
    return sorted(locks_of(folder), key=version_key)


class IsolatedBackend(Backend):
    """``NAME==VERSION``: the registered backend ``NAME`` scored in a worker process, in the environment
    of its library at ``VERSION`` (see the module docstring)."""

    def __init__(self, registered: Any, version: str) -> None:
        self.inner = _loaded(registered)
        self.base = self.inner.name
        self.library_version = version
        self.name = f"{self.base}=={version}"  # type: ignore[misc]
        self.library = self.inner.library
        self.install_hint = f"the lock of {self.base} {version}, shipped with its plugin"

    def environment_spec(self) -> Environment:
        """The environment this backend runs in (a `RunError` when its plugin has no lock for the version)."""
        if self.inner.library is None:
            raise RunError(f"backend {self.name!r}: the {self.base} backend has no library whose version "
                           f"could be chosen; use {self.base!r}")
        package, folder = _package_of(self.inner)
        return environment_for(self.name, self.base, self.library_version, package, folder)

    def versions(self) -> list[str]:
        """The versions whose environments the plugin ships."""
        return shipped_versions(self.inner)

    def version(self) -> Optional[str]:
        return self.library_version

    def available(self) -> bool:
        return True  # planned by `prepare`, which says what is missing

    def metrics(self) -> list[MetricSpec]:
        return self.inner.metrics_at(self.library_version)

    def metrics_for(self, options: RunOptions) -> list[MetricSpec]:
        if type(self.inner).metrics_for is Backend.metrics_for:  # the metrics depend on no option
            return self.metrics()
        return self.inner.metrics_for(options)

    def needs_judge(self, metric: str) -> bool:
        return Backend.needs_judge(self, metric)

    async def open(self, ctx: ScoringContext) -> "_Workers":
        workers = _Workers(self, ctx)
        await workers.start()
        return workers

    async def close(self, ctx: ScoringContext) -> None:
        if isinstance(ctx.session, _Workers):
            await ctx.session.close()

    async def score(self, metric: str, cases: Sequence[Case], ctx: ScoringContext) -> AsyncIterator[Result]:
        workers: _Workers = ctx.session
        repeat = int(getattr(ctx.judge, "repeat", 0) or 0)
        async for score in workers.score(metric, cases, repeat):
            yield score


def with_versions(names: Sequence[str], versions: dict[str, str]) -> list[str]:
    """``names`` with each name that gives no version taking the one ``versions`` sets for it
    (``mylib`` -> ``mylib==1.2``: `RunOptions.versions`); a name with its own version keeps it."""
    return [f"{n}=={versions[n]}" if n in versions else n for n in names]


def prepare(plan_names: Sequence[str],
            note: Optional[Callable[[str], None]] = None) -> dict[str, Environment]:
    """Make the environment of every versioned backend of a run (see
    `ragbridge.run.environments.ensure`) before it scores anything; a `RunError` for one that cannot
    be made."""
    registry = get_backends()
    made = {}
    for name in plan_names:
        backend = backend_named(name, registry)
        if isinstance(backend, IsolatedBackend):
            made[name] = ensure(backend.environment_spec(), note)
    return made


def ray_runtime_env(name: str) -> dict[str, Any]:
    """Ray's runtime environment for a library version's backend (``mylib==1.2``) on the Ray
    executor: Ray's own uv support (``runtime_env={"uv": ...}``) installs the lock the backend's plugin
    ships for that version into the environment of its scorer actors (Ray makes it from the driver's,
    once per cluster), wheels only, with the user's uv cache (Ray's default is none). No key is in it."""
    import subprocess

    from .environments import find_uv

    backend = backend_named(name)
    if not isinstance(backend, IsolatedBackend):
        raise RunError(f"{name!r} names no library version")
    lock = backend.environment_spec().lock.read_text(encoding="utf-8")
    packages = [line.split(" #")[0].strip() for line in lock.splitlines()
                if line.strip() and not line.lstrip().startswith(("#", "-"))]
    options = ["--no-build"]
    cache = subprocess.run([find_uv(), "cache", "dir"], capture_output=True, text=True,
                           timeout=60).stdout.strip()
    if cache:
        options += ["--cache-dir", cache]
    return {"uv": {"packages": packages, "uv_pip_install_options": options}}


# --------------------------------------------------------------------------------------------
# The worker, seen from the run


def _secrets(judge: Any) -> tuple[set[str], list[str]]:
    """The variables that hold the judge's keys, and the judge's secret values this process holds
    (its keys, its headers' values): kept out of the worker."""
    config = getattr(judge, "config", None)
    names = {v for v in (getattr(config, "api_key_env", None), getattr(config, "embedding_api_key_env", None))
             if v}
    values = [os.environ[v] for v in names if os.environ.get(v)]
    values += [v for v in (getattr(config, "headers", None) or {}).values() if isinstance(v, str)]
    return names, [v for v in values if len(v) >= 8]


def worker_environ(judge: Any, code: Path) -> dict[str, str]:
    """The worker's environment: this one without the judge's keys (the variables the judge reads them
    from, and any other that holds one of its secret values), with only ragbridge's code on its path
    (``code``), and bytecode written (an environment's modules are compiled once, on first use)."""
    names, hidden = _secrets(judge)
    env = {k: v for k, v in os.environ.items() if k not in names and not any(s in v for s in hidden)}
    for var in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONDONTWRITEBYTECODE", "VIRTUAL_ENV",
                "PYTHONSAFEPATH"):
        env.pop(var, None)
    env.update(PYTHONPATH=str(code), PYTHONNOUSERSITE="1", PYTHONUNBUFFERED="1", PYTHONIOENCODING="utf-8")
    return env


def _interrupted() -> bool:
    """Whether the task running is being cancelled (the run was interrupted)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


@dataclass
class _Job:
    queue: asyncio.Queue = field(default_factory=asyncio.Queue)


def stalled_after(judge: Any) -> float:
    """How long a worker may send nothing (or a job no score) before its cases error as timed out:
    twice the judge clients' timeout (`JudgeConfig.client_timeout`), `STALL_SECONDS` without a judge."""
    config = getattr(judge, "config", None)
    return 2 * config.client_timeout() if config is not None else STALL_SECONDS


class ScoringTimeout(TimeoutError):
    """No score came from the worker for far longer than the judge's timeout."""


class WorkerDied(RuntimeError):
    """The worker process ended while it had work (the message says how, and what it last wrote)."""


class _Worker:
    """One worker process and the pipe to it."""

    def __init__(self, backend: IsolatedBackend, ctx: ScoringContext, env: Environment) -> None:
        self.backend, self.ctx, self.env = backend, ctx, env
        self.proc: Optional[asyncio.subprocess.Process] = None
        self.jobs: dict[int, _Job] = {}
        self.stderr: collections.deque[str] = collections.deque(maxlen=STDERR_LINES)
        self.ended: Optional[str] = None
        self._tasks: list[asyncio.Task] = []
        self._next = 0
        self.heard = asyncio.get_running_loop().time()  # when the worker last wrote a line
        self.stall = stalled_after(ctx.judge)
        self._ready: asyncio.Future = asyncio.get_running_loop().create_future()
        self._closed: asyncio.Future = asyncio.get_running_loop().create_future()

    @property
    def pid(self) -> Optional[int]:
        return self.proc.pid if self.proc else None

    async def start(self) -> None:
        b = self.backend
        code = code_path({"ragbridge": Path(__file__).resolve().parents[1],
                          self.env.package: self.env.package_dir})
        self.proc = await asyncio.create_subprocess_exec(
            str(self.env.python), "-m", "ragbridge.run.worker", stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, limit=LINE_LIMIT,
            env=worker_environ(self.ctx.judge, code), cwd=os.getcwd(), start_new_session=True)
        self._tasks = [asyncio.create_task(self._read()), asyncio.create_task(self._drain())]
        judge = None
        if self.ctx.judge is not None:
            from ..judge.remote import GatewayClient

            judge = list(GatewayClient.spec(self.ctx.judge))
        await self._send({"ragbridge_worker": PROTOCOL, "backend": b.base, "name": b.name,
                          "plugin": self.env.package, "options": options_record(self.ctx.options),
                          "judge": judge})
        try:
            ready = await asyncio.wait_for(asyncio.shield(self._ready), START_SECONDS)
        except asyncio.TimeoutError:
            await self.kill()
            raise RuntimeError(f"the worker of {b.name} did not start within {START_SECONDS:.0f} s") from None
        if ready.get("error"):
            raise RuntimeError(f"the worker of {b.name} could not open its backend: {ready['error']}")
        if ready.get("version") != b.library_version:
            await self.close()
            raise RuntimeError(f"the environment of {b.name} holds {b.base} {ready.get('version')}, not "
                               f"{b.library_version}: its lock ({self.env.lock}) installs another version")

    async def _send(self, message: dict) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        if self.ended is not None:
            raise WorkerDied(self.ended)
        data = json.dumps(message, ensure_ascii=False, allow_nan=False).encode("utf-8") + b"\n"
        try:
            self.proc.stdin.write(data)
            await self.proc.stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            await self._wait_end()
            raise WorkerDied(self.ended or "the worker's pipe closed") from None

    async def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        try:
            while True:
                line = await self.proc.stdout.readline()
                if not line:
                    break
                self.heard = asyncio.get_running_loop().time()
                msg = json.loads(line)
                if "job" in msg:
                    job = self.jobs.get(msg["job"])
                    if job is not None:
                        await job.queue.put(msg)
                elif "ready" in msg and not self._ready.done():
                    self._ready.set_result(msg)
                elif msg.get("closed") and not self._closed.done():
                    self._closed.set_result(True)
        except (ValueError, asyncio.LimitOverrunError) as exc:  # a line the worker should never write
            self.stderr.append(f"(unreadable line from the worker: {type(exc).__name__})")
        finally:
            await self._wait_end()
            for job in self.jobs.values():
                job.queue.put_nowait({"died": True})
            if not self._ready.done():
                self._ready.set_exception(WorkerDied(self.ended or "the worker ended"))
            if not self._closed.done():
                self._closed.set_result(False)

    async def _drain(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        while True:
            line = await self.proc.stderr.readline()
            if not line:
                return
            text = line.decode("utf-8", "replace").rstrip()
            if text:
                self.stderr.append(text)

    async def _wait_end(self) -> None:
        if self.ended is not None or self.proc is None:
            return
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self.proc.wait(), 5)
        code = self.proc.returncode
        how = ("still running, its pipe closed" if code is None else
               f"killed by signal {-code}" if code < 0 else f"exited with code {code}")
        self.ended = f"the worker of {self.backend.name} (pid {self.proc.pid}) ended: {how}"

    def death(self) -> str:
        """Why the worker is gone, with the last lines it wrote."""
        tail = [line for line in self.stderr if line.strip()][-6:]
        return (self.ended or "the worker ended") + ("; its last words: " + " | ".join(tail) if tail else "")

    async def score(self, metric: str, cases: Sequence[Case], repeat: int) -> AsyncIterator[Result]:
        self._next += 1
        jid = self._next
        job = self.jobs[jid] = _Job()
        try:
            await self._send({"op": "score", "job": jid, "metric": metric, "repeat": repeat,
                              "cases": [case_record(cases, i) for i in range(len(cases))]})
            loop = asyncio.get_running_loop()
            progress = loop.time()
            while True:
                try:
                    msg = await asyncio.wait_for(job.queue.get(), 1.0)
                except asyncio.TimeoutError:
                    await self._check_deadline(jid, loop.time() - progress)
                    continue
                progress = loop.time()
                if "score" in msg:
                    # the worker recorded it as its job's Score: the result is what this backend returns
                    yield Result(**{k: v for k, v in msg["score"].items() if k in Result.model_fields})
                elif msg.get("done"):
                    return
                elif msg.get("died"):
                    await self._drain_rest()
                    raise WorkerDied(self.death())
        finally:
            self.jobs.pop(jid, None)
            if self.ended is None and job.queue.empty() and not self._closed.done():
                with contextlib.suppress(Exception):  # stopped early (an interrupt): the worker stops too
                    await self._send({"op": "cancel", "job": jid})

    async def _check_deadline(self, jid: int, waited: float) -> None:
        """A `ScoringTimeout` when the worker has been silent, or this job without a score, for
        longer than `stalled_after` (a silent worker is killed: its loop is held)."""
        silent = asyncio.get_running_loop().time() - self.heard
        if self.ended is None and silent > self.stall:
            self.ended = (f"timed out: the worker of {self.backend.name} (pid {self.pid}) sent nothing for "
                          f"{silent:.0f} s, over twice the judge's timeout: a library call held its event "
                          "loop; the worker was ended")
            await self.kill(0)
            raise ScoringTimeout(self.death()) from None
        if waited > self.stall:
            with contextlib.suppress(Exception):
                await self._send({"op": "cancel", "job": jid})
            raise ScoringTimeout(f"timed out: no score for {waited:.0f} s, over twice the judge's timeout; "
                                 "the case was given up") from None

    async def _drain_rest(self) -> None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.gather(*self._tasks[1:]), 2)

    async def close(self) -> None:
        """Close the worker's backend and end it: at most `CLOSE_SECONDS` for the close, or
        `INTERRUPT_SECONDS` when the run is interrupted (Ctrl-C, SIGTERM): then it is killed."""
        if self.proc is None:
            return
        grace = INTERRUPT_SECONDS if _interrupted() else CLOSE_SECONDS
        if self.ended is None:
            with contextlib.suppress(Exception):
                await self._send({"op": "close"})
                await asyncio.wait_for(asyncio.shield(self._closed), grace)
        await self.kill(min(grace, 10))

    async def kill(self, grace: float = 10) -> None:
        proc = self.proc
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(Exception):
                proc.stdin.close()
            try:
                await asyncio.wait_for(proc.wait(), grace)
            except asyncio.TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


class _Workers:
    """The session of an `IsolatedBackend` in one run: its worker, started again after it died (at
    most `RESTARTS` times)."""

    def __init__(self, backend: IsolatedBackend, ctx: ScoringContext) -> None:
        self.backend, self.ctx = backend, ctx
        self.env = backend.environment_spec()
        self.worker: Optional[_Worker] = None
        self.restarts = 0
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        ensure(self.env)  # made by `prepare` before the run; here a check of one file
        worker = _Worker(self.backend, self.ctx, self.env)
        try:
            await worker.start()
        except BaseException:
            await worker.kill()
            raise
        self.worker = worker

    async def current(self) -> _Worker:
        async with self._lock:
            if self.worker is None or self.worker.ended is not None:
                if self.worker is not None:
                    if self.restarts >= RESTARTS:
                        raise WorkerDied(f"{self.worker.death()}; not started again: it died "
                                         f"{self.restarts + 1} times in this run")
                    self.restarts += 1
                    await self.worker.kill()
                await self.start()
            assert self.worker is not None
            return self.worker

    async def score(self, metric: str, cases: Sequence[Case], repeat: int) -> AsyncIterator[Result]:
        worker = await self.current()
        async for score in worker.score(metric, cases, repeat):
            yield score

    async def close(self) -> None:
        if self.worker is not None:
            await self.worker.close()
            self.worker = None

