"""The Ray executor: the runner's scoring step on a Ray cluster (``executor="ray"``, ``--executor ray``).

The runner does everything else as with the local executor (plan, run folder, target, manifest,
recording, batches); only `RayExecutor.score` replaces the local scoring step, with the same jobs of
each batch, and hands every score to the same recorder, in the driver, as it arrives. The cluster is
started once for the run (`RayExecutor.session`), not per batch. So the run folder, the resume and
overwrite rules and the scores are the local executor's.

The data flow (Ray Data, two datasets consumed at once):

* native ranking metrics: the cases as compact Arrow blocks (chunk ids and sources, label ids and
  grades), and `native_batch`, a vectorised batch function (`ragbridge.native.ranking.evaluate`, the
  one ranking dispatcher) run as Ray tasks, every planned ranking metric in one pass per block;
* every other job (judged backends, answer checks, the span metrics and cases with span labels, a
  plugin's backend): rows of (backend, metric,
  case as JSON) in blocks of ``batch_size``, scored by a pool of `BackendScorer` actors. An actor
  keeps, per backend, what the backend's ``open`` made (its library objects, clients, thread
  pools) for as long as it lives, on one event loop of its own, so nothing is rebuilt per case or
  batch; two batches run in an actor at once so that a batch's slowest case does not idle the judge.

The judge: the driver keeps the run's one `ragbridge.judge.JudgeGateway` (it owns the cache, the
concurrency bound, the requests-per-minute limit and the usage counts). Its socket is opened on
``gateway_host`` (127.0.0.1 unless the cluster has nodes on other machines, where an explicit
address of the driver's machine is required), and each actor gets a
`ragbridge.judge.remote.GatewayClient` for it: the socket's URL, the gateway's own per-run key and
the judge settings without secrets, as actor constructor arguments (never ``runtime_env``, whose
values Ray writes to its logs and state API). The judge's real key never leaves the driver. Every
judge call of every worker thus passes the one gateway: the bound and the limit hold for the
cluster together, and a case scored on any worker is a cache hit on a re-run wherever it lands. The
cost is one HTTP hop from the worker to the driver per judge call.

Faults: Ray retries a task or actor whose worker died; a retried batch asks the gateway again and
is served from its cache (the scores of a batch reach the driver only once its batch is done, and
a score seen twice is recorded once). A killed driver ends the cluster it started (its workers with
it); the run folder then holds every score recorded so far and a re-run resumes it.

Ray's defaults reach outside the machine (cloud-metadata probes, a node address found by a UDP
connect to a public resolver, listeners on every interface, usage reports). A cluster this executor
starts is started with `LOCAL_ENVIRONMENT` and a ``HOME`` holding an empty
``ray_bootstrap_config.yaml``: every Ray process on loopback, no probes, no reports; what Ray changes
in this process's environment is put back when it is shut down. A cluster given by ``address`` is
joined with usage reports off; ragbridge (and the backends' libraries) must be installed on its
nodes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator, Optional, Sequence

from ..backend import Backend, RunOptions, ScoringContext
from ..formats.batches import CaseBatch
from ..schema import Case, Score
from .plan import RunError

if TYPE_CHECKING:  # pragma: no cover
    from .runner import Job, Recorder

__all__ = ["RayExecutor", "BackendScorer", "native_batch", "native_table", "ray_session",
           "LOCAL_ENVIRONMENT"]

#: set before a local cluster starts (see the module docstring and docs of Ray 2.60's behaviour)
LOCAL_ENVIRONMENT = {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",  # node address 127.0.0.1: every listener on loopback
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_AUTH_MODE": "disabled",  # only with loopback listeners (token files otherwise)
}
#: what Ray sets in the driver's environment and does not undo
_RAY_TOUCHED = ("RAY_CLIENT_MODE", "RAY_AUTH_MODE", "RAY_USAGE_STATS_ENABLED", "PYTHONBREAKPOINT",
                "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "HOME")
DEFAULT_OBJECT_STORE = 1 << 30  # a local cluster's object store (Ray's default: 30 % of RAM); spills to disk
NATIVE_BLOCK_ROWS = 8192


@contextlib.contextmanager
def ray_session(address: Optional[str] = None, *, num_cpus: Optional[int] = None,
                object_store_memory: Optional[int] = DEFAULT_OBJECT_STORE,
                hide: Sequence[str] = ()) -> Iterator[Any]:
    """The ``ray`` module, connected: to the cluster this process is connected to already (left
    as it is), to the one at ``address``, or to a private local cluster started for the run (``None``
    or ``"local"``) with the offline settings; a cluster started or joined here is shut down after.

    ``hide``: environment variables (the judge key's) taken out of the environment while Ray starts,
    so that no Ray process, and no worker they start, inherits them."""
    local = address in (None, "local")
    saved = {k: os.environ.get(k) for k in (*_RAY_TOUCHED, *hide)}
    if local and "ray" not in sys.modules:
        os.environ.update(LOCAL_ENVIRONMENT)  # Ray reads some of it when it is imported
    import ray
    from ray._private import ray_constants

    if ray.is_initialized():
        _restore(saved)
        yield ray
        return
    any_address = ray_constants.ENABLE_RAY_CLUSTER
    tmp = None
    try:
        os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
        for name in hide:
            os.environ.pop(name, None)
        if local:
            os.environ.update(LOCAL_ENVIRONMENT)  # for Ray's processes
            ray_constants.ENABLE_RAY_CLUSTER = False  # for this one, if Ray was imported before
            # a short folder: Ray's AF_UNIX socket paths under it must stay within 107 bytes
            tmp = tempfile.mkdtemp(prefix="rb-ray-", dir="/tmp" if os.path.isdir("/tmp") else None)
            home = os.path.join(tmp, "home")
            os.makedirs(home)
            open(os.path.join(home, "ray_bootstrap_config.yaml"), "w").close()  # no cloud probes
            os.environ["HOME"] = home  # inherited by Ray's processes, started by init
            ray.init(address="local", num_cpus=num_cpus, include_dashboard=False,
                     object_store_memory=object_store_memory, _temp_dir=tmp, log_to_driver=False,
                     configure_logging=False)
        else:
            ray.init(address=address, log_to_driver=False, configure_logging=False)
        _restore({k: saved[k] for k in ("HOME", *hide)})  # this process keeps its home (and key)
        yield ray
    finally:
        with contextlib.suppress(Exception):
            ray.shutdown()
        ray_constants.ENABLE_RAY_CLUSTER = any_address
        _restore(saved)
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def _restore(saved: dict[str, Optional[str]]) -> None:
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


# --------------------------------------------------------------------------------------------
# Native ranking metrics: Arrow blocks and a vectorised batch function


class _Chunk:
    __slots__ = ("id", "source")

    def __init__(self, id: str, source: Optional[str]) -> None:  # noqa: A002
        self.id, self.source = id, source


class _Ranked:
    """What `ragbridge.native.ranking.prepare` reads of a case: contexts (id, source) and relevant."""

    __slots__ = ("contexts", "relevant")

    def __init__(self, ids: list, sources: list, rel_ids: list, rel_grades: list) -> None:
        self.contexts = [_Chunk(i, s) for i, s in zip(ids, sources)]
        self.relevant = dict(zip(rel_ids, rel_grades))


def _span_job(metric: str, cases: Sequence[Case]) -> bool:
    """Whether a native job needs the span labels, which `native_table` does not carry: a span
    metric, or cases that hold span labels (such jobs go the way of every other backend)."""
    from .. import metrics as canonical

    found = canonical.find(metric)
    if found is not None and found.kind == canonical.SPAN:
        return True
    return any(CaseBatch.of_cases(cases).span_lists())


def native_table(cases: Sequence[Case]) -> Any:
    """The cases as the Arrow table `native_batch` reads: ``id``, ``ctx_ids``, ``ctx_sources``,
    ``rel_ids``, ``rel_grades``."""
    import pyarrow as pa

    return pa.table({
        "id": [c.id for c in cases],
        "ctx_ids": [[ch.id for ch in c.contexts] for c in cases],
        "ctx_sources": [[ch.source for ch in c.contexts] for c in cases],
        "rel_ids": [list(c.relevant) for c in cases],
        "rel_grades": [list(c.relevant.values()) for c in cases],
    }, schema=pa.schema([("id", pa.string()), ("ctx_ids", pa.list_(pa.string())),
                         ("ctx_sources", pa.list_(pa.string())), ("rel_ids", pa.list_(pa.string())),
                         ("rel_grades", pa.list_(pa.int64()))]))


def native_batch(batch: Any, metrics: Sequence[str], gain: str = "linear",
                 no_relevant: str = "undefined") -> Any:
    """Every ranking metric of one block of `native_table` rows, through `ranking.evaluate`: a
    table of ``id``, ``labelled``, ``seconds`` (per case) and one float column ``m<i>`` per metric
    (NaN where undefined)."""
    import numpy as np
    import pyarrow as pa

    from ..native import ranking

    t0 = time.perf_counter()
    cols = [batch.column(n).to_pylist() for n in ("ctx_ids", "ctx_sources", "rel_ids", "rel_grades")]
    cases = [_Ranked(*row) for row in zip(*cols)]
    values = ranking.evaluate(cases, list(metrics), gain=gain, no_relevant=no_relevant)
    n = len(cases)
    per_case = (time.perf_counter() - t0) / max(n, 1)
    out = {"id": batch.column("id"), "labelled": pa.array([bool(r) for r in cols[2]]),
           "seconds": pa.array(np.full(n, per_case))}
    for i, m in enumerate(metrics):
        out[f"m{i}"] = pa.array(values[m])
    return pa.table(out)


# --------------------------------------------------------------------------------------------
# Every other backend: actors that keep the backends' sessions


class BackendScorer:
    """A Ray Data actor (a callable class) that scores rows of (backend, metric, repeat, case JSON).

    Per backend, on its first row: the backend's environment defaults are applied in this process
    (before its library is imported), then ``open`` runs once with a `GatewayClient` as the judge;
    the session lives as long as the actor. Rows are scored on the actor's own event loop, with
    the runner's ``drive_job`` (a backend fault becomes each case's error, as in the local executor)."""

    def __init__(self, options: RunOptions, gateway: Optional[tuple] = None) -> None:
        from ..judge.remote import GatewayClient

        self.options = options
        self.gateway = GatewayClient(*gateway) if gateway is not None else None
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="ragbridge-scorer", daemon=True)
        self._thread.start()
        self._environment = contextlib.ExitStack()
        self._contexts: dict[str, ScoringContext] = {}
        self._backends: dict[str, Backend] = {}
        self._opening: dict[str, asyncio.Lock] = {}
        self._closed = False

    def __call__(self, batch: Any) -> Any:
        import pyarrow as pa

        groups: dict[tuple[str, str, int], list[Case]] = {}
        columns = (batch.column(n).to_pylist() for n in ("backend", "metric", "repeat", "case"))
        for b, m, r, c in zip(*columns):
            groups.setdefault((b, m, r), []).append(Case.model_validate_json(c))
        scores = asyncio.run_coroutine_threadsafe(self._score_all(groups), self.loop).result()
        return pa.table({"score": pa.array([s.model_dump_json() for s in scores], pa.string())})

    async def _score_all(self, groups: dict[tuple[str, str, int], list[Case]]) -> list[Score]:
        results = await asyncio.gather(*(self._score(b, m, cases, r) for (b, m, r), cases in groups.items()))
        return [s for part in results for s in part]

    async def _context(self, name: str) -> tuple[Backend, ScoringContext]:
        from ..plugins import get_backends
        from .runner import applied_environment, open_session

        lock = self._opening.setdefault(name, asyncio.Lock())
        async with lock:
            if name not in self._contexts:
                backend = get_backends()[name]
                self._environment.enter_context(applied_environment(backend.environment()))
                ctx = ScoringContext(options=self.options, judge=self.gateway)  # type: ignore[arg-type]
                self._contexts[name] = await open_session(backend, ctx)
                self._backends[name] = backend
        return self._backends[name], self._contexts[name]

    async def _score(self, name: str, metric: str, cases: list[Case], repeat: int = 0) -> list[Score]:
        from .runner import drive_job

        backend, ctx = await self._context(name)
        queue: asyncio.Queue = asyncio.Queue()
        await drive_job(backend, metric, cases, ctx, queue, repeat=repeat)
        return [queue.get_nowait() for _ in range(queue.qsize())]

    def __del__(self) -> None:  # best effort: the actor's process ends with the pool
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):
            from .runner import close_session

            async def close_all() -> None:
                for name, backend in reversed(list(self._backends.items())):
                    await close_session(backend, self._contexts[name])

            asyncio.run_coroutine_threadsafe(close_all(), self.loop).result(timeout=30)
            self._environment.close()
            self.loop.call_soon_threadsafe(self.loop.stop)


def score_rows(batch: Any, options: RunOptions) -> Any:
    """`BackendScorer` as a plain batch function (a Ray task): for backends without a judge, whose
    ``open`` is cheap; the session lasts one batch."""
    scorer = BackendScorer(options)
    try:
        return scorer(batch)
    finally:
        scorer.__del__()


# --------------------------------------------------------------------------------------------
# The executor


@dataclass
class RayExecutor:
    """Score a run's jobs on Ray (see the module docstring).

    ``address``: an existing cluster (``ray://...`` or ``HOST:PORT``, or ``auto``); None starts a
    private local one for the run (``num_cpus``, ``object_store_memory``), unless this process is
    connected to a cluster already. ``gateway_host``: the driver machine's address the workers
    reach the judge gateway at (default 127.0.0.1, required when the cluster has nodes on other
    machines). ``actors``: scorer actors for the judged backends (each holds every backend's
    session; a judged actor asks for no CPU, it waits on the judge); ``batch_size``: rows per
    judged batch (default the judge's ``max_concurrency``); ``native_block_rows``: cases per
    native block."""

    address: Optional[str] = None
    gateway_host: Optional[str] = None
    num_cpus: Optional[int] = None
    object_store_memory: Optional[int] = DEFAULT_OBJECT_STORE
    actors: int = 2
    batch_size: Optional[int] = None
    native_block_rows: int = NATIVE_BLOCK_ROWS
    calls_per_actor: int = 2

    @contextlib.contextmanager
    def session(self, ctx: ScoringContext) -> Iterator[Any]:
        """The cluster for a whole run (the ``ray`` module): `score`, called once per batch of the
        run, finds it connected and uses it, rather than starting one per batch."""
        hide = _key_variables(ctx.judge)
        with ray_session(self.address, num_cpus=self.num_cpus, object_store_memory=self.object_store_memory,
                         hide=hide) as ray:
            yield ray

    async def score(self, jobs: "list[Job]", ctx: ScoringContext, recorder: "Recorder") -> None:
        from ..native import answers

        native = [j for j in jobs if j[0].name == "native" and j[1] not in answers.CHECKS
                  and not _span_job(j[1], j[2])]
        other = [j for j in jobs if j not in native]
        total = sum(len(c) for _, _, c, _ in jobs)
        if not total:
            return
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()
        hide = _key_variables(ctx.judge)
        with ray_session(self.address, num_cpus=self.num_cpus, object_store_memory=self.object_store_memory,
                         hide=hide) as ray:
            import ray.data  # the module, imported only now (about 1.5 s)

            data_context = ray.data.DataContext.get_current()
            data_context.enable_progress_bars = False  # the runner's own bar and log stay readable
            data_context.print_on_execution_start = False
            quiet = logging.getLogger("ray.data")
            level = quiet.level
            quiet.setLevel(logging.WARNING)

            gateway = None
            if ctx.judge is not None and any(b.needs_judge(m) for b, m, _, _ in other):
                gateway = self._gateway_spec(ray, ctx.judge)
            streams = []
            if native:
                streams.append(self._native_stream(ray, native, ctx.options))
            if other:
                streams.append(self._scorer_stream(ray, other, ctx.options, gateway))
            stop = threading.Event()
            threads = [threading.Thread(target=_pump, args=(s, loop, queue, stop), daemon=True,
                                        name="ragbridge-ray-results") for s in streams]
            for t in threads:
                t.start()
            seen: set = set()
            remaining, running = total, len(threads)
            try:
                while remaining and running:
                    item = await queue.get()
                    if isinstance(item, BaseException):
                        raise RunError(f"the Ray executor failed: {type(item).__name__}: {item}") from item
                    if item is None:
                        running -= 1
                        continue
                    for score in item:
                        if score.repeat_key in seen:  # a retried batch's score, recorded already
                            continue
                        seen.add(score.repeat_key)
                        recorder.record(score)
                        remaining -= 1
            finally:
                stop.set()
                for t in threads:
                    t.join(timeout=5)
                quiet.setLevel(level)

    # -- the judge ------------------------------------------------------------------------------
    def _gateway_spec(self, ray: Any, gateway: Any) -> tuple:
        from ..judge.remote import GatewayClient

        host = self.gateway_host
        if host is None:
            here = {"127.0.0.1", "localhost", ray.util.get_node_ip_address()}
            elsewhere = sorted({n.get("NodeManagerAddress") for n in ray.nodes() if n.get("Alive")} - here)
            if elsewhere:
                raise RunError(
                    "the Ray cluster has nodes on other machines (" + ", ".join(elsewhere) + "): pass "
                    "--gateway-host with this machine's address that they reach it at (the judge gateway "
                    "listens there; its traffic is plain HTTP, so use it on a trusted network only)")
            host = "127.0.0.1"
        if not gateway.listening:
            gateway.host = host
        return GatewayClient.spec(gateway)

    # -- the datasets ---------------------------------------------------------------------------
    def _native_stream(self, ray: Any, jobs: "list[Job]", options: RunOptions) -> Iterator[list[Score]]:
        from ..native import ranking_score

        by_cases: dict[int, tuple[list[Case], list[str]]] = {}
        for _, metric, cases, _ in jobs:
            by_cases.setdefault(id(cases), (cases, []))[1].append(metric)
        for cases, metrics in by_cases.values():
            table = native_table(cases)
            n = self.native_block_rows
            ds = ray.data.from_arrow([table.slice(i, n) for i in range(0, table.num_rows, n)])
            ds = ds.map_batches(native_batch, batch_format="pyarrow", batch_size=None, zero_copy_batch=True,
                                fn_kwargs={"metrics": metrics, "gain": options.gain,
                                           "no_relevant": options.no_relevant})
            for block in ds.iter_batches(batch_format="pyarrow", batch_size=None):
                ids = block.column("id").to_pylist()
                labelled = block.column("labelled").to_pylist()
                seconds = block.column("seconds").to_pylist()
                scores = []
                for i, metric in enumerate(metrics):
                    values = block.column(f"m{i}").to_numpy(zero_copy_only=False)
                    scores += [ranking_score(metric, cid, float(v), lab, s)
                               for cid, v, lab, s in zip(ids, values, labelled, seconds)]
                yield scores

    def _scorer_stream(self, ray: Any, jobs: "list[Job]", options: RunOptions,
                       gateway: Optional[tuple]) -> Iterator[list[Score]]:
        import pyarrow as pa

        size = self.batch_size
        if size is None:
            size = gateway[2]["max_concurrency"] if gateway is not None else 64
        rows: dict[str, list] = {"backend": [], "metric": [], "repeat": [], "case": []}
        for backend, metric, cases, repeat in jobs:
            for case in cases:
                rows["backend"].append(backend.name)
                rows["metric"].append(metric)
                rows["repeat"].append(repeat)
                rows["case"].append(case.model_dump_json())
        table = pa.table(rows)
        ds = ray.data.from_arrow([table.slice(i, size) for i in range(0, table.num_rows, size)])
        if any(b.needs_judge(m) for b, m, _, _ in jobs):
            ds = ds.map_batches(
                BackendScorer, batch_format="pyarrow", batch_size=size,
                fn_constructor_kwargs={"options": options, "gateway": gateway},
                compute=ray.data.ActorPoolStrategy(
                    size=max(1, self.actors), max_concurrent_calls_per_actor=max(1, self.calls_per_actor),
                    enable_true_multi_threading=True),
                num_cpus=0,  # a judged actor waits on the judge: it never holds a CPU a task needs
            )
        else:  # answer checks and other local backends: tasks (no actor to start), a session per batch
            ds = ds.map_batches(score_rows, batch_format="pyarrow", batch_size=size,
                                fn_kwargs={"options": options})
        for block in ds.iter_batches(batch_format="pyarrow", batch_size=None):
            yield [Score.model_validate_json(s) for s in block.column("score").to_pylist()]


def _pump(stream: Iterator[list[Score]], loop: asyncio.AbstractEventLoop, queue: asyncio.Queue,
          stop: threading.Event) -> None:
    """Hand each list of scores of ``stream`` to the driver's event loop; then None (or the error)."""
    try:
        for scores in stream:
            if stop.is_set():
                return
            loop.call_soon_threadsafe(queue.put_nowait, scores)
        loop.call_soon_threadsafe(queue.put_nowait, None)
    except BaseException as exc:  # noqa: BLE001 - the driver raises it
        if not stop.is_set():
            loop.call_soon_threadsafe(queue.put_nowait, exc)


def executor_for(spec: Any) -> Optional[RayExecutor]:
    """The executor ``evaluate(..., executor=spec)`` asks for: None for the local one (``None`` or
    ``"local"``), a `RayExecutor` for ``"ray"`` (or one given)."""
    if spec is None or spec == "local":
        return None
    if isinstance(spec, RayExecutor):
        return spec
    if spec == "ray":
        import importlib.util

        if importlib.util.find_spec("ray") is None:
            raise RunError("the Ray executor needs Ray: pip install 'ragbridge[ray]'")
        return RayExecutor()
    raise RunError(f"unknown executor {spec!r}: use 'local' or 'ray'")


def _key_variables(judge: Any) -> list[str]:
    """The environment variables that hold the judge's keys (taken out of Ray's sight)."""
    if judge is None:
        return []
    return [v for v in (judge.config.api_key_env, judge.config.embedding_api_key_env) if v]
